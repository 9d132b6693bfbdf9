"""The runtime's vocabulary of modes and draft-lane placements.

* ``mode`` (a setting, see settings.py): ``auto`` (default: plain SD where the
  drafter shares the target's hardware; elsewhere parallel steps where they are
  measured to win, see policy/overlap.py), ``parallel`` (every balanced step
  overlaps), ``stock`` (never).
* Placements of the drafter (``policy/overlap.py``): ``cpu-threads``
  (a thread on the target's CPU cores), ``gpu-stream`` (a side stream on the
  target's GPU), ``inline`` (no overlap: the lane ``serial``), ``dedicated`` (hardware of its own).
  The cost model's GPU layouts map onto them: ``h100-same-gpu`` is
  ``gpu-stream``, ``h100-two-gpus`` and ``h100-paper`` are ``dedicated``.

The benchmarks' row names (``no_sd``, ``stock_sd``, ...) are tooling: harness/modes.py.
"""

RUNTIME_MODES = ("auto", "parallel", "stock")
PLACEMENTS = ("cpu-threads", "gpu-stream", "inline", "dedicated")
