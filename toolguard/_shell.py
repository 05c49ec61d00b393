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

The lexer follows POSIX shell quoting (single quotes literal, double quotes with backslash
escapes and substitutions, backslash escapes and line continuations outside, comments at a
word start). It is linear: runs of ordinary characters, quoted strings and here-document
bodies are consumed by one C-level search each, and the number of Python-level steps is
capped (:data:`MAX_STEPS`): past it the command is unknown (the tool's effect), so any input,
1 MB included, is classified in a few milliseconds (``benchmarks/shell.py``). bashlex (a full
bash grammar in pure Python) was measured on the 4,471 commands of the recorded coding runs:
it raised on 815 of them (18 %) and took ~1.2 µs per character; ``shlex`` ~0.75 µs per
character and cannot tell ``'$(x)'`` from ``"$(x)"``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache
from typing import Any, Final, NamedTuple

from ._types import MUTATING, POLL, READONLY, Effect

__all__ = ["MAX_STEPS", "SimpleCommand", "classify_argv", "classify_command", "parse_command"]

MAX_STEPS: Final = 4_000
"""Python-level lexer steps (a token, a quote, an operator) before a command counts as too
complex to classify (its tool's effect applies). The 4,471 recorded coding-agent commands
(up to 11 KB each) need at most 292."""
_MAX_DEPTH: Final = 16  # nested $(...), `...` and bash -c "..."
_CACHED_CHARS: Final = 65_536  # longer commands are classified every time, never kept

# Runs of characters with no meaning to the lexer (C speed); blanks; double-quote specials.
_PLAIN: Final = re.compile(r"[^ \t\n\r\f\v|&;()<>'\"\\$`]+")
_BLANKS: Final = re.compile(r"[ \t\r\f\v]+")
_DQ_SPECIAL: Final = re.compile(r"[\"\\$`]")
_NOT_A_FILE: Final = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty"})
_OUTPUT_OPS: Final = frozenset({">", ">>", ">|", "&>", "&>>", "<>"})
_SUBST: Final = "$(…)"  # what a substitution leaves in its word (never a program name)


class SimpleCommand(NamedTuple):
    """One simple command: its words (quotes removed) and whether it redirects output to a
    file."""

    words: tuple[str, ...]
    writes: bool


class _TooComplex(Exception):
    """The command exceeds :data:`MAX_STEPS` or the nesting limit."""


class _Unbalanced(Exception):
    """A quote, substitution or parenthesis is not closed: the shell would not run it."""


class _Lexer:
    """Splits a command line into :class:`SimpleCommand`\\ s (see the module docstring)."""

    __slots__ = ("commands", "steps", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.steps = 0
        self.commands: list[SimpleCommand] = []

    def step(self) -> None:
        self.steps += 1
        if self.steps > MAX_STEPS:
            raise _TooComplex

    def run(self, i: int, closer: str, depth: int) -> int:
        """Lex from ``i`` until ``closer`` (``")"`` for ``$(``, ``""`` for the end of the
        text) at parenthesis depth 0; return the index after it."""
        if depth > _MAX_DEPTH:
            raise _TooComplex
        text, n = self.text, len(self.text)
        words: list[str] = []
        buf: list[str] = []
        has_word = quoted = writes = False
        redirect = ""  # an operator waiting for its target word
        heredocs: list[tuple[str, bool]] = []  # (delimiter, strip tabs) waiting for a newline
        parens = 0

        def end_word() -> None:
            nonlocal has_word, quoted, redirect, writes
            if not has_word:
                return
            word = "".join(buf)
            buf.clear()
            has_word = quoted = False
            if redirect:
                op, redirect = redirect, ""
                if op in ("<<", "<<-"):
                    heredocs.append((word, op == "<<-"))
                elif op in _OUTPUT_OPS and word not in _NOT_A_FILE:
                    writes = True
                elif op == ">&" and not (word.isdigit() or word == "-"):
                    writes = True  # >&file: both streams to a file
            else:
                words.append(word)

        def end_command() -> None:
            nonlocal writes, redirect
            end_word()
            if redirect:  # an operator with no target: a syntax error; assume the worst
                writes, redirect = True, ""
            if words or writes:
                self.commands.append(SimpleCommand(tuple(words), writes))
            words.clear()
            writes = False

        while i < n:
            self.step()
            c = text[i]
            if c in " \t\r\f\v":
                end_word()
                i = _BLANKS.match(text, i).end()  # type: ignore[union-attr]
            elif c == "\n":
                end_command()
                i += 1
                for delimiter, strip in heredocs:
                    i = self.skip_heredoc(i, delimiter, strip)
                heredocs.clear()
            elif c == "#" and not has_word:
                end = text.find("\n", i)
                i = n if end < 0 else end
            elif c == "\\":
                if text.startswith("\n", i + 1):
                    i += 2  # a line continuation
                else:
                    buf.append(text[i + 1:i + 2])
                    has_word = quoted = True
                    i += 2
            elif c == "'":
                end = text.find("'", i + 1)
                if end < 0:
                    raise _Unbalanced
                buf.append(text[i + 1:end])
                has_word = quoted = True
                i = end + 1
            elif c == '"':
                i = self.double_quoted(i + 1, buf, depth)
                has_word = quoted = True
            elif c in "$`":
                i = self.dollar(i, buf, depth) if c == "$" else self.backticks(i, buf, depth)
                has_word = True
            elif c == "(":
                if text.startswith("((", i):  # arithmetic: (( a > b )) compares, never writes
                    end = text.find("))", i + 2)
                    if end < 0:
                        raise _Unbalanced
                    end_command()
                    i = end + 2
                    continue
                end_command()
                parens += 1
                i += 1
            elif c == ")":
                end_command()
                i += 1
                if parens == 0:
                    if closer == ")":
                        return i
                    raise _Unbalanced
                parens -= 1
            elif c in "<>" and text.startswith("(", i + 1):  # process substitution <(cmd)
                end_word()
                i = self.run(i + 2, ")", depth + 1)
                buf.append(_SUBST)
                has_word = True
            elif c in "<>" or (c == "&" and text.startswith(">", i + 1)):
                # a descriptor number written right before the operator (2>, 0<) is no word
                if has_word and not quoted and "".join(buf).isdigit():
                    buf.clear()
                    has_word = False
                end_word()
                op = _redirect_operator(text, i)
                redirect = op
                i += len(op)
            elif c in "|&;":
                end_command()
                i += 2 if text.startswith(("||", "&&", "|&", ";;"), i) else 1
            else:
                end = _PLAIN.match(text, i).end()  # type: ignore[union-attr]
                buf.append(text[i:end])
                has_word = True
                i = end
        if closer or parens:
            raise _Unbalanced
        end_command()
        return i

    def skip_heredoc(self, i: int, delimiter: str, strip: bool) -> int:
        """The index after the line that ends the here-document whose body starts at ``i``
        (its end of text when the delimiter line never comes, as bash does)."""
        text, n = self.text, len(self.text)
        at = i
        while True:
            self.step()
            at = text.find(delimiter, at)
            if at < 0:
                return n
            start = text.rfind("\n", 0, at) + 1  # the start of the line it is on
            end = at + len(delimiter)
            lead = text[start:at]
            if (start >= i and (not lead or (strip and not lead.strip("\t")))
                    and (end == n or text[end] == "\n")):
                return end + 1
            at = end

    def double_quoted(self, i: int, buf: list[str], depth: int) -> int:
        """Lex a double-quoted string from ``i`` (after its quote); return the index after
        its closing quote. Substitutions inside it are commands too."""
        text = self.text
        while True:
            self.step()
            found = _DQ_SPECIAL.search(text, i)
            if found is None:
                raise _Unbalanced
            j = found.start()
            buf.append(text[i:j])
            c = text[j]
            if c == '"':
                return j + 1
            if c == "\\":
                buf.append(text[j + 1:j + 2])
                i = j + 2
            elif c == "$":
                i = self.dollar(j, buf, depth)
            else:
                i = self.backticks(j, buf, depth)

    def dollar(self, i: int, buf: list[str], depth: int) -> int:
        """A ``$`` at ``i``: ``$((...))`` arithmetic, ``$(...)`` a command substitution
        (lexed as commands), ``${...}`` a parameter, else a literal ``$``."""
        text = self.text
        if text.startswith("$((", i):
            end = text.find("))", i + 3)
            if end < 0:
                raise _Unbalanced
            buf.append("$((…))")
            return end + 2
        if text.startswith("$(", i):
            buf.append(_SUBST)
            return self.run(i + 2, ")", depth + 1)
        if text.startswith("${", i):
            end = text.find("}", i + 2)
            if end < 0:
                raise _Unbalanced
            buf.append(text[i:end + 1])
            return end + 1
        buf.append("$")
        return i + 1

    def backticks(self, i: int, buf: list[str], depth: int) -> int:
        """A backtick substitution at ``i``: its text is lexed again as a command line."""
        text = self.text
        end = i + 1
        while True:
            self.step()
            end = text.find("`", end)
            if end < 0:
                raise _Unbalanced
            if text[end - 1] != "\\":
                break
            end += 1
        if depth >= _MAX_DEPTH:
            raise _TooComplex
        inner = _Lexer(text[i + 1:end].replace("\\`", "`"))
        inner.steps = self.steps
        inner.run(0, "", depth + 1)
        self.steps = inner.steps
        self.commands.extend(inner.commands)
        buf.append(_SUBST)
        return end + 1


def _redirect_operator(text: str, i: int) -> str:
    """The redirection operator at ``i`` (longest match)."""
    for op in ("&>>", "<<<", "<<-", "&>", ">>", ">|", ">&", "<<", "<&", "<>"):
        if text.startswith(op, i):
            return op
    return text[i]


def parse_command(command: str) -> list[SimpleCommand] | None:
    """The simple commands of ``command`` in order (substitutions after the words that hold
    them), or None when it does not parse (an unclosed quote) or is too complex to take
    apart within :data:`MAX_STEPS`."""
    lexer = _Lexer(command)
    try:
        lexer.run(0, "", 0)
    except (_TooComplex, _Unbalanced):
        return None
    return lexer.commands


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
