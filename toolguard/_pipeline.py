"""The call path, sans I/O: :func:`_pipeline` runs prepare -> admit -> approval / wait ->
execute -> record -> audit as a generator that yields its I/O requests, and ``_run_sync`` /
``_run_async`` answer them (the tool, the approver, the wait) for ``call`` and ``acall``."""

from __future__ import annotations

import contextlib
import contextvars
import functools
import logging
from collections.abc import Callable, Generator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ._approval import (
    ApprovalDecision,
    Approver,
)
from ._content import safe_str as _safe_str
from ._errors import (
    StoreError,
    ToolGuardError,
)
from ._results import ToolResult
from ._types import (
    ALLOW,
    ENFORCE,
    MODE_OFF,
    UNKNOWN,
    WARN,
    Decision,
)
from .stores._base import Snapshot
from .stores.memory import MemoryStore

if TYPE_CHECKING:
    from ._engine import Task

from ._approve import _ask, _sync_answer
from ._call import (
    CallRecord,
    Executor,
    _Approve,
    _Config,
    _Detached,
    _Execute,
    _Handover,
    _Io,
    _NotStarted,
    _Outcome,
    _Prepared,
    _Wait,
)
from ._core import Verdict
from ._execute import _until_done

_Start = tuple[_Config, _Prepared, Snapshot]  # where _front handed the call over

log = logging.getLogger("toolguard")


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


def _pipeline(task: Task, tool: str, raw: Any, executor: Executor | None,
              approver: Approver | None = None, resumed: bool = False,
              start: _Start | None = None,
              ) -> Generator[_Io, Any, tuple[ToolResult, BaseException | None]]:
    """The whole pipeline of one call, sans I/O that differs between sync and async: it
    yields an :data:`_Io` request (run the tool, ask the approver, wait for an identical
    call) and is sent the answer. ``_run_sync`` and ``_run_async`` drive it. ``start``:
    the call as :func:`_front` prepared and began it, which handed it over here (it needs
    an approval, a wait, or something else only the pipeline does)."""
    claimed: tuple[_Prepared, Snapshot] | None = None
    executing = False  # from here on, the execution's own handler records the outcome
    cfg = task.guard._config if start is None else start[0]
    try:
        if start is None:
            prepared = task._prepare(cfg, tool, raw, executor is not None)
            if isinstance(prepared, ToolResult):
                task._remember(CallRecord(tool, raw, prepared))
                return prepared, None
            p = prepared
            if cfg.policy.mode is MODE_OFF and not p.unusable:
                task.guard._warn_off()
                outcome: _Outcome = yield _Execute(cfg, p, executor)
                return task._plain(p, outcome), outcome.exc
            snap = task._begin(cfg, p, count=not (resumed and task._waited(cfg, p)))
        else:
            _, p, snap = start
        if snap.claimed:
            claimed = (p, snap)
        while True:
            verdict = task._decide(cfg, p, snap)
            if verdict.ask_approval and cfg.policy.mode is ENFORCE:
                req = task._approval_request(cfg, p, snap, verdict)
                answer: ApprovalDecision = yield _Approve(req,
                                                          approver or task.guard._approver)
                snap = task._store_approval(cfg, p, snap, req, answer)
                if answer.verdict != "defer":
                    continue
                if answer.reason:
                    verdict = replace(verdict, reason=f"{verdict.reason} ({answer.reason})")
            elif verdict.wait and cfg.policy.mode is ENFORCE:
                yield _Wait(cfg, p)
                # decide again on fresh state: the other call's result (cached), its
                # unknown outcome (review), or, if it failed or its worker died, this
                # call runs (the store did not count it as a repeat)
                snap = task._begin(cfg, p, count=False)
                if snap.claimed:
                    claimed = (p, snap)
                continue
            break
        observed = (verdict.decision if cfg.policy.mode is not ENFORCE
                    and not p.unusable else None)
        final = (task._enter_flight(cfg, p, snap, verdict)
                 if observed is None and verdict.decision.executed else verdict)
        decision = final.decision
        if observed is not None or decision is ALLOW or decision is WARN:  # = .executed
            try:
                if task.guard._sinks:
                    audited = task._executing(cfg, p, snap, final)
                    if audited is not final and observed is None:  # unaudited: not run
                        return task._conclude(cfg, p, snap, audited, None, None), None
                if observed is None:
                    task._spend_approval(cfg, p, snap)
                _origin(p, snap)
                executing = True
                try:
                    outcome = yield _Execute(cfg, p, executor, snap, final, observed)
                except _NotStarted:  # cancelled before the tool started: claim back
                    executing = False
                    raise
                except _Handover:  # recorded elsewhere, later: the claim stays held
                    raise
                except BaseException:  # interrupted or cancelled (e.g. asyncio.wait_for)
                    task._abandon(cfg, p, snap)
                    raise
            finally:
                if p.counted:
                    task.guard._inflight_calls.leave((task.task_id, p.entry.spec.name))
            if p.claim:
                task._notify(p)
            return task._conclude(cfg, p, snap, final, outcome, observed), outcome.exc
        return task._conclude(cfg, p, snap, final, None, None), None
    except BaseException as exc:
        _failed(task, cfg, tool, exc, claimed, executing)
        raise


def _failed(task: Task, cfg: _Config, tool: str, exc: BaseException,
            claimed: tuple[_Prepared, Snapshot] | None, executing: bool) -> None:
    """What a call that raised ``exc`` leaves behind; the caller re-raises ``exc`` unless
    this raises :class:`ToolGuardError` for a bug in the guard. ``claimed``: the call and
    its snapshot if it holds the idempotency claim; ``executing``: the tool started (its
    own handler recorded the outcome)."""
    if isinstance(exc, ToolGuardError):
        if isinstance(exc, StoreError) and not executing:
            # e.g. fail_closed while storing an approval: the tool did not run, so give
            # the claim back (best effort) rather than leave identical calls waiting
            task._give_back(cfg, claimed)
        return
    if isinstance(exc, Exception):  # a bug in the guard: never a half-recorded call
        if claimed is not None:  # do not leave identical calls waiting on a dead claim
            with contextlib.suppress(Exception):
                task._abandon(cfg, *claimed)
        raise ToolGuardError(f"internal error while guarding {tool}: "
                             f"{type(exc).__name__}: {_safe_str(exc)}") from exc
    # cancelled or interrupted before the tool ran (e.g. while a human was being asked):
    # it did not happen, so give the claim back at once instead of making identical calls
    # wait for in_progress_ttl_s
    if not executing:
        task._give_back(cfg, claimed)


def _front(task: Task, cfg: _Config, tool: str, raw: Any, executor: Executor | None
           ) -> ToolResult | tuple[_Prepared, Snapshot, Verdict | None]:
    """The straight call path (enforce mode, no audit sinks, not a resumed attempt): the
    same stages as :func:`_pipeline` with no generator between them. Prepares, begins and
    decides the call; returns the result of a call that does not run (invalid, cached,
    blocked; a halt raises), or ``(p, snap, verdict)`` of one that runs now (the runner
    executes and records it: :func:`_executed_sync`, :func:`_executed_async`), or
    ``(p, snap, None)``: the pipeline takes the call over from there (an approval to ask
    or spend, an identical call to wait for, the failure budget's in-flight count)."""
    claimed: tuple[_Prepared, Snapshot] | None = None
    try:
        prepared = task._prepare(cfg, tool, raw, executor is not None)
        if type(prepared) is ToolResult:
            task._remember(CallRecord(tool, raw, prepared))
            return prepared
        p: _Prepared = prepared  # type: ignore[assignment]  # not a ToolResult: tested above
        snap = task._begin(cfg, p, True)
        if snap.claimed:
            claimed = (p, snap)
        verdict = task._decide(cfg, p, snap)
        decision = verdict.decision
        if verdict.ask_approval or verdict.wait:
            return p, snap, None
        if decision is ALLOW or decision is WARN:  # = .executed
            if (snap.approval is not None
                    or cfg.policy.budget.max_consecutive_failures is not None):
                return p, snap, None
            if snap.record is not None:
                _origin(p, snap)
            return p, snap, verdict
        return task._conclude(cfg, p, snap, verdict, None, None)
    except BaseException as exc:
        _failed(task, cfg, tool, exc, claimed, False)
        raise


def _origin(p: _Prepared, snap: Snapshot) -> None:
    record = snap.record
    if record is not None and record.state is UNKNOWN and record.call_id:
        p.origin = record.call_id  # a retry of that execution: its key


def _interrupted(task: Task, cfg: _Config, tool: str, p: _Prepared, snap: Snapshot,
                 exc: BaseException) -> None:
    """The tool of a straight call was interrupted or cancelled (``exc``): record an
    unknown outcome; the caller re-raises (:func:`_failed`)."""
    claimed = (p, snap) if snap.claimed else None
    try:
        task._abandon(cfg, p, snap)
    except BaseException as error:
        _failed(task, cfg, tool, error, claimed, True)
        raise
    _failed(task, cfg, tool, exc, claimed, True)


def _recorded(task: Task, cfg: _Config, tool: str, p: _Prepared, snap: Snapshot,
              verdict: Verdict, outcome: _Outcome, observed: Decision | None = None
              ) -> tuple[ToolResult, BaseException | None]:
    """Record a straight call's outcome and build its result (``observed``: the decision
    enforcement would have taken, outside enforce mode)."""
    try:
        if p.claim:
            task._notify(p)
        return task._conclude(cfg, p, snap, verdict, outcome, observed), outcome.exc
    except BaseException as exc:
        _failed(task, cfg, tool, exc, (p, snap) if snap.claimed else None, True)
        raise


def _executed_sync(task: Task, cfg: _Config, tool: str, p: _Prepared, snap: Snapshot,
                   verdict: Verdict, executor: Executor | None
                   ) -> tuple[ToolResult, BaseException | None]:
    """Run and record a call :func:`_front` let run (sync)."""
    try:
        outcome = task._execute_sync(cfg, p, executor)
    except BaseException as exc:
        _interrupted(task, cfg, tool, p, snap, exc)
        raise
    return _recorded(task, cfg, tool, p, snap, verdict, outcome)


async def _executed_async(task: Task, cfg: _Config, tool: str, p: _Prepared, snap: Snapshot,
                          verdict: Verdict, executor: Executor | None
                          ) -> tuple[ToolResult, BaseException | None]:
    """Run and record a call :func:`_front` let run (async; never in a worker thread)."""
    try:
        outcome = await task._execute_async(cfg, p, executor)
    except BaseException as exc:  # e.g. cancelled by asyncio.wait_for
        _interrupted(task, cfg, tool, p, snap, exc)
        raise
    return _recorded(task, cfg, tool, p, snap, verdict, outcome)


def _run_sync(task: Task, tool: str, raw: Any, executor: Executor | None,
              approver: Approver | None = None, resumed: bool = False,
              ) -> tuple[ToolResult, BaseException | None]:
    cfg = task.guard._config
    start: _Start | None = None
    if cfg.policy.mode is ENFORCE and not resumed and not task.guard._sinks:
        store = task.guard._store
        if type(store) is MemoryStore and task._fast:  # the fused path (toolguard._fast)
            done, handed = task._memory_sync(cfg, store, tool, raw, executor)
            if done is not None:
                return done, handed  # type: ignore[return-value]  # the tool's exception
            start = (cfg, *handed)  # type: ignore[misc]  # (p, snap): tested above
        else:
            front = _front(task, cfg, tool, raw, executor)
            if type(front) is ToolResult:
                return front, None
            p, snap, verdict = front  # type: ignore[misc]  # not a ToolResult: tested above
            if verdict is not None:
                return _executed_sync(task, cfg, tool, p, snap, verdict, executor)
            start = (cfg, p, snap)
    pipeline = task._pipeline(tool, raw, executor, approver, resumed, start)
    try:
        io = next(pipeline)
        while True:
            try:
                answer: Any = (task._execute_sync(io.cfg, io.p, io.executor)
                               if isinstance(io, _Execute) else _answer_sync(task, io))
            except BaseException as exc:  # noqa: BLE001 - the pipeline handles or re-raises it
                io = pipeline.throw(exc)
            else:
                io = pipeline.send(answer)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


def _answer_sync(task: Task, io: _Approve | _Wait) -> Any:
    """Answer an approval or a wait request of the pipeline, blocking."""
    if isinstance(io, _Approve):
        return _sync_answer(_ask(io.approver, io.request))
    task._wait_sync(io.cfg, io.p)
    return None


async def _answer_async(task: Task, io: _Approve | _Wait) -> Any:
    """Answer an approval or a wait request of the pipeline, awaiting."""
    if isinstance(io, _Approve):
        return await task._ask_async(io)
    await task._wait_async(io.cfg, io.p)
    return None


async def _run_async(task: Task, tool: str, raw: Any, executor: Executor | None,
                     approver: Approver | None = None, resumed: bool = False,
                     begun: _Start | None = None,
                     ) -> tuple[ToolResult, BaseException | None]:
    """``acall``; ``begun``: a call :func:`toolguard._fast.begin_remote` began and handed
    over, which the pipeline takes on from there."""
    cfg = task.guard._config if begun is None else begun[0]
    start: _Start | None = begun
    if begun is None and cfg.policy.mode is ENFORCE and not resumed and not task.guard._sinks:
        store = task.guard._store
        if type(store) is MemoryStore and task._fast:  # the fused path (toolguard._fast)
            finished, handed = await task._memory_async(cfg, store, tool, raw, executor)
            if finished is not None:
                return finished, handed  # type: ignore[return-value]  # the tool's exception
            start = (cfg, *handed)  # type: ignore[misc]  # (p, snap): tested above
        elif not task.guard._store_blocks:
            front = _front(task, cfg, tool, raw, executor)
            if type(front) is ToolResult:
                return front, None
            p, snap, verdict = front  # type: ignore[misc]  # not a ToolResult: tested above
            if verdict is not None and (executor is not None or not p.entry.in_thread):
                return await _executed_async(task, cfg, tool, p, snap, verdict, executor)
            start = (cfg, p, snap)  # a sync tool in a worker thread: the pipeline detaches it
    pipeline = task._pipeline(tool, raw, executor, approver, resumed, start)
    cancelled: BaseException | None = None  # a cancellation whose thread had ended
    done, io = await task._resume(pipeline, None, None)
    while not done:
        try:
            if isinstance(io, _Execute):
                try:
                    answer: Any = await task._execute_async(io.cfg, io.p, io.executor)
                except _Detached as detached:
                    if detached.handoff.detach(functools.partial(
                            _record_later, pipeline, tool, detached.outcome)):
                        cancelled = detached.cancel
                        break  # not into the pipeline: its tool still runs
                    handoff = detached.handoff  # it ended meanwhile: record it now
                    answer = detached.outcome(handoff.value, handoff.exc,
                                              handoff.duration_s)
                    cancelled = detached.cancel
            else:
                answer = await _answer_async(task, io)
        except BaseException as exc:  # noqa: BLE001 - the pipeline handles or re-raises it
            done, io = await task._resume(pipeline, None, exc)
        else:
            done, io = await task._resume(pipeline, answer, None)
    if cancelled is not None:
        raise cancelled from None
    return io  # type: ignore[no-any-return]


async def _resume(task: Task, pipeline: Generator[_Io, Any, Any], answer: Any,
                  exc: BaseException | None) -> tuple[bool, Any]:
    """Run the pipeline to its next I/O request (``(False, request)``) or its end
    (``(True, value)``). The steps between requests call the store: for a store that
    waits on I/O they run in a worker thread, so the event loop goes on. A cancellation
    meanwhile lets the step end, then goes into the pipeline (which gives a claim back
    or records an unknown outcome) and on to the caller."""
    if not task.guard._store_blocks:
        return _step(pipeline, answer, exc)
    import asyncio  # loaded already: this runs under a loop

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
