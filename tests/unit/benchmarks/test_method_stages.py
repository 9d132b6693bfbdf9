"""benchmarks/method_stages.py (no engine): the engines it builds and how it pairs rounds."""

from __future__ import annotations

from benchmarks import method_stages


def test_stages_are_per_counted_step_and_runs_pair_with_stock_sd_by_round():
    # Round 2 ran twice as slow for every engine and MineDraft took one more step in round 1.
    per_round = {
        "stock_sd": [{"run": 1.0, "steps": 10, "schedule": 0.01}, {"run": 2.0, "steps": 10, "schedule": 0.02}],
        "minedraft_auto": [{"run": 1.05, "steps": 11, "schedule": 0.022},
                           {"run": 2.1, "steps": 10, "schedule": 0.04}],
    }
    rows = {r["engine"]: r for r in method_stages.summarize(per_round, "suffix", requests=1)}
    mine = rows["minedraft_auto"]
    assert mine["run_vs_stock_sd_rounds"] == [1.05, 1.05] and mine["run_vs_stock_sd"] == 1.05
    assert mine["steps_per_run"] == 10.5
    assert mine["ms_per_step"]["schedule"] == 3.0  # median of 2 ms and 4 ms per step
    assert rows["stock_sd"]["ms_per_step"] == {"run": 150.0, "schedule": 1.5}
    assert "| suffix | 1 | minedraft_auto | 1.050x | 10.5 |" in method_stages.markdown(list(rows.values()))


def test_the_three_engines_share_the_sweep_s_speculative_config_and_only_one_is_minedraft():
    args = method_stages.parse_args(["--method", "suffix", "--k", "2"])
    target, specs, env = method_stages.engine_specs(args)
    assert set(specs) == set(method_stages.ENGINES) and env["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
    for kwargs in specs.values():
        assert kwargs["model"] == target and not kwargs["enable_prefix_caching"]
        assert kwargs["speculative_config"] == {"method": "suffix", "num_speculative_tokens": 2}
    assert [name for name, kwargs in specs.items() if kwargs.get("scheduler_cls") == "minedraft"] == ["minedraft_auto"]
    assert specs["stock_sd"] == specs["stock_sd_twin"]
    assert {"ngram", "pard", "draft_small"} <= set(method_stages.METHODS)


def test_kernel_overrides_run_without_llvmlite_in_sight_and_are_restored(monkeypatch):
    import sys
    import types

    from vllm.platforms import current_platform

    # A stand-in: the real llvmlite, once imported, breaks the overrides of every later test's engine.
    monkeypatch.setitem(sys.modules, "llvmlite.binding", types.ModuleType("llvmlite.binding"))

    seen = []
    monkeypatch.setattr(type(current_platform), "register_triton_kernel_overrides",
                        classmethod(lambda cls: seen.append(any(n.startswith("llvmlite") for n in sys.modules))))
    wrapped = type(current_platform).__dict__["register_triton_kernel_overrides"]
    with method_stages.llvmlite_out_of_kernel_scan():
        current_platform.register_triton_kernel_overrides()
        assert "llvmlite.binding" in sys.modules  # hidden for the registration only
    current_platform.register_triton_kernel_overrides()
    assert seen == [False, True]
    assert type(current_platform).__dict__["register_triton_kernel_overrides"] is wrapped
