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

Both halves are the call path's own (:mod:`toolguard.engine._path`): ``begin`` is
:func:`~toolguard.engine._path.admit` (and, for an approval or a wait, the one place that does that
I/O), the report is :func:`~toolguard.engine._path.record`, exactly as ``call`` runs them around
its tool. :func:`begin_nowait` is the first half as far as it goes without awaiting anything,
for a host that begins calls in a callback on an event loop (the MCP proxy).
:meth:`PendingCall.detach` and :func:`attach` carry a begun call to another process (a hook
command that runs once per event): the state it is recorded with, as JSON.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from toolguard._results import ToolResult
from toolguard._types import ALLOW, UNKNOWN, Decision, RecordState
from toolguard.stores._base import ApprovalRecord, IdempotencyRecord, Snapshot

from . import _execute, _path, _prepare
from ._call import _Outcome
from ._core import Verdict, halt_kind
from ._path import Begun, Pause

if TYPE_CHECKING:
    from ._approval import Approver
    from ._call import TaskState, _Config

__all__ = ["PendingCall", "abegin", "attach", "begin", "begin_nowait"]

_UNKNOWN = ("Error (unknown outcome): {reason} [the outcome is unknown: the action may or "
            "may not have happened; check before retrying]")

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
            notice that no stagnation warn can reach, no audit sink to write first), so a
            host may pass the value on before it reports it. ``False``: the guard may add
            to it.
    """

    __slots__ = ("_begun", "_reported", "_task", "args", "call_id", "decision", "notice",
                 "result", "tool")

    def __init__(self, task: TaskState, step: ToolResult | Begun) -> None:
        self._task = task
        if type(step) is Begun:
            p, verdict = step.p, step.verdict
            step.task = task  # its audit sinks decide whether a success goes out unchanged
            self._begun: Begun | None = step
            self.result: ToolResult | None = None
            self.tool, self.args, self.call_id = p.entry.spec.name, p.args, p.call_id
            self.decision: Decision = ALLOW if verdict is None else verdict.decision
            self.notice: str | None = None if verdict is None else verdict.notice
            self._reported = False
        else:
            result: ToolResult = step  # type: ignore[assignment]  # not Begun: tested above
            self._begun, self.result = None, result
            self.tool, self.args, self.call_id = result.tool, {}, result.call_id
            self.decision, self.notice = result.decision, None
            self._reported = True

    @property
    def final(self) -> bool:
        """See the class docstring; ``False`` for a call that must not run."""
        return self._begun is not None and self._begun.final

    @property
    def forwarded_key(self) -> str | None:
        """The idempotency key to send with the call when its tool forwards it (the
        policy's ``forwards_idempotency_key``), as ``current_idempotency_key()`` gives it to
        a tool that runs in this process, the same for a retry of a call whose outcome is
        unknown; else ``None`` (also for a call that must not run)."""
        return None if self._begun is None else self._begun.forwarded_key

    @property
    def age_s(self) -> float:
        """Seconds since the call began (or was attached in this process)."""
        return _path.elapsed(self._begun) if self._begun is not None else 0.0

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

    def _outcome(self, cfg: _Config, exc: Exception | None, unknown: str | None
                 ) -> _Outcome | None:
        if unknown is not None:
            return _Outcome(content=_UNKNOWN.format(reason=unknown), success=False,
                            unknown=True, duration_s=self.age_s)
        if exc is not None:
            return _execute.failure(cfg, exc, self.age_s)
        return None

    def _report(self, value: Any, exc: Exception | None, unknown: str | None) -> ToolResult:
        self._claim()
        b = self._begun
        assert b is not None  # a call that runs has one
        return _path.record(self._task, b, value, self._outcome(b.cfg, exc, unknown),
                            self.age_s)[0]

    async def _areport(self, value: Any, exc: Exception | None, unknown: str | None
                       ) -> ToolResult:
        self._claim()
        b = self._begun
        assert b is not None
        return (await _path.off_loop(self._task, _path.record, self._task, b, value,
                                     self._outcome(b.cfg, exc, unknown), self.age_s))[0]

    # -- another process ----------------------------------------------------------------
    def detach(self) -> dict[str, Any]:
        """Stop this pending call here and return what another process needs to report it
        (:func:`attach`): JSON-ready. The claim stays held; nothing is recorded here.

        Raises:
            RuntimeError: the call must not run, or was reported already.
        """
        self._claim()
        b = self._begun
        assert b is not None
        p, snap, verdict, observed = b.p, b.snap, b.verdict, b.observed
        assert snap is not None  # mode off is never detached
        assert verdict is not None
        _path.leave(self._task, p)  # its end is counted where it is reported
        return {
            "tool": self.tool, "args": p.raw_args, "call_id": p.call_id,
            "signature": p.signature, "snap": _snap_json(snap),
            "verdict": _verdict_json(verdict),
            "observed": None if observed is None else str(observed),
            "began_at": time.time(),
        }


def attach(task: TaskState, state: Mapping[str, Any]) -> PendingCall | None:
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
    prepared = _prepare.prepare(task, cfg, tool, state["args"], True, str(state["call_id"]))
    if isinstance(prepared, ToolResult) or prepared.signature != state["signature"]:
        return None
    p = prepared
    snap = _snap_from(state["snap"])
    verdict = _verdict_from(state["verdict"])
    observed = None if state["observed"] is None else Decision(state["observed"])
    record = snap.record
    if record is not None and record.state is UNKNOWN and record.call_id:
        p.origin = record.call_id  # a retry of that execution: its key
    return PendingCall(task, Begun(cfg, p, snap, verdict, observed))


# -- begin ------------------------------------------------------------------------------
def begin(task: TaskState, tool: str, raw: Any, approver: Approver | None,
          resumed: bool = False) -> PendingCall:
    """``Task.begin``: the call path of ``task.call(tool, raw, run=...)`` up to running it."""
    step = _path.admit(task, task.guard._config, tool, raw, True, resumed)
    if type(step) is Pause:
        step = _path.settle_sync(task, step, approver)
    return PendingCall(task, step)  # type: ignore[arg-type]  # not a Pause: settled


async def abegin(task: TaskState, tool: str, raw: Any, approver: Approver | None,
                 resumed: bool = False, start: Pause | None = None) -> PendingCall:
    """``Task.abegin``: :func:`begin` under asyncio (approvers and waits awaited, a
    store that waits on I/O called from a worker thread); ``start``: the call
    :func:`begin_nowait` began and handed over, to go on with."""
    step = start if start is not None else await _path.off_loop(
        task, _path.admit, task, task.guard._config, tool, raw, True, resumed)
    if type(step) is Pause:
        step = await _path.settle_async(task, step, approver)
    return PendingCall(task, step)  # type: ignore[arg-type]  # not a Pause: settled


def begin_nowait(task: TaskState, tool: str, raw: Any) -> PendingCall | Pause | None:
    """:func:`begin` as far as it goes without waiting for anything, for a host that begins
    calls in a callback on an event loop (the MCP proxy): the call path's admit.

    Returns:
        A :class:`PendingCall`; ``None`` when the store waits on I/O (Redis: it must be
        called off the event loop): nothing was counted, ``await abegin(task, tool, raw,
        approver)``; or the begun call handed over, since it needs an approval or a wait:
        ``await abegin(task, tool, raw, approver, start=it)`` goes on with it.

    Raises:
        Halt: the task halted, or halts with this call.
        ToolGuardError: the store failed closed.
    """
    if task.guard._store_blocks:
        return None
    step = _path.admit(task, task.guard._config, tool, raw, True)
    if type(step) is Pause:
        return step
    return PendingCall(task, step)  # type: ignore[arg-type]  # a Begun or a ToolResult


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

