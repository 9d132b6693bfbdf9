"""benchmarks/depth_trace.py (no engine): each step a real speculation policy observes is recorded as it ran."""

from __future__ import annotations

from benchmarks import depth_trace
from minedraft.policy import RequestView, SpeculationPolicy, StepPlan, StepResult, StepView, VerifiedDrafts
from minedraft.policy.load import Load


def _result(depth: int, scheduled: dict[str, int], prompt_tokens: int = 0, verified=()) -> StepResult:
    plan = StepPlan(depth=depth, parallel=False, num_drafts={}, load=Load.of(len(scheduled), depth, 0, 0))
    return StepResult(plan, num_decoding=len(scheduled), tokens=sum(scheduled.values()), scheduled=scheduled,
                      prompt_tokens=prompt_tokens, verified=list(verified), seconds=0.01)


def test_each_step_is_recorded_with_what_its_drafter_caught_up_on():
    """Two steps at depth 0 skip the drafter for request a (one token each); the step at depth 3 after them
    catches it up on those 2 and drafts a new request's 5 prompt tokens: 7, as the policy counts them."""
    policy = SpeculationPolicy(3, depth_control="drafted", catches_up=True)
    with depth_trace.recorded_steps() as steps:
        policy.plan(StepView([RequestView("a", True, tokens_left=100)]))
        policy.observe(_result(0, {"a": 1}))
        policy.observe(_result(0, {"a": 1}))
        policy.observe(_result(3, {"a": 1, "b": 5}, prompt_tokens=5, verified=[VerifiedDrafts("a", 3, 2)]))
    assert [(s["depth"], s["catch_up"], s["requests"]) for s in steps] == [(0, 0, 1), (0, 0, 1), (3, 7, 2)]
    assert steps[2]["verified"] == [[3, 2]] and steps[2]["seconds"] == 0.01


def test_the_policy_is_left_as_it_was_after_the_trace():
    observe, count = SpeculationPolicy.observe, SpeculationPolicy._count_catch_up
    with depth_trace.recorded_steps():
        assert SpeculationPolicy.observe is not observe
    assert (SpeculationPolicy.observe, SpeculationPolicy._count_catch_up) == (observe, count)


def test_a_phase_reads_as_one_line_of_its_depths():
    phase = {"requests": 4, "round": 1, "tok_s": 10.38,
             "steps": [{"depth": d, "recheck": r, "catch_up": c} for d, r, c in [(3, False, 139), (1, True, 0)]]}
    assert depth_trace.phase_line(phase) == ("N=4 round 1: 10.38 tok/s, 2 steps, depths 31, re-check steps 1, "
                                             "catch-up 139 tokens")


def test_a_trace_draws_one_panel_per_load(tmp_path):
    result = {"meta": {"mode": "minedraft_auto", "date": "2026-12-03T22:39:41+00:00"},
              "phases": [{"round": r, "requests": n, "tok_s": 6.3, "steps": [{"depth": d} for d in (3, 1, 3)]}
                         for r in (0, 1) for n in (1, 4)]}
    path = depth_trace.plot(result, tmp_path / "trace.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
