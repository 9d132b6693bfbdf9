"""One vocabulary for what runs, shared by runtime, metrics, benchmarks, simulator and tests.

* ``MINEDRAFT_MODE`` (runtime): ``auto`` (default: plain SD unless parallel steps
  are measured to win, see core/mode_policy.py), ``parallel`` (every balanced
  step overlaps), ``stock`` (never).
* Benchmark and result rows: ``no_sd`` (the target alone), ``stock_sd`` (vLLM's
  speculative decoding), ``minedraft_parallel`` and ``minedraft_auto``
  (MineDraft with ``MINEDRAFT_MODE`` ``parallel`` and ``auto``).
"""

RUNTIME_MODES = ("auto", "parallel", "stock")
BENCH_MODES = ("no_sd", "stock_sd", "minedraft_parallel", "minedraft_auto")
# Benchmark mode -> MINEDRAFT_MODE of its engine (absent: vLLM's own scheduler).
MINEDRAFT_MODE_ENV = {"minedraft_parallel": "parallel", "minedraft_auto": "auto"}
MODE_LABELS = {
    "no_sd": "no SD",
    "stock_sd": "stock SD",
    "minedraft_parallel": "MineDraft (parallel pinned)",
    "minedraft_auto": "MineDraft auto (default)",
}
