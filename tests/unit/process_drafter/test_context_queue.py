"""The target's side of a DFlash drafter's context (minedraft/process_drafter/target/context_queue.py)."""

from __future__ import annotations

import torch

from minedraft.process_drafter.target.context_queue import ContextQueue


def rows(n: int, value: float) -> torch.Tensor:
    return torch.full((n, 2), value)


def test_rows_wait_for_the_next_job_in_order_with_the_releases_first():
    context = ContextQueue()
    context.add([["a", 0, 2, [1, 2], None], ["b", 0, 1, [3], None]], [rows(2, 1.0), rows(1, 2.0)])
    context.add([["a", 2, 1, [4], None]], [rows(1, 3.0)])
    released, entries, taken = context.take()
    assert released == [] and [e[:3] for e in entries] == [["a", 0, 2], ["b", 0, 1], ["a", 2, 1]]
    assert taken[:, 0].tolist() == [1.0, 1.0, 2.0, 3.0]
    assert context.take() == ([], [], None)
    context.release(["a", "never-sent"])
    assert context.take()[0] == ["a"]


def test_a_released_request_s_waiting_rows_are_dropped():
    context = ContextQueue()
    context.add([["a", 0, 2, [1, 2], None], ["b", 0, 1, [3], None]], [rows(2, 1.0), rows(1, 2.0)])
    context.release(["a"])
    released, entries, taken = context.take()
    assert released == ["a"] and [e[0] for e in entries] == ["b"] and taken.shape == (1, 2)


def test_a_request_the_drafter_lost_sends_nothing_until_it_is_released():
    context = ContextQueue()
    context.add([["a", 0, 2, [1, 2], None]], [rows(2, 1.0)])
    context.forget(["a"])
    context.add([["a", 2, 1, [3], None]], [rows(1, 1.0)])
    assert context.take() == ([], [], None) and context.lost == {"a"}
    context.release(["a"])  # the drafter dropped it already: nothing to release there
    assert context.lost == set() and context.take()[0] == []
    context.add([["a", 0, 3, [1, 2, 3], None]], [rows(3, 1.0)])  # preempted and prefilled again
    assert [e[0] for e in context.take()[1]] == ["a"]
