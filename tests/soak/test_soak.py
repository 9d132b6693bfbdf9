"""Soak: 2,000 requests through ``minedraft serve`` with aborts and disconnects, then 1,000 more
for the memory check.

Random prompts (1..300 tokens) and outputs (1..48 tokens), 24 concurrent
clients; about 1 request in 10 streams and disconnects after a few chunks,
about 1 in 20 gives up (client timeout) mid-request. At the end:

* no request is running or waiting, and KV cache usage is back to 0 %
  (every block freed; prefix-cached blocks count as free, as in vLLM);
* the server's resident memory (API server + engine core) does not keep
  growing: after the first 1,000 requests, which grow the allocators' pools
  and caches once (measured: 640-670 MB), at least one of the next two blocks
  of 1,000 (the second half, then 1,000 fresh requests of the same kind) grows
  it by less than ``RSS_GROWTH_BOUND_MB``. A leak grows it in every block; an
  allocator reaching a new high-water mark does so once (the second half alone
  measured +98 and +229 MB on the same code, 2026-11-26);
* every completed request got all its tokens (ignore_eos);
* a sampled subset of greedy requests equals the target alone, token for token.

``make soak`` runs only this; ``make test`` runs it too.
"""

from __future__ import annotations

import random
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests
from served_engine import CHAT_TEMPLATE, MODEL_NAME, served

from modelkit import build_kit

NUM_REQUESTS = 2000
CONCURRENCY = 24
SAMPLED = 40
RSS_GROWTH_BOUND_MB = 200
DEADLINE_S = 1200
VOCAB = 2000


def make_requests(seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    reqs = []
    for i in range(NUM_REQUESTS):
        kind = "sampled" if i % (NUM_REQUESTS // SAMPLED) == 0 else rng.choices(
            ["plain", "disconnect", "give_up"], weights=[85, 10, 5])[0]
        reqs.append({"kind": kind, "prompt": [rng.randrange(3, VOCAB) for _ in range(rng.randint(1, 300))],
                     "max_tokens": rng.randint(1, 48)})
    return reqs


def body(req: dict, stream: bool = False) -> dict:
    return {"model": MODEL_NAME, "prompt": req["prompt"], "max_tokens": req["max_tokens"], "temperature": 0,
            "ignore_eos": True, "return_token_ids": True, "stream": stream}


def send(url: str, req: dict) -> dict:
    try:
        if req["kind"] == "disconnect":
            with requests.post(f"{url}/v1/completions", json=body(req, stream=True), stream=True, timeout=120) as r:
                for i, _ in enumerate(r.iter_lines()):
                    if i >= 2:
                        break
            return {"kind": "disconnect"}
        timeout = 0.05 if req["kind"] == "give_up" else 300
        r = requests.post(f"{url}/v1/completions", json=body(req), timeout=timeout)
        r.raise_for_status()
        choice = r.json()["choices"][0]
        return {"kind": req["kind"], "token_ids": choice["token_ids"]}
    except requests.Timeout:
        return {"kind": req["kind"], "timed_out": True}


def process_rss_mb(pgid: int) -> float:
    total = 0
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            pid = int(status.parent.name)
            if __import__("os").getpgid(pid) != pgid:
                continue
            for line in status.read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except (OSError, ValueError, ProcessLookupError):
            continue
    return total / 1024


@pytest.fixture(scope="module")
def soak(tmp_path_factory):
    kit = build_kit()
    tmp = tmp_path_factory.mktemp("soak")
    template = tmp / "chat.jinja"
    template.write_text(CHAT_TEMPLATE)
    reqs = make_requests()
    with served("minedraft-soak", kit, template, tmp, minedraft=True,
                extra_args=("--max-num-seqs", "32", "--enable-prefix-caching")) as server:
        for r in reqs[:8]:  # warm-up: allocator and caches settle before the baseline
            send(server.url, {**r, "kind": "plain"})
        rss = [process_rss_mb(server.proc.pid)]
        start = time.monotonic()
        results = []
        # Two blocks of the checked requests, then a block of fresh ones whose memory alone is checked.
        for block in (reqs[: NUM_REQUESTS // 2], reqs[NUM_REQUESTS // 2:], make_requests(seed=1)[: NUM_REQUESTS // 2]):
            with ThreadPoolExecutor(CONCURRENCY) as pool:
                results += pool.map(lambda r: send(server.url, r), block)
            end_metrics = server.wait_idle()
            rss.append(process_rss_mb(server.proc.pid))
        del results[NUM_REQUESTS:]
        elapsed = time.monotonic() - start
        assert elapsed < DEADLINE_S
    sampled = [(r, res) for r, res in zip(reqs, results) if r["kind"] == "sampled"]
    with served("target-soak", kit, template, tmp, minedraft=False) as target:
        expected = [send(target.url, r)["token_ids"] for r, _ in sampled]
    return {"reqs": reqs, "results": results, "metrics": end_metrics, "rss": rss,
            "sampled": sampled, "expected": expected, "elapsed": elapsed}


def test_no_request_stuck_and_every_kv_block_freed(soak):
    m = soak["metrics"]
    assert m["vllm:num_requests_running"] == 0 and m["vllm:num_requests_waiting"] == 0
    assert m["vllm:kv_cache_usage_perc"] == 0.0
    assert m["minedraft:parallel_steps_total"] > 0


def test_completed_requests_got_all_their_tokens(soak):
    done = [(r, res) for r, res in zip(soak["reqs"], soak["results"]) if "token_ids" in res]
    assert len(done) >= 0.8 * NUM_REQUESTS
    assert all(len(res["token_ids"]) == r["max_tokens"] for r, res in done)
    assert sum(res["kind"] == "disconnect" for res in soak["results"]) > 50
    assert sum(res.get("timed_out", False) for res in soak["results"]) > 20


def test_resident_memory_does_not_keep_growing(soak):
    second, third = (b - a for a, b in zip(soak["rss"][1:], soak["rss"][2:]))
    assert min(second, third) < RSS_GROWTH_BOUND_MB, "RSS " + " -> ".join(f"{mb:.0f}" for mb in soak["rss"]) + " MB"


def test_sampled_greedy_outputs_equal_the_target_alone(soak):
    got = [res["token_ids"] for _, res in soak["sampled"]]
    assert len(got) == SAMPLED
    assert got == soak["expected"]
