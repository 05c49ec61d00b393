"""OpenAI Responses API item lists, and the OpenAI Agents SDK's ``RunResult.to_input_list()``.

A JSON list of items (or a Response object, ``{"object": "response", "output": [...]}``, or
``{"input": [...], "output": [...]}``). Calls: ``function_call`` (``arguments``: the model's
JSON text), ``custom_tool_call`` (free-form ``input``, replayed as ``{"input": text}``),
``local_shell_call`` (its ``action``), ``computer_call`` (its ``action``), answered by their
``*_output`` items with the same ``call_id``. Hosted tools (``web_search_call``,
``file_search_call``, ``code_interpreter_call``, ``image_generation_call``, ``mcp_call``) run
at the API provider, never through the agent's own tools where a guard sits: they are counted
in a note, not replayed. Calls one after another, before any output, were emitted in one
response: a batch. A user message
(``role: "user"``, with or without ``"type": "message"``) is a user turn; an assistant message
a model turn; reasoning items are skipped. :class:`ItemSteps` is shared with the Codex rollout
reader.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final

from ._model import (
    Reader,
    RecordedCall,
    Run,
    Source,
    Step,
    UserTurn,
    call_arguments,
    unrecorded_args,
    usage_counts,
)
from ._reading import field_list, text_field
from ._timeline import Pending

__all__ = ["READER", "ItemSteps"]

_PAIRED: Final = {"function_call": "function_call_output",
                  "custom_tool_call": "custom_tool_call_output",
                  "local_shell_call": "local_shell_call_output",
                  "computer_call": "computer_call_output"}
_OUTPUTS: Final = frozenset(_PAIRED.values())
_HOSTED: Final = frozenset({"web_search_call", "file_search_call", "code_interpreter_call",
                            "image_generation_call", "mcp_call"})
_QUIET: Final = frozenset({"reasoning", "item_reference", "compaction", "mcp_list_tools",
                           "mcp_approval_request", "mcp_approval_response"})
_SIGNATURE: Final = re.compile(
    rb'"type"\s*:\s*"(?:function_call|function_call_output|custom_tool_call|local_shell_call'
    rb'|computer_call|mcp_call|web_search_call|file_search_call)"')


class ItemSteps:
    """Turns Responses items, one at a time, into the steps of one run.

    Args:
        source: the file (problems, notes, model turns).
        steps: the run's steps, appended to.
        user_turns: user messages are user turns (Codex rollouts mark turns elsewhere).
    """

    def __init__(self, source: Source, steps: list[Step], *, user_turns: bool = True) -> None:
        self.source = source
        self.steps = steps
        self.user_turns = user_turns
        self.calls = Pending(steps)  # by call_id
        self.batch: str | None = None  # the batch of the call just before, if no output since

    def item(self, item: Mapping[str, Any], line: int | None, elapsed: float | None = None,
             where: str = "") -> None:
        """Add the steps of one item (``where`` names it when there is no line, e.g. ``item 3``)."""
        kind = text_field(item, "type") or ("message" if "role" in item else None)
        if kind in _PAIRED:
            self.call(str(kind), item, line, elapsed, where)
            return
        if kind in _HOSTED:
            self.batch = None
            self.source.unrecognised(f"hosted tool calls ({kind}): run by the API provider, "
                                     "not by the agent's tools; not replayed", line)
            return
        self.batch = None
        if kind in _OUTPUTS:
            self.output(item, line)
        elif kind == "message":
            role = item.get("role")
            if role == "assistant":
                self.source.model_turns += 1
            elif role == "user" and self.user_turns:
                self.steps.append(UserTurn(line))
        elif kind not in _QUIET:
            self.source.unrecognised(f"items of type {kind!r}", line)

    def call(self, kind: str, item: Mapping[str, Any], line: int | None,
             elapsed: float | None, where: str) -> None:
        """One call item; consecutive calls share a batch."""
        if self.batch is None:
            self.batch = f"line {line}" if line is not None else f"{where} response"
            self.source.model_turns += 1
        if kind == "function_call":
            name = item.get("name")
            args, raw = call_arguments(item.get("arguments"), self.source, line)
        elif kind == "custom_tool_call":
            name, args, raw = item.get("name"), {"input": item.get("input")}, None
        else:  # the local shell and the computer: named by type, arguments are the action
            name = kind.removesuffix("_call")
            action = item.get("action")
            args = (unrecorded_args(self.source, line) if action is None
                    else {"action": action})
            raw = None
        if not isinstance(name, str) or not name:
            self.source.problem(line, f"{where or 'a'} {kind} without a name; item skipped")
            return
        self.calls.add(item.get("call_id"), RecordedCall(name, args, raw, batch=self.batch,
                                                          elapsed_s=elapsed, line=line))

    def output(self, item: Mapping[str, Any], line: int | None) -> None:
        """A ``*_output`` item: the result of the call with its ``call_id``."""
        output = item.get("output")
        error = item.get("status") in ("failed", "incomplete") or (
            isinstance(output, dict) and output.get("success") is False)
        if not self.calls.answer(item.get("call_id"), output, error):
            self.source.unrecognised("outputs whose call is not in the file", line)


def _detect(path: Path, head: bytes) -> bool:
    start = head.lstrip(b"\xef\xbb\xbf \t\r\n")[:1]
    return start in (b"[", b"{") and bool(_SIGNATURE.search(head))


def _read(source: Source) -> Iterator[Run]:
    value = source.load_json()
    items: Any = value
    meta: dict[str, Any] = {}
    steps: list[Step] = []
    if isinstance(value, dict):
        meta = {k: value[k] for k in ("id", "model") if isinstance(value.get(k), str)}
        items = [*field_list(value, "input"), *field_list(value, "output")]
        spent = usage_counts(value.get("usage"), ("input_tokens",), ("output_tokens",))
        if spent is not None:
            steps.append(spent)
    if not isinstance(items, list):
        source.problem(None, "expected a list of Responses items")
        return
    reader = ItemSteps(source, steps)
    for i, item in enumerate(items):
        if isinstance(item, dict):
            reader.item(item, None, where=f"item {i}")
        else:
            source.unrecognised("items that are not objects")
    yield Run(meta.get("id", source.stem), source.file, "responses", meta, steps)


READER: Final = Reader(
    name="responses",
    description="OpenAI Responses API items or Agents SDK to_input_list() JSON "
                "(function_call / *_output by call_id)",
    suffixes=(".json",),
    detect=_detect,
    read=_read,
)
