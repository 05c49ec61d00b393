"""How a dispatched call passes the model's JSON arguments to a tool: as they are when the
tool's parameters are JSON-typed (no per-call cost), through pydantic's ``validate_call`` when
they are typed beyond JSON (an Enum, datetime, UUID, a dataclass or pydantic model), as agent
frameworks do; and the integral floats (``3.0``) a JSON value holds where a hint says ``int``
turned into ints, without copying a value that has none.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable, Iterator
from typing import Any

import typing_extensions

from ._injected import injected_parameters

__all__ = ["IntFix", "coercing_call", "int_parameters"]

# TypedDict field markers: typing's (3.11+) and typing_extensions' (what pydantic asks for
# on Python < 3.12; the same objects on 3.11+).
_FIELD_MARKERS: frozenset[Any] = frozenset({
    typing_extensions.NotRequired, typing_extensions.Required,
    *(getattr(typing, n) for n in ("NotRequired", "Required") if hasattr(typing, n)),
})
# Annotations whose JSON values reach the tool as they are: no coercion needed.
_JSON_NATIVE: frozenset[Any] = frozenset({
    str, int, float, bool, type(None), list, dict, tuple, Any, object,
    typing.Union, typing.Optional, typing.Literal, typing.List, typing.Dict,  # noqa: UP006
    types.UnionType,
    *_FIELD_MARKERS,
})


def _json_native(annotation: Any, seen: frozenset[type] = frozenset()) -> bool:
    if annotation in _JSON_NATIVE or isinstance(annotation, str | int | bool | type(None)):
        return True  # Literal values land here too
    if isinstance(annotation, type) and issubclass(annotation, dict) and hasattr(
            annotation, "__total__"):  # a TypedDict (typing's or typing_extensions'): a dict
        if annotation in seen:  # a recursive TypedDict: its fields are being checked already
            return True
        try:
            fields = typing.get_type_hints(annotation)
        except Exception:  # noqa: BLE001 - unresolvable: let pydantic decide
            return False
        inner = seen | {annotation}
        return all(_json_native(f, inner) for f in fields.values())
    origin = typing.get_origin(annotation)
    if origin is not None:
        return _json_native(origin, seen) and all(_json_native(a, seen)
                                                  for a in typing.get_args(annotation))
    return False


def coercing_call(func: Callable[..., Any]) -> Callable[..., Any]:
    """What a dispatched call runs. Arguments from the model are JSON; a tool whose
    parameters are typed beyond JSON (an Enum, datetime, UUID, a dataclass or pydantic
    model) gets them converted by pydantic (``validate_call``), as agent frameworks do.
    Tools with JSON-typed parameters are called directly (no per-call cost)."""
    try:
        hints = typing.get_type_hints(func)
    except Exception:  # noqa: BLE001 - unresolvable forward references: call as is
        return func
    hints.pop("return", None)
    for name in injected_parameters(func):  # the framework passes them as they are
        hints.pop(name, None)
    if all(_json_native(h) for h in hints.values()):
        return func
    from pydantic import validate_call

    try:
        return validate_call(func)
    except Exception:  # noqa: BLE001 - pydantic cannot handle a hint: call as is
        return func


IntFix = Callable[[Any], Any]
"""Turns the integral floats a JSON value holds where the type hint says ``int`` into ints;
returns the value itself when there is none (no copy)."""


def int_parameters(func: Callable[..., Any]) -> tuple[tuple[str, IntFix | None], ...]:
    """The parameters of ``func`` whose type hints hold ``int``, each with its fix: ``None``
    for a top-level ``int`` (or ``int | None``; the caller converts inline, the common case),
    else a function that converts inside lists, tuples, dict values and TypedDict fields
    (``list[int]``, ``dict[str, int]``, ``Row`` with ``id: int``).

    JSON Schema's "integer" accepts ``5.0`` and a model may send it: such a value reaches the
    tool as ``5``, as pydantic (and the agent frameworks that validate with it) would pass it.
    A union of several types other than None is left alone (pydantic's choice among them
    depends on its mode). For tools with JSON-native hints only; pydantic converts the others.
    """
    try:
        hints = typing.get_type_hints(func)
    except Exception:  # noqa: BLE001 - unresolvable forward references: nothing to convert
        return ()
    hints.pop("return", None)
    out: list[tuple[str, IntFix | None]] = []
    for name, hint in hints.items():
        inner = _unwrap(hint)
        if inner is int:
            out.append((name, None))
        elif (fix := _int_fix(inner, 0)) is not None:
            out.append((name, fix))
    return tuple(out)


_UNWRAPPED: frozenset[Any] = frozenset(
    {typing.Union, types.UnionType,
     *_FIELD_MARKERS})


def _unwrap(hint: Any) -> Any:
    """``X`` for ``X | None``, ``Optional[X]``, ``NotRequired[X]``; else ``hint``."""
    origin = typing.get_origin(hint)
    if origin in _UNWRAPPED:
        rest = [a for a in typing.get_args(hint) if a is not type(None)]
        return _unwrap(rest[0]) if len(rest) == 1 else hint
    return hint


def _fix_int(value: Any) -> Any:
    return int(value) if type(value) is float and value.is_integer() else value


def _int_fix(hint: Any, depth: int) -> IntFix | None:
    """The fix for one (unwrapped) hint, or ``None`` when no ``int`` is reachable in it."""
    hint = _unwrap(hint)
    if hint is int:
        return _fix_int
    if depth > 8:  # a recursive TypedDict: deep enough for any real argument
        return None
    origin, params = typing.get_origin(hint), typing.get_args(hint)
    if origin is list or (origin is tuple and len(params) == 2 and params[1] is Ellipsis):
        each = _int_fix(params[0], depth + 1) if params else None
        return None if each is None else _each(each)
    if origin is tuple:
        fixes = [_int_fix(p, depth + 1) for p in params]
        return _positions(fixes) if any(fixes) else None
    if origin is dict:
        each = _int_fix(params[1], depth + 1) if len(params) == 2 else None
        return None if each is None else _values(each)
    if isinstance(hint, type) and issubclass(hint, dict) and hasattr(hint, "__total__"):
        try:  # a TypedDict
            fields = typing.get_type_hints(hint)
        except Exception:  # noqa: BLE001 - unresolvable: nothing to convert
            return None
        named = {k: f for k, f in ((k, _int_fix(h, depth + 1)) for k, h in fields.items())
                 if f is not None}
        return _fields(named) if named else None
    return None


def _patched(value: Any, changes: Iterator[tuple[Any, Any, IntFix]],
             copy: Callable[[Any], Any]) -> Any:
    """``value`` with each ``(key, item, fix)`` applied at ``key``; copied (by ``copy``) only
    when a fix changed something, so the caller's container stays as it was."""
    out = None
    for key, item, fix in changes:
        fixed = fix(item)
        if fixed is not item:
            if out is None:
                out = copy(value)
            out[key] = fixed
    return value if out is None else out


def _sequence(changes: Callable[[list[Any]], Iterator[tuple[Any, Any, IntFix]]]) -> IntFix:
    """The fix of a JSON array: ``changes`` names each item's fix. A direct call's tuple is
    fixed as a list (and becomes one when something changed, as pydantic would pass it)."""
    def fix(value: Any) -> Any:
        if type(value) is tuple:
            items = list(value)
            fixed = fix(items)
            return value if fixed is items else fixed
        if type(value) is not list:
            return value
        return _patched(value, changes(value), list)
    return fix


def _each(fix: IntFix) -> IntFix:
    return _sequence(lambda items: ((i, item, fix) for i, item in enumerate(items)))


def _positions(fixes: list[IntFix | None]) -> IntFix:
    return _sequence(lambda items: ((i, item, fix) for i, (item, fix)
                                    in enumerate(zip(items, fixes, strict=False))
                                    if fix is not None))


def _values(fix: IntFix) -> IntFix:
    def values(value: Any) -> Any:
        if type(value) is not dict:
            return value
        return _patched(value, ((key, item, fix) for key, item in value.items()), dict)
    return values


def _fields(fixes: dict[str, IntFix]) -> IntFix:
    def fields(value: Any) -> Any:
        if type(value) is not dict:
            return value
        return _patched(value, ((key, value[key], fix) for key, fix in fixes.items()
                                if value.get(key) is not None), dict)
    return fields
