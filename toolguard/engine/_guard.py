"""The enforcer: :class:`Guard` holds the registered tools, the policy and the state store,
and hands out :class:`Task` handles. Building a tool's entry (its schema, defaults, effect and
settings) happens here once per tool; its arguments are checked in ``_guard_args``; the
call path is in the stage modules named in ``toolguard.engine._engine``.

``Task`` is here, beside the class it names as its guard's type, and adds nothing else: its
state and public methods are :class:`~toolguard.engine._task.TaskBase`'s, which sees the
guard through a protocol, so ``_task`` never imports this module."""

from __future__ import annotations

import inspect
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from toolguard._errors import (
    PolicyError,
    PolicyProblem,
)
from toolguard._types import Effect
from toolguard.stores._base import Store
from toolguard.stores._lock import YieldingLock
from toolguard.stores.memory import MemoryStore
from toolguard.tools._coerce import coercing_call, int_parameters
from toolguard.tools._decorators import (
    NOT_GIVEN,
    NotGiven,
    ToolSpec,
    check_options,
    is_recorded,
    spec_of,
)
from toolguard.tools._entries import _check_argument_names, _close_names, _required, _source
from toolguard.tools._exports import SchemaFormat, export_tools
from toolguard.tools._injected import injected_parameters
from toolguard.tools._integration import named_spec, require_task_for
from toolguard.tools._resolve import ToolSettings, resolve_tool, spell_env_tools
from toolguard.tools._schema import schema_from_signature, tool_validator

from ._approval import (
    Approver,
    deny_all,
)
from ._audit import AuditSink
from ._call import _Config, _Entry
from ._cost import Price, check_prices
from ._guard_args import as_policy, audit_sinks, check_approver, store_kind
from ._inflight import InFlight
from ._task import TaskBase

if TYPE_CHECKING:
    from toolguard.policy._model import Policy

__all__ = ["Guard", "Task"]

log = logging.getLogger("toolguard")


class Guard:
    """Tools + policy + state store: the enforcer.

    Args:
        policy: a :class:`~toolguard.Policy` (:func:`toolguard.load_policy`,
            :func:`toolguard.load_policy_dict`), or the path of a policy file (``str`` or
            ``os.PathLike``) loaded with :func:`toolguard.load_policy` (environment
            overrides included), as :meth:`reload_policy` takes it; default: built-in
            defaults.
        tools: the tool functions, decorated or plain (plain ones take ``default_effect``),
            :class:`ToolSpec` objects, or framework tool objects (LangChain ``BaseTool``,
            Agents SDK ``FunctionTool``, Anthropic ``BetaFunctionTool``: name, description
            and schema are read from them, the effect comes from the policy unless ``@tg.*``
            marked them; see :meth:`register`).
        store: where per-task state lives; default a :class:`~toolguard.stores.MemoryStore`
            (or a ``RedisStore`` or ``SQLiteStore`` when the policy's ``[store]`` names
            ``backend = "redis"`` / ``"sqlite"`` or a ``redis://`` / ``sqlite:`` URL).
        approver: decides calls that need approval: a callable taking an
            :class:`toolguard.ApprovalRequest`, returning an :class:`toolguard.ApprovalDecision`
            or an awaitable of one; default :func:`toolguard.deny_all`.
        audit: sinks receiving every :class:`toolguard.AuditEvent`: an iterable of
            callables taking one event.
        clock: returns the time in seconds (TTLs, budgets, approval timeouts); inject a fake
            clock in tests (``toolguard.testing.FakeClock``).
        strict_tools: override the policy's ``strict_tools``.
        require_task: override the policy's ``require_task``: a registered ``@tg.*``
            function called outside any task raises ``ToolGuardError`` (naming it) instead
            of running unguarded.
        price: what model tokens cost, for dollar budgets and ``usage().cost_usd``:
            ``price(model, input_tokens, output_tokens)`` returning US dollars, or ``None``
            for a model whose price is unknown; default the ``genai-prices`` table
            (extra ``agent-toolguard[prices]``).

    Raises:
        TypeError: ``policy`` is neither a Policy nor a path (a mapping: use
            :func:`toolguard.load_policy_dict`); ``approver`` or a sink of ``audit`` cannot
            be called with one argument; ``audit`` is not an iterable.
        PolicyError: the policy file is invalid, the policy names tools that are not
            registered (``strict_tools``),
            two tools share a name, or a :class:`ToolSpec` has an option value a policy
            would refuse (``max_calls=0``), or the policy sets a dollar budget
            (``max_cost_usd``) with neither ``price`` nor ``genai-prices`` installed.

    Thread-safe: one guard serves many tasks and threads; state lives in the store.
    """

    def __init__(
        self,
        policy: Policy | str | os.PathLike[str] | None = None,
        tools: Iterable[Callable[..., Any] | ToolSpec | Any] = (),
        *,
        store: Store | None = None,
        approver: Approver | None = None,
        audit: Iterable[AuditSink] = (),
        clock: Callable[[], float] = time.time,
        strict_tools: bool | None = None,
        require_task: bool | None = None,
        price: Price | None = None,
    ) -> None:
        self._clock = clock
        self._price = price
        self._tools = [spec_of(t) for t in tools]
        for spec in self._tools:  # a ToolSpec built by hand; a decorator checked its own
            check_options(spec.name, {k: v for k, v in spec.given().items() if k != "effect"},
                          "Guard(tools=)")
        self._strict = strict_tools
        self._require_task = require_task
        if approver is not None:
            check_approver(approver)
        self._approver: Approver = approver or deny_all
        self._sinks: tuple[AuditSink, ...] = audit_sinks(audit)
        self._lock = YieldingLock()  # held for microseconds; waiters never convoy
        self._warned_off = False
        if policy is None:
            from toolguard.policy._model import Policy  # pydantic loads with the first guard

            policy = Policy()
        policy = as_policy(policy, "Guard(policy=)")
        self._config = self._build(policy)
        self._own_store = store is None  # built from the policy's [store] section
        self._store: Store = store if store is not None else self._default_store(policy)
        # a store whose operations wait on I/O runs off the event loop under acall
        self._store_blocks = bool(getattr(self._store, "blocking", True))
        # the in-memory store's own begin and finish (a MemoryStore, or a subclass that
        # leaves them alone) take the request's fields as arguments (toolguard.engine._admit)
        kind = type(self._store)
        self._fields = (isinstance(self._store, MemoryStore) and kind.begin is MemoryStore.begin
                        and kind.finish is MemoryStore.finish
                        and getattr(kind, "begin_fields", None) is MemoryStore.begin_fields
                        and getattr(kind, "finish_fields", None) is MemoryStore.finish_fields)
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
        from toolguard.policy._loader import policy_from_env

        return cls(policy_from_env(env), tools, **kwargs)

    def _default_store(self, policy: Policy) -> Store:
        store = policy.store
        kind = store_kind(policy)
        if kind == "redis":
            from toolguard.stores.redis import RedisStore

            return RedisStore.from_policy(store)
        if kind == "sqlite":
            from toolguard.stores.sqlite import SQLiteStore

            try:
                return SQLiteStore.from_policy(store, clock=self._clock)
            except ValueError as exc:
                raise PolicyError([PolicyProblem(policy.source_of("store.url"), "store.url",
                                                 str(exc))]) from None
        return MemoryStore(
            max_entries=policy.idempotency.max_entries,
            state_ttl_s=store.state_ttl_s,
            clock=self._clock,
        )

    def _build(self, policy: Policy) -> _Config:
        policy = spell_env_tools(policy, [spec.name for spec in self._tools])
        check_prices(policy, self._price)
        entries: dict[str, _Entry] = {}
        for spec in self._tools:
            if spec.name in entries:
                raise PolicyError([PolicyProblem("<guard>", f"tools.{spec.name}",
                                                 "two registered tools share this name")])
            entries[spec.name] = self._entry(policy, spec)
        strict = policy.strict_tools if self._strict is None else self._strict
        unknown = sorted(set(policy.tools) - set(entries))
        if strict and unknown:
            from toolguard.policy._layers import problem_in_file  # parses TOML: not at import

            raise PolicyError([
                problem_in_file(_source(policy, f"tools.{name}"), ("tools", name),
                                "names a tool that is not registered with the Guard "
                                f"({_close_names(name, entries)}set strict_tools = false "
                                "to allow)")
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
            validator = (tool_validator(spec.name, spec.args_schema, "Guard")
                         if spec.args_schema is not None else None)
            return _Entry(spec, settings, None, {}, validator, schema, True, spec.func,
                          required=_required(schema, None, frozenset()), not_sync=True)
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
        validator = tool_validator(spec.name, schema, "Guard")
        return _Entry(spec, settings, signature, defaults, validator, schema,
                      # a sync tool runs in a worker thread under acall unless declared inline
                      maybe_async, call, not spec.is_async and not settings.inline, False,
                      ints, injected,
                      _required(schema, signature, injected), spec.is_async)

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
            TypeError: ``policy`` is neither a Policy nor a path.
            PolicyError: the new policy is invalid, names unregistered tools, or changes the
                store settings of a guard whose store it built (nothing is swapped).
        """
        if policy is None:  # load_policy(None) would read the environment: say so instead
            raise TypeError("reload_policy takes a Policy or a policy file's path; to reload "
                            "from the environment, pass toolguard.policy_from_env()")
        policy = as_policy(policy, "reload_policy")
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
            PolicyError: another tool already has this name (nothing is registered), or a
                setting has a value a policy's ``[tools.<name>]`` table would refuse
                (``max_calls=0``); the message names ``tools.<name>.<setting>``.
            jsonschema.exceptions.SchemaError: ``args_schema`` is not a usable schema (the
                message names the tool).
            TypeError: ``args_schema`` is not a mapping, ``description`` not a string.
            TypeError / ValueError: an unknown setting, effect or scope.
        """
        if not isinstance(description, str):
            raise TypeError(f"register(): description= must be a string, got {description!r}")
        name = tool if isinstance(tool, str) else spec_of(tool).name
        check_options(name, {**settings, "effect": effect}, "guard.register")
        if args_schema is not None:  # compiled here too, for the error to say register
            tool_validator(name, args_schema, "guard.register")
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
                :mod:`toolguard.tools._exports`).
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

    def _warn_off(self) -> None:
        if not self._warned_off:
            self._warned_off = True
            log.warning("toolguard: policy mode is 'off': tool calls are not guarded")


class Task(TaskBase):
    """One agent task: the unit that counts, remembers and halts. From :meth:`Guard.task`.

    Thread-safe and asyncio-safe: several threads or coroutines may call through one task
    (parallel tool calls); state changes are atomic in the store. ``history`` is per process.
    """

    guard: Guard

    def __init__(self, guard: Guard, task_id: str) -> None:
        super().__init__(guard, task_id)
