"""``toolguard hook HOST``, event by event as the hosts send them (each in a process of its
own in real use: here each event builds its guard afresh, sharing only the store and the
state directory, as processes do), ``toolguard install / uninstall``, ``status`` and
``resume``, and the packaged host policies."""

from __future__ import annotations

import io
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import toolguard as tg
from tests.mcp_support import approve_at_a_terminal
from tests.redis_support import REDIS_URL
from toolguard.hooks import _hook as _hooks
from toolguard.hooks._cli import install_hooks, uninstall_hooks
from toolguard.hooks._hosts import HOSTS


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """A fresh state directory for one test: the default store is the SQLite file in it,
    which the processes of a session share."""
    _hooks._GUARDS.clear()
    return {"TOOLGUARD_STATE_DIR": str(tmp_path / "state")}


def _event(env: dict[str, str], payload: Any, host: str = "claude-code",
           *args: str) -> tuple[int, Any, str]:
    """One event through ``toolguard hook`` in this process, with a guard built afresh:
    (exit code, the JSON answer or None, stderr)."""
    _hooks._GUARDS.clear()
    out, err = io.StringIO(), io.StringIO()
    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    code = _hooks.main([host, *args], io.BytesIO(data), out, err, env)
    return code, json.loads(out.getvalue()) if out.getvalue() else None, err.getvalue()


def _pre(tool: str, args: dict[str, Any], call: str, session: str = "s1") -> dict[str, Any]:
    return {"hook_event_name": "PreToolUse", "session_id": session, "cwd": "/w",
            "tool_name": tool, "tool_input": args, "tool_use_id": call}


def _post(tool: str, args: dict[str, Any], call: str, response: Any,
          session: str = "s1") -> dict[str, Any]:
    return {**_pre(tool, args, call, session), "hook_event_name": "PostToolUse",
            "tool_response": response}


def _decision(answer: dict[str, Any] | None) -> str | None:
    return None if answer is None else answer.get("hookSpecificOutput", {}).get(
        "permissionDecision")


def test_an_identical_write_is_denied_with_its_earlier_result(env: dict[str, str]) -> None:
    write = {"file_path": "/w/a.txt", "content": "x"}
    assert _event(env, _pre("Write", write, "t1")) == (0, None, "")
    response = {"type": "create", "filePath": "/w/a.txt"}
    assert _event(env, _post("Write", write, "t1", response)) == (0, None, "")
    code, answer, _ = _event(env, _pre("Write", write, "t2"))
    assert code == 0 and _decision(answer) == "deny"
    assert "NOT executed again" in answer["hookSpecificOutput"]["permissionDecisionReason"]


def test_a_write_never_reported_is_not_repeated_blind(env: dict[str, str]) -> None:
    """A write whose PostToolUse never came (the host crashed) keeps its claim: the
    identical write waits for it, and once ``in_progress_ttl_s`` passes its outcome is
    unknown (the user's permission prompt decides), never "not run"."""
    env = {**env, "TOOLGUARD_IDEMPOTENCY__IN_PROGRESS_TTL_S": "0.001",
           "TOOLGUARD_IDEMPOTENCY__WAIT_TIMEOUT_S": "0.001"}
    write = {"file_path": "/w/a.txt", "content": "x"}
    assert _event(env, _pre("Write", write, "t1"))[0] == 0
    code, answer, _ = _event(env, _pre("Write", write, "t2"))
    assert code == 0 and _decision(answer) == "ask"
    assert "without a known outcome" in answer["hookSpecificOutput"][
        "permissionDecisionReason"]


def test_a_write_whose_hook_process_died_is_unknown_from_the_store_alone(
        env: dict[str, str]) -> None:
    """The PreToolUse process died before it kept the pending call (nothing for a later
    event to sweep): the store's claim itself turns into an unknown outcome once
    ``in_progress_ttl_s`` passes, so the identical write waits for it and then asks."""
    env = {**env, "TOOLGUARD_IDEMPOTENCY__IN_PROGRESS_TTL_S": "0.05",
           "TOOLGUARD_IDEMPOTENCY__WAIT_TIMEOUT_S": "10"}
    write = {"file_path": "/w/a.txt", "content": "x"}
    assert _event(env, _pre("Write", write, "t1"))[0] == 0
    pending = Path(env["TOOLGUARD_STATE_DIR"]) / "pending"
    kept = list(pending.rglob("*.json"))
    assert len(kept) == 1
    kept[0].unlink()
    code, answer, _ = _event(env, _pre("Write", write, "t2"))
    assert code == 0 and _decision(answer) == "ask"
    assert "without a known outcome" in answer["hookSpecificOutput"][
        "permissionDecisionReason"]


def test_a_second_retry_while_the_approved_one_runs_is_not_asked_about(
        env: dict[str, str]) -> None:
    """Regression: the retry of a write with an unknown outcome, once the user's prompt
    took it (``ask``), ran without the key's claim, so an identical PreToolUse meanwhile
    was handed to the prompt too and could run beside it."""
    env = {**env, "TOOLGUARD_IDEMPOTENCY__IN_PROGRESS_TTL_S": "1",
           "TOOLGUARD_IDEMPOTENCY__WAIT_TIMEOUT_S": "0.05"}
    bash = {"command": "cp build/app /srv/app"}
    assert _event(env, _pre("Bash", bash, "b1"))[0] == 0  # never reported
    time.sleep(1.05)  # its claim's TTL: unknown
    _, answer, _ = _event(env, _pre("Bash", bash, "b2"))
    assert _decision(answer) == "ask"  # the retry, to the user's prompt
    code, answer, err = _event(env, _pre("Bash", bash, "b3"))  # while that retry runs
    assert (code, answer) == (2, None)  # blocked: Claude Code does not run it
    assert "CallInProgress" in err and "still in progress" in err


def test_distinct_reads_with_their_real_results_are_never_warned(env: dict[str, str]) -> None:
    for i in range(8):
        args = {"file_path": f"/w/{i}.txt"}
        assert _event(env, _pre("Read", args, f"r{i}")) == (0, None, "")
        response = {"type": "text", "file": {"filePath": args["file_path"],
                                             "content": f"line {i}"}}
        assert _event(env, _post("Read", args, f"r{i}", response)) == (0, None, "")


def test_distinct_reads_with_the_same_empty_result_stagnate(env: dict[str, str]) -> None:
    """The stagnation rule judges what really came back: eight greps under other patterns
    that all find nothing are told so after the result that made the run long."""
    told = []
    for i in range(6):
        args = {"pattern": f"nothing{i}"}
        _code, answer, _ = _event(env, _pre("Grep", args, f"g{i}"))
        if _decision(answer) == "deny":
            told.append("deny")
            break
        _, answer, _ = _event(env, _post("Grep", args, f"g{i}", {"numFiles": 0}))
        if answer is not None:
            told.append(answer["hookSpecificOutput"]["additionalContext"])
    assert told and "returned the same result" in told[0]


def test_a_loop_of_commands_halts_and_a_user_message_resumes(env: dict[str, str]) -> None:
    bash = {"command": "cat notes.txt", "description": "show"}
    answers = []
    for i in range(5):
        code, answer, err = _event(env, _pre("Bash", bash, f"b{i}"))
        answers.append(answer)
        if _decision(answer) is None:
            _event(env, _post("Bash", bash, f"b{i}", {"stdout": "same", "stderr": ""}))
    assert answers[:2] == [None, None]
    assert "3 times" in answers[2]["hookSpecificOutput"]["additionalContext"]  # warn
    assert _decision(answers[3]) == "deny"
    halt = answers[4]
    assert halt["continue"] is False and _decision(halt) == "deny"
    assert "Bash" in halt["stopReason"] and "cat notes.txt" in halt["stopReason"]
    assert "toolguard halted the agent at Bash" in err  # the user sees it on stderr too
    code, again, _ = _event(env, _pre("Read", {"file_path": "/w/x"}, "r1"))
    assert again["continue"] is False and "the session is halted" in again["stopReason"]
    prompt = {"hook_event_name": "UserPromptSubmit", "session_id": "s1", "cwd": "/w",
              "prompt": "try another way"}
    code, answer, _ = _event(env, prompt)
    assert code == 0 and "goes on" in answer["systemMessage"]
    assert _event(env, _pre("Bash", bash, "b9")) == (0, None, "")  # a new turn


def test_a_tool_failure_is_recorded_as_a_failure(env: dict[str, str]) -> None:
    edit = {"file_path": "/w/a.py", "old_string": "a", "new_string": "b"}
    _event(env, _pre("Edit", edit, "e1"))
    failed = {**_pre("Edit", edit, "e1"), "hook_event_name": "PostToolUseFailure",
              "error": "String to replace not found in file."}
    assert _event(env, failed) == (0, None, "")
    code, answer, _ = _event(env, _pre("Edit", edit, "e2"))  # a failed edit is retried
    assert code == 0 and _decision(answer) is None


@pytest.mark.parametrize(("payload", "closed", "message"), [
    (b"{not json", True, "is not JSON"),
    (b"[1]", True, "not a JSON object"),
    ({"hook_event_name": "Nope", "session_id": "s"}, True, "unknown Claude Code hook event"),
    ({"hook_event_name": "PreToolUse", "tool_name": "Bash"}, True, "has no session_id"),
    ({"hook_event_name": "PreToolUse", "session_id": "s"}, True, "has no tool_name"),
])
def test_bad_input_is_one_line_and_blocks(env: dict[str, str], payload: Any, closed: bool,
                                          message: str) -> None:
    code, answer, err = _event(env, payload)
    assert (code, answer) == (2, None)
    assert err.count("\n") == 1 and message in err and "the call is blocked" in err


def test_an_unreadable_policy_blocks_a_tool_call_and_not_a_prompt(
        env: dict[str, str], tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[ladder\n")
    code, _, err = _event(env, _pre("Bash", {"command": "ls"}, "b1"), "claude-code",
                          "--policy", str(bad))
    assert code == 2 and err.startswith(f"toolguard: the policy {bad} cannot be used")
    prompt = {"hook_event_name": "UserPromptSubmit", "session_id": "s1", "prompt": "hi"}
    code, _, err = _event(env, prompt, "claude-code", "--policy", str(tmp_path / "none.toml"))
    assert code == 1 and "cannot read policy file" in err and err.count("\n") == 1


def test_the_session_is_shared_through_redis_too(env: dict[str, str]) -> None:
    """A policy's ``[store]`` (here the environment's) replaces the per-user file."""
    redis_env = {**env, "TOOLGUARD_STORE__URL": REDIS_URL,
                 "TOOLGUARD_STORE__KEY_PREFIX": f"hooks-{os.urandom(6).hex()}"}
    write = {"file_path": "/w/a.txt", "content": "x"}
    _event(redis_env, _pre("Write", write, "t1"))
    _event(redis_env, _post("Write", write, "t1", {"type": "create"}))
    assert _decision(_event(redis_env, _pre("Write", write, "t2"))[1]) == "deny"
    assert _event(env, _pre("Write", write, "t3")) == (0, None, "")  # the file: another state


def test_a_corrupt_state_file_blocks_the_call_and_names_it(env: dict[str, str]) -> None:
    state = Path(env["TOOLGUARD_STATE_DIR"])
    state.mkdir()
    (state / "state.db").write_bytes(b"not a database" * 100)
    code, answer, err = _event(env, _pre("Bash", {"command": "ls"}, "b1"))
    assert (code, answer) == (2, None)
    assert err.count("\n") == 1 and "state.db" in err and "the call is blocked" in err
    assert "Traceback" not in err


def test_a_store_that_is_down_blocks_the_call(env: dict[str, str]) -> None:
    down = {**env, "TOOLGUARD_STORE__URL": "redis://127.0.0.1:1/0",
            "TOOLGUARD_STORE__TIMEOUT_S": "0.2"}
    code, _, err = _event(down, _pre("Bash", {"command": "ls"}, "b1"))
    assert code == 2 and err.count("\n") == 1 and "the call is blocked" in err


@pytest.mark.parametrize("host", sorted(HOSTS))
def test_each_hosts_shipped_policy_loads_in_a_live_guard(host: str) -> None:
    guard = tg.Guard(tg.load_policy(host, env={}))
    with guard.task("t") as task:
        for tool in ("Bash", "shell", "run_shell_command", "Read", "mcp__x__y"):
            assert task.begin(tool, {"command": "ls"}).result is None


def test_claude_codes_tools_have_their_effects() -> None:
    policy = tg.load_policy("claude-code", env={})
    guard = tg.Guard(policy)
    effects = {}
    with guard.task("t") as task:
        for tool, args in [("Read", {}), ("Grep", {}), ("Glob", {}), ("LS", {}),
                           ("WebFetch", {}), ("WebSearch", {}), ("Task", {}),
                           ("TodoWrite", {}), ("Write", {}), ("Edit", {}), ("MultiEdit", {}),
                           ("NotebookEdit", {}), ("mcp__github__create_issue", {}),
                           ("BashOutput", {}), ("Bash", {"command": "git status"}),
                           ("Bash", {"command": "rm -rf build"}),
                           ("Bash", {"command": "echo hi > x.txt"})]:
            effects[(tool, args.get("command"))] = task.begin(tool, args).finish("ok").effect
    ro, mu = tg.Effect.READONLY, tg.Effect.MUTATING
    assert effects == {
        ("Read", None): ro, ("Grep", None): ro, ("Glob", None): ro, ("LS", None): ro,
        ("WebFetch", None): ro, ("WebSearch", None): ro, ("Task", None): mu,
        ("TodoWrite", None): mu, ("Write", None): mu, ("Edit", None): mu,
        ("MultiEdit", None): mu, ("NotebookEdit", None): mu,
        ("mcp__github__create_issue", None): mu, ("BashOutput", None): tg.Effect.POLL,
        ("Bash", "git status"): ro, ("Bash", "rm -rf build"): mu,
        ("Bash", "echo hi > x.txt"): mu}


def test_install_merges_is_idempotent_and_uninstall_removes_only_its_own(
        tmp_path: Path) -> None:
    host = HOSTS["claude-code"]
    path = tmp_path / ".claude" / "settings.json"
    path.parent.mkdir()
    mine = {"model": "opus", "hooks": {"PreToolUse": [
        {"matcher": "Bash", "hooks": [{"type": "command", "command": "./check.sh"}]}]}}
    original = json.dumps(mine, indent=2) + "\n"
    path.write_text(original)
    _before, after = install_hooks(host, path, None)
    data = json.loads(after)
    assert data["model"] == "opus"
    assert data["hooks"]["PreToolUse"][0]["hooks"][0]["command"] == "./check.sh"
    assert set(data["hooks"]) == set(host.events)
    path.write_text(after)
    assert install_hooks(host, path, None)[1] == after  # idempotent
    _, removed = uninstall_hooks(path)
    assert json.loads(removed) == mine


def test_install_and_uninstall_commands(tmp_path: Path) -> None:
    run = [sys.executable, "-m", "toolguard"]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    settings = tmp_path / ".claude" / "settings.json"
    dry = subprocess.run([*run, "install", "claude-code", "--dir", str(tmp_path),
                          "--dry-run"], env=env, capture_output=True, text=True, check=True)
    assert "+    \"PreToolUse\"" in dry.stdout and not settings.exists()
    for expected in ("updated", "unchanged"):
        done = subprocess.run([*run, "install", "claude-code", "--project", "--dir",
                               str(tmp_path)], env=env, capture_output=True, text=True,
                              check=True)
        assert done.stdout.strip().endswith(expected)
    subprocess.run([*run, "uninstall", "claude-code", "--dir", str(tmp_path)], env=env,
                   check=True, capture_output=True)
    assert json.loads(settings.read_text()) == {}
    settings.write_text('{"theme": "dark"}')
    subprocess.run([*run, "install", "claude-code", "--dir", str(tmp_path)], env=env,
                   check=True, capture_output=True)
    backup = tmp_path / ".claude" / "settings.json.toolguard-backup"
    assert backup.read_text() == '{"theme": "dark"}'
    subprocess.run([*run, "uninstall", "claude-code", "--dir", str(tmp_path)], env=env,
                   check=True, capture_output=True)
    assert json.loads(settings.read_text()) == {"theme": "dark"}
    settings.write_text("{broken")
    bad = subprocess.run([*run, "install", "claude-code", "--dir", str(tmp_path)], env=env,
                         capture_output=True, text=True, check=False)
    assert bad.returncode == 2 and "left as it is" in bad.stderr
    assert "Traceback" not in bad.stderr and settings.read_text() == "{broken"


def test_the_hook_command_answers_through_the_server_and_without_it(
        env: dict[str, str], tmp_path: Path) -> None:
    """The command the hosts run: the first event starts the hook server and is answered
    in process; later events go through the server; both share the session's state."""
    client = Path(_hooks.__file__).parent.parent / "_hook_client.py"
    environ = {**os.environ, **env, "TOOLGUARD_HOOK_SERVER_IDLE_S": "30",
               "PYTHONPATH": str(Path(__file__).parents[2])}
    bash = {"command": "cat notes.txt"}
    answers = []
    try:
        for i in range(4):
            done = subprocess.run([sys.executable, str(client), "claude-code"],
                                  input=json.dumps(_pre("Bash", bash, f"b{i}")), env=environ,
                                  capture_output=True, text=True, timeout=60, check=False)
            answers.append((done.returncode, done.stdout))
            if i == 0:
                sock = Path(env["TOOLGUARD_STATE_DIR"]) / "hook.sock"
                for _ in range(600):
                    if sock.exists():
                        break
                    subprocess.run(["sleep", "0.05"], check=True)
        assert [code for code, _ in answers] == [0, 0, 0, 0]
        assert answers[0][1] == answers[1][1] == ""
        assert "additionalContext" in answers[2][1] and "deny" in answers[3][1]
    finally:
        pid = Path(env["TOOLGUARD_STATE_DIR"]) / "hook.pid"
        if pid.exists():
            os.kill(int(pid.read_text()), 15)


@pytest.mark.parametrize("environ", [{"TOOLGUARD_STATE_DIR": "~/x"}, {"XDG_STATE_HOME": "/s"},
                                     {"XDG_STATE_HOME": "relative"}, {},
                                     {"HOME": "/elsewhere", "TOOLGUARD_STATE_DIR": "~/x"},
                                     {"HOME": "/elsewhere"}])
def test_the_hook_command_finds_the_state_directory_as_the_store_does(
        environ: dict[str, str]) -> None:
    """The hook command computes the server's socket without importing the library: the
    same rule as the store's default file."""
    from toolguard._hook_client import socket_path

    assert Path(socket_path(environ)) == _hooks.state_dir(environ) / "hook.sock"


# -- Codex CLI and Gemini CLI, with the event payloads their hook documentation gives ---------
def _codex(event: str, call: str, **fields: Any) -> dict[str, Any]:
    return {"session_id": "c1", "transcript_path": "/h/.codex/s.jsonl", "cwd": "/w",
            "hook_event_name": event, "model": "gpt-5-codex", "tool_name": "Bash",
            "tool_use_id": call, "tool_input": {"command": "cat notes.txt"}, **fields}


def test_codex_events_in_claude_codes_shape(env: dict[str, str]) -> None:
    answers = []
    for i in range(5):
        _code, answer, _ = _event(env, _codex("PreToolUse", f"c{i}"), "codex")
        answers.append(answer)
        if _decision(answer) is None:
            post = _codex("PostToolUse", f"c{i}", tool_response="same text")
            assert _event(env, post, "codex")[0] == 0
    assert answers[:2] == [None, None]
    assert "3 times" in answers[2]["hookSpecificOutput"]["additionalContext"]
    assert _decision(answers[3]) == "deny"
    # a halt: Codex refuses continue/stopReason in PreToolUse (the call would then run),
    # so it is a denial with the reason, and a systemMessage for the user
    halt = answers[4]
    assert _decision(halt) == "deny" and "continue" not in halt and "stopReason" not in halt
    reason = halt["hookSpecificOutput"]["permissionDecisionReason"]
    assert reason.startswith("toolguard halted the agent at Bash")
    assert halt["systemMessage"] == reason


def _gemini(event: str, tool: str, args: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"session_id": "g1", "transcript_path": "/h/.gemini/t.json", "cwd": "/w",
            "hook_event_name": event, "timestamp": "2026-01-01T00:00:00Z",
            "tool_name": tool, "tool_input": args, **fields}


def test_gemini_events_deny_at_the_top_level_and_warn_with_the_result(
        env: dict[str, str]) -> None:
    """Gemini CLI denies with a top-level ``decision``, reads additional context only with
    a tool's result (so a warn's notice goes there), has no tool call id (the arguments
    stand in) and reports a failure in ``tool_response.error``."""
    shell = {"command": "cat notes.txt"}
    told = []
    for _ in range(4):
        code, answer, _ = _event(env, _gemini("BeforeTool", "run_shell_command", shell),
                                 "gemini")
        if answer is not None:
            told.append(answer)
            break
        response = {"llmContent": "same text", "returnDisplay": "same text"}
        _, after, _ = _event(env, _gemini("AfterTool", "run_shell_command", shell,
                                          tool_response=response), "gemini")
        told.append(after)
    assert told[:2] == [None, None]
    assert "3 times" in told[2]["hookSpecificOutput"]["additionalContext"]
    assert told[3] == {"decision": "deny", "reason": told[3]["reason"]}
    assert "Blocked, not executed" in told[3]["reason"]
    write = {"file_path": "/w/a.txt", "content": "x"}
    assert _event(env, _gemini("BeforeTool", "write_file", write), "gemini")[1] is None
    failed = {"llmContent": "", "error": {"message": "disk full"}}
    _event(env, _gemini("AfterTool", "write_file", write, tool_response=failed), "gemini")
    code, retry, _ = _event(env, _gemini("BeforeTool", "write_file", write), "gemini")
    assert code == 0 and retry is None  # a failed write is retried, not answered as done


def test_install_writes_each_hosts_own_settings(tmp_path: Path) -> None:
    from toolguard.hooks._cli import install_toml_hooks, uninstall_toml_hooks

    gemini = HOSTS["gemini"]
    _, after = install_hooks(gemini, tmp_path / "settings.json", None)
    groups = json.loads(after)["hooks"]
    assert set(groups) == set(gemini.events)
    assert groups["BeforeTool"][0]["matcher"] == ".*"  # a regular expression
    assert groups["BeforeTool"][0]["hooks"][0]["timeout"] == 60_000  # milliseconds
    config = tmp_path / "config.toml"
    config.write_text('model = "gpt-5-codex"\n')
    before, after = install_toml_hooks(HOSTS["codex"], config, None)
    tomllib = pytest.importorskip("tomllib")  # Python 3.10: tomli in the install

    hooks = tomllib.loads(after)["hooks"]  # the project's Python (3.11+) in CI
    assert set(hooks) == set(HOSTS["codex"].events)
    assert "_hook_client.py" in hooks["PreToolUse"][0]["hooks"][0]["command"]
    config.write_text(after)
    assert install_toml_hooks(HOSTS["codex"], config, None)[1] == after
    assert uninstall_toml_hooks(config)[1] == before


def test_resume_from_the_shell_lifts_a_halt(env: dict[str, str]) -> None:
    bash = {"command": "cat notes.txt"}
    for i in range(5):
        _, answer, _ = _event(env, _pre("Bash", bash, f"b{i}"))
        if _decision(answer) is None:
            _event(env, _post("Bash", bash, f"b{i}", {"stdout": "same"}))
    assert answer["continue"] is False
    run = [sys.executable, "-m", "toolguard"]
    environ = {**os.environ, **env, "PYTHONPATH": str(Path(__file__).parents[2])}
    status = subprocess.run([*run, "status"], env=environ, capture_output=True, text=True,
                            check=True)
    assert "halted  claude-code  session s1" in status.stdout
    done = subprocess.run([*run, "resume", "s1"], env=environ, capture_output=True,
                          text=True, check=True)
    assert done.stdout.strip() == "session s1 resumed"
    assert _event(env, _pre("Bash", bash, "b9")) == (0, None, "")
    status = subprocess.run([*run, "status"], env=environ, capture_output=True, text=True,
                            check=True)
    assert "no halted session" in status.stdout


def test_status_names_each_call_begun_and_not_reported(env: dict[str, str]) -> None:
    write = {"file_path": "/w/a.txt", "content": "x"}
    assert _event(env, _pre("Write", write, "w1", session="s2")) == (0, None, "")
    environ = {**os.environ, **env, "PYTHONPATH": str(Path(__file__).parents[2])}
    status = subprocess.run([sys.executable, "-m", "toolguard", "status"], env=environ,
                            capture_output=True, text=True, check=True)
    begun = [line.split() for line in status.stdout.splitlines() if line.startswith("begun")]
    assert [words[:4] for words in begun] == [["begun", "Write", "session", "claude-code:s2"]]
    assert "unknown outcome" in status.stdout
    _event(env, _post("Write", write, "w1", {"success": True}, session="s2"))
    status = subprocess.run([sys.executable, "-m", "toolguard", "status"], env=environ,
                            capture_output=True, text=True, check=True)
    assert "begun" not in status.stdout


def test_the_toolguard_command_answers_hook_events(env: dict[str, str]) -> None:
    """``toolguard hook claude-code`` (the console script's command) is the same handler."""
    environ = {**os.environ, **env, "PYTHONPATH": str(Path(__file__).parents[2])}
    done = subprocess.run([sys.executable, "-m", "toolguard.cli", "hook", "claude-code"],
                          input="{not json", env=environ, capture_output=True, text=True,
                          check=False)
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "is not JSON" in done.stderr
    ok = subprocess.run([sys.executable, "-m", "toolguard.cli", "hook", "claude-code"],
                        input=json.dumps(_pre("Read", {"file_path": "/a"}, "r1")),
                        env=environ, capture_output=True, text=True, check=False)
    assert (ok.returncode, ok.stdout, ok.stderr) == (0, "", "")


def test_the_hook_benchmark_runs(tmp_path: Path) -> None:
    """``benchmarks/hooks.py --smoke`` takes every path (no timing is asserted)."""
    out = tmp_path / "hooks.json"
    environ = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    subprocess.run([sys.executable, str(Path(__file__).parents[2] / "benchmarks" / "hooks.py"),
                    "--smoke", "--json", str(out)], env=environ, check=True,
                   capture_output=True, timeout=600)
    report = json.loads(out.read_text())
    assert set(report["ratio"]) == {"python -c pass", "pre (server)", "post (server)",
                                    "pre (in process)", "post (in process)"}


def test_resume_lifts_a_halted_task_in_the_store_a_policy_names(tmp_path: Path) -> None:
    """``toolguard resume TASK --policy FILE`` resumes any task of the shared store that the
    policy selects, not only a coding agent's session."""
    import toolguard as tg

    policy = tmp_path / "shared.toml"
    policy.write_text(f'[store]\nurl = "sqlite:///{tmp_path / "state.db"}"\n', encoding="utf-8")

    @tg.readonly
    def lookup(order: str) -> str:
        return "same"

    guard = tg.Guard(tg.load_policy(policy), tools=[lookup])
    task = guard.task("job-7")
    for _ in range(4):  # allow, allow, warn, block
        task.call("lookup", {"order": "o1"})
    with pytest.raises(tg.Halt):
        task.call("lookup", {"order": "o1"})
    environ = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    run = [sys.executable, "-m", "toolguard", "resume", "job-7", "--policy", str(policy)]
    done = subprocess.run(run, env=environ, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "task job-7 resumed"
    assert not guard.task("job-7").halted
    again = subprocess.run(run, env=environ, capture_output=True, text=True, check=True)
    assert again.stdout.strip() == "task job-7 is not halted"


# -- approval where the host has no "ask" ----------------------------------------------------
def _reason(answer: dict[str, Any]) -> str:
    """The text a denial gives the model, in Codex CLI's (Claude Code's) or Gemini CLI's
    shape."""
    if "hookSpecificOutput" in answer:
        return str(answer["hookSpecificOutput"]["permissionDecisionReason"])
    return str(answer["reason"])


@pytest.mark.parametrize("host", ["codex", "gemini"])
def test_a_call_that_needs_approval_is_denied_with_the_command_that_approves_it(
        env: dict[str, str], host: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
        ) -> None:
    """Codex CLI and Gemini CLI have no ``ask``: the call is denied (never run unapproved),
    the user is shown (``systemMessage``) the shell command that approves it in the hook's own
    store, the model's reason names neither the command nor the key, and once a human ran it
    the model's identical retry runs, once."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))  # the approval secret
    policy = tmp_path / "policy.toml"
    policy.write_text("strict_tools = false\n[tools.deploy]\nrequires_approval = true\n")
    args = {"to": "prod"}
    pre = (_codex("PreToolUse", "d1", tool_name="deploy", tool_input=args) if host == "codex"
           else _gemini("BeforeTool", "deploy", args))
    post = ({**pre, "hook_event_name": "PostToolUse", "tool_response": "deployed"}
            if host == "codex" else {**pre, "hook_event_name": "AfterTool",
                                     "tool_response": {"llmContent": "deployed"}})
    code, answer, _ = _event(env, pre, host, "--policy", str(policy))
    assert code == 0 and answer is not None
    reason = _reason(answer)
    assert "waiting for a human decision" in reason
    command = answer["systemMessage"].rpartition("At a terminal, run: ")[2]  # the user's
    store = Path(env["TOOLGUARD_STATE_DIR"]).absolute() / "state.db"
    assert command.startswith(f"TOOLGUARD_STORE__URL=sqlite:///{store} toolguard approve "
                              f"{host}:")
    key = shlex.split(command)[-1]
    assert "toolguard approve" not in reason and key not in reason  # nothing the model reads
    again = _event(env, pre, host, "--policy", str(policy))[1]
    assert again is not None and again["systemMessage"].endswith(command)
    assert key not in _reason(again)
    listed = subprocess.run(  # the user who missed the message finds the command again
        [sys.executable, "-m", "toolguard", "status"], capture_output=True, text=True,
        env={**os.environ, **env, "PYTHONPATH": str(Path(__file__).parents[2])}, check=True)
    waiting = listed.stdout.splitlines()
    at = next(i for i, line in enumerate(waiting) if line.startswith("waiting deploy"))
    assert f"session {host}:" in waiting[at] and waiting[at + 1].strip() == command
    variable, program, verb, key = shlex.split(command)  # what a human types in a shell
    assert (program, verb) == ("toolguard", "approve")
    name, _, url = variable.partition("=")
    environ = {k: v for k, v in os.environ.items() if not k.startswith("TOOLGUARD_")}
    code, out = approve_at_a_terminal(key, "y", {**environ, name: url})
    assert code == 0 and f"approved {key}" in out, out
    assert _event(env, pre, host, "--policy", str(policy)) == (0, None, "")  # it runs
    assert _event(env, post, host, "--policy", str(policy))[0] == 0
    _, again, _ = _event(env, pre, host, "--policy", str(policy))  # done: not run twice
    assert again is not None and "NOT executed again" in _reason(again)


def test_claude_code_keeps_its_own_permission_prompt(env: dict[str, str], tmp_path: Path
                                                     ) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text("strict_tools = false\n[tools.deploy]\nrequires_approval = true\n")
    _, answer, _ = _event(env, _pre("deploy", {"to": "prod"}, "d1"), "claude-code",
                          "--policy", str(policy))
    assert _decision(answer) == "ask"
    assert "toolguard approve" not in json.dumps(answer)


# -- how a call ended ------------------------------------------------------------------------
@pytest.mark.parametrize("report", [
    {"hook_event_name": "PostToolUse",
     "tool_response": {"stdout": "", "stderr": "", "interrupted": True, "isImage": False}},
    {"hook_event_name": "PostToolUseFailure", "error": "Interrupted", "is_interrupt": True},
])
def test_an_interrupted_claude_code_command_has_an_unknown_outcome(
        env: dict[str, str], report: dict[str, Any]) -> None:
    """Stopped part way, a write may or may not have happened: its identical retry goes to
    the user's prompt, neither answered as done nor run blind."""
    bash = {"command": "cp build/app /srv/app"}
    assert _event(env, _pre("Bash", bash, "b1")) == (0, None, "")
    assert _event(env, {**_pre("Bash", bash, "b1"), **report})[0] == 0
    _, answer, _ = _event(env, _pre("Bash", bash, "b2"))
    assert _decision(answer) == "ask"
    assert "without a known outcome" in answer["hookSpecificOutput"]["permissionDecisionReason"]


def _gemini_shell(env: dict[str, str], text: str) -> dict[str, Any] | None:
    """A mutating ``run_shell_command`` that ended with ``text``, then the same command
    again: the second answer."""
    shell = {"command": "cp build/app /srv/app"}
    assert _event(env, _gemini("BeforeTool", "run_shell_command", shell), "gemini")[1] is None
    after = _gemini("AfterTool", "run_shell_command", shell,
                    tool_response={"llmContent": text, "returnDisplay": ""})
    assert _event(env, after, "gemini")[0] == 0
    code, answer, _ = _event(env, _gemini("BeforeTool", "run_shell_command", shell), "gemini")
    assert code == 0
    return answer  # type: ignore[no-any-return]


def test_a_gemini_command_that_exits_non_zero_failed(env: dict[str, str]) -> None:
    """Gemini CLI's shell tool says how a command ended in its text only: ``Exit Code: N``
    is a failure (an identical retry runs), no such line a success (answered as done)."""
    assert _gemini_shell(env, "Output: cp: cannot stat\nExit Code: 1\n"
                              "Process Group PGID: 4242") is None
    done = _gemini_shell({"TOOLGUARD_STATE_DIR": env["TOOLGUARD_STATE_DIR"] + "-ok"},
                         "Output: (empty)\nProcess Group PGID: 4242")
    assert done is not None and "NOT executed again" in done["reason"]


@pytest.mark.parametrize("text", [
    "Command was cancelled by user before it could complete. There was no output before it "
    "was cancelled.",
    "Command was automatically cancelled because it exceeded the timeout of 5.0 minutes "
    "without output.",
    "Output: (empty)\nSignal: 9\nProcess Group PGID: 4242",
])
def test_a_cancelled_gemini_command_has_an_unknown_outcome(env: dict[str, str], text: str
                                                           ) -> None:
    answer = _gemini_shell(env, text)
    assert answer is not None and answer["decision"] == "deny"
    assert "without a known outcome" in answer["reason"]
    assert "toolguard approve" not in answer["reason"]  # the model is not told how
    assert "toolguard approve" in answer["systemMessage"]  # the user is


# -- status and resume from a shell ------------------------------------------------------------
def test_status_and_resume_fail_in_one_line(env: dict[str, str]) -> None:
    state = Path(env["TOOLGUARD_STATE_DIR"])
    (state / "halted").mkdir(parents=True)
    (state / "halted" / "x.json").write_text('{"host": "codex"}')
    (state / "state.db").write_bytes(b"not a database at all, not even close" * 4)
    environ = {**os.environ, **env, "PYTHONPATH": str(Path(__file__).parents[2])}
    run = [sys.executable, "-m", "toolguard"]
    for args, code, said in [
            (["resume", "s1"], 2, f"{state / 'state.db'}"),
            (["resume", "codex:"], 2, "no session id"),
            (["status"], 0, "skipped"),
    ]:
        done = subprocess.run([*run, *args], env=environ, capture_output=True, text=True,
                              check=False)
        assert done.returncode == code, done.stderr
        lines = done.stderr.splitlines()
        if args == ["status"]:  # the note it skips, and the store it cannot read: a line each
            assert len(lines) == 2 and "cannot list the calls waiting" in lines[1], lines
            assert "move it away" in lines[1]
        else:
            assert len(lines) == 1
        assert said in done.stderr
        assert "Traceback" not in done.stderr


def test_approve_says_which_stores_it_decides_in() -> None:
    environ = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2]), "COLUMNS": "200"}
    done = subprocess.run([sys.executable, "-m", "toolguard", "approve", "--help"],
                          env=environ, capture_output=True, text=True, check=True)
    assert "SQLite" in done.stdout and "sqlite:///" in done.stdout
    assert "(Redis) store" not in done.stdout
