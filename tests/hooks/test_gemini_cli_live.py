"""The real Gemini CLI (npm ``@google/gemini-cli``), run offline against a scripted looping
model on a loopback fake Gemini API, with the guard installed by ``toolguard install gemini
--project`` into a temporary project: what really ran and what the model was told."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.fake_gemini import FakeGemini
from tests.hook_host_support import host_env, stop_hook_server

GEMINI = shutil.which("gemini")
pytestmark = pytest.mark.skipif(
    GEMINI is None and os.environ.get("CI") != "true",
    reason="needs the Gemini CLI: npm install -g @google/gemini-cli")


@pytest.fixture
def project(tmp_path: Path) -> Any:
    project = tmp_path / "project"
    home = project / "home" / ".gemini"
    home.mkdir(parents=True)
    (home / "settings.json").write_text(json.dumps({
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "telemetry": {"enabled": False}, "privacy": {"usageStatisticsEnabled": False},
        # its own detector of identical calls stops the loop at the fifth: off, so that the
        # guard's halt is what stops it
        "model": {"disableLoopDetection": True}}))
    (home / "trustedFolders.json").write_text(json.dumps({str(project): "TRUST_FOLDER"}))
    (project / "data.txt").write_text("forty-two\n")
    yield project
    stop_hook_server(tmp_path / "state")


def test_a_looping_gemini_cli_session_is_stopped(project: Path) -> None:
    assert GEMINI is not None, "the Gemini CLI is not installed"
    out = project / "out.txt"
    write = ("write_file", {"file_path": str(out), "content": "hello\n"})
    shell = ("run_shell_command", {"command": f"cat {project}/data.txt"})
    with FakeGemini([write] * 3 + [shell] * 6 + ["All done."]) as fake:
        env = host_env(("GEMINI_", "GOOGLE_"), project / "home", project.parent / "state",
                       GOOGLE_GEMINI_BASE_URL=fake.url, GEMINI_API_KEY="test-key")
        subprocess.run([sys.executable, "-m", "toolguard", "install", "gemini", "--project",
                        "--dir", str(project)], env=env, check=True, capture_output=True)
        done = subprocess.run(
            [GEMINI, "-p", "Write the file and look at the data.", "--yolo",
             "--output-format", "text", "-m", "gemini-2.5-pro"], cwd=project, env=env,
            capture_output=True, text=True, timeout=600, check=False)
        told = fake.told()
        asked = [_calls(body) for _, body in fake.requests if body.get("tools")]
    assert out.read_text() == "hello\n"
    assert told.count("NOT executed again") == 2  # the identical writes did not run again
    assert told.count("Output: forty-two") == 3  # the read-only ladder: allow, allow, warn
    assert "You have called run_shell_command with these same arguments 3 times" in told
    assert "Blocked, not executed: run_shell_command was called 4 times" in told
    # the fifth is a halt (continue: false): the agent stops there, the model is not asked
    # again (its sixth identical command never comes), and the user reads why
    assert asked == list(range(8)), asked
    assert ("Agent execution stopped by hook: toolguard halted the agent at "
            "run_shell_command") in done.stderr


def _calls(body: dict[str, Any]) -> int:
    """How many function calls of the model a request's conversation holds."""
    return sum(1 for c in body.get("contents", []) if c.get("role") == "model"
               for p in c.get("parts", []) if "functionCall" in p)
