"""Which drafters skip calls and catch up later (worker/in_process/draft_catch_up.py).

Asked by the worker, which builds the catch-up, and by the scheduler, which
lets a new request skip a held drafting round only where one will follow, and
leaves rows undrafted only where the drafter takes their tokens later.
"""

from __future__ import annotations

from minedraft.config.methods import method_of


def catches_up(speculative_config, settings, uses_mrope: bool) -> bool:
    """Whether the in-process drafter skips calls and catches up (``idle_drafter=skip``): a draft model or
    EAGLE head, not where positions are M-RoPE's (the catch-up builds 1-D ones), nor for parallel drafting
    (PARD, P-EAGLE: its first pass lays out mask slots the catch-up does not; a P-EAGLE catch-up was seen
    to crash the worker), nor for the process drafter (its engine keeps its own KV cache)."""
    spec = speculative_config
    return (spec is not None and settings.idle_drafter == "skip" and settings.drafter != "process"
            and method_of(spec).catches_up and not uses_mrope)


def skips_rows(speculative_config, settings, uses_mrope: bool) -> bool:
    """Whether the drafter can leave some rows of a call undrafted and draft them later from every token
    they gained meanwhile (the hybrid's undrafted requests, policy/policy.py): the in-process drafter where
    it catches up, and the process drafter, whose engine's sessions take the tokens a request missed with
    the next job that drafts it, as after a step at depth 0."""
    return (catches_up(speculative_config, settings, uses_mrope)
            or (speculative_config is not None and settings.drafter == "process"))
