"""What the MCP adapter and ``toolguard mcp-proxy`` tell the guard and the client: an MCP tool's
annotations as the guard's effects (:func:`tool_settings`), and the guard's results as
``CallToolResult`` JSON (:func:`to_result`, :func:`error_result`) or the JSON-RPC error of a
halt (:class:`HaltError`). Public through :mod:`toolguard.adapters.mcp`, which re-exports them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import mcp.types as mt

from toolguard._errors import Halt
from toolguard._outcomes import OutcomeUnknown
from toolguard._results import ToolResult
from toolguard._types import Decision, Effect, IdempotencyScope

HALT_ERROR_CODE = -32001
"""JSON-RPC error code of a halt (the implementation-defined server-error range, -32000 to
-32099, of JSON-RPC 2.0 §5.1). ``error.data`` holds ``{"kind", "task_id", "tool", "reason"}``."""


@dataclasses.dataclass(frozen=True, slots=True)
class ToolEffects:
    """What the annotations of one MCP tool say to the guard.

    Attributes:
        effect: readonly or mutating.
        settings: the settings given to ``guard.register`` (``external``,
            ``idempotency_scope``), as decorator arguments: a policy's ``[tools.X]`` beats them.
        hints: the annotations the server gave, by their MCP names (for ``--explain``).
    """

    effect: Effect
    settings: Mapping[str, Any]
    hints: Mapping[str, bool]


def tool_settings(tool: mt.Tool) -> ToolEffects:
    """The effect and settings an MCP tool's annotations imply.

    ``readOnlyHint: true`` → readonly. Otherwise mutating, and when ``destructiveHint`` or
    ``openWorldHint`` is true (the MCP spec's default for both when absent: a tool with no
    annotations may destroy and act on the outside world) → idempotency scope ``task``: a
    completed call is never repeated in the task, whatever the agent does in between.
    ``openWorldHint`` is toolguard's ``external = true`` (which implies that scope);
    ``destructiveHint`` alone sets the scope.
    ``idempotentHint`` is recorded in ``hints`` only: a repeated identical call is still a
    loop worth stopping.

    Args:
        tool: an entry of ``tools/list``.
    """
    ann = tool.annotations
    return effects_of(None if ann is None else ann.model_dump(by_alias=True, exclude_none=True))


_HINTS = ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")


def effects_of(annotations: Mapping[str, Any] | None) -> ToolEffects:
    """:func:`tool_settings` from a tool's ``annotations`` as JSON (camelCase keys, as
    ``tools/list`` sends them; ``None`` when absent). Hints that are not booleans count as
    absent."""
    ann = annotations if isinstance(annotations, Mapping) else {}
    hints = {name: ann[name] for name in _HINTS if isinstance(ann.get(name), bool)}
    read_only = hints.get("readOnlyHint") is True
    destructive = hints.get("destructiveHint", True)
    open_world = hints.get("openWorldHint", True)
    if read_only:
        return ToolEffects(Effect.READONLY, {}, hints)
    settings: dict[str, Any] = {}
    if open_world:
        settings["external"] = True  # toolguard's own name for it: scope task, and says why
    elif destructive:
        settings["idempotency_scope"] = IdempotencyScope.TASK
    return ToolEffects(Effect.MUTATING, settings, hints)


class UpstreamToolError(Exception):
    """The tool ran and answered ``isError: true``: the guard records a failed call, and the
    client gets the tool's own error result back (``result``)."""

    def __init__(self, result: mt.CallToolResult) -> None:
        text = " ".join(c.text for c in result.content if isinstance(c, mt.TextContent))
        super().__init__(text or "the tool reported an error")
        self.result = result


def tool_failure(result: Mapping[str, Any]) -> Exception | None:
    """What the guard records for a tool's ``CallToolResult`` (JSON): ``None`` for a success;
    for ``isError: true`` an :class:`UpstreamToolError`, or, when the body is no valid
    ``CallToolResult`` (content not a list), the validation error: a failure all the same."""
    if result.get("isError") is not True:
        return None
    try:
        return UpstreamToolError(mt.CallToolResult.model_validate(result))
    except ValueError as invalid:  # pydantic's ValidationError
        return invalid


def review_hint(tool: str, key: str) -> str:
    """What a human reads of a call waiting for approval: the proxy's log (its stderr, the
    client's server log), never the tool result the model reads."""
    return (f"toolguard: {tool} waits for a human's approval; approve it at a terminal with "
            f"`toolguard approve {key}` (needs a shared store: Redis or a SQLite file)")


class HaltError(Exception):
    """A halt as the JSON-RPC error the client gets.

    Attributes:
        code: :data:`HALT_ERROR_CODE`. message: says why, and that a new session starts a new
            task. data: ``{"kind", "task_id", "tool", "reason"}``.
    """

    def __init__(self, halt: Halt) -> None:
        self.code = HALT_ERROR_CODE
        self.message = (f"toolguard halted this task: {halt}. The agent must stop here; a new "
                        "session starts a new task.")
        self.data = {"kind": type(halt).__name__, "task_id": halt.task_id, "tool": halt.tool,
                     "reason": str(halt)}
        super().__init__(self.message)

    def error(self) -> dict[str, Any]:
        """The JSON-RPC ``error`` object."""
        return {"code": self.code, "message": self.message, "data": self.data}


def to_result(outcome: ToolResult,
               tool_error: Mapping[str, Any] | None = None) -> Mapping[str, Any]:
    """The ``CallToolResult`` (JSON) for the client from the guard's
    :class:`~toolguard.ToolResult`.

    Args:
        outcome: what the guard returned.
        tool_error: the tool's own error result, when it ran and answered ``isError``.
    """
    if outcome.executed and tool_error is not None:
        return _with_notice(tool_error, outcome.notice)
    if isinstance(outcome.value, Mapping) and outcome.decision in (
            Decision.ALLOW, Decision.WARN, Decision.CACHED):
        return _with_notice(outcome.value, outcome.notice)
    text = outcome.content if isinstance(outcome.content, str) else str(outcome.content)
    return error_result(text)


def _with_notice(result: Mapping[str, Any], notice: str | None) -> Mapping[str, Any]:
    if not notice:
        return result
    content = result.get("content")
    blocks = list(content) if isinstance(content, list) else []
    return {**result, "content": [*blocks, {"type": "text", "text": f"[toolguard] {notice}"}]}


def error_result(text: str) -> dict[str, Any]:
    """A ``CallToolResult`` (JSON) with ``isError: true`` and one text block."""
    return {"content": [{"type": "text", "text": text}], "isError": True}


def report_of(result: Any, exc: BaseException | None
              ) -> tuple[Mapping[str, Any] | None, Exception | None, str | None]:
    """How :meth:`~toolguard.adapters.mcp.GuardMiddleware.end_json` reports a call
    (``result``: the tool's ``CallToolResult`` as JSON; ``exc``: why there is none).

    Returns:
        ``(the tool's own error result, the failure to report, the reason of an unknown
        outcome)``; neither of the last two: a success.
    """
    if exc is None:
        failure = tool_failure(result)
        return (None if failure is None else result), failure, None
    if isinstance(exc, OutcomeUnknown):
        return None, None, str(exc)
    if isinstance(exc, Exception):
        return None, exc, None
    return None, None, (f"the call was interrupted ({type(exc).__name__}) after it was "
                        "sent to the tool")
