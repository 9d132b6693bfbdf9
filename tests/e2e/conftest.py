"""Fixtures shared by the e2e files that run one speculative method each (method_runs.py)."""

from __future__ import annotations

import pytest

from tests.e2e.method_runs import run_spec


@pytest.fixture(scope="session")
def method_checkpoints():
    from modelkit.method_checkpoints import build_method_checkpoints

    return build_method_checkpoints()


@pytest.fixture(scope="session")
def targets_alone():
    """``targets_alone(target)``: the target alone's run on the mix, once per target."""
    cache: dict[str, dict] = {}

    def alone(target: str) -> dict:
        if target not in cache:
            cache[target] = run_spec("no_sd", target, None)
        return cache[target]

    return alone
