"""harness/engine_args.py: engine arguments per mode and their serve flags (no engine)."""

from __future__ import annotations

import pytest

from harness.engine_args import CPU_DEFAULTS, Speculation, engine_kwargs, serve_flags
from harness.modes import BENCH_MODES
from minedraft.config.settings import CONFIG_KEY

SPEC = Speculation("/models/draft", 4)


@pytest.mark.parametrize("mode", BENCH_MODES)
def test_each_mode_builds_its_engine(mode):
    kw = engine_kwargs(mode, "/models/target", SPEC if mode != "no_sd" else None, max_model_len=256)
    assert kw["model"] == "/models/target" and kw["max_model_len"] == 256
    assert kw["dtype"] == CPU_DEFAULTS["dtype"]
    assert ("speculative_config" in kw) == (mode != "no_sd")
    if mode != "no_sd":
        assert kw["speculative_config"] == {"method": "draft_model", "num_speculative_tokens": 4,
                                            "model": "/models/draft"}
    minedraft = mode.startswith("minedraft")
    assert (kw.get("scheduler_cls") == "minedraft") == minedraft
    if minedraft:
        assert kw["additional_config"][CONFIG_KEY]["mode"] == mode.removeprefix("minedraft_")


def test_bad_modes_are_refused():
    with pytest.raises(ValueError, match="unknown mode"):
        engine_kwargs("minedraft", "/t", SPEC)
    with pytest.raises(ValueError, match="needs a Speculation"):
        engine_kwargs("stock_sd", "/t")


def test_serve_flags_parse_back_to_the_same_engine_arguments():
    from vllm.engine.arg_utils import EngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    kw = engine_kwargs("minedraft_auto", "/models/target", Speculation("/models/draft", 3, extra={"a": 1}),
                       minedraft={"lane": "serial"}, max_model_len=1024, enable_prefix_caching=True)
    parser = EngineArgs.add_cli_args(FlexibleArgumentParser())
    parser.add_argument("model_tag")
    args = parser.parse_args(serve_flags(kw))
    assert args.model_tag == "/models/target"
    for name, value in kw.items():
        if name != "model":
            assert getattr(args, name) == value, name
