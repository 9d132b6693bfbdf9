"""The unit tier: no vLLM engine may start here (``engine_guard.py``); fixtures shared by its folders."""

from __future__ import annotations

import pytest
from engine_guard import refuse_engines


# Per module, not per session: `make test` runs e2e tests and benchmarks in the same
# session after these. Autouse goes first among module fixtures, so theirs are guarded too.
@pytest.fixture(scope="module", autouse=True)
def no_engine_in_unit_tests():
    with refuse_engines():
        yield


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A model directory with a config.json only (``scheduler_harness.fake_model_dir``)."""
    from scheduler_harness import fake_model_dir

    return fake_model_dir(tmp_path_factory.mktemp("model"))


@pytest.fixture(scope="module")
def plugins_loaded():
    """vLLM's general plugins loaded, as vLLM does when it builds EngineArgs; MineDraft's
    ``register()`` again: idempotent, a second call changes nothing."""
    from vllm.plugins import load_general_plugins

    import minedraft.plugin

    load_general_plugins()
    minedraft.plugin.register()
