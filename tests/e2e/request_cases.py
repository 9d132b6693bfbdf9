"""Unusual and invalid requests through one engine (a child, :mod:`harness.child`).

The spec names the mode (``stock_sd`` or ``minedraft_parallel``). Each case records either the outputs or the error vLLM raised
(type and message), then a plain greedy request checks the engine still works. Under MineDraft the engine core
runs in this process, so each request's drafts held, cut and verified are counted (tests/e2e/policy_hooks.py).
"""

from __future__ import annotations

from harness.child import serve
from harness.engine_args import Speculation, engine_kwargs

MAX_MODEL_LEN = 512
SPECULATIVE_MAX_MODEL_LEN = 256  # the speculative config's: past it a request verifies no drafts under MineDraft


def cases(vocab: int):
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    prompt = {"prompt_token_ids": [(11 * i) % (vocab - 3) + 3 for i in range(40)]}
    greedy = dict(temperature=0, max_tokens=24, ignore_eos=True)
    return {
        "prompt_over_max_model_len": lambda: ([{"prompt_token_ids": [5] * (MAX_MODEL_LEN + 10)}],
                                              SamplingParams(**greedy)),
        "max_tokens_0": lambda: ([prompt], SamplingParams(temperature=0, max_tokens=0)),
        "negative_temperature": lambda: ([prompt], SamplingParams(temperature=-1.0, max_tokens=8)),
        "top_p_zero": lambda: ([prompt], SamplingParams(top_p=0.0, max_tokens=8)),
        "logprobs": lambda: ([prompt] * 3, SamplingParams(**greedy, logprobs=3)),
        "prompt_logprobs": lambda: ([prompt] * 3, SamplingParams(**greedy, prompt_logprobs=2)),
        "structured_regex": lambda: ([prompt] * 4, SamplingParams(
            temperature=0, max_tokens=24, structured_outputs=StructuredOutputsParams(regex="[a-z ]{4,20}"))),
        "structured_choice": lambda: ([prompt] * 4, SamplingParams(
            temperature=0, max_tokens=12, structured_outputs=StructuredOutputsParams(choice=["yes", "no", "maybe"]))),
        # MineDraft's per-request limit on drafts (policy/request_limits.py); vLLM's scheduler ignores it.
        "speculation_limits": lambda: ([prompt] * 4, [SamplingParams(**greedy, extra_args=extra) for extra in (
            {"num_speculative_tokens": 0}, {"num_speculative_tokens": 1}, None, {"other": "kept"})]),
        # Two prompts past the speculative max_model_len beside two short ones; vLLM's scheduler ignores it.
        "past_speculative_max_model_len": lambda: ([{"prompt_token_ids": [(7 * i) % (vocab - 3) + 3 for i in range(n)]}
                                                   for n in (SPECULATIVE_MAX_MODEL_LEN + 40, 40, 300, 60)],
                                                  SamplingParams(**greedy)),
        "bad_speculation_limit": lambda: ([prompt], SamplingParams(**greedy,
                                                                   extra_args={"num_speculative_tokens": -1})),
    }


def summarize(outs) -> list[dict]:
    rows = []
    for o in outs:
        c = o.outputs[0]
        rows.append({
            "token_ids": list(c.token_ids),
            "text": c.text,
            "finish_reason": c.finish_reason,
            # Top-1 ids of each logprobs entry; values differ in the last bits
            # between batch layouts, the ranking of clear winners does not.
            "logprob_tokens": None if c.logprobs is None else [sorted(d, key=lambda t: -d[t].logprob)[0]
                                                                for d in c.logprobs],
            "num_prompt_logprobs": None if o.prompt_logprobs is None else len(o.prompt_logprobs),
        })
    return rows


def make_handler(spec: dict):
    import os

    minedraft = spec["mode"].startswith("minedraft")
    if minedraft:
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # before vLLM is imported: its policy in this process
    from vllm import LLM, SamplingParams

    speculation = Speculation(spec["draft"], 3, extra={"max_model_len": SPECULATIVE_MAX_MODEL_LEN})
    llm = LLM(**engine_kwargs(spec["mode"], spec["target"], speculation, max_model_len=MAX_MODEL_LEN))
    record = None
    if minedraft:
        from tests.e2e.policy_hooks import PlanRecord

        record = PlanRecord(llm)

    def run(command: dict) -> dict:
        vocab = llm.get_tokenizer().vocab_size
        results, per_request = {}, {}
        for name, make in cases(vocab).items():
            try:
                prompts, params = make()
                outs = llm.generate(prompts, params, use_tqdm=False)
                results[name] = {"outputs": summarize(outs)}
                if record is not None:  # per output: [steps with drafts, steps cut, drafts verified, most in a step]
                    per_request[name] = [record.of(o.request_id) for o in outs]
            except Exception as e:  # the behaviour under test
                results[name] = {"error": type(e).__name__, "message": str(e).splitlines()[0][:300]}
        after = llm.generate([{"prompt_token_ids": [7] * 30}] * 6,
                             SamplingParams(temperature=0, max_tokens=20, ignore_eos=True), use_tqdm=False)
        results["engine_still_serves"] = {"outputs": summarize(after)}
        metrics = {m.name: m.value for m in llm.get_metrics()
                   if m.name.startswith("minedraft:") and hasattr(m, "value")}
        return {"results": results, "metrics": metrics, "per_request": per_request}

    return run


if __name__ == "__main__":
    serve(make_handler)
