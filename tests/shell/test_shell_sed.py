"""The sed script reader (``toolguard.shell._sed``): a table of scripts that write or run
something hidden behind what a looser scanner skips (``y`` and bracket expressions holding
the delimiter, labels, text, file names), the scripts that only read, every spelling of
``sed -i``, and generated scripts run with GNU sed: one the reader calls read-only must
leave the directory as it was."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from functools import cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import toolguard as tg
from toolguard.shell._classifier import classify_argv, classify_command
from toolguard.shell._sed import sed_script_reads

R, M = tg.Effect.READONLY, tg.Effect.MUTATING

WRITING_SCRIPTS: list[tuple[str, str]] = [
    # y has no bracket expressions: `[` is a character to map, and the `w` after it runs
    ("y with a bracket", "y/[/a/;w out\ns/]//"),
    ("y with an escaped delimiter", "y/a\\/b/x\\/y/;w out"),
    # a label ends at a blank, `;`, `}` or `#`: what follows is the next command
    ("w after a label and a blank", ":a w out"),
    ("w after a branch label and a blank", "b a w out\n:a"),
    ("w after t and a label", "t x;w out\n:x"),
    ("w after T", "T;w out"),
    ("w after a label and a comment", ":a#c\nw out"),
    ("w after a block closing a label", "1{:a};w out"),
    ("w after a version check", "v 4.2 w out"),
    # bracket expressions in a regex may hold the delimiter and `]` (in [:class:])
    ("s///w after a class in a bracket", "s/[[:alpha:]/]/x/w out"),
    ("w after an address with a class", "/[[:alpha:]/]/w out"),
    ("w after a bracket opening with ]", "/[]/]/w out"),
    ("s///e after a negated bracket", "s/[^/]/x/e"),
    # every writing and running command, wherever it is
    ("w", "w out"), ("W", "W out"), ("e", "e"), ("e command", "1e touch pwn"),
    ("s///w", "s/a/b/w out"), ("s///gw", "s/a/b/gw out"), ("s///e", "s/.*/touch pwn/e"),
    ("s///3e", "s/a/b/3e"), ("s flags with blanks", "s/a/b/ g w out"),
    ("s with another delimiter", "s,a,b,w out"), ("s with a blank delimiter", "s a b w out"),
    ("w after !", "1!w out"), ("w after a step", "1~2w out"), ("w in a block", "1{p;w out\n}"),
    ("w after a two-address range", "/a/,/b/w out"), ("w after $!N", "$!N;w out"),
    ("w after q", "q5;w out"), ("w after l", "l 5;w out"), ("w after =", "=;w out"),
    ("w after y", "y/abc/xyz/;w out"), ("w after a text line", "a foo\nw out"),
    ("w after an empty text", "a\nw out"), ("w after a file read", "r f\nw out"),
    ("w after an \\c address", "\\,a\\,b,w out"), ("w after I and M flags", "/a/I M w out"),
    # not understood: sed would refuse most, the reader refuses them all
    ("an unknown command", "k"), ("L", "L"), ("an unmatched {", "{p"),
    ("an unmatched }", "p;}"), ("an unterminated s", "s/a/b"), ("an unterminated y", "y/a/"),
    ("a non-ASCII delimiter", "s\u00e9a\u00e9b\u00e9"), ("an address alone", "1"),
]
READING_SCRIPTS: list[str] = [
    "", "p", "1,10p", "$p", "/def/p", "/def/,/return/{p}", "s/a/b/g", "s/[/]/x/",
    "s,[,],x,", "/[[:alpha:]/]/p", "y/abc/xyz/", "y/[/]/", "1~2p;$!N;P;D", "1!G;h;$p",
    ":a\n$q;N;11,$D;ba", "a foo; w out", "a\\\nhello w out", "1i\\  w out",
    "r /etc/hostname", "R f", "s/x/y/;# comment w out\np", "=", "l", "l 3", "n;d",
    "s/a/b/ g p", "s/a/\\n/2", "0,/a/d", "/x/I,+2p", "F;z;x;g;G;h;H", "b end; p\n:end",
    "s/w/e/", "s/e/w/g", "/w/p", "y/we/ew/",
]


@pytest.mark.parametrize(("label", "script"), WRITING_SCRIPTS,
                         ids=[label for label, _ in WRITING_SCRIPTS])
def test_a_script_that_writes_or_is_not_understood_is_mutating(label: str,
                                                               script: str) -> None:
    assert not sed_script_reads(script), label
    assert classify_argv(["sed", "-n", script, "f"]) is M, label
    assert classify_argv(["sed", "-e", "p", "-e", script, "f"]) is M, label


@pytest.mark.parametrize("script", READING_SCRIPTS)
def test_a_script_that_only_reads_is_read_only(script: str) -> None:
    assert sed_script_reads(script)
    assert classify_argv(["sed", "-n", script, "f"]) is R


def test_the_scripts_of_every_e_are_one_program() -> None:
    """GNU sed joins the ``-e`` scripts with newlines: ``a\\`` takes the next one as its
    text, and a block may span them."""
    assert classify_command("sed -e 'a\\' -e 'w out' f") is R
    assert classify_command("sed -n -e '1{' -e p -e '}' f") is R
    assert classify_command("sed -n -e '1{' -e 'w out' -e '}' f") is M
    assert classify_command("sed -n -e p --expression='w out' f") is M


@pytest.mark.parametrize("command", [
    "sed -i 's/a/b/' f", "sed -i.bak 's/a/b/' f", "sed -Ei 's/a/b/' f", "sed -E -i p f",
    "sed -ni p f", "sed -ni.bak p f", "sed -s -i p f", "sed -e p -i f", "sed p f -i",
    "sed --in-place p f", "sed --in-place=.bak p f", "sed --in-pl p f", "sed --in p f",
    "sed -n -e p -si f", "sed -z -i~ p f", "sed --separate --in-place p f",
])
def test_every_spelling_of_in_place_is_mutating(command: str) -> None:
    assert classify_command(command) is M


def test_a_script_option_spelled_with_an_expansion_is_mutating() -> None:
    """``--expression="$x"`` is an option whose script is only known when it runs; read as
    a file operand it let ``w`` through."""
    assert classify_command('sed -e p --expression="$x" f') is M
    assert classify_command('sed -n -e"$x" f') is M
    assert classify_command('sed -n p "dir/$f"') is R  # a file operand


# -- against GNU sed -------------------------------------------------------------------------
@cache
def _gnu_sed() -> str | None:
    path = shutil.which("sed")
    if path is None:
        return None
    done = subprocess.run([path, "--version"], capture_output=True, text=True, check=False,
                          timeout=10)
    return path if "GNU" in done.stdout else None


_ADDRESSES = ["", "", "1", "$", "2,3", "/a/", "\\,a,", "/[/]/", "/[[:alpha:]/]/I", "1~2",
              "0,/b/", "/x/,+1", "1!", "/[]/]/"]
_COMMANDS = ["p", "d", "=", "l", "l 3", "q", "n", "N", "g", "G", "h", "H", "x", "z", "F",
             "P", "s/a/b/", "s,[,],x,g", "s/[/]/X/2", "s/[[:alpha:]/]/Y/", "s/b/\\n/ p",
             "y/abc/xyz/", "y/[/]/", "y,a\\,b,x/y,", "a text", "a\\", "i\\ w pwn1",
             "c\\\\", ":a", "b a", "ba", "t", "T x", ":x", "r f", "R f", "{p", "}", "{",
             "# w pwn2", "v"]
_WRITERS = ["w out", "W out2", "e touch pwn3", "s/a/b/w out3", "s/.*/touch pwn4/e", "e",
            "s/b/c/gw out4"]
_SEPARATORS = [";", "\n", " ", " ; ", "\n\n"]


@st.composite
def _script(draw: st.DrawFn) -> str:
    parts = draw(st.lists(st.tuples(st.sampled_from(_ADDRESSES),
                                    st.sampled_from(_COMMANDS + _WRITERS[:1]),
                                    st.sampled_from(_SEPARATORS)), min_size=1, max_size=5))
    script = "".join(a + c + s for a, c, s in parts)
    if draw(st.integers(0, 2)) == 0:  # a writer somewhere
        at = draw(st.integers(0, len(script)))
        script = script[:at] + draw(st.sampled_from([*_SEPARATORS, ""])) + draw(
            st.sampled_from(_WRITERS)) + script[at:]
    return script


def _tree(top: Path) -> dict[str, bytes]:
    return {str(p.relative_to(top)): p.read_bytes() for p in sorted(top.rglob("*"))
            if p.is_file()}


@pytest.mark.skipif(_gnu_sed() is None, reason="needs GNU sed")
@given(_script())
@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_a_generated_script_called_read_only_writes_nothing_with_gnu_sed(
        tmp_path: Path, script: str) -> None:
    if not sed_script_reads(script):
        return
    work = tmp_path / "sed"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    (work / "f").write_text("abc\na/b\nxyz]\n", encoding="utf-8")
    before = _tree(work)
    sed = _gnu_sed()
    assert sed is not None
    with contextlib.suppress(subprocess.TimeoutExpired):  # a branch that loops
        subprocess.run([sed, "-n", "-e", script, "f"], cwd=work, capture_output=True,
                       stdin=subprocess.DEVNULL, timeout=2, check=False,
                       env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"})
    assert _tree(work) == before, script


@given(_script())
@settings(max_examples=300, deadline=None)
def test_a_generated_script_with_a_writer_on_its_own_line_is_never_read_only(
        script: str) -> None:
    """A writing command on a line of its own is a command, unless the line before ends
    in a backslash (``a\\``: the next line is text)."""
    if script.endswith("\\"):
        return
    for writer in _WRITERS:
        assert not sed_script_reads(script + "\n" + writer), writer
