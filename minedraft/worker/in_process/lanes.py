"""Execution lanes: where the in-process drafter's deferred job runs while the target verifies.

One interface, three implementations:

* :class:`ThreadLane` (CPU): a dedicated Python thread. Torch releases the GIL
  inside its kernels, so the drafter's forward runs beside the target's. The
  lane thread uses ``lane_threads`` intra-op threads. The main thread keeps
  its thread count: the target's arithmetic (and so its greedy output) must
  be bit-identical to stock vLLM's, and a GEMM split over fewer threads sums
  in another order (measured: one token in 768 flipped on a near-tie).
* :class:`CudaStreamLane` (GPU): the job is enqueued on a second CUDA stream
  after an event from the main stream. Its ordering, exceptions and overlap
  were checked on an H200 and an H100 with torch alone (``make test-gpu``,
  2026-11-26), not yet inside vLLM.
* :class:`InlineLane`: runs the job at submission (debugging, measurements).

``submit`` never blocks on the job; ``wait`` returns its result or re-raises
its exception in the caller's thread, so a failing draft surfaces as an
engine error instead of a hang.
"""

from __future__ import annotations

import queue
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

import torch

Job = Callable[[], Any]


class Lane(ABC):
    """``submit`` one job at a time; ``wait`` joins it."""

    _pending = False

    @abstractmethod
    def submit(self, job: Job) -> None: ...

    @abstractmethod
    def _join(self) -> tuple[Any, BaseException | None]:
        """Block until the pending job is done: its result or its exception."""

    def wait(self) -> Any:
        """Result of the last submitted job (``None`` if none is pending)."""
        if not self._pending:
            return None
        try:
            result, error = self._join()
        finally:
            self._pending = False
        if error is not None:
            raise error
        return result

    @property
    def busy(self) -> bool:
        return self._pending

    def shutdown(self) -> None:  # noqa: B027 - optional hook
        pass


def _run_job(job: Job) -> tuple[Any, BaseException | None]:
    try:
        with torch.inference_mode():
            return job(), None
    except BaseException as e:  # re-raised by wait()
        return None, e


class InlineLane(Lane):
    def __init__(self) -> None:
        self._outcome: tuple[Any, BaseException | None] = (None, None)

    def submit(self, job: Job) -> None:
        self._pending = True
        self._outcome = _run_job(job)

    def _join(self) -> tuple[Any, BaseException | None]:
        outcome, self._outcome = self._outcome, (None, None)
        return outcome


class ThreadLane(Lane):
    """A persistent worker thread with its own intra-op thread count."""

    def __init__(self, lane_threads: int | None, name: str = "minedraft-draft-lane"):
        self.lane_threads = lane_threads
        self._jobs: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._done: queue.SimpleQueue[tuple[Any, BaseException | None]] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        # OpenMP keeps the thread count per thread: this only affects the lane.
        # (torch._C.set_num_threads: the CPU worker replaces torch.set_num_threads.)
        if self.lane_threads is not None:
            torch._C.set_num_threads(self.lane_threads)
        while (job := self._jobs.get()) is not None:
            self._done.put(_run_job(job))

    def submit(self, job: Job) -> None:
        if self._pending:
            raise RuntimeError("draft lane already has a job in flight")
        if not self._thread.is_alive():
            raise RuntimeError("draft lane thread is not running")
        self._pending = True
        self._jobs.put(job)

    def _join(self) -> tuple[Any, BaseException | None]:
        return self._done.get()

    def shutdown(self) -> None:
        if self._thread.is_alive():
            self._jobs.put(None)
            self._thread.join(timeout=5)


class CudaStreamLane(Lane):
    """Runs the job on a side CUDA stream ``S`` beside the main stream ``M`` (the target's).

    Ordering and memory lifetime (``../shared/docs/gpu-path.md`` §4):

    * ``captured()`` records ``ready`` on ``M`` right after a job's inputs were
      copied; ``submit`` makes ``S`` wait for that event, not for all of ``M``:
      the target's forward, enqueued before the submission, must not serialise
      the lane;
    * the job, whose copied inputs were allocated on ``M``, is kept until the
      join, so the caching allocator cannot give their memory to ``M`` while
      ``S`` still reads it (the join orders ``M`` after ``S`` first);
    * the drafts are copied on ``S`` into a lane-owned pinned buffer and
      ``done`` is recorded; the join waits for ``done`` on the host, then makes
      ``M`` wait for it. Nothing in the job synchronises the host.

    ``cuda`` is ``torch.cuda`` (tests pass a recording fake).
    """

    PINNED_ELEMENTS = 256 * 16  # draft tokens the first pinned buffer holds (requests x depth)

    def __init__(self, device: torch.device, cuda: Any = None):
        self.cuda = cuda if cuda is not None else torch.cuda
        self.stream = self.cuda.Stream(device=device)
        self._done = self.cuda.Event(blocking=True)
        self._ready: Any = None
        self._job: Any = None
        self._pinned: torch.Tensor | None = None
        self._outcome: tuple[Any, BaseException | None] = (None, None)
        if device.type == "cuda":
            self._warm_up(device)

    def _warm_up(self, device: torch.device) -> None:
        """Pay the side stream's first allocation, the pinned buffer and the first copy to it now.

        Measured on an H200 (benchmarks/results/nvidia-h200/lane_first_job.txt): on a cold lane the
        first submit held the host until the side stream's job had finished (45.6 ms, no overlap).
        With this warm-up, on an H100 (benchmarks/results/nvidia-h100-80gb-hbm3/gpu_checks.txt), the
        first job's submit took 0.7 ms and the job overlapped the main stream's, like every later one.
        """
        with self.cuda.stream(self.stream):
            probe = torch.zeros((1, 1), dtype=torch.long, device=device)
            self._to_pinned((None, probe))
            self._done.record(self.stream)
        self._done.synchronize()

    def captured(self) -> None:
        """On ``M``, right after a job's inputs were copied: what ``S`` will wait for."""
        self._ready = self.cuda.Event()
        self._ready.record(self.cuda.current_stream())

    def submit(self, job: Job) -> None:
        if self._pending:
            raise RuntimeError("draft lane already has a job in flight")
        ready, self._ready = self._ready, None
        if ready is None:  # not announced by captured(): wait for everything on M so far
            ready = self.cuda.Event()
            ready.record(self.cuda.current_stream())
        self._pending, self._job = True, job
        with self.cuda.stream(self.stream):
            self.stream.wait_event(ready)
            result, error = _run_job(job)
            if error is None:
                result = self._to_pinned(result)
            self._done.record(self.stream)
        self._outcome = (result, error)

    def _to_pinned(self, result: Any) -> Any:
        """(req_ids, drafts on the device) -> (req_ids, a view of the pinned buffer), copied on ``S``."""
        req_ids, drafts = result
        if not (isinstance(drafts, torch.Tensor) and drafts.is_cuda):
            return result
        rows, cols = drafts.shape
        pinned = self._pinned
        if pinned is None or pinned.dtype != drafts.dtype or pinned.numel() < rows * cols:
            # A new pinned allocation can stall the host: grow rarely, never shrink.
            self._pinned = torch.empty(max(rows * cols, self.PINNED_ELEMENTS), dtype=drafts.dtype, pin_memory=True)
        # A contiguous view: a copy into a strided host tensor would not be asynchronous.
        view = self._pinned[: rows * cols].view(rows, cols)
        view.copy_(drafts, non_blocking=True)
        return req_ids, view

    def _join(self) -> tuple[Any, BaseException | None]:
        self._done.synchronize()
        self.cuda.current_stream().wait_event(self._done)
        self._job = None  # M now runs after S: the job's inputs may be freed
        outcome, self._outcome = self._outcome, (None, None)
        return outcome


def make_lane(kind: str, device: torch.device, lane_threads: int | None = 1) -> Lane:
    """``kind``: ``overlap`` (thread or CUDA stream by device) or ``serial``;
    ``lane_threads``: intra-op threads of a CPU lane thread (None: torch's default)."""
    if kind == "serial":
        return InlineLane()
    if kind != "overlap":
        raise ValueError(f"unknown MINEDRAFT_LANE {kind!r}: expected 'overlap' or 'serial'")
    if device.type == "cuda":
        return CudaStreamLane(device)
    return ThreadLane(lane_threads=lane_threads)
