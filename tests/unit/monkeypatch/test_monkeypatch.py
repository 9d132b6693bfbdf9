"""The patch stages of minedraft/monkeypatch/__init__.py: every ledger entry's patches made by
name (their guards refuse a changed vLLM before anything is patched), and the CPU kernel lock
switched on and off with the draft lane."""

from __future__ import annotations

import pytest

from minedraft.monkeypatch import LEDGER, make_patches
from minedraft.monkeypatch.patching import Patch, PatchGuardError, apply_all


def _make_args(name: str, request: pytest.FixtureRequest) -> tuple:
    """Arguments of the patches that take some."""
    if name == "cpu_worker_runner":
        return (request.getfixturevalue("fake_runner_cls"),)
    if name == "cli_vllm_version":
        return ("0.32.0",)
    return ()


def _snapshot(patches) -> list:
    """What each patched attribute is now, code objects included (forward_context swaps code)."""
    values = [vars(p.target).get(name) for p in patches if isinstance(p, Patch) for name in p.replacements]
    return [(v, getattr(v, "__code__", None)) for v in values]


@pytest.mark.parametrize("name", list(LEDGER))
@pytest.mark.parametrize("change", ["removed", "not_a_function"])
def test_every_guard_refuses_a_changed_attribute_before_anything_is_patched(name, change, request):
    """Each attribute of each patch in turn is removed or replaced by a plain
    object: the whole group must refuse in one line and change nothing. (A group's
    NewField, which adds an attribute, comes last; its guards: test_patching.py.)"""
    patches = make_patches(name, *_make_args(name, request))
    before = _snapshot(patches)
    for target, attr in [(p.target, a) for p in patches if isinstance(p, Patch) for a in p.replacements]:
        with pytest.MonkeyPatch.context() as mp:
            if change == "removed":
                mp.delattr(target, attr)
            else:
                mp.setattr(target, attr, object())
            with pytest.raises(PatchGuardError) as err:
                apply_all(patches)
            assert not any(p.applied for p in patches)
        message = str(err.value)
        assert message.startswith("minedraft: cannot patch ") and f".{attr}: it " in message
        assert "\n" not in message
        assert _snapshot(patches) == before


def test_cpu_kernel_lock_is_on_only_while_a_draft_job_can_run():
    import vllm._custom_ops as ops

    from minedraft.monkeypatch import applied_patches, serialise_cpu_kernels

    original = ops.onednn_mm
    serialise_cpu_kernels(True)
    try:
        assert "cpu_kernel_lock" in applied_patches() and ops.onednn_mm is not original
        serialise_cpu_kernels(True)  # again: no change, no double wrapping
        assert ops.onednn_mm.__wrapped__ is original
    finally:
        serialise_cpu_kernels(False)
    assert "cpu_kernel_lock" not in applied_patches() and ops.onednn_mm is original
    serialise_cpu_kernels(False)  # already off: no change
    assert ops.onednn_mm is original
