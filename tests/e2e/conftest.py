"""Fixtures shared by e2e files: the method checkpoints, and the target alone on the exactness
mixes (the 48-request one of harness/sidebyside.py, the 24-request one of method_runs.py)."""

from __future__ import annotations

import pytest

from harness.sidebyside import IN_PROCESS_CORE, run_mode
from modelkit import build_kit
from tests.e2e.method_runs import run_spec, run_specs


@pytest.fixture(scope="session")
def mix_target_alone():
    """The kit's target alone on the 48-request exactness mix (test_exactness.py, the served DP mix)."""
    kit = build_kit()
    return run_mode("no_sd", str(kit.target), str(kit.draft_perturbed), env=IN_PROCESS_CORE)


@pytest.fixture(scope="session")
def method_checkpoints():
    from modelkit.method_checkpoints import build_method_checkpoints

    return build_method_checkpoints()


class TargetsAlone:
    """``targets_alone(target)``: the target alone's run on the 24-request mix, once per target. A fixture
    that runs engines side by side runs it among them: ``beside(jobs, targets)``."""

    def __init__(self) -> None:
        self.runs: dict[str, dict] = {}

    def __call__(self, target: str) -> dict:
        if target not in self.runs:
            self.runs[target] = run_spec("no_sd", target, None)
        return self.runs[target]

    def beside(self, jobs: dict, targets) -> dict:
        """``method_runs.run_specs(jobs)``, two engines at a time, with the runs alone of those of ``targets``
        not run yet among them (kept here, not returned)."""
        missing = set(targets) - set(self.runs)
        results = run_specs({**jobs, **{("no_sd", t): {"mode": "no_sd", "target": t, "spec": None} for t in missing}})
        for target in missing:
            self.runs[target] = results.pop(("no_sd", target))
        return results


@pytest.fixture(scope="session")
def targets_alone() -> TargetsAlone:
    return TargetsAlone()
