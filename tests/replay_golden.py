"""The whole replay report of every shared recording set, digested: what
``tests/replay/test_replay_golden.py`` compares against ``tests/golden/replay_reports.json``.

Regenerate (only when a change of the report is intended, and say so in the commit)::

    python -m tests.replay_golden > tests/golden/replay_reports.json

Each set is replayed (``read_runs`` + ``replay_stream``, in process or by worker processes)
and rendered three ways: the ``--format json`` document, the JSON lines, and the verbose
table (whose rows carry each step's argument excerpt). Each run is digested on its own (its
JSON object, its excerpts), so a difference names the run; the totals, problems, notes and
the rendered texts are digested whole. Paths are written relative to the shared folder, so
the digests do not depend on where it is.
"""

from __future__ import annotations

import hashlib
import io
import json
import sys
from typing import Any

from rich.console import Console

import toolguard as tg
from toolguard.replay import ReplayReport, read_runs, read_tool_definitions, replay_stream
from toolguard.replay._report import jsonl_lines, render_table, to_json, to_json_text

from .conftest import ROOT, SHARED

POLICIES = ROOT / "examples" / "policies"
DATA = SHARED / "data"

# name -> (paths under the shared folder, policy file or None, tool definitions or None)
SETS: dict[str, tuple[tuple[str, ...], str | None, str | None]] = {
    "swe-trajectories/coding-agent": (("data/swe-trajectories",), "coding-agent.toml", None),
    "swe-trajectories/default": (("data/swe-trajectories",), None, None),
    "tau-bench/airline": (("data/tau-bench/gpt-4o-airline.json",), "airline.toml",
                          "data/tau-bench/airline-tools.json"),
    "transcripts/default": (("data/transcripts",), None, None),
    "transcripts/coding-agent": (("data/transcripts",), "coding-agent.toml", None),
    "cases/default": (("cases",), None, None),
}


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:24]


def _relative(text: str) -> str:
    return text.replace(str(SHARED), "<shared>")


def report_of(name: str, jobs: int = 1) -> dict[str, Any]:
    """The digests of one set's report (see the module docstring), replayed by ``jobs``
    worker processes (1: in this process)."""
    paths, policy_file, tools_file = SETS[name]
    runs, read_problems = read_runs([SHARED / p for p in paths], allow_empty=True)
    policy = tg.load_policy(POLICIES / policy_file, env={}) if policy_file else None
    tools = read_tool_definitions(SHARED / tools_file) if tools_file else ()
    report = ReplayReport(problems=read_problems)
    for result, problem in replay_stream(runs, policy, tools=tools, jobs=jobs):
        if result is not None:
            report.runs.append(result)
        if problem is not None:
            report.problems.append(problem)
    document = to_json(report)
    out: dict[str, Any] = {"runs": {}}
    for run, data in zip(report.runs, document["runs"], strict=True):
        excerpts = [step.args for step in run.steps]
        out["runs"][run.id] = _digest(_relative(json.dumps([data, excerpts], sort_keys=True)))
    out["totals"] = document["totals"]
    out["problems"] = _digest(_relative(json.dumps(document["problems"])))
    out["notes"] = _digest(_relative(json.dumps(document["notes"])))
    out["json_text"] = _digest(_relative(to_json_text(report)))
    out["jsonl"] = _digest(_relative("\n".join(jsonl_lines(report))))
    buffer = io.StringIO()
    render_table(report, Console(file=buffer, width=200, color_system=None), verbose=True)
    out["table"] = _digest(_relative(buffer.getvalue()))
    return out


def main() -> None:
    json.dump({name: report_of(name) for name in SETS}, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
