"""Shell options and builtins that change what the commands after them do: ``set`` and
``bash``/``sh`` options (``-a``/``allexport``, ``-k``/``keyword``, ``-H``, ``-i``,
``-O``/``-o`` names), and the builtins that set a variable (``read``, ``printf -v``) which an
``export`` then hands to a program. A read-only script run under one of them is mutating;
under the harmless ones it stays read-only."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import toolguard as tg
from toolguard.shell._classifier import classify_argv, classify_command

R, M = tg.Effect.READONLY, tg.Effect.MUTATING

CHANGING: list[str] = [
    # set: allexport, keyword (an argument NAME=value becomes an assignment), history
    "set -a; ls", "set -ea; ls", "set -o allexport; ls", "set -eo allexport; ls",
    "set -k; git diff GIT_EXTERNAL_DIFF=./x", "set -o keyword; ls", "set -H; ls",
    "set -o histexpand; ls", "set -o history; ls", "set -o posix; ls",
    "set -o interactive-comments; ls", "set -o nosuchoption; ls", "set -o \"$x\"; ls",
    "set -$x; ls",
    # bash and sh with the same options, interactive (aliases, history) and shopt names
    "bash -kc 'git diff GIT_EXTERNAL_DIFF=./x'", "bash -ac ls", "sh -a -c ls",
    "bash -o allexport -c ls", "bash -o keyword -c ls", "bash -Hc ls", "bash -ic ls",
    "bash -O expand_aliases -c ls", "bash -O extdebug -c ls", "bash -O \"$o\" -c ls",
    "sh -o keyword -c ls",
    # a variable a program reads, set by a builtin and exported
    "read GIT_EXTERNAL_DIFF <<< ./x; export GIT_EXTERNAL_DIFF; git diff",
    "read -r LESSOPEN <<< '|./x %s'; export LESSOPEN; less f",
    "printf -v GIT_EXTERNAL_DIFF ./x; export GIT_EXTERNAL_DIFF; git diff",
    "printf -vGIT_EXTERNAL_DIFF ./x; export GIT_EXTERNAL_DIFF; git diff",
    "printf -v PAGER ./x; export PAGER; git log", "printf -\"$x\" ./x",
]
HARMLESS: list[str] = [
    "set -e; ls", "set -euo pipefail; ls", "set -oe pipefail; ls", "set -euxo pipefail; ls",
    "set +e; ls", "set +x", "set +H; ls", "set +a", "set +o allexport", "set -o",
    "set +o", "set -- a b; ls", "set - a", "set x y", "bash -lc ls", "bash -xec ls",
    "bash -eo pipefail -c ls", "bash -O extglob -c 'ls'", "sh -c ls", "bash --posix -c ls",
    "bash --norc --noprofile -c ls", "read -r line < f; echo \"$line\"",
    "printf -v line '%s' x; echo \"$line\"", "printf '%s\\n' a", "read -r LC_ALL <<< C",
]


@pytest.mark.parametrize("command", CHANGING)
def test_an_option_or_builtin_that_changes_later_commands_is_mutating(command: str) -> None:
    assert classify_command(command) is M


@pytest.mark.parametrize("command", HARMLESS)
def test_harmless_options_keep_a_read_only_command_read_only(command: str) -> None:
    assert classify_command(command) is R


_FLAGS = "abefhkmnptuvxBCEHPT"
_OPTIONS = ["allexport", "braceexpand", "emacs", "errexit", "errtrace", "functrace",
            "hashall", "histexpand", "history", "ignoreeof", "interactive-comments",
            "keyword", "monitor", "noclobber", "noexec", "noglob", "nolog", "notify",
            "nounset", "onecmd", "physical", "pipefail", "posix", "privileged", "verbose",
            "vi", "xtrace"]
_CHANGING_FLAGS = set("akH")
_CHANGING_OPTIONS = {"allexport", "keyword", "histexpand", "history", "posix",
                     "interactive-comments"}


@given(st.lists(st.sampled_from(_FLAGS), min_size=1, max_size=4),
       st.lists(st.sampled_from(_OPTIONS), max_size=2), st.booleans(),
       st.sampled_from(["set {}; ls", "bash {} -c ls", "sh {} -c 'git status'"]))
@settings(max_examples=300, deadline=None)
def test_set_and_shell_options_are_mutating_exactly_when_one_changes_later_commands(
        flags: list[str], options: list[str], bundled: bool, form: str) -> None:
    """Every bundle of ``set``'s flags and ``-o`` names, as ``set`` or ``bash``/``sh``
    options: mutating when one of them is allexport, keyword, history expansion, posix..."""
    words = ["-" + "".join(flags)] if bundled else ["-" + f for f in flags]
    for option in options:
        words += ["-o", option]
    changing = bool(set(flags) & _CHANGING_FLAGS or set(options) & _CHANGING_OPTIONS)
    expected = M if changing else R
    assert classify_command(form.format(" ".join(words))) is expected


def test_argument_vectors_read_shell_options_too() -> None:
    assert classify_argv(["bash", "-kc", "git diff GIT_EXTERNAL_DIFF=./x"]) is M
    assert classify_argv(["bash", "-o", "allexport", "-c", "ls"]) is M
    assert classify_argv(["bash", "-lc", "ls"]) is R
