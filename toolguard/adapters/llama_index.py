"""LlamaIndex: guard every tool call of a ``FunctionAgent`` / ``ReActAgent`` /
``AgentWorkflow`` by wrapping its tools (extra ``agent-toolguard[llama-index]``).

::

    guard_tools = ToolGuard(guard)
    agent = FunctionAgent(tools=guard_tools.wrap(tools), llm=llm)
    async for event in guard_tools.stream(handler := agent.run(user_msg=...)):  # raises tg.Halt
        ...

LlamaIndex's agents have no public hook around a tool call; their public extension point is
the tool itself. :meth:`ToolGuard.wrap` returns each tool as a LlamaIndex ``FunctionTool``
with the same name, description and argument schema, on the two-step call: it runs
:meth:`toolguard.Task.abegin`, then the original tool's ``acall`` (its own validation and
``Context`` injection), then records the result. The run's own workflow events carry an
approval and a halt, as LlamaIndex documents human in the loop (``ctx.wait_for_event``).

- **what is recorded**: the ``ToolOutput``'s content (the text the model reads), never the
  envelope around it (the agent's ``ToolCallResult`` carries a ``tool_id`` that differs on
  every call).
- **allow**: the tool's output, unchanged. **warn**: its content with the notice appended.
- **cached / block / invalid**: the tool does not run; the model reads the stored result and
  the notice (cached), or the guard's text as an error output (``is_error``). A tool that
  raises is recorded as a failed call; the model reads the error, as LlamaIndex reports it.
- **approval**: a call in review pauses the step with ``ctx.wait_for_event``: the stream
  shows an :class:`ApprovalRequired` (a LlamaIndex ``InputRequiredEvent``; ``payload``: tool,
  redacted arguments, idempotency key, reason). Answer with
  ``handler.ctx.send_event(event.answer("approve" | "reject"))`` (a ``HumanResponseEvent``
  for that call only): LlamaIndex replays the step and the guard approves or rejects the
  call; the replay is the same attempt, not a repeat.
- **halt**: the step pauses too (no later model call happens); the stream shows a
  :class:`Halted` event, and :meth:`ToolGuard.stream` raises the :class:`toolguard.Halt`
  (``RepeatedToolCalls``, ...) itself. The run stays paused: :meth:`ToolGuard.resume` lifts
  the halt and sends :class:`Resumed`, the halted call goes through the guard again (a new
  turn), and the same handler streams on. Or ``await handler.cancel_run()``.
- **CodeActAgent**: its generated code calls the tools outside any step the guard sees; it
  refuses tools that take the ``Context`` (as the guarded ones do): its run fails with
  LlamaIndex's ``ValueError`` before any tool runs, never a silent bypass.
- **task id**: ``task_id=``, else one per workflow ``Context`` (kept in ``ctx.store``, so a
  run continued with ``agent.run(..., ctx=ctx)`` is the same task); the store is the guard's.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from cachetools import LRUCache

from toolguard import ApprovalDecision, ApprovalRequest, Guard, Halt, Task, defer
from toolguard.engine._pending import PendingCall

from ._common import Tasks, approval_payload, as_decision, known, require

require("llama-index", "llama_index.core")

from llama_index.core.tools import AsyncBaseTool, BaseTool, FunctionTool  # noqa: E402
from llama_index.core.tools.types import ToolOutput, adapt_to_async_tool  # noqa: E402
from llama_index.core.workflow import (  # noqa: E402
    Context,
    Event,
    HumanResponseEvent,
    InputRequiredEvent,
)
from workflows.handler import WorkflowHandler  # noqa: E402

__all__ = ["ApprovalRequired", "Halted", "Resumed", "ToolGuard"]

_TASK_KEY = "toolguard_task_id"  # ctx.store: the task id of the workflow's Context
_ASKED_KEY = "toolguard_asked"  # ctx.store: {call: waiter id} of calls waiting for a reviewer
_HALTED_KEY = "toolguard_halted"  # ctx.store: {call: waiter id} of calls paused by a halt


class ApprovalRequired(InputRequiredEvent):
    """A call waits for a reviewer (a LlamaIndex ``InputRequiredEvent`` on the stream).

    Attributes:
        prefix: a one-line question for a human. payload: tool, redacted arguments,
            idempotency key, reason, task id (JSON-ready). toolguard_call: which call.
    """

    prefix: str
    payload: dict[str, Any]
    toolguard_call: str

    def answer(self, decision: str | bool, reason: str = "") -> HumanResponseEvent:
        """The ``HumanResponseEvent`` that answers this call (and no other) with ``decision``:
        ``"approve"`` / ``"reject"`` / ``"defer"``, or ``True`` / ``False``; ``reason`` is
        recorded with a rejection. Anything else defers the call, saying why."""
        if isinstance(decision, bool):
            decision = "approve" if decision else "reject"
        return HumanResponseEvent(response=decision, toolguard_call=self.toolguard_call,
                                  reason=reason)


class Halted(Event):
    """The guard halted the task: the run is paused (no later model call happens).

    Attributes:
        task_id: the task. kind: the halt's class name. reason: the halt's reason.
    """

    task_id: str
    kind: str
    reason: str


class Resumed(Event):
    """Sent by :meth:`ToolGuard.resume`: the paused calls of ``task_id`` go on."""

    task_id: str


class ToolFailed(Exception):
    """The tool returned an error output (``is_error``), with this text."""


class ToolGuard:
    """Wraps a LlamaIndex agent's tools so that every call goes through ``guard``.

    Args:
        guard: the :class:`toolguard.Guard` (tools by name: the policy's ``[tools.X]`` or
            ``Guard(tools=[...])``; a tool it does not know is registered by name, with the
            tool's own argument schema).
        task_id: the task id; default one per workflow ``Context``.

    Asyncio-safe: parallel tool calls of one model response go through the guard
    concurrently, and identical writes run once.
    """

    def __init__(self, guard: Guard, *, task_id: str | None = None) -> None:
        self._tasks = Tasks(guard)
        self._task_id = task_id
        self._halts: LRUCache[str, Halt] = LRUCache(1024)  # by task id, until streamed

    def task(self, task_id: str) -> Task:
        """The task of ``task_id`` (``task.resume()``, ``history``)."""
        return self._tasks(task_id)

    def wrap(self, tools: Sequence[BaseTool | Callable[..., Any]]
             ) -> list[BaseTool | Callable[..., Any]]:
        """``tools`` (LlamaIndex tools, or plain functions as the agents take them), each as a
        guarded ``FunctionTool`` of the same name, description and schema (typed as the
        agents' ``tools=`` parameter)."""
        return [self._wrap(tool if isinstance(tool, BaseTool)
                           else FunctionTool.from_defaults(tool)) for tool in tools]

    async def stream(self, handler: WorkflowHandler) -> AsyncIterator[Event]:
        """``handler.stream_events()``, raising a halt where the stream shows it.

        Raises:
            Halt: the guard halted the task: the run is paused (:meth:`resume` continues
                it, then stream again).
        """
        async for event in handler.stream_events():
            if isinstance(event, Halted):
                halt = self._halts.pop(event.task_id, None)
                raise halt if halt is not None else Halt(event.reason, task_id=event.task_id,
                                                         tool="")
            yield event

    def resume(self, handler: WorkflowHandler, halt: Halt) -> None:
        """Lift ``halt`` (``task.resume()``: a new turn) and let the paused run go on."""
        self.task(halt.task_id).resume()
        handler.ctx.send_event(Resumed(task_id=halt.task_id))

    def _wrap(self, tool: BaseTool) -> FunctionTool:
        inner = adapt_to_async_tool(tool)
        meta = tool.metadata
        name = meta.get_name()
        schema = meta.get_parameters_dict() if meta.fn_schema is not None else None
        known(self._tasks.guard, name, name, args_schema=schema,
              description=meta.description or "")
        guard_tools = self

        async def call(ctx: Context, **kwargs: Any) -> ToolOutput:
            return await guard_tools._call(ctx, tool, inner, name, kwargs)

        call.__annotations__["ctx"] = Context  # the class, as LlamaIndex's check compares it
        # the callback hands LlamaIndex the ToolOutput as built here (its documented
        # override), rather than one wrapped around it that drops is_error
        return FunctionTool(async_fn=call, metadata=meta, callback=_same, async_callback=_asame)

    async def _task(self, ctx: Context) -> Task:
        if self._task_id is not None:
            return self._tasks(self._task_id)
        task_id = await ctx.store.get(_TASK_KEY, default=None)
        if task_id is None:
            async with ctx.store.edit_state() as state:  # parallel first calls share one id
                task_id = state.get(_TASK_KEY) or f"llama-index-{uuid.uuid4().hex}"
                state[_TASK_KEY] = task_id
        return self._tasks(str(task_id))

    async def _call(self, ctx: Context, tool: BaseTool, inner: AsyncBaseTool,
                    name: str, kwargs: dict[str, Any]) -> ToolOutput:
        task = await self._task(ctx)
        key = f"{task.task_id}:{name}:{json.dumps(kwargs, sort_keys=True, default=str)}"
        halted = await _waiter(ctx, _HALTED_KEY, key)
        if halted is not None:  # the replay of a halted call: consume the Resumed event
            await ctx.wait_for_event(Resumed, waiter_id=halted,
                                     requirements={"task_id": task.task_id})
            await _put(ctx, _HALTED_KEY, key, None)
        waiter = await _waiter(ctx, _ASKED_KEY, key)
        response: HumanResponseEvent | None = None
        if waiter is not None:  # the replay of a call in review: the reviewer's answer
            response = await ctx.wait_for_event(HumanResponseEvent, waiter_id=waiter,
                                                requirements={"toolguard_call": waiter})
            await _put(ctx, _ASKED_KEY, key, None)
        asked: list[ApprovalRequest] = []

        def approver(request: ApprovalRequest) -> ApprovalDecision:
            if response is not None:
                return _decision(response)
            asked.append(request)
            return defer("waiting for the reviewer's HumanResponseEvent")

        try:
            pending = await task.abegin(name, kwargs, approver=approver,
                                        resumed=response is not None)
        except Halt as halt:
            return await self._pause(ctx, key, halt)
        result = pending.result
        if result is not None:
            if asked:
                await self._ask(ctx, key, asked[0])  # raises: the step waits
            return ToolOutput(content=str(result.content), tool_name=name,
                              raw_input=kwargs, raw_output=result.value,
                              is_error=result.is_error)
        return await self._run(ctx, tool, inner, name, pending, key)

    async def _run(self, ctx: Context, tool: BaseTool, inner: AsyncBaseTool,
                   name: str, pending: PendingCall, key: str) -> ToolOutput:
        args = dict(pending.args)
        if isinstance(tool, FunctionTool) and tool.requires_context and tool.ctx_param_name:
            args[tool.ctx_param_name] = ctx  # as the agent passes it (its _call_tool)
        try:
            output = await inner.acall(**args)
        except asyncio.CancelledError:
            await pending.aunknown("the call was cancelled")
            raise
        except Exception as exc:  # noqa: BLE001 - recorded as the failed call, as the agent does
            try:
                recorded = await pending.afail(exc)
            except Halt as halt:
                return await self._pause(ctx, key, halt)
            return ToolOutput(content=str(recorded.content), tool_name=name,
                              raw_input=pending.args, raw_output=str(exc), is_error=True,
                              exception=exc)
        try:
            if output.is_error:
                recorded = await pending.afail(ToolFailed(output.content))
            else:
                recorded = await pending.afinish(output.content)
        except Halt as halt:
            return await self._pause(ctx, key, halt)
        if recorded.notice is None:
            return output
        return ToolOutput(content=str(recorded.content), tool_name=name,
                          raw_input=pending.args, raw_output=output.raw_output,
                          is_error=recorded.is_error)

    async def _ask(self, ctx: Context, key: str, request: ApprovalRequest) -> None:
        waiter = f"toolguard-approval:{uuid.uuid4().hex}"
        await _put(ctx, _ASKED_KEY, key, waiter)
        await ctx.wait_for_event(
            HumanResponseEvent, waiter_id=waiter, requirements={"toolguard_call": waiter},
            waiter_event=ApprovalRequired(
                prefix=f"toolguard: approve {request.tool}? {request.reason}",
                payload=approval_payload(request), toolguard_call=waiter))

    async def _pause(self, ctx: Context, key: str, halt: Halt) -> ToolOutput:
        self._halts[halt.task_id] = halt
        waiter = f"toolguard-halt:{uuid.uuid4().hex}"
        await _put(ctx, _HALTED_KEY, key, waiter)
        await ctx.wait_for_event(
            Resumed, waiter_id=waiter, requirements={"task_id": halt.task_id},
            waiter_event=Halted(task_id=halt.task_id, kind=type(halt).__name__,
                                reason=str(halt)))
        raise AssertionError("unreachable: wait_for_event raises until the event arrives")


def _same(output: ToolOutput) -> ToolOutput:
    return output


async def _asame(output: ToolOutput) -> ToolOutput:
    return output


def _decision(response: HumanResponseEvent) -> ApprovalDecision:
    return as_decision({"decision": response.get("response"),
                        "reason": response.get("reason") or ""})


async def _waiter(ctx: Context, store_key: str, key: str) -> str | None:
    """The waiter id ``ctx.store[store_key]`` keeps for the call ``key``, if any."""
    entries = await ctx.store.get(store_key, default={})
    return None if entries.get(key) is None else str(entries[key])


async def _put(ctx: Context, store_key: str, key: str, waiter: str | None) -> None:
    """Keep (or, with ``None``, drop) the waiter id of the call ``key`` in the workflow's
    own state, which LlamaIndex serialises with the ``Context``."""
    async with ctx.store.edit_state() as state:
        entries = dict(state.get(store_key, default={}))
        if waiter is None:
            entries.pop(key, None)
        else:
            entries[key] = waiter
        state[store_key] = entries
