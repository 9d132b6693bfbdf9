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
    before = MineDraftMetrics.get().counters["parallel_steps"]._value.get()
    stats = SimpleNamespace(kv_connector_stats={PAYLOAD_KEY: MineDraftStats(parallel_steps=3).to_payload(),
                                                "connector": 1})
    record(None, stats, None)
    assert seen == [{"connector": 1}]  # vLLM's loggers never see MineDraft's key
    assert MineDraftMetrics.get().counters["parallel_steps"]._value.get() == before + 3

    snapshot = _wrap_snapshot(lambda: [])()
    assert any(m.name == "minedraft:parallel_steps" and m.value == before + 3 for m in snapshot)
