"""Direct calls of decorated tools: ``refund(...)`` inside ``with guard.task(id):`` goes
through that task's pipeline; outside a task (or a task whose guard does not have the tool)
it is a plain call.

The decorators (``_decorators``) wrap a tool with :func:`direct_call`; the engine sets
:data:`CURRENT_TASK` in ``Task.__enter__``. This module imports neither: the task is reached
through the context variable, so there is no import circle between the decorators and the
engine.
"""

from __future__ import annotations

import contextvars
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ._errors import ToolBlocked
from ._types import ALLOW, CACHED, WARN

if TYPE_CHECKING:
    from ._decorators import ToolSpec
    from ._engine import Task, _Entry
    from ._results import ToolResult

__all__ = ["CURRENT_TASK", "direct_call", "direct_call_async"]

CURRENT_TASK: contextvars.ContextVar[Task | None] = contextvars.ContextVar(
    "toolguard_task", default=None
)


def _bind(task: Task, spec: ToolSpec, args: tuple[Any, ...], kwargs: dict[str, Any]
          ) -> tuple[_Entry | None, dict[str, Any]]:
    entry = task.guard._config.entries.get(spec.name)
    if entry is None or entry.signature is None:
        return None, {}
    if entry.spec is not spec:
        # a method registered bound (tools=[obj.method]): guarded only for that object
        func = entry.spec.func
        if getattr(func, "__func__", None) is not spec.func or not args \
                or args[0] is not getattr(func, "__self__", None):
            return None, {}
        args = args[1:]
    bound = entry.signature.bind(*args, **kwargs)
    return entry, dict(bound.arguments)


def _direct_result(result: ToolResult, exc: BaseException | None) -> Any:
    if exc is not None:
        raise exc
    if result.decision in (ALLOW, WARN, CACHED):
        return result.value
    raise ToolBlocked(result)


def direct_call(spec: ToolSpec, func: Callable[..., Any], args: tuple[Any, ...],
                kwargs: dict[str, Any]) -> Any:
    """Run a decorated sync tool called directly: guarded inside an active task that has it
    registered, plain otherwise. Returns the tool's value (also for ``cached``).

    Raises:
        ToolBlocked: block / review / invalid. Halt: the task halts. Whatever the tool raised.
    """
    task = CURRENT_TASK.get()
    if task is None:
        return func(*args, **kwargs)
    entry, bound = _bind(task, spec, args, kwargs)
    if entry is None:
        return func(*args, **kwargs)
    result, exc = task._run_sync(spec.name, bound, lambda: func(*args, **kwargs))
    return _direct_result(result, exc)


async def direct_call_async(spec: ToolSpec, func: Callable[..., Awaitable[Any]],
                            args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """:func:`direct_call` for ``async def`` tools."""
    task = CURRENT_TASK.get()
    if task is None:
        return await func(*args, **kwargs)
    entry, bound = _bind(task, spec, args, kwargs)
    if entry is None:
        return await func(*args, **kwargs)
    result, exc = await task._run_async(spec.name, bound, lambda: func(*args, **kwargs))
    return _direct_result(result, exc)
