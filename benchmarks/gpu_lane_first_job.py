"""The CUDA-stream lane's first job against its later ones, torch only (a GPU, no vLLM).

Each line: the side job's and the main stream's spans in ms from a common origin (CUDA events:
side start, side end, main start, main end) and the host's time inside ``submit`` in ms. The
side and main spans overlap when the host returns from ``submit`` before the side job ends.
``python -m benchmarks.gpu_lane_first_job``; results: ``benchmarks/results/<gpu>/lane_first_job.txt``.
"""

from __future__ import annotations

import sys
import time

import torch

from minedraft.worker.in_process.lanes import CudaStreamLane

SPIN_CYCLES = 50_000_000


def spans(lane: CudaStreamLane, device: torch.device, drafts_on_device: bool) -> tuple[list[float], float]:
    origin = torch.cuda.Event(enable_timing=True)
    events = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
    origin.record()

    def job():
        events[0].record()
        torch.cuda._sleep(SPIN_CYCLES)
        events[1].record()
        return ["a"], (torch.zeros(1, 1, dtype=torch.long, device=device) if drafts_on_device else [[0]])

    lane.captured()
    start = time.perf_counter()
    lane.submit(job)
    host_ms = (time.perf_counter() - start) * 1e3
    events[2].record()
    torch.cuda._sleep(SPIN_CYCLES)
    events[3].record()
    lane.wait()
    torch.cuda.synchronize()
    return [round(origin.elapsed_time(e), 2) for e in events], round(host_ms, 2)


def main() -> None:
    if not torch.cuda.is_available():
        sys.exit("gpu_lane_first_job: no CUDA device visible")
    device = torch.device("cuda")
    lane = CudaStreamLane(device)
    for i in range(3):
        print("device drafts, same lane, job", i, *spans(lane, device, True), flush=True)
    print("host drafts, new lane, job 0", *spans(CudaStreamLane(device), device, False), flush=True)


if __name__ == "__main__":
    main()
