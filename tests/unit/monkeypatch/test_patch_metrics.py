"""The ``metrics`` patch (minedraft/monkeypatch/patch_metrics.py): MineDraft's statistics reach
its Prometheus metrics, never vLLM's loggers."""

from __future__ import annotations

from types import SimpleNamespace


def test_patch_metrics_takes_minedraft_stats_out_before_vllm_loggers():
    from minedraft.metrics.prometheus import MineDraftMetrics
    from minedraft.metrics.stats import PAYLOAD_KEY, MineDraftStats
    from minedraft.monkeypatch.patch_metrics import _wrap_record, _wrap_snapshot

    seen = []
    record = _wrap_record(lambda self, stats, *a, **k: seen.append(stats.kv_connector_stats))
    counter = MineDraftMetrics.get().counters["parallel_steps"]
    before = {engine: counter.labels(engine=engine)._value.get() for engine in ("0", "1")}
    stats = SimpleNamespace(kv_connector_stats={PAYLOAD_KEY: MineDraftStats(parallel_steps=3).to_payload(),
                                                "connector": 1})
    record(None, stats, None, None, 1)  # data parallel rank 1's engine core
    assert seen == [{"connector": 1}]  # vLLM's loggers never see MineDraft's key
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
