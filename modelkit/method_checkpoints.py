"""Tiny checkpoints for the speculative methods beyond draft_model and eagle3, made from the kit.

Each is built from the cached kit in seconds, the trained ones (Medusa, DFlash)
in about two minutes together, and was run with
stock vLLM 0.32 on CPU (float32, eager, greedy): every method's output equals
its target's alone.

* ``pard``: the kit's ``draft_perturbed`` with ``pard_token`` in its config
  (``method: draft_model``, ``parallel_drafting: true``).
* ``peagle``: the kit's EAGLE-3 head with ``ptd_token_id`` and a ``mask_hidden``
  weight ``[1, n_aux * target_hidden]`` (``method: eagle3``,
  ``parallel_drafting: true``). ``mask_hidden`` is zeros, so every mask slot's
  hidden state is ``fc(0) = 0``: only the first draft token is a real guess.
* ``medusa``: ``MEDUSA_HEADS`` heads for the kit target, each head's LM head
  the target's and its residual block fitted to the target's greedy text
  (``medusa.py``; per-head agreement in the marker). Zero blocks would draft
  the token just sampled, repeated, which the kit target's text almost never
  accepts. Its config has no key holding both "num" and "heads" but ``num_heads``: vLLM's
  ``MedusaConfig.from_pretrained`` would rename it.
* ``mtp_target``: a MiMo-style Qwen2 target (``MiMoForCausalLM``,
  ``num_nextn_predict_layers: 1``) with the kit target's weights and zero q/k/v
  biases, so it computes exactly the kit target's function, plus one MTP layer
  under ``model.mtp_layers.0.`` whose decoder layer is the target's last layer
  and whose ``input_proj`` is ``[0 | I]`` (the next token's normed embedding).
  Used with ``{"method": "mtp"}`` and no draft model.
* ``dflash_target`` + ``dflash``: a Qwen3 target made of the kit target's
  weights with ``q_norm``/``k_norm`` weights of ones (Qwen3 normalises q and k
  per head, so it is a different function from the kit target: compare it only
  with itself), and a one-layer DFlash draft trained on that target's greedy
  text (``dflash.py``, about 75 s; per-mask agreement in the marker), with its
  mask embedding in ``mask_embedding.pt``; embedding and LM head shared from the
  target. Built from the target's last layer and an identity ``fc``, it accepted
  no drafts.

Every mask/parallel-drafting token is ``MASK_TOKEN_ID`` = 2, the tokenizer's
``<pad>``: a special token that plain text never encodes to.

Cached under ``<kit dir>/methods/<name>`` with the kit's markers: each marker's
spec hash covers this module's recipe version and the kit models it is made
from, so an unchanged spec is never rebuilt and the fast path reads only
markers (no torch import).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass

from minedraft.config import environment
from modelkit import cache
from modelkit.specs import DFLASH_DISTILL, DISTILL, MEDUSA_DISTILL

METHODS_VERSION = 1
CHECKPOINTS = ("pard", "peagle", "medusa", "mtp_target", "dflash_target", "dflash")
METHODS = ("pard", "peagle", "medusa", "mtp", "dflash")

MASK_TOKEN_ID = 2  # "<pad>": never produced by encoding plain text
MEDUSA_HEADS = 4  # the most draft tokens the medusa checkpoint serves (K <= MEDUSA_HEADS)
MTP_LAYERS = 1
DFLASH_TARGET_LAYER_IDS = (0, 1, 2)  # 0-based target layers; vLLM captures aux states id + 1

# Which kit models each checkpoint is made from (their spec hashes join its own).
_UPSTREAM = {
    "pard": ("draft_perturbed",),
    "peagle": ("eagle3",),
    "medusa": ("target",),
    "mtp_target": ("target",),
    "dflash_target": ("target",),
    "dflash": ("target",),
}
_DFLASH_TARGET = {"arch": "Qwen3ForCausalLM", "qk_norm": "ones"}  # the DFlash draft is trained on it
_RECIPES = {
    "pard": {"pard_token": MASK_TOKEN_ID},
    "peagle": {"ptd_token_id": MASK_TOKEN_ID, "mask_hidden": "zeros"},
    "medusa": {"num_heads": MEDUSA_HEADS, "num_hidden_layers": 1, "blocks": "trained",
               "lm_heads": "target", "data": DISTILL, "distill": MEDUSA_DISTILL},
    "mtp_target": {"arch": "MiMoForCausalLM/qwen2", "qkv_bias": "zeros", "mtp_layers": MTP_LAYERS,
                   "mtp_block": "target_last_layer", "input_proj": "[0|I]"},
    "dflash_target": _DFLASH_TARGET,
    "dflash": {"target": _DFLASH_TARGET, "mask_token_id": MASK_TOKEN_ID,
               "target_layer_ids": list(DFLASH_TARGET_LAYER_IDS), "layers": 1, "weights": "trained",
               "mask_embedding": "trained", "data": DISTILL, "distill": DFLASH_DISTILL},
}


@dataclass(frozen=True)
class MethodCheckpoints:
    """Paths of the built method checkpoints (each directory holds the kit tokenizer)."""

    root: str
    target: str  # the kit target: pair with pard, peagle, medusa
    pard: str
    peagle: str
    medusa: str
    mtp_target: str
    dflash_target: str
    dflash: str

    def marker(self, name: str) -> dict:
        return cache.read_marker(getattr(self, name)) or {}

    def speculative_config(self, name: str, k: int) -> dict:
        """The ``--speculative-config`` dict of method ``name`` with ``k`` draft tokens.

        Pair it with ``target_for(name)``. medusa needs ``k <= MEDUSA_HEADS``
        (vLLM sets its head count to k). MiMo MTP has one layer: k = 1 is its
        design; vLLM 0.32 re-runs the layer for k > 1 with a warning (k = 2, 3
        ran greedy-identical on CPU). Run on CPU: pard and peagle k = 3,
        medusa k = 2 and 4, mtp k = 1 to 3, dflash k = 1 and 3.
        """
        if k < 1:
            raise ValueError(f"k must be >= 1, not {k}")
        if name == "pard":
            return {"method": "draft_model", "model": self.pard, "num_speculative_tokens": k,
                    "parallel_drafting": True}
        if name == "peagle":
            return {"method": "eagle3", "model": self.peagle, "num_speculative_tokens": k,
                    "parallel_drafting": True}
        if name == "medusa":
            if k > MEDUSA_HEADS:
                raise ValueError(f"the medusa checkpoint has {MEDUSA_HEADS} heads; k={k}")
            return {"method": "medusa", "model": self.medusa, "num_speculative_tokens": k}
        if name == "mtp":
            return {"method": "mtp", "num_speculative_tokens": k}
        if name == "dflash":
            return {"method": "dflash", "model": self.dflash, "num_speculative_tokens": k}
        raise ValueError(f"unknown method {name!r}; one of {METHODS}")

    def target_for(self, name: str) -> str:
        """The target directory to serve with ``speculative_config(name, k)``."""
        if name in ("pard", "peagle", "medusa"):
            return self.target
        if name == "mtp":
            return self.mtp_target
        if name == "dflash":
            return self.dflash_target
        raise ValueError(f"unknown method {name!r}; one of {METHODS}")


def method_paths(root: str, kit_target: str) -> MethodCheckpoints:
    root = os.path.abspath(root)
    return MethodCheckpoints(root=root, target=kit_target,
                             **{name: os.path.join(root, name) for name in CHECKPOINTS})


def build_method_checkpoints(cache_dir: str | None = None) -> MethodCheckpoints:
    """The method checkpoints under ``<cache_dir or the kit's directory>/methods``.

    Builds the kit first (``build_kit(cache_dir)``), then whatever checkpoint
    is missing or stale. Safe to call from several processes at once.
    """
    from modelkit.build import build_kit

    kit = build_kit(cache_dir)
    ckpts = method_paths(os.path.join(kit.root, "methods"), kit.target)
    hashes = spec_hashes()
    if all(cache.is_complete(getattr(ckpts, n), hashes[n]) for n in CHECKPOINTS):
        return ckpts
    os.makedirs(ckpts.root, exist_ok=True)
    with cache.build_lock(ckpts.root):
        for name in CHECKPOINTS:
            if not cache.is_complete(getattr(ckpts, name), hashes[name]):
                _build_one(kit, ckpts, name, hashes[name])
    return ckpts


def method_specs() -> dict[str, dict]:
    """The full spec of each checkpoint, the kit models' spec hashes included."""
    from modelkit.build import spec_hashes as kit_hashes

    kit = kit_hashes()
    return {name: {"version": METHODS_VERSION, "recipe": _RECIPES[name],
                   "kit": {up: kit[up] for up in _UPSTREAM[name]}}
            for name in CHECKPOINTS}


def spec_hashes() -> dict[str, str]:
    return {name: cache.spec_hash(spec) for name, spec in method_specs().items()}


def _build_one(kit, ckpts: MethodCheckpoints, name: str, expected_hash: str) -> None:
    staged = cache.staging_dir(ckpts.root, name)
    start = time.monotonic()
    extra = _BUILDERS[name](kit, ckpts, staged)
    _copy_tokenizer(kit.target, staged)
    marker = {
        "name": name,
        "spec_hash": expected_hash,
        "spec": method_specs()[name],
        "sha256": {"model.safetensors": cache.file_sha256(os.path.join(staged, "model.safetensors"))},
        "build_seconds": round(time.monotonic() - start, 2),
        **extra,
    }
    cache.write_marker(staged, marker)
    cache.publish(staged, getattr(ckpts, name))


# --- helpers ---------------------------------------------------------------------------------

def _read_config(model_dir: str) -> dict:
    with open(os.path.join(model_dir, "config.json")) as f:
        return json.load(f)


def _write_config(out: str, config: dict) -> None:
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")


def _load(model_dir: str) -> dict:
    from safetensors.torch import load_file

    return load_file(os.path.join(model_dir, "model.safetensors"))


def _save(tensors: dict, out: str) -> None:
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in tensors.items()}, os.path.join(out, "model.safetensors"),
              metadata={"format": "pt"})


def _copy_tokenizer(src: str, out: str) -> None:
    """The tokenizer and generation config, as in every kit directory."""
    from modelkit.tokenizer import TOKENIZER_FILES

    for fname in (*TOKENIZER_FILES, "generation_config.json"):
        shutil.copy2(os.path.join(src, fname), os.path.join(out, fname))


def _layer(tensors: dict, index: int) -> dict:
    """The decoder layer ``index``'s tensors, named relative to the layer."""
    prefix = f"model.layers.{index}."
    return {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}


def _qwen_base_config(target_cfg: dict) -> dict:
    keep = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
            "intermediate_size", "hidden_act", "rms_norm_eps", "rope_parameters", "vocab_size",
            "max_position_embeddings", "tie_word_embeddings", "bos_token_id", "eos_token_id",
            "pad_token_id", "initializer_range")
    cfg = {k: target_cfg[k] for k in keep if k in target_cfg}
    cfg["dtype"] = "float32"
    return cfg


def _qkv_zero_biases(layer: dict) -> dict:
    import torch

    return {f"self_attn.{p}.bias": torch.zeros(layer[f"self_attn.{p}.weight"].shape[0])
            for p in ("q_proj", "k_proj", "v_proj")}


# --- builders --------------------------------------------------------------------------------

def _build_pard(kit, ckpts: MethodCheckpoints, out: str) -> dict:
    config = _read_config(kit.draft_perturbed)
    config["pard_token"] = MASK_TOKEN_ID
    _write_config(out, config)
    shutil.copy2(os.path.join(kit.draft_perturbed, "model.safetensors"), os.path.join(out, "model.safetensors"))
    return {"pard_token": MASK_TOKEN_ID}


def _build_peagle(kit, ckpts: MethodCheckpoints, out: str) -> dict:
    import torch

    config = _read_config(kit.eagle3)
    config["ptd_token_id"] = MASK_TOKEN_ID
    n_aux = len(config["eagle_config"]["eagle_aux_hidden_state_layer_ids"])
    tensors = _load(kit.eagle3)
    tensors["mask_hidden"] = torch.zeros(1, n_aux * config["target_hidden_size"])
    _write_config(out, config)
    _save(tensors, out)
    return {"ptd_token_id": MASK_TOKEN_ID}


def _build_medusa(kit, ckpts: MethodCheckpoints, out: str) -> dict:
    from modelkit.build import AGREEMENT_PROMPTS, _agreement_sequences
    from modelkit.medusa import head_agreement, medusa_tensors, train_medusa
    from modelkit.models import distill_data, load_model, quiet_transformers

    target_cfg = _read_config(kit.target)
    with quiet_transformers():
        target = load_model(kit.target)
        heads = train_medusa(target, distill_data(target, kit.target), MEDUSA_HEADS, DISTILL["prompt_tokens"])
        agreement = head_agreement(heads, target, _agreement_sequences(kit, target), AGREEMENT_PROMPTS["n_tokens"])
    write_medusa(out, target_cfg, medusa_tensors(heads))
    return {"agreement_per_head": agreement}


def write_medusa(out: str, target_cfg: dict, tensors: dict) -> None:
    """``MEDUSA_HEADS`` one-layer Medusa heads as vLLM loads them, for the target of ``target_cfg``."""
    config = {"architectures": ["MedusaModel"], "model_type": "medusa", "hidden_size": target_cfg["hidden_size"],
              "vocab_size": target_cfg["vocab_size"], "num_heads": MEDUSA_HEADS, "num_hidden_layers": 1,
              "dtype": "float32"}
    _write_config(out, config)
    _save(tensors, out)


def _build_mtp_target(kit, ckpts: MethodCheckpoints, out: str) -> dict:
    import torch

    target_cfg = _read_config(kit.target)
    tensors = _load(kit.target)
    n, hidden = target_cfg["num_hidden_layers"], target_cfg["hidden_size"]
    for i in range(n):
        for k, v in _qkv_zero_biases(_layer(tensors, i)).items():
            tensors[f"model.layers.{i}.{k}"] = v
    last = _layer(tensors, n - 1)  # with its zero biases
    for m in range(MTP_LAYERS):
        prefix = f"model.mtp_layers.{m}."
        for k, v in last.items():
            tensors[prefix + k] = v.clone()
        for norm in ("token_layernorm", "hidden_layernorm", "final_layernorm"):
            tensors[f"{prefix}{norm}.weight"] = torch.ones(hidden)
        tensors[f"{prefix}input_proj.weight"] = torch.cat(
            [torch.zeros(hidden, hidden), torch.eye(hidden)], dim=1)  # [h, 2h]: input cat(prev_hidden, embeds)
    config = {**_qwen_base_config(target_cfg), "architectures": ["MiMoForCausalLM"], "model_type": "qwen2",
              "num_nextn_predict_layers": MTP_LAYERS, "use_sliding_window": False, "sliding_window": None,
              "max_window_layers": n, "attention_dropout": 0.0}
    _write_config(out, config)
    _save(tensors, out)
    return {}


def _qwen3_tensors(kit) -> tuple[dict, dict]:
    import torch

    target_cfg = _read_config(kit.target)
    tensors = _load(kit.target)
    head_dim = target_cfg["head_dim"]
    for i in range(target_cfg["num_hidden_layers"]):
        for norm in ("q_norm", "k_norm"):
            tensors[f"model.layers.{i}.self_attn.{norm}.weight"] = torch.ones(head_dim)
    return target_cfg, tensors


def _build_dflash_target(kit, ckpts: MethodCheckpoints, out: str) -> dict:
    target_cfg, tensors = _qwen3_tensors(kit)
    config = {**_qwen_base_config(target_cfg), "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
              "attention_bias": False, "use_sliding_window": False, "sliding_window": None,
              "max_window_layers": target_cfg["num_hidden_layers"], "attention_dropout": 0.0}
    _write_config(out, config)
    _save(tensors, out)
    return {}


def _build_dflash(kit, ckpts: MethodCheckpoints, out: str) -> dict:
    import torch
    from transformers import Qwen3ForCausalLM

    from modelkit.build import AGREEMENT_PROMPTS, _agreement_sequences
    from modelkit.dflash import dflash_tensors, mask_agreement, train_dflash
    from modelkit.models import distill_data, quiet_transformers

    target_cfg = _read_config(ckpts.dflash_target)
    with quiet_transformers():
        target = Qwen3ForCausalLM.from_pretrained(ckpts.dflash_target, dtype=torch.float32).eval()
        draft = train_dflash(target, distill_data(target, kit.target), DFLASH_TARGET_LAYER_IDS, MASK_TOKEN_ID,
                             DISTILL["prompt_tokens"])
        agreement = mask_agreement(draft, target, _agreement_sequences(kit, target), DFLASH_TARGET_LAYER_IDS,
                                   AGREEMENT_PROMPTS["n_tokens"], k=3)
    write_dflash(out, target_cfg, DFLASH_TARGET_LAYER_IDS, *dflash_tensors(draft))
    return {"agreement_per_mask": agreement}


def write_dflash(out: str, target_cfg: dict, layer_ids, tensors: dict, mask_embedding) -> None:
    """A one-layer DFlash draft as vLLM loads it, for the Qwen3 target of ``target_cfg``."""
    import torch

    config = {**_qwen_base_config(target_cfg), "architectures": ["DFlashDraftModel"], "model_type": "qwen3",
              "num_hidden_layers": 1, "attention_bias": False, "target_hidden_size": target_cfg["hidden_size"],
              "dflash_config": {"mask_token_id": MASK_TOKEN_ID, "target_layer_ids": list(layer_ids)}}
    _write_config(out, config)
    _save(tensors, out)
    # vLLM's override of the mask token's embedding (DFlashQwen3ForCausalLM._read_mask_embedding).
    torch.save({"mask_token_id": MASK_TOKEN_ID, "embedding": mask_embedding}, os.path.join(out, "mask_embedding.pt"))


_BUILDERS = {
    "pard": _build_pard,
    "peagle": _build_peagle,
    "medusa": _build_medusa,
    "mtp_target": _build_mtp_target,
    "dflash_target": _build_dflash_target,
    "dflash": _build_dflash,
}
