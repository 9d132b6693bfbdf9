"""Fixtures of the model kit's tests: the cached kit (``build_kit()``; the first run on a machine
builds it, about half a minute on 2 idle cores, later runs only read markers), its tokenizer, and
prompts for measuring agreement."""

from __future__ import annotations

import json
import os

import pytest

from modelkit import Kit, build_kit


@pytest.fixture(scope="module")
def kit() -> Kit:
    return build_kit()


@pytest.fixture(scope="module")
def tokenizer(kit):
    from modelkit.tokenizer import load_tokenizer

    return load_tokenizer(kit.tokenizer)


@pytest.fixture(scope="module")
def agreement_prompts(kit):
    from modelkit.prompts import mixed_prompts

    return mixed_prompts(16, seed=3, max_tokens=128, tokenizer_dir=kit.tokenizer)


@pytest.fixture(scope="session")
def model_config():
    """The config.json of a model directory, as a dict."""

    def read(model_dir: str) -> dict:
        with open(os.path.join(model_dir, "config.json")) as f:
            return json.load(f)

    return read
