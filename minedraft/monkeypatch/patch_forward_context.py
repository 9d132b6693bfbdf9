"""Make vLLM's forward context per thread, so two lanes can run forwards at once.

vLLM keeps the current ``ForwardContext`` (attention metadata, slot mappings)
in one module global. MineDraft's CPU lane runs the drafter's forward in a
second thread while the main thread runs the target's; with one global each
forward would read the other's attention metadata. Here the global becomes a
``threading.local``. ``get_forward_context`` and ``is_forward_context_available``
are imported by name all over vLLM, so their code objects are swapped in place
(the originals are kept and restored by ``undo``); ``override_forward_context``
is only called through the module, so it is replaced normally.

Upstream diff: ``patches/0002-thread-local-forward-context.patch``.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager

from minedraft.monkeypatch.patching import Patch, all_of, reads_global, takes

_TLS_NAME = "_minedraft_forward_context_tls"


# The two functions below are never called here: their code objects replace
# vLLM's, and their global names resolve in vllm.forward_context's namespace.
def _get_forward_context():
    """Get the current forward context."""
    ctx = getattr(_minedraft_forward_context_tls, "value", None)  # noqa: F821
    assert ctx is not None, (
        "Forward context is not set. "
        "Please use `set_forward_context` to set the forward context."
    )
    return ctx


def _is_forward_context_available():
    return getattr(_minedraft_forward_context_tls, "value", None) is not None  # noqa: F821


def _make_override(tls: threading.local):
    @contextmanager
    def override_forward_context(forward_context):
        prev_context = getattr(tls, "value", None)
        tls.value = forward_context
        try:
            yield
        finally:
            tls.value = prev_context

    return override_forward_context


def _has_no_closure(fn) -> str | None:
    """A swapped-in code object must match the function's (empty) closure."""
    if getattr(getattr(fn, "__code__", None), "co_freevars", ()) != ():
        return "is a closure, its code cannot be swapped"
    return None


# vLLM 0.32.0's three functions all work on the module global _forward_context.
_READS_ONE_GLOBAL = reads_global("_forward_context")


class _CodeSwap(Patch):
    """A Patch whose replacements swap ``__code__`` of module functions."""

    def apply(self) -> None:
        if self.applied:
            raise RuntimeError(f"patch on {self.target!r} applied twice")
        self.check()
        for name, make in self.replacements.items():
            fn = getattr(self.target, name)
            self.originals[name] = fn.__code__
            fn.__code__ = make(fn)

    def undo(self) -> None:
        for name, code in self.originals.items():
            getattr(self.target, name).__code__ = code
        self.originals.clear()


def make_patches() -> list[Patch]:
    import vllm.forward_context as fc

    tls = fc.__dict__.setdefault(_TLS_NAME, threading.local())
    swappable = all_of(takes(), _has_no_closure, _READS_ONE_GLOBAL)
    return [
        _CodeSwap(
            fc,
            {
                "get_forward_context": lambda fn: _get_forward_context.__code__,
                "is_forward_context_available": lambda fn: _is_forward_context_available.__code__,
            },
            guards={"get_forward_context": swappable, "is_forward_context_available": swappable},
        ),
        Patch(fc, {"override_forward_context": lambda fn: _make_override(tls)},
              guards={"override_forward_context": all_of(takes("forward_context"), _READS_ONE_GLOBAL)}),
    ]
