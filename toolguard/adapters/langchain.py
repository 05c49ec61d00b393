"""LangChain v1 / LangGraph: guard every tool call an agent makes (extra
``agent-toolguard[langchain]``).

::

    agent = create_agent(model, tools, middleware=[ToolGuardMiddleware(guard)],
                         checkpointer=InMemorySaver())
    tool_node = ToolNode(guard_tools(guard, tools))      # a hand-built graph instead

How the guard's decisions reach LangChain:

- **allow / warn**: the guard calls LangChain's own ``handler(request)`` (or, for
  :func:`guard_tools`, the tool's ``invoke``), so argument validation, injected arguments
  (``ToolRuntime``, ``InjectedState``), inner middleware and callbacks run as usual; a warn
  notice is appended to the ``ToolMessage`` content. A tool that raises, or returns an error
  ``ToolMessage``, is recorded as a failed call and the model gets an error ``ToolMessage``.
- **cached**: a ``ToolMessage`` with the stored result and the notice that it already ran.
- **block / invalid / review**: ``ToolMessage(status="error")`` with the guard's text.
- **halt**: with ``on_halt="raise"`` (default) the :class:`toolguard.Halt` leaves
  ``agent.invoke`` / ``ainvoke``. It is raised as its own class (``tg.RepeatedToolCalls``,
  ...) mixed with :class:`ToolGuardHalt`, a LangGraph ``GraphBubbleUp``: LangGraph, the
  ``ToolNode`` and ``ToolRetryMiddleware`` re-raise that class instead of retrying it or
  turning it into a message (``.halt`` is the original). The checkpoint keeps the thread's
  history; after ``task.resume()``, ``agent.invoke(None, config)`` continues the run from the
  call that halted. With ``on_halt="end"`` the model gets the halt as an error
  ``ToolMessage``, and the run then ends with an ``AIMessage`` that names the halt (also at
  the start of every later run of the task, until ``task.resume()``).
- **approval**: a call the guard would send to review (``@requires_approval``, or a retry of
  a call whose outcome is unknown) calls LangGraph's ``interrupt()`` with ``{"tool", "args"
  (redacted), "idempotency_key", "reason", "task_id"}``, so ``agent.invoke`` returns with
  ``"__interrupt__"``; ``agent.invoke(Command(resume=answer), config)`` answers it:
  ``"approve"``, ``"reject"``, ``"defer"`` or ``{"decision": ..., "reason": ...}``. The re-run
  of the call that LangGraph makes on resume is the same attempt, not a repeat (see
  ``resumed`` in :meth:`toolguard.Task.call`). This needs a checkpointer, and a human who
  answers after ``approval.timeout_s`` finds the task halted (``ApprovalTimedOut``): raise it
  for slow reviewers.
- **tokens**: the middleware's ``after_model`` reports each model response's
  ``usage_metadata`` to ``task.record_usage``, so ``budget.max_tokens`` applies, with the
  model's name from its ``response_metadata`` (which prices it for ``max_cost_usd``).

The task id is the run's ``config["configurable"]["thread_id"]``, or ``task_id=``.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal, cast

from cachetools import LRUCache

from toolguard import (
    ApprovalDecision,
    ApprovalRequest,
    Decision,
    Guard,
    Halt,
    Task,
    ToolResult,
    defer,
)

from ._common import Tasks, approval_payload, as_decision, framework_halt, known, require

require("langchain", "langchain.agents", "langgraph.types")

from langchain.agents.middleware import (  # noqa: E402 - after the check that names the extra
    AgentMiddleware,
    AgentState,
    hook_config,
)
from langchain.agents.middleware.types import ToolCallRequest  # noqa: E402
from langchain_core.messages import AIMessage, ToolMessage  # noqa: E402
from langchain_core.runnables import RunnableConfig  # noqa: E402
from langchain_core.tools import BaseTool  # noqa: E402
from langgraph.errors import GraphBubbleUp, GraphInterrupt  # noqa: E402
from langgraph.runtime import Runtime  # noqa: E402
from langgraph.types import Command, interrupt  # noqa: E402
from pydantic import ConfigDict  # noqa: E402

__all__ = ["ToolGuardHalt", "ToolGuardMiddleware", "guard_tools"]

OnHalt = Literal["raise", "end"]
_Output = ToolMessage | Command[Any]


class ToolGuardHalt(GraphBubbleUp):
    """The LangGraph side of a halt raised out of an agent run: every halt the adapters
    raise is an instance of its own :class:`toolguard.Halt` subclass *and* of this class, a
    ``GraphBubbleUp``, which LangGraph propagates instead of handling.

    Attributes:
        halt: the original :class:`toolguard.Halt`.
    """

    halt: Halt


class _ToolFailed(Exception):
    """The tool answered with an error ``ToolMessage``: recorded as a failed call."""


class _Run:
    """One call's framework execution: what the guard runs on allow/warn, and the
    framework's own output, kept to hand back unchanged."""

    def __init__(self, tool_call_id: str | None) -> None:
        self.tool_call_id = tool_call_id
        self.output: Any = None
        self.ran = False
        self.bubbled: GraphBubbleUp | None = None  # the tool's own interrupt() or Command

    def sync(self, execute: Callable[[], Any]) -> Callable[[Any], Any]:
        def go(_: Any) -> Any:
            try:
                output = execute()
            except GraphBubbleUp as exc:  # recorded as a failed call, then re-raised
                self.bubbled = exc
                raise
            return self.record(output)

        return go

    def async_(self, execute: Callable[[], Awaitable[Any]]) -> Callable[[Any], Awaitable[Any]]:
        async def go(_: Any) -> Any:
            try:
                output = await execute()
            except GraphBubbleUp as exc:
                self.bubbled = exc
                raise
            return self.record(output)

        return go

    def record(self, output: Any) -> Any:
        self.output, self.ran = output, True
        message = _message_in(output, self.tool_call_id)
        if message is None:
            return output
        if message.status == "error":
            raise _ToolFailed(_text(message.content))
        return message.content

    def reply(self, result: ToolResult, tool_call: Mapping[str, Any]) -> Any:
        """What the framework gets for ``result``."""
        if self.tool_call_id is None:  # a direct tool.invoke(args), not a tool call
            return result.value if result.executed and not result.is_error else result.content
        if result.executed and self.ran:
            if result.is_error or not result.notice:
                return self.output
            return _with_notice(self.output, self.tool_call_id, result)
        ok = result.decision is Decision.CACHED or (result.executed and not result.is_error)
        return ToolMessage(content=result.content, tool_call_id=self.tool_call_id,
                           name=tool_call.get("name"), status="success" if ok else "error")


class _Interrupt:
    """The approver of one call: LangGraph's ``interrupt()``. On the first pass it raises
    ``GraphInterrupt``, which is kept (the guard records the call as pending) and re-raised
    once the guard has returned; on resume it returns the human's answer."""

    def __init__(self) -> None:
        self.pending: GraphInterrupt | None = None

    def ask(self, request: ApprovalRequest) -> ApprovalDecision:
        try:
            answer = interrupt(approval_payload(request))
        except GraphInterrupt as exc:
            self.pending = exc
            return defer("waiting for a human: the run is interrupted until it is resumed")
        return as_decision(answer)

    async def aask(self, request: ApprovalRequest) -> ApprovalDecision:
        return self.ask(request)

    def raise_pending(self) -> None:
        if self.pending is not None:
            raise self.pending


class _Dispatch:
    """Shared by the middleware and :func:`guard_tools`: one tool call through the guard."""

    def __init__(self, guard: Guard, task_id: str | None, on_halt: OnHalt) -> None:
        if on_halt not in ("raise", "end"):
            raise ValueError(f"on_halt must be 'raise' or 'end', got {on_halt!r}")
        self.tasks = Tasks(guard)
        self.task_id = task_id
        self.on_halt = on_halt
        self.halts: LRUCache[str, str] = LRUCache(1024)  # task id -> its last halt ("end")
        self._lock = threading.Lock()

    def task(self, thread_id: Any) -> Task:
        task_id = self.task_id or thread_id
        if not task_id:
            raise ValueError(
                "toolguard needs a task id: run the agent with config={'configurable': "
                "{'thread_id': ...}} (and a checkpointer), or pass task_id=")
        return self.tasks(str(task_id))

    def task_of(self, config: RunnableConfig | None) -> Task:
        return self.task(((config or {}).get("configurable") or {}).get("thread_id"))

    def known(self, tool: BaseTool | None) -> None:
        if tool is not None:
            known(self.tasks.guard, tool.name, tool)

    def call(self, config: RunnableConfig | None, tool_call: Mapping[str, Any],
             execute: Callable[[], Any]) -> Any:
        task = self.task_of(config)
        run, asker = _Run(tool_call.get("id")), _Interrupt()
        try:
            result = task.call(tool_call["name"], tool_call.get("args") or {},
                               run=run.sync(execute), approver=asker.ask, resumed=True)
        except Halt as halt:
            return self.halted(task, tool_call, halt)
        return self.reply(run, asker, result, tool_call)

    async def acall(self, config: RunnableConfig | None, tool_call: Mapping[str, Any],
                    execute: Callable[[], Awaitable[Any]]) -> Any:
        task = self.task_of(config)
        run, asker = _Run(tool_call.get("id")), _Interrupt()
        try:
            result = await task.acall(tool_call["name"], tool_call.get("args") or {},
                                      run=run.async_(execute), approver=asker.aask,
                                      resumed=True)
        except Halt as halt:
            return self.halted(task, tool_call, halt)
        return self.reply(run, asker, result, tool_call)

    @staticmethod
    def reply(run: _Run, asker: _Interrupt, result: ToolResult,
              tool_call: Mapping[str, Any]) -> Any:
        """LangGraph's control flow first (the approval's interrupt, the tool's own), then
        the message for ``result``."""
        asker.raise_pending()
        if run.bubbled is not None:
            raise run.bubbled
        return run.reply(result, tool_call)

    def halted(self, task: Task, tool_call: Mapping[str, Any], halt: Halt) -> ToolMessage:
        if self.on_halt == "raise" or tool_call.get("id") is None:
            raise framework_halt(halt, ToolGuardHalt) from halt
        self.remember(task, halt)
        return ToolMessage(content=f"[toolguard] Halted: {halt}", tool_call_id=tool_call["id"],
                           name=tool_call.get("name"), status="error")

    def remember(self, task: Task, halt: Halt) -> None:
        with self._lock:
            self.halts[task.task_id] = str(halt)

    def end_if_halted(self, task: Task) -> dict[str, Any] | None:
        """``on_halt="end"``: a halted task's run ends with an AI message naming the halt."""
        if self.on_halt != "end" or not task.halted:
            return None
        with self._lock:
            why = self.halts.get(task.task_id, f"task {task.task_id!r} is halted")
        return {"messages": [AIMessage(content=f"[toolguard] Stopped: {why}. The task stays "
                                               "halted until the host calls task.resume().")],
                "jump_to": "end"}

    def usage(self, state: Mapping[str, Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Report the last model response's tokens (``usage_metadata``) to the budget."""
        messages = state.get("messages") or []
        last = messages[-1] if messages else None
        usage = getattr(last, "usage_metadata", None) if isinstance(last, AIMessage) else None
        if not usage:
            return None
        info = runtime.execution_info
        task = self.task(info.thread_id if info is not None else None)
        try:
            # the model's name: model_name (OpenAI) or model (Anthropic)
            metadata = getattr(last, "response_metadata", None) or {}
            model = metadata.get("model_name") or metadata.get("model")
            task.record_usage(int(usage.get("input_tokens") or 0),
                              int(usage.get("output_tokens") or 0),
                              model=model if isinstance(model, str) and model else None)
        except Halt as halt:
            if self.on_halt == "raise":
                raise framework_halt(halt, ToolGuardHalt) from halt
            self.remember(task, halt)
            return self.end_if_halted(task)
        return None


class ToolGuardMiddleware(AgentMiddleware[AgentState[Any], Any, Any]):
    """Guards every tool call of a LangChain v1 agent (``create_agent(..., middleware=[...])``).

    Args:
        guard: the :class:`toolguard.Guard` that knows the agent's tools (``Guard(tools=
            tools)`` takes LangChain tools as they are).
        task_id: the task id for every run; default the run's ``thread_id``.
        on_halt: ``"raise"`` (default: the halt leaves ``agent.invoke``) or ``"end"`` (the
            run ends with an AI message naming it). See the module docstring.

    Raises:
        ValueError: ``on_halt`` is neither; at run time, no task id (no ``thread_id`` and no
            ``task_id``).

    Thread-safe and asyncio-safe: parallel tool calls of one model message (LangGraph runs
    each in its own task) go through the guard concurrently, and identical ones run once.
    """

    def __init__(self, guard: Guard, *, task_id: str | None = None,
                 on_halt: OnHalt = "raise") -> None:
        super().__init__()
        self._dispatch = _Dispatch(guard, task_id, on_halt)

    def task(self, task_id: str) -> Task:
        """The handle this middleware uses for ``task_id`` (``task.resume()``,
        ``task.history``, ``task.usage``)."""
        return self._dispatch.task(task_id)

    def wrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], _Output]
    ) -> _Output:
        """Guard one tool call; ``handler`` runs it when the guard allows."""
        self._dispatch.known(request.tool)
        out: _Output = self._dispatch.call(request.runtime.config, request.tool_call,
                                           lambda: handler(request))
        return out

    async def awrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], Awaitable[_Output]]
    ) -> _Output:
        """:meth:`wrap_tool_call` for ``ainvoke`` / ``astream``."""
        self._dispatch.known(request.tool)
        out: _Output = await self._dispatch.acall(request.runtime.config, request.tool_call,
                                                  lambda: handler(request))
        return out

    @hook_config(can_jump_to=["end"])
    def before_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        """``on_halt="end"``: end the run of a halted task before the model is called."""
        info = runtime.execution_info
        if self._dispatch.on_halt != "end":
            return None
        return self._dispatch.end_if_halted(
            self._dispatch.task(info.thread_id if info is not None else None))

    @hook_config(can_jump_to=["end"])
    async def abefore_model(self, state: AgentState[Any], runtime: Runtime[Any]
                            ) -> dict[str, Any] | None:
        """:meth:`before_model` for async runs."""
        return self.before_model(state, runtime)

    @hook_config(can_jump_to=["end"])
    def after_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Report the model response's token usage to the task's budget."""
        return self._dispatch.usage(state, runtime)

    @hook_config(can_jump_to=["end"])
    async def aafter_model(self, state: AgentState[Any], runtime: Runtime[Any]
                           ) -> dict[str, Any] | None:
        """:meth:`after_model` for async runs."""
        return self._dispatch.usage(state, runtime)


class _GuardedTool(BaseTool):
    """A LangChain tool whose calls go through the guard (from :func:`guard_tools`)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    inner: BaseTool
    dispatch: Any
    model_args: frozenset[str]

    @property
    def func(self) -> Any:  # ToolNode reads injected parameters from the function too
        return getattr(self.inner, "func", None)

    @property
    def coroutine(self) -> Any:
        return getattr(self.inner, "coroutine", None)

    def _call(self, tool_input: Any) -> dict[str, Any]:
        if isinstance(tool_input, Mapping) and tool_input.get("type") == "tool_call":
            args = tool_input.get("args") or {}
            call = dict(tool_input)
        else:
            args = tool_input if isinstance(tool_input, Mapping) else {}
            call = {"name": self.name, "id": None}
        # the model's arguments only: the values ToolNode injects are not part of the call
        call["name"] = self.name
        call["args"] = {k: v for k, v in args.items() if k in self.model_args}
        return call

    def invoke(self, input: Any, config: RunnableConfig | None = None,  # noqa: A002 - as BaseTool's
               **kwargs: Any) -> Any:
        """Guard the call; the wrapped tool's ``invoke`` runs it when the guard allows."""
        return self.dispatch.call(config, self._call(input),
                                  lambda: self.inner.invoke(input, config, **kwargs))

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None,  # noqa: A002
                      **kwargs: Any) -> Any:
        """:meth:`invoke` for async graphs."""
        return await self.dispatch.acall(config, self._call(input),
                                         lambda: self.inner.ainvoke(input, config, **kwargs))

    def _run(self, *args: Any, **kwargs: Any) -> Any:  # pragma: no cover - invoke is overridden
        raise NotImplementedError("a guarded tool runs through invoke()")


def _model_args(tool: BaseTool) -> frozenset[str]:
    schema = tool.tool_call_schema  # what the model sees: no injected parameters
    if isinstance(schema, dict):
        return frozenset(schema.get("properties", {}))
    fields = cast("Mapping[str, Any]",
                  getattr(schema, "model_fields", None) or getattr(schema, "__fields__", {}))
    return frozenset(fields)  # pydantic 2 or 1 models


def guard_tools(guard: Guard, tools: Sequence[BaseTool], *, task_id: str | None = None
                ) -> list[BaseTool]:
    """LangChain tools whose calls go through ``guard``, for a hand-built graph's
    ``ToolNode`` (``create_agent`` users add :class:`ToolGuardMiddleware` instead).

    Each keeps the name, description, argument schema (injected parameters included) and
    ``return_direct`` of the tool it wraps; decisions, halts and approval behave as for the
    middleware with ``on_halt="raise"`` (token usage is not seen: there is no model hook).

    Args:
        guard: the guard. tools: LangChain ``BaseTool`` objects (``@tool`` functions).
        task_id: the task id; default the run's ``thread_id``.

    Returns:
        The guarded tools, in order.

    Raises:
        TypeError: an item is not a ``BaseTool``.
    """
    dispatch = _Dispatch(guard, task_id, "raise")
    guarded: list[BaseTool] = []
    for tool in tools:
        if not isinstance(tool, BaseTool):
            raise TypeError(f"guard_tools takes LangChain BaseTool objects (@tool), got "
                            f"{type(tool).__name__}")
        dispatch.known(tool)
        guarded.append(_GuardedTool(
            name=tool.name, description=tool.description, args_schema=tool.args_schema,
            return_direct=tool.return_direct, response_format=tool.response_format,
            inner=tool, dispatch=dispatch, model_args=_model_args(tool)))
    return guarded


def _message_in(output: Any, tool_call_id: str | None) -> ToolMessage | None:
    """The ``ToolMessage`` answering ``tool_call_id`` in a tool's output."""
    if isinstance(output, ToolMessage):
        return output
    if isinstance(output, Command) and isinstance(output.update, Mapping):
        for message in output.update.get("messages") or ():
            if isinstance(message, ToolMessage) and message.tool_call_id == tool_call_id:
                return message
    return None


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return " ".join(str(b.get("text", "")) if isinstance(b, Mapping) else str(b)
                    for b in content)


def _with_notice(output: Any, tool_call_id: str, result: ToolResult) -> Any:
    """The framework's output with the guard's notice added to its ``ToolMessage``."""
    def noticed(message: ToolMessage) -> ToolMessage:
        content = message.content
        if isinstance(content, list):  # content blocks: the notice is one more text block
            content = [*content, {"type": "text", "text": f"[toolguard] {result.notice}"}]
        else:
            content = result.content  # the text with the notice appended, as task.call does
        return message.model_copy(update={"content": content})

    if isinstance(output, ToolMessage):
        return noticed(output)
    if isinstance(output, Command) and isinstance(output.update, Mapping):
        messages = [noticed(m) if isinstance(m, ToolMessage) and m.tool_call_id == tool_call_id
                    else m for m in output.update.get("messages") or ()]
        return Command(graph=output.graph, update={**output.update, "messages": messages},
                       resume=output.resume, goto=output.goto)
    return output
