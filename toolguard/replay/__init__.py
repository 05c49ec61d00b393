"""``toolguard replay``: what a policy would have done to recorded agent runs.

Read transcripts in any format a reader knows (``_registry``: the toolguard trace JSONL,
OpenAI Chat Completions / Anthropic Messages, Claude Code sessions, Codex rollouts, OpenAI
Responses items, SWE-agent and mini-swe-agent trajectories, OpenHands event streams, Inspect AI
logs, OpenTelemetry GenAI spans, Langfuse exports), replay them through the guard without
executing anything (``_runner``), and render the decisions (``_report``)::

    runs, problems = read_runs(["runs.jsonl"])
    report = replay_runs(runs, load_policy("policy.toml"))
    report.totals()["runs_with"]["halt"]

:func:`open_file` reads one file lazily, for replaying file by file.
"""

from __future__ import annotations

from ._formats import (
    FileRuns,
    UniqueIds,
    iter_files,
    open_file,
    read_file,
    read_runs,
    read_tool_definitions,
)
from ._model import (
    RecordedCall,
    ReplayInputError,
    ReplayNote,
    Run,
    Step,
    TokenUsage,
    UserTurn,
)
from ._registry import Reader, readers
from ._runner import (
    Outcome,
    ReplayReport,
    RunReport,
    StepReport,
    Totals,
    policy_with_effects,
    replay_runs,
    replay_stream,
)

__all__ = [
    "FileRuns",
    "Outcome",
    "Reader",
    "RecordedCall",
    "ReplayInputError",
    "ReplayNote",
    "ReplayReport",
    "Run",
    "RunReport",
    "Step",
    "StepReport",
    "TokenUsage",
    "Totals",
    "UniqueIds",
    "UserTurn",
    "iter_files",
    "open_file",
    "policy_with_effects",
    "read_file",
    "read_runs",
    "read_tool_definitions",
    "readers",
    "replay_runs",
    "replay_stream",
]
