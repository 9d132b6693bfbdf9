"""MineDraft's settings: one frozen dataclass, parsed once, carried in vLLM's config.

Sources, later ones winning: the defaults, the ``MINEDRAFT_*`` environment
variables (a convenience) and ``additional_config["minedraft"]`` (vLLM's own
field: ``--additional-config '{"minedraft": {"mode": "parallel"}}'`` on the
CLI, ``additional_config=`` offline). The front end parses and validates them
once, before any model loads (each error is one line), and writes the result
back into ``additional_config["minedraft"]``, which vLLM ships to the engine
core and the workers inside ``VllmConfig``: no other process reads the
environment again.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from minedraft.config.environment import ENGINE_SETTINGS, get
from minedraft.config.errors import MineDraftConfigError
from minedraft.config.hybrid import lookup_limits
from minedraft.config.modes import RUNTIME_MODES
from minedraft.config.drafter_device import DrafterDevice

CONFIG_KEY = "minedraft"  # the key under vLLM's additional_config
LANES = ("overlap", "serial")

# field -> environment variable (the table: environment.py)
ENV = ENGINE_SETTINGS
DRAFTERS = ("in-process", "process")
DEPTHS = ("fixed", "auto", "step")
IDLE_DRAFTERS = ("skip", "run")
FIRST_TOKENS = ("early", "after_drafts")
DRAFT_AHEAD = ("auto", "always", "off")


@dataclass(frozen=True)
class MineDraftSettings:
    # auto: plain SD unless parallel steps are measured to win (policy/overlap.py);
    # parallel: every balanced step overlaps; stock: never.
    mode: str = "auto"
    # Where deferred drafts run: overlap (a thread on CPU, a CUDA stream on GPU)
    # or serial (inline at the start of the next step; debugging, measurements).
    lane: str = "overlap"
    # Intra-op threads of the CPU draft thread; None keeps torch's default.
    # One by default: a lane thread with its own multi-threaded OpenMP team left
    # the main lane's fallback steps 2.5x slower after the lane had run
    # (measured: one request, 128 tokens, 2,008 ms against 853 ms with one lane
    # thread and 646 ms drafting serially), and parallel steps were no faster.
    lane_threads: int | None = 1
    # Measurements: append per-step lane timings (JSON lines) to this file.
    step_profile: str | None = None
    # Where the draft model runs: in the target's worker (vLLM's drafter, on the
    # draft lane) or as vLLM's own engine in a process of its own (minedraft/process_drafter/).
    drafter: str = "in-process"
    # The process drafter's hardware: ``cpu:<cores>`` (e.g. ``cpu:1``, ``cpu:2-3``)
    # or ``cuda:<indices>`` (e.g. ``cuda:1``; several: the draft's tensor parallelism).
    drafter_device: str | None = None
    # How long the target waits for a process drafter's drafts before it
    # verifies without them (exact either way; counted in minedraft:late_drafts).
    drafter_timeout_s: float = 2.0
    # The process drafter between jobs (process_drafter/draft_engine/draft_ahead.py): auto (default) drafts past
    # the drafts it sent, as if all are accepted, as far as its spare time while the target verifies reaches, and
    # answers a job of several requests with the drafts made ahead alone; off: it waits for the next job; always:
    # the job's depth and one more, after every job (tests, measurements). Measured: benchmarks/README, "Drafting
    # ahead for every request".
    draft_ahead: str = "auto"
    # The most one in-process draft job may run; past it the worker ends with one error line and the
    # engine stops (worker/in_process/job_watchdog.py), well before vLLM's execute timeout (300 s): a job that
    # never returns is a collective out of step or a stuck drafter, and cannot be interrupted.
    lane_timeout_s: float = 60.0
    # The most a deferred draft call may copy (its inputs, EAGLE's target hidden
    # states included: T x H x dtype bytes, 3x that for EAGLE-3, T = the step's
    # scheduled tokens). A larger step (a long prefill chunk) drafts inline
    # instead: exact either way, it only loses that step's overlap. 0: never defer.
    capture_max_mib: float = 64.0
    # The speculation depth of each step: fixed (num_speculative_tokens, as vLLM), auto (the
    # goodput controller, policy/depth.py: 0..num_speculative_tokens per load,
    # from measured tokens/s, and each request's verified drafts cut to those its acceptance pays
    # for, policy/paying_drafts.py) or step (the controller alone, every request verifying
    # the step's drafts). Unset: auto in mode auto, fixed otherwise, and fixed where the
    # user gives vLLM's num_speculative_tokens_per_batch_size (see depth_control). Not in stock
    # mode, which stays vLLM's behaviour.
    speculation_depth: str | None = None
    # The draft model or EAGLE head at depth 0 (speculation turned off by the depth controller or by
    # vLLM's num_speculative_tokens_per_batch_size): skip its forward and feed it the skipped tokens when
    # it next drafts (worker/in_process/draft_catch_up.py), or run it every step as vLLM does. Methods draft_model,
    # eagle and eagle3.
    idle_drafter: str = "skip"
    # The most of the target's hidden states an EAGLE head's skipped depth-0 calls keep for its
    # catch-up, in all (T x H x dtype bytes per skipped token, 3x that for EAGLE-3). A depth-0 step
    # that would keep more runs the head, as vLLM does: exact either way.
    catch_up_max_mib: float = 256.0
    # A step that computes prompt tokens (a request's first token, or a prefill chunk) and drafts
    # inline: early, its drafter call runs after the engine core has queued the step's outputs (in
    # take_draft_token_ids), so the first token does not wait for that request's draft work; or
    # after_drafts, inside sampling, as vLLM. Not in stock mode, which stays vLLM's behaviour, nor for the
    # n-gram and suffix drafters (no model forward). With early and a drafter that catches up
    # (config/idle_drafter.py), every plain SD step drafts after its outputs, and a request that has reached
    # the engine core by then skips that round (scheduling/scheduler.py: skips_held_drafts).
    first_token: str = "early"
    # A second draft source beside vLLM's drafter, chosen per request and step by predicted goodput
    # (config/hybrid.py, policy/draft_sources.py): {"method": "suffix", "num_speculative_tokens": 16} with
    # vLLM's suffix_decoding_* fields, or {"method": "ngram"} with its prompt_lookup_* fields. None: the
    # model drafter alone.
    hybrid: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        for name in ENV:
            _check(name, getattr(self, name), name)
        if self.drafter == "process" and self.drafter_device is None:
            raise MineDraftConfigError(
                "MINEDRAFT_DRAFTER=process needs MINEDRAFT_DRAFTER_DEVICE=cpu:<cores> or cuda:<index> "
                "(or additional_config[\"minedraft\"][\"drafter_device\"]).")

    # ------------------------------------------------------------------ parsing
    @classmethod
    def parse(cls, additional_config: Mapping[str, Any] | None = None,
              environ: Mapping[str, str] | None = None) -> MineDraftSettings:
        """Defaults < ``MINEDRAFT_*`` < ``additional_config["minedraft"]``, validated."""
        values = {name: _check(name, _from_env(name, get(var, environ)), var)
                  for name, var in ENV.items() if get(var, environ)}
        given = (additional_config or {}).get(CONFIG_KEY) or {}
        if not isinstance(given, Mapping):
            raise MineDraftConfigError(f"additional_config[{CONFIG_KEY!r}] must be an object, got {given!r}.")
        unknown = sorted(set(given) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise MineDraftConfigError(
                f"unknown setting(s) {', '.join(map(repr, unknown))} in additional_config[{CONFIG_KEY!r}]; "
                f"known: {', '.join(f.name for f in dataclasses.fields(cls))}.")
        for name, value in given.items():
            _check(name, value, f"additional_config[{CONFIG_KEY!r}][{name!r}]")
        return cls(**{**values, **given})

    @classmethod
    def of(cls, vllm_config: Any) -> MineDraftSettings:
        """The settings the front end put into ``vllm_config``; parsed here only for
        configs that never went through the front end (tests that build a scheduler
        or an engine core directly)."""
        carried = (getattr(vllm_config, "additional_config", None) or {}).get(CONFIG_KEY)
        if isinstance(carried, Mapping) and carried.get("_resolved"):
            return cls(**{k: v for k, v in carried.items() if k != "_resolved"})
        return cls.parse(getattr(vllm_config, "additional_config", None))

    def to_config(self) -> dict[str, Any]:
        """What goes into ``additional_config["minedraft"]``: resolved, so no other
        process reads the environment again."""
        return {**dataclasses.asdict(self), "_resolved": True}

    def depth_control(self, has_depth_table: bool) -> str:
        """``auto`` where the depth controller chooses each step's depth, else ``fixed`` (vLLM's
        num_speculative_tokens, or its per-batch-size table where the user gives one)."""
        if self.speculation_depth is not None:
            return self.speculation_depth
        return "auto" if self.mode == "auto" and not has_depth_table else "fixed"

    def describe(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in dataclasses.asdict(self).items())


def _check(name: str, value: Any, source: str) -> Any:
    """``value`` if valid for setting ``name``; else one line naming where it came from."""
    choices = {"mode": RUNTIME_MODES, "lane": LANES, "drafter": DRAFTERS, "speculation_depth": DEPTHS,
               "idle_drafter": IDLE_DRAFTERS, "first_token": FIRST_TOKENS, "draft_ahead": DRAFT_AHEAD}.get(name)
    if choices is not None and value not in choices and not (name == "speculation_depth" and value is None):
        raise MineDraftConfigError(f"{source}={value!r} is not one of {', '.join(choices)}.")
    if name == "lane_threads" and value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise MineDraftConfigError(f"{source}={value!r}: lane_threads must be a positive integer or null.")
    if name == "step_profile" and value is not None and not isinstance(value, str):
        raise MineDraftConfigError(f"{source}={value!r}: step_profile must be a file path.")
    if name == "drafter_device" and value is not None:
        DrafterDevice.parse(value, source)
    if name == "hybrid":
        lookup_limits(value)
    if name in ("drafter_timeout_s", "lane_timeout_s") and (
            isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0):
        raise MineDraftConfigError(f"{source}={value!r}: {name} must be a positive number of seconds.")
    if name in ("capture_max_mib", "catch_up_max_mib") and (
            isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0):
        raise MineDraftConfigError(f"{source}={value!r}: {name} must be a number of MiB >= 0.")
    return value


def _from_env(name: str, raw: str) -> Any:
    if name == "hybrid":
        try:
            return json.loads(raw)
        except ValueError:
            raise MineDraftConfigError(f"{ENV[name]}={raw!r} is not JSON such as {{\"method\": \"suffix\"}}.") from None
    if name in ("drafter_timeout_s", "lane_timeout_s", "capture_max_mib", "catch_up_max_mib"):
        try:
            return float(raw)
        except ValueError:
            raise MineDraftConfigError(f"{ENV[name]}={raw!r} is not a number.") from None
    if name != "lane_threads":
        return raw
    try:
        threads = int(raw)
    except ValueError:
        raise MineDraftConfigError(f"{ENV[name]}={raw!r} is not an integer.") from None
    return threads if threads > 0 else None  # 0: torch's default
