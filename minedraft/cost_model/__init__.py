"""The cost model of no SD, stock speculative decoding and MineDraft: what ``auto`` uses at run time.

Pure Python and numpy: no vLLM, no torch. :mod:`~minedraft.cost_model.profile`
holds the lane costs, :mod:`~minedraft.cost_model.model` turns them into
tokens/s and the mode choice (pure functions), and
:mod:`~minedraft.cost_model.calibrate` fits profiles to measurements. The
offline analysis (checks against measurement files, the paper comparison,
the report, the CLI ``python -m analysis.simulator``) lives in
``analysis/simulator/``, outside the runtime package.
"""

from minedraft.cost_model.model import (
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
from minedraft.cost_model.profile import ForwardCost, LatencyProfile, ModelShape

__all__ = [
    "COMPARISONS", "KIT_ALPHA", "KIT_TAU", "MODES", "ForwardCost", "LatencyProfile", "ModeChoice", "ModelShape",
    "Prediction", "Workload", "acceptance", "acceptance_from_length", "alpha_from_tau", "blend_parallel",
    "choose_mode", "predict", "predict_mode", "tokens_per_verification",
]
