"""Settings for every test, and the tiers: each test is marked with its folder.

``tests/unit`` (no engine, seconds), ``tests/e2e`` (real vLLM engines on CPU),
``tests/soak`` and ``tests/upstream`` (vLLM's own scheduler tests) are the
tiers, fastest first (``tests/gpu``: CUDA only, skipped elsewhere); their markers are registered in pyproject.toml and set
here, so ``pytest -m unit`` or ``-m "not soak"`` select by speed without
anyone marking a test by hand.

``make test`` runs the files in two pytest-xdist workers (``--dist loadfile``: a file's tests, and so
its module-scoped engines, stay in one worker); :func:`pin_worker` binds each worker's engines to its
share of the cores.
"""

import os
from pathlib import Path

import pytest

from harness.environment import PYTEST_ENV, set_defaults

set_defaults(PYTEST_ENV)  # vLLM on CPU, offline; MineDraft's default mode unless a test pins one


def pin_worker() -> None:
    """Under pytest-xdist, this worker's engines bound to its share of this process's cores (worker i of n:
    every n-th core from the i-th) through ``VLLM_CPU_OMP_THREADS_BIND``, unless that is set. Why: an engine
    start is mostly one thread's imports, so two workers start engines twice as fast, but vLLM binds an
    unbound engine to the same first core in every process. Only the engines' threads are bound: the
    worker, its servers' front ends and HTTP clients move between cores as before (with the whole worker
    pinned to one core, test_served.py's client lost requests to "Server disconnected without sending a
    response", likely a pooled connection reused as the server's keep-alive closed it; 2026-12-02). A test that binds its engines itself (tensor
    parallel, the process drafter's engine, the disaggregated pair) still does, sharing a core with the
    other worker's engine for that while: slower, not different (greedy tokens do not depend on it)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")  # gw0, gw1, ...
    if not worker:
        return
    cores = sorted(os.sched_getaffinity(0))
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    share = cores[int(worker.removeprefix("gw")) % workers::workers]
    if len(cores) >= workers and share:  # fewer cores than workers: the OS shares them
        os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", ",".join(map(str, share)))


pin_worker()
TESTS = Path(__file__).resolve().parent

TIERS = ("unit", "e2e", "soak", "upstream", "gpu")


def tier_of(path: Path) -> str | None:
    """The tier of a test file under tests/ (its first folder), None outside tests/."""
    try:
        folder = Path(path).resolve().relative_to(TESTS).parts[0]
    except ValueError:
        return None  # benchmarks/: collected by `make test`, in no tier
    if folder not in TIERS:
        # A test outside the tier folders would silently escape every make target.
        raise pytest.UsageError(f"{path}: tests live in one of tests/{{{','.join(TIERS)}}}/")
    return folder


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--method-mix-requests", type=int, default=None,
                     help="requests of the mix the method e2e tests run (tests/e2e/method_runs.py; default 24, "
                          "48: the whole exactness mix)")


def pytest_configure(config: pytest.Config) -> None:
    requests = config.getoption("--method-mix-requests")
    if requests is not None:
        from tests.e2e import method_runs

        method_runs.N_REQUESTS = requests  # read when the e2e modules are imported and at each run


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        tier = tier_of(item.path)
        if tier is not None:
            item.add_marker(getattr(pytest.mark, tier))
