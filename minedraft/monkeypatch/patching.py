"""The one patching utility (after ArcticInference's ``ArcticPatch``).

A :class:`Patch` replaces named attributes of one target (class or module),
keeps the originals so a replacement can call through, refuses to patch
twice, and can be undone (tests use that). Guards come first: every replaced
attribute has a guard that checks it still looks as it did in vLLM 0.32.0
(it exists on the target, takes the same parameters, reads the same globals),
and nothing is replaced unless every guard of every patch in the group passes.
A failed guard raises :class:`PatchGuardError` with one line naming the
attribute and what changed. :class:`NewField` is the one other kind of patch:
it adds a field that a vLLM dataclass lacks, guarded the other way round (the
field must not exist yet).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

# A guard returns why an attribute does not fit the patch, or None if it fits.
Guard = Callable[[Any], "str | None"]


class PatchGuardError(RuntimeError):
    """An attribute a patch replaces is missing or changed. ``str(err)`` is one line."""


def takes(*params: str) -> Guard:
    """The attribute is callable with exactly these parameter names, in order."""

    def check(obj: Any) -> str | None:
        if not callable(obj):
            return f"is not callable (a {type(obj).__name__})"
        try:
            found = tuple(inspect.signature(obj).parameters)
        except (TypeError, ValueError):
            return "has no signature to check"
        if found != params:
            return f"takes ({', '.join(found)}), expected ({', '.join(params)})"
        return None

    return check


def reads_global(name: str) -> Guard:
    """The function's own code reads module global ``name`` (the state a patch replaces)."""

    def check(obj: Any) -> str | None:
        code = getattr(inspect.unwrap(obj), "__code__", None)
        if code is None or name not in code.co_names:
            return f"no longer reads the global {name!r}"
        return None

    return check


def is_function() -> Guard:
    """The attribute is a plain Python function (any parameters)."""

    def check(obj: Any) -> str | None:
        if not inspect.isfunction(obj):
            return f"is not a Python function (a {type(obj).__name__})"
        return None

    return check


def is_class(name: str) -> Guard:
    """The attribute is a class called ``name``."""

    def check(obj: Any) -> str | None:
        if not (isinstance(obj, type) and obj.__name__ == name):
            return f"is not the class {name} (found {obj!r})"
        return None

    return check


def all_of(*guards: Guard) -> Guard:
    def check(obj: Any) -> str | None:
        return next((problem for guard in guards if (problem := guard(obj))), None)

    return check


def describe(target: Any) -> str:
    """``module.Class`` or ``module`` for messages."""
    if isinstance(target, type):
        return f"{target.__module__}.{target.__qualname__}"
    return getattr(target, "__name__", repr(target))


@dataclass
class Patch:
    """Replace ``target.<name>`` with ``make(original)`` for each name, after its guard passes."""

    target: Any
    replacements: dict[str, Callable[[Any], Any]]
    guards: dict[str, Guard]
    originals: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if set(self.guards) != set(self.replacements):
            raise ValueError(f"every attribute patched on {describe(self.target)} needs exactly one guard")

    @property
    def applied(self) -> bool:
        return bool(self.originals)

    def check(self) -> None:
        """Raise PatchGuardError unless every attribute to replace looks as expected."""
        for name, guard in self.guards.items():
            where = f"{describe(self.target)}.{name}"
            if name not in vars(self.target):
                raise PatchGuardError(f"minedraft: cannot patch {where}: it does not exist in this vLLM")
            problem = guard(vars(self.target)[name])
            if problem:
                raise PatchGuardError(f"minedraft: cannot patch {where}: it {problem}")

    def apply(self) -> None:
        if self.applied:
            raise RuntimeError(f"patch on {describe(self.target)} applied twice")
        self.check()
        for name, make in self.replacements.items():
            original = vars(self.target)[name]
            self.originals[name] = original
            setattr(self.target, name, make(original))

    def undo(self) -> None:
        for name, original in self.originals.items():
            setattr(self.target, name, original)
        self.originals.clear()


# msgspec (vLLM's serialiser between processes) caches a dataclass's fields on the class
# when it first builds a decoder for it.
_MSGSPEC_CACHE = "__msgspec_cache__"


@dataclass
class NewField:
    """Add field ``name`` (default None, not an ``__init__`` parameter) to dataclass ``target``.

    ``__init__`` was generated with the class, so the new field is left out of
    it: instances read the class default until set. Whatever lists the fields
    (``dataclasses.fields``, msgspec between vLLM's processes) sees it, provided
    the process had not built a msgspec decoder for the class yet:
    msgspec keeps its view of a class's fields from then on (also inside every
    msgspec Struct that holds it, out of reach), so the guard refuses then.
    """

    target: type
    name: str
    annotation: Any
    applied: bool = False

    def check(self) -> None:
        where = f"{describe(self.target)}.{self.name}"
        if not dataclasses.is_dataclass(self.target):
            raise PatchGuardError(f"minedraft: cannot add {where}: {describe(self.target)} is not a dataclass")
        if hasattr(self.target, self.name):
            raise PatchGuardError(f"minedraft: cannot add {where}: it exists in this vLLM")
        if _MSGSPEC_CACHE in vars(self.target):
            raise PatchGuardError(f"minedraft: cannot add {where}: msgspec serialised {describe(self.target)} "
                                  "in this process before the patch, so the field would not travel")

    def apply(self) -> None:
        if self.applied:
            raise RuntimeError(f"field {self.name} of {describe(self.target)} added twice")
        self.check()
        # A dataclass built for the purpose makes the Field as the dataclass machinery does.
        spare = dataclasses.make_dataclass(
            "_NewField", [(self.name, self.annotation, dataclasses.field(default=None, init=False))])
        self.target.__dataclass_fields__[self.name] = spare.__dataclass_fields__[self.name]
        self.target.__annotations__[self.name] = self.annotation
        setattr(self.target, self.name, None)
        self.applied = True

    def undo(self) -> None:
        if not self.applied:
            return
        del self.target.__dataclass_fields__[self.name]
        del self.target.__annotations__[self.name]
        delattr(self.target, self.name)
        if _MSGSPEC_CACHE in vars(self.target):  # msgspec's view with the field: it rebuilds one without
            delattr(self.target, _MSGSPEC_CACHE)
        self.applied = False


def apply_all(patches: Iterable[Patch | NewField]) -> list[Patch | NewField]:
    """Apply a group of patches all or none: every guard runs before anything changes."""
    patches = list(patches)
    for patch in patches:
        patch.check()
    for patch in patches:
        patch.apply()
    return patches


def undo_all(patches: Iterable[Patch | NewField]) -> None:
    for patch in reversed(list(patches)):
        patch.undo()
