"""The wheel ``make wheel`` builds, installed alone, serves with ``--scheduler-cls minedraft``.

The wheel goes into a fresh virtual environment that sees this interpreter's
site-packages (vLLM and its dependencies, not reinstalled) through a ``.pth``
line written after the install. A plain path line adds the directory without
processing its ``.pth`` files, so the checkout's editable ``minedraft`` stays
invisible; the new venv's site-packages comes first, so ``minedraft``, its
metadata and vLLM's plugin entry points are the wheel's. Its ``minedraft serve``
console script (no PYTHONPATH, cwd outside the checkout) then answers one
completion request of two prompts, decoded side by side, with the target's own
greedy tokens (transformers, no vLLM) and exports MineDraft's parallel-step
metrics.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from served_engine import STARTUP_TIMEOUT_S, K, Server

from harness.child import REPO
from harness.engine_args import Speculation, engine_kwargs, serve_flags
from harness.server import free_port
from modelkit import build_kit

BUILD_TIMEOUT_S = 300
PROMPTS = [[(11 * i) % 2045 + 3 for i in range(40)], [(7 * i) % 2039 + 5 for i in range(25)]]
MAX_TOKENS = 32

# Run by the venv's interpreter: where minedraft, its metadata and vLLM's view of its plugins come from.
PROBE = """
import importlib.metadata as md, inspect, json, minedraft, vllm
from vllm.plugins import load_plugins_by_group
eps = {g: [str(ep.dist.locate_file("")) for ep in md.entry_points(group=g) if ep.name == "minedraft"]
       for g in ("vllm.general_plugins", "vllm.scheduler_plugins", "console_scripts")}
print(json.dumps({"minedraft": minedraft.__file__, "vllm": vllm.__file__,
                  "dist": str(md.distribution("minedraft").locate_file("")), "entry_points": eps,
                  "loaded": inspect.getfile(load_plugins_by_group("vllm.general_plugins")["minedraft"])}))
"""


def run(argv: list, **kw) -> str:
    """Run ``argv``; its output, or the test fails with its tail."""
    p = subprocess.run([str(a) for a in argv], capture_output=True, text=True, **kw)
    out = p.stdout + p.stderr
    if p.returncode != 0:
        pytest.fail(f"{argv[:4]} exited with {p.returncode}:\n{out[-6000:]}", pytrace=False)
    return out


def outside_env() -> dict[str, str]:
    """This environment without the checkout on PYTHONPATH or MineDraft settings; vLLM on CPU, offline."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PROMETHEUS_MULTIPROC_DIR") and not k.startswith("MINEDRAFT_")}
    return {**env, "VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1",
            "PYTHONUNBUFFERED": "1", "VLLM_LOG_STATS_INTERVAL": "1"}


def target_greedy(target: str) -> list[list[int]]:
    """The target alone, greedy: transformers, no vLLM."""
    from modelkit.greedy import greedy_continue
    from modelkit.models import load_model

    return greedy_continue(load_model(target), PROMPTS, MAX_TOKENS)


@pytest.fixture
def venv(tmp_path):
    """A fresh venv holding only the wheel, seeing this interpreter's site-packages; removed after."""
    dist = tmp_path / "dist"
    build = run(["make", "-C", REPO, "--no-print-directory", "wheel", f"WHEEL_DIR={dist}", f"PYTHON={sys.executable}"],
                env={**os.environ, "PIP_VERBOSE": "1"}, timeout=BUILD_TIMEOUT_S)
    # setuptools' deprecations (the license table, classifiers, ...): BuildBackendWarning under pip 26.3.
    warnings = [line for line in build.splitlines() if "DeprecationWarning" in line or "BuildBackendWarning" in line]
    assert not warnings, "\n".join(warnings)
    (wheel,) = dist.glob("minedraft-*.whl")
    root = tmp_path / "venv"
    try:
        run([sys.executable, "-m", "venv", "--without-pip", root])
        python = root / "bin" / "python"
        run([sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps", "--no-index", wheel],
            cwd=tmp_path, env=outside_env())
        site = Path(run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]).strip())
        ours = dict.fromkeys(sysconfig.get_path(k) for k in ("purelib", "platlib"))
        (site / "_minedraft_test_base.pth").write_text("".join(f"{p}\n" for p in ours))
        yield root, site
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_wheel_serves_with_minedraft(venv, tmp_path):
    root, site = venv
    env, cwd = outside_env(), tmp_path
    found = json.loads(run([root / "bin" / "python", "-c", PROBE], cwd=cwd, env=env).splitlines()[-1])
    assert Path(found["minedraft"]).is_relative_to(site), found
    assert not Path(found["minedraft"]).is_relative_to(REPO), found
    assert Path(found["vllm"]).is_relative_to(sysconfig.get_path("purelib")), found
    assert found["dist"] == str(site), found
    assert found["entry_points"] == {g: [str(site)] for g in found["entry_points"]}, found
    assert Path(found["loaded"]).is_relative_to(site), found

    kit = build_kit()
    engine = engine_kwargs("minedraft_parallel", kit.target, Speculation(kit.draft_perturbed, K), max_model_len=1024)
    port = free_port()
    argv = [root / "bin" / "minedraft", "serve", *serve_flags(engine), "--host", "127.0.0.1", "--port", port,
            "--disable-uvicorn-access-log"]
    log = tmp_path / "wheel-server.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen([str(a) for a in argv], stdout=fh, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env, cwd=cwd, start_new_session=True)
    server = Server("wheel", proc, port, log)
    try:
        expected = target_greedy(kit.target)  # while the engine starts
        server.wait_ready(STARTUP_TIMEOUT_S)
        client = server.client()

        # Both prompts in one request: the server adds them to the engine together, so they decode side by
        # side and the steps can split them into two groups. Two requests sent from two threads could arrive
        # a whole generation apart on a loaded machine (CI saw no parallel step once).
        r = client.completions.create(model=kit.target, prompt=PROMPTS, max_tokens=MAX_TOKENS, temperature=0,
                                      extra_body={"ignore_eos": True, "return_token_ids": True})
        got = [c.model_dump()["token_ids"] for c in sorted(r.choices, key=lambda c: c.index)]
        assert got == expected
        m = server.wait_idle()
        assert m["minedraft:parallel_steps_total"] > 0 and m["minedraft:verified_requests_total"] > 0, \
            {k: v for k, v in m.items() if k.startswith("minedraft:")}
        assert "MineDraft draft lane:" in server.tail(1_000_000)
    finally:
        server.stop()
