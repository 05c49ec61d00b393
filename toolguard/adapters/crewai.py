"""CrewAI: guard every tool call of every crew and agent with CrewAI's own tool call hooks
(extra ``agent-toolguard[crewai]``).

::

    guard_hooks = ToolGuard(guard)  # registers the before and after tool call hooks
    crew.kickoff()                  # raises tg.Halt

:class:`ToolGuard` registers a before and an after tool call hook (the functions behind
CrewAI's ``@before_tool_call`` / ``@after_tool_call``) on the two-step call: the before hook
runs :meth:`toolguard.Task.begin`, CrewAI runs the tool, and the after hook records its
result. CrewAI swallows any exception a hook raises except its own ``HookAborted`` (and a
before hook's ``HookAborted`` only blocks the call), so the adapter blocks a call by the
before hook's documented return value ``False`` and writes what the model reads by the after
hook's documented return value (a string replaces the result; the after hook runs on a
blocked call too).

- **allow**: the tool runs, its result unchanged. **warn**: it runs; the notice is appended.
- **cached / block / invalid**: the tool does not run (the before hook returns ``False``); the
  model reads the stored result and the notice (cached) or the guard's text instead of
  CrewAI's "Tool execution blocked by hook".
- **a failed call**: a tool that raised (CrewAI's "Error executing tool: ...") or returned a
  CrewAI ``ToolFailure``, or a call CrewAI's text tool format refused to repeat ("I tried
  reusing the same input"), is recorded as a failure, not as a result.
- **approval**: a call in review asks through CrewAI's own
  ``ToolCallHookContext.request_human_input`` (the console): answer ``approve`` or
  ``reject`` (anything else defers, and the call does not run). Pass ``approver=`` (as for
  ``task.call``) to decide elsewhere, e.g. a chat bot or a queue.
- **halt**: the :class:`toolguard.Halt` (``RepeatedToolCalls``, ...) leaves
  ``crew.kickoff()`` / ``agent.kickoff()`` as its own class, also a CrewAI ``HookAborted``:
  the halted call does not run, and the after hook raises the halt as the ``HookAborted``
  that CrewAI documents as the way a hook stops the run. Resume with
  ``guard_hooks.task(str(crew.id)).resume()`` and ``crew.kickoff()`` again.
- **the guard fails** (a store that fails closed): the call does not run, and the after
  hook stops the run with a ``HookAborted`` whose ``__cause__`` is the guard's error.
- **task id**: ``task_id=``, else the crew's ``id``, else the agent's ``id``; the store is
  the guard's.
- **scope**: CrewAI's hooks are process-wide: they guard every crew and agent until
  :meth:`ToolGuard.close` (or the end of a ``with ToolGuard(guard):`` block).
"""

from __future__ import annotations

import threading
from typing import Any

from cachetools import LRUCache

from toolguard import ApprovalDecision, ApprovalRequest, Guard, Halt, Task, ToolResult
from toolguard.engine._approval import Approver
from toolguard.engine._pending import PendingCall

from ._common import Tasks, approval_payload, as_decision, framework_halt, known, require

require("crewai", "crewai")

from crewai.hooks import (  # noqa: E402 - after the check that names the extra
    HookAborted,
    ToolCallHookContext,
    register_after_tool_call_hook,
    register_before_tool_call_hook,
    unregister_after_tool_call_hook,
    unregister_before_tool_call_hook,
)
from crewai.tools.tool_failure import ToolFailure  # noqa: E402
from crewai.utilities.i18n import I18N_DEFAULT  # noqa: E402

__all__ = ["ToolGuard"]

# what CrewAI's native tool calling gives the model (and the hooks) for a tool that raised
_RAISED = "Error executing tool: "


class ToolFailed(Exception):
    """The tool raised, or reported a CrewAI ``ToolFailure``, with this text."""


class ToolGuard:
    """CrewAI tool call hooks that send every tool call through ``guard``.

    Args:
        guard: the :class:`toolguard.Guard` (tools by name: the policy's ``[tools.X]`` or
            ``Guard(tools=[...])``; a tool it does not know is registered by name, with
            the CrewAI tool's argument schema).
        task_id: the task id; default the crew's ``id``, else the agent's ``id``.
        approver: decides calls that need approval (as for ``task.call``); default the
            console, through CrewAI's ``request_human_input``.

    Thread-safe: calls CrewAI runs in parallel go through the guard concurrently, and
    identical writes run once.
    """

    def __init__(self, guard: Guard, *, task_id: str | None = None,
                 approver: Approver | None = None) -> None:
        self._tasks = Tasks(guard)
        self._task_id = task_id
        self._approver = approver
        # by id() of the tool_input dict CrewAI hands both hooks of one call (kept alive
        # here, so the id is not reused while the entry lives)
        self._calls: LRUCache[
            int, tuple[dict[str, Any], PendingCall | ToolResult | Exception]] = LRUCache(4096)
        self._lock = threading.Lock()
        self._known: set[str] = set()  # tool names the guard knows
        register_before_tool_call_hook(self.before_tool_call)
        register_after_tool_call_hook(self.after_tool_call)

    def task(self, task_id: str) -> Task:
        """The task of ``task_id`` (``task.resume()``, ``history``)."""
        return self._tasks(task_id)

    def close(self) -> None:
        """Unregister the hooks: tool calls are no longer guarded."""
        unregister_before_tool_call_hook(self.before_tool_call)
        unregister_after_tool_call_hook(self.after_tool_call)

    def __enter__(self) -> ToolGuard:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def before_tool_call(self, context: ToolCallHookContext) -> bool | None:
        """CrewAI's before tool call hook: ``None`` lets CrewAI run the call, ``False``
        blocks it (the after hook then writes what the model reads, or stops the run).

        Never raises: CrewAI would swallow the exception and run the tool. A halt, or the
        guard's own failure (a store that fails closed), blocks the call and is raised by
        the after hook."""
        try:
            return self._before(context)
        except Exception as exc:  # noqa: BLE001 - raised by the after hook, not lost
            self._keep(context, exc)
            return False

    def _before(self, context: ToolCallHookContext) -> bool | None:
        name = context.tool_name
        if name not in self._known:  # the JSON schema costs more than the guard's call
            tool = context.tool
            schema = getattr(tool, "args_schema", None)
            known(self._tasks.guard, name, name,
                  args_schema=schema.model_json_schema() if schema is not None else None,
                  description=str(getattr(tool, "description", "") or ""))
            self._known.add(name)
        task = self._tasks(self._task_id or _task_of(context))
        approver = self._approver or _console(context)
        pending = task.begin(name, dict(context.tool_input), approver=approver)
        if pending.result is None:
            self._keep(context, pending)
            return None
        self._keep(context, pending.result)
        return False

    def after_tool_call(self, context: ToolCallHookContext) -> str | None:
        """CrewAI's after tool call hook: records the tool's result; returns what the model
        reads instead (``None``: the result unchanged).

        Raises:
            Halt: the guard halted the task (also a CrewAI ``HookAborted``).
            HookAborted: the guard itself failed (its ``__cause__``, e.g. a
                :class:`toolguard.StoreError`): the run stops, fail closed.
        """
        with self._lock:
            entry = self._calls.pop(id(context.tool_input), None)
        if entry is None or entry[0] is not context.tool_input:
            return None
        kept = entry[1]
        if isinstance(kept, ToolResult):
            return str(kept.content)
        try:
            recorded = _record(kept, context)
        except Halt as halt:
            raise framework_halt(halt, HookAborted) from None
        except Exception as exc:  # CrewAI would swallow it and go on unguarded
            raise HookAborted(f"toolguard failed closed: {type(exc).__name__}: {exc}",
                              source="toolguard") from exc
        return None if recorded.notice is None else str(recorded.content)

    def _keep(self, context: ToolCallHookContext,
              kept: PendingCall | ToolResult | Exception) -> None:
        with self._lock:
            self._calls[id(context.tool_input)] = (context.tool_input, kept)


def _record(kept: PendingCall | Exception, context: ToolCallHookContext) -> ToolResult:
    """Report what the tool did to its pending call (or raise what the before hook kept)."""
    if isinstance(kept, Exception):
        raise kept
    failure = _failure(context)
    if failure is not None:
        return kept.fail(ToolFailed(failure))
    return kept.finish(context.tool_result)


def _task_of(context: ToolCallHookContext) -> str:
    for owner in (context.crew, context.agent):
        if owner is not None and getattr(owner, "id", None) is not None:
            return str(owner.id)
    return "crewai"


def _console(context: ToolCallHookContext) -> Approver:
    """Ask the person at the console, through CrewAI's own ``request_human_input``."""
    def ask(request: ApprovalRequest) -> ApprovalDecision:
        payload = approval_payload(request)
        answer = context.request_human_input(
            prompt=(f"toolguard: {payload['tool']} {payload['args']} needs approval "
                    f"({payload['reason']})"),
            default_message="Type approve or reject:")
        return as_decision(answer.strip().lower())
    return ask


def _failure(context: ToolCallHookContext) -> str | None:
    """The text of a failed call, or ``None`` when the tool returned a result."""
    raw = context.raw_tool_result
    if isinstance(raw, ToolFailure):
        return raw.message
    if isinstance(raw, str) and raw == I18N_DEFAULT.errors("task_repeated_usage"):
        # the text tool format refuses the previous call's input again: the tool did not run
        return "CrewAI refused to run the previous call's input again"
    if isinstance(raw, str) and raw == context.tool_result and raw.startswith(_RAISED):
        return raw[len(_RAISED):]
    return None
