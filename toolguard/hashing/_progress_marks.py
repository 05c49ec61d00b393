"""Explicit progress: what a result says about how far a job got (a percentage, a ratio,
"step k of n", a counter after a word that says what it counts, a status), searched in a
normalised result (``toolguard.hashing._normalize``: timestamps and ids are placeholders by then, so
a clock or an id never reads as progress)."""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache
from typing import Any, Final

__all__ = ["PROGRESS_MAX_CHARS", "progress_marks"]

# What a result says about how far a job got: a percentage, a ratio, "step k of n", a counter
# after a word that says what it counts, a status. Matched in a normalised text (timestamps
# and ids are placeholders by then), so a clock or an id never reads as progress.
# One pass, on RE2 when it is installed (linear; from a few dozen characters on, ~7x cheaper
# than Python's re, which tries every alternative at most positions of prose), else on re:
# no lookaround, so both engines run the same pattern, RE2's with Python's digits and spaces.
# RE2's word boundary is ASCII's: on ASCII text both find the same marks; a short text
# beyond ASCII is searched by re.
_PROGRESS: Final = (
    r"(?i)\d+(?:\.\d+)?\s?%|\b\d+\s?/\s?\d+\b|\b\d+\s+of\s+\d+\b"
    r"|\b(?:step|stage|phase|page|part|batch|epoch|iteration|chunk)\s+\d+"
    r"(?:\s*(?:of|/)\s*\d+)?"
    r"|\b(?:processed|completed|complete|done|finished|downloaded|uploaded|indexed|copied"
    r"|transferred|written|remaining|progress|count|counter)[\"']?\s*[:=]?\s*\d+(?:\.\d+)?"
    r"|\b(?:status|state|phase|stage)[\"']?\s*[:=]\s*[\"']?[a-z][\w-]*"
)


PROGRESS_MAX_CHARS: Final = 4096
"""Texts longer than this are not searched for progress marks: a status or a progress line
is short, and a long output (a file, a test log) changes for other reasons."""
_RE2_FROM_CHARS: Final = 256  # any text from here on: RE2 (its word boundary is ASCII's)
_RE2_ASCII_FROM_CHARS: Final = 32  # ASCII text: RE2 finds what re finds; below, re costs less


# Every alternative of _PROGRESS starts at a digit or at one of these letters (any case): a
# leading lookahead for them lets re skip the other positions at C speed (~2x on results).
_PROGRESS_STARTS: Final = "bcdefiprstuw"


@lru_cache(maxsize=1)
def _progress() -> tuple[re.Pattern[str], Callable[[str], list[str]]]:
    """:data:`_PROGRESS` compiled with re (behind a lookahead for the characters its matches
    start with: the same matches), and the ``findall`` of its RE2 spelling
    (:class:`~toolguard.hashing._regex.Rewriter`, ``google-re2``) when RE2 is installed."""
    compiled = re.compile(rf"(?i)(?=[\d{_PROGRESS_STARTS}])(?:{_PROGRESS.removeprefix('(?i)')})")
    from ._regex import UNICODE_DIGIT, UNICODE_SPACE, Rewriter, engine

    if engine() == "re":  # pragma: no cover - the wheel exists where CI runs
        return compiled, compiled.findall
    spelled = (_PROGRESS.replace(r"\d", UNICODE_DIGIT).replace(r"\s", UNICODE_SPACE)
               .replace(r"[\w-]", r"[\p{L}\p{N}_-]"))
    return compiled, Rewriter.compile(spelled).findall


_PROGRESS_KEYS: Final = frozenset({
    "progress", "percent", "percentage", "pct", "completed", "complete", "done", "finished",
    "processed", "remaining", "current", "step", "stage", "phase", "status", "state", "count",
    "position", "offset", "page",
})
_PROGRESS_DEPTH: Final = 8


def progress_marks(normalized: Any) -> tuple[str, ...]:
    """The explicit progress fields of a normalised result, in order: in text, each
    percentage (``42%``), ratio (``3/10``), ``step k [of n]``, ``k of n``, counter after a
    word saying what it counts (``processed: 120``) and status (``status: running``); in a
    JSON value, the scalar values of keys that name progress (``progress``, ``percent``,
    ``done``, ``remaining``, ``status``, ``state``, ``step``, ...), at any depth, as
    ``key=value``, and the marks of its strings (each of at most
    :data:`PROGRESS_MAX_CHARS` characters).

    Two results with other marks moved (a poll from 1% to 15%, a status from ``queued`` to
    ``running``); equal marks, or none, say nothing. Pure; linear in the result's size.
    """
    if type(normalized) is str and len(normalized) <= PROGRESS_MAX_CHARS:
        return _text_marks(normalized)
    marks: list[str] = []
    _collect(normalized, marks, 0)
    return tuple(marks)


@lru_cache(maxsize=1024)
def _text_marks(text: str) -> tuple[str, ...]:
    """:func:`progress_marks` of a short text, once per distinct text (a poll's outputs
    come back)."""
    marks: list[str] = []
    _collect(text, marks, 0)
    return tuple(marks)


def _collect(value: Any, marks: list[str], depth: int) -> None:
    if isinstance(value, str):
        if len(value) <= PROGRESS_MAX_CHARS:
            python, re2 = _progress()
            size = len(value)
            found = (re2(value) if size >= _RE2_FROM_CHARS or (
                size >= _RE2_ASCII_FROM_CHARS and value.isascii()) else python.findall(value))
            marks.extend(" ".join(m.lower().split()) for m in found)
    elif depth < _PROGRESS_DEPTH and isinstance(value, dict):
        for key, item in value.items():
            if (isinstance(key, str) and key.lower() in _PROGRESS_KEYS
                    and isinstance(item, (str, int, float, bool))):
                marks.append(f"{key}={item}")
            else:
                _collect(item, marks, depth + 1)
    elif depth < _PROGRESS_DEPTH and isinstance(value, list):
        for item in value:
            _collect(item, marks, depth + 1)
