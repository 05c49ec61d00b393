"""tau2-bench simulation files (``{"timestamp", "info", "tasks", "simulations"}``, as
``tau2 run`` writes them under ``data/simulations/``).

Each simulation is one run, named by its ``id``; its metadata are ``task_id``, ``trial``,
``reward`` (``reward_info.reward``) and ``termination_reason``. Its ``messages`` are read in
order: an assistant message's ``tool_calls`` (``{"id", "name", "arguments",
"requestor"}``, several in one message are one batch) are the calls, answered by the ``tool``
messages with their ``id`` (an error when ``error`` is true); its ``usage``
(``prompt_tokens``, ``completion_tokens``) the usage. A user message is a new turn. In the
domains where the simulated user has tools of its own (telecom: toggling airplane mode on its
phone), the user's ``tool_calls`` and the tool messages with ``requestor = "user"`` are the
user's actions, not the agent's: they are not replayed (the guard stands in front of the agent).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final

from ._model import Reader, RecordedCall, Run, Source, Step, UserTurn, arguments, usage_counts
from ._reading import field_dict, field_list
from ._timeline import Pending

__all__ = ["READER"]

# Results.info's keys, written before the (long) task list; "simulations" may be past the head
_SIGNATURE: Final = (re.compile(rb'"num_trials"\s*:'), re.compile(rb'"agent_info"\s*:'),
                     re.compile(rb'"environment_info"\s*:'))


def _detect(path: Path, head: bytes) -> bool:
    return head.lstrip()[:1] == b"{" and all(p.search(head) for p in _SIGNATURE)


def _read(source: Source) -> Iterator[Run]:
    value = source.load_json()
    simulations = value.get("simulations") if isinstance(value, dict) else None
    if not isinstance(simulations, list):
        source.problem(None, "expected an object with a 'simulations' list (tau2-bench)")
        return
    for number, simulation in enumerate(simulations):
        if not isinstance(simulation, dict):
            source.problem(None, f"simulation {number} is not an object; skipped")
            continue
        meta: dict[str, Any] = {k: simulation[k] for k in ("task_id", "trial",
                                                            "termination_reason")
                                if isinstance(simulation.get(k), (str, int))}
        reward = field_dict(simulation, "reward_info").get("reward")
        if isinstance(reward, (int, float)) and not isinstance(reward, bool):
            meta["reward"] = reward
        given = simulation.get("id")
        run_id = given if isinstance(given, str) and given else source.default_id()
        yield Run(run_id, source.file, "tau2-simulations", meta,
                  _steps(source, field_list(simulation, "messages"), run_id))


def _steps(source: Source, messages: list[Any], run_id: str) -> list[Step]:
    steps: list[Step] = []
    pending = Pending(steps)
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping):
            source.problem(None, f"simulation {run_id}: message {i} is not an object; "
                           "message ignored")
            continue
        role = m.get("role")
        if role == "assistant":
            source.model_turns += 1
            spent = usage_counts(m.get("usage"), ("prompt_tokens", "input_tokens"),
                                 ("completion_tokens", "output_tokens"))
            if spent is not None:
                steps.append(spent)
            calls = [tc for tc in m.get("tool_calls") or () if isinstance(tc, Mapping)]
            for tc in calls:
                name = tc.get("name")
                if not isinstance(name, str):
                    source.problem(None, f"simulation {run_id}: message {i}: a tool call "
                                   "without a name; call ignored")
                    continue
                args, raw = arguments(tc.get("arguments"), None)
                pending.add(tc.get("id"), RecordedCall(
                    name, args, raw, batch=f"{run_id} message {i}" if len(calls) > 1 else None))
        elif role == "tool":
            if m.get("requestor") == "user":
                continue  # the answer to the simulated user's own tool call
            if not pending.answer(m.get("id"), m.get("content"), m.get("error") is True):
                source.problem(None, f"simulation {run_id}: message {i}: a tool result for "
                               f"call id {m.get('id')!r}, which no earlier call without a "
                               "result has; result ignored")
        elif role == "user":
            steps.append(UserTurn())
    return steps


READER: Final = Reader(
    name="tau2-simulations",
    description="tau2-bench simulation files ({'info', 'tasks', 'simulations'}; the agent's "
                "tool calls, not the simulated user's)",
    suffixes=(".json",),
    detect=_detect,
    read=_read,
)
