"""minedraft/metrics/stats.py: the counters and the one place that knows how they travel."""

from __future__ import annotations

from dataclasses import dataclass, field

from vllm.v1.metrics.stats import SchedulerStats

from minedraft.metrics.stats import PAYLOAD_KEY, MineDraftStats, attach, detach
from minedraft.policy.plan import VerifiedDrafts


def test_the_payload_rides_in_the_extra_field_and_leaves_the_connectors_stats_alone(plugins_loaded):
    stats = SchedulerStats(kv_connector_stats={"nixl": {"bytes": 1}})
    attach(stats, MineDraftStats(parallel_steps=2).to_payload())
    assert stats.extra[PAYLOAD_KEY]["parallel_steps"] == 2
    assert stats.kv_connector_stats == {"nixl": {"bytes": 1}}
    assert MineDraftStats.from_payload(detach(stats)).parallel_steps == 2 and stats.extra == {}
    assert SchedulerStats().extra is None  # attach made a new dict, never the class default


@dataclass
class PatchedSchedulerStats(SchedulerStats):
    """What patches/0003 adds upstream, a dict by default (its upstream test applies the real diff)."""

    extra: dict = field(default_factory=dict)


def test_with_vllms_own_extra_dict_the_payload_uses_it():
    stats = PatchedSchedulerStats(extra={"other": {"n": 1}})
    attach(stats, {"parallel_steps": 1})
    assert stats.extra == {"other": {"n": 1}, PAYLOAD_KEY: {"parallel_steps": 1}} and stats.kv_connector_stats is None
    assert detach(stats) == {"parallel_steps": 1} and stats.extra == {"other": {"n": 1}}


def test_stats_without_a_payload_are_left_alone(plugins_loaded):
    stats = SchedulerStats(kv_connector_stats={"nixl": {}})
    assert detach(stats) is None and stats.kv_connector_stats == {"nixl": {}} and stats.extra is None


def test_steps_by_depth_and_requests_by_drafts_survive_the_payload():
    stats = MineDraftStats(requests_by_drafts={"1": 4, "3": 2})
    for depth in (3, 3, 0):
        stats.observe_step(4, 0, False, False, depth=depth)
    payload = stats.to_payload()
    stats.requests_by_drafts["1"] += 1  # the payload is a copy: the scheduler's counts go on
    back = MineDraftStats.from_payload(payload)
    assert back.steps_by_depth == {"3": 2, "0": 1} and back.speculation_depth == 0
    assert back.requests_by_drafts == {"1": 4, "3": 2}


def test_only_the_lookup_source_s_requests_count_and_their_first_drafts_accepted_once_each():
    stats = MineDraftStats()
    verified = [VerifiedDrafts("suffix", 8, 5), VerifiedDrafts("rejected", 6, 0), VerifiedDrafts("model", 3, 3)]
    stats.observe_lookup(verified, {"suffix", "rejected"})
    assert (stats.lookup_requests, stats.lookup_drafts, stats.lookup_accepted) == (2, 14, 5)
    assert stats.lookup_first_accepted == 1
