"""Tool objects of agent frameworks, read by duck typing (no framework is imported).

``Guard(tools=[...])``, ``guard.register(obj)`` and ``@tg.mutating`` over such an object
take its name, description and JSON Schema from it:

=========================  =================================  ===============================
framework                  recognised by                      runs as
=========================  =================================  ===============================
LangChain ``BaseTool``     ``tool_call_schema`` + ``invoke``  ``tool.invoke(args)`` (or
                                                              ``ainvoke`` for an async-only
                                                              tool)
Anthropic                  ``input_schema`` + ``call``        ``tool.call(args)``
``BetaFunctionTool``
Agents SDK ``FunctionTool``  ``params_json_schema`` +         by name only: its
                           ``on_invoke_tool``                 ``on_invoke_tool`` needs the
                                                              run's ``ToolContext``, so a call
                                                              needs ``run=`` (the adapter's)
=========================  =================================  ===============================

The effect is not something these objects know: it comes from the policy
(``default_effect``, ``[tools.X]``), from ``@tg.*`` applied to the function the object wraps
(``@tool`` over ``@tg.readonly``), or is given (``guard.register(obj, effect=...)``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from ._injected import injected_parameters
from ._spec import ToolSpec, recorded_tool

__all__ = ["framework_spec", "wrapped_arguments"]


def _wrapped_spec(obj: Any) -> ToolSpec | None:
    """The ``@tg.*`` spec of the function a framework object wraps, if any."""
    for attr in ("func", "coroutine"):
        inner = getattr(obj, attr, None)
        spec = getattr(inner, "__toolguard_spec__", None) if inner is not None else None
        if isinstance(spec, ToolSpec):
            return spec
    return None


def _schema(value: Any) -> dict[str, Any] | None:
    if isinstance(value, Mapping):
        return dict(value)
    to_schema = getattr(value, "model_json_schema", None)  # a pydantic model class
    if callable(to_schema):
        schema = dict(to_schema())
        schema.pop("title", None)
        return schema
    return None


def _langchain(obj: Any) -> tuple[Callable[..., Any], dict[str, Any] | None]:
    # tool_call_schema leaves out the injected arguments (ToolRuntime, InjectedState)
    schema = _schema(obj.tool_call_schema)
    if getattr(obj, "func", True) is None and getattr(obj, "coroutine", None) is not None:
        async def ainvoke(**kwargs: Any) -> Any:
            return await obj.ainvoke(kwargs)

        return ainvoke, schema

    def invoke(**kwargs: Any) -> Any:
        return obj.invoke(kwargs)

    return invoke, schema


def _anthropic(obj: Any) -> tuple[Callable[..., Any], dict[str, Any] | None]:
    call = obj.call
    if inspect.iscoroutinefunction(call):  # BetaAsyncFunctionTool
        async def acall(**kwargs: Any) -> Any:
            return await call(kwargs)

        return acall, _schema(obj.input_schema)

    def run(**kwargs: Any) -> Any:
        return call(kwargs)

    return run, _schema(obj.input_schema)


def framework_spec(obj: Any) -> ToolSpec | None:
    """A :class:`ToolSpec` for a framework's tool object (see the module), or ``None`` if
    ``obj`` is not one. Options of a ``@tg.*`` function the object wraps are kept."""
    name = getattr(obj, "name", None)
    if not isinstance(name, str) or inspect.isroutine(obj):
        return None
    description = getattr(obj, "description", "")
    description = description if isinstance(description, str) else ""
    if hasattr(obj, "params_json_schema") and hasattr(obj, "on_invoke_tool"):
        return recorded_tool(name, _schema(obj.params_json_schema), description)
    if hasattr(obj, "input_schema") and callable(getattr(obj, "call", None)):
        func, schema = _anthropic(obj)
    elif hasattr(obj, "tool_call_schema") and callable(getattr(obj, "invoke", None)):
        func, schema = _langchain(obj)
    else:
        return None
    spec = ToolSpec(name=name, func=func, args_schema=schema, description=description)
    inner = _wrapped_spec(obj)
    if inner is None:
        return spec
    func.__toolguard_wraps__ = inner  # type: ignore[attr-defined]
    return replace(inner, name=name, func=func, args_schema=schema,
                   description=description or inner.description)


def wrapped_arguments(registered: ToolSpec, called: ToolSpec, args: tuple[Any, ...],
                      kwargs: dict[str, Any]) -> dict[str, Any] | None:
    """A direct call of the decorated function ``called`` that the registered framework
    object (``registered``) wraps, e.g. LangChain's own loop running ``@tool`` over
    ``@tg.mutating``: its arguments by name, injected ones left out; ``None`` otherwise."""
    if getattr(registered.func, "__toolguard_wraps__", None) is not called:
        return None
    bound = dict(inspect.signature(called.func).bind(*args, **kwargs).arguments)
    for name in injected_parameters(called.func):
        bound.pop(name, None)
    return bound
