"""A load: how many requests a step is for, rounded to a power of two, and what the policy keeps per load."""

from __future__ import annotations

from dataclasses import dataclass


def batch_bucket(num_reqs: int) -> int:
    """``num_reqs`` rounded down to a power of two (0: none): the granularity at which loads differ."""
    return 1 << (num_reqs.bit_length() - 1) if num_reqs > 0 else 0


def describe_bucket(bucket: int) -> str:
    return f"{bucket} requests" if bucket < 2 else f"{bucket}-{2 * bucket - 1} requests"


@dataclass(frozen=True)
class Load:
    """What the choice of parallel steps depends on besides the hardware."""

    bucket: int  # decoding requests, batch_bucket(); 0: the step verified and drafted nothing
    depth: int
    prefill_heavy: bool = False  # the step before computed more prompt than decode tokens

    @classmethod
    def of(cls, num_decoding: int, depth: int, prefill_tokens: int = 0, decode_tokens: int = 0) -> Load:
        return cls(batch_bucket(num_decoding), depth, prefill_tokens > decode_tokens)

    def __str__(self) -> str:
        return f"{describe_bucket(self.bucket)}, depth {self.depth}" + (", prefill-heavy" if self.prefill_heavy else "")
