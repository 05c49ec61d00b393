"""Words, option specifications and the option reader of the shell classifier.

The pieces every program reader of :mod:`toolguard.shell._programs` shares: a simple
command's :class:`Word` values (as :mod:`toolguard.shell._walk` takes them out of the syntax
tree), :class:`Unsafe` (a construct not understood: the command is mutating), the
environment variables a read-only command may set, a program's read-only options
(:class:`Spec`) and :func:`parse_options`, which reads an argument vector with them (GNU
``getopt`` syntax: bundled short flags ``-la``, ``-n5``/``-n 5``, ``--lines=5``/
``--lines 5``, ``--`` ending the options; a long option is matched whole), and
:func:`combine`, the effect of a compound command.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, NamedTuple

from toolguard._types import MUTATING, POLL, READONLY, Effect

__all__ = ["DIGITS", "IDENTIFIER", "MAX_DEPTH", "Classifier", "Parsed", "Spec", "Special",
           "Unsafe", "Word", "combine", "env_assignment_ok", "option_spec",
           "output_target_ok", "parse_options", "static_words"]

MAX_DEPTH: Final = 16  # nested bash -c, find -exec, prefixes
DIGITS: Final = "0123456789"
_NOT_A_FILE: Final = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty"})


class Word(NamedTuple):
    """One word of a simple command.

    Attributes:
        text: the text after quote removal; parts only known at run time are ``\\x00``.
        static: no expansion, substitution, glob or brace: ``text`` is what the program gets.
        option_like: the word may become one starting with ``-`` (or several words) when it
            runs: an unquoted expansion, a glob or brace at its start, ``"$x"``.
    """

    text: str
    static: bool = True
    option_like: bool = False


def static_words(texts: Sequence[str]) -> list[Word]:
    """An argument vector (``["ls", "-la"]``) as words: every one static."""
    return [Word(text) for text in texts]


class Unsafe(Exception):
    """A construct the classifier does not understand: the command is mutating."""


# -- environment variables ---------------------------------------------------------------------
# Upper-case names are the ones programs read (GIT_EXTERNAL_DIFF, LESSOPEN, PAGER, LD_PRELOAD,
# BASH_ENV, PS4, HOME for ~/.gitconfig...): only these may be set for a read-only command.
_ENV_OK: Final = frozenset({
    "LANG", "LANGUAGE", "TERM", "COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR", "CLICOLOR",
    "CLICOLOR_FORCE", "TZ", "CI", "PYTHONPATH", "PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED",
    "PYTHONHASHSEED", "PYTHONWARNINGS", "PYTHONIOENCODING", "PYTHONFAULTHANDLER",
    "PYTHONDEVMODE", "PYTHONUTF8", "DJANGO_SETTINGS_MODULE", "GIT_OPTIONAL_LOCKS",
})
_PAGERS: Final = frozenset({"PAGER", "GIT_PAGER", "MANPAGER", "SYSTEMD_PAGER"})
_HARMLESS_PAGERS: Final = frozenset({"", "cat"})
IDENTIFIER: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def env_assignment_ok(name: str, value: Word | None) -> bool:
    """Whether ``name=value`` (before a command, alone, or through ``export``/``env``) leaves
    every read-only program read-only: a shell variable (a name with a lower-case letter) or
    an upper-case name on the allow-list; a pager variable only as ``cat`` or empty."""
    if not IDENTIFIER.fullmatch(name):
        return False
    if name in _PAGERS:
        return value is not None and value.static and value.text in _HARMLESS_PAGERS
    return name in _ENV_OK or name.startswith("LC_") or name != name.upper()


# -- option specifications ---------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Spec:
    """A program's read-only options.

    Attributes:
        flags: short options without a value (``"la"``).
        valued: short options that take a value (``"n"``: ``-n5``, ``-n 5``).
        long: long options without a value (``{"--all"}``).
        long_valued: long options that take a value (``--lines=5`` or ``--lines 5``).
        long_optional: long options whose value, if any, is written ``--color=always``.
        closed: no option or operand of the program writes or runs anything.
        any_option: every option is harmless (the program has none that writes or runs).
        max_operands: more operands write (``uniq IN OUT``), or None for any number.
        effect: the effect when the options are all allowed.
    """

    flags: str = ""
    valued: str = ""
    long: frozenset[str] = frozenset()
    long_valued: frozenset[str] = frozenset()
    long_optional: frozenset[str] = frozenset()
    closed: bool = False
    any_option: bool = False
    max_operands: int | None = None
    effect: Effect = READONLY


def option_spec(flags: str = "", valued: str = "", longs: str = "", **kw: object) -> Spec:
    """A :class:`Spec` from a compact text: ``longs`` lists names (no dashes) separated by
    spaces, ``name=`` taking a value, ``name?`` an optional ``=value``."""
    plain, valued_l, optional = set(), set(), set()
    for name in longs.split():
        if name.endswith("="):
            valued_l.add("--" + name[:-1])
        elif name.endswith("?"):
            optional.add("--" + name[:-1])
        else:
            plain.add("--" + name)
    plain |= {"--help", "--version"}
    return Spec(flags, valued, frozenset(plain), frozenset(valued_l), frozenset(optional),
                **kw)  # type: ignore[arg-type]


# -- reading options ---------------------------------------------------------------------------
class Parsed(NamedTuple):
    options: list[tuple[str, str | None]]  # (option as written, its value)
    operands: list[Word]


def parse_options(spec: Spec, words: Sequence[Word], *, stop_at_operand: bool = False
                  ) -> Parsed:
    """``words`` (after the program name) read with ``spec``; raises :class:`Unsafe` on an
    option not allowed, or a word that may become one where options are not all harmless.
    ``stop_at_operand``: the first operand ends the options (POSIX; ``env``, ``xargs``,
    ``timeout`` and the other prefixes run it)."""
    options: list[tuple[str, str | None]] = []
    operands: list[Word] = []
    i = 0
    while i < len(words):
        word = words[i]
        text = word.text
        i += 1
        if not word.static:
            # `-o"$f"`, `--expression="$x"`: an option whose value is only known when it runs
            if (word.option_like or text.startswith("-")) and not spec.closed:
                raise Unsafe
            operands.append(word)
            if stop_at_operand:
                break
            continue
        if text == "--":
            operands.extend(words[i:])
            if any(w.option_like for w in words[i:]) and spec.max_operands is not None:
                raise Unsafe
            break
        if not text.startswith("-") or text == "-":
            operands.append(word)
            if stop_at_operand:
                operands.extend(words[i:])
                break
            continue
        if spec.any_option:
            options.append((text, None))
            continue
        if text.startswith("--"):
            name, eq, value = text.partition("=")
            if name in spec.long and not eq:
                options.append((name, None))
            elif name in spec.long_optional:
                options.append((name, value if eq else None))
            elif name in spec.long_valued:
                if eq:
                    options.append((name, value))
                elif i < len(words) and words[i].static:
                    options.append((name, words[i].text))
                    i += 1
                else:
                    raise Unsafe
            else:
                raise Unsafe
            continue
        j = 1  # a bundle of short options: -la, -n5, -vn 5
        while j < len(text):
            c = text[j]
            if c in spec.flags:
                options.append(("-" + c, None))
                j += 1
            elif c in spec.valued:
                if j + 1 < len(text):
                    options.append(("-" + c, text[j + 1:]))
                elif i < len(words) and words[i].static:
                    options.append(("-" + c, words[i].text))
                    i += 1
                else:
                    raise Unsafe
                break
            else:
                raise Unsafe
    if spec.max_operands is not None and (
            len(operands) > spec.max_operands or any(w.option_like for w in operands)):
        raise Unsafe
    return Parsed(options, operands)


# -- readers of one simple command ------------------------------------------------------------
Classifier = Callable[[str, int], Effect | None]  # a nested script (bash -c) -> its effect
Special = Callable[[str, list[Word], Classifier, int, bool], Effect | None]
"""A program's reader: ``(name, args, script, depth, appended)`` -> its effect."""


def combine(effects: Sequence[Effect | None]) -> Effect | None:
    """A compound command is as strong as its strongest part: one mutating part makes it
    mutating, one unknown part unknown, one poll part (with the rest read-only) a poll."""
    if MUTATING in effects:
        return MUTATING
    if None in effects:
        return None
    if POLL in effects:
        return POLL
    return READONLY


def output_target_ok(target: Word) -> bool:
    """Whether output redirected to ``target`` stays off the file system (``/dev/null``)."""
    return target.static and target.text in _NOT_A_FILE
