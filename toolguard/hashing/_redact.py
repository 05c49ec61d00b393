"""Redaction: what every output channel (audit events, logs, halts, validation messages,
``toolguard replay``) shows of a call's arguments.

Two nets, both applied at any depth:

* **key names**: a value whose key matches ``audit.redact`` is replaced whole. Keys are
  matched as written and folded (case and the separators ``_``, ``-``, ``.``, `` `` removed),
  so ``api_key`` also catches ``apiKey``, ``X-Api-Key`` and ``API.KEY``;
* **token shapes** in string values: credentials whose shape gives them away, wherever they
  are (a ``Bearer`` header inside a ``curl`` command, a key in a URL). The shapes mirror the
  regex plugins of Yelp's detect-secrets (``AWSKeyDetector``, ``GitHubTokenDetector``,
  ``GitLabTokenDetector``, ``JwtTokenDetector``, ``PrivateKeyDetector``, ``SlackDetector``,
  ``StripeDetector``, ``BasicAuthDetector``, and the ``KeywordDetector`` key names), plus
  Google ``AIza…`` keys, Hugging Face ``hf_…`` tokens, SendGrid ``SG.…`` keys, Stripe
  ``whsec_…`` webhook secrets, Azure ``AccountKey=``, a password after a command-line flag
  (``--password X``) or glued to ``-p`` (``mysql -pX``, ``sshpass -p X``), a URL password
  with no user (``redis://:X@host``) and a 40-character AWS secret key with no context;
  ``tests/hashing/test_redaction.py`` checks them against that library's own patterns. The library
  itself is not imported: it costs about 0.2 s and pulls in ``requests``.

A string that holds a JSON object or array (a ``body`` argument) is parsed and redacted as
arguments, then written back as compact JSON. Nesting deeper than :data:`MAX_DEPTH` is cut
(``"[nested too deeply]"``), so no argument can make redaction recurse without bound.

The shapes run on RE2 (:class:`toolguard.hashing._regex.Rewriter`): the time is linear in the
text whatever it holds, since the text is the model's (Python's ``re`` rescanned to the end
of the text from each ``eyJ`` of ``eyJ-eyJ-…``: quadratic).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any, Final, Protocol

import orjson

from ._canonical_walk import fields_of
from ._dump import _has_null, dumps_within
from ._screens import _SEPARATORS, _SOURCES, _WORD, _key_screen, _shapes_screen
from ._shapes import _ALWAYS_FROM, _ANY_NEEDLE, _Shape, _shapes

__all__ = [
    "DEEP",
    "MAX_DEPTH",
    "REDACTED",
    "SHOWN_DEPTH",
    "KeyPattern",
    "Redacted",
    "fold_key",
    "key_pattern",
    "key_patterns",
    "redact",
    "redact_json_text",
    "redact_text",
    "secrets_in",
    "shown_args",
]

REDACTED: Final = "[REDACTED]"
DEEP: Final = "[nested too deeply]"
MAX_DEPTH: Final = 64  # levels of containers shown; deeper ones are cut
_JSON_TEXT_LIMIT: Final = 1 << 20  # bytes of a JSON-text argument parsed for redaction




def fold_key(key: str) -> str:
    """``key`` lower-cased without separators: ``X-Api-Key`` → ``xapikey``."""
    return _SEPARATORS.sub("", key).casefold()


class KeyPattern(Protocol):
    """What redaction searches key names with: a compiled ``re`` pattern, or the RE2-backed
    ``audit.redact`` patterns of a policy (``toolguard.hashing._regex``)."""

    def search(self, text: str, /) -> object:
        """Truthy when the pattern is found in ``text``."""
        ...


def key_patterns(patterns: tuple[str, ...]) -> list[str]:
    """``audit.redact`` as the patterns searched in a key and in its folded form: each one,
    and for a plain word (``api_key``) also its folded form (``apikey``)."""
    parts: list[str] = []
    for pattern in patterns:
        parts.append(pattern)
        if _WORD.fullmatch(pattern) and fold_key(pattern) != pattern.casefold():
            parts.append(re.escape(fold_key(pattern)))
    return parts


def key_pattern(patterns: tuple[str, ...]) -> re.Pattern[str] | None:
    """``audit.redact`` as one case-insensitive ``re`` regex (:func:`key_patterns`); None if
    empty. A policy's own patterns run on RE2 instead (``AuditPolicy.redact_pattern``)."""
    if not patterns:
        return None
    parts = key_patterns(patterns)
    compiled = re.compile("|".join(f"(?:{p})" for p in parts), re.IGNORECASE)
    if len(_SOURCES) < 256:  # bounded: for the screen of :func:`_unchanged`
        _SOURCES[compiled] = tuple(parts)
    return compiled





_KEYS_SEEN: dict[KeyPattern, dict[str, bool]] = {}  # argument names repeat: cached


def _secret_key(key: str, pattern: KeyPattern | None) -> bool:
    if pattern is None:
        return False
    seen = _KEYS_SEEN.get(pattern)
    if seen is None:
        seen = _KEYS_SEEN.setdefault(pattern, {})
    known = seen.get(key)
    if known is None:
        known = bool(pattern.search(key) or pattern.search(fold_key(key)))
        if len(seen) < 4096 and len(key) <= 64:  # bounded: names come from the model
            seen[key] = known
    return known


def redact_text(text: str) -> str:
    """``text`` with every credential of a well-known shape replaced by ``[REDACTED]``
    (the scheme or key name before it stays: ``Bearer [REDACTED]``). Linear time in the
    length of ``text`` (RE2; each shape one pass)."""
    if len(text) < 8:
        return text
    lower = text.lower()
    needled = _ANY_NEEDLE.search(lower) is not None
    if not needled and len(text) < _ALWAYS_FROM:  # the usual case: nothing to redact
        return text
    for rewriter, shape in _shapes():
        if shape.needles and not (needled and any(n in lower for n in shape.needles)):
            continue
        new = rewriter.sub(text, _keeping(shape))
        if new is not text and new != text:
            text = new
            lower = text.lower()
    return text


def _keeping(shape: _Shape) -> Callable[[tuple[str | None, ...]], str]:
    group, keep = shape.group, shape.keep

    def replace(groups: tuple[str | None, ...]) -> str:
        if keep is not None and (kept := keep(groups)) is not None:
            return kept
        return ("".join(g or "" for g in groups[:group - 1]) + REDACTED
                + "".join(g or "" for g in groups[group:]))
    return replace


class Redacted(dict[str, Any]):
    """Arguments as :func:`redact` returns them: a plain dict to every reader, which also
    keeps its own JSON text once made (:meth:`json`), so that every audit event of a call
    writes the same bytes without serializing the arguments again. Like the events that
    hold it, it must not be changed once made."""

    __slots__ = ("_json",)
    _json: bytes | None

    def json(self) -> bytes | None:
        """The arguments as compact JSON (what ``orjson.dumps`` writes of the dict, values
        JSON cannot hold as their ``repr``), made on the first call; None when not worth
        keeping (flat arguments, which :func:`redact` cuts to a few hundred characters) or
        when orjson cannot write them (a lone surrogate, an integer beyond 64 bits): the
        caller serializes the dict its own way."""
        try:
            return self._json
        except AttributeError:
            pass
        try:
            text: bytes | None = orjson.dumps(self, default=_safe_repr)
        except (TypeError, orjson.JSONEncodeError):
            text = None
        self._json = text  # a race writes the same bytes twice
        return text


def _safe_repr(value: Any) -> str:
    try:
        return repr(value)
    except Exception:  # noqa: BLE001 - a foreign __repr__ failed (or recursed)
        return f"<{type(value).__qualname__}>"


def redact(args: Mapping[str, Any], pattern: KeyPattern | None, max_chars: int
           ) -> Redacted:
    """A copy of ``args`` safe to show: values of keys matching ``pattern`` (see
    :func:`key_pattern`) replaced by ``"[REDACTED]"`` at any depth, credentials of a known
    shape inside strings replaced, JSON-text strings redacted inside, strings longer than
    ``max_chars`` characters truncated with a note of the original length, and containers
    deeper than :data:`MAX_DEPTH` cut. Never raises for any value.

    Arguments are first serialized and searched once (:func:`_unchanged`): when that shows
    nothing redaction could change, the copy is made from that serialization (in C), which
    is also kept as the copy's JSON text (:meth:`Redacted.json`, for nested arguments), and
    nothing is walked. Otherwise the walk below decides value by value; when no string
    could hold a credential's shape or JSON text (:func:`_plain_strings`), it does not look
    inside the strings, which on 100 KB of records is most of its time."""
    shown = _shown(args, pattern, max_chars, b"")
    if isinstance(shown, Redacted):
        return shown
    out = Redacted(orjson.loads(shown))
    out._json = shown
    return out


def shown_args(args: Mapping[str, Any], pattern: KeyPattern | None, max_chars: int,
               text: bytes = b"") -> dict[str, Any] | bytes:
    """:func:`redact` as audit events hold it: flat arguments as a dict (a copy, written
    inside each line), nested ones as their redacted JSON text, from which whoever reads
    them decodes a copy of their own (none is made for a sink that writes the text as it
    is), or as the dict when the text would not give them back (orjson cannot write them,
    or writes a null).

    ``text``: what :func:`toolguard.hashing._canonical.dump_for_hash` made of these very
    ``args`` with ``depth`` :data:`SHOWN_DEPTH` (keys sorted), when the caller made it: it
    is searched instead of a serialization of their own, and shown with its keys sorted.
    A text among the last ones decided unchanged (:func:`_unchanged`: the same decision)
    is shown at once, flat arguments as a plain copy of the dict (a repeated call, the
    loop the guard exists for)."""
    nested = False
    for value in args.values():
        if type(value) not in _KEPT_STR:
            nested = True
            break
    recent = _RECENT.get((pattern, max_chars), ())
    if text and text in recent:
        if nested:
            return text
        return args.copy() if type(args) is dict else dict(args)
    shown = _shown(args, pattern, max_chars, text, nested, recent if text else None)
    if isinstance(shown, Redacted):
        walked = shown.json()
        # a null may be a NaN or an infinity, which the text would give back as None
        return shown if walked is None or _has_null(walked) else walked
    return shown


def _shown(args: Mapping[str, Any], pattern: KeyPattern | None, max_chars: int,
           text: bytes, nested: bool | None = None, recent: tuple[bytes, ...] | None = None
           ) -> Redacted | bytes:
    """:func:`redact`, with nested arguments decided unchanged as their JSON text
    (``nested``: whether a value of ``args`` is not a string or a scalar, if known;
    ``recent``: see :func:`_unchanged`)."""
    if nested is None:
        nested = not _KEPT_STR.issuperset(map(type, args.values()))
    text, unchanged = _unchanged(args, pattern, max_chars, nested, text, recent)
    if unchanged:
        if nested:
            return text
        shown = Redacted(args)  # flat: written inside each event, cheaper than a text spliced in
        shown._json = None
        return shown
    shapes = not (nested and _plain_strings(args, text))
    out = Redacted({str(k): _value(str(k), v, pattern, max_chars, 1, shapes)
                    for k, v in args.items()})
    for value in out.values():
        if type(value) in (dict, list):
            break
    else:  # flat: each value at most max_chars long, cheaper written inside the event
        out._json = None
    return out


def _value(key: str, value: Any, pattern: KeyPattern | None, max_chars: int,
           depth: int, shapes: bool = True) -> Any:
    if key and _secret_key(key, pattern):
        return REDACTED
    if isinstance(value, str):
        if shapes:
            text = _json_text(value, pattern, depth)
            text = redact_text(text) if text is value else text
        else:
            text = value
        if len(text) > max_chars:
            return f"{text[:max_chars]}…[{len(value)} chars]"
        return text
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if depth > MAX_DEPTH:
        return DEEP
    if type(value) is dict:  # the usual container: values kept as they are, inline
        out: dict[str, Any] = {}
        seen = _KEYS_SEEN.get(pattern, {}) if pattern is not None else None
        for given, v in value.items():
            k = str(given)
            t = type(v)
            if (t in _KEPT or (t is str and not shapes and len(v) <= max_chars)) and (
                    seen is None or seen.get(k) is False or not _secret_key(k, pattern)):
                out[k] = v
            else:
                out[k] = _value(k, v, pattern, max_chars, depth + 1, shapes)
        return out
    if isinstance(value, Mapping):
        return {str(k): _value(str(k), v, pattern, max_chars, depth + 1, shapes)
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [v if type(v) is str and not shapes and len(v) <= max_chars
                else _value("", v, pattern, max_chars, depth + 1, shapes) for v in value]
    structured = fields_of(value)
    if structured is not None:  # a dataclass or pydantic model: its repr would show every field
        return {"$type": type(value).__qualname__,
                **{k: _value(k, v, pattern, max_chars, depth + 1)
                   for k, v in structured[1].items()}}
    text = redact_text(_safe_repr(value))  # a repr was never searched: always its shapes
    return text if len(text) <= max_chars else f"{text[:max_chars]}…"


_KEPT: Final = frozenset({int, float, bool, type(None)})  # values _value returns as they are
_KEPT_STR: Final = _KEPT | {str}  # the values of flat arguments
_SCREEN_OPTIONS: Final = (orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME
                          | orjson.OPT_PASSTHROUGH_SUBCLASS)



def _refuse(_: Any) -> Any:
    raise TypeError


@cache
def _screen() -> Any:
    """:func:`_shapes_screen` compiled, anchored at the start of the JSON text of arguments
    (``Match`` with :func:`_re2_anchored`). None without ``google-re2``."""
    return _compiled(rf"\A{_shapes_screen()}")


def _compiled(pattern: str) -> Any:
    """``pattern`` as an RE2 object (no capture groups), or None without ``google-re2``."""
    from ._regex import _options, _re2

    binding = _re2()
    if binding is None:  # pragma: no cover - google-re2 is a dependency with wheels here
        return None
    regexp = binding.RE2(pattern.encode(), _options())
    if not regexp.ok():  # pragma: no cover - patterns built here from checked parts
        raise ValueError(str(regexp.error()))
    return regexp


def _plain_strings(args: Mapping[str, Any], data: bytes = b"") -> bool:
    """Whether no string inside the nested values of ``args`` can be changed by a shape or
    as JSON text, read from one serialization of them (a string's characters appear in its
    JSON as written, but for the escapes, which the screen allows for). False, so that every
    string is searched, for flat arguments (nothing to gain) and for anything orjson would
    not write as the walk reads it (a dataclass, a subclass of a built-in type, a date).
    ``data``: that serialization, when the caller made it already."""
    for value in args.values():
        if type(value) in (dict, list, tuple):
            break
    else:
        return False
    screen = _screen()
    if screen is None:  # pragma: no cover - google-re2 is a dependency with wheels here
        return False
    if not data:
        try:
            data = orjson.dumps(args, default=_refuse, option=_SCREEN_OPTIONS)
        except (TypeError, orjson.JSONEncodeError):
            return False
    return bool(screen.Match(_re2_anchored(), data, 0, len(data))[0][0] < 0)


def _unchanged(args: Mapping[str, Any], pattern: KeyPattern | None, max_chars: int,
               nested: bool, text: bytes = b"", recent: tuple[bytes, ...] | None = None
               ) -> tuple[bytes, bool]:
    """The JSON text of ``args`` (``orjson.dumps``; ``b""`` if refused), and whether one
    search of it shows that :func:`redact` would return ``args`` as they are (the walk then
    reuses the text for :func:`_plain_strings`). ``text``: that serialization made already,
    keys in any order (see :func:`shown_args`).

    The text must hold no value orjson writes otherwise than the walk shows it (a dataclass,
    a subclass of a built-in type, a date: refused), no container deeper than
    :data:`MAX_DEPTH` (refused by orjson's own depth limit, wrapped), for nested arguments no
    ``null`` (orjson's spelling of NaN too, which the copy made from the text would not
    give back), and none of what :func:`_decider` finds.

    The decision depends on the text alone, so the last texts decided unchanged are kept
    (:data:`_RECENT`) and the same text again is not searched again: a repeated call, the
    loop the guard exists for, compares its bytes (a memcmp) instead of searching them.
    ``recent``: those texts, when the caller has looked for ``text`` among them already
    (not compared twice: 100 KB texts differing at their end cost ~12k instructions each)."""
    decider = _DECIDERS.get((pattern, max_chars))
    if decider is None:
        decider = _decider(pattern, max_chars)
    if decider is False:
        return text, False
    if not text:
        text = dumps_within(args, _DEPTH_WRAP if nested else 0, _SCREEN_OPTIONS)
    if not text or (max_chars >= _LONGEST_COUNTED and len(text) > max_chars):
        return text, False
    if recent is None:
        recent = _RECENT.get((pattern, max_chars), ())
        if text in recent:  # bytes compared whole: equal texts, the same decision
            return text, True
    if decider.Match(_re2_anchored(), text, 0, len(text))[0][0] >= 0:
        return text, False
    if nested and _has_null(text):
        return text, False
    if len(text) <= _RECENT_BYTES:
        _remember(pattern, max_chars, text, recent)
    return text, True


_RECENT: dict[tuple[KeyPattern | None, int], tuple[bytes, ...]] = {}  # see _unchanged
_RECENT_TEXTS: Final = 8  # texts kept per (pattern, max_chars)
_RECENT_BYTES: Final = 1 << 20  # bytes kept per (pattern, max_chars), and per text


def _remember(pattern: KeyPattern | None, max_chars: int, text: bytes,
              recent: tuple[bytes, ...]) -> None:
    """Keep ``text``, decided unchanged, first among the ``recent`` ones, within
    :data:`_RECENT_TEXTS` texts and :data:`_RECENT_BYTES` bytes (a tuple replaced whole:
    safe across threads; a race loses one text, which is searched again)."""
    kept = [text]
    size = len(text)
    for older in recent[:_RECENT_TEXTS - 1]:
        size += len(older)
        if size > _RECENT_BYTES:
            break
        kept.append(older)
    if len(_RECENT) >= 8 and (pattern, max_chars) not in _RECENT:  # policies reloaded
        _RECENT.clear()
    _RECENT[pattern, max_chars] = tuple(kept)


_DECIDERS: dict[tuple[KeyPattern | None, int], Any] = {}  # (pattern, max_chars) -> RE2
SHOWN_DEPTH: Final = MAX_DEPTH + 1
"""Levels of nesting of arguments (the arguments object included) that redaction shows."""
_DEPTH_WRAP: Final = 254 - SHOWN_DEPTH  # orjson's 254 levels less what redaction keeps
_LONGEST_COUNTED: Final = 999  # max_chars the screen counts string lengths for (RE2: {1000})


def _decider(pattern: KeyPattern | None, max_chars: int) -> Any:
    """The RE2 program :func:`_unchanged` searches with, for ``pattern`` and ``max_chars``
    (kept in :data:`_DECIDERS`), or False when no search can decide (a key pattern that is
    not a plain word, or one whose words are unknown; no ``google-re2``).

    Matched at the start of the JSON text, it finds (:func:`_shapes_screen`) a string value
    a shape or the JSON-text reading may change, or anywhere in the text
    (:func:`_key_screen`) what a key matching ``pattern`` would show, or a string token of
    more than ``max_chars`` characters (one escape counts as one character at least)."""
    found = [_shapes_screen()]
    keys = _key_screen(pattern)
    if keys is None:
        decider: Any = False
    else:
        anywhere = [keys] if keys else []
        if max_chars < _LONGEST_COUNTED:
            anywhere.append(rf'"(?:[^"\\]|\\.){{{max_chars + 1}}}')
        if anywhere:
            found.append(rf"(?s:.)*?(?:{'|'.join(anywhere)})")
        decider = _compiled(rf"\A(?:{'|'.join(found)})")
        if decider is None:  # pragma: no cover - google-re2 is a dependency with wheels here
            decider = False
    if len(_DECIDERS) >= 64:  # policies reloaded many times: start over
        _DECIDERS.clear()
    _DECIDERS[pattern, max_chars] = decider
    return decider


@cache
def _re2_anchored() -> Any:
    from ._regex import _re2

    return _re2().RE2.Anchor.ANCHOR_START


def redact_json_text(text: str, pattern: KeyPattern | None) -> str:
    """The model's JSON text of a call's arguments, redacted as :func:`redact` redacts them
    (no truncation); text that is not JSON has only its token shapes redacted."""
    cleaned = _json_text(text, pattern, 0)
    return redact_text(text) if cleaned is text else cleaned


def _json_text(text: str, pattern: KeyPattern | None, depth: int) -> str:
    """``text`` redacted as arguments if it is a JSON object or array, or a JSON string
    holding one (JSON encoded twice, as ``json.dumps`` of a body already dumped), else
    ``text`` itself."""
    stripped = text.lstrip()
    if (stripped[:1] not in ("{", "[", '"') or len(text) > _JSON_TEXT_LIMIT
            or depth > MAX_DEPTH):
        return text
    try:
        parsed = orjson.loads(text)
    except orjson.JSONDecodeError:
        return text
    if isinstance(parsed, str):
        inner = _json_text(parsed, pattern, depth + 1)
        return text if inner is parsed else orjson.dumps(inner).decode()
    cleaned = _value("", parsed, pattern, _JSON_TEXT_LIMIT, depth + 1)
    if cleaned == parsed:
        return text
    return orjson.dumps(cleaned).decode()


def secrets_in(value: Any, pattern: KeyPattern, depth: int = 0) -> list[Any]:
    """The values of the keys matching ``pattern`` inside ``value``, at any depth (up to
    :data:`MAX_DEPTH`): what a validation message quoting an argument must not show."""
    found: list[Any] = []
    stack: list[tuple[Any, int]] = [(value, depth)]
    while stack:
        item, level = stack.pop()
        if level > MAX_DEPTH:
            continue
        if isinstance(item, Mapping):
            for key, inner in item.items():
                if isinstance(key, str) and _secret_key(key, pattern):
                    if inner is not None and inner != "":
                        found.append(inner)
                else:
                    stack.append((inner, level + 1))
        elif isinstance(item, (list, tuple)):
            stack.extend((inner, level + 1) for inner in item)
        elif (structured := fields_of(item)) is not None:
            stack.append((structured[1], level + 1))
    return found
