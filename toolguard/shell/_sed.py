"""The shell classifier's reader of ``sed`` scripts: does a script only read?

A script is parsed the way GNU sed 4.9 compiles it (``sed/compile.c``: ``compile_program``,
``compile_address``, ``match_slash``, ``snarf_char_class``, ``read_label``,
``read_filename``, ``read_text``, ``mark_subst_opts``), one command after another:

* addresses: a line number with an optional ``~step``, ``$``, ``/regex/`` or ``\\cregexc``
  with ``I``/``M`` flags, a second address after ``,`` (also ``+N``/``~N``), then ``!``;
* ``{`` and ``}`` blocks; ``;``, newlines and blanks between commands; ``#`` comments;
* ``s`` with any delimiter, its regex (where a bracket expression ``[...]`` may hold the
  delimiter), its replacement (where it may not) and its flags ``g p i I m M`` and a count;
* ``y`` with any delimiter (no bracket expressions there: ``y/[/]/`` maps ``[`` to ``]``);
* ``a``/``i``/``c`` text to the end of the line (escaped newlines continue it), ``r``/``R``
  file names to the end of the line, labels of ``:``/``b``/``t``/``T``/``v``, which end at
  a blank, ``;``, ``}`` or ``#`` (so ``:a w out`` is a label and a ``w`` command);
* ``q``/``Q``/``l`` with a number, and the commands without arguments ``= d D F g G h H n N
  p P x z``.

A script only reads when it parses and holds no ``w``/``W`` (write a file), ``e`` (run a
command) and no ``s`` with a ``w`` or ``e`` flag. Anything else this parser does not know
(another command, an unterminated regex, an unmatched brace, a character outside ASCII as a
delimiter) makes the script writing: sed would reject most of them, and the few it would
take are not read-only as far as the classifier can tell.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["sed_script_reads"]

_EOF: Final = "\x00"  # what GNU's inchar() returns at the end (a script holds no NUL)
_BLANK: Final = " \t"
_SPACE: Final = " \t\n\v\f\r"
_DIGITS: Final = "0123456789"
_PLAIN: Final = frozenset("=dDFgGhHnNpPxz")  # no argument; read_end_of_cmd follows
_S_FLAGS: Final = frozenset("gpiImM")
_LABEL: Final = re.compile(r"[^ \t\n;}#]*")  # read_label stops at these
_TEXT: Final = re.compile(r"(?:[^\\\n]|\\.)*\\?", re.DOTALL)  # a backslash takes the next


class _Rejected(Exception):
    """The script writes or runs something, or is not one this parser understands."""


def sed_script_reads(script: str) -> bool:
    """Whether the sed program ``script`` (every ``-e`` joined by newlines, as GNU sed joins
    them) parses and only reads: no ``w``/``W``/``e`` command, no ``s`` with a ``w`` or
    ``e`` flag. See the module docstring for the grammar."""
    if _EOF in script:
        return False
    try:
        _Script(script).program()
    except _Rejected:
        return False
    return True


class _Script:
    """A cursor over a script with GNU sed's reading primitives (``inchar``, ``savchar``,
    ``in_nonblank``), so that each rule below follows its C counterpart."""

    __slots__ = ("at", "blocks", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.at = 0
        self.blocks = 0

    def char(self) -> str:
        if self.at >= len(self.text):
            return _EOF
        self.at += 1
        return self.text[self.at - 1]

    def back(self, c: str) -> None:
        if c != _EOF:
            self.at -= 1

    def nonblank(self) -> str:
        c = self.char()
        while c in _BLANK:
            c = self.char()
        return c

    def skip(self, pattern: re.Pattern[str]) -> int:
        """Where a match of ``pattern`` (which matches the empty text too) here ends."""
        found = pattern.match(self.text, self.at)
        return self.at if found is None else found.end()

    def integer(self, c: str) -> None:
        while c in _DIGITS:
            c = self.char()
        self.back(c)

    # -- the program -------------------------------------------------------------------
    def program(self) -> None:
        while True:
            c = self.char()
            while c == ";" or c in _SPACE:
                c = self.char()
            if c == _EOF:
                break
            self.command(c)
        if self.blocks:
            raise _Rejected  # an unmatched {

    def command(self, c: str) -> None:
        addressed = self.address(c)
        if addressed:
            c = self.nonblank()
            if c == ",":
                if not self.address(self.nonblank()):
                    raise _Rejected
                c = self.nonblank()
        if c == "!":
            c = self.nonblank()
            if c == "!":
                raise _Rejected
        if c == "#":
            if addressed:
                raise _Rejected
            while c not in ("\n", _EOF):
                c = self.char()
        elif c == "{":
            self.blocks += 1
        elif c == "}":
            if not self.blocks or addressed:
                raise _Rejected
            self.blocks -= 1
            self.end_of_command()
        elif c in ("a", "i", "c"):
            self.text_argument()
        elif c == ":":
            if addressed or not self.label():
                raise _Rejected
        elif c in ("b", "t", "T", "v"):
            self.label()  # v: a version check; the next command follows at once
        elif c in ("q", "Q", "l"):
            c = self.nonblank()
            if c in _DIGITS:
                self.integer(c)
            else:
                self.back(c)
            self.end_of_command()
        elif c in _PLAIN:
            self.end_of_command()
        elif c in ("r", "R"):
            if not self.filename():
                raise _Rejected
        elif c == "s":
            self.substitute()
        elif c == "y":
            delimiter = self.delimiter()
            self.slash(delimiter, regex=False)
            self.slash(delimiter, regex=False)
            self.end_of_command()
        else:
            raise _Rejected  # w, W, e (write or run), L, an unknown command, the end

    def end_of_command(self) -> None:
        c = self.nonblank()
        if c in ("}", "#"):
            self.back(c)
        elif c not in (_EOF, "\n", ";"):
            raise _Rejected

    # -- addresses ---------------------------------------------------------------------
    def address(self, c: str) -> bool:
        if c in ("/", "\\"):
            if c == "\\":
                c = self.char()
            self.slash(c, regex=True)
            c = self.nonblank()
            while c in ("I", "M"):
                c = self.nonblank()
            self.back(c)
            return True
        if c in _DIGITS:
            self.integer(c)
            c = self.nonblank()
            if c == "~":
                self.integer(self.nonblank())
            else:
                self.back(c)
            return True
        if c in ("+", "~"):
            self.integer(self.nonblank())
            return True
        return c == "$"

    def delimiter(self) -> str:
        c = self.char()
        if not c.isascii() or c == _EOF:
            raise _Rejected  # GNU sed takes a one-byte delimiter only
        return c

    def slash(self, delimiter: str, *, regex: bool) -> None:
        """Up to the closing ``delimiter`` (``match_slash``): a backslash takes the next
        character whatever it is; in a regex, a bracket expression may hold the delimiter."""
        if not delimiter.isascii():
            raise _Rejected
        while True:
            c = self.char()
            if c in (_EOF, "\n"):
                raise _Rejected  # unterminated
            if c == delimiter:
                return
            if c == "\\":
                if self.char() == _EOF:
                    raise _Rejected
            elif c == "[" and regex and self.char_class() != "]":
                raise _Rejected

    def char_class(self) -> str:
        """The rest of a bracket expression (``snarf_char_class``): the character it stops
        at, ``]`` when it closes. ``[:alpha:]``, ``[.x.]`` and ``[=x=]`` may hold a ``]``."""
        state, opener = 0, ""
        c = self.char()
        if c == "^":
            c = self.char()
        if c == "]":
            c = self.char()
        while True:
            if c in (_EOF, "\n"):
                return c
            if c in (".", ":", "="):
                if state == 1:
                    opener, state = c, 2
                    c = self.char()
                    continue
                if state == 2 and c == opener:
                    state = 3
                    c = self.char()
                    continue
            elif c == "[":
                if state == 0:
                    state = 1
                c = self.char()
                continue
            elif c == "]":
                if state in (0, 1):
                    return c
                if state == 3:
                    state = 0
            state &= ~1
            c = self.char()

    # -- arguments ---------------------------------------------------------------------
    def label(self) -> bool:
        """A label (``read_label``): whether it is not empty."""
        self.back(self.nonblank())
        end = self.skip(_LABEL)
        found, self.at = end > self.at, end
        return found

    def filename(self) -> bool:
        """A file name to the end of the line (``read_filename``): whether it is not empty."""
        self.back(self.nonblank())
        end = self.text.find("\n", self.at)
        end = len(self.text) if end < 0 else end
        found, self.at = end > self.at, end + 1
        return found

    def text_argument(self) -> None:
        """The text of ``a``/``i``/``c`` (``read_text``): ``a text``, ``a\\text`` or ``a\\``
        and the lines below, to the first newline not escaped."""
        c = self.nonblank()
        if c == _EOF:
            raise _Rejected
        if c == "\\":
            c = self.char()
            if c == _EOF:
                return
        else:
            self.back(c)
        self.at = self.skip(_TEXT)  # to the newline, escapes included
        self.char()

    def substitute(self) -> None:
        delimiter = self.delimiter()
        self.slash(delimiter, regex=True)
        self.slash(delimiter, regex=False)
        while True:  # the flags (mark_subst_opts), blanks allowed between them
            c = self.nonblank()
            if c in _S_FLAGS:
                continue
            if c in _DIGITS:
                self.integer(c)
            elif c in ("}", "#"):
                self.back(c)
                return
            elif c in (_EOF, "\n", ";") or (c == "\r" and self.char() == "\n"):
                return
            else:
                raise _Rejected  # w FILE, e, an unknown flag
