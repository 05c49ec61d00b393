"""Redaction decided from the serialized arguments (``toolguard.hashing._redact._unchanged``):
when one search of their JSON text finds nothing redaction could change, the arguments are
shown as they are, copied from that text. What is shown must be exactly what the walk over
every key and string shows, for every input."""

from __future__ import annotations

import math
import re
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolguard.hashing._canonical import dump_for_hash
from toolguard.hashing._redact import (
    _RECENT,
    _RECENT_BYTES,
    _RECENT_TEXTS,
    MAX_DEPTH,
    SHOWN_DEPTH,
    Redacted,
    _decider,
    _secret_key,
    _unchanged,
    _value,
    fold_key,
    key_pattern,
    redact,
    shown_args,
)
from toolguard.hashing._regex import _re2
from toolguard.hashing._screens import _FOLDS_APART
from toolguard.policy._model import AuditPolicy

DEFAULT = AuditPolicy().redact_pattern
CUSTOM = AuditPolicy(redact=("pass.word", "clé", "x_2fa", "straße")).redact_pattern
COMPILED = key_pattern(("session_id", "my-secret"))
PATTERNS = [DEFAULT, CUSTOM, COMPILED, None]

# what fold_key removes, and characters whose folding RE2 and str.casefold may disagree on
SEPARATORS = ["_", "-", ".", " ", "\t", "\n", "\x0b", "\x1c", "\u00a0", "\u2028", "\u3000"]
ODD_LETTERS = ["\u212a", "\u017f", "\u00df", "\u0130", "\ufb01", "\u03c2", "\u13a0"]


def spellings(word: str) -> st.SearchStrategy[str]:
    """``word`` in random case, with separators and odd letters in between."""
    def spell(draw: st.DrawFn) -> str:
        out = []
        for char in word:
            out.append(char.upper() if draw(st.booleans()) else char)
            if draw(st.integers(0, 4)) == 0:
                out.append(draw(st.sampled_from(SEPARATORS + ODD_LETTERS)))
        return "".join(out)
    return st.composite(spell)()


WORDS = ["password", "api_key", "token", "session_id", "contraseña", "passwd", "db_pass",
         "pass.word", "passXword", "clé", "CLÉ", "x_2fa", "strasse", "straße", "my-secret",
         "name", "email", "tags", "id", "k", "sort_key", "keyword", "s"]
keys = st.sampled_from(WORDS).flatmap(spellings) | st.sampled_from(WORDS)

PIECES = [
    "customer", "row", " ", "\n", "\t", "\u00a0", "\x00", "\x1f", "{", "[", '"', "\\", "=",
    ":", "/", "Bearer ", "TOKEN=", "pass", "sk-", "AKIA", "ghp_", "eyJ", "://u:", "@", "gl",
    "x" * 39, "A1b" * 14, "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", '{"token": "abc"}',
    '[1, {"secret": 2}]', '{"contrasena": 1}', "é", "\U0001f600", "null", '":', *ODD_LETTERS,
    "y" * 190, "\\u0041", "password", "P_a-s.s w\tord",
]
texts = st.lists(st.sampled_from(PIECES), max_size=8).map("".join)
scalars = (st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | texts)
values = st.recursive(
    scalars,
    lambda inner: (st.lists(inner, max_size=4) | st.lists(inner, max_size=3).map(tuple)
                   | st.dictionaries(keys, inner, max_size=4)),
    max_leaves=24)
arguments = st.dictionaries(keys, values, max_size=5)


def walked(args: dict[str, Any], pattern: Any, max_chars: int) -> dict[str, Any]:
    """Every key and string read one by one (the walk as it always ran)."""
    return {str(k): _value(str(k), v, pattern, max_chars, 1) for k, v in args.items()}


def same(a: Any, b: Any) -> bool:
    """Equal, with the same types, key order and NaNs (``repr`` tells them all)."""
    return repr(a) == repr(b)


@settings(max_examples=1500, deadline=None)
@given(arguments, st.sampled_from(PATTERNS), st.sampled_from([8, 30, 200, 2000]))
def test_what_is_decided_from_the_text_is_what_the_walk_shows(
        args: dict[str, Any], pattern: Any, max_chars: int) -> None:
    expected = walked(args, pattern, max_chars)
    shown = redact(args, pattern, max_chars)
    assert isinstance(shown, Redacted)
    assert same(shown, expected)
    nested = any(type(v) not in (str, int, float, bool, type(None)) for v in args.values())
    text, unchanged = _unchanged(args, pattern, max_chars, nested)
    if unchanged:  # decided unchanged: the walk shows the arguments as their JSON text reads
        assert same(expected, orjson.loads(text) if nested else args)
        assert text == orjson.dumps(expected)
        assert shown.json() == (text if nested else None)


@settings(max_examples=1000, deadline=None)
@given(keys, st.sampled_from(PATTERNS[:3]))
def test_a_key_the_pattern_matches_is_never_decided_unchanged(key: str, pattern: Any) -> None:
    for args in ({key: "v"}, {"rows": [{key: 1}]}):
        if _secret_key(key, pattern):
            assert not _unchanged(args, pattern, 200, "rows" in args)[1]


def test_every_folded_spelling_of_the_default_words_is_caught() -> None:
    words = ["password", "api_key", "access_key", "session_id", "contraseña", "db_pass"]
    for word in words:
        letters = fold_key(word)
        for key in (word.upper(), "_".join(letters), " ".join(letters.upper()),
                    "\t".join(letters), "\u3000".join(letters), f"x-{letters.title()}-y"):
            assert _secret_key(key, DEFAULT), key
            assert not _unchanged({"rows": [{key: "v"}]}, DEFAULT, 200, True)[1], key
            assert redact({"rows": [{key: "v"}]}, DEFAULT, 200) == {
                "rows": [{key: "[REDACTED]"}]}


def test_plain_records_are_copied_from_their_text_and_kept_as_it() -> None:
    rows = [{"id": k, "name": f"customer {k:05d}", "score": k / 7, "tags": ("a", "b")}
            for k in range(40)]
    args = {"table": "customers", "rows": rows}
    text, unchanged = _unchanged(args, DEFAULT, 200, True)
    assert unchanged and text == orjson.dumps(args)
    shown = redact(args, DEFAULT, 200)
    assert shown.json() == text
    assert same(shown, walked(args, DEFAULT, 200))  # tuples shown as lists, as the walk does
    rows[0]["name"] = "changed after the event"  # the tool's arguments, not the event's
    assert shown["rows"][0]["name"] == "customer 00000"


def test_flat_arguments_are_shown_as_a_copy_written_inside_each_event() -> None:
    args = {"path": "/srv/data/report.csv", "limit": 100, "recursive": False,
            "ratio": math.nan}
    assert _unchanged(args, DEFAULT, 200, False)[1]
    shown = redact(args, DEFAULT, 200)
    assert shown is not args and same(shown, args)
    assert shown.json() is None


@pytest.mark.parametrize("args", [
    {"rows": [{"ratio": math.nan}]},  # written as null: the copy would show None
    {"rows": [{"note": None}]},
    {"rows": [{"note": "x" * 201}]},  # longer than max_value_chars
    {"rows": [{"note": '\\"' * 101}]},  # escapes count as one character each
    {"rows": [{"note": "Bearer abcdefgh1234"}]},
    {"rows": [{"note": ' {"a": 1}'}]},
    {"rows": [{"X-Api-Key": "k"}]},
    {"rows": [{"note": "stra\u00dfe"}]},  # a character folded apart: walked
    {"rows": [(1, 2)], "n": 2**64},  # beyond 64 bits: orjson refuses it
    {"rows": [{1: "non-string key"}]},
])
def test_what_redaction_may_change_goes_to_the_walk(args: dict[str, Any]) -> None:
    assert not _unchanged(args, DEFAULT, 200, True)[1]
    assert same(redact(args, DEFAULT, 200), walked(args, DEFAULT, 200))


def test_strings_of_exactly_max_chars_are_decided_unchanged() -> None:
    assert _unchanged({"rows": [{"note": "ab " * 66 + "ab"}]}, DEFAULT, 200, True)[1]
    assert _unchanged({"rows": [{"note": "é" * 200}]}, DEFAULT, 200, True)[1]
    assert not _unchanged({"rows": [{"note": "ab " * 67}]}, DEFAULT, 200, True)[1]


def nested(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize("levels", [MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1, MAX_DEPTH + 2])
def test_nesting_at_the_limit(levels: int) -> None:
    args = {"deep": nested(levels)}
    assert _unchanged(args, DEFAULT, 200, True)[1] == (levels <= MAX_DEPTH)
    assert same(redact(args, DEFAULT, 200), walked(args, DEFAULT, 200))


def test_a_pattern_that_is_not_a_plain_word_is_always_walked() -> None:
    pattern = AuditPolicy(redact=("^tok[0-9]+$",)).redact_pattern
    assert _decider(pattern, 200) is False
    args = {"rows": [{"tok12": "v", "name": "n"}]}
    assert not _unchanged(args, pattern, 200, True)[1]
    assert redact(args, pattern, 200) == {"rows": [{"tok12": "[REDACTED]", "name": "n"}]}


def folded_apart() -> set[int]:
    return {i for i in range(0x80, 0x110000)
            if len(c := chr(i).casefold()) != 1 or c != chr(i).lower() or c.isascii()}


def test_the_characters_folded_apart_are_those_of_this_python() -> None:
    listed: set[int] = set()
    for item in _FOLDS_APART:
        first, last = (item, item) if isinstance(item, int) else item
        listed.update(range(first, last + 1))
    assert folded_apart() <= listed


def test_re2_ignores_case_as_str_lower_for_every_other_character() -> None:
    """Every other cased character is matched by RE2's ``(?i)`` of its ``str.lower()``: what
    a pattern's letter matches in a folded key, it matches in the key as written."""
    binding = _re2()
    apart = folded_apart()
    cased = [chr(i) for i in range(0x80, 0x30000)
             if i not in apart and chr(i).lower() != chr(i)]
    assert len(cased) > 1000
    options = binding.RE2.Options()
    unanchored = binding.RE2.Anchor.ANCHOR_BOTH
    for char in cased:
        regexp = binding.RE2(f"(?i:{re.escape(char.lower())})".encode(), options)
        data = char.encode()
        assert regexp.Match(unanchored, data, 0, len(data))[0][0] == 0, hex(ord(char))


def sorted_keys(value: Any) -> Any:
    """``value`` with the keys of every dict in sorted order (tuples kept as they are)."""
    if isinstance(value, dict):
        return {k: sorted_keys(value[k]) for k in sorted(value)}
    if isinstance(value, (list, tuple)):
        return type(value)(sorted_keys(v) for v in value)
    return value


@settings(max_examples=1500, deadline=None)
@given(arguments, st.sampled_from(PATTERNS), st.sampled_from([8, 30, 200, 2000]))
def test_what_events_show_from_the_hash_serialization_is_what_the_walk_shows(
        args: dict[str, Any], pattern: Any, max_chars: int) -> None:
    """The engine hands redaction the canonical hash's first serialization (keys sorted,
    bounded to :data:`SHOWN_DEPTH`): what events show from it is what the walk shows, up to
    key order; a text is searched once and decided alike when it comes again."""
    expected = walked(args, pattern, max_chars)
    text = dump_for_hash(args, SHOWN_DEPTH)
    for _ in range(2):  # the second time the text may be one decided already
        shown = shown_args(args, pattern, max_chars, text)
        if isinstance(shown, bytes):
            assert same(sorted_keys(orjson.loads(shown)), sorted_keys(expected))
            assert shown == text or shown == orjson.dumps(expected)
        else:
            assert same(shown, expected)
    nested = any(type(v) not in (str, int, float, bool, type(None)) for v in args.values())
    assert _unchanged(args, pattern, max_chars, nested, text)[1] == _unchanged(
        args, pattern, max_chars, nested)[1]


def test_a_text_is_remembered_only_once_decided_unchanged() -> None:
    clean = {"rows": [{"id": 1, "name": "ann"}]}
    secret = {"rows": [{"id": 1, "password": "hunter2"}]}
    _RECENT.clear()
    for args in (secret, secret):
        text = dump_for_hash(args, SHOWN_DEPTH)
        assert not _unchanged(args, DEFAULT, 200, True, text)[1]
        assert shown_args(args, DEFAULT, 200, text) == orjson.dumps(
            {"rows": [{"id": 1, "password": "[REDACTED]"}]})
    assert not _RECENT
    text = dump_for_hash(clean, SHOWN_DEPTH)
    assert _unchanged(clean, DEFAULT, 200, True, text)[1]
    assert _RECENT[DEFAULT, 200] == (text,)
    assert _unchanged(clean, DEFAULT, 200, True, bytes(text))[1]  # equal bytes, another object
    assert _RECENT.get((DEFAULT, 30)) is None  # another max_chars decides again


def test_remembered_texts_are_bounded() -> None:
    _RECENT.clear()
    for k in range(_RECENT_TEXTS + 3):
        args = {"rows": [{"id": k}]}
        assert _unchanged(args, DEFAULT, 200, True)[1]
    kept = _RECENT[DEFAULT, 200]
    assert len(kept) == _RECENT_TEXTS and kept[0] == b'{"rows":[{"id":10}]}'
    big = {"rows": ["ab " * 50] * (_RECENT_BYTES // 150)}  # more than the bytes kept
    assert _unchanged(big, DEFAULT, 200, True)[1]
    assert all(len(text) < _RECENT_BYTES for text in _RECENT[DEFAULT, 200])
