"""The shell classifier fails safe: every writing command of the corpus (each class of
construct the parser could skip, each program that writes through an option, an operand or
the environment) is mutating or unknown, never read-only or a poll; the read-only ones are
read-only; and the classification cache stays small whatever the commands' size."""

from __future__ import annotations

import subprocess
import sys
import tracemalloc
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import toolguard as tg
from tests.conftest import ROOT
from tests.shell_corpus import READ_ONLY, WRITING
from toolguard.shell import _classifier as _shell
from toolguard.shell._classifier import MAX_CHARS, classify_argv, classify_command
from toolguard.testing import FakeClock

R, M, P = tg.Effect.READONLY, tg.Effect.MUTATING, tg.Effect.POLL


def test_the_corpus_covers_the_classes() -> None:
    assert len(WRITING) >= 100 and len(READ_ONLY) >= 90
    assert len({c for _, c in WRITING}) == len(WRITING)
    assert len(set(READ_ONLY)) == len(READ_ONLY)


@pytest.mark.parametrize(("label", "command"), WRITING, ids=[label for label, _ in WRITING])
def test_a_writing_command_is_never_read_only_or_a_poll(label: str, command: str) -> None:
    assert classify_command(command) not in (R, P), label


@pytest.mark.parametrize("command", READ_ONLY, ids=[c[:40] for c in READ_ONLY])
def test_a_read_only_command_is_read_only(command: str) -> None:
    assert classify_command(command) is R


@pytest.mark.parametrize(("command", "expected"), [
    ("sed -n '1w out' f", M), ("sort -uo out f", M), ("uniq f out", M),
    ("env -S 'rm -f f'", M), ("echo ${x:-`rm -f f`}", M), ("[[ 'a[$(rm f)]' -eq 0 ]]", M),
    ("GIT_EXTERNAL_DIFF=x git diff", M), ("ls ./x > out", M), ("make", None),
    ("python script.py", None), ("source venv/bin/activate", None),
])
def test_not_understood_is_mutating_and_unknown_programs_are_the_tools(
        command: str, expected: tg.Effect | None) -> None:
    assert classify_command(command) is expected


@pytest.mark.parametrize(("argv", "expected"), [
    (["sed", "-n", "1w out", "f"], M), (["git", "grep", "foo"], R), (["xargs", "sort"], M),
    (["find", ".", "-exec", "grep", "-l", "x", "{}", ";"], R), (["./ls"], None),
    (["/usr/bin/ls", "-la"], R), (["/usr/bin/time", "-o", "cat", "ls"], M),
])
def test_argument_vectors_follow_the_same_rules(argv: list[str],
                                                expected: tg.Effect | None) -> None:
    assert classify_argv(argv) is expected


@given(st.sampled_from([c for c in READ_ONLY if " #" not in c]),  # a comment ends the line
       st.sampled_from([c for _, c in WRITING]),
       st.sampled_from([" ; ", " && ", " || ", " | ", "\n", " & "]), st.booleans(),
       st.sampled_from(["{}", "( {} )", "{{ {}; }}", "echo \"$({})\"", "bash -c '{}'",
                        "if true; then {}; fi"]))
@settings(max_examples=300, deadline=None)
def test_a_writing_part_anywhere_keeps_the_whole_lenient_never(
        read: str, write: str, op: str, write_first: bool, wrap: str) -> None:
    """Composed with reads, in any order, under any wrapper, a write is never read-only."""
    if "'" in write + read and wrap == "bash -c '{}'":
        wrap = "{}"
    parts = (write, read) if write_first else (read, write)
    assert classify_command(wrap.format(op.join(parts))) not in (R, P)


def test_the_cache_is_bounded_in_bytes() -> None:
    """Distinct commands near the size limit never pin their text (the cache keys are
    16-byte digests)."""
    _shell._CACHE.clear()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(300):
            classify_command(f"ls {i} ".ljust(MAX_CHARS // 4, "a"))
        retained = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(_shell._CACHE) == 300
    assert retained < 300 * 1024, retained  # the texts would be 300 x 16 KiB = 4.8 MB


def test_the_cache_holds_a_bounded_number_of_entries() -> None:
    _shell._CACHE.clear()
    for i in range(_shell._CACHE_ENTRIES + 50):
        classify_command(f"ls {i}")
    assert len(_shell._CACHE) == _shell._CACHE_ENTRIES
    assert classify_command("ls 0") is R  # evicted, classified again


def test_a_policy_rule_anchored_to_the_whole_command_extends_the_classifier(
        tmp_path: Path) -> None:
    """The extension documented in docs/concepts/shell.md: a rule for ``make test`` makes it
    read-only, and a compound command that starts with it is still read by the classifier."""
    path = tmp_path / "policy.toml"
    path.write_text("""
[tools.bash]
shell = "command"
effect = "mutating"

[[tools.bash.rules]]
match = { command = '^make (test|lint)( -j[0-9]+)?$' }
effect = "readonly"

[[tools.bash.rules]]
match = { command = '^deployctl status [a-z0-9-]+$' }
effect = "poll"
""", encoding="utf-8")
    task = tg.Guard(tg.load_policy(path, env={}), clock=FakeClock(0),
                    strict_tools=False).task("t")
    effects = {command: task._replay_call("bash", {"command": command}, "ok").effect
               for command in ("make test", "make lint -j4", "make test && rm -rf build",
                               "make", "deployctl status web-1", "git status")}
    assert effects == {"make test": R, "make lint -j4": R, "make test && rm -rf build": M,
                       "make": M, "deployctl status web-1": P, "git status": R}


def test_characters_that_crash_the_grammar_are_never_parsed(tmp_path: Path) -> None:
    """tree-sitter-bash 0.25.1 ends the process (SIGSEGV) on ``{`` followed by some code
    points of the private-use planes; run in a child so a crash fails this test only."""
    code = ("from toolguard.shell._classifier import classify_command\n"
            "for c in ['{\\U000f0000\\r', '{\\U00104322\\rz', 'ls {\\U000f0000', "
            "'echo \\U00104322 {\\U000f0000']:\n"
            "    assert classify_command(c) is not None\n"
            "print('ok')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0 and done.stdout.strip() == "ok", (done.returncode,
                                                                   done.stderr[-2000:])


_SHELL_TOOLS = [(path.name, tool, settings.shell)
                for path in sorted((ROOT / "examples" / "policies").glob("*.toml"))
                for tool, settings in tg.load_policy(path, env={}).tools.items()
                if settings.shell]


@pytest.mark.parametrize(("policy", "tool", "arg"), _SHELL_TOOLS,
                         ids=[f"{p}-{t}" for p, t, _ in _SHELL_TOOLS])
def test_no_writing_command_runs_twice_through_a_shipped_policy(policy: str, tool: str,
                                                                arg: str) -> None:
    loaded = tg.load_policy(ROOT / "examples" / "policies" / policy, env={})
    twice = []
    for i, (label, command) in enumerate(WRITING):
        task = tg.Guard(loaded, clock=FakeClock(0), strict_tools=False).task(f"t{i}")
        first = task._replay_call(tool, {arg: command}, "")
        again = task._replay_call(tool, {arg: command}, "")
        if first.executed and again.executed:
            twice.append(label)
    assert twice == []


def test_threads_classify_alike() -> None:
    """One tree-sitter parser per thread, one locked cache: 8 threads classifying the corpus
    at once (cache cleared, so they parse) agree with one thread."""
    commands = [c for _, c in WRITING] + READ_ONLY
    _shell._CACHE.clear()
    expected = [_shell._classify_text(c, 0) for c in commands]
    _shell._CACHE.clear()
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda _: [classify_command(c) for c in commands], range(8)))
    assert all(result == expected for result in results)
