"""Settings for every test, and the tiers: each test is marked with its folder.

``tests/unit`` (no engine, seconds), ``tests/e2e`` (real vLLM engines on CPU),
``tests/soak`` and ``tests/upstream`` (vLLM's own scheduler tests) are the
tiers, fastest first (``tests/gpu``: CUDA only, skipped elsewhere); their markers are registered in pyproject.toml and set
here, so ``pytest -m unit`` or ``-m "not soak"`` select by speed without
anyone marking a test by hand.
"""

from pathlib import Path

import pytest

from harness.environment import PYTEST_ENV, set_defaults

set_defaults(PYTEST_ENV)  # vLLM on CPU, offline; MineDraft's default mode unless a test pins one
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
