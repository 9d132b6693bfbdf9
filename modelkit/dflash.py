"""The kit's DFlash draft for its Qwen3-shaped target, trained offline on the target's greedy text.

vLLM's ``DFlashQwen3ForCausalLM`` (``vllm/model_executor/models/qwen3_dflash.py``; its proposer
``vllm/v1/spec_decode/dflash.py``) drafts K tokens in one forward:

* context: the target's residual stream after each of its layers ``target_layer_ids``, side by
  side, through ``fc`` and ``hidden_norm``, then each draft layer's own k/v projections, ``k_norm``
  and RoPE at the context positions, into the draft's KV cache (no ``input_layernorm``);
* query: the step's last sampled token at the next position, then K mask tokens, each through the
  draft layers (a Qwen3 layer), attending to the whole context and, non-causally, to each other;
* draft token ``j`` is the argmax at mask ``j``: the token at that mask's own position.

:class:`DFlashDraft` is that forward in plain torch for one layer, with the checkpoint names vLLM
loads (``fc``, ``hidden_norm``, ``norm``, ``layers.0.*``), so that training here fits the function
vLLM runs. The embedding and LM head are the target's, frozen (vLLM shares them: the checkpoint has
neither). The mask embedding is trained from zeros and shipped as ``mask_embedding.pt``, vLLM's
override: with the target's embedding of ``<pad>`` (the kit's embeddings are scaled up, so that one
constant vector dominates every mask slot) nothing was learnt in 600 steps. Measured once (1,500
steps of 8 rows x 4 split points, held-out rows, K = 3): agreement 0.37, 0.33 and 0.24 at masks 1-3;
stock SD accepted 336 of 2,565 drafts on the tests' 24-request mix.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from modelkit.specs import DFLASH_DISTILL
from modelkit.training import fit

RMS_EPS = 1e-6


def _rms(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + RMS_EPS) * weight


def _rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Neox-style rotary embedding of ``x`` [B, L, heads, D] at ``positions`` [B, L]."""
    d = x.shape[-1]
    freqs = positions[..., None].float() / theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d)
    angles = torch.cat([freqs, freqs], -1)[:, :, None]
    rotated = torch.cat([-x[..., d // 2:], x[..., : d // 2]], dim=-1)
    return x * angles.cos() + rotated * angles.sin()


def _linear(n_in: int, n_out: int) -> nn.Linear:
    return nn.Linear(n_in, n_out, bias=False)


class DFlashDraft(nn.Module):
    def __init__(self, target, num_aux: int, mask_token_id: int) -> None:
        super().__init__()
        cfg = target.config
        hidden, self.heads, self.kv_heads = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim, self.theta = cfg.head_dim, cfg.rope_parameters["rope_theta"]
        self.mask_token_id = mask_token_id
        self.fc = _linear(num_aux * hidden, hidden)
        self.hidden_norm, self.norm = nn.Parameter(torch.ones(hidden)), nn.Parameter(torch.ones(hidden))
        self.mask_embedding = nn.Parameter(torch.zeros(hidden))
        layer = nn.Module()
        layer.input_layernorm = nn.Parameter(torch.ones(hidden))
        layer.post_attention_layernorm = nn.Parameter(torch.ones(hidden))
        layer.self_attn = nn.ModuleDict({
            "q_proj": _linear(hidden, self.heads * self.head_dim),
            "k_proj": _linear(hidden, self.kv_heads * self.head_dim),
            "v_proj": _linear(hidden, self.kv_heads * self.head_dim),
            "o_proj": _linear(self.heads * self.head_dim, hidden),
        })
        layer.self_attn.q_norm = nn.Parameter(torch.ones(self.head_dim))
        layer.self_attn.k_norm = nn.Parameter(torch.ones(self.head_dim))
        layer.mlp = nn.ModuleDict({"gate_proj": _linear(hidden, cfg.intermediate_size),
                                   "up_proj": _linear(hidden, cfg.intermediate_size),
                                   "down_proj": _linear(cfg.intermediate_size, hidden)})
        self.layers = nn.ModuleList([layer])
        self.embed = target.model.embed_tokens.weight.detach()
        self.lm_head = target.lm_head.weight.detach()

    def _heads(self, x: torch.Tensor, n: int, norm: torch.Tensor | None = None) -> torch.Tensor:
        x = x.view(*x.shape[:2], n, self.head_dim)
        return x if norm is None else _rms(x, norm)

    def forward(self, aux: torch.Tensor, tokens: torch.Tensor, bonus_at: torch.Tensor, k: int) -> torch.Tensor:
        """Logits at the ``k`` masks after position ``bonus_at`` [B]: the context is ``aux`` [B, T, n*H] before
        it, the query ``tokens[bonus_at]`` then k masks."""
        layer = self.layers[0]
        attn = layer.self_attn
        b, t, _ = aux.shape
        context = _rms(self.fc(aux), self.hidden_norm)
        k_ctx = _rope(self._heads(attn["k_proj"](context), self.kv_heads, attn.k_norm),
                      torch.arange(t).expand(b, t), self.theta)
        v_ctx = self._heads(attn["v_proj"](context), self.kv_heads)
        ids = torch.full((b, k + 1), self.mask_token_id)
        ids[:, 0] = tokens[torch.arange(b), bonus_at]
        x = torch.where((ids == self.mask_token_id)[..., None], self.mask_embedding, self.embed[ids])
        positions = bonus_at[:, None] + torch.arange(k + 1)
        h = _rms(x, layer.input_layernorm)
        q = _rope(self._heads(attn["q_proj"](h), self.heads, attn.q_norm), positions, self.theta)
        k_q = _rope(self._heads(attn["k_proj"](h), self.kv_heads, attn.k_norm), positions, self.theta)
        v_q = self._heads(attn["v_proj"](h), self.kv_heads)
        keys, values = torch.cat([k_ctx, k_q], 1).transpose(1, 2), torch.cat([v_ctx, v_q], 1).transpose(1, 2)
        visible = torch.cat([torch.arange(t)[None] < bonus_at[:, None], torch.ones(b, k + 1, dtype=torch.bool)], 1)
        out = F.scaled_dot_product_attention(q.transpose(1, 2), keys, values, attn_mask=visible[:, None, None],
                                             enable_gqa=True)
        residual = attn["o_proj"](out.transpose(1, 2).reshape(b, k + 1, -1)) + x
        m = _rms(residual, layer.post_attention_layernorm)
        residual = layer.mlp["down_proj"](F.silu(layer.mlp["gate_proj"](m)) * layer.mlp["up_proj"](m)) + residual
        return _rms(residual, self.norm)[:, 1:] @ self.lm_head.T


@torch.inference_mode()
def aux_states(target, seqs: torch.Tensor, layer_ids: tuple[int, ...], batch: int = 64) -> torch.Tensor:
    """The target's residual stream after each layer in ``layer_ids`` (what vLLM captures for DFlash:
    ``hidden_states[i + 1]``), side by side: [N, T, len(layer_ids) * H]."""
    parts = []
    for i in range(0, len(seqs), batch):
        states = target(input_ids=seqs[i : i + batch], output_hidden_states=True).hidden_states
        parts.append(torch.cat([states[j + 1] for j in layer_ids], dim=-1))
    return torch.cat(parts)


def _sample(seqs: torch.Tensor, rows: torch.Tensor, first: int, k: int, gen: torch.Generator):
    """``rows`` each at a random bonus position from ``first`` on, and the k tokens after it."""
    bonus_at = torch.randint(first, seqs.shape[1] - k, (len(rows),), generator=gen)
    return bonus_at, seqs[rows[:, None], bonus_at[:, None] + torch.arange(1, k + 1)]


def train_dflash(target, seqs: torch.Tensor, layer_ids: tuple[int, ...], mask_token_id: int, prompt_tokens: int,
                 cfg: dict = DFLASH_DISTILL) -> DFlashDraft:
    """Fit the draft to ``seqs`` (prompt + the target's greedy continuation), bonus positions in the
    continuation, ``cfg["masks"]`` masks, ``cfg["splits"]`` bonus positions per row."""
    torch.manual_seed(cfg["seed"])
    aux = aux_states(target, seqs, layer_ids)
    draft = DFlashDraft(target, len(layer_ids), mask_token_id).train()

    def loss_on(rows: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        rows = rows.repeat_interleave(cfg["splits"])
        bonus_at, labels = _sample(seqs, rows, prompt_tokens, cfg["masks"], gen)
        logits = draft(aux[rows], seqs[rows], bonus_at, cfg["masks"])
        return F.cross_entropy(logits.flatten(0, 1), labels.flatten())

    # Clipped: the scaled-up embeddings make the first steps large.
    fit(list(draft.parameters()), cfg, len(seqs), loss_on, clip_norm=1.0)
    return draft.eval()


@torch.inference_mode()
def mask_agreement(draft: DFlashDraft, target, seqs: torch.Tensor, layer_ids: tuple[int, ...], prompt_tokens: int,
                   k: int, seed: int = 9) -> list[float]:
    """Per mask, how often its guess is the target's greedy token (one random bonus position per row)."""
    rows = torch.arange(len(seqs))
    bonus_at, labels = _sample(seqs, rows, prompt_tokens, k, torch.Generator().manual_seed(seed))
    guess = draft(aux_states(target, seqs, layer_ids), seqs, bonus_at, k).argmax(-1)
    return [round(a, 4) for a in (guess == labels).float().mean(0).tolist()]


def dflash_tensors(draft: DFlashDraft) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """The checkpoint's tensors as vLLM loads them, and the mask embedding (``mask_embedding.pt``)."""
    layer = draft.layers[0]
    attn = layer.self_attn
    tensors = {"fc.weight": draft.fc.weight, "hidden_norm.weight": draft.hidden_norm, "norm.weight": draft.norm,
               "layers.0.input_layernorm.weight": layer.input_layernorm,
               "layers.0.post_attention_layernorm.weight": layer.post_attention_layernorm,
               "layers.0.self_attn.q_norm.weight": attn.q_norm, "layers.0.self_attn.k_norm.weight": attn.k_norm}
    tensors |= {f"layers.0.self_attn.{p}.weight": attn[p].weight for p in ("q_proj", "k_proj", "v_proj", "o_proj")}
    tensors |= {f"layers.0.mlp.{p}.weight": layer.mlp[p].weight for p in ("gate_proj", "up_proj", "down_proj")}
    return {name: t.detach().contiguous() for name, t in tensors.items()}, draft.mask_embedding.detach().clone()
