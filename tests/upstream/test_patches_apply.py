"""Every diff in ``patches/`` applies to vLLM 0.32.0's source and adds what it says.

The source is the vLLM 0.32.0 sdist (``vllm_source.py``, fetched once into
``~/.cache/minedraft`` or ``$MINEDRAFT_VLLM_SRC``). Each diff is applied with ``git apply`` (exact
context, no fuzz) to a copy of the files it touches, alone and then all of
them in order. Where the patched file can run here, its behaviour is tested
against the patched source itself, loaded as a module beside the installed
vLLM (whose other modules it imports); for the same behaviour the unpatched
file is loaded too where the difference is observable:

* 0001: ``SchedulerConfig.get_scheduler_cls`` resolves ``"minedraft"`` through
  the ``vllm.scheduler_plugins`` entry point MineDraft's ``pyproject.toml``
  declares, and names the registered schedulers for an unknown one;
* 0002: two threads each hold their own forward context;
* 0003: ``SchedulerStats.extra`` exists, empty by default;
* 0004: ``CPUWorker.init_device`` builds its runner through ``_make_model_runner``
  (checked in the patched source: building a real worker needs a whole engine);
* 0006: the CPU expand fallback fills float32 and int32 outputs (the unpatched
  one leaves them as they were);
* 0007: ``SchedulerOutput`` carries the lane plan, the two fields of
  ``MineDraftSchedulerOutput`` with its defaults;
* 0008: a streaming-input chunk rolls its session back to
  ``streaming_num_kept_tokens`` (the unpatched scheduler keeps every computed
  token), as ``DraftSessionScheduler`` does through ``extra_args``;
* 0009: the engine core's post-step collects drafts only when the scheduler
  expects some (vLLM's scheduler: not after a step at depth 0), and not when a
  new request waits in its input queue and the scheduler skips a held round;
* 0010: vLLM's ExampleConnector finds nothing stored for a prompt shorter than
  a block and one token, and never answers a negative number of tokens to load
  (the unpatched one answers -block_size for a one-token prompt); a consumer
  stores nothing (the unpatched one stores every new prompt it does not find);
  a prompt computed in chunks is stored whole, in the step of its last stored
  block (the unpatched one stores the first step's blocks: fewer slots than tokens);
* 0011: the front end asks the scheduler class to validate each request's parameters
  (``SchedulerInterface.validate_request_params``, by default nothing to check): its
  ``ValueError`` is vLLM's ``VLLMValidationError`` naming ``extra_args``.

0005 is C++ (``csrc/cpu``): it cannot be compiled here (no vLLM CPU build on
this machine), so it is only applied; its behaviour is tested through the
monkeypatch that mirrors it (``tests/unit/monkeypatch/test_patch_cpu_kernel_lock.py``;
each patch module has its ``test_patch_<name>.py`` there), as 0001-0004, 0006, 0009 and 0011 also are (0007
and 0008 replace subclasses, not monkeypatches; 0010 the tests' connector subclass,
``harness/example_connector_fix.py``).
"""

from __future__ import annotations

import importlib.util
import inspect
import py_compile
import queue
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest
import torch
import vllm_source

ROOT = Path(__file__).resolve().parents[2]
PATCHES = sorted((ROOT / "patches").glob("*.patch"))
TOUCHED = re.compile(r"^\+\+\+ b/(\S+)", re.MULTILINE)


def touched_files(patch: Path) -> list[str]:
    return TOUCHED.findall(patch.read_text())


def copy_touched(source: Path, dest: Path, patches: list[Path]) -> None:
    for patch in patches:
        for rel in touched_files(patch):
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source / rel, dest / rel)


def git_apply(tree: Path, patch: Path, *flags: str) -> subprocess.CompletedProcess:
    # --unsafe-paths is not needed: every path is relative to the tree.
    return subprocess.run(["git", "apply", "--verbose", *flags, str(patch)], cwd=tree, capture_output=True,
                          text=True, timeout=60)


@pytest.fixture(scope="module")
def source() -> Path:
    import vllm

    tree = vllm_source.fetch(vllm_source.cache_dir())
    assert vllm.__version__.startswith(vllm_source.VERSION)
    return tree


@pytest.fixture(scope="module")
def patched(source, tmp_path_factory) -> Path:
    """Every patch applied in order to a copy of the files they touch."""
    tree = tmp_path_factory.mktemp("patched")
    copy_touched(source, tree, PATCHES)
    for patch in PATCHES:
        proc = git_apply(tree, patch)
        assert proc.returncode == 0, f"{patch.name}:\n{proc.stderr}"
    return tree


def load(tree: Path, rel: str, name: str) -> ModuleType:
    """``tree/rel`` as module ``name``, importing the installed vLLM for everything else."""
    spec = importlib.util.spec_from_file_location(name, tree / rel)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # pydantic resolves the dataclasses' annotations through it
    spec.loader.exec_module(module)
    return module


# ------------------------------------------------------------------ applying


def test_every_patch_is_found():
    assert [p.name[:4] for p in PATCHES] == [f"{i:04d}" for i in range(1, len(PATCHES) + 1)]
    assert all(touched_files(p) for p in PATCHES)


@pytest.mark.parametrize("patch", PATCHES, ids=lambda p: p.name[:4])
def test_patch_applies_cleanly_to_the_sdist(source, patch, tmp_path):
    copy_touched(source, tmp_path, [patch])
    check = git_apply(tmp_path, patch, "--check")
    assert check.returncode == 0, check.stderr
    proc = git_apply(tmp_path, patch)
    assert proc.returncode == 0, proc.stderr
    for rel in touched_files(patch):
        assert (tmp_path / rel).read_bytes() != (source / rel).read_bytes(), f"{rel} unchanged"
        if rel.endswith(".py"):
            py_compile.compile(str(tmp_path / rel), doraise=True)
    assert git_apply(tmp_path, patch, "--check").returncode != 0, "applies twice: the diff changes nothing"


# ------------------------------------------------------------------ behaviour of the patched source


def test_0001_short_names_resolve_through_the_entry_point_group(patched):
    from minedraft.scheduling.scheduler import MineDraftScheduler

    scheduler = load(patched, "vllm/config/scheduler.py", "patched_vllm_config_scheduler")
    config = scheduler.SchedulerConfig(scheduler_cls="minedraft", max_model_len=512, is_encoder_decoder=False)
    assert config.get_scheduler_cls() is MineDraftScheduler
    unknown = scheduler.SchedulerConfig(scheduler_cls="nosuch", max_model_len=512, is_encoder_decoder=False)
    with pytest.raises(ValueError, match=r"Unknown scheduler 'nosuch'; registered: \[.*'minedraft'.*\]"):
        unknown.get_scheduler_cls()
    qualname = scheduler.SchedulerConfig(scheduler_cls="minedraft.scheduling.scheduler.MineDraftScheduler",
                                         max_model_len=512, is_encoder_decoder=False)
    assert qualname.get_scheduler_cls() is MineDraftScheduler  # dotted names: unchanged


@pytest.mark.parametrize("tree", ["source", "patched"])
def test_0002_each_thread_has_its_own_forward_context(tree, request):
    module = load(request.getfixturevalue(tree), "vllm/forward_context.py", f"{tree}_vllm_forward_context")
    main_context, lane_context = object(), object()
    seen = {}

    def lane():
        seen["inherited"] = module.is_forward_context_available()
        with module.override_forward_context(lane_context):
            seen["own"] = module.get_forward_context()

    with module.override_forward_context(main_context):
        thread = threading.Thread(target=lane)
        thread.start()
        thread.join()
        seen["main"] = module.get_forward_context()
    if tree == "patched":
        assert seen == {"inherited": False, "own": lane_context, "main": main_context}
    else:  # one global: the lane sees the main thread's context
        assert seen["inherited"] is True


def test_0003_scheduler_stats_carry_an_extra_dict(patched):
    stats = load(patched, "vllm/v1/metrics/stats.py", "patched_vllm_v1_metrics_stats")
    assert stats.SchedulerStats().extra == {}
    payload = {"minedraft": {"parallel_steps": 3.0}}
    assert stats.SchedulerStats(extra=payload).extra == payload
    # MineDraft's carrier uses the field where vLLM has it, and leaves kv_connector_stats alone.
    from minedraft.metrics.stats import attach, detach

    carried = stats.SchedulerStats()
    attach(carried, {"parallel_steps": 3})
    assert carried.extra == {"minedraft": {"parallel_steps": 3}} and carried.kv_connector_stats is None
    assert detach(carried) == {"parallel_steps": 3} and carried.extra == {}


def test_0004_cpu_worker_builds_its_runner_through_a_hook(patched):
    worker = load(patched, "vllm/v1/worker/cpu_worker.py", "patched_vllm_v1_worker_cpu_worker")
    assert "self.model_runner: CPUModelRunner = self._make_model_runner()" in inspect.getsource(
        worker.CPUWorker.init_device)
    assert set(inspect.signature(worker.CPUWorker._make_model_runner).parameters) == {"self"}


@pytest.mark.parametrize("tree", ["source", "patched"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int32])
def test_0006_cpu_expand_fills_float32_and_int32_outputs(tree, dtype, request):
    module = load(request.getfixturevalue(tree), "vllm/utils/cpu_triton_utils.py", f"{tree}_vllm_cpu_triton_utils")
    values = torch.tensor([6, -1, 13], dtype=dtype)
    cu_num_tokens = torch.tensor([2, 5, 6], dtype=torch.int32)
    output = torch.full((6,), 99, dtype=dtype)
    module._expand_kernel_impl(output, values, cu_num_tokens, -1, 1)
    if tree == "patched":
        assert output.tolist() == [6, 6, 1, 1, 1, 13]
    else:  # the int64 copy took the result
        assert output.tolist() == [99] * 6


def test_0007_scheduler_output_carries_the_lane_plan(patched):
    """The four fields of MineDraftSchedulerOutput, with its defaults: the subclass could go."""
    import dataclasses

    from vllm.v1.core.sched.output import SchedulerOutput

    from minedraft.contract import MineDraftSchedulerOutput

    output = load(patched, "vllm/v1/core/sched/output.py", "patched_vllm_v1_core_sched_output")
    empty = output.SchedulerOutput.make_empty()
    assert ((empty.defer_drafts, empty.draft_only_req_ids, empty.drafts_after_output, empty.undrafted_req_ids)
            == (False, [], False, frozenset()))
    added = {f.name for f in dataclasses.fields(output.SchedulerOutput)} - {
        f.name for f in dataclasses.fields(SchedulerOutput)}
    ours = {f.name for f in dataclasses.fields(MineDraftSchedulerOutput)} - {
        f.name for f in dataclasses.fields(SchedulerOutput)}
    assert added == ours == {"defer_drafts", "draft_only_req_ids", "drafts_after_output", "undrafted_req_ids"}
    plain = MineDraftSchedulerOutput.extend(SchedulerOutput.make_empty(), [], False)
    assert ((plain.defer_drafts, plain.draft_only_req_ids, plain.drafts_after_output, plain.undrafted_req_ids)
            == (empty.defer_drafts, empty.draft_only_req_ids, empty.drafts_after_output, empty.undrafted_req_ids))


def _run_session(scheduler_module, request_module, tmp_path, kept: int | None) -> list[int]:
    """A streaming session drafts 3 tokens after a 40-token prompt; then a chunk [55]
    arrives keeping ``kept`` tokens. The session's tokens after that chunk."""
    from scheduler_harness import fake_model_dir, make_scheduler
    from vllm import SamplingParams
    from vllm.v1.outputs import ModelRunnerOutput

    def chunk(tokens, **extra):
        return request_module.Request(request_id="s", prompt_token_ids=tokens, pooling_params=None,
                                      sampling_params=SamplingParams(max_tokens=3, ignore_eos=True),
                                      resumable=True, **extra)

    tmp_path.mkdir()
    sched = make_scheduler(fake_model_dir(tmp_path), scheduler_module.Scheduler, k=None)
    sched.add_request(chunk(list(range(100, 140))))
    for token in (7, 8, 9):
        sched.update_from_output(sched.schedule(), ModelRunnerOutput(
            req_ids=["s"], req_id_to_index={"s": 0}, sampled_token_ids=[[token]], logprobs=None,
            prompt_logprobs_dict={}, pooler_output=[]))
    sched.add_request(chunk([55], **({} if kept is None else {"streaming_num_kept_tokens": kept})))
    session = sched.requests["s"]
    assert session.num_computed_tokens == (42 if kept is None else kept)
    return list(session.all_token_ids)


def test_0008_a_streaming_chunk_rolls_its_session_back(patched, tmp_path, monkeypatch):
    """DraftSessionScheduler's rollback as a field of the streaming update: the subclass could go."""
    import vllm.v1.request as installed_request
    from vllm.v1.core.sched import scheduler as installed_scheduler

    request = load(patched, "vllm/v1/request.py", "patched_vllm_v1_request")
    monkeypatch.setitem(sys.modules, "vllm.v1.request", request)  # the patched scheduler imports it
    scheduler = load(patched, "vllm/v1/core/sched/scheduler.py", "patched_vllm_v1_core_sched_scheduler")
    monkeypatch.setitem(sys.modules, "vllm.v1.request", installed_request)
    engine = load(patched, "vllm/v1/engine/__init__.py", "patched_vllm_v1_engine")
    assert "streaming_num_kept_tokens" in engine.EngineCoreRequest.__struct_fields__
    prompt = list(range(100, 140))
    assert _run_session(scheduler, request, tmp_path / "a", kept=41) == prompt + [7, 55]
    assert _run_session(scheduler, request, tmp_path / "b", kept=30) == prompt[:30] + [55]
    assert _run_session(scheduler, request, tmp_path / "c", kept=None) == prompt + [7, 8, 55]
    # Unpatched: the session keeps both computed drafts whatever the target accepted.
    assert _run_session(installed_scheduler, installed_request, tmp_path / "d", kept=None) == prompt + [7, 8, 55]


def test_0009_the_engine_core_collects_drafts_only_when_the_scheduler_expects_some(patched):
    """What monkeypatch/patch_draft_collection.py does, in vLLM's own post_step; vLLM's scheduler
    answers from the last step's depth, so its own depth table gains too."""
    interface = load(patched, "vllm/v1/core/sched/interface.py", "patched_vllm_v1_core_sched_interface")
    core = load(patched, "vllm/v1/engine/core.py", "patched_vllm_v1_engine_core")
    scheduler = load(patched, "vllm/v1/core/sched/scheduler.py", "patched_vllm_v1_core_sched_scheduler")
    assert interface.SchedulerInterface.expects_draft_tokens(None) is True  # the default keeps today's rule
    vllm_scheduler = object.__new__(scheduler.Scheduler)
    assert vllm_scheduler.expects_draft_tokens()  # before its first step
    taken = []
    for depth in (3, 0):
        vllm_scheduler._last_num_spec_tokens_to_schedule = depth
        engine = object.__new__(core.EngineCore)
        engine.check_for_draft_tokens, engine.async_scheduling = True, False
        engine.scheduler = vllm_scheduler
        engine.model_executor = SimpleNamespace(take_draft_token_ids=lambda d=depth: taken.append(d))
        engine.post_step(model_executed=True)
    assert taken == [3]
    assert interface.SchedulerInterface.skips_held_drafts(None) is False  # a scheduler that holds nothing
    for kind, skips in ((core.EngineCoreRequestType.ADD, True), (core.EngineCoreRequestType.ADD, False),
                        (core.EngineCoreRequestType.ABORT, True)):
        vllm_scheduler._last_num_spec_tokens_to_schedule = 3
        vllm_scheduler.skips_held_drafts = lambda s=skips: s
        engine.input_queue = queue.Queue()
        engine.input_queue.put_nowait((kind, None))
        engine.model_executor = SimpleNamespace(take_draft_token_ids=lambda k=kind, s=skips: taken.append((k, s)))
        engine.post_step(model_executed=True)
    assert taken == [3, (core.EngineCoreRequestType.ADD, False), (core.EngineCoreRequestType.ABORT, True)]


def _example_connector(module: ModuleType, storage: Path, block_size: int = 16):
    connector = object.__new__(module.ExampleConnector)
    connector._block_size, connector._storage_path = block_size, str(storage)
    connector._pending_stores = {}  # the patched __init__ sets it; the unpatched connector never reads it
    return connector


def test_0010_the_example_connector_loads_no_tokens_for_a_short_prompt(patched, tmp_path):
    """A prompt of one token, where something was stored under the empty prefix (a short prompt of the
    prefill instance): the unpatched connector answers -block_size tokens to load, which ends the engine in
    vLLM's Prometheus logger (tests/e2e/test_disaggregated.py met it)."""
    rel = "vllm/distributed/kv_transfer/kv_connector/v1/example_connector.py"
    patched_module = load(patched, rel, "patched_vllm_example_connector")
    from vllm.distributed.kv_transfer.kv_connector.v1 import example_connector as installed

    answers = {}
    for name, module in (("patched", patched_module), ("installed", installed)):
        connector = _example_connector(module, tmp_path / name)
        connector._generate_foldername_debug(torch.tensor([], dtype=torch.int64), [], create_folder=True)
        short = SimpleNamespace(prompt_token_ids=[7], mm_features=[])
        stored = SimpleNamespace(prompt_token_ids=list(range(40)), mm_features=[])
        connector._generate_foldername_debug(torch.tensor(list(range(32))), [], create_folder=True)
        answers[name] = [connector.get_num_new_matched_tokens(r, 0)[0] for r in (short, stored)]
        answers[name].append(connector.get_num_new_matched_tokens(stored, 48)[0])  # local hits beyond the store
    assert answers["patched"] == [0, 32, 0]
    assert answers["installed"] == [-16, 32, -16]


def test_0010_an_example_connector_consumer_stores_nothing(patched):
    rel = "vllm/distributed/kv_transfer/kv_connector/v1/example_connector.py"
    patched_module = load(patched, rel, "patched_vllm_example_connector")
    from vllm.distributed.kv_transfer.kv_connector.v1 import example_connector as installed

    new = SimpleNamespace(req_id="r", prompt_token_ids=list(range(40)), mm_features=[], block_ids=[[0, 1, 2]],
                          num_computed_tokens=0)
    step = _step(new=[new], scheduled={"r": 40})
    stores = {}
    for name, module in (("patched", patched_module), ("installed", installed)):
        for role, producer in (("consumer", False), ("producer", True)):
            connector = _example_connector(module, Path("/nonexistent"))
            connector._requests_need_load, connector._kv_transfer_config = {}, SimpleNamespace(is_kv_producer=producer)
            stores[name, role] = [r.is_store for r in connector.build_connector_meta(step).requests]
    assert stores["patched", "consumer"] == [] and stores["patched", "producer"] == [True]
    assert stores["installed", "consumer"] == [True]


def _step(new=(), cached=(), scheduled=None):
    """A SchedulerOutput's fields that ExampleConnector reads; ``cached``: (req id, new block ids,
    num_computed_tokens) of each cached request."""
    return SimpleNamespace(
        scheduled_new_reqs=list(new), num_scheduled_tokens=scheduled or {}, finished_req_ids=set(),
        scheduled_cached_reqs=SimpleNamespace(req_ids=[c[0] for c in cached], resumed_req_ids=set(),
                                              new_block_ids=[([*c[1]],) for c in cached],
                                              num_computed_tokens=[c[2] for c in cached]))


def test_0010_a_prompt_computed_in_chunks_is_stored_whole(patched):
    rel = "vllm/distributed/kv_transfer/kv_connector/v1/example_connector.py"
    patched_module = load(patched, rel, "patched_vllm_example_connector")
    from vllm.distributed.kv_transfer.kv_connector.v1 import example_connector as installed

    prompt = list(range(100))  # 96 tokens stored: 6 blocks of 16
    first = _step(new=[SimpleNamespace(req_id="r", prompt_token_ids=prompt, mm_features=[], block_ids=[[0, 1, 2, 3]],
                                       num_computed_tokens=0)], scheduled={"r": 64})
    second = _step(cached=[("r", [4, 5, 6], 64)], scheduled={"r": 36})
    stores = {}
    for name, module in (("patched", patched_module), ("installed", installed)):
        connector = _example_connector(module, Path("/nonexistent"))
        connector._requests_need_load, connector._kv_transfer_config = {}, SimpleNamespace(is_kv_producer=True)
        stores[name] = [[(len(r.token_ids), len(r.slot_mapping)) for r in connector.build_connector_meta(step).requests
                         if r.is_store] for step in (first, second)]
    assert stores["patched"] == [[], [(96, 96)]]
    assert stores["installed"] == [[(96, 64)], []]  # 96 tokens, slots for 64: the load fails on the shape


def test_0011_the_front_end_asks_the_scheduler_class_to_validate_a_request(patched, monkeypatch):
    """What monkeypatch/patch_request_validation.py does, in vLLM's own _validate_params; the processor
    is built around __init__ with what the method reads for a plain SamplingParams."""
    from vllm import SamplingParams
    from vllm.exceptions import VLLMValidationError

    interface = load(patched, "vllm/v1/core/sched/interface.py", "patched_vllm_v1_core_sched_interface")
    processor_module = load(patched, "vllm/v1/engine/input_processor.py", "patched_vllm_v1_engine_input_processor")
    monkeypatch.setattr(SamplingParams, "verify", lambda self, *args: None)

    class Strict(interface.SchedulerInterface):
        @classmethod
        def validate_request_params(cls, params):
            if (params.extra_args or {}).get("depth") == "bad":
                raise ValueError("depth must be an integer")

    def processor(scheduler_cls):
        p = object.__new__(processor_module.InputProcessor)
        p.model_config = SimpleNamespace(is_diffusion=False, return_sampling_mask=False, enable_trace_replay=False)
        p.speculative_config = p.structured_outputs_config = None
        p.renderer = SimpleNamespace(tokenizer=None)
        p.validate_logits_processors_params = lambda params: None
        p.resolve_watermarking = lambda params: False
        p.vllm_config = SimpleNamespace(scheduler_config=SimpleNamespace(get_scheduler_cls=lambda: scheduler_cls),
                                        reasoning_config=None)
        return p

    bad = SamplingParams(extra_args={"depth": "bad"})
    assert processor(interface.SchedulerInterface)._validate_params(bad, ("generate",)) is False  # the default
    assert processor(Strict)._validate_params(SamplingParams(), ("generate",)) is False
    with pytest.raises(VLLMValidationError, match="depth must be an integer") as e:
        processor(Strict)._validate_params(bad, ("generate",))
    assert e.value.parameter == "extra_args"
