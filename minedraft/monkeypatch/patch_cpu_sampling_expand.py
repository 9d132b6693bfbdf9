"""Fix vLLM 0.32.0's CPU expansion of per-request sampling parameters.

The rejection sampler expands each request's temperature, top-k and top-p to
its draft tokens with ``expand_batch_to_tokens``. On CPU its kernel is a C++
fallback that reads and writes int64 only, and vLLM's wrapper hands it int64
copies of the float32 (temperature, top-p) and int32 (top-k) tensors: the
expansion lands in a temporary and the real output stays uninitialised
memory. Stock speculative decoding on CPU therefore divides the target's
logits by garbage at temperature > 0 and samples from a wrong distribution
(measured on the kit's pair at temperature 1: chi-square 3254 on 19 degrees
of freedom against the target's exact distribution; the target alone: 19.9).
Greedy requests are unaffected (they never use these values).

The fix expands tensors of any other dtype with torch; int64 ones keep
vLLM's kernel. Applied by MineDraft's worker on CPU only.

Upstream diff: ``patches/0006-cpu-expand-kernel-dtypes.patch``.
"""

from __future__ import annotations

import torch

from minedraft.monkeypatch.patching import Patch, takes


def expand_by_counts(
    x: torch.Tensor, cu_num_tokens: torch.Tensor, num_tokens: int, replace_from, replace_to
) -> torch.Tensor:
    """``x[i]`` repeated for each token of request ``i`` (``replace_from``
    values replaced by ``replace_to``), as vLLM's expand kernel does."""
    counts = torch.diff(cu_num_tokens.to(torch.int64), prepend=cu_num_tokens.new_zeros(1, dtype=torch.int64))
    values = torch.where(x == replace_from, torch.as_tensor(replace_to, dtype=x.dtype), x)
    return torch.repeat_interleave(values, counts, output_size=num_tokens)


def _make_expand(original):
    def expand_batch_to_tokens(x, cu_num_tokens, num_tokens, replace_from=0, replace_to=0):
        if x.dtype == torch.int64:
            return original(x, cu_num_tokens, num_tokens, replace_from, replace_to)
        return expand_by_counts(x, cu_num_tokens, num_tokens, replace_from, replace_to)

    return expand_batch_to_tokens


def make_patches() -> list[Patch]:
    import vllm.v1.sample.rejection_sampler as rejection_sampler

    return [
        Patch(
            rejection_sampler,
            {"expand_batch_to_tokens": _make_expand},
            guards={"expand_batch_to_tokens": takes("x", "cu_num_tokens", "num_tokens", "replace_from", "replace_to")},
        )
    ]
