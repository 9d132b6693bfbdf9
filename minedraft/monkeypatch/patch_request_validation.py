"""A request's MineDraft fields are checked in the front end, where a bad one fails that request alone.

A request limits its own drafts through ``SamplingParams.extra_args``
(policy/request_limits.py). vLLM's front end validates each request's
parameters before it reaches an engine core (``InputProcessor._validate_params``:
a bad value is an HTTP 400 for that request, or the exception of that
``LLM.generate`` call), but asks nothing of the scheduler, so an engine core
would meet a bad value only when the request is already scheduled. Where the
engine's scheduler is MineDraft's, its fields are checked there too, after vLLM's
own checks; otherwise the call is unchanged.

Upstream diff: ``patches/0011-scheduler-validate-request-params.patch`` (a
scheduler class method that the front end calls per request).
"""

from __future__ import annotations

import functools

from minedraft.monkeypatch.patching import Patch, takes
from minedraft.registry import is_minedraft


def validate_speculation_fields(params) -> None:
    """MineDraft's per-request fields of ``params`` (SamplingParams), as the front end reports a bad one."""
    from vllm.exceptions import VLLMValidationError

    from minedraft.policy.request_limits import requested_limit

    try:
        requested_limit(params)
    except ValueError as e:
        raise VLLMValidationError(str(e), parameter="extra_args") from None


def _wrap_validate_params(original):
    @functools.wraps(original)
    def _validate_params(self, params, supported_tasks):
        resolved = original(self, params, supported_tasks)
        if (self.vllm_config.speculative_config is not None
                and is_minedraft(self.vllm_config.scheduler_config.scheduler_cls)):
            from vllm import SamplingParams

            if isinstance(params, SamplingParams):
                validate_speculation_fields(params)
        return resolved

    return _validate_params


def make_patches() -> list[Patch]:
    from vllm.v1.engine.input_processor import InputProcessor

    return [Patch(InputProcessor, {"_validate_params": _wrap_validate_params},
                  guards={"_validate_params": takes("self", "params", "supported_tasks")})]
