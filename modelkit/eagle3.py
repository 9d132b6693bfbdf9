"""The kit's EAGLE-3 head for its target, trained offline on the target's own hidden states.

vLLM's ``Eagle3LlamaForCausalLM`` (``vllm/model_executor/models/llama_eagle3.py``)
is one decoder layer fed, at position ``p``, with the embedding of token
``p + 1`` and ``fc`` of the target's residual stream at ``p`` taken before
three of its layers (the "auxiliary" hidden states, ``AUX_LAYER_IDS``). It
predicts token ``p + 2``. :class:`Eagle3Head` is that forward in plain torch,
with the checkpoint names vLLM loads (``midlayer.*``, ``fc``, ``norm``,
``lm_head``, ``embed_tokens``), so a few hundred CPU steps can fit it to the
target and vLLM then runs the same function.

Training covers the first draft token only (teacher forcing on the target's
greedy text, soft labels from the target), which is what acceptance depends
on most; later draft tokens reuse the head on its own output, as in vLLM.
The embedding and LM head are the target's, frozen.
"""

from __future__ import annotations

import json
import os

import torch
from torch import nn
from torch.nn import functional as F

from modelkit.specs import EAGLE3_ARCH, EAGLE3_DISTILL
from modelkit.training import fit

# Index i is the residual stream entering the target's layer i (vLLM's and
# transformers' ``hidden_states[i]``). vLLM's default, (2, n // 2, n - 3),
# collapses to two layers for a 4-layer target, so the config names three.
AUX_LAYER_IDS = (1, 2, 3)
RMS_EPS = 1e-6
ROPE_THETA = 10000.0


class RMSNorm(nn.Module):
    def __init__(self, size: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + RMS_EPS) * self.weight


class Eagle3Layer(nn.Module):
    """vLLM's EAGLE-3 decoder layer 0: attention over [norm(embeds), norm(hidden)] (2H wide)."""

    def __init__(self, hidden: int, heads: int, kv_heads: int, intermediate: int) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, hidden // heads
        self.input_layernorm, self.hidden_norm = RMSNorm(hidden), RMSNorm(hidden)
        self.post_attention_layernorm = RMSNorm(hidden)
        self.self_attn = nn.ModuleDict({
            "q_proj": nn.Linear(2 * hidden, heads * self.head_dim, bias=False),
            "k_proj": nn.Linear(2 * hidden, kv_heads * self.head_dim, bias=False),
            "v_proj": nn.Linear(2 * hidden, kv_heads * self.head_dim, bias=False),
            "o_proj": nn.Linear(heads * self.head_dim, hidden, bias=False),
        })
        self.mlp = nn.ModuleDict({
            "gate_proj": nn.Linear(hidden, intermediate, bias=False),
            "up_proj": nn.Linear(hidden, intermediate, bias=False),
            "down_proj": nn.Linear(intermediate, hidden, bias=False),
        })

    def forward(self, embeds: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        """The residual stream after the layer (vLLM adds it in the final norm)."""
        residual = hidden
        x = torch.cat([self.input_layernorm(embeds), self.hidden_norm(hidden)], dim=-1)
        residual = self._attention(x) + residual
        mlp = self.mlp
        x = self.post_attention_layernorm(residual)
        return mlp["down_proj"](F.silu(mlp["gate_proj"](x)) * mlp["up_proj"](x)) + residual

    def _attention(self, x: torch.Tensor) -> torch.Tensor:
        attn, (b, t, _) = self.self_attn, x.shape
        q = attn["q_proj"](x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = attn["k_proj"](x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = attn["v_proj"](x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = _rope(q), _rope(k)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return attn["o_proj"](out.transpose(1, 2).reshape(b, t, -1))


def _rope(x: torch.Tensor) -> torch.Tensor:
    """Neox-style rotary embedding at positions 0..t-1 (vLLM's Llama default)."""
    t, d = x.shape[-2], x.shape[-1]
    inv_freq = 1.0 / ROPE_THETA ** (torch.arange(0, d, 2, dtype=torch.float32) / d)
    freqs = torch.outer(torch.arange(t, dtype=torch.float32), inv_freq)
    cos, sin = torch.cat([freqs, freqs], -1).cos(), torch.cat([freqs, freqs], -1).sin()
    half = d // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


class Eagle3Head(nn.Module):
    def __init__(self, arch: dict, target) -> None:
        super().__init__()
        hidden = arch["hidden_size"]
        self.fc = nn.Linear(len(AUX_LAYER_IDS) * target.config.hidden_size, hidden, bias=False)
        self.midlayer = Eagle3Layer(hidden, arch["num_attention_heads"], arch["num_key_value_heads"],
                                    arch["intermediate_size"])
        self.norm = RMSNorm(hidden)
        self.embed_tokens = nn.Embedding.from_pretrained(target.model.embed_tokens.weight.detach().clone())
        self.lm_head = nn.Linear(hidden, target.lm_head.weight.shape[0], bias=False)
        self.lm_head.weight = nn.Parameter(target.lm_head.weight.detach().clone(), requires_grad=False)

    def forward(self, next_ids: torch.Tensor, aux: torch.Tensor) -> torch.Tensor:
        """Logits at each position p for token p + 2, given token p + 1 and the target's state at p."""
        stream = self.midlayer(self.embed_tokens(next_ids), self.fc(aux))
        return self.lm_head(self.norm(stream))


@torch.inference_mode()
def aux_states(target, seqs: torch.Tensor, batch: int = 32) -> torch.Tensor:
    """The target's auxiliary hidden states, concatenated: [N, T, 3 * H]."""
    parts = []
    for i in range(0, len(seqs), batch):
        states = target(input_ids=seqs[i : i + batch], output_hidden_states=True).hidden_states
        parts.append(torch.cat([states[j] for j in AUX_LAYER_IDS], dim=-1))
    return torch.cat(parts)


def train_eagle3(target, seqs: torch.Tensor, teacher: torch.Tensor, cfg: dict = EAGLE3_DISTILL,
                 arch: dict = EAGLE3_ARCH) -> Eagle3Head:
    """Fit the head to the target: KL to the target's next-token distribution at p + 1.

    ``seqs`` is prompt + greedy continuation; ``teacher`` the target's log-probs
    for every next-token position of ``seqs`` (``models.teacher_logprobs``).
    """
    torch.manual_seed(cfg["seed"])
    aux = aux_states(target, seqs)
    head = Eagle3Head(arch, target).train()

    def kl_loss(rows: torch.Tensor, _) -> torch.Tensor:
        logq = torch.log_softmax(head(seqs[rows, 1:-1], aux[rows, :-2]).float(), -1)
        logp = teacher[rows, 1:].float()
        return (logp.exp() * (logp - logq)).sum(-1).mean()

    fit([p for p in head.parameters() if p.requires_grad], cfg, len(seqs), kl_loss)
    return head.eval()


@torch.inference_mode()
def first_token_agreement(head: Eagle3Head, target, seqs: torch.Tensor) -> float:
    """How often the head's first draft token equals the target's greedy token (teacher-forced)."""
    aux = aux_states(target, seqs)
    guess = head(seqs[:, 1:-1], aux[:, :-2]).argmax(-1)
    target_next = target(input_ids=seqs[:, :-1]).logits.argmax(-1)[:, 1:]
    return round((guess == target_next).float().mean().item(), 4)


def save_eagle3(head: Eagle3Head, out_dir: str, tokenizer_dir: str, arch: dict = EAGLE3_ARCH) -> None:
    """config.json and model.safetensors as vLLM loads an EAGLE-3 checkpoint (vLLM
    drafts with the target's tokenizer; the copy keeps every kit directory alike).

    ``method: eagle3`` must be given in the speculative config: vLLM infers it
    only from "eagle3" in the path.
    """
    from safetensors.torch import save_file

    from modelkit.models import save_generation_config_and_tokenizer
    from modelkit.tokenizer import VOCAB_SIZE

    os.makedirs(out_dir, exist_ok=True)
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 1,
        **{k: arch[k] for k in ("hidden_size", "num_attention_heads", "num_key_value_heads",
                                "intermediate_size")},
        "hidden_act": "silu", "rms_norm_eps": RMS_EPS, "rope_theta": ROPE_THETA,
        "vocab_size": VOCAB_SIZE, "draft_vocab_size": VOCAB_SIZE,
        "target_hidden_size": head.fc.in_features // len(AUX_LAYER_IDS), "max_position_embeddings": 2048,
        "tie_word_embeddings": False, "dtype": "float32",
        "bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 2,
        "eagle_config": {"use_aux_hidden_state": True,
                         "eagle_aux_hidden_state_layer_ids": list(AUX_LAYER_IDS)},
    }
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    tensors = {name: t.detach().contiguous() for name, t in head.state_dict().items()}
    save_file(tensors, os.path.join(out_dir, "model.safetensors"))
    save_generation_config_and_tokenizer(out_dir, tokenizer_dir)

