"""benchmarks/depth_floor.py (no engine): the engines it builds and how it pairs their runs."""

from __future__ import annotations

from benchmarks import depth_floor, sweep


def test_every_speculative_engine_is_held_at_depth_0_by_vllm_s_own_table():
    setup = sweep.Setup(device="cpu", device_label="cpu", pairs={"d": ("/target", "/draft")},
                        target_names={"d": "t"}, engine={"seed": 0}, env={}, interleave=True)
    specs = depth_floor.engine_specs(setup, "d", 3, warmup=[[1]])
    assert "speculative_config" not in specs["no_sd"][0]["engine"]
    for name in ("vllm_depth0", "minedraft_depth0"):
        spec = specs[name][0]["engine"]["speculative_config"]
        assert spec["num_speculative_tokens"] == 3
        assert spec["num_speculative_tokens_per_batch_size"] == [[1, sweep.MAX_REQUESTS, 0]]
    assert specs["minedraft_depth0"][0]["engine"]["scheduler_cls"] == "minedraft"
    assert "scheduler_cls" not in specs["vllm_depth0"][0]["engine"]


def test_ratios_pair_runs_of_the_same_round():
    def sample(engine, r, tok_s):
        return {"engine": engine, "round": r, "requests": 8, "tok_s": tok_s}

    # Round 1 ran slower for everyone: paired, MineDraft is at 0.9x in both rounds.
    samples = [sample("no_sd", 0, 1000.0), sample("minedraft_depth0", 0, 900.0), sample("vllm_depth0", 0, 500.0),
               sample("no_sd", 1, 600.0), sample("minedraft_depth0", 1, 540.0), sample("vllm_depth0", 1, 300.0)]
    rows = {r["engine"]: r for r in depth_floor.summarize(samples)}
    assert rows["minedraft_depth0"]["vs_no_sd"] == 0.9 and rows["vllm_depth0"]["vs_no_sd"] == 0.5
    assert rows["minedraft_depth0"]["tok_s"] == 720.0 and rows["no_sd"]["vs_no_sd"] == 1.0
    table = depth_floor.markdown(list(rows.values()), {"date": "2026-11-25T00:00", "device_label": "cpu",
                                                      "draft": "d", "k": 3, "output_tokens": 256, "rounds": 2})
    assert "| 8 | 800 | 0.50x | 0.90x |" in table


def test_engines_started_together_all_launch_before_any_is_waited_for(monkeypatch, tmp_path):
    events = []

    class FakeWorker:
        def __init__(self, name, spec, env, log_dir):
            self.name, self.started = name, None
            events.append(("launch", name))

        def wait_ready(self):
            self.started = {"worker": self.name}
            events.append(("ready", self.name))
            return self.started

    monkeypatch.setattr(sweep, "Worker", FakeWorker)
    pool = sweep.Pool(max_alive=3, log_dir=tmp_path)
    pool.start_together(((name,), {}, {}) for name in ("a", "b", "c"))
    assert events == [("launch", "a"), ("launch", "b"), ("launch", "c"),
                      ("ready", "a"), ("ready", "b"), ("ready", "c")]
    assert len(pool.starts) == 3


def test_the_twin_is_the_target_alone_again_and_gets_its_own_column():
    setup = sweep.Setup(device="cpu", device_label="cpu", pairs={"d": ("/target", "/draft")},
                        target_names={"d": "t"}, engine={"seed": 0}, env={}, interleave=True)
    assert "no_sd_twin" not in depth_floor.engine_specs(setup, "d", 3, warmup=[[1]])
    specs = depth_floor.engine_specs(setup, "d", 3, warmup=[[1]], twin=True)
    assert specs["no_sd_twin"][0]["engine"] == specs["no_sd"][0]["engine"]

    def sample(engine, r, tok_s):
        return {"engine": engine, "round": r, "requests": 8, "tok_s": tok_s}

    samples = [sample("no_sd", 0, 1000.0), sample("no_sd_twin", 0, 1100.0), sample("minedraft_depth0", 0, 900.0),
               sample("vllm_depth0", 0, 500.0), sample("no_sd", 1, 1000.0), sample("no_sd_twin", 1, 800.0),
               sample("minedraft_depth0", 1, 900.0), sample("vllm_depth0", 1, 500.0)]
    rows = depth_floor.summarize(samples)
    table = depth_floor.markdown(rows, {"date": "2026-11-26T00:00", "device_label": "cpu", "draft": "d", "k": 3,
                                        "output_tokens": 256, "rounds": 2})
    assert "| 8 | 1000 | 0.50x | 0.90x | 0.95x (0.80x-1.10x) |" in table


def test_an_engine_left_out_is_not_built_and_reads_as_a_dash():
    """The real pair leaves stock vLLM at depth 0 out (four of its engines ran out of memory)."""
    setup = sweep.Setup(device="cpu", device_label="cpu", pairs={"d": ("/target", "/draft")},
                        target_names={"d": "t"}, engine={"seed": 0}, env={}, interleave=True)
    specs = depth_floor.engine_specs(setup, "d", 3, warmup=[[1]], leave_out=("vllm_depth0",))
    assert set(specs) == {"no_sd", "minedraft_depth0"}
    samples = [{"engine": e, "round": 0, "requests": 32, "tok_s": t} for e, t in (("no_sd", 80.0),
                                                                               ("minedraft_depth0", 78.0))]
    table = depth_floor.markdown(depth_floor.summarize(samples), {"date": "2026-11-29T00:00", "device_label": "cpu",
                                                                  "draft": "real", "k": 3, "output_tokens": 64,
                                                                  "rounds": 1})
    assert "| 32 | 80 | - | 0.97x |" in table
