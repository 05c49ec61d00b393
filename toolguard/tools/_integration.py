"""The integration core's small pieces: specs of tools registered by name
(:meth:`Guard.register`) and the ``run=`` executor of :meth:`Task.call`."""

from __future__ import annotations

import inspect
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import fields, replace
from typing import Any

from toolguard._types import Effect, IdempotencyScope

from ._context import REQUIRING as _REQUIRING
from ._decorators import NOT_GIVEN, NotGiven, ToolSpec, recorded_tool, spec_of

__all__ = ["named_spec", "require_task_for", "sync_runner"]

# ToolSpec options register(**settings) may set (the decorators' options).
_SETTINGS = frozenset(f.name for f in fields(ToolSpec)) - {"name", "func", "effect",
                                                           "args_schema", "description"}


def named_spec(
    tool: Any,
    effect: Effect | str | NotGiven,
    args_schema: Mapping[str, Any] | None,
    description: str,
    settings: Mapping[str, Any],
) -> ToolSpec:
    """The spec :meth:`Guard.register` registers: for a name, a tool known by name only
    (calls need ``run=``); for anything ``Guard(tools=)`` takes (a function, a
    :class:`ToolSpec`, a framework's tool object), its spec with the given options over it.

    Raises:
        TypeError: an unknown setting, or ``tool`` is not a tool.
        ValueError: an unknown effect or idempotency scope.
    """
    unknown = sorted(set(settings) - _SETTINGS)
    if unknown:
        raise TypeError(f"register() got unknown settings {', '.join(unknown)} "
                        f"(known: {', '.join(sorted(_SETTINGS))})")
    if isinstance(tool, str):
        if not tool:
            raise ValueError("a tool name must be a non-empty string")
        spec = recorded_tool(tool)
    else:
        spec = spec_of(tool)
    given: dict[str, Any] = {k: v for k, v in settings.items() if v is not NOT_GIVEN}
    if "idempotency_scope" in given:
        given["idempotency_scope"] = IdempotencyScope(given["idempotency_scope"])
    if given.get("requires_approval"):
        given.setdefault("idempotency_scope", IdempotencyScope.TASK)  # as @requires_approval
        given.setdefault("effect", Effect.MUTATING)
    if effect is not NOT_GIVEN:
        given["effect"] = Effect(effect)
    if args_schema is not None:
        given["args_schema"] = dict(args_schema)
    if description:
        given["description"] = description
    return replace(spec, **given) if given else spec


def sync_runner(tool: str, run: Callable[[dict[str, Any]], Any]
                ) -> Callable[[dict[str, Any]], Any]:
    """``run`` for :meth:`Task.call`: an awaitable it returns cannot be awaited there, so
    it is closed and the call fails with an error result that says to use ``acall``."""
    def execute(args: dict[str, Any]) -> Any:
        value = run(args)
        if inspect.isawaitable(value):
            close = getattr(value, "close", None)
            if callable(close):
                close()
            raise TypeError(f"run= of {tool} returned an awaitable: call it with "
                            "await task.acall(..., run=...)")
        return value

    return execute


# require_task: the decorated functions of guards that require a task, by function (weakly:
# a guard or function that goes away leaves nothing behind). Read on direct calls outside
# any task only, so the common path pays nothing.
_REQUIRING_LOCK = threading.Lock()


def require_task_for(guard: Any, specs: Iterable[ToolSpec]) -> None:
    """Note that ``guard`` guards each spec's function (its ``require_task`` decides, when
    read, whether a call outside a task is refused)."""
    with _REQUIRING_LOCK:
        for spec in specs:
            for func in _functions(spec):
                try:
                    _REQUIRING.setdefault(func, weakref.WeakSet()).add(guard)
                except TypeError:  # pragma: no cover - an object without weak references
                    continue


def _functions(spec: ToolSpec) -> list[Callable[..., Any]]:
    """The functions a direct call of ``spec``'s tool arrives with: its own (unbound), and
    the decorated function a framework object wraps."""
    out = [getattr(spec.func, "__func__", spec.func)]
    inner = getattr(spec.func, "__toolguard_wraps__", None)
    if isinstance(inner, ToolSpec):
        out.append(inner.func)
    return out
