"""``toolguard replay``: what a policy would have done to recorded agent runs.

Read transcripts (toolguard trace JSONL, OpenAI Chat Completions or Anthropic Messages; see
``_formats``), replay them through the guard without executing anything (``_runner``), and
render the decisions (``_report``)::

    runs, problems = read_runs(["runs.jsonl"])
    report = replay_runs(runs, load_policy("policy.toml"))
    report.totals()["runs_with"]["halt"]
"""

from __future__ import annotations

from ._formats import (
    RecordedCall,
    ReplayInputError,
    Run,
    Step,
    TokenUsage,
    UserTurn,
    read_file,
    read_runs,
    read_tool_definitions,
)
from ._runner import ReplayReport, RunReport, StepReport, policy_with_effects, replay_runs

__all__ = [
    "RecordedCall",
    "ReplayInputError",
    "ReplayReport",
    "Run",
    "RunReport",
    "Step",
    "StepReport",
    "TokenUsage",
    "UserTurn",
    "policy_with_effects",
    "read_file",
    "read_runs",
    "read_tool_definitions",
    "replay_runs",
]
