"""AutoGen (agentchat 0.7): guard every tool call of an ``AssistantAgent`` with a workbench
(extra ``agent-toolguard[autogen]``).

::

    guarded = ToolGuard(guard, task_id="t-42")
    agent = AssistantAgent("agent", model_client, workbench=guarded.workbench(tools),
                           model_context=guarded.context(), max_tool_iterations=10)

:meth:`ToolGuard.workbench` wraps the tools (AutoGen tools, plain functions, or a workbench
such as ``McpWorkbench``) in an AutoGen ``Workbench``, AutoGen's own extension point for
the tools an agent sees and calls: each call goes through :meth:`toolguard.Task.acall`, with
``run=`` set to the inner workbench's ``call_tool``, so AutoGen still validates the
arguments and runs the tool.

- **allow**: the inner workbench's ``ToolResult``, unchanged. **warn**: the same, with the
  notice appended as one more text block.
- **cached**: the tool does not run; the model reads the stored result and the notice as a
  *successful* result. **block / invalid / review**: the tool does not run; the model reads
  the guard's text as an error result.
- **approval**: AutoGen 0.7 has no confirmation step for tool calls (its ``approval_func``
  belongs to ``CodeExecutorAgent``'s code), so approval is toolguard's: ``approver=`` asks
  your human in the loop, as for ``task.call``. Without one, a call that needs approval is
  blocked (fail closed) and never runs.
- **halt**: AutoGen runs a round's tool calls in ``asyncio.gather`` and waits for an
  end-of-round signal that an exception out of a workbench skips, so a workbench that raises
  leaves ``agent.run()`` waiting forever. The workbench therefore never raises: the halted
  call answers with an error result, and :meth:`ToolGuard.context` (the agent's
  ``model_context``, which AutoGen writes on the agent's own task once every call of the
  round has finished) raises the :class:`toolguard.Halt` (``RepeatedToolCalls``, ...) as
  soon as that round's results are added. It leaves ``agent.run()`` / ``run_stream()``
  unchanged, whatever ``max_tool_iterations`` and ``reflect_on_tool_use`` are, before the
  model is asked again. Resume with ``guarded.task.resume()`` and the next
  ``agent.run(task=...)``: the context keeps the history, the halted call's result included.
- **a guard error** (a store that is down, under ``fail_closed``) leaves ``agent.run()`` the
  same way. **A workbench without its context** could not stop the run on a halt: a call
  made before the guard's context has received a message is refused (not run; the model
  reads why).
- **task id**: ``task_id=``; the store is the guard's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from toolguard import Decision, Guard, Halt, Task
from toolguard import ToolResult as GuardResult
from toolguard.engine._approval import Approver

from ._common import HaltOnce, known, require

require("autogen", "autogen_agentchat", "autogen_core")

from autogen_core import CancellationToken  # noqa: E402 - after the check that names the extra
from autogen_core.model_context import (  # noqa: E402
    ChatCompletionContext,
    UnboundedChatCompletionContext,
)
from autogen_core.models import LLMMessage  # noqa: E402
from autogen_core.tools import (  # noqa: E402
    BaseTool,
    FunctionTool,
    StaticWorkbench,
    TextResultContent,
    ToolResult,
    ToolSchema,
    Workbench,
)

__all__ = ["GuardedContext", "GuardedWorkbench", "ToolGuard"]

_NO_CONTEXT = (
    "[toolguard] Blocked, not executed: the agent's model_context is not this guard's "
    "context (model_context=guarded.context()), so a halt could not stop the run.")


class ToolFailed(Exception):
    """The inner workbench answered with an error result, with this text."""


class ToolGuard(HaltOnce):
    """One task's guard for AutoGen: makes the workbench and the model context an agent
    needs (see the module docstring).

    Args:
        guard: the :class:`toolguard.Guard` (tools by name: the policy's ``[tools.X]`` or
            ``Guard(tools=[...])``; a tool it does not know is registered with the schema
            the workbench lists for it).
        task_id: the task id of every call.
        approver: asked for calls that need approval (as for ``task.call``).

    Attributes:
        task: the :class:`toolguard.Task` (``task.resume()`` after a halt).
        halt: the halt the context has not raised yet (``None`` when there is none).

    Asyncio-safe: the parallel calls of one model response go through the guard
    concurrently, and identical writes run once.
    """

    def __init__(self, guard: Guard, *, task_id: str, approver: Approver | None = None
                 ) -> None:
        if not isinstance(task_id, str) or not task_id:
            raise ValueError(f"task_id must be a non-empty string, got {task_id!r}")
        self.guard = guard
        self.task: Task = guard.task(task_id)
        self.approver = approver
        self.halt: Halt | None = None
        self.failure: Exception | None = None  # a guard error (store, policy) not yet raised
        self.attached = False  # the context has received a message: a halt can stop the run

    def check(self) -> None:
        """Raise what stopped the guard since the last check, once: a guard error (the
        store, the policy) or the halt.

        Raises:
            Halt: the guard halted the task. Exception: the guard could not decide a call.
        """
        failure, self.failure = self.failure, None
        if failure is not None:
            raise failure
        super().check()

    def workbench(self, tools: Workbench | Sequence[BaseTool[Any, Any] | Callable[..., Any]]
                  ) -> GuardedWorkbench:
        """The guarded workbench of ``tools``: a ``Workbench`` (e.g. ``McpWorkbench``), or
        AutoGen tools and plain functions (wrapped in ``FunctionTool`` with their
        docstring, as ``AssistantAgent(tools=...)`` does)."""
        if isinstance(tools, Workbench):
            return GuardedWorkbench(self, tools)
        return GuardedWorkbench(self, StaticWorkbench([
            tool if isinstance(tool, BaseTool) else FunctionTool(tool, tool.__doc__ or "")
            for tool in tools]))

    def context(self, inner: ChatCompletionContext | None = None) -> GuardedContext:
        """The agent's ``model_context``: ``inner`` (default an
        ``UnboundedChatCompletionContext``) that raises the guard's halt."""
        return GuardedContext(self, inner or UnboundedChatCompletionContext())


class GuardedWorkbench(Workbench):
    """An AutoGen workbench that sends every call to ``inner`` through the guard
    (:meth:`ToolGuard.workbench` makes it). ``start``, ``stop``, ``reset`` and the state are
    the inner workbench's."""

    def __init__(self, guarded: ToolGuard, inner: Workbench) -> None:
        self._guarded = guarded
        self.inner = inner
        self._schemas: dict[str, ToolSchema] = {}

    async def list_tools(self) -> list[ToolSchema]:
        """The inner workbench's tools, unchanged."""
        tools = await self.inner.list_tools()
        self._schemas = {tool["name"]: tool for tool in tools}
        return tools

    async def call_tool(self, name: str, arguments: Mapping[str, Any] | None = None,
                        cancellation_token: CancellationToken | None = None,
                        call_id: str | None = None) -> ToolResult:
        """One call through the guard; never raises (see the module docstring)."""
        if not self._guarded.attached:
            return _text(name, _NO_CONTEXT, is_error=True)
        if name not in self._schemas:
            await self.list_tools()
        schema = self._schemas.get(name)
        ran: list[ToolResult] = []

        async def run(args: dict[str, Any]) -> str:
            output = await self.inner.call_tool(name, args, cancellation_token, call_id)
            ran.append(output)
            text = output.to_text(replace_image="[image]")
            if output.is_error:
                raise ToolFailed(text)
            return text

        try:
            if schema is not None:
                known(self._guarded.guard, name, name, args_schema=schema.get("parameters"),
                      description=schema.get("description", ""))
            result = await self._guarded.task.acall(name, dict(arguments or {}), run=run,
                                                    approver=self._guarded.approver)
        except Halt as halt:
            self._guarded.halt = halt
            return _text(name, f"[toolguard] Halted: {halt}", is_error=True)
        except Exception as exc:  # noqa: BLE001 - raised by the context, not into gather
            self._guarded.failure = exc
            return _text(name, f"[toolguard] Not executed: {type(exc).__name__}: {exc}",
                         is_error=True)
        return _reply(name, result, ran[0] if ran else None)

    async def start(self) -> None:
        """Start the inner workbench."""
        await self.inner.start()

    async def stop(self) -> None:
        """Stop the inner workbench."""
        await self.inner.stop()

    async def reset(self) -> None:
        """Reset the inner workbench (the guard's task is not reset: ``task.resume()``)."""
        await self.inner.reset()

    async def save_state(self) -> Mapping[str, Any]:
        """The inner workbench's state."""
        return await self.inner.save_state()

    async def load_state(self, state: Mapping[str, Any]) -> None:
        """Load the inner workbench's state."""
        await self.inner.load_state(state)


class GuardedContext(ChatCompletionContext):
    """An agent's model context that raises the guard's halt once the halted round's
    results are added (:meth:`ToolGuard.context` makes it); the messages are ``inner``'s."""

    def __init__(self, guarded: ToolGuard, inner: ChatCompletionContext) -> None:
        super().__init__()
        self._guarded = guarded
        self.inner = inner

    async def add_message(self, message: LLMMessage) -> None:
        """Add ``message`` to the inner context, then raise the halt, if any.

        Raises:
            Halt: the guard halted the task during the round just added.
        """
        self._guarded.attached = True
        await self.inner.add_message(message)
        self._guarded.check()

    async def get_messages(self) -> list[LLMMessage]:
        """The inner context's messages."""
        return await self.inner.get_messages()

    async def clear(self) -> None:
        """Clear the inner context."""
        await self.inner.clear()

    async def save_state(self) -> Mapping[str, Any]:
        """The inner context's state."""
        return await self.inner.save_state()

    async def load_state(self, state: Mapping[str, Any]) -> None:
        """Load the inner context's state."""
        await self.inner.load_state(state)


def _text(name: str, text: str, *, is_error: bool) -> ToolResult:
    return ToolResult(name=name, result=[TextResultContent(content=text)], is_error=is_error)


def _reply(name: str, result: GuardResult, output: ToolResult | None) -> ToolResult:
    """What the agent gets for ``result``: the tool's own output when it ran (a warn's
    notice appended), else the guard's text."""
    if result.executed and output is not None:
        if result.is_error or result.notice is None:
            return output
        return output.model_copy(update={
            "result": [*output.result, TextResultContent(content=result.notice)]})
    ok = result.decision is Decision.CACHED or (result.executed and not result.is_error)
    return _text(name, str(result.content), is_error=not ok)
