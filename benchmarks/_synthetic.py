"""Synthetic recorded runs of any size for the replay benchmarks and tests: a toolguard trace
JSONL file and a chat-format (OpenAI Chat Completions) JSON array of runs, with a coding
agent's mix of reads, searches, shell commands and writes, and some repeats, so a replay
meets allow, warn, cached and block decisions. Deterministic for a given size and seed."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["calls_of", "write_chat", "write_trace"]

_TOOLS = ("read_file", "grep", "bash", "write_file")


def calls_of(runs: int, calls_per_run: int, seed: int = 7, short: bool = False
             ) -> Iterator[tuple[int, list[tuple[str, dict[str, Any], str, bool]]]]:
    """Per run: its number and its calls ``(tool, args, result text, is_error)``; ``short``:
    every result is ``"ok"`` (the guard's cost of a call without the result's)."""
    rng = random.Random(seed)
    for run in range(runs):
        calls = []
        for i in range(calls_per_run):
            tool = rng.choice(_TOOLS)
            n = rng.randrange(max(calls_per_run // 3, 1))  # some calls repeat within a run
            if tool == "read_file":
                args: dict[str, Any] = {"path": f"src/pkg/module_{n}.py"}
            elif tool == "grep":
                args = {"pattern": f"def handler_{n}", "path": "src"}
            elif tool == "bash":
                args = {"command": f"pytest tests/test_{n}.py -q"}
            else:
                args = {"path": f"src/pkg/module_{n}.py", "content": f"x = {n}\n" * 4}
            result = (f"step {i} of run {run}: " + "line of output\n" * rng.randrange(2, 12)
                      + f"took 0.{rng.randrange(100, 999)}s")
            calls.append((tool, args, "ok" if short else result, rng.random() < 0.05))
        yield run, calls


def write_trace(path: Path, calls: int, calls_per_run: int = 100, seed: int = 7,
                short: bool = False) -> Path:
    """A trace JSONL file of ``calls`` calls: a header line per run, then one line per call
    (``short``: see :func:`calls_of`)."""
    with path.open("w", encoding="utf-8") as out:
        for run, items in calls_of(max(calls // calls_per_run, 1), calls_per_run, seed, short):
            out.write(json.dumps({"run": f"run-{run}", "case": "synthetic"}) + "\n")
            for tool, args, result, is_error in items:
                out.write(json.dumps({"tool": tool, "args": args, "result": result,
                                      "is_error": is_error}) + "\n")
    return path


def write_chat(path: Path, calls: int, calls_per_run: int = 100, seed: int = 7) -> Path:
    """A chat-format JSON array of runs (``[{"id", "messages"}, ...]``) of ``calls`` calls,
    written run by run."""
    with path.open("w", encoding="utf-8") as out:
        out.write("[")
        for run, items in calls_of(max(calls // calls_per_run, 1), calls_per_run, seed):
            messages: list[dict[str, Any]] = [{"role": "user", "content": "fix the bug"}]
            for i, (tool, args, result, is_error) in enumerate(items):
                call_id = f"call_{run}_{i}"
                messages.append({"role": "assistant", "content": None, "tool_calls": [
                    {"id": call_id, "type": "function",
                     "function": {"name": tool, "arguments": json.dumps(args)}}]})
                messages.append({"role": "tool", "tool_call_id": call_id,
                                 "content": ("Error: " if is_error else "") + result})
            out.write(("," if run else "") + "\n" + json.dumps({"id": f"run-{run}",
                                                                 "messages": messages}))
        out.write("\n]\n")
    return path
