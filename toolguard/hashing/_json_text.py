"""JSON text in: the model's argument text parsed exactly (:func:`parse_arguments`,
:func:`load_json`), integers beyond 64 bits kept, NaN and Infinity refused."""

from __future__ import annotations

import json
import math
from typing import Any, Final

import orjson

__all__ = ["ArgumentsError", "load_json", "parse_arguments"]

# Integers orjson cannot parse exactly (beyond 64 bits, 20+ digits): find runs of 19 digits
# by mapping every digit byte to "1" and searching for nineteen of them. bytes.translate with
# a 256-byte table: 0.4 µs on 60 B where str.translate with a dict took 2.1 µs (and a
# [0-9]{19} regex is 10x slower on 100 KB). UTF-8 continuation bytes are never ASCII digits.
_DIGITS_TO_1: Final = bytes.maketrans(b"0123456789", b"1111111111")
_LONG_RUN: Final = b"1" * 19


class ArgumentsError(ValueError):
    """Argument text is not a JSON object. ``position`` is the 0-based character offset of a
    parse error (or None), ``line``/``column`` 1-based."""

    def __init__(self, message: str, position: int | None = None,
                 line: int | None = None, column: int | None = None) -> None:
        self.position, self.line, self.column = position, line, column
        super().__init__(message)



def load_json(data: str | bytes) -> Any:
    """Parse JSON text with orjson, exactly: text with a run of 19 or more digits goes to the
    standard library's parser, which keeps integers beyond 64 bits exact (orjson would round
    them through a float). NaN and Infinity literals are rejected.

    Raises:
        json.JSONDecodeError: malformed JSON (``orjson.JSONDecodeError`` is a subclass), or
            bytes that are not UTF-8, with ``pos``, ``lineno`` and ``colno``.
    """
    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise json.JSONDecodeError(f"not UTF-8 text ({exc.reason})",
                                       data[: exc.start].decode("utf-8", "replace"),
                                       exc.start) from None
        raw = data
    else:
        text = data
        raw = data.encode("utf-8", "surrogatepass")
    if text.startswith("\ufeff"):  # a byte order mark, as some Windows tools write
        text = text[1:]
    if _LONG_RUN in raw.translate(_DIGITS_TO_1):
        return _std_loads(text)
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        if "surrogate" not in exc.msg:
            raise
        return _std_loads(text)  # a lone surrogate escape ("\ud800"): valid JSON text


def _std_loads(text: str) -> Any:
    """The standard library's parser, held to orjson's rules: NaN/Infinity literals and
    numbers beyond a float's range (``1e999``, which it would read as ``inf``) are refused,
    and so is nesting too deep to parse, each as a decode error."""
    try:
        return json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
    except json.JSONDecodeError:
        raise
    except RecursionError:
        raise json.JSONDecodeError("nested too deeply", text, 0) from None
    except ValueError as exc:  # from _reject_constant or _finite_float
        raise json.JSONDecodeError(str(exc), text, 0) from None


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:40]} is out of range")
    return value


def parse_arguments(text: str | bytes) -> dict[str, Any]:
    """Parse the model's argument text (e.g. OpenAI ``function.arguments``) into a dict.

    Empty or all-white-space text is ``{}`` (some models send ``""`` for no arguments).
    Text with a run of 19 or more digits goes to the standard library's parser, which keeps
    integers beyond 64 bits exact (orjson would round them through a float).

    Raises:
        ArgumentsError: malformed JSON (with position, line and column), NaN/Infinity
            literals, or a JSON value that is not an object.
    """
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    if not text.strip():
        return {}
    try:
        value = load_json(text)
    except json.JSONDecodeError as exc:  # orjson.JSONDecodeError subclasses it
        raise ArgumentsError(
            f"invalid JSON at line {exc.lineno}, column {exc.colno} (char {exc.pos}): {exc.msg}",
            exc.pos, exc.lineno, exc.colno,
        ) from None
    except ValueError as exc:
        raise ArgumentsError(f"invalid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ArgumentsError(f"arguments must be a JSON object, got {_json_type(value)}")
    return value


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _json_type(value: Any) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return "a number"
