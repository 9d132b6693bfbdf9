"""The paper's headline table next to the model's predictions for H100 layouts.

The paper's figures come from the shared docs' ``minedraft-paper.md`` §1.5 (a summary of the
paper: the full tables were not available, so they are quoted second-hand); the
setup of each run from the released code's ``scripts/experiment_*.sh``
(electron-shaders/MineDraft): target TP 4, drafter TP 1 (``draft_tensor_parallel_size
1``), MineDraft's drafter on a fifth GPU and the baseline's on the target's first
GPU, ``--max-num-seqs`` m = 16 for the Qwen3-32B pairs and 64 for Llama and EAGLE
(MineDraft runs 2m), 1000 prompts, 256 output tokens, ``--enforce-eager``,
``--gpu-memory-utilization 0.65``, k swept 1..5.

What is compared: MineDraft at 2m over stock SD at m, the same k, both with the
drafter on one GPU (TP 1); "up to" figures against the best k. In steady state
the ratio does not depend on the acceptance rate (both modes yield τ tokens per
verification), so the dataset enters only through the prompt length (KV reads,
prefill) and the acceptance the prefill is amortised over.

Pure: no files. :mod:`~analysis.simulator.report` renders the rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from analysis.cost_model.model import Workload, predict
from analysis.cost_model.profile import (
    EAGER_HOST_MS_PER_LAYER,
    EAGLE_VICUNA_33B,
    H100_SXM,
    L40,
    LLAMA3_8B,
    LLAMA3_70B,
    PAPER_GPU_MEMORY_UTILIZATION,
    PAPER_OUTPUT_TOKENS,
    QWEN3_0_6B,
    QWEN3_1_7B,
    QWEN3_4B,
    QWEN3_8B,
    QWEN3_32B,
    VICUNA_33B,
    Accelerator,
    LatencyProfile,
    ModelShape,
    kv_capacity,
)

# Mean prompt tokens per dataset (assumptions: the scripts keep ShareGPT prompts of >= 256 tokens and
# Arena / Tough prompts of >= 16; the distributions were not available).
DATASET_PROMPT_TOKENS = {"ShareGPT": 384, "Arena": 128, "Tough": 64}
# Per-token acceptance for the prefill amortisation (the paper's acceptance rates were not available;
# temperature 1.0). Steady-state gains do not depend on it.
PAPER_ALPHA = 0.7
KS = (1, 2, 3, 4, 5)
# A prediction agrees with the paper when its speedup (1 + gain) is within this share of the paper's.
AGREEMENT_TOLERANCE = 0.10

# The layouts: the paper's (target TP 4 + a drafter GPU, the paper's memory setting) and the two
# one-target-GPU layouts this project targets (vLLM's default memory setting).
LAYOUTS: Mapping[str, Mapping] = {
    "h100-paper": {"target_devices": 4, "draft_on_own_device": True,
                   "gpu_memory_utilization": PAPER_GPU_MEMORY_UTILIZATION},
    "h100-two-gpus": {"target_devices": 1, "draft_on_own_device": True},
    "h100-same-gpu": {"target_devices": 1, "draft_on_own_device": False},
}


@dataclass(frozen=True)
class Headline:
    """One line of the paper's headline table."""

    label: str
    target: ModelShape
    draft: ModelShape
    dataset: str
    metric: str  # throughput | latency | per_gpu_throughput | capacity
    reported: float | None  # relative change: 0.7568 = +75.68 %; None: a capacity claim
    batch: int  # m, the script's --max-num-seqs (MineDraft: per group)
    target_bytes_per_param: float = 2
    samples: int = 1  # n, sequences per request
    claim: str = ""


HEADLINES: Sequence[Headline] = (
    Headline("Qwen3-32B <- Qwen3-0.6B", QWEN3_32B, QWEN3_0_6B, "Arena", "throughput", 0.7032, 16),
    Headline("Qwen3-32B <- Qwen3-1.7B", QWEN3_32B, QWEN3_1_7B, "Tough", "throughput", 0.7568, 16,
             claim="the paper's maximum"),
    Headline("Qwen3-32B <- Qwen3-4B", QWEN3_32B, QWEN3_4B, "ShareGPT", "throughput", 0.6564, 16),
    Headline("Llama-3.3-70B AWQ-INT4 <- Llama-3.1-8B", LLAMA3_70B, LLAMA3_8B, "ShareGPT", "throughput", 0.3706,
             64, target_bytes_per_param=0.5),
    Headline("Vicuna-33B <- EAGLE", VICUNA_33B, EAGLE_VICUNA_33B, "ShareGPT", "throughput", 0.2209, 64),
    Headline("Qwen3-32B <- Qwen3-1.7B, E2E latency", QWEN3_32B, QWEN3_1_7B, "Tough", "latency", -0.3951, 16),
    Headline("up to, per GPU (5 GPUs vs 4)", QWEN3_32B, QWEN3_1_7B, "Tough", "per_gpu_throughput", 0.4055, 16),
    Headline("Qwen3-32B <- Qwen3-8B", QWEN3_32B, QWEN3_8B, "Arena", "capacity", None, 64, samples=2,
             claim="stock SD runs out of memory, MineDraft runs"),
)


@dataclass(frozen=True)
class LayoutPrediction:
    layout: str
    steady: Mapping[int, float]  # k -> MineDraft(2m) / stock SD(m) tokens/s, steady-state decode
    with_prefill: Mapping[int, float]  # the same with every request's prefill (continuous batching)
    per_device: Mapping[int, float]  # with_prefill x stock SD's devices / MineDraft's
    best_k: int  # the k with the highest with_prefill ratio
    t_verify_ms: float  # lanes at best k, one group of m
    t_draft_ms: float
    overhead_ms: float
    stock_capacity: int  # requests whose KV fits, stock SD (sequences)
    minedraft_capacity: int
    needed: int  # m x n sequences for stock SD (MineDraft: twice)

    @property
    def fits(self) -> bool:
        return self.stock_capacity >= self.needed and self.minedraft_capacity >= 2 * self.needed

    @property
    def gain(self) -> float:
        return self.with_prefill[self.best_k]


@dataclass(frozen=True)
class HeadlineComparison:
    headline: Headline
    layouts: Mapping[str, LayoutPrediction] = field(default_factory=dict)
    predicted: float | None = None  # in the headline's metric, h100-paper layout
    verdict: str = ""  # agrees | over-predicts | under-predicts
    why: str = ""


def headline_profile(h: Headline, layout: str, accelerator: Accelerator = H100_SXM, *,
                     host_ms_per_layer: float | None = None) -> LatencyProfile:
    return LatencyProfile.from_published(
        target=h.target, draft=h.draft, accelerator=accelerator, target_bytes_per_param=h.target_bytes_per_param,
        prompt_tokens=DATASET_PROMPT_TOKENS[h.dataset], output_tokens=PAPER_OUTPUT_TOKENS,
        host_ms_per_layer=host_ms_per_layer, **LAYOUTS[layout])


def predict_layout(h: Headline, layout: str, accelerator: Accelerator = H100_SXM, *, alpha: float = PAPER_ALPHA,
                   ks: Sequence[int] = KS, host_ms_per_layer: float | None = None) -> LayoutPrediction:
    p = headline_profile(h, layout, accelerator, host_ms_per_layer=host_ms_per_layer)
    workload = Workload(DATASET_PROMPT_TOKENS[h.dataset], PAPER_OUTPUT_TOKENS, continuous=True)
    m = h.batch * h.samples
    steady, with_prefill, per_device = {}, {}, {}
    for k in ks:
        pr = predict(p, m, k, alpha=alpha, comparison="paper")
        steady[k] = pr["minedraft_parallel"].tokens_per_s / pr["stock_sd"].tokens_per_s
        pw = predict(p, m, k, alpha=alpha, comparison="paper", workload=workload)
        with_prefill[k] = pw["minedraft_parallel"].tokens_per_s / pw["stock_sd"].tokens_per_s
        per_device[k] = pw["minedraft_parallel"].tokens_per_s_per_device / pw["stock_sd"].tokens_per_s_per_device
    best = max(ks, key=lambda k: with_prefill[k])
    return LayoutPrediction(layout, steady, with_prefill, per_device, best, p.t_verify(m, best), p.t_draft(m, best),
                            p.t_overhead(m), p.max_running.get("stock_sd", 0), p.max_running.get("minedraft_parallel", 0), m)


def verdict(predicted_ratio: float, reported_ratio: float, tolerance: float = AGREEMENT_TOLERANCE) -> str:
    """Compare two speedups (1 + gain; latency: 1 + change)."""
    if abs(predicted_ratio / reported_ratio - 1) <= tolerance:
        return "agrees"
    return "over-predicts" if predicted_ratio > reported_ratio else "under-predicts"


def _lanes(lp: LayoutPrediction) -> str:
    binding = "drafting" if lp.t_draft_ms > lp.t_verify_ms else "verification"
    return (f"k={lp.best_k}, m={lp.needed}: Tv {lp.t_verify_ms:.1f} ms, Td {lp.t_draft_ms:.1f} ms "
            f"({binding} binds), engine {lp.overhead_ms:.1f} ms/step")


def _why(h: Headline, lp: LayoutPrediction, v: str, l40_stock_capacity: int | None) -> str:
    lanes = _lanes(lp)
    steady = lp.steady[lp.best_k]
    if h.metric == "capacity":
        where = (f"80 GB H100s at 0.65: the baseline's GPU 0 (a quarter of the target, the whole 8B drafter, both "
                 f"KV caches) fits {lp.stock_capacity} sequences, {lp.needed} needed (m={h.batch}, n={h.samples})")
        if v == "agrees":
            return where + ": out of memory, as reported."
        l40 = ("" if l40_stock_capacity is None else
               f"; on 48 GB GPUs (L40, listed in the paper's README) it fits {l40_stock_capacity}")
        return (where + ": no OOM on H100" + l40 + ". The OOM points to a smaller GPU than an 80 GB H100, or to "
                "vLLM V0's memory profiling (peak activations of a 2048-token profile run on GPU 0), not modelled.")
    if h.target is VICUNA_33B:
        low = lp.with_prefill[min(lp.with_prefill)]
        return (f"{lanes}. A one-layer EAGLE head drafts in a fraction of the verification, gain ~ 1 + Td/Tv, "
                f"growing with k ({low:.2f}x at k=1); the match holds only at k = 5. Not modelled: the target's "
                "hidden states shipped to the drafter GPU every step (not overlapped), and the paper's note that "
                "V0's EAGLE acceptance falls with k (the ratio at equal k does not depend on acceptance).")
    if h.target is LLAMA3_70B:
        return (f"{lanes}. INT4 target verifies cheaply (0.5 byte/weight), the BF16 8B drafter reads 16 GB per "
                f"forward: drafting binds, gain ~ 1 + Tv/Td. Decode alone would give {steady:.2f}x; the "
                "unoverlapped prefill of 384-token prompts (assumed mean) at m = 64 brings it to the paper's. "
                "Not modelled: AWQ kernels' efficiency, the real prompt lengths.")
    if h.metric == "latency":
        return (f"{lanes}. All 1000 prompts are submitted at t = 0, so mean request latency follows the makespan: "
                "change = 1/gain - 1. The paper's -39.51 % is a 1.65x run, below its own +75.68 %: from another "
                "run (k, dataset) or a latency metric not proportional to the makespan.")
    if h.metric == "per_gpu_throughput":
        return (f"{lanes}. Per device = gain x 4/5 (stock SD on 4 GPUs, MineDraft on 5); the paper's +40.55 % "
                "is exactly its +75.68 % x 4/5.")
    text = (f"{lanes}; decode alone {steady:.2f}x. Gain = (Tv + Td) / max(Tv, Td), best where Td ~ Tv. In eager "
            f"mode the drafter is host-bound ({EAGER_HOST_MS_PER_LAYER} ms of launches per layer, measured), which sets Td: ")
    if h.draft is QWEN3_4B:
        return text + ("the 4B drafter (36 layers) balances at k = 2; its GPU time starts to show. The match rests "
                       "on the host-time assumption and the 384-token ShareGPT prompt (prefill share).")
    return text + ("0.6B and 1.7B (28 layers each) cost the same, so the model cannot tell them apart (paper: "
                   "+70.32 % vs +75.68 %, on different datasets). The match rests on the host-time assumption.")


def compare_headlines(accelerator: Accelerator = H100_SXM, *, alpha: float = PAPER_ALPHA,
                      headlines: Sequence[Headline] = HEADLINES) -> list[HeadlineComparison]:
    """The model's figure for every headline, for the three layouts; the verdict is on
    ``h100-paper`` (the paper's layout) with prefill (continuous batching)."""
    out = []
    for h in headlines:
        layouts = {name: predict_layout(h, name, accelerator, alpha=alpha) for name in LAYOUTS}
        lp = layouts["h100-paper"]
        l40 = None
        if h.metric == "capacity":
            l40 = kv_capacity(h.target, h.draft, L40, 4, False, h.target_bytes_per_param,
                              gpu_memory_utilization=PAPER_GPU_MEMORY_UTILIZATION,
                              tokens_per_request=DATASET_PROMPT_TOKENS[h.dataset] + PAPER_OUTPUT_TOKENS)["stock_sd"]
            oom = lp.stock_capacity < lp.needed
            v = "agrees" if oom and lp.minedraft_capacity >= 2 * lp.needed else "disagrees"
            out.append(HeadlineComparison(h, layouts, None, v, _why(h, lp, v, l40)))
            continue
        if h.metric == "throughput":
            predicted = lp.gain - 1
        elif h.metric == "latency":
            predicted = 1 / lp.gain - 1
        else:  # per_gpu_throughput
            predicted = lp.per_device[lp.best_k] - 1
        v = verdict(1 + predicted, 1 + h.reported)
        out.append(HeadlineComparison(h, layouts, predicted, v, _why(h, lp, v, l40)))
    return out
