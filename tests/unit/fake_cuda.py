"""A recording fake of ``torch.cuda`` for the CUDA-stream lane: streams, events and the current stream.

The lane's ordering and memory-lifetime rules are checked against its log on
a CPU; tests/gpu runs the same lane on a real GPU.
"""

from __future__ import annotations

import torch


class FakeCuda:
    def __init__(self):
        self.log: list[str] = []
        self.main = self.Stream(self, "M")
        self.current = self.main

    class Stream:
        def __init__(self, cuda, name="S", device=None):
            self.cuda, self.name = cuda, name

        def wait_event(self, event):
            self.cuda.log.append(f"{self.name}.wait({event.name})")

        def wait_stream(self, other):
            self.cuda.log.append(f"{self.name}.wait_stream({other.name})")

    class Event:
        count = 0

        def __init__(self, cuda, blocking=False):
            self.cuda, self.recorded_on = cuda, None
            FakeCuda.Event.count += 1
            self.name = f"e{FakeCuda.Event.count}"

        def record(self, stream):
            self.recorded_on = stream.name
            self.cuda.log.append(f"{self.name}.record({stream.name})")

        def synchronize(self):
            self.cuda.log.append(f"host.sync({self.name})")

    def current_stream(self):
        return self.current

    def stream(self, stream):
        cuda = self

        class Ctx:
            def __enter__(self):
                cuda.previous, cuda.current = cuda.current, stream

            def __exit__(self, *exc):
                cuda.current = cuda.previous

        return Ctx()


def fake_cuda_lane():
    """(the fake, a CudaStreamLane on it)."""
    from minedraft.worker.in_process.lanes import CudaStreamLane

    cuda = FakeCuda()
    cuda.Stream = lambda device=None, _c=cuda: FakeCuda.Stream(_c, "S", device)
    cuda.Event = lambda blocking=False, _c=cuda: FakeCuda.Event(_c, blocking)
    return cuda, CudaStreamLane(torch.device("cpu"), cuda=cuda)
