"""MineDraft: batch-parallel speculative decoding for vLLM V1.

Importing the package checks that a supported vLLM is installed and does
nothing else: no patches are applied and nothing is written at import time.
"""

from minedraft._version import __version__, check_vllm_version

check_vllm_version()

__all__ = ["__version__"]
