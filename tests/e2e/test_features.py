"""Request features under MineDraft on a real engine: stop strings, sampling
at temperature > 0 with n > 1, aborts through the async engine, and the ngram
method.

Three modes see identical requests: the target alone, stock speculative
decoding (the perturbed draft, k = 3) and MineDraft (the same plus
``scheduler_cls="minedraft"``), the latter also with its process drafter
(``minedraft_process*`` scenarios: the draft engine on core 1) and with the kit's EAGLE-3 head
(``minedraft_eagle3*``), and with probabilistic drafts (``minedraft_probabilistic``: the draft samples its
drafts, verified with their probabilities; minedraft/worker/in_process/draft_probs.py); those are pinned to
parallel steps, and each of their workloads must have run some, so none of these tests can pass on fallback
steps alone. ``minedraft_hybrid`` (suffix decoding beside the perturbed draft, hybrid/, pinned to parallel
steps with the depth chosen by step times) samples prompts that repeat a short window, which suffix decoding
drafts from. MineDraft's default (``minedraft_default``: mode auto, the kit's small draft) samples the
distribution workload beside long greedy requests (``minedraft_default_hybrid``: the repeating prompts, with
suffix decoding beside the draft), with a step-cost model the test states
(tests/e2e/policy_hooks.py) under which drafting pays for the greedy requests and the sampled ones' drafts
do not: each request's cut trims the latter. Each engine runs in
its own subprocess (this file run as a child, :mod:`harness.child`, one engine per process, several workloads
per engine), like :mod:`harness.sidebyside`, two at a time on a core each (``two_at_a_time``) but the
process drafter's.

vLLM 0.32.0 on CPU cannot chunk the prefill of a seeded request (the runner
rewinds the request's generator with ``set_offset``, which a CPU
``torch.Generator`` does not support: the engine dies, in stock vLLM too), so
these engines get a token budget no workload here exceeds (chunked prefill is
covered by ``test_exactness.py``).
"""

from __future__ import annotations

import asyncio
import functools
import threading
from pathlib import Path

import pytest

from harness.child import run_once, serve
from harness.sidebyside import two_at_a_time

K = 3
MAX_MODEL_LEN = 1024
MAX_BATCHED_TOKENS = 8192  # no prefill is ever chunked (see the module doc)
NEVER = "\x07never\x07"  # a stop string no output contains
CHILD_TIMEOUT = 900  # s per engine process: generous, other engines may share the 2 cores

# Workload sizes.
N_STOP, STOP_MAX_TOKENS = 16, 48
# Sampling: per prompt DIST_REQUESTS seeded requests with n = DIST_N samples each.
DIST_PROMPTS, DIST_PROMPT_TOKENS, DIST_REQUESTS, DIST_N, DIST_MAX_TOKENS = 3, 16, 75, 4, 4
DIST_TEMPERATURE, CONTROL_TEMPERATURE = 1.0, 0.6
DIST_ALPHA = 1e-3  # family-wise, Bonferroni over prompts x positions
# vLLM seeds sample j of a request seeded s with s + j, so request i gets
# s = base + DIST_N * i: every sample has its own seed (overlapping seeds
# repeat samples, which inflates the test statistic). Each mode and workload
# has its own base: samples of different modes are independent.
SEED_BASES = {("target", "dist"): 10_000, ("target", "dist_control"): 20_000,
              ("stock_sd", "dist"): 30_000, ("minedraft", "dist"): 40_000, ("minedraft_process", "dist"): 50_000,
              ("minedraft_probabilistic", "dist"): 60_000, ("minedraft_default", "dist"): 70_000,
              ("target", "dist_repeat"): 80_000, ("target", "dist_repeat_control"): 90_000,
              ("minedraft_hybrid", "dist_repeat"): 100_000, ("minedraft_default_hybrid", "dist_repeat"): 110_000}
# The sampling test with both draft sources (hybrid/): prompts that repeat a short window, so suffix
# decoding finds matches to draft from, sampled deeper than DIST_MAX_TOKENS so its drafts run past K. The
# depth chosen (``auto``), so each request's source is chosen by measured acceptance: at a fixed depth the
# model's drafts count as all accepted, and a sampled request verified suffix drafts 4 times in 900 (with
# ``auto``: 228 times, 92 of 363 accepted, 2026-12-03).
HYBRID = {"hybrid": {"method": "suffix", "num_speculative_tokens": 8}, "speculation_depth": "auto"}
REPEAT_UNIT_TOKENS, REPEAT_TIMES, REPEAT_MAX_TOKENS = 5, 4, 8
# Long greedy requests beside the default's sampled ones: drafting pays for them, so steps draft, and the
# sampled requests' drafts are there to be cut. Their outputs are the target alone's.
N_CARRIERS, CARRIER_MAX_TOKENS, CARRIER_MAX_SEQS = 4, 700, 16
# The default's scenarios (stated step costs, greedy carriers): the draft model alone, and with suffix decoding
# beside it (the sampled requests repeat their prompts: dist_repeat).
DEFAULT_SCENARIOS = ("minedraft_default", "minedraft_default_hybrid")
# Drafting ahead after every job (draft_ahead.py): the sampled requests verify drafts made ahead too.
PROCESS_DRAFTER = {"drafter": "process", "drafter_device": "cpu:1", "draft_ahead": "always"}
N_ABORT, ABORT_MAX_TOKENS, ABORTED = 14, 64, {1: 4, 4: 8, 7: 12, 10: 16}  # index -> abort after N tokens
N_AFTER_ABORT = 4
N_NGRAM, NGRAM_MAX_TOKENS = 18, 48


# --------------------------------------------------------------------------
# Workloads (deterministic: every process builds the same ones)
# --------------------------------------------------------------------------

def stop_prompts() -> list[list[int]]:
    from modelkit.prompts import spread_lengths, token_windows

    lengths = spread_lengths(N_STOP, seed=21, min_tokens=4, max_tokens=200)
    return [token_windows(1, n, seed=100 + i)[0] for i, n in enumerate(lengths)]


def dist_prompts() -> list[list[int]]:
    from modelkit.prompts import token_windows

    return token_windows(DIST_PROMPTS, DIST_PROMPT_TOKENS, seed=300)


def repeat_prompts() -> list[list[int]]:
    from modelkit.prompts import token_windows

    return [unit * REPEAT_TIMES for unit in token_windows(DIST_PROMPTS, REPEAT_UNIT_TOKENS, seed=310)]


def greedy_carriers() -> list[list[int]]:
    from modelkit.prompts import token_windows

    return token_windows(N_CARRIERS, DIST_PROMPT_TOKENS, seed=500)


def mode_states_costs(mode: str) -> bool:
    """The default's scenarios run with the step-cost model the test states (tests/e2e/policy_hooks.py)."""
    return mode in DEFAULT_SCENARIOS


def cuts_by_kind(record, request_ids: list[str], carrier_ids: set[str]) -> dict[str, list[int]]:
    """[requests with drafts, of them with drafts cut, steps with drafts, of them cut], carriers and the rest."""
    out = {"carriers": [0, 0, 0, 0], "sampled": [0, 0, 0, 0]}
    for rid in request_ids:
        steps, cut, *_ = record.of(rid)
        if steps:
            row = out["carriers" if rid in carrier_ids else "sampled"]
            row[0], row[1], row[2], row[3] = row[0] + 1, row[1] + (cut > 0), row[2] + steps, row[3] + cut
    return out


def abort_prompts() -> list[list[int]]:
    from modelkit.prompts import spread_lengths, token_windows

    lengths = spread_lengths(N_ABORT + N_AFTER_ABORT, seed=41, min_tokens=3, max_tokens=150)
    return [token_windows(1, n, seed=400 + i)[0] for i, n in enumerate(lengths)]


def ngram_prompts() -> list[list[int]]:
    """Repetitive prompts: a short window repeated, some with a fresh tail."""
    from modelkit.prompts import token_windows

    prompts = []
    for i in range(N_NGRAM):
        unit = token_windows(1, 6 + i % 7, seed=500 + i)[0]
        prompt = unit * (3 + i % 5)
        if i % 3 == 2:
            prompt += token_windows(1, 10, seed=600 + i)[0]
        prompts.append(prompt)
    return prompts


def pick_stops(probe: list[dict]) -> list[dict]:
    """Per stop request: stop strings / stop token ids taken from the target's
    unconstrained output, so most requests really stop early."""
    picks = []
    for i, out in enumerate(probe):
        text, ids = out["text"], out["token_ids"]
        kind = ("string", "string_included", "string_and_never", "never")[i % 4]
        if i % 8 == 6:
            kind = "token_id"
        pick = {"kind": kind, "stop": [], "stop_token_ids": [], "include": kind == "string_included"}
        if kind == "never":
            pick["stop"] = [NEVER]
        elif kind == "token_id":
            pick["stop_token_ids"] = [ids[len(ids) // 2]]
        else:
            length = 3 + i % 3
            start = int(len(text) * (0.2 + 0.6 * ((i * 37) % 10) / 10))
            start = min(start, max(0, len(text) - length))
            while start + length < len(text) and not text[start:start + length].strip():
                start += 1
            stop = text[start:start + length]
            assert stop.strip(), f"request {i}: no usable stop string in {text!r}"
            pick["stop"] = [stop, NEVER] if kind == "string_and_never" else [stop]
        picks.append(pick)
    return picks


# --------------------------------------------------------------------------
# Engine side (runs in a subprocess: python this_file.py SPEC_JSON OUT_JSON)
# --------------------------------------------------------------------------

def engine_kwargs(scenario: str) -> dict:
    """Scenario -> engine: ``minedraft*`` scenarios run MineDraft pinned to parallel mode, but the default."""
    from harness.engine_args import Speculation
    from harness.engine_args import engine_kwargs as mode_kwargs
    from modelkit import build_kit

    kit = build_kit()
    mode = {"target": "no_sd", "stock_sd": "stock_sd", **dict.fromkeys(DEFAULT_SCENARIOS, "minedraft_auto")}.get(
        scenario, "minedraft_parallel")
    engine = {}
    if scenario in DEFAULT_SCENARIOS:  # a draft smaller than the target: depths the weight bound leaves
        speculation = Speculation(str(kit.draft_small), K)
        engine["max_num_seqs"] = CARRIER_MAX_SEQS
    elif scenario == "minedraft_ngram":
        speculation = Speculation(None, K, "ngram", {"prompt_lookup_min": 2, "prompt_lookup_max": 4})
    elif "eagle3" in scenario:
        speculation = Speculation(str(kit.eagle3), K, "eagle3")
    elif scenario == "minedraft_probabilistic":  # drafts sampled, verified with their probabilities
        speculation = Speculation(str(kit.draft_perturbed), K, extra={"draft_sample_method": "probabilistic"})
    else:
        speculation = Speculation(str(kit.draft_perturbed), K)
    settings = PROCESS_DRAFTER if "process" in scenario else HYBRID if scenario.endswith("hybrid") else None
    return mode_kwargs(mode, str(kit.target), speculation, max_model_len=MAX_MODEL_LEN,
                       minedraft=settings,
                       enable_chunked_prefill=True, max_num_batched_tokens=MAX_BATCHED_TOKENS,
                       enable_prefix_caching=True, **engine)


def summarize(request_outputs) -> list[dict]:
    """Per request, per sample (ordered by sample index)."""
    rows = []
    for o in request_outputs:
        samples = sorted(o.outputs, key=lambda c: c.index)
        rows.append([{"token_ids": list(c.token_ids), "text": c.text, "finish_reason": c.finish_reason,
                      "stop_reason": c.stop_reason} for c in samples])
    return rows


def counters(metrics) -> dict:
    out: dict = {}
    for m in metrics:
        if hasattr(m, "value") and (m.name.startswith("minedraft:") or m.name.startswith("vllm:spec_decode")):
            out[m.name] = out.get(m.name, 0) + m.value
    return out


def delta(after: dict, before: dict) -> dict:
    return {k: v - before.get(k, 0) for k, v in after.items()}


def run_sync(spec: dict) -> dict:
    import os

    if mode_states_costs(spec["mode"]):
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine core in this process: its policy is at hand
    from vllm import LLM, SamplingParams

    mode = spec["mode"]
    llm = LLM(**engine_kwargs(mode))
    result: dict = {"mode": mode, "phases": {}, "metrics": {}}
    record = None
    if mode_states_costs(mode):
        from tests.e2e.policy_hooks import PlanRecord, state_costs

        state_costs(llm)
        record = PlanRecord(llm)

    def phase(name, prompts, params):
        before = counters(llm.get_metrics())
        outs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
        result["phases"][name] = summarize(outs)
        result.setdefault("request_ids", {})[name] = [o.request_id for o in outs]
        result["metrics"][name] = delta(counters(llm.get_metrics()), before)

    greedy = dict(temperature=0, ignore_eos=True)
    if "stop" in spec["workloads"]:
        prompts = stop_prompts()
        picks = spec.get("stop_picks")
        if picks is None:  # the target alone picks them from its own unconstrained output
            phase("stop_probe", prompts, SamplingParams(**greedy, max_tokens=STOP_MAX_TOKENS))
            picks = pick_stops([r[0] for r in result["phases"]["stop_probe"]])
        result["stop_picks"] = picks
        phase("stop", prompts, [SamplingParams(**greedy, max_tokens=STOP_MAX_TOKENS, stop=p["stop"],
                                               stop_token_ids=p["stop_token_ids"],
                                               include_stop_str_in_output=p["include"]) for p in picks])
    carried = greedy_carriers() if mode_states_costs(mode) else []
    for name, temperature in (("dist", DIST_TEMPERATURE), ("dist_control", CONTROL_TEMPERATURE),
                              ("dist_repeat", DIST_TEMPERATURE), ("dist_repeat_control", CONTROL_TEMPERATURE)):
        if name in spec["workloads"]:
            repeat = name.startswith("dist_repeat")
            prompts = [p for p in (repeat_prompts() if repeat else dist_prompts()) for _ in range(DIST_REQUESTS)]
            base = SEED_BASES[mode, name]
            # The carriers first: they hold 4 of the 16 slots from the phase's start, so the sampled
            # requests stream through the others beside them (behind them, only the last few would).
            phase(name, carried + prompts,
                  [SamplingParams(**greedy, max_tokens=CARRIER_MAX_TOKENS)] * len(carried)
                  + [SamplingParams(temperature=temperature, n=DIST_N, seed=base + DIST_N * i,
                                    max_tokens=REPEAT_MAX_TOKENS if repeat else DIST_MAX_TOKENS, ignore_eos=True)
                     for i in range(len(prompts))])
            if carried:
                rows, ids = result["phases"][name], result["request_ids"][name]
                result["phases"]["carriers"], result["phases"][name] = rows[:len(carried)], rows[len(carried):]
                result["cuts"] = cuts_by_kind(record, ids, set(ids[:len(carried)]))
    if "carriers" in spec["workloads"]:
        phase("carriers", greedy_carriers(), SamplingParams(**greedy, max_tokens=CARRIER_MAX_TOKENS))
    if "abort_ref" in spec["workloads"]:
        phase("abort_ref", abort_prompts(), SamplingParams(**greedy, max_tokens=ABORT_MAX_TOKENS))
    if "ngram" in spec["workloads"]:
        phase("ngram", ngram_prompts(), SamplingParams(**greedy, max_tokens=NGRAM_MAX_TOKENS))
    return result


async def run_async(spec: dict) -> dict:
    """Streams the abort workload through AsyncLLM; aborts some requests by id
    as soon as they have streamed a given number of tokens."""
    from prometheus_client import REGISTRY
    from vllm import SamplingParams
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    engine = AsyncLLM.from_engine_args(AsyncEngineArgs(**engine_kwargs(spec["mode"])))
    prompts = abort_prompts()
    params = SamplingParams(temperature=0, ignore_eos=True, max_tokens=ABORT_MAX_TOKENS)
    records: dict[int, dict] = {}

    async def consume(i: int) -> None:
        rid = f"req-{i}"
        rec = records[i] = {"token_ids": [], "finish_reason": None, "aborted_at": None, "outputs": 0}
        async for out in engine.generate({"prompt_token_ids": prompts[i]}, params, request_id=rid):
            rec["outputs"] += 1
            rec["token_ids"] = list(out.outputs[0].token_ids)
            rec["finish_reason"] = out.outputs[0].finish_reason
            if (i in ABORTED and rec["aborted_at"] is None and not out.finished
                    and len(rec["token_ids"]) >= ABORTED[i]):
                rec["aborted_at"] = len(rec["token_ids"])
                await engine.abort(rid)
        rec["ended"] = True

    def parallel_steps() -> float:
        return REGISTRY.get_sample_value("minedraft:parallel_steps_total", {"engine": "0"}) or 0.0

    try:
        first = [asyncio.create_task(consume(i)) for i in range(N_ABORT)]
        done, pending = await asyncio.wait(first, timeout=spec["timeout"])
        for t in pending:
            t.cancel()
        errors = [repr(t.exception()) for t in done if t.exception() is not None]
        steps_first = parallel_steps()
        # The engine keeps serving after the aborts.
        second = [asyncio.create_task(consume(i)) for i in range(N_ABORT, N_ABORT + N_AFTER_ABORT)]
        done2, pending2 = await asyncio.wait(second, timeout=spec["timeout"])
        for t in pending2:
            t.cancel()
        errors += [repr(t.exception()) for t in done2 if t.exception() is not None]
        return {"mode": spec["mode"], "records": {str(i): r for i, r in records.items()},
                "pending": len(pending) + len(pending2), "errors": errors,
                "metrics": {"parallel_steps_first_wave": steps_first, "parallel_steps": parallel_steps()}}
    finally:
        engine.shutdown()


def make_handler(spec: dict):
    def run(command: dict) -> dict:
        return asyncio.run(run_async(spec)) if spec["mode"].endswith("_async") else run_sync(spec)

    return run


# --------------------------------------------------------------------------
# Test side
# --------------------------------------------------------------------------

def run_child(tmp_dir: Path, spec: dict, env: dict[str, str] | None = None) -> dict:
    return run_once([__file__], {"name": spec["mode"], **spec}, log_dir=tmp_dir, env=env, timeout_s=CHILD_TIMEOUT)


# The engines that may share the machine, one core each (two_at_a_time), in the order they start: the target
# alone first, then those that need nothing of it, then those that stop where it picked (its stop_picks).
PAIRED = {"target": {"workloads": ["stop", "dist", "dist_control", "abort_ref", "ngram", "carriers", "dist_repeat",
                               "dist_repeat_control"]},
          "minedraft_async": {"timeout": 600}, "minedraft_eagle3_async": {"timeout": 600},
          "minedraft_default": {"workloads": ["dist"]}, "minedraft_ngram": {"workloads": ["ngram"]},
          "minedraft_hybrid": {"workloads": ["dist_repeat"]}, "minedraft_default_hybrid": {"workloads": ["dist_repeat"]},
          "stock_sd": {"workloads": ["stop", "dist"], "stops": True},
          "minedraft": {"workloads": ["stop", "dist"], "stops": True},
          "minedraft_probabilistic": {"workloads": ["stop", "dist"], "stops": True}}
# The process drafter's engines run alone: they place the target and the draft engine on cores themselves.
ALONE = {"minedraft_process": {"workloads": ["stop", "dist"], "stops": True},
         "minedraft_process_async": {"timeout": 600}}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("features")


@pytest.fixture(scope="module")
def feature_runs(workdir) -> dict[str, dict]:
    """Every mode's engine, run once for the module: two at a time where they may share the machine."""
    target_done = threading.Event()
    results: dict[str, dict | Exception] = {}

    def run(mode: str, options: dict, env: dict[str, str]) -> dict | Exception:
        spec = {"mode": mode, **{k: v for k, v in options.items() if k != "stops"}}
        try:
            if options.get("stops"):
                target_done.wait()  # started after the target (PAIRED's order): waits on a running engine
                if isinstance(results.get("target"), Exception):
                    raise RuntimeError("the target alone's engine failed: no stop picks to run with")
                spec["stop_picks"] = results["target"]["stop_picks"]
            results[mode] = run_child(workdir, spec, env)
        except Exception as e:  # the tests of this mode fail with it (its fixture raises), the others run
            results[mode] = e
        finally:
            if mode == "target":
                target_done.set()
        return results[mode]

    paired = two_at_a_time({mode: functools.partial(run, mode, options) for mode, options in PAIRED.items()})
    return {**paired, **{mode: run(mode, options, {}) for mode, options in ALONE.items()}}


def _fixture_of(mode: str):
    @pytest.fixture(scope="module", name=mode)
    def fixture(feature_runs):
        if isinstance(feature_runs[mode], Exception):
            raise feature_runs[mode]
        return feature_runs[mode]

    return fixture


target, stock_sd, minedraft, minedraft_process, minedraft_default, minedraft_probabilistic = map(
    _fixture_of, ["target", "stock_sd", "minedraft", "minedraft_process", "minedraft_default",
                  "minedraft_probabilistic"])
minedraft_async, minedraft_process_async, minedraft_eagle3_async, minedraft_ngram, minedraft_hybrid = map(
    _fixture_of, ["minedraft_async", "minedraft_process_async", "minedraft_eagle3_async", "minedraft_ngram",
                  "minedraft_hybrid"])
minedraft_default_hybrid = _fixture_of("minedraft_default_hybrid")


def first_difference(a: list[int], b: list[int]) -> int | None:
    for pos, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return pos
    return None if len(a) == len(b) else min(len(a), len(b))


def differences(got: list[list[dict]], want: list[list[dict]], key: str = "token_ids") -> list[str]:
    """'request i sample j: first difference at position p (lengths a/b)' for each differing sample."""
    assert len(got) == len(want)
    report = []
    for i, (g, w) in enumerate(zip(got, want)):
        if len(g) != len(w):
            report.append(f"request {i}: {len(g)} samples, expected {len(w)}")
            continue
        for j, (gs, ws) in enumerate(zip(g, w)):
            if key == "token_ids":
                pos = first_difference(gs[key], ws[key])
                if pos is not None:
                    report.append(f"request {i} sample {j}: first difference at token {pos} "
                                  f"(lengths {len(gs[key])}/{len(ws[key])})")
            elif gs[key] != ws[key]:
                report.append(f"request {i} sample {j}: {key} {gs[key]!r} != {ws[key]!r}")
    return report


def assert_parallel(result: dict, phase: str) -> None:
    m = result["metrics"][phase]
    assert m.get("minedraft:parallel_steps", 0) > 0, f"{result['mode']}/{phase}: no parallel steps: {m}"
    assert m.get("minedraft:draft_only_requests", 0) > 0, f"{result['mode']}/{phase}: {m}"


# 1. Stop strings -----------------------------------------------------------

def test_stop_strings_really_stop(target):
    probe = [r[0] for r in target["phases"]["stop_probe"]]
    stopped = [r[0] for r in target["phases"]["stop"]]
    n_stopped = 0
    for i, (pick, p, s) in enumerate(zip(target["stop_picks"], probe, stopped)):
        if pick["kind"] == "never":
            assert s["finish_reason"] == "length" and s["token_ids"] == p["token_ids"], i
            continue
        assert s["finish_reason"] == "stop", (i, pick, s)
        assert len(s["token_ids"]) < len(p["token_ids"]) or pick["kind"] == "token_id", (i, pick)
        if pick["kind"] == "token_id":
            tid = pick["stop_token_ids"][0]
            assert s["stop_reason"] == tid
            cut = p["token_ids"].index(tid) + 1
            assert s["token_ids"] == p["token_ids"][:cut], i
        else:
            stop = pick["stop"][0]
            assert s["stop_reason"] == stop, (i, pick, s["stop_reason"])
            cut = p["text"].index(stop)
            want = p["text"][:cut + len(stop)] if pick["include"] else p["text"][:cut]
            assert s["text"] == want, (i, pick)
            assert p["token_ids"][:len(s["token_ids"])] == s["token_ids"], i
        n_stopped += 1
    assert n_stopped >= N_STOP // 2


@pytest.mark.parametrize("mode", ["stock_sd", "minedraft", "minedraft_process", "minedraft_probabilistic"])
def test_stop_strings_same_in_all_modes(target, mode, request):
    got = request.getfixturevalue(mode)
    assert got["stop_picks"] == target["stop_picks"]
    for key in ("token_ids", "text", "finish_reason", "stop_reason"):
        diff = differences(got["phases"]["stop"], target["phases"]["stop"], key)
        assert not diff, f"{mode} vs target alone, {key}: " + "; ".join(diff)
    assert any(r[0]["finish_reason"] == "stop" and r[0]["stop_reason"] != NEVER for r in got["phases"]["stop"])
    if mode.startswith("minedraft"):
        assert_parallel(got, "stop")


# 2. Sampling at temperature > 0, n > 1 -----------------------------------------
# Seeded samples cannot be compared token for token with stock SD: stock SD in
# vLLM 0.32.0 is not reproducible itself. The same seeded request gives
# different tokens in a batch and alone (measured on this CPU: 8 of 8 requests
# differ within 3 tokens, while the target alone gives identical tokens),
# because the rejection sampler's random draws depend on the batch. MineDraft
# changes the batches, so it guarantees the distribution, not the draws. The
# test: per prompt and output position, a chi-square homogeneity test of the
# token frequencies against the target alone's (300 samples each); a control
# at another temperature must be rejected by the same test (the test has power).
# Stock SD fails that test on CPU: vLLM 0.32.0's CPU rejection sampler expands
# the per-request temperature into uninitialised memory. MineDraft's worker
# fixes that (patch_cpu_sampling_expand), so MineDraft is compared with the
# target alone, and stock SD's deviation is asserted as the known bug.

def samples_by_position(rows: list[list[dict]], prompt: int, position: int) -> list[int]:
    mine = rows[prompt * DIST_REQUESTS:(prompt + 1) * DIST_REQUESTS]
    return [s["token_ids"][position] for r in mine for s in r]


def chi_square_p(a: list[int], b: list[int]) -> float:
    """p-value that two samples of tokens come from one distribution: tokens
    rarer than 5 expected counts are pooled; Wilson-Hilferty for the tail."""
    import math
    from collections import Counter

    ca, cb, na, nb = Counter(a), Counter(b), len(a), len(b)
    total = na + nb
    cells, rare = [], [0, 0]
    for tok in set(ca) | set(cb):
        if (ca[tok] + cb[tok]) * min(na, nb) / total < 5:
            rare[0] += ca[tok]
            rare[1] += cb[tok]
        else:
            cells.append((ca[tok], cb[tok]))
    if sum(rare):
        cells.append(tuple(rare))
    if len(cells) < 2:
        return 1.0
    stat = 0.0
    for x, y in cells:
        for observed, n in ((x, na), (y, nb)):
            expected = (x + y) * n / total
            stat += (observed - expected) ** 2 / expected
    df = len(cells) - 1
    z = ((stat / df) ** (1 / 3) - (1 - 2 / (9 * df))) / math.sqrt(2 / (9 * df))
    return 0.5 * math.erfc(z / math.sqrt(2))


def distribution_p_values(got: list[list[dict]], want: list[list[dict]],
                          max_tokens: int = DIST_MAX_TOKENS) -> dict[tuple[int, int], float]:
    return {(p, pos): chi_square_p(samples_by_position(got, p, pos), samples_by_position(want, p, pos))
            for p in range(DIST_PROMPTS) for pos in range(1, max_tokens)}


@pytest.mark.parametrize("mode", ["minedraft", "minedraft_process", "minedraft_probabilistic"])
def test_sampling_workload_samples(mode, request):
    minedraft = request.getfixturevalue(mode)
    rows = minedraft["phases"]["dist"]
    assert len(rows) == DIST_PROMPTS * DIST_REQUESTS
    assert all(len(r) == DIST_N and all(len(s["token_ids"]) == DIST_MAX_TOKENS for s in r) for r in rows)
    # Children get seeds seed + index: their streams differ.
    assert sum(len({tuple(s["token_ids"]) for s in r}) > 1 for r in rows) > len(rows) // 2
    assert_parallel(minedraft, "dist")


def test_distribution_test_has_power(target):
    p_values = distribution_p_values(target["phases"]["dist_control"], target["phases"]["dist"])
    assert min(p_values.values()) < DIST_ALPHA / len(p_values), p_values


@pytest.mark.parametrize("mode", ["minedraft", "minedraft_process", "minedraft_probabilistic", "minedraft_default"])
def test_sampled_distribution_matches_target(target, mode, request):
    minedraft = request.getfixturevalue(mode)
    p_values = distribution_p_values(minedraft["phases"]["dist"], target["phases"]["dist"])
    worst = min(p_values, key=p_values.get)
    assert p_values[worst] >= DIST_ALPHA / len(p_values), f"prompt/position {worst}: p = {p_values[worst]:.2e}"


def test_distribution_test_has_power_on_prompts_that_repeat(target):
    p_values = distribution_p_values(target["phases"]["dist_repeat_control"], target["phases"]["dist_repeat"],
                                     REPEAT_MAX_TOKENS)
    assert min(p_values.values()) < DIST_ALPHA / len(p_values), p_values


@pytest.mark.parametrize("mode", ["minedraft_hybrid", "minedraft_default_hybrid"])
def test_sampled_distribution_with_both_draft_sources_matches_target(target, mode, request):
    """Suffix decoding beside the draft model (hybrid/): a lookup draft has no probabilities (vLLM's suffix and
    n-gram drafts have none), so vLLM's rejection sampler verifies it as one token for sure, as it verifies the
    greedy model drafts beside it in the same batch. On pinned parallel steps, and under the default beside
    greedy requests, where the drafter skips the rows of requests drafted by suffix decoding."""
    rows = request.getfixturevalue(mode)["phases"]["dist_repeat"]
    assert all(len(r) == DIST_N and all(len(s["token_ids"]) == REPEAT_MAX_TOKENS for s in r) for r in rows)
    p_values = distribution_p_values(rows, target["phases"]["dist_repeat"], REPEAT_MAX_TOKENS)
    worst = min(p_values, key=p_values.get)
    assert p_values[worst] >= DIST_ALPHA / len(p_values), f"prompt/position {worst}: p = {p_values[worst]:.2e}"


@pytest.mark.parametrize("mode", ["minedraft_hybrid", "minedraft_default_hybrid"])
def test_both_draft_sources_drafted_the_sampled_requests(mode, request):
    m = request.getfixturevalue(mode)["metrics"]["dist_repeat"]
    assert m.get("minedraft:lookup_requests", 0) > 0 and m.get("minedraft:lookup_accepted", 0) > 0, m
    assert m["vllm:spec_decode_num_draft_tokens"] > m["minedraft:lookup_drafts"], m  # the model's drafts too


def test_the_drafter_skipped_the_rows_of_requests_drafted_by_suffix_decoding(minedraft_default_hybrid):
    """Under the default, steps where some requests verified suffix drafts and the greedy ones the model's: the
    model drafter drafted after them for the latter alone (policy ``_unused_model_drafts``,
    worker/in_process/call_rows.py), and caught the others up when next drafted (the greedy requests' outputs
    are the target alone's: test_the_greedy_requests_..., the sampled ones' distribution above)."""
    m = minedraft_default_hybrid["metrics"]["dist_repeat"]
    assert m.get("minedraft:undrafted_requests", 0) > 0, m
    assert m.get("minedraft:lookup_only_steps", 0) < m["minedraft:fallback_steps"], m


def test_each_request_s_cut_trimmed_the_sampled_requests_drafts(minedraft_default):
    """The distribution test above with MineDraft's default beside greedy requests: each request verified the
    drafts its own acceptance pays for (policy/paying_drafts.py), so drafts of the sampled requests (their first
    accepted about a quarter of the time) were cut short, counted per request, and the greedy requests' mostly
    were not."""
    m, cuts = minedraft_default["metrics"]["dist"], minedraft_default["cuts"]
    assert m.get("minedraft:drafts_trimmed", 0) > 0 and m.get("minedraft:requests_trimmed", 0) > 0, m
    sampled, carriers = cuts["sampled"], cuts["carriers"]
    assert carriers[0] == N_CARRIERS and sampled[0] >= DIST_PROMPTS * DIST_REQUESTS // 2, cuts  # beside carriers
    assert sampled[1] >= sampled[0] // 2, cuts  # most sampled requests verified with drafts cut
    assert sampled[3] / sampled[2] > 2 * carriers[3] / carriers[2], cuts  # steps cut, of steps with drafts


@pytest.mark.parametrize("mode", DEFAULT_SCENARIOS)
def test_the_greedy_requests_beside_the_sampled_ones_are_the_target_alone_s(target, mode, request):
    diff = differences(request.getfixturevalue(mode)["phases"]["carriers"], target["phases"]["carriers"])
    assert not diff, "; ".join(diff)


def acceptance(result: dict, phase: str) -> float:
    m = result["metrics"][phase]
    return m["vllm:spec_decode_num_accepted_tokens"] / m["vllm:spec_decode_num_draft_tokens"]


def test_sampled_drafts_are_verified_with_their_probabilities(minedraft, minedraft_probabilistic):
    """Verified as one-hot, a sampled draft token is still exact (the residual distribution covers it)
    but accepted with probability p(x) instead of min(1, p(x) / q(x)). Measured on the kit's pair at
    temperature 1 (2026-11-27): 56.6 % accepted with the probabilities, 14.7 % one-hot, 23.8 % for
    greedy drafts (the ``minedraft`` row)."""
    with_probs, greedy_drafts = acceptance(minedraft_probabilistic, "dist"), acceptance(minedraft, "dist")
    assert with_probs >= 1.5 * greedy_drafts, (with_probs, greedy_drafts)


def test_stock_sd_distribution_is_off_on_cpu(target, stock_sd):
    """vLLM 0.32.0's own SD on CPU samples with uninitialised temperatures
    (monkeypatch/patch_cpu_sampling_expand.py, which MineDraft's worker
    applies). If this fails, vLLM fixed it: drop the patch."""
    p_values = distribution_p_values(stock_sd["phases"]["dist"], target["phases"]["dist"])
    assert min(p_values.values()) < DIST_ALPHA / len(p_values), p_values


# 3. Aborts through the async engine ------------------------------------------

@pytest.mark.parametrize("mode", ["minedraft_async", "minedraft_process_async", "minedraft_eagle3_async"])
def test_aborts_async(target, mode, request):
    res = request.getfixturevalue(mode)
    assert not res["errors"], res["errors"]
    assert res["pending"] == 0, "requests still streaming at the timeout"
    ref = [r[0]["token_ids"] for r in target["phases"]["abort_ref"]]
    recs = {int(i): r for i, r in res["records"].items()}
    assert sorted(recs) == list(range(N_ABORT + N_AFTER_ABORT))
    mismatches = []
    for i, rec in recs.items():
        assert rec.get("ended"), f"request {i} never ended"
        if i in ABORTED:
            assert rec["aborted_at"] is not None, f"request {i} finished before its abort: {rec}"
            assert rec["finish_reason"] == "abort", (i, rec["finish_reason"])
            assert len(rec["token_ids"]) < ABORT_MAX_TOKENS
            # What streamed before the abort is still the target's greedy output.
            pos = first_difference(rec["token_ids"], ref[i][:len(rec["token_ids"])])
            if pos is not None:
                mismatches.append(f"aborted request {i}: first difference at token {pos}")
        else:
            assert rec["finish_reason"] == "length", (i, rec["finish_reason"])
            pos = first_difference(rec["token_ids"], ref[i])
            if pos is not None:
                mismatches.append(f"request {i}: first difference at token {pos} "
                                  f"(lengths {len(rec['token_ids'])}/{len(ref[i])})")
    assert not mismatches, "MineDraft (async) vs target alone: " + "; ".join(mismatches)
    assert res["metrics"]["parallel_steps_first_wave"] > 0, res["metrics"]


# 4. ngram -----------------------------------------------------------------------

def test_ngram_matches_target(target, minedraft_ngram):
    got, want = minedraft_ngram["phases"]["ngram"], target["phases"]["ngram"]
    assert len(got) == len(want) >= 16
    diff = differences(got, want)
    assert not diff, "MineDraft ngram vs target alone: " + "; ".join(diff)
    m = minedraft_ngram["metrics"]["ngram"]
    assert m.get("vllm:spec_decode_num_accepted_tokens", 0) > 0, m
    assert_parallel(minedraft_ngram, "ngram")


if __name__ == "__main__":
    serve(make_handler)
