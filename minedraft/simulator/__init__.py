"""A cost model of no SD, stock speculative decoding and MineDraft.

``python -m minedraft.simulator --help``. Pure Python and numpy: no vLLM, no torch.
:mod:`~minedraft.simulator.profile` holds the lane costs (fitted to the CPU
measurements or built from published GPU figures), :mod:`~minedraft.simulator.model`
turns them into tokens/s and the mode choice (pure functions, usable online),
:mod:`~minedraft.simulator.check` compares them with measurement files,
:mod:`~minedraft.simulator.paper` with the paper's headline table, and
:mod:`~minedraft.simulator.report` writes both up.
"""

from minedraft.simulator.check import CheckResult, CheckRow, check, detect_format
from minedraft.simulator.model import (
    COMPARISONS,
    KIT_ALPHA,
    KIT_TAU,
    MODES,
    ModeChoice,
    Prediction,
    Workload,
    acceptance,
    acceptance_from_length,
    alpha_from_tau,
    blend_parallel,
    choose_mode,
    predict,
    predict_mode,
    tokens_per_verification,
)
from minedraft.simulator.profile import ForwardCost, LatencyProfile, ModelShape, profile_by_name

__all__ = [
    "COMPARISONS", "KIT_ALPHA", "KIT_TAU", "MODES", "CheckResult", "CheckRow", "ForwardCost", "LatencyProfile",
    "ModeChoice", "ModelShape", "Prediction", "Workload", "acceptance", "acceptance_from_length", "alpha_from_tau",
    "blend_parallel", "check", "choose_mode", "detect_format", "predict", "predict_mode", "profile_by_name",
    "tokens_per_verification",
]
