"""Hidden-state rows through shared memory (minedraft/process_drafter/context_channel.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

import torch

from minedraft.process_drafter.context_channel import ContextWriter

READ = """
import json, sys
from minedraft.process_drafter.context_channel import ContextReader
reader = ContextReader()
rows = [reader.read(where) for where in json.loads(sys.argv[1])]
with open(sys.argv[2], "w") as out:
    json.dump([None if r is None else r.float().tolist() for r in rows], out)
"""


def read_in_another_process(wheres: list[dict]) -> list:
    """What the drafter's process reads for each line (None: overwritten). The answer comes back in a file,
    not through a pipe: attaching shared memory starts Python's resource tracker, which inherits the child's
    stdout and stderr, and reading a pipe to its end would wait for the tracker too."""
    with tempfile.TemporaryDirectory() as folder:
        answer, log = os.path.join(folder, "rows.json"), os.path.join(folder, "stderr")
        with open(log, "w") as stderr:
            done = subprocess.run([sys.executable, "-c", READ, json.dumps(wheres), answer],
                                  stdout=subprocess.DEVNULL, stderr=stderr, timeout=120)
        with open(log) as stderr:
            assert done.returncode == 0, stderr.read()
        with open(answer) as rows:
            return json.load(rows)


def test_rows_arrive_in_their_dtype_and_a_newer_job_s_rows_refuse_an_older_line():
    writer = ContextWriter(min_bytes=64)
    try:
        old = writer.write(torch.ones(2, 3))
        bf16 = torch.tensor([[1.5, -2.0], [0.25, 3.0]], dtype=torch.bfloat16)
        where = writer.write(bf16)
        assert where["dtype"] == "bfloat16" and where["shape"] == [2, 2]
        assert read_in_another_process([old, where]) == [None, bf16.float().tolist()]
        big = torch.arange(3000, dtype=torch.float32).reshape(100, 30)  # grows the segment: a new one
        grown = writer.write(big)
        assert grown["shm"] != where["shm"] and read_in_another_process([grown]) == [big.tolist()]
    finally:
        writer.close()


def test_no_room_in_shared_memory_is_none_not_a_crash(monkeypatch):
    import shutil
    from collections import namedtuple

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(1 << 30, 1 << 30, 1000))
    writer = ContextWriter(min_bytes=64)
    assert writer.write(torch.ones(100, 100)) is None


def test_a_line_naming_a_removed_segment_reads_as_overwritten():
    writer = ContextWriter(min_bytes=64)
    where = writer.write(torch.ones(2, 3))
    writer.close()  # unlinked, as when a larger one replaced it
    assert read_in_another_process([where]) == [None]
