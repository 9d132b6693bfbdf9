"""A LatencyProfile with round numbers, for the cost model's tests (tests/unit/analysis/cost_model/)."""

from __future__ import annotations

from analysis.cost_model import ForwardCost, LatencyProfile


def make_profile(i: float = 0.5, **kw) -> LatencyProfile:
    values = dict(name="synthetic", target=ForwardCost(2.0, 0.1, 0.2), verify_fixed_ms=1.0,
                  draft=ForwardCost(1.5, 0.05, 0.1), propose_fixed_ms=0.5, propose_per_request_ms=0.02,
                  step_overhead_ms=1.0, step_overhead_per_request_ms=0.03, interference=i)
    values.update(kw)
    return LatencyProfile(**values)
