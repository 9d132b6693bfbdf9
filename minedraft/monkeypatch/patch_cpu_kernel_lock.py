"""Serialise vLLM's CPU kernels that share one process-wide scratchpad.

vLLM's CPU kernels (attention, oneDNN matmul, MoE, WNA16 GEMM) take their
workspace from ``cpu_utils::ScratchPadManager::get_scratchpad_manager()``, a
function-local ``static`` (``csrc/cpu/utils.cpp``), and the oneDNN ones run on
one ``static dnnl::stream``. Each OpenMP thread of a kernel writes to a slice
of that buffer chosen by its thread number, so two kernels running at once
from two host threads write into each other's slices, and a ``realloc`` in
one frees the buffer the other is using. Measured before this patch, with the
draft lane's forward beside the target's: 1 request in 16 diverged from the
target's greedy output, and one run of 48 requests killed the engine.

Here every Python entry point of those kernels (``vllm._custom_ops``; vLLM
calls them only through that module) takes one lock. Everything else in a
forward (norms, activations, rotary, the sampler, input preparation and all
Python) still runs concurrently with the other lane. Applied only when the
CPU thread lane is in use, and only for eager models: a compiled graph calls
the kernels without going through these Python wrappers.

Upstream diff: ``patches/0005-cpu-scratchpad-per-thread.patch`` (the
scratchpad and the oneDNN stream become ``thread_local``; no lock needed).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

from minedraft.monkeypatch.patching import Patch, is_function

SHARED_SCRATCHPAD_KERNELS = (
    "onednn_mm",
    "onednn_scaled_mm",
    "cpu_attn_get_scheduler_metadata",
    "cpu_attention_with_kv_cache",
    "cpu_gemm_wna16",
    "cpu_fused_moe",
    "cpu_fused_moe_int8",
)

KERNEL_LOCK = threading.Lock()


def _serialised(kernel: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(kernel)
    def serialised(*args, **kwargs):
        with KERNEL_LOCK:
            return kernel(*args, **kwargs)

    return serialised


def make_patches() -> list[Patch]:
    import vllm._custom_ops as ops

    # Every kernel must be there: one that moved would run unlocked beside the
    # other lane and corrupt the shared scratchpad without a word.
    return [
        Patch(
            ops,
            {name: _serialised for name in SHARED_SCRATCHPAD_KERNELS},
            guards={name: is_function() for name in SHARED_SCRATCHPAD_KERNELS},
        )
    ]
