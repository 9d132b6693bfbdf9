"""One speculative config (a ``--speculative-config`` dict) through one mode's engine, on the mix cut to 24 requests.

Shared by test_configs_on_stock_path.py, test_overlapped_methods.py and test_second_target.py: the mix of
:mod:`harness.sidebyside` (chunked prefill, prefix caching, a KV cache small enough to preempt), cut to 24
requests; the methods the last two run on their checkpoints (:data:`METHODS`).
"""

from __future__ import annotations

import functools
import importlib.util

from harness.sidebyside import IN_PROCESS_CORE, run_mode, two_at_a_time

# The mix cut to this many requests; ``pytest --method-mix-requests 48`` (tests/conftest.py) runs the whole
# exactness mix instead (test_overlapped_methods.py and test_second_target.py took 9.8 min with 48, about what
# they take with 24: engine starts dominate).
N_REQUESTS = 24

# Every method the two method files run, name -> k. MiMo's one MTP layer re-runs for k > 1 (vLLM warns; k = 2 is
# exact and accepts drafts). Suffix decoding needs no checkpoint, but the ``suffix`` extra (arctic-inference).
METHODS = {"mtp": 2, "pard": 3, "peagle": 3, "medusa": 3, "dflash": 3, "suffix": 3}
HAS_SUFFIX = importlib.util.find_spec("arctic_inference") is not None


def target_and_spec(ckpts, name: str) -> tuple[str, dict]:
    """The target and the speculative config of method ``name`` at its k of :data:`METHODS`, from ``ckpts``
    (modelkit's method checkpoints, the kit's or the second target's); suffix decoding drafts for their target."""
    if name == "suffix":
        return ckpts.target, {"method": "suffix", "num_speculative_tokens": METHODS[name]}
    return ckpts.target_for(name), ckpts.speculative_config(name, METHODS[name])


def run_spec(mode: str, target: str, spec: dict | None, log_dir=None, minedraft: dict | None = None,
             env: dict | None = None) -> dict:
    """``spec`` None: the target alone (``mode`` ``no_sd``); ``minedraft``: MineDraft settings; ``env``: the
    engine's extra environment. The engine core runs in the child's process (``IN_PROCESS_CORE``) unless the
    drafter runs in a process of its own."""
    if (minedraft or {}).get("drafter") != "process":
        env = {**IN_PROCESS_CORE, **(env or {})}
    spec = dict(spec or {"method": "draft_model", "num_speculative_tokens": 1})
    method, draft, k = spec.pop("method"), spec.pop("model", None), spec.pop("num_speculative_tokens")
    return run_mode(mode, target, draft, method=method, k=k, speculation_extra=spec, num_requests=N_REQUESTS,
                    log_dir=log_dir, minedraft=minedraft, env=env)


def run_specs(runs: dict[str, dict]) -> dict[str, dict]:
    """:func:`run_spec` for each entry (name -> its keyword arguments), two engines at a time, each on a core
    of its own (:func:`harness.sidebyside.two_at_a_time`)."""
    return two_at_a_time({name: functools.partial(_run_spec_in, kwargs) for name, kwargs in runs.items()})


def _run_spec_in(kwargs: dict, env: dict[str, str]) -> dict:
    return run_spec(**kwargs, env=env)


def mismatched(expected: dict, result: dict) -> list[int]:
    """The requests whose tokens differ."""
    return [i for i, (a, b) in enumerate(zip(expected["tokens"], result["tokens"], strict=True)) if a != b]
