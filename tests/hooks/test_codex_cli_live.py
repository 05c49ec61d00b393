"""The real Codex CLI (npm ``@openai/codex``), run offline against a scripted looping model on
a loopback fake Responses API, with the guard installed by ``toolguard install codex
--user`` into a temporary home: what really ran and what the model was told."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.fake_openai_responses import FakeResponses
from tests.hook_host_support import host_env, stop_hook_server

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
    stop_hook_server(tmp_path / "state")


def test_a_looping_codex_session_is_stopped(project: Path) -> None:
    assert CODEX is not None, "the Codex CLI is not installed"
    command = ("exec_command", {"cmd": f"cat {project}/data.txt"})
    with FakeResponses([command] * 6 + ["All done."]) as fake:
        env = host_env(("OPENAI_", "CODEX_"), project / "home", project.parent / "state",
                       FAKE_API_KEY="sk-test")
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
