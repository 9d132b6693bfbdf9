"""Every monkeypatch of the ledger: the behaviour it adds, the guards it runs
before patching, and the README table generated from the ledger.

Behaviour tests are named ``test_patch_<ledger name>_...``; a test below
checks that every ledger entry has at least one.
"""

from __future__ import annotations

import importlib.metadata
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import minedraft.plugin
from minedraft.monkeypatch import LEDGER, make_patches, scoped_patch
from minedraft.monkeypatch.__main__ import main as monkeypatch_main
from minedraft.monkeypatch.ledger import MARKDOWN_BEGIN, MARKDOWN_END, render_markdown, section_in
from minedraft.monkeypatch.patching import PatchGuardError, apply_all

ROOT = Path(__file__).resolve().parents[2]
PATCH_DIR = ROOT / "minedraft" / "monkeypatch"


@pytest.fixture(scope="module", autouse=True)
def plugin_stage_applied():
    """As in every vLLM process: the plugin-stage patches are in place for good
    (vLLM loads the plugin itself, e.g. when EngineArgs are built)."""
    minedraft.plugin.register()


def _fake_runner_cls():
    from vllm.v1.worker.cpu_model_runner import CPUModelRunner

    return type("FakeRunner", (CPUModelRunner,), {})


def _make_args(name: str) -> tuple:
    """Arguments of the patches that take some."""
    if name == "cpu_worker_runner":
        return (_fake_runner_cls(),)
    if name == "cli_vllm_version":
        return ("0.32.0",)
    return ()


# ------------------------------------------------------------------ guards


def _snapshot(patches) -> list:
    """What each patched attribute is now, code objects included (forward_context swaps code)."""
    values = [vars(p.target).get(name) for p in patches for name in p.replacements]
    return [(v, getattr(v, "__code__", None)) for v in values]


@pytest.mark.parametrize("name", list(LEDGER))
@pytest.mark.parametrize("change", ["removed", "not_a_function"])
def test_every_guard_refuses_a_changed_attribute_before_anything_is_patched(name, change):
    """Each attribute of each patch in turn is removed or replaced by a plain
    object: the whole group must refuse in one line and change nothing."""
    patches = make_patches(name, *_make_args(name))
    before = _snapshot(patches)
    for target, attr in [(p.target, a) for p in patches for a in p.replacements]:
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


def test_guard_names_a_changed_signature():
    from vllm.engine.arg_utils import EngineArgs

    def create_engine_config(self, usage_context=None, headless=False, new_option=None):
        raise AssertionError("never called")

    (patch, _) = make_patches("engine_config")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(EngineArgs, "create_engine_config", create_engine_config)
        with pytest.raises(PatchGuardError, match=r"takes \(self, usage_context, headless, new_option\), "
                                                  r"expected \(self, usage_context, headless\)"):
            patch.apply()


def _context_kept_elsewhere():
    """A get_forward_context whose storage is not vLLM 0.32.0's global."""
    return _somewhere_else  # noqa: F821 (never called)


def test_forward_context_guard_notices_another_storage():
    import vllm.forward_context as fc

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(fc, "get_forward_context", _context_kept_elsewhere)
        with pytest.raises(PatchGuardError, match="no longer reads the global '_forward_context'"):
            apply_all(make_patches("forward_context"))


# ------------------------------------------------------------------ behaviour


def test_patch_engine_config_resolves_the_short_name():
    from vllm.config.scheduler import SchedulerConfig

    from minedraft.scheduling.scheduler import MineDraftScheduler

    config = SchedulerConfig(scheduler_cls="minedraft", max_model_len=512, is_encoder_decoder=False)
    assert config.get_scheduler_cls() is MineDraftScheduler


def test_patch_engine_config_refuses_a_bad_config_before_vllm_builds_it(tmp_path):
    from scheduler_harness import fake_model_dir
    from vllm.engine.arg_utils import EngineArgs

    from minedraft.config.validation import MineDraftConfigError

    args = EngineArgs(model=fake_model_dir(tmp_path), skip_tokenizer_init=True, scheduler_cls="minedraft")
    with pytest.raises(MineDraftConfigError, match="needs speculative decoding"):
        args.create_engine_config()


def test_patch_engine_config_calls_through_when_minedraft_is_not_selected():
    from minedraft.monkeypatch.patch_engine_config import _wrap_create_engine_config

    calls = []
    create = _wrap_create_engine_config(lambda self, *a, **k: calls.append((self, a, k)) or "config")
    args = SimpleNamespace(scheduler_cls=None, async_scheduling=True, worker_cls="auto")
    assert create(args, "usage", headless=True) == "config"
    assert calls == [(args, ("usage",), {"headless": True})]
    assert args == SimpleNamespace(scheduler_cls=None, async_scheduling=True, worker_cls="auto")


def test_patch_metrics_takes_minedraft_stats_out_before_vllm_loggers():
    from minedraft.metrics.prometheus import MineDraftMetrics
    from minedraft.metrics.stats import PAYLOAD_KEY, MineDraftStats
    from minedraft.monkeypatch.patch_metrics import _wrap_record, _wrap_snapshot

    seen = []
    record = _wrap_record(lambda self, stats, *a, **k: seen.append(stats.kv_connector_stats))
    before = MineDraftMetrics.get().counters["parallel_steps"]._value.get()
    stats = SimpleNamespace(kv_connector_stats={PAYLOAD_KEY: MineDraftStats(parallel_steps=3).to_payload(),
                                                "connector": 1})
    record(None, stats, None)
    assert seen == [{"connector": 1}]  # vLLM's loggers never see MineDraft's key
    assert MineDraftMetrics.get().counters["parallel_steps"]._value.get() == before + 3

    snapshot = _wrap_snapshot(lambda: [])()
    assert any(m.name == "minedraft:parallel_steps" and m.value == before + 3 for m in snapshot)


def test_patch_cpu_worker_runner_swaps_the_runner_class_for_one_block_only():
    import vllm.v1.worker.cpu_worker as cpu_worker

    stock = cpu_worker.CPUModelRunner
    runner_cls = _fake_runner_cls()
    with scoped_patch("cpu_worker_runner", runner_cls):
        assert cpu_worker.CPUModelRunner is runner_cls
    assert cpu_worker.CPUModelRunner is stock
    with pytest.raises(TypeError, match="must subclass vLLM's CPUModelRunner"):
        make_patches("cpu_worker_runner", dict)


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


def test_patch_cpu_kernel_lock_runs_every_shared_kernel_under_one_lock(monkeypatch):
    import vllm._custom_ops as ops

    from minedraft.monkeypatch.patch_cpu_kernel_lock import KERNEL_LOCK, SHARED_SCRATCHPAD_KERNELS

    seen = []
    for name in SHARED_SCRATCHPAD_KERNELS:
        monkeypatch.setattr(ops, name, lambda *a, _n=name, **k: seen.append((_n, KERNEL_LOCK.locked())))
    with scoped_patch("cpu_kernel_lock"):
        for name in SHARED_SCRATCHPAD_KERNELS:
            getattr(ops, name)()
    assert seen == [(name, True) for name in SHARED_SCRATCHPAD_KERNELS]
    assert not KERNEL_LOCK.locked()


def test_patch_cpu_sampling_expand_uses_torch_except_for_int64():
    from minedraft.monkeypatch.patch_cpu_sampling_expand import _make_expand

    to_vllm = []
    expand = _make_expand(lambda *args: to_vllm.append(args) or "vllm's kernel")
    cu = torch.tensor([2, 5, 6], dtype=torch.int32)
    got = expand(torch.tensor([0.6, -1.0, 1.3]), cu, 6, -1, 1)
    assert got.tolist() == pytest.approx([0.6, 0.6, 1.0, 1.0, 1.0, 1.3]) and to_vllm == []
    assert expand(torch.tensor([7, 8, 9]), cu, 6) == "vllm's kernel" and len(to_vllm) == 1


def test_patch_cli_vllm_version_answers_for_vllm_only():
    from vllm.platforms import vllm_version_matches_substr

    stock = importlib.metadata.version
    pytest_version = stock("pytest")
    with scoped_patch("cli_vllm_version", "0.32.0"):
        assert importlib.metadata.version("vllm") == "0.32.0+cpu"
        assert importlib.metadata.version("pytest") == pytest_version
        assert vllm_version_matches_substr("cpu")  # vLLM's platform detection still picks CPU
    assert importlib.metadata.version is stock


# ------------------------------------------------------------------ the ledger


def test_every_patch_module_is_in_the_ledger_and_every_entry_has_one():
    modules = {p.stem.removeprefix("patch_") for p in PATCH_DIR.glob("patch_*.py")}
    assert modules == set(LEDGER)


def test_every_ledger_entry_has_a_behaviour_test():
    tests = [name for name in globals() if name.startswith("test_patch_")]
    missing = [name for name in LEDGER if not any(t.startswith(f"test_patch_{name}_") for t in tests)]
    assert not missing


def test_every_upstream_diff_exists_and_is_listed_in_patches_readme():
    listed = (ROOT / "patches" / "README.md").read_text()
    for name, entry in LEDGER.items():
        assert entry.related_pr and entry.future_plan, name
        if entry.upstream_diff is not None:
            assert (ROOT / "patches" / entry.upstream_diff).is_file(), entry.upstream_diff
            assert entry.upstream_diff in listed, entry.upstream_diff


def test_readme_patch_table_is_the_one_generated_from_the_ledger():
    readme = (ROOT / "README.md").read_text()
    assert readme.count(MARKDOWN_BEGIN) == 1 and readme.count(MARKDOWN_END) == 1
    assert section_in(readme) == render_markdown(), (
        "README's patch table differs from the ledger: paste `python -m minedraft.monkeypatch --markdown` "
        "between the patches:begin/end markers"
    )


def test_markdown_command_prints_the_generated_section(capsys):
    monkeypatch_main(["--markdown"])
    out = capsys.readouterr().out
    assert out == render_markdown()
    for name in LEDGER:
        assert f"| `{name}` |" in out


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
