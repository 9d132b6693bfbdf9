"""Run an e2e test module as a script in a child process and read its JSON result.

One engine per process keeps the engines of a module apart (each child builds
its own, runs several workloads, writes what it saw to ``out``, and exits).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run_script(script: str, args: list[str], out: Path, label: str, timeout: float,
               env: dict | None = None) -> dict:
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1", "MINEDRAFT_MODE": "parallel",
           **(env or {})}
    proc = subprocess.run([sys.executable, script, *args], capture_output=True, text=True, timeout=timeout,
                          env=env, cwd=REPO)
    if proc.returncode != 0 or not out.exists():
        lines = (proc.stdout + proc.stderr).splitlines()
        errors = [x for x in lines if "Error" in x or "error" in x]
        raise RuntimeError(f"{label} failed (exit {proc.returncode}):\n" + "\n".join(errors[-15:])
                           + "\n--- tail ---\n" + "\n".join(lines[-25:]))
    return json.loads(out.read_text())
