"""The programs the shell classifier knows, with the options each may take and stay read-only.

One simple command (``sort -u names.txt``), its words already taken out of the Bash syntax
tree by :mod:`toolguard.shell._classifier`, gets its effect here (:func:`classify_words`). The rule
is an allow-list: a program on it, with only the options listed for it (GNU ``getopt`` syntax:
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

This module holds the table, the programs that run another command (``sudo``, ``env``,
``xargs``, ``bash -c``, ``find -exec``...) and the dispatch; the option reader is in
:mod:`toolguard.shell._words`, the other programs' readers in :mod:`toolguard.shell._readers`
and :mod:`toolguard.shell._git`.
"""


from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Final

from toolguard._types import MUTATING, POLL, READONLY, Effect

from ._git import read_git
from ._readers import READERS, SAFE_SET_FLAGS, SAFE_SET_OPTIONS, SAFE_SHOPT, python_reader
from ._words import (
    DIGITS,
    MAX_DEPTH,
    Classifier,
    Spec,
    Special,
    Unsafe,
    Word,
    combine,
    env_assignment_ok,
    parse_options,
)
from ._words import option_spec as _spec

__all__ = ["SPECS", "classify_words", "program_name", "special_for"]

_ANY = _spec(any_option=True, closed=True)

SPECS: Final[dict[str, Spec]] = {
    # coreutils and friends that only read (GNU option tables)
    "cat": _spec("AbeEnstTuv", "", "show-all number-nonblank show-ends number squeeze-blank "
                 "show-tabs show-nonprinting", closed=True),
    "tac": _spec("brs", "s", "before regex separator=", closed=True),
    "head": _spec("qvz" + DIGITS, "nc", "quiet silent verbose zero-terminated lines= bytes=",
                  closed=True),
    "tail": _spec("qvzfFr" + DIGITS, "ncs", "quiet silent verbose zero-terminated lines= "
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
# Only absolute paths in these folders name the program of their last part: any other path
# (`./ls`, `/tmp/x/bin/pytest`, `~/bin/cat`, `.venv/bin/python`) is a file an earlier command
# may have written, so its program is unknown (the tool's own effect).
_SYSTEM_DIRS: Final = ("/bin/", "/usr/bin/", "/usr/local/bin/", "/sbin/", "/usr/sbin/")
_FIND_NEWER: Final = re.compile(r"-newer[aBcmt][aBcmt]")


def program_name(word: str) -> str | None:
    """The program a command word names: itself, or the last part of an absolute path in a
    system folder; None for any other path."""
    if "/" not in word:
        return word
    base = word.rsplit("/", 1)[-1]
    if base and any(word == folder + base for folder in _SYSTEM_DIRS):
        return base
    return None


# -- one simple command ------------------------------------------------------------------------
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


# the flags of `set`, and -l (login), -r (restricted), -c (the script is the first operand)
_SHELL_SPEC: Final = _spec("".join(sorted(SAFE_SET_FLAGS)) + "lrc", "oO", "norc noprofile "
                           "posix login noediting restricted verbose")


def _shell(name: str, args: list[Word], script: Classifier, depth: int, appended: bool
           ) -> Effect | None:
    """``bash -c SCRIPT`` (``-lc``, ``-xc``...): the script is a command line of its own;
    ``bash script.sh`` or a shell reading its input is unknown. Options that change what a
    read-only script does (``-a``, ``-k``, ``-H``, ``-i``, ``-o allexport``, ``-O
    expand_aliases``...) are mutating, as they are for ``set`` and ``shopt``."""
    spec = _SHELL_SPEC
    parsed = parse_options(spec, args, stop_at_operand=True)
    for option, value in parsed.options:
        if (option == "-o" and value not in SAFE_SET_OPTIONS) or (
                option == "-O" and value not in SAFE_SHOPT):
            raise Unsafe
    if not any(o == "-c" for o, _ in parsed.options):
        return None
    if not parsed.operands or not parsed.operands[0].static:
        raise Unsafe
    return script(parsed.operands[0].text, depth + 1)


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
    "find": _find, "git": read_git,
    **READERS,
}


def special_for(name: str) -> Special | None:
    """The special reader of ``name``, if it has one."""
    return _SPECIAL.get(name) or python_reader(name)
