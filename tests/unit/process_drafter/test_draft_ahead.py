"""Drafting ahead (minedraft/process_drafter/draft_engine/draft_ahead.py), with a rule for a draft model.

The "model" drafts greedily by a fixed rule of the last token, so every draft is known; the engine's
real sessions are tested in tests/e2e/test_draft_sessions.py.
"""

from __future__ import annotations

import pytest

from minedraft.process_drafter.draft_engine.draft_ahead import GAPS, DraftAhead


def next_token(token: int) -> int:
    return (token * 7 + 3) % 101


def greedy(history: list[int], depth: int) -> list[int]:
    drafts = []
    for _ in range(depth):
        drafts.append(next_token((history + drafts)[-1]))
    return drafts


class RuleSessions:
    """``DraftSessions.draft`` for the rule: records each call's depth and runs the step hook."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], int]] = []

    def draft(self, histories, depth):
        self.calls.append((sorted(histories), depth))
        return {r: greedy(list(h), depth) for r, h in histories.items()}


def never_waiting() -> bool:
    return False


def ahead_of(mode: str, max_model_len: int = 1000) -> tuple[DraftAhead, RuleSessions]:
    sessions = RuleSessions()
    return DraftAhead(sessions.draft, mode, max_model_len), sessions


def answer(ahead: DraftAhead, histories: dict[str, list[int]], depth: int) -> dict[str, list[int]]:
    """One job as the engine handles it: drafts made ahead where the history is the path, the rest now."""
    ready = ahead.take(histories, depth)
    drafted = {r: ready.get(r) or greedy(h, depth) for r, h in histories.items()}
    ahead.answered(drafted, depth)
    return drafted


def test_a_history_on_the_path_finds_its_drafts_made():
    ahead, sessions = ahead_of("always")
    histories = {"a": [5, 6, 7], "b": [9]}
    drafts = answer(ahead, histories, 3)
    ahead.run(histories, never_waiting)
    assert sessions.calls == [(["a", "b"], 1)] * 4  # the guess and the job's depth, a step per call
    # The target accepts a's drafts and samples the draft's own next token; b keeps one draft and differs.
    histories["a"] += [*drafts["a"], next_token(drafts["a"][-1])]
    histories["b"] += [drafts["b"][0], next_token(drafts["b"][0]) + 1]
    ready = ahead.take(histories, 3)
    assert ready == {"a": greedy(histories["a"], 3)}  # what drafting now would make
    assert ahead.take_counts() == {"ahead_hits": 1, "ahead_misses": 1, "ahead_late": 0}
    assert ahead.ahead == {}  # taken once


def test_a_job_asking_fewer_drafts_takes_a_prefix():
    ahead, _ = ahead_of("always")
    histories = {"a": [1, 2]}
    drafts = answer(ahead, histories, 3)
    ahead.run(histories, never_waiting)
    histories["a"] += [*drafts["a"], next_token(drafts["a"][-1])]
    assert ahead.take(histories, 2) == {"a": greedy(histories["a"], 2)}


def test_released_requests_and_histories_off_the_path_are_dropped():
    ahead, _ = ahead_of("always")
    histories = {"a": [1], "b": [2]}
    drafts = answer(ahead, histories, 2)
    ahead.run(histories, never_waiting)
    ahead.forget(["a"])
    histories["a"] += [*drafts["a"], next_token(drafts["a"][-1])]
    histories["b"] += drafts["b"]  # the path's length minus one: not the path
    assert ahead.take(histories, 2) == {}
    assert ahead.take_counts()["ahead_misses"] == 1


def test_off_and_a_waiting_job_draft_nothing_ahead():
    off, off_sessions = ahead_of("off")
    answer(off, {"a": [1]}, 3)
    off.run({"a": [1]}, never_waiting)
    on, on_sessions = ahead_of("always")
    answer(on, {"a": [1]}, 3)
    on.run({"a": [1]}, lambda: True)
    assert off_sessions.calls == on_sessions.calls == []


def test_no_history_runs_past_the_model_length():
    ahead, sessions = ahead_of("always", max_model_len=8)
    histories = {"short": [1], "long": [1, 2, 3]}
    answer(ahead, histories, 3)  # long: 3 + 3 drafts + 4 steps ahead > 8
    ahead.run(histories, never_waiting)
    assert sessions.calls == [(["short"], 1)] * 4


@pytest.mark.parametrize(("gaps_s", "step_s", "steps"), [
    ([1.0] * GAPS, 0.1, 4),  # room for more than depth + 1: depth + 1
    ([0.1, 0.33, 0.33, 9.0], 0.1, 3),  # the median gap, 0.33 s: three steps
    ([0.24] * GAPS, 0.1, 2),
    ([0.27] * GAPS, 0.1, 3),  # over half of the third step fits: the job waits for the rest of it
    ([0.14] * GAPS, 0.1, 0),  # one step would draft only the guess
])
def test_auto_drafts_as_many_steps_as_fit_in_the_median_recent_gap(gaps_s, step_s, steps):
    ahead, sessions = ahead_of("auto")
    histories = {"a": [1, 2, 3]}
    answer(ahead, histories, 3)
    ahead.run(histories, never_waiting)  # no gap measured yet: nothing ahead
    assert sessions.calls == []
    ahead.gaps.extend(gaps_s)
    ahead.timed(2 * step_s, 2)  # the last drafting call: two steps
    answer(ahead, histories, 3)
    ahead.run(histories, never_waiting)
    assert len(sessions.calls) == steps


def test_a_job_that_comes_while_drafting_ahead_stops_it_after_the_step_in_flight():
    ahead, sessions = ahead_of("auto")
    histories = {"a": [1]}
    ahead.gaps.extend([1.0] * GAPS)
    ahead.timed(0.1, 1)
    answer(ahead, histories, 3)
    calls = iter([False, False, False, True])  # before drafting, before steps 1 and 2, and the job came
    ahead.run(histories, lambda: next(calls, True))
    assert len(sessions.calls) == 2  # of four
    assert ahead.ahead["a"].drafts == greedy([1, *ahead.ahead["a"].path], 1)  # the guess and one draft
    ahead.job_arrived()
    assert ahead.take_counts()["ahead_late"] == 1


def test_always_drafts_every_step_even_when_a_job_comes():
    ahead, sessions = ahead_of("always")
    histories = {"a": [1]}
    answer(ahead, histories, 2)
    calls = iter([False, True])
    ahead.run(histories, lambda: next(calls, True))
    assert len(sessions.calls) == 3
    ahead.job_arrived()
    assert ahead.take_counts()["ahead_late"] == 1


def auto_drafting_ahead(histories: dict[str, list[int]]) -> tuple[DraftAhead, RuleSessions, dict]:
    """``auto`` with room for every step, after one job of ``histories`` and the drafting ahead after it."""
    ahead, sessions = ahead_of("auto")
    ahead.gaps.extend([1.0] * GAPS)
    ahead.timed(0.1, 1)
    drafts = answer(ahead, histories, 3)
    ahead.run(histories, never_waiting)
    return ahead, sessions, drafts


def test_auto_answers_a_job_of_several_requests_with_the_drafts_made_ahead_alone():
    histories = {"a": [1, 2, 3], "b": [4, 5]}
    ahead, sessions, drafts = auto_drafting_ahead(histories)
    assert len(sessions.calls) == 4  # both requests, the guess and three drafts
    assert ahead.answers_at_once(2, inline=True) and not ahead.answers_at_once(1, inline=True)  # one waits
    assert not ahead.answers_at_once(2, inline=False)  # a parallel step's job: the target's step to draft in
    # a followed the path; b kept one draft and the target sampled another token: b gets no drafts now,
    # and is drafted ahead from its new history, past the draft model's guess of the target's next token.
    histories["a"] += [*drafts["a"], next_token(drafts["a"][-1])]
    histories["b"] += [drafts["b"][0], next_token(drafts["b"][0]) + 1]
    ready = ahead.take(histories, 3)
    assert ready == {"a": greedy(histories["a"], 3)}
    ahead.answered({"a": ready["a"], "b": []}, 3)
    ahead.run(histories, never_waiting)
    histories["b"].append(next_token(histories["b"][-1]))  # verified without drafts: the guess
    assert ahead.take(histories, 3) == {"b": greedy(histories["b"], 3)}


def test_always_and_a_gap_without_room_wait_for_every_draft():
    always, _ = ahead_of("always")
    answer(always, {"a": [1], "b": [2]}, 3)
    always.run({"a": [1], "b": [2]}, never_waiting)
    assert not always.answers_at_once(2, inline=True)  # the tests' setting: every job gets its depth
    ahead, sessions, _ = auto_drafting_ahead({"a": [1], "b": [2]})
    assert ahead.answers_at_once(2, inline=True)
    ahead.gaps.extend([0.14] * GAPS)  # the target sends jobs at once (a second group): one step's room
    ahead.timed(0.1, 1)
    answer(ahead, {"a": [1], "b": [2]}, 3)
    ahead.run({"a": [1], "b": [2]}, never_waiting)
    assert not ahead.answers_at_once(2, inline=True)


def test_a_prompt_is_drafted_ahead_past_the_guess_of_the_first_token_whatever_the_room():
    ahead, sessions = ahead_of("auto")  # no gap measured: no room for the jobs' requests
    histories = {"p": [4, 5, 6]}
    ahead.start(["p"], 3)
    ahead.run(histories, never_waiting)
    assert sessions.calls == [(["p"], 1)] * 4  # the prefill and the guess, then three drafts
    histories["p"].append(next_token(6))  # the target's first token is the draft's guess
    assert ahead.take(histories, 3) == {"p": greedy(histories["p"], 3)}


def test_prompts_that_stop_drafting_ahead_are_drafted_with_the_requests_it_stopped():
    ahead, sessions = ahead_of("auto")
    ahead.gaps.extend([1.0] * GAPS)
    ahead.timed(0.1, 1)
    histories = {"a": [1, 2]}
    drafts = answer(ahead, histories, 3)
    calls = iter([False, False, True])  # the prompt comes after one step
    ahead.run(histories, lambda: next(calls, True))
    assert len(sessions.calls) == 1
    histories["p"] = [7, 8]
    ahead.start(["p"], 3)
    ahead.run(histories, never_waiting)
    assert sessions.calls[1:] == [(["a", "p"], 1)] * 4
    histories["a"] += [*drafts["a"], next_token(drafts["a"][-1])]
    histories["p"].append(next_token(8))
    ahead.job_arrived()
    assert ahead.take(histories, 3) == {r: greedy(histories[r], 3) for r in ("a", "p")}
    assert ahead.take_counts() == {"ahead_hits": 2, "ahead_misses": 0, "ahead_late": 0}  # a prompt is no job


def test_a_prompt_measures_no_gap_and_a_job_answered_clears_what_was_left():
    ahead, _ = ahead_of("auto")
    histories = {"a": [1]}
    answer(ahead, histories, 2)
    ahead.run(histories, lambda: True)  # a job came at once
    ahead.start(["p"], 2)
    assert list(ahead.gaps) == []
    ahead.job_arrived()
    assert len(ahead.gaps) == 1  # the gap runs from the last answer to the job
    ahead.answered({"a": []}, 2)
    assert ahead._last_job == {"a": []} and not ahead._unfinished and not ahead._started


def test_the_gaps_before_a_parallel_steps_jobs_leave_the_room_of_plain_sd_steps_as_it_was():
    ahead, sessions = ahead_of("auto")
    ahead.gaps.extend([1.0] * GAPS)  # steps of plain SD: room for every step
    ahead.timed(0.1, 1)
    histories = {"a": [1]}
    for _ in range(GAPS):  # parallel steps: each job comes as its step starts
        ahead.job_arrived(inline=False)
        answer(ahead, histories, 3)
        ahead.run(histories, never_waiting)
    assert sessions.calls == [] and list(ahead.gaps) == [1.0] * GAPS  # little room after a parallel step's job
    ahead.job_arrived(inline=True)  # plain SD again
    ahead.gaps.extend([1.0] * GAPS)  # the gap before it (measured in microseconds here) aside
    answer(ahead, histories, 3)
    ahead.run(histories, never_waiting)
    assert len(sessions.calls) == 4 and ahead.answers_at_once(2, inline=True)
