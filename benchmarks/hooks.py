"""What a coding agent waits for before and after each tool call: the wall time of one hook
event (``toolguard hook claude-code``, the command ``toolguard install`` writes), as a ratio
to a bare interpreter start (``python -c pass``) measured in the same run, interleaved.

Usage::

    python benchmarks/hooks.py              # 31 rounds
    python benchmarks/hooks.py --smoke      # 1 round (CI: every path runs)
    python benchmarks/hooks.py --json out.json

Each round runs, as separate processes: ``python -c pass``; a PreToolUse and a PostToolUse
event through the hook command with its hook server up (the default: an event is a socket
round trip to the user's long-lived server); and the same two events answered in process
(``TOOLGUARD_HOOK_SERVER=0``: what the first event of a session costs, or every event where
no server can run). Each event is a distinct ``Read`` of one session, with the default
per-user store in a temporary state directory. The figures are medians; the target is a
hook event within 4x a bare interpreter start.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CLIENT = ROOT / "toolguard" / "_hook_client.py"
TARGET = 4.0


def _timed(command: list[str], data: bytes, env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(command, input=data, env=env, capture_output=True, check=False)
    took = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{command} failed: {done.stderr.decode(errors='replace')}")
    return took


def _event(kind: str, i: int) -> bytes:
    base: dict[str, Any] = {"session_id": "bench", "cwd": "/w", "tool_name": "Read",
                            "tool_input": {"file_path": f"/w/file{i}.txt"},
                            "tool_use_id": f"toolu_{i}"}
    if kind == "post":
        base.update(hook_event_name="PostToolUse",
                    tool_response={"type": "text", "file": {"content": f"line {i}"}})
    else:
        base["hook_event_name"] = "PreToolUse"
    return json.dumps(base).encode()


def measure(rounds: int) -> dict[str, Any]:
    state = Path(tempfile.mkdtemp(prefix="toolguard-hook-bench-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLGUARD_")}
    env.update(TOOLGUARD_STATE_DIR=str(state), TOOLGUARD_HOOK_SERVER_IDLE_S="120",
               PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]))
    alone = {**env, "TOOLGUARD_HOOK_SERVER": "0"}
    hook = [sys.executable, str(CLIENT), "claude-code"]
    times: dict[str, list[float]] = {k: [] for k in (
        "python -c pass", "pre (server)", "post (server)", "pre (in process)",
        "post (in process)")}
    try:
        # the first event starts the server; wait until it answers
        _timed(hook, _event("pre", 0), env)
        _timed(hook, _event("post", 0), env)
        for _ in range(600):
            if (state / "hook.sock").exists():
                break
            time.sleep(0.05)
        _timed(hook, _event("pre", 1), env)  # warm: the server's guard is built
        _timed(hook, _event("post", 1), env)
        for r in range(rounds):
            i = 2 * r + 10
            times["python -c pass"].append(
                _timed([sys.executable, "-c", "pass"], b"", env))
            times["pre (server)"].append(_timed(hook, _event("pre", i), env))
            times["post (server)"].append(_timed(hook, _event("post", i), env))
            times["pre (in process)"].append(_timed(hook, _event("pre", i + 1), alone))
            times["post (in process)"].append(_timed(hook, _event("post", i + 1), alone))
    finally:
        pid = state / "hook.pid"
        if pid.exists():
            with contextlib.suppress(OSError, ValueError):
                os.kill(int(pid.read_text()), signal.SIGTERM)
        shutil.rmtree(state, ignore_errors=True)
    base = statistics.median(times["python -c pass"])
    return {"rounds": rounds, "target_ratio": TARGET,
            "median_s": {k: statistics.median(v) for k, v in times.items()},
            "ratio": {k: statistics.median(v) / base for k, v in times.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--rounds", type=int, default=31)
    parser.add_argument("--json", type=Path)
    options = parser.parse_args()
    report = measure(1 if options.smoke else options.rounds)
    for name, seconds in report["median_s"].items():
        print(f"{name:20} {seconds * 1000:8.1f} ms  x{report['ratio'][name]:.2f}")
    if options.json:
        options.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
