"""Parameters an agent framework fills in itself (a run context, a runtime, injected state).

The model never sends them, so they are not part of a tool's JSON interface: they are left
out of the argument schema, the canonical hash and validation. They are recognised by the
name and module of their type (no framework is imported), after each framework's documented
injection markers:

- pydantic-ai: ``RunContext[Deps]`` (first parameter of ``@agent.tool``);
- LangChain / LangGraph: ``ToolRuntime``, ``Annotated[..., InjectedToolArg]``,
  ``InjectedState``, ``InjectedStore``, ``InjectedToolCallId``;
- MCP Python SDK: ``Context`` (``mcp.server``);
- OpenAI Agents SDK: ``RunContextWrapper[T]`` and ``ToolContext[T]``.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from typing import Any, Final

__all__ = ["injected_parameters", "is_injected"]

# (top-level module of the framework, type name): the type or one of its bases.
_INJECTED: Final[frozenset[tuple[str, str]]] = frozenset({
    ("pydantic_ai", "RunContext"),
    ("langchain", "ToolRuntime"),
    ("langchain_core", "InjectedToolArg"),
    ("langchain_core", "InjectedToolCallId"),
    ("langgraph", "ToolRuntime"),
    ("langgraph", "InjectedState"),
    ("langgraph", "InjectedStore"),
    ("mcp", "Context"),
    ("fastmcp", "Context"),
    ("agents", "RunContextWrapper"),
    ("agents", "ToolContext"),
})
# Names that identify an injected parameter in an annotation left as text (a forward
# reference that does not resolve): the module is unknown then. "Context" alone is too
# common a name to be taken for MCP's.
_INJECTED_NAMES: Final[frozenset[str]] = frozenset(
    name for _, name in _INJECTED if name != "Context")


def _marks(obj: Any) -> bool:
    """``obj`` (a class, or an instance used as a marker) is one of the injected types."""
    cls = obj if isinstance(obj, type) else type(obj)
    try:
        mro = inspect.getmro(cls)
    except AttributeError:  # pragma: no cover - not a class after all
        return False
    return any((getattr(c, "__module__", "").partition(".")[0], c.__name__) in _INJECTED
               for c in mro)


def is_injected(hint: Any) -> bool:
    """True if the type hint ``hint`` names a framework-injected parameter: the type itself
    (``RunContext[Deps]``, ``ToolRuntime``, ``Context``) or an ``Annotated`` marker
    (``Annotated[str, InjectedToolArg]``, ``Annotated[dict, InjectedState("x")]``)."""
    if isinstance(hint, str):
        head = hint.split("[", 1)[0].strip().rpartition(".")[2]
        return head in _INJECTED_NAMES
    if typing.get_origin(hint) is typing.Annotated:
        if any(_marks(m) for m in getattr(hint, "__metadata__", ())):
            return True
        hint = typing.get_args(hint)[0]
    origin = typing.get_origin(hint)
    if origin is typing.Union or (origin is not None and type(hint).__name__ == "UnionType"):
        # ``RunContext | None``: injected if a member is
        return any(is_injected(a) for a in typing.get_args(hint) if a is not type(None))
    if origin is not None:
        hint = origin
    return isinstance(hint, type) and _marks(hint)


def injected_parameters(func: Callable[..., Any]) -> frozenset[str]:
    """The names of ``func``'s parameters that a framework injects (see the module)."""
    try:
        params = inspect.signature(func).parameters
    except (TypeError, ValueError):
        return frozenset()
    try:
        hints = typing.get_type_hints(func, include_extras=True)
    except Exception:  # noqa: BLE001 - unresolvable forward references: read the raw text
        hints = {}
    out = set()
    for name, p in params.items():
        hint = hints.get(name, p.annotation)
        if hint is not p.empty and is_injected(hint):
            out.add(name)
    return frozenset(out)
