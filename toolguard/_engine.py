"""The enforcer: :class:`Guard` (tools + policy + store) and :class:`Task` (one agent task).

Every call runs one pipeline: prepare (parse JSON text, bind defaults, apply the policy's
argument options, canonical hash, per-call effect from rules, argument schema) → ``store.begin``
(count the attempt, read state, claim the idempotency key) → the pure
:func:`~toolguard._core.decide` → approval / wait when it asks → execute → ``store.finish`` →
history and audit. :meth:`Task.call` and :meth:`Task.acall` are thin shells over the same
helpers; only tool execution, the approver and waiting differ between them.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import itertools
import logging
import os
import sys
import threading
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Awaitable, Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Final, NamedTuple, TypeVar, cast

import orjson

from ._approval import (
    ApprovalDecision,
    ApprovalRequest,
    Approver,
    defer,
    deny_all,
    exact_hash,
)
from ._audit import AuditEvent, AuditSink, redact, scrub
from ._canonical import (
    ArgumentsError,
    args_hash,
    canonicalize,
    digest,
    hash_args,
    parse_arguments,
    value_digest,
)
from ._content import as_text as _as_text
from ._content import safe_repr as _safe_repr
from ._content import safe_str as _safe_str
from ._content import with_notice as _with_notice
from ._context import CURRENT_KEY as _CURRENT_KEY
from ._context import CURRENT_TASK as _CURRENT_TASK
from ._core import CallContext, Verdict, decide, halt_kind, outcome_kind, stagnation_after
from ._decorators import NOT_GIVEN, NotGiven, ToolSpec, is_recorded, recorded_tool, spec_of
from ._direct import direct_call, direct_call_async
from ._errors import (
    BudgetExceeded,
    CallInProgress,
    CanonicalizationError,
    Halt,
    PolicyError,
    PolicyProblem,
    StoreError,
    ToolGuardError,
)
from ._exports import SchemaFormat, export_tools
from ._inflight import InFlight
from ._injected import injected_parameters
from ._integration import named_spec, require_task_for, sync_runner
from ._limits import UNKNOWN_TOOLS, oversized, short_name, too_deep
from ._lock import YieldingLock
from ._loops import OnHalt, arun_tool_calls, run_tool_calls, usage_tokens
from ._outcomes import forwarded_key, is_unknown_outcome
from ._resolve import ToolSettings, resolve_tool, spell_env_tools
from ._results import ToolResult, Usage, new_result
from ._schema import (
    ArgsValidator,
    IntFix,
    coercing_call,
    int_parameters,
    schema_from_signature,
)
from ._shell import classify_argv
from ._threads import Handoff
from ._types import (
    ALLOW,
    BLOCK,
    CACHED,
    ENFORCE,
    HALT,
    IN_PROGRESS,
    INVALID,
    MODE_OFF,
    MUTATING,
    POLL,
    READONLY,
    REVIEW,
    SCOPE_OFF,
    SCOPE_TASK,
    UNKNOWN,
    WARN,
    Decision,
    Effect,
)
from .stores._base import (
    ApprovalRecord,
    ApprovalState,
    BeginRequest,
    FinishRequest,
    Snapshot,
    Store,
)
from .stores.memory import MemoryStore

if TYPE_CHECKING:
    import asyncio

    from ._policy import Policy

__all__ = ["CallRecord", "Guard", "Task", "current_idempotency_key"]

log = logging.getLogger("toolguard")
T = TypeVar("T")

_WAIT_POLL_S: Final = (0.001, 0.05)  # first and longest sleep while waiting on another call


def current_idempotency_key() -> str | None:
    """Inside a guarded tool, the key to forward to its backend (``"task:tool:args_hash:"``
    and a digest of the execution it belongs to, :func:`toolguard._outcomes.forwarded_key`);
    ``None`` outside one. Pass it on (e.g. as an ``Idempotency-Key`` header) and declare the
    tool ``forwards_idempotency_key=True``: a retry after a timeout then reuses the key and
    the backend deduplicates, instead of the retry going to review."""
    current = _CURRENT_KEY.get()
    return None if current is None else forwarded_key(*current)


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


async def _until_done(future: asyncio.Future[Any]) -> None:
    """Wait for ``future`` whatever cancellations arrive meanwhile."""
    import asyncio

    while not future.done():
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait([future])


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


def _validate_typed(validator: ArgsValidator, args: Mapping[str, Any], invalid: str) -> str | None:
    """A direct call may pass typed values (an Enum, a date, a dataclass, a pydantic model)
    that the JSON Schema cannot judge as Python objects: judge their JSON form, the one a
    model would send, which the tool then receives converted by pydantic."""
    from pydantic_core import to_jsonable_python

    try:
        as_json = to_jsonable_python(args)
    except Exception:  # noqa: BLE001 - no JSON form: the first verdict stands
        return invalid
    return invalid if as_json == args else validator.validate(as_json)


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
    """I/O request of the pipeline: run the tool (answer: an ``_Outcome``)."""

    cfg: _Config
    p: _Prepared
    executor: Executor | None


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


class Guard:
    """Tools + policy + state store: the enforcer.

    Args:
        policy: the policy (:func:`toolguard.load_policy`); default: built-in defaults.
        tools: the tool functions, decorated or plain (plain ones take ``default_effect``),
            :class:`ToolSpec` objects, or framework tool objects (LangChain ``BaseTool``,
            Agents SDK ``FunctionTool``, Anthropic ``BetaFunctionTool``: name, description
            and schema are read from them, the effect comes from the policy unless ``@tg.*``
            marked them; see :meth:`register`).
        store: where per-task state lives; default a :class:`~toolguard.stores.MemoryStore`
            (or a ``RedisStore`` when the policy says ``[store] backend = "redis"``).
        approver: decides calls that need approval; default :func:`toolguard.deny_all`.
        audit: sinks receiving every :class:`toolguard.AuditEvent` (callables).
        clock: returns the time in seconds (TTLs, budgets, approval timeouts); inject a fake
            clock in tests (``toolguard.testing.FakeClock``).
        strict_tools: override the policy's ``strict_tools``.
        require_task: override the policy's ``require_task``: a registered ``@tg.*``
            function called outside any task raises ``ToolGuardError`` (naming it) instead
            of running unguarded.

    Raises:
        PolicyError: the policy names tools that are not registered (``strict_tools``), or
            two tools share a name.

    Thread-safe: one guard serves many tasks and threads; state lives in the store.
    """

    def __init__(
        self,
        policy: Policy | None = None,
        tools: Iterable[Callable[..., Any] | ToolSpec | Any] = (),
        *,
        store: Store | None = None,
        approver: Approver | None = None,
        audit: Iterable[AuditSink] = (),
        clock: Callable[[], float] = time.time,
        strict_tools: bool | None = None,
        require_task: bool | None = None,
    ) -> None:
        self._clock = clock
        self._tools = [spec_of(t) for t in tools]
        self._strict = strict_tools
        self._require_task = require_task
        self._approver: Approver = approver or deny_all
        self._sinks: tuple[AuditSink, ...] = tuple(audit)
        self._lock = YieldingLock()  # held for microseconds; waiters never convoy
        self._warned_off = False
        if policy is None:
            from ._policy import Policy  # pydantic loads with the first guard

            policy = Policy()
        self._config = self._build(policy)
        self._own_store = store is None  # built from the policy's [store] section
        self._store: Store = store if store is not None else self._default_store(policy)
        # a store whose operations wait on I/O runs off the event loop under acall
        self._store_blocks = bool(getattr(self._store, "blocking", True))
        self._inflight: dict[str, threading.Event] = {}
        self._inflight_calls = InFlight()  # calls running now, for max_consecutive_failures

    @classmethod
    def from_env(
        cls,
        tools: Iterable[Callable[..., Any]] = (),
        *,
        env: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> Guard:
        """A guard whose policy comes from the environment (``TOOLGUARD_ENV``,
        ``TOOLGUARD_POLICY``, ``TOOLGUARD_POLICY_DIR``, ``TOOLGUARD_<KEY>__<KEY>``): see
        :func:`toolguard.policy_from_env`. ``kwargs`` as for :class:`Guard`.

        Raises:
            PolicyError: the selected file or an environment value is invalid.
        """
        from ._policy_loader import policy_from_env

        return cls(policy_from_env(env), tools, **kwargs)

    def _default_store(self, policy: Policy) -> Store:
        # A URL alone (e.g. TOOLGUARD_STORE__URL) selects Redis unless a backend is named.
        chosen = policy.source_of("store.backend") != "built-in"
        if policy.store.url and chosen and policy.store.backend == "memory":
            raise PolicyError([PolicyProblem(
                policy.source_of("store.url"), "store.url",
                f"a Redis URL is set, but store.backend = \"memory\" "
                f"({policy.source_of('store.backend')}): set store.backend = \"redis\" "
                "(TOOLGUARD_STORE__BACKEND=redis) or drop the URL")])
        if policy.store.backend == "redis" or (policy.store.url and not chosen):
            from .stores.redis import RedisStore

            store: Store = RedisStore.from_policy(policy.store)
            return store
        return MemoryStore(
            max_entries=policy.idempotency.max_entries,
            state_ttl_s=policy.store.state_ttl_s,
            clock=self._clock,
        )

    def _build(self, policy: Policy) -> _Config:
        policy = spell_env_tools(policy, [spec.name for spec in self._tools])
        entries: dict[str, _Entry] = {}
        for spec in self._tools:
            if spec.name in entries:
                raise PolicyError([PolicyProblem("<guard>", f"tools.{spec.name}",
                                                 "two registered tools share this name")])
            entries[spec.name] = self._entry(policy, spec)
        strict = policy.strict_tools if self._strict is None else self._strict
        unknown = sorted(set(policy.tools) - set(entries))
        if strict and unknown:
            raise PolicyError([
                PolicyProblem(_source(policy, f"tools.{name}"), f"tools.{name}",
                              "names a tool that is not registered with the Guard "
                              f"({_close_names(name, entries)}set strict_tools = false to "
                              "allow)")
                for name in unknown
            ])
        require = policy.require_task if self._require_task is None else self._require_task
        if require:
            require_task_for(self, self._tools)
        return _Config(policy, entries, tuple(policy.idempotency.timeout_exceptions), {}, {},
                       require)


    @staticmethod
    def _entry(policy: Policy, spec: ToolSpec) -> _Entry:
        settings = resolve_tool(policy, spec)
        if is_recorded(spec):
            schema = dict(spec.args_schema or {"type": "object"})
            validator = ArgsValidator(schema) if spec.args_schema is not None else None
            return _Entry(spec, settings, None, {}, validator, schema, True, spec.func)
        try:
            signature: inspect.Signature | None = inspect.signature(spec.func)
        except (TypeError, ValueError):
            signature = None
        injected = injected_parameters(spec.func)
        defaults = {} if signature is None else {
            name: p.default for name, p in signature.parameters.items()
            if p.default is not p.empty and p.default is not None
            and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and name not in injected
        }
        schema = dict(spec.args_schema) if spec.args_schema is not None else (
            schema_from_signature(spec.func)
        )
        settings = _check_argument_names(settings, schema)
        maybe_async = spec.is_async or not inspect.isfunction(spec.func)
        call = coercing_call(spec.func)
        ints = int_parameters(spec.func) if call is spec.func else ()  # else pydantic does it
        return _Entry(spec, settings, signature, defaults, ArgsValidator(schema), schema,
                      maybe_async, call, not spec.is_async, False, ints, injected)

    @property
    def policy(self) -> Policy:
        """The policy in force."""
        return self._config.policy

    @property
    def store(self) -> Store:
        """The state store."""
        return self._store

    def settings(self, tool: str) -> ToolSettings:
        """The effective settings of a registered tool.

        Raises:
            KeyError: no such tool.
        """
        return self._config.entries[tool].settings

    def reload_policy(self, policy: Policy | str | os.PathLike[str]) -> None:
        """Swap the policy atomically. Calls already running finish under the old policy;
        calls that start afterwards see the new one. State (counts, records) is kept.

        Args:
            policy: a :class:`Policy`, or the path of a policy file to load.

        Raises:
            PolicyError: the new policy is invalid, names unregistered tools, or changes the
                store settings of a guard whose store it built (nothing is swapped).
        """
        if policy is None:  # load_policy(None) would read the environment: say so instead
            raise TypeError("reload_policy takes a Policy or a policy file's path; to reload "
                            "from the environment, pass toolguard.policy_from_env()")
        from ._policy import Policy

        if not isinstance(policy, Policy):
            from ._policy_loader import load_policy

            policy = load_policy(policy)
        current = self._config.policy
        if self._own_store and (
                policy.store != current.store
                or policy.idempotency.max_entries != current.idempotency.max_entries):
            # The store was built from the old [store] section; swapping it would lose the
            # state, and keeping it would make the new policy report a store not in use.
            raise PolicyError([PolicyProblem(
                "<reload>", "store",
                "the store settings ([store], idempotency.max_entries) cannot change on "
                "reload: build a new Guard with the new policy")])
        config = self._build(policy)
        with self._lock:
            self._config = config

    def register(
        self,
        tool: str | Callable[..., Any] | ToolSpec | Any,
        *,
        effect: Effect | str | NotGiven = NOT_GIVEN,
        args_schema: Mapping[str, Any] | None = None,
        description: str = "",
        **settings: Any,
    ) -> ToolSpec:
        """Register one more tool; calls that start afterwards see it.

        For a tool that is not a Python function here (an MCP server's tool, a tool of
        another process, a framework's tool object): pass its name, and every call of it
        must bring what executes it (``task.call(name, args, run=...)``); without ``run=``
        such a call raises ``TypeError`` before it is counted. A function, a
        :class:`ToolSpec` or a framework tool object is registered as ``Guard(tools=)``
        would, with the given options over its own. Registering an equal spec again is a
        no-op (adapters may register lazily from several threads).

        Args:
            tool: the tool name, or a tool as ``Guard(tools=)`` takes it.
            effect: ``"readonly"``, ``"mutating"`` or ``"poll"``; default: the policy's
                (``[tools.<name>] effect``, else ``default_effect``).
            args_schema: the JSON Schema of its arguments (e.g. an MCP ``inputSchema``);
                arguments are validated against it; default: none (any object).
            description: for :meth:`tool_schemas`.
            **settings: the decorators' options: ``requires_approval`` (implies mutating
                and idempotency scope ``task``), ``idempotency_scope``,
                ``idempotency_ttl_s``, ``forwards_idempotency_key``, ``max_calls``.

        Returns:
            The registered :class:`ToolSpec`.

        Raises:
            PolicyError: another tool already has this name (nothing is registered).
            jsonschema.exceptions.SchemaError: ``args_schema`` is not a usable schema.
            TypeError / ValueError: an unknown setting, effect or scope.
        """
        spec = named_spec(tool, effect, args_schema, description, settings)
        with self._lock:
            for registered in self._tools:
                if registered.name == spec.name and registered == spec:
                    return registered
            tools = self._tools
            self._tools = [*tools, spec]
            try:
                config = self._build(self._config.policy)
            except BaseException:
                self._tools = tools
                raise
            self._config = config
        return spec

    def tool_schemas(self, format: SchemaFormat = "openai_chat", strict: bool = False  # noqa: A002 - the issue's name
                     ) -> list[dict[str, Any]]:
        """Every registered tool as a tool definition for the model, from the same schemas
        the guard validates with (argument descriptions from the docstrings' ``Args:``).

        Args:
            format: ``"openai_chat"`` (default: ``{"type": "function", "function": {"name",
                "description", "parameters"}}``), ``"openai_responses"``, ``"anthropic"``
                or ``"mcp"``: each accepted as-is by that SDK's own type (see
                :mod:`toolguard._exports`).
            strict: rewrite the schemas for OpenAI strict mode (every property required,
                optional ones nullable; a ``null`` the model sends counts as omitted).

        Returns:
            One JSON-ready dict per tool, in registration order (a fresh copy).

        Raises:
            ValueError: an unknown format, or (``strict``) a tool whose schema cannot be
                made strict (an open object such as ``**kwargs``; the message names it).
        """
        return export_tools(((name, e.spec.description, e.schema)
                             for name, e in self._config.entries.items()), format, strict)

    def task(self, task_id: str) -> Task:
        """A handle on one agent task; use it as ``with guard.task(id) as task:`` (or
        ``async with``) so direct calls of decorated tools are guarded too. The task id
        scopes all state: counts, idempotency records, budgets, approvals."""
        if not isinstance(task_id, str) or not task_id:
            raise ValueError(f"task_id must be a non-empty string, got {task_id!r}")
        return Task(self, task_id)

    def _emit(self, event: AuditEvent) -> bool:
        """Give ``event`` to every sink; False if none could write it. A broken sink does
        not break the call, but it is never silent: the log says which event it did not
        write."""
        written = False
        for sink in self._sinks:
            try:
                sink(event)
                written = True
            except Exception:
                log.exception("toolguard: audit sink %r failed: the event %s %s of %s (%s) "
                              "was NOT written", sink, event.transition, event.decision,
                              event.call_id or event.task_id, event.tool)
        return written

    def _warn_off(self) -> None:
        if not self._warned_off:
            self._warned_off = True
            log.warning("toolguard: policy mode is 'off': tool calls are not guarded")


class Task:
    """One agent task: the unit that counts, remembers and halts. From :meth:`Guard.task`.

    Thread-safe and asyncio-safe: several threads or coroutines may call through one task
    (parallel tool calls); state changes are atomic in the store. ``history`` is per process.
    """

    def __init__(self, guard: Guard, task_id: str) -> None:
        self.guard = guard
        self.task_id = task_id
        self._limit = guard._config.policy.idempotency.max_entries
        self.history: deque[CallRecord] = deque(maxlen=self._limit)
        self._ids = itertools.count(1)
        # Call ids are unique across Task handles, processes and hosts, not only within this
        # handle: a claim (Redis) is released only by the call that made it, and a web worker
        # that opens a handle per request would otherwise reuse "task#1" for every call.
        self._id_suffix = f"@{os.urandom(4).hex()}"  # what secrets.token_hex(4) does
        # signature -> last result, for read-only blocks; oldest first, bounded
        self._last_content: OrderedDict[str, Any] = OrderedDict()
        self._tokens: list[contextvars.Token[Task | None]] = []

    # -- context management -------------------------------------------------------------
    def __enter__(self) -> Task:
        self._tokens.append(_CURRENT_TASK.set(self))
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        _CURRENT_TASK.reset(self._tokens.pop())
        if self.guard._sinks:
            failed = exc_type is not None and issubclass(exc_type, Halt)
            self._event("planning->failed" if failed else "planning->completed", "",
                        HALT if failed else ALLOW,
                        "the turn ended in a halt" if failed else "")

    async def __aenter__(self) -> Task:
        return self.__enter__()

    async def __aexit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        self.__exit__(exc_type, *rest)

    # -- state -------------------------------------------------------------------------
    @property
    def usage(self) -> Usage:
        """The task's budget counters (tool calls, tokens, elapsed seconds)."""
        u = self.guard._store.usage(self.task_id)
        elapsed = 0.0 if u.started_at is None else self.guard._clock() - u.started_at
        return Usage(u.tool_calls, u.per_tool, u.input_tokens, u.output_tokens, elapsed)

    @property
    def halted(self) -> bool:
        """True while the task is halted."""
        return self.guard._store.usage(self.task_id).halted is not None

    @property
    def pending_approvals(self) -> dict[str, ApprovalRecord]:
        """Calls waiting for a human decision, by idempotency key."""
        return self.guard._store.pending_approvals(self.task_id)

    def record_usage(self, input_tokens: int | Any = 0, output_tokens: int = 0) -> None:
        """Report model token usage (counts toward ``budget.max_tokens``).

        Args:
            input_tokens / output_tokens: token counts of one model call (integers ≥ 0).
                Or, as the only argument, an SDK response or its ``usage``: OpenAI Chat
                (``prompt_tokens`` / ``completion_tokens``), OpenAI Responses and Anthropic
                (``input_tokens`` / ``output_tokens``; Anthropic's cache creation and cache
                read tokens are added to the input), SDK objects or dicts.

        Raises:
            ValueError: a count is not an integer ≥ 0.
            TypeError: an object with no token usage in it.
            BudgetExceeded: the task's total tokens now exceed ``max_tokens``; the task halts.
        """
        if not isinstance(input_tokens, int | float | str | bytes | type(None)):
            # a response or usage object (a count of the wrong type stays a ValueError)
            if output_tokens:
                raise TypeError("pass a response (or usage) alone, or two token counts")
            input_tokens, output_tokens = usage_tokens(input_tokens)
        for name, value in (("input_tokens", input_tokens), ("output_tokens", output_tokens)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name} must be an integer ≥ 0, got {value!r}")
        total = self.guard._store.add_usage(self.task_id, cast(int, input_tokens), output_tokens,
                                            self.guard._clock())
        limit = self.guard._config.policy.budget.max_tokens
        if (limit is not None and total > limit
                and self.guard._config.policy.mode is ENFORCE):
            reason = f"budget max_tokens exceeded: too many tokens (limit {limit}, used {total})"
            self.guard._store.set_halted(self.task_id, {
                "kind": "BudgetExceeded", "reason": reason, "budget": "max_tokens",
                "limit": limit, "usage": total})
            self._event("planning->failed", "", HALT, reason)  # no call: the tokens halted it
            raise BudgetExceeded(reason, budget="max_tokens", limit=limit, usage=total,
                                 task_id=self.task_id, tool="")

    def new_turn(self) -> None:
        """A new user message: progress for every signature (counts restart, until_change
        idempotency records lapse), unless the policy sets ``reset_on_user_turn = false``."""
        if self.guard._config.policy.ladder.reset_on_user_turn:
            self.guard._store.new_turn(self.task_id)

    def resume(self) -> None:
        """Lift a halt (the user added a hint and wants to continue). A new turn starts, so
        the call that halted may be tried again, and pending approvals wait afresh."""
        store, now = self.guard._store, self.guard._clock()
        store.set_halted(self.task_id, None)
        store.new_turn(self.task_id)
        # approvals still pending get a fresh approval.timeout_s (else a call that halted on
        # ApprovalTimedOut would halt again at once)
        ttl = self.guard._config.policy.idempotency.ttl_s
        for key, record in self.pending_approvals.items():
            store.set_approval(self.task_id, key, replace(record, requested_at=now), ttl)
        self._event("halted->planning", "", ALLOW, "resumed")

    def approve(self, key: str) -> None:
        """Approve the call with idempotency ``key`` (from ``ToolResult.idempotency_key`` or
        ``pending_approvals``); its next identical attempt executes. Host code only: nothing
        the model sends reaches this."""
        self._decide_approval(key, ApprovalState.APPROVED, "")

    def reject(self, key: str, reason: str = "rejected by the reviewer") -> None:
        """Reject the call with idempotency ``key``; its attempts are blocked with ``reason``."""
        self._decide_approval(key, ApprovalState.REJECTED, reason)

    def _decide_approval(self, key: str, state: str, reason: str) -> None:
        prefix = f"{self.task_id}:"
        if not isinstance(key, str) or not key.startswith(prefix):
            raise ValueError(f"key {key!r} does not belong to task {self.task_id!r}")
        pending = self.pending_approvals.get(key)
        tool = pending.tool if pending else key[len(prefix):].rpartition(":")[0]  # task:tool:h
        record = ApprovalRecord(state, pending.requested_at if pending else 0.0, reason,
                                tool, pending.args if pending else {},
                                pending.args_hash if pending else "")
        self.guard._store.set_approval(self.task_id, key, record,
                                       self.guard._config.policy.idempotency.ttl_s)
        approved = state == ApprovalState.APPROVED
        # a human decided (DESIGN.md §2): needs_review -> executing (its next attempt runs)
        # or -> failed; the key names the call, whose attempts carry the same args_hash
        self._event("needs_review->executing" if approved else "needs_review->failed",
                    record.tool, ALLOW if approved else BLOCK,
                    f"{'approved' if approved else 'rejected'} by the host: {key}"
                    + (f" ({reason})" if reason else ""))

    def _direct_call(self, spec: ToolSpec, func: Callable[..., Any], args: tuple[Any, ...],
                     kwargs: dict[str, Any]) -> Any:
        """A decorated tool called directly inside this task's ``with`` block."""
        return direct_call(self, spec, func, args, kwargs)

    async def _direct_call_async(self, spec: ToolSpec, func: Callable[..., Awaitable[Any]],
                                 args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """:meth:`_direct_call` for ``async def`` tools."""
        return await direct_call_async(self, spec, func, args, kwargs)

    # -- calls -------------------------------------------------------------------------
    def call(self, tool: str, args: Mapping[str, Any] | str | bytes | None = None, *,
             run: Callable[[dict[str, Any]], Any] | None = None,
             approver: Approver | None = None, resumed: bool = False) -> ToolResult:
        """Run one tool call the model proposed, through the guard.

        Args:
            tool: the tool name. args: the arguments as a dict, or the model's JSON text.
            run: what executes the call when the guard lets it run (allow, warn), in place
                of the registered function: ``run(args)`` is passed the validated
                arguments (a dict), and what it returns or raises is recorded exactly as a
                tool result (an error result, an unknown outcome for a timeout type, the
                idempotency record, progress). For a framework's own handler, a tool of
                another process (MCP) or one registered by name only
                (:meth:`Guard.register`). A name no registered tool has is then guarded
                as a tool known by name only (effect from the policy's ``default_effect``
                or ``[tools.<name>]``). ``run`` must not return an awaitable here (an
                error result says to use :meth:`acall`).
            approver: asked instead of the guard's approver if this call needs approval
                (a framework's own human in the loop: a LangGraph ``interrupt()``, an
                SDK's approval that was already given).
            resumed: the framework may be re-running an attempt that went to review (a
                LangGraph resume, pydantic-ai's ``DeferredToolResults``): if this call's
                approval is still pending, this is that same attempt, so it is not counted
                again (not in the repeat count, not in the budgets). Otherwise it counts
                as any call does.

        Returns:
            A :class:`ToolResult`; never a traceback (a tool's exception becomes an error
            result; malformed arguments become decision ``invalid``).

        Raises:
            Halt: the turn must end (``RepeatedToolCalls``, ``BudgetExceeded``,
                ``ApprovalTimedOut``); also every later call until :meth:`resume`.
            CallInProgress: an identical call kept running past the wait timeout.
            StoreError: the store failed and the policy fails closed.
            ToolGuardError: a bug inside the guard (chained to the original exception).
            TypeError: without ``run``, the tool is known by name only (nothing here can
                execute it); raised before the call is counted.
        """
        if run is None:
            self._runnable(tool)
            return self._run_sync(tool, args, None, approver, resumed)[0]
        return self._run_sync(tool, args, sync_runner(tool, run), approver, resumed)[0]

    async def acall(
        self, tool: str, args: Mapping[str, Any] | str | bytes | None = None, *,
        run: Callable[[dict[str, Any]], Any] | None = None,
        approver: Approver | None = None, resumed: bool = False,
    ) -> ToolResult:
        """:meth:`call` for asyncio: awaits ``async def`` tools and async approvers; a plain
        (sync) tool runs in a worker thread (``asyncio.to_thread``), so it does not block the
        event loop and concurrent identical calls share one execution. A sync tool bound to
        its thread (e.g. a ``sqlite3`` connection with ``check_same_thread``) should be
        ``async def`` or called with :meth:`call`. A store that waits on I/O (``RedisStore``,
        any store without ``blocking = False``) is called from a worker thread, so a stalled
        Redis never freezes the event loop; the in-memory store (microseconds) is called on
        the loop.

        ``run`` as for :meth:`call`; here it may be ``async def`` or return an awaitable
        (awaited). A plain ``run`` is called on the event loop's thread (it is meant to hand
        over to a framework's handler, not to block). ``approver`` and ``resumed`` as for
        :meth:`call`."""
        if run is None:
            self._runnable(tool)
        return (await self._run_async(tool, args, run, approver, resumed))[0]

    def _runnable(self, tool: str) -> None:
        entry = self.guard._config.entries.get(tool)
        if entry is not None and is_recorded(entry.spec):
            raise TypeError(
                f"tool {tool!r} is known by name only (guard.register, or a framework tool "
                "object the guard cannot run by itself): pass run= to task.call/acall with "
                "what executes it")

    def _replay_call(self, tool: str, args: Mapping[str, Any] | str | None, result: Any,
                     *, is_error: bool = False, timeout: bool = False) -> ToolResult:
        """Guard a *recorded* call: nothing runs; if the guard lets it run, the recorded
        ``result`` stands in for the tool's (an error when ``is_error``; an unknown outcome
        when ``timeout``). Tools need not be registered: unknown names take their effect from
        the policy. Used by ``toolguard replay``.

        Raises:
            Halt: as for :meth:`call`.
        """
        def recorded(_: dict[str, Any]) -> Any:
            if timeout:
                raise TimeoutError(str(result))
            if is_error:
                raise _RecordedError(result)
            return result

        return self._run_sync(tool, args, recorded)[0]

    def run_tool_calls(self, message: Any, *, on_halt: OnHalt = "raise"
                       ) -> list[dict[str, Any]]:
        """Run the tool calls of one model message and answer them in its provider's shape.

        ``messages += task.run_tool_calls(reply)`` closes a manual loop: an OpenAI Chat
        assistant message (or ``ChatCompletion``) gives ``{"role": "tool", ...}`` messages,
        Responses output items (or a ``Response``) give ``function_call_output`` items, an
        Anthropic ``Message`` gives one user message of ``tool_result`` blocks (with
        ``is_error``); SDK objects or plain dicts (:mod:`toolguard._loops`). Contents carry
        the guard's notices (warn, cached, blocked). The calls run as one batch
        (:meth:`call_batch`: identical calls execute once). A message without tool calls
        gives ``[]``.

        Args:
            message: the model's message, as above.
            on_halt: ``"raise"`` (default): after a halt, every call of the message still
                gets a closing result (the halt, or "not executed"), then the
                :class:`Halt` is raised carrying them as ``tool_messages``; ``"return"``:
                they are returned and ``task.halted`` tells.

        Raises:
            Halt: as above. TypeError: not a message of these shapes, or a tool known by
                name only (it needs ``task.call(..., run=)``). Otherwise as :meth:`call`.
        """
        return run_tool_calls(self, message, on_halt)

    async def arun_tool_calls(self, message: Any, *, on_halt: OnHalt = "raise"
                              ) -> list[dict[str, Any]]:
        """:meth:`run_tool_calls` for asyncio: the distinct calls run concurrently
        (:meth:`acall_batch`); a halt is raised once every call has finished."""
        return await arun_tool_calls(self, message, on_halt)

    def call_batch(
        self, calls: Sequence[tuple[str, Mapping[str, Any] | str | bytes | None]]
    ) -> list[ToolResult]:
        """Run the parallel tool calls of one model message, in order. Identical calls
        (same tool and signature) execute once; the others get that result with decision
        ``cached``. A halt raises after the calls before it ran."""
        return self._batch(calls, self.call)

    async def acall_batch(
        self, calls: Sequence[tuple[str, Mapping[str, Any] | str | bytes | None]]
    ) -> list[ToolResult]:
        """:meth:`call_batch` for asyncio: distinct calls run concurrently. A halt (or any
        other error) raises once every call of the batch has finished, the first in call
        order, so no call is left running, unrecorded, behind it."""
        import asyncio

        order, unique = self._dedupe(calls)
        outcomes = await asyncio.gather(*(self.acall(t, a) for t, a in unique),
                                        return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
        results = cast(list[ToolResult], outcomes)
        return [self._copy_for(results[i], dup) for i, dup in order]

    def _batch(self, calls: Sequence[tuple[str, Any]],
               run: Callable[[str, Any], ToolResult]) -> list[ToolResult]:
        order, unique = self._dedupe(calls)
        results = [run(t, a) for t, a in unique]
        return [self._copy_for(results[i], dup) for i, dup in order]

    def _dedupe(self, calls: Sequence[tuple[str, Any]]
                ) -> tuple[list[tuple[int, bool]], list[tuple[str, Any]]]:
        seen: dict[tuple[str, str], int] = {}
        order: list[tuple[int, bool]] = []
        unique: list[tuple[str, Any]] = []
        entries = self.guard._config.entries
        per_tool = Counter(tool for tool, _ in calls)
        for tool, args in calls:
            if per_tool[tool] == 1:  # the only call of its tool: nothing to merge, no hash
                order.append((len(unique), False))
                unique.append((tool, args))
                continue
            try:
                parsed = (parse_arguments(args) if isinstance(args, (str, bytes))
                          else dict(args or {}))
                entry = entries.get(tool)
                ident = (tool, entry.signature_of(parsed) if entry else args_hash(parsed))
            except (ArgumentsError, CanonicalizationError, TypeError, ValueError):
                ident = (tool, f"#{len(unique)}")  # invalid: never merged
            if ident in seen:
                order.append((seen[ident], True))
            else:
                seen[ident] = len(unique)
                order.append((len(unique), False))
                unique.append((tool, args))
        return order, unique

    @staticmethod
    def _copy_for(result: ToolResult, duplicate: bool) -> ToolResult:
        if not duplicate:
            return result
        return replace(result, decision=CACHED if result.executed else result.decision,
                       reason="identical to another call in the same batch")

    # -- the pipeline ------------------------------------------------------------------
    def _prepare(self, cfg: _Config, tool: str, raw: Any, virtual: bool) -> _Prepared | ToolResult:
        entry = cfg.entries.get(tool)
        call_id = f"{self.task_id}#{next(self._ids)}{self._id_suffix}"
        if entry is None:
            tool = short_name(tool)  # the model's: kept in counters, results and history
            entry = self._unknown_entry(cfg, tool) if not virtual else cfg.virtual.get(tool)
            if entry is None:
                entry = self.guard._entry(cfg.policy, recorded_tool(tool))
                if len(cfg.virtual) < 1000:  # names come from the model: bounded
                    cfg.virtual[tool] = entry
        invalid: str | None = None
        args: dict[str, Any]
        if (too := oversized(raw, cfg.policy.max_args_bytes)) is not None:
            # not parsed, and not kept: history holds a note instead of the arguments
            args, invalid = {}, too
            raw = "<arguments larger than max_args_bytes: not kept>"
        elif type(raw) is dict:  # the common case first: isinstance(raw, Mapping) costs 0.2 µs
            args = raw.copy()
        elif isinstance(raw, (str, bytes)):
            try:
                args = parse_arguments(raw)
            except ArgumentsError as exc:
                args, invalid = {}, f"arguments are not a valid JSON object: {exc}"
        elif raw is None:
            args = {}
        elif isinstance(raw, Mapping):
            args = dict(raw)
        else:
            args, invalid = {}, f"arguments must be a JSON object, got {type(raw).__name__}"
        if invalid is None and (deep := too_deep(raw, args)) is not None:
            args, invalid = {}, deep
        settings = entry.settings
        effect, sig, floats, denied = settings.effect, "", False, settings.deny
        plain = 0
        if invalid is None:
            bound = entry.bound(args)  # rules see the defaults too: one signature, one effect
            if settings.rules and (ruled := entry.effect_for(bound)) is not None:
                effect, denied = ruled, False  # a matching rule classifies the call
            elif settings.shell is not None and (
                    parsed := classify_argv(bound.get(settings.shell))) is not None:
                effect, denied = parsed, False  # so does a recognised shell command
            try:
                sig, floats, plain = hash_args(bound, settings.args)
            except CanonicalizationError as exc:
                invalid = f"argument has no canonical form: {exc}"
        unusable = invalid is not None  # no arguments object at all: never executable
        if entry.unknown:  # counted, halted and laddered like any call, but never run
            invalid = f"unknown tool {tool!r}"
            unusable = True
        elif unusable:
            text = raw if isinstance(raw, str) else _safe_repr(raw)
            sig = digest(b"invalid:" + text.strip().encode("utf-8", "replace"))
        else:
            validator = entry.validator
            if validator is not None:
                # The hash names these very arguments when they serialized as plain JSON and
                # no default was filled in: valid ones seen before skip validation (85 µs on
                # 100 KB with jsonschema-rs).
                known = sig if plain >= validator.memo_bytes and (
                    bound is args or (len(bound) == len(args)
                                      and None not in args.values())) else ""
                invalid = validator.validate(args, known)
                if invalid is not None and None in args.values():
                    # OpenAI strict mode sends null for an optional argument not given
                    # (tool_schemas(strict=True)): null means omitted, as for the hash
                    given = {k: v for k, v in args.items() if v is not None}
                    if validator.validate(given) is None:
                        args, invalid = given, None
                # a direct call's typed values (not parsed JSON text): judge their JSON form
                if invalid is not None and not isinstance(raw, (str, bytes)):
                    invalid = _validate_typed(validator, args, invalid)
                if invalid is not None:
                    audit = cfg.policy.audit
                    invalid = scrub(invalid, args, audit.redact_pattern)
            # the serialized arguments showed an integral float (rare): convert for int hints
            for name, fix in entry.int_params if floats else ():
                value = args.get(name)
                if fix is None:  # a top-level int: inline, the common case
                    if type(value) is float and value.is_integer():
                        args[name] = int(value)
                elif value is not None and (fixed := fix(value)) is not value:
                    args[name] = fixed  # a new container: the caller's stays as it was
        mutating = effect is MUTATING
        scope = settings.idempotency_scope
        return _Prepared(  # positional, in _Prepared's order (hot path)
            entry, call_id, raw, args, effect, sig,
            f"{tool}:{sig}",  # signature
            f"{self.task_id}:{tool}:{sig}",  # key
            invalid, unusable,
            # claim; scope off claims too when approval-gated, so that one approval is one
            # execution however many identical calls race for it
            mutating and invalid is None and (
                scope is not SCOPE_OFF or settings.requires_approval),
            scope is SCOPE_TASK,  # task_scope
            denied, None,
            exact_hash(bound, sig) if invalid is None and settings.args else sig,
            scope is not SCOPE_OFF,  # remember
        )

    def _unknown_entry(self, cfg: _Config, tool: str) -> _Entry:
        """The entry of a name no registered tool has: read-only (no claim), never run. It
        still goes through the pipeline, so a halted task raises, the call is counted in
        the budgets, and a model repeating it climbs the ladder. At most 1,000 are kept."""
        entry = cfg.unknown.get(tool)
        if entry is None:
            spec = ToolSpec(name=tool, func=_no_such_tool, effect=READONLY)
            entry = replace(self.guard._entry(cfg.policy, spec), unknown=True, in_thread=False)
            if len(cfg.unknown) < 1000:
                cfg.unknown[tool] = entry
        return entry

    def _redacted(self, p: _Prepared, cfg: _Config) -> dict[str, Any]:
        if p.redacted is None:
            audit = cfg.policy.audit
            p.redacted = redact(p.args, audit.redact_pattern, audit.max_value_chars)
        return p.redacted

    def _begin(self, cfg: _Config, p: _Prepared, count: bool) -> Snapshot:
        # Positional (hot path: keywords cost 0.3 µs per tuple), in BeginRequest's order.
        req = BeginRequest(
            # names no tool has share one counter: the model can invent any number of them
            UNKNOWN_TOOLS if p.entry.unknown else p.entry.spec.name, p.signature,
            # records and approvals exist only for mutating or approval-gated calls: other
            # calls skip those look-ups
            p.key if p.effect is MUTATING or p.entry.settings.requires_approval else "",
            p.claim, p.task_scope, count, p.effect is POLL, self.guard._clock(),
            cfg.policy.idempotency.in_progress_ttl_s, p.call_id,
        )
        try:
            return self.guard._store.begin(self.task_id, req)
        except Exception as exc:  # noqa: BLE001 - _store_failed re-raises or falls back
            self._store_failed(cfg, p, exc, fallback=True)
        return Snapshot(halted=None, epoch=0, calls=0, tool_calls=0, consecutive_failures=0,
                        tokens=0, started_at=req.now, count=1, polls=0, record=None,
                        approval=None, claimed=False)

    def _store_op(self, cfg: _Config, p: _Prepared, op: Callable[[], T],
                  fallback: Callable[[], T] | None = None) -> T:
        """Run a store operation. When the store fails: ``fail_closed`` (default) raises
        :class:`StoreError`, so nothing runs unguarded; ``fail_open`` returns ``fallback()``
        (a permissive answer) with a warning audit event. Operations without a fallback
        always fail closed. (``begin`` and ``finish``, on every call, inline this with
        :meth:`_store_failed` instead of paying for two closures.)"""
        try:
            return op()
        except Exception as exc:  # noqa: BLE001 - _store_failed re-raises or falls back
            self._store_failed(cfg, p, exc, fallback=fallback is not None)
        assert fallback is not None  # _store_failed raised otherwise
        return fallback()

    def _store_failed(self, cfg: _Config, p: _Prepared, exc: Exception, *,
                      fallback: bool, transition: str = "validating->executing") -> None:
        """Handle a failed store operation: re-raise a guard error; otherwise raise
        :class:`StoreError` (chained) unless the operation has a ``fallback`` and the policy
        fails open, in which case log, emit a warning audit event and return (the caller
        then uses its permissive answer)."""
        if isinstance(exc, ToolGuardError) and not isinstance(exc, StoreError):
            raise exc
        error = exc if isinstance(exc, StoreError) else StoreError(
            f"state store failed for {p.entry.spec.name}: {type(exc).__name__}: {exc}")
        on_error = getattr(self.guard._store, "on_error", None) or cfg.policy.store.on_error
        if not fallback or on_error != "fail_open":
            if error is exc:
                raise exc
            raise error from exc
        reason = f"state store unavailable, running unguarded (store.on_error = fail_open): {error}"
        log.warning("toolguard: %s", reason)
        self._event(transition, p.entry.spec.name, ALLOW, reason, p, cfg)

    def _waited(self, cfg: _Config, p: _Prepared) -> bool:
        """This call's approval is pending: a resumed attempt is the one that waited."""
        if p.effect is not MUTATING and not p.entry.settings.requires_approval:
            return False  # no approval record can exist
        pending: dict[str, ApprovalRecord] = self._store_op(
            cfg, p, lambda: self.guard._store.pending_approvals(self.task_id), fallback=dict)
        return p.key in pending

    def _decide(self, cfg: _Config, p: _Prepared, snap: Snapshot) -> Verdict:
        policy = cfg.policy
        return decide(CallContext(  # positional, in CallContext's order (hot path)
            self.task_id, p.entry.spec.name, p.entry.settings, p.effect, p.sig, p.key,
            p.invalid, policy.budget, policy.approval.timeout_s, self.guard._clock(), p.denied,
            p.exact,
        ), snap)

    def _approval_request(self, cfg: _Config, p: _Prepared, snap: Snapshot,
                          verdict: Verdict) -> ApprovalRequest:
        requested = snap.approval.requested_at if snap.approval else self.guard._clock()
        # the reviewer sees every value in full (redaction is for audit and logs)
        return ApprovalRequest(self.task_id, p.entry.spec.name, dict(p.args), p.key,
                               verdict.reason, requested)

    def _store_approval(self, cfg: _Config, p: _Prepared, snap: Snapshot,
                        req: ApprovalRequest, answer: ApprovalDecision) -> Snapshot:
        state = {"approve": ApprovalState.APPROVED, "reject": ApprovalState.REJECTED}.get(
            answer.verdict, ApprovalState.PENDING)
        record = ApprovalRecord(state, req.requested_at, answer.reason, req.tool, dict(req.args),
                                p.exact)
        self._store_op(cfg, p, lambda: self.guard._store.set_approval(
            self.task_id, p.key, record, cfg.policy.idempotency.ttl_s), fallback=lambda: None)
        self._event("validating->needs_review", p.entry.spec.name, REVIEW,
                    f"approval: {answer.verdict}"
                    + (f" ({answer.reason})" if answer.reason else ""), p=p, cfg=cfg,
                    count=snap.count)
        return snap._replace(approval=record)

    def _execute_sync(self, cfg: _Config, p: _Prepared, executor: Executor | None
                      ) -> _Outcome:
        token = _CURRENT_KEY.set((p.key, p.origin or p.call_id))
        start = time.perf_counter()
        try:
            value = executor(p.args) if executor is not None else p.entry.call(**p.args)
            if p.entry.maybe_async and inspect.isawaitable(value):
                value = _close_awaitable(value, p)
            return _Outcome(value, value, True, False, None, None, time.perf_counter() - start)
        except Exception as exc:  # noqa: BLE001 - any tool error becomes an error envelope
            return self._failure(cfg, exc, time.perf_counter() - start)
        finally:
            _CURRENT_KEY.reset(token)

    async def _execute_async(self, cfg: _Config, p: _Prepared,
                             executor: Executor | None) -> _Outcome:
        token = _CURRENT_KEY.set((p.key, p.origin or p.call_id))
        start = time.perf_counter()
        try:
            if executor is not None:
                value = executor(p.args)
            elif p.entry.in_thread:
                import asyncio

                # A plain function would block the event loop, and concurrent identical
                # acalls would then run one after another and count as repeats instead of
                # sharing one execution. As LangChain and pydantic-ai do for sync tools, run
                # it in a worker thread, with the context (idempotency key, task) copied.
                handoff = Handoff()
                future = asyncio.get_running_loop().run_in_executor(None, functools.partial(
                    contextvars.copy_context().run, handoff.run, p.entry.call, p.args))
                try:
                    value = await asyncio.shield(future)
                except asyncio.CancelledError as cancel:
                    # A thread cannot be stopped, and the caller must not wait for it: the
                    # cancellation goes on at once, and what the tool really did is recorded
                    # when it ends (an identical call meanwhile waits on its claim, so no
                    # second run starts beside the first, and a retry then gets the stored
                    # result instead of an unknown outcome).
                    future.add_done_callback(_retrieved)

                    def outcome(value: Any, exc: BaseException | None, took: float
                                ) -> _Outcome:
                        if isinstance(exc, Exception):
                            return self._failure(cfg, exc, took)
                        if exc is not None:  # the thread was interrupted: unknown
                            return _Outcome(content="interrupted", success=False,
                                            unknown=True, duration_s=took)
                        return _Outcome(value, value, True, False, None, None, took)

                    raise _Detached(cancel, handoff, outcome) from None
            else:
                value = p.entry.call(**p.args)
            if inspect.isawaitable(value):
                value = await value
            return _Outcome(value, value, True, False, None, None, time.perf_counter() - start)
        except Exception as exc:  # noqa: BLE001 - any tool error becomes an error envelope
            return self._failure(cfg, exc, time.perf_counter() - start)
        finally:
            _CURRENT_KEY.reset(token)

    @staticmethod
    def _failure(cfg: _Config, exc: Exception, duration_s: float) -> _Outcome:
        # The error envelope (DESIGN.md §2, cause 1): a one-line structured error, no
        # traceback, so the model does not guess at its own arguments.
        name = type(exc).__name__
        unknown = is_unknown_outcome(exc, cfg.timeout_types)
        if isinstance(exc, _RecordedError):
            content = exc.content
        else:
            message = " ".join(_safe_str(exc).split()) or name  # its __str__ may raise too
            if len(message) > 300:
                message = message[:299] + "…"
            content = f"Error ({name}): {message}"
            if unknown:
                content += (" [the outcome is unknown: the action may or may not have "
                            "happened; check before retrying]")
        return _Outcome(value=None, content=content, success=False, unknown=unknown,
                        error_type=None if isinstance(exc, _RecordedError) else name,
                        exc=exc, duration_s=duration_s)

    def _finish(self, cfg: _Config, p: _Prepared, snap: Snapshot, outcome: _Outcome | None,
                halt: dict[str, Any] | None = None) -> Verdict | None:
        """Record the call's outcome; return the stagnation warn it earned, if any."""
        executed = outcome is not None
        if not executed and not snap.claimed and halt is None:
            return None  # nothing to record: the attempt was counted by begin
        success = outcome is not None and outcome.success
        content = outcome.content if outcome is not None and success else None
        mutating = p.effect is MUTATING
        settings = p.entry.settings
        result_digest, judged = "", ""
        if outcome is not None and not outcome.unknown:
            # compared without its volatile parts (the model still gets it whole)
            normalized = settings.result(outcome.content)
            result_digest = value_digest(normalized) if success else ""
            if p.effect is not POLL and (settings.stagnation_warn_at
                                         or settings.stagnation_block_at):
                judged = outcome_kind(success, normalized) + (
                    result_digest or value_digest(normalized))
        req = FinishRequest(  # positional, in FinishRequest's order (hot path)
            p.entry.spec.name, p.signature, p.key, executed, success,
            outcome is not None and mutating and outcome.unknown,  # unknown
            mutating, result_digest,
            success and p.claim and p.remember,  # store_result
            content, snap.claimed, settings.idempotency_ttl_s, self.guard._clock(),
            halt, p.call_id, judged, settings.max_progress_resets,
        )
        try:
            self.guard._store.finish(self.task_id, req)
        except Exception as exc:  # noqa: BLE001 - _store_failed re-raises or falls back
            if not executed:
                self._store_failed(cfg, p, exc, fallback=False)
            # The tool already ran: a store failure now must not lose its result. Record
            # what we can, warn, and return the result (the claim expires by its TTL).
            try:
                self._store_failed(cfg, p, exc, fallback=True,
                                   transition="executing->planning")
            except StoreError as error:
                log.warning("toolguard: %s (the result is returned)", error)
                self._event("executing->planning", p.entry.spec.name, ALLOW,
                            f"state not recorded: {error}", p, cfg)
                return None
        if req.unknown and (p.entry.settings.requires_approval
                            or not p.entry.settings.forwards_idempotency_key):
            # An earlier approval covered a call that may now have happened: a retry needs
            # a fresh decision.
            record = ApprovalRecord(ApprovalState.PENDING, self.guard._clock(),
                                    "outcome unknown", p.entry.spec.name,
                                    dict(p.args), p.exact)
            self._store_op(cfg, p, lambda: self.guard._store.set_approval(
                self.task_id, p.key, record, p.entry.settings.idempotency_ttl_s),
                fallback=lambda: None)
        return stagnation_after(settings, p.signature, snap, judged) if judged else None

    def _enter_flight(self, cfg: _Config, p: _Prepared, snap: Snapshot, verdict: Verdict
                      ) -> Verdict:
        """Count this call in flight for ``max_consecutive_failures`` (``toolguard._inflight``),
        or block it when the calls already running use up what is left of the budget."""
        limit = cfg.policy.budget.max_consecutive_failures
        if limit is None:
            return verdict
        running = self.guard._inflight_calls.enter((self.task_id, p.entry.spec.name),
                                                   limit - snap.consecutive_failures)
        if running < 0:
            p.counted = True
            return verdict
        return Verdict(BLOCK, reason=(
            f"{p.entry.spec.name} has {running} call(s) running, and the failure budget "
            f"(max_consecutive_failures = {limit}; {snap.consecutive_failures} failed in a "
            "row) counts them: wait for their results before calling it again"))

    def _spend_approval(self, cfg: _Config, p: _Prepared, snap: Snapshot) -> None:
        """One approval, one execution ("its next identical attempt executes"): spent
        before the tool runs, while this call holds the claim, so an identical call that
        waited on it asks again instead of running on the same approval."""
        if snap.approval is not None and snap.approval.state == ApprovalState.APPROVED:
            used = replace(snap.approval, state=ApprovalState.USED)
            self._store_op(cfg, p, lambda: self.guard._store.set_approval(
                self.task_id, p.key, used, p.entry.settings.idempotency_ttl_s))

    def _give_back(self, cfg: _Config, claimed: tuple[_Prepared, Snapshot] | None) -> None:
        """Release the claim of a call that will not run (best effort: the store may be the
        reason), so identical calls need not wait for ``in_progress_ttl_s``."""
        if claimed is not None:
            with contextlib.suppress(Exception):
                self._finish(cfg, *claimed, None)
                self._notify(claimed[0])

    def _abandon(self, cfg: _Config, p: _Prepared, snap: Snapshot) -> None:
        """The tool was interrupted (KeyboardInterrupt, task cancellation): record it as a
        failure whose outcome is unknown, so the claim is not left behind and an identical
        retry of a mutating call goes to review instead of running blind."""
        outcome = _Outcome(content="interrupted", success=False, unknown=True)
        self._finish(cfg, p, snap, outcome)
        self._notify(p)
        self._event("executing->failed", p.entry.spec.name, ALLOW,
                    "interrupted while running: its outcome is unknown", p, cfg)

    def _halt_exc(self, cfg: _Config, p: _Prepared, snap: Snapshot, verdict: Verdict) -> Halt:
        kind = verdict.halt or halt_kind("Halt")
        common: dict[str, Any] = {
            "task_id": self.task_id, "tool": p.entry.spec.name, "args": self._redacted(p, cfg),
            "args_hash": p.sig, "count": snap.count,
        }
        if issubclass(kind, BudgetExceeded):
            return kind(verdict.reason, budget=verdict.budget or "unknown",
                        limit=verdict.limit, usage=verdict.usage, **common)
        return kind(verdict.reason, **common)

    def _conclude(self, cfg: _Config, p: _Prepared, snap: Snapshot, verdict: Verdict,
                  outcome: _Outcome | None, observed: Decision | None) -> ToolResult:
        """Record the outcome and build the result (or raise the halt)."""
        tool = p.entry.spec.name
        decision = verdict.decision
        if decision is HALT and observed is None:
            exc = self._halt_exc(cfg, p, snap, verdict)
            halt = None if snap.halted is not None else {
                "kind": type(exc).__name__, "reason": verdict.reason, "tool": tool,
                "args_hash": p.sig, "count": snap.count}
            if halt is not None and verdict.budget:  # later calls raise the same details
                halt.update(budget=verdict.budget, limit=verdict.limit, usage=verdict.usage)
            self._finish(cfg, p, snap, None, halt=halt)
            result = ToolResult(tool, p.call_id, HALT, f"[toolguard] Halted: {exc}",
                                is_error=True, reason=verdict.reason, count=snap.count,
                                effect=p.effect, args_hash=p.sig, idempotency_key=p.key)
            self._record(p, result, "validating->failed", cfg)
            raise exc
        stagnant = self._finish(cfg, p, snap, outcome)
        if outcome is not None:
            content = outcome.content
            if stagnant is not None and decision is ALLOW:  # this call made the run long
                verdict, decision = stagnant, stagnant.decision
                if observed is not None:
                    observed = decision
            notice = verdict.notice if observed is None else None
            if notice and (outcome.success or verdict is stagnant):
                content = _with_notice(content, notice)
            elif outcome.success is False:
                notice = None
            result = new_result(  # positional, in ToolResult's order (hot path)
                tool, p.call_id, ALLOW if observed is not None else decision, content,
                outcome.value, not outcome.success, outcome.error_type, verdict.reason, notice,
                snap.count, p.effect, p.sig, p.key, outcome.duration_s, observed,
            )
            if outcome.success and p.effect is READONLY:
                self._last_content[p.signature] = outcome.content
                if len(self._last_content) > self._limit:
                    self._last_content.popitem(last=False)
            self._record(p, result, "executing->planning", cfg)
            return result
        result = self._synthetic(p, snap, verdict)
        transition = ("validating->needs_review" if decision is REVIEW
                      else "validating->planning")
        self._record(p, result, transition, cfg)
        return result

    def _synthetic(self, p: _Prepared, snap: Snapshot, verdict: Verdict) -> ToolResult:
        tool = p.entry.spec.name
        decision = verdict.decision
        common: dict[str, Any] = {"reason": verdict.reason, "count": snap.count,
                                  "effect": p.effect, "args_hash": p.sig,
                                  "idempotency_key": p.key}
        if decision is CACHED and snap.record is not None:
            stored = snap.record.content
            return new_result(tool, p.call_id, decision, _with_notice(stored, verdict.notice),
                              value=stored, notice=verdict.notice, **common)
        if decision is INVALID and p.entry.unknown:
            names = ", ".join(sorted(self.guard._config.entries)) or "none"
            text = f"[toolguard] Unknown tool {tool!r}. Available tools: {names}."
        elif decision is INVALID:
            text = (f"[toolguard] Invalid arguments for {tool}, not executed: {verdict.reason}. "
                    "Fix the arguments and call again.")
        elif decision is REVIEW:
            text = (f"[toolguard] {tool} was not executed: {verdict.reason}. It is waiting for a "
                    "human decision; do not retry it until told it was approved.")
        else:
            text = f"[toolguard] Blocked, not executed: {verdict.reason}."
            if verdict.notice:  # what to do instead (the stagnation rule says)
                text += f" {verdict.notice}"
            if verdict.reason.startswith(tool) and "same arguments" in verdict.reason:
                text += (" It will not run again with these arguments: change the arguments, "
                         "use another tool, or tell the user what is blocking you.")
                previous = self._last_content.get(p.signature)
                if p.effect is READONLY and previous is not None:
                    text += f"\nThe previous result of this call was:\n{_as_text(previous)}"
        return new_result(tool, p.call_id, decision, text, is_error=True, **common)

    def _record(self, p: _Prepared, result: ToolResult, transition: str, cfg: _Config) -> None:
        self.history.append(CallRecord(p.entry.spec.name, p.raw_args, result))
        if self.guard._sinks:
            extra: dict[str, Any] = {}
            if result.observed is not None:
                extra["observed"] = str(result.observed)
            if result.error_type:
                extra["error_type"] = result.error_type
            self.guard._emit(AuditEvent(
                time=self.guard._clock(), task_id=self.task_id, call_id=p.call_id,
                tool=p.entry.spec.name, transition=transition, decision=str(result.decision),
                reason=result.reason, effect=str(p.effect), args_hash=p.sig,
                args=self._redacted(p, cfg), count=result.count, duration_s=result.duration_s,
                extra=extra,
            ))

    def _event(self, transition: str, tool: str, decision: Decision, reason: str,
               p: _Prepared | None = None, cfg: _Config | None = None, count: int = 0) -> bool:
        """Emit one audit event; False if no sink could write it."""
        if self.guard._sinks:
            return self.guard._emit(AuditEvent(
                time=self.guard._clock(), task_id=self.task_id,
                call_id=p.call_id if p else "", tool=tool, transition=transition,
                decision=str(decision), reason=reason,
                effect=str(p.effect) if p else "", args_hash=p.sig if p else "",
                args=self._redacted(p, cfg) if p and cfg else {}, count=count,
            ))
        return True

    def _executing(self, cfg: _Config, p: _Prepared, snap: Snapshot, verdict: Verdict
                   ) -> Verdict:
        """Audit the start of an execution. If no sink could write it and the policy fails
        closed (``store.on_error``), the call does not run unaudited: it is blocked."""
        if self._event("validating->executing", p.entry.spec.name, verdict.decision,
                       verdict.reason, p, cfg, snap.count):
            return verdict
        on_error = getattr(self.guard._store, "on_error", None) or cfg.policy.store.on_error
        if on_error != "fail_closed":
            return verdict
        return Verdict(BLOCK, reason="the audit event of this call could not be written, and "
                                     "the policy fails closed (store.on_error): not run unaudited")

    def _pipeline(self, tool: str, raw: Any, executor: Executor | None,
                  approver: Approver | None = None, resumed: bool = False,
                  ) -> Generator[_Io, Any, tuple[ToolResult, BaseException | None]]:
        """The whole pipeline of one call, sans I/O that differs between sync and async: it
        yields an :data:`_Io` request (run the tool, ask the approver, wait for an identical
        call) and is sent the answer. ``_run_sync`` and ``_run_async`` drive it."""
        cfg = self.guard._config
        claimed: tuple[_Prepared, Snapshot] | None = None
        executing = False  # from here on, the execution's own handler records the outcome
        try:
            prepared = self._prepare(cfg, tool, raw, executor is not None)
            if isinstance(prepared, ToolResult):
                self._remember(CallRecord(tool, raw, prepared))
                return prepared, None
            p = prepared
            if cfg.policy.mode is MODE_OFF and not p.unusable:
                self.guard._warn_off()
                outcome: _Outcome = yield _Execute(cfg, p, executor)
                return self._plain(p, outcome), outcome.exc
            snap = self._begin(cfg, p, count=not (resumed and self._waited(cfg, p)))
            if snap.claimed:
                claimed = (p, snap)
            while True:
                verdict = self._decide(cfg, p, snap)
                if verdict.ask_approval and cfg.policy.mode is ENFORCE:
                    req = self._approval_request(cfg, p, snap, verdict)
                    answer: ApprovalDecision = yield _Approve(req,
                                                              approver or self.guard._approver)
                    snap = self._store_approval(cfg, p, snap, req, answer)
                    if answer.verdict != "defer":
                        continue
                    if answer.reason:
                        verdict = replace(verdict, reason=f"{verdict.reason} ({answer.reason})")
                elif verdict.wait and cfg.policy.mode is ENFORCE:
                    yield _Wait(cfg, p)
                    # decide again on fresh state: the other call's result (cached), its
                    # unknown outcome (review), or, if it failed or its worker died, this
                    # call runs (the store did not count it as a repeat)
                    snap = self._begin(cfg, p, count=False)
                    if snap.claimed:
                        claimed = (p, snap)
                    continue
                break
            observed = (verdict.decision if cfg.policy.mode is not ENFORCE
                        and not p.unusable else None)
            final = (self._enter_flight(cfg, p, snap, verdict)
                     if observed is None and verdict.decision.executed else verdict)
            decision = final.decision
            if observed is not None or decision is ALLOW or decision is WARN:  # = .executed
                try:
                    if self.guard._sinks:
                        audited = self._executing(cfg, p, snap, final)
                        if audited is not final and observed is None:  # unaudited: not run
                            return self._conclude(cfg, p, snap, audited, None, None), None
                    if observed is None:
                        self._spend_approval(cfg, p, snap)
                    record = snap.record
                    if record is not None and record.state is UNKNOWN and record.call_id:
                        p.origin = record.call_id  # a retry of that execution: its key
                    executing = True
                    try:
                        outcome = yield _Execute(cfg, p, executor)
                    except _NotStarted:  # cancelled before the tool started: claim back
                        executing = False
                        raise
                    except BaseException:  # interrupted or cancelled (e.g. asyncio.wait_for)
                        self._abandon(cfg, p, snap)
                        raise
                finally:
                    if p.counted:
                        self.guard._inflight_calls.leave((self.task_id, p.entry.spec.name))
                if p.claim:
                    self._notify(p)
                return self._conclude(cfg, p, snap, final, outcome, observed), outcome.exc
            return self._conclude(cfg, p, snap, final, None, None), None
        except StoreError:
            # e.g. fail_closed while storing an approval: the tool did not run, so give the
            # claim back (best effort) rather than leave identical calls waiting for it
            if not executing:
                self._give_back(cfg, claimed)
            raise
        except ToolGuardError:
            raise
        except Exception as exc:  # a bug in the guard: never a half-recorded call
            if claimed is not None:  # do not leave identical calls waiting on a dead claim
                with contextlib.suppress(Exception):
                    self._abandon(cfg, *claimed)
            raise ToolGuardError(f"internal error while guarding {tool}: "
                                 f"{type(exc).__name__}: {_safe_str(exc)}") from exc
        except BaseException:  # cancelled or interrupted before the tool ran (e.g. while a
            # human was being asked): it did not happen, so give the claim back at once
            # instead of making identical calls wait for in_progress_ttl_s
            if not executing:
                self._give_back(cfg, claimed)
            raise

    def _run_sync(self, tool: str, raw: Any, executor: Executor | None,
                  approver: Approver | None = None, resumed: bool = False,
                  ) -> tuple[ToolResult, BaseException | None]:
        pipeline = self._pipeline(tool, raw, executor, approver, resumed)
        try:
            io = next(pipeline)
            while True:
                try:
                    if isinstance(io, _Execute):
                        answer: Any = self._execute_sync(io.cfg, io.p, io.executor)
                    elif isinstance(io, _Approve):
                        answer = _sync_answer(_ask(io.approver, io.request))
                    else:
                        self._wait_sync(io.cfg, io.p)
                        answer = None
                except BaseException as exc:  # noqa: BLE001 - the pipeline handles or re-raises it
                    io = pipeline.throw(exc)
                else:
                    io = pipeline.send(answer)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    async def _run_async(self, tool: str, raw: Any, executor: Executor | None,
                         approver: Approver | None = None, resumed: bool = False,
                         ) -> tuple[ToolResult, BaseException | None]:
        pipeline = self._pipeline(tool, raw, executor, approver, resumed)
        cancelled: BaseException | None = None  # a cancellation whose thread had ended
        done, io = await self._resume(pipeline, None, None)
        while not done:
            try:
                if isinstance(io, _Execute):
                    try:
                        answer: Any = await self._execute_async(io.cfg, io.p, io.executor)
                    except _Detached as detached:
                        if detached.handoff.detach(functools.partial(
                                _record_later, pipeline, tool, detached.outcome)):
                            cancelled = detached.cancel
                            break  # not into the pipeline: its tool still runs
                        handoff = detached.handoff  # it ended meanwhile: record it now
                        answer = detached.outcome(handoff.value, handoff.exc,
                                                  handoff.duration_s)
                        cancelled = detached.cancel
                elif isinstance(io, _Approve):
                    answer = await self._ask_async(io)
                else:
                    await self._wait_async(io.cfg, io.p)
                    answer = None
            except BaseException as exc:  # noqa: BLE001 - the pipeline handles or re-raises it
                done, io = await self._resume(pipeline, None, exc)
            else:
                done, io = await self._resume(pipeline, answer, None)
        if cancelled is not None:
            raise cancelled from None
        return io  # type: ignore[no-any-return]

    async def _resume(self, pipeline: Generator[_Io, Any, Any], answer: Any,
                      exc: BaseException | None) -> tuple[bool, Any]:
        """Run the pipeline to its next I/O request (``(False, request)``) or its end
        (``(True, value)``). The steps between requests call the store: for a store that
        waits on I/O they run in a worker thread, so the event loop goes on. A cancellation
        meanwhile lets the step end, then goes into the pipeline (which gives a claim back
        or records an unknown outcome) and on to the caller."""
        if not self.guard._store_blocks:
            return _step(pipeline, answer, exc)
        import asyncio  # lazily, as everywhere in this module (import time)

        loop = asyncio.get_running_loop()
        context = contextvars.copy_context()
        future = loop.run_in_executor(None, context.run, _step, pipeline, answer, exc)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError as cancel:
            await _until_done(future)
            if not future.cancelled() and future.exception() is None and not future.result()[0]:
                # the pipeline waits at its next request, which never started: a tool that
                # did not run is not an unknown outcome
                io = future.result()[1]
                into = _NotStarted() if isinstance(io, _Execute) else cancel
                thrown = loop.run_in_executor(None, context.run, _step, pipeline, None, into)
                await _until_done(thrown)
                if not thrown.cancelled():
                    thrown.exception()  # it re-raises what it was thrown: retrieved, dropped
            raise

    async def _ask_async(self, io: _Approve) -> ApprovalDecision:
        """The approver's answer under ``acall``. A plain approver (``ConsoleApprover``, a
        blocking HTTP call) runs in a worker thread, as a sync tool does, so the event loop
        goes on; any approver that has not answered after ``approval.timeout_s`` counts as a
        ``defer`` (the call waits in review, and halts once that timeout passes)."""
        import asyncio

        approver = io.approver
        limit = self.guard._config.policy.approval.timeout_s
        call = getattr(approver, "__call__", approver)  # noqa: B004 - instances too
        try:
            if inspect.iscoroutinefunction(approver) or inspect.iscoroutinefunction(call):
                answer = await asyncio.wait_for(_ask_awaited(approver, io.request), limit)
            else:
                loop = asyncio.get_running_loop()
                context = contextvars.copy_context()
                answer = await asyncio.wait_for(loop.run_in_executor(
                    None, context.run, _ask, approver, io.request), limit)
                if inspect.isawaitable(answer):  # a plain function returning an awaitable
                    answer = await asyncio.wait_for(answer, limit)
        except asyncio.TimeoutError:
            return defer(f"the approver did not answer within approval.timeout_s "
                         f"({limit:g} s)")
        except Exception as exc:  # noqa: BLE001 - the approver is user code
            return _approver_failed(exc)
        return _answer(answer)

    def _plain(self, p: _Prepared, outcome: _Outcome) -> ToolResult:
        result = new_result(p.entry.spec.name, p.call_id, ALLOW, outcome.content,
                            value=outcome.value, is_error=not outcome.success,
                            error_type=outcome.error_type, effect=p.effect, args_hash=p.sig,
                            idempotency_key=p.key, duration_s=outcome.duration_s)
        self._remember(CallRecord(p.entry.spec.name, p.raw_args, result))
        return result

    def _remember(self, record: CallRecord) -> None:
        self.history.append(record)

    # -- waiting on an identical call in progress ----------------------------------------
    def _notify(self, p: _Prepared) -> None:
        if p.claim:
            with self.guard._lock:
                event = self.guard._inflight.pop(p.key, None)
            if event is not None:
                event.set()

    def _waiter(self, p: _Prepared) -> threading.Event:
        with self.guard._lock:
            return self.guard._inflight.setdefault(p.key, threading.Event())

    def _settled(self, cfg: _Config, p: _Prepared) -> bool:
        record = self._store_op(cfg, p, lambda: self.guard._store.get_record(
            self.task_id, p.key, self.guard._clock()), fallback=lambda: None)
        return record is None or record.state is not IN_PROGRESS

    def _wait_sync(self, cfg: _Config, p: _Prepared) -> None:
        if _loop_running():
            # Blocking here would block the event loop, which the identical call (an acall
            # on this loop) needs in order to finish: a deadlock until the timeout.
            raise self._in_progress(cfg, p, CallInProgress(
                p.entry.spec.name, p.key, 0.0,
                "a synchronous call on an event loop's thread cannot wait for it; await "
                "task.acall(...) instead"))
        limit = cfg.policy.idempotency.wait_timeout_s
        start = time.monotonic()
        pause = _WAIT_POLL_S[0]
        event = self._waiter(p)
        while not self._settled(cfg, p):
            waited = time.monotonic() - start
            if waited >= limit:
                raise self._in_progress(cfg, p, CallInProgress(p.entry.spec.name, p.key,
                                                               waited))
            event.wait(min(pause, limit - waited))
            pause = min(pause * 2, _WAIT_POLL_S[1])

    def _in_progress(self, cfg: _Config, p: _Prepared, exc: CallInProgress) -> CallInProgress:
        """Audit a call refused because its identical twin is still running (it was counted
        by begin, so its refusal is on record too)."""
        self._event("validating->failed", p.entry.spec.name, BLOCK, str(exc), p, cfg)
        return exc

    async def _wait_async(self, cfg: _Config, p: _Prepared) -> None:
        import asyncio

        limit = cfg.policy.idempotency.wait_timeout_s
        start = time.monotonic()
        pause = _WAIT_POLL_S[0]
        while not (await asyncio.to_thread(self._settled, cfg, p) if self.guard._store_blocks
                   else self._settled(cfg, p)):
            waited = time.monotonic() - start
            if waited >= limit:
                raise self._in_progress(cfg, p, CallInProgress(p.entry.spec.name, p.key,
                                                               waited))
            await asyncio.sleep(min(pause, limit - waited))
            pause = min(pause * 2, _WAIT_POLL_S[1])


def _check_argument_names(settings: ToolSettings, schema: Mapping[str, Any]) -> ToolSettings:
    """The policy's per-argument options and rules must name arguments the tool has: one
    that names none would silently do nothing (an ``ignore`` that ignores nothing splits one
    call into many signatures). An environment variable spells names in any case
    (``..._ARGS__REQUESTID__IGNORE``): it is matched to the argument without regard to case.

    Raises:
        PolicyError: a name the tool's arguments do not have (unless it takes ``**kwargs``).
    """
    properties = schema.get("properties")
    if not isinstance(properties, dict) or schema.get("additionalProperties", True) is not False:
        return settings  # **kwargs (or a schema that allows more): any name may come
    known = list(properties)
    by_case: dict[str, list[str]] = {}
    for name in known:
        by_case.setdefault(name.casefold(), []).append(name)
    problems: list[PolicyProblem] = []
    options = dict(settings.args)
    for name in list(options):
        if name in properties:
            continue
        source = settings.sources.get("args", "")
        spelled = by_case.get(name.casefold(), [])
        if source.startswith("env ") and len(spelled) == 1:
            options[spelled[0]] = options.pop(name)
            continue
        problems.append(PolicyProblem(source or "<policy>", f"tools.{settings.name}.args.{name}",
                                      _no_such_argument(name, known)))
    for i, rule in enumerate(settings.rules):
        for name, _ in rule.compiled:
            if name not in properties:
                problems.append(PolicyProblem(
                    settings.sources.get("rules", "<policy>"),
                    f"tools.{settings.name}.rules[{i}].match.{name}",
                    _no_such_argument(name, known)))
    if problems:
        raise PolicyError(problems)
    return settings if options == settings.args else replace(settings, args=options)


def _no_such_argument(name: str, known: list[str]) -> str:
    hint = _close_names(name, dict.fromkeys(known)).rstrip()
    return (f"the tool has no argument {name!r} (its arguments: {', '.join(known)})"
            + (f"; {hint}" if hint else ""))


def _no_such_tool(**_: Any) -> None:  # pragma: no cover - an unknown tool is never run
    raise RuntimeError("an unknown tool was executed")


def _retrieved(future: asyncio.Future[Any]) -> None:
    """Read a detached thread's exception, so asyncio does not report it as never retrieved
    (the pipeline records it)."""
    if not future.cancelled():
        future.exception()


def _record_later(pipeline: Generator[_Io, Any, Any], tool: str,
                  outcome: Callable[[Any, BaseException | None, float], _Outcome],
                  value: Any, exc: BaseException | None, duration_s: float) -> None:
    """In the worker thread of a cancelled ``acall``, once its tool ended: record what the
    tool did (the pipeline's last step). Nobody awaits this: a failure is logged."""
    try:
        pipeline.send(outcome(value, exc, duration_s))
    except StopIteration:
        return
    except BaseException:
        log.exception("toolguard: recording the outcome of cancelled %s failed", tool)
        return
    log.error("toolguard: the pipeline of cancelled %s asked for more I/O", tool)
    pipeline.close()


def _step(pipeline: Generator[_Io, Any, Any], answer: Any, exc: BaseException | None
          ) -> tuple[bool, Any]:
    """Resume ``pipeline`` with ``answer`` (or throw ``exc`` into it): ``(False, request)``
    at its next I/O request, ``(True, value)`` when it returns (a StopIteration cannot cross
    a thread's future)."""
    try:
        return False, (pipeline.throw(exc) if exc is not None else pipeline.send(answer))
    except StopIteration as done:
        return True, done.value


def _loop_running() -> bool:
    asyncio = sys.modules.get("asyncio")  # not imported: no event loop can be running
    if asyncio is None:
        return False
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _source(policy: Policy, path: str) -> str:
    """Where ``path`` was set, for a problem report: the file or ``env VAR``."""
    found = policy.source_of(path)
    if found != "built-in":
        return found
    return policy.sources[-1] if policy.sources else "<policy>"


def _close_names(name: str, entries: Mapping[str, Any]) -> str:
    """``"did you mean 'x'? "`` when one of ``entries`` (tool or argument names) is close to
    ``name``, else ``""``."""
    import difflib

    close = difflib.get_close_matches(name, list(entries), n=1)
    return f"did you mean {close[0]!r}? " if close else ""


def _ask(approver: Approver, request: ApprovalRequest) -> Any:
    """The approver's answer, or a ``defer`` saying why there is none: a failing or
    misbehaving approver never runs the call and never breaks the guard."""
    try:
        return approver(request)
    except Exception as exc:  # the approver is user code: any failure
        log.warning("toolguard: the approver failed for %s", request.tool, exc_info=True)
        return _approver_failed(exc)


async def _ask_awaited(approver: Approver, request: ApprovalRequest) -> Any:
    answer = _ask(approver, request)
    return await answer if inspect.isawaitable(answer) else answer


def _approver_failed(exc: Exception) -> ApprovalDecision:
    return defer(f"the approver failed ({type(exc).__name__}: {_safe_str(exc)})")


def _answer(answer: Any) -> ApprovalDecision:
    if isinstance(answer, ApprovalDecision):
        if answer.verdict in ("approve", "reject", "defer"):
            return answer
        # ApprovalDecision("yes"): not a decision. Taken as approve, it would bypass the
        # reviewer's intent; looped on, it asked the approver millions of times.
        return defer(f"the approver answered the verdict {_safe_repr(answer.verdict, 40)}, "
                     "not approve, reject or defer")
    return defer(f"the approver answered {_safe_repr(answer, 60)}, not an ApprovalDecision")


def _sync_answer(answer: Any) -> ApprovalDecision:
    if inspect.isawaitable(answer):
        _discard(answer)
        return defer("the approver is async: call the tool with task.acall()")
    return _answer(answer)


def _discard(awaitable: Awaitable[Any]) -> None:
    close = getattr(awaitable, "close", None)
    if callable(close):
        close()


def _close_awaitable(value: Awaitable[Any], p: _Prepared) -> Any:
    _discard(value)
    raise TypeError(f"{p.entry.spec.name} is async: call it with task.acall()")
