"""Replay throughput: recorded calls read and replayed per second, per input format, the way
``toolguard replay`` does it (file by file, each file's runs replayed as they are read), and
the peak memory of replaying a corpus that way against reading every file first.

Data: the real recordings in ``../shared/data`` (tau-bench, the coding-agent set, and each
folder of ``transcripts/``), each with the example policy for its agent. Each data set is
replayed ``reps`` times; the best time counts (the machine is shared and noisy).
"""

from __future__ import annotations

import gc
import os
import time
import tracemalloc
from pathlib import Path
from typing import Any

import toolguard as tg
from toolguard.replay import (
    ReplayReport,
    UniqueIds,
    iter_files,
    open_file,
    read_runs,
    read_tool_definitions,
    replay_runs,
)

__all__ = ["replay_markdown", "replay_section"]

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("TOOLGUARD_SHARED", ROOT.parent / "shared"))
POLICIES = ROOT / "examples" / "policies"
DATA = SHARED / "data"
# (label, path, policy, tool definitions)
SETS: tuple[tuple[str, Path, str | None, Path | None], ...] = (
    ("tau-bench (chat)", DATA / "tau-bench" / "gpt-4o-airline.json", "airline",
     DATA / "tau-bench" / "airline-tools.json"),
    ("coding-agent set (trace)", DATA / "swe-trajectories", "coding-agent", None),
    ("claude-code", DATA / "transcripts" / "claude-code", "claude-code", None),
    ("codex", DATA / "transcripts" / "codex-rollout", "codex", None),
    ("mini-swe-agent", DATA / "transcripts" / "mini-swe-agent", "swe-agent", None),
    ("swe-agent", DATA / "transcripts" / "swe-agent", "swe-agent", None),
    ("openhands", DATA / "transcripts" / "openhands", "openhands", None),
    ("inspect", DATA / "transcripts" / "inspect-ai", None, None),
    ("langfuse", DATA / "transcripts" / "langfuse-export", None, None),
)


def _streamed(path: Path, policy: tg.Policy | None, tools: list[tg.ToolSpec]) -> ReplayReport:
    """Read and replay file by file, as the CLI does."""
    report = ReplayReport()
    unique = UniqueIds()
    for file in iter_files([path], report.problems):
        opened = open_file(file)
        report.runs.extend(replay_runs(unique(opened.runs), policy, tools=tools).runs)
        report.problems.extend(opened.problems)
    return report


def _peak(action: Any) -> int:
    gc.collect()
    tracemalloc.start()
    try:
        action()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def replay_section(smoke: bool) -> dict[str, Any]:
    """Calls/s per data set, and peak memory streamed vs. all read first."""
    sets = SETS[2:3] if smoke else SETS
    reps = 1 if smoke else 3
    rows: list[dict[str, Any]] = []
    for label, path, policy_name, tools_file in sets:
        if not path.exists():
            rows.append({"data": label, "skipped": f"{path} not found"})
            continue
        policy = tg.load_policy(POLICIES / f"{policy_name}.toml", env={}) if policy_name else None
        tools = read_tool_definitions(tools_file) if tools_file else []
        best = float("inf")
        report = ReplayReport()
        for _ in range(reps):
            start = time.perf_counter()
            report = _streamed(path, policy, tools)
            best = min(best, time.perf_counter() - start)
        calls = report.totals()["calls"]
        rows.append({"data": label, "files": len({r.file for r in report.runs}),
                     "runs": len(report.runs), "calls": calls, "seconds": round(best, 4),
                     "calls_per_s": round(calls / best) if best > 0 else None,
                     "problems": len(report.problems)})
    memory: dict[str, Any] = {}
    corpus = DATA / "swe-trajectories" if not smoke else DATA / "transcripts" / "claude-code"
    if corpus.exists():
        policy = tg.load_policy(POLICIES / "coding-agent.toml", env={})
        memory = {
            "data": str(corpus.relative_to(SHARED)),
            "streamed_peak_bytes": _peak(lambda: _streamed(corpus, policy, [])),
            "read_first_peak_bytes": _peak(
                lambda: replay_runs(read_runs([corpus])[0], policy)),
        }
    return {"sets": rows, "memory": memory, "reps": reps}


def replay_markdown(section: dict[str, Any]) -> str:
    """The replay section of the Markdown summary."""
    lines = ["### Replay (read + replay, best of "
             f"{section['reps']})", "",
             "| data | files | runs | calls | seconds | calls/s |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for row in section["sets"]:
        if "skipped" in row:
            lines.append(f"| {row['data']} | skipped: {row['skipped']} | | | | |")
        else:
            lines.append(f"| {row['data']} | {row['files']} | {row['runs']} | "
                         f"{row['calls']:,} | {row['seconds']} | {row['calls_per_s']:,} |")
    memory = section["memory"]
    if memory:
        lines += ["", f"Peak memory replaying `{memory['data']}`: "
                  f"{memory['streamed_peak_bytes'] / 1e6:.1f} MB file by file, "
                  f"{memory['read_first_peak_bytes'] / 1e6:.1f} MB reading every file first."]
    return "\n".join(lines) + "\n"
