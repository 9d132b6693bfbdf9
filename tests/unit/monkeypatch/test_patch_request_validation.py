"""The ``request_validation`` patch (minedraft/monkeypatch/patch_request_validation.py): vLLM's front end
refuses a request whose MineDraft fields are bad, where the engine's scheduler is MineDraft's."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from vllm import SamplingParams
from vllm.exceptions import VLLMValidationError
from vllm.v1.engine.input_processor import InputProcessor

from minedraft.monkeypatch import make_patches
from minedraft.monkeypatch.patch_request_validation import _wrap_validate_params
from minedraft.registry import SCHEDULER_QUALNAME, SHORT_NAME


def _processor(scheduler_cls=SCHEDULER_QUALNAME, speculative=True):
    config = SimpleNamespace(scheduler_config=SimpleNamespace(scheduler_cls=scheduler_cls),
                             speculative_config=SimpleNamespace() if speculative else None)
    return SimpleNamespace(vllm_config=config)


def _validate(processor, params):
    calls = []
    validate = _wrap_validate_params(lambda self, p, tasks: calls.append((p, tasks)) or "vLLM's answer")
    return validate(processor, params, ("generate",)), calls


def test_patch_request_validation_passes_a_good_limit_after_vllm_s_own_checks():
    params = SamplingParams(extra_args={"num_speculative_tokens": 2})
    answer, calls = _validate(_processor(), params)
    assert answer == "vLLM's answer" and calls == [(params, ("generate",))]


@pytest.mark.parametrize("scheduler_cls", [SCHEDULER_QUALNAME, SHORT_NAME])
def test_patch_request_validation_refuses_a_bad_limit_as_vllm_s_validation_error_naming_extra_args(scheduler_cls):
    with pytest.raises(VLLMValidationError, match=r"num_speculative_tokens'\] must be an integer >= 0") as e:
        _validate(_processor(scheduler_cls), SamplingParams(extra_args={"num_speculative_tokens": "off"}))
    assert e.value.parameter == "extra_args"


@pytest.mark.parametrize("processor", [_processor("vllm.v1.core.sched.scheduler.Scheduler"),
                                       _processor(speculative=False)])
def test_patch_request_validation_leaves_other_engines_unchanged(processor):
    answer, calls = _validate(processor, SamplingParams(extra_args={"num_speculative_tokens": -1}))
    assert answer == "vLLM's answer" and len(calls) == 1


def test_patch_request_validation_wraps_vllm_s_validation_with_its_signature_guarded():
    (patch,) = make_patches("request_validation")
    assert patch.target is InputProcessor and set(patch.replacements) == {"_validate_params"}
