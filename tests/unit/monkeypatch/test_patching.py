"""The one patching utility, on toy targets (no vLLM)."""

from __future__ import annotations

import inspect
import sys
from dataclasses import dataclass, fields

import pytest

from minedraft.monkeypatch.patching import (
    NewField,
    Patch,
    PatchGuardError,
    all_of,
    apply_all,
    is_class,
    is_function,
    reads_global,
    takes,
    undo_all,
)

_state = "module global"


class Engine:
    def step(self, n):
        return n + 1


def reads_state():
    return _state


def _double_step(original):
    def step(self, n):
        return 2 * original(self, n)

    return step


def test_replacement_calls_through_and_undo_restores():
    stock = Engine.step
    patch = Patch(Engine, {"step": _double_step}, guards={"step": takes("self", "n")})
    patch.apply()
    try:
        assert Engine().step(1) == 4 and patch.originals == {"step": stock}
    finally:
        patch.undo()
    assert Engine.step is stock and Engine().step(1) == 2


def test_applying_twice_is_refused():
    patch = Patch(Engine, {"step": _double_step}, guards={"step": takes("self", "n")})
    patch.apply()
    try:
        with pytest.raises(RuntimeError, match="applied twice"):
            patch.apply()
    finally:
        patch.undo()


def test_every_replaced_attribute_needs_a_guard():
    with pytest.raises(ValueError, match="needs exactly one guard"):
        Patch(Engine, {"step": _double_step}, guards={})


def test_missing_attribute_is_refused_in_one_line():
    patch = Patch(Engine, {"run": _double_step}, guards={"run": takes("self", "n")})
    with pytest.raises(PatchGuardError) as err:
        patch.apply()
    assert str(err.value) == f"minedraft: cannot patch {__name__}.Engine.run: it does not exist in this vLLM"
    assert "run" not in vars(Engine)


def test_inherited_attribute_counts_as_missing():
    """Patching a subclass would shadow, not replace, the method the others still use."""

    class Child(Engine):
        pass

    with pytest.raises(PatchGuardError, match="does not exist"):
        Patch(Child, {"step": _double_step}, guards={"step": takes("self", "n")}).apply()


def test_changed_parameters_are_named():
    patch = Patch(Engine, {"step": _double_step}, guards={"step": takes("self", "n", "budget")})
    with pytest.raises(PatchGuardError, match=r"Engine\.step: it takes \(self, n\), expected \(self, n, budget\)"):
        patch.apply()
    assert not patch.applied


def test_a_group_applies_all_or_none():
    module = sys.modules[__name__]
    stock = Engine.step
    good = Patch(Engine, {"step": _double_step}, guards={"step": takes("self", "n")})
    bad = Patch(module, {"reads_state": lambda f: f}, guards={"reads_state": reads_global("_elsewhere")})
    with pytest.raises(PatchGuardError, match="no longer reads the global '_elsewhere'"):
        apply_all([good, bad])
    assert Engine.step is stock and not good.applied
    patches = apply_all([good])
    undo_all(patches)
    assert Engine.step is stock


@pytest.mark.parametrize(
    ("guard", "obj", "problem"),
    [
        (takes(), reads_state, None),
        (takes("x"), 3, "is not callable (a int)"),
        (reads_global("_state"), reads_state, None),
        (reads_global("_state"), Engine.step, "no longer reads the global '_state'"),
        (is_function(), reads_state, None),
        (is_function(), print, "is not a Python function (a builtin_function_or_method)"),
        (is_class("Engine"), Engine, None),
        (is_class("Engine"), reads_state, "is not the class Engine"),
        (all_of(takes(), reads_global("_state")), reads_state, None),
        (all_of(takes("x"), reads_global("_state")), reads_state, "takes (), expected (x)"),
    ],
)
def test_guards(guard, obj, problem):
    found = guard(obj)
    assert (found is None) if problem is None else (found is not None and found.startswith(problem))


@dataclass
class Stats:
    count: int = 0


def test_a_new_field_travels_through_msgspec_and_undo_removes_it():
    import msgspec

    new = NewField(Stats, "extra", dict[str, int] | None)
    apply_all([new])
    try:
        assert "extra" not in inspect.signature(Stats).parameters  # __init__ is as it was
        carried = Stats(count=1)
        carried.extra = {"steps": 3}
        back = msgspec.msgpack.Decoder(Stats).decode(msgspec.msgpack.encode(carried))
        assert (back.count, back.extra) == (1, {"steps": 3}) and Stats().extra is None
        assert [f.name for f in fields(Stats)] == ["count", "extra"]
    finally:
        undo_all([new])
    assert not hasattr(Stats, "extra") and [f.name for f in fields(Stats)] == ["count"]
    assert not hasattr(msgspec.msgpack.Decoder(Stats).decode(msgspec.msgpack.encode(Stats())), "extra")


def test_a_new_field_is_refused_where_it_exists_or_would_not_travel():
    import msgspec

    with pytest.raises(PatchGuardError, match=r"Stats\.count: it exists in this vLLM"):
        NewField(Stats, "count", int).apply()
    with pytest.raises(PatchGuardError, match="is not a dataclass"):
        NewField(Engine, "extra", int).apply()

    @dataclass
    class Serialised:
        count: int = 0

    msgspec.msgpack.Decoder(Serialised)  # msgspec now keeps its view of the fields
    with pytest.raises(PatchGuardError, match="msgspec serialised .* so the field would not travel"):
        NewField(Serialised, "extra", int).apply()
    assert not hasattr(Serialised, "extra")
