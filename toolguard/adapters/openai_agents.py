"""OpenAI Agents SDK: guard every function tool an agent calls (extra
``agent-toolguard[openai-agents]``).

::

    agent = Agent(name="support", tools=guard_tools(guard, [refund, lookup_order]))
    result = await Runner.run(agent, "...", context={"toolguard_task_id": "t-42"})

:func:`guard_tools` returns ``FunctionTool`` objects with the names, descriptions and JSON
schemas (``strict_json_schema``) of the tools it wraps; each one's ``on_invoke_tool``
dispatches through ``task.acall(name, arguments, run=<the tool's own on_invoke_tool>)``.

- **allow / warn / cached / block / invalid / review**: the tool output the model gets is the
  guard's ``ToolResult.content`` (the tool's output, with the notice on warn; the stored
  result on cached; the guard's text otherwise). A plain function is wrapped with
  ``function_tool(fn, failure_error_function=None)``, so its exceptions reach the guard and
  count as failed calls; a ``FunctionTool`` you built keeps its own ``failure_error_function``
  (its error text then counts as a result: build it with ``failure_error_function=None`` to
  let the guard see failures).
- **halt**: the SDK lets only its own ``AgentsException`` out of ``Runner.run`` unwrapped
  (anything else a tool raises becomes a ``UserError``), so the :class:`toolguard.Halt` is
  raised as its own class (``tg.RepeatedToolCalls``, ...) mixed with
  :class:`ToolGuardHalt`, an ``AgentsException``: ``except tg.Halt`` catches it, ``.halt`` is
  the original, and ``run_data`` holds the SDK's record of the run so far.
- **approval**: a tool the guard's policy marks ``requires_approval`` also gets the SDK's
  ``needs_approval`` (on top of its own), so the run stops with ``result.interruptions``;
  ``state = result.to_state(); state.approve(item)`` (or ``state.reject(item)``) and
  ``Runner.run(agent, state)`` continue. An approval given there is the guard's approval of
  that call (one approval, one execution); a rejection never reaches the guard, since the
  tool does not run. Other reviews (a retry of a call whose outcome is unknown) go to the
  guard's own approver.
- **task id**: ``task_id=``, else the run context's ``"toolguard_task_id"`` (a key of a
  mapping context, or an attribute of a context object).
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from toolguard import ApprovalDecision, ApprovalRequest, Guard, Halt, Task, approve

from ._common import Tasks, framework_halt, known, require

require("openai-agents", "agents")

from agents import (  # noqa: E402 - after the check that names the extra
    AgentsException,
    FunctionTool,
    RunContextWrapper,
    UserError,
    function_tool,
)
from agents.tool_context import ToolContext  # noqa: E402

__all__ = ["TASK_ID_KEY", "ToolGuardHalt", "guard_tools"]

TASK_ID_KEY = "toolguard_task_id"
"""The run-context key (or attribute) that names the task."""


class ToolGuardHalt(AgentsException):
    """The Agents SDK side of a halt raised out of ``Runner.run``: every halt this adapter
    raises is an instance of its own :class:`toolguard.Halt` subclass *and* of this class.

    Attributes:
        halt: the original :class:`toolguard.Halt`.
    """

    halt: Halt


def _sdk_approved(_: ApprovalRequest) -> ApprovalDecision:
    return approve()


class _Guarded:
    """The guard side of one wrapped tool."""

    def __init__(self, tasks: Tasks, task_id: str | None, tool: FunctionTool) -> None:
        self.tasks = tasks
        self.task_id = task_id
        self.tool = tool
        self.own_approval = tool.needs_approval

    def task(self, context: RunContextWrapper[Any]) -> Task:
        task_id = self.task_id
        if task_id is None:
            ctx = context.context
            task_id = (ctx.get(TASK_ID_KEY) if isinstance(ctx, Mapping)
                       else getattr(ctx, TASK_ID_KEY, None))
        if not task_id:
            raise UserError(f"toolguard needs a task id for {self.tool.name}: pass task_id= to "
                            f"guard_tools, or run with context={{{TASK_ID_KEY!r}: ...}}")
        return self.tasks(str(task_id))

    async def needs_approval(self, context: RunContextWrapper[Any], params: dict[str, Any],
                             call_id: str) -> bool:
        own = self.own_approval
        if callable(own):
            answer: Any = own(context, params, call_id)
            if inspect.isawaitable(answer):
                answer = await answer
            if answer:
                return True
        elif own:
            return True
        try:
            gated = self.tasks.guard.settings(self.tool.name).requires_approval
        except KeyError:  # not registered: the policy's default effect, no approval
            return False
        # a halted task raises at once instead of asking a human first
        return gated and not self.task(context).halted

    async def invoke(self, ctx: ToolContext[Any], arguments: str) -> Any:
        task = self.task(ctx)
        approved = ctx.is_tool_approved(self.tool.name, ctx.tool_call_id)
        try:
            result = await task.acall(
                self.tool.name, arguments,
                run=lambda _: self.tool.on_invoke_tool(ctx, arguments),
                approver=_sdk_approved if approved else None)
        except Halt as halt:
            raise framework_halt(halt, ToolGuardHalt) from halt
        return result.content


def guard_tools(guard: Guard, tools: Sequence[FunctionTool | Callable[..., Any]], *,
                task_id: str | None = None) -> list[FunctionTool]:
    """Agents SDK function tools whose calls go through ``guard``.

    Args:
        guard: the guard. tools: ``FunctionTool`` objects (``@function_tool``) or plain
            functions (sync or async; wrapped with ``function_tool(fn,
            failure_error_function=None)``).
        task_id: the task id; default the run context's ``"toolguard_task_id"``.

    Returns:
        New ``FunctionTool`` objects, in order; the originals are left as they were. (The
        SDK types ``Agent.tools`` as ``list[Tool]``; under mypy pass ``[*guard_tools(...)]``.)

    Raises:
        TypeError: an item is neither a ``FunctionTool`` nor a callable.
    """
    tasks = Tasks(guard)
    guarded: list[FunctionTool] = []
    for item in tools:
        if isinstance(item, FunctionTool):
            tool = item
        elif callable(item):
            tool = function_tool(item, failure_error_function=None)
        else:
            raise TypeError(f"guard_tools takes FunctionTool objects or functions, got "
                            f"{type(item).__name__}")
        known(guard, tool.name, tool)
        side = _Guarded(tasks, task_id, tool)
        wrapped = copy.copy(tool)  # the SDK's own copy: names, schema, settings, bindings
        wrapped.on_invoke_tool = side.invoke
        wrapped.needs_approval = side.needs_approval
        guarded.append(wrapped)
    return guarded
