"""benchmarks/steady_interleaved.py (no engine): the run order, the medians and the ratio it reports."""

from __future__ import annotations

import json

import pytest

from benchmarks import steady_interleaved as steady


def test_settings_run_in_mirrored_order():
    assert steady.mirrored(["a", "b", "c"], 3) == ["a", "b", "c", "c", "b", "a", "a", "b", "c"]


@pytest.mark.parametrize(("setting", "parsed"), [("minedraft_auto", ("minedraft_auto", 3)),
                                                  ("stock_sd:1", ("stock_sd", 1)), ("no_sd", ("no_sd", 3))])
def test_a_setting_names_a_mode_and_its_k(setting, parsed):
    assert steady.parse_setting(setting) == parsed


@pytest.mark.parametrize("setting", ["stock_sd:x", "auto", "no_sd:2", "minedraft_auto:2"])
def test_an_unknown_setting_is_one_clear_error(setting):
    with pytest.raises(ValueError, match="unknown setting"):
        steady.parse_setting(setting)


def _runs():
    rates = {"minedraft_auto": [(10, 20), (12, 18), (11, 30)], "stock_sd:3": [(11, 15), (13, 17)],
             "no_sd": [(8, 19), (9, 21)]}
    return [{"setting": s, "tok_s": {"1": a, "8": b}} for s, pairs in rates.items() for a, b in pairs]


def test_each_load_reads_medians_and_the_default_over_the_best_static_setting():
    out = steady.summary(_runs(), [1, 8])
    assert out["1"] == {"tok_s": {"minedraft_auto": 11, "stock_sd:3": 12, "no_sd": 8.5},
                        "best_static": "stock_sd:3", "default_over_best_static": round(11 / 12, 3)}
    assert out["8"]["best_static"] == "no_sd" and out["8"]["default_over_best_static"] == 1.0


def test_the_plot_is_drawn_from_the_json(tmp_path):
    result = {"meta": {"loads": [1, 8], "settings": ["minedraft_auto", "stock_sd:3", "no_sd"], "date": "d"},
              "summary": steady.summary(_runs(), [1, 8])}
    assert steady.plot(result, tmp_path / "s.png").stat().st_size > 0


def test_the_default_must_be_among_the_settings():
    with pytest.raises(SystemExit):
        steady.parse_args(["--settings", "stock_sd:3,no_sd"])


def test_a_run_keeps_its_rates_and_for_the_default_every_step(tmp_path, monkeypatch):
    """The trace ``depth_trace.py`` wrote (the subprocess is its engine, not run here) read back: phase
    rates for every setting, the default's steps too, so a reading can explain itself later."""
    trace = {"meta": {"date": "d", "seconds": 1.0},
             "phases": [{"requests": 4, "tok_s": 2.5, "steps": [{"depth": 3, "seconds": 0.5}, {"depth": 0}]}]}
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(trace))
    commands = []
    monkeypatch.setattr(steady.subprocess, "run", lambda command, check: commands.append(command))
    args = steady.parse_args(["--loads", "4"])
    default, meta = steady.run_one("minedraft_auto", args, path)
    assert default["tok_s"] == {"4": 2.5} and default["depths"] == {"4": "30"}
    assert default["steps"]["4"] == trace["phases"][0]["steps"] and meta == trace["meta"]
    assert "steps" not in steady.run_one("stock_sd:1", args, path)[0]
    assert commands[1][commands[1].index("--k") + 1] == "1"
