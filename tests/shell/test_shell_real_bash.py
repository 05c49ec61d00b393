"""The shell classifier against bash itself: a command called read-only (or a poll) must leave
the file tree unchanged when bash really runs it.

Commands come from a grammar of programs, options (the harmless and the writing ones),
operands, redirections, expansions, substitutions and connectors; each one classified
read-only or poll runs with ``bash`` in a fresh directory holding a few files and a git
repository, with a fake ``HOME``, no network (``unshare -n`` where the kernel allows it), no
standard input and a timeout, and the tree (names, sizes, contents) is compared before and
after. ``git`` runs with ``GIT_OPTIONAL_LOCKS=0`` on a copy whose index is refreshed first
(``git status`` may otherwise rewrite the index's stat cache, which is no change of the
repository), and ``pytest`` is left out of the
grammar (a test run writes ``__pycache__`` and ``.pytest_cache``; the classifier counts it as
observing the code on purpose).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
from functools import cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import toolguard as tg
from tests.shell_corpus import READ_ONLY
from toolguard.shell._classifier import classify_command

pytestmark = pytest.mark.skipif(shutil.which("bash") is None or shutil.which("git") is None,
                                reason="needs bash and git")

_FILES = {
    "a.py": "def foo():\n    return 1\n",
    "b.txt": "b,2\na,1\nb,2\n",
    "data.json": '{"name": "x", "n": [1, 2]}\n',
    "sub/c.txt": "hello foo\n",
    "keep/data": "precious\n",
    "f": "line one\nline two\n",
}


@cache
def _template(root: Path) -> Path:
    """A directory with the files above committed to a git repository, copied per run."""
    base = root / "template"
    for name, text in _FILES.items():
        path = base / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    env = _env(root / "home")
    for args in (["init", "-q"], ["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t",
                                                 "commit", "-qm", "init"]):
        subprocess.run(["git", *args], cwd=base, env=env, check=True, capture_output=True,
                       timeout=30)
    return base


def _env(home: Path) -> dict[str, str]:
    home.mkdir(parents=True, exist_ok=True)
    return {"HOME": str(home), "PATH": "/usr/local/bin:/usr/bin:/bin", "LC_ALL": "C",
            "GIT_OPTIONAL_LOCKS": "0", "GIT_CONFIG_NOSYSTEM": "1", "TERM": "dumb",
            "GIT_CONFIG_GLOBAL": "/dev/null", "PYTHONDONTWRITEBYTECODE": "1"}


@cache
def _no_network_prefix() -> tuple[str, ...]:
    try:
        done = subprocess.run(["unshare", "-n", "true"], capture_output=True, timeout=10,
                              check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ()
    return ("unshare", "-n") if done.returncode == 0 else ()


def _snapshot(top: Path) -> dict[str, str]:
    """Every path under ``top`` (``.git`` included) with a digest of what it holds."""
    found: dict[str, str] = {}
    for path in sorted(top.rglob("*")):
        rel = str(path.relative_to(top))
        if path.is_symlink():
            found[rel] = "link:" + str(path.readlink())
        elif path.is_dir():
            found[rel + "/"] = "dir"
        else:
            found[rel] = hashlib.blake2b(path.read_bytes(), digest_size=16).hexdigest()
    return found


def _run_and_compare(tmp: Path, command: str) -> None:
    work = tmp / "work"
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(_template(tmp.parent / "shell-real-bash"), work, symlinks=True)
    home = tmp / "home"
    shutil.rmtree(home, ignore_errors=True)
    subprocess.run(["git", "update-index", "-q", "--refresh"], cwd=work, env=_env(home),
                   capture_output=True, timeout=30, check=False)  # the copy's stat cache
    before = _snapshot(work), _snapshot(home)
    with contextlib.suppress(subprocess.TimeoutExpired):  # a poll that never ends
        subprocess.run([*_no_network_prefix(), "bash", "-c", command], cwd=work,
                       env=_env(home), stdin=subprocess.DEVNULL, capture_output=True,
                       timeout=5, check=False)
    after = _snapshot(work), _snapshot(home)
    assert after[0] == before[0], f"{command!r} changed the tree: " + repr(
        sorted(set(after[0].items()) ^ set(before[0].items())))
    assert set(after[1]) <= {".gitconfig"} or not after[1], f"{command!r} wrote to HOME"


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("shell-real-bash") / "run"


@pytest.mark.parametrize("command", READ_ONLY, ids=[c[:40] for c in READ_ONLY])
def test_every_read_only_command_of_the_corpus_changes_nothing(sandbox: Path,
                                                               command: str) -> None:
    assert classify_command(command) is tg.Effect.READONLY
    _run_and_compare(sandbox, command)


# -- the grammar ---------------------------------------------------------------------------------
_OPERANDS = ["a.py", "b.txt", "sub", "f", "data.json", "out", "keep/data", "-", "'*.py'",
             "*.py", "sub/c.txt", "x"]
# program -> options, harmless and writing alike
_PROGRAMS: dict[str, list[str]] = {
    "cat": ["-n", "-A", "-s", "--number"], "head": ["-n 2", "-3", "-c 5", "-q"],
    "tail": ["-n 2", "-1", "-c 3"], "wc": ["-l", "-w", "-c", "--total=never"],
    "ls": ["-la", "-R", "-1", "--color=never", "-t"], "grep": ["-n", "-r", "-i", "-c", "-l",
                                                             "-e foo", "-v"],
    "sort": ["-u", "-r", "-o out", "-uo out", "--output=out", "-k2", "-t,", "-n"],
    "uniq": ["-c", "-d", "-u", "-i"], "sed": ["-n", "-e 1p", "-i", "-E", "--sandbox",
                                              "-e '1w out'", "-e 's/a/b/w out'",
                                              "-e '1e touch pwn'", "-n -e '$p'"],
    "find": [".", "-name '*.py'", "-type f", "-delete", "-fprint out", "-maxdepth 1",
             "-exec cat {} \\;", "-exec rm -f {} \\;", "-print0", "-newer a.py"],
    "tee": ["-a", "out"], "xxd": ["-l 8", "-r"], "cut": ["-d, -f1", "-c1-3"],
    "tr": ["a-z A-Z", "-d a"], "nl": ["-ba"], "echo": ["-n", "hello", "-e"],
    "printf": ["'%s\\n'", "-v x"], "git": ["status", "log --oneline", "diff", "grep foo",
                                          "ls-files", "branch", "branch newb", "tag v1",
                                          "stash", "diff --output=out", "blame a.py",
                                          "show --stat", "config user.name x",
                                          "config --get user.name", "add -A",
                                          "checkout -b z", "rm -q a.py"],
    "env": ["-i", "foo=1"], "xargs": ["-n 1", "-0", "-I{}"], "tree": ["-L 1", "-o out"],
    "file": ["-b", "-C -m x"], "stat": ["-c %s"], "du": ["-s", "-h"], "touch": ["-c"],
    "rm": ["-f"], "mkdir": ["-p"], "cp": ["-r"], "mv": ["-f"], "date": ["+%s"],
    "history": ["-w out", "-c"], "pwd": [], "true": [], "sleep": ["0"], "test": ["-f"],
    "basename": ["-a"], "realpath": ["-e"], "readlink": ["-f"], "diff": ["-u", "-q"],
    "comm": ["-12"], "jq": [".", "-r .name"], "od": ["-c"], "rev": [], "paste": ["-s"],
}
_REDIRECTS = ["", "", "", "> out", ">> out", "2>/dev/null", ">/dev/null 2>&1", "< a.py",
              "2>&1", "&> out", "> /dev/null", "<<< foo", ">| out", "1<> out"]
_CONNECTORS = [" ; ", " && ", " || ", " | ", "\n", " & "]


@st.composite
def _simple(draw: st.DrawFn, depth: int = 0) -> str:
    program = draw(st.sampled_from(sorted(_PROGRAMS)))
    options = draw(st.lists(st.sampled_from(_PROGRAMS[program] or [""]), max_size=3))
    operands = draw(st.lists(st.sampled_from(_OPERANDS), max_size=2))
    words = [program, *options, *operands]
    if depth < 1 and draw(st.integers(0, 5)) == 0:  # an expansion or substitution
        inner = draw(_simple(depth + 1))
        words.append(draw(st.sampled_from([
            f"\"$({inner})\"", f"$({inner})", f"`{inner}`", f"${{x:-$({inner})}}",
            f"<({inner})", "\"$HOME\"", "$x", "${x:-a.py}"])))
    if depth < 1 and draw(st.integers(0, 6)) == 0:  # a wrapper
        words.insert(0, draw(st.sampled_from(["env", "timeout 2", "command", "nice",
                                              "xargs", "bash -c", "sh -c"])))
        if words[0].endswith("-c"):
            words = [words[0], "'" + " ".join(words[1:]).replace("'", "") + "'"]
    assignment = draw(st.sampled_from(["", "", "", "x=a.py ", "PAGER=cat ",
                                       "GIT_PAGER=cat ", "LC_ALL=C "]))
    return assignment + " ".join(w for w in words if w) + " " + draw(
        st.sampled_from(_REDIRECTS))


@st.composite
def _command(draw: st.DrawFn) -> str:
    parts = draw(st.lists(_simple(), min_size=1, max_size=3))
    command = parts[0]
    for part in parts[1:]:
        command += draw(st.sampled_from(_CONNECTORS)) + part
    wrap = draw(st.sampled_from(["{}", "{}", "{}", "({})", "{{ {}; }}",
                                 "if true; then {}; fi", "for i in 1; do {}; done"]))
    return wrap.format(command)


@given(_command())
@settings(max_examples=int(os.environ.get("TOOLGUARD_SHELL_EXAMPLES", "100")),
          deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                HealthCheck.too_slow])
def test_a_generated_command_called_read_only_leaves_the_tree_unchanged(
        sandbox: Path, command: str) -> None:
    if classify_command(command) in (tg.Effect.READONLY, tg.Effect.POLL):
        _run_and_compare(sandbox, command)
