"""Redaction reads nested arguments' strings only where one search of their JSON text says a
shape or JSON text may be inside (``toolguard.hashing._redact._plain_strings``): what it shows
is exactly what searching every string shows."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolguard.hashing._redact import (
    REDACTED,
    Redacted,
    _plain_strings,
    _value,
    redact,
)
from toolguard.policy._model import AuditPolicy

PATTERN = AuditPolicy().redact_pattern

# pieces that make a string change, or come close: needles in odd cases, the two non-ASCII
# characters str.lower() maps to ASCII, JSON text after white space, 40-character runs
PIECES = [
    "customer", "row", " ", "\n", "\t", "\u00a0", "\u2028", "{", "[", '"', "\\", "=", ":",
    "Bearer ", "TOKEN=", "api_\u212aey=", "pass", "password: ", "sk-", "AKIA", "ghp_",
    "eyJ", "://u:", "@", "İ", "\u212a", "redis-cl", "gl", "x" * 39, "A1b" * 14,
    "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", '{"token": "abc"}', '[1, {"secret": 2}]',
    '{"contrasena": 1}',
    "é", "\U0001f600",
]
texts = st.lists(st.sampled_from(PIECES), max_size=6).map("".join)
keys = st.sampled_from(["name", "email", "tags", "note", "Password", "x-api-key", "id"])
values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.floats(allow_nan=False) | texts,
    lambda inner: (st.lists(inner, max_size=4)
                   | st.dictionaries(keys, inner, max_size=4)),
    max_leaves=20)
arguments = st.dictionaries(keys, values, max_size=4)


def searched_everywhere(args: dict[str, Any], max_chars: int) -> dict[str, Any]:
    """Every string searched, whatever the screen says (the walk as it always ran)."""
    return {str(k): _value(str(k), v, PATTERN, max_chars, 1) for k, v in args.items()}


@settings(max_examples=400, deadline=None)
@given(arguments, st.sampled_from([8, 30, 200]))
def test_the_screen_never_changes_what_is_shown(args: dict[str, Any], max_chars: int) -> None:
    shown = redact(args, PATTERN, max_chars)
    assert isinstance(shown, Redacted)
    assert shown == searched_everywhere(args, max_chars)


@pytest.mark.parametrize("text", [
    "api_\u212aey=abcdef123456",  # KELVIN SIGN: str.lower() makes it "key"
    ' \u00a0{"token": "abcdef"}',  # JSON text after non-ASCII white space
    '\n[{"secret": "abcdef"}]',
    '\n {"contrasena": "abcdef"}',  # no needle: only the JSON text's key redacts it
    "Bearer abcdefgh1234",
    "id wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",  # an AWS secret key, no context
])
def test_a_string_deep_inside_is_still_redacted(text: str) -> None:
    args = {"rows": [{"name": "customer 1", "note": text}]}
    assert not _plain_strings(args)
    shown = redact(args, PATTERN, 200)
    assert shown["rows"][0]["note"] != text
    assert shown == searched_everywhere(args, 200)


def test_plain_records_are_screened_in_one_search() -> None:
    rows = [{"id": k, "name": f"customer {k:05d} of the northern sales region",
             "email": f"customer{k:05d}@example.com", "tags": ["active", f"cohort{k % 12}"],
             "password": "hunter2-s3cr3t"} for k in range(50)]
    args = {"table": "customers", "rows": rows}
    assert _plain_strings(args)
    shown = redact(args, PATTERN, 200)
    assert shown == searched_everywhere(args, 200)
    assert {row["password"] for row in shown["rows"]} == {REDACTED}
    assert shown.json() is not None


def test_flat_arguments_are_searched_string_by_string() -> None:
    args = {"path": "/srv/data/report.csv", "limit": 100}
    assert not _plain_strings(args)  # nothing nested: no serialization to gain by
    assert redact(args, PATTERN, 200).json() is None  # written inside each event instead


@dataclasses.dataclass
class Creds:
    token: str


def test_values_orjson_would_write_otherwise_are_searched_one_by_one() -> None:
    assert not _plain_strings({"x": [dt.date(2026, 1, 2)]})
    assert not _plain_strings({"x": [Creds("abc")]})
    assert not _plain_strings({"x": ["\ud800"]})  # a lone surrogate: orjson refuses it
    assert redact({"x": [Creds("abc")]}, PATTERN, 200) == {
        "x": [{"$type": "Creds", "token": REDACTED}]}
