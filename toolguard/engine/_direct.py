"""Direct calls of decorated tools: ``refund(...)`` inside ``with guard.task(id):`` goes
through that task's call path (:func:`toolguard.engine._path.call_sync` /
:func:`~toolguard.engine._path.call_async`, reached by the decorators through
:data:`toolguard.tools._context.CURRENT_TASK` and ``Task._direct_call``); a task whose guard
does not have the tool runs it plainly."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from toolguard._errors import ToolBlocked
from toolguard._types import ALLOW, CACHED, WARN
from toolguard.tools._context import CURRENT_KEY
from toolguard.tools._frameworks import wrapped_arguments

from . import _path

if TYPE_CHECKING:
    from toolguard._results import ToolResult
    from toolguard.tools._decorators import ToolSpec

    from ._call import TaskState, _Entry

__all__ = ["direct_call", "direct_call_async"]

def _bind(task: TaskState, spec: ToolSpec, args: tuple[Any, ...], kwargs: dict[str, Any]
          ) -> tuple[_Entry | None, dict[str, Any]]:
    entry = task.guard._config.entries.get(spec.name)
    if entry is None or entry.signature is None:
        return None, {}
    if entry.spec is not spec:
        wrapped = wrapped_arguments(entry.spec, spec, args, kwargs)
        if wrapped is not None:  # a framework tool object over this decorated function
            return entry, wrapped
        # a method registered bound (tools=[obj.method]): guarded only for that object
        func = entry.spec.func
        if getattr(func, "__func__", None) is not spec.func or not args \
                or args[0] is not getattr(func, "__self__", None):
            return None, {}
        args = args[1:]
    bound = dict(entry.signature.bind(*args, **kwargs).arguments)
    for name in entry.injected:  # the framework's context object: not an argument
        bound.pop(name, None)
    return entry, bound


def _executing(task: TaskState, spec: ToolSpec) -> bool:
    """The guard is executing this very tool (its ``run=`` or a framework object invoking
    the decorated function it wraps): the inner direct call is that execution, not a
    second call to count."""
    current = CURRENT_KEY.get()
    key = None if current is None else current[0]
    prefix = f"{task.task_id}:{spec.name}:"
    return key is not None and key.startswith(prefix) and ":" not in key[len(prefix):]


def _direct_result(result: ToolResult, exc: BaseException | None) -> Any:
    if exc is not None:
        raise exc
    if result.decision in (ALLOW, WARN, CACHED):
        return result.value
    raise ToolBlocked(result)


def direct_call(task: TaskState, spec: ToolSpec, func: Callable[..., Any], args: tuple[Any, ...],
                kwargs: dict[str, Any]) -> Any:
    """Run a decorated sync tool called directly inside ``task``'s ``with`` block: guarded
    when the task's guard has it registered, plain otherwise. Returns the tool's value (also
    for ``cached``).

    Raises:
        ToolBlocked: block / review / invalid. Halt: the task halts. Whatever the tool raised.

    Outside any task the decorator runs the plain function itself, or raises
    ``ToolGuardError`` when a guard that registered it has ``require_task``
    (:func:`toolguard.tools._context.refuse_outside_task`).
    """
    if _executing(task, spec):
        return func(*args, **kwargs)
    entry, bound = _bind(task, spec, args, kwargs)
    if entry is None:
        return func(*args, **kwargs)
    result, exc = _path.call_sync(task, entry.spec.name, bound, lambda _: func(*args, **kwargs))
    return _direct_result(result, exc)


async def direct_call_async(task: TaskState, spec: ToolSpec, func: Callable[..., Awaitable[Any]],
                            args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """:func:`direct_call` for ``async def`` tools."""
    if _executing(task, spec):
        return await func(*args, **kwargs)
    entry, bound = _bind(task, spec, args, kwargs)
    if entry is None:
        return await func(*args, **kwargs)
    result, exc = await _path.call_async(task, entry.spec.name, bound,
                                         lambda _: func(*args, **kwargs))
    return _direct_result(result, exc)
