"""Incremental token histories (minedraft/process_drafter/history.py): sent, resynced, released."""

from __future__ import annotations

from minedraft.process_drafter.history import Histories, SentHistories


def test_histories_travel_incrementally_and_resync_on_a_gap():
    sent, kept = SentHistories(), Histories()
    tokens = list(range(100, 120))
    first = sent.update("a", tokens, 10)
    assert first == ("a", 0, tokens[:10])
    second = sent.update("a", tokens, 14)
    assert second == ("a", 10, tokens[10:14])  # only what is new
    assert kept.apply([], [first, second]) == [] and kept.tokens["a"] == tokens[:14]
    # A lost update: the drafter asks for a resync and drops its copy ...
    sent.update("a", tokens, 17)
    assert kept.apply([], [sent.update("a", tokens, 19)]) == ["a"] and "a" not in kept.tokens
    sent.forget(["a"])
    # ... and the next update carries the whole history.
    assert kept.apply([], [sent.update("a", tokens, 20)]) == [] and kept.tokens["a"] == tokens


def test_released_requests_are_dropped_on_both_sides():
    sent, kept = SentHistories(), Histories()
    kept.apply([], [sent.update("a", [1, 2, 3], 3), sent.update("b", [4, 5], 2)])
    sent.release(["a", "unknown"])
    assert sent.take_released() == ["a"] and sent.take_released() == []
    kept.apply(["a"], [])
    assert list(kept.tokens) == ["b"] and "a" not in sent.sent
