"""A cost model of no SD, stock speculative decoding and MineDraft.

``python -m minedraft.simulator --help``. Pure Python and numpy: no vLLM, no torch.
:mod:`~minedraft.simulator.profile` holds the lane costs (fitted to the CPU
measurements or built from published GPU figures), :mod:`~minedraft.simulator.model`
turns them into tokens/s and the mode choice.
"""

from minedraft.simulator.model import (
    COMPARISONS,
    KIT_ALPHA,
    KIT_TAU,
    MODES,
    ModeChoice,
    Prediction,
    Workload,
    acceptance,
    alpha_from_tau,
    check,
    choose_mode,
    predict,
    tokens_per_verification,
)
from minedraft.simulator.profile import ForwardCost, LatencyProfile, profile_by_name

__all__ = [
    "COMPARISONS", "KIT_ALPHA", "KIT_TAU", "MODES", "ForwardCost", "LatencyProfile", "ModeChoice", "Prediction",
    "Workload", "acceptance", "alpha_from_tau", "check", "choose_mode", "predict", "profile_by_name",
    "tokens_per_verification",
]
