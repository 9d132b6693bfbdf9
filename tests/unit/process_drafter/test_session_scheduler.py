"""The draft engine's scheduler (minedraft/process_drafter/draft_engine/session_scheduler.py): sessions roll back."""

from __future__ import annotations

import pytest
from scheduler_harness import make_scheduler
from vllm import SamplingParams
from vllm.v1.outputs import ModelRunnerOutput
from vllm.v1.request import Request, RequestStatus

from minedraft.process_drafter.draft_engine.session_scheduler import KEEP_KEY, DraftSessionScheduler


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
