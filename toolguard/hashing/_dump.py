"""Serializing arguments in C: ``orjson.dumps`` of JSON-native values only, optionally
bounded in depth by orjson's own limit, and the searches of serialized arguments that
canonical hashing and redaction share. Imports nothing of the package but
:mod:`toolguard.hashing._regex` (lazily), so that both may use it.
"""

from __future__ import annotations

import re
import threading
from typing import Any, Final

import orjson

_NULL: Final = re.compile(rb"null")
ORJSON_DEPTH: Final = 254
"""Levels of arrays and objects ``orjson.dumps`` serializes."""


class _LongSearch:
    """``pattern.search(out) is not None`` for serialized arguments of :data:`LONG_OUTPUT`
    bytes or more, in RE2. On 100 KB of JSON, ``null`` took 118 µs in ``re`` and 12.5 µs in
    RE2, ``\\.0[,\\]}]`` 125 µs and 7 µs (sre steps through the text byte by byte; RE2
    skips to candidate bytes): in ``re`` the two searches cost more than half the
    serialization itself. Short output stays with ``re`` (callers test the length first: a
    call into RE2 costs ~1 µs). Where ``google-re2`` cannot be imported, ``re`` serves.
    Same answers either way (literal bytes and one class, read alike by both engines)."""

    __slots__ = ("_anchor", "_compiled", "_pattern")

    def __init__(self, pattern: re.Pattern[bytes]) -> None:
        self._pattern = pattern
        self._compiled: Any = None  # the RE2 object, compiled on first use
        self._anchor: Any = None  # RE2::UNANCHORED: a search

    def __call__(self, out: bytes) -> bool:
        """Whether the pattern occurs in ``out``."""
        compiled = self._compiled
        if compiled is None:
            compiled = self._compiled = self._compile()
        if compiled is False:  # pragma: no cover - no google-re2
            return self._pattern.search(out) is not None
        return bool(compiled.Match(self._anchor, out, 0, len(out))[0][0] >= 0)

    def _compile(self) -> Any:
        from ._regex import _options, _re2

        binding = _re2()
        if binding is None:  # pragma: no cover - google-re2 is a dependency with wheels here
            return False
        self._anchor = binding.RE2.Anchor.UNANCHORED
        return binding.RE2(self._pattern.pattern, _options())


LONG_OUTPUT: Final = 4096
"""Serialized arguments of at least this many bytes are searched in RE2 (:class:`_LongSearch`)."""
_LONG_NULL: Final = _LongSearch(_NULL)


def _has_null(out: bytes) -> bool:
    """Whether serialized ``out`` holds ``null`` (a null, or the text in a string). Short
    output without an ``n`` byte has none: an int membership test is a memchr (~0.2k
    instructions), a regex search ~1.2k, a bytes one ~2.4k (it takes a buffer)."""
    return ((110 in out and _NULL.search(out) is not None) if len(out) < LONG_OUTPUT
            else _LONG_NULL(out))


class _Unserializable(Exception):
    """orjson met a value it cannot serialize natively: take the Python walk."""


def _refuse(_: Any) -> Any:
    raise _Unserializable


def dumps_within(value: Any, wrap: int, option: int) -> bytes:
    """``orjson.dumps(value, option=option)`` of JSON-native values only (anything orjson
    would hand to ``default`` refuses), or ``b""``. With ``wrap`` > 0 serialized inside
    ``wrap`` one-item arrays, which are cut off again: orjson stops past 254 levels of
    arrays and objects, so with ``wrap = 254 - n`` the bytes also say ``value`` is at most
    ``n`` levels deep (in C, no walk)."""
    if not wrap:
        try:
            return orjson.dumps(value, default=_refuse, option=option)
        except (_Unserializable, TypeError, orjson.JSONEncodeError):
            return b""
    chain = _CHAINS.get(wrap) or _CHAINS.setdefault(wrap, _Chain(wrap))
    probe: Any
    inner: list[Any] | None
    if chain.lock.acquire(False):  # the prebuilt arrays: no Python loop of `wrap` steps
        inner, probe = chain.inner, chain.outer
        inner[0] = value
    else:  # another thread serializes in it right now
        inner, probe = None, value
        for _ in range(wrap):
            probe = [probe]
    try:
        out = orjson.dumps(probe, default=_refuse, option=option)
    except (_Unserializable, TypeError, orjson.JSONEncodeError):
        return b""
    finally:
        if inner is not None:
            inner[0] = None
            chain.lock.release()
    return out[wrap:-wrap]


class _Chain:
    """``wrap`` nested one-item arrays, the innermost ``inner`` (its item is set to the
    arguments for one serialization, under ``lock``)."""

    __slots__ = ("inner", "lock", "outer")

    def __init__(self, wrap: int) -> None:
        self.inner: list[Any] = [None]
        outer = self.inner
        for _ in range(wrap - 1):
            outer = [outer]
        self.outer = outer
        self.lock = threading.Lock()


_CHAINS: dict[int, _Chain] = {}
