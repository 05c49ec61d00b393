"""The real Claude Code CLI (the one the ``claude-agent-sdk`` package bundles), run offline
against a scripted looping model on a loopback fake Messages API, with the guard installed by
``toolguard install claude-code --project`` into a temporary project: what really ran, what
the model was told, and how the session halted and went on after a user message."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.fake_anthropic import FakeAnthropic
from tests.hook_host_support import host_env, stop_hook_server


def _claude() -> Path | None:
    try:
        import claude_agent_sdk
    except ImportError:
        return None
    binary = Path(claude_agent_sdk.__file__).parent / "_bundled" / "claude"
    return binary if binary.exists() else None


CLAUDE = _claude()
pytestmark = pytest.mark.skipif(
    CLAUDE is None and os.environ.get("CI") != "true",
    reason="needs the Claude Code CLI: pip install 'agent-toolguard[claude-code]'")

FENCE = ("same arguments", "without progress", "[toolguard]")


def _env(project: Path, state: Path, url: str) -> dict[str, str]:
    return host_env(
        ("ANTHROPIC_", "CLAUDE"), project / "home", state,
        ANTHROPIC_BASE_URL=url, ANTHROPIC_API_KEY="sk-ant-test",
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1", DISABLE_AUTOUPDATER="1",
        DISABLE_TELEMETRY="1", DISABLE_ERROR_REPORTING="1")


def _results(stream: list[dict[str, Any]]) -> list[tuple[str, bool]]:
    """``(text, is_error)`` of each tool result Claude Code gave the model, in order."""
    out = []
    for message in stream:
        content = message.get("message", {}).get("content") if message.get("type") == "user" \
            else None
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                text = block.get("content")
                if isinstance(text, list):
                    text = "\n".join(str(b.get("text", "")) for b in text)
                out.append((str(text), bool(block.get("is_error"))))
    return out


def _run(args: list[str], project: Path, env: dict[str, str]) -> list[dict[str, Any]]:
    assert CLAUDE is not None, "the Claude Code CLI is not installed"
    done = subprocess.run(
        [str(CLAUDE), "-p", *args, "--output-format", "stream-json", "--verbose",
         "--allowedTools", "Write", "Read", "Bash", "--model", "claude-sonnet-4-5"],
        cwd=project, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


@pytest.fixture
def project(tmp_path: Path) -> Any:
    project = tmp_path / "project"
    (project / "home").mkdir(parents=True)
    (project / "data.txt").write_text("forty-two\n")
    for i in range(7):
        (project / f"notes{i}.txt").write_text(f"note number {i}\n")
    yield project
    stop_hook_server(tmp_path / "state")


def test_a_looping_claude_code_session_is_stopped_and_resumed(project: Path) -> None:
    state = project.parent / "state"
    out = project / "out.txt"
    write = ("Write", {"file_path": str(out), "content": "hello\n"})
    bash = ("Bash", {"command": f"cat {project}/data.txt", "description": "Show the data"})
    reads = [("Read", {"file_path": str(project / f"notes{i}.txt")}) for i in range(7)]
    with FakeAnthropic([write] * 3 + [bash] * 6 + reads + ["All done."]) as fake:
        env = _env(project, state, fake.url)
        subprocess.run([sys.executable, "-m", "toolguard", "install", "claude-code",
                        "--project", "--dir", str(project)], env=env, check=True)
        first = _run(["Write the file and look at the data."], project, env)

        results = _results(first)
        assert len(results) == 8  # 3 writes, 5 commands: the 5th halted the session
        writes, commands = results[:3], results[3:]
        assert not writes[0][1] and out.read_text() == "hello\n"
        for text, is_error in writes[1:]:  # the identical writes did not run again
            assert is_error and "NOT executed again" in text
        ran = [text for text, _ in commands if "forty-two" in text]
        assert len(ran) == 3  # the read-only ladder: allow, allow, warn
        assert "Blocked, not executed" in commands[3][0]
        assert "toolguard halted the agent at Bash" in commands[4][0]
        told = fake.texts_to_model()
        assert "You have called Bash with these same arguments 3 times" in told  # the warn
        final = first[-1]
        assert final["type"] == "result" and final["terminal_reason"] == "hook_stopped"
        shown = [m.get("content", "") for m in first if m.get("subtype") == "informational"]
        assert any("toolguard halted the agent at Bash" in text and "data.txt" in text
                   for text in shown)  # what the user sees
        status = subprocess.run([sys.executable, "-m", "toolguard", "status"], env=env,
                                capture_output=True, text=True, check=True)
        assert "halted  claude-code  session " + final["session_id"] in status.stdout

        # the user's message resumes the session: the command runs again in the new turn,
        # and seven distinct reads are never warned
        second = _run(["--resume", final["session_id"], "Go on with the notes."], project,
                      env)
        results = _results(second)
        assert len(results) == 8
        assert "forty-two" in results[0][0]
        for i, (text, is_error) in enumerate(results[1:]):
            assert not is_error and f"note number {i}" in text
            assert not any(word in text for word in FENCE)
        assert "You have called Read" not in fake.texts_to_model()
        assert second[-1]["type"] == "result" and second[-1]["result"] == "All done."
