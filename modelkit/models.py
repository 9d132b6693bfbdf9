"""The kit's three tiny Llama models, built offline and deterministically.

* ``target``: randomly initialised, but shaped so greedy decoding is neither
  degenerate nor context-free. Plain random init gives near-uniform logits and
  attention that averages the whole context, so the next token depends on a
  blurry bag of everything before it. Scaling up the token embeddings makes
  the residual stream remember *recent* tokens (the model behaves like a
  noisy n-gram model a small draft can learn), and scaling up the LM head
  makes the output distribution peaky (mean top-1 prob ~0.5), so greedy choices have
  margins that survive float reordering between batch layouts.
* ``draft_perturbed``: the target plus relative Gaussian noise; agreement is
  dialled by one scalar.
* ``draft_small``: a 1-layer model distilled on the target's greedy outputs;
  the realistic case of a cheaper draft that is right some of the time.
"""

from __future__ import annotations

import contextlib
import copy
import os
import shutil

import torch

from modelkit.greedy import greedy_continue
from modelkit.specs import (
    DISTILL,
    EMBED_SCALE,
    HEAD_SCALE,
    PERTURB_SCALE,
    PERTURB_SEED,
    SMALL_ARCH,
    TARGET_ARCH,
    TARGET_SEED,
)
from modelkit.tokenizer import TOKENIZER_FILES, VOCAB_SIZE
from modelkit.training import fit
from modelkit.windows import token_windows


@contextlib.contextmanager
def quiet_transformers():
    """Silence transformers' progress bars and info logs while the kit builds."""
    from transformers.utils import logging

    bars = logging.is_progress_bar_enabled()
    verbosity = logging.get_verbosity()
    logging.disable_progress_bar()
    logging.set_verbosity_error()
    try:
        yield
    finally:
        logging.set_verbosity(verbosity)
        if bars:
            logging.enable_progress_bar()


def llama_config(arch: dict):
    """A float32 Llama config over the kit vocabulary."""
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=VOCAB_SIZE,
        max_position_embeddings=2048,
        tie_word_embeddings=False,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=2,
        dtype="float32",
        architectures=["LlamaForCausalLM"],
        **arch,
    )


def new_model(arch: dict, seed: int):
    """A freshly initialised model; the seed fixes every weight."""
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    return LlamaForCausalLM(llama_config(arch)).float().eval()


def load_model(model_dir: str):
    """A kit model directory as a float32 transformers model in eval mode."""
    from transformers import LlamaForCausalLM

    with quiet_transformers():
        return LlamaForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()


def save_model(model, out_dir: str, tokenizer_dir: str) -> None:
    """Write what vLLM needs: config, safetensors, generation config, tokenizer."""
    model.save_pretrained(out_dir, safe_serialization=True)
    save_generation_config_and_tokenizer(out_dir, tokenizer_dir)


def save_generation_config_and_tokenizer(out_dir: str, tokenizer_dir: str) -> None:
    """The files every kit model directory holds besides its config and weights."""
    from transformers import GenerationConfig

    gen = GenerationConfig(bos_token_id=0, eos_token_id=1, pad_token_id=2)
    gen.save_pretrained(out_dir)
    if os.path.abspath(tokenizer_dir) != os.path.abspath(out_dir):
        for name in TOKENIZER_FILES:
            shutil.copy2(os.path.join(tokenizer_dir, name), os.path.join(out_dir, name))


@torch.no_grad()
def make_target(arch: dict = TARGET_ARCH, seed: int = TARGET_SEED):
    """The random, peaky, mostly-local target described in the module doc."""
    model = new_model(arch, seed)
    model.model.embed_tokens.weight.mul_(EMBED_SCALE)
    model.lm_head.weight.mul_(HEAD_SCALE)
    return model


@torch.no_grad()
def perturb(target, scale: float = PERTURB_SCALE, seed: int = PERTURB_SEED):
    """A copy of ``target`` with ``param += N(0, 1) * scale * std(param)``.

    Constant tensors (the RMSNorm weights, std 0) are left alone.
    """
    draft = copy.deepcopy(target)
    gen = torch.Generator().manual_seed(seed)
    for _, param in sorted(draft.named_parameters()):
        noise = torch.randn(param.shape, generator=gen, dtype=param.dtype)
        param.add_(noise * (scale * param.std()))
    return draft


def distill_small(target, tokenizer_dir: str, cfg: dict = DISTILL, arch: dict = SMALL_ARCH):
    """Train a small draft to imitate ``target`` on the target's greedy text.

    The student sees the target's full next-token distribution (soft-label
    KL) at every position of prompt + greedy continuation: far more signal
    per CPU second than argmax labels alone. A fixed step count, not a time
    budget, keeps the result reproducible.
    """
    seqs = distill_data(target, tokenizer_dir, cfg)
    teacher = teacher_logprobs(target, seqs)
    student = new_model(arch, cfg["seed"]).train()
    fit(list(student.parameters()), cfg, len(seqs), lambda rows, _: _kl_loss(student, seqs[rows], teacher[rows]))
    return student.eval()


def distill_data(target, tokenizer_dir: str, cfg: dict = DISTILL) -> torch.Tensor:
    """Prompt + target greedy continuation, one equal-length row per prompt."""
    prompts = token_windows(cfg["n_prompts"], cfg["prompt_tokens"], cfg["prompt_seed"],
                            tokenizer_dir)
    conts = greedy_continue(target, prompts, cfg["gen_tokens"], batch=128)
    return torch.tensor([p + c for p, c in zip(prompts, conts)])


@torch.inference_mode()
def teacher_logprobs(target, seqs: torch.Tensor, batch: int = 32) -> torch.Tensor:
    """Target log-probs for every next-token position, kept in bfloat16."""
    parts = []
    for i in range(0, len(seqs), batch):
        logits = target(input_ids=seqs[i : i + batch, :-1]).logits
        parts.append(torch.log_softmax(logits.float(), -1).bfloat16())
    return torch.cat(parts)


def _kl_loss(student, seqs: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """KL(teacher || student), averaged over positions."""
    logq = torch.log_softmax(student(input_ids=seqs[:, :-1]).logits.float(), -1)
    logp = teacher.float()
    return (logp.exp() * (logp - logq)).sum(-1).mean()
