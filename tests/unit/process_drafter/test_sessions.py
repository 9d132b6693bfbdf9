"""Draft sessions (minedraft/process_drafter/draft_engine/sessions.py): the common prefix of a session and its history."""

from __future__ import annotations

import pytest

from minedraft.process_drafter.draft_engine.sessions import _common_prefix


@pytest.mark.parametrize(("a", "b", "common"), [
    ([], [1], 0), ([1, 2, 3], [1, 2, 3, 4], 3), ([1, 2, 3, 4], [1, 2], 2), ([1, 2, 3], [1, 9, 3], 1),
    ([5] * 1000 + [1], [5] * 1000 + [2, 3], 1000), ([7, 1], [8, 1], 0),
])
def test_common_prefix_of_a_session_and_its_history(a, b, common):
    assert _common_prefix(a, b) == common
