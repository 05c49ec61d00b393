"""The patterns that decide redaction from the serialized arguments
(:mod:`toolguard.hashing._redact`, ``_decider``): what a string value holding a credential's
shape or JSON text, and a key matching ``audit.redact``, look like in JSON text. RE2 syntax.
Imports only the standard library and :mod:`toolguard.hashing._shapes`.
"""

from __future__ import annotations

import re
from typing import Final

from ._shapes import _ALWAYS_FROM, _SHAPES_SPEC

_SEPARATORS: Final = re.compile(r"[\s_.\-]+")
_WORD: Final = re.compile(r"[\w\- .]+")
_SOURCES: dict[re.Pattern[str], tuple[str, ...]] = {}  # key_pattern's regexes: their parts
_LOWER_TO_ASCII: Final = "\u0130\u212a"  # the only non-ASCII characters str.lower() maps to ASCII


def _shapes_screen() -> str:
    """An RE2 pattern, to be matched at the start of the JSON text of arguments, that finds a
    string value (a string token not followed by ``:``, so not a key: keys are never searched
    for shapes) holding what may make :func:`~toolguard.hashing._redact.redact_text` change
    it: a needle of a shape (ASCII case-insensitive, as ``str.lower`` finds it, plus the two
    non-ASCII characters it lowers to ASCII) or a run of 40 characters of the context-free
    shape; or a string starting with ``{`` or ``[`` after white space, which redaction parses
    as JSON text (escapes and any non-ASCII character count as white space), or with an
    escaped quote (a JSON string, which may hold JSON text in turn). Tokens are read from the
    start, so a quote inside a string is never taken for the end of one."""
    needles = sorted({n for shape in _SHAPES_SPEC for n in shape.needles})
    unit = r'(?:[^"\\]|\\.)'  # one character of a string token, or one escape
    trigger = ("(?i:" + "|".join(re.escape(n) for n in needles) + ")"
               + "".join(f"|\\x{{{ord(c):x}}}" for c in _LOWER_TO_ASCII)
               + f"|[A-Za-z0-9/+=]{{{_ALWAYS_FROM}}}")
    space = r"(?:[ ]|\\[tnrfb]|\\u00[0-9a-fA-F]{2}|[^\x00-\x7f])"
    return (rf'(?:[^"]|"{unit}*")*?"'
            rf'(?:{unit}*?(?:{trigger}){unit}*"(?:[^:]|\z)|{space}*(?:[\[{{]|\\"))')


# Characters written in a key between the letters of a folded pattern: what fold_key removes
# (``_``, ``.``, ``-`` and str.isspace(), the control ones as JSON escapes)
_GAP: Final = (r"(?:[ _.\-\x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}"
               r"\x{205f}\x{3000}]|\\[tnrfb]|\\u[0-9a-fA-F]{4})*")
_ANY_CHAR: Final = r'(?:[^"\\]|\\u[0-9a-fA-F]{4}|\\.)'  # one character of a key, as JSON
# Non-ASCII characters on which fold_key and RE2's (?i) may not agree: str.casefold gives more
# than one character, an ASCII one, or another than str.lower (sharp s → ss, the fi ligature
# → fi, KELVIN SIGN → k, long s → s, final sigma → sigma, Cherokee small letters → capitals):
# code points and (first, last) ranges.
# Text holding one is walked. tests/hashing/test_redaction_decided.py derives them again from
# the running Python's tables.
_FOLDS_APART: Final[tuple[int | tuple[int, int], ...]] = (
    0x00b5, 0x00df, 0x0130, 0x0149, 0x017f, 0x01f0, 0x0345, 0x0390, 0x03b0, 0x03c2,
    (0x03d0, 0x03d1), (0x03d5, 0x03d6), (0x03f0, 0x03f1), 0x03f5, 0x0587, (0x13a0, 0x13f5),
    (0x13f8, 0x13fd), (0x1c80, 0x1c88), (0x1e96, 0x1e9b), 0x1e9e, 0x1f50, 0x1f52, 0x1f54,
    0x1f56, (0x1f80, 0x1faf), (0x1fb2, 0x1fb4), (0x1fb6, 0x1fb7), 0x1fbc, 0x1fbe,
    (0x1fc2, 0x1fc4), (0x1fc6, 0x1fc7), 0x1fcc, (0x1fd2, 0x1fd3), (0x1fd6, 0x1fd7),
    (0x1fe2, 0x1fe4), (0x1fe6, 0x1fe7), (0x1ff2, 0x1ff4), (0x1ff6, 0x1ff7), 0x1ffc, 0x212a,
    (0xab70, 0xabbf), (0xfb00, 0xfb06), (0xfb13, 0xfb17),
)


def _key_screen(pattern: object) -> str | None:
    """An RE2 pattern found anywhere in the JSON text of arguments holding a key that
    ``pattern`` matches, as written or folded (:func:`_secret_key`); ``""`` for no pattern;
    None when it cannot be built: ``pattern`` is not the compiled ``audit.redact`` of a
    policy (:class:`~toolguard.hashing._regex.PolicyRegex`) or of :func:`key_pattern`, or
    one of its patterns is not a plain word.

    Each word becomes its letters (case-insensitive, as RE2 and ``str.casefold`` agree on
    every character but :data:`_FOLDS_APART`, found on its own), any of ``_ . - `` and white
    space allowed between them, each ``.`` (any character) one optional character: what
    a match in a key or in its folded form shows in the key's JSON text. Conservative: a
    match in a value, or across a key's end, merely sends the arguments to the walk."""
    if pattern is None:
        return ""
    words = getattr(pattern, "patterns", None)
    if type(words) is not tuple:
        words = _SOURCES.get(pattern)  # type: ignore[call-overload]
    if words is None:
        return None
    skeletons = []
    for word in words:
        if not _WORD.fullmatch(word):
            return None
        letters = []
        for char in word:
            if char == ".":
                letters.append(f"{_ANY_CHAR}?")
            elif not _SEPARATORS.fullmatch(char):  # a word character: no escape needed
                letters.append(char)
        skeletons.append(_GAP.join(letters))
    apart = "".join(f"\\x{{{c:x}}}" if isinstance(c, int) else f"\\x{{{c[0]:x}}}-\\x{{{c[1]:x}}}"
                    for c in _FOLDS_APART)
    return f"(?i:{'|'.join(skeletons)})|[{apart}]"
