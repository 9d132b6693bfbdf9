"""minedraft/scheduling/groups.py: which free requests sit a step out, and when the two groups are balanced."""

from __future__ import annotations

import pytest

from minedraft.scheduling.groups import choose_held, is_balanced


def test_split_from_all_free_is_even():
    held = choose_held([], [], [f"r{i}" for i in range(6)])
    assert len(held) == 3


def test_no_split_for_a_single_request():
    assert choose_held([], [], ["r0"]) == []
    assert not is_balanced(1, 0)


@pytest.mark.parametrize(
    ("drafting", "due", "free", "num_held"),
    [
        # Verified now: u0, u1 and one free; next step: d0 and the two held.
        (["d0"], ["u0", "u1"], ["f0", "f1", "f2"], 2),
        # Verified now: the four due; next step: the four free, all held.
        ([], ["u0", "u1", "u2", "u3"], ["f0", "f1", "f2", "f3"], 4),
    ],
)
def test_due_requests_are_never_held(drafting, due, free, num_held):
    held = choose_held(drafting, due, free)
    assert len(held) == num_held
    assert set(held) <= set(free) and not set(held) & set(due)
    assert is_balanced(len(due) + len(free) - num_held, len(drafting) + num_held)


def test_no_split_when_only_holding_a_due_request_would_balance():
    # Four due and one free: only holding due requests could balance the groups.
    assert choose_held([], ["u0", "u1", "u2", "u3"], ["f0"]) == []


def test_unbalanced_split_falls_back():
    assert choose_held(["d0", "d1", "d2", "d3", "d4"], ["u0"], []) == []
    assert not is_balanced(1, 5)
    assert is_balanced(4, 5)
