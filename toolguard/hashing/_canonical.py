"""Canonical arguments and their hash: when are two tool calls "the same call"?

A call's *signature* is its tool name plus :func:`args_hash` of its arguments. The canonical
form follows RFC 8785 (JSON Canonicalization Scheme) in spirit: UTF-8 JSON, object keys
sorted, no insignificant white space; and adds the normalizations of DESIGN.md §2 and the
core-engine issue:

* object keys sorted recursively, by Unicode code point (RFC 8785 sorts by UTF-16 code
  units; the two differ only between astral-plane characters and U+E000-U+FFFF);
* a top-level argument whose value is ``None``/null is dropped: an omitted optional argument
  and an explicit null are one call, and the guard hands the tool its default for both
  (``toolguard.engine._prepare``); a null anywhere deeper (``{"opts": {"dry_run": null}}``, an
  array item) is a value the tool receives, and is kept (version 3);
* numbers: ``1`` and ``1.0`` are equal (integral floats become integers, exactly, via
  ``int(float)``), ``-0.0`` equals ``0``, ``True`` differs from ``1``, integers are exact at
  any size (never through a float; beyond 64 bits they take the tagged form
  ``{"$int": "<digits>"}``), NaN and ±Infinity are rejected;
* tuples equal lists; sets and frozensets become arrays sorted by their elements' canonical
  bytes;
* :class:`enum.Enum` members canonicalize as their value and :class:`uuid.UUID` as its
  lowercase hyphenated string: the forms a model sends in JSON, so a typed direct call and
  the same call dispatched from JSON text share one signature;
* tagged objects for values whose JSON form is lossy or ambiguous: ``{"$bytes": base64}``,
  ``{"$decimal": "<digits>E<exponent>"}`` (exact: ``Decimal("1.50")`` → ``"15E-1"``),
  ``{"$datetime": ISO-8601 in UTC}`` (naive datetimes
  are taken as UTC), ``{"$date": ...}``, ``{"$time": ...}``, ``{"$path": posix}``,
  ``{"$dataclass": "module.Qualname", "fields": {...}}`` and
  ``{"$model": "module.Qualname", "fields": {...}}`` (pydantic models);
* an object key the caller wrote with a leading ``$`` gets one more (``{"$gt": 5}`` →
  ``{"$$gt": 5}``), so no literal object is ever mistaken for a tagged value: the JSON text
  ``{"$bytes": "YWI="}`` and the Python value ``b"ab"`` are different calls (version 2; in
  version 1 they collided);
* anything else raises :class:`toolguard.CanonicalizationError` naming the argument path;
  there is no fallback to ``repr``.

Per-argument options from the policy (:class:`toolguard.policy.ArgOptions`) apply to
top-level arguments first: ``ignore`` drops one, ``normalize = "path"`` / ``"whitespace"``
and ``case = "insensitive"`` rewrite string values (and strings in a list value).

The digest is XXH3-128 (``xxhash.xxh3_128``) of the canonical bytes, seeded with
:data:`CANONICAL_VERSION`, as 32 lowercase hex digits: a change of the canonical form bumps the
version and so changes every digest instead of silently colliding with old ones. 128 bits
keep accidental collisions of idempotency keys negligible (≈1e-26 for a million calls).

Speed: JSON-native arguments (what a model sends) are serialized by orjson in one C pass with
sorted keys; only when the output shows something to normalize (a null, an integral or
exponent float, a value orjson cannot take) does the Python walk run. Both paths end in the
same orjson serialization of the same normalized value, so they give identical bytes.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

import orjson
import xxhash

from toolguard._errors import CanonicalizationError

from ._canonical_walk import apply_arg_options, canonicalize
from ._dump import (
    _LONG_NULL,
    _NULL,
    LONG_OUTPUT,
    ORJSON_DEPTH,
    _has_null,
    _LongSearch,
    dumps_within,
)

if TYPE_CHECKING:
    from toolguard.policy._model import ArgOptions

__all__ = [
    "CANONICAL_VERSION",
    "RESULT_DIGEST_VERSION",
    "args_hash",
    "args_hash_and_floats",
    "canonical_args",
    "digest",
    "dump_for_hash",
    "hash_args",
    "value_digest",
]

CANONICAL_VERSION: Final = 3
"""Version of the canonical form; the hash seed. Bump it whenever the bytes would change.

3: a null nested in an object is kept (the tool receives it; ``{"dry_run": null}`` inside
an argument is not the same call as ``{}``); only top-level nulls are dropped. 2: object
keys with a leading ``$`` are escaped (one more ``$``), so literal objects never collide with
the tagged forms. 1: the first form."""

_OPTS: Final = (
    orjson.OPT_SORT_KEYS
    | orjson.OPT_PASSTHROUGH_DATETIME
    | orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_SUBCLASS
)
# Output that may need normalizing: a null (dropped from objects; also what orjson writes for
# NaN), an integral float ("1.0", "-0.0") or a large one in exponent form ("1e+16"; a negative
# exponent is never integral). Separate searches, each behind a one-byte prefilter (memchr
# speed), not one alternation regex: measured 5x faster on 100 KB. re finds the literal
# b"null" about 1.7x faster than bytes.__contains__ in JSON text, which is full of "l"s.


_INTEGRAL: Final = re.compile(rb"\.0[,\]}]")


_LONG_INTEGRAL: Final = _LongSearch(_INTEGRAL)


def canonical_args(
    args: Mapping[str, Any], options: Mapping[str, ArgOptions] | None = None
) -> bytes:
    """The canonical bytes of a call's arguments (UTF-8 JSON, sorted keys, no white space).

    Args:
        args: argument name → value, already bound through the tool's signature.
        options: per-argument policy options (``ignore``, ``normalize``, ``case``).

    Raises:
        CanonicalizationError: an argument has no canonical form (the error names its path).
    """
    return _canonical(args, options)[0]


def args_hash_and_floats(
    args: Mapping[str, Any], options: Mapping[str, ArgOptions] | None = None
) -> tuple[str, bool]:
    """:func:`args_hash`, and whether ``args`` may hold an integral float (``5.0``) anywhere:
    ``False`` only when the serialized arguments showed none, so the engine skips converting
    them for ``int`` hints (a walk of every argument, 400 µs on 100 KB) on almost every call.

    Raises:
        CanonicalizationError: an argument has no canonical form.
    """
    out, floats, _ = _canonical(args, options)
    return _hexdigest(out, CANONICAL_VERSION), floats


def hash_args(args: Mapping[str, Any], options: Mapping[str, ArgOptions] | None = None,
              dumped: bytes = b"") -> tuple[str, bool, int]:
    """:func:`args_hash_and_floats`, and the size in bytes of the canonical form when it is
    the plain serialization of ``args`` (no null dropped, no number or key rewritten, no
    option applied; else 0): then the hash determines ``args`` exactly, up to key order,
    and the engine keys its memo of validated arguments by it. ``dumped``: the bytes of
    :func:`dump_for_hash` of these very ``args`` when the caller made them already (one
    serialization of 100 KB less); used only without ``options``.

    Raises:
        CanonicalizationError: an argument has no canonical form.
    """
    out, floats, plain = _canonical(args, options, dumped)
    return _hexdigest(out, CANONICAL_VERSION), floats, len(out) if plain else 0


SCALARS: Final = frozenset({str, int, float, bool, type(None)})
"""The types of a JSON scalar as parsed: arguments whose values are all of them are flat."""


def dump_for_hash(args: Mapping[str, Any], depth: int | None = None) -> bytes:
    """The first serialization :func:`hash_args` makes of ``args`` (no argument options),
    or ``b""`` when orjson cannot take it natively (the hash then walks) or, given
    ``depth``, when ``args`` is nested deeper than ``depth`` levels: nested arguments are
    serialized inside ``254 - depth`` one-item arrays, so that orjson's own depth limit
    bounds them (in C; the wrapping is cut off again). Flat arguments (every value a
    :data:`SCALARS` one) are serialized as they are."""
    wrap = 0
    if depth is not None:
        for value in args.values():
            if type(value) not in SCALARS:
                wrap = ORJSON_DEPTH - depth
                if wrap < 0:
                    return b""
                break
    return dumps_within(args, wrap, _OPTS)


def _canonical(args: Mapping[str, Any], options: Mapping[str, ArgOptions] | None,
               dumped: bytes = b"") -> tuple[bytes, bool, bool]:
    """The canonical bytes; whether an integral float may be among the values (true
    whenever the output was not read as plain: the walk ran, or options rewrote values);
    and whether the bytes are the plain serialization of ``args`` (nothing normalized).
    ``dumped``: :func:`dump_for_hash` of ``args`` made already (no options)."""
    if options:
        args = apply_arg_options(args, options)
        out = dump_for_hash(args)
    else:
        out = dumped or dump_for_hash(args)
    if not out:
        return _walked_bytes(args), True, False
    # One search for each thing to normalize (each is ~50 µs on 100 KB, half the dump
    # itself: none is repeated). Something besides nulls takes the walk: an integral float
    # (1.0, -0.0: a "." before it, 1e+16: an exponent) or an object key starting with "$".
    # Int membership tests are memchr: 0.03 µs on small output, so they screen the regex
    # searches (~1.2k instructions each; a bytes membership test costs twice that).
    short = len(out) < LONG_OUTPUT
    if ((43 in out and b"e+" in out)
            or ((46 in out and _INTEGRAL.search(out) is not None) if short
                else _LONG_INTEGRAL(out))
            or (36 in out and _dollar_key(out))):
        return _walked_bytes(args), True, False
    if not ((110 in out and _NULL.search(out) is not None) if short  # _has_null, inline
            else _LONG_NULL(out)):
        return out, bool(options), not options  # the usual case: nothing to normalize
    # Nulls and nothing else to normalize: the common case of models that send every
    # optional argument (OpenAI strict mode sends null for each). Drop the top-level
    # ones from the JSON-native value orjson just took and serialize again: 4 µs on
    # 1 KB where the full walk takes 36 µs. A null left (nested, which is a value the
    # tool receives and is kept; or a NaN, which orjson writes as null and which has
    # no canonical form) takes the walk, which tells them apart.
    top = _without_top_nulls(args)
    if top is not None and top is not args:
        out = orjson.dumps(top, option=orjson.OPT_SORT_KEYS)
        if not _has_null(out):
            return out, bool(options), False
    return _walked_bytes(args), True, False


def _without_top_nulls(args: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """``args`` itself when no top-level value serializes as null; else a copy without the
    ``None`` ones; ``None`` when an Enum member whose value is None (or an Enum) is among
    them: orjson writes it as its value, and only the walk tells whether that is null."""
    out: dict[str, Any] | None = None
    for value in args.values():
        if value is None:
            if out is None:
                out = {k: v for k, v in args.items() if v is not None}
        elif isinstance(value, enum.Enum) and (value.value is None
                                               or isinstance(value.value, enum.Enum)):
            return None
    return args if out is None else out


def _walked_bytes(args: Mapping[str, Any]) -> bytes:
    """The canonical bytes through the full Python walk (:func:`canonicalize`), without the
    top-level nulls."""
    walked = canonicalize(args)  # outside the try: CanonicalizationError is a TypeError
    normalized = {k: v for k, v in walked.items() if v is not None}
    try:
        return orjson.dumps(normalized, option=orjson.OPT_SORT_KEYS)
    except (TypeError, orjson.JSONEncodeError) as exc:  # orjson's depth limit (255)
        raise CanonicalizationError("args", f"cannot serialize: {exc}") from None


_hexdigest: Final = xxhash.xxh3_128_hexdigest


def _dollar_key(out: bytes) -> bool:
    """Whether serialized ``out`` may hold an object key starting with ``$`` (a ``"$`` after
    ``{`` or ``,``; an array element there is a false positive, which only costs the walk)."""
    at = out.find(b'"$')
    while at > 0:
        if out[at - 1] in b"{,":
            return True
        at = out.find(b'"$', at + 2)
    return False


def digest(data: bytes) -> str:
    """XXH3-128 of ``data`` seeded with :data:`CANONICAL_VERSION`, 32 hex digits."""
    return _hexdigest(data, CANONICAL_VERSION)


def args_hash(args: Mapping[str, Any], options: Mapping[str, ArgOptions] | None = None) -> str:
    """The canonical arguments hash: ``digest(canonical_args(args, options))``.

    Raises:
        CanonicalizationError: an argument has no canonical form.
    """
    return _hexdigest(canonical_args(args, options), CANONICAL_VERSION)  # = digest(...)


RESULT_DIGEST_VERSION: Final = 2
"""Version of :func:`value_digest`; its seed. 2: the JSON type is part of the digest."""


def value_digest(value: Any) -> str:
    """A digest of a tool *result*, to tell "the output changed" from "the same output again".

    The digest is typed: a text result is tagged ``s``, bytes ``b`` and any other value ``j``
    with its JSON text (sorted keys), so ``1`` and ``"1"``, ``None`` and ``"null"``, ``True``
    and ``"true"``, ``{"a": 1}`` and the text ``'{"a":1}'`` all differ. Values orjson cannot
    take go by their canonical form, falling back to ``repr`` (tagged ``r``; results, unlike
    arguments, may be arbitrary objects; this only compares them). XXH3-64 seeded with
    :data:`RESULT_DIGEST_VERSION`, 16 hex digits.
    """
    if isinstance(value, str):
        data = b"s" + value.encode("utf-8", errors="surrogatepass")
    elif isinstance(value, bytes):
        data = b"b" + value
    else:
        try:
            data = b"j" + orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
        except (TypeError, orjson.JSONEncodeError):
            try:
                data = b"j" + orjson.dumps(canonicalize(value), option=orjson.OPT_SORT_KEYS)
            except (CanonicalizationError, TypeError):  # TypeError: nested past orjson's 255
                try:
                    data = b"r" + repr(value).encode("utf-8", errors="replace")
                except Exception:  # noqa: BLE001 - a foreign __repr__ failed: compare by identity
                    data = f"r{type(value).__qualname__}@{id(value)}".encode()
    return xxhash.xxh3_64_hexdigest(data, RESULT_DIGEST_VERSION)
