"""What a tool is to the guard: :class:`ToolSpec` (name, function, options), the
:data:`NOT_GIVEN` sentinel of unset options, and the specs of tools known only by name
(:func:`recorded_tool`). A module of its own so that the framework adapters
(``_frameworks``) and the decorators (``_decorators``, which re-exports these names) both
build on it without importing each other.
"""

from __future__ import annotations

import enum
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from toolguard._types import Effect, IdempotencyScope

__all__ = ["NOT_GIVEN", "NotGiven", "ToolSpec", "is_recorded", "recorded_tool"]


class NotGiven(enum.Enum):
    """Type of :data:`NOT_GIVEN`, the sentinel for "this option was not passed"."""

    NOT_GIVEN = "NOT_GIVEN"

    def __repr__(self) -> str:
        return "NOT_GIVEN"


NOT_GIVEN: Final = NotGiven.NOT_GIVEN
"""An option left unset: inherit from the policy. (``None`` can mean "no limit".)"""


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """What a decorator knows about a tool. Frozen; attached as ``func.__toolguard_spec__``.

    Attributes:
        name: the tool name the model uses (default: the function's ``__name__``).
        func: the undecorated function (sync or ``async def``).
        effect: readonly / mutating / poll, or NOT_GIVEN for an undecorated function. A
            string (``"readonly"``) is converted to the :class:`~toolguard.Effect` member;
            any other string raises ValueError.
        requires_approval: True for ``@requires_approval``.
        idempotency_scope: until_change / task / off, or NOT_GIVEN; a string is converted
            like ``effect``.
        idempotency_ttl_s: seconds a completed call is remembered, or NOT_GIVEN.
        forwards_idempotency_key: the tool passes ``current_idempotency_key()`` on to its
            backend (e.g. an ``Idempotency-Key`` header), so a retry after an unknown outcome
            is safe; or NOT_GIVEN.
        max_calls: per-task limit of calls of this tool, or NOT_GIVEN.
        external: the tool acts on the outside world (a payment, an email, a ticket, a
            message: MCP's ``openWorldHint``), so a completed call is remembered for the
            whole task (scope ``task``) instead of until the next change; or NOT_GIVEN.
        inline: a sync tool that returns at once (a pure function, microseconds): ``acall``
            runs it on the event loop's thread instead of in a worker thread; or NOT_GIVEN.
        args_schema: a JSON Schema of the arguments (an OpenAI function ``parameters``
            object), or None to derive one from the type hints.
        description: for ``guard.tool_schemas()`` (default: the docstring's first paragraph).
    """

    name: str
    func: Callable[..., Any]
    effect: Effect | NotGiven = NOT_GIVEN
    requires_approval: bool = False
    idempotency_scope: IdempotencyScope | NotGiven = NOT_GIVEN
    idempotency_ttl_s: float | NotGiven = NOT_GIVEN
    forwards_idempotency_key: bool | NotGiven = NOT_GIVEN
    max_calls: int | NotGiven | None = NOT_GIVEN
    args_schema: Mapping[str, Any] | None = None
    description: str = ""
    external: bool | NotGiven = NOT_GIVEN
    inline: bool | NotGiven = NOT_GIVEN

    def __post_init__(self) -> None:
        # A string is the policy file's spelling ("readonly"); the engine compares enum
        # members by identity, so a string left here would silently read as no effect.
        for key, kind in (("effect", Effect), ("idempotency_scope", IdempotencyScope)):
            value = getattr(self, key)
            if isinstance(value, str) and not isinstance(value, kind):
                try:
                    object.__setattr__(self, key, kind(value))
                except ValueError:
                    known = ", ".join(repr(m.value) for m in kind)
                    raise ValueError(f"ToolSpec {self.name!r}: {key} must be one of {known}, "
                                     f"got {value!r}") from None

    @property
    def is_async(self) -> bool:
        """True if the tool is an ``async def`` function."""
        return inspect.iscoroutinefunction(self.func)

    def given(self) -> dict[str, Any]:
        """The options that were passed explicitly, by policy key name."""
        out: dict[str, Any] = {}
        for key in ("effect", "idempotency_scope", "idempotency_ttl_s",
                    "forwards_idempotency_key", "max_calls", "external", "inline"):
            value = getattr(self, key)
            if value is not NOT_GIVEN:
                out[key] = value
        if self.requires_approval:
            out["requires_approval"] = True
        return out


def _recorded(**_: Any) -> Any:
    """The function of a tool known only by name and schema (replay): never called."""
    return None


def recorded_tool(
    name: str, args_schema: Mapping[str, Any] | None = None, description: str = ""
) -> ToolSpec:
    """A spec for a tool that exists only in recorded transcripts (``toolguard replay``):
    its effect comes from the policy; ``args_schema`` (e.g. an OpenAI function's
    ``parameters``) validates recorded arguments."""
    return ToolSpec(name=name, func=_recorded, args_schema=args_schema, description=description)


def is_recorded(spec: ToolSpec) -> bool:
    """True for a spec made by :func:`recorded_tool`."""
    return spec.func is _recorded
