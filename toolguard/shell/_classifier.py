"""The shell classifier: is this command line read-only, mutating, or a poll?

Coding agents have one shell tool (``bash``, ``exec_command``). Marked mutating as a whole,
every ``ls`` or ``git status`` is answered from the idempotency cache and the agent never sees
the changed output; marked read-only, a write never counts as progress and a duplicate write
is never caught. ``[tools.bash] shell = "command"`` names the argument that holds the command
line, and each call gets the effect of its command (:func:`classify_command`).

The command is parsed with tree-sitter's Bash grammar (``tree-sitter-bash``, the parser of
Codex's command safety) and its syntax tree walked with an allow-list of node kinds: lists,
pipelines, ``&&``/``||``/``;``/``&``, subshells and groups, ``if``/``while``/``for``/
``case``, functions, ``[[ ]]``, assignments, redirections, here-documents, quoting,
``$x``/``${x}``, ``$(...)``, backticks and process substitution (whose commands are
classified too; the walk is :mod:`toolguard.shell._walk`). Each simple command gets its
effect from the program allow-list of :mod:`toolguard.shell._programs`. A compound command
is as strong as its strongest part.

**Fail safe.** Whatever the walk does not understand makes the command **mutating**: a
syntax error, a node kind not on the list (arithmetic ``$((...))``/``((...))``/``$[...]``,
a ``c``-style ``for``), a parameter expansion other than the plain ones (``${!x}``,
``${x@P}``, subscripts), arithmetic comparison in ``[[ ]]`` of anything but numbers, an
assignment of an environment variable a program reads (``GIT_*``, ``LESSOPEN``, ``PAGER``,
``LD_PRELOAD``, ``PATH``...), output redirected to a file, ``eval``, ``alias``, ``set``
or ``bash`` options that change the commands after them (``-a``, ``-k``, ``-o keyword``),
a program run with a dynamic name (``$CMD``), a known program with an option not on its
list (or one spelled with an expansion: ``-o"$f"``), a command longer than
:data:`MAX_CHARS`, with more than :data:`MAX_PIPES` pipes, more than :data:`MAX_NODES`
syntax nodes or deeper than the nesting limits. A program that is not on the list at
all (``make``, ``python script.py``), or is named by a path outside the system folders
(``./ls``, ``.venv/bin/pytest``: a file an earlier command may have written), is
**unknown** (None): the tool's own effect applies.

The empty command is a poll (read more output of a running process).
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from functools import cache
from typing import TYPE_CHECKING, Any, Final

from toolguard._types import MUTATING, POLL, Effect

from ._programs import classify_words
from ._walk import MAX_NODES, Walker
from ._words import MAX_DEPTH, Unsafe, combine, static_words

if TYPE_CHECKING:
    from tree_sitter import Parser

__all__ = ["MAX_CHARS", "MAX_NODES", "MAX_PIPES", "classify_argv", "classify_command"]

MAX_CHARS: Final = 16_384
"""Longer commands are mutating without being parsed (the 4,471 recorded coding-agent
commands are at most 11 KB; parsing costs up to ~1.5 µs per character)."""
MAX_PIPES: Final = 256
"""``|`` characters beyond which a command is mutating unparsed: tree-sitter-bash parses a
pipeline in time quadratic in its stages (the recorded commands have at most 9)."""
_CACHE_ENTRIES: Final = 4096
"""Commands whose effect is remembered: keyed by a 16-byte BLAKE2b digest of the text, so the
cache holds at most ~1 MB whatever the commands' size."""

_LOCAL = threading.local()  # a tree-sitter Parser is not thread-safe: one per thread
# Bash's syntax is ASCII: any other character is part of a word. Each one is parsed as the
# letter Z (tree-sitter-bash 0.25.1 crashes the process on `{` followed by some code points
# of the private-use planes, e.g. U+F0000); no program name or allowed option is made of Zs.
_NON_ASCII: Final = re.compile(r"[^\x00-\x7f]")


@cache
def _language() -> Any:
    """The Bash grammar, loaded on first use (``import toolguard`` stays fast)."""
    from tree_sitter import Language
    from tree_sitter_bash import language

    return Language(language())


def _parser() -> Parser:
    parser: Parser | None = getattr(_LOCAL, "parser", None)
    if parser is None:
        from tree_sitter import Parser

        parser = _LOCAL.parser = Parser(_language())
    return parser


def _classify_text(command: str, depth: int) -> Effect | None:
    """The effect of a command line (a script given to ``bash -c`` at ``depth``)."""
    if depth > MAX_DEPTH or len(command) > MAX_CHARS or command.count("|") > MAX_PIPES:
        return MUTATING
    if not command.strip():
        return POLL  # the empty command: read more output of a running process
    if not command.isascii():
        command = _NON_ASCII.sub("Z", command)
    tree = _parser().parse(command.encode("ascii"))
    root = tree.root_node
    if root.has_error:
        return MUTATING  # bash runs the lines before a syntax error
    walker = Walker(depth, _classify_text)
    try:
        walker.stmt(root)
    except (Unsafe, RecursionError):
        return MUTATING
    if not walker.effects:
        return POLL  # comments only: nothing runs
    return combine(walker.effects)


class _Cache:
    """Effects of recent commands, keyed by a digest of their text: bounded in bytes
    (:data:`_CACHE_ENTRIES` entries of a 16-byte key), least recently used out first."""

    def __init__(self, entries: int) -> None:
        self._entries = entries
        self._lock = threading.Lock()
        self._data: OrderedDict[bytes, Effect | None] = OrderedDict()

    def get(self, command: str) -> Effect | None:
        key = hashlib.blake2b(command.encode("utf-8", "surrogatepass"),
                              digest_size=16).digest()
        with self._lock:
            if key in self._data:
                self._data.move_to_end(key)
                return self._data[key]
        effect = _classify_text(command, 0)
        with self._lock:
            self._data[key] = effect
            if len(self._data) > self._entries:
                self._data.popitem(last=False)
        return effect

    def __len__(self) -> int:
        return len(self._data)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()


_CACHE: Final = _Cache(_CACHE_ENTRIES)


def classify_command(command: str) -> Effect | None:
    """The effect of the shell command line ``command``: MUTATING, READONLY, POLL, or None
    when its program is not one the classifier knows (the tool's own effect applies). See
    the module docstring. Thread-safe; results are cached (an agent repeats its commands)
    in a cache of bounded size."""
    if len(command) > MAX_CHARS:
        return MUTATING
    return _CACHE.get(command)


def classify_argv(value: Any) -> Effect | None:
    """:func:`classify_command` for a tool argument: a command line (str), or an argument
    vector (a list of strings, as Codex's ``exec`` and ``execve`` take it: ``["bash",
    "-lc", "ls"]``); anything else is unknown (None)."""
    if isinstance(value, str):
        return classify_command(value)
    if isinstance(value, (list, tuple)) and value and all(isinstance(w, str) for w in value):
        words: Sequence[str] = value
        return classify_words(static_words(words), _classify_text, 0)
    return None
