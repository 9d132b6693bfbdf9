"""Run a check in a new interpreter: for code that imports numba (vLLM's n-gram matcher,
minedraft/hybrid/ngram_drafts.py), which a test process must not import.

vLLM 0.32's CPU kernel overrides (``register_triton_kernel_overrides``, run by every worker as it
starts) scan every module's namespace and fail once llvmlite is loaded ("'_lib_fn_wrapper' object
has no attribute 'get'"; benchmarks/method_stages.py ``llvmlite_out_of_kernel_scan``). A test process
that imported numba would break every engine it later starts in process or forks (the e2e tier and
the benchmarks run in the same pytest workers). An engine's scheduler imports it after its worker
registered, so engines themselves are not affected.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from typing import Any


class FreshProcess:
    """One spawned interpreter for a module's checks (an interpreter's start and vLLM's import: ~10 s)."""

    def __enter__(self) -> FreshProcess:
        self._pool = multiprocessing.get_context("spawn").Pool(1)
        return self

    def run(self, check: Callable[..., Any], *args: Any) -> Any:
        """``check(*args)`` there (``check`` at a module's top level); its result, or its exception (an
        assertion's message included) raised here."""
        return self._pool.apply(check, args)

    def __exit__(self, *exc: object) -> None:
        self._pool.terminate()
        self._pool.join()
