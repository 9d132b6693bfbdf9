"""Every method's checkpoint for a second target, with weights unrelated to the kit's.

The kit's checkpoints (``build.py``, ``method_checkpoints.py``) come from one Llama target of one
shape, and most have a structure chosen so that they draft well (trained heads, identity maps, the
target's own layers). MineDraft must not depend on either: a user brings other shapes and other
weights. Here every weight is drawn at random, and the shapes are not the kit's:

* ``target``: a ``Qwen2ForCausalLM`` (q/k/v biases) of hidden size 192 and 3 layers (the kit's: a
  Llama, 256 and 4), 3 query heads over one KV head; its embedding and LM head scaled as the kit
  target's are (``models.py``: greedy text without near-ties, which exactness checks need);
* ``mtp_target``: the same weights as MiMo (``MiMoForCausalLM``) with one random MTP layer;
* ``pard``: the target's own weights with ``pard_token``: its first draft token is the target's;
* ``peagle``: a random EAGLE-3 head of the target's width, with ``ptd_token_id`` and a random
  ``mask_hidden``;
* ``medusa``: ``MEDUSA_HEADS`` random heads over the target's LM head;
* ``dflash_target`` + ``dflash``: a random ``Qwen3ForCausalLM`` of the same shape, and a random
  one-layer DFlash draft that reads two of its layers (the kit's reads three) with a random mask
  embedding.

Random drafts are mostly rejected: these check exactness and parallel steps on shapes and weights the
kit never made (tests/e2e/test_second_target.py); acceptance is shown with the kit's checkpoints
(tests/e2e/test_overlapped_methods.py). The paths come as a :class:`MethodCheckpoints`, so the same
``speculative_config(name, k)`` and ``target_for(name)`` serve both. Cached under
``<kit dir>/second_target/<name>`` with the kit's markers; built in seconds.
"""

from __future__ import annotations

import os
import shutil

from modelkit import cache
from modelkit.method_checkpoints import (
    CHECKPOINTS,
    MASK_TOKEN_ID,
    MEDUSA_HEADS,
    MethodCheckpoints,
    _copy_tokenizer,
    _read_config,
    _save,
    _write_config,
    method_paths,
    write_dflash,
    write_medusa,
)

SECOND_TARGET_VERSION = 2  # 2: the DFlash config from method_checkpoints.write_dflash
ARCH = {"hidden_size": 192, "num_hidden_layers": 3, "num_attention_heads": 3, "num_key_value_heads": 1,
        "head_dim": 64, "intermediate_size": 512, "initializer_range": 0.05}
SEEDS = {"target": 11, "mtp_layer": 12, "peagle": 13, "medusa": 14, "dflash_target": 15, "dflash": 16}
DFLASH_LAYER_IDS = (0, 2)
NAMES = ("target", *CHECKPOINTS)  # each built after the ones it reads


def second_target_spec() -> dict:
    """Everything the weights depend on (hashed into every marker)."""
    return {"version": SECOND_TARGET_VERSION, "arch": ARCH, "seeds": SEEDS, "dflash_layer_ids": list(DFLASH_LAYER_IDS),
            "medusa_heads": MEDUSA_HEADS, "mask_token_id": MASK_TOKEN_ID}


def build_second_target(cache_dir: str | None = None) -> MethodCheckpoints:
    """The second target's checkpoints under ``<cache_dir or the kit's directory>/second_target``."""
    from modelkit.build import build_kit

    kit = build_kit(cache_dir)
    root = os.path.join(kit.root, "second_target")
    ckpts = method_paths(root, os.path.join(root, "target"))
    expected = cache.spec_hash(second_target_spec())
    if all(cache.is_complete(os.path.join(root, n), expected) for n in NAMES):
        return ckpts
    with cache.build_lock(root):
        for name in NAMES:
            final = os.path.join(root, name)
            if not cache.is_complete(final, expected):
                staged = cache.staging_dir(root, name)
                _BUILDERS[name](kit, ckpts, staged)
                _copy_tokenizer(kit.target, staged)
                cache.write_marker(staged, {"name": name, "spec_hash": expected, "spec": second_target_spec()})
                cache.publish(staged, final)
    return ckpts


# --- helpers ---------------------------------------------------------------------------------

def _config(cls_name: str):
    import transformers

    from modelkit.tokenizer import VOCAB_SIZE

    config_cls = getattr(transformers, cls_name)
    return config_cls(vocab_size=VOCAB_SIZE, max_position_embeddings=2048, tie_word_embeddings=False,
                      bos_token_id=0, eos_token_id=1, pad_token_id=2, dtype="float32", **ARCH)


def _random_model(model_cls: str, config_cls: str, seed: int):
    """A freshly initialised model, scaled as the kit target (``models.make_target``), biases drawn too."""
    import torch
    import transformers

    from modelkit.specs import EMBED_SCALE, HEAD_SCALE

    torch.manual_seed(seed)
    model = getattr(transformers, model_cls)(_config(config_cls)).float().eval()
    with torch.no_grad():
        model.model.embed_tokens.weight.mul_(EMBED_SCALE)
        model.lm_head.weight.mul_(HEAD_SCALE)
        for name, param in model.named_parameters():
            if name.endswith(".bias"):
                param.normal_(0.0, ARCH["initializer_range"])
    return model


def _load(model_cls: str, model_dir: str):
    import torch
    import transformers

    from modelkit.models import quiet_transformers

    with quiet_transformers():
        return getattr(transformers, model_cls).from_pretrained(model_dir, dtype=torch.float32).eval()


def _randomise(tensors: dict, seed: int) -> dict:
    """Every tensor drawn anew, same shape: norm weights around 1, the rest N(0, initializer_range)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    std = ARCH["initializer_range"]
    return {name: (1.0 + std * torch.randn(t.shape, generator=gen)) if "norm" in name
            else std * torch.randn(t.shape, generator=gen) for name, t in sorted(tensors.items())}


# --- builders --------------------------------------------------------------------------------

def _save_pretrained(model, out: str) -> None:
    from modelkit.models import quiet_transformers

    with quiet_transformers():
        model.save_pretrained(out)


def _build_target(kit, ckpts: MethodCheckpoints, out: str) -> None:
    _save_pretrained(_random_model("Qwen2ForCausalLM", "Qwen2Config", SEEDS["target"]), out)


def _build_mtp_target(kit, ckpts: MethodCheckpoints, out: str) -> None:
    import torch

    from modelkit.method_checkpoints import _layer, _load as load_tensors

    tensors = load_tensors(ckpts.target)
    n, hidden = ARCH["num_hidden_layers"], ARCH["hidden_size"]
    # vLLM's MiMo MTP layer: a Qwen2 decoder layer, three norms and input_proj over [hidden | embedding].
    shapes = {name: t.shape for name, t in _layer(tensors, 0).items()}
    shapes |= {f"{norm}.weight": (hidden,) for norm in ("token_layernorm", "hidden_layernorm", "final_layernorm")}
    shapes["input_proj.weight"] = (hidden, 2 * hidden)
    mtp = _randomise({name: torch.empty(shape) for name, shape in shapes.items()}, SEEDS["mtp_layer"])
    tensors |= {f"model.mtp_layers.0.{name}": t for name, t in mtp.items()}
    config = {**_read_config(ckpts.target), "architectures": ["MiMoForCausalLM"], "model_type": "qwen2",
              "num_nextn_predict_layers": 1, "max_window_layers": n}
    _write_config(out, config)
    _save(tensors, out)


def _build_pard(kit, ckpts: MethodCheckpoints, out: str) -> None:
    _write_config(out, {**_read_config(ckpts.target), "pard_token": MASK_TOKEN_ID})
    shutil.copy2(os.path.join(ckpts.target, "model.safetensors"), os.path.join(out, "model.safetensors"))


def _build_peagle(kit, ckpts: MethodCheckpoints, out: str) -> None:
    import torch

    from modelkit.eagle3 import AUX_LAYER_IDS, Eagle3Head, save_eagle3

    arch = {k: ARCH[k] for k in ("hidden_size", "num_attention_heads", "num_key_value_heads", "intermediate_size")}
    torch.manual_seed(SEEDS["peagle"])
    head = Eagle3Head(arch, _load("Qwen2ForCausalLM", ckpts.target))
    save_eagle3(head, out, kit.tokenizer, arch)
    config = {**_read_config(out), "ptd_token_id": MASK_TOKEN_ID}
    tensors = {name: t.detach() for name, t in head.state_dict().items()}
    tensors["mask_hidden"] = _randomise({"mask_hidden": torch.empty(1, len(AUX_LAYER_IDS) * ARCH["hidden_size"])},
                                        SEEDS["peagle"])["mask_hidden"]
    _write_config(out, config)
    _save(tensors, out)


def _build_medusa(kit, ckpts: MethodCheckpoints, out: str) -> None:
    import torch

    from modelkit.medusa import MedusaHeads, medusa_tensors

    heads = MedusaHeads(MEDUSA_HEADS, _load("Qwen2ForCausalLM", ckpts.target))
    gen = torch.Generator().manual_seed(SEEDS["medusa"])
    with torch.no_grad():
        for block in heads.blocks:
            block["layers"][0].weight.normal_(0.0, ARCH["initializer_range"], generator=gen)
    write_medusa(out, _read_config(ckpts.target), medusa_tensors(heads))


def _build_dflash_target(kit, ckpts: MethodCheckpoints, out: str) -> None:
    _save_pretrained(_random_model("Qwen3ForCausalLM", "Qwen3Config", SEEDS["dflash_target"]), out)


def _build_dflash(kit, ckpts: MethodCheckpoints, out: str) -> None:
    import torch

    from modelkit.dflash import DFlashDraft, dflash_tensors

    target = _load("Qwen3ForCausalLM", ckpts.dflash_target)
    torch.manual_seed(SEEDS["dflash"])
    tensors, _ = dflash_tensors(DFlashDraft(target, len(DFLASH_LAYER_IDS), MASK_TOKEN_ID))
    mask_embedding = _randomise({"mask": torch.empty(ARCH["hidden_size"])}, SEEDS["dflash"] + 1)["mask"]
    write_dflash(out, _read_config(ckpts.dflash_target), DFLASH_LAYER_IDS, _randomise(tensors, SEEDS["dflash"]),
                 mask_embedding)


_BUILDERS = {
    "target": _build_target,
    "pard": _build_pard,
    "peagle": _build_peagle,
    "medusa": _build_medusa,
    "mtp_target": _build_mtp_target,
    "dflash_target": _build_dflash_target,
    "dflash": _build_dflash,
}
