"""benchmarks/throttled_clients.py: the load's requests, its clients' in-flight bound, and its table."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from benchmarks import throttled_clients


def test_requests_are_code_greedy_and_prose_sampled_in_turn(monkeypatch):
    monkeypatch.setattr(throttled_clients.real_pair, "tokenized", lambda target, kind, n: [[kind, i] for i in range(n)])
    load = throttled_clients.requests(Path("target"), 4, 64)
    assert [(p, t) for p, t, _ in load] == [(["code", 0], 0.0), (["prose", 1], 1.0), (["code", 2], 0.0),
                                           (["prose", 3], 1.0)]


def test_lengths_spread_about_the_mean_so_that_requests_begun_together_end_apart():
    lengths = throttled_clients.lengths(32, 64)
    assert min(lengths) >= 32 and max(lengths) <= 96 and len(set(lengths[:8])) == 8
    assert abs(sum(lengths) / len(lengths) - 64) <= 4
    assert lengths[:4] == [32, 49, 66, 83]  # the committed run's
    for mean in (16, 67, 135):  # 17 divides each mean + 1: the step moves on to 18 or 19
        spread = throttled_clients.lengths(mean + 1, mean)
        assert sorted(spread) == list(range(mean // 2, mean // 2 + mean + 1))


class CountingEngine:
    """Finishes the oldest request in flight each step, every request with ``tokens`` tokens."""

    def __init__(self, tokens: int) -> None:
        self.tokens, self.in_flight, self.added, self.most = tokens, [], [], 0

    def add_request(self, request_id, prompt, params) -> None:
        self.added.append((request_id, params.temperature, params.max_tokens))
        self.in_flight.append(request_id)
        self.most = max(self.most, len(self.in_flight))

    def step(self):
        done = self.in_flight.pop(0)
        return [SimpleNamespace(request_id=done, finished=True, outputs=[SimpleNamespace(token_ids=[0] * self.tokens)])]


def test_clients_keep_at_most_their_number_in_flight_and_add_one_as_one_finishes():
    engine = CountingEngine(tokens=5)
    load = [([1], 0.0, 5), ([2], 1.0, 5), ([3], 0.0, 5), ([4], 1.0, 5), ([5], 0.0, 5)]
    rate = throttled_clients.run_clients(SimpleNamespace(llm_engine=engine), load, clients=2, tag="t")
    assert engine.most == 2 and not engine.in_flight
    assert [a[0] for a in engine.added] == [f"t-{i}" for i in range(5)]
    assert [a[1] for a in engine.added] == [0.0, 1.0, 0.0, 1.0, 0.0] and {a[2] for a in engine.added} == {5}
    assert rate > 0


def test_the_table_gives_each_round_and_the_reading_s_ratio():
    result = {"meta": {"models": "m", "device_label": "cpu", "date": "d", "requests": 32, "output_tokens": 64,
                       "clients": 8, "rounds": 2},
              "tok_s": {"default": [40.0, 44.0], "default_read_open": [36.0, 44.0], "target": [30.0, 31.0]},
              "median_tok_s": {"default": 42.0, "default_read_open": 40.0, "target": 30.5},
              "read_open_over_default": [0.9, 1.0], "median_read_open_over_default": 0.95}
    table = throttled_clients.markdown(result)
    assert "| default_read_open | 36.0, 44.0 | 40.0 |" in table
    assert "0.90x, 1.00x (median 0.95x)" in table
