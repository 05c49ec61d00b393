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
:func:`toolguard._fast.begin_remote` / :func:`~toolguard._fast.end_remote` (what the MCP
proxy runs), otherwise the pipeline generator (:func:`toolguard._pipeline._pipeline`),
suspended at its execute request and sent the outcome later. :meth:`PendingCall.detach` and
:func:`attach` carry a begun call to another process (a hook command that runs once per
event): the state it is recorded with, as JSON.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Generator, Mapping
from typing import TYPE_CHECKING, Any

from ._call import _Execute, _Handover, _Io, _Outcome, _Prepared
from ._core import Verdict, halt_kind
from ._errors import ToolGuardError
from ._fast import Remote, _elsewhere, _memory_record, begin_remote, end_remote
from ._pipeline import _answer_async, _answer_sync, _origin, _recorded, _Start
from ._results import ToolResult
from ._types import ALLOW, Decision, RecordState
from .stores._base import ApprovalRecord, IdempotencyRecord, Snapshot

if TYPE_CHECKING:
    from ._approval import Approver
    from ._call import _Config
    from ._engine import Task

__all__ = ["PendingCall", "abegin", "attach", "begin"]

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
    """

    __slots__ = ("_async", "_pipeline", "_remote", "_reported", "_start", "_state", "_task",
                 "args", "call_id", "decision", "notice", "result", "tool")

    def __init__(self, task: Task, tool: str, result: ToolResult | None) -> None:
        self._task = task
        self.tool = tool
        self.result = result
        self.decision: Decision = result.decision if result is not None else ALLOW
        self.notice: str | None = None
        self.args: dict[str, Any] = {}
        self.call_id = result.call_id if result is not None else ""
        self._remote: Remote | None = None
        self._pipeline: Pipeline | None = None
        self._state: _Execute | None = None
        self._reported = result is not None
        self._start = time.perf_counter()
        self._async = False

    def _runs(self, p: _Prepared, verdict: Verdict) -> None:
        self.args, self.call_id = p.args, p.call_id
        self.decision, self.notice = verdict.decision, verdict.notice
        self._start = time.perf_counter()

    @property
    def age_s(self) -> float:
        """Seconds since the call began (or was attached in this process)."""
        return time.perf_counter() - self._start

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
        took = time.perf_counter() - self._start
        if unknown is not None:
            return _Outcome(content=_UNKNOWN.format(reason=unknown), success=False,
                            unknown=True, duration_s=took)
        if exc is not None:
            return self._task._failure(cfg, exc, took)
        return _Outcome(value, value, True, False, None, None, took)

    def _report(self, value: Any, exc: Exception | None, unknown: str | None) -> ToolResult:
        self._claim()
        remote = self._remote
        if remote is not None:
            if unknown is None:
                return end_remote(remote, value, exc)
            return _memory_record(self._task, remote.cfg, remote.store, remote.tool, remote.p,
                                  remote.snap, remote.verdict, None,
                                  self._outcome(remote.cfg, None, None, unknown), None,
                                  remote.start)[0]
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
        if self._remote is not None:
            r = self._remote
            p, snap, verdict, observed = r.p, r.snap, r.verdict, None
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
    front = None if resumed else _front(task, tool, raw)
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
                 resumed: bool = False) -> PendingCall:
    """``Task.abegin``: :func:`begin` under asyncio (approvers and waits awaited, a
    store that waits on I/O called from a worker thread)."""
    front = None if resumed else _front(task, tool, raw)
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


def _front(task: Task, tool: str, raw: Any) -> PendingCall | _Start | None:
    """The fused in-memory path's begin (:func:`toolguard._fast.begin_remote`, as the MCP
    proxy runs it): a :class:`PendingCall`, or where the pipeline takes over (``None``:
    from the start)."""
    front = begin_remote(task, tool, raw)
    if isinstance(front, Remote):
        pending = PendingCall(task, front.p.entry.spec.name, None)
        pending._runs(front.p, front.verdict)
        pending._remote = front
        return pending
    if front is None:
        return None
    if front[0] is not None:
        return PendingCall(task, front[0].tool, front[0])
    return front[1]  # type: ignore[no-any-return]  # the begun call handed over


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

