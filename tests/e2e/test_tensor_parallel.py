"""A tensor-parallel target (TP 2, a worker process per rank, one core each) with the in-process drafter.

vLLM shards the draft model over the target's tensor-parallel group, so MineDraft drafts on the
serial lane there (``engine_arguments.lane_for_tensor_parallelism``): with a lane thread, the ranks met
mismatched collectives (gloo aborted rank 1 on "Received data size doesn't match expected size").
Exactness: the kit's 48-request mix (chunked prefill, prefix caching, preemption) in parallel mode
against the target alone at TP 2 (float32 sums split over two ranks need not match TP 1's), with the
in-process drafter and with the process drafter (its engine on core 1, which rank 1 also uses: a
correctness setting, not a speed one), which only rank 0 talks to; and with suffix decoding beside the
draft model (``hybrid``: its drafts made in the scheduler, which every rank's batch follows).
Faults: a draft job that never returns on rank 1 leaves rank 0 waiting inside a collective; the
engine must end with an error within MineDraft's bound on a draft job (``lane_timeout_s``), with
one line naming the rank, and no process it started may stay.
"""

from __future__ import annotations

import re
import time

import psutil
import pytest

from harness.child import Child
from harness.sidebyside import CHILD, mode_spec, run_mode
from modelkit import build_kit
from tests.e2e.fault_injection import FAULT_WORKER

TP = 2
ONE_CORE_PER_RANK = {"VLLM_CPU_OMP_THREADS_BIND": "0|1"}
SERIAL_LANE_LINE = "the in-process drafter runs on the serial lane"
# MineDraft's bound on one draft job (worker/in_process/job_watchdog.py), well under vLLM's on a step
# (VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS, 300 s by default).
LANE_TIMEOUT_S = 5
EXECUTE_TIMEOUT_S = 300
GONE_WITHIN_S = 10


@pytest.fixture(scope="module")
def kit():
    return build_kit()


def run_tp(mode: str, kit, log_dir, minedraft: dict | None = None) -> dict:
    result = run_mode(mode, str(kit.target), str(kit.draft_perturbed), tensor_parallel_size=TP,
                      env=ONE_CORE_PER_RANK, log_dir=log_dir, minedraft=minedraft)
    return {**result, "log": (log_dir / f"{mode}.log").read_text()}


@pytest.fixture(scope="module")
def target_alone_tp(kit, tmp_path_factory):
    return run_tp("no_sd", kit, tmp_path_factory.mktemp("target_alone_tp"))


@pytest.fixture(scope="module")
def minedraft_tp(kit, tmp_path_factory):
    return run_tp("minedraft_parallel", kit, tmp_path_factory.mktemp("minedraft_tp"))


@pytest.fixture(scope="module")
def minedraft_process_tp(kit, tmp_path_factory):
    return run_tp("minedraft_parallel", kit, tmp_path_factory.mktemp("minedraft_process_tp"),
                  {"drafter": "process", "drafter_device": "cpu:1"})


@pytest.fixture(scope="module")
def minedraft_hybrid_tp(kit, tmp_path_factory):
    return run_tp("minedraft_parallel", kit, tmp_path_factory.mktemp("minedraft_hybrid_tp"),
                  {"hybrid": {"method": "suffix", "num_speculative_tokens": 16}})


@pytest.mark.parametrize("run", ["minedraft_tp", "minedraft_process_tp", "minedraft_hybrid_tp"])
def test_minedraft_at_tp2_matches_the_target_alone_at_tp2(target_alone_tp, run, request):
    result = request.getfixturevalue(run)
    assert result["tokens"] == target_alone_tp["tokens"]
    m = result["metrics"]
    assert m["minedraft:parallel_steps"] > 0 and m["vllm:spec_decode_num_accepted_tokens"] > 0
    assert m.get("vllm:num_preemptions", 0) > 0


def test_both_hybrid_sources_drafted_at_tp2(minedraft_hybrid_tp):
    m = minedraft_hybrid_tp["metrics"]
    assert m["minedraft:lookup_requests"] > 0 and m["minedraft:lookup_accepted"] > 0, m
    assert m["vllm:spec_decode_num_drafts"] > m["minedraft:lookup_requests"], m  # the model's drafts verified too


def test_the_serial_lane_is_said_once(minedraft_tp):
    lines = [line for line in minedraft_tp["log"].splitlines() if SERIAL_LANE_LINE in line]
    assert len(lines) == 1 and "tensor parallelism 2" in lines[0], lines


def test_a_rank_stuck_in_its_draft_job_ends_the_engine_and_leaves_no_process(kit, tmp_path):
    spec = mode_spec("minedraft_parallel", str(kit.target), str(kit.draft_perturbed), num_requests=8,
                     worker_cls=FAULT_WORKER, tensor_parallel_size=TP, minedraft={"lane_timeout_s": LANE_TIMEOUT_S})
    env = {**ONE_CORE_PER_RANK, "MINEDRAFT_INJECT_FAULT": "draft_lane_hang_rank1"}
    with Child(CHILD, spec, tmp_path, env=env, timeout_s=EXECUTE_TIMEOUT_S) as child:
        child.ready()
        family = psutil.Process(child.proc.pid).children(recursive=True)
        # Python's multiprocessing resource tracker exits with the front end, by design.
        engine = [p for p in family if "resource_tracker" not in " ".join(p.cmdline())]
        assert sum("VllmWorker" in p.name() or "Worker_TP" in p.name() for p in engine) == TP, \
            [p.name() for p in engine]
        start = time.monotonic()
        with pytest.raises(RuntimeError, match="EngineCore encountered an issue|EngineDeadError"):
            child.call({"cmd": "run"})
        # The lane's bound, not vLLM's execute timeout (300 s), ended it.
        assert time.monotonic() - start < LANE_TIMEOUT_S + 30
        _, alive = psutil.wait_procs(engine, timeout=GONE_WITHIN_S)
        assert not alive, [(p.pid, p.name()) for p in alive]
    said = [line for line in child.log_path.read_text().splitlines() if "minedraft: a draft job on rank" in line]
    assert said and all("lane_timeout_s=5 s" in line for line in said), said


def test_only_rank_0_starts_a_draft_engine(minedraft_process_tp):
    log = minedraft_process_tp["log"].splitlines()
    pids = [re.search(r"pid=(\d+)", line).group(1) for line in log
            if "MineDraft draft source: the process drafter" in line]
    rank0 = {m.group(1) for line in log if (m := re.match(r"\(Worker_TP0 pid=(\d+)\)", line))}
    assert len(pids) == 1 and pids[0] in rank0, (pids, rank0)
    assert not any(SERIAL_LANE_LINE in line for line in log)
