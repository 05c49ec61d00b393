"""SWE-agent trajectories (``.traj``: ``{"trajectory", "history", "info", "environment"}``).

With function calling, ``history`` holds the model's calls: assistant messages with
``tool_calls`` (``function.arguments`` kept as the model's JSON text) answered by ``tool``
messages naming them in ``tool_call_ids``. Without it (older runs), each ``trajectory`` step's
``action`` is one command line, replayed as the single tool ``bash`` (``{"command": action}``,
the layout of ``../shared/data/swe-trajectories``) with its ``observation`` as the result.
SWE-agent's user messages are observations and format errors, not a person: no user turns.
``info.model_stats`` (``tokens_sent``/``tokens_received``, totals for the run) is one usage
step after the last call.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

from ._model import Reader, RecordedCall, Run, Source, Step, arguments, usage_counts
from ._reading import field_dict, field_list
from ._timeline import Pending

__all__ = ["READER"]

_SIGNATURE: Final = re.compile(rb'"trajectory"\s*:\s*\[')


def _detect(path: Path, head: bytes) -> bool:
    return path.name.endswith(".traj") or (
        head.lstrip()[:1] == b"{" and bool(_SIGNATURE.search(head))
        and b'"action"' in head and b'"source"' not in head)


def _read(source: Source) -> Iterator[Run]:
    value = source.load_json()
    if not isinstance(value, dict):
        source.problem(None, "expected a JSON object with 'trajectory' or 'history'")
        return
    info = field_dict(value, "info")
    meta: dict[str, Any] = {k: info[k] for k in ("exit_status",) if isinstance(info.get(k), str)}
    if isinstance(value.get("environment"), str):
        meta["environment"] = value["environment"]
    history = field_list(value, "history")
    steps = _history_steps(source, history)
    if steps is None:
        steps = _trajectory_steps(source, value.get("trajectory"))
    stats = info.get("model_stats")
    spent = usage_counts(stats, ("tokens_sent",), ("tokens_received",))
    if spent is not None and (spent.input_tokens or spent.output_tokens):
        steps.append(spent)
    yield Run(source.stem, source.file, "swe-agent", meta, steps)


def _history_steps(source: Source, history: list[Any]) -> list[Step] | None:
    """The steps of a function-calling history, or ``None`` if it holds no tool call."""
    if not any(isinstance(m, dict) and m.get("tool_calls") for m in history):
        return None
    steps: list[Step] = []
    pending = Pending(steps)
    for i, m in enumerate(history):
        if not isinstance(m, dict):
            continue
        if m.get("role") == "assistant":
            source.model_turns += 1
            calls = field_list(m, "tool_calls")
            for tc in calls:
                function = tc.get("function") if isinstance(tc, dict) else None
                if not isinstance(function, dict) or not isinstance(function.get("name"), str):
                    source.problem(None, f"history {i}: a tool call without function.name; "
                                         "skipped")
                    continue
                args, raw = arguments(function.get("arguments"), None)
                pending.add(tc.get("id"), RecordedCall(
                    function["name"], args, raw, batch=f"history {i}" if len(calls) > 1
                    else None))
        elif m.get("role") == "tool":
            ids = m.get("tool_call_ids") or [m.get("tool_call_id")]
            for call_id in ids if isinstance(ids, list) else []:
                if not pending.answer(call_id, m.get("content")):
                    source.unrecognised("tool messages whose call is not in the history")
    return steps


def _trajectory_steps(source: Source, trajectory: Any) -> list[Step]:
    steps: list[Step] = []
    for step in trajectory if isinstance(trajectory, list) else []:
        action = step.get("action") if isinstance(step, dict) else None
        if not isinstance(action, str) or not action.strip():
            source.unrecognised("trajectory steps without an action")
            continue
        source.model_turns += 1
        steps.append(RecordedCall("bash", {"command": action},
                                  result=step.get("observation")))
    return steps


READER: Final = Reader(
    name="swe-agent",
    description="SWE-agent .traj (history tool calls, or trajectory actions as one bash tool)",
    suffixes=(".traj",),
    detect=_detect,
    read=_read,
    calls_expected=True,
)
