"""Carry MineDraft's scheduler statistics to vLLM's front-end metrics.

vLLM 0.32.0's ``SchedulerStats`` has no field for a plugin's statistics; the
patch adds ``SchedulerStats.extra`` (what patches/0003-scheduler-stats-extra.patch
proposes upstream) in every vLLM process, when the plugin loads: before the
process builds the msgspec decoder that carries the stats from the
engine core to the front end, so the field travels. A KV connector's
``kv_connector_stats`` stay its own. The scheduler fills the field
(minedraft/metrics/stats.py); ``StatLoggerManager.record`` takes MineDraft's
key out before any vLLM logger sees the stats, so vLLM's own logging is
unaffected. ``get_metrics_snapshot`` (behind ``LLM.get_metrics()``) only lists
``vllm:*`` metrics; the wrapper adds ``minedraft:*``.
"""

from __future__ import annotations

import functools
from typing import Any

from minedraft.metrics.stats import EXTRA_FIELD, MineDraftStats, detach
from minedraft.monkeypatch.patching import NewField, Patch, takes


def _wrap_record(original):
    @functools.wraps(original)
    def record(self, scheduler_stats, iteration_stats=None, mm_cache_stats=None, engine_idx=0, **kwargs):
        payload = detach(scheduler_stats) if scheduler_stats is not None else None
        if payload is not None:
            from minedraft.metrics.prometheus import MineDraftMetrics

            MineDraftMetrics.get().observe(MineDraftStats.from_payload(payload), engine_idx)
        return original(self, scheduler_stats, iteration_stats, mm_cache_stats, engine_idx, **kwargs)

    return record


def _wrap_log(original):
    @functools.wraps(original)
    def log(self):
        original(self)
        from minedraft.metrics.prometheus import MineDraftMetrics

        if MineDraftMetrics._instance is not None:
            MineDraftMetrics._instance.log()

    return log


def _wrap_snapshot(original):
    @functools.wraps(original)
    def get_metrics_snapshot():
        from prometheus_client import REGISTRY
        from vllm.v1.metrics.reader import Counter, Gauge

        collected = original()
        for metric in REGISTRY.collect():
            if not metric.name.startswith("minedraft:"):
                continue
            for s in metric.samples:
                if metric.type == "counter" and s.name.endswith("_total"):
                    collected.append(Counter(name=metric.name, labels=s.labels, value=int(s.value)))
                elif metric.type == "gauge":
                    collected.append(Gauge(name=metric.name, labels=s.labels, value=s.value))
        return collected

    return get_metrics_snapshot


def make_patches() -> list[Patch | NewField]:
    import vllm.v1.engine.llm_engine as llm_engine
    from vllm.v1.metrics.loggers import StatLoggerManager
    from vllm.v1.metrics.stats import SchedulerStats

    return [
        Patch(
            StatLoggerManager,
            {"record": _wrap_record, "log": _wrap_log},
            guards={
                "record": takes("self", "scheduler_stats", "iteration_stats", "mm_cache_stats", "engine_idx"),
                "log": takes("self"),
            },
        ),
        Patch(llm_engine, {"get_metrics_snapshot": _wrap_snapshot},
              guards={"get_metrics_snapshot": takes()}),
        NewField(SchedulerStats, EXTRA_FIELD, dict[str, Any] | None),
    ]
