"""The second draft source's settings: ``additional_config["minedraft"]["hybrid"]``.

vLLM's ``--speculative-config`` names the model drafter as always; this names the source beside it, with
vLLM's own field names for that method (``vllm/config/speculative.py``)::

    --additional-config '{"minedraft": {"hybrid": {"method": "suffix", "num_speculative_tokens": 16}}}'
    --additional-config '{"minedraft": {"hybrid": {"method": "ngram", "prompt_lookup_max": 5}}}'

Both are lookup sources: they draft what the request's text (and, for suffix decoding, earlier requests'
outputs) continued with before. Suffix decoding needs the ``suffix`` extra (arctic-inference); n-gram
matching runs vLLM's own matcher (numba). Parsed and checked in the front end before any model loads (one
line per error), like every setting.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from minedraft.config.errors import MineDraftConfigError

# Unset: 16, for both methods. vLLM's method suffix drafts up to suffix_decoding_max_tree_depth (24) unset;
# beside a model drafter a shallower default keeps one long miss cheap while a match still drafts several
# times K.
DEFAULT_DEPTH = 16
# vLLM's suffix_decoding_* fields -> SuffixLimits' fields
_SUFFIX_FIELDS = {"suffix_decoding_max_tree_depth": "max_tree_depth",
                  "suffix_decoding_max_cached_requests": "max_cached_requests",
                  "suffix_decoding_max_spec_factor": "max_spec_factor",
                  "suffix_decoding_min_token_prob": "min_token_prob"}
_NGRAM_FIELDS = ("prompt_lookup_min", "prompt_lookup_max")


@dataclass(frozen=True)
class SuffixLimits:
    """vLLM's ``suffix_decoding_*`` fields (``vllm/config/speculative.py``), with its defaults, and the
    source's own depth."""

    max_depth: int  # the most tokens one draft holds (may exceed the model drafter's K)
    max_tree_depth: int = 24  # the longest context matched plus draft, per tree
    max_cached_requests: int = 10000  # finished requests' outputs kept in the global tree (0: prompts only)
    max_spec_factor: float = 1.0  # a draft at most this many times its match length
    min_token_prob: float = 0.1  # a draft stops at a token estimated less likely

    def describe(self) -> str:
        return "suffix decoding"


@dataclass(frozen=True)
class NgramLimits:
    """vLLM's ``prompt_lookup_*`` fields, with its defaults and its rule for one left unset (the other's
    value), and the source's own depth."""

    max_depth: int  # the most tokens one draft holds (vLLM's ngram drafts what followed the match, up to this)
    prompt_lookup_min: int = 5  # the shortest n-gram matched
    prompt_lookup_max: int = 5  # the longest

    def describe(self) -> str:
        return f"n-gram matching ({self.prompt_lookup_min}-{self.prompt_lookup_max} tokens matched)"


LookupLimits = SuffixLimits | NgramLimits


def lookup_limits(hybrid: Mapping[str, Any] | None) -> LookupLimits | None:
    """The second source's limits where ``hybrid`` names one (None: no second source); raises
    :class:`MineDraftConfigError` with one line for a setting it cannot run."""
    if hybrid is None:
        return None
    where = 'additional_config["minedraft"]["hybrid"]'
    if not isinstance(hybrid, Mapping):
        raise MineDraftConfigError(f"{where} must be an object such as {{\"method\": \"suffix\"}}, got {hybrid!r}.")
    method = hybrid.get("method")
    if method not in _SOURCES:
        raise MineDraftConfigError(f"{where}: method must be one of {', '.join(_SOURCES)}, got {method!r}.")
    fields, limits_of = _SOURCES[method]
    known = {"method", "num_speculative_tokens", *fields}
    unknown = sorted(set(hybrid) - known)
    if unknown:
        raise MineDraftConfigError(f"{where}: unknown field(s) {', '.join(map(repr, unknown))}; known: "
                                   f"{', '.join(sorted(known))}.")
    depth = hybrid.get("num_speculative_tokens", DEFAULT_DEPTH)
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise MineDraftConfigError(f"{where}: num_speculative_tokens must be a positive integer, got {depth!r}.")
    return limits_of(hybrid, depth, where)


def _suffix_limits(hybrid: Mapping[str, Any], depth: int, where: str) -> SuffixLimits:
    limits = {"max_depth": depth}
    for name, field in _SUFFIX_FIELDS.items():
        if name in hybrid:
            limits[field] = _checked(name, hybrid[name], where)
    if limits.get("max_tree_depth", SuffixLimits.max_tree_depth) < 1:
        raise MineDraftConfigError(f"{where}: suffix_decoding_max_tree_depth must be at least 1.")
    return SuffixLimits(**limits)


def _ngram_limits(hybrid: Mapping[str, Any], depth: int, where: str) -> NgramLimits:
    for name in _NGRAM_FIELDS:
        value = hybrid.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise MineDraftConfigError(f"{where}: {name} must be a positive integer, got {value!r}.")
    low, high = hybrid.get("prompt_lookup_min"), hybrid.get("prompt_lookup_max")
    low = low if low is not None else high if high is not None else NgramLimits.prompt_lookup_min
    high = high if high is not None else low
    if low > high:
        raise MineDraftConfigError(f"{where}: prompt_lookup_min={low} must be <= prompt_lookup_max={high}.")
    return NgramLimits(depth, low, high)


def _checked(name: str, value: Any, where: str) -> Any:
    integer = name in ("suffix_decoding_max_tree_depth", "suffix_decoding_max_cached_requests")
    valid = (not isinstance(value, bool) and isinstance(value, int if integer else (int, float)) and value >= 0
             and (name != "suffix_decoding_min_token_prob" or value <= 1))
    if not valid:
        kind = "an integer >= 0" if integer else "a number in [0, 1]" if name.endswith("prob") else "a number >= 0"
        raise MineDraftConfigError(f"{where}: {name} must be {kind}, got {value!r}.")
    return value


# Each method: its own fields (vLLM's names) and its limits from them.
_SOURCES = {"suffix": (tuple(_SUFFIX_FIELDS), _suffix_limits), "ngram": (_NGRAM_FIELDS, _ngram_limits)}
