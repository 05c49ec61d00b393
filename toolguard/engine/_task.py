"""One agent task: :class:`TaskBase`, the unit that counts, remembers and halts, with the
public methods of :class:`~toolguard.Task` (``call``, ``acall``, ``begin``, batches, usage,
approvals, ``resume``). A call goes from :meth:`TaskBase.call` to
:func:`toolguard.engine._path.call_sync`, the one call path, which reads the task through
:class:`toolguard.engine._call.TaskState` (see ``toolguard.engine._engine``).

The task knows its guard through :class:`~toolguard.engine._call.GuardState` only:
``Task`` itself, which adds the guard's type, lives beside ``Guard`` in
``toolguard.engine._guard``, so that neither module imports the other."""

from __future__ import annotations

import contextvars
import itertools
import os
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict, replace
from typing import TYPE_CHECKING, Any, cast

from toolguard._errors import Halt, StoreError
from toolguard._outcomes import forwarded_key
from toolguard._results import ToolResult, Usage
from toolguard._types import ALLOW, HALT
from toolguard.stores._base import (
    ApprovalRecord,
    ApprovalState,
)
from toolguard.tools._context import CURRENT_KEY as _CURRENT_KEY
from toolguard.tools._context import CURRENT_TASK as _CURRENT_TASK
from toolguard.tools._context import ActiveTask
from toolguard.tools._decorators import ToolSpec, is_recorded
from toolguard.tools._integration import sync_runner

from . import _approve, _batch, _events, _path, _usage
from . import _pending as _pending_stage
from ._approval import Approver
from ._call import CallRecord, GuardState, _RecordedError
from ._cost import to_usd
from ._direct import direct_call, direct_call_async
from ._loops import OnHalt, arun_tool_calls, run_tool_calls
from ._pending import PendingCall

if TYPE_CHECKING:
    from typing_extensions import Self

    from toolguard.hashing._normalize import ResultNormalizer

__all__ = ["TaskBase", "current_idempotency_key"]


def current_idempotency_key() -> str | None:
    """Inside a guarded tool, the key to forward to its backend (``"task:tool:args_hash:"``
    and a digest of the execution it belongs to, :func:`toolguard._outcomes.forwarded_key`);
    ``None`` outside one. Pass it on (e.g. as an ``Idempotency-Key`` header) and declare the
    tool ``forwards_idempotency_key=True``: a retry after a timeout then reuses the key and
    the backend deduplicates, instead of the retry going to review."""
    current = _CURRENT_KEY.get()
    return None if current is None else forwarded_key(*current)


class TaskBase:
    """One agent task: what :class:`~toolguard.Task` is, but for the guard's type (see the
    module's docstring).

    Thread-safe and asyncio-safe: several threads or coroutines may call through one task
    (parallel tool calls); state changes are atomic in the store. ``history`` is per process.
    """

    def __init__(self, guard: GuardState, task_id: str) -> None:
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
        self._tokens: list[contextvars.Token[ActiveTask | None]] = []
        # short text result -> (its normalizer, digest, kind); bounded (_record._digest)
        self._digests: dict[str, tuple[ResultNormalizer, str, str]] = {}
        # signature -> digest of its last successful result here (_record.progress_of)
        self._last_digest: OrderedDict[str, str] = OrderedDict()

    # -- context management -------------------------------------------------------------
    def __enter__(self) -> Self:
        self._tokens.append(_CURRENT_TASK.set(self))
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        _CURRENT_TASK.reset(self._tokens.pop())
        if self.guard._sinks:
            failed = exc_type is not None and issubclass(exc_type, Halt)
            try:
                usage: dict[str, Any] = {"usage": asdict(self.usage)}
            except StoreError:  # the end is still audited, without the figures
                usage = {}
            _events.event(self, "planning->failed" if failed else "planning->completed", "",
                        HALT if failed else ALLOW,
                        "the turn ended in a halt" if failed else "", extra=usage)

    async def __aenter__(self) -> Self:
        return self.__enter__()

    async def __aexit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        self.__exit__(exc_type, *rest)

    # -- state -------------------------------------------------------------------------
    @property
    def usage(self) -> Usage:
        """The task's budget counters (tool calls, tokens, elapsed seconds, cost)."""
        u = self.guard._store.usage(self.task_id)
        elapsed = 0.0 if u.started_at is None else self.guard._clock() - u.started_at
        return Usage(u.tool_calls, u.per_tool, u.input_tokens, u.output_tokens, elapsed,
                     to_usd(u.cost_nusd), {k: to_usd(v) for k, v in u.cost_per_tool.items()},
                     u.unpriced_tokens)

    @property
    def halted(self) -> bool:
        """True while the task is halted."""
        return self.guard._store.usage(self.task_id).halted is not None

    @property
    def pending_approvals(self) -> dict[str, ApprovalRecord]:
        """Calls waiting for a human decision, by idempotency key."""
        return self.guard._store.pending_approvals(self.task_id)

    def record_usage(self, input_tokens: int | Any = 0, output_tokens: int = 0, *,
                     model: str | None = None, tool: str | None = None) -> None:
        """Report model token usage (counts toward ``budget.max_tokens``) and, priced by
        the model's name, toward the dollar budgets (``max_cost_usd``).

        Args:
            input_tokens: input tokens of one model call (an integer ≥ 0). Or, as the only
                argument, an SDK response or its ``usage``: OpenAI Chat (``prompt_tokens`` /
                ``completion_tokens``), OpenAI Responses and Anthropic (``input_tokens`` /
                ``output_tokens``; Anthropic's cache creation and cache read tokens are added
                to the input, and priced as input: an upper bound), SDK objects or dicts. A
                response's ``model`` names the model.
            output_tokens: output tokens of the same call (an integer ≥ 0).
            model: the model that spent the tokens (``"gpt-4o"``, or ``"provider:model"``),
                priced by the guard's price function; without one (and no ``model`` in the
                response) the tokens are ``unpriced_tokens``.
            tool: the tool the usage belongs to (a tool that calls a model itself), for
                its ``max_cost_usd``; default the guarded tool running in this context, if
                any.

        Raises:
            ValueError: a count is not an integer ≥ 0, or the price function returned
                something else than a number of dollars ≥ 0 or None.
            TypeError: an object with no token usage in it.
            BudgetExceeded: the task's total tokens now exceed ``max_tokens``, or its cost
                (or the tool's) exceeds ``max_cost_usd``, or tokens of an unknown price met
                a dollar budget that halts on them (``unknown_cost = "halt"``); the task
                halts.
        """
        _usage.record_usage(self, input_tokens, output_tokens, model, tool)

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
        _events.event(self, "halted->planning", "", ALLOW, "resumed")

    def approve(self, key: str) -> None:
        """Approve the call with idempotency ``key`` (from ``ToolResult.idempotency_key`` or
        ``pending_approvals``); its next identical attempt executes. Host code only: nothing
        the model sends reaches this.

        Raises:
            ValueError: ``key`` is not of this task, or no call waits for a decision under it
                (the guard never asked, or it ran already): nothing is approved in advance.
            ApprovalSecretError: a shared store, and the approval secret cannot be used.
        """
        _approve.decide_approval(self, key, ApprovalState.APPROVED, "")

    def reject(self, key: str, reason: str = "rejected by the reviewer") -> None:
        """Reject the call with idempotency ``key``; its attempts are blocked with ``reason``.

        Raises:
            ValueError: as for :meth:`approve`.
        """
        _approve.decide_approval(self, key, ApprovalState.REJECTED, reason)


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
                execute it), or it is ``async def`` (only :meth:`acall` can await it): a
                bug in the host, raised before the call is counted, never shown to the
                model.
        """
        if run is None:
            entry = self.guard._config.entries.get(tool) if isinstance(tool, str) else None
            if entry is not None and entry.not_sync:  # fixed when the tool was registered
                self._runnable(tool, sync=True)  # raises
            return _path.call_sync(self, tool, args, None, approver, resumed)[0]
        return _path.call_sync(self, tool, args, sync_runner(tool, run), approver, resumed)[0]

    async def acall(
        self, tool: str, args: Mapping[str, Any] | str | bytes | None = None, *,
        run: Callable[[dict[str, Any]], Any] | None = None,
        approver: Approver | None = None, resumed: bool = False,
    ) -> ToolResult:
        """:meth:`call` for asyncio: awaits ``async def`` tools and async approvers; a plain
        (sync) tool runs in a worker thread (``asyncio.to_thread``'s executor), so it does
        not block the event loop and concurrent identical calls share one execution, unless
        it is declared ``inline`` (``@readonly(inline=True)``, or ``inline = true`` in its
        ``[tools.<name>]`` table: a function that returns at once), which runs on the
        loop's thread as :meth:`call` runs it (see docs/performance.md). A sync tool bound to
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
            self._runnable(tool, sync=False)
        return (await _path.call_async(self, tool, args, run, approver, resumed))[0]

    def begin(self, tool: str, args: Mapping[str, Any] | str | bytes | None = None, *,
              approver: Approver | None = None, resumed: bool = False) -> PendingCall:
        """Decide one call now and record its outcome later, for a host whose tool runs
        elsewhere (a hook pair, an SDK's before/after callbacks): the first half of
        :meth:`call` with ``run=``, stopped where ``run`` would be called.

        ``pending.result`` is the guard's answer when the call must not run (blocked,
        cached, invalid, review); otherwise run the tool with ``pending.args`` (for
        ``warn``, ``pending.notice`` is the hint for the model) and report what happened
        with ``pending.finish(value)``, ``pending.fail(exc)`` or ``pending.unknown()``,
        which record it exactly as :meth:`call` records what ``run`` returned or raised
        and return the same :class:`ToolResult`. A call never reported holds its claim
        until ``idempotency.in_progress_ttl_s`` passes, then counts as an unknown outcome.

        Args:
            tool: as for :meth:`call`. A name no registered tool has is guarded as a tool
                known by name only, as with ``run=``.
            args: as for :meth:`call`.
            approver: as for :meth:`call`.
            resumed: as for :meth:`call`.

        Returns:
            A :class:`PendingCall`.

        Raises:
            Halt: the turn must end (the task halted, or halts with this call).
            CallInProgress, StoreError, ToolGuardError: as for :meth:`call`.
        """
        return _pending_stage.begin(self, tool, args, approver, resumed)

    async def abegin(self, tool: str, args: Mapping[str, Any] | str | bytes | None = None,
                     *, approver: Approver | None = None, resumed: bool = False
                     ) -> PendingCall:
        """:meth:`begin` for asyncio: approvers and waits are awaited, a store that waits
        on I/O is called from a worker thread; report with ``pending.afinish(value)``,
        ``afail(exc)`` or ``aunknown()``."""
        return await _pending_stage.abegin(self, tool, args, approver, resumed)

    def _runnable(self, tool: str, *, sync: bool) -> None:
        """Refuse, before anything is counted, a call the host got wrong: a tool known by
        name only without ``run=``, or (``sync``) an ``async def`` tool called without a
        loop to await it."""
        entry = self.guard._config.entries.get(tool) if isinstance(tool, str) else None
        if entry is not None and is_recorded(entry.spec):
            raise TypeError(
                f"tool {tool!r} is known by name only (guard.register, or a framework tool "
                "object the guard cannot run by itself): pass run= to task.call/acall with "
                "what executes it")
        if sync and entry is not None and entry.spec.is_async:
            raise TypeError(
                f"tool {tool!r} is async def: task.call cannot await it; use await "
                "task.acall(...) (or await task.arun_tool_calls(...)) for async tools")

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

        return _path.call_sync(self, tool, args, recorded)[0]

    def run_tool_calls(self, message: Any, *, on_halt: OnHalt = "raise"
                       ) -> list[dict[str, Any]]:
        """Run the tool calls of one model message and answer them in its provider's shape.

        ``messages += task.run_tool_calls(reply)`` closes a manual loop: an OpenAI Chat
        assistant message (or ``ChatCompletion``) gives ``{"role": "tool", ...}`` messages,
        Responses output items (or a ``Response``) give ``function_call_output`` items, an
        Anthropic ``Message`` gives one user message of ``tool_result`` blocks (with
        ``is_error``); SDK objects or plain dicts (:mod:`toolguard.engine._loops`). Contents carry
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
        return _batch.batch(self, calls, self.call)

    async def acall_batch(
        self, calls: Sequence[tuple[str, Mapping[str, Any] | str | bytes | None]]
    ) -> list[ToolResult]:
        """:meth:`call_batch` for asyncio: distinct calls run concurrently. A halt (or any
        other error) raises once every call of the batch has finished, the first in call
        order, so no call is left running, unrecorded, behind it."""
        import asyncio

        order, unique = _batch.dedupe(self, calls)
        outcomes = await asyncio.gather(*(self.acall(t, a) for t, a in unique),
                                        return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
        results = cast(list[ToolResult], outcomes)
        return [_batch.copy_for(results[i], dup) for i, dup in order]
