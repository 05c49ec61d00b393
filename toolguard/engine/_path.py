"""The call path: prepare -> begin -> decide -> execute -> record, in one straight line that
every call takes, whatever its configuration (any store, enforce / observe / off, audit
sinks, the failure budget, sync or async, a tool that raises).

:func:`admit` prepares, begins and decides a call without any I/O of its own and returns one
of three things: the :class:`~toolguard.ToolResult` of a call that does not run (invalid,
cached, blocked, review; a halt raises), a :class:`Begun` call that runs now, or a
:class:`Pause`: the call needs I/O before it can be decided (an approval to ask, an
identical call in progress to wait for). A pause branches out to one place,
:func:`settle_sync` / :func:`settle_async`, which does that I/O and comes back through
:func:`resume`. A :class:`Begun` call is executed (:mod:`toolguard.engine._execute`) and recorded
by :func:`record`. :func:`call_sync` and :func:`call_async` are ``task.call`` and
``task.acall``; :class:`toolguard.engine._pending.PendingCall` is the same path split between
:func:`admit` and :func:`record`, with the tool run by the host.

A store that waits on I/O (Redis, SQLite: ``blocking``) is called from a worker thread
under ``acall`` (:func:`off_loop`), so the event loop goes on.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import replace
from inspect import isawaitable
from time import perf_counter
from typing import TYPE_CHECKING, Any, TypeVar

from toolguard._errors import StoreError, ToolGuardError
from toolguard._outcomes import forwarded_key
from toolguard._results import ToolResult
from toolguard._types import (
    ALLOW,
    ENFORCE,
    HALT,
    MODE_OFF,
    MUTATING,
    POLL,
    UNKNOWN,
    WARN,
    Decision,
)
from toolguard.stores._base import Snapshot
from toolguard.stores._base import new_tuple as _new
from toolguard.tools._context import CURRENT_KEY as _CURRENT_KEY

from . import _admit, _approve, _events, _execute, _prepare, _record, _wait
from ._approval import ApprovalDecision, ApprovalRequest, Approver
from ._call import CallRecord, Executor, _Config, _Outcome, _Prepared
from ._content import safe_str as _safe_str
from ._core import WAIT, CallContext, Verdict, decide, stagnation_after, stagnation_possible

if TYPE_CHECKING:
    from ._call import TaskState

R = TypeVar("R")
# what a tool (or a replayed call) returns most: never awaitable, and ``isawaitable`` asks an
# ABC, ~2k instructions
_PLAIN: frozenset[type] = frozenset({str, dict, list, tuple, int, float, bool, bytes,
                                     type(None)})


class Begun:
    """A call admitted to run: what :func:`record` records its outcome with.

    Attributes:
        cfg: the guard's configuration the call was decided under. p: the prepared call.
        snap: the store's snapshot at begin (``None`` in mode ``off``). verdict: the
            decision it runs under (``None`` in mode ``off``: nothing is recorded).
        observed: outside enforce mode, the decision enforcement would have taken.
        args: the validated arguments to run the tool with.
        start: ``perf_counter()`` when it was admitted (a host's tool is timed from it).
    """

    __slots__ = ("args", "cfg", "observed", "p", "snap", "start", "task", "verdict")
    task: TaskState  # set only for a caller that keeps no task beside it (the MCP proxy)

    def __init__(self, cfg: _Config, p: _Prepared, snap: Snapshot | None,
                 verdict: Verdict | None, observed: Decision | None) -> None:
        self.cfg, self.p, self.snap, self.verdict, self.observed = cfg, p, snap, verdict, observed
        self.args: dict[str, Any] = p.args
        self.start = perf_counter()

    @property
    def tool(self) -> str:
        """The tool's name."""
        return self.p.entry.spec.name

    @property
    def final(self) -> bool:
        """A success will be handed back as the very value the tool returned: a plain allow
        (no notice) that no stagnation warn can reach, in enforce mode, on a guard without
        audit sinks (their events are written when the call is recorded, before its answer
        may go out)."""
        verdict, p, snap = self.verdict, self.p, self.snap
        task: TaskState | None = getattr(self, "task", None)
        return (verdict is not None and (task is None or not task.guard._sinks)
                and snap is not None and self.observed is None
                and verdict.decision is ALLOW and not verdict.notice
                and (p.effect is POLL
                     or not stagnation_possible(p.entry.settings, p.signature, snap)))

    @property
    def forwarded_key(self) -> str | None:
        """The idempotency key to send with the call when its tool forwards it
        (``forwards_idempotency_key``), as ``current_idempotency_key()`` gives it to a tool
        run in this process; else ``None``."""
        p = self.p
        if not p.entry.settings.forwards_idempotency_key:
            return None
        return forwarded_key(p.key, p.origin or p.call_id)


class Pause:
    """A call that needs I/O before it is decided: ``verdict.ask_approval`` (ask the
    approver) or ``verdict.wait`` (an identical call is in progress). :func:`resume` takes
    it on with the answer."""

    __slots__ = ("cfg", "p", "snap", "verdict")

    def __init__(self, cfg: _Config, p: _Prepared, snap: Snapshot, verdict: Verdict) -> None:
        self.cfg, self.p, self.snap, self.verdict = cfg, p, snap, verdict


Step = ToolResult | Begun | Pause


# -- admit: prepare, begin, decide (no I/O but the store's) ----------------------------------
def admit(task: TaskState, cfg: _Config, tool: str, raw: Any, virtual: bool,
          resumed: bool = False, call_id: str = "") -> Step:
    """Prepare, begin and decide one call (``virtual``: something other than the registered
    function runs it; ``resumed``: see ``Task.call``)."""
    snap: Snapshot | None = None
    p: _Prepared | None = None
    try:
        prepared = _prepare.prepare(task, cfg, tool, raw, virtual, call_id)
        if type(prepared) is ToolResult:
            task.history.append(_new(CallRecord, (tool, raw, prepared)))
            return prepared
        p = prepared  # type: ignore[assignment]  # not a ToolResult: tested above
        assert p is not None
        if cfg.mode is MODE_OFF and not p.unusable:
            task.guard._warn_off()
            return Begun(cfg, p, None, None, None)
        count = not (resumed and _admit.waited(task, cfg, p))
        now = task.guard._clock()
        snap = _admit.begin(task, cfg, p, count, now)
        return decided(task, cfg, p, snap, None, now)
    except BaseException as exc:
        failed(task, cfg, tool, exc, p, snap, False)
        raise


def decided(task: TaskState, cfg: _Config, p: _Prepared, snap: Snapshot,
            verdict: Verdict | None, now: float | None = None) -> Step:
    """Decide the begun call with the pure :func:`toolguard.engine._core.decide` (``now``:
    the time begin read, else the guard's clock now; ``verdict``: decided already, by an
    approver's ``defer``) and take it as far as it goes without I/O."""
    enforce = cfg.mode is ENFORCE
    if verdict is None:
        entry = p.entry
        verdict = decide(_new(CallContext, (  # every field, in CallContext's order (hot path)
            task.task_id, entry.spec.name, entry.settings, p.effect, p.sig, p.key, p.invalid,
            cfg.budget, cfg.approval_timeout_s, task.guard._clock() if now is None else now,
            p.denied, p.exact)), snap)
        if enforce and (verdict.ask_approval or verdict.wait):
            return Pause(cfg, p, snap, verdict)
    decision = verdict.decision
    observed: Decision | None = None
    sinks = task.guard._sinks
    if not enforce and not p.unusable:
        observed = decision  # observe mode: decided and audited, then run whatever it says
    elif decision is not ALLOW and decision is not WARN:  # not run
        if decision is HALT or snap.claimed or sinks:
            return _record.conclude(task, cfg, p, snap, verdict, None, None)
        result = _record.synthetic(task, p, snap, verdict)
        task.history.append(_new(CallRecord, (p.entry.spec.name, p.raw_args, result)))
        return result
    elif cfg.budget.max_consecutive_failures is not None:
        flight = _wait.enter_flight(task, cfg, p, snap, verdict)
        if flight is not verdict:  # blocked: the calls running use up the budget
            return _record.conclude(task, cfg, p, snap, flight, None, None)
    if sinks or snap.approval is not None:
        try:
            if (observed is None and snap.approval is not None
                    and _approve.retries_unknown(p, snap)):
                taken = _approve.take_unknown(task, cfg, p, snap)
                if taken is None:  # another approved retry runs: wait, then decide again
                    leave(task, p)
                    return Pause(cfg, p, snap, WAIT)
                snap = taken
            if sinks:
                audited = _events.executing(task, cfg, p, snap, verdict)
                if audited is not verdict and observed is None:  # unaudited: not run
                    leave(task, p)
                    return _record.conclude(task, cfg, p, snap, audited, None, None)
            if observed is None:
                _approve.spend_approval(task, cfg, p, snap)
        except BaseException:
            leave(task, p)
            if snap.claimed and snap.record is not None:  # taken above: it will not run
                _execute.give_back(task, cfg, (p, snap))
            raise
    record = snap.record
    if record is not None and record.state is UNKNOWN and record.call_id:
        p.origin = record.call_id  # a retry of that execution: its key
    return Begun(cfg, p, snap, verdict, observed)


def resume(task: TaskState, pause: Pause, request: ApprovalRequest | None,
           answer: ApprovalDecision | None) -> Step:
    """Take a paused call on: the approver's ``answer`` to ``request``, or (``None``) the
    identical call it waited for has settled."""
    cfg, p, snap, verdict = pause.cfg, pause.p, pause.snap, pause.verdict
    try:
        if request is None or answer is None:
            # decide again on fresh state: the other call's result (cached), its unknown
            # outcome (review), or, if it failed or its worker died, this call runs (the
            # store did not count it as a repeat)
            snap = _admit.begin(task, cfg, p, False, task.guard._clock())
            return decided(task, cfg, p, snap, None)
        snap = _approve.store_approval(task, cfg, p, snap, request, answer)
        if answer.verdict != "defer":
            return decided(task, cfg, p, snap, None)
        if answer.reason:
            verdict = replace(verdict, reason=f"{verdict.reason} ({answer.reason})")
        return decided(task, cfg, p, snap, verdict)
    except BaseException as exc:
        failed(task, cfg, p.entry.spec.name, exc, p, snap, False)
        raise


def _request(task: TaskState, pause: Pause) -> ApprovalRequest | None:
    if not pause.verdict.ask_approval:
        return None
    return _approve.approval_request(task, pause.cfg, pause.p, pause.snap, pause.verdict)


def settle_sync(task: TaskState, step: Step, approver: Approver | None) -> ToolResult | Begun:
    """Do the I/O of a :class:`Pause` (blocking) until the call is decided."""
    while type(step) is Pause:
        answer: ApprovalDecision | None = None
        try:
            request = _request(task, step)
            if request is not None:
                answer = _approve.sync_answer(
                    _approve.ask(approver or task.guard._approver, request))
            else:
                _wait.wait_sync(task, step.cfg, step.p)
        except BaseException as exc:
            failed(task, step.cfg, step.p.entry.spec.name, exc, step.p, step.snap, False)
            raise
        step = resume(task, step, request, answer)
    return step  # type: ignore[return-value]  # not a Pause: the loop ended


async def settle_async(task: TaskState, step: Step, approver: Approver | None
                       ) -> ToolResult | Begun:
    """:func:`settle_sync` awaiting: the approver and the wait are awaited."""
    while type(step) is Pause:
        answer: ApprovalDecision | None = None
        pause = step
        try:
            request = await off_loop(task, _request, task, pause)
            if request is not None:
                answer = await _approve.ask_async(task, approver or task.guard._approver,
                                                  request)
            else:
                await _wait.wait_async(task, pause.cfg, pause.p)
        except BaseException as exc:
            failed(task, pause.cfg, pause.p.entry.spec.name, exc, pause.p, pause.snap, False)
            raise
        step = await off_loop(task, resume, task, pause, request, answer)
    return step  # type: ignore[return-value]  # not a Pause: the loop ended


# -- record --------------------------------------------------------------------------------
def record(task: TaskState, b: Begun, value: Any, outcome: _Outcome | None,
           duration_s: float) -> tuple[ToolResult, BaseException | None]:
    """Record what the tool of ``b`` did (returned ``value``, or ``outcome``: its error or
    unknown outcome) and build the result: ``(result, the tool's exception)``.

    Raises:
        Halt: the task halts. ToolGuardError: as for ``Task.call``.
    """
    p = b.p
    try:
        if p.counted:
            leave(task, p)
        verdict = b.verdict
        if verdict is None:  # mode off: nothing recorded
            if outcome is None:
                outcome = _Outcome(value, value, True, False, None, None, duration_s)
            return _record.plain(task, p, outcome), outcome.exc
        if p.claim:
            _wait.notify(task, p)
        snap: Snapshot = b.snap  # type: ignore[assignment]  # recorded: begun in the store
        guard = task.guard
        if outcome is not None or not guard._fields:
            if outcome is None:
                outcome = _Outcome(value, value, True, False, None, None, duration_s)
            return _record.conclude(task, b.cfg, p, snap, verdict, outcome, b.observed
                                    ), outcome.exc
        # a success on a store that takes fields (Guard._fields): recorded without an
        # outcome record or a request tuple
        settings = p.entry.settings
        effect = p.effect
        digest, kind = _record.digest_memo(task._digests, settings.result, value)
        progress = _record.progress_of(task, p.signature, settings.result, value, digest)
        judged = (kind + digest if effect is not POLL and (
            settings.stagnation_warn_at or settings.stagnation_block_at) else "")
        try:
            guard._store.finish_fields(  # type: ignore[attr-defined]  # finish's fields
                task.task_id, p.entry.spec.name, p.signature, p.key, True, True, False,
                effect is MUTATING, digest, p.claim and p.remember, value, snap.claimed,
                settings.idempotency_ttl_s, guard._clock(), None, p.call_id, judged,
                settings.max_progress_resets, False, progress)
        except Exception as exc:  # noqa: BLE001 - finish_failed re-raises or falls back
            if _record.finish_failed(task, b.cfg, p, exc, True):
                judged = ""  # not recorded: no stagnation warn either
        stagnant = stagnation_after(settings, p.signature, snap, judged) if judged else None
        return _record.executed_result(task, b.cfg, p, snap, verdict, b.observed, stagnant,
                                       value, value, True, None, duration_s), None
    except BaseException as exc:
        failed(task, b.cfg, p.entry.spec.name, exc, p, b.snap, True)
        raise


def interrupted(task: TaskState, b: Begun, exc: BaseException) -> None:
    """The tool of ``b`` was interrupted or cancelled (``exc``): record an unknown outcome;
    the caller re-raises ``exc``."""
    p = b.p
    leave(task, p)
    if b.snap is None:
        return
    try:
        _execute.abandon(task, b.cfg, p, b.snap)
    except BaseException as error:
        failed(task, b.cfg, p.entry.spec.name, error, p, b.snap, True)
        raise
    failed(task, b.cfg, p.entry.spec.name, exc, p, b.snap, True)


def not_started(task: TaskState, step: Any) -> None:
    """A call that will not run after all (its caller was cancelled before the tool
    started): give its claim back and leave the failure budget's count."""
    if type(step) is Begun:
        leave(task, step.p)
        if step.snap is not None and step.snap.claimed:
            _execute.give_back(task, step.cfg, (step.p, step.snap))
    elif type(step) is Pause and step.snap.claimed:
        _execute.give_back(task, step.cfg, (step.p, step.snap))


def leave(task: TaskState, p: _Prepared) -> None:
    if p.counted:
        p.counted = False
        task.guard._inflight_calls.leave((task.task_id, p.entry.spec.name))


def failed(task: TaskState, cfg: _Config, tool: str, exc: BaseException, p: _Prepared | None,
           snap: Snapshot | None, executing: bool) -> None:
    """What a call that raised ``exc`` leaves behind; the caller re-raises ``exc`` unless
    this raises :class:`ToolGuardError` for a bug in the guard. ``p`` and ``snap``: the
    call as far as it got (its claim, if it holds one); ``executing``: the tool started (its
    own handler recorded the outcome)."""
    claimed = (p, snap) if p is not None and snap is not None and snap.claimed else None
    if isinstance(exc, ToolGuardError):
        if isinstance(exc, StoreError) and not executing:
            # e.g. fail_closed while storing an approval: the tool did not run, so give
            # the claim back (best effort) rather than leave identical calls waiting
            _execute.give_back(task, cfg, claimed)
        return
    if isinstance(exc, Exception):  # a bug in the guard: never a half-recorded call
        if claimed is not None:  # do not leave identical calls waiting on a dead claim
            with contextlib.suppress(Exception):
                _execute.abandon(task, cfg, *claimed)
        raise ToolGuardError(f"internal error while guarding {tool}: "
                             f"{type(exc).__name__}: {_safe_str(exc)}") from exc
    # cancelled or interrupted before the tool ran (e.g. while a human was being asked):
    # it did not happen, so give the claim back at once instead of making identical calls
    # wait for in_progress_ttl_s
    if not executing:
        _execute.give_back(task, cfg, claimed)


# -- the two drivers -------------------------------------------------------------------------
def call_sync(task: TaskState, tool: str, raw: Any, executor: Executor | None,
              approver: Approver | None = None, resumed: bool = False
              ) -> tuple[ToolResult, BaseException | None]:
    """``task.call``: ``(result, the exception the tool raised, if any)``."""
    step = admit(task, task.guard._config, tool, raw, executor is not None, resumed)
    if type(step) is not Begun:
        if type(step) is ToolResult:
            return step, None
        step = settle_sync(task, step, approver)
        if type(step) is ToolResult:
            return step, None
    b: Begun = step  # type: ignore[assignment]  # tested above
    p = b.p
    token = _CURRENT_KEY.set((p.key, p.origin or p.call_id))
    start = perf_counter()
    outcome: _Outcome | None = None
    try:
        value = executor(p.args) if executor is not None else p.entry.call(**p.args)
        if p.entry.maybe_async and type(value) not in _PLAIN and isawaitable(value):
            value = _execute.close_awaitable(value, p)
    except Exception as exc:  # noqa: BLE001 - any tool error becomes an error envelope
        value, outcome = None, _execute.failure(b.cfg, exc, perf_counter() - start)
    except BaseException as exc:  # interrupted: an unknown outcome, then re-raised
        _CURRENT_KEY.reset(token)
        interrupted(task, b, exc)
        raise
    _CURRENT_KEY.reset(token)
    return record(task, b, value, outcome, perf_counter() - start)


async def call_async(task: TaskState, tool: str, raw: Any, executor: Executor | None,
                     approver: Approver | None = None, resumed: bool = False
                     ) -> tuple[ToolResult, BaseException | None]:
    """``task.acall``."""
    step = await off_loop(task, admit, task, task.guard._config, tool, raw,
                          executor is not None, resumed)
    if type(step) is not Begun:
        if type(step) is ToolResult:
            return step, None
        step = await settle_async(task, step, approver)
        if type(step) is ToolResult:
            return step, None
    b: Begun = step  # type: ignore[assignment]  # tested above
    value, outcome, took = await _execute.run_async(task, b, executor, record, interrupted)
    if not task.guard._store_blocks:
        return record(task, b, value, outcome, took)
    return await off_loop(task, record, task, b, value, outcome, took)


async def off_loop(task: TaskState, func: Callable[..., R], *args: Any) -> R:
    """``func(*args)``, a step of the path that calls the store: in a worker thread when
    the store waits on I/O, else here. A cancellation meanwhile lets the step end, then
    gives back what it began (a claim, a count in flight: :func:`not_started`) and goes on
    to the caller."""
    if not task.guard._store_blocks:
        return func(*args)
    import asyncio  # loaded already: this runs under a loop
    import contextvars

    loop = asyncio.get_running_loop()
    context = contextvars.copy_context()
    future = loop.run_in_executor(None, context.run, func, *args)
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        await _execute.until_done(future)
        if not future.cancelled() and future.exception() is None:
            step = future.result()
            if type(step) is Begun or type(step) is Pause:
                thrown = loop.run_in_executor(None, context.run, not_started, task, step)
                await _execute.until_done(thrown)
                if not thrown.cancelled():
                    thrown.exception()  # best effort: retrieved, dropped
        raise


def elapsed(b: Begun) -> float:
    """Seconds since ``b`` was admitted."""
    return perf_counter() - b.start
