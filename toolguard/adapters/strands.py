"""Strands Agents: guard every tool call of an agent with one hook provider (extra
``agent-toolguard[strands]``).

::

    agent = Agent(model=..., tools=[...], hooks=[ToolGuard(guard)])  # raises tg.Halt

:class:`ToolGuard` is a Strands ``HookProvider`` on the two-step call:
``BeforeToolCallEvent`` runs :meth:`toolguard.Task.abegin`, Strands runs the tool, and
``AfterToolCallEvent`` records its result.

- **what is recorded**: the result's ``content`` blocks, never the ``ToolResult`` envelope,
  whose ``toolUseId`` differs on every call (taken as the result, every repeat would look
  like progress).
- **allow**: the tool runs, its result unchanged. **warn**: it runs; the notice is appended.
- **cached**: the tool does not run; the model reads the stored result and the notice as a
  *successful* tool result. **block / invalid**: the tool does not run; the model reads the
  guard's text as an error result.
- **approval**: a call in review raises a Strands interrupt named ``toolguard-approval``
  (its ``reason``: tool, redacted arguments, idempotency key, reason); the agent stops with
  ``stop_reason == "interrupt"``. Resume as Strands documents, ``agent([{"interruptResponse":
  {"interruptId": interrupt.id, "response": "approve" | "reject"}}])`` (or ``True`` /
  ``False``, or ``{"decision": ..., "reason": ...}``): the guard approves or rejects the call,
  and the re-run is the same attempt, not a repeat.
- **halt**: the :class:`toolguard.Halt` (``RepeatedToolCalls``, ...) leaves ``agent(...)`` /
  ``invoke_async`` as its own class, also an ``EventLoopException`` (which the event loop
  lets through unwrapped). Resume with ``guard_hooks.task(agent.agent_id).resume()`` and the
  next message.
- **task id**: ``task_id=``, else the agent's ``agent_id``; the store is the guard's.
"""

from __future__ import annotations

from typing import Any

from cachetools import LRUCache

from toolguard import ApprovalDecision, ApprovalRequest, Guard, Halt, Task, defer
from toolguard.engine._pending import PendingCall

from ._common import Tasks, approval_payload, as_decision, framework_halt, known, require

require("strands", "strands")

from strands.hooks import (  # noqa: E402 - after the check that names the extra
    AfterToolCallEvent,
    BeforeToolCallEvent,
    HookProvider,
    HookRegistry,
)
from strands.types.exceptions import EventLoopException  # noqa: E402

__all__ = ["APPROVAL", "ToolGuard"]

APPROVAL = "toolguard-approval"  # the name of the interrupt a call in review raises


class ToolFailed(Exception):
    """The tool's result had status ``error``, with this text."""


class ToolGuard(HookProvider):
    """A Strands hook provider that sends every tool call of the agent through ``guard``.

    Args:
        guard: the :class:`toolguard.Guard` (tools by name: the policy's ``[tools.X]`` or
            ``Guard(tools=[...])``; a tool it does not know is registered by name).
        task_id: the task id; default the agent's ``agent_id``.

    Asyncio-safe: the concurrent executor's parallel calls go through the guard
    concurrently, and identical writes run once.
    """

    def __init__(self, guard: Guard, *, task_id: str | None = None) -> None:
        self._tasks = Tasks(guard)
        self._task_id = task_id
        self._pending: LRUCache[str, PendingCall] = LRUCache(4096)  # by toolUseId
        self._answers: LRUCache[str, tuple[str, bool]] = LRUCache(4096)  # (text, is_error)

    def task(self, task_id: str) -> Task:
        """The task of ``task_id`` (``task.resume()``, ``history``)."""
        return self._tasks(task_id)

    def register_hooks(self, registry: HookRegistry, **kwargs: Any) -> None:
        """Strands' ``HookProvider``: the before and after tool call callbacks."""
        registry.add_callback(BeforeToolCallEvent, self._before)
        registry.add_callback(AfterToolCallEvent, self._after)

    async def _before(self, event: BeforeToolCallEvent) -> None:
        use = event.tool_use
        name, call_id = str(use["name"]), str(use["toolUseId"])
        task = self._tasks(self._task_id or event.agent.agent_id)
        spec: dict[str, Any] = (dict(event.selected_tool.tool_spec)
                                if event.selected_tool is not None else {})
        known(self._tasks.guard, name, name,
              args_schema=dict(spec.get("inputSchema") or {}).get("json"),
              description=str(spec.get("description", "")))
        answered = event.agent._interrupt_state.interrupts.get(event._interrupt_id(APPROVAL))
        response = None if answered is None else answered.response
        asked: list[ApprovalRequest] = []

        def approver(request: ApprovalRequest) -> ApprovalDecision:
            if response is not None:
                return as_decision(response)
            asked.append(request)
            return defer("waiting for the interrupt's response")

        try:
            pending = await task.abegin(name, use.get("input") or {}, approver=approver,
                                        resumed=response is not None)
        except Halt as halt:
            raise framework_halt(halt, EventLoopException) from None
        result = pending.result
        if result is None:
            self._pending[call_id] = pending
            return
        if asked:
            event.interrupt(APPROVAL, reason=approval_payload(asked[0]))  # raises
        self._answers[call_id] = (str(result.content), result.is_error)
        event.cancel_tool = str(result.content)

    async def _after(self, event: AfterToolCallEvent) -> None:
        call_id = str(event.tool_use["toolUseId"])
        answer = self._answers.pop(call_id, None)
        if answer is not None and event.cancel_message is not None:
            self._rewrite(event, *answer)
            return
        pending = self._pending.pop(call_id, None)
        if pending is None:
            return
        content = event.result.get("content", [])
        try:
            if event.exception is not None:
                recorded = await pending.afail(event.exception)
            elif event.result.get("status") == "error":
                recorded = await pending.afail(ToolFailed(_text(content)))
            else:
                recorded = await pending.afinish(_value(content))
        except Halt as halt:
            raise framework_halt(halt, EventLoopException) from None
        if recorded.notice is not None:
            self._rewrite(event, str(recorded.content), recorded.is_error)

    @staticmethod
    def _rewrite(event: AfterToolCallEvent, text: str, is_error: bool) -> None:
        event.result = {"toolUseId": event.tool_use["toolUseId"],
                        "status": "error" if is_error else "success",
                        "content": [{"text": text}]}


def _value(content: list[Any]) -> Any:
    """What the tool returned, without the envelope: its text, or the content blocks."""
    if all(isinstance(block, dict) and set(block) == {"text"} for block in content):
        return _text(content)
    return content


def _text(content: list[Any]) -> str:
    return "\n".join(str(block.get("text", block)) if isinstance(block, dict) else str(block)
                     for block in content)
