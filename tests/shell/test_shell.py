"""The shell classifier (``[tools.X] shell = "ARG"``): a table of commands with the effect
each must get, the properties that hold for any input, and the classifier in the pipeline."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import toolguard as tg
from tests.conftest import ROOT
from toolguard.policy._model import ToolPolicy
from toolguard.shell._classifier import MAX_CHARS, MAX_PIPES, classify_argv, classify_command
from toolguard.testing import FakeClock

R, M, P, U = tg.Effect.READONLY, tg.Effect.MUTATING, tg.Effect.POLL, None

TABLE: list[tuple[str, tg.Effect | None]] = [
    # plain reads (Codex's list and friends)
    ("ls", R), ("ls -la /testbed", R), ("cat README.md", R), ("head -n 20 a.py", R),
    ("tail -n 50 log.txt", R), ("grep -rn 'def foo' src/", R), ("rg -n foo", R),
    ("wc -l *.py", R), ("stat setup.py", R), ("file a.out", R), ("pwd", R), ("echo hi", R),
    ("which python", R), ("find . -name '*.py'", R), ("find . -type f | wc -l", R),
    ("sed -n '10,20p' a.py", R), ("sed 's/a/b/' a.py", R), ("nl -ba a.py", R),
    ("diff a.py b.py", R), ("sort names.txt | uniq -c", R), ("cut -d: -f1 /etc/passwd", R),
    ("tree -L 2", R), ("du -sh .", R), ("jq .name package.json", R), ("date", R),
    ("whoami", R), ("uname -a", R), ("env", R), ("printenv PATH", R), ("true", R),
    ("base64 file.bin", R), ("tac log", R), ("realpath .", R), ("cd /testbed", R),
    ("xxd -l 64 a.bin", R),
    # git: reads
    ("git status", R), ("git log --oneline -5", R), ("git diff HEAD~1", R),
    ("git show HEAD:setup.py", R), ("git branch", R), ("git branch --list 'feat*'", R),
    ("git branch -a -v", R), ("git rev-parse HEAD", R), ("git -C /repo status", R),
    ("git --no-pager log -p", R),
    # compositions of reads
    ("cd /testbed && git status", R), ("ls | grep foo | head -5", R),
    ("cat a.py || echo missing", R), ("(cd src; ls)", R), ("{ ls; pwd; }", R),
    ("echo \"$(git rev-parse HEAD)\"", R), ("x=$(ls); echo $x", R),
    ("for f in *.py; do wc -l $f; done", R), ("if [ -f a.py ]; then cat a.py; fi", R),
    ("grep foo a.py 2>/dev/null", R), ("ls > /dev/null 2>&1", R), ("ls 2>&1 | head", R),
    ("cat << 'EOF'\nnot $(run) here\nEOF", R), ("echo '$(rm -rf /)'", R),
    ("bash -lc 'ls | wc -l'", R), ("sh -c \"git diff\"", R), ("sudo ls /root", R),
    ("timeout 10 cat big.log", R), ("env LC_ALL=C sort a", R), ("nice -n 5 grep x y", R),
    ("find . -name '*.pyc' | xargs ls -l", R), ("foo=1 bar=2 printenv foo", R),
    ("# just a comment\nls", R), ("ls \\\n  -la", R), ("grep -c x a | sort -n", R),
    # test runs observe the code
    ("pytest tests/test_a.py -q", R), ("python -m pytest -x tests", R),
    ("cd /testbed && python3 -m pytest tests/x.py::T -xvs 2>&1 | tail -50", R),
    ("python -m unittest discover", R), ("pytest -rA -q --co", R),
    ("python --version", R), ("pip list", R),
    ("pip show requests", R),
    # writes: redirects, tee, in-place edits, deleting/executing find, the writing programs
    ("echo x > a.txt", M), ("echo x >> a.txt", M), ("ls > files.txt", M),
    ("cat > fix.patch << 'EOF'\n--- a\n+++ b\nEOF", M), ("cat <<EOF > f\nx\nEOF", M),
    ("grep foo a &> out.log", M), ("echo x >| a", M), ("echo hi | tee out.txt", M),
    ("ls | tee -a log", M), ("sed -i 's/a/b/' a.py", M), ("sed -i.bak 's/a/b/' a.py", M),
    ("sed --in-place 's/a/b/' a.py", M), ("sed -ni '1p' a", M),
    ("find . -name '*.pyc' -delete", M), ("find . -exec rm {} \\;", M),
    ("find . -name x -execdir touch {} +", M), ("sort -o out.txt in.txt", M),
    ("rm -rf build", M), ("mv a b", M), ("cp a b", M), ("mkdir -p x/y", M), ("touch f", M),
    ("chmod +x run.sh", M), ("ln -s a b", M), ("patch -p1 < fix.patch", M),
    ("kill 4242", M), ("pip install -e .", M), ("base64 -o out.bin in.txt", M),
    ("date -s '2020-01-01'", M),
    # git: everything else changes the repository (or may run anything)
    ("git add -A", M), ("git commit -m x", M), ("git checkout main", M), ("git stash", M),
    ("git reset --hard", M), ("git push", M), ("git branch -D old", M),
    ("git branch new-feature", M), ("git -c core.pager=cat log", M),
    ("git diff --output=out.diff", M), ("git checkout status", M), ("git", M),
    # one mutating part makes the whole command mutating, wherever it hides
    ("ls && rm a", M), ("cat a; echo x > b", M), ("echo \"$(rm -rf x)\"", M),
    ("echo `touch f`", M), ("(cd x && rm y)", M), ("bash -lc 'echo x > f'", M),
    ("sudo rm -rf /tmp/x", M), ("timeout 5 mv a b", M), ("env A=1 cp a b", M),
    ("find . | xargs rm", M), ("x=$(mkdir d)", M), ("cat <(rm x)", M),
    ("if true; then rm x; fi", M), ("cd /testbed && sed -i '1d' a.py && cat a.py", M),
    # polls: waiting on something that moves
    ("sleep 10", P), ("sleep 5 && tail log.txt", P), ("tail -f server.log", P),
    ("tail -F log", P), ("tail --follow=name log", P), ("ps aux", P), ("ps aux | grep x", P),
    ("jobs -l", P), ("pgrep -f server", P), ("wait", P), ("", P), ("   ", P),
    ("while true; do sleep 1; done", P),
    # unknown: the tool's own effect
    ("python script.py", U), ("python -c 'print(1)'", U), ("make", U), ("npm test", U),
    ("./run.sh", U), ("bash script.sh", U), ("python - << 'EOF'\nprint(1)\nEOF", U),
    ("ls; python x.py", U), ("awk '{print $1}' a", U), ("source venv/bin/activate", U),
    ("submit", U),
    # not understood (a dynamic program, a syntax error, an option not allowed): mutating
    ("$CMD --flag", M), ("echo 'unterminated", M), ("ls )", M), ("rg --pre cat foo", M),
    ("case $x in a) ls;; esac", R),
]


def test_the_table_is_large_and_has_every_class() -> None:
    assert len(TABLE) >= 100
    assert {effect for _, effect in TABLE} == {R, M, P, U}
    assert len({command for command, _ in TABLE}) == len(TABLE)


@pytest.mark.parametrize(("command", "expected"), TABLE, ids=[c[:40] for c, _ in TABLE])
def test_classify(command: str, expected: tg.Effect | None) -> None:
    assert classify_command(command) is expected


@pytest.mark.parametrize(("argv", "expected"), [
    (["ls", "-la"], R), (["bash", "-lc", "git status && ls"], R), (["rm", "x"], M),
    (["bash", "-lc", "echo x > f"], M), (["python", "x.py"], U), ([], U), ([1, 2], U),
    ("git diff", R), (None, U), (5, U),
])
def test_classify_argv(argv: object, expected: tg.Effect | None) -> None:
    assert classify_argv(argv) is expected


def test_quoted_here_document_bodies_are_never_commands() -> None:
    body = "rm -rf /\n$(touch x)\n`mv a b`\n'unbalanced\n"
    assert classify_command(f"cat << 'EOF'\n{body}EOF\nls") is R
    assert classify_command(f"cat <<-\"EOF\"\n\t{body}\tEOF\nls") is R


def test_unquoted_here_document_bodies_run_their_substitutions() -> None:
    assert classify_command("cat <<EOF\nplain $HOME text\nEOF") is R
    assert classify_command("cat <<-EOF\n\t$(touch x)\n\tEOF\nls") is M
    assert classify_command("cat <<EOF\n`rm a`\nEOF") is M


def test_a_regression_the_regex_rules_got_wrong() -> None:
    """``cat > f <<EOF`` read as a read once caused 7 false halts."""
    assert classify_command("cat > setup.cfg <<EOF\n[metadata]\nname = x\nEOF") is M


@given(st.text(alphabet=" \t\n;|&()<>'\"\\$`#{}=*!~abcxyz019-/.", max_size=300))
@settings(max_examples=400, deadline=None)
def test_any_input_classifies_without_raising(command: str) -> None:
    assert classify_command(command) in (R, M, P, U)


@given(st.text(max_size=200))
@settings(max_examples=200, deadline=None)
def test_any_unicode_classifies_without_raising(command: str) -> None:
    assert classify_command(command) in (R, M, P, U)


@given(st.lists(st.sampled_from(["ls", "cat a", "git status", "pwd", "wc -l x"]),
                min_size=1, max_size=8),
       st.lists(st.sampled_from([" && ", " ; ", " | ", " || ", "\n"]), min_size=8,
                max_size=8),
       st.sampled_from(["rm x", "echo a > b", "sed -i 1d f", "git add .", "touch t"]),
       st.integers(0, 8))
def test_one_write_anywhere_makes_it_mutating(reads: list[str], ops: list[str], write: str,
                                              where: int) -> None:
    parts = [*reads]
    parts.insert(min(where, len(parts)), write)
    command = parts[0] + "".join(op + p for op, p in zip(ops, parts[1:], strict=False))
    assert classify_command(command) is M


def test_too_long_too_complex_too_deep_or_unparsable_is_mutating() -> None:
    assert classify_command("ls;" * (MAX_CHARS // 3 + 1)) is M
    assert classify_command("ls;" * 1_000) is M  # more syntax nodes than are walked
    assert classify_command("ls;" * 300) is R
    assert classify_command("ls | " * (MAX_PIPES + 1) + "ls") is M  # parsed in quadratic time
    assert classify_command("ls | " * 20 + "ls") is R
    assert classify_command("echo " + "$(" * 40 + "ls" + ")" * 40) is M
    assert classify_command("bash -c " + "'bash -c \"" * 1 + "ls" + "\"'") is R
    assert classify_command("echo 'x") is M
    assert classify_command("(" * 5000 + "ls" + ")" * 5000) is M


def test_quoted_and_escaped_operators_are_words() -> None:
    assert classify_command("echo 'a > b' \"c | d\" e\\;f") is R
    assert classify_command("grep -e '$(rm x)' -e \"\\$(rm y)\" a") is R


def test_the_benchmark_smoke_run(tmp_path: Path) -> None:
    out = tmp_path / "shell.json"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "shell.py"), "--smoke",
                           "--json", str(out)], capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "classify_command" in out.read_text(encoding="utf-8")


# -- in the pipeline -------------------------------------------------------------------------
def _bash_task(effect: tg.Effect = tg.Effect.MUTATING) -> tg.Task:
    policy = tg.Policy(tools={"bash": ToolPolicy(effect=effect, shell="command")})
    return tg.Guard(policy, clock=FakeClock(0), strict_tools=False).task("shell")


def test_read_only_commands_are_never_answered_from_the_cache() -> None:
    task = _bash_task()
    first = task._replay_call("bash", {"command": "git status"}, "clean")
    again = task._replay_call("bash", {"command": "git status"}, "modified: a.py")
    assert (first.effect, again.decision) == (R, tg.Decision.ALLOW)
    assert again.content == "modified: a.py"


def test_writes_are_still_answered_from_the_cache() -> None:
    task = _bash_task()
    task._replay_call("bash", {"command": "echo x > a"}, "")
    assert task._replay_call("bash", {"command": "echo x > a"}, "").decision is tg.Decision.CACHED


def test_unknown_commands_get_the_tools_effect() -> None:
    assert _bash_task()._replay_call("bash", {"command": "make"}, "ok").effect is M
    assert _bash_task(R)._replay_call("bash", {"command": "make"}, "ok").effect is R
    assert _bash_task(R)._replay_call("bash", {"command": "rm x"}, "").effect is M


def test_rules_come_before_the_classifier() -> None:
    policy = tg.load_policy(None, env={
        "TOOLGUARD_TOOLS__BASH__SHELL": "command",
        "TOOLGUARD_TOOLS__BASH__RULES": '[{"match": {"command": "^ls"}, "effect": "mutating"}]',
    })
    task = tg.Guard(policy, clock=FakeClock(0), strict_tools=False).task("rules")
    assert task._replay_call("bash", {"command": "ls"}, "a").effect is M
    assert task._replay_call("bash", {"command": "pwd"}, "/").effect is R


_PATHS = ["./{}", "/tmp/{}", "/tmp/x/bin/{}", "~/bin/{}", "bin/{}", ".venv/bin/{}",
          "/opt/venv/bin/{}", "/usr/bin/../../tmp/{}", "/usr/bin//{}", "../{}"]


@pytest.mark.parametrize("path", _PATHS)
@pytest.mark.parametrize("program", ["ls", "cat a.py", "pytest -q", "python -m pytest",
                                     "python3 --version", "git status"])
def test_a_program_named_by_a_path_outside_the_system_folders_is_unknown(
        path: str, program: str) -> None:
    """A path outside ``/bin``, ``/usr/bin``... is a file an earlier command may have written
    (a virtual environment's ``bin/pytest`` too): the tool's own effect applies."""
    name, _, rest = program.partition(" ")
    command = path.format(name) + (" " + rest if rest else "")
    assert classify_command(command) is U
    assert classify_argv(command.split()) is U
    for folder in ("/usr/bin/", "/bin/", "/usr/local/bin/"):
        assert classify_command(folder + program) is R
