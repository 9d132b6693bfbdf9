"""Engine arguments per mode: the one place the demo, tests and benchmarks build them.

A mode is one of :data:`harness.modes.BENCH_MODES` (``no_sd``, ``stock_sd``,
``minedraft_parallel``, ``minedraft_auto``). The same arguments drive an
offline engine (``LLM(**kwargs)``) or a server (:func:`serve_flags`). MineDraft's
settings travel in ``additional_config["minedraft"]``, as a user would pass them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from harness.modes import BENCH_MODES, MINEDRAFT_MODE_OF
from minedraft.config.settings import CONFIG_KEY

# MineDraft's settings for the drafter as its own engine on core 1 (the target on core 0 by its own binding): the
# layout of the demo's own-core row and of the dedicated-drafter benchmarks on a 2-core machine.
PROCESS_DRAFTER_ON_CORE_1 = {"drafter": "process", "drafter_device": "cpu:1"}
# What every engine of the kit's float32 models on CPU runs with unless told otherwise.
CPU_DEFAULTS = dict(dtype="float32", enforce_eager=True, seed=0, block_size=32, disable_log_stats=False)


@dataclass(frozen=True)
class Speculation:
    """The speculative config every speculative mode of a comparison shares."""

    draft: str | None  # the draft model's path (None for ngram)
    k: int = 3
    method: str = "draft_model"
    extra: dict[str, Any] = field(default_factory=dict)  # e.g. prompt_lookup_max, synthetic acceptance

    def config(self) -> dict[str, Any]:
        spec = {"method": self.method, "num_speculative_tokens": self.k, **self.extra}
        if self.draft is not None:
            spec["model"] = self.draft
        return spec


def engine_kwargs(mode: str, target: str, speculation: Speculation | None = None, *,
                  minedraft: dict[str, Any] | None = None, defaults: dict[str, Any] | None = None,
                  **engine: Any) -> dict[str, Any]:
    """``LLM``/``EngineArgs`` keyword arguments of ``mode`` for ``target``.

    ``minedraft``: more MineDraft settings (``lane``, ...); ``engine``: any other
    engine argument, overriding ``defaults`` (:data:`CPU_DEFAULTS` unless given).
    """
    if mode not in BENCH_MODES:
        raise ValueError(f"unknown mode {mode!r}: expected one of {', '.join(BENCH_MODES)}")
    kwargs = {**(CPU_DEFAULTS if defaults is None else defaults), "model": target, **engine}
    if mode != "no_sd":
        if speculation is None:
            raise ValueError(f"mode {mode!r} needs a Speculation")
        kwargs["speculative_config"] = speculation.config()
    if mode in MINEDRAFT_MODE_OF:
        kwargs["scheduler_cls"] = "minedraft"
        settings = {"mode": MINEDRAFT_MODE_OF[mode], **(minedraft or {})}
        kwargs["additional_config"] = {**kwargs.get("additional_config", {}), CONFIG_KEY: settings}
    return kwargs


def serve_flags(kwargs: dict[str, Any]) -> list[str]:
    """The ``vllm serve`` / ``minedraft serve`` arguments equivalent to ``kwargs``."""
    argv = [str(kwargs["model"])]
    for name, value in kwargs.items():
        if name == "model" or value is None or value is False:
            continue
        flag = "--" + name.replace("_", "-")
        if value is True:
            argv.append(flag)
        else:
            argv += [flag, json.dumps(value) if isinstance(value, (dict, list)) else str(value)]
    return argv


def example_connector(role: str, store) -> dict[str, Any]:
    """``kv_transfer_config`` of vLLM's ExampleConnector with patches/0010's fix (harness/example_connector_fix.py),
    storing in folder ``store``; ``role``: ``kv_producer`` (a prefill instance) or ``kv_consumer`` (a decode one)."""
    return {"kv_connector": "WholeBlockExampleConnector", "kv_connector_module_path": "harness.example_connector_fix",
            "kv_role": role, "kv_connector_extra_config": {"shared_storage_path": str(store)}}
