"""pytest plugin for running vLLM's own scheduler tests, stock or with MineDraft.

Loaded by ``test_vllm_scheduler_suite.py`` into a child ``python -m pytest``
that runs vLLM 0.32.0's ``tests/v1/core/test_scheduler.py`` (``-p
minedraft_upstream_plugin``, this folder on PYTHONPATH). Not a test module.

Environment:

* ``MINEDRAFT_UPSTREAM_SCHEDULER``: ``stock`` (vLLM's ``Scheduler``, the
  baseline) or ``minedraft`` (MineDraft's scheduler swapped in).
* ``MINEDRAFT_UPSTREAM_REPORT``: where the JSON report is written.

The swap: once collection has imported vLLM's test modules, every module of
vLLM's ``tests`` package whose global ``Scheduler`` is vLLM's
``vllm.v1.core.sched.scheduler.Scheduler`` gets ``MineDraftScheduler`` there
instead. That covers ``tests.v1.core.utils.create_scheduler`` and the test
file's own ``Scheduler(...)`` calls (priority, encoder-decoder and hybrid
Mamba helpers); ``AsyncScheduler`` and ``DiffusionScheduler`` are different
classes that MineDraft does not subclass and stay as they are.

The record: ``Scheduler.__init__`` is wrapped (in both modes) so that every
scheduler a test builds, whatever its subclass, is noted with its class and
whether it runs speculative decoding. The report maps each test id to its
outcome and those schedulers.

Both modes mark every test ``skip_global_cleanup``: vLLM's conftest then skips
its per-test ``cleanup_dist_env_and_memory()`` (about 0.3 s a test on CPU,
mostly ``gc.collect``), which vLLM provides for CPU-only unit tests like these
that start no distributed state.
"""

from __future__ import annotations

import json
import os
import sys

import pytest

from minedraft.config import environment

MODES = ("stock", "minedraft")
MODE = environment.get("MINEDRAFT_UPSTREAM_SCHEDULER") or "stock"
REPORT_PATH = environment.get("MINEDRAFT_UPSTREAM_REPORT")
# Modules the swap must reach for it to count as done.
REQUIRED_SWAPS = ("tests.v1.core.utils", "tests.v1.core.test_scheduler")

_built: list = []  # schedulers built by the test now running (strong refs)
_results: dict[str, dict] = {}
_swapped: list[str] = []
_errors: list[str] = []


def _describe(scheduler) -> dict:
    from minedraft.scheduling.scheduler import MineDraftScheduler

    cls = type(scheduler)
    vllm_config = getattr(scheduler, "vllm_config", None)
    spec_config = getattr(vllm_config, "speculative_config", None)
    num_spec_tokens = getattr(scheduler, "num_spec_tokens", 0) or 0
    return {
        "cls": f"{cls.__module__}.{cls.__qualname__}",
        "minedraft": isinstance(scheduler, MineDraftScheduler),
        # Speculative decoding: a speculative config, or spec tokens set by
        # hand after construction (read when the test has finished).
        "spec": spec_config is not None or num_spec_tokens > 0,
        "spec_method": getattr(spec_config, "method", None),
        "num_spec_tokens": num_spec_tokens,
    }


def pytest_configure(config: pytest.Config) -> None:
    if MODE not in MODES:
        raise pytest.UsageError(f"MINEDRAFT_UPSTREAM_SCHEDULER={MODE!r}, expected one of {MODES}")
    if not REPORT_PATH:
        raise pytest.UsageError("MINEDRAFT_UPSTREAM_REPORT is not set")
    # Imported here, after vLLM's conftest had its say about import order
    # (tblib's pickling_support must be installed first): configure hooks of
    # plugins given with -p run after conftest files are loaded.
    from vllm.v1.core.sched.scheduler import Scheduler

    original_init = Scheduler.__init__

    def __init__(self, *args, **kwargs):
        _built.append(self)  # first, so that a constructor that raises is seen too
        original_init(self, *args, **kwargs)

    __init__.__wrapped__ = original_init
    Scheduler.__init__ = __init__


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(pytest.mark.skip_global_cleanup)


def pytest_collection_finish(session: pytest.Session) -> None:
    if MODE != "minedraft":
        return
    from vllm.v1.core.sched.scheduler import Scheduler

    from minedraft.scheduling.scheduler import MineDraftScheduler

    for name, module in list(sys.modules.items()):
        if (name == "tests" or name.startswith("tests.")) and getattr(module, "Scheduler", None) is Scheduler:
            module.Scheduler = MineDraftScheduler
            _swapped.append(name)
    missing = [name for name in REQUIRED_SWAPS if name not in _swapped]
    if missing and session.items:
        _errors.append(f"swap did not reach {missing}; swapped {_swapped}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem):
    _built.clear()
    entry = _results.setdefault(item.nodeid, {"outcome": "passed", "phases": {}, "message": ""})
    if _errors:
        # The swap failed: run nothing rather than compare stock with stock.
        entry.update(outcome="error", message="; ".join(_errors))
        yield
        return
    yield
    entry["schedulers"] = [_describe(s) for s in _built]
    _built.clear()


def pytest_runtest_setup(item: pytest.Item) -> None:
    if _errors:
        pytest.fail("; ".join(_errors), pytrace=False)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    entry = _results.setdefault(report.nodeid, {"outcome": "passed", "phases": {}, "message": ""})
    entry["phases"][report.when] = report.outcome
    if report.failed:
        entry["outcome"] = "failed" if report.when == "call" else "error"
        crash = getattr(report.longrepr, "reprcrash", None)
        message = crash.message if crash is not None else str(report.longrepr)
        entry["message"] = (entry["message"] + f" [{report.when}] " + message).strip()[:4000]
    elif report.skipped and entry["outcome"] == "passed":
        entry["outcome"] = "skipped"


def pytest_sessionfinish(session: pytest.Session, exitstatus) -> None:
    import vllm

    report = {
        "mode": MODE,
        "exitstatus": int(exitstatus),
        "vllm_file": vllm.__file__,
        "vllm_version": vllm.__version__,
        "minedraft_mode": environment.get("MINEDRAFT_MODE"),
        "swapped_modules": sorted(_swapped),
        "errors": _errors,
        "collected": len(session.items),
        "tests": _results,
    }
    with open(REPORT_PATH, "w") as f:
        json.dump(report, f, indent=1, sort_keys=True)
