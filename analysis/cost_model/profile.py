"""Latency profiles: how long each lane's work takes, as a function of the batch.

A :class:`LatencyProfile` answers four questions in milliseconds:

* target forward for ``n`` requests of ``t`` tokens each (``t = 1`` plain decode,
  ``t = 1 + k`` verification):
  ``fixed + max(host, per_request·n + max(floor, per_token·n·t))``
  (:class:`ForwardCost`). On a CPU ``host = floor = 0`` and the cost is affine,
  ``a + b·n + c·n·t``. On a GPU ``floor`` is the time to stream the weights (small
  batches are bandwidth-bound, large ones compute-bound), ``per_request`` the KV
  reads, and ``host`` the time the host needs to launch the forward in eager mode
  (it binds when the GPU work is shorter: small drafters);
* drafting ``k`` tokens for ``n`` requests: ``propose_fixed + propose_per_request·n
  + k · draft_forward(n, 1)`` (vLLM's draft_model proposer runs ``k`` sequential
  forwards);
* the engine's own cost per step, outside the forwards (scheduler, output
  processing, IPC): ``step_overhead + step_overhead_per_request·n``;
* how much two lanes on the same hardware slow each other: an overlapped step
  takes ``max(Tv, Td) + i·min(Tv, Td)``. ``i = 0``: separate hardware, ideal
  overlap; ``i = 1``: no gain, as serial; ``i > 1``: worse than serial (measured
  on the 2-core CPU at k = 5: lock convoys, GIL, oversubscribed cores).

Two sources: :func:`~analysis.cost_model.calibrate.fit_step_overlap` fits the CPU lanes to
``benchmarks/results/cpu/step_overlap.json``; :meth:`LatencyProfile.from_published`
builds a GPU profile from datasheet and model-card figures, constants measured
with torch alone (on an H100, ``benchmarks/gpu_overlap.py``: bandwidth shares,
eager launch cost, same-GPU interference; on an H200, ``benchmarks/gpu_depth.py``:
the verification's compute efficiency) and stated assumptions; no GPU profile
has been measured inside vLLM.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from minedraft.policy.weight_bound import layer_weights


@dataclass(frozen=True)
class ForwardCost:
    """One forward pass: ``fixed + max(host, device(n, t))`` ms, where
    ``device(n, t) = per_request·n + max(floor, per_token·n·t)``."""

    fixed_ms: float
    per_request_ms: float
    per_token_ms: float
    floor_ms: float = 0.0
    host_ms: float = 0.0

    def device_ms(self, n: float, tokens_per_request: float) -> float:
        """The batch-dependent work (on a GPU: the device's busy time)."""
        return self.per_request_ms * n + max(self.floor_ms, self.per_token_ms * n * tokens_per_request)

    def time_ms(self, n: float, tokens_per_request: float) -> float:
        if n <= 0:
            return 0.0
        return self.fixed_ms + max(self.host_ms, self.device_ms(n, tokens_per_request))


@dataclass(frozen=True)
class LatencyProfile:
    """Lane and engine costs of one target/draft pair on one machine (milliseconds)."""

    name: str
    target: ForwardCost
    # What a verification step costs beyond the target forward: rejection
    # sampling, draft bookkeeping, spec-decode metadata (plain decode skips it).
    verify_fixed_ms: float
    draft: ForwardCost
    propose_fixed_ms: float
    propose_per_request_ms: float
    step_overhead_ms: float
    step_overhead_per_request_ms: float
    interference: float
    target_devices: int = 1
    # 1 when MineDraft's drafter has a device of its own (counted for MineDraft only).
    draft_devices: int = 0
    # Most requests whose KV cache fits, per mode (absent: no limit modelled).
    max_running: Mapping[str, int] = field(default_factory=dict)
    notes: str = ""

    # --- lane times ---------------------------------------------------------------

    def t_target(self, n: float, tokens_per_request: float = 1) -> float:
        """Plain target forward (no speculative decoding)."""
        return self.target.time_ms(n, tokens_per_request)

    def t_verify(self, n: float, k: int) -> float:
        """Target verifies ``n`` requests with ``k`` drafts each (1 + k tokens)."""
        return self.target.time_ms(n, 1 + k) + self.verify_fixed_ms if n > 0 else 0.0

    def t_draft(self, n: float, k: int) -> float:
        """Drafter proposes ``k`` tokens for ``n`` requests (``k`` forwards)."""
        if n <= 0:
            return 0.0
        return self.propose_fixed_ms + self.propose_per_request_ms * n + k * self.draft.time_ms(n, 1)

    def t_overlap(self, t_verify: float, t_draft: float) -> float:
        """Both lanes at once: ``max + i·min``."""
        return max(t_verify, t_draft) + self.interference * min(t_verify, t_draft)

    def t_overhead(self, n: float) -> float:
        """Engine work per step outside the forwards."""
        return self.step_overhead_ms + self.step_overhead_per_request_ms * n

    def t_prefill(self, n: float, prompt_tokens: int, k: int | None) -> float:
        """One step prefilling ``n`` prompts; ``k`` None: no speculative decoding."""
        t = self.target.time_ms(n, prompt_tokens) + self.t_overhead(n)
        if k is None:
            return t
        # The drafter catches up on the prompt in its first forward, then drafts.
        draft = (self.propose_fixed_ms + self.propose_per_request_ms * n + self.draft.time_ms(n, prompt_tokens)
                 + (k - 1) * self.draft.time_ms(n, 1))
        return t + self.verify_fixed_ms + draft

    def devices(self, mode: str) -> int:
        return self.target_devices + (self.draft_devices if mode == "minedraft_parallel" else 0)

    def with_interference(self, interference: float) -> LatencyProfile:
        return dataclasses.replace(self, interference=interference)

    def with_draft_scale(self, ratio: float, fixed_ratio: float | None = None, *, label: str = "") -> LatencyProfile:
        """The same engine with another drafter: every drafter forward cost times
        ``ratio`` (its batch-dependent part) and ``fixed_ratio`` (its fixed part;
        default ``ratio``). The proposer's own work (``propose_*``: input
        preparation, bookkeeping) does not depend on the model and is kept."""
        if ratio <= 0 or (fixed_ratio is not None and fixed_ratio < 0):
            raise ValueError("draft scale ratios must be positive")
        fixed_ratio = ratio if fixed_ratio is None else fixed_ratio
        d = self.draft
        draft = ForwardCost(d.fixed_ms * fixed_ratio, d.per_request_ms * ratio, d.per_token_ms * ratio,
                            d.floor_ms * ratio, d.host_ms * fixed_ratio)
        name = f"{self.name}, drafter x{ratio:.3g}" + (f" (fixed x{fixed_ratio:.3g})" if fixed_ratio != ratio else "")
        return dataclasses.replace(self, draft=draft, name=name + (f" [{label}]" if label else ""))

    # --- constructors -----------------------------------------------------------

    @classmethod
    def from_published(cls, *, target: ModelShape | None = None, draft: ModelShape | None = None,
                       accelerator: Accelerator | None = None, target_devices: int = 1,
                       draft_on_own_device: bool = False, interference: float | None = None,
                       target_bytes_per_param: float = 2, prompt_tokens: int | None = None,
                       output_tokens: int | None = None,
                       gpu_memory_utilization: float | None = None,
                       host_ms_per_layer: float | None = None) -> LatencyProfile:
        """A GPU profile from published figures and the assumptions below.

        Defaults: the paper's headline pair, Qwen3-32B verified by Qwen3-1.7B's
        drafts, BF16, on H100 SXM. ``target_devices`` is the target's tensor
        parallelism (the paper: 4). ``target_bytes_per_param`` 1 models an FP8
        target (weights read at 1 byte, GEMMs at the FP8 peak), 0.5 an INT4
        weight-only target (AWQ: weights read at half a byte, GEMMs at the BF16
        peak); the drafter stays BF16 and always runs with tensor parallelism 1
        (the paper's ``draft_tensor_parallel_size: 1``). ``draft_on_own_device``
        puts the drafter on one more GPU (the paper's layout; ``i = 0``);
        otherwise it shares the target's (first) GPU and ``i`` is the measured
        :data:`SAME_GPU_INTERFERENCE` (eager, as the paper ran). Stock SD uses
        the same drafter costs: the paper's baseline ran the drafter (TP 1) on
        the target's first GPU, one lane after the other. ``prompt_tokens`` and
        ``output_tokens`` set the mean context (KV reads per request) and the
        KV cache a request needs; ``host_ms_per_layer`` overrides
        :data:`EAGER_HOST_MS_PER_LAYER` (sensitivity). Every constant used is a
        module constant with its source.
        """
        target = target or QWEN3_32B
        draft = draft or QWEN3_1_7B
        gpu = accelerator or H100_SXM
        prompt_tokens = MEAN_PROMPT_TOKENS if prompt_tokens is None else prompt_tokens
        output_tokens = PAPER_OUTPUT_TOKENS if output_tokens is None else output_tokens
        if gpu_memory_utilization is None:
            gpu_memory_utilization = GPU_MEMORY_UTILIZATION
        if host_ms_per_layer is None:
            host_ms_per_layer = EAGER_HOST_MS_PER_LAYER
        if target_bytes_per_param not in (0.5, 1, 2):
            raise ValueError("target_bytes_per_param: 2 (BF16), 1 (FP8) or 0.5 (INT4 weights)")
        context = prompt_tokens + output_tokens // 2

        def forward(shape: ModelShape, tp: int, bytes_per_param: float, bandwidth_efficiency: float) -> ForwardCost:
            bw = gpu.bandwidth_tb_s * bandwidth_efficiency * 1e9  # bytes per ms
            flops = (gpu.fp8_tflops if bytes_per_param == 1 else gpu.bf16_tflops) * COMPUTE_EFFICIENCY * 1e9
            weights_ms = shape.read_params_b * 1e9 * bytes_per_param / tp / bw
            allreduce_ms = 2 * shape.layers * gpu.allreduce_ms if tp > 1 else 0.0
            return ForwardCost(
                fixed_ms=SAMPLING_MS,
                per_request_ms=context * shape.kv_bytes_per_token / tp / bw,
                per_token_ms=2 * shape.read_params_b * 1e9 / tp / flops,
                floor_ms=weights_ms + allreduce_ms,
                # Eager mode: the host launches kernels while the GPU runs them, so a
                # forward takes at least the host's time (it binds for small drafters).
                host_ms=shape.layers * host_ms_per_layer,
            )

        target_cost = forward(target, target_devices, target_bytes_per_param, BANDWIDTH_EFFICIENCY)
        draft_cost = forward(draft, 1, 2, DRAFT_BANDWIDTH_EFFICIENCY)
        if interference is None:
            interference = 0.0 if draft_on_own_device else SAME_GPU_INTERFERENCE
        dtype = {2: "BF16", 1: "FP8", 0.5: "INT4"}[target_bytes_per_param]
        place = " + drafter on its own GPU" if draft_on_own_device else ", drafter on the same GPU"
        layout = f"{dtype} target TP={target_devices}{place}"
        return cls(
            name=f"{gpu.name}: {target.name} <- {draft.name}, {layout}",
            target=target_cost,
            verify_fixed_ms=VERIFY_FIXED_MS,
            draft=draft_cost,
            propose_fixed_ms=PROPOSE_FIXED_MS,
            propose_per_request_ms=0.0,
            step_overhead_ms=STEP_OVERHEAD_MS,
            step_overhead_per_request_ms=STEP_OVERHEAD_PER_REQUEST_MS,
            interference=interference,
            target_devices=target_devices,
            draft_devices=1 if draft_on_own_device else 0,
            max_running=kv_capacity(target, draft, gpu, target_devices, draft_on_own_device,
                                    target_bytes_per_param, gpu_memory_utilization=gpu_memory_utilization,
                                    tokens_per_request=prompt_tokens + output_tokens),
            notes="published figures, H100 torch-level measurements and assumptions (analysis/cost_model/profile.py)",
        )


# --- fitting ----------------------------------------------------------------------------


# --- published figures and assumptions (GPU) ------------------------------------------------


@dataclass(frozen=True)
class Accelerator:
    name: str
    memory_gb: float
    bandwidth_tb_s: float
    bf16_tflops: float  # dense
    fp8_tflops: float  # dense (0: none)
    allreduce_ms: float = 0.015  # one small all-reduce between the GPUs of a tensor-parallel group


@dataclass(frozen=True)
class ModelShape:
    name: str
    params_b: float  # all parameters (stored)
    non_embedding_params_b: float
    layers: int
    kv_heads: int
    head_dim: int
    hidden: int
    vocab: int
    tied_embeddings: bool
    heads: int = 0  # query heads (0: not given; only the attention FLOPs use it)

    @classmethod
    def from_config(cls, name: str, config: Mapping) -> ModelShape:
        """Shape of a Llama/Qwen-style decoder from its Hugging Face ``config.json``:
        attention (q, k, v, o) and gated MLP (gate, up, down) per layer; norms ignored."""
        hidden = int(config["hidden_size"])
        heads = int(config["num_attention_heads"])
        kv_heads = int(config.get("num_key_value_heads") or heads)
        head_dim = int(config.get("head_dim") or hidden // heads)
        layers = int(config["num_hidden_layers"])
        vocab = int(config["vocab_size"])
        tied = bool(config.get("tie_word_embeddings", False))
        per_layer = layer_weights(config)
        non_embedding = layers * per_layer
        total = non_embedding + hidden * vocab * (1 if tied else 2)
        return cls(name, total / 1e9, non_embedding / 1e9, layers, kv_heads, head_dim, hidden, vocab, tied, heads)

    @property
    def read_params_b(self) -> float:
        """Parameters a decode forward reads (and multiplies): the layers and the LM head."""
        return self.non_embedding_params_b + self.hidden * self.vocab / 1e9

    @property
    def kv_bytes_per_token(self) -> float:
        return 2 * self.layers * self.kv_heads * self.head_dim * 2  # K and V, BF16

    def flops_per_token(self, context_tokens: float = 0.0) -> float:
        """Forward FLOPs for one token: two per weight it multiplies (layers and LM
        head) plus attention over ``context_tokens`` (QK^T and AV, two each)."""
        attention = 4 * self.layers * (self.heads or self.kv_heads) * self.head_dim * context_tokens
        return 2 * self.read_params_b * 1e9 + attention


def draft_cost_ratio(draft: ModelShape, calibrated: ModelShape, context_tokens: float = 0.0) -> float:
    """``draft``'s FLOPs per token over ``calibrated``'s: how much cheaper (or dearer) a
    drafter is than the one a profile was measured with."""
    return draft.flops_per_token(context_tokens) / calibrated.flops_per_token(context_tokens)


# NVIDIA datasheets (quoted, not re-read in this work): H100 SXM5 80 GB HBM3 at 3.35 TB/s, dense 989 BF16 /
# 1,979 FP8 TFLOPS; A100 SXM4 80 GB at 2.04 TB/s, 312 BF16 TFLOPS, no FP8. The paper's GPU model is not known
# (minedraft-paper.md §1.4: "A100 80GB / H100 / L40 recommended"); H100 is an assumption, A100 a sensitivity.
H100_SXM = Accelerator("H100 SXM5 80GB", 80.0, 3.35, 989.0, 1979.0)
# H200 SXM 141 GB HBM3e at 4.8 TB/s, the H100's compute (datasheet): the GPU benchmarks/gpu_overlap.py ran on first.
H200 = Accelerator("H200 SXM 141GB", 141.0, 4.8, 989.0, 1979.0)
A100_SXM = Accelerator("A100 SXM4 80GB", 80.0, 2.04, 312.0, 0.0)
# L40 (48 GB GDDR6 at 0.864 TB/s, 181 dense BF16 TFLOPS, PCIe only: slower all-reduce, assumed 0.05 ms).
L40 = Accelerator("L40 48GB", 48.0, 0.864, 181.0, 362.0, allreduce_ms=0.05)
# Qwen3 model cards (huggingface.co/Qwen/Qwen3-32B, /Qwen3-1.7B; read in copies of the cards and config.json
# found by code search): 32.8B (31.2B non-embedding), 64 layers,
# 64 Q / 8 KV heads; 1.7B (1.4B non-embedding), 28 layers, 16 Q / 8 KV heads, tied embeddings; config.json:
# head_dim 128, vocab 151936, hidden 5120 / 2048. The paper's headline pair (minedraft-paper.md §1.5).
QWEN3_32B = ModelShape("Qwen3-32B", 32.8, 31.2, 64, 8, 128, 5120, 151936, False, 64)
QWEN3_1_7B = ModelShape("Qwen3-1.7B", 1.7, 1.4, 28, 8, 128, 2048, 151936, True, 16)
# The other pairs of the paper's headline table (minedraft-paper.md §1.5, scripts/experiment_*.sh of the
# released code), from the config.json values (copies found by code search; Qwen3-0.6B/4B/8B: head_dim 128,
# vocab 151936; Llama 3.x: vocab 128256; Vicuna-33B v1.3 is LLaMA-30B: 60 layers, 52 heads, no GQA, vocab 32000).
QWEN3_0_6B = ModelShape.from_config("Qwen3-0.6B", {
    "hidden_size": 1024, "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8,
    "head_dim": 128, "intermediate_size": 3072, "vocab_size": 151936, "tie_word_embeddings": True})
QWEN3_4B = ModelShape.from_config("Qwen3-4B", {
    "hidden_size": 2560, "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8,
    "head_dim": 128, "intermediate_size": 9728, "vocab_size": 151936, "tie_word_embeddings": True})
QWEN3_8B = ModelShape.from_config("Qwen3-8B", {
    "hidden_size": 4096, "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8,
    "head_dim": 128, "intermediate_size": 12288, "vocab_size": 151936, "tie_word_embeddings": False})
LLAMA3_70B = ModelShape.from_config("Llama-3.3-70B (AWQ INT4)", {
    "hidden_size": 8192, "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8,
    "intermediate_size": 28672, "vocab_size": 128256})
LLAMA3_2_1B = ModelShape.from_config("Llama-3.2-1B", {
    "hidden_size": 2048, "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8,
    "head_dim": 64, "intermediate_size": 8192, "vocab_size": 128256, "tie_word_embeddings": True})
LLAMA3_8B = ModelShape.from_config("Llama-3.1-8B", {
    "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
    "intermediate_size": 14336, "vocab_size": 128256})
VICUNA_33B = ModelShape.from_config("Vicuna-33B", {
    "hidden_size": 6656, "num_hidden_layers": 60, "num_attention_heads": 52, "intermediate_size": 17920,
    "vocab_size": 32000})
# EAGLE-1 head for Vicuna-33B (yuhuili/EAGLE-Vicuna-33B-v1.3): one Vicuna-33B decoder layer plus an
# fc (2h -> h); it reads the target's LM head (gathered to the drafter in the released code), not an embedding.
_EAGLE_LAYER = ModelShape.from_config("layer", {
    "hidden_size": 6656, "num_hidden_layers": 1, "num_attention_heads": 52, "intermediate_size": 17920,
    "vocab_size": 32000})
EAGLE_VICUNA_33B = dataclasses.replace(
    _EAGLE_LAYER, name="EAGLE head (Vicuna-33B)",
    non_embedding_params_b=_EAGLE_LAYER.non_embedding_params_b + 2 * 6656 * 6656 / 1e9,
    params_b=_EAGLE_LAYER.non_embedding_params_b + 2 * 6656 * 6656 / 1e9 + 6656 * 32000 / 1e9)

# Measured on an NVIDIA H100 80GB HBM3 (benchmarks/results/nvidia-h100-80gb-hbm3/gpu_overlap.json, 2026-11-26;
# torch alone, bf16 decoder stacks of the Llama-3.1-8B / Llama-3.2-1B and Qwen3-32B / Qwen3-1.7B shapes, context
# 512, k = 1, 3, 5, B = 1 to 128, medians of 30): analysis/calibration.py's fit_gpu_overlap fits these on that
# file, and tests/unit/analysis/test_calibration.py checks they agree with it. The profiles model H100s, so the
# H100 run is their calibration. The H200's full grid (benchmarks/results/nvidia-h200/gpu_overlap.json and
# _repeat.json, 2026-12-04) fits 0.66 / 0.49 / 0.16 / 0.79-0.98 / 0.68-0.69: the same shape, its larger
# datasheet bandwidth reached in a smaller share, its graph lanes interfering less.
# Share of the datasheet HBM bandwidth a forward reaches streaming its weights (graph replay, one request):
BANDWIDTH_EFFICIENCY = 0.72  # the target (Llama-3.1-8B shape)
DRAFT_BANDWIDTH_EFFICIENCY = 0.57  # the drafter (Llama-3.2-1B shape): smaller GEMMs reach less
# Host time per decoder layer to launch its kernels through PyTorch eager (the paper ran --enforce-eager;
# the stack launches about a dozen kernels per layer). It hides under the GPU for Qwen3-32B, not for a small drafter.
EAGER_HOST_MS_PER_LAYER = 0.14
# Target and drafter on one GPU, the drafts on MineDraft's side stream: an overlapped step costs
# max + i * min. Eager: the one host thread launches both lanes, so the drafter's host time cannot hide
# (0.97: hardly better than one lane after the other); with both lanes replayed as CUDA graphs the GPU runs
# them together and they share its memory bandwidth (0.78 over all rows: 0.53-0.86 at B <= 32 but for one 0.93,
# 0.93-0.99 at B = 128, where the verification's GEMMs fill the GPU). The profiles model eager execution.
SAME_GPU_INTERFERENCE = 0.97
SAME_GPU_INTERFERENCE_GRAPHS = 0.78
# Share of the dense BF16 peak that the verification's forward reaches in the model above (max(weights,
# compute) + KV reads): analysis/calibration.py's fit_compute_efficiency on
# benchmarks/results/nvidia-h200/gpu_depth.json
# (2026-11-28, torch alone, graph replay, the target over B x (d + 1) tokens for B = 1 to 128, d = 0 to 5;
# the H100's datasheet compute is the H200's). 0.38 in both runs (rms error 15 %; the 0.60 assumed before,
# 23 %); on an H100 (nvidia-h100-80gb-hbm3/gpu_depth.json, the Llama pair: Qwen3-32B did not fit) 0.39.
# The model's max() is a roofline and the measured forward sits nearer weights + compute between them, so
# the model still reads up to about 30 % low at 64-192 tokens.
COMPUTE_EFFICIENCY = 0.38
# Assumptions (inferred, not measured here):
# The paper's runs: ShareGPT prompts of >= 256 tokens, 256 output tokens (minedraft-paper.md §1.4);
# assume a 384-token mean prompt, so the mean context during decode is 384 + 128.
MEAN_PROMPT_TOKENS = 384
PAPER_OUTPUT_TOKENS = 256
MEAN_CONTEXT_TOKENS = MEAN_PROMPT_TOKENS + PAPER_OUTPUT_TOKENS // 2
TP_ALLREDUCE_MS = H100_SXM.allreduce_ms  # one small NVLink all-reduce; two per layer under tensor parallelism
SAMPLING_MS = 0.3  # logits to sampled ids, per forward
VERIFY_FIXED_MS = 0.5  # rejection sampling and proposal bookkeeping per verification step
PROPOSE_FIXED_MS = 0.3  # draft input preparation per propose() call
# Scheduler, output processing and IPC per step (the paper disabled async output processing).
STEP_OVERHEAD_MS = 1.5
STEP_OVERHEAD_PER_REQUEST_MS = 0.02
GPU_MEMORY_UTILIZATION = 0.90  # vLLM's default
PAPER_GPU_MEMORY_UTILIZATION = 0.65  # the paper's scripts: --gpu-memory-utilization 0.65
ACTIVATION_RESERVE_GB = 2.0  # activations, sampler and workspace per GPU


def kv_capacity(target: ModelShape, draft: ModelShape, gpu: Accelerator, target_devices: int,
                draft_on_own_device: bool, target_bytes_per_param: float = 2, *,
                gpu_memory_utilization: float = GPU_MEMORY_UTILIZATION,
                tokens_per_request: int = MEAN_PROMPT_TOKENS + PAPER_OUTPUT_TOKENS) -> dict[str, int]:
    """Requests whose KV cache fits at ``tokens_per_request`` tokens each, per mode.

    Per GPU: every target GPU holds ``1/TP`` of the target's weights and KV; the
    drafter (TP 1) sits on the first target GPU (stock SD, and MineDraft without
    a drafter GPU) or on a GPU of its own. Every GPU keeps the same number of
    KV blocks (vLLM takes the minimum), so the fullest GPU decides.
    """
    per_gpu = gpu.memory_gb * gpu_memory_utilization - ACTIVATION_RESERVE_GB
    target_w = target.params_b * target_bytes_per_param / target_devices
    target_kv = target.kv_bytes_per_token / target_devices * tokens_per_request / 1e9
    draft_w = draft.params_b * 2.0
    draft_kv = draft.kv_bytes_per_token * tokens_per_request / 1e9
    alone = (per_gpu - target_w) / target_kv
    colocated = (per_gpu - target_w - draft_w) / (target_kv + draft_kv)
    own = min(alone, (per_gpu - draft_w) / draft_kv)
    cap = {"no_sd": alone, "stock_sd": colocated, "minedraft_parallel": own if draft_on_own_device else colocated}
    return {mode: max(0, math.floor(v)) for mode, v in cap.items()}
