"""``@readonly``, ``@mutating`` and ``@requires_approval``: mark a tool, enforce nothing.

The decorators attach a frozen :class:`ToolSpec` (after pluggy's markers) and keep the wrapped
function's signature and behaviour: outside an active task the function runs exactly as
before. Inside ``with guard.task(...)`` a direct call of a registered tool goes through the
guard. Options are applied only when passed (:data:`NOT_GIVEN` otherwise), so a policy value
is never shadowed by a decorator default (precedence: built-in < decorator < policy < env).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any, Literal, ParamSpec, TypeVar, cast, overload

from toolguard._types import Effect, IdempotencyScope

from ._context import CURRENT_TASK, refuse_outside_task
from ._frameworks import framework_spec
from ._schema import tool_validator
from ._spec import NOT_GIVEN, NotGiven, ToolSpec, is_recorded, recorded_tool

__all__ = [
    "NOT_GIVEN",
    "NotGiven",
    "ToolSpec",
    "is_recorded",
    "mutating",
    "readonly",
    "recorded_tool",
    "requires_approval",
    "spec_of",
]

Scope = IdempotencyScope | Literal["until_change", "task", "off"]

P = ParamSpec("P")
R = TypeVar("R")
ToolT = TypeVar("ToolT")  # a framework tool object


def spec_of(tool: Callable[..., Any] | ToolSpec | Any) -> ToolSpec:
    """The :class:`ToolSpec` of a decorated function, or a spec with every option NOT_GIVEN
    for a plain function or a framework's tool object (:mod:`toolguard.tools._frameworks`; the
    effect then comes from the policy). A spec is returned as is.

    Raises:
        TypeError: ``tool`` is none of these, or a function without a name.
    """
    if isinstance(tool, ToolSpec):
        return tool
    spec = getattr(tool, "__toolguard_spec__", None)
    if isinstance(spec, ToolSpec):
        owner = getattr(tool, "__self__", None)
        if inspect.ismethod(tool) and owner is not None:
            # a decorated method registered bound (tools=[obj.method]): the model never
            # sees or sends ``self``
            return replace(spec, func=spec.func.__get__(owner))
        return spec
    framework = framework_spec(tool)
    if framework is not None:
        return framework
    name = getattr(tool, "__name__", None)
    if not callable(tool) or not isinstance(name, str):
        raise TypeError(_unsupported(tool))
    return ToolSpec(name=name, func=tool, description=_describe(tool))


def _unsupported(tool: object) -> str:
    """Why ``tool`` is no tool the guard can read, and what to pass instead."""
    kind = f"{type(tool).__module__}.{type(tool).__qualname__}"
    label = getattr(tool, "name", None)
    what = f"{kind} object {label!r}" if isinstance(label, str) else f"a {kind} object"
    return (f"cannot use {what} as a tool: toolguard reads functions, ToolSpecs and the tool "
            "objects of LangChain (BaseTool), the OpenAI Agents SDK (FunctionTool) and "
            "Anthropic (BetaFunctionTool). Pass the function it wraps, or register it by "
            "name (guard.register(NAME, effect=..., args_schema=...)) and give each call "
            "run= with what executes it")


# the options a policy's [tools.NAME] table also sets: checked by the policy's own validation
_POLICY_OPTIONS = ("effect", "idempotency_scope", "idempotency_ttl_s", "forwards_idempotency_key",
                   "external", "max_calls", "requires_approval", "inline")


def check_options(tool: str, options: Mapping[str, Any], where: str) -> None:
    """Refuse, where they are given, option values a policy file would refuse for the same
    keys (``max_calls="three"``, ``max_calls=0``, ``idempotency_ttl_s=nan``): the options are
    validated as the table ``[tools.<tool>]`` by :func:`toolguard.load_policy_dict`, so a
    decorator, ``guard.register`` and a policy file accept exactly the same values. Options
    left at :data:`NOT_GIVEN` are not looked at; with none given nothing is loaded.

    Args:
        tool: the tool's name (named in the message).
        options: option name -> value, as passed; keys that are not policy keys are ignored.
        where: how the message names the place, e.g. ``"@tg.mutating"``.

    Raises:
        PolicyError (a ValueError): a value is refused; the message names
            ``tools.<tool>.<option>`` and what was expected.
    """
    table = {key: value.value if isinstance(value, Effect | IdempotencyScope) else value
             for key, value in options.items()
             if key in _POLICY_OPTIONS and value is not NOT_GIVEN and value is not None}
    if table:
        from toolguard.policy._loader import load_policy_dict  # jsonschema loads only when needed

        load_policy_dict({"tools": {tool: table}}, source=where)


def _check_text(decorator: str, option: str, value: Any) -> None:
    if value is not NOT_GIVEN and not (isinstance(value, str) and value):
        raise TypeError(f"@{decorator}: {option}= must be a non-empty string, got {value!r}")


def _describe(func: Callable[..., Any]) -> str:
    doc = inspect.getdoc(func) or ""
    return doc.split("\n\n", 1)[0].strip()


def _mark(func: Callable[P, R], spec: ToolSpec) -> Callable[P, R]:
    if inspect.iscoroutinefunction(func):
        afunc = cast(Callable[..., Awaitable[Any]], func)

        @functools.wraps(func)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            task = CURRENT_TASK.get()
            if task is None:  # outside a task: the plain function (unless a guard refuses)
                refuse_outside_task(spec, afunc)
                return await afunc(*args, **kwargs)
            return await task._direct_call_async(spec, afunc, args, kwargs)

        wrapper: Callable[..., Any] = async_wrapper
    else:

        @functools.wraps(func)
        def sync_wrapper(*args: Any, **kwargs: Any) -> Any:
            task = CURRENT_TASK.get()
            if task is None:  # outside a task: the plain function (unless a guard refuses)
                refuse_outside_task(spec, func)
                return func(*args, **kwargs)
            return task._direct_call(spec, func, args, kwargs)

        wrapper = sync_wrapper
    wrapper.__toolguard_spec__ = spec  # type: ignore[attr-defined]
    return cast(Callable[P, R], wrapper)


def _check_order(f: Any, decorator: str, name: str | NotGiven) -> None:
    """Refuse, at decoration time, what the decorator cannot wrap, saying which order works.

    Raises:
        TypeError: ``f`` is a staticmethod/classmethod object, a framework object the guard
            does not read, or a callable without a name.
    """
    if isinstance(f, staticmethod | classmethod):
        kind = type(f).__name__
        raise TypeError(f"@{decorator} must be applied under @{kind}: write @{kind} above "
                        f"@{decorator}")
    if not callable(f):
        raise TypeError(
            f"@{decorator} cannot mark a {type(f).__name__} object: apply it to the function "
            f"first, under the framework's decorator (e.g. @agent.tool above @{decorator}, "
            f"or Tool(tg.{decorator}(func))); LangChain, Agents SDK and Anthropic tool "
            "objects may also be marked directly")
    if name is NOT_GIVEN and not isinstance(getattr(f, "__name__", None), str):
        raise TypeError(f"@{decorator} cannot name {f!r}: pass name=...")


def _decorator(
    effect: Effect,
    requires_approval: bool,
    func: Callable[P, R] | None,
    given: dict[str, Any],
    decorator_name: str,
) -> Callable[P, R] | Callable[[Callable[P, R]], Callable[P, R]]:
    def apply(f: Callable[P, R]) -> Callable[P, R]:
        if getattr(f, "__toolguard_spec__", None) is not None:
            raise TypeError(f"{getattr(f, '__name__', f)!r} is already marked as a tool")
        options = dict(given)  # one factory may mark several functions
        name = options.pop("name", NOT_GIVEN)
        description = options.pop("description", NOT_GIVEN)
        _check_text(decorator_name, "name", name)
        if description is not NOT_GIVEN and not isinstance(description, str):
            raise TypeError(f"@{decorator_name}: description= must be a string, got "
                            f"{description!r}")
        framework = framework_spec(f)
        if framework is None:
            _check_order(f, decorator_name, name)
        tool = name if isinstance(name, str) else (
            framework.name if framework is not None else f.__name__)
        check_options(tool, options, f"@tg.{decorator_name}")
        if options.get("args_schema") is not None:  # compiled as the guard will, once more
            tool_validator(tool, options["args_schema"], f"@tg.{decorator_name}")
        if "idempotency_scope" in options:
            options["idempotency_scope"] = _scope(options["idempotency_scope"],
                                                  requires_approval)
        if framework is not None:
            # over a framework's tool object (@tg.mutating above @tool): mark the object
            # itself, so the framework still gets its own tool and the guard its options
            over: dict[str, Any] = {k: v for k, v in options.items()
                                    if v is not NOT_GIVEN and k != "args_schema"}
            if name is not NOT_GIVEN:
                over["name"] = name
            if description is not NOT_GIVEN:
                over["description"] = description
            if options.get("args_schema") is not None:
                over["args_schema"] = options["args_schema"]
            marked = replace(framework, effect=effect, requires_approval=requires_approval,
                             **over)
            object.__setattr__(f, "__toolguard_spec__", marked)
            return f
        spec = ToolSpec(
            name=f.__name__ if name is NOT_GIVEN else name,
            func=f,
            effect=effect,
            requires_approval=requires_approval,
            description=_describe(f) if description is NOT_GIVEN else description,
            **{k: v for k, v in options.items() if v is not NOT_GIVEN},
        )
        return _mark(f, spec)

    if func is not None:
        return apply(func)
    return apply


@overload
def readonly(func: Callable[P, R], /) -> Callable[P, R]: ...
@overload
def readonly(func: ToolT, /) -> ToolT: ...  # a framework's tool object, marked in place
@overload
def readonly(
    *,
    name: str | NotGiven = ...,
    poll: bool = ...,
    max_calls: int | NotGiven | None = ...,
    args_schema: Mapping[str, Any] | None = ...,
    description: str | NotGiven = ...,
    inline: bool | NotGiven = ...,
) -> Callable[[Callable[P, R]], Callable[P, R]]: ...
def readonly(
    func: Callable[P, R] | Any | None = None,
    /,
    *,
    name: str | NotGiven = NOT_GIVEN,
    poll: bool = False,
    max_calls: int | NotGiven | None = NOT_GIVEN,
    args_schema: Mapping[str, Any] | None = None,
    description: str | NotGiven = NOT_GIVEN,
    inline: bool | NotGiven = NOT_GIVEN,
) -> Any:
    """Mark a tool that only observes (grep, view_file, a search API).

    Use bare (``@readonly``) or with options (``@readonly(name="fs.grep")``).

    Args:
        name: the tool name the model calls (default: the function name).
        poll: the tool waits on something that moves (a process's output); exempt from the
            ladder, limited by ``max_polls`` per signature instead.
        max_calls: per-task limit of calls of this tool (``None``: no limit).
        args_schema: JSON Schema of the arguments; default: derived from the type hints.
        description: for ``guard.tool_schemas()``; default: the docstring's first paragraph.
        inline: a sync tool that returns at once (a pure function, an in-memory lookup):
            ``task.acall`` runs it on the event loop's thread, as ``task.call`` does, instead
            of in a worker thread (the default for sync tools, so that a slow one never
            blocks the loop). Policy key ``[tools.<name>] inline``.

    Returns:
        The function, unchanged in signature and behaviour, carrying a :class:`ToolSpec`.

    Raises:
        PolicyError (a ValueError): an option value a policy's ``[tools.<name>]`` table
            would refuse (``max_calls=0``, ``idempotency_ttl_s=nan``, ``inline="yes"``),
            raised here, at decoration, naming ``tools.<name>.<option>`` and what was
            expected.
        TypeError: ``name``/``description`` not a string, ``poll`` not a bool, or a
            misplaced decorator.
    """
    if not isinstance(poll, bool):
        raise TypeError(f"@readonly: poll= must be True or False, got {poll!r}")
    return _decorator(
        Effect.POLL if poll else Effect.READONLY,
        False,
        func,
        {"name": name, "max_calls": max_calls, "args_schema": args_schema,
         "description": description, "inline": inline},
        "readonly",
    )


@overload
def mutating(func: Callable[P, R], /) -> Callable[P, R]: ...
@overload
def mutating(func: ToolT, /) -> ToolT: ...  # a framework's tool object, marked in place
@overload
def mutating(
    *,
    name: str | NotGiven = ...,
    idempotency_scope: Scope | NotGiven = ...,
    idempotency_ttl_s: float | NotGiven = ...,
    forwards_idempotency_key: bool | NotGiven = ...,
    external: bool | NotGiven = ...,
    max_calls: int | NotGiven | None = ...,
    args_schema: Mapping[str, Any] | None = ...,
    description: str | NotGiven = ...,
) -> Callable[[Callable[P, R]], Callable[P, R]]: ...
def mutating(
    func: Callable[P, R] | Any | None = None,
    /,
    *,
    name: str | NotGiven = NOT_GIVEN,
    idempotency_scope: Scope | NotGiven = NOT_GIVEN,
    idempotency_ttl_s: float | NotGiven = NOT_GIVEN,
    forwards_idempotency_key: bool | NotGiven = NOT_GIVEN,
    external: bool | NotGiven = NOT_GIVEN,
    max_calls: int | NotGiven | None = NOT_GIVEN,
    args_schema: Mapping[str, Any] | None = None,
    description: str | NotGiven = NOT_GIVEN,
) -> Any:
    """Mark a tool that changes the world (write_file, send_email, a payment).

    Identical repeats climb the stricter mutating ladder, and a completed call is remembered
    for ``idempotency_ttl_s`` seconds: a repeat returns the stored result (decision ``cached``).

    Args:
        name: the tool name the model calls (default: the function name).
        idempotency_scope: ``"until_change"`` (forgotten at the next progress: the default
            for local state such as files), ``"task"`` (once per task: the default for an
            ``external`` tool) or ``"off"``.
        idempotency_ttl_s: seconds a completed call is remembered (default: the policy's).
        forwards_idempotency_key: the tool passes ``toolguard.current_idempotency_key()`` to its
            backend, so after a timeout an identical retry runs with the same key instead of
            going to review.
        external: the tool acts on the outside world (payments, email, tickets, messages:
            MCP's ``openWorldHint``): its idempotency scope defaults to ``"task"``, since a
            later, unrelated write does not undo a payment. Local state (files, a shell)
            keeps ``"until_change"``.
        max_calls: per-task limit of calls of this tool (``None``: no limit).
        args_schema: JSON Schema of the arguments; default: derived from the type hints.
        description: for ``guard.tool_schemas()``; default: the docstring's first paragraph.

    Returns:
        The function, unchanged in signature and behaviour, carrying a :class:`ToolSpec`.

    Raises:
        PolicyError (a ValueError): an option value a policy's ``[tools.<name>]`` table
            would refuse (``max_calls=0``, ``idempotency_ttl_s=nan``), raised here, at
            decoration, naming ``tools.<name>.<option>`` and what was expected.
        TypeError: ``name``/``description`` not a string, or a misplaced decorator.
    """
    return _decorator(
        Effect.MUTATING,
        False,
        func,
        {"name": name, "idempotency_scope": idempotency_scope,
         "idempotency_ttl_s": idempotency_ttl_s,
         "forwards_idempotency_key": forwards_idempotency_key, "external": external,
         "max_calls": max_calls,
         "args_schema": args_schema, "description": description},
        "mutating",
    )


@overload
def requires_approval(func: Callable[P, R], /) -> Callable[P, R]: ...
@overload
def requires_approval(func: ToolT, /) -> ToolT: ...  # a framework's tool object, marked in place
@overload
def requires_approval(
    *,
    name: str | NotGiven = ...,
    idempotency_scope: Scope | NotGiven = ...,
    idempotency_ttl_s: float | NotGiven = ...,
    forwards_idempotency_key: bool | NotGiven = ...,
    external: bool | NotGiven = ...,
    max_calls: int | NotGiven | None = ...,
    args_schema: Mapping[str, Any] | None = ...,
    description: str | NotGiven = ...,
) -> Callable[[Callable[P, R]], Callable[P, R]]: ...
def requires_approval(
    func: Callable[P, R] | Any | None = None,
    /,
    *,
    name: str | NotGiven = NOT_GIVEN,
    idempotency_scope: Scope | NotGiven = NOT_GIVEN,
    idempotency_ttl_s: float | NotGiven = NOT_GIVEN,
    forwards_idempotency_key: bool | NotGiven = NOT_GIVEN,
    external: bool | NotGiven = NOT_GIVEN,
    max_calls: int | NotGiven | None = NOT_GIVEN,
    args_schema: Mapping[str, Any] | None = None,
    description: str | NotGiven = NOT_GIVEN,
) -> Any:
    """Mark an irreversible tool (payment, deletion, permission change): it is mutating and
    never runs without an explicit approval from the guard's approver (DESIGN.md §2, layer 3).

    The idempotency scope defaults to ``"task"``: once approved and done, an identical call in
    the same task returns the stored result. Options, and the errors they raise, as for
    :func:`mutating`.
    """
    return _decorator(
        Effect.MUTATING,
        True,
        func,
        {"name": name,
         "idempotency_scope": idempotency_scope,
         "idempotency_ttl_s": idempotency_ttl_s,
         "forwards_idempotency_key": forwards_idempotency_key, "external": external,
         "max_calls": max_calls,
         "args_schema": args_schema, "description": description},
        "requires_approval",
    )


def _scope(value: IdempotencyScope | str | NotGiven, requires_approval: bool
           ) -> IdempotencyScope | NotGiven:
    """The scope as given (checked already), or ``task`` for ``@requires_approval``."""
    if value is NOT_GIVEN:
        return IdempotencyScope.TASK if requires_approval else NOT_GIVEN
    return IdempotencyScope(value)
