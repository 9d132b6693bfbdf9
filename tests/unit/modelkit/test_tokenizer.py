"""modelkit/tokenizer.py: the kit's tokenizer round-trips text, with its specials and chat template."""

from __future__ import annotations

import pytest

from modelkit.tokenizer import VOCAB_SIZE


@pytest.mark.parametrize(
    "text",
    ["def f(x):\n    return x + 1\n", "héllo wörld ✓ 日本語", " leading and trailing  ", "a"],
)
def test_tokenizer_round_trips(tokenizer, text):
    ids = tokenizer(text)["input_ids"]
    assert tokenizer.decode(ids) == text
    assert all(0 <= i < VOCAB_SIZE for i in ids)


def test_tokenizer_specials_and_chat_template(tokenizer):
    assert len(tokenizer) == VOCAB_SIZE
    specials = (tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id)
    assert specials == (0, 1, 2)
    # Plain prompts get no BOS, so a one-token prompt is one token.
    assert tokenizer("x")["input_ids"] == tokenizer.convert_tokens_to_ids(["x"])
    chat = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert chat == "<s>user: hi\nassistant:"
