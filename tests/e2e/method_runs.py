"""One speculative config (a ``--speculative-config`` dict) through one mode's engine, on the 24-request mix.

Shared by test_configs_on_stock_path.py and test_overlapped_methods.py: the mix of :mod:`harness.sidebyside`
(chunked prefill, prefix caching, a KV cache small enough to preempt), cut to 24 requests.
"""

from __future__ import annotations

from harness.sidebyside import run_mode

N_REQUESTS = 24


def run_spec(mode: str, target: str, spec: dict | None, log_dir=None, minedraft: dict | None = None) -> dict:
    """``spec`` None: the target alone (``mode`` ``no_sd``); ``minedraft``: MineDraft settings."""
    spec = dict(spec or {"method": "draft_model", "num_speculative_tokens": 1})
    method, draft, k = spec.pop("method"), spec.pop("model", None), spec.pop("num_speculative_tokens")
    return run_mode(mode, target, draft, method=method, k=k, speculation_extra=spec, num_requests=N_REQUESTS,
                    log_dir=log_dir, minedraft=minedraft)


def mismatched(expected: dict, result: dict) -> list[int]:
    """The requests whose tokens differ."""
    return [i for i, (a, b) in enumerate(zip(expected["tokens"], result["tokens"], strict=True)) if a != b]
