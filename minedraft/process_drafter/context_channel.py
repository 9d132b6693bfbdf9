"""Hidden-state rows from the target's process to the drafter's, through shared memory.

A DFlash draft's context is the target's hidden states (several layers side
by side), far too many bytes for the JSON lines that carry a job. The target
writes a job's rows into a shared-memory segment and the job's line names the
segment, a sequence number and the rows' shape; the drafter copies them out
as soon as it reads the line. Where shared memory has no room for a job's
rows they are not sent, and their requests draft no more (see below).

One segment is reused for every job, so a job the target stopped waiting for
(late) may find its rows overwritten by a newer one when the drafter gets to
it. The segment's header is a sequence lock: the writer stamps the number
before and after the rows, the reader checks both after its copy, and rows it
finds overwritten are refused (None). The drafter then drops the context of
those requests (a draft quality loss, never a wrong token: the target
verifies every draft). A job larger than the segment gets a new, larger one.
"""

from __future__ import annotations

from multiprocessing import resource_tracker, shared_memory
from typing import Any

import shutil

import numpy as np
import torch

_HEADER = 16  # two int64: the sequence number before and after the rows
_SHM = "/dev/shm"
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class ContextWriter:
    """The target's end: one segment, grown on demand, unlinked on close."""

    def __init__(self, min_bytes: int = 1 << 20) -> None:
        self._segment: shared_memory.SharedMemory | None = None
        self._min_bytes = min_bytes
        self._seq = 0

    def write(self, rows: torch.Tensor) -> dict[str, Any] | None:
        """Put ``rows`` (2-D, contiguous after the copy) in the segment; what the job's line carries, or
        None where shared memory has no room for them."""
        rows = rows.detach().to("cpu").contiguous()
        raw = rows.view(torch.uint8).numpy().reshape(-1)  # numpy has no bfloat16: bytes
        if not self._reserve(_HEADER + raw.size):
            return None
        self._seq += 1
        header = np.ndarray((2,), dtype=np.int64, buffer=self._segment.buf)
        header[0] = self._seq
        np.ndarray((raw.size,), dtype=np.uint8, buffer=self._segment.buf, offset=_HEADER)[:] = raw
        header[1] = self._seq
        return {"shm": self._segment.name, "seq": self._seq, "shape": list(rows.shape),
                "dtype": str(rows.dtype).removeprefix("torch.")}

    def _reserve(self, size: int) -> bool:
        if self._segment is not None and self._segment.size >= size:
            return True
        self.close()
        size = max(size * 2, self._min_bytes)
        # Writing past a full tmpfs is SIGBUS, not an error: look first (a container's /dev/shm may be 64 MiB).
        if shutil.disk_usage(_SHM).free < size:
            return False
        self._segment = shared_memory.SharedMemory(create=True, size=size)
        return True

    def close(self) -> None:
        if self._segment is not None:
            self._segment.close()
            self._segment.unlink()
            self._segment = None


class ContextReader:
    """The drafter's end: attaches to the segment a line names, copies the rows out."""

    def __init__(self) -> None:
        self._segment: shared_memory.SharedMemory | None = None

    def read(self, where: dict[str, Any]) -> torch.Tensor | None:
        """The rows ``where`` describes, or None when a newer job has overwritten them."""
        try:
            segment = self._attach(where["shm"])
        except OSError:  # replaced by a larger one (and removed) before this job was read
            return None
        dtype = _DTYPES[where["dtype"]]
        shape = tuple(where["shape"])
        size = int(np.prod(shape)) * torch.empty((), dtype=dtype).element_size()
        header = np.ndarray((2,), dtype=np.int64, buffer=segment.buf)
        if int(header[1]) != where["seq"]:
            return None
        raw = np.array(np.ndarray((size,), dtype=np.uint8, buffer=segment.buf, offset=_HEADER))  # a copy
        if int(header[0]) != where["seq"]:
            return None
        return torch.from_numpy(raw).view(dtype).reshape(shape)

    def _attach(self, name: str) -> shared_memory.SharedMemory:
        if self._segment is None or self._segment.name != name:
            self.close()
            self._segment = shared_memory.SharedMemory(name=name)
            # The target owns the segment and unlinks it; Python's tracker would unlink it too
            # when this process ends, and warn.
            resource_tracker.unregister(self._segment._name, "shared_memory")
        return self._segment

    def close(self) -> None:
        if self._segment is not None:
            self._segment.close()
            self._segment = None
