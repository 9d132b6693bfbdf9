"""One vocabulary for what runs, shared by runtime, metrics, benchmarks, simulator and tests.

* ``MINEDRAFT_MODE`` (runtime): ``auto`` (default: plain SD unless parallel steps
  are measured to win, see core/mode_policy.py), ``parallel`` (every balanced
  step overlaps), ``stock`` (never).
* Placements of the draft lane (``core/mode_prior.py``): ``cpu-threads`` (a
  thread on the target's CPU cores), ``gpu-stream`` (a side stream on the
  target's GPU), ``serial`` (no overlap), ``dedicated`` (hardware of its
  own). The simulator's GPU layouts map onto them: ``h100-same-gpu`` is
  ``gpu-stream``, ``h100-two-gpus`` and ``h100-paper`` are ``dedicated``.
* Engine layouts (benchmark rows' ``engine_core``): ``process`` (vLLM's
  default, the engine core in its own process) or ``inproc``.
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
PLACEMENTS = ("cpu-threads", "gpu-stream", "serial", "dedicated")
ENGINE_LAYOUTS = ("process", "inproc")
