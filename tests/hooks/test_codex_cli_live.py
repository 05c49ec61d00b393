"""The real Codex CLI (npm ``@openai/codex``), run offline against a scripted looping model on
a loopback fake Responses API, with the guard installed by ``toolguard install codex
--user`` into a temporary home: what really ran and what the model was told."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.fake_openai_responses import FakeResponses

CODEX = shutil.which("codex")
pytestmark = pytest.mark.skipif(
    CODEX is None and os.environ.get("CI") != "true",
    reason="needs the Codex CLI: npm install -g @openai/codex")


@pytest.fixture
def project(tmp_path: Path) -> Any:
    project = tmp_path / "project"
    (project / "home").mkdir(parents=True)
    (project / "data.txt").write_text("forty-two\n")
    yield project
    pid_file = tmp_path / "state" / "hook.pid"
    if pid_file.exists():  # the hook server this test started
        with contextlib.suppress(OSError, ValueError):
            os.kill(int(pid_file.read_text()), signal.SIGTERM)


def test_a_looping_codex_session_is_stopped(project: Path) -> None:
    assert CODEX is not None, "the Codex CLI is not installed"
    command = ("exec_command", {"cmd": f"cat {project}/data.txt"})
    with FakeResponses([command] * 6 + ["All done."]) as fake:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("OPENAI_", "CODEX_", "TOOLGUARD_"))}
        env.update(HOME=str(project / "home"), FAKE_API_KEY="sk-test",
                   TOOLGUARD_STATE_DIR=str(project.parent / "state"),
                   TOOLGUARD_HOOK_SERVER_IDLE_S="120",
                   PYTHONPATH=os.pathsep.join([str(Path(__file__).parents[2]),
                                               os.environ.get("PYTHONPATH", "")]))
        subprocess.run([sys.executable, "-m", "toolguard", "install", "codex", "--user"],
                       env=env, check=True, capture_output=True)
        provider = (f'model_providers.fake={{name="fake", base_url="{fake.url}", '
                    'wire_api="responses", env_key="FAKE_API_KEY"}')
        # --dangerously-bypass-hook-trust: Codex asks a person to trust a new hook once
        done = subprocess.run(
            [CODEX, "exec", "--skip-git-repo-check", "-C", str(project), "-c",
             'model_provider="fake"', "-c", provider, "-m", "gpt-5-codex",
             "--dangerously-bypass-approvals-and-sandbox", "--dangerously-bypass-hook-trust",
             "Look at the data."], cwd=project, env=env, capture_output=True, text=True,
            timeout=600, check=False)
        told = fake.told()
    assert done.returncode == 0, done.stderr
    assert told.count("Output:\\nforty-two") == 3  # the read-only ladder: allow, allow, warn
    assert "You have called Bash with these same arguments 3 times" in told
    assert "Blocked, not executed: Bash was called 4 times" in told
    assert "toolguard halted the agent at Bash" in told
    assert "toolguard: the session is halted" in told  # and nothing more runs
    # Codex takes no stop from a tool hook: the halt is a denial, its reason on stderr
    assert "blocked by PreToolUse hook: toolguard halted the agent at Bash" in done.stderr
    assert len(fake.requests) == 7  # six commands asked for, then the model's last word
