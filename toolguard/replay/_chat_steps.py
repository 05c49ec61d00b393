"""A chat's message list as replay steps, for the chat reader (:mod:`._chat`, whose docstring
gives the rules) and the readers that hold chats: trace lines with ``messages``
(:mod:`._trace`) and mini-SWE-agent trajectories."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final, TypeAlias

from ._model import (
    Malformed,
    Run,
    Source,
    Step,
    UserTurn,
    arguments,
    new_call,
    run_id,
    short,
    usage,
)

__all__ = ["CHAT_KEYS", "chat_messages", "chat_run", "chat_steps"]

CHAT_KEYS: Final = ("messages", "traj")
_ERROR_TEXT: Final = re.compile(r"^\s*Error:")


def chat_run(source: Source, obj: Mapping[str, Any], line: int | None, where: str
             ) -> Iterator[Run]:
    """The run of one object holding ``messages`` (or ``traj``); its scalar keys are metadata."""
    messages = next((obj[k] for k in CHAT_KEYS if k in obj), None)
    if not isinstance(messages, list):
        source.problem(line, f"{where}: 'messages' must be a list; run skipped")
        return
    meta = {k: v for k, v in obj.items()  # scalars only: "info" and the like are bulky
            if k not in CHAT_KEYS and k != "system"
            and (v is None or isinstance(v, (str, int, float, bool)))}
    yield from chat_messages(source, messages, meta, line, where)


def chat_messages(source: Source, messages: list[Any], meta: dict[str, Any],
                  line: int | None, where: str, **options: Any) -> Iterator[Run]:
    """The run of one message list (``options`` go to :func:`chat_steps`)."""
    name = run_id(meta)
    if name is None and "task_id" in meta:
        name = (f"{meta['task_id']}-{meta['trial']}" if "trial" in meta
                else str(meta["task_id"]))
    named = f"{where}{f' ({name})' if name else ''}"
    try:
        steps, fmt, orphans = chat_steps(messages, line, **options)
    except Malformed as exc:
        source.problem(line, f"{named}: {exc}; run skipped")
        return
    for orphan in orphans:
        source.problem(line, f"{named}: {orphan}")
    source.model_turns += sum(1 for m in messages
                              if isinstance(m, dict) and m.get("role") == "assistant")
    yield Run(name or source.default_id(), source.file, fmt, meta, steps, line=line)


def chat_steps(messages: list[Any], line: int | None, *,
               usage_of: Callable[[Mapping[str, Any]], Any] = lambda m: m.get("usage"),
               end_roles: tuple[str, ...] = ()) -> tuple[list[Step], str, list[str]]:
    """Steps of one OpenAI or Anthropic message list (see the module docstring), its format,
    and a problem for each result that matches no call (the run is still replayed).

    ``usage_of`` finds an assistant message's token usage; a message whose role is one of
    ``end_roles`` ends the run.

    A result goes to the earliest call with its id that has none yet: ids are not always
    unique in one transcript (tau-bench reuses some), but a result always follows its call.

    Raises:
        Malformed: a message is malformed (the whole run is skipped).
    """
    # a call stays a list of its fields until the transcript is read: its result is put in
    # place, and each call is built once, at the end
    steps: list[Step | list[Any]] = []
    # call id -> the calls without a result; ids are strings, the legacy API's are
    # ("function_call", name) pairs, so no string id can take their results
    waiting: dict[CallKey, list[list[Any]]] = {}
    orphans: list[str] = []  # what the run ignores: results without a call, unknown messages
    fmt: str = "openai"

    def deliver(call_id: Any, content: Any, error: bool, i: int) -> None:
        key: CallKey = call_id if isinstance(call_id, tuple) else str(call_id)
        calls = waiting.get(key)
        if not calls:
            # A result without its call: the transcript was cut, or its ids are wrong. Its
            # call cannot be replayed, so the replay covers less than the run: say so.
            named = (f"function {call_id[1]!r}" if isinstance(call_id, tuple)
                     else f"call id {call_id!r}")
            orphans.append(f"message {i}: a tool result for {named}, which no earlier call "
                           "without a result has; result ignored")
            return
        call = calls.pop(0)
        call[_RESULT] = content
        call[_IS_ERROR] = error

    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise Malformed(f"message {i} is not an object")
        role, content = m.get("role"), m.get("content")
        if role in ("tool", "function"):  # "function": the legacy function_call API
            error = (m.get("is_error") is True or m.get("status") == "error"
                     or (isinstance(content, str) and bool(_ERROR_TEXT.match(content))))
            call_id = (m.get("tool_call_id") if role == "tool"
                       else ("function_call", str(m.get("name"))))
            deliver(call_id, content, error, i)
        elif role == "user":
            blocks = content if isinstance(content, list) else []
            results = [b for b in blocks if isinstance(b, dict) and b.get("type") == "tool_result"]
            for block in results:
                fmt = "anthropic"
                deliver(block.get("tool_use_id"), block.get("content"),
                        block.get("is_error") is True, i)
            if not results or len(results) < len(blocks):
                steps.append(UserTurn(line))
            if any(isinstance(b, dict) and b.get("type") == "tool_use" for b in blocks):
                orphans.append(f"message {i}: a tool_use block in a user message (calls "
                               "come from the assistant); block ignored")
        elif role == "assistant":
            if (spent := usage_of(m)) is not None:
                try:
                    steps.append(usage(spent, line))
                except Malformed as exc:
                    raise Malformed(f"message {i}: {exc}") from None
            calls, anthropic = _assistant_calls(m, i, line)
            if anthropic:
                fmt = "anthropic"
            for call_id, call in calls:
                waiting.setdefault(call_id, []).append(call)
                if len(calls) > 1:
                    call[_BATCH] = f"message {i}"
                steps.append(call)
            if isinstance(content, list) and any(
                    isinstance(b, dict) and b.get("type") == "tool_result" for b in content):
                orphans.append(f"message {i}: a tool_result block in an assistant message "
                               "(results come from the user); block ignored")
        elif role in end_roles:  # the run's end (mini-swe-agent's "exit"): nothing follows
            break
        elif role not in _QUIET_ROLES:
            orphans.append(f"message {i}: role {short(role)} is not one of user, assistant, "
                           "tool, function, system or developer; message ignored")
    return [new_call(*s) if isinstance(s, list) else s for s in steps], fmt, orphans


CallKey: TypeAlias = "str | tuple[str, str]"
_RESULT: Final = 3  # positions in a RecordedCall's fields
_IS_ERROR: Final = 4
_BATCH: Final = 6


def _fields(tool: str, args: Any, line: int | None) -> list[Any]:
    """A call's fields in order (:class:`RecordedCall`), without a result yet."""
    arguments_, raw = arguments(args, None)
    return [tool, arguments_, raw, None, False, False, None, None, line]
_QUIET_ROLES: Final = ("system", "developer")  # instructions: nothing to replay


def _assistant_calls(m: Mapping[str, Any], i: int, line: int | None
                     ) -> tuple[list[tuple[CallKey, list[Any]]], bool]:
    """The calls of one assistant message (as :func:`_fields`) with their ids (OpenAI
    ``tool_calls``, then Anthropic ``tool_use`` blocks), and whether it held any
    ``tool_use`` block."""
    anthropic = False
    calls: list[tuple[CallKey, list[Any]]] = []
    tool_calls = m.get("tool_calls") or []
    if not isinstance(tool_calls, list):
        raise Malformed(f"message {i}: 'tool_calls' must be a list")
    for tc in tool_calls:
        function = tc.get("function") if isinstance(tc, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise Malformed(f"message {i}: a tool call without function.name")
        calls.append((str(tc.get("id")),
                      _fields(function["name"], function.get("arguments"), line)))
    legacy = m.get("function_call")
    if legacy is not None:  # the deprecated function-calling API: one call, no id; it is
        # answered by the next "function" message with its name
        if not isinstance(legacy, dict) or not isinstance(legacy.get("name"), str):
            raise Malformed(f"message {i}: a function_call without a name")
        calls.append((("function_call", legacy["name"]),
                      _fields(legacy["name"], legacy.get("arguments"), line)))
    content = m.get("content")
    for block in content if isinstance(content, list) else []:
        if not (isinstance(block, dict) and block.get("type") == "tool_use"):
            continue
        anthropic = True
        if not isinstance(block.get("name"), str):
            raise Malformed(f"message {i}: a tool_use block without a name")
        calls.append((str(block.get("id")), _fields(block["name"], block.get("input"), line)))
    return calls, anthropic
