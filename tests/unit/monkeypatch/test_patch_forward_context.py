"""The ``forward_context`` patch (minedraft/monkeypatch/patch_forward_context.py): vLLM's forward
context per thread, so the target and the draft lane each have their own."""

from __future__ import annotations

import threading

import pytest

from minedraft.monkeypatch import make_patches, scoped_patch
from minedraft.monkeypatch.patching import PatchGuardError, apply_all


def _context_kept_elsewhere():
    """A get_forward_context whose storage is not vLLM 0.32.0's global."""
    return _somewhere_else  # noqa: F821 (never called)


def test_forward_context_guard_notices_another_storage():
    import vllm.forward_context as fc

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(fc, "get_forward_context", _context_kept_elsewhere)
        with pytest.raises(PatchGuardError, match="no longer reads the global '_forward_context'"):
            apply_all(make_patches("forward_context"))


def test_patch_forward_context_is_per_thread():
    import vllm.forward_context as fc
    from vllm.forward_context import get_forward_context  # bound by name, as vLLM does

    stock_code = fc.get_forward_context.__code__
    seen = {}

    def forward(label):
        with fc.override_forward_context(label):
            barrier.wait()  # both threads hold their own context at once
            seen[label] = (get_forward_context(), fc.is_forward_context_available())

    barrier = threading.Barrier(2, timeout=10)
    with scoped_patch("forward_context"):
        threads = [threading.Thread(target=forward, args=(label,)) for label in ("target", "draft")]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert not fc.is_forward_context_available()
    assert seen == {"target": ("target", True), "draft": ("draft", True)}
    assert fc.get_forward_context.__code__ is stock_code
