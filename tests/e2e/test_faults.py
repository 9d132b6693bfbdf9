"""Faults under MineDraft on a real engine: aborts that hit a request in its
draft-only step, a preemption storm, and engine shutdown with a draft job in
flight. Each must end cleanly with the other requests' outputs unchanged.

Aborts are placed exactly, not by timing: the engine runs in this process's
child (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) and is stepped by hand; between
two steps the child reads the scheduler's plan and aborts

* ``drafting``: a request verified in the step just run whose draft job is
  deferred, so the draft lane drafts for an aborted request in the next step;
* ``draft_only``: a request that sat the step just run out while the lane
  drafted for it (its drafts arrived, it has not been verified with them).

That is when a multi-process engine applies an abort that arrives during the
step (between ``update_from_output`` and the next ``schedule``). The KV cache
holds 20 blocks of 32 tokens for 32 requests, so requests are preempted all
the time and freed blocks (an aborted request's too) are reused at once.

Shutdown: every draft-lane job first touches a marker file and then stalls
(``MINEDRAFT_INJECT_FAULT=draft_lane_stall``, injected by the tests' worker,
fault_injection.py); the child calls ``AsyncLLM.shutdown`` as soon as the
marker appears, i.e. while the job runs.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import time
from pathlib import Path

import pytest

from harness.child import run_once, serve
from minedraft.config import environment

K = 3
N_FIRST, N_SECOND = 24, 8  # the second wave arrives after the first aborts
MAX_TOKENS = 64
ABORT_PLAN = {  # step -> kind of request aborted after it
    **{s: "drafting" for s in range(6, 70, 8)},
    **{s: "draft_only" for s in range(10, 74, 8)},
}
SECOND_WAVE_STEP = 20
STALL_S = 20.0  # long enough that shutdown surely lands inside the job
CHILD_TIMEOUT = 600


def prompts() -> list[list[int]]:
    from modelkit.prompts import spread_lengths, token_windows

    lengths = spread_lengths(N_FIRST + N_SECOND, seed=61, min_tokens=8, max_tokens=160)
    return [token_windows(1, n, seed=700 + i)[0] for i, n in enumerate(lengths)]


def engine_kwargs(kit, minedraft: bool) -> dict:
    from harness.engine_args import Speculation
    from harness.engine_args import engine_kwargs as mode_kwargs

    common = dict(max_model_len=512, max_num_batched_tokens=256, enable_prefix_caching=True)
    if not minedraft:
        return mode_kwargs("no_sd", str(kit.target), **common)
    return mode_kwargs("minedraft_parallel", str(kit.target), Speculation(str(kit.draft_perturbed), K),
                       num_gpu_blocks_override=20, **common)


# --------------------------------------------------------------------------
# Child side: python this_file.py SCENARIO OUT_JSON
# --------------------------------------------------------------------------

def run_reference() -> dict:
    from vllm import LLM, SamplingParams

    from modelkit import build_kit

    llm = LLM(**engine_kwargs(build_kit(), minedraft=False))
    params = SamplingParams(temperature=0, max_tokens=MAX_TOKENS, ignore_eos=True)
    outs = llm.generate([{"prompt_token_ids": p} for p in prompts()], params, use_tqdm=False)
    return {"tokens": [list(o.outputs[0].token_ids) for o in outs]}


def external(internal_id: str) -> str:
    return internal_id.rsplit("-", 1)[0]


def run_aborts() -> dict:
    from vllm import LLM, SamplingParams

    from modelkit import build_kit

    llm = LLM(**engine_kwargs(build_kit(), minedraft=True))
    engine = llm.llm_engine
    scheduler = engine.engine_core.engine_core.scheduler
    block_pool = scheduler.kv_cache_manager.block_pool
    free_at_start = block_pool.get_num_free_blocks()
    last_plan = {}
    schedule = scheduler.schedule

    def recording_schedule(*args, **kwargs):
        out = schedule(*args, **kwargs)
        last_plan["draft_only"] = list(out.draft_only_req_ids)
        last_plan["parallel"] = out.defer_drafts
        return out

    scheduler.schedule = recording_schedule
    params = SamplingParams(temperature=0, max_tokens=MAX_TOKENS, ignore_eos=True)
    all_prompts = prompts()

    def add(indices):
        for i in indices:
            engine.add_request(str(i), {"prompt_token_ids": all_prompts[i]}, params)

    add(range(N_FIRST))
    tokens: dict[str, list[int]] = {}
    finished: dict[str, str] = {}
    aborted: dict[str, dict] = {}
    step = 0
    while engine.has_unfinished_requests():
        for out in engine.step():
            tokens[out.request_id] = list(out.outputs[0].token_ids)
            if out.finished:
                finished[out.request_id] = out.outputs[0].finish_reason
        step += 1
        if step == SECOND_WAVE_STEP:
            add(range(N_FIRST, N_FIRST + N_SECOND))
        kind = ABORT_PLAN.get(step)
        if kind is not None:
            pool = last_plan["draft_only"] if kind == "draft_only" else sorted(scheduler.drafting_req_ids)
            # The scheduler knows internal ids: "<our id>-<random suffix>".
            victims = [rid for rid in pool if external(rid) not in finished and external(rid) not in aborted]
            if victims:
                rid = victims[0]
                aborted[external(rid)] = {"kind": kind, "step": step, "parallel_step": last_plan["parallel"]}
                engine.abort_request([rid], internal=True)
        assert step < 5000, "engine does not finish"
    metrics = {}
    for m in llm.get_metrics():
        if hasattr(m, "value") and (m.name.startswith("minedraft:") or m.name == "vllm:num_preemptions"):
            metrics[m.name] = metrics.get(m.name, 0) + m.value
    return {"tokens": tokens, "finished": finished, "aborted": aborted, "metrics": metrics,
            "free_blocks_at_start": free_at_start, "free_blocks_at_end": block_pool.get_num_free_blocks(),
            "running_at_end": len(scheduler.running), "waiting_at_end": len(scheduler.waiting),
            "drafting_at_end": sorted(scheduler.drafting_req_ids),
            "num_requests_at_end": len(scheduler.requests)}


def describe(processes) -> dict[int, str]:
    """pid -> process name and command line."""
    out = {}
    for p in processes:
        try:
            out[p.pid] = f"{p.name()}: {' '.join(p.cmdline())[:200]}"
        except Exception as e:  # gone meanwhile
            out[p.pid] = f"? ({type(e).__name__})"
    return out


async def run_shutdown(marker: str) -> dict:
    import psutil
    from vllm import SamplingParams
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    from modelkit import build_kit
    from tests.e2e.fault_injection import FAULT_WORKER

    kw = engine_kwargs(build_kit(), minedraft=True)
    kw.pop("num_gpu_blocks_override")
    engine = AsyncLLM.from_engine_args(AsyncEngineArgs(**kw, worker_cls=FAULT_WORKER))
    params = SamplingParams(temperature=0, max_tokens=MAX_TOKENS, ignore_eos=True)

    async def consume(i: int) -> str:
        try:
            async for _ in engine.generate({"prompt_token_ids": prompts()[i]}, params, request_id=str(i)):
                pass
            return "finished"
        except Exception as e:  # what a caller sees when the engine goes away
            return type(e).__name__

    tasks = [asyncio.create_task(consume(i)) for i in range(8)]
    waited = 0.0
    while not Path(marker).exists():  # the first draft job has started and now stalls
        await asyncio.sleep(0.01)
        waited += 0.01
        if waited > 300:
            raise RuntimeError("no draft job started")
    children_before = describe(psutil.Process().children(recursive=True))
    started = time.monotonic()
    engine.shutdown()
    shutdown_s = time.monotonic() - started
    # AsyncLLM.shutdown() cancels its output handler without ending the
    # callers' generate() streams (vLLM 0.32.0's contract: whoever shuts the
    # engine down stops waiting on it), so the callers are cancelled here.
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    # vLLM's processes (engine core, worker) must go while the draft job
    # still stalls; Python's multiprocessing resource tracker outlives them
    # by design (it exits with this process).
    children = psutil.Process().children(recursive=True)
    names = describe(children)
    engine_procs = [p for p in children if "resource_tracker" not in names[p.pid]]
    _, still_running = psutil.wait_procs(engine_procs, timeout=STALL_S / 2)
    gone_s = time.monotonic() - started
    alive = describe(p for p in still_running if p.status() != psutil.STATUS_ZOMBIE)
    return {"shutdown_s": shutdown_s, "stall_s": STALL_S,
            "finished_before_shutdown": sum(not t.cancelled() and t.result() == "finished" for t in tasks),
            "children_before": children_before, "children_alive": alive, "children_gone_s": gone_s,
            "draft_jobs_started": Path(marker).read_text().count("started")}


def make_handler(spec: dict):
    def run(command: dict) -> dict:
        if spec["scenario"] == "reference":
            return run_reference()
        if spec["scenario"] == "aborts":
            return run_aborts()
        return asyncio.run(run_shutdown(environment.get("MINEDRAFT_FAULT_MARKER")))

    return run


# --------------------------------------------------------------------------
# Test side
# --------------------------------------------------------------------------

def run_child(workdir: Path, scenario: str, env: dict | None = None) -> dict:
    return run_once([__file__], {"name": scenario, "scenario": scenario}, log_dir=workdir, env=env,
                    timeout_s=CHILD_TIMEOUT)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("faults")


@pytest.fixture(scope="module")
def reference(workdir):
    return run_child(workdir, "reference")


@pytest.fixture(scope="module")
def aborts(workdir):
    return run_child(workdir, "aborts", {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"})


def test_aborts_hit_both_draft_phases(aborts):
    kinds = [a["kind"] for a in aborts["aborted"].values()]
    # A planned abort finds no victim when that step ran in fallback.
    assert kinds.count("drafting") >= 4 and kinds.count("draft_only") >= 4, aborts["aborted"]
    assert all(a["parallel_step"] for a in aborts["aborted"].values() if a["kind"] == "draft_only")
    assert aborts["metrics"]["minedraft:parallel_steps"] > 0


def test_preemption_storm(aborts):
    assert aborts["metrics"]["vllm:num_preemptions"] >= 10, aborts["metrics"]


def test_every_request_ends_and_no_block_leaks(aborts):
    ended = set(aborts["finished"]) | set(aborts["aborted"])
    assert ended == {str(i) for i in range(N_FIRST + N_SECOND)}
    assert aborts["running_at_end"] == aborts["waiting_at_end"] == aborts["num_requests_at_end"] == 0
    assert aborts["drafting_at_end"] == []
    assert aborts["free_blocks_at_end"] == aborts["free_blocks_at_start"]


def test_outputs_unchanged_by_aborts_and_preemption(reference, aborts):
    want = reference["tokens"]
    for rid, got in aborts["tokens"].items():
        ref = want[int(rid)]
        if rid in aborts["aborted"]:
            assert len(got) < MAX_TOKENS and got == ref[:len(got)], f"aborted request {rid}"
        else:
            assert aborts["finished"][rid] == "length"
            assert got == ref, f"request {rid} differs from the target alone"
    survivors = set(aborts["finished"]) - set(aborts["aborted"])
    assert len(survivors) >= N_FIRST + N_SECOND - len(ABORT_PLAN)


def test_shutdown_with_a_draft_job_in_flight(workdir):
    marker = workdir / "draft_started"
    res = run_child(workdir, "shutdown", {"MINEDRAFT_INJECT_FAULT": "draft_lane_stall",
                                          "MINEDRAFT_FAULT_MARKER": str(marker),
                                          "MINEDRAFT_FAULT_STALL_S": str(STALL_S)})
    assert res["draft_jobs_started"] == 1  # shutdown landed inside the first job
    assert res["shutdown_s"] < STALL_S, res  # it did not wait for the stalled job
    assert res["finished_before_shutdown"] == 0
    assert any("EngineCore" in c for c in res["children_before"].values()), res
    assert not res["children_alive"], res  # gone before the stalled job could end
    assert res["children_gone_s"] < STALL_S, res


DRAFTER_UP = re.compile(r"MineDraft draft engine up on cpu:1 in [0-9.]+ s \(pid (\d+),")
GONE_WITHIN_S = 60


def test_process_drafter_dies_with_a_killed_front_end(tmp_path):
    """SIGKILL to the front end (an offline ``LLM`` with the process drafter): vLLM's engine core
    and worker go, and so does the draft engine process (each ends with its parent:
    minedraft/lifetime.py)."""
    import psutil

    from harness.child import Child
    from modelkit import build_kit

    kit = build_kit()
    spec = {"name": "front_end", "mode": "minedraft_parallel", "target": str(kit.target),
            "draft": str(kit.draft_perturbed), "k": K, "num_requests": 4, "seed": 0,
            "minedraft": {"drafter": "process", "drafter_device": "cpu:1"}}
    child = Child(["-m", "harness.sidebyside"], spec, tmp_path, timeout_s=CHILD_TIMEOUT)
    try:
        child.ready()  # the engine and its draft engine are up
        drafter = int(DRAFTER_UP.search(child.log_path.read_text()).group(1))
        family = psutil.Process(child.proc.pid).children(recursive=True)
        assert drafter in {p.pid for p in family}
        os.kill(child.proc.pid, signal.SIGKILL)
        child.proc.wait()
        _, alive = psutil.wait_procs(family, timeout=GONE_WITHIN_S)
        # The log holds what the engine core and worker said after the kill (they share its stderr).
        assert not alive, ([(p.pid, p.name()) for p in alive], child.log_path.read_text()[-3000:])
    finally:
        child.close()


if __name__ == "__main__":
    serve(make_handler)
