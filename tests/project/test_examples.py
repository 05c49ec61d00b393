"""Every file in ``examples/`` runs: the quickstart script, every trace (replayed, with what it is
written to show), every example policy (loaded)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

import toolguard as tg
from tests.conftest import ROOT, SHARED
from toolguard.replay import ReplayReport, read_runs, read_tool_definitions, replay_runs

EXAMPLES = ROOT / "examples"
TRACES = sorted((EXAMPLES / "traces").iterdir())
POLICIES = sorted((EXAMPLES / "policies").glob("*.toml"))


def test_every_example_is_exercised() -> None:
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == ["quickstart.py"]
    assert {p.name for p in TRACES} == {
        "grep-loop.jsonl", "duplicate-payment.jsonl", "test-rerun-after-edit.jsonl",
        "openai-airline.json", "anthropic-coding.json"}
    # retail.toml and telecom.toml: tests/replay/test_replay_realruns.py replays them
    assert [p.name for p in POLICIES] == ["airline.toml", "claude-code.toml", "codex.toml",
                                          "coding-agent.toml", "gemini.toml",
                                          "openhands.toml", "retail.toml", "swe-agent.toml",
                                          "telecom.toml"]


def test_quickstart_prints_allow_warn_block_halt() -> None:
    start = time.monotonic()
    done = subprocess.run([sys.executable, str(EXAMPLES / "quickstart.py")], capture_output=True,
                          text=True, check=True, timeout=60, cwd=ROOT)
    assert time.monotonic() - start < 10  # < 1 s on a laptop; generous for slow CI
    assert done.stderr == ""
    decisions = [line.split()[0] for line in done.stdout.splitlines()]
    assert decisions == ["allow", "allow", "allow", "warn", "block", "halt"]
    assert "search_docs was called 5 times with the same arguments" in done.stdout


@pytest.mark.parametrize("path", POLICIES, ids=[p.stem for p in POLICIES])
def test_example_policy_loads(path: Path) -> None:
    policy = tg.load_policy(path, env={})
    assert policy.mode is tg.Mode.ENFORCE
    assert path.read_text().startswith("#:schema ../../toolguard/policy.schema.json\n")
    assert (path.parent / "../../toolguard/policy.schema.json").resolve().is_file()


@pytest.mark.parametrize(("command", "effect"), [
    ("ls -la", "readonly"),
    ("cd /testbed && grep -rn 'def parse' src | head -20", "readonly"),
    ("sed -n '40,60p' src/a.py", "readonly"),
    ("git diff HEAD~1 -- src/", "readonly"),
    ("find . -name '*.py' | xargs grep -l Schema 2>/dev/null", "readonly"),
    ("open src/a.py\n", "readonly"),
    ("sed -i 's/a/b/' src/a.py", "mutating"),
    ("sed -n -i 's/a/b/p' src/a.py", "mutating"),
    ("echo fixed > notes.txt", "mutating"),
    ("cat > t.py << 'EOF'\nprint(1)\nEOF", "mutating"),
    ("find . -name '*.pyc' -delete", "mutating"),
    ("git checkout src/a.py", "mutating"),
    ("cat $(which python)", "readonly"),  # both parts only read (the shell classifier)
    ("cat $(rm -v x)", "mutating"),
    ("python reproduce.py", "mutating"),
    ("submit flag{x}\n", "mutating"),
    ("sleep 10", "poll"),
    ("", "poll"),
    ("sleep 2 && tail -5 build.log", "poll"),
    ("sleep 1; rm -rf build", "mutating"),
])
def test_coding_agent_policy_classifies_commands(command: str, effect: str) -> None:
    guard = tg.Guard(tg.load_policy(EXAMPLES / "policies" / "coding-agent.toml", env={}),
                     strict_tools=False)
    assert str(guard.task("t")._replay_call("bash", {"command": command}, "").effect) == effect


def replay(path: Path, policy: Path | None = None, tools: Path | None = None) -> ReplayReport:
    runs, problems = read_runs([path])
    assert problems == []
    specs = read_tool_definitions(tools) if tools else []
    report = replay_runs(runs, tg.load_policy(policy, env={}) if policy else None, tools=specs)
    assert report.problems == []
    return report


@pytest.mark.parametrize("path", [p for p in TRACES if p.suffix == ".jsonl"],
                         ids=lambda p: p.stem)
def test_trace_example_keeps_its_promise(path: Path) -> None:
    # Each trace header says, in the ../shared/cases "must" format, what any good guard does.
    report = replay(path)
    [run] = report.runs
    must = run.meta["must"]
    executed = [s.executed for s in run.steps]
    assert all(executed[i] for i in must.get("run", []))
    assert not any(i < len(executed) and executed[i] for i in must.get("not_run", []))
    if "stopped_by" in must:
        assert not all(executed[: must["stopped_by"] + 1])
    if "halted_by" in must:
        assert run.halted_at is not None
        assert run.halted_at <= must["halted_by"]


def test_openai_example_with_the_airline_policy() -> None:
    report = replay(EXAMPLES / "traces" / "openai-airline.json", EXAMPLES / "policies" /
                    "airline.toml", SHARED / "data" / "tau-bench" / "airline-tools.json")
    first, second = report.runs
    assert (first.id, first.meta["reward"]) == ("cancel-twice-in-one-message", 1.0)
    # the model cancels twice in one message: the duplicate is answered from the first
    assert [str(s.decision) for s in first.steps] == ["allow", "allow", "cached"]
    # malformed JSON, then a missing required argument, then a valid search
    assert [str(s.decision) for s in second.steps] == ["invalid", "invalid", "allow"]
    assert "not a valid JSON object" in second.steps[0].reason
    assert "'date' is a required property" in second.steps[1].reason


def test_anthropic_example_with_the_coding_agent_policy() -> None:
    report = replay(EXAMPLES / "traces" / "anthropic-coding.json",
                    EXAMPLES / "policies" / "coding-agent.toml")
    [run] = report.runs
    steps = [(str(s.effect), str(s.decision)) for s in run.steps]
    # a test run only observes the code (the shell classifier): the tolerant read-only
    # ladder, never the idempotency cache
    assert steps == [
        ("readonly", "allow"),   # run the test: it fails
        ("poll", "allow"),       # sleep 5
        ("readonly", "allow"),   # the same test again, nothing changed: the 2nd read
        ("readonly", "allow"),   # read the test ...
        ("readonly", "allow"),   # ... and grep the code, in one message
        ("readonly", "allow"),   # after the user's hint (a new turn) the test runs again
        ("mutating", "allow"),   # the fix
        ("readonly", "allow"),   # the test after the fix: it passes
    ]
    assert run.steps[5].count == 1  # the new turn restarted the count


# -- the policies for coding agents' own tools ------------------------------------------------
AGENT_POLICIES = {name: EXAMPLES / "policies" / f"{name}.toml"
                  for name in ("claude-code", "codex", "openhands", "swe-agent")}


def effect_of(policy: str, tool: str, args: dict[str, object]) -> str:
    guard = tg.Guard(tg.load_policy(AGENT_POLICIES[policy], env={}), strict_tools=False)
    return str(guard.task("t")._replay_call(tool, args, "").effect)


@pytest.mark.parametrize(("policy", "tool", "args", "effect"), [
    ("claude-code", "Read", {"file_path": "/a.py"}, "readonly"),
    ("claude-code", "Grep", {"pattern": "x"}, "readonly"),
    ("claude-code", "Glob", {"pattern": "*.py"}, "readonly"),
    ("claude-code", "LS", {"path": "/"}, "readonly"),
    ("claude-code", "WebFetch", {"url": "https://example.com"}, "readonly"),
    ("claude-code", "Edit", {"file_path": "/a.py"}, "mutating"),
    ("claude-code", "Write", {"file_path": "/a.py"}, "mutating"),
    ("claude-code", "BashOutput", {"bash_id": "1"}, "poll"),
    ("claude-code", "Task", {"prompt": "x"}, "mutating"),
    ("claude-code", "Bash", {"command": "ls -la"}, "readonly"),
    ("claude-code", "Bash", {"command": "git status"}, "readonly"),
    ("claude-code", "Bash", {"command": "sleep 5"}, "poll"),
    ("claude-code", "Bash", {"command": "ls > out.txt"}, "mutating"),
    ("claude-code", "Bash", {"command": "cat a && rm a"}, "mutating"),
    ("claude-code", "Bash", {"command": "find . -name x -delete"}, "mutating"),
    ("claude-code", "Bash", {"command": "python hello.py"}, "mutating"),
    ("codex", "write_stdin", {"session_id": 1, "chars": ""}, "poll"),
    ("codex", "apply_patch", {"input": "*** Begin Patch"}, "mutating"),
    ("codex", "exec_command", {"cmd": "rg -n foo src"}, "readonly"),
    ("codex", "exec_command", {"cmd": "sed -n '1,80p' a.py"}, "readonly"),
    ("codex", "exec_command", {"cmd": "sed -i 's/a/b/' a.py"}, "mutating"),
    ("codex", "exec_command", {"cmd": "cargo test"}, "mutating"),
    ("codex", "update_plan", {"plan": []}, "mutating"),
    ("openhands", "str_replace_editor", {"command": "view", "path": "/a"}, "readonly"),
    ("openhands", "str_replace_editor", {"command": "create", "path": "/a"}, "mutating"),
    ("openhands", "execute_bash", {"command": ""}, "poll"),
    ("openhands", "execute_bash", {"command": "grep -rn x ."}, "readonly"),
    ("openhands", "execute_bash", {"command": "pip install x"}, "mutating"),
    ("openhands", "think", {"thought": "hm"}, "readonly"),
    ("swe-agent", "open", {"path": "a.py"}, "readonly"),
    ("swe-agent", "scroll_down", {}, "readonly"),
    ("swe-agent", "edit", {"search": "a", "replace": "b"}, "mutating"),
    ("swe-agent", "submit", {}, "mutating"),
    ("swe-agent", "bash", {"command": "find_file fields.py src"}, "readonly"),
    ("swe-agent", "bash", {"command": "python reproduce.py"}, "mutating"),
])
def test_agent_policies_classify_their_tools(policy: str, tool: str, args: dict[str, object],
                                             effect: str) -> None:
    assert effect_of(policy, tool, args) == effect


TRANSCRIPTS = SHARED / "data" / "transcripts"


@pytest.mark.parametrize(("policy", "folder", "runs", "calls"), [
    ("claude-code", "claude-code", 2, 10), ("codex", "codex-rollout", 3, 366),
    ("openhands", "openhands", 2, 3), ("swe-agent", "swe-agent", 2, 18),
    ("swe-agent", "mini-swe-agent", 1, 93),
])
def test_agent_policies_replay_their_agents_recordings_without_a_stop(
        policy: str, folder: str, runs: int, calls: int) -> None:
    """Real sessions of each agent: ordinary work, nothing to warn, cache, block or halt."""
    report = replay_runs(read_runs([TRANSCRIPTS / folder])[0],
                         tg.load_policy(AGENT_POLICIES[policy], env={}))
    assert report.problems == []
    assert (len(report.runs), report.totals()["calls"]) == (runs, calls)
    assert {str(s.decision) for r in report.runs for s in r.steps} == {"allow"}
