"""The auto mode's prior (minedraft/scheduling/mode_prior.py): from the lane's placement and the
cost model, parallel steps ruled out where the hardware is shared."""

from __future__ import annotations

import pytest

from minedraft.scheduling.mode_policy import Load
from minedraft.scheduling.mode_prior import make_prior, placement


@pytest.mark.parametrize("where", ["cpu-threads", "gpu-stream", "inline"])
@pytest.mark.parametrize("k", [1, 3, 5])
def test_prior_rules_out_shared_hardware_at_equal_concurrency(where, k):
    prior = make_prior(where)
    for n in (2, 4, 8, 16, 32, 64):
        assert prior(Load.of(n, k)) < 1.0, (where, k, n)


def test_serial_lane_can_never_win_and_dedicated_hardware_has_no_prior():
    inline, threads = make_prior("inline"), make_prior("cpu-threads")
    for k in (1, 3, 5):
        for n in (2, 16, 256, 1024, 4096):
            assert inline(Load.of(n, k)) < 1.0, (k, n)
    # Even where the thread lane is predicted to win (many requests, k = 1).
    assert threads(Load.of(1024, 1)) > 1.0
    assert make_prior("dedicated") is None
    assert placement("cpu", "overlap") == "cpu-threads"
    assert placement("cuda", "overlap") == "gpu-stream"
    assert placement("cuda", "serial") == placement("cpu", "serial") == "inline"
    with pytest.raises(ValueError, match="unknown placement"):
        make_prior("elsewhere")


def test_a_process_drafter_is_a_dedicated_placement():
    assert placement("cpu", "overlap", "process") == "dedicated"
    assert placement("cuda", "overlap", "process") == "dedicated"
    assert placement("cpu", "overlap") == "cpu-threads"
