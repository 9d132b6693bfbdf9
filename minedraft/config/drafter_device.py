"""``MINEDRAFT_DRAFTER_DEVICE``: where the process drafter runs, and how its process is bound there.

``cpu:<cores>`` binds the draft engine's process and its OpenMP threads to
those cores (``cpu:1``, ``cpu:2-3``, ``cpu:4,6``); ``cuda:<indices>`` gives it
those GPUs (``cuda:1``; ``cuda:4,5`` runs the draft with tensor parallelism
2, independent of the target's).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from minedraft.config.environment import inherited
from minedraft.config.errors import MineDraftConfigError

_SPEC = re.compile(r"^(cpu|cuda):([0-9,\-]+)$")


@dataclass(frozen=True)
class DrafterDevice:
    kind: str  # "cpu" or "cuda"
    indices: tuple[int, ...]  # CPU cores or GPU indices

    @classmethod
    def parse(cls, text: str, source: str = "MINEDRAFT_DRAFTER_DEVICE") -> DrafterDevice:
        match = _SPEC.match(text.strip()) if isinstance(text, str) else None
        indices = index_list(match.group(2)) if match else None
        if not indices:
            raise MineDraftConfigError(
                f"{source}={text!r}: expected cpu:<cores> (e.g. cpu:1, cpu:2-3) or cuda:<indices> (e.g. cuda:1).")
        return cls(match.group(1), indices)

    def __str__(self) -> str:
        return f"{self.kind}:{','.join(map(str, self.indices))}"

    @property
    def tensor_parallel_size(self) -> int:
        return len(self.indices) if self.kind == "cuda" else 1

    def process_env(self, environ: dict[str, str] | None = None) -> dict[str, str]:
        """Environment of the draft engine's process: its hardware, its engine in-process."""
        env = {"VLLM_NO_USAGE_STATS": "1"}
        if self.kind == "cpu":
            # OMP_NUM_THREADS: torch starts its OpenMP pool when the process imports it, before the engine binds
            # the process to its cores; a pool of one thread per core of the machine then shares the drafter's
            # cores and every forward waits on it (the real pair's 0.5B draft on one core: 1.1 s a decode
            # step against 0.14 s, 2026-12-04).
            env.update(VLLM_TARGET_DEVICE="cpu", VLLM_CPU_OMP_THREADS_BIND=",".join(map(str, self.indices)),
                       VLLM_ENABLE_V1_MULTIPROCESSING="0", OMP_NUM_THREADS=str(len(self.indices)))
        else:
            visible = (environ.get("CUDA_VISIBLE_DEVICES") if environ is not None
                       else inherited("CUDA_VISIBLE_DEVICES"))
            physical = [visible.split(",")[i] for i in self.indices] if visible else list(map(str, self.indices))
            env["CUDA_VISIBLE_DEVICES"] = ",".join(physical)
            # One GPU: the engine core in the drafter's process; several: vLLM's workers.
            env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0" if len(self.indices) == 1 else "1"
        return env

    def cpu_affinity(self) -> set[int] | None:
        return set(self.indices) if self.kind == "cpu" else None

    def check_available(self) -> None:
        """One line if this machine lacks the device (called where the drafter starts)."""
        if self.kind == "cpu":
            # The machine's cores, not this process's: vLLM's CPU worker has bound
            # itself to the target's cores by now.
            cores = os.cpu_count() or 1
            if max(self.indices) >= cores:
                raise MineDraftConfigError(
                    f"MINEDRAFT_DRAFTER_DEVICE={self}: this machine has {cores} core(s) (0..{cores - 1}).")
            return
        import torch

        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if max(self.indices) >= count:
            raise MineDraftConfigError(
                f"MINEDRAFT_DRAFTER_DEVICE={self}: this machine has {count} visible CUDA device(s).")


def index_list(text: str) -> tuple[int, ...] | None:
    """Indices from text such as ``0``, ``0-2`` or ``0,2-3``, sorted, once each; None where it is not such a list."""
    out: list[int] = []
    for part in text.split(","):
        bounds = part.split("-")
        if not all(b.isdigit() for b in bounds) or len(bounds) > 2:
            return None
        lo, hi = int(bounds[0]), int(bounds[-1])
        if hi < lo:
            return None
        out += range(lo, hi + 1)
    return tuple(sorted(set(out))) or None


def named_cores() -> tuple[int, ...] | None:
    """The one list of cores ``VLLM_CPU_OMP_THREADS_BIND`` names; None for ``auto``, ``nobind``, a list per rank
    (``0|1``) or none set."""
    return index_list(inherited("VLLM_CPU_OMP_THREADS_BIND") or "")
