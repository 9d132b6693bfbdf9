"""minedraft/worker/suffix_batch.py, with vLLM's real ``SuffixDecodingProposer`` (arctic-inference).

Two requests take turns in the batch, as MineDraft's groups do in parallel steps. Through the view
each keeps its suffix tree and gets exactly the drafts a proposer that saw its calls alone would
make; fed the raw batch, as a deferred call would be without the view, the proposer stops the
absent request and rebuilds it from its prompt.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from minedraft.worker.in_process.draft_job import snapshot
from minedraft.worker.suffix_batch import NOT_IN_BATCH, SuffixBatchView, with_batch_view

pytest.importorskip("arctic_inference.suffix_decoding", reason="the suffix extra (make setup installs it)")

K = 3
MAX_LEN = 256
PROMPT = 12
PATTERN = {"a": [5, 6, 7, 8, 9], "b": [20, 21, 22]}  # each request repeats its own pattern


def _proposer():
    from vllm.v1.spec_decode.suffix_decoding import SuffixDecodingProposer

    spec = SimpleNamespace(num_speculative_tokens=K, suffix_decoding_max_tree_depth=24,
                           suffix_decoding_max_spec_factor=1.0, suffix_decoding_min_token_prob=0.1,
                           suffix_decoding_max_cached_requests=100)
    return SuffixDecodingProposer(SimpleNamespace(speculative_config=spec,
                                                  model_config=SimpleNamespace(max_model_len=MAX_LEN)))


def _tokens(req_id: str, n: int) -> list[int]:
    """A prompt of distinct tokens, then the request's pattern over and over."""
    pattern, base = PATTERN[req_id], 100 * (1 + list(PATTERN).index(req_id))
    return [base + i if i < PROMPT else pattern[i % len(pattern)] for i in range(n)]


def _batch(lengths: dict[str, int]):
    """The runner's persistent batch for the requests ``lengths`` (tokens so far), rows in order."""
    req_ids = list(lengths)
    table = np.zeros((8, MAX_LEN), dtype=np.int32)
    for row, req_id in enumerate(req_ids):
        table[row, :lengths[req_id]] = _tokens(req_id, lengths[req_id])
    return SimpleNamespace(req_ids=req_ids, num_reqs=len(req_ids), req_id_to_index={r: i for i, r in enumerate(req_ids)},
                           num_tokens_no_spec=np.array([lengths[r] for r in req_ids] + [0] * (8 - len(req_ids))),
                           num_prompt_tokens=np.array([PROMPT] * 8), token_ids_cpu=table)


def _call(proposer, lengths: dict[str, int], live: list[str] | None, new: int = 2):
    """One propose call for the batch ``lengths``, each request having just sampled its last ``new`` tokens;
    through the view (``live``: the runner's requests) or with the raw batch (``live`` None)."""
    batch = _batch(lengths)
    sampled = [_tokens(r, lengths[r])[-new:] for r in lengths]
    args, kwargs = (K, batch, sampled), {"slot_mappings": None}
    if live is not None:
        args, kwargs = with_batch_view(args, kwargs, batch, live)
        args, kwargs = snapshot(args), snapshot(kwargs)  # as a deferred call is captured
    return dict(zip(lengths, proposer.propose(*args, **kwargs), strict=True))


def test_the_view_holds_the_rows_and_names_the_live_requests():
    batch = _batch({"a": 14, "b": 20})
    view = SuffixBatchView.of(batch, ["a", "b", "c"])
    assert view.req_ids == ["a", "b"]
    assert view.req_id_to_index == {"a": 0, "b": 1, "c": NOT_IN_BATCH}
    assert view.token_ids_cpu.shape == (2, 20) and view.num_tokens_no_spec.tolist() == [14, 20]
    assert view.token_ids_cpu[1].tolist() == _tokens("b", 20)


def test_a_captured_view_keeps_its_step_when_the_batch_changes():
    batch = _batch({"a": 14})
    (_, view, _), _ = with_batch_view((K, batch, [[1]]), {}, batch, ["a"])
    captured = snapshot(view)
    batch.token_ids_cpu[0, :14] = 0
    batch.num_tokens_no_spec[0] = 99
    assert captured.token_ids_cpu[0].tolist() == _tokens("a", 14) and captured.num_tokens_no_spec[0] == 14


def test_requests_taking_turns_draft_as_if_alone():
    turns, alone = _proposer(), {r: _proposer() for r in PATTERN}
    lengths = {"a": PROMPT, "b": PROMPT}
    for step in range(12):
        req_id = "ab"[step % 2]
        lengths[req_id] += 2
        got = _call(turns, {req_id: lengths[req_id]}, live=["a", "b"])
        want = _call(alone[req_id], {req_id: lengths[req_id]}, live=[req_id])
        assert got == want, (step, got, want)
        assert turns.suffix_cache.active_requests == set("ab"[:step + 1])  # none stopped
    assert got[req_id], "the repeated pattern gave no drafts"


def test_the_raw_batch_stops_the_other_group():
    """What the view prevents: the proposer drops every request missing from the batch it is given."""
    proposer = _proposer()
    _call(proposer, {"a": 14, "b": 14}, live=None)
    _call(proposer, {"a": 16}, live=None)
    assert proposer.suffix_cache.active_requests == {"a"}


def test_a_request_the_runner_let_go_is_stopped():
    proposer = _proposer()
    _call(proposer, {"a": 14, "b": 14}, live=["a", "b"])
    _call(proposer, {"a": 16}, live=["a"])  # b finished: vLLM's runner dropped it
    assert proposer.suffix_cache.active_requests == {"a"}
