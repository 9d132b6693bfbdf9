"""The benchmarks' and tests' names for what runs side by side.

* Rows (``BENCH_MODES``): ``no_sd`` (the target alone), ``stock_sd`` (vLLM's
  speculative decoding), ``minedraft_parallel`` and ``minedraft_auto``
  (MineDraft with its ``mode`` setting ``parallel`` and ``auto``).
* Engine layouts (a row's ``engine_core``): ``process`` (vLLM's default, the
  engine core in its own process) or ``inproc``.
"""

BENCH_MODES = ("no_sd", "stock_sd", "minedraft_parallel", "minedraft_auto")
# Benchmark row -> MineDraft's ``mode`` setting of its engine (absent: vLLM's own scheduler).
MINEDRAFT_MODE_OF = {"minedraft_parallel": "parallel", "minedraft_auto": "auto"}
MODE_LABELS = {
    "no_sd": "no SD",
    "stock_sd": "stock SD",
    "minedraft_parallel": "MineDraft (parallel pinned)",
    "minedraft_auto": "MineDraft auto (default)",
}
ENGINE_LAYOUTS = ("process", "inproc")
