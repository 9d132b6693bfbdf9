"""The drafter's catch-up: skipping depth-0 forwards and feeding the skipped tokens later leaves
the draft's KV cache as running every forward does.

The fake proposers do what vLLM's first passes do with a call's inputs: the draft model writes
each request's query tokens at their positions, and the next token on one extra slot after
them; an EAGLE head writes, at each query position, the next token (the query shifted by one,
the next token last) with the target's hidden state there. Both write to the slots the
request's block table gives.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from vllm.v1.attention.backend import CommonAttentionMetadata

from minedraft.contract import ProposeCall
from minedraft.worker.in_process.draft_catch_up import DraftCatchUp

BLOCK = 4
BLOCKS_PER_REQ = 16


class FakeDraftModel:
    def __init__(self, max_tokens: int | None = None) -> None:
        self.kv: dict[int, int] = {}  # slot -> token
        self.max_tokens = max_tokens
        self.calls: list[int] = []  # depth of each forward

    def propose(self, **kw):
        cad: CommonAttentionMetadata = kw["common_attn_metadata"]
        starts = cad.query_start_loc_cpu.tolist()
        if self.max_tokens is not None:
            assert starts[-1] + cad.num_reqs <= self.max_tokens
        for i in range(cad.num_reqs):
            positions = kw["target_positions"][starts[i]:starts[i + 1]].tolist()
            tokens = kw["target_token_ids"][starts[i]:starts[i + 1]].tolist()
            assert positions[-1] + 1 == int(cad.seq_lens[i])
            for pos, tok in [*zip(positions, tokens), (positions[-1] + 1, int(kw["next_token_ids"][i]))]:
                self.kv[int(cad.block_table_tensor[i, pos // BLOCK]) * BLOCK + pos % BLOCK] = tok
        self.calls.append(kw["num_speculative_tokens"])
        return torch.zeros(cad.num_reqs, kw["num_speculative_tokens"], dtype=torch.int64)


class FakeEagleHead(FakeDraftModel):
    def propose(self, **kw):
        cad: CommonAttentionMetadata = kw["common_attn_metadata"]
        starts = cad.query_start_loc_cpu.tolist()
        hidden = kw["target_hidden_states"]
        assert hidden is not None and hidden.shape[0] >= starts[-1]
        for i in range(cad.num_reqs):
            positions = kw["target_positions"][starts[i]:starts[i + 1]].tolist()
            tokens = kw["target_token_ids"][starts[i]:starts[i + 1]].tolist()[1:] + [int(kw["next_token_ids"][i])]
            for j, (pos, tok) in enumerate(zip(positions, tokens)):
                slot = int(cad.block_table_tensor[i, pos // BLOCK]) * BLOCK + pos % BLOCK
                self.kv[slot] = (tok, tuple(hidden[starts[i] + j].tolist()))
        self.calls.append(kw["num_speculative_tokens"])
        return torch.zeros(cad.num_reqs, kw["num_speculative_tokens"], dtype=torch.int64)


def hidden_state(req_id: str, position: int) -> list[float]:
    """The target's (fake) hidden state of a request's token: it differs by request and position."""
    return [float(ord(req_id)), float(position)]


class Batch:
    """Requests' histories (prompt + sampled tokens), block tables and computed tokens."""

    def __init__(self, prompts: dict[str, int], seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.tokens = {r: list(rng.integers(1, 1000, n)) for r, n in prompts.items()}
        self.computed = dict.fromkeys(prompts, 0)
        self.blocks = {r: list(rng.permutation(1000)[:BLOCKS_PER_REQ]) for r in prompts}
        self.rng = rng
        self.rows: list[str] = []  # the last step's batch

    def step(self, req_ids: list[str], depth: int, chunk: int) -> ProposeCall:
        """One step: each request's next ``chunk`` prompt tokens, or its last sampled token; a token
        sampled for each (the prompt's next, or a new one)."""
        self.rows = list(req_ids)  # the batch's rows, as the catch-up reads them
        query, positions, next_tokens, starts, seq_lens = [], [], [], [0], []
        for r in req_ids:
            start = self.computed[r]
            end = min(start + chunk, len(self.tokens[r]))
            if end == len(self.tokens[r]):
                self.tokens[r].append(int(self.rng.integers(1, 1000)))
            query += self.tokens[r][start:end]
            positions += range(start, end)
            next_tokens.append(self.tokens[r][end])
            starts.append(len(query))
            seq_lens.append(end)
        qsl = torch.tensor(starts, dtype=torch.int32)
        cad = CommonAttentionMetadata(
            query_start_loc=qsl, query_start_loc_cpu=qsl, seq_lens=torch.tensor(seq_lens, dtype=torch.int32),
            num_reqs=len(req_ids), num_actual_tokens=len(query), max_query_len=max(np.diff(starts)),
            max_seq_len=max(seq_lens), block_table_tensor=torch.tensor([self.blocks[r] for r in req_ids]),
            slot_mapping=torch.zeros(len(query), dtype=torch.int64))
        hidden = torch.tensor([hidden_state(r, p) for r in req_ids
                               for p in range(self.computed[r], seq_lens[req_ids.index(r)])])
        # vLLM's buffer holds more rows than the call's tokens, and is reused by the next step.
        hidden = torch.cat([hidden, torch.full((3, 2), -1.0)])
        kwargs = dict(num_speculative_tokens=depth, target_token_ids=torch.tensor(query, dtype=torch.int32),
                      target_positions=torch.tensor(positions), target_hidden_states=hidden,
                      next_token_ids=torch.tensor(next_tokens, dtype=torch.int32), token_indices_to_sample=None,
                      common_attn_metadata=cad, sampling_metadata=None, mm_embed_inputs=None,
                      num_rejected_tokens_gpu=None, slot_mappings=None)
        return ProposeCall(list(req_ids), (), kwargs, depth)

    def advance(self, call: ProposeCall) -> None:
        for r, n in zip(call.req_ids, call.kwargs["common_attn_metadata"].seq_lens.tolist()):
            self.computed[r] = n

    def catch_up(self, model: FakeDraftModel, max_tokens: int = 1 << 20, max_hidden_bytes: int | None = None
                 ) -> DraftCatchUp:
        eagle = isinstance(model, FakeEagleHead)
        return DraftCatchUp(token_ids=lambda row: np.array(self.tokens[self.rows[row]]),
                            computed=lambda row: self.computed[self.rows[row]],
                            block_size=lambda: BLOCK, max_tokens=max_tokens, device=torch.device("cpu"),
                            keeps_hidden_states=eagle,
                            max_hidden_bytes=(1 << 30) if max_hidden_bytes is None else max_hidden_bytes)


# What the runner's depth-0 EAGLE path passes to a skip (runner_mixin._skip_kwargs).
SKIP_KWARGS = ("target_hidden_states", "common_attn_metadata")


def run(depths: list[int], skip: bool, schedule=None, max_tokens: int = 1 << 20, chunk: int = 5,
        head: type[FakeDraftModel] = FakeDraftModel, max_hidden_bytes: int | None = None,
        reduced: bool = False, aux: bool = False):
    """The steps of ``depths`` (each request scheduled unless ``schedule(step)`` says which), the
    depth-0 calls skipped where the catch-up takes them (as InProcessDraftSource does); ``reduced``:
    a skip gets only what the runner's EAGLE path gives it, after ``can_skip`` said yes; ``aux``: the
    hidden states as EAGLE-3's path gives them, its layers a tuple of column blocks."""
    batch = Batch({"a": 13, "b": 3, "c": 30})
    model = head(max_tokens if skip else None)
    catch_up = batch.catch_up(model, max_tokens, max_hidden_bytes)
    for step, depth in enumerate(depths):
        req_ids = schedule(step) if schedule else ["a", "b", "c"]
        call = batch.step(req_ids, depth, chunk)
        skipped = None
        if skip and depth == 0:
            offered = ProposeCall(call.req_ids, (), {k: call.kwargs[k] for k in SKIP_KWARGS}, 0) if reduced else call
            if aux:
                hidden = offered.kwargs["target_hidden_states"]
                offered.kwargs["target_hidden_states"] = tuple(hidden[:, i:i + 1] for i in range(hidden.shape[1]))
            fits = catch_up.can_skip(offered.kwargs)
            if fits or not reduced:
                skipped = catch_up.skip(offered)
                assert (skipped is not None) == fits
        if skipped is not None:
            assert skipped == [[] for _ in req_ids]
        else:
            for fed in (catch_up.calls_before(call) if skip else ()):
                model.propose(**fed.kwargs)
            model.propose(**call.kwargs)
        batch.advance(call)
    return model, catch_up


DEPTHS = [3, 0, 0, 0, 2, 0, 0, 3, 0, 1, 3, 3]


def test_catching_up_leaves_the_draft_kv_as_running_every_forward():
    every, _ = run(DEPTHS, skip=False)
    skipped, catch_up = run(DEPTHS, skip=True)
    assert skipped.kv == every.kv
    assert catch_up.skipped_calls == DEPTHS.count(0)
    assert catch_up.caught_up_tokens > 0
    assert skipped.calls.count(3) == every.calls.count(3)  # the real calls all ran, unchanged
    assert not catch_up.behind


def test_the_last_steps_skipped_leave_the_requests_behind_until_they_draft():
    every, _ = run([3, 3, 0, 0], skip=False)
    skipped, catch_up = run([3, 3, 0, 0], skip=True)
    assert skipped.kv != every.kv
    assert set(catch_up.behind) == {"a", "b", "c"}


def test_long_spans_are_cut_into_passes_within_the_token_budget():
    every, _ = run([0] * 6 + [3, 3], skip=False)
    skipped, catch_up = run([0] * 6 + [3, 3], skip=True, max_tokens=7)
    assert skipped.kv == every.kv
    assert len(skipped.calls) > 3  # several catch-up passes, then the real ones


def test_a_request_catches_up_when_it_is_next_drafted_not_before():
    """A request not in a step's batch (another group, or not scheduled) keeps its place."""
    def schedule(step):
        return ["a", "b", "c"] if step < 3 or step > 5 else ["a"]

    depths = [0, 0, 0, 3, 3, 3, 3, 3]
    every, _ = run(depths, skip=False, schedule=schedule)
    skipped, _ = run(depths, skip=True, schedule=schedule)
    assert skipped.kv == every.kv


def test_released_requests_are_forgotten():
    batch = Batch({"a": 4})
    catch_up = batch.catch_up(FakeDraftModel())
    catch_up.skip(batch.step(["a"], 0, 8))
    catch_up.release({"a"})
    assert not catch_up.behind
    batch.computed["a"] = 0  # preempted: computed again from the start
    assert list(catch_up.calls_before(batch.step(["a"], 3, 8))) == []


@pytest.mark.parametrize("depths", [DEPTHS, [0] * 6 + [3, 3], [3, 0, 3, 0, 0, 2]])
def test_an_eagle_head_catches_up_with_the_hidden_states_its_skipped_calls_kept(depths):
    every, _ = run(depths, skip=False, head=FakeEagleHead)
    skipped, catch_up = run(depths, skip=True, head=FakeEagleHead, max_tokens=9)
    assert skipped.kv == every.kv
    assert catch_up.skipped_calls == depths.count(0) and not catch_up.hidden and catch_up.hidden_bytes == 0


def test_an_eagle_call_over_the_hidden_state_budget_runs_and_the_kv_stays_right():
    """A depth-0 step whose hidden states would not fit runs the head (its requests caught up first)."""
    budget = 16 * 2 * 4  # 16 tokens of two float32 values: two steps of these three requests do not fit
    every, _ = run(DEPTHS, skip=False, head=FakeEagleHead)
    skipped, catch_up = run(DEPTHS, skip=True, head=FakeEagleHead, max_hidden_bytes=budget)
    assert skipped.kv == every.kv
    assert 0 < catch_up.skipped_calls < DEPTHS.count(0)  # some skipped, some ran for the budget
    assert 0 in skipped.calls


@pytest.mark.parametrize("aux", [False, True], ids=["eagle", "eagle3_layers"])
@pytest.mark.parametrize("max_hidden_bytes", [None, 16 * 2 * 4])
def test_an_eagle_skip_needs_only_the_hidden_states_and_where_requests_start(max_hidden_bytes, aux):
    """The runner skips vLLM's preparation of a depth-0 EAGLE call and hands the skip the target's
    hidden states (EAGLE-3's layers not yet joined) and the attention metadata alone; the catch-up
    then rebuilds the same KV."""
    every, _ = run(DEPTHS, skip=False, head=FakeEagleHead)
    skipped, catch_up = run(DEPTHS, skip=True, head=FakeEagleHead, max_hidden_bytes=max_hidden_bytes, reduced=True,
                            aux=aux)
    assert skipped.kv == every.kv
    if max_hidden_bytes is None:
        assert catch_up.skipped_calls == DEPTHS.count(0)
    else:
        assert 0 < catch_up.skipped_calls < DEPTHS.count(0)  # some skipped, some ran for the budget


def test_released_requests_drop_their_hidden_states():
    batch = Batch({"a": 4, "b": 6})
    catch_up = batch.catch_up(FakeEagleHead())
    catch_up.skip(batch.step(["a", "b"], 0, 8))
    assert catch_up.hidden_bytes == 10 * 2 * 4
    catch_up.release({"a"})
    assert set(catch_up.hidden) == {"b"} and catch_up.hidden_bytes == 6 * 2 * 4


def with_rejected_drafts(call: ProposeCall, rejected: list[int]) -> ProposeCall:
    """``call`` as a verifying step's held call gives it to a skip: each request's rows followed by
    rows of its rejected drafts (vLLM's padded drafter batch: ``num_rejected_tokens_gpu``)."""
    starts = call.kwargs["common_attn_metadata"].query_start_loc_cpu.tolist()
    hidden = call.kwargs["target_hidden_states"]
    rows, bounds = [], [0]
    for i, n in enumerate(rejected):
        rows += [hidden[starts[i]:starts[i + 1]], torch.full((n, hidden.shape[1]), -9.0)]
        bounds.append(bounds[-1] + starts[i + 1] - starts[i] + n)
    qsl = torch.tensor(bounds, dtype=torch.int32)
    cad = CommonAttentionMetadata(
        query_start_loc=qsl, query_start_loc_cpu=qsl, seq_lens=call.kwargs["common_attn_metadata"].seq_lens,
        num_reqs=len(rejected), num_actual_tokens=bounds[-1], max_query_len=int(max(np.diff(bounds))),
        max_seq_len=0, block_table_tensor=call.kwargs["common_attn_metadata"].block_table_tensor,
        slot_mapping=torch.zeros(bounds[-1], dtype=torch.int64))
    kwargs = {**call.kwargs, "target_hidden_states": torch.cat(rows), "common_attn_metadata": cad,
              "num_rejected_tokens_gpu": torch.tensor(rejected)}
    return ProposeCall(call.req_ids, (), kwargs, call.depth)


def test_a_skipped_verifying_call_keeps_no_hidden_state_of_a_rejected_draft():
    """A call that verified drafts, skipped because a request arrived (InProcessDraftSource._skip_held),
    then a skipped depth-0 call: each request keeps only its accepted tokens' rows, so the rows of the
    two calls line up with positions and the head's catch-up rebuilds the KV of running every forward."""
    batch, every, head = Batch({"a": 4, "b": 6}), FakeEagleHead(), FakeEagleHead()
    catch_up = batch.catch_up(head)
    for step, skip in enumerate([None, [2, 0], [0, 0], None]):
        call = batch.step(["a", "b"], 0 if skip == [0, 0] else 3, 8)
        every.propose(**call.kwargs)
        if skip is None:
            for fed in catch_up.calls_before(call):
                head.propose(**fed.kwargs)
            head.propose(**call.kwargs)
        else:
            assert catch_up.skip(with_rejected_drafts(call, skip)) == [[], []]
        batch.advance(call)
    assert head.kv == every.kv and catch_up.caught_up_tokens == 4 and catch_up.hidden_bytes == 0


def test_a_skipped_depth_0_call_that_verified_drafts_keeps_no_eagle3_row_of_a_rejected_one():
    """At depth 0 a step verifies drafts only from a second source (hybrid/); EAGLE-3's skipped calls pass
    their auxiliary layers as a tuple, joined here: the rows of the rejected drafts are dropped there too."""
    batch = Batch({"a": 4, "b": 6})
    catch_up = batch.catch_up(FakeEagleHead())
    call = with_rejected_drafts(batch.step(["a", "b"], 0, 8), [2, 1])
    hidden = call.kwargs["target_hidden_states"]
    tupled = ProposeCall(call.req_ids, (), {**call.kwargs, "target_hidden_states": (hidden, hidden + 1)}, 0)
    rows = catch_up._hidden_rows(tupled)
    starts = call.kwargs["common_attn_metadata"].query_start_loc_cpu.tolist()
    assert [len(r) for r in rows] == [starts[1] - 2, starts[2] - starts[1] - 1]
    assert all((r[:, :hidden.shape[1]] != -9.0).all() for r in rows)  # no rejected draft's row kept
    assert all(r.shape[1] == 2 * hidden.shape[1] for r in rows)  # the layers joined


class RowDraftModel(FakeDraftModel):
    """Drafts, for each row, its next token + 1, + 2, ...: a row's drafts say whose they are."""

    def propose(self, **kw):
        super().propose(**kw)
        return kw["next_token_ids"].long()[:, None] + torch.arange(1, kw["num_speculative_tokens"] + 1)


def test_rows_whose_drafts_go_unused_are_skipped_and_caught_up_while_the_others_draft():
    """A source drafting now skips the rows the step names undrafted (a second source drafts them) and
    drafts the others' rows alone: their drafts are those the whole call gives them, the undrafted rows
    get none, and once every row is drafted again the draft KV is that of running every forward."""
    from minedraft.worker.in_process.in_process_source import InProcessDraftSource
    from minedraft.worker.in_process.lanes import InlineLane

    undrafted = [set(), {"a"}, {"a", "c"}, {"b"}, {"a", "b", "c"}, set(), {"c"}, set()]
    whole_batch, every = Batch({"a": 13, "b": 3, "c": 30}), RowDraftModel()
    batch, model = Batch({"a": 13, "b": 3, "c": 30}), RowDraftModel()
    catch_up = batch.catch_up(model)
    source = InProcessDraftSource(model.propose, InlineLane(), capture_max_mib=64.0, before_run=lambda *_: None,
                                  on_captured=lambda _: None, catch_up=catch_up)
    for skip in undrafted:
        whole = whole_batch.step(["a", "b", "c"], 2, 5)
        expected = every.propose(**whole.kwargs).tolist()
        whole_batch.advance(whole)
        call = batch.step(["a", "b", "c"], 2, 5)
        drafts = source.draft_now(ProposeCall(call.req_ids, (), call.kwargs, 2, frozenset(skip)))
        assert [list(d) for d in drafts] == [[] if rid in skip else expected[row]
                                             for row, rid in enumerate(call.req_ids)]
        batch.advance(call)
    assert model.kv == every.kv
    assert catch_up.skipped_rows == sum(map(len, undrafted)) and catch_up.caught_up_tokens > 0
    assert not catch_up.behind


def test_a_call_cut_to_rows_keeps_each_row_s_inputs_in_a_padded_drafter_batch():
    """vLLM's padded drafter batch: each row's query holds its rejected drafts' slots, its sampled index
    points into the flat tokens, its rejected count rides along. Cut to rows 2 and 0, each input is that
    row's, the sampled indices renumbered to the same tokens."""
    from minedraft.worker.in_process.call_rows import call_rows

    batch = Batch({"a": 4, "b": 6, "c": 5})
    call = with_rejected_drafts(batch.step(["a", "b", "c"], 3, 8), [1, 0, 2])
    kw = call.kwargs
    cad = kw["common_attn_metadata"]
    starts = cad.query_start_loc_cpu.tolist()
    n = starts[-1]
    kw = {**kw, "target_token_ids": torch.arange(100, 100 + n), "target_positions": torch.arange(n),
          "token_indices_to_sample": torch.tensor([starts[1] - 2, starts[2] - 1, starts[3] - 3]),
          "next_token_ids": torch.tensor([7, 8, 9])}
    cad.slot_mapping = torch.arange(1000, 1000 + n)
    cut = call_rows(ProposeCall(call.req_ids, (), kw, 3), [2, 0]).kwargs
    ccad = cut["common_attn_metadata"]
    assert ccad.num_reqs == 2 and ccad.query_start_loc_cpu.tolist() == [0, starts[3] - starts[2],
                                                                        starts[3] - starts[2] + starts[1]]
    assert cut["target_token_ids"].tolist() == [*range(100 + starts[2], 100 + n), *range(100, 100 + starts[1])]
    assert ccad.slot_mapping.tolist() == [t + 900 for t in cut["target_token_ids"].tolist()]
    assert cut["target_token_ids"][cut["token_indices_to_sample"]].tolist() == [100 + n - 3, 100 + starts[1] - 2]
    assert cut["next_token_ids"].tolist() == [9, 7] and cut["num_rejected_tokens_gpu"].tolist() == [2, 1]
    assert ccad.seq_lens.tolist() == cad.seq_lens[[2, 0]].tolist()
    assert torch.equal(ccad.block_table_tensor, cad.block_table_tensor[[2, 0]])
    assert torch.equal(cut["target_hidden_states"], kw["target_hidden_states"][cut["target_positions"]])
