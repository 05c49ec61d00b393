"""The context variables of a guarded task: the task whose ``with`` block is active (direct
calls of decorated tools go through it) and the idempotency key of the call whose tool is
running (:func:`toolguard.current_idempotency_key`); and the guards that refuse a direct
call outside any task (``require_task``). A leaf module: the decorators read it without
importing the engine, which sets it; they see the task through :class:`ActiveTask`.
"""

from __future__ import annotations

import contextvars
import weakref
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

from toolguard._errors import ToolGuardError

if TYPE_CHECKING:
    from ._spec import ToolSpec

__all__ = ["CURRENT_KEY", "CURRENT_TASK", "REQUIRING", "ActiveTask", "refuse_outside_task"]


class ActiveTask(Protocol):
    """What a decorated tool called directly sees of the task whose ``with`` block is active
    (a :class:`~toolguard.Task`; a protocol, so that the tools never import the engine)."""

    def _direct_call(self, spec: ToolSpec, func: Callable[..., Any], args: tuple[Any, ...],
                     kwargs: dict[str, Any]) -> Any: ...

    async def _direct_call_async(self, spec: ToolSpec, func: Callable[..., Awaitable[Any]],
                                 args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any: ...


CURRENT_TASK: contextvars.ContextVar[ActiveTask | None] = contextvars.ContextVar(
    "toolguard_task", default=None
)
# the running call's idempotency key and the id of the execution it belongs to
CURRENT_KEY: contextvars.ContextVar[tuple[str, str] | None] = contextvars.ContextVar(
    "toolguard_idempotency_key", default=None
)

# require_task: the decorated functions of guards that require a task, by function (weakly:
# a guard or function that goes away leaves nothing behind). Read on direct calls outside
# any task only, so the common path pays nothing. Filled by ``_integration.require_task_for``.
REQUIRING: weakref.WeakKeyDictionary[Callable[..., Any], weakref.WeakSet[Any]] = (
    weakref.WeakKeyDictionary())


def refuse_outside_task(spec: ToolSpec, func: Callable[..., Any]) -> None:
    """Raise if a guard that registered ``func`` requires a task (``require_task``).

    Raises:
        ToolGuardError: naming the tool and what to do.
    """
    guards = REQUIRING.get(func)
    if guards and any(g._config.require_task for g in list(guards)):
        raise ToolGuardError(
            f"{spec.name} was called outside a task, and the guard requires one "
            "(require_task = true): run it inside `with guard.task(task_id):`, through "
            "task.call / task.acall, or through a toolguard adapter. A framework that "
            "registered the raw function (pydantic-ai tool_plain, an MCP @server.tool()) "
            "calls it unguarded otherwise.")
