"""The second draft source's settings: ``additional_config["minedraft"]["hybrid"]``.

vLLM's ``--speculative-config`` names the model drafter as always; this names the source beside it, with
vLLM's own field names for that method (``vllm/config/speculative.py``)::

    --additional-config '{"minedraft": {"hybrid": {"method": "suffix", "num_speculative_tokens": 16}}}'

Parsed and checked in the front end before any model loads (one line per error), like every setting.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from minedraft.config.errors import MineDraftConfigError

METHODS = ("suffix",)
NOT_BUILT = {"ngram": "use 'suffix' (it drafts what n-gram matching drafts, deeper, with a score to choose by)"}
# Unset: 16. vLLM's method suffix drafts up to suffix_decoding_max_tree_depth (24) unset; beside a model drafter
# a shallower default keeps one long miss cheap while a match still drafts several times K.
DEFAULT_DEPTH = 16
# vLLM's suffix_decoding_* fields -> SuffixLimits' fields
_SUFFIX_FIELDS = {"suffix_decoding_max_tree_depth": "max_tree_depth",
                  "suffix_decoding_max_cached_requests": "max_cached_requests",
                  "suffix_decoding_max_spec_factor": "max_spec_factor",
                  "suffix_decoding_min_token_prob": "min_token_prob"}


@dataclass(frozen=True)
class SuffixLimits:
    """vLLM's ``suffix_decoding_*`` fields (``vllm/config/speculative.py``), with its defaults, and the
    source's own depth."""

    max_depth: int  # the most tokens one draft holds (may exceed the model drafter's K)
    max_tree_depth: int = 24  # the longest context matched plus draft, per tree
    max_cached_requests: int = 10000  # finished requests' outputs kept in the global tree (0: prompts only)
    max_spec_factor: float = 1.0  # a draft at most this many times its match length
    min_token_prob: float = 0.1  # a draft stops at a token estimated less likely


def suffix_limits(hybrid: Mapping[str, Any] | None) -> SuffixLimits | None:
    """The suffix source's limits where ``hybrid`` names one (None: no second source); raises
    :class:`MineDraftConfigError` with one line for a setting it cannot run."""
    if hybrid is None:
        return None
    where = 'additional_config["minedraft"]["hybrid"]'
    if not isinstance(hybrid, Mapping):
        raise MineDraftConfigError(f"{where} must be an object such as {{\"method\": \"suffix\"}}, got {hybrid!r}.")
    method = hybrid.get("method")
    if method in NOT_BUILT:
        raise MineDraftConfigError(f"{where}: method {method!r} beside a model drafter is not built yet; "
                                   f"{NOT_BUILT[method]}.")
    if method not in METHODS:
        raise MineDraftConfigError(f"{where}: method must be one of {', '.join(METHODS)}, got {method!r}.")
    known = {"method", "num_speculative_tokens", *_SUFFIX_FIELDS}
    unknown = sorted(set(hybrid) - known)
    if unknown:
        raise MineDraftConfigError(f"{where}: unknown field(s) {', '.join(map(repr, unknown))}; known: "
                                   f"{', '.join(sorted(known))}.")
    depth = hybrid.get("num_speculative_tokens", DEFAULT_DEPTH)
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise MineDraftConfigError(f"{where}: num_speculative_tokens must be a positive integer, got {depth!r}.")
    limits = {"max_depth": depth}
    for name, field in _SUFFIX_FIELDS.items():
        if name in hybrid:
            limits[field] = _checked(name, hybrid[name], where)
    if limits.get("max_tree_depth", SuffixLimits.max_tree_depth) < 1:
        raise MineDraftConfigError(f"{where}: suffix_decoding_max_tree_depth must be at least 1.")
    return SuffixLimits(**limits)


def _checked(name: str, value: Any, where: str) -> Any:
    integer = name in ("suffix_decoding_max_tree_depth", "suffix_decoding_max_cached_requests")
    valid = (not isinstance(value, bool) and isinstance(value, int if integer else (int, float)) and value >= 0
             and (name != "suffix_decoding_min_token_prob" or value <= 1))
    if not valid:
        kind = "an integer >= 0" if integer else "a number in [0, 1]" if name.endswith("prob") else "a number >= 0"
        raise MineDraftConfigError(f"{where}: {name} must be {kind}, got {value!r}.")
    return value
