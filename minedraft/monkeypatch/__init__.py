"""Every monkeypatch MineDraft applies to vLLM 0.32.0, and when.

LEDGER is the table the README and ``patches/README.md`` reproduce. Patches
are applied in two groups:

* ``apply_plugin_patches()`` runs from the ``vllm.general_plugins`` entry point
  in every vLLM process. These patches only act when MineDraft is selected.
* ``apply_worker_patches()`` runs when MineDraft's worker starts, so processes
  of engines that did not select MineDraft never see them.
"""

from __future__ import annotations

import contextlib
import importlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from minedraft.monkeypatch.patching import Patch


@dataclass(frozen=True)
class LedgerEntry:
    what: str
    why: str
    how: str
    upstream: str  # file under patches/
    removal: str


LEDGER: dict[str, LedgerEntry] = {
    "engine_config": LedgerEntry(
        what="EngineArgs.create_engine_config, SchedulerConfig.get_scheduler_cls",
        why="vLLM resolves scheduler_cls only as a dotted name, in the engine-core "
        "process after the model loaded; `--scheduler-cls minedraft` must work and "
        "bad configs must fail before the model loads.",
        how="When scheduler_cls selects MineDraft: rewrite the short name, turn off "
        "async scheduling, install MineDraft's worker where worker_cls is 'auto', "
        "validate; otherwise call through unchanged.",
        upstream="0001-scheduler-short-name-registry.patch",
        removal="When vLLM has a scheduler registry with a validation hook.",
    ),
    "metrics": LedgerEntry(
        what="StatLoggerManager.record/log, vllm.v1.engine.llm_engine.get_metrics_snapshot",
        why="SchedulerStats has no field for plugin statistics, and LLM.get_metrics() "
        "lists only vllm:* metrics.",
        how="The scheduler sends its counters under kv_connector_stats['minedraft']; the "
        "front end pops that key before vLLM's loggers run and exports minedraft:* "
        "Prometheus metrics plus a log line; the snapshot adds minedraft:* metrics.",
        upstream="0003-scheduler-stats-extra.patch",
        removal="When SchedulerStats carries an extension dict forwarded to stat loggers.",
    ),
    "cpu_worker_runner": LedgerEntry(
        what="vllm.v1.worker.cpu_worker.CPUModelRunner (module global), during "
        "MineDraftCPUWorker.init_device only",
        why="CPUWorker builds its model runner inside init_device, with no "
        "_make_model_runner hook as the GPU worker has.",
        how="Scoped: the name points at MineDraftCPUModelRunner while "
        "super().init_device() runs, and is restored right after.",
        upstream="0004-cpu-worker-make-model-runner.patch",
        removal="When CPUWorker uses an overridable _make_model_runner().",
    ),
    "forward_context": LedgerEntry(
        what="vllm.forward_context: get_forward_context, is_forward_context_available, "
        "override_forward_context",
        why="The forward context is one process-wide global; the CPU draft lane runs "
        "the drafter's forward in a second thread while the target runs.",
        how="Store the context in a threading.local (code objects swapped in place, "
        "originals kept for undo). Applied by MineDraft's worker only.",
        upstream="0002-thread-local-forward-context.patch",
        removal="When vLLM keeps the forward context in a ContextVar/thread-local.",
    ),
    "cpu_kernel_lock": LedgerEntry(
        what="vllm._custom_ops: onednn_mm, onednn_scaled_mm, cpu_attn_get_scheduler_metadata, "
        "cpu_attention_with_kv_cache, cpu_gemm_wna16, cpu_fused_moe, cpu_fused_moe_int8",
        why="These CPU kernels share one process-wide static scratchpad and oneDNN stream: "
        "run from two threads at once they corrupt each other (measured: wrong tokens, "
        "a dead engine).",
        how="Each wrapper takes one process-wide lock; the rest of both forwards still "
        "overlaps. Applied by MineDraft's worker only with the CPU thread lane on an "
        "eager model.",
        upstream="0005-cpu-scratchpad-per-thread.patch",
        removal="When vLLM's CPU scratchpad and oneDNN stream are thread_local.",
    ),
    "cpu_sampling_expand": LedgerEntry(
        what="vllm.v1.sample.rejection_sampler.expand_batch_to_tokens",
        why="On CPU the expand kernel's wrapper passes int64 copies of float32/int32 "
        "tensors to a C++ kernel, so the expanded temperature, top-k and top-p stay "
        "uninitialised: stock speculative decoding samples from a wrong distribution "
        "at temperature > 0.",
        how="Tensors that are not int64 are expanded with torch.repeat_interleave; "
        "int64 ones still go to vLLM's kernel. Applied by MineDraft's worker on CPU "
        "platforms without Triton only.",
        upstream="0006-cpu-expand-kernel-dtypes.patch",
        removal="When vLLM's CPU _expand_kernel_impl handles every dtype.",
    ),
}

_lock = threading.Lock()
_applied: dict[str, list[Patch]] = {}


def _apply(name: str) -> None:
    from minedraft.log import get_logger

    with _lock:
        if name in _applied:
            return
        module = importlib.import_module(f"minedraft.monkeypatch.patch_{name}")
        patches = module.make_patches()
        for patch in patches:
            patch.apply()
        _applied[name] = patches
    get_logger(__name__).debug("minedraft: applied patch %s", name)


def apply_plugin_patches() -> None:
    _apply("engine_config")
    _apply("metrics")


def apply_worker_patches() -> None:
    from vllm.platforms import current_platform
    from vllm.triton_utils import HAS_TRITON

    _apply("forward_context")
    if current_platform.is_cpu() and not HAS_TRITON:
        _apply("cpu_sampling_expand")


def apply_cpu_overlap_patches() -> None:
    _apply("cpu_kernel_lock")


@contextlib.contextmanager
def scoped_patch(name: str) -> Iterator[None]:
    """Apply a patch for the duration of a ``with`` block only."""
    module = importlib.import_module(f"minedraft.monkeypatch.patch_{name}")
    patches = module.make_patches()
    for patch in patches:
        patch.apply()
    try:
        yield
    finally:
        for patch in reversed(patches):
            patch.undo()


def applied_patches() -> list[str]:
    return sorted(_applied)


def undo_all() -> None:
    """Restore vLLM exactly (tests only)."""
    with _lock:
        for patches in _applied.values():
            for patch in reversed(patches):
                patch.undo()
        _applied.clear()
