"""mini-swe-agent trajectories (``*.traj.json``: ``{"info", "messages", "trajectory_format"}``).

``messages`` is a Chat Completions message list (read as in :mod:`._chat`) that ends with a
message of role ``exit`` (the run's end and its submission, not a problem). Token usage is in
each assistant message's ``extra.response.usage``. Runs recorded before tool calling
(``mini-swe-agent-1.0``) hold each command in a ```` ```bash ```` block of the assistant's
text; a message with exactly one such block is one call of the tool ``bash``
(``{"command": ...}``), answered by the next user message. A message with none or several is
the harness's format error: it runs nothing (mini-swe-agent 1.x ``DefaultAgent.parse_action``).
A run whose configuration sets another ``agent.action_regex`` is read with that one.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, Final

from ._chat_steps import chat_messages
from ._model import Reader, RecordedCall, Run, Source, Step, usage_counts

__all__ = ["READER"]

_SIGNATURE: Final = re.compile(rb'"mini_version"\s*:|"trajectory_format"\s*:\s*"mini-swe-agent')
_BASH: Final = re.compile(r"```bash\s*\n(.*?)\n```", re.DOTALL)


def _detect(path: Path, head: bytes) -> bool:
    return head.lstrip()[:1] == b"{" and (path.name.endswith(".traj.json")
                                          or bool(_SIGNATURE.search(head)))


def _usage_of(m: Mapping[str, Any]) -> Any:
    extra = m.get("extra")
    response = extra.get("response") if isinstance(extra, dict) else None
    spent = response.get("usage") if isinstance(response, dict) else None
    return spent if spent is not None else m.get("usage")


def _read(source: Source) -> Iterator[Run]:
    value = source.load_json()
    messages = value.get("messages") if isinstance(value, dict) else None
    if not isinstance(messages, list):
        source.problem(None, "expected an object with a 'messages' list")
        return
    info = value.get("info") if isinstance(value.get("info"), dict) else {}
    meta = {k: v for k, v in (("instance_id", value.get("instance_id")),
                              ("exit_status", info.get("exit_status")),
                              ("mini_version", info.get("mini_version")),
                              ("trajectory_format", value.get("trajectory_format")))
            if isinstance(v, str)}
    if any(isinstance(m, dict) and m.get("tool_calls") for m in messages):
        for run in chat_messages(source, messages, meta, None, "the document",
                                 usage_of=_usage_of, end_roles=("exit",)):
            run.id, run.format = meta.get("instance_id", run.id), "mini-swe-agent"
            yield run
        return
    agent = info.get("config", {}).get("agent") if isinstance(info.get("config"), dict) else None
    given = agent.get("action_regex") if isinstance(agent, dict) else None
    action = _BASH
    if isinstance(given, str):
        try:  # the harness's own regex (mini-swe-agent's agent.action_regex)
            action = re.compile(given, re.DOTALL)
        except re.error as exc:
            source.problem(None, f"its agent.action_regex does not compile ({exc}): the "
                           "commands the harness ran cannot be told; run skipped")
            return
    yield Run(meta.get("instance_id", source.default_id()), source.file, "mini-swe-agent",
              meta, _text_steps(source, messages, action))


def _text_steps(source: Source, messages: list[Any], action: re.Pattern[str]) -> list[Step]:
    """Steps of a run whose commands are ```bash blocks (``action`` matches them) in the
    assistant's text."""
    steps: list[Step] = []
    pending: int | None = None  # the step index of the command waiting for its output
    for m in messages:
        if not isinstance(m, dict):
            continue
        role, content = m.get("role"), m.get("content")
        if role == "exit":
            break
        if role == "assistant":
            source.model_turns += 1
            spent = usage_counts(_usage_of(m), ("prompt_tokens", "input_tokens"),
                                 ("completion_tokens", "output_tokens"))
            if spent is not None:
                steps.append(spent)
            found = action.findall(content) if isinstance(content, str) else []
            # The harness runs a message's block only when it holds exactly one; none or
            # several is a format error, answered by a user message, and nothing runs.
            if len(found) == 1:
                pending = len(steps)
                steps.append(RecordedCall("bash", {"command": found[0]}))
            else:
                pending = None
        elif role == "user" and pending is not None:  # the output of the command just run
            # (other user messages are the harness's format errors, not a person)
            call = steps[pending]
            assert isinstance(call, RecordedCall)
            steps[pending] = replace(call, result=content)
            pending = None
    return steps


READER: Final = Reader(
    name="mini-swe-agent",
    description="mini-swe-agent .traj.json (chat messages ending with role 'exit')",
    suffixes=(".traj.json",),
    detect=_detect,
    read=_read,
    calls_expected=True,
)
