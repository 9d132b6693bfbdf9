"""The ``minedraft`` console script (minedraft/cli.py): a bad configuration or another vLLM is one
line on stderr and exit status 2."""

from __future__ import annotations

import subprocess
import sys

import pytest

from minedraft import _version
from minedraft.cli import main as cli_main


def test_cli_prints_one_line_and_exits_2(model_dir):
    proc = subprocess.run(
        [sys.executable, "-m", "minedraft.cli", "serve", model_dir, "--scheduler-cls", "minedraft",
         "--skip-tokenizer-init"],
        capture_output=True, text=True, timeout=240,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1].startswith("error: minedraft: ")
    assert "Traceback" not in proc.stderr


def test_console_script_on_another_vllm_exits_2_with_one_line(monkeypatch, capsys):
    monkeypatch.setattr(_version, "installed_vllm", lambda: ("vllm", "0.33.1"))
    with pytest.raises(SystemExit) as exit_info:
        cli_main(["serve", "some-model", "--scheduler-cls", "minedraft"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        "error: minedraft: needs vLLM 0.32.0, found vllm 0.33.1; use vLLM's own `vllm` command there"
    ]
