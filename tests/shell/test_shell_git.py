"""git's reading forms and the options through which each writes or runs a program: every
subcommand of the log family and the listing forms that take its options (``stash
show/list``, ``reflog show``) with every spelling of ``--output``, ``--ext-diff`` and
``--textconv``; ``git remote`` with options before a sub-subcommand that changes the
repository."""

from __future__ import annotations

import itertools

import pytest

import toolguard as tg
from toolguard.shell._classifier import classify_command

R, M = tg.Effect.READONLY, tg.Effect.MUTATING

_READING = ["log", "show", "diff", "whatchanged", "shortlog", "diff-tree HEAD",
            "diff-files", "diff-index HEAD", "stash show", "stash list", "reflog show"]
_WRITING_OPTIONS = ["--output=out", "--output out", "--outp=out", "--out out",
                    "--ext-diff", "--ext", "--textconv", "--textc", "--output=\"$f\"",
                    "-\"$x\""]
_HARMLESS_OPTIONS = ["-p", "--stat", "--text", "--no-ext-diff", "--no-textconv",
                     "--output-indicator-new=+", "--name-only", "-1", "--format=%H"]


@pytest.mark.parametrize(("sub", "option"), list(itertools.product(_READING,
                                                                   _WRITING_OPTIONS)))
def test_every_reading_form_with_an_option_that_writes_or_runs_is_mutating(
        sub: str, option: str) -> None:
    for command in (f"git {sub} {option}", f"git {sub} -p {option} HEAD",
                    f"git --no-pager {sub} --stat {option}"):
        assert classify_command(command) is M, command


@pytest.mark.parametrize(("sub", "option"), list(itertools.product(_READING,
                                                                   _HARMLESS_OPTIONS)))
def test_every_reading_form_with_harmless_options_is_read_only(sub: str,
                                                               option: str) -> None:
    assert classify_command(f"git {sub} {option}") is R


@pytest.mark.parametrize("command", ["git cat-file --textconv HEAD:a",
                                     "git cat-file --filters HEAD:a", "git cat-file --filt x",
                                     "git blame --textconv a", "git grep --textconv x",
                                     "git grep -O x", "git grep -nOless x"])
def test_textconv_filters_and_pagers_of_other_reading_subcommands_are_mutating(
        command: str) -> None:
    assert classify_command(command) is M


@pytest.mark.parametrize(("verbose", "sub"), list(itertools.product(
    ["-v", "--verbose", "-v -v", "-v --verbose"],
    ["add x https://example.invalid/r.git", "rename a b", "remove a", "rm a",
     "set-url a https://example.invalid/r.git", "prune a", "update", "set-head a -a",
     "set-branches a b", "\"$x\""])))
def test_git_remote_with_options_before_a_writing_sub_subcommand_is_mutating(
        verbose: str, sub: str) -> None:
    assert classify_command(f"git remote {verbose} {sub}") is M


@pytest.mark.parametrize("command", ["git remote", "git remote -v", "git remote --verbose",
                                     "git remote -v show origin", "git remote show -n o",
                                     "git remote get-url o", "git remote get-url --all o"])
def test_git_remote_listing_forms_are_read_only(command: str) -> None:
    assert classify_command(command) is R


def test_global_options_that_run_a_program_are_mutating() -> None:
    assert classify_command("git -c core.pager='rm -f f' log") is M
    assert classify_command("git -c diff.external=./x diff") is M
    assert classify_command("git --config-env=core.pager=P log") is M
    assert classify_command("git --exec-path=/tmp/x log") is M
    assert classify_command("git --exec-path") is R  # prints it
