"""A small byte-level BPE tokenizer trained on stdlib sources.

Byte-level BPE covers every string (no unknown tokens), and a 2048-entry
vocabulary keeps the models' embedding tables tiny. No BOS is added to plain
prompts, so a prompt can be exactly one token long; the chat template adds
it, which is what vLLM's chat endpoint expects from a Llama-style tokenizer.
"""

from __future__ import annotations

import json
import os

from modelkit.corpus import corpus_digest, tokenizer_corpus

VOCAB_SIZE = 2048
BOS, EOS, PAD = "<s>", "</s>", "<pad>"
SPECIAL_TOKENS = (BOS, EOS, PAD)  # ids 0, 1, 2

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ message['role'] }}: {{ message['content'] }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)

# What ``save_tokenizer`` writes; copied next to every model.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")

def tokenizer_spec() -> dict:
    """Everything the trained tokenizer depends on (hashed into the cache key)."""
    return {
        "vocab_size": VOCAB_SIZE,
        "special_tokens": list(SPECIAL_TOKENS),
        "chat_template": CHAT_TEMPLATE,
        "corpus": corpus_digest(),
    }


def train_tokenizer():
    """Train the raw ``tokenizers.Tokenizer``; deterministic for a fixed corpus."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(tokenizer_corpus(), trainer)
    return tok


def save_tokenizer(out_dir: str) -> None:
    """Train and save as a ``PreTrainedTokenizerFast`` that vLLM can load."""
    from transformers import PreTrainedTokenizerFast

    fast = PreTrainedTokenizerFast(
        tokenizer_object=train_tokenizer(),
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        chat_template=CHAT_TEMPLATE,
        model_max_length=2048,
    )
    fast.save_pretrained(out_dir)
    _pin_tokenizer_class(out_dir)


def _pin_tokenizer_class(out_dir: str) -> None:
    """Name the tokenizer class explicitly so any transformers version loads it."""
    path = os.path.join(out_dir, "tokenizer_config.json")
    with open(path) as f:
        cfg = json.load(f)
    cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    cfg["add_bos_token"] = False
    cfg["add_eos_token"] = False
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)


def load_tokenizer(model_dir: str):
    """The kit tokenizer saved in ``model_dir``."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir)
