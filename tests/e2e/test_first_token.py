"""A request's first token leaves before its draft work, on a real engine (``first_token: early``).

The engine runs in this test's child with ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` and is stepped by
hand; the child records, in order, each step's plan (``schedule``), each output the scheduler makes
(``update_from_output``: where vLLM's engine core queues a request's tokens for the client) and each
call into the drafter's own ``propose``. MineDraft's ``auto`` mode at a fixed depth (plain SD steps,
no parallel step: the path the first token took through the drafter before), a 64-token budget (so
longer prompts take several prefill chunks), requests arriving while others decode:

* ``early`` (the default), with the thread lane and the serial lane, and with the kit's EAGLE-3 head:
  the step that outputs a request's first token calls the drafter for it only after that output,
  and no step that computes prompt tokens (a non-final chunk either) calls the drafter before its
  outputs;
* ``after_drafts`` (vLLM's order): that step drafts for the request before its first token is output;
* a request arriving while a step runs (the serial lane and EAGLE-3 runs: the engine core's input
  queue holds an ADD when the step before the late requests ends): the engine core takes no drafts of
  that step (``skips_held_drafts``), nothing is drafted until the next step's outputs, that step
  verifies no drafts, and the drafter catches up on the skipped tokens (its hidden states too).

Greedy tokens are the same in every run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.child import run_once, serve

K = 3
PROMPT_LENGTHS = (5, 40, 100, 150, 20, 70)  # 64 tokens a step: 100 and 150 take two and three chunks
LATE_FROM, LATE_STEP = 3, 4  # requests 3.. arrive after step 4, while 0-2 decode
MAX_TOKENS = 8
CHILD_TIMEOUT = 600
RUNS = {  # name -> (method, lane, first_token, a request waits when step LATE_STEP ends)
    "early_overlap": ("draft_model", "overlap", "early", False),
    "early_serial": ("draft_model", "serial", "early", True),
    "early_eagle3": ("eagle3", "overlap", "early", True),
    "after_drafts": ("draft_model", "overlap", "after_drafts", False),
}


# --------------------------------------------------------------------------
# Child side
# --------------------------------------------------------------------------

def prompts() -> list[list[int]]:
    from modelkit.prompts import token_windows

    return [token_windows(1, n, seed=900 + i)[0] for i, n in enumerate(PROMPT_LENGTHS)]


def run_engine(method: str, lane: str, first_token: str, arrival: bool) -> dict:
    import queue

    from vllm import LLM, SamplingParams
    from vllm.v1.engine import EngineCoreRequestType

    from harness.engine_args import Speculation, engine_kwargs
    from modelkit import build_kit

    kit = build_kit()
    draft = kit.eagle3 if method == "eagle3" else kit.draft_small
    llm = LLM(**engine_kwargs("minedraft_auto", str(kit.target), Speculation(str(draft), K, method),
                              minedraft={"speculation_depth": "fixed", "lane": lane, "first_token": first_token},
                              max_model_len=512, max_num_batched_tokens=64))
    engine = llm.llm_engine
    core = engine.engine_core.engine_core
    scheduler = core.scheduler
    runner = engine.model_executor.driver_worker.worker.model_runner
    events: list[list] = []
    schedule, update, propose = scheduler.schedule, scheduler.update_from_output, runner.draft_source.propose
    skips = scheduler.skips_held_drafts

    def recording_schedule(*args, **kwargs):
        out = schedule(*args, **kwargs)
        events.append(["schedule", out.drafts_after_output, out.defer_drafts,
                       sum(map(len, out.scheduled_spec_decode_tokens.values()))])
        return out

    def recording_skips():
        skipped = skips()
        events.append(["skip", skipped])
        return skipped

    def recording_update(*args, **kwargs):
        outputs = update(*args, **kwargs)
        for core_outputs in outputs.values():
            for out in core_outputs.outputs:
                if out.new_token_ids:
                    events.append(["token", out.request_id])
        events.append(["update"])
        return outputs

    drafts: dict[str, list[list[int]]] = {}  # request id -> the drafts each call made for it, in order

    def recording_propose(*args, **kwargs):
        events.append(["draft", list(runner.input_batch.req_ids)])
        made = propose(*args, **kwargs)
        if kwargs.get("num_speculative_tokens", K) == K:  # not a catch-up pass
            for req_id, row in zip(runner.input_batch.req_ids, made.tolist()):
                drafts.setdefault(req_id.split("-")[0], []).append(row)  # vLLM suffixes the id per engine
        return made

    scheduler.schedule, scheduler.update_from_output = recording_schedule, recording_update
    scheduler.skips_held_drafts = recording_skips
    runner.draft_source.propose = recording_propose
    params = SamplingParams(temperature=0, max_tokens=MAX_TOKENS, ignore_eos=True)
    all_prompts = prompts()

    def add(indices):
        for i in indices:
            engine.add_request(str(i), {"prompt_token_ids": all_prompts[i]}, params)

    add(range(LATE_FROM))
    tokens: dict[str, list[int]] = {}
    step = 0
    while engine.has_unfinished_requests():
        if arrival and step == LATE_STEP - 1:
            # As a busy-loop engine core's queue holds a request that arrived during the step (this
            # in-process engine core has no queue: its client adds requests between steps).
            core.input_queue = queue.Queue()
            core.input_queue.put_nowait((EngineCoreRequestType.ADD, None))
        for out in engine.step():
            tokens[out.request_id] = list(out.outputs[0].token_ids)
        step += 1
        if step == LATE_STEP:
            vars(core).pop("input_queue", None)
            add(range(LATE_FROM, len(all_prompts)))
        assert step < 1000, "engine does not finish"
    catch_up = runner.draft_catch_up
    return {"events": events, "tokens": tokens, "arrival_skips": scheduler.minedraft_totals.arrival_skips,
            "caught_up_tokens": catch_up.caught_up_tokens if catch_up is not None else 0, "drafts": drafts}


def make_handler(spec: dict):
    return lambda command: run_engine(*RUNS[spec["run"]])


# --------------------------------------------------------------------------
# Test side
# --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, dict]:
    log_dir: Path = tmp_path_factory.mktemp("first_token")
    return {name: run_once([__file__], {"name": name, "run": name}, log_dir=log_dir, timeout_s=CHILD_TIMEOUT,
                           env={"VLLM_ENABLE_V1_MULTIPROCESSING": "0"})
            for name in RUNS}


def steps_of(events: list[list]) -> list[dict]:
    """The recording cut into engine steps: each step's plan, the requests drafted for before its
    outputs, the requests whose first token it output, and those drafted for after its outputs
    (up to the next step's plan)."""
    steps: list[dict] = []
    seen: set[str] = set()
    for event in events:
        if event[0] == "schedule":
            steps.append({"after_output": event[1], "before": set(), "first_tokens": set(), "after": set(),
                          "output": False, "verified_drafts": event[3], "skipped": False})
        elif not steps:
            continue
        elif event[0] == "draft":
            steps[-1]["after" if steps[-1]["output"] else "before"].update(event[1])
        elif event[0] == "token" and event[1] not in seen:
            seen.add(event[1])
            steps[-1]["first_tokens"].add(event[1])
        elif event[0] == "update":
            steps[-1]["output"] = True
        elif event[0] == "skip":
            steps[-1]["skipped"] = event[1]
    return steps


@pytest.mark.parametrize("name", ["early_overlap", "early_serial", "early_eagle3"])
def test_every_first_token_leaves_before_its_request_is_drafted_for(runs, name):
    steps = steps_of(runs[name]["events"])
    firsts = [step for step in steps if step["first_tokens"]]
    assert sum(len(step["first_tokens"]) for step in firsts) == len(PROMPT_LENGTHS)
    for step in firsts:
        assert step["after_output"] and not step["first_tokens"] & step["before"], step
        assert step["first_tokens"] <= step["after"], step  # drafted for right after, in the same step
    # Every step with prompt tokens (the non-final chunks too) calls the drafter only after its outputs.
    prompt_steps = [step for step in steps if step["after_output"]]
    assert len(prompt_steps) > len(firsts) and not any(step["before"] for step in prompt_steps)


@pytest.mark.parametrize("name", ["early_serial", "early_eagle3"])
def test_a_request_waiting_when_a_step_ends_skips_that_step_s_drafting(runs, name):
    """The step before the late requests ends with a request in the input queue: its held drafting is
    skipped (asked once, counted), nothing is drafted until the next step has output, the next step
    verifies no drafts, and the drafter later catches up on what it skipped."""
    run = runs[name]
    steps = steps_of(run["events"])
    skipped = [i for i, step in enumerate(steps) if step["skipped"]]
    assert skipped == [LATE_STEP - 1] and run["arrival_skips"] == 1
    assert sum("skip" == e[0] for e in run["events"]) == 1  # asked only when a request waited
    step, after = steps[LATE_STEP - 1], steps[LATE_STEP]
    assert step["after_output"] and step["output"] and not step["after"]
    assert after["verified_drafts"] == 0 and not after["before"] and after["after"]
    assert steps[LATE_STEP - 2]["verified_drafts"] > 0 or steps[LATE_STEP - 1]["verified_drafts"] > 0
    assert run["caught_up_tokens"] > 0


def test_with_no_request_waiting_no_drafting_is_skipped(runs):
    for name in ("early_overlap", "after_drafts"):
        assert runs[name]["arrival_skips"] == 0 and not any(e[0] == "skip" for e in runs[name]["events"])


def test_vllm_s_order_drafts_before_the_first_token(runs):
    """The same recording with ``first_token: after_drafts``: the assertions above fail there."""
    steps = steps_of(runs["after_drafts"]["events"])
    assert not any(step["after_output"] for step in steps)
    firsts = [step for step in steps if step["first_tokens"]]
    assert all(step["first_tokens"] <= step["before"] for step in firsts), firsts


def test_drafting_after_the_outputs_makes_the_drafts_vllm_s_order_makes(runs):
    """A held call is not copied (in_process/in_process_source.py ``hold``): it reads the runner's buffers after the
    step's outputs, before the next step rewrites them. Its drafts are the ones the same call makes
    inside sampling, row for row. Only a step whose every request finished makes none (its drafts would
    never be verified: scheduling/scheduler.py), so the batch's last call is vLLM's alone."""
    early, vllm_order = runs["early_overlap"]["drafts"], runs["after_drafts"]["drafts"]
    assert sum(map(len, vllm_order.values())) >= len(PROMPT_LENGTHS) * (MAX_TOKENS // (K + 1))
    assert early.keys() == vllm_order.keys()
    for rid, made in vllm_order.items():
        assert early[rid] == made[:len(early[rid])] and len(made) - len(early[rid]) <= 1, rid
    assert sum(map(len, vllm_order.values())) - sum(map(len, early.values())) >= 1


def test_the_order_changes_no_token(runs):
    want = runs["after_drafts"]["tokens"]
    assert sorted(want) == [str(i) for i in range(len(PROMPT_LENGTHS))]
    assert all(len(t) == MAX_TOKENS for t in want.values())
    for name in RUNS:
        assert runs[name]["tokens"] == want, name


if __name__ == "__main__":
    serve(make_handler)
