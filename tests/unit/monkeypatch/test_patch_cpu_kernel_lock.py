"""minedraft/monkeypatch/patch_cpu_kernel_lock.py: vLLM's CPU kernels that share one scratchpad run one at a time."""

from __future__ import annotations


def test_cpu_kernel_lock_serialises_shared_scratchpad_kernels(monkeypatch):
    import vllm._custom_ops as ops

    from minedraft.monkeypatch import patch_cpu_kernel_lock as lock_patch

    seen = []
    for name in lock_patch.SHARED_SCRATCHPAD_KERNELS:
        monkeypatch.setattr(ops, name, lambda *a, _n=name, **k: seen.append((_n, lock_patch.KERNEL_LOCK.locked())))
    patches = lock_patch.make_patches()
    for p in patches:
        p.apply()
    try:
        for name in lock_patch.SHARED_SCRATCHPAD_KERNELS:
            getattr(ops, name)()
    finally:
        for p in patches:
            p.undo()
    assert seen == [(name, True) for name in lock_patch.SHARED_SCRATCHPAD_KERNELS]
    assert not lock_patch.KERNEL_LOCK.locked()


def test_patch_cpu_kernel_lock_runs_every_shared_kernel_under_one_lock(monkeypatch):
    import vllm._custom_ops as ops

    from minedraft.monkeypatch import scoped_patch
    from minedraft.monkeypatch.patch_cpu_kernel_lock import KERNEL_LOCK, SHARED_SCRATCHPAD_KERNELS

    seen = []
    for name in SHARED_SCRATCHPAD_KERNELS:
        monkeypatch.setattr(ops, name, lambda *a, _n=name, **k: seen.append((_n, KERNEL_LOCK.locked())))
    with scoped_patch("cpu_kernel_lock"):
        for name in SHARED_SCRATCHPAD_KERNELS:
            getattr(ops, name)()
    assert seen == [(name, True) for name in SHARED_SCRATCHPAD_KERNELS]
    assert not KERNEL_LOCK.locked()
