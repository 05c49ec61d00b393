"""The records one call carries along the call path: the registered tool's precomputed
:class:`_Entry`, the guard's :class:`_Config` snapshot, the :class:`_Prepared` call, the
tool's :class:`_Outcome`, ``CallRecord`` (``task.history``), and what the stages see of the
task, its guard and a call admitted to run (:class:`TaskState`, :class:`GuardState`,
:class:`CallingTask`, :class:`Started`: protocols, so that no stage imports ``Task``,
``Guard`` or the call path). Data only: every stage module reads them, and this module
imports no stage."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, NamedTuple, Protocol, TypeVar

import orjson

from toolguard._errors import CanonicalizationError
from toolguard._results import ToolResult
from toolguard._types import Effect, Mode
from toolguard.hashing._canonical import args_hash
from toolguard.hashing._canonical_walk import canonicalize
from toolguard.tools._coerce import IntFix
from toolguard.tools._decorators import ToolSpec
from toolguard.tools._resolve import ToolSettings
from toolguard.tools._schema import ArgsValidator

if TYPE_CHECKING:
    import threading
    from collections import OrderedDict, deque
    from collections.abc import Iterator

    from toolguard.hashing._normalize import ResultNormalizer
    from toolguard.policy._model import Policy
    from toolguard.stores._base import Store

    from ._approval import Approver
    from ._audit import AuditSink
    from ._inflight import InFlight


T = TypeVar("T")


_WAIT_POLL_S: Final = (0.001, 0.05)  # first and longest sleep while waiting on another call


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
    # arguments the tool requires (its schema's, and parameters without a default): a null
    # for one of them is the value it receives; a null for any other is dropped (:meth:`given`)
    required: frozenset[str] = frozenset()
    # task.call refuses it before counting: ``async def``, or known by name only (no run=)
    not_sync: bool = False

    def given(self, args: dict[str, Any]) -> dict[str, Any]:
        """A copy of ``args`` without the top-level nulls of the arguments the tool does not
        require (the call path asks only when a null is among them): the tool then gets its
        default, exactly as for an omitted argument, which is what the canonical hash
        already takes them for. A null a model sends for ``dry_run: bool | None = True``
        (OpenAI strict mode sends one for every optional argument) or for a ``**kwargs``
        key never reaches the tool as a ``None`` that an approval or a stored result of the
        omitted spelling would cover."""
        required = self.required
        return {k: v for k, v in args.items() if v is not None or k in required}

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


class Budget(NamedTuple):
    """The task budgets the decision reads on every call (``[budget]``; ``None``: no limit),
    as plain values: a field of a pydantic model costs ~5x a tuple field to read."""

    max_tool_calls: int | None
    max_tokens: int | None
    timeout_s: float | None
    max_consecutive_failures: int | None


@dataclass(frozen=True, slots=True)
class _Config:
    """An immutable snapshot of what the guard enforces; swapped whole by reload_policy.

    The policy values every call reads are copied out of the (pydantic) policy once, here:
    ``mode``, ``max_args_bytes`` (bytes or ``None``), ``claim_ttl_s``
    (``idempotency.in_progress_ttl_s``), ``approval_timeout_s`` and ``budget``. Reading a
    field of a pydantic model goes through its ``__getattr__`` hook (~270 instructions
    against ~30 for a slot), and the call path read seventeen per call."""

    policy: Policy
    entries: dict[str, _Entry]
    timeout_types: tuple[str, ...]
    virtual: dict[str, _Entry]  # tools known only by name (replay), built on first use
    unknown: dict[str, _Entry]  # names the model called that no tool has (bounded)
    require_task: bool = False  # a decorated tool called outside a task raises
    mode: Mode = field(init=False)
    max_args_bytes: int | None = field(init=False)
    claim_ttl_s: float = field(init=False)
    approval_timeout_s: float = field(init=False)
    budget: Budget = field(init=False)

    def __post_init__(self) -> None:
        policy, budget, put = self.policy, self.policy.budget, object.__setattr__
        put(self, "mode", policy.mode)
        put(self, "max_args_bytes", policy.max_args_bytes)
        put(self, "claim_ttl_s", policy.idempotency.in_progress_ttl_s)
        put(self, "approval_timeout_s", policy.approval.timeout_s)
        put(self, "budget", Budget(budget.max_tool_calls, budget.max_tokens, budget.timeout_s,
                                   budget.max_consecutive_failures))


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
    redacted: dict[str, Any] | bytes | None = None  # as events show it (_events.shown)
    exact: str = ""  # hash of the exact values (no argument options): approvals bind to it
    remember: bool = True  # scope is not off: a completed call is stored
    origin: str = ""  # the execution this one continues (an unknown outcome's), else itself
    counted: bool = False  # in flight for the failure budget (toolguard.engine._inflight)
    text: bytes = b""  # args serialized, keys sorted, bounded as redaction reads them, or b""


Executor = Callable[[dict[str, Any]], Any]
"""Runs a call in place of the registered function: is passed the validated arguments
(replay's recorded result, a direct call's own arguments, ``run=``)."""




@dataclass(slots=True)
class _Outcome:
    value: Any = None
    content: Any = None
    success: bool = True
    unknown: bool = False
    error_type: str | None = None
    exc: BaseException | None = None
    duration_s: float = 0.0


class GuardState(Protocol):
    """What the call path's stages read of the :class:`~toolguard.Guard` (its private
    state; a protocol, so that no stage imports the class)."""

    @property
    def _config(self) -> _Config: ...
    @property
    def _store(self) -> Store: ...
    @property
    def _clock(self) -> Callable[[], float]: ...
    @property
    def _sinks(self) -> tuple[AuditSink, ...]: ...
    @property
    def _approver(self) -> Approver: ...
    @property
    def _lock(self) -> Any: ...
    @property
    def _inflight(self) -> dict[str, threading.Event]: ...
    @property
    def _inflight_calls(self) -> InFlight: ...
    @property
    def _store_blocks(self) -> bool: ...
    @property
    def _fields(self) -> bool: ...
    @property
    def _price(self) -> Any: ...

    def _warn_off(self) -> None: ...
    @staticmethod
    def _entry(policy: Policy, spec: ToolSpec) -> _Entry: ...


class TaskState(Protocol):
    """What the call path's stages read and write of a :class:`~toolguard.Task`: its id,
    history and per-handle memory (a protocol, so that no stage imports the class)."""

    @property
    def guard(self) -> GuardState: ...
    @property
    def task_id(self) -> str: ...
    @property
    def history(self) -> deque[CallRecord]: ...
    @property
    def _limit(self) -> int: ...
    @property
    def _ids(self) -> Iterator[int]: ...
    @property
    def _id_suffix(self) -> str: ...
    @property
    def _last_content(self) -> OrderedDict[str, Any]: ...
    @property
    def _digests(self) -> dict[str, tuple[ResultNormalizer, str, str]]: ...
    @property
    def _last_digest(self) -> OrderedDict[str, str]: ...


class CallingTask(TaskState, Protocol):
    """A task as the helpers that run whole calls see it (the agent-loop helpers,
    :mod:`toolguard.engine._loops`): its state and its public ``call`` / ``acall``."""

    def call(self, tool: str, args: Mapping[str, Any] | str | bytes | None = None
             ) -> ToolResult: ...
    async def acall(self, tool: str, args: Mapping[str, Any] | str | bytes | None = None
                    ) -> ToolResult: ...
    def _runnable(self, tool: str, *, sync: bool) -> None: ...


class Started(Protocol):
    """A call admitted to run, as the execute stage sees it
    (:class:`toolguard.engine._path.Begun`): the configuration it was decided under, the
    prepared call and the arguments to run the tool with."""

    @property
    def cfg(self) -> _Config: ...
    @property
    def p(self) -> _Prepared: ...
    @property
    def args(self) -> dict[str, Any]: ...
