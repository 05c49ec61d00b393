"""The canonical form of tool arguments and its hash (``toolguard.hashing._canonical``).

Golden vectors pin the exact canonical bytes and XXH3-128 digests of version
``CANONICAL_VERSION == 3`` in ``tests/golden/canonical_v3.json``. They change only together
with a ``CANONICAL_VERSION`` bump (which reseeds every digest): a failure here without a bump
means stored idempotency keys and ladder counts would silently stop matching.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import datetime as dt
import decimal
import enum
import json
import math
import random
import re
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

import orjson
import pydantic
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import toolguard as tg
from toolguard.hashing import _canonical, _dump
from toolguard.hashing._canonical import (
    CANONICAL_VERSION,
    args_hash,
    canonical_args,
    digest,
)
from toolguard.hashing._canonical_walk import canonicalize, normalize_path
from toolguard.hashing._json_text import ArgumentsError, parse_arguments
from toolguard.policy._model import ArgOptions

GOLDEN_FILE = Path(__file__).parents[1] / "golden" / f"canonical_v{CANONICAL_VERSION}.json"


# -- golden vectors ---------------------------------------------------------------------------
class Color(enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


@dataclasses.dataclass
class Point:
    x: int
    y: float
    label: str | None = None


class Item(pydantic.BaseModel):
    name: str
    qty: int
    note: str | None = None


# The golden vectors name these classes by module: the module they were recorded in, which
# stays their name wherever this file moves (spelled in parts so no rename rewrites it).
RECORDED_IN = ".".join(["tests", "test_canonical"])
Point.__module__ = Item.__module__ = RECORDED_IN


PATH_OPT = ArgOptions(normalize="path")
SPACE_OPT = ArgOptions(normalize="whitespace")
CASE_OPT = ArgOptions(case="insensitive")

# name -> (arguments, per-argument options); the expected bytes and hash are in GOLDEN_FILE.
GOLDEN: dict[str, tuple[dict[str, Any], dict[str, ArgOptions] | None]] = {
    "key_order": ({"b": 1, "a": 2, "C": 3, "_": 4, "aa": 5}, None),
    "dollar_keys_escaped": ({"q": {"$gt": 5, "$$x": 1}, "$top": "v", "price": "$100"}, None),
    "literal_tag_is_not_a_tag": ({"x": {"$bytes": "YWI="}, "n": {"$int": "100"}}, None),
    "nested_dicts": ({"z": {"y": {"x": 1, "w": [{"b": 1, "a": 2}]}}, "a": {}}, None),
    "null_dropped_at_top_kept_nested": ({"a": 1, "b": None, "c": {"d": None, "e": 2}}, None),
    "null_kept_in_arrays": ({"items": [None, 1, None, {"k": None}]}, None),
    "integral_float_is_int": ({"one": 1.0, "half": 2.5, "big": 1e16, "huge": 1e20}, None),
    "negative_zero": ({"z": -0.0, "zs": [-0.0, 0.0, 0]}, None),
    "bool_is_not_int": ({"t": True, "f": False, "one": 1, "zero": 0}, None),
    "int_beyond_2_53": ({"n": 2**53 + 1, "neg": -(2**53) - 1}, None),
    "int_64_bit_edges": ({"u64_max": 2**64 - 1, "i64_min": -(2**63)}, None),
    "int_beyond_64_bits": ({"n": 2**64, "neg": -(2**63) - 1, "big": 10**30}, None),
    "unicode": ({"s": "héllo wörld ✓ 日本語 🎉", "é": "key"}, None),
    "escapes": ({"s": 'q" b\\ n\n t\t c\x01 d\x7f /'}, None),
    "empty_object": ({}, None),
    "empty_containers": ({"o": {}, "a": []}, None),
    "tuple_is_list": ({"t": (1, "a", (2, 3))}, None),
    "sets_sorted": ({"s": {3, 1, 2}, "f": frozenset({"b", "a", "c"})}, None),
    "bytes": ({"b": b"\x00\x01hello\xff", "ba": bytearray(b"xy")}, None),
    "decimal": (
        {"d": decimal.Decimal("1.50"), "e": decimal.Decimal("100"),
         "neg": decimal.Decimal("-0.00120"), "zero": decimal.Decimal("-0.000")},
        None,
    ),
    "datetime_aware": (
        {"at": dt.datetime(2024, 5, 1, 14, 30, tzinfo=dt.timezone(dt.timedelta(hours=2)))},
        None,
    ),
    "datetime_naive_is_utc": ({"at": dt.datetime(2024, 5, 1, 12, 30, 0, 123456)}, None),
    "date_and_time": ({"d": dt.date(2024, 5, 1), "t": dt.time(9, 30, 15)}, None),
    "uuid": ({"id": uuid.UUID("12345678-ABCD-5678-1234-567812345678")}, None),
    "enum": ({"color": Color.RED, "level": Level.HIGH}, None),
    "path": ({"p": PurePosixPath("/tmp/a/b"), "w": PureWindowsPath("C:\\Users\\x")}, None),
    "dataclass": ({"pt": Point(x=1, y=2.0)}, None),
    "pydantic_model": ({"m": Item(name="x", qty=2)}, None),
    "option_ignore": (
        {"path": "a", "request_id": "r-123"}, {"request_id": ArgOptions(ignore=True)}
    ),
    "option_normalize_path": (
        {"path": "C:\\a\\.\\b\\", "paths": ["./x//y/", "/"], "other": "a//b"},
        {"path": PATH_OPT, "paths": PATH_OPT},
    ),
    "option_whitespace": ({"q": "  hello   \n world\t"}, {"q": SPACE_OPT}),
    "option_case_insensitive": (
        {"q": "HeLLo Straße", "tags": ["A", "b"]}, {"q": CASE_OPT, "tags": CASE_OPT}
    ),
}


def load_golden() -> dict[str, dict[str, str]]:
    data: dict[str, dict[str, str]] = json.loads(GOLDEN_FILE.read_text(encoding="utf-8"))
    return data


def test_golden_file_covers_exactly_the_vectors() -> None:
    assert sorted(load_golden()) == sorted(GOLDEN)


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_golden_vector(name: str) -> None:
    """Bytes and hash of the current version; they may change only with a CANONICAL_VERSION
    bump."""
    args, options = GOLDEN[name]
    expected = load_golden()[name]
    canonical = canonical_args(args, options)
    assert canonical.decode("utf-8") == expected["canonical"]
    assert args_hash(args, options) == expected["hash"]
    assert digest(canonical) == expected["hash"]
    assert tg.args_hash(args, options) == expected["hash"]  # the public name


@pytest.mark.parametrize("args", [
    {"$a": 1}, {"a": {"$b": [{"$c": 2}]}}, {"a": ["$x", {"$y": 1}]}, {"a$": "$", "b": "x$"},
    {"$$": {"$": 0}}, {"a": "$100", "b": ["$", "$$"]},
])
def test_dollar_keys_fast_path_and_walk_agree(args: dict[str, Any]) -> None:
    assert canonical_args(args) == _canonical._walked_bytes(args)  # the fast path finds every $-key


@given(st.one_of(
    st.binary(max_size=20),
    st.decimals(allow_nan=False, allow_infinity=False, places=3),
    st.integers(min_value=2**64, max_value=2**80),
    st.datetimes(),
    st.dates(),
))
def test_a_literal_object_never_hashes_as_the_tagged_value_it_spells(value: Any) -> None:
    tagged = canonicalize({"x": value})["x"]
    assert isinstance(tagged, dict) and next(iter(tagged)).startswith("$")
    literal = json.loads(orjson.dumps({"x": tagged}))  # the same object, as a model sends it
    assert args_hash(literal) != args_hash({"x": value})
    assert args_hash(parse_arguments(orjson.dumps(literal))) == args_hash(literal)


def test_version_seeds_the_digest() -> None:
    import xxhash

    data = b'{"a":1}'
    assert digest(data) == xxhash.xxh3_128_hexdigest(data, seed=CANONICAL_VERSION)
    assert digest(data) != xxhash.xxh3_128_hexdigest(data, seed=CANONICAL_VERSION + 1)
    assert len(digest(data)) == 32
    assert digest(data) == digest(data).lower()


@pytest.mark.parametrize(
    ("left", "right"),
    [
        ({"t": (1, (2, 3))}, {"t": [1, [2, 3]]}),
        ({"n": 1.0}, {"n": 1}),
        ({"n": -0.0}, {"n": 0}),
        ({"n": 2.0**70}, {"n": 2**70}),
        ({"a": 1, "b": None}, {"a": 1}),
        ({"s": {"b", "a"}}, {"s": ["a", "b"]}),
        ({"e": Color.RED}, {"e": "red"}),
        ({"u": uuid.UUID(int=1)}, {"u": "00000000-0000-0000-0000-000000000001"}),
        ({"at": dt.datetime(2024, 1, 1, 12)},
         {"at": dt.datetime(2024, 1, 1, 13, tzinfo=dt.timezone(dt.timedelta(hours=1)))}),
        ({"d": decimal.Decimal("1.0")}, {"d": decimal.Decimal("1")}),
    ],
)
def test_equivalent_spellings(left: dict[str, Any], right: dict[str, Any]) -> None:
    assert canonical_args(left) == canonical_args(right)
    assert args_hash(left) == args_hash(right)


@pytest.mark.parametrize(
    ("left", "right"),
    [
        ({"n": True}, {"n": 1}),
        ({"n": False}, {"n": 0}),
        ({"n": 1}, {"n": "1"}),
        ({"n": 2**53}, {"n": 2**53 + 1}),
        ({"a": [None]}, {"a": []}),
        ({"s": "a"}, {"s": "A"}),
        ({"b": b"x"}, {"b": "eA=="}),
        ({"p": PurePosixPath("a")}, {"p": "a"}),
        ({"d": dt.date(2024, 1, 1)}, {"d": "2024-01-01"}),
    ],
)
def test_distinct_values(left: dict[str, Any], right: dict[str, Any]) -> None:
    assert args_hash(left) != args_hash(right)


def test_json_text_and_dict_give_one_signature() -> None:
    def lookup(**kwargs: Any) -> str:
        return "ok"

    guard = tg.Guard(tools=[tg.readonly(lookup)])
    task = guard.task("t")
    as_dict = task.call("lookup", {"q": "x", "n": 1, "opt": None})
    as_text = task.call("lookup", '{ "n": 1.0,\n  "q": "x" }')
    assert as_dict.args_hash == as_text.args_hash == args_hash({"q": "x", "n": 1})
    assert as_text.count == 2


# -- hypothesis properties --------------------------------------------------------------------
TEXT = st.text(st.characters(codec="utf-8"), max_size=12)
FINITE = st.floats(allow_nan=False, allow_infinity=False)
INTS = st.one_of(
    st.integers(),
    st.integers(min_value=-(2**200), max_value=2**200),
    st.sampled_from([2**53, 2**53 + 1, 2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63),
                     -(2**63) - 1]),
)
LEAVES: st.SearchStrategy[Any] = st.none() | st.booleans() | INTS | FINITE | TEXT


def json_values(leaves: st.SearchStrategy[Any] = LEAVES) -> st.SearchStrategy[Any]:
    return st.recursive(
        leaves,
        lambda children: st.lists(children, max_size=5)
        | st.dictionaries(TEXT, children, max_size=5),
        max_leaves=25,
    )


JSON_ARGS: st.SearchStrategy[dict[str, Any]] = st.dictionaries(TEXT, json_values(), max_size=6)

PROPS = settings(max_examples=300, deadline=None)


def shuffled(value: Any, rnd: random.Random) -> Any:
    """The same value with every dict rebuilt in a random insertion order."""
    if isinstance(value, dict):
        items = list(value.items())
        rnd.shuffle(items)
        return {k: shuffled(v, rnd) for k, v in items}
    if isinstance(value, list):
        return [shuffled(v, rnd) for v in value]
    return value


@PROPS
@given(JSON_ARGS, st.randoms(use_true_random=False))
def test_key_order_never_changes_the_hash(args: dict[str, Any], rnd: random.Random) -> None:
    assert args_hash(shuffled(args, rnd)) == args_hash(args)


@PROPS
@given(
    JSON_ARGS,
    st.sampled_from([None, 0, 2, "\t", " "]),
    st.sampled_from([None, (",", ":"), (", ", ": "), (" , ", " :  ")]),
    st.booleans(),
)
def test_json_reserialization_never_changes_the_hash(
    args: dict[str, Any], indent: int | str | None, separators: tuple[str, str] | None,
    ensure_ascii: bool,
) -> None:
    text = json.dumps(args, indent=indent, separators=separators, ensure_ascii=ensure_ascii)
    reparsed = parse_arguments(text)
    assert args_hash(reparsed) == args_hash(args)
    assert args_hash(json.loads(text)) == args_hash(args)
    assert args_hash(parse_arguments(text.encode("utf-8"))) == args_hash(args)


def leaf_paths(value: Any, path: tuple[str | int, ...] = ()) -> Iterator[tuple[str | int, ...]]:
    if isinstance(value, dict):
        for k, v in value.items():
            yield from leaf_paths(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from leaf_paths(v, (*path, i))
    else:
        yield path


def get_at(value: Any, path: tuple[str | int, ...]) -> Any:
    for part in path:
        value = value[part]
    return value


def replaced(value: Any, path: tuple[str | int, ...], new: Any) -> Any:
    out = copy.deepcopy(value)
    parent = get_at(out, path[:-1])
    parent[path[-1]] = new
    return out


def canon_bytes(value: Any) -> bytes:
    return orjson.dumps(canonicalize(value), option=orjson.OPT_SORT_KEYS)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(JSON_ARGS, st.data())
def test_changing_one_leaf_changes_the_hash(args: dict[str, Any], data: st.DataObject) -> None:
    paths = list(leaf_paths(args))
    assume(paths)
    path = data.draw(st.sampled_from(paths), label="path")
    old = get_at(args, path)
    new = data.draw(LEAVES, label="new leaf")
    assume(canon_bytes(new) != canon_bytes(old))
    changed = replaced(args, path, new)
    assert canonical_args(changed) != canonical_args(args)
    assert args_hash(changed) != args_hash(args)


class Mood(enum.Enum):
    CALM = "calm"
    ONE = 1.0
    PAIR = (1, 2)


RICH_LEAVES: st.SearchStrategy[Any] = (
    LEAVES
    | st.tuples(INTS, TEXT)
    | st.frozensets(INTS, max_size=4)
    | st.sets(TEXT, max_size=4)
    | st.sampled_from(list(Mood))
    | st.sampled_from([Level.HIGH, Color.RED])
    | st.uuids()
    | st.binary(max_size=8)
    | st.decimals(allow_nan=False, allow_infinity=False, places=4)
    | st.dates()
    | st.times()
    | st.datetimes(min_value=dt.datetime(1900, 1, 1), max_value=dt.datetime(2200, 1, 1),
                   timezones=st.sampled_from([dt.timezone.utc,
                                              dt.timezone(dt.timedelta(hours=-5, minutes=-30))]))
    | st.datetimes()
    | st.builds(PurePosixPath, TEXT)
    | st.builds(Point, x=INTS, y=FINITE, label=st.none() | TEXT)
    | st.builds(Item, name=TEXT, qty=INTS, note=st.none() | TEXT)
)


@PROPS
@given(st.one_of(JSON_ARGS, st.dictionaries(TEXT, json_values(RICH_LEAVES), max_size=6)))
def test_fast_and_slow_paths_give_identical_bytes(args: dict[str, Any]) -> None:
    assert canonical_args(args) == _canonical._walked_bytes(args)


@PROPS
@given(
    st.one_of(
        st.integers(min_value=-(2**80), max_value=2**80).map(float),
        FINITE.filter(lambda f: f.is_integer()),
    ),
    st.booleans(),
)
def test_integral_floats_equal_their_int(value: float, nested: bool) -> None:
    assert value.is_integer()

    def wrap(v: Any) -> dict[str, Any]:
        return {"x": [{"v": v}]} if nested else {"x": v}

    assert canonical_args(wrap(value)) == canonical_args(wrap(int(value)))
    assert args_hash(wrap(value)) == args_hash(wrap(int(value)))


def object_paths(value: Any, path: tuple[str | int, ...] = ()
                 ) -> Iterator[tuple[str | int, ...]]:
    """The paths of the objects nested in ``value`` (not ``value`` itself)."""
    items = value.items() if isinstance(value, dict) else (
        enumerate(value) if isinstance(value, list) else ())
    for k, v in items:
        if isinstance(v, dict):
            yield (*path, k)
        yield from object_paths(v, (*path, k))


def with_top_nones(value: dict[str, Any], rnd: random.Random) -> dict[str, Any]:
    """The same arguments with extra None-valued top-level keys."""
    out: dict[str, Any] = {}
    for k, v in value.items():
        if rnd.random() < 0.5:
            out[f"{k}\x00none{rnd.random()}"] = None
        out[k] = v
    out["\x00always-none"] = None
    return out


@PROPS
@given(JSON_ARGS, st.randoms(use_true_random=False))
def test_top_level_none_values_equal_missing_keys(args: dict[str, Any],
                                                  rnd: random.Random) -> None:
    assert args_hash(with_top_nones(args, rnd)) == args_hash(args)


@PROPS
@given(JSON_ARGS, st.data())
def test_a_nested_null_is_a_value(args: dict[str, Any], data: st.DataObject) -> None:
    """``{"opts": {"dry_run": null}}`` reaches the tool with the null: not the same call as
    ``{"opts": {}}``, in the fast path (nulls only) and in the walk (a float to fold too)."""
    objects = list(object_paths(args))
    assume(objects)
    path = data.draw(st.sampled_from(objects), label="object")
    inner = get_at(args, path)
    assume("\x00n" not in inner)
    for extra in ({}, {"\x00f": 1.0}):
        nulled = replaced(args, path, {**inner, "\x00n": None, **extra})
        plain = replaced(args, path, {**inner, **extra})
        assert args_hash(nulled) != args_hash(plain)
        assert canonical_args(nulled) == _canonical._walked_bytes(nulled)


# -- errors -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("args", "path"),
    [
        ({"a": [0, {"b": math.nan}]}, "args.a[1].b"),
        ({"a": [0, {"b": math.inf}]}, "args.a[1].b"),
        ({"x": -math.inf}, "args.x"),
        ({"x": {"y": object()}}, "args.x.y"),
        ({"a": {1: "x"}}, "args.a[1]"),
        ({2: "x"}, "args[2]"),
        ({"pt": Point(x=1, y=math.nan)}, "args.pt.y"),
        ({"d": decimal.Decimal("NaN")}, "args.d"),
        ({"d": [decimal.Decimal("Infinity")]}, "args.d[0]"),
    ],
)
def test_no_canonical_form_names_the_path(args: dict[Any, Any], path: str) -> None:
    with pytest.raises(tg.CanonicalizationError) as info:
        canonical_args(args)
    assert info.value.path == path
    assert str(info.value).startswith(f"{path}: ")
    assert isinstance(info.value, TypeError)
    assert isinstance(info.value, tg.ToolGuardError)


def test_recursive_structure_is_a_canonicalization_error() -> None:
    loop: dict[str, Any] = {}
    loop["self"] = loop
    with pytest.raises(tg.CanonicalizationError) as info:
        canonical_args({"a": loop})
    assert info.value.path == "args"
    assert "nested too deeply" in str(info.value)


def nested_lists(depth: int) -> list[Any]:
    root: list[Any] = []
    inner = root
    for _ in range(depth):
        child: list[Any] = []
        inner.append(child)
        inner = child
    return root


def test_deep_but_finite_nesting_within_orjson_limit() -> None:
    assert canonical_args({"a": nested_lists(200)}) == (
        b'{"a":' + b"[" * 201 + b"]" * 201 + b"}"
    )


def test_deep_nesting_beyond_orjson_limit_is_a_canonicalization_error() -> None:
    with pytest.raises(tg.CanonicalizationError):
        canonical_args({"a": nested_lists(300)})


def test_deeply_nested_json_text_is_invalid_not_an_internal_error() -> None:
    def echo(**kwargs: Any) -> str:
        return "ok"

    task = tg.Guard(tools=[tg.readonly(echo)]).task("t")
    result = task.call("echo", '{"a": ' + "[" * 300 + "]" * 300 + "}")
    assert result.decision is tg.Decision.INVALID


def test_lone_surrogate_is_a_canonicalization_error() -> None:
    with pytest.raises(tg.CanonicalizationError) as info:
        canonical_args({"s": ["ok", "\ud800"]})
    assert info.value.path == "args.s[1]"


def test_lone_surrogate_argument_is_invalid_not_an_internal_error() -> None:
    def echo(**kwargs: Any) -> str:
        return "ok"

    task = tg.Guard(tools=[tg.readonly(echo)]).task("t")
    for raw in ({"s": "\ud800"}, '{"s": "\\ud800", "n": 123456789012345678901}'):
        result = task.call("echo", raw)
        assert result.decision is tg.Decision.INVALID
        assert "args.s" in result.reason


def test_decimal_canonical_form_is_exact_and_context_free() -> None:
    long = decimal.Decimal("1.0000000000000000000000000000001")
    assert args_hash({"d": long}) != args_hash({"d": decimal.Decimal(1)})
    assert canonical_args({"d": long}) == (
        b'{"d":{"$decimal":"10000000000000000000000000000001E-31"}}'
    )
    plain = canonical_args({"d": decimal.Decimal("1.2345")})
    with decimal.localcontext() as ctx:
        ctx.prec = 3
        assert canonical_args({"d": decimal.Decimal("1.2345")}) == plain


def test_out_of_range_datetime_is_a_canonicalization_error() -> None:
    early = dt.datetime(1, 1, 1, 0, 30, tzinfo=dt.timezone(dt.timedelta(hours=1)))
    with pytest.raises(tg.CanonicalizationError) as info:
        canonical_args({"at": [early]})
    assert info.value.path == "args.at[0]"


# -- parse_arguments --------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "position", "line", "column"),
    [
        ('{"a": 1,}', 7, 1, 8),
        ('{\n  "a": [1, 2\n}', 15, 3, 1),
        ('{"a": tru}', 6, 1, 7),
        # the exact-integer parser is the standard library's, whose position for a trailing
        # comma differs between Python versions (28 up to 3.12, 27 from 3.13): ask it
        ('{"n": 123456789012345678901,}', -1, 1, -1),
    ],
)
def test_malformed_json_reports_its_position(
    text: str, position: int, line: int, column: int
) -> None:
    if position < 0:
        with pytest.raises(json.JSONDecodeError) as stdlib:
            json.loads(text)
        position, column = stdlib.value.pos, stdlib.value.colno
        assert position in (27, 28)
    with pytest.raises(ArgumentsError) as info:
        parse_arguments(text)
    err = info.value
    assert (err.position, err.line, err.column) == (position, line, column)
    assert f"line {line}, column {column} (char {position})" in str(err)
    assert isinstance(err, ValueError)


@pytest.mark.parametrize(
    "text",
    ['{"a": NaN}', '{"a": Infinity}', '{"a": -Infinity}',
     '{"a": NaN, "n": 12345678901234567}'],
)
def test_nan_and_infinity_literals_are_refused(text: str) -> None:
    with pytest.raises(ArgumentsError):
        parse_arguments(text)


@pytest.mark.parametrize(
    ("text", "kind"),
    [("[1, 2]", "an array"), ('"x"', "a string"), ("null", "null"), ("3", "a number"),
     ("true", "a boolean")],
)
def test_arguments_must_be_an_object(text: str, kind: str) -> None:
    with pytest.raises(ArgumentsError, match=f"must be a JSON object, got {kind}$") as info:
        parse_arguments(text)
    assert info.value.position is None


@pytest.mark.parametrize("text", ["", "   ", "\n\t ", b"", b"  "])
def test_empty_text_is_no_arguments(text: str | bytes) -> None:
    assert parse_arguments(text) == {}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"n": 123456789012345678901234567890}', 123456789012345678901234567890),
        ('{"n": 9007199254740993}', 2**53 + 1),
        ('{"n": -18446744073709551617}', -(2**64) - 1),
    ],
)
def test_long_integers_parse_exactly(text: str, expected: int) -> None:
    assert parse_arguments(text) == {"n": expected}


def test_parsed_bytes_and_text_agree() -> None:
    text = '{"name": "Zoë", "n": [1, 2.5]}'
    assert parse_arguments(text.encode("utf-8")) == parse_arguments(text) == {
        "name": "Zoë", "n": [1, 2.5]
    }


# -- normalize_path ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("C:\\a\\.\\b\\", "C:/a/b"),
        ("src\\pkg\\mod.py", "src/pkg/mod.py"),
        ("./a/./b", "a/b"),
        ("a//b///c", "a/b/c"),
        ("/a/b/", "/a/b"),
        ("/", "/"),
        ("//", "/"),
        ("\\", "/"),
        ("/./", "/"),
        (".", "."),
        ("./", "."),
        ("a/b", "a/b"),
        ("/./a", "/a"),
        ("a/../b", "a/../b"),  # ".." is not resolved: that would need the file system
        ("a/.hidden/", "a/.hidden"),
    ],
)
def test_normalize_path(raw: str, expected: str) -> None:
    assert normalize_path(raw) == expected
    assert normalize_path(expected) == expected  # idempotent


def test_arg_options_apply_to_top_level_arguments_only() -> None:
    options = {"p": PATH_OPT}
    assert args_hash({"p": "./a//b/"}, options) == args_hash({"p": "a/b"}, options)
    assert args_hash({"p": "./a//b/"}) != args_hash({"p": "a/b"})
    nested = {"q": {"p": "./a//b/"}}
    assert args_hash(nested, options) == args_hash(nested)
    # options of an absent argument do nothing
    assert args_hash({"x": 1}, {"p": ArgOptions(ignore=True)}) == args_hash({"x": 1})


def test_options_do_not_mutate_the_caller_arguments() -> None:
    args: Mapping[str, Any] = {"p": "A//b", "id": "x"}
    before = dict(args)
    canonical_args(args, {"p": ArgOptions(normalize="path", case="insensitive"),
                          "id": ArgOptions(ignore=True)})
    assert args == before


@pytest.mark.parametrize("text", [
    # a run of 19+ digits sends the text to the standard library's parser, which must keep
    # orjson's rules: no RecursionError, no inf
    '{"a": ' + "[" * 3000 + "]" * 3000 + ', "n": 1234567890123456789}',
    '{"a": [1111111111111111111.0e999]}',
    '{"a": -1e999, "n": 1234567890123456789}',
])
def test_the_exact_integer_parser_refuses_what_orjson_refuses(text: str) -> None:
    if "[[[" in text:  # Python < 3.13 cannot parse 3,000 levels; 3.13 can (then: no form)
        with contextlib.suppress(ArgumentsError):
            parse_arguments(text)
    else:
        with pytest.raises(ArgumentsError):
            parse_arguments(text)

    @tg.readonly
    def t(a: list[Any], n: int = 0) -> str:
        return "ok"

    task = tg.Guard(tools=[t]).task("x")
    assert task.call("t", text).decision is tg.Decision.INVALID
    assert task.call_batch([("t", text)])[0].decision is tg.Decision.INVALID


def _integral_floats(value: Any) -> bool:
    if isinstance(value, float):
        return value.is_integer()
    if isinstance(value, dict):
        return any(_integral_floats(v) for v in value.values())
    if isinstance(value, list):
        return any(_integral_floats(v) for v in value)
    return False


@PROPS
@given(JSON_ARGS)
def test_no_integral_float_goes_unflagged(args: dict[str, Any]) -> None:
    """The engine converts integral floats for int hints only when this flag is set: it may
    be set without one, never unset with one; and its hash is args_hash."""
    from toolguard.hashing._canonical import args_hash_and_floats

    digest, floats = args_hash_and_floats(args)
    assert digest == args_hash(args)
    if _integral_floats(args):
        assert floats


def test_plain_arguments_are_not_flagged() -> None:
    from toolguard.hashing._canonical import args_hash_and_floats

    assert args_hash_and_floats({"a": [1, 2.5, "x.0"], "b": None, "c": {"d": 1e-3}})[1] is False
    assert args_hash_and_floats({"a": [1, 2.0]})[1] is True
    assert args_hash_and_floats({"a": 1e16})[1] is True


# -- long output: the null and integral-float searches run in RE2 (_canonical._Search) ------
_PAD = "p" * _dump.LONG_OUTPUT  # pushes any serialization past LONG_OUTPUT


@PROPS
@given(st.binary(max_size=40), st.sampled_from([b"null", b"1.0,", b"2.0]", b"-0.0}", b"nul",
                                                b".0", b"0.0 ", b"n\x00ull", b""]),
       st.binary(max_size=40), st.booleans())
def test_long_output_searches_agree_with_re(head: bytes, middle: bytes, tail: bytes,
                                            long: bool) -> None:
    out = head + middle + tail + (_PAD.encode() if long else b"")
    for search, pattern in ((_dump._LONG_NULL, rb"null"),
                            (_canonical._LONG_INTEGRAL, rb"\.0[,\]}]")):
        assert search(out) == (re.search(pattern, out) is not None)
    assert _dump._has_null(out) == (b"null" in out)


@PROPS
@given(JSON_ARGS)
def test_long_arguments_hash_as_the_slow_walk_does(args: dict[str, Any]) -> None:
    """Past LONG_OUTPUT the null / integral-float checks are RE2's: the canonical bytes are
    still exactly the full walk's (top-level nulls dropped, 1.0 folded to 1)."""
    padded = {**args, "\x00pad": _PAD}
    assert canonical_args(padded) == _canonical._walked_bytes(padded)
    assert len(canonical_args(padded)) >= _dump.LONG_OUTPUT
