"""Google ADK: guard every tool call of every agent a runner runs with one plugin (extra
``agent-toolguard[google-adk]``).

::

    guard_plugin = ToolGuard(guard)
    runner = InMemoryRunner(app=App(name=..., root_agent=agent, plugins=[guard_plugin]))
    async for event in guard_plugin.run_async(runner, user_id=..., session_id=...,
                                              new_message=...):  # raises tg.Halt
        ...

:class:`ToolGuard` is an ADK ``BasePlugin`` on the two-step call: its
``before_tool_callback`` runs :meth:`toolguard.Task.abegin`, ADK runs the tool, and its
``after_tool_callback`` / ``on_tool_error_callback`` record what the tool returned or raised.

- **allow**: the tool runs, its response unchanged. **warn**: it runs; the response is
  ``{"result": <the value with the notice appended>}``.
- **cached / block / invalid**: the tool does not run; the model reads
  ``{"result": <the stored result and the notice>}`` (cached) or ``{"error": <the guard's
  text>}``. A tool that raises is recorded as a failed call, and the model reads
  ``{"error": ...}``.
- **approval**: a call in review asks through ADK's own ``tool_context.request_confirmation``
  (the payload: tool, redacted arguments, idempotency key, reason); the run pauses with an
  ``adk_request_confirmation`` function call. Answer it as ADK documents (a
  ``FunctionResponse`` of that name with ``{"confirmed": true | false}``): ADK runs the call
  again, and the guard approves or rejects it; the re-run is the same attempt, not a repeat.
- **halt**: the :class:`toolguard.Halt` (``RepeatedToolCalls``, ...) leaves
  :meth:`ToolGuard.run_async`. Driving ``runner.run_async`` yourself, it arrives as the
  ``RuntimeError`` ADK wraps every plugin exception in, the halt as its ``__cause__``;
  :meth:`ToolGuard.check` then raises the halt itself. Resume with
  ``guard_plugin.task(session_id).resume()`` and a new message in the same session.
- **task id**: the ADK session id (one task per session); the store is the guard's.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from cachetools import LRUCache

from toolguard import (
    ApprovalDecision,
    ApprovalRequest,
    Decision,
    Guard,
    Halt,
    Task,
    approve,
    defer,
)
from toolguard import reject as rejected
from toolguard.engine._pending import PendingCall

from ._common import HaltOnce, Tasks, approval_payload, known, require

require("google-adk", "google.adk")

from google.adk.events import Event  # noqa: E402 - after the check that names the extra
from google.adk.plugins import BasePlugin  # noqa: E402
from google.adk.runners import Runner  # noqa: E402
from google.adk.tools.base_tool import BaseTool  # noqa: E402
from google.adk.tools.tool_context import ToolContext  # noqa: E402

__all__ = ["ToolGuard"]

_ASKED = "This tool call requires confirmation, please approve or reject."


class ToolGuard(BasePlugin, HaltOnce):
    """An ADK plugin that sends every tool call of the runner's agents through ``guard``.

    Args:
        guard: the :class:`toolguard.Guard` (tools by name: the policy's ``[tools.X]`` or
            ``Guard(tools=[...])``; a tool it does not know is registered by name).
        name: the plugin's name in the runner.

    Attributes:
        halt: the halt not yet raised by :meth:`check` (``None`` when there is none).

    Asyncio-safe: parallel tool calls of one model response go through the guard
    concurrently, and identical writes run once.
    """

    def __init__(self, guard: Guard, *, name: str = "toolguard") -> None:
        super().__init__(name)
        self._tasks = Tasks(guard)
        self._pending: LRUCache[str, PendingCall] = LRUCache(4096)  # by function call id
        self.halt: Halt | None = None

    def task(self, session_id: str) -> Task:
        """The task of ADK session ``session_id`` (``task.resume()``, ``history``)."""
        return self._tasks(session_id)

    async def run_async(self, runner: Runner, **kwargs: Any) -> AsyncIterator[Event]:
        """``runner.run_async(**kwargs)``: its events, then :meth:`check`.

        Raises:
            Halt: the guard halted the agent during this run.
        """
        try:
            async for event in runner.run_async(**kwargs):
                yield event
        except RuntimeError as exc:
            if isinstance(exc.__cause__, Halt):
                self.halt = None
                raise exc.__cause__ from None
            raise
        self.check()

    async def before_tool_callback(self, *, tool: BaseTool, tool_args: dict[str, Any],
                                   tool_context: ToolContext) -> dict[str, Any] | None:
        """Decide the call: ``None`` lets ADK run it; a dict is what the model reads."""
        task = self._tasks(tool_context.session.id)
        known(self._tasks.guard, tool.name, tool.name, description=tool.description or "")
        confirmation = tool_context.tool_confirmation
        asked: list[ApprovalRequest] = []

        def approver(request: ApprovalRequest) -> ApprovalDecision:
            if confirmation is None:
                asked.append(request)
                return defer("waiting for the user's confirmation")
            if confirmation.confirmed:
                return approve()
            return rejected("rejected by the user")

        try:
            pending = await task.abegin(tool.name, tool_args, approver=approver,
                                        resumed=confirmation is not None)
        except Halt as halt:
            self.halt = halt
            raise
        result = pending.result
        if result is None:
            if tool_context.function_call_id:
                self._pending[tool_context.function_call_id] = pending
            return None
        if result.decision is Decision.REVIEW and asked:
            tool_context.request_confirmation(hint=f"toolguard: {asked[0].reason}",
                                              payload=approval_payload(asked[0]))
            tool_context.actions.skip_summarization = True  # a pause, not a result
            return {"error": _ASKED}
        return {"error" if result.is_error else "result": str(result.content)}

    async def after_tool_callback(self, *, tool: BaseTool, tool_args: dict[str, Any],
                                  tool_context: ToolContext, result: dict[str, Any]
                                  ) -> dict[str, Any] | None:
        """Record what the tool returned; a warn's notice is appended to it."""
        pending = self._take(tool_context)
        if pending is None:
            return None
        try:
            recorded = await pending.afinish(result)
        except Halt as halt:
            self.halt = halt
            raise
        if recorded.notice is None:
            return None
        return {"result": str(recorded.content)}

    async def on_tool_error_callback(self, *, tool: BaseTool, tool_args: dict[str, Any],
                                     tool_context: ToolContext, error: Exception
                                     ) -> dict[str, Any] | None:
        """Record a tool that raised (an error result the model reads), or was cancelled
        (an unknown outcome: ADK re-raises the cancellation)."""
        pending = self._take(tool_context)
        if pending is None:
            return None
        if not isinstance(error, Exception):  # cancelled: whether it ran is unknown
            await pending.aunknown(f"the call was cancelled ({type(error).__name__})")
            return None
        try:
            recorded = await pending.afail(error)
        except Halt as halt:
            self.halt = halt
            raise
        return {"error": str(recorded.content)}

    def _take(self, tool_context: ToolContext) -> PendingCall | None:
        call_id = tool_context.function_call_id
        return self._pending.pop(call_id, None) if call_id else None
