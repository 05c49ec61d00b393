"""What a guarded call returns: :class:`ToolResult`; and a task's :class:`Usage`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, TypeVar

from ._types import Decision, Effect

__all__ = ["ToolResult", "Usage", "new_result"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ToolResult:
    """The outcome of one tool call, ready to send back to the model.

    Attributes:
        tool: the tool name.
        call_id: unique id of this call: ``"<task id>#<n>@<8 hex digits>"``, the call's
            number in its task handle and a random tag of the handle (unique across handles,
            processes and hosts).
        decision: what the guard did (:class:`Decision`).
        content: what to send to the model as the tool result: the tool's return value, with
            the notice appended (as text) when there is one; for calls that did not run, a
            synthetic message saying why and what to do instead.
        value: the tool's own return value (``None`` when it did not run; the stored value
            for ``cached``).
        is_error: the result is an error (the tool raised, or the call did not run and
            nothing stands in for it).
        error_type: the exception class name when the tool raised, else ``None``.
        reason: one line on why the guard decided so (``""`` for a plain allow).
        notice: the corrective hint appended to ``content`` (warn, cached), else ``None``.
        count: the call's repeat count (1 = first since the last progress).
        effect: the effect the call was judged with (rules may differ from the tool's).
        args_hash: canonical arguments hash (32 hex digits).
        idempotency_key: ``"{task_id}:{tool}:{args_hash}"``.
        duration_s: time spent executing the tool, in seconds (0 if it did not run).
        observed: in ``observe`` mode, the decision enforcement would have taken.
    """

    tool: str
    call_id: str
    decision: Decision
    content: Any
    value: Any = None
    is_error: bool = False
    error_type: str | None = None
    reason: str = ""
    notice: str | None = None
    count: int = 1
    effect: Effect = Effect.READONLY
    args_hash: str = ""
    idempotency_key: str = ""
    duration_s: float = 0.0
    observed: Decision | None = None

    @property
    def executed(self) -> bool:
        """True exactly when the tool ran (decision ``allow`` or ``warn``)."""
        return self.decision.executed


def _fast_constructor(cls: type[T]) -> Callable[..., T]:
    """A constructor of the frozen slotted dataclass ``cls`` for the hot path: same
    parameters as ``cls(...)``, same object.

    A frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``: 1.5 µs
    for :class:`ToolResult`'s 15 fields, the largest single cost of a guarded call; and in
    CPython 3.11 calling any class whose ``__init__`` is Python costs ~1.5k instructions
    more than calling a function with the same arguments. So this is a function: it makes
    an instance of an unfrozen twin of ``cls`` (the same slots, so the same layout) with
    ``object.__new__``, stores each field, and assigns its ``__class__`` to ``cls``
    (CPython allows that between classes whose instance layouts are identical); the object
    is then a normal, frozen ``cls``. Its source is generated from ``cls``'s fields, as
    :mod:`dataclasses` generates an ``__init__``. Defaults with a ``default_factory`` are
    not supported (``cls`` has none).
    """
    names, params = [], []
    scope: dict[str, Any] = {}
    for f in fields(cls):  # type: ignore[arg-type]
        if f.default_factory is not MISSING:
            raise TypeError(f"{cls.__name__}.{f.name}: default_factory is not supported")
        names.append(f.name)
        if f.default is MISSING:
            params.append(f.name)
        else:
            scope[f"_default_{f.name}"] = f.default
            params.append(f"{f.name}=_default_{f.name}")
    scope.update(_new=object.__new__, _cls=cls,
                 _twin=type(f"_{cls.__name__}Builder", (), {"__slots__": tuple(names)}))
    body = "".join(f"    obj.{name} = {name}\n" for name in names)
    exec(f"def new({', '.join(params)}):\n    obj = _new(_twin)\n{body}"  # noqa: S102
         "    obj.__class__ = _cls\n    return obj\n", scope)
    new: Callable[..., T] = scope["new"]
    new.__qualname__ = new.__name__ = f"new_{cls.__name__}"
    new.__module__ = cls.__module__
    new.__doc__ = f"Build a {cls.__name__} (same arguments as its constructor)."
    return new


new_result: Callable[..., ToolResult] = _fast_constructor(ToolResult)
"""``ToolResult(...)``, 5x faster (see :func:`_fast_constructor`); for the engine's hot path."""


@dataclass(frozen=True, slots=True)
class Usage:
    """A task's budget counters.

    Attributes:
        tool_calls: tool calls proposed so far (every decision counts).
        per_tool: the same, by tool name.
        input_tokens / output_tokens / total_tokens: reported by ``task.record_usage``.
        elapsed_s: seconds since the task's first call or usage report (0 before).
        cost_usd: US dollars the reported tokens cost (those of a known price).
        cost_per_tool: the same, of the usage reported for a tool (a tool that calls a
            model itself), by tool name.
        unpriced_tokens: reported tokens whose price is unknown (no model name, or a model
            the price table does not know): not in ``cost_usd``.
    """

    tool_calls: int
    per_tool: dict[str, int] = field(default_factory=dict)
    input_tokens: int = 0
    output_tokens: int = 0
    elapsed_s: float = 0.0
    cost_usd: float = 0.0
    cost_per_tool: dict[str, float] = field(default_factory=dict)
    unpriced_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens
