"""Policy regexes (``tools.X.rules[i].match``, ``tools.X.result.ignore``) in linear time.

A policy's patterns run on every call, against text the model wrote (arguments) or a tool
returned (results), and a policy may come from a less-trusted place than the code. Python's
``re`` backtracks: ``^(a+)+$`` takes seconds on 31 characters. These patterns are compiled by
RE2 (``google-re2``, a dependency with wheels for CPython 3.10-3.14 on Linux, macOS and
Windows), whose matching time is linear in the text whatever the pattern. RE2 has no
backreferences and no lookaround (both need backtracking); a pattern using them is a policy
problem (:func:`pattern_problem`), reported with its file and key path.

A pattern must be valid for both: Python's syntax, less what RE2 lacks. The meaning is
Python's, with these exceptions (RE2's, as in Go and Rust):

- ``\\d``, ``\\w``, ``\\s`` and ``\\b`` are ASCII (Python's are Unicode): ``\\d`` is ``[0-9]``,
  ``\\s`` is ``[\\t\\n\\f\\r ]``; spell other characters out (``[0-9\\u0660-\\u0669]``);
- ``\\Z`` (the very end) is translated to RE2's spelling, ``\\z``, and ``\\u00e9``,
  ``\\U0001F600`` and ``\\N{NAME}`` to ``\\x{...}``; a ``[`` inside a class stays literal;
- atomic groups, possessive quantifiers and verbose mode ``(?x)`` are refused (RE2 has none);
- ``a{,3}`` is translated to ``a{0,3}`` (RE2 would read it as literal text);
- ``$`` without ``(?m)`` matches at the end and before a final newline, as in Python
  (translated to ``(?:\\n?$)``, which RE2 matches the same way in both modes), unless more
  of the pattern after it would match that newline itself (``$\\n``: then only the end);
- removal (``result.ignore``) of a pattern that can match the empty string steps past an
  empty match where Python would first retry the same position for a non-empty one
  (``a*?``, ``|x``): such a pattern may remove less. Searches (rules, redact) agree.

A random-pattern comparison with ``re`` (30,000 patterns of these tokens, 11,735 accepted)
found no other difference.

Where ``google-re2`` cannot be imported (a platform without its wheel, e.g. musl Linux,
where it builds from source only with RE2's headers), Python's ``re`` runs the patterns, and
:func:`pattern_problem` also refuses a repetition or an alternation inside an unbounded
repetition (``(a+)+``, ``(a|aa)+``), the shape behind catastrophic backtracking (conservative:
``(?:foo|bar)+`` too). :func:`engine` says which engine runs.

``re2`` is imported on first use (a policy with patterns), never by ``import toolguard``.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache
from typing import Any, Final

__all__ = [
    "PolicyRegex",
    "Rewriter",
    "compile_pattern",
    "compile_patterns",
    "engine",
    "pattern_problem",
    "python_syntax_problem",
]

_UNSUPPORTED: Final = (
    "uses {what}, which the linear-time regex engine (RE2) does not support: it needs "
    "backtracking, which can take exponential time; rewrite the pattern without it")
_RE2_ERRORS: Final = (  # RE2's message fragment -> what the user wrote
    ("invalid perl operator: (?=", "a lookahead (?=...)"),
    ("invalid perl operator: (?!", "a negative lookahead (?!...)"),
    ("invalid perl operator: (?<=", "a lookbehind (?<=...)"),
    ("invalid perl operator: (?<!", "a negative lookbehind (?<!...)"),
)
_NOT_IN_RE2: Final = (  # syntax RE2 lacks, though no backtracking is needed to mean it
    ("invalid perl operator: (?>", "an atomic group (?>...)"),
    ("bad repetition operator: ++", "a possessive quantifier (++)"),
    ("bad repetition operator: *+", "a possessive quantifier (*+)"),
    ("bad repetition operator: ?+", "a possessive quantifier (?+)"),
    ("invalid perl operator: (?x", "verbose mode (?x)"),
)
_BACKREFERENCE: Final = re.compile(r"invalid escape sequence: \\[1-9]")


@cache
def _re2() -> Any:
    """RE2's binding, ``re2._re2``, or None where ``google-re2`` cannot be imported.

    The binding is what ``re2.compile`` wraps: ``RE2(pattern, options)`` and
    ``RE2.Match(anchor, text, pos, endpos) -> spans``, called here directly on UTF-8 bytes.
    The wrapper builds a Python match object and converts offsets per match: removing 400
    matches from 10 KB took 1.9 ms through it, 0.23 ms this way (``tests/hashing/test_regex.py``
    pins the behaviour).
    """
    try:
        from re2 import _re2 as binding
    except ImportError:  # pragma: no cover - google-re2 is a dependency with wheels here
        return None
    return binding


@cache
def _options() -> Any:
    options = _re2().RE2.Options()
    options.log_errors = False  # RE2 would print every rejected pattern on stderr
    options.never_capture = True  # only where the whole match is: less work per match
    return options


def engine() -> str:
    """``"re2"``, or ``"re"`` where ``google-re2`` cannot be imported."""
    return "re" if _re2() is None else "re2"


def _re2_compile(pattern: str) -> Any:
    """An ``RE2`` object for ``pattern`` (RE2 syntax). Raises ValueError with RE2's reason."""
    regexp = _re2().RE2(pattern.encode("utf-8", "surrogatepass"), _options())
    if not regexp.ok():
        reason = regexp.error()
        raise ValueError(reason.decode("utf-8", "replace") if isinstance(reason, bytes)
                         else str(reason))
    return regexp


def _translated(pattern: str, *, multiline: bool) -> str:
    """``pattern`` (Python syntax) spelled for RE2 with Python's meaning (module docstring).

    ``\\Z`` → ``\\z``; ``\\uXXXX``, ``\\UXXXXXXXX`` and ``\\N{NAME}`` → ``\\x{...}``;
    ``{,n}`` → ``{0,n}``; (not ``multiline``) ``$`` → ``(?:\\n?$)``; a ``[`` inside a
    character class is literal (as in Python; RE2 would read ``[[:alpha:]]`` as a POSIX
    class); the leading flags ``a`` and ``u`` are dropped (RE2's classes are ASCII already,
    and ``u`` is Python's default).
    """
    out: list[str] = []
    flags = _GLOBAL_FLAGS.match(pattern)
    i, n = 0, len(pattern)
    if flags is not None and {"a", "u"} & set(flags.group(1)):
        kept = flags.group(1).replace("a", "").replace("u", "")
        out.append(f"(?{kept})" if kept else "")
        i = flags.end()
    in_class = False
    while i < n:
        char = pattern[i]
        if char == "\\" and i + 1 < n:
            escape = _ESCAPE.match(pattern, i)
            if escape is not None:
                out.append(_code_point(escape.group()))
                i = escape.end()
                continue
            pair = pattern[i:i + 2]
            out.append("\\z" if pair == "\\Z" and not in_class else pair)
            i += 2
            continue
        if in_class:
            if char == "[":
                out.append("\\[")
                i += 1
                continue
            if char == "]":
                in_class = False
        elif char == "[":
            in_class = True
            out.append(char)
            i += 1
            for lead in ("^", "]"):  # "[^]...]" and "[]...]": a first "]" is literal
                if i < n and pattern[i] == lead:
                    out.append("\\]" if lead == "]" else lead)
                    i += 1
            continue
        elif char == "$" and not multiline:
            out.append("(?:\\n?$)")
            i += 1
            continue
        elif char == "{" and (found := _OPEN_MIN.match(pattern, i)) is not None:
            out.append("{0" + found.group(1))
            i = found.end()
            continue
        out.append(char)
        i += 1
    return "".join(out)


def _code_point(escape: str) -> str:
    """``\\u00e9``, ``\\U0001F600`` or ``\\N{NAME}`` as RE2's ``\\x{...}``."""
    import unicodedata

    if escape.startswith("\\N"):
        return f"\\x{{{ord(unicodedata.lookup(escape[3:-1])):x}}}"
    return f"\\x{{{escape[2:]}}}"


_ESCAPE: Final = re.compile(r"\\u[0-9a-fA-F]{4}|\\U[0-9a-fA-F]{8}|\\N\{[^}]+\}")
_GLOBAL_FLAGS: Final = re.compile(r"\(\?([aiLmsux]+)\)")
_OPEN_MIN: Final = re.compile(r"\{(,\d*\})")


@dataclass(frozen=True, slots=True, eq=False)
class PolicyRegex:
    """Compiled policy patterns: a match of any of them is a match; thread-safe (immutable;
    RE2 objects match concurrently).

    Text is matched as UTF-8 (lone surrogates, which a Python caller can pass, as their
    ``surrogatepass`` bytes).
    """

    patterns: tuple[str, ...]
    _re2: Any  # one RE2 object for the alternation, or None with the fallback
    _re: tuple[re.Pattern[str], ...] = ()  # the fallback: Python's re, one per pattern
    _anchor: Any = None  # RE2::UNANCHORED: a search
    multiline: bool = False
    ignore_case: bool = False

    def __reduce__(self) -> tuple[Any, tuple[tuple[str, ...], bool, bool]]:
        # RE2 objects do not pickle; a policy (with its compiled patterns) does: recompile
        return _recompiled, (self.patterns, self.multiline, self.ignore_case)

    @property
    def pattern(self) -> str:
        """The patterns as one alternation (for messages)."""
        return "|".join(self.patterns)

    def search(self, text: str) -> bool:
        """Whether any of the patterns is found anywhere in ``text``."""
        if self._re2 is None:
            return any(p.search(text) is not None for p in self._re)
        data = text.encode("utf-8", "surrogatepass")
        return bool(self._re2.Match(self._anchor, data, 0, len(data))[0][0] >= 0)

    def remove(self, text: str) -> str:
        """``text`` with every match removed (leftmost first, non-overlapping, as
        ``re.sub(alternation, "", text)``; the fallback removes pattern by pattern)."""
        if self._re2 is None:
            for compiled in self._re:
                text = compiled.sub("", text)
            return text
        data = text.encode("utf-8", "surrogatepass")
        end = len(data)
        kept: list[bytes] = []
        last = pos = 0
        while pos <= end:
            start, stop = self._re2.Match(self._anchor, data, pos, end)[0]
            if start < 0:
                break
            if stop > start:  # an empty match removes nothing
                kept.append(data[last:start])
                last = pos = stop
                continue
            pos = stop + 1  # past an empty match, to the next character's first byte
            while pos < end and data[pos] & 0xC0 == 0x80:
                pos += 1
        if not kept:
            return text
        kept.append(data[last:])
        try:
            return b"".join(kept).decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:  # pragma: no cover - RE2 keeps code points whole
            return b"".join(kept).decode("utf-8", "replace")

    def __repr__(self) -> str:
        return f"PolicyRegex({self.patterns!r})"


UNICODE_DIGIT: Final = r"\p{Nd}"
"""What Python's ``\\d`` matches in a ``str`` (a decimal digit of any script), in RE2 syntax."""
UNICODE_SPACE: Final = r"[\t-\r\x{1c}-\x{1f}\x{85}\p{Z}]"
"""What Python's ``\\s`` matches in a ``str``, in RE2 syntax (RE2's ``\\s`` is ASCII)."""


Replacement = Callable[[tuple[str | None, ...]], str]
"""What a match becomes, from its groups (group 1 first; None for a group that did not
take part)."""


@dataclass(frozen=True, slots=True, eq=False)
class Rewriter:
    """A built-in pattern (RE2 syntax, also valid for ``re``) whose matches are rewritten in
    time linear in the text: RE2 called on UTF-8 bytes, one search from the end of the last
    match (``re`` where ``google-re2`` cannot be imported). Thread-safe."""

    pattern: str
    _re2: Any
    _re: re.Pattern[str] | None

    @classmethod
    def compile(cls, pattern: str) -> Rewriter:
        """Raises ValueError if RE2 refuses ``pattern``."""
        if _re2() is None:  # pragma: no cover - google-re2 is a dependency with wheels here
            return cls(pattern, None, re.compile(pattern.replace("\\z", "\\Z")))
        options = _re2().RE2.Options()
        options.log_errors = False
        regexp = _re2().RE2(pattern.encode("utf-8"), options)
        if not regexp.ok():
            raise ValueError(str(regexp.error()))
        return cls(pattern, regexp, None)

    def search(self, text: str) -> bool:
        """Whether the pattern matches somewhere in ``text``."""
        if self._re2 is None:  # pragma: no cover - the fallback engine
            assert self._re is not None
            return self._re.search(text) is not None
        data = text.encode("utf-8", "surrogatepass")
        return bool(self._re2.Match(_re2().RE2.Anchor.UNANCHORED, data, 0, len(data))[0][0] >= 0)

    def findall(self, text: str) -> list[str]:
        """The non-overlapping matches in ``text``, whole, in order (what ``re.findall``
        gives for a pattern without groups). Through the wrapper's ``findall`` a short text
        cost ~3x this: a Python match object and an offset conversion per match."""
        if self._re2 is None:  # pragma: no cover - the fallback engine
            assert self._re is not None
            return [match.group() for match in self._re.finditer(text)]
        data = text.encode("utf-8", "surrogatepass")
        end = len(data)
        anchor = _re2().RE2.Anchor.UNANCHORED
        found: list[str] = []
        pos = 0
        while pos < end:
            start, stop = self._re2.Match(anchor, data, pos, end)[0]
            if start < 0:
                break
            found.append(data[start:stop].decode("utf-8", "surrogatepass"))
            pos = stop if stop > start else stop + 1
        return found

    def sub(self, text: str, replace: Replacement) -> str:
        """``text`` with each non-overlapping match replaced by ``replace(groups)``."""
        if self._re2 is None:  # pragma: no cover - the fallback engine
            assert self._re is not None
            return self._re.sub(lambda m: replace(m.groups()), text)
        data = text.encode("utf-8", "surrogatepass")
        end = len(data)
        anchor = _re2().RE2.Anchor.UNANCHORED
        out: list[bytes] = []
        last = pos = 0
        while pos < end:
            spans = self._re2.Match(anchor, data, pos, end)
            start, stop = spans[0]
            if start < 0:
                break
            groups = tuple(None if a < 0 else data[a:b].decode("utf-8", "surrogatepass")
                           for a, b in spans[1:])
            out.append(data[last:start])
            out.append(replace(groups).encode("utf-8", "surrogatepass"))
            last = stop
            pos = stop if stop > start else stop + 1
        if not out:
            return text
        out.append(data[last:])
        return b"".join(out).decode("utf-8", "surrogatepass")


def compile_pattern(pattern: str, *, multiline: bool = False) -> PolicyRegex:
    """Compile one policy pattern with the linear-time engine (see :func:`compile_patterns`)."""
    return compile_patterns((pattern,), multiline=multiline)


def compile_patterns(patterns: Iterable[str], *, multiline: bool = False,
                     ignore_case: bool = False) -> PolicyRegex:
    """Compile policy patterns, any of which may match, with the linear-time engine (module
    docstring): one RE2 program for their alternation. Each is a pattern of its own, so an
    inline flag (``(?i)``) at its start applies to it alone.

    Args:
        patterns: Python-style syntax (``tools.X.rules[i].match`` values, ``result.ignore``,
            ``audit.redact``).
        multiline: ``^`` and ``$`` also match at line breaks (``re.MULTILINE``).
        ignore_case: case-insensitive (``re.IGNORECASE``).

    Returns:
        The compiled patterns.

    Raises:
        ValueError: a pattern is not acceptable (:func:`pattern_problem` says why; the
            policy loader reports it first, with its file and key path).
    """
    given = tuple(patterns)
    for pattern in given:
        problem = pattern_problem(pattern)
        if problem is not None:
            raise ValueError(f"{problem}, got {pattern!r}")
    if _re2() is None:  # pragma: no cover - exercised by tests that force the fallback
        flags = (re.MULTILINE if multiline else 0) | (re.IGNORECASE if ignore_case else 0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            return PolicyRegex(given, None, tuple(re.compile(p, flags) for p in given),
                               multiline=multiline, ignore_case=ignore_case)
    text = "|".join(f"(?:{_translated(p, multiline=multiline)})" for p in given)
    inline = ("m" if multiline else "") + ("i" if ignore_case else "")
    return PolicyRegex(given, _re2_compile(f"(?{inline}:{text})" if inline else text),
                       _anchor=_re2().RE2.Anchor.UNANCHORED, multiline=multiline,
                       ignore_case=ignore_case)


def _recompiled(patterns: tuple[str, ...], multiline: bool, ignore_case: bool) -> PolicyRegex:
    return compile_patterns(patterns, multiline=multiline, ignore_case=ignore_case)


def pattern_problem(pattern: str) -> str | None:
    """Why ``pattern`` cannot be a policy regex (the policy loader's message), or None.

    Examples: ``uses a lookahead (?=...), which the linear-time regex engine (RE2) does not
    support...``, ``not a valid regular expression: missing ): ...``.
    """
    if _re2() is None:  # pragma: no cover - exercised by tests that force the fallback
        return _python_problem(pattern)
    python = python_syntax_problem(pattern)  # Python's syntax, and its message's position
    if python is not None:
        return python
    try:
        _re2_compile(_translated(pattern, multiline=False))
    except ValueError as error:
        message = str(error)
        if message == "invalid perl operator: (?P" and "(?P=" in pattern:
            return _UNSUPPORTED.format(what="a named backreference (?P=name)")
        for fragment, what in _RE2_ERRORS:
            if message.startswith(fragment):
                return _UNSUPPORTED.format(what=what)
        for fragment, what in _NOT_IN_RE2:
            if message.startswith(fragment):
                return (f"uses {what}, which the linear-time regex engine (RE2) does not "
                        "support; rewrite the pattern without it")
        if _BACKREFERENCE.match(message):
            return _UNSUPPORTED.format(what=f"a backreference {message.rsplit(' ', 1)[-1]}")
        return f"not a valid regular expression: {message}"
    return None


def python_syntax_problem(pattern: str) -> str | None:
    """Why Python's ``re`` cannot compile ``pattern`` (with the position), or None."""
    try:
        with warnings.catch_warnings():  # "possible set intersection": valid, for now
            warnings.simplefilter("ignore", FutureWarning)
            re.compile(pattern)
    except re.error as error:
        where = f" at position {error.pos}" if error.pos is not None else ""
        return f"not a valid regular expression: {error.msg}{where}"
    except (OverflowError, RecursionError, ValueError) as error:
        # "a{99999999999}": a repetition beyond re's limit; groups nested too deeply
        why = "nested too deeply" if isinstance(error, RecursionError) else str(error)
        return f"not a valid regular expression: {why}"
    return None



def _python_problem(pattern: str) -> str | None:
    """The fallback engine's check: compiles with ``re``, and has no nested unbounded
    repetition (a repeated group that can itself repeat or alternate: ``(a+)+``)."""
    problem = python_syntax_problem(pattern)
    if problem is not None:
        return problem
    if re.search(r"\\[1-9]|\(\?P=", pattern):
        return _UNSUPPORTED.format(what="a backreference")
    if re.search(r"\(\?<?[=!]", pattern):
        return _UNSUPPORTED.format(what="lookaround")
    if _nested_repeat(pattern):
        return ("has a repetition inside a repetition (like (a+)+), which can take "
                "exponential time without the RE2 engine (install google-re2); rewrite it")
    return None


def _nested_repeat(pattern: str) -> bool:
    """Whether ``pattern`` repeats (``*``, ``+``, ``{n,}``) a group that holds a repetition
    or an alternation (Python's own parser; the fallback only)."""
    import sys

    if sys.version_info >= (3, 11):
        from re import _constants as constants  # type: ignore[attr-defined]
        from re import _parser as parser  # type: ignore[attr-defined]
    else:  # pragma: no cover - Python 3.10
        import sre_constants as constants
        import sre_parse as parser

    repeats = {constants.MAX_REPEAT, constants.MIN_REPEAT}

    def walk(items: Any, inside: bool) -> bool:
        for op, value in items:
            if op in repeats:
                _low, high, body = value
                unbounded = high == constants.MAXREPEAT
                if inside and high > 1:
                    return True
                if walk(body, inside or unbounded):
                    return True
            elif op == constants.BRANCH:
                if inside:
                    return True
                if any(walk(branch, inside) for branch in value[1]):
                    return True
            elif op == constants.SUBPATTERN and walk(value[-1], inside):
                return True
        return False

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return walk(parser.parse(pattern), False)
