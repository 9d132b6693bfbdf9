"""benchmarks/depth0_stages.py (no engine): how it times stages and pairs rounds."""

from __future__ import annotations

import pytest

from benchmarks import depth0_stages


class Runner:
    def forward(self, fail: bool = False) -> str:
        if fail:
            raise ValueError("boom")
        return "out"


def test_a_wrapped_method_is_timed_on_its_instance_only_and_keeps_its_result_and_errors():
    timer, timed, untouched = depth0_stages.StageTimer(), Runner(), Runner()
    timer.wrap(timed, "forward")
    timer.wrap(timed, "not_there")  # a stage this runner lacks is left out
    assert timed.forward() == "out"
    with pytest.raises(ValueError, match="boom"):
        timed.forward(fail=True)
    assert set(timer.seconds) == {"forward"} and timer.seconds["forward"] > 0
    assert timer.calls["forward"] == 2  # the failed call counted too
    untouched.forward()
    assert "forward" not in vars(untouched)
    timer.reset()
    assert not timer.seconds and not timer.calls


def test_step_ratios_pair_rounds_and_stages_are_ms_per_step():
    # Round 1 ran twice as slow for both engines: paired, MineDraft is at 1.1x in both.
    rounds = {"no_sd": [{"step": 1.0, "schedule": 0.1}, {"step": 2.0, "schedule": 0.2}],
              "minedraft_depth0": [{"step": 1.1, "schedule": 0.12}, {"step": 2.2, "schedule": 0.24}]}
    rows = {r["engine"]: r for r in depth0_stages.summarize(rounds, requests=8, steps=100)}
    assert rows["minedraft_depth0"]["step_vs_no_sd_rounds"] == [1.1, 1.1]
    assert rows["minedraft_depth0"]["step_vs_no_sd"] == 1.1
    assert rows["no_sd"]["ms_per_step"] == {"step": 15.0, "schedule": 1.5}  # median of 1.0 s and 2.0 s, / 100
    assert rows["minedraft_depth0"]["requests"] == 8
    table = depth0_stages.markdown({"rows": list(rows.values())})
    assert "| 8 | minedraft_depth0 | 1.100x | 16.50 | 1.80 |" in table
