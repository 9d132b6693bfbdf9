"""The ``metrics`` patch (minedraft/monkeypatch/patch_metrics.py): MineDraft's statistics reach
its Prometheus metrics, never vLLM's loggers."""

from __future__ import annotations

from types import SimpleNamespace


def test_patch_metrics_adds_a_field_that_crosses_from_engine_core_to_front_end_beside_a_connectors_stats():
    """What the engine core sends the front end, through vLLM's own serialisation: MineDraft's
    counters in SchedulerStats.extra, a KV connector's statistics untouched in kv_connector_stats."""
    from vllm.v1.engine import EngineCoreOutputs
    from vllm.v1.metrics.stats import SchedulerStats
    from vllm.v1.serial_utils import MsgpackDecoder, MsgpackEncoder

    from minedraft.metrics.stats import MineDraftStats, attach, detach

    sent = SchedulerStats(num_running_reqs=2, kv_connector_stats={"num_successful_transfers": 4})
    attach(sent, MineDraftStats(parallel_steps=5).to_payload())
    received = MsgpackDecoder(EngineCoreOutputs).decode(
        MsgpackEncoder().encode(EngineCoreOutputs(scheduler_stats=sent))).scheduler_stats
    assert MineDraftStats.from_payload(detach(received)).parallel_steps == 5
    assert received.kv_connector_stats == {"num_successful_transfers": 4} and received.num_running_reqs == 2
    assert SchedulerStats().extra is None  # an engine without MineDraft's scheduler sends nothing more


def test_patch_metrics_takes_minedraft_stats_out_before_vllm_loggers():
    from minedraft.metrics.prometheus import MineDraftMetrics
    from minedraft.metrics.stats import PAYLOAD_KEY, MineDraftStats
    from minedraft.monkeypatch.patch_metrics import _wrap_record, _wrap_snapshot

    seen = []
    record = _wrap_record(lambda self, stats, *a, **k: seen.append(stats.extra))
    counter = MineDraftMetrics.get().counters["parallel_steps"]
    before = {engine: counter.labels(engine=engine)._value.get() for engine in ("0", "1")}
    stats = SimpleNamespace(extra={PAYLOAD_KEY: MineDraftStats(parallel_steps=3).to_payload(), "other": 1})
    record(None, stats, None, None, 1)  # data parallel rank 1's engine core
    assert seen == [{"other": 1}]  # vLLM's loggers never see MineDraft's key
    assert counter.labels(engine="1")._value.get() == before["1"] + 3
    assert counter.labels(engine="0")._value.get() == before["0"]

    snapshot = _wrap_snapshot(lambda: [])()
    assert any(m.name == "minedraft:parallel_steps" and m.labels == {"engine": "1"} and m.value == before["1"] + 3
               for m in snapshot)


def test_every_counter_of_an_engine_is_exported_from_its_first_step():
    """A counter never incremented (late_drafts) is still a series at 0, as it was before the engine label."""
    from minedraft.metrics.prometheus import MineDraftMetrics
    from minedraft.metrics.stats import MineDraftStats
    from minedraft.monkeypatch.patch_metrics import _wrap_snapshot

    MineDraftMetrics.get().observe(MineDraftStats(parallel_steps=1), 7)
    snapshot = _wrap_snapshot(lambda: [])()
    assert any(m.name == "minedraft:late_drafts" and m.labels == {"engine": "7"} and m.value == 0 for m in snapshot)
