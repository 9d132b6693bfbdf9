"""The ``cpu_sampling_expand`` patch (minedraft/monkeypatch/patch_cpu_sampling_expand.py):
vLLM 0.32.0's CPU expansion of per-request sampling parameters, and MineDraft's fix.

Without the fix the rejection sampler's expanded temperature / top-p / top-k
on CPU are uninitialised memory (stock speculative decoding then samples from
a wrong distribution at temperature > 0); with it they are each request's
value repeated over its draft tokens.
"""

from __future__ import annotations

import pytest
import torch

from minedraft.monkeypatch import scoped_patch


@pytest.fixture(scope="module")
def rejection_sampler():
    from vllm.platforms import current_platform

    current_platform.register_triton_kernel_overrides()  # what every vLLM worker does first
    import vllm.v1.sample.rejection_sampler as rs

    return rs


CU = torch.tensor([2, 5, 6], dtype=torch.int32)  # 2, 3 and 1 draft tokens


def test_patch_cpu_sampling_expand_uses_torch_except_for_int64():
    from minedraft.monkeypatch.patch_cpu_sampling_expand import _make_expand

    to_vllm = []
    expand = _make_expand(lambda *args: to_vllm.append(args) or "vllm's kernel")
    got = expand(torch.tensor([0.6, -1.0, 1.3]), CU, 6, -1, 1)
    assert got.tolist() == pytest.approx([0.6, 0.6, 1.0, 1.0, 1.0, 1.3]) and to_vllm == []
    assert expand(torch.tensor([7, 8, 9]), CU, 6) == "vllm's kernel" and len(to_vllm) == 1


@pytest.mark.parametrize(
    ("values", "replace", "expected"),
    [
        (torch.tensor([0.6, -1.0, 1.3]), (-1, 1), [0.6, 0.6, 1.0, 1.0, 1.0, 1.3]),  # temperature
        (torch.tensor([0.9, 1.0, 0.5]), (0, 0), [0.9, 0.9, 1.0, 1.0, 1.0, 0.5]),  # top-p
        (torch.tensor([5, 0, 40], dtype=torch.int32), (0, 0), [5, 5, 0, 0, 0, 40]),  # top-k
        (torch.tensor([7, 8, 9], dtype=torch.int64), (8, 1), [7, 7, 1, 1, 1, 9]),  # vLLM's kernel
    ],
)
def test_fixed_expand_repeats_each_request_value(rejection_sampler, values, replace, expected):
    with scoped_patch("cpu_sampling_expand"):
        got = rejection_sampler.expand_batch_to_tokens(values, CU, 6, *replace)
    assert got.dtype == values.dtype
    assert got.tolist() == pytest.approx(expected)


def test_stock_expand_loses_float_values(rejection_sampler):
    """The bug the patch exists for (if this fails, vLLM fixed it: drop the patch)."""
    out = None
    for _ in range(5):  # uninitialised memory may by chance hold the right values once
        out = rejection_sampler.expand_batch_to_tokens(torch.tensor([0.6, 0.7, 1.3]), CU, 6, -1, 1)
        if out.tolist() != pytest.approx([0.6, 0.6, 0.7, 0.7, 0.7, 1.3]):
            return
    pytest.fail(f"vLLM's CPU expand kernel now expands float32 correctly: {out.tolist()}")


def test_sampling_constraints_divide_by_each_request_temperature(rejection_sampler):
    from types import SimpleNamespace

    logits = torch.ones(6, 4)
    meta = SimpleNamespace(all_greedy=False, temperature=torch.tensor([0.5, 2.0, 1.0]), top_k=None, top_p=None)
    with scoped_patch("cpu_sampling_expand"):
        out = rejection_sampler.apply_sampling_constraints(logits, CU, meta)
    assert out[:, 0].tolist() == pytest.approx([2.0, 2.0, 0.5, 0.5, 0.5, 1.0])
