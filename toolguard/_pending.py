"""Decide now, record later: :class:`PendingCall`, the two halves of ``task.call(..., run=)``
for a host whose tool runs elsewhere (a hook pair, an SDK's before/after callbacks, an MCP
upstream).

``task.begin(tool, args)`` runs the call path up to the point where the tool would run, and
stops there: the call is counted, its idempotency key claimed, its approval asked, exactly as
``call`` does. ``pending.result`` is the guard's answer when the call must not run; otherwise
the host runs the tool and reports what happened with ``finish(value)``, ``fail(exc)`` or
``unknown()``, which record it as ``call`` records what ``run`` returned or raised (progress,
stagnation and the idempotency record on the real result) and return the same
:class:`~toolguard.ToolResult`.

Both halves are the call path's own: on a plain in-memory store the fused path's
:func:`toolguard._fast._memory_front` / :func:`~toolguard._fast._memory_record`
(:func:`begin_nowait`: what the MCP proxy runs in its callbacks), otherwise the pipeline
generator (:func:`toolguard._pipeline._pipeline`), suspended at its execute request and sent
the outcome later. :meth:`PendingCall.detach` and
:func:`attach` carry a begun call to another process (a hook command that runs once per
event): the state it is recorded with, as JSON.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Generator, Mapping
from time import perf_counter
from typing import TYPE_CHECKING, Any, cast

from ._call import _Execute, _Handover, _Io, _Outcome, _Prepared
from ._core import Verdict, halt_kind
from ._errors import ToolGuardError
from ._fast import _elsewhere, _final, _memory_front, _memory_record
from ._outcomes import forwarded_key
from ._pipeline import _answer_async, _answer_sync, _origin, _recorded, _Start
from ._results import ToolResult
from ._types import ALLOW, ENFORCE, Decision, RecordState
from .stores._base import ApprovalRecord, IdempotencyRecord, Snapshot
from .stores.memory import MemoryStore

if TYPE_CHECKING:
    from ._approval import Approver
    from ._call import _Config
    from ._engine import Task

__all__ = ["PendingCall", "abegin", "attach", "begin", "begin_nowait"]

_UNKNOWN = ("Error (unknown outcome): {reason} [the outcome is unknown: the action may or "
            "may not have happened; check before retrying]")

Pipeline = Generator[_Io, Any, tuple[ToolResult, BaseException | None]]


class PendingCall:
    """A call the guard has decided and the host runs itself: from :meth:`Task.begin`.

    If :attr:`result` is not ``None`` the call must not run: send that result to the model
    (blocked, cached, invalid, review, ...). Otherwise run the tool with :attr:`args` and
    report its outcome exactly once with :meth:`finish`, :meth:`fail` or :meth:`unknown`
    (or their ``a``-prefixed twins under asyncio), which return the call's
    :class:`~toolguard.ToolResult` as ``task.call(tool, args, run=...)`` would.

    A pending call that is never reported holds its idempotency claim until the policy's
    ``idempotency.in_progress_ttl_s`` passes; the store then treats its outcome as unknown
    (an identical mutating call goes to review instead of running blind).

    Not thread-safe: report each call once, from one thread.

    Attributes:
        tool: the tool name. call_id: the call's id (as ``ToolResult.call_id``).
        decision: ``allow`` or ``warn`` when the call runs; else ``result.decision``.
        notice: for ``warn``, the corrective notice for the model (also appended to the
            result of :meth:`finish`), else ``None``.
        args: the validated arguments to run the tool with (``{}`` when it must not run).
        result: the guard's answer when the call must not run, else ``None``.
        final: ``True`` when a success will come back unchanged: :meth:`finish` returns a
            result whose ``content`` is the very value it was given (an allow with no
            notice that no stagnation warn can reach), so a host may pass the value on
            before it reports it. ``False``: the guard may add to it (or this path does
            not know beforehand).
    """

    __slots__ = ("_async", "_cfg", "_p", "_pipeline", "_reported", "_snap", "_start",
                 "_state", "_store", "_task", "_verdict", "args", "call_id", "decision",
                 "final", "notice", "result", "tool")
    _cfg: _Config  # these three: set for the fused path's call (with _store)
    _snap: Snapshot
    _verdict: Verdict

    def __init__(self, task: Task, tool: str, result: ToolResult | None) -> None:
        self._task = task
        self.tool = tool
        self.result = result
        self.decision: Decision = result.decision if result is not None else ALLOW
        self.notice: str | None = None
        self.args: dict[str, Any] = {}
        self.call_id = result.call_id if result is not None else ""
        self.final = False
        self._p: _Prepared | None = None
        self._store: MemoryStore | None = None  # the fused in-memory path's call
        self._pipeline: Pipeline | None = None
        self._state: _Execute | None = None
        self._reported = result is not None
        self._start = perf_counter()
        self._async = False

    def _runs(self, p: _Prepared, verdict: Verdict | None) -> None:
        """The call runs: ``verdict`` ``None`` in ``mode = "off"`` (nothing decided)."""
        self._p = p
        self.args, self.call_id = p.args, p.call_id
        if verdict is not None:
            self.decision, self.notice = verdict.decision, verdict.notice
        self._start = perf_counter()

    @property
    def age_s(self) -> float:
        """Seconds since the call began (or was attached in this process)."""
        return perf_counter() - self._start

    @property
    def forwarded_key(self) -> str | None:
        """The idempotency key to send with the call when its tool forwards it (the
        policy's ``forwards_idempotency_key``), as ``current_idempotency_key()`` gives it to
        a tool that runs in this process, the same for a retry of a call whose outcome is
        unknown; else ``None`` (also for a call that must not run)."""
        p = self._p
        if p is None or not p.entry.settings.forwards_idempotency_key:
            return None
        return forwarded_key(p.key, p.origin or p.call_id)

    def __repr__(self) -> str:
        state = "reported" if self._reported else "pending"
        return f"<PendingCall {self.tool} {self.decision} {state}>"

    # -- report the outcome --------------------------------------------------------------
    def finish(self, value: Any) -> ToolResult:
        """The tool returned ``value``: record it (progress, stagnation, the idempotency
        record of a mutating call) and return the call's result.

        Raises:
            Halt: as ``task.call`` raises it. RuntimeError: the call must not run, or was
                reported already.
        """
        return self._report(value, None, None)

    def fail(self, exc: Exception) -> ToolResult:
        """The tool raised ``exc``: recorded as ``call`` records a tool's exception (an
        error result; an unknown outcome when ``exc`` is one of the policy's
        ``idempotency.timeout_exceptions``).

        Raises:
            As :meth:`finish`.
        """
        if not isinstance(exc, Exception):
            raise TypeError(f"fail() takes an Exception, got {type(exc).__name__}: "
                            "report an interruption with unknown()")
        return self._report(None, exc, None)

    def unknown(self, reason: str = "the host lost track of the call") -> ToolResult:
        """Whether the tool ran is unknown (a timeout, a lost process): recorded as an
        unknown outcome, so an identical mutating call goes to review.

        Raises:
            As :meth:`finish`.
        """
        return self._report(None, None, reason)

    async def afinish(self, value: Any) -> ToolResult:
        """:meth:`finish` under asyncio (a store that waits on I/O is called from a worker
        thread)."""
        return await self._areport(value, None, None)

    async def afail(self, exc: Exception) -> ToolResult:
        """:meth:`fail` under asyncio."""
        if not isinstance(exc, Exception):
            raise TypeError(f"afail() takes an Exception, got {type(exc).__name__}")
        return await self._areport(None, exc, None)

    async def aunknown(self, reason: str = "the host lost track of the call") -> ToolResult:
        """:meth:`unknown` under asyncio."""
        return await self._areport(None, None, reason)

    # -- internals ---------------------------------------------------------------------
    def _claim(self) -> None:
        if self.result is not None:
            raise RuntimeError(f"{self.tool} must not run ({self.result.decision}): send "
                               "pending.result to the model instead")
        if self._reported:
            raise RuntimeError(f"{self.tool} ({self.call_id}) was reported already")
        self._reported = True

    def _outcome(self, cfg: _Config, value: Any, exc: Exception | None,
                 unknown: str | None) -> _Outcome:
        took = perf_counter() - self._start
        if unknown is not None:
            return _Outcome(content=_UNKNOWN.format(reason=unknown), success=False,
                            unknown=True, duration_s=took)
        if exc is not None:
            return self._task._failure(cfg, exc, took)
        return _Outcome(value, value, True, False, None, None, took)

    def _report(self, value: Any, exc: Exception | None, unknown: str | None) -> ToolResult:
        self._claim()
        store = self._store
        if store is not None:  # the fused path: _memory_record, as call(run=) records
            cfg, p = self._cfg, self._p
            assert p is not None  # a call that runs has it
            failed = None if exc is None and unknown is None else self._outcome(
                cfg, None, exc, unknown)
            return _memory_record(self._task, cfg, store, self.tool, p, self._snap,
                                  self._verdict, value, failed, None, self._start)[0]
        state = self._state
        assert state is not None  # a call that runs has one of the two
        outcome = self._outcome(state.cfg, value, exc, unknown)
        pipeline = self._pipeline
        if pipeline is None:  # attached in another process: record it straight
            return _recorded(self._task, state.cfg, self.tool, state.p, state.snap,
                             state.verdict, outcome, state.observed)[0]
        try:
            pipeline.send(outcome)
        except StopIteration as done:
            return done.value[0]  # type: ignore[no-any-return]
        pipeline.close()
        raise ToolGuardError(f"internal error while guarding {self.tool}: the call path "
                             "asked for more after the outcome")

    async def _areport(self, value: Any, exc: Exception | None, unknown: str | None
                       ) -> ToolResult:
        if self._pipeline is None or not self._async:
            return self._report(value, exc, unknown)
        self._claim()
        state = self._state
        assert state is not None
        done, answer = await self._task._resume(
            self._pipeline, self._outcome(state.cfg, value, exc, unknown), None)
        if not done:
            raise ToolGuardError(f"internal error while guarding {self.tool}: the call "
                                 "path asked for more after the outcome")
        return answer[0]  # type: ignore[no-any-return]

    # -- another process ----------------------------------------------------------------
    def detach(self) -> dict[str, Any]:
        """Stop this pending call here and return what another process needs to report it
        (:func:`attach`): JSON-ready. The claim stays held; nothing is recorded here.

        Raises:
            RuntimeError: the call must not run, or was reported already.
        """
        self._claim()
        if self._store is not None:
            assert self._p is not None
            p, snap, verdict, observed = self._p, self._snap, self._verdict, None
        else:
            state = self._state
            assert state is not None
            assert self._pipeline is not None
            p, snap, verdict, observed = state.p, state.snap, state.verdict, state.observed
            with contextlib.suppress(_Handover):
                self._pipeline.throw(_Handover())
        return {
            "tool": self.tool, "args": p.raw_args, "call_id": p.call_id,
            "signature": p.signature, "snap": _snap_json(snap),
            "verdict": _verdict_json(verdict),
            "observed": None if observed is None else str(observed),
            "began_at": time.time(),
        }


def attach(task: Task, state: Mapping[str, Any]) -> PendingCall | None:
    """The pending call :meth:`PendingCall.detach` returned ``state`` for, in this process.

    Returns:
        The call, ready to report; ``None`` when its arguments no longer prepare to the
        same signature (the policy changed between the halves): nothing is recorded then,
        and its claim lapses into an unknown outcome after ``in_progress_ttl_s``.

    Raises:
        KeyError, TypeError, ValueError: ``state`` is not what ``detach`` returned.
    """
    cfg = task.guard._config
    tool = str(state["tool"])
    prepared = task._prepare(cfg, tool, state["args"], True, str(state["call_id"]))
    if isinstance(prepared, ToolResult) or prepared.signature != state["signature"]:
        return None
    p = prepared
    snap = _snap_from(state["snap"])
    verdict = _verdict_from(state["verdict"])
    observed = None if state["observed"] is None else Decision(state["observed"])
    _origin(p, snap)
    pending = PendingCall(task, p.entry.spec.name, None)
    pending._runs(p, verdict)
    pending._state = _Execute(cfg, p, _elsewhere, snap, verdict, observed)
    return pending


# -- begin ------------------------------------------------------------------------------
def begin(task: Task, tool: str, raw: Any, approver: Approver | None,
          resumed: bool = False) -> PendingCall:
    """``Task.begin``: the call path of ``task.call(tool, raw, run=...)`` up to running it."""
    front = None if resumed else begin_nowait(task, tool, raw)
    if isinstance(front, PendingCall):
        return front
    pipeline = task._pipeline(tool, raw, _elsewhere, approver, resumed, front)
    try:
        io = next(pipeline)
        while not isinstance(io, _Execute):
            try:
                answer = _answer_sync(task, io)
            except BaseException as exc:  # noqa: BLE001 - the pipeline handles or re-raises it
                io = pipeline.throw(exc)
            else:
                io = pipeline.send(answer)
    except StopIteration as done:
        result: ToolResult = done.value[0]
        return PendingCall(task, result.tool, result)
    return _suspended(task, pipeline, io)


async def abegin(task: Task, tool: str, raw: Any, approver: Approver | None,
                 resumed: bool = False, start: _Start | None = None) -> PendingCall:
    """``Task.abegin``: :func:`begin` under asyncio (approvers and waits awaited, a
    store that waits on I/O called from a worker thread); ``start``: a call
    :func:`begin_nowait` began and handed over, to go on with."""
    front = start if resumed or start is not None else begin_nowait(task, tool, raw)
    if isinstance(front, PendingCall):
        return front
    pipeline = task._pipeline(tool, raw, _elsewhere, approver, resumed, front)
    done, io = await task._resume(pipeline, None, None)
    while not done and not isinstance(io, _Execute):
        try:
            answer = await _answer_async(task, io)
        except BaseException as exc:  # noqa: BLE001 - the pipeline handles or re-raises it
            done, io = await task._resume(pipeline, None, exc)
        else:
            done, io = await task._resume(pipeline, answer, None)
    if done:
        result: ToolResult = io[0]
        return PendingCall(task, result.tool, result)
    pending = _suspended(task, pipeline, io)
    pending._async = True
    return pending


def begin_nowait(task: Task, tool: str, raw: Any) -> PendingCall | _Start | None:
    """:func:`begin` as far as it goes without waiting for anything, for a host that
    begins calls in a callback on an event loop (the MCP proxy): the fused in-memory
    path's prepare, begin and decide (:func:`toolguard._fast._memory_front`).

    Returns:
        A :class:`PendingCall`; ``None`` where this path does not apply (an audit sink, a
        mode other than enforce, a store other than a plain
        :class:`~toolguard.stores.memory.MemoryStore`): nothing was counted, ``await
        abegin(task, tool, raw, approver)``; or the begun call handed over, since it needs
        what only the pipeline does (an approval, a wait, the failure budget): ``await
        abegin(task, tool, raw, approver, start=it)`` goes on with it.

    Raises:
        Halt: the task halted, or halts with this call.
        ToolGuardError: the store failed closed.
    """
    guard = task.guard
    cfg = guard._config
    store = guard._store
    if (cfg.policy.mode is not ENFORCE or guard._sinks or type(store) is not MemoryStore
            or not task._fast):
        return None
    front = _memory_front(task, cfg, store, tool, raw, _elsewhere)
    if len(front) == 3:
        p, snap, verdict = front
        pending = PendingCall(task, p.entry.spec.name, None)
        pending._runs(p, verdict)
        pending._store, pending._cfg, pending._snap, pending._verdict = store, cfg, snap, verdict
        pending.final = _final(p, snap, verdict)
        return pending
    result, handed = front
    if result is not None:
        return PendingCall(task, result.tool, result)
    p, snap = cast("tuple[_Prepared, Snapshot]", handed)  # the pipeline's now
    return cfg, p, snap


def _suspended(task: Task, pipeline: Pipeline, io: _Execute) -> PendingCall:
    pending = PendingCall(task, io.p.entry.spec.name, None)
    pending._runs(io.p, io.verdict)
    pending._pipeline, pending._state = pipeline, io
    return pending


# -- JSON of what a detached call is recorded with ---------------------------------------
def _snap_json(snap: Snapshot) -> dict[str, Any]:
    out = snap._asdict()
    record, approval = snap.record, snap.approval
    if record is not None:
        out["record"] = {"state": str(record.state), "epoch": record.epoch,
                         "created_at": record.created_at, "content": record.content,
                         "call_id": record.call_id}
    if approval is not None:
        out["approval"] = {"state": approval.state, "requested_at": approval.requested_at,
                           "reason": approval.reason, "tool": approval.tool,
                           "args": approval.args, "args_hash": approval.args_hash}
    return out


def _snap_from(data: Mapping[str, Any]) -> Snapshot:
    fields = dict(data)
    record, approval = fields.get("record"), fields.get("approval")
    if record is not None:
        fields["record"] = IdempotencyRecord(RecordState(record["state"]), record["epoch"],
                                             record["created_at"], record["content"],
                                             record["call_id"])
    if approval is not None:
        fields["approval"] = ApprovalRecord(**approval)
    return Snapshot(**fields)


def _verdict_json(verdict: Verdict) -> dict[str, Any]:
    return {"decision": str(verdict.decision), "reason": verdict.reason,
            "notice": verdict.notice,
            "halt": None if verdict.halt is None else verdict.halt.__name__,
            "budget": verdict.budget, "limit": verdict.limit, "usage": verdict.usage}


def _verdict_from(data: Mapping[str, Any]) -> Verdict:
    halt = data["halt"]
    return Verdict(Decision(data["decision"]), data["reason"], data["notice"],
                   None if halt is None else halt_kind(halt), data["budget"], data["limit"],
                   data["usage"])

