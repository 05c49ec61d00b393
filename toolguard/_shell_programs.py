"""The programs the shell classifier knows, with the options each may take and stay read-only.

One simple command (``sort -u names.txt``), its words already taken out of the Bash syntax
tree by :mod:`toolguard._shell`, gets its effect here (:func:`classify_words`). The rule is an
allow-list: a program on it, with only the options listed for it (GNU ``getopt`` syntax:
bundled short flags ``-la``, ``-n5``/``-n 5``, ``--lines=5``/``--lines 5``, ``--`` ending
the options), is read-only (or a poll); the same program with any other option, or with an
operand where it writes (``uniq IN OUT``), is **mutating**; a program not on the list is
**unknown** (the tool's own effect). A long option is matched whole, so an abbreviation GNU
would accept (``sort --outp=x``) is unknown, hence mutating.

A word whose text is only known when the command runs (``$f``, ``"$(cmd)"``, ``*.py``) may
turn into any option: it is accepted only where every option of the program is harmless
(``closed`` programs: ``cat``, ``grep``, ``wc``...), and so are the words ``xargs`` appends.

The lists follow Codex's ``command_safety`` (``is_safe_command.rs``: ``cat cd cut echo expr
grep head ls nl paste pwd rev seq stat tail tr uniq wc which whoami``, ``find`` without
``-exec``-like actions, ``sed -n``, ``git status/log/diff/show/branch``), widened with the
GNU manuals' option tables of each program, SWE-agent's file viewer (``open``, ``goto``...)
and test runs (``pytest``, ``python -m pytest``, ``python -m unittest``: they observe the
code; their output changes when the code does).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, NamedTuple

from ._types import MUTATING, POLL, READONLY, Effect

__all__ = ["MAX_DEPTH", "Unsafe", "Word", "classify_words", "combine", "env_assignment_ok",
           "output_target_ok", "static_words"]


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
_IDENTIFIER: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def env_assignment_ok(name: str, value: Word | None) -> bool:
    """Whether ``name=value`` (before a command, alone, or through ``export``/``env``) leaves
    every read-only program read-only: a shell variable (a name with a lower-case letter) or
    an upper-case name on the allow-list; a pager variable only as ``cat`` or empty."""
    if not _IDENTIFIER.fullmatch(name):
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


def _spec(flags: str = "", valued: str = "", longs: str = "", **kw: object) -> Spec:
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


_ANY = _spec(any_option=True, closed=True)
_DIGITS = "0123456789"

SPECS: Final[dict[str, Spec]] = {
    # coreutils and friends that only read (GNU option tables)
    "cat": _spec("AbeEnstTuv", "", "show-all number-nonblank show-ends number squeeze-blank "
                 "show-tabs show-nonprinting", closed=True),
    "tac": _spec("brs", "s", "before regex separator=", closed=True),
    "head": _spec("qvz" + _DIGITS, "nc", "quiet silent verbose zero-terminated lines= bytes=",
                  closed=True),
    "tail": _spec("qvzfFr" + _DIGITS, "ncs", "quiet silent verbose zero-terminated lines= "
                  "bytes= follow? retry pid= sleep-interval= max-unchanged-stats=",
                  closed=True),
    "wc": _spec("clmwL", "", "bytes chars lines words max-line-length files0-from= total=",
                closed=True),
    "nl": _spec("p", "bdfhilnsvw", "body-numbering= section-delimiter= footer-numbering= "
                "header-numbering= line-increment= join-blank-lines= number-format= "
                "no-renumber number-separator= starting-line-number= number-width=",
                closed=True),
    "cut": _spec("nsz", "bcdf", "bytes= characters= delimiter= fields= complement "
                 "only-delimited output-delimiter= zero-terminated", closed=True),
    "paste": _spec("sz", "d", "serial delimiters= zero-terminated", closed=True),
    "tr": _spec("cCdst", "", "complement delete squeeze-repeats truncate-set1", closed=True),
    "rev": _spec("0", "", "zero", closed=True),
    "fold": _spec("bs", "w", "bytes spaces width=", closed=True),
    "column": _spec("tnexsJLNrRHWOdo", "cCNsoRHWOdrl", "table table-columns= "
                    "table-name= separator= output-separator= output-width= fillrows json "
                    "keep-empty-lines table-noheadings table-right= table-truncate= "
                    "table-wrap= table-hide= tree= tree-id= tree-parent= use-spaces=",
                    closed=True),
    "expr": _ANY, "true": _ANY, "false": _ANY, ":": _ANY,
    "seq": _spec("w", "fs", "format= separator= equal-width", closed=True),
    "stat": _spec("LftZ", "c", "dereference file-system format= printf= terse cached=",
                  closed=True),
    "uname": _spec("asnrvmpio", "", "all kernel-name nodename kernel-release kernel-version "
                   "machine processor hardware-platform operating-system", closed=True),
    "whoami": _ANY, "id": _ANY, "groups": _ANY, "tty": _ANY, "arch": _ANY, "nproc": _ANY,
    "uptime": _ANY, "free": _ANY, "getconf": _ANY, "locale": _ANY, "lsof": _ANY,
    "which": _spec("as", "", "all skip-alias skip-functions read-alias read-functions",
                   closed=True),
    "type": _spec("afptP", "", "", closed=True),
    "basename": _spec("asz", "s", "multiple suffix= zero", closed=True),
    "dirname": _spec("z", "", "zero", closed=True),
    "realpath": _spec("eEmLPqsz", "", "canonicalize-existing canonicalize-missing logical "
                      "physical quiet relative-to= relative-base= strip no-symlinks zero",
                      closed=True),
    "readlink": _spec("efmnqsvz", "", "canonicalize canonicalize-existing canonicalize-missing "
                      "no-newline quiet silent verbose zero", closed=True),
    "printenv": _spec("0", "", "null", closed=True),
    "pwd": _spec("LP", "", "", closed=True),
    "comm": _spec("123iz", "", "check-order nocheck-order output-delimiter= total "
                  "zero-terminated", closed=True),
    "numfmt": _ANY, "cmp": _ANY, "diff": _ANY, "du": _ANY, "df": _ANY, "jq": _ANY,
    "od": _ANY, "hexdump": _ANY, "strings": _ANY, "md5sum": _ANY, "sha1sum": _ANY,
    "sha256sum": _ANY, "sha512sum": _ANY, "b2sum": _ANY, "cksum": _ANY, "zcat": _ANY,
    "bzcat": _ANY, "look": _ANY,
    "ls": _ANY, "dir": _ANY, "grep": _ANY, "egrep": _ANY, "fgrep": _ANY,
    "file": _spec("bcEhiIkLlNnprsSvzZ0", "eFfmP", "brief checking-printout exclude= "
                  "exclude-quiet= files-from= separator= mime mime-type mime-encoding "
                  "keep-going list no-dereference dereference no-buffer no-pad preserve-date "
                  "raw special-files uncompress uncompress-noreport print0 extension "
                  "apple parameter= magic-file="),
    "tree": _spec("adfxugspDFqNQrtcvUhCSAnJiX", "LPIT", "noreport charset= filelimit= "
                  "timefmt= dirsfirst filesfirst du si prune inodes device ignore-case "
                  "matchdirs fromfile gitignore info sort= metafirst"),
    "xxd": _spec("aEirupCdb", "cglosnR", "", max_operands=1),
    "less": _spec("NnSRrFXeEiIMmsw~aBcCdfgGJKLqQuUVz", "bhjpPtTxyz#", "RAW-CONTROL-CHARS "
                  "chop-long-lines quit-if-one-screen no-init ignore-case LINE-NUMBERS "
                  "line-numbers squeeze-blank-lines quit-at-eof QUIT-AT-EOF"),
    "more": _spec("dlfpcsu", "n", "silent logical no-pause print-over clean-print "
                  "squeeze plain lines="),
    "echo": _ANY,
    "cd": _spec("LPe@", "", "", max_operands=1),
    "pushd": _spec("n", "", ""), "popd": _spec("n", "", ""), "dirs": _spec("clpv", "", ""),
    "exit": _ANY, "return": _ANY, "break": _ANY, "continue": _ANY, "shift": _ANY,
    "sort": _spec("bdfgiMhnRrVcCsuzm", "ktTS", "ignore-leading-blanks dictionary-order "
                  "ignore-case general-numeric-sort ignore-nonprinting month-sort "
                  "human-numeric-sort numeric-sort random-sort random-source= reverse sort= "
                  "version-sort batch-size= check? debug field-separator= key= merge "
                  "parallel= stable buffer-size= temporary-directory= unique "
                  "zero-terminated files0-from="),
    "uniq": _spec("cdDiuz", "fsw", "count repeated all-repeated? group? skip-fields= "
                  "skip-chars= check-chars= ignore-case unique zero-terminated",
                  max_operands=1),
    "base64": _spec("diw", "w", "decode ignore-garbage wrap=", closed=True),
    "date": _spec("uRI", "dfr", "date= file= iso-8601? rfc-email rfc-3339= reference= utc "
                  "universal debug resolution"),
    # polls: waiting on something that moves
    "sleep": _spec("", "", "", effect=POLL, closed=True),
    "ps": _spec(any_option=True, closed=True, effect=POLL),
    "pgrep": _spec(any_option=True, closed=True, effect=POLL),
    "jobs": _spec("lnprs", "", "", effect=POLL),
    "wait": _spec("fn", "", "", effect=POLL),
    # SWE-agent's file viewer and search commands
    **dict.fromkeys(("open", "goto", "scroll_up", "scroll_down", "search_file", "search_dir",
                     "find_file", "filemap"), _ANY),
}
_MUTATING_PROGRAMS: Final = frozenset({
    "rm", "rmdir", "mv", "cp", "mkdir", "touch", "ln", "chmod", "chown", "chgrp", "truncate",
    "dd", "patch", "shred", "unlink", "install", "rsync", "kill", "pkill", "killall", "mkfifo",
    "mknod", "tee", "split", "csplit", "eval", "trap", "enable", "let", "nohup", "sudoedit",
    "mapfile", "readarray", "getopts", "bind", "complete", "compgen", "fc", "disown",
    "suspend", "logout", "ulimit", "umask", "coproc",
})
# shells whose -c script is Bash syntax (zsh's glob qualifiers run code: not read here)
_RESERVED: Final = frozenset({
    "{", "}", "!", "(", ")", "((", "))", "[[", "]]", "if", "then", "else", "elif", "fi",
    "case", "esac", "for", "select", "while", "until", "do", "done", "in", "function",
    "coproc"})
_SHELLS: Final = frozenset({"bash", "sh", "dash"})
# Only absolute paths in these folders name the program of their last part (``./ls`` is a
# file the agent may have written).
_SYSTEM_DIRS: Final = ("/bin/", "/usr/bin/", "/usr/local/bin/", "/sbin/", "/usr/sbin/")
_NOT_A_FILE: Final = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty"})
MAX_DEPTH: Final = 16  # nested bash -c, find -exec, prefixes
_VENV_PROGRAM: Final = re.compile(r"(?:[\w.\-/]*/)?bin/(?:python[0-9.]*|pytest|py\.test)")
_PYTHON: Final = re.compile(r"python[0-9.]*")
_PYTHON_FLAGS: Final = re.compile(r"-[uBbqsSEIO]+")
_FIND_NEWER: Final = re.compile(r"-newer[aBcmt][aBcmt]")
_SET_FLAGS: Final = re.compile(r"[-+][euxvafnbBCEhHkmpPTo]+")


def program_name(word: str) -> str | None:
    """The program a command word names: itself, or the last part of an absolute path in a
    system folder (of ``*/bin/python*``, ``*/bin/pytest``: a virtual environment's); None
    for any other path."""
    if "/" not in word:
        return word
    base = word.rsplit("/", 1)[-1]
    if base and any(word == folder + base for folder in _SYSTEM_DIRS):
        return base
    if _VENV_PROGRAM.fullmatch(word):
        return base
    return None


# -- reading options ---------------------------------------------------------------------------
class _Parsed(NamedTuple):
    options: list[tuple[str, str | None]]  # (option as written, its value)
    operands: list[Word]


def parse_options(spec: Spec, words: Sequence[Word], *, stop_at_operand: bool = False
                  ) -> _Parsed:
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
            if word.option_like and not spec.closed:
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
    return _Parsed(options, operands)


# -- one simple command ------------------------------------------------------------------------
Classifier = Callable[[str, int], Effect | None]  # a nested script (bash -c) -> its effect


def classify_words(words: Sequence[Word], script: Classifier, depth: int = 0,
                   appended: bool = False) -> Effect | None:
    """The effect of one simple command: MUTATING, READONLY, POLL, or None for a program
    the classifier does not know (the tool's own effect applies).

    Args:
        words: the command's words, the program first (assignments already checked).
        script: classifies a nested script (``bash -c "..."``) at a depth.
        depth: nesting so far; past :data:`MAX_DEPTH` the command is mutating.
        appended: ``xargs`` appends words the classifier cannot see.
    """
    try:
        return _classify(list(words), script, depth, appended)
    except Unsafe:
        return MUTATING


def _classify(words: list[Word], script: Classifier, depth: int, appended: bool
              ) -> Effect | None:
    if depth > MAX_DEPTH:
        raise Unsafe
    if not words:
        return READONLY
    first = words[0]
    if not first.static:
        raise Unsafe  # $CMD, $(...) as a program: anything
    name = program_name(first.text)
    if name is None:
        return None
    if name in _RESERVED:
        raise Unsafe  # a keyword read as a program: `time { rm f; }` parses as `time {`
    args = words[1:]
    if name in _MUTATING_PROGRAMS:
        return MUTATING
    special = special_for(name)
    if special is not None:
        if appended and name not in _RUNS_THE_REST:
            raise Unsafe  # words xargs appends could be any option
        return special(name, args, script, depth, appended)
    spec = SPECS.get(name)
    if spec is None:
        return None
    if appended and not spec.closed:
        raise Unsafe
    parsed = parse_options(spec, args)
    if name == "tail" and any(o in ("-f", "-F", "--follow") for o, _ in parsed.options):
        return POLL
    if name in ("less", "more") and any(w.text.startswith("+") for w in parsed.operands):
        raise Unsafe  # +cmd: a pager command at start (`+!cmd` runs a shell on a terminal)
    if name == "date" and any(not w.static or not w.text.startswith("+")
                              for w in parsed.operands):
        raise Unsafe  # `date MMDDhhmm` sets the clock
    return spec.effect


Special = Callable[[str, list[Word], Classifier, int, bool], Effect | None]


def _prefix(spec: Spec, after: Callable[[list[Word]], list[Word]] | None = None) -> Special:
    """A program that runs the command after its options (``sudo``, ``timeout 5``...)."""
    def run(name: str, args: list[Word], script: Classifier, depth: int, appended: bool
            ) -> Effect | None:
        parsed = parse_options(spec, args, stop_at_operand=True)
        rest = list(parsed.operands)
        if after is not None:
            rest = after(rest)
        if not rest:
            if appended:
                raise Unsafe
            return READONLY if name in ("env", "nice", "time", "command", "builtin") else None
        return _classify(rest, script, depth + 1, appended)
    return run


def _timeout_duration(rest: list[Word]) -> list[Word]:
    if not rest or not rest[0].static:
        raise Unsafe
    return rest[1:]


_ENV_SPEC: Final = _spec("i0v", "uC", "ignore-environment null unset= chdir= debug")


def _env(name: str, args: list[Word], script: Classifier, depth: int, appended: bool
         ) -> Effect | None:
    spec = _ENV_SPEC
    parsed = parse_options(spec, args, stop_at_operand=True)
    rest = list(parsed.operands)
    while rest and rest[0].static and "=" in rest[0].text:
        var, _, value = rest[0].text.partition("=")
        if not env_assignment_ok(var, Word(value)):
            raise Unsafe
        rest = rest[1:]
    if rest and not rest[0].static:
        raise Unsafe
    if not rest:
        if appended:
            raise Unsafe
        return READONLY  # prints the environment
    return _classify(rest, script, depth + 1, appended)


_COMMAND_SPEC: Final = _spec("p", "", "")


def _command(name: str, args: list[Word], script: Classifier, depth: int, appended: bool
             ) -> Effect | None:
    if args and args[0].static and args[0].text in ("-v", "-V") and not appended:
        return READONLY  # a lookup only
    return _prefix(_COMMAND_SPEC)(name, args, script, depth, appended)


_XARGS_SPEC: Final = _spec("0prtxo", "adEILnPs", "null arg-file= delimiter= max-lines= max-args= "
                 "max-procs= interactive no-run-if-empty open-tty verbose exit show-limits "
                 "max-chars= replace? eof?")


def _xargs(name: str, args: list[Word], script: Classifier, depth: int, appended: bool
           ) -> Effect | None:
    spec = _XARGS_SPEC
    parsed = parse_options(spec, args, stop_at_operand=True)
    rest = list(parsed.operands)
    if not rest:
        return READONLY  # echo
    return _classify(rest, script, depth + 1, True)


_SHELL_SPEC: Final = _spec("abefhkmnptuvxBCHPElric", "oO", "norc noprofile posix login noediting "
                 "restricted verbose")


def _shell(name: str, args: list[Word], script: Classifier, depth: int, appended: bool
           ) -> Effect | None:
    """``bash -c SCRIPT`` (``-lc``, ``-xc``...): the script is a command line of its own;
    ``bash script.sh`` or a shell reading its input is unknown."""
    spec = _SHELL_SPEC
    parsed = parse_options(spec, args, stop_at_operand=True)
    if any(o == "-O" and v == "expand_aliases" for o, v in parsed.options):
        raise Unsafe
    if not any(o == "-c" for o, _ in parsed.options):
        return None
    if not parsed.operands or not parsed.operands[0].static:
        raise Unsafe
    return script(parsed.operands[0].text, depth + 1)


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
    # --sandbox is not trusted: GNU sed compiles a script given before it unchecked
    if not all(sed_script_reads(s) for s in scripts):
        raise Unsafe
    return READONLY


def sed_script_reads(script: str) -> bool:
    """Whether a sed script only reads: no ``w``/``W`` command, no ``e`` command, no ``s``
    with a ``w`` or ``e`` flag, nothing this reader does not know (GNU sed's grammar)."""
    s, i, n = script, 0, len(script)

    def regex(i: int, delim: str) -> int:  # index after the closing delimiter, or -1
        while i < n:
            c = s[i]
            if c == "\\":
                i += 2
                continue
            if c == "[":  # a bracket expression may hold the delimiter
                j = i + 1
                if j < n and s[j] == "^":
                    j += 1
                if j < n and s[j] == "]":
                    j += 1
                end = s.find("]", j)
                if end < 0:
                    return -1
                i = end + 1
                continue
            if c == delim:
                return i + 1
            if c == "\n":
                return -1
            i += 1
        return -1

    def address(i: int) -> int:
        if i < n and s[i] in _DIGITS + "$":
            while i < n and s[i] in _DIGITS + "$~":
                i += 1
        elif i < n and s[i] == "/":
            i = regex(i + 1, "/")
        elif i < n and s[i] == "\\" and i + 1 < n:
            i = regex(i + 2, s[i + 1])
        else:
            return i
        while 0 <= i < n and s[i] in "IM":
            i += 1
        return i

    while i < n:
        while i < n and s[i] in " \t\n;":
            i += 1
        if i >= n:
            return True
        i = address(i)
        if i < 0:
            return False
        if i < n and s[i] == ",":
            i += 1
            if i < n and s[i] in "+~":
                i += 1
                while i < n and s[i] in _DIGITS:
                    i += 1
            else:
                i = address(i)
                if i < 0:
                    return False
        while i < n and s[i] in " \t!":
            i += 1
        if i >= n:
            return False
        c = s[i]
        i += 1
        if c == "{":
            continue  # a block: its first command follows at once
        if c in "pPdDnNgGhHxlz=F}":
            while i < n and s[i] in _DIGITS:
                i += 1
        elif c in "qQ":
            while i < n and s[i] in _DIGITS + " ":
                i += 1
        elif c in "btT:":
            while i < n and s[i] not in ";\n":
                i += 1
        elif c in "aicrR":
            end = s.find("\n", i)  # text, or a file read: to the end of the line
            while end > 0 and s[end - 1] == "\\":
                end = s.find("\n", end + 1)
            i = n if end < 0 else end
        elif c in "sy":
            if i >= n or s[i] in "\\\n":
                return False
            delim = s[i]
            i = regex(i + 1, delim)
            if i < 0:
                return False
            while i < n and s[i] != delim:  # the replacement
                i += 2 if s[i] == "\\" else 1
            if i >= n:
                return False
            i += 1
            if c == "s":
                while i < n and s[i] in "gpiImM" + _DIGITS:
                    i += 1
        else:
            return False  # w, W, e, v, an unknown command
        while i < n and s[i] in " \t":
            i += 1
        if i < n and s[i] not in ";\n}":
            return False
    return True


_FIND_VALUED: Final = frozenset(
    ["-name", "-iname", "-path", "-ipath", "-wholename", "-iwholename", "-regex", "-iregex",
     "-type", "-xtype", "-size", "-mtime", "-mmin", "-atime", "-amin", "-ctime", "-cmin",
     "-newer", "-anewer", "-cnewer", "-perm", "-user", "-group", "-uid", "-gid", "-links",
     "-inum", "-samefile", "-maxdepth", "-mindepth", "-printf", "-regextype", "-lname",
     "-ilname", "-fstype", "-used", "-context"])
_FIND_FLAGS: Final = frozenset(
    ["-nouser", "-nogroup", "-empty", "-executable", "-readable", "-writable", "-true",
     "-false", "-depth", "-prune", "-quit", "-print", "-print0", "-ls", "-follow", "-xdev",
     "-mount", "-noleaf", "-daystart", "-ignore_readdir_race", "-noignore_readdir_race",
     "-not", "-a", "-o", "-and", "-or", "!", "(", ")", ",", "-d"])
_FIND_EXEC: Final = frozenset({"-exec", "-execdir", "-ok", "-okdir"})


def _find(name: str, args: list[Word], script: Classifier, depth: int, appended: bool
          ) -> Effect | None:
    i = 0
    while i < len(args) and args[i].static and args[i].text in ("-P", "-L", "-H", "-D",
                                                                  "-O0", "-O1", "-O2", "-O3"):
        i += 2 if args[i].text == "-D" else 1
    effects: list[Effect | None] = [READONLY]
    in_expression = False
    while i < len(args):
        word = args[i]
        i += 1
        if word.option_like or (in_expression and not word.static):
            raise Unsafe
        text = word.text
        if not in_expression and not (text.startswith("-") or text in ("!", "(", ")", ",")):
            continue  # a starting point
        in_expression = True
        if text in _FIND_FLAGS:
            continue
        if text in _FIND_VALUED or _FIND_NEWER.fullmatch(text):
            if i >= len(args) or args[i].option_like:
                raise Unsafe
            i += 1
            continue
        if text in _FIND_EXEC:
            start = i
            while i < len(args) and not (args[i].static and (
                    args[i].text == ";" or (args[i].text == "+" and i > start
                                            and args[i - 1].text == "{}"))):
                i += 1
            if i >= len(args) or i == start:
                raise Unsafe
            inner = [Word(w.text, w.static, False) if w.text == "{}" else w
                     for w in args[start:i]]
            i += 1
            effects.append(_classify(inner, script, depth + 1, False))
            continue
        raise Unsafe  # -delete, -fprint, -fls, an unknown primary
    return combine(effects)


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


_GIT_GLOBAL: Final = _spec("pP", "C", "no-pager paginate git-dir= work-tree= namespace= bare "
                           "no-replace-objects literal-pathspecs glob-pathspecs "
                           "noglob-pathspecs icase-pathspecs no-optional-locks exec-path")
# read-only subcommands -> long options (prefixes, as git accepts) that write or run a program
_GIT_READ: Final[dict[str, tuple[str, ...]]] = {
    **dict.fromkeys(("log", "show", "diff", "whatchanged", "shortlog", "diff-tree",
                     "diff-files", "diff-index", "range-diff", "format-rev"),
                    ("--output", "--ext-diff", "--open-files-in-pager")),
    "grep": ("--open-files-in-pager", "--ext-grep"),
    **dict.fromkeys(("status", "blame", "annotate", "ls-files", "ls-tree",
                     "rev-parse", "rev-list", "cat-file", "describe", "name-rev",
                     "merge-base", "show-ref", "for-each-ref", "count-objects", "check-ignore",
                     "check-attr", "check-ref-format", "var", "version", "show-branch",
                     "cherry", "verify-commit", "verify-tag"), ()),
}
_GIT_LISTING: Final[dict[str, tuple[frozenset[str], frozenset[str]]]] = {
    # subcommand -> (words that make it a listing, words that write)
    "stash": (frozenset({"list", "show"}), frozenset()),
    "worktree": (frozenset({"list"}), frozenset()),
    "remote": (frozenset({"-v", "--verbose", "show", "get-url"}), frozenset()),
    "reflog": (frozenset({"show"}), frozenset({"expire", "delete", "drop", "exists"})),
    "notes": (frozenset({"list", "show"}), frozenset()),
}
_BRANCH_LISTING: Final = frozenset({
    "--list", "-l", "--show-current", "-a", "--all", "-r", "--remotes", "-v", "-vv",
    "--verbose", "--merged", "--no-merged", "--no-color", "--color", "--contains",
    "--no-contains", "--points-at", "--column", "--no-column", "-i", "--ignore-case",
    "--omit-empty", "--abbrev", "--no-abbrev", "-av", "-avv", "-ra", "-rv", "-a -v"})
_CONFIG_READ: Final = frozenset({
    "--get", "--get-all", "--get-regexp", "--get-urlmatch", "--list", "-l", "--show-origin",
    "--show-scope", "--global", "--local", "--system", "--worktree", "--null", "-z",
    "--name-only", "--includes", "--no-includes", "--bool", "--int", "--path",
    "--bool-or-int", "--expiry-date"})


def _git(name: str, args: list[Word], script: Classifier, depth: int, appended: bool
         ) -> Effect | None:
    if any(not w.static for w in args[:1]):
        raise Unsafe
    parsed = parse_options(_GIT_GLOBAL, args, stop_at_operand=True)
    rest = parsed.operands
    if not rest:
        if any(o == "--exec-path" and v is not None for o, v in parsed.options):
            raise Unsafe
        return READONLY if parsed.options else MUTATING
    sub, tail = rest[0].text, rest[1:]
    if not rest[0].static:
        raise Unsafe
    denied = _GIT_READ.get(sub)
    if denied is not None:
        for word in tail:
            if word.option_like and sub != "status":
                raise Unsafe
            text = word.text
            if text.startswith("--"):
                option = text.partition("=")[0]
                if any(d.startswith(option) for d in denied) and len(option) > 2:
                    raise Unsafe
            elif sub == "grep" and text.startswith("-") and "O" in text:
                raise Unsafe  # -O<pager> runs a program
        return READONLY
    if sub == "branch":
        listing = any(w.text in ("--list", "-l") for w in tail)
        if all(w.static and (w.text in _BRANCH_LISTING
                             or w.text.startswith(("--format=", "--sort=", "--contains=",
                                                   "--merged=", "--points-at=", "--abbrev=",
                                                   "--color=", "--column="))
                             or (listing and not w.text.startswith("-"))) for w in tail):
            return READONLY
        raise Unsafe
    if sub == "tag":
        listing = not tail or any(w.text in ("-l", "--list") for w in tail)
        if listing and all(w.static and (w.text in ("-l", "--list", "-n", "--column",
                                                    "--no-column")
                                         or w.text.startswith(("--sort=", "--format=",
                                                               "--contains", "--points-at",
                                                               "--merged", "-n"))
                                         or not w.text.startswith("-")) for w in tail):
            return READONLY
        raise Unsafe
    if sub == "config":
        texts = [w.text for w in tail]
        if not all(w.static for w in tail):
            raise Unsafe
        options = [t for t in texts if t.startswith("-")]
        operands = [t for t in texts if not t.startswith("-")]
        if operands[:1] in (["get"], ["list"]):
            operands = operands[1:]
        if all(o in _CONFIG_READ or o.startswith("--type=") for o in options) and (
                len(operands) <= 1 or any(o.startswith("--get") for o in options)):
            return READONLY
        raise Unsafe
    lists = _GIT_LISTING.get(sub)
    if lists is not None:
        reads, _ = lists
        if not tail and sub in ("remote", "reflog"):
            return READONLY
        if tail and tail[0].text in reads and all(w.static for w in tail):
            return READONLY
        raise Unsafe
    return MUTATING


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


_SAFE_SHOPT: Final = frozenset({"extglob", "nullglob", "globstar", "dotglob", "nocaseglob",
                                "nocasematch", "failglob", "lastpipe", "inherit_errexit",
                                "xpg_echo", "globasciiranges"})


_SHOPT_SPEC: Final = _spec("pqsuo", "", "")


def _shopt(name: str, args: list[Word], script: Classifier, depth: int, appended: bool
           ) -> Effect | None:
    parsed = parse_options(_SHOPT_SPEC, args)
    if any(not w.static or w.text not in _SAFE_SHOPT for w in parsed.operands) and any(
            o in ("-s", "-u") for o, _ in parsed.options):
        raise Unsafe
    return READONLY


def _set(name: str, args: list[Word], script: Classifier, depth: int, appended: bool
         ) -> Effect | None:
    for i, word in enumerate(args):
        if not word.static:
            raise Unsafe
        text = word.text
        if text == "--" or not text.startswith(("-", "+")):
            return READONLY  # positional parameters
        if not _SET_FLAGS.fullmatch(text) and text not in ("-", "+"):
            raise Unsafe
        del i
    return READONLY


def _test(name: str, args: list[Word], script: Classifier, depth: int, appended: bool
          ) -> Effect | None:
    """``test``/``[``: no arithmetic evaluation of operands, but ``-v`` looks a name up,
    and a subscript in it is evaluated."""
    for i, word in enumerate(args):
        if word.static and word.text == "-v":
            target = args[i + 1] if i + 1 < len(args) else None
            if target is not None and not (target.static and _IDENTIFIER.fullmatch(target.text)):
                raise Unsafe
    return READONLY


def _printf(name: str, args: list[Word], script: Classifier, depth: int, appended: bool
            ) -> Effect | None:
    if args and args[0].option_like:
        raise Unsafe
    if args and args[0].text == "-v" and (
            len(args) < 2 or not (args[1].static and _IDENTIFIER.fullmatch(args[1].text))):
        raise Unsafe
    return READONLY


_READ_SPEC: Final = _spec("ers", "dinNptu", "")


def _read(name: str, args: list[Word], script: Classifier, depth: int, appended: bool
          ) -> Effect | None:
    parsed = parse_options(_READ_SPEC, args)
    if any(o in ("-a",) for o, _ in parsed.options) or any(
            not (w.static and _IDENTIFIER.fullmatch(w.text)) for w in parsed.operands):
        raise Unsafe
    return READONLY


def _source(name: str, args: list[Word], script: Classifier, depth: int, appended: bool
            ) -> Effect | None:
    return None  # runs a file: what it does is not in the command


# wrappers that pass the words xargs appends on to the command they run
_RUNS_THE_REST: Final = frozenset({"sudo", "timeout", "nice", "ionice", "stdbuf", "time",
                                   "builtin", "exec", "command", "env"})
_SPECIAL: Final[dict[str, Special]] = {
    "sudo": _prefix(_spec("nHEkSb", "ugCDhprtUT", "non-interactive preserve-env set-home "
                          "user= group=")),
    "timeout": _prefix(_spec("v", "sk", "signal= kill-after= preserve-status foreground "
                             "verbose"), _timeout_duration),
    "nice": _prefix(_spec("", "n", "adjustment=")),
    "ionice": _prefix(_spec("t", "cn", "class= classdata= ignore")),
    "stdbuf": _prefix(_spec("", "ioe", "input= output= error=")),
    "time": _prefix(_spec("p", "", "")),
    "builtin": _prefix(_spec("", "", "")),
    "exec": _prefix(_spec("cl", "a", "")),
    "command": _command, "env": _env, "xargs": _xargs,
    **dict.fromkeys(_SHELLS, _shell),
    "pytest": _pytest, "py.test": _pytest,
    "pip": _pip, "pip3": _pip,
    "sed": _sed, "find": _find, "rg": _rg, "git": _git,
    "history": _history, "alias": _listing_only, "hash": _listing_only,
    "shopt": _shopt, "set": _set, "test": _test, "[": _test, "printf": _printf,
    "read": _read, "source": _source, ".": _source,
}


def _python_dispatch(name: str) -> Special | None:
    return _python if _PYTHON.fullmatch(name) else None


def special_for(name: str) -> Special | None:
    """The special reader of ``name``, if it has one."""
    return _SPECIAL.get(name) or _python_dispatch(name)


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
