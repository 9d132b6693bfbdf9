"""Scheduler cost per engine step, MineDraft vs vLLM's scheduler (no model).

32 running decode requests, k = 3, every draft accepted; one benchmark round
is one step: ``schedule`` + ``update_from_output`` + ``update_draft_token_ids``.
"""

from __future__ import annotations

import pytest
from scheduler_harness import FakeWorker, fake_model_dir, make_request, make_scheduler
from vllm.v1.core.sched.scheduler import Scheduler

from minedraft.scheduling.scheduler import MineDraftScheduler

NUM_REQUESTS = 32


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return fake_model_dir(tmp_path_factory.mktemp("model"))


def running_scheduler(model_dir, cls):
    sched = make_scheduler(model_dir, cls, num_blocks=100_000)
    for i in range(NUM_REQUESTS):
        sched.add_request(make_request(f"r{i}", 64, 1_000_000))
    worker = FakeWorker(3, lambda rid, n: n)
    for _ in range(4):  # past prefill, into steady decoding
        worker.step(sched, sched.schedule())
    return sched, worker


@pytest.mark.parametrize("cls", [Scheduler, MineDraftScheduler], ids=["stock", "minedraft"])
def test_scheduler_step(benchmark, model_dir, cls):
    sched, worker = running_scheduler(model_dir, cls)

    def step():
        worker.step(sched, sched.schedule())

    benchmark.pedantic(step, rounds=200, warmup_rounds=10)
    assert len(sched.running) == NUM_REQUESTS
