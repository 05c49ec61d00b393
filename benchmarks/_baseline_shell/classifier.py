"""The shell classifier: is this command line read-only, mutating, or a poll?

Coding agents have one shell tool (``bash``, ``exec_command``). Marked mutating as a whole,
every ``ls`` or ``git status`` is answered from the idempotency cache and the agent never sees
the changed output; marked read-only, a write never counts as progress and a duplicate write
is never caught. ``[tools.bash] shell = "command"`` names the argument that holds the command
line, and each call gets the effect of its command (:func:`classify_command`):

* **mutating**: any redirection of output to a file (``>``, ``>>``, ``&>``, ``>|``; not to
  ``/dev/null`` nor a descriptor such as ``2>&1``), ``tee FILE``, ``sed -i``, ``find`` with
  ``-delete``/``-exec``/``-execdir``/``-ok``/``-fprint``..., ``sort -o``, ``git`` other than
  ``status``/``log``/``diff``/``show``/``rev-parse``/a listing ``branch``, and the programs
  that exist to change files (``rm``, ``mv``, ``cp``, ``mkdir``, ``touch``, ``chmod``,
  ``patch``, ``kill``, ``pip install``...);
* **read-only**: every part of the command is on the read-only list, after Codex's
  ``command_safety`` (``is_safe_command.rs``: ``cat cd cut echo expr grep head ls nl paste
  pwd rev seq stat tail tr uniq wc which whoami``, ``find``/``rg``/``base64``/``sed -n``
  without their writing options, ``git status/log/diff/show/branch``) plus ``file``,
  ``diff``, ``du``, ``tree``, ``jq``..., SWE-agent's file viewer (``open``, ``goto``,
  ``scroll_up``, ``search_dir``...) and test runs (``pytest``, ``python -m pytest``,
  ``python -m unittest``: they observe the code; their output changes when the code does);
* **poll**: waiting on something that moves: ``sleep``, ``tail -f``, ``ps``, ``pgrep``,
  ``jobs``, ``wait``, and the empty command (read more output of a running process);
* anything else (``python script.py``, ``make``, an unknown program, a command that does not
  parse): **None**, the tool's own effect.

A compound command is as strong as its strongest part: one mutating part makes it mutating,
one unknown part unknown, one poll part (with the rest read-only) a poll. Pipelines,
``&&``/``||``/``;``/``&``, newlines, subshells and groups, ``$(...)`` and backticks (also
inside double quotes), process substitution, here-documents (skipped, never parsed as
commands), ``VAR=value`` assignments, ``bash -c``/``-lc "..."`` (parsed again), and the
prefixes ``sudo``, ``env``, ``timeout``, ``nice``, ``nohup``, ``time``, ``command``,
``exec``, ``stdbuf``, ``xargs`` are taken apart.

The command line is taken apart by the lexer of :mod:`toolguard._shell_lex`.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any, Final

from toolguard._types import MUTATING, POLL, READONLY, Effect

from .lexer import _MAX_DEPTH, _NOT_A_FILE, parse_command

__all__ = ["classify_argv", "classify_command"]

_CACHED_CHARS: Final = 65_536  # longer commands are classified every time, never kept


# -- classifying simple commands ---------------------------------------------------------------
# After Codex's command_safety (is_safe_command.rs), widened with common read-only tools.
_READONLY: Final = frozenset({
    "cat", "cd", "cut", "echo", "expr", "false", "grep", "egrep", "fgrep", "head", "id", "ls",
    "nl", "paste", "pwd", "rev", "seq", "stat", "tr", "true", "uname", "uniq", "wc", "which",
    "whoami", "numfmt", "tac", "file", "diff", "cmp", "comm", "du", "df", "tree", "basename",
    "dirname", "realpath", "readlink", "printenv", "printf", "type", "test", "[", "[[", "less",
    "more", "strings", "od", "xxd", "hexdump", "column", "fold", "jq", "md5sum", "sha1sum",
    "sha256sum", "cksum", "nproc", "free", "uptime", "arch", ":", "export", "set", "unset",
    "pushd", "popd", "dirs", "shopt", "alias", "history", "exit", "zcat", "bzcat", "look",
    "lsof", "getconf", "locale", "groups", "tty", "pytest", "py.test",
    # SWE-agent's file viewer and search commands
    "open", "goto", "scroll_up", "scroll_down", "search_file", "search_dir", "find_file",
    "filemap",
})
_POLL: Final = frozenset({"sleep", "ps", "pgrep", "jobs", "wait"})
_MUTATING: Final = frozenset({
    "rm", "rmdir", "mv", "cp", "mkdir", "touch", "ln", "chmod", "chown", "chgrp", "truncate",
    "dd", "patch", "shred", "unlink", "install", "rsync", "kill", "pkill", "killall", "mkfifo",
    "mknod",
})
_KEYWORDS: Final = frozenset({"then", "do", "else", "elif", "if", "while", "until", "!", "{",
                              "}", "fi", "done", "esac", "]]"})
_SHELLS: Final = frozenset({"bash", "sh", "zsh", "dash", "ksh"})
# prefixes: program -> options that take a value
_PREFIXES: Final[dict[str, frozenset[str]]] = {
    "sudo": frozenset({"-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U", "-T"}),
    "env": frozenset({"-u", "-C", "-S", "--unset", "--chdir"}),
    "timeout": frozenset({"-s", "-k", "--signal", "--kill-after"}),
    "nice": frozenset({"-n", "--adjustment"}),
    "ionice": frozenset({"-c", "-n", "-p"}),
    "stdbuf": frozenset({"-i", "-o", "-e"}),
    "nohup": frozenset(), "time": frozenset(), "command": frozenset(), "builtin": frozenset(),
    "exec": frozenset({"-a"}), "xargs": frozenset({"-n", "-I", "-P", "-d", "-L", "-s", "-a",
                                                   "-E", "--max-args", "--max-procs"}),
}
_FIND_WRITES: Final = frozenset({"-delete", "-exec", "-execdir", "-ok", "-okdir", "-fls",
                                 "-fprint", "-fprint0", "-fprintf"})
_GIT_READ: Final = frozenset({"status", "log", "diff", "show", "rev-parse"})
_GIT_WRITING_FLAGS: Final = ("--output", "--ext-diff", "--exec")
_GIT_VALUED: Final = frozenset({"-C", "--git-dir", "--work-tree", "--namespace"})
_BRANCH_LISTING: Final = frozenset({"--list", "-l", "--show-current", "-a", "--all", "-r",
                                    "--remotes", "-v", "-vv", "--verbose", "--merged",
                                    "--no-merged", "--no-color", "--color"})


def _program(word: str) -> str:
    return word.rsplit("/", 1)[-1]


def _is_assignment(word: str) -> bool:
    name, eq, _ = word.partition("=")
    return bool(eq) and name.isidentifier()


def _strip_prefix(words: Sequence[str], valued: frozenset[str]) -> Sequence[str]:
    """``words`` after a prefix program's name and options (and, for ``env``,
    assignments; for ``timeout``, its duration)."""
    name = _program(words[0])
    i = 1
    while i < len(words):
        word = words[i]
        if word == "--":
            i += 1
            break
        if word in valued:
            i += 2
        elif (word.startswith("-") and len(word) > 1) or (name == "env" and _is_assignment(word)):
            i += 1
        else:
            break
    if name == "timeout" and i < len(words):
        i += 1  # the duration
    return words[i:]


def _classify_words(words: Sequence[str], depth: int) -> Effect | None:
    """The effect of one simple command's words (redirections already judged)."""
    while words and (_is_assignment(words[0]) or words[0] in _KEYWORDS):
        words = words[1:]
    if not words:
        return READONLY  # an assignment, a keyword, a closing brace: shell state only
    name = _program(words[0])
    args = words[1:]
    valued = _PREFIXES.get(name)
    if valued is not None:
        rest = _strip_prefix(words, valued)
        if not rest:  # env alone prints the environment; xargs alone runs echo
            return READONLY if name in ("env", "xargs", "command", "time") else None
        return _classify_words(rest, depth)
    if name in ("for", "select"):
        return READONLY  # `for x in a b c`: the loop's header; its body is its own commands
    if name in _SHELLS:
        return _shell_c(args, depth)
    if name in _POLL:
        return POLL
    if name in _MUTATING:
        return MUTATING
    if name == "tail":
        return POLL if any(a in ("-f", "-F") or a.startswith("--follow") for a in args) \
            else READONLY
    if name == "find":
        return MUTATING if any(a in _FIND_WRITES for a in args) else READONLY
    if name == "sed":
        in_place = any(a == "--in-place" or a.startswith("--in-place=")
                       or (a.startswith("-") and not a.startswith("--") and "i" in a)
                       for a in args)
        return MUTATING if in_place else READONLY
    if name == "sort":
        return MUTATING if any(a == "-o" or a.startswith(("--output", "-o")) for a in args) \
            else READONLY
    if name == "tee":
        return MUTATING if any(not a.startswith("-") and a not in _NOT_A_FILE for a in args) \
            else READONLY
    if name == "base64":
        return MUTATING if any(a == "-o" or a.startswith(("--output", "-o")) for a in args) \
            else READONLY
    if name == "rg":
        return None if any(a.startswith(("--pre", "--hostname-bin")) for a in args) \
            else READONLY
    if name == "date":
        return MUTATING if any(a in ("-s", "--set") or a.startswith("--set=") for a in args) \
            else READONLY
    if name == "git":
        return _git(args)
    if name.startswith("python"):
        return _python(args)
    if name in ("pip", "pip3"):
        return READONLY if args[:1] and args[0] in ("list", "show", "freeze", "check",
                                                   "--version", "-V") else MUTATING
    if name in _READONLY:
        return READONLY
    return None


def _shell_c(args: Sequence[str], depth: int) -> Effect | None:
    """``bash -c SCRIPT`` / ``-lc`` / ``-xc``...: the script is a command line of its own;
    ``bash script.sh`` or an interactive shell is unknown."""
    for i, arg in enumerate(args):
        if arg.startswith("-") and not arg.startswith("--") and "c" in arg:
            if i + 1 < len(args):
                return _classify_text(args[i + 1], depth + 1)
            return None
        if not arg.startswith("-"):
            return None
    return None


def _git(args: Sequence[str]) -> Effect:
    i = 0
    while i < len(args) and args[i].startswith("-"):
        arg = args[i]
        if arg in ("-c", "--config-env") or arg.startswith(("-c", "--config-env")):
            return MUTATING  # a config override can make git run any program
        i += 2 if arg in _GIT_VALUED else 1
    if i >= len(args):
        return MUTATING
    sub, rest = args[i], args[i + 1:]
    if any(a.startswith(_GIT_WRITING_FLAGS) for a in rest):
        return MUTATING
    if sub in _GIT_READ:
        return READONLY
    if sub == "branch":
        listing = "--list" in rest or "-l" in rest
        if all(a in _BRANCH_LISTING or a.startswith(("--format=", "--sort=", "--contains"))
               or (listing and not a.startswith("-")) for a in rest):
            return READONLY
    return MUTATING


def _python(args: Sequence[str]) -> Effect | None:
    """``python -m pytest`` / ``-m unittest`` (a test run) and ``python --version`` only
    observe; anything else runs code that may do anything."""
    if args[:1] and args[0] in ("-V", "--version"):
        return READONLY
    for i, arg in enumerate(args):
        if arg == "-m":
            return READONLY if args[i + 1:i + 2] and args[i + 1] in ("pytest", "unittest") \
                else None
        if not arg.startswith("-"):
            return None
    return None


def _combine(effects: Sequence[Effect | None]) -> Effect | None:
    """A compound command is as strong as its strongest part."""
    if MUTATING in effects:
        return MUTATING
    if None in effects:
        return None
    if POLL in effects:
        return POLL
    return READONLY


def _classify_text(command: str, depth: int) -> Effect | None:
    if depth > _MAX_DEPTH:
        return None
    commands = parse_command(command)
    if commands is None:
        return None
    if not commands:
        return POLL  # the empty command: read more output of a running process
    effects: list[Effect | None] = []
    for simple in commands:
        effect = MUTATING if simple.writes else _classify_words(simple.words, depth)
        if effect is MUTATING:
            return MUTATING
        effects.append(effect)
    return _combine(effects)


@lru_cache(maxsize=4096)
def _cached(command: str) -> Effect | None:
    return _classify_text(command, 0)


def classify_command(command: str) -> Effect | None:
    """The effect of the shell command line ``command``, or None when it is not recognised
    (the tool's own effect applies). See the module docstring. Thread-safe; results for
    commands up to 64 KiB are cached (an agent repeats its commands)."""
    if len(command) > _CACHED_CHARS:
        return _classify_text(command, 0)
    return _cached(command)


def classify_argv(value: Any) -> Effect | None:
    """:func:`classify_command` for a tool argument: a command line (str), or an argument
    vector (a list of strings, as Codex's ``exec`` and ``execve`` take it: ``["bash",
    "-lc", "ls"]``); anything else is unknown (None)."""
    if isinstance(value, str):
        return classify_command(value)
    if isinstance(value, (list, tuple)) and value and all(isinstance(w, str) for w in value):
        return _classify_words(value, 0)
    return None
