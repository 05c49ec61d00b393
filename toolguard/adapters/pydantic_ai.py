"""pydantic-ai: guard every tool call of an agent with one capability (extra
``agent-toolguard[pydantic-ai]``).

::

    agent = Agent(model, capabilities=[ToolGuard(guard)])  # or agent.run(..., capabilities=)

:class:`ToolGuard` implements ``wrap_tool_execute``: pydantic-ai validates the arguments
(a ``RunContext`` parameter is the framework's, never an argument, so it is not part of the
hash), then the guard decides on them and, on allow/warn, calls pydantic-ai's own ``handler``.

- **allow / warn / cached**: the tool's return value (on warn and cached, the guard's text:
  the value with the notice appended, or the stored result with it).
- **block / invalid / a failed call**: raised as pydantic-ai's ``ToolFailed`` with the
  guard's text: the model sees a failed tool result, and the tool's retry budget is not used.
  A ``ModelRetry`` (and the other control-flow exceptions) a tool raises passes through
  unchanged, after the guard has recorded the failed call.
- **halt**: the :class:`toolguard.Halt` propagates out of ``agent.run`` / ``run_sync``
  unchanged. Resume with ``task.resume()`` and a new run with ``message_history=
  result.all_messages()`` of the last good run (pydantic-ai keeps no half-finished turn).
- **approval**: a call in review raises ``ApprovalRequired(metadata={"toolguard_key": key})``,
  so the run ends with ``DeferredToolRequests`` (add it to the agent's ``output_type``); run
  again with ``deferred_tool_results=DeferredToolResults(approvals={call_id: True | False})``.
  An approval is the guard's approval of that call, and the re-run is the same attempt, not
  a repeat; a denial rejects it in the guard too (seen before the next model request).
- **tokens**: each model response's usage is reported to ``task.record_usage``, with the
  response's ``model_name`` (which prices it for ``max_cost_usd``).
- **task id**: ``task_id=``, else the run's ``conversation_id`` (shared by runs that continue
  one ``message_history``).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from cachetools import LRUCache

from toolguard import ApprovalDecision, ApprovalRequest, Decision, Guard, Task, approve, defer

from ._common import Tasks, known, require

require("pydantic-ai", "pydantic_ai")

from pydantic_ai import RunContext  # noqa: E402 - after the check that names the extra
from pydantic_ai.capabilities import AbstractCapability  # noqa: E402
from pydantic_ai.capabilities.abstract import WrapToolExecuteHandler  # noqa: E402
from pydantic_ai.exceptions import (  # noqa: E402
    ApprovalRequired,
    CallDeferred,
    ModelRetry,
    ToolFailed,
)
from pydantic_ai.messages import (  # noqa: E402
    ModelRequest,
    ModelResponse,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models import ModelRequestContext  # noqa: E402
from pydantic_ai.tools import ToolDefinition  # noqa: E402

__all__ = ["ToolGuard"]

_PASS_THROUGH = (ModelRetry, CallDeferred, ApprovalRequired, ToolFailed)  # pydantic-ai's own


def _approved(_: ApprovalRequest) -> ApprovalDecision:
    return approve()


def _deferred(_: ApprovalRequest) -> ApprovalDecision:
    return defer("waiting for the host's DeferredToolResults")


@dataclass(init=False)
class ToolGuard(AbstractCapability[Any]):
    """A pydantic-ai capability that sends every tool call through ``guard``.

    Args:
        guard: the :class:`toolguard.Guard` (tools by name: ``Guard(tools=[...])`` or the
            policy's ``[tools.X]``).
        task_id: the task id for every run; default the run's ``conversation_id``.

    Thread-safe and asyncio-safe: parallel tool calls of one model response go through the
    guard concurrently, and identical ones run once.
    """

    # one capability is one guard's: identity, not the dataclass fields it inherits
    __eq__ = object.__eq__
    __hash__ = object.__hash__

    def __init__(self, guard: Guard, *, task_id: str | None = None) -> None:
        self._tasks = Tasks(guard)
        self._task_id = task_id
        # tool call id -> idempotency key, while its approval is deferred (bounded: a host
        # may never answer)
        self._asked: LRUCache[str, str] = LRUCache(4096)
        self._lock = threading.Lock()

    def task(self, task_id: str) -> Task:
        """The handle this capability uses for ``task_id`` (``task.resume()``, ``history``)."""
        return self._tasks(task_id)

    def _task(self, ctx: RunContext[Any]) -> Task:
        task_id = self._task_id or ctx.conversation_id or ctx.run_id
        if not task_id:
            raise ValueError("toolguard needs a task id: pass ToolGuard(guard, task_id=...)")
        return self._tasks(task_id)

    async def wrap_tool_execute(self, ctx: RunContext[Any], *, call: ToolCallPart,
                                tool_def: ToolDefinition, args: dict[str, Any],
                                handler: WrapToolExecuteHandler) -> Any:
        """Guard one tool call; ``handler`` runs it when the guard allows."""
        task = self._task(ctx)
        known(self._tasks.guard, call.tool_name, call.tool_name,
              args_schema=tool_def.parameters_json_schema, description=tool_def.description or "")
        raised: list[BaseException] = []

        async def run(_: Any) -> Any:
            try:
                return await handler(args)
            except _PASS_THROUGH as exc:  # recorded as a failed call, then re-raised
                raised.append(exc)
                raise

        approved = ctx.tool_call_approved
        # the guard judges what the model sent; pydantic-ai's validated values run it
        result = await task.acall(call.tool_name, call.args_as_dict(), run=run,
                                  approver=_approved if approved else _deferred,
                                  resumed=approved)
        if raised:
            raise raised[0]
        with self._lock:
            if result.decision is Decision.REVIEW:
                self._asked[call.tool_call_id] = result.idempotency_key
            else:
                self._asked.pop(call.tool_call_id, None)
        if result.decision is Decision.REVIEW:
            raise ApprovalRequired(metadata={"toolguard_key": result.idempotency_key})
        if result.is_error:
            raise ToolFailed(str(result.content))
        return result.value if result.notice is None else result.content

    async def before_model_request(self, ctx: RunContext[Any],
                                   request_context: ModelRequestContext) -> ModelRequestContext:
        """A call the host denied (``DeferredToolResults``) is rejected in the guard too."""
        if self._asked and ctx.messages and isinstance(ctx.messages[-1], ModelRequest):
            for part in ctx.messages[-1].parts:
                if isinstance(part, ToolReturnPart) and part.outcome == "denied":
                    with self._lock:
                        key = self._asked.pop(part.tool_call_id, None)
                    if key:
                        self._task(ctx).reject(key, str(part.content))
        return request_context

    async def after_model_request(self, ctx: RunContext[Any], *,
                                  request_context: ModelRequestContext,
                                  response: ModelResponse) -> ModelResponse:
        """Report the response's tokens, with its model's name, to the task's budgets
        (``budget.max_tokens``, ``max_cost_usd``)."""
        usage = response.usage
        if usage.input_tokens or usage.output_tokens:
            self._task(ctx).record_usage(usage.input_tokens, usage.output_tokens,
                                         model=response.model_name or None)
        return response
