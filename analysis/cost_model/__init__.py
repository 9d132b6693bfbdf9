"""The cost model of no SD, stock speculative decoding and MineDraft: offline analysis, not installed.

Pure Python and numpy: no vLLM, no torch. :mod:`~analysis.cost_model.profile`
holds the lane costs, :mod:`~analysis.cost_model.model` turns them into
tokens/s and the mode choice (pure functions), and
:mod:`~analysis.cost_model.calibrate` fits profiles to measurements. Its checks
against measurement files, the paper comparison, the report and the CLI
(``python -m analysis.simulator``) live in ``analysis/simulator/``. The runtime
keeps only the weight count of the policy's depth bound
(``minedraft/policy/weight_bound.py``), which :class:`ModelShape` shares.
"""

from analysis.cost_model.model import (
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
from analysis.cost_model.profile import ForwardCost, LatencyProfile, ModelShape

__all__ = [
    "COMPARISONS", "KIT_ALPHA", "KIT_TAU", "MODES", "ForwardCost", "LatencyProfile", "ModeChoice", "ModelShape",
    "Prediction", "Workload", "acceptance", "acceptance_from_length", "alpha_from_tau", "blend_parallel",
    "choose_mode", "predict", "predict_mode", "tokens_per_verification",
]
