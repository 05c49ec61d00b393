"""The shell classifier's readers of programs whose arguments decide their effect.

A test run (``pytest``, ``python -m pytest``, ``python -m unittest``: they observe the code),
``pip list/show/freeze/check``, a ``sed`` script that only prints (parsed with GNU sed's
grammar by :mod:`toolguard.shell._sed`: no ``w``/``W``/``e`` command, no ``s///w`` or
``s///e``), ``rg`` with its read-only options,
and the Bash builtins that only read or set shell state (``history``, ``alias``/``hash``
listing, ``shopt``, ``set``, ``test``/``[``, ``printf``, ``read``; ``source`` runs a file:
unknown). :data:`READERS` maps each program name to its reader; :func:`python_reader`
gives the reader of a ``python*`` name.
"""

from __future__ import annotations

import re
from typing import Final

from toolguard._types import MUTATING, READONLY, Effect

from ._sed import sed_script_reads
from ._words import (
    IDENTIFIER,
    Classifier,
    Special,
    Unsafe,
    Word,
    env_assignment_ok,
    parse_options,
)
from ._words import option_spec as _spec

__all__ = ["READERS", "SAFE_SET_FLAGS", "SAFE_SET_OPTIONS", "SAFE_SHOPT", "python_reader"]

_PYTHON: Final = re.compile(r"python[0-9.]*")
_PYTHON_FLAGS: Final = re.compile(r"-[uBbqsSEIO]+")
SAFE_SET_FLAGS: Final = frozenset("euxvfnbBCEhmpPtT")
"""The flags of ``set`` (and ``bash``) that leave every read-only command read-only; not
``-a`` (allexport: every variable assigned reaches the programs), ``-k`` (keyword: ``git diff
GIT_EXTERNAL_DIFF=x`` puts the word in git's environment) nor ``-H`` (history expansion
rewrites the lines after it)."""
SAFE_SET_OPTIONS: Final = frozenset({
    "errexit", "nounset", "xtrace", "verbose", "noglob", "noexec", "notify", "braceexpand",
    "noclobber", "errtrace", "functrace", "hashall", "monitor", "physical", "pipefail",
    "privileged", "onecmd", "ignoreeof", "emacs", "vi", "nolog"})
"""The names of ``set -o``/``bash -o`` that leave every read-only command read-only (the
flags above, spelled out, and the ones without a flag); not ``allexport``, ``keyword``,
``histexpand``, ``history``, ``posix``, ``interactive-comments``."""
_SET_OPTIONS_OFF: Final = frozenset({"allexport", "keyword", "histexpand", "history"})


_PYTEST = _spec("qvxslh", "kmpcorWn", "quiet verbose exitfirst capture= tb= maxfail= "
                "no-header no-summary collect-only co lf last-failed ff failed-first nf "
                "new-first sw stepwise stepwise-skip durations= durations-min= "
                "disable-warnings disable-pytest-warnings showlocals full-trace runxfail "
                "strict-markers strict-config strict deselect= ignore= ignore-glob= "
                "noconftest setup-show setup-plan setup-only color= code-highlight= "
                "import-mode= doctest-modules pdb trace fixtures markers rootdir= "
                "continue-on-collection-errors show-capture= log-level= log-cli-level= "
                "verbosity= assert= rs no-cov tb")


def _pytest(name: str, args: list[Word], script: Classifier, depth: int, appended: bool
            ) -> Effect | None:
    parsed = parse_options(_PYTEST, args)
    for option, value in parsed.options:
        if option == "-p" and not (value or "").startswith("no:"):
            raise Unsafe  # a plugin is code
        if option in ("-c", "-o"):
            raise Unsafe  # another configuration: cache_dir, basetemp, addopts...
    for operand in parsed.operands:
        # @FILE: more arguments read from a file (argparse's fromfile_prefix_chars), options
        # such as --basetemp or --junitxml included; a word known only when it runs may be one
        if operand.text.startswith("@") or not operand.static:
            raise Unsafe
    return READONLY


_UNITTEST = _spec("vqfcbk", "kspt", "verbose quiet failfast catch buffer locals durations= "
                  "start-directory= pattern= top-level-directory=")


def _python(name: str, args: list[Word], script: Classifier, depth: int, appended: bool
            ) -> Effect | None:
    """``python -m pytest``/``-m unittest`` (a test run) and ``python --version`` only
    observe; ``python -c``, a script or another module runs code that may do anything."""
    if not _PYTHON.fullmatch(name):
        return None
    i = 0
    while i < len(args):
        word = args[i]
        if not word.static:
            return None
        text = word.text
        if text in ("-V", "--version", "-VV"):
            return READONLY
        if text == "-m" and i + 1 < len(args) and args[i + 1].static:
            module, rest = args[i + 1].text, args[i + 2:]
            if module == "pytest":
                return _pytest("pytest", rest, script, depth, appended)
            if module == "unittest":
                parsed = parse_options(_UNITTEST, rest)
                return READONLY if all(w.static for w in parsed.operands) else MUTATING
            return None
        if _PYTHON_FLAGS.fullmatch(text):
            i += 1
            continue
        return None
    return None


def _pip(name: str, args: list[Word], script: Classifier, depth: int, appended: bool
         ) -> Effect | None:
    spec = _spec("vqV", "", "verbose quiet disable-pip-version-check no-color no-input "
                 "isolated require-virtualenv", )
    sub = [w for w in args if not w.text.startswith("-")][:1]
    if not sub:
        parse_options(spec, args)
        return READONLY
    at = args.index(sub[0])
    parse_options(spec, args[:at])
    commands = {
        "list": _spec("oulev", "", "outdated uptodate editable local user format= "
                      "not-required exclude-editable include-editable path= pre exclude= "
                      "verbose"),
        "show": _spec("fv", "", "files verbose"),
        "freeze": _spec("lv", "", "all local user exclude-editable path= exclude= verbose"),
        "check": _spec("v", "", "verbose"),
    }
    sub_spec = commands.get(sub[0].text)
    if sub_spec is None:
        return MUTATING
    parse_options(sub_spec, args[at + 1:])
    return READONLY


_SED_SPEC: Final = _spec("nErsuz", "el", "quiet silent regexp-extended separate unbuffered "
                 "null-data posix debug sandbox expression= line-length= follow-symlinks")


def _sed(name: str, args: list[Word], script: Classifier, depth: int, appended: bool) \
        -> Effect | None:
    spec = _SED_SPEC
    parsed = parse_options(spec, args)
    scripts = [v or "" for o, v in parsed.options if o in ("-e", "--expression")]
    operands = parsed.operands
    if not scripts:
        if not operands:
            raise Unsafe
        if not operands[0].static:
            raise Unsafe
        scripts, operands = [operands[0].text], operands[1:]
    # --sandbox is not trusted: GNU sed compiles a script given before it unchecked. GNU sed
    # joins the -e scripts with newlines (`-e 'a\' -e 'text'` is one command)
    if not sed_script_reads("\n".join(scripts)):
        raise Unsafe
    return READONLY


_RG_SPEC: Final = _spec("abcFHhiIlLnNopqsSuUvwxz.0123456789", "ABCeEfgjmMrtTd", (
        "after-context= before-context= context= case-sensitive ignore-case smart-case "
        "count count-matches color= colors= column no-column context-separator= "
        "fixed-strings files files-with-matches files-without-match follow glob= iglob= "
        "heading no-heading hidden no-hidden ignore-file= invert-match json line-number "
        "no-line-number max-count= max-depth= max-filesize= multiline multiline-dotall "
        "no-ignore no-ignore-vcs no-ignore-parent no-ignore-dot no-ignore-global "
        "no-messages null only-matching passthru pcre2 engine= pretty quiet regexp= "
        "replace= search-zip sort= sortr= stats text threads= trim type= type-not= "
        "type-list unrestricted vimgrep with-filename no-filename word-regexp line-regexp "
        "no-config debug encoding= crlf binary no-binary"))


def _rg(name: str, args: list[Word], script: Classifier, depth: int, appended: bool
        ) -> Effect | None:
    spec = _RG_SPEC
    parse_options(spec, args)
    return READONLY


def _history(name: str, args: list[Word], script: Classifier, depth: int, appended: bool
             ) -> Effect | None:
    if any(not (w.static and w.text.isdigit()) for w in args):
        raise Unsafe
    return READONLY


def _listing_only(name: str, args: list[Word], script: Classifier, depth: int,
                  appended: bool) -> Effect | None:
    """``alias``, ``hash``, ``trap -p``...: listing without operands; defining changes what
    later words mean."""
    if any(not (w.static and w.text in ("-p", "-l", "-t", "-r")) for w in args):
        raise Unsafe
    return READONLY


SAFE_SHOPT: Final = frozenset({"extglob", "nullglob", "globstar", "dotglob", "nocaseglob",
                                "nocasematch", "failglob", "lastpipe", "inherit_errexit",
                                "xpg_echo", "globasciiranges"})


_SHOPT_SPEC: Final = _spec("pqsuo", "", "")


def _shopt(name: str, args: list[Word], script: Classifier, depth: int, appended: bool
           ) -> Effect | None:
    parsed = parse_options(_SHOPT_SPEC, args)
    if any(not w.static or w.text not in SAFE_SHOPT for w in parsed.operands) and any(
            o in ("-s", "-u") for o, _ in parsed.options):
        raise Unsafe
    return READONLY


def _set(name: str, args: list[Word], script: Classifier, depth: int, appended: bool
         ) -> Effect | None:
    """``set`` turning on or off only options that leave every read-only command read-only
    (:data:`SAFE_SET_FLAGS`, :data:`SAFE_SET_OPTIONS`; in a bundle such as ``-eo pipefail``
    each ``o`` takes the next word); ``--``, ``-`` or the first other word starts the
    positional parameters."""
    i = 0
    while i < len(args):
        word = args[i]
        i += 1
        if not word.static:
            raise Unsafe
        text = word.text
        if text in ("-", "--") or text[:1] not in ("-", "+"):
            return READONLY
        off = text[0] == "+"  # turning any of them off is harmless
        for flag in text[1:]:
            if flag == "o":
                if i >= len(args):
                    return READONLY  # `set -o`: the list of options
                option = args[i]
                if not (option.static and (option.text in SAFE_SET_OPTIONS or (
                        off and option.text in _SET_OPTIONS_OFF))):
                    raise Unsafe
                i += 1
            elif flag not in SAFE_SET_FLAGS and not (off and flag in "akH"):
                raise Unsafe
    return READONLY


def _test(name: str, args: list[Word], script: Classifier, depth: int, appended: bool
          ) -> Effect | None:
    """``test``/``[``: no arithmetic evaluation of operands, but ``-v`` looks a name up,
    and a subscript in it is evaluated."""
    for i, word in enumerate(args):
        if word.static and word.text == "-v":
            target = args[i + 1] if i + 1 < len(args) else None
            if target is not None and not (target.static and IDENTIFIER.fullmatch(target.text)):
                raise Unsafe
    return READONLY


def _printf(name: str, args: list[Word], script: Classifier, depth: int, appended: bool
            ) -> Effect | None:
    """``printf``, and ``printf -v NAME`` (or ``-vNAME``) into a variable a read-only
    command may set (:func:`env_assignment_ok`: not ``GIT_EXTERNAL_DIFF``, which an
    ``export`` would then hand to git)."""
    first = args[0] if args else Word("")
    if first.option_like or (not first.static and first.text.startswith("-")):
        raise Unsafe
    if first.text.startswith("-v"):
        target = first.text[2:] or (args[1].text if len(args) > 1 and args[1].static else "")
        if not env_assignment_ok(target, None):
            raise Unsafe
    return READONLY


_READ_SPEC: Final = _spec("ers", "dinNptu", "")


def _read(name: str, args: list[Word], script: Classifier, depth: int, appended: bool
          ) -> Effect | None:
    parsed = parse_options(_READ_SPEC, args)
    if any(o in ("-a",) for o, _ in parsed.options) or any(
            not (w.static and env_assignment_ok(w.text, None)) for w in parsed.operands):
        raise Unsafe
    return READONLY


def _source(name: str, args: list[Word], script: Classifier, depth: int, appended: bool
            ) -> Effect | None:
    return None  # runs a file: what it does is not in the command


READERS: Final[dict[str, Special]] = {
    "pytest": _pytest, "py.test": _pytest,
    "pip": _pip, "pip3": _pip,
    "sed": _sed, "rg": _rg,
    "history": _history, "alias": _listing_only, "hash": _listing_only,
    "shopt": _shopt, "set": _set, "test": _test, "[": _test, "printf": _printf,
    "read": _read, "source": _source, ".": _source,
}


def python_reader(name: str) -> Special | None:
    """The reader of a ``python``, ``python3``, ``python3.11``... program name."""
    return _python if _PYTHON.fullmatch(name) else None
