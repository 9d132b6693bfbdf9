"""MineDraft's settings (minedraft/config/settings.py): parsed once in the front end, carried in vLLM's config."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from scheduler_harness import engine_args, make_scheduler

from minedraft.config.errors import MineDraftConfigError
from minedraft.config.idle_drafter import skips_rows
from minedraft.config.settings import CONFIG_KEY, MineDraftSettings
from minedraft.scheduling.scheduler import MineDraftScheduler


def test_defaults_then_environment_then_additional_config():
    assert MineDraftSettings.parse({}, environ={}) == MineDraftSettings()
    env = {"MINEDRAFT_MODE": "stock", "MINEDRAFT_LANE": "serial", "MINEDRAFT_LANE_THREADS": "0"}
    assert MineDraftSettings.parse({}, environ=env) == MineDraftSettings("stock", "serial", None)
    given = {CONFIG_KEY: {"mode": "parallel", "lane_threads": 2}}
    assert MineDraftSettings.parse(given, environ=env) == MineDraftSettings("parallel", "serial", 2)


@pytest.mark.parametrize(("additional", "env", "message"), [
    ({}, {"MINEDRAFT_MODE": "fast"}, "MINEDRAFT_MODE='fast' is not one of auto, parallel, stock."),
    ({}, {"MINEDRAFT_LANE": "gpu"}, "MINEDRAFT_LANE='gpu' is not one of overlap, serial."),
    ({}, {"MINEDRAFT_LANE_THREADS": "two"}, "MINEDRAFT_LANE_THREADS='two' is not an integer."),
    ({CONFIG_KEY: {"mode": "fast"}}, {}, "additional_config['minedraft']['mode']='fast' is not one of"),
    ({CONFIG_KEY: {"lane_threads": -1}}, {}, "lane_threads must be a positive integer"),
    ({CONFIG_KEY: {"modes": "auto"}}, {}, "unknown setting(s) 'modes'"),
    ({CONFIG_KEY: "parallel"}, {}, "must be an object"),
    ({}, {"MINEDRAFT_CAPTURE_MAX_MIB": "lots"}, "MINEDRAFT_CAPTURE_MAX_MIB='lots' is not a number."),
    ({CONFIG_KEY: {"capture_max_mib": -1}}, {}, "capture_max_mib must be a number of MiB >= 0"),
    ({CONFIG_KEY: {"catch_up_max_mib": "lots"}}, {}, "catch_up_max_mib must be a number of MiB >= 0"),
    ({}, {"MINEDRAFT_CATCH_UP_MAX_MIB": "x"}, "MINEDRAFT_CATCH_UP_MAX_MIB='x' is not a number"),
])
def test_bad_settings_are_one_line_naming_their_source(additional, env, message):
    with pytest.raises(MineDraftConfigError) as err:
        MineDraftSettings.parse(additional, environ=env)
    text = str(err.value)
    assert message in text and text.startswith("minedraft: ") and "\n" not in text


def test_carried_settings_are_not_parsed_again(monkeypatch):
    carried = MineDraftSettings(mode="stock", lane="serial").to_config()
    monkeypatch.setenv("MINEDRAFT_MODE", "fast")  # would be refused if read again
    config = type("Config", (), {"additional_config": {CONFIG_KEY: carried}})()
    assert MineDraftSettings.of(config) == MineDraftSettings(mode="stock", lane="serial")


@pytest.mark.usefixtures("plugins_loaded")
def test_front_end_puts_settings_into_the_config_the_engine_reads(model_dir, monkeypatch):
    monkeypatch.setenv("MINEDRAFT_MODE", "stock")
    args = engine_args(model_dir, scheduler_cls="minedraft", additional_config={CONFIG_KEY: {"lane": "serial"}})
    vllm_config = args.create_engine_config()
    assert vllm_config.additional_config[CONFIG_KEY]["mode"] == "stock"
    assert vllm_config.additional_config[CONFIG_KEY]["lane"] == "serial"
    # The engine core's process reads the config, not its environment.
    monkeypatch.setenv("MINEDRAFT_MODE", "parallel")
    assert MineDraftSettings.of(vllm_config) == MineDraftSettings(mode="stock", lane="serial")


@pytest.mark.usefixtures("plugins_loaded")
def test_a_bad_setting_is_refused_before_the_model_loads(model_dir, monkeypatch):
    monkeypatch.setenv("MINEDRAFT_MODE", "fastest")
    args = engine_args(model_dir, scheduler_cls="minedraft")
    with pytest.raises(MineDraftConfigError, match="MINEDRAFT_MODE='fastest'"):
        args.create_engine_config()


def test_scheduler_follows_its_config(model_dir, monkeypatch):
    monkeypatch.setenv("MINEDRAFT_MODE", "stock")
    sched = make_scheduler(model_dir, MineDraftScheduler)
    assert sched.settings.mode == "stock" and sched.speculation.overlap.mode == "stock"
    assert not sched.speculation.overlap.dedicated  # the n-gram drafter runs on the target's cores


def test_catch_up_max_mib_from_env_and_config():
    assert MineDraftSettings.parse({}, environ={}).catch_up_max_mib == 256.0
    assert MineDraftSettings.parse({}, environ={"MINEDRAFT_CATCH_UP_MAX_MIB": "0.5"}).catch_up_max_mib == 0.5
    assert MineDraftSettings.parse({CONFIG_KEY: {"catch_up_max_mib": 0}}, environ={}).catch_up_max_mib == 0


def test_capture_max_mib_from_env_and_config():
    assert MineDraftSettings.parse({}, environ={}).capture_max_mib == 64.0
    assert MineDraftSettings.parse({}, environ={"MINEDRAFT_CAPTURE_MAX_MIB": "0.25"}).capture_max_mib == 0.25
    assert MineDraftSettings.parse({CONFIG_KEY: {"capture_max_mib": 0}},
                                   environ={"MINEDRAFT_CAPTURE_MAX_MIB": "8"}).capture_max_mib == 0


def test_drafter_settings_from_environment_and_config():
    env = {"MINEDRAFT_DRAFTER": "process", "MINEDRAFT_DRAFTER_DEVICE": "cpu:1", "MINEDRAFT_DRAFTER_TIMEOUT_S": "0.5"}
    settings = MineDraftSettings.parse({}, environ=env)
    assert (settings.drafter, settings.drafter_device, settings.drafter_timeout_s) == ("process", "cpu:1", 0.5)
    given = {CONFIG_KEY: {"drafter": "process", "drafter_device": "cuda:1"}}
    assert MineDraftSettings.parse(given, environ={}).drafter_device == "cuda:1"
    assert MineDraftSettings.parse({}, environ={}).drafter == "in-process"


@pytest.mark.parametrize(("env", "message"), [
    ({"MINEDRAFT_DRAFTER": "process"}, "MINEDRAFT_DRAFTER=process needs MINEDRAFT_DRAFTER_DEVICE"),
    ({"MINEDRAFT_DRAFTER": "remote"}, "MINEDRAFT_DRAFTER='remote' is not one of in-process, process."),
    ({"MINEDRAFT_DRAFTER_DEVICE": "gpu1"}, "MINEDRAFT_DRAFTER_DEVICE='gpu1': expected cpu:<cores>"),
    ({"MINEDRAFT_DRAFTER_TIMEOUT_S": "soon"}, "MINEDRAFT_DRAFTER_TIMEOUT_S='soon' is not a number"),
    ({"MINEDRAFT_DRAFTER_TIMEOUT_S": "0"}, "drafter_timeout_s must be a positive number"),
])
def test_bad_drafter_settings_are_one_line(env, message):
    with pytest.raises(MineDraftConfigError) as err:
        MineDraftSettings.parse({}, environ=env)
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(("given", "has_table", "control"), [
    ({}, False, "auto"),  # the default mode chooses the depth
    ({}, True, "fixed"),  # ... unless the user's depth table does
    ({"mode": "parallel"}, False, "fixed"),
    ({"mode": "stock"}, False, "fixed"),
    ({"speculation_depth": "fixed"}, False, "fixed"),
    ({"mode": "parallel", "speculation_depth": "auto"}, False, "auto"),
])
def test_who_chooses_the_speculation_depth(given, has_table, control):
    assert MineDraftSettings.parse({CONFIG_KEY: given}, environ={}).depth_control(has_table) == control


@pytest.mark.parametrize(("given", "method", "skips"), [
    ({}, "draft_model", True),  # in process, it catches up
    ({"idle_drafter": "run"}, "draft_model", False),  # it drafts every call: it would miss a skipped row's tokens
    # The process drafter: its engine's sessions take the missed tokens with the next job.
    ({"drafter": "process", "drafter_device": "cpu:1"}, "draft_model", True),
    ({}, "ngram", False),  # no model: nothing to skip, nothing to catch up
])
def test_which_drafters_may_leave_rows_of_a_call_undrafted(given, method, skips):
    settings = MineDraftSettings.parse({CONFIG_KEY: given}, environ={})
    assert skips_rows(SimpleNamespace(method=method), settings, uses_mrope=False) is skips
    assert skips_rows(None, settings, uses_mrope=False) is False


def test_idle_drafter_setting():
    assert MineDraftSettings.parse({}, environ={}).idle_drafter == "skip"
    assert MineDraftSettings.parse({}, environ={"MINEDRAFT_IDLE_DRAFTER": "run"}).idle_drafter == "run"
    with pytest.raises(MineDraftConfigError, match="is not one of skip, run"):
        MineDraftSettings.parse({CONFIG_KEY: {"idle_drafter": "later"}}, environ={})
