"""The drafter's process: vLLM's engine of the draft model, answering draft jobs.

Started by :mod:`minedraft.process_drafter.target.client` as ``python -m
minedraft.process_drafter.draft_engine.engine SPEC_JSON``. It ends with the process that started
it (minedraft/lifetime.py, and end of input), binds itself to its cores,
builds ``LLM`` (engine core in this process; prefix caching off: the draft
sessions keep each request's KV), warms up and
says ``{"ready": ...}``. Then, per JSON line on stdin::

    {"job": 7, "release": [ids], "updates": [[id, start, [tokens]]], "draft": [ids], "inline": true}
    {"job": 8, "release": [ids], "updates": [[id, 0, [prompt]]], "ahead": [ids], "k": 3}

it applies the histories (minedraft/process_drafter/history.py) and drafts k tokens
greedily for each id of ``draft`` in that request's draft session
(minedraft/process_drafter/draft_engine/sessions.py: its KV stays from job to job), answering one
line::

    {"job": 7, "drafts": [[...], ...], "resync": [ids], "draft_s": 0.012,
     "ahead_hits": 1, "ahead_misses": 0, "ahead_late": 0}

Between jobs it drafts ahead (draft_ahead.py): past the drafts it just sent,
as if the target accepts them all, so that the next job's drafts may be made
already; a job of several requests may then be answered with those alone.
An ``ahead`` job (prompts sent as the target starts computing them, new
tokens at a step of depth 0; no one waits for its reply) drafts those
requests ahead from their histories.

It speaks the child protocol (minedraft/process_drafter/protocol.py): replies
go to a private copy of stdout; vLLM's logs (fd 1 and 2) go to the log file
the client gives as stderr. Tests start a module of their own that calls
:func:`main` with a subclass of :class:`DraftEngine` (faults injected by
wrapping ``handle``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from minedraft.config import environment
from minedraft.config.methods import method_of_engine
from minedraft.lifetime import end_with_parent
from minedraft.process_drafter.history import Histories
from minedraft.process_drafter.protocol import Handler, serve
from minedraft.process_drafter.draft_engine.draft_ahead import DraftAhead
from minedraft.process_drafter.draft_engine.sessions import DraftSessions


class DraftEngine:
    """Histories plus the draft model's engine and its sessions: one job at a time, and drafting
    ahead between jobs (draft_ahead.py)."""

    def __init__(self, llm, k: int, ahead: str = "off") -> None:
        self.llm, self.k = llm, k
        self.histories = Histories()
        self.self_check = environment.drafter_self_check()  # tests: also draft from scratch and compare
        self.sessions = DraftSessions(llm, k, spare_slots=1 if self.self_check else 0)  # the check's requests
        self.max_model_len = llm.llm_engine.model_config.max_model_len
        self.ahead = DraftAhead(self.sessions.draft, ahead, self.max_model_len)

    def warm_up(self) -> None:
        """The first call's allocations, before the target waits on this engine."""
        self.sessions.draft({"warmup": [1, 2, 3]})
        self.sessions.release(["warmup"])

    def handle(self, job: dict) -> dict:
        started = time.perf_counter()
        if "ahead" not in job:
            self.ahead.job_arrived(job.get("inline", False))
        released = job.get("release", ())
        resync = self.histories.apply(released, job.get("updates", ()))
        self.sessions.release([*released, *resync])
        self.ahead.forget([*released, *resync])
        lost = set(resync)
        if "ahead" in job:  # nobody waits for this reply: the requests are drafted ahead when idle
            self.ahead.start([r for r in job["ahead"] if r not in lost and r in self.histories.tokens],
                             job.get("k") or self.k)  # a depth-0 step's: as deep as the engine's k
            return {"job": job["job"], "drafts": [], "resync": resync, "draft_s": 0.0}
        ids = [r for r in job["draft"] if r not in lost and 0 < len(self.histories.tokens.get(r, ()))
               and len(self.histories.tokens[r]) + self.k <= self.max_model_len]
        depth = job.get("k", self.k)
        at_once = self.ahead.answers_at_once(len(ids), inline=job.get("inline", False))
        drafted = self._draft({r: self.histories.tokens[r] for r in ids}, depth, at_once)
        self.ahead.answered(drafted, depth)
        reply = {"job": job["job"], "drafts": [drafted.get(r, []) for r in job["draft"]], "resync": resync,
                 "draft_s": round(time.perf_counter() - started, 6), **self.ahead.take_counts()}
        if self.self_check:
            reply["self_check_mismatches"] = self._mismatches(drafted, depth)
        return reply

    def idle(self, waiting: Callable[[], bool]) -> None:
        """After each reply (protocol.serve): draft ahead while the target verifies."""
        self.ahead.run(self.histories.tokens, waiting)

    def _draft(self, histories: dict[str, list[int]], depth: int, at_once: bool) -> dict[str, list[int]]:
        """``depth`` drafts per request: those made ahead, the rest drafted now (one engine call per
        number of drafts still missing); only those made ahead where the job is answered ``at_once``."""
        ready = self.ahead.take(histories, depth)
        if at_once:
            return {r: ready.get(r, []) for r in histories}
        drafted = {r: drafts for r, drafts in ready.items() if len(drafts) == depth}
        missing: dict[int, dict[str, list[int]]] = {}
        for r, history in histories.items():
            made = ready.get(r, [])
            if len(made) < depth:
                missing.setdefault(depth - len(made), {})[r] = [*history, *made]
        for need, group in missing.items():
            started = time.perf_counter()
            for r, drafts in self.sessions.draft(group, need).items():
                drafted[r] = [*ready.get(r, []), *drafts]
            self.ahead.timed(time.perf_counter() - started, need)
        return drafted

    def _mismatches(self, drafted: dict[str, list[int]], depth: int) -> int:
        """How many session drafts differ from drafting the same history as a new request (a job answered
        at once: from its first drafts as many)."""
        from vllm import SamplingParams

        ids = [r for r, drafts in drafted.items() if drafts]
        params = SamplingParams(temperature=0, max_tokens=depth, ignore_eos=True, detokenize=False)
        outputs = self.llm.generate([{"prompt_token_ids": self.histories.tokens[r]} for r in ids], params,
                                    use_tqdm=False) if ids else []
        return sum(drafted[r] != list(o.outputs[0].token_ids)[:len(drafted[r])] for r, o in zip(ids, outputs))


def start(spec: dict[str, Any], engine_cls: type[DraftEngine] = DraftEngine) -> tuple[Handler, dict[str, Any]]:
    """The engine of ``spec``, bound to its cores and warmed up: its handler and what the ready line adds."""
    end_with_parent(spec["parent_pid"], "the draft engine")
    if spec.get("cpu_affinity"):
        os.sched_setaffinity(0, spec["cpu_affinity"])
    if method_of_engine(spec["engine"]).sends_context:  # dflash_engine.py
        from minedraft.process_drafter.draft_engine.dflash_engine import start_dflash

        dflash = start_dflash(spec)
        return dflash.handle, {"max_model_len": dflash.max_model_len, "context_layers": dflash.context_layers}
    from vllm import LLM

    engine = engine_cls(LLM(**spec["engine"]), spec["k"], spec.get("draft_ahead", "off"))
    engine.warm_up()
    return engine.handle, {"max_model_len": engine.max_model_len}, engine.idle


def main(engine_cls: type[DraftEngine] = DraftEngine) -> None:
    serve(partial(start, engine_cls=engine_cls))


if __name__ == "__main__":
    main()
