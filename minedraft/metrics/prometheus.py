"""Front-end side of MineDraft's metrics: Prometheus counters and a log line.

The engine core sends :class:`MineDraftStats` inside ``SchedulerStats``; the
patched ``StatLoggerManager`` hands them to :class:`MineDraftMetrics`, which
exports them as ``minedraft:*`` metrics (on ``/metrics`` and, through the
patched ``get_metrics_snapshot``, in ``LLM.get_metrics()``).
"""

from __future__ import annotations

import prometheus_client

from minedraft.log import get_logger
from minedraft.metrics.stats import MineDraftStats

logger = get_logger(__name__)

_COUNTERS = {
    "parallel_steps": "Engine steps whose drafting overlapped the next verification.",
    "fallback_steps": "Engine steps that ran plain speculative decoding.",
    "verified_requests": "Requests verified, summed over steps.",
    "draft_only_requests": "Requests drafted on the draft lane, summed over steps.",
    "parallel_trial_steps": "Steps auto allowed parallel mode only to measure it against plain SD (a drafter "
    "on hardware of its own).",
    "late_drafts": "Requests verified without drafts because the process drafter was late or gone.",
    "arrival_skips": "Plain SD drafting rounds skipped so that a newly arrived request's prefill "
    "did not wait for them.",
    "drafts_cut": "Drafts not verified because their request asked for fewer (extra_args "
    "num_speculative_tokens) or passed the speculative max_model_len.",
    "drafts_trimmed": "Drafts not verified because their request's measured acceptance did not pay for their "
    "verification (speculation_depth=auto).",
    "requests_trimmed": "Requests verified with some of their drafts trimmed (speculation_depth=auto), summed "
    "over steps.",
    "first_measurements": "New requests drafted first at the rate of the finished requests that drafted best, "
    "where what they could gain outweighed what they could lose (speculation_depth=auto).",
    "past_spec_max_len": "Requests that passed the speculative config's max_model_len: no drafts verified since.",
    "lookup_requests": "Requests verified with the second source's drafts (hybrid: suffix decoding or n-gram) "
    "instead of the model drafter's, summed over steps.",
    "lookup_drafts": "The second source's drafts verified (hybrid); vLLM's spec-decode counters count both sources.",
    "lookup_accepted": "The second source's drafts accepted (hybrid).",
    "lookup_first_accepted": "Requests verified with the second source's drafts whose first draft was accepted "
    "(hybrid): with vLLM's per-position counter, the model drafter's first-draft acceptance alone.",
    "lookup_only_steps": "Steps whose every decoding request verified the second source's drafts (hybrid), the "
    "others starting prompts: the model drafter skipped drafting after them and caught up when next drafted.",
    "undrafted_requests": "Requests the model drafter skipped after a step in which it drafted others, their "
    "drafts unused (hybrid: they verified the second source's, or their prompts started beside such requests); "
    "caught up when next drafted. Summed over steps.",
    "depth_rechecks": "Re-checks the policy began: a few drafts where it had chosen speculation off, "
    "or one depth deeper than it had chosen, to measure acceptance again.",
}
_GAUGES = {
    "verify_group_size": "Requests verified in the last step.",
    "draft_group_size": "Requests on the draft lane in the last step.",
    "parallel_mode_allowed": "1 if the policy allowed parallel steps in the last step that ran "
    "(auto: its current choice, or a trial; MINEDRAFT_MODE).",
    "speculation_depth": "The speculation depth the last step drafted at (speculation_depth=auto: the "
    "policy's choice; fixed: num_speculative_tokens).",
}


class MineDraftMetrics:
    """One per process; Prometheus metrics are process-global. Each series has vLLM's ``engine``
    label: under data parallelism every rank's engine core reports its own."""

    _instance: MineDraftMetrics | None = None

    def __init__(self) -> None:
        self.counters = {
            name: prometheus_client.Counter(f"minedraft:{name}", doc, ["engine"])
            for name, doc in _COUNTERS.items()
        }
        self.gauges = {
            name: prometheus_client.Gauge(f"minedraft:{name}", doc, ["engine"])
            for name, doc in _GAUGES.items()
        }
        self.steps_by_depth = prometheus_client.Counter(
            "minedraft:steps_by_depth", "Engine steps by the speculation depth they drafted at.", ["engine", "depth"])
        self.requests_by_drafts = prometheus_client.Counter(
            "minedraft:requests_by_drafts", "Requests verified with drafts, by how many of their drafts the "
            "target verified (after each request's own cut).", ["engine", "drafts"])
        self.since_last_log: dict[int, MineDraftStats] = {}
        # Each engine's labelled series, looked up once: ``labels()`` sorts and locks on every
        # call, and ``observe`` runs once per engine step.
        self._series: dict[int, tuple[list, list, dict[str, prometheus_client.Counter],
                                      dict[str, prometheus_client.Counter]]] = {}

    @classmethod
    def get(cls) -> MineDraftMetrics:
        if cls._instance is None:
            cls._instance = MineDraftMetrics()
        return cls._instance

    def observe(self, stats: MineDraftStats, engine: int = 0) -> None:
        counters, gauges, by_depth, by_drafts = self._engine_series(engine)
        for name, series in counters:
            if value := getattr(stats, name):
                series.inc(value)
        for name, series in gauges:
            series.set(getattr(stats, name))
        for depth, steps in stats.steps_by_depth.items():
            if (series := by_depth.get(depth)) is None:
                series = by_depth[depth] = self.steps_by_depth.labels(engine=str(engine), depth=depth)
            series.inc(steps)
        for drafts, requests in stats.requests_by_drafts.items():
            if (series := by_drafts.get(drafts)) is None:
                series = by_drafts[drafts] = self.requests_by_drafts.labels(engine=str(engine), drafts=drafts)
            series.inc(requests)
        acc = self.since_last_log.setdefault(engine, MineDraftStats())
        for name in _COUNTERS:
            setattr(acc, name, getattr(acc, name) + getattr(stats, name))

    def _engine_series(self, engine: int) -> tuple[list, list, dict, dict]:
        if (series := self._series.get(engine)) is None:
            label = str(engine)
            # Created at an engine's first step: exported from then on, at 0 until counted.
            series = self._series[engine] = (
                [(name, counter.labels(engine=label)) for name, counter in self.counters.items()],
                [(name, gauge.labels(engine=label)) for name, gauge in self.gauges.items()],
                {},
                {},
            )
        return series

    def log(self) -> None:
        for engine, acc in sorted(self.since_last_log.items()):
            if acc.empty:
                continue
            steps = acc.parallel_steps + acc.fallback_steps
            logger.info(
                "MineDraft: parallel steps: %d/%d (%.1f%%), mean verify group: %.1f, "
                "mean draft group: %.1f (engine %d)",
                acc.parallel_steps,
                steps,
                100.0 * acc.parallel_steps / steps,
                acc.verified_requests / steps,
                acc.draft_only_requests / steps,
                engine,
            )
            if acc.lookup_requests:
                logger.info("MineDraft hybrid: %d of %d requests verified were drafted by the lookup source "
                            "(%d drafts, %d accepted), the others by the model drafter (engine %d)",
                            acc.lookup_requests, acc.verified_requests, acc.lookup_drafts, acc.lookup_accepted,
                            engine)
        self.since_last_log = {}
