"""The enforcer: :class:`Guard` (tools + policy + store) and :class:`Task` (one agent task).

Every call runs one pipeline: prepare (parse JSON text, bind defaults, apply the policy's
argument options, canonical hash, per-call effect from rules, argument schema) → ``store.begin``
(count the attempt, read state, claim the idempotency key) → the pure
:func:`~toolguard._core.decide` → approval / wait when it asks → execute → ``store.finish`` →
history and audit. :meth:`Task.call` and :meth:`Task.acall` are thin shells over the same
helpers; only tool execution, the approver and waiting differ between them.
"""

from __future__ import annotations

import contextvars
import inspect
import itertools
import logging
import os
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, cast

from . import _admit as _admit_stage
from . import _approve as _approve_stage
from . import _batch as _batch_stage
from . import _events as _events_stage
from . import _execute as _execute_stage
from . import _pipeline as _pipeline_stage
from . import _prepare as _prepare_stage
from . import _record as _record_stage
from . import _wait as _wait_stage
from ._approval import (
    Approver,
    deny_all,
)
from ._audit import AuditEvent, AuditSink
from ._call import CallRecord, _Config, _Entry, _RecordedError
from ._context import CURRENT_KEY as _CURRENT_KEY
from ._context import CURRENT_TASK as _CURRENT_TASK
from ._decorators import NOT_GIVEN, NotGiven, ToolSpec, is_recorded, spec_of
from ._direct import direct_call, direct_call_async
from ._entries import _check_argument_names, _close_names, _source
from ._errors import (
    BudgetExceeded,
    Halt,
    PolicyError,
    PolicyProblem,
)
from ._exports import SchemaFormat, export_tools
from ._inflight import InFlight
from ._injected import injected_parameters
from ._integration import named_spec, require_task_for, sync_runner
from ._lock import YieldingLock
from ._loops import OnHalt, arun_tool_calls, run_tool_calls, usage_tokens
from ._outcomes import forwarded_key
from ._resolve import ToolSettings, resolve_tool, spell_env_tools
from ._results import ToolResult, Usage
from ._schema import (
    ArgsValidator,
    coercing_call,
    int_parameters,
    schema_from_signature,
)
from ._types import (
    ALLOW,
    ENFORCE,
    HALT,
    Effect,
)
from .stores._base import (
    ApprovalRecord,
    ApprovalState,
    Store,
)
from .stores.memory import MemoryStore

if TYPE_CHECKING:

    from ._policy import Policy

__all__ = ["CallRecord", "Guard", "Task", "current_idempotency_key"]

log = logging.getLogger("toolguard")


def current_idempotency_key() -> str | None:
    """Inside a guarded tool, the key to forward to its backend (``"task:tool:args_hash:"``
    and a digest of the execution it belongs to, :func:`toolguard._outcomes.forwarded_key`);
    ``None`` outside one. Pass it on (e.g. as an ``Idempotency-Key`` header) and declare the
    tool ``forwards_idempotency_key=True``: a retry after a timeout then reuses the key and
    the backend deduplicates, instead of the retry going to review."""
    current = _CURRENT_KEY.get()
    return None if current is None else forwarded_key(*current)


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

    def _emit(self, event: AuditEvent) -> None:
        for sink in self._sinks:
            try:
                sink(event)
            except Exception:  # a broken sink must not break the call
                log.exception("toolguard audit sink %r failed", sink)

    def _warn_off(self) -> None:
        if not self._warned_off:
            self._warned_off = True
            log.warning("toolguard: policy mode is 'off': tool calls are not guarded")


class Task:
    """One agent task: the unit that counts, remembers and halts. From :meth:`Guard.task`.

    Thread-safe and asyncio-safe: several threads or coroutines may call through one task
    (parallel tool calls); state changes are atomic in the store. ``history`` is per process.
    """

    # the call path's stages (one module each; see the module list in the README)
    _begin = _admit_stage._begin
    _store_op = _admit_stage._store_op
    _store_failed = _admit_stage._store_failed
    _waited = _admit_stage._waited
    _decide = _admit_stage._decide
    _decide_approval = _approve_stage._decide_approval
    _approval_request = _approve_stage._approval_request
    _store_approval = _approve_stage._store_approval
    _spend_approval = _approve_stage._spend_approval
    _ask_async = _approve_stage._ask_async
    _batch = _batch_stage._batch
    _dedupe = _batch_stage._dedupe
    _copy_for = staticmethod(_batch_stage._copy_for)
    _record = _events_stage._record
    _event = _events_stage._event
    _executing = _events_stage._executing
    _execute_sync = _execute_stage._execute_sync
    _execute_async = _execute_stage._execute_async
    _failure = staticmethod(_execute_stage._failure)
    _give_back = _execute_stage._give_back
    _abandon = _execute_stage._abandon
    _pipeline = _pipeline_stage._pipeline
    _run_sync = _pipeline_stage._run_sync
    _run_async = _pipeline_stage._run_async
    _resume = _pipeline_stage._resume
    _prepare = _prepare_stage._prepare
    _unknown_entry = _prepare_stage._unknown_entry
    _redacted = _prepare_stage._redacted
    _finish = _record_stage._finish
    _halt_exc = _record_stage._halt_exc
    _conclude = _record_stage._conclude
    _synthetic = _record_stage._synthetic
    _plain = _record_stage._plain
    _remember = _record_stage._remember
    _enter_flight = _wait_stage._enter_flight
    _notify = _wait_stage._notify
    _waiter = _wait_stage._waiter
    _settled = _wait_stage._settled
    _wait_sync = _wait_stage._wait_sync
    _in_progress = _wait_stage._in_progress
    _wait_async = _wait_stage._wait_async

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


    # -- the pipeline ------------------------------------------------------------------


    # -- waiting on an identical call in progress ----------------------------------------


