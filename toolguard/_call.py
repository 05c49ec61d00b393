"""The records one call carries through the pipeline: the registered tool's precomputed
:class:`_Entry`, the guard's :class:`_Config` snapshot, the :class:`_Prepared` call, the I/O
requests the pipeline yields (:data:`_Io`), the tool's :class:`_Outcome`, and ``CallRecord``
(``task.history``). Data only: every stage module reads them, none imports another stage."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, NamedTuple, TypeVar

import orjson

from ._approval import (
    ApprovalRequest,
    Approver,
)
from ._canonical import args_hash
from ._canonical_walk import canonicalize
from ._coerce import IntFix
from ._decorators import ToolSpec
from ._errors import CanonicalizationError
from ._resolve import ToolSettings
from ._results import ToolResult
from ._schema import ArgsValidator
from ._threads import Handoff
from ._types import Effect

if TYPE_CHECKING:
    from ._policy import Policy


T = TypeVar("T")
"""Runs a call in place of the registered function: is passed the validated arguments
(replay's recorded result, a direct call's own arguments, ``run=``)."""


_WAIT_POLL_S: Final = (0.001, 0.05)  # first and longest sleep while waiting on another call


class _Detached(BaseException):  # a control-flow signal, not an error
    """A cancelled ``acall`` whose sync tool runs on in its thread (``toolguard._threads``):
    ``cancel`` goes to the caller at once; ``outcome`` turns what the tool did into an
    :class:`_Outcome` for the pipeline, which records it when the thread ends."""

    def __init__(self, cancel: BaseException, handoff: Handoff,
                 outcome: Callable[[Any, BaseException | None, float], _Outcome]) -> None:
        super().__init__()
        self.cancel, self.handoff, self.outcome = cancel, handoff, outcome


class _NotStarted(BaseException):  # a control-flow signal, not an error
    """Thrown into the pipeline at its execute request when ``acall`` was cancelled while a
    store operation ran off the loop: the tool never started, so its claim is given back."""


class _Handover(BaseException):  # a control-flow signal, not an error
    """Thrown into the pipeline at its execute request by a caller that records the
    outcome elsewhere, later (another process: :mod:`toolguard._pending`): the pipeline
    ends without recording anything and keeps the claim held."""


class _RecordedError(Exception):
    """Raised by a replay executor for a recorded error result (content shown verbatim)."""

    def __init__(self, content: Any) -> None:
        self.content = content
        super().__init__(str(content))


@dataclass(frozen=True, slots=True)
class _Entry:
    """A registered tool with everything precomputed for the hot path."""

    spec: ToolSpec
    settings: ToolSettings
    signature: inspect.Signature | None
    defaults: dict[str, Any]
    validator: ArgsValidator | None
    schema: dict[str, Any]
    maybe_async: bool  # its function is async, or it is a recorded/unknown callable
    call: Callable[..., Any]  # what dispatch runs: the function, coercing JSON if it must
    in_thread: bool = False  # not ``async def``: acall runs it in a worker thread
    unknown: bool = False  # a name no registered tool has: judged (counted, halted), never run
    # typed int, at the top or inside: an integral float (5.0) is passed as 5
    int_params: tuple[tuple[str, IntFix | None], ...] = ()
    injected: frozenset[str] = frozenset()  # a framework passes them: not arguments

    def bound(self, args: Mapping[str, Any]) -> Mapping[str, Any]:
        """``args`` with the tool's defaults filled in: an omitted argument, an explicit null
        and the default value are one call, for the signature and for the policy's rules."""
        defaults = self.defaults
        if defaults:
            for value in args.values():
                if value is None:  # rare: filter only then (a comprehension costs 0.3 µs)
                    args = {k: v for k, v in args.items() if v is not None}
                    break
            args = {**defaults, **args}
        return args

    def signature_of(self, args: Mapping[str, Any]) -> str:
        """The canonical hash of ``args`` bound through the tool's signature (:meth:`bound`).

        Raises:
            CanonicalizationError: an argument has no canonical form.
        """
        return args_hash(self.bound(args), self.settings.args)

    def effect_for(self, args: Mapping[str, Any]) -> Effect | None:
        """The effect of the first rule whose patterns all match, or None."""
        for rule in self.settings.rules:
            if all(pattern.search(_rule_text(args.get(arg))) for arg, pattern in rule.compiled):
                return rule.effect
        return None


def _rule_text(value: Any) -> str:
    """What a rule's pattern is searched in: a string as it is, "" for a missing or null
    argument, anything else as its canonical JSON text (``true``, ``5`` for ``5.0``, arrays
    and objects compact with sorted keys): one text per signature, however the model wrote it,
    so a rule cannot be dodged by writing ``5.0`` for ``5``."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    try:
        return orjson.dumps(canonicalize(value), option=orjson.OPT_SORT_KEYS).decode()
    except (CanonicalizationError, TypeError, orjson.JSONEncodeError):
        return str(value)


@dataclass(frozen=True, slots=True)
class _Config:
    """An immutable snapshot of what the guard enforces; swapped whole by reload_policy."""

    policy: Policy
    entries: dict[str, _Entry]
    timeout_types: tuple[str, ...]
    virtual: dict[str, _Entry]  # tools known only by name (replay), built on first use
    unknown: dict[str, _Entry]  # names the model called that no tool has (bounded)
    require_task: bool = False  # a decorated tool called outside a task raises


class CallRecord(NamedTuple):
    """One entry of ``task.history``: the tool, the arguments as received, the result."""

    tool: str
    args: Any
    result: ToolResult


@dataclass(slots=True)
class _Prepared:
    """One call after preparation (mutable only while the pipeline runs)."""

    entry: _Entry
    call_id: str
    raw_args: Any
    args: dict[str, Any]
    effect: Effect
    sig: str  # the canonical arguments hash
    signature: str  # tool name + hash: what the ladder counts
    key: str
    invalid: str | None
    unusable: bool  # the arguments could not be read at all: not even observe mode runs it
    claim: bool
    task_scope: bool
    denied: bool  # default_effect deny and nothing classifies this call
    redacted: dict[str, Any] | None = None
    exact: str = ""  # hash of the exact values (no argument options): approvals bind to it
    remember: bool = True  # scope is not off: a completed call is stored
    origin: str = ""  # the execution this one continues (an unknown outcome's), else itself
    counted: bool = False  # in flight for the failure budget (toolguard._inflight)


Executor = Callable[[dict[str, Any]], Any]
"""Runs a call in place of the registered function: is passed the validated arguments
(replay's recorded result, a direct call's own arguments, ``run=``)."""


class _Execute(NamedTuple):
    """I/O request of the pipeline: run the tool (answer: an ``_Outcome``). ``snap``,
    ``verdict`` and ``observed`` are what the pipeline records the outcome with: a caller
    that runs the tool in another process (:mod:`toolguard._pending`) keeps them and
    throws :class:`_Handover` into the pipeline instead of answering."""

    cfg: _Config
    p: _Prepared
    executor: Executor | None
    snap: Any = None
    verdict: Any = None
    observed: Any = None


class _Approve(NamedTuple):
    """I/O request: ask the approver (answer: an ``ApprovalDecision``)."""

    request: ApprovalRequest
    approver: Approver


class _Wait(NamedTuple):
    """I/O request: wait until an identical call in progress settles (answer: None)."""

    cfg: _Config
    p: _Prepared


_Io = _Execute | _Approve | _Wait


@dataclass(slots=True)
class _Outcome:
    value: Any = None
    content: Any = None
    success: bool = True
    unknown: bool = False
    error_type: str | None = None
    exc: BaseException | None = None
    duration_s: float = 0.0
