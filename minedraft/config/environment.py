"""Every ``MINEDRAFT_*`` environment variable, in one table; the only module that reads them.

Settings (``ENGINE_SETTINGS``) are a convenience beside ``--additional-config``:
the front end reads them once (settings.py) and ships the result to the other
processes inside vLLM's config. The rest are for the model kit, the tests and
the project's own tooling; of those the runtime reads only the drafter's
self-check, and only in tests' draft engines. The fault variables are read by
the tests' own wrappers of the worker and the draft engine
(tests/e2e/fault_injection.py). The few variables of vLLM and CUDA the
runtime must respect are read here too (:func:`inherited`): no other module
of the package reads the environment (tests/unit/config/test_environment.py
checks).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Variable:
    name: str
    setting: str | None  # the MineDraftSettings field it sets, if any
    reader: str  # who reads it
    meaning: str


VARIABLES = (
    Variable("MINEDRAFT_MODE", "mode", "front end", "auto (default), parallel or stock"),
    Variable("MINEDRAFT_LANE", "lane", "front end", "overlap (default) or serial: where deferred drafts run"),
    Variable("MINEDRAFT_LANE_THREADS", "lane_threads", "front end",
             "intra-op threads of the CPU draft thread (default 1; 0: torch's default)"),
    Variable("MINEDRAFT_STEP_PROFILE", "step_profile", "front end", "append per-step lane timings to this file"),
    Variable("MINEDRAFT_DRAFTER", "drafter", "front end", "in-process (default) or process"),
    Variable("MINEDRAFT_DRAFTER_DEVICE", "drafter_device", "front end",
             "the process drafter's hardware: cpu:<cores> or cuda:<indices>"),
    Variable("MINEDRAFT_DRAFTER_TIMEOUT_S", "drafter_timeout_s", "front end",
             "how long the target waits for a process drafter's drafts (default 2)"),
    Variable("MINEDRAFT_DRAFT_AHEAD", "draft_ahead", "front end",
             "the process drafter between jobs: auto (default: drafts past its last drafts as far as its spare "
             "time reaches; a job of several requests gets those alone), off or always"),
    Variable("MINEDRAFT_LANE_TIMEOUT_S", "lane_timeout_s", "front end",
             "the most one in-process draft job may run before the worker ends with an error (default 60)"),
    Variable("MINEDRAFT_CAPTURE_MAX_MIB", "capture_max_mib", "front end",
             "largest deferred draft call copied for the lane (default 64); larger ones draft inline"),
    Variable("MINEDRAFT_SPECULATION_DEPTH", "speculation_depth", "front end",
             "auto (the default in mode auto: each step's depth from a step-cost model and measured acceptance, "
             "each request's verified drafts from its own), step (the step's depth alone) or fixed "
             "(num_speculative_tokens)"),
    Variable("MINEDRAFT_IDLE_DRAFTER", "idle_drafter", "front end",
             "skip (default: at depth 0 the draft model or EAGLE head catches up when it next drafts) or run (as vLLM)"),
    Variable("MINEDRAFT_CATCH_UP_MAX_MIB", "catch_up_max_mib", "front end",
             "most of the target's hidden states kept for an EAGLE head's catch-up (default 256)"),
    Variable("MINEDRAFT_FIRST_TOKEN", "first_token", "front end",
             "early (default: a prefill step's drafts are made after its tokens are sent; where the drafter "
             "catches up, every plain SD step's, skipped for a waiting request) or after_drafts (as vLLM)"),
    Variable("MINEDRAFT_HYBRID", "hybrid", "front end",
             'a second draft source beside the model drafter, as JSON: {"method": "suffix", '
             '"num_speculative_tokens": 16} with vLLM\'s suffix_decoding_* fields, or {"method": "ngram"} with its '
             'prompt_lookup_* fields (default: none)'),
    Variable("MINEDRAFT_KIT_DIR", None, "modelkit", "the model kit's cache (default ~/.cache/minedraft/kit-v1)"),
    Variable("MINEDRAFT_INJECT_FAULT", None, "tests' fault wrappers (worker, draft engine)",
             "comma-separated faults: draft_lane, draft_lane_stall, draft_lane_hang_rank1, drafter_stall, drafter_exit"),
    Variable("MINEDRAFT_FAULT_MARKER", None, "tests' fault wrapper (worker)", "a stalled draft job appends a line here"),
    Variable("MINEDRAFT_FAULT_STALL_S", None, "tests' fault wrappers (worker, draft engine)",
             "how long a stall lasts (default 5)"),
    Variable("MINEDRAFT_DRAFTER_SELF_CHECK", None, "tests (draft engine)",
             "1: the draft engine also drafts each request from scratch and reports mismatches"),
    Variable("MINEDRAFT_VLLM_SRC", None, "tests/upstream", "where vLLM 0.32.0's sdist is kept"),
    Variable("MINEDRAFT_UPSTREAM_SCHEDULER", None, "tests/upstream", "the scheduler vLLM's own suite runs against"),
    Variable("MINEDRAFT_UPSTREAM_REPORT", None, "tests/upstream", "where that suite's JSON report is written"),
)
BY_NAME = {v.name: v for v in VARIABLES}
# setting field -> variable
ENGINE_SETTINGS = {v.setting: v.name for v in VARIABLES if v.setting is not None}


def get(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The value of a variable of the table (unset or empty: None)."""
    if name not in BY_NAME:
        raise KeyError(f"{name} is not in minedraft/config/environment.py's table")
    return (os.environ if environ is None else environ).get(name) or None


def inherited(name: str) -> str | None:
    """A variable MineDraft does not define but must respect (vLLM's, CUDA's): read here so
    that this module stays the package's one reader of the environment."""
    if name.startswith("MINEDRAFT_"):
        raise KeyError(f"{name}: use get() (MineDraft's own variables are in the table)")
    return os.environ.get(name) or None


def kit_dir() -> str:
    return get("MINEDRAFT_KIT_DIR") or os.path.expanduser("~/.cache/minedraft/kit-v1")


def drafter_self_check() -> bool:
    return get("MINEDRAFT_DRAFTER_SELF_CHECK") == "1"


def markdown_table() -> str:
    """The table as the README shows it."""
    rows = ["| variable | sets | read by | meaning |", "| --- | --- | --- | --- |"]
    rows += [f"| `{v.name}` | {f'`{v.setting}`' if v.setting else '-'} | {v.reader} | {v.meaning} |"
             for v in VARIABLES]
    return "\n".join(rows)
