"""Where a policy's keys are written: one overlay of the load (:class:`_Layer`: a file of the
``extends`` chain, a mapping, or the environment) and the line and column of every key,
table header and array item of a TOML text (:class:`_KeyLines`), so that each problem names
the file, the dotted key path and the place (``policy._loader`` stage 3 onward).
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from toolguard._errors import PolicyProblem

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]

KeyPath = tuple[str | int, ...]

_BUILT_IN = -1  # layer index of a built-in default

# --- layers --------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Layer:
    """One overlay: a file of the ``extends`` chain, a mapping, or the environment.

    ``variables`` (the environment only) maps a lower-case key path to the variable that set
    it; problems and provenance then name that variable instead of ``source``.
    """

    data: dict[str, Any]
    source: str
    lines: _KeyLines | None = None
    variables: Mapping[tuple[str, ...], str] = field(default_factory=dict)

    def origin(self, path: KeyPath) -> str:
        """Who set the value at ``path``: the file, or ``env VAR`` for the environment."""
        if not self.variables:
            return self.source
        lowered = tuple(p.lower() for p in path if isinstance(p, str))
        for n in range(len(lowered), 0, -1):
            var = self.variables.get(lowered[:n])
            if var is not None:
                return f"env {var}"
        # set by variables deeper than the problem (TOOLGUARD_TOOLS__BASH__RULES__0__EFFECT
        # when tools.bash.rules must be an array): name them
        deeper = sorted(var for key, var in self.variables.items()
                        if key[:len(lowered)] == lowered)
        return f"env {', '.join(deeper)}" if deeper else self.source

    def position(self, path: KeyPath) -> tuple[int, int] | tuple[None, None]:
        """Line and column where ``path`` (or its nearest written parent) is set, if known."""
        found = None if self.lines is None else self.lines.position_of(path)
        return (None, None) if found is None else found

    def problem(self, path: KeyPath, message: str) -> PolicyProblem:
        """A problem located at ``path`` in this layer."""
        line, column = self.position(path)
        return PolicyProblem(self.origin(path), _display(path), message, line, column)



# --- key paths -----------------------------------------------------------------------------

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def problem_in_file(source: str, path: KeyPath, message: str) -> PolicyProblem:
    """A problem found after loading (by a Guard, against its tools) at ``path`` of the policy
    file ``source``, located by reading the file again; without a line when ``source`` is no
    readable file (``built-in``, ``env VAR``, ``<dict>``)."""
    try:
        with open(source, encoding="utf-8") as file:  # noqa: PTH123 - one read, any source
            text = file.read()
    except (OSError, ValueError):
        return PolicyProblem(source, _display(path), message)
    return _Layer({}, source, _KeyLines(text)).problem(path, message)


def _display(path: KeyPath) -> str:
    """``tools."fs.grep".rules[0].match.command``: TOML spelling, indices in brackets."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            key = part if _BARE_KEY.fullmatch(part) else json.dumps(part, ensure_ascii=False)
            out += f".{key}" if out else key
    return out


def _provenance_key(path: KeyPath) -> str:
    """The key of ``policy.source_of``: plain dotted names as ``resolve_tool`` builds them."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


class _KeyLines:
    """The position of every key, table header and array item in a valid TOML text.

    :mod:`tomllib` keeps no positions, so this small scanner walks the text once, tracking the
    current table (``[a.b]``, ``[[a.b]]`` with its index), dotted keys, inline tables and
    arrays, and skipping strings and comments. Best effort: it stops quietly on anything it
    does not understand, and :meth:`position_of` falls back to the nearest written parent.
    """

    def __init__(self, text: str) -> None:
        self._text = text
        self._pos = 0
        self._line = 1
        self._positions: dict[KeyPath, tuple[int, int]] = {}  # 1-based line and column
        self._tables: dict[KeyPath, int] = {}  # array-of-tables path -> items so far
        with contextlib.suppress(IndexError, ValueError, tomllib.TOMLDecodeError, KeyError):
            self._document()  # on anything unexpected, keep what was found

    def position_of(self, path: KeyPath) -> tuple[int, int] | None:
        """Line and column of ``path``, else of its nearest parent written in the text."""
        for n in range(len(path), 0, -1):
            found = self._positions.get(path[:n])
            if found is not None:
                return found
        return None

    def _here(self) -> tuple[int, int]:
        return self._line, self._pos - (self._text.rfind("\n", 0, self._pos) + 1) + 1

    def _record(self, path: KeyPath, where: tuple[int, int]) -> None:
        for n in range(1, len(path) + 1):
            self._positions.setdefault(path[:n], where)

    def _peek(self, ahead: int = 0) -> str:
        index = self._pos + ahead
        return self._text[index] if index < len(self._text) else ""

    def _advance(self, count: int = 1) -> None:
        self._line += self._text.count("\n", self._pos, self._pos + count)
        self._pos += count

    def _skip(self, *, newlines: bool) -> None:
        """Skip blanks (and line breaks and comments when ``newlines``)."""
        while self._pos < len(self._text):
            char = self._peek()
            if char in " \t" or (newlines and char in "\r\n"):
                self._advance()
            elif char == "#":
                end = self._text.find("\n", self._pos)
                self._advance((len(self._text) if end < 0 else end) - self._pos)
            else:
                return

    def _expect(self, char: str) -> None:
        if self._peek() != char:
            raise ValueError(f"expected {char!r} at line {self._line}")
        self._advance()

    def _document(self) -> None:
        table: KeyPath = ()
        while True:
            self._skip(newlines=True)
            if self._pos >= len(self._text):
                return
            where = self._here()
            if self._text.startswith("[[", self._pos):
                self._advance(2)
                name: KeyPath = tuple(self._key())
                self._expect("]")
                self._expect("]")
                index = self._tables.get(name, 0)
                self._tables[name] = index + 1
                table = (*name, index)
                self._record(table, where)
            elif self._peek() == "[":
                self._advance()
                table = tuple(self._key())
                self._expect("]")
                self._record(table, where)
            else:
                path = (*table, *self._key())
                self._expect("=")
                self._record(path, where)
                self._value(path)

    def _key(self) -> list[str]:
        parts: list[str] = []
        while True:
            self._skip(newlines=False)
            if self._peek() in {'"', "'"}:
                raw = self._string()
                parts.append(tomllib.loads(f"k = {raw}")["k"])
            else:
                found = _BARE_KEY.match(self._text, self._pos)
                if found is None:
                    raise ValueError(f"expected a key at line {self._line}")
                parts.append(found.group())
                self._advance(len(found.group()))
            self._skip(newlines=False)
            if self._peek() != ".":
                return parts
            self._advance()

    def _value(self, path: KeyPath) -> None:
        self._skip(newlines=False)
        char = self._peek()
        if char == "{":
            self._advance()
            while True:
                self._skip(newlines=True)
                if self._peek() == "}":
                    self._advance()
                    return
                where = self._here()
                inner = (*path, *self._key())
                self._expect("=")
                self._record(inner, where)
                self._value(inner)
                self._skip(newlines=True)
                if self._peek() == ",":
                    self._advance()
        elif char == "[":
            self._advance()
            index = 0
            while True:
                self._skip(newlines=True)
                if self._peek() == "]":
                    self._advance()
                    return
                self._record((*path, index), self._here())
                self._value((*path, index))
                self._skip(newlines=True)
                if self._peek() == ",":
                    self._advance()
                index += 1
        elif char in {'"', "'"}:
            self._string()
        else:
            found = _SCALAR.match(self._text, self._pos)
            if found is None or not found.group():
                raise ValueError(f"expected a value at line {self._line}")
            self._advance(len(found.group()))

    def _string(self) -> str:
        """Skip a string of any of the four kinds; return its raw text (quotes included)."""
        start = self._pos
        quote = self._peek()
        if self._text.startswith(quote * 3, self._pos):
            end = self._text.index(quote * 3, self._pos + 3)
            if quote == '"':
                while _escaped(self._text, end):
                    end = self._text.index(quote * 3, end + 1)
            end += 3
            for _ in range(2):  # up to two quotes may end the content: """a"""" is 'a"'
                if end < len(self._text) and self._text[end] == quote:
                    end += 1
        else:
            end = self._pos + 1
            while self._text[end] != quote:
                end += 2 if quote == '"' and self._text[end] == "\\" else 1
            end += 1
        self._advance(end - start)
        return self._text[start:end]


_SCALAR = re.compile(r"[^,\]}\r\n#]+")


def _escaped(text: str, index: int) -> bool:
    """Whether ``text[index]`` is preceded by an odd number of backslashes."""
    count = 0
    while index - count - 1 >= 0 and text[index - count - 1] == "\\":
        count += 1
    return count % 2 == 1


def _leaves(data: Mapping[str, Any], prefix: KeyPath = ()) -> Iterator[KeyPath]:
    """Paths of the values ``data`` sets: scalars, arrays (replaced whole) and empty tables."""
    for key, value in data.items():
        path = (*prefix, key)
        if key == "extends" and not prefix:
            continue
        if isinstance(value, dict) and value:
            yield from _leaves(value, path)
        else:
            yield path
