"""The one patching utility (after ArcticInference's ``ArcticPatch``).

A patch replaces named attributes of one target (class or module), keeps the
originals so the replacement can call through, refuses to patch twice, and can
be undone (tests use that).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable


@dataclass
class Patch:
    """Replace ``target.<name>`` with ``make(original)`` for each name."""

    target: Any
    replacements: dict[str, Callable[[Any], Any]]
    originals: dict[str, Any] = field(default_factory=dict)

    @property
    def applied(self) -> bool:
        return bool(self.originals)

    def apply(self) -> None:
        if self.applied:
            raise RuntimeError(f"patch on {self.target!r} applied twice")
        for name, make in self.replacements.items():
            original = self.target.__dict__[name]
            self.originals[name] = original
            setattr(self.target, name, make(original))

    def undo(self) -> None:
        for name, original in self.originals.items():
            setattr(self.target, name, original)
        self.originals.clear()
