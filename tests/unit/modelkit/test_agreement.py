"""modelkit/agreement.py: the target agrees with itself, and each draft with the target within its band."""

from __future__ import annotations

import pytest

from modelkit.specs import PERTURBED_AGREEMENT_BAND, SMALL_AGREEMENT_BAND


def test_target_agrees_with_itself(kit, agreement_prompts):
    """Teacher-forced padded batches reproduce incremental greedy decoding."""
    from modelkit.agreement import greedy_agreement

    assert greedy_agreement(kit.target, kit.target, agreement_prompts[:8], 16) >= 0.99


@pytest.mark.parametrize(
    "name, band",
    [("draft_perturbed", PERTURBED_AGREEMENT_BAND), ("draft_small", SMALL_AGREEMENT_BAND)],
)
def test_draft_agreement_in_documented_band(kit, agreement_prompts, name, band):
    from modelkit.agreement import greedy_agreement

    agreement = greedy_agreement(kit.target, getattr(kit, name), agreement_prompts, 32)
    assert band[0] <= agreement <= band[1], agreement
    assert band[0] <= kit.marker(name)["agreement"] <= band[1]
