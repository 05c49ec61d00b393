"""What the live coding-agent tests (Claude Code, Codex CLI, Gemini CLI) share: the
environment a host runs in (its own variables and toolguard's dropped, then the test's
state folder, a short-lived hook server and this checkout on ``PYTHONPATH``), and stopping
the per-user hook server a test started."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def host_env(drop: tuple[str, ...], home: Path, state: Path, **more: str) -> dict[str, str]:
    """``os.environ`` without the variables starting with ``drop`` or ``TOOLGUARD_``, with
    ``HOME``, the guard's state folder, a hook server that exits after 120 s idle, this
    checkout first on ``PYTHONPATH``, and ``more``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith((*drop, "TOOLGUARD_"))}
    env.update(HOME=str(home), TOOLGUARD_STATE_DIR=str(state),
               TOOLGUARD_HOOK_SERVER_IDLE_S="120",
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               **more)
    return env


def stop_hook_server(state: Path) -> None:
    """Stop the hook server a test started in ``state``, if it did."""
    pid_file = state / "hook.pid"
    if pid_file.exists():
        with contextlib.suppress(OSError, ValueError):
            os.kill(int(pid_file.read_text()), signal.SIGTERM)
