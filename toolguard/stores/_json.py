"""The JSON of what a store keeps outside the process (Redis, SQLite): stored results, halt
descriptions and approval records. Shared by :class:`~toolguard.stores.RedisStore` and
:class:`~toolguard.stores.SQLiteStore`, so both give back the same values.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Final

import orjson

from ._base import ApprovalRecord

_JSON_OPTS: Final = orjson.OPT_NON_STR_KEYS


def _dumps(value: Any) -> bytes:
    """A stored result as JSON; what JSON cannot hold becomes its ``repr()``, value by value."""
    try:
        return orjson.dumps(value, default=_safe_repr, option=_JSON_OPTS)
    except TypeError:  # orjson.JSONEncodeError: an int beyond 64 bits, a cycle, too deep
        pass
    try:
        return orjson.dumps(_jsonable(value, 0), default=_safe_repr, option=_JSON_OPTS)
    except TypeError:
        return orjson.dumps(_safe_repr(value))


def _jsonable(value: Any, depth: int, active: frozenset[int] = frozenset()) -> Any:
    """``value`` as JSON can hold it, value by value: an int beyond 64 bits, a string that is
    not valid Unicode, a container met again inside itself (a cycle) or nested deeper than
    orjson's limit become their ``repr()``; a dataclass becomes its fields; a dict key that
    is not a string becomes ``str(key)``. Everything else stays as it is. Linear in the size
    of ``value``: a cycle stops at its first repeat."""
    if isinstance(value, bool) or value is None or isinstance(value, float):
        return value
    if isinstance(value, int):
        return value if -(2**63) <= value < 2**64 else repr(value)
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return repr(value)
        return value
    ident = id(value)
    if depth >= _MAX_DEPTH or ident in active:
        return _safe_repr(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if isinstance(value, (dict, list, tuple)):
        inner = active | {ident}
        if isinstance(value, dict):
            return {k if isinstance(k, str) else str(k): _jsonable(v, depth + 1, inner)
                    for k, v in value.items()}
        return [_jsonable(v, depth + 1, inner) for v in value]
    return value  # orjson takes it natively or calls default=repr


def _safe_repr(value: Any) -> str:
    try:
        return repr(value)
    except Exception:  # noqa: BLE001 - a foreign __repr__ (or one nested too deep) failed
        return f"<{type(value).__qualname__}>"


_MAX_DEPTH: Final = 200  # below orjson's recursion limit of 255


def _approval(raw: bytes | str) -> ApprovalRecord:
    """An approval record from the JSON :func:`_approval_json` wrote."""
    state, requested_at, reason, tool, args, *bound = orjson.loads(raw)
    return ApprovalRecord(state, float(requested_at), reason, tool, args, *bound[:2])


def _approval_json(record: ApprovalRecord) -> bytes:
    """``record`` as :func:`_approval` reads it back."""
    return _dumps([record.state, record.requested_at, record.reason, record.tool, record.args,
                   record.args_hash, record.proof])
