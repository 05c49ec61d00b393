"""Result normalisation: what of a tool's result is compared with earlier results.

Progress ("the output changed") and stagnation ("different calls, the same outcome") compare
digests of results. A result that carries a timestamp, a duration, a request id or a PID
never repeats, so an agent polling it, or re-running a failing command whose error line
holds a time, would make progress forever. Before its digest is taken, a result is
normalised (the model always gets the raw result):

1. ``ignore_fields`` (``[tools.X.result]``): paths removed from a JSON result, or from a text
   result that parses as a JSON object or array: ``$`` then ``.name``, ``['name']``,
   ``[N]``, ``[*]``, ``.*`` or ``..name`` (``name`` at any depth), e.g. ``$.meta.request_id``,
   ``$.items[*].etag``, ``$..timestamp``;
2. the built-in volatile parts (``strip_volatile = true``, the default), each replaced by a
   placeholder: the time of day of ISO-8601 date-times and Apache log timestamps (their date
   is kept: a value a day later is another value), syslog and ``date`` timestamps,
   clock times with fractions of a second, durations in known phrasings (``0.31s``,
   ``12ms``, ``took 3 s``, ``1m2.5s``), UUIDs, long hex ids (``0x7f3a2b1c``, a git SHA: 12 or
   more hex digits holding a letter), PIDs (``pid 4242``, ``[1] 4242``) and ports
   (``port 8080``, ``localhost:8080``). Dates alone and plain numbers are kept: a flight on
   another day is another result;
3. ``ignore``: the user's regexes, whose matches are removed (RE2, linear time:
   ``toolguard.hashing._regex``).

Text is normalised as a whole; a JSON value (dict, list) string by string. Every built-in
pattern is anchored on a word boundary and has no nested quantifier, so the scan is linear
in the result's length (``benchmarks/``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache, partial
from typing import TYPE_CHECKING, Any, Final

import orjson

from ._progress_marks import progress_marks

if TYPE_CHECKING:  # pydantic loads with the first policy, re2 with the first ignore
    from toolguard.policy._model import ResultPolicy

    from ._regex import PolicyRegex

__all__ = [
    "MAX_NORMALIZED_CHARS",
    "ResultNormalizer",
    "default_normalizer",
    "field_path_problem",
    "normalizer_for",
    "progress_marks",
]

_MONTHS: Final = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov",
                  "Dec")


def _after(*words: str) -> str:
    """A left context: one of ``words`` right before (lookbehinds: fixed width each, words
    of one width in one lookbehind, behind a one-character check that fails fast at most
    positions: the 24 month-and-space words cost two lookbehinds, not 24)."""
    ends = "".join(sorted({re.escape(w[-1]) for w in words}))
    widths: dict[tuple[int, str], list[str]] = {}
    for w in words:
        bound = "" if w[:1] in "[0123456789" else chr(92) + "b"
        widths.setdefault((len(w), bound), []).append(re.escape(w))
    return f"(?<=[{ends}])(?:" + "|".join(
        f"(?<={bound}(?:{'|'.join(same)}))" for (_, bound), same in widths.items()) + ")"


def _phrases(*words: str) -> tuple[str, ...]:
    return tuple(f"{w}{sep}" for w in words for sep in (" ", "=", ": ", ":"))


# Two passes. Every alternative of the first starts at a digit or "[", of the second at a
# hex digit: the leading lookahead lets the regex engine skip all other positions at C speed
# (~10x faster on prose than word-boundary anchors). None starts inside a word or a number
# (the lookbehind); each ends at a word's end. Words that name a value (took, pid, port,
# localhost, a month) are left contexts, so only the value becomes a placeholder.
_VOLATILE: Final = re.compile(
    r"(?=[0-9\[])(?<![\w.])(?:"
    + "|".join((
        # ISO-8601 / RFC 3339 date-time (a date alone is data, not a clock reading)
        r"(?P<time>\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2})?(?:[.,]\d{1,9})?"
        r"(?:Z|[+-]\d{2}:?\d{2}|\s?UTC)?"
        # Apache common log: 05/Jan/2024:12:34:56 +0000
        rf"|\d{{2}}/(?:{'|'.join(_MONTHS)})/\d{{4}}:\d{{2}}:\d{{2}}:\d{{2}}(?:\s[+-]\d{{4}})?"
        # syslog and date(1): Jan  5 12:34:56[ UTC][ 2024], after the month's name
        + "|" + _after(*(f"{m}{sp}" for m in _MONTHS for sp in (" ", "  ")))
        + r"\d{1,2},?\s+\d{2}:\d{2}:\d{2}(?:\s+[A-Z]{3,4})?(?:\s+\d{4})?"
        # a clock time with a fraction of a second (a log line's 12:34:56.789)
        r"|\d{2}:\d{2}:\d{2}[.,]\d{3,9})",
        # durations: sub-second units, fractional seconds, a phrase, or time(1)'s 1m2.5s
        r"(?P<duration>\d+(?:\.\d+)?\s?(?:ns|us|µs|ms)"
        r"|\d+\.\d+\s?(?:s|sec|secs|seconds)"
        + "|" + _after("took ", "in ", "after ", "elapsed ", "duration: ", "time: ")
        + r"\d+\s?(?:s|sec|secs|seconds|min|mins|minutes)"
        r"|\d+m\d+(?:\.\d+)?s)",
        "(?P<pid>" + _after(*_phrases("pid", "PID", "Pid")) + r"\d+"
        r"|(?m:^)\[\d+\]\s+\d+(?m:$))",
        "(?P<port>" + _after(*_phrases("port", "Port", "PORT"), "localhost:", "127.0.0.1:",
                             "0.0.0.0:", "[::1]:", "[::]:") + r"\d{2,5})",
    ))
    + r")(?!\w)",
)
_IDS: Final = re.compile(
    r"(?=[0-9a-fA-F])(?<![\w.])(?:"
    r"(?P<uuid>[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})"
    r"|(?P<hex>0x[0-9a-fA-F]{4,}|[0-9a-f]{12,}|[0-9A-F]{12,}))(?!\w)",
)
_PLACEHOLDER: Final = {name: f"<{name}>" for name in (*_VOLATILE.groupindex, *_IDS.groupindex)}
_HEX_LETTER: Final = re.compile(r"[a-fA-F]")


def _volatile(match: re.Match[str]) -> str:
    kind = match.lastgroup or ""
    if kind == "hex" and not _HEX_LETTER.search(match.group()):
        return match.group()  # twelve digits and no letter: a number, not an id
    if kind == "time":
        dated = _DATED.match(match.group())
        if dated is not None:  # the day is data (an updatedAt a day later is another value)
            return dated.group() + _PLACEHOLDER[kind]
    return _PLACEHOLDER[kind]


# The date of an ISO-8601 or Apache date-time: kept, only the time of day is the clock
_DATED: Final = re.compile(rf"\d{{4}}-\d{{2}}-\d{{2}}[T ]|\d{{2}}/(?:{'|'.join(_MONTHS)})/\d{{4}}:")


STRIP_MEMO_CHARS: Final = 256
"""Texts up to this length are stripped once and remembered (:func:`strip_volatile`)."""
STRIP_MEMO_ENTRIES: Final = 4096
"""How many short texts :func:`strip_volatile` remembers (least recently used go first):
about 3 MB at most."""


def strip_volatile(text: str) -> str:
    """``text`` with its volatile parts (times, durations, pids, ports, ids) replaced by
    placeholders (``<time>``, ``<duration>``, ...).

    A text of up to :data:`STRIP_MEMO_CHARS` characters is stripped once and its result
    remembered (:data:`STRIP_MEMO_ENTRIES` texts, least recently used first out; thread-safe):
    the short strings of a structured result (``"text"``, a status, a name) come back on
    every call of a tool, and each search costs ~14k instructions through the RE2 binding,
    most of the guard's work on an MCP result. The result is the same either way
    (``tests/hashing/test_normalize.py``).
    """
    if len(text) <= STRIP_MEMO_CHARS and type(text) is str:
        return _strip_remembered(text)
    return _strip_volatile(text)


def _strip_volatile(text: str) -> str:
    """:func:`strip_volatile` without the memo: the two passes, each run only from where its
    prefilter finds a candidate.

    Each prefilter (RE2, linear time) finds a candidate at or before the start of every match
    of its pass (:func:`_prefilters`). Python's ``re`` gets no prefix scan from the passes'
    leading lookahead: it pays ~20 ns per character of text with nothing to replace, and
    ~2 µs per number after a space (the context words' lookbehinds). 93% of the coding-agent
    set's result text has no candidate at all: one scan for the union of both prefilters
    comes first, so such text is read once, not twice. Otherwise each pass searches from its
    prefilter's first candidate (:func:`_pass`), not from the start of the text (in a replayed
    shell output, ``took 0.31s`` on its last line: a third of the cost of the search from the
    start). The prefilters search the text's UTF-8 bytes, encoded once (a ``str`` argument
    costs the RE2 binding an encoding and an offset translation per search, ~3x the search
    itself on a short result). Without RE2 both passes run over the whole text; the result
    is the same either way."""
    volatile, ids, either = _prefilters()
    if either is None:
        return _IDS.sub(_volatile, _VOLATILE.sub(_volatile, text))
    encoded = text.encode()
    first = either(encoded, 0, len(encoded))[0][0]
    if first < 0:
        return text  # neither pass has a candidate (one scan for both: most tool output)
    stripped = _pass(_VOLATILE, volatile, text, encoded, first)
    if stripped is not text:
        text, encoded = stripped, stripped.encode()
    return _pass(_IDS, ids, text, encoded, first)


def _pass(pattern: re.Pattern[str], candidate: _Finder, text: str, encoded: bytes,
          first: int) -> str:
    """``pattern.sub(_volatile, text)``, searched from the candidate found in ``encoded``
    (``text`` as UTF-8): ``candidate(encoded, first, len(encoded))[0][0]`` is a byte offset
    at or before the start of the first match of ``pattern``, or -1 (no match). No match
    starts before it, and ``re`` reads the context before the start of its search
    (lookbehinds) as a scan from the start does, so the matches are the same. ``text``
    itself is returned when nothing is replaced.

    ``first``: the union's first candidate (:func:`_strip_volatile`), where this prefilter's
    search starts (RE2 reads the bytes before it as context, as the ``re`` pass does). No
    candidate of either pass starts before it, and the first pass leaves the text before
    it as it was: a placeholder begins with ``<``, which no candidate holds, and a date it
    keeps is the text's own; so no candidate of the second pass starts before it in the
    first pass's output either."""
    found = candidate(encoded, first, len(encoded))[0][0]
    if found < 0:
        return text
    start = found if len(encoded) == len(text) else len(encoded[:found].decode())
    parts: list[str] = []
    last = 0
    for match in pattern.finditer(text, start):
        parts += (text[last:match.start()], _volatile(match))
        last = match.end()
    if not parts:
        return text
    parts.append(text[last:])
    return "".join(parts)


_strip_remembered = lru_cache(maxsize=STRIP_MEMO_ENTRIES)(_strip_volatile)


@lru_cache(maxsize=1)
def _prefilters() -> tuple[Any, Any, Any]:
    """Finders (:func:`_finder`: UTF-8 bytes and the span to search in, the span of the
    first match out) of RE2 patterns that match, alternative by alternative, at
    or before the start of every match of :data:`_VOLATILE` (resp. :data:`_IDS`): the match's
    own start (its first digits, whole: ``1.25 ms`` from the ``1``) or its context word
    (``took ``, ``port ``, a month); a superset (no lookaround, context words without their
    word boundary, Unicode digits and Python's whitespace); and their union (a match of
    either). The patterns are Unicode-aware on bytes as on a ``str``. ``(None, None, None)``
    without ``google-re2``."""
    try:
        import re2
    except ImportError:  # pragma: no cover - the wheel exists where CI runs
        return None, None, None
    from ._regex import UNICODE_DIGIT, UNICODE_SPACE

    d, months = UNICODE_DIGIT, "|".join(_MONTHS)
    seps = "(?: |=|: |:)"
    space = UNICODE_SPACE
    volatile = "|".join((
        rf"{d}{{4}}-{d}{{2}}-{d}{{2}}[T ]{d}{{2}}:{d}{{2}}",  # ISO 8601
        rf"{d}{{2}}/(?:{months})/{d}{{4}}:",  # Apache common log
        rf"(?:{months}) {{1,2}}{d}",  # syslog, date(1)
        rf"{d}{{2}}:{d}{{2}}:{d}{{2}}[.,]{d}",  # a clock time with a fraction
        rf"{d}+(?:\.{d}+)?{space}?(?:ns|us|µs|ms)",  # sub-second durations
        rf"{d}+\.{d}+{space}?s",  # fractional seconds
        rf"(?:took|in|after|elapsed|duration:|time:) {d}",  # a duration after a phrase
        rf"{d}+m{d}",  # time(1)'s 1m2.5s
        rf"(?:pid|PID|Pid){seps}{d}",
        rf"(?m:^)\[{d}",  # a job line: [1] 1234
        rf"(?:port|Port|PORT){seps}{d}{{2}}",
        rf"(?:localhost|127\.0\.0\.1|0\.0\.0\.0|\[::1?\]):{d}{{2}}",
    ))
    ids = "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}|0x[0-9a-fA-F]{4}|[0-9a-f]{12}|[0-9A-F]{12}"
    anchor = getattr(getattr(re2, "_Anchor", None), "UNANCHORED", None)
    return (_finder(re2.compile(volatile.encode()), anchor),
            _finder(re2.compile(ids.encode()), anchor),
            _finder(re2.compile(f"(?:{volatile})|(?:{ids})".encode()), anchor))


_Finder = Callable[[bytes, int, int], Sequence[tuple[int, int]]]


def _finder(compiled: Any, anchor: Any) -> _Finder:
    """``find(text, start, end)``: ``[(begin, stop)]``, the byte span of the first match of
    ``compiled`` (an RE2 pattern of bytes) in ``text[start:end]``, ``(-1, -1)`` for none (the
    bytes before ``start`` read as context, as ``(?m:^)`` needs). The binding's compiled
    ``RE2.Match`` itself, its anchor bound (a C call: no Python frame per search), when the
    binding has the one google-re2 1.x has (``search`` adds a generator and a match object
    in Python: ~2/3 of a prefilter's cost on a short result), else by ``search``."""
    raw = getattr(getattr(compiled, "_regexp", None), "Match", None)
    if raw is None or anchor is None:  # pragma: no cover - another binding's internals
        def find(text: bytes, start: int, end: int) -> Sequence[tuple[int, int]]:
            found = compiled.search(text, start, end)
            return [(-1, -1) if found is None else found.span()]
        return find
    return partial(raw, anchor)


# -- field paths -------------------------------------------------------------------------------
_ANY: Final = "*"


@dataclass(frozen=True, slots=True)
class _Step:
    """One step of a field path: a key, an index, any child (``*``), or, ``deep``, ``key``
    at any depth below."""

    key: str | int
    deep: bool = False


def _parse_path(path: str) -> tuple[_Step, ...]:
    """``$.a[*].b`` → steps. Raises ValueError with what is wrong."""
    if not path.startswith("$"):
        raise ValueError("must start with $")
    steps: list[_Step] = []
    i, n = 1, len(path)
    while i < n:
        if path.startswith("..", i):
            name, i = _name(path, i + 2)
            steps.append(_Step(name, deep=True))
        elif path[i] == ".":
            name, i = _name(path, i + 1)
            steps.append(_Step(name))
        elif path[i] == "[":
            end = path.find("]", i)
            if end < 0:
                raise ValueError(f"unclosed [ at position {i}")
            inner = path[i + 1:end].strip()
            if inner == _ANY:
                steps.append(_Step(_ANY))
            elif inner.isdigit():
                steps.append(_Step(int(inner)))
            elif len(inner) >= 2 and inner[0] == inner[-1] and inner[0] in "'\"":
                steps.append(_Step(inner[1:-1]))
            else:
                raise ValueError(f"[{inner}] is not [N], [*] or ['name']")
            i = end + 1
        else:
            raise ValueError(f"unexpected {path[i]!r} at position {i}")
    if not steps:
        raise ValueError("names no field ($ alone is the whole result)")
    return tuple(steps)


def _name(path: str, start: int) -> tuple[str, int]:
    end = start
    while end < len(path) and path[end] not in ".[":
        end += 1
    if end == start:
        raise ValueError(f"a name is missing at position {start}")
    return path[start:end], end


def field_path_problem(path: str) -> str | None:
    """Why ``path`` is not a valid ``ignore_fields`` entry, or None (for the policy loader)."""
    try:
        _parse_path(path)
    except ValueError as exc:
        return f"not a field path: {exc}"
    return None


def _children(value: Any) -> list[tuple[str | int, Any]]:
    if isinstance(value, dict):
        return list(value.items())
    if isinstance(value, list):
        return list(enumerate(value))
    return []


def _matches(step: _Step, key: str | int) -> bool:
    return step.key in (_ANY, key)


def _without(value: Any, steps: Sequence[_Step]) -> Any:
    """``value`` with every element that ``steps`` names removed (a new container where
    anything was removed inside it; the input is never changed)."""
    step, rest = steps[0], steps[1:]
    if not isinstance(value, (dict, list)):
        return value
    items = _children(value)
    kept: list[tuple[str | int, Any]] = []
    for key, child in items:
        kept_child = child
        if _matches(step, key):
            if not rest:
                continue  # the last step: drop it
            kept_child = _without(child, rest)
        if step.deep:
            kept_child = _without(kept_child, steps)  # ..name also below here
        kept.append((key, kept_child))
    if isinstance(value, dict):
        return dict(kept)
    return [child for _, child in kept]


# -- the normalizer ----------------------------------------------------------------------------
MAX_NORMALIZED_CHARS: Final = 256 * 1024
"""Text results longer than this are compared as they are (the built-in patterns are
linear but cost ~0.1-0.4 µs per character; a result that large rarely repeats anyway)."""


TEXT_MEMO_CHARS: Final = 16 * 1024
"""Text results up to this length are normalised once per distinct text and normaliser
(:class:`ResultNormalizer`)."""
TEXT_MEMO_ENTRIES: Final = 512
"""Distinct texts a normaliser remembers (then it starts again, empty): at most ~16 MB of
text with their normalised forms."""


@dataclass(frozen=True, slots=True)
class ResultNormalizer:
    """A tool's compiled :class:`~toolguard.policy.ResultPolicy` (see the module docstring).

    Calling it returns the normalised form of a result, to be digested; never the input
    changed in place. Thread-safe (immutable but for its memo: a ``str`` result of at most
    :data:`TEXT_MEMO_CHARS` characters is normalised once and remembered, for the
    :data:`TEXT_MEMO_ENTRIES` latest distinct texts. The same text comes back within a
    task, as a poll or the same error, or as the progress check's second look at a result,
    and across the runs of a replay, which all share one normaliser per policy; the
    normalisation is pure, so a remembered form is the one it would compute). Such a text is
    stripped without :func:`strip_volatile`'s memo, which keeps the short strings of JSON
    results: each text is remembered once.
    """

    strip_volatile: bool
    ignore: PolicyRegex | None
    fields: tuple[tuple[_Step, ...], ...]
    source: ResultPolicy
    transient: PolicyRegex | None = None
    _memo: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    def __call__(self, value: Any) -> Any:
        if type(value) is str and len(value) <= TEXT_MEMO_CHARS:
            memo = self._memo
            known = memo.get(value)
            if known is None:  # remembered here: not by strip_volatile's memo as well
                known = (_strip_volatile(value)  # the default policy's: no frames between
                         if self.strip_volatile and self.ignore is None and not self.fields
                         else self._normalized(value, _strip_volatile))
                if len(memo) >= TEXT_MEMO_ENTRIES:
                    memo.clear()  # one atomic step: threads may share the normaliser
                memo[value] = known
            return known
        return self._normalized(value, strip_volatile)

    def _normalized(self, value: Any, strip: Callable[[str], str]) -> Any:
        """The normalised form of ``value``; ``strip``: how a text result is stripped (the
        strings of a JSON value always by :func:`strip_volatile`)."""
        if isinstance(value, str):
            if self.fields and value.lstrip()[:1] in ("{", "["):
                parsed = self._json(value)
                if parsed is not None:
                    return self._text(orjson.dumps(
                        self._drop(parsed), option=orjson.OPT_SORT_KEYS).decode(), strip)
            return self._text(value, strip)
        if isinstance(value, (dict, list)):
            return self._strings(self._drop(value))
        return value

    def _json(self, text: str) -> Any:
        if not self.fields:
            return None
        try:
            parsed = orjson.loads(text)
        except orjson.JSONDecodeError:
            return None
        return parsed if isinstance(parsed, (dict, list)) else None

    def _drop(self, value: Any) -> Any:
        for steps in self.fields:
            value = _without(value, steps)
        return value

    def _text(self, text: str, strip: Callable[[str], str]) -> str:
        if len(text) > MAX_NORMALIZED_CHARS:
            return text
        if self.strip_volatile:
            text = strip(text)
        if self.ignore is not None:
            text = self.ignore.remove(text)
        return text

    def _strings(self, value: Any) -> Any:
        if isinstance(value, str):
            return self._text(value, strip_volatile)
        if isinstance(value, dict):
            return {k: self._strings(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._strings(v) for v in value]
        return value

    def __str__(self) -> str:
        parts = ["strip_volatile" if self.strip_volatile else "raw"]
        if self.source.ignore:
            parts.append(f"ignore {list(self.source.ignore)}")
        if self.source.ignore_fields:
            parts.append(f"ignore_fields {list(self.source.ignore_fields)}")
        if self.source.transient:
            parts.append(f"transient {list(self.source.transient)}")
        return ", ".join(parts)


@lru_cache(maxsize=512)
def normalizer_for(policy: ResultPolicy) -> ResultNormalizer:
    """The compiled normalizer of ``policy`` (cached: one per distinct policy).

    Raises:
        ValueError: an ``ignore_fields`` path is malformed (the policy loader reports it
            first, with its location).
        ValueError: an ``ignore`` regex is not one RE2 can run (likewise).
    """
    from ._regex import compile_patterns

    ignore = compile_patterns(policy.ignore, multiline=True) if policy.ignore else None
    transient = compile_patterns(policy.transient, multiline=True) if policy.transient else None
    return ResultNormalizer(policy.strip_volatile, ignore,
                            tuple(_parse_path(p) for p in policy.ignore_fields), policy,
                            transient)


def default_normalizer() -> ResultNormalizer:
    """The normalizer of the built-in ``[result]`` settings (built on first use)."""
    from toolguard.policy._model import ResultPolicy

    return normalizer_for(ResultPolicy())
