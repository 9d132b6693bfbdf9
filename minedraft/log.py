"""MineDraft's loggers, placed under vLLM's logger tree.

vLLM configures handlers only for the ``vllm`` logger tree: INFO lines from a
``minedraft.*`` logger would be dropped. Under ``vllm.minedraft.*`` they get
vLLM's format, handlers and ``VLLM_LOGGING_LEVEL``.
"""

from __future__ import annotations

import logging


def get_logger(name: str) -> logging.Logger:
    from vllm.logger import init_logger

    return init_logger(f"vllm.{name}")
