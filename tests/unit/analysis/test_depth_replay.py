"""analysis/depth_replay.py: the measured shifting workload replayed through the speculation policy
(minedraft/policy/policy.py; no engine)."""

from __future__ import annotations

import json

import pytest

import analysis.depth_replay
from analysis.depth_replay import SHIFTING_JSON, Machine, load_workload, main, replay, solve_alpha, summarize
from minedraft.policy import SpeculationPolicy

# The run of 2026-11-26 (steps of 10-20 ms, where speculating paid in the greedy ramps at low N: each
# phase's best depth 1.12x the best fixed one), kept beside the latest run for the policy's tests.
RECORDED = SHIFTING_JSON.parent / "history" / "shifting" / "before_shared_text.json"


@pytest.fixture(scope="module")
def workload():
    return load_workload(json.loads(RECORDED.read_text())["samples"])


@pytest.mark.parametrize("accepted", [0.05, 1.0, 1.95, 2.9])
def test_the_acceptance_solved_for_gives_back_the_accepted_drafts(accepted):
    alpha = solve_alpha(accepted, 3)
    assert sum(alpha ** i for i in range(1, 4)) == pytest.approx(accepted, abs=1e-6)


def test_the_committed_run_reads_as_a_workload(workload):
    assert len(workload.phases) == 27 and workload.max_depth == 3
    assert workload.alpha["greedy"] > 0.5 > 0.2 > workload.alpha["sampled"]
    assert all(workload.step_seconds[(p.requests, d)] > 0 for p in workload.phases for d in range(4))


def test_the_oracle_beats_every_fixed_depth(workload):
    """Each phase at its best depth in hindsight: above every fixed depth over the workload."""
    oracle = replay(workload, "oracle", seed=1, noise=0.0)[0]
    assert all(oracle > replay(workload, depth, seed=1, noise=0.0)[0] for depth in range(workload.max_depth + 1))


def test_auto_beats_every_fixed_depth_on_the_shifting_workload(workload):
    """The policy on the recorded workload: ``auto`` above every fixed depth (1.10x of the best with the
    cost model; 1.03x-1.04x with the windowed controller before it)."""
    summary = summarize(workload, seeds=3)
    assert summary["auto_vs_best_static"] > 1.05
    assert summary["oracle_vs_best_static"] > summary["auto_vs_best_static"]


def test_auto_turns_speculation_off_on_text_its_drafter_misses(workload):
    phases = replay(workload, "auto", seed=0)[1]
    sampled = [depths for phase, _, depths in phases if phase.text == "sampled"]
    steps = [sum(depths.values()) for depths in sampled]
    assert sum(depths.get(0, 0) for depths in sampled) > 0.9 * sum(steps)  # 86 % with the windowed controller


def test_a_draft_the_policy_cut_is_charged_less_a_token_s_cost(workload):
    """A step that verifies fewer than requests x depth drafts lasts the measured step less a verified token's
    cost (the slope of the depth-0 steps over their requests) for each draft cut."""
    n, depth = workload.phases[0].requests, workload.max_depth
    measured = workload.step_seconds[(n, depth)]
    assert workload.token_seconds > 0
    assert workload.seconds(n, depth, n * depth) == measured  # nothing cut: the step as measured
    assert workload.seconds(n, depth, n * depth - 3) == pytest.approx(measured - 3 * workload.token_seconds)
    assert workload.seconds(n, 0, 0) == workload.step_seconds[(n, 0)]  # depth 0 verifies none, cuts none


class _Recorded(SpeculationPolicy):
    """The replay's policy, keeping every plan it made."""

    made: list[_Recorded] = []

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.plans = []
        _Recorded.made.append(self)

    def plan(self, view):
        plan = super().plan(view)
        self.plans.append(plan)
        return plan


@pytest.mark.parametrize("per_request", [True, False])
def test_the_step_level_replay_verifies_the_step_s_depth_for_every_request(workload, monkeypatch, per_request):
    """``per_request=False`` replays ``speculation_depth: step``: the policy chooses the depth alone and every
    request verifies all the drafts it holds (no trim, no first measurement); by default (True) each request's
    acceptance trims the drafts that do not pay for themselves."""
    monkeypatch.setattr(_Recorded, "made", [])
    monkeypatch.setattr(analysis.depth_replay, "SpeculationPolicy", _Recorded)
    replay(workload, "auto", seed=0, per_request=per_request)
    (policy,) = _Recorded.made
    assert policy.plans and policy.depth_control == "drafted" and policy.per_request is per_request
    trimmed = sum(plan.counts.drafts_trimmed for plan in policy.plans)
    if per_request:
        assert trimmed > 0
    else:
        assert trimmed == 0 and not any(plan.counts.first_measurements for plan in policy.plans)
        assert all(set(plan.num_drafts.values()) == {workload.max_depth} for plan in policy.plans)


def test_the_machine_stretches_steps_the_same_way_for_every_replay_of_a_seed(workload):
    calm = replay(workload, 0, seed=2, noise=0.0)[0]
    stalled = replay(workload, 0, seed=2, noise=0.0, machine=Machine(0.2, 0.01))[0]
    assert stalled < calm
    swinging = [replay(workload, 0, seed=2, noise=0.0, machine=Machine(swings=True))[0] for _ in range(2)]
    assert swinging[0] == swinging[1] != calm


@pytest.mark.parametrize("run", ["before_shorter_windows.json", "before_decisive_moves.json"])
def test_short_steps_and_stalls_do_not_cost_the_cost_model(run):
    """The 2026-11-28 runs (steps of 2-7 ms, a phase 0.3-0.6 s), where the windowed controller replayed at
    0.93x-0.97x of the best fixed depth: a window spanned most of a phase. The cost model needs none; a
    machine that stalls a step for 100 ms now and then does not move it (a stall counts at most twice the
    step's prediction: policy/step_costs.py)."""
    recorded = load_workload(json.loads((SHIFTING_JSON.parent / "history" / "shifting" / run).read_text())["samples"])
    assert summarize(recorded, seeds=3)["auto_vs_best_static"] > 0.97
    assert summarize(recorded, seeds=3, machine=Machine(0.005, 0.1))["auto_vs_best_static"] > 0.97


def test_the_command_line_prints_the_ratios(capsys):
    main(["--seeds", "1", "--phases"])
    out = capsys.readouterr().out
    assert "auto / best static" in out and "phase 26" in out


def test_the_grid_replays_each_recorded_run_once_on_every_machine(capsys):
    from analysis.depth_replay import GRID_MACHINES

    main(["--grid", "--seeds", "1"])
    lines = capsys.readouterr().out.splitlines()
    rows = [line.split() for line in lines[1:-1]]
    names = [row[0] for row in rows]
    runs = [SHIFTING_JSON, *sorted((SHIFTING_JSON.parent / "history" / "shifting").glob("*.json"))]
    assert names[0] == "shifting.json" and len(names) == len({run.read_text() for run in runs})  # a copy counts once
    assert all(len(row) == 1 + len(GRID_MACHINES) for row in rows)
    assert lines[-1].startswith("mean ")
