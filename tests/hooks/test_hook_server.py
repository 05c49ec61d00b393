"""The hook server as the hosts reach it: one long-lived process that answers event after
event (its open descriptors stay flat) in each hook command's own working directory (a
relative policy or ``sqlite:///`` URL resolves where the command runs, not where the server
started)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from toolguard._hook_client import _ask_server, request

ROOT = Path(__file__).resolve().parents[2]
CLIENT = ROOT / "toolguard" / "_hook_client.py"


def _environ(state: Path, **more: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLGUARD_")}
    env.update(TOOLGUARD_STATE_DIR=str(state), TOOLGUARD_HOOK_SERVER_IDLE_S="60",
               PYTHONPATH=str(ROOT), **more)
    return env


@pytest.fixture
def server(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A hook server on ``tmp_path/state``, started from ``tmp_path/elsewhere``."""
    state, elsewhere = tmp_path / "state", tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "toolguard.hooks._server"],
                            env=_environ(state), cwd=elsewhere)
    try:
        deadline = time.monotonic() + 30
        while not (state / "hook.sock").exists():
            assert proc.poll() is None and time.monotonic() < deadline, "no hook server"
            time.sleep(0.05)
        yield proc
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _read(i: int, kind: str, session: str = "s1") -> dict[str, Any]:
    event: dict[str, Any] = {"session_id": session, "cwd": "/w", "tool_name": "Read",
                             "tool_input": {"file_path": f"/w/{i}.txt"}, "tool_use_id": f"r{i}"}
    if kind == "post":
        return {**event, "hook_event_name": "PostToolUse", "tool_response": f"line {i}"}
    return {**event, "hook_event_name": "PreToolUse"}


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts /proc/PID/fd")
def test_the_servers_descriptors_stay_flat_over_many_events(
        server: subprocess.Popen[bytes], tmp_path: Path) -> None:
    """Each event is answered in a thread of its own: the store's connections are pooled,
    not one left open per thread (before: 4 -> 125 -> 245 descriptors over 120 events)."""
    state = tmp_path / "state"
    env = {"TOOLGUARD_STATE_DIR": str(state)}
    counts = []
    for i in range(120):
        data = json.dumps(_read(i // 2, "pre" if i % 2 == 0 else "post")).encode()
        reply = _ask_server(str(state / "hook.sock"),
                            request(["claude-code"], data, env, str(tmp_path)))
        assert reply is not None and json.loads(reply)["code"] == 0
        if i in (19, 119):
            counts.append(len(list(Path(f"/proc/{server.pid}/fd").iterdir())))
    assert counts[1] <= counts[0] + 2, counts


def _client(cwd: Path, env: dict[str, str], event: dict[str, Any], *args: str
            ) -> tuple[int, str, str]:
    done = subprocess.run([sys.executable, str(CLIENT), "claude-code", *args],
                          input=json.dumps(event), cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=60, check=False)
    return done.returncode, done.stdout, done.stderr


def test_each_event_resolves_relative_names_in_the_hook_commands_directory(
        server: subprocess.Popen[bytes], tmp_path: Path) -> None:
    """The same relative ``--policy`` or ``TOOLGUARD_POLICY`` names each project's own file,
    and a relative ``sqlite:///`` URL each project's own database, through one server that
    runs elsewhere: as the command would without the server."""
    env = _environ(tmp_path / "state")
    a, b = tmp_path / "a", tmp_path / "b"
    for project, extra in ((a, "[tools.deploy]\nrequires_approval = true\n"), (b, "")):
        project.mkdir()
        (project / "policy.toml").write_text(f"strict_tools = false\n{extra}", "utf-8")
    deploy = {"hook_event_name": "PreToolUse", "session_id": "s1", "cwd": "/w",
              "tool_name": "deploy", "tool_input": {"to": "prod"}, "tool_use_id": "d1"}
    code, out, err = _client(a, env, deploy, "--policy", "policy.toml")
    assert code == 0, err
    assert json.loads(out)["hookSpecificOutput"]["permissionDecision"] == "ask"
    code, out, err = _client(b, {**env, "TOOLGUARD_POLICY": "policy.toml"},
                             {**deploy, "session_id": "s2"})
    assert (code, out, err) == (0, "", "")
    shared = tmp_path / "shared.toml"
    shared.write_text('strict_tools = false\n[store]\nurl = "sqlite:///guard.db"\n', "utf-8")
    for project in (a, b):  # one policy file, one mtime: the directory tells them apart
        code, out, err = _client(project, env, _read(1, "pre", project.name), "--policy",
                                 str(shared))
        assert (code, out, err) == (0, "", "")
    assert (a / "guard.db").is_file() and (b / "guard.db").is_file()
    assert not (tmp_path / "elsewhere" / "guard.db").exists()
