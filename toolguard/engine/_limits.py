"""Bounds on what the model sends: argument size and depth, tool-name length.

Everything a model sends is kept somewhere for a while (history, signatures, counters,
audit events), so nothing it sends may be unbounded:

* ``max_args_bytes`` (policy key; env ``TOOLGUARD_MAX_ARGS_BYTES``): arguments larger than
  this, as JSON, are ``invalid`` without being parsed further, and are not kept;
* :data:`MAX_ARGS_DEPTH`: arguments nested deeper are ``invalid`` (no canonical hash,
  validation or redaction recurses into them);
* :data:`MAX_TOOL_NAME_CHARS`: a tool name no registered tool has is kept shortened (its
  digest keeps different names apart), so 1,000 invented names of 100 KB cost kilobytes;
  all such names share one per-tool counter (:data:`UNKNOWN_TOOLS` in ``task.usage``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import orjson

from toolguard.hashing._canonical import SCALARS
from toolguard.hashing._dump import ORJSON_DEPTH

__all__ = [
    "MAX_ARGS_DEPTH",
    "MAX_TOOL_NAME_CHARS",
    "UNKNOWN_TOOLS",
    "oversized",
    "short_name",
    "too_deep",
    "too_large",
]

MAX_ARGS_DEPTH: Final = 100  # levels of nested arrays and objects
MAX_TOOL_NAME_CHARS: Final = 128
UNKNOWN_TOOLS: Final = "<unknown tools>"  # the one per-tool counter of all unknown names


def oversized(raw: Any, limit: int | None) -> str | None:
    """Why ``raw`` (the arguments as given: JSON text, bytes or a mapping) is larger than
    ``limit`` bytes, or None (also for ``limit`` None: no limit). A mapping is measured as
    compact JSON (values JSON cannot hold by their ``str``)."""
    if limit is None:
        return None
    if isinstance(raw, bytes):
        size = len(raw)
    elif isinstance(raw, str):
        size = len(raw) if len(raw) > limit or raw.isascii() else len(
            raw.encode("utf-8", "surrogatepass"))
    elif isinstance(raw, Mapping):
        if _flat_size(raw) * 2 < limit:  # flat and far below: no need to serialize
            return None
        try:
            size = len(orjson.dumps(raw, default=str, option=orjson.OPT_NON_STR_KEYS))
        except (TypeError, orjson.JSONEncodeError):
            return None  # too deep or not JSON: the canonical hash says so
    else:
        return None
    return None if size <= limit else too_large(size, limit)


def too_large(size: int, limit: int) -> str:
    """Why arguments of ``size`` bytes are refused under ``max_args_bytes`` ``limit``."""
    return (f"the arguments are {size:,} bytes, more than max_args_bytes ({limit:,}): send "
            "less (a path or an id instead of the content)")


def too_deep(raw: Any, args: Any, limit: int = MAX_ARGS_DEPTH) -> str | None:
    """Why ``args`` is nested deeper than ``limit`` levels, or None. ``raw`` is the JSON text
    it was parsed from, if any: text with fewer brackets than ``limit`` is not walked."""
    if isinstance(raw, (str, bytes)):
        opening = (raw.count("{") + raw.count("[") if isinstance(raw, str)
                   else raw.count(b"{") + raw.count(b"["))
        if opening <= limit:
            return None
    elif isinstance(args, Mapping) and all(type(v) in SCALARS for v in args.values()):
        return None  # flat: the usual case, no walk
    if type(args) is dict and limit < ORJSON_DEPTH:
        # orjson stops past 254 levels of arrays and objects: wrapped in 254 - limit one-item
        # arrays, JSON-native arguments serialize iff they are at most ``limit`` deep, in C
        # (the walk below took 7 ms on 100 KB of rows). Anything else (a value orjson does
        # not take) is walked.
        probe: Any = args
        for _ in range(ORJSON_DEPTH - limit):
            probe = [probe]
        try:
            orjson.dumps(probe, default=_refuse)
        except TypeError as exc:
            if _RECURSION in str(exc):
                return f"the arguments are nested deeper than {limit} levels"
        else:
            return None
    stack: list[tuple[Any, int]] = [(args, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > limit:
            return f"the arguments are nested deeper than {limit} levels"
        if isinstance(value, Mapping):
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, (list, tuple)):
            stack.extend((v, depth + 1) for v in value)
    return None


_RECURSION: Final = "Recursion limit"  # orjson's message past them


def _refuse(value: Any) -> Any:
    raise TypeError(f"not JSON: {type(value).__name__}")


def _flat_size(args: Mapping[Any, Any]) -> int:
    """An upper bound of the JSON size of flat ``args`` (scalar values); a huge number for
    anything else, so the caller serializes."""
    size = 2
    for key, value in args.items():
        kind = type(value)
        if kind not in SCALARS:
            return 1 << 62
        size += 6 + len(str(key)) * 6 + (
            len(value) * 6 if kind is str else value.bit_length() // 3 + 2 if kind is int
            else 24)
    return size


def short_name(tool: object) -> str:
    """``tool`` if it is at most :data:`MAX_TOOL_NAME_CHARS` characters, else its start and a
    digest of the whole (different long names stay different). A name that is not a string
    (a message missing its tool name gives ``None``) becomes its JSON text, so it is an
    unknown tool like any other, not an internal error."""
    name = tool if isinstance(tool, str) else orjson.dumps(tool, default=repr).decode()
    if len(name) <= MAX_TOOL_NAME_CHARS:
        return name
    import hashlib  # rare (an invented long name): not loaded by import toolguard

    digest = hashlib.blake2b(name.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()
    return f"{name[:MAX_TOOL_NAME_CHARS - 20]}…{digest}"
