"""The process drafter's parts that need no engine: device strings, settings, the front end's
rewrite of the speculative config, incremental histories, draft sessions. The proposer, the client,
the child protocol and the draft source are in tests/unit/process_drafter/ and tests/unit/worker/."""

from __future__ import annotations

import pytest
from scheduler_harness import fake_model_dir, make_scheduler
from vllm import SamplingParams
from vllm.engine.arg_utils import EngineArgs
from vllm.utils.import_utils import resolve_obj_by_qualname
from vllm.v1.outputs import ModelRunnerOutput
from vllm.v1.request import Request, RequestStatus

from minedraft.scheduling.mode_prior import placement
from minedraft.registry import DRAFT_ENGINE_KEY, PROPOSER_QUALNAME
from minedraft.process_drafter.history import Histories, SentHistories
from minedraft.config.placement import DrafterDevice
from minedraft.process_drafter.session_scheduler import KEEP_KEY, DraftSessionScheduler
from minedraft.process_drafter.sessions import _common_prefix
from minedraft.config.errors import MineDraftConfigError
from minedraft.config.settings import CONFIG_KEY, MineDraftSettings


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return fake_model_dir(tmp_path_factory.mktemp("model"))


# ------------------------------------------------------------------ devices and settings


@pytest.mark.parametrize(("text", "kind", "indices", "tp"), [
    ("cpu:1", "cpu", (1,), 1), ("cpu:2-3", "cpu", (2, 3), 1), ("cpu:4,6", "cpu", (4, 6), 1),
    ("cuda:1", "cuda", (1,), 1), ("cuda:4,5", "cuda", (4, 5), 2),
])
def test_device_strings(text, kind, indices, tp):
    device = DrafterDevice.parse(text)
    assert (device.kind, device.indices, device.tensor_parallel_size) == (kind, indices, tp)


@pytest.mark.parametrize("text", ["cpu", "gpu:1", "cuda:", "cpu:3-1", "cpu:a", "cuda:1:2"])
def test_bad_device_strings_are_one_line(text):
    with pytest.raises(MineDraftConfigError, match="expected cpu:<cores>") as err:
        DrafterDevice.parse(text)
    assert "\n" not in str(err.value)


def test_cpu_drafter_binds_its_process_and_threads_and_keeps_its_engine_in_process():
    env = DrafterDevice.parse("cpu:1").process_env({})
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "1" and env["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
    assert DrafterDevice.parse("cpu:1").cpu_affinity() == {1}


def test_cuda_drafter_indices_are_relative_to_the_visible_devices():
    env = DrafterDevice.parse("cuda:1").process_env({"CUDA_VISIBLE_DEVICES": "4,5,6"})
    assert env["CUDA_VISIBLE_DEVICES"] == "5"
    assert DrafterDevice.parse("cuda:0,2").process_env({})["CUDA_VISIBLE_DEVICES"] == "0,2"


def test_drafter_settings_from_environment_and_config():
    env = {"MINEDRAFT_DRAFTER": "process", "MINEDRAFT_DRAFTER_DEVICE": "cpu:1", "MINEDRAFT_DRAFTER_TIMEOUT_S": "0.5"}
    settings = MineDraftSettings.parse({}, environ=env)
    assert (settings.drafter, settings.drafter_device, settings.drafter_timeout_s) == ("process", "cpu:1", 0.5)
    given = {CONFIG_KEY: {"drafter": "process", "drafter_device": "cuda:1"}}
    assert MineDraftSettings.parse(given, environ={}).drafter_device == "cuda:1"
    assert MineDraftSettings.parse({}, environ={}).drafter == "in-process"


@pytest.mark.parametrize(("env", "message"), [
    ({"MINEDRAFT_DRAFTER": "process"}, "MINEDRAFT_DRAFTER=process needs MINEDRAFT_DRAFTER_DEVICE"),
    ({"MINEDRAFT_DRAFTER": "remote"}, "MINEDRAFT_DRAFTER='remote' is not one of in-process, process."),
    ({"MINEDRAFT_DRAFTER_DEVICE": "gpu1"}, "MINEDRAFT_DRAFTER_DEVICE='gpu1': expected cpu:<cores>"),
    ({"MINEDRAFT_DRAFTER_TIMEOUT_S": "soon"}, "MINEDRAFT_DRAFTER_TIMEOUT_S='soon' is not a number"),
    ({"MINEDRAFT_DRAFTER_TIMEOUT_S": "0"}, "drafter_timeout_s must be a positive number"),
])
def test_bad_drafter_settings_are_one_line(env, message):
    with pytest.raises(MineDraftConfigError) as err:
        MineDraftSettings.parse({}, environ=env)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_process_drafter_is_a_dedicated_placement():
    assert placement("cpu", "overlap", "process") == "dedicated"
    assert placement("cuda", "overlap", "process") == "dedicated"
    assert placement("cpu", "overlap") == "cpu-threads"


# ------------------------------------------------------------------ front end


def _engine_args(model_dir, minedraft: dict, **spec) -> EngineArgs:
    from vllm.plugins import load_general_plugins

    load_general_plugins()
    return EngineArgs(model=model_dir, skip_tokenizer_init=True, dtype="float32", max_model_len=512,
                      scheduler_cls="minedraft", additional_config={CONFIG_KEY: minedraft},
                      speculative_config={"method": "draft_model", "model": model_dir,
                                          "num_speculative_tokens": 3, **spec})


def test_front_end_gives_the_target_a_proposer_and_the_drafter_its_engine(model_dir):
    args = _engine_args(model_dir, {"drafter": "process", "drafter_device": "cpu:1"}, max_model_len=256)
    vllm_config = args.create_engine_config()
    spec = vllm_config.speculative_config
    assert (spec.method, spec.model, spec.num_speculative_tokens) == ("custom_class", PROPOSER_QUALNAME, 3)
    # The target loads no draft model: vLLM's draft config for custom_class is the target's own.
    assert spec.draft_model_config is vllm_config.model_config
    engine = vllm_config.additional_config[DRAFT_ENGINE_KEY]
    assert engine["model"] == model_dir and engine["max_model_len"] == 256
    assert engine["skip_tokenizer_init"] and engine["dtype"] == "float32" and engine["load_format"] == "auto"
    # Draft sessions roll their KV back: no prefix cache, and the scheduler that rolls back.
    assert not engine["enable_prefix_caching"] and not engine["async_scheduling"]
    assert resolve_obj_by_qualname(engine["scheduler_cls"]) is DraftSessionScheduler
    assert engine["tensor_parallel_size"] == 1
    assert MineDraftSettings.of(vllm_config).drafter == "process"


@pytest.mark.parametrize(("minedraft", "spec", "message"), [
    ({"drafter": "process", "drafter_device": "cpu:1"}, {"method": "ngram", "model": None,
                                                         "prompt_lookup_max": 3},
     "the speculative method must be 'draft_model'"),
    ({"drafter": "process", "drafter_device": "cuda:0"}, {}, "shares GPU 0 with the target"),
])
def test_front_end_refuses_what_a_process_drafter_cannot_run(model_dir, minedraft, spec, message):
    with pytest.raises(MineDraftConfigError, match=message):
        _engine_args(model_dir, minedraft, **spec).create_engine_config()


# ------------------------------------------------------------------ histories


def test_histories_travel_incrementally_and_resync_on_a_gap():
    sent, kept = SentHistories(), Histories()
    tokens = list(range(100, 120))
    first = sent.update("a", tokens, 10)
    assert first == ("a", 0, tokens[:10])
    second = sent.update("a", tokens, 14)
    assert second == ("a", 10, tokens[10:14])  # only what is new
    assert kept.apply([], [first, second]) == [] and kept.tokens["a"] == tokens[:14]
    # A lost update: the drafter asks for a resync and drops its copy ...
    sent.update("a", tokens, 17)
    assert kept.apply([], [sent.update("a", tokens, 19)]) == ["a"] and "a" not in kept.tokens
    sent.forget(["a"])
    # ... and the next update carries the whole history.
    assert kept.apply([], [sent.update("a", tokens, 20)]) == [] and kept.tokens["a"] == tokens


def test_released_requests_are_dropped_on_both_sides():
    sent, kept = SentHistories(), Histories()
    kept.apply([], [sent.update("a", [1, 2, 3], 3), sent.update("b", [4, 5], 2)])
    sent.release(["a", "unknown"])
    assert sent.take_released() == ["a"] and sent.take_released() == []
    kept.apply(["a"], [])
    assert list(kept.tokens) == ["b"] and "a" not in sent.sent


# ------------------------------------------------------------------ draft sessions


@pytest.mark.parametrize(("a", "b", "common"), [
    ([], [1], 0), ([1, 2, 3], [1, 2, 3, 4], 3), ([1, 2, 3, 4], [1, 2], 2), ([1, 2, 3], [1, 9, 3], 1),
    ([5] * 1000 + [1], [5] * 1000 + [2, 3], 1000), ([7, 1], [8, 1], 0),
])
def test_common_prefix_of_a_session_and_its_history(a, b, common):
    assert _common_prefix(a, b) == common


def _session_chunk(tokens: list[int], k: int, keep: int | None = None) -> Request:
    params = SamplingParams(temperature=0, max_tokens=k, ignore_eos=True,
                            extra_args=None if keep is None else {KEEP_KEY: keep})
    return Request(request_id="s", prompt_token_ids=list(tokens), sampling_params=params, pooling_params=None,
                   resumable=True)


def _run_session(sched, sampled: list[int]) -> None:
    """Schedule until the session stops, sampling ``sampled`` one token per step."""
    for token in sampled:
        out = sched.schedule()
        sched.update_from_output(out, ModelRunnerOutput(
            req_ids=["s"], req_id_to_index={"s": 0}, sampled_token_ids=[[token]], logprobs=None,
            prompt_logprobs_dict={}, pooler_output=[]))


@pytest.mark.parametrize("accepted", [0, 1, 2, 3])
def test_a_draft_session_rolls_back_to_the_tokens_the_target_kept(model_dir, accepted):
    k, prompt = 3, list(range(100, 140))
    sched = make_scheduler(model_dir, DraftSessionScheduler, k=None)
    sched.add_request(_session_chunk(prompt, k))
    _run_session(sched, [7, 8, 9])  # drafts 7 8 9; the session has computed prompt + 7 8
    session = sched.requests["s"]
    assert session.status == RequestStatus.WAITING_FOR_STREAMING_REQ and session.num_computed_tokens == 42
    blocks = sched.kv_cache_manager.get_block_ids("s")
    # The target accepted `accepted` drafts and added its own token 55.
    history = prompt + [7, 8, 9][:accepted] + [55]
    keep = min(len(prompt) + min(accepted, k - 1), len(history) - 1)
    sched.add_request(_session_chunk(history[keep:], k, keep=keep))
    assert list(session.all_token_ids) == history and session.num_computed_tokens == keep
    out = sched.schedule()
    assert out.num_scheduled_tokens["s"] == len(history) - keep  # only what the session lacks
    assert sched.kv_cache_manager.get_block_ids("s") == blocks  # its KV stayed, no block reallocated
