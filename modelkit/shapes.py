"""Realistically shaped model pairs for GPU benchmarks, from configs alone.

``build_shapes()`` writes one Hugging Face model directory per shape: a
``config.json`` with the published hyperparameters of the model it imitates
and a copy of the kit's tokenizer. There are no weights: vLLM loads these
directories with ``load_format="dummy"`` (random weights of the right shapes),
so a benchmark pays the compute and memory of the real architecture without a
download. Outputs are meaningless; acceptance comes from vLLM's synthetic
rejection sampler instead (see ``benchmarks/sweep.py``).

The kit's tokenizer has 2,048 tokens, far fewer than these vocabularies:
prompts drawn from it are valid ids for every shape, and the model's
embedding and LM-head matmuls still have their published sizes. Its special
tokens (bos 0, eos 1, pad 2) replace the published ids so config and
tokenizer agree. Nothing here imports torch; building takes milliseconds.

Published figures (model cards; Qwen3-1.7B's card says 1.7B, the 2.03B on
its Hub page counts the tied LM head a second time, as its checkpoint stores
it): Llama-3.1-8B 8.03B, Llama-3.2-1B 1.24B, Qwen3-32B 32.8B, Qwen3-1.7B
1.72B (tied embeddings counted once).
"""

from __future__ import annotations

import json
import os

from minedraft.config import environment

SHAPES_VERSION = 1

# Special token ids of the kit's tokenizer (modelkit/tokenizer.py).
_KIT_SPECIAL_IDS = {"bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 2}

_LLAMA3 = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_act": "silu",
    "attention_bias": False,
    "mlp_bias": False,
    "rms_norm_eps": 1e-5,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "rope_theta": 500000.0,
}
_QWEN3 = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_act": "silu",
    "attention_bias": False,
    "rms_norm_eps": 1e-6,
    "vocab_size": 151936,
    "max_position_embeddings": 40960,
    "rope_theta": 1000000.0,
    "rope_scaling": None,
    "head_dim": 128,
    "use_sliding_window": False,
    "sliding_window": None,
    "max_window_layers": 28,
}


def _llama3_rope(factor: float) -> dict:
    return {"rope_type": "llama3", "factor": factor, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}


# Published config.json values of each model (architecture fields only).
SHAPES: dict[str, dict] = {
    "llama-3.1-8b": {**_LLAMA3, "hidden_size": 4096, "intermediate_size": 14336,
                     "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
                     "head_dim": 128, "tie_word_embeddings": False, "rope_scaling": _llama3_rope(8.0)},
    "llama-3.2-1b": {**_LLAMA3, "hidden_size": 2048, "intermediate_size": 8192,
                     "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8,
                     "head_dim": 64, "tie_word_embeddings": True, "rope_scaling": _llama3_rope(32.0)},
    "qwen3-32b": {**_QWEN3, "hidden_size": 5120, "intermediate_size": 25600,
                  "num_hidden_layers": 64, "num_attention_heads": 64, "num_key_value_heads": 8,
                  "tie_word_embeddings": False, "max_window_layers": 64},
    "qwen3-1.7b": {**_QWEN3, "hidden_size": 2048, "intermediate_size": 6144,
                   "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8,
                   "tie_word_embeddings": True},
}

# target, draft: each pair shares its vocabulary, as draft_model requires.
PAIRS: dict[str, tuple[str, str]] = {
    "llama-3.1-8b/llama-3.2-1b": ("llama-3.1-8b", "llama-3.2-1b"),
    "qwen3-32b/qwen3-1.7b": ("qwen3-32b", "qwen3-1.7b"),
}

# Per-token acceptance probability for the synthetic rejection sampler: a
# draft position is accepted with probability alpha given the previous one
# was. 0.8 is in the range reported for these same-family pairs at
# temperature 0; the sweep records it and takes --acceptance to change it.
DEFAULT_ACCEPTANCE = {"llama-3.1-8b/llama-3.2-1b": 0.8, "qwen3-32b/qwen3-1.7b": 0.8}


def shapes_dir() -> str:
    """Default cache directory: next to the kit's."""
    return os.path.join(os.path.dirname(environment.kit_dir()), f"shapes-v{SHAPES_VERSION}")


def config_dict(name: str) -> dict:
    """The full config.json of shape ``name``, as written."""
    return {**SHAPES[name], **_KIT_SPECIAL_IDS, "torch_dtype": "bfloat16",
            "initializer_range": 0.02, "use_cache": True}


def build_shapes(cache_dir: str | None = None, tokenizer_dir: str | None = None) -> dict[str, str]:
    """Write every shape's directory (idempotent); return ``{name: path}``.

    ``tokenizer_dir`` defaults to the kit's (built if needed).
    """
    from modelkit.tokenizer import TOKENIZER_FILES

    root = os.path.abspath(cache_dir or shapes_dir())
    if tokenizer_dir is None:
        from modelkit import build_kit

        tokenizer_dir = build_kit().tokenizer
    paths = {}
    for name in SHAPES:
        path = os.path.join(root, name)
        os.makedirs(path, exist_ok=True)
        config = json.dumps(config_dict(name), indent=2, sort_keys=True) + "\n"
        _write_if_changed(os.path.join(path, "config.json"), config.encode())
        for filename in TOKENIZER_FILES:
            src = os.path.join(tokenizer_dir, filename)
            if os.path.exists(src):
                with open(src, "rb") as f:
                    _write_if_changed(os.path.join(path, filename), f.read())
        paths[name] = path
    return paths


def parameter_count(config: dict) -> int:
    """Parameters of a Llama or Qwen3 decoder, by arithmetic (tied embeddings once)."""
    h, inter, layers = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]
    head_dim = config.get("head_dim") or h // config["num_attention_heads"]
    q = config["num_attention_heads"] * head_dim
    kv = config["num_key_value_heads"] * head_dim
    attention = h * q + 2 * h * kv + q * h
    if config.get("attention_bias"):
        attention += q + 2 * kv
    mlp = 3 * h * inter  # gate, up, down
    norms = 2 * h
    if config["model_type"] == "qwen3":
        norms += 2 * head_dim  # q_norm and k_norm
    embeddings = config["vocab_size"] * h * (1 if config["tie_word_embeddings"] else 2)
    return layers * (attention + mlp + norms) + embeddings + h  # + final norm


def kv_cache_bytes_per_token(config: dict, dtype_bytes: int = 2) -> int:
    """Bytes of K and V cache one token takes, over all layers."""
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    return 2 * config["num_hidden_layers"] * config["num_key_value_heads"] * head_dim * dtype_bytes


def pair_memory_bytes(pair: str, kv_tokens: int, dtype_bytes: int = 2) -> int:
    """Weights of both models plus a KV cache holding ``kv_tokens`` in each.

    Activations, CUDA graphs and the allocator need more; callers add headroom.
    """
    total = 0
    for name in PAIRS[pair]:
        config = SHAPES[name]
        total += parameter_count(config) * dtype_bytes
        total += kv_cache_bytes_per_token(config, dtype_bytes) * kv_tokens
    return total


def _write_if_changed(path: str, data: bytes) -> None:
    """Atomic write, skipped when the file already holds ``data``: rebuilding
    is free and concurrent builders never see a half-written file."""
    if os.path.exists(path):
        with open(path, "rb") as f:
            if f.read() == data:
                return
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
