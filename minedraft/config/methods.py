"""What MineDraft needs to know of each of vLLM's speculative methods: one table, read by every check.

A method vLLM adds is one row here. Nothing else in the runtime compares method names
(tests/unit/config/test_methods.py scans the package for it); a method without a row runs on
MineDraft's stock path (config/overlap_coverage.py), as vLLM runs it. ``parallel_drafting`` (PARD,
P-EAGLE) is a flag of the speculative config, not a method: ``method_of`` reads it into the row.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any


@dataclass(frozen=True)
class Method:
    # The deferred draft call is checked for it (exact, accepting as stock SD): it overlaps.
    overlaps: bool = False
    # Its drafter is a model in the target's worker (n-gram and suffix decoding run none).
    runs_model: bool = True
    # It skips its depth-0 calls and catches up when next drafted (worker/in_process/draft_catch_up.py).
    catches_up: bool = False
    # Its pass over a position reads the target's hidden state there: a skipped call keeps them.
    reads_hidden_states: bool = False
    # It keeps nothing across calls (it reads the token table each time): not called at depth 0.
    stateless: bool = False
    # vLLM's runner takes its drafts as lists, not a tensor.
    drafts_as_lists: bool = False
    # Its call reads the runner's input batch itself (worker/suffix_batch.py).
    reads_batch: bool = False
    # Its proposer asserts a depth of K: named for the log (the controller then chooses how many of
    # its K drafts are verified).
    drafts_only_k: str | None = None
    # It drafts in host code: on a GPU it runs inline after the target's launch, not on a stream.
    host_code: bool = False
    # A draft model of its own: the depth prior's weight-ratio bound holds (policy/weight_bound.py).
    weight_bound: bool = False
    # The process drafter can run it in an engine of its own.
    own_engine: bool = False
    # In the process drafter it is driven with the target's hidden states of its context layers (DFlash).
    sends_context: bool = False
    # Tokens its drafter's query adds past K (DFlash queries the bonus token too): vLLM's runner drafts only
    # where a step's longest request has room for K plus these (the scheduler's _drafter_room).
    query_extra: int = 0
    # Why the process drafter cannot run it (its refusal's clause).
    stays_in_process: str = "drafts from the target's hidden states or runs no model"
    # A user's proposer class (``custom_class``; the process drafter's target uses one).
    custom: bool = False


_HEAD = "drafts from the target's hidden states (a head, not a model of its own)"

METHODS: dict[str, Method] = {
    "draft_model": Method(overlaps=True, catches_up=True, weight_bound=True, own_engine=True),
    "eagle": Method(overlaps=True, catches_up=True, reads_hidden_states=True, stays_in_process=_HEAD),
    "eagle3": Method(overlaps=True, catches_up=True, reads_hidden_states=True, stays_in_process=_HEAD),
    "mtp": Method(overlaps=True, stays_in_process="drafts with the target's own MTP layers, from its hidden states"),
    "medusa": Method(overlaps=True, drafts_only_k="Medusa",
                     stays_in_process="drafts from the target's last hidden state (heads, not a model of their own)"),
    "dflash": Method(overlaps=True, own_engine=True, sends_context=True, query_extra=1),
    "ngram": Method(overlaps=True, runs_model=False, stateless=True, drafts_as_lists=True, host_code=True,
                    stays_in_process="runs no model"),
    "suffix": Method(overlaps=True, runs_model=False, drafts_as_lists=True, reads_batch=True,
                     drafts_only_k="suffix decoding", stays_in_process="runs no model"),
    "custom_class": Method(drafts_as_lists=True, custom=True),
}
UNKNOWN = Method()
DEFAULT_METHOD = "draft_model"  # vLLM's method where a speculative config with a model names none


def method_named(name: str | None) -> Method:
    """The row of method ``name`` (a user's dict may leave it out: vLLM's default, a draft model)."""
    return METHODS.get(name or DEFAULT_METHOD, UNKNOWN)


def method_of(speculative_config: Any) -> Method:
    """The row of a vLLM ``SpeculativeConfig``'s method; no config: a row with nothing set.

    With ``parallel_drafting`` (PARD, P-EAGLE) vLLM lays out K draft slots at start-up: a depth between
    0 and K fails in its proposer, and depth 0 with a catch-up was seen to crash the worker (P-EAGLE on
    CPU). It drafts K in one forward, so the depth that can move is the number of drafts verified; and
    its first pass lays out mask slots the catch-up does not: it does not catch up."""
    if speculative_config is None:
        return UNKNOWN
    method = METHODS.get(speculative_config.method, UNKNOWN)
    if getattr(speculative_config, "parallel_drafting", False):
        return replace(method, catches_up=False, drafts_only_k="parallel drafting")
    return method


def method_of_engine(engine_kwargs: dict[str, Any]) -> Method:
    """The row of the method vLLM ``LLM`` keyword arguments speculate with (the process drafter's
    draft engine: a DFlash draft's engine speculates, a draft model's does not); none: a row with nothing set."""
    return METHODS.get((engine_kwargs.get("speculative_config") or {}).get("method"), UNKNOWN)


def names_where(trait: str) -> tuple[str, ...]:
    """The methods with ``trait`` set, in the table's order (for messages)."""
    return tuple(name for name, method in METHODS.items() if getattr(method, trait))
