"""The approval stage's I/O: the request shown to the approver, the approver's answer (sync
or async, bounded by ``approval.timeout_s``, a failing approver is a ``defer``), storing the
decision, and the host's own ``approve`` / ``reject``. The decision itself is pure
(``_core``)."""

from __future__ import annotations

import contextvars
import inspect
import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ._approval import (
    ApprovalDecision,
    ApprovalRequest,
    Approver,
    defer,
)
from ._call import _Approve, _Config, _Prepared
from ._content import safe_repr as _safe_repr
from ._content import safe_str as _safe_str
from ._core import Verdict
from ._execute import _discard
from ._types import (
    ALLOW,
    BLOCK,
    REVIEW,
)
from .stores._base import (
    ApprovalRecord,
    ApprovalState,
    Snapshot,
)

if TYPE_CHECKING:
    from ._engine import Task

log = logging.getLogger("toolguard")


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


def _decide_approval(task: Task, key: str, state: str, reason: str) -> None:
    prefix = f"{task.task_id}:"
    if not isinstance(key, str) or not key.startswith(prefix):
        raise ValueError(f"key {key!r} does not belong to task {task.task_id!r}")
    pending = task.pending_approvals.get(key)
    tool = pending.tool if pending else key[len(prefix):].rpartition(":")[0]  # task:tool:h
    record = ApprovalRecord(state, pending.requested_at if pending else 0.0, reason,
                            tool, pending.args if pending else {},
                            pending.args_hash if pending else "")
    task.guard._store.set_approval(task.task_id, key, record,
                                   task.guard._config.policy.idempotency.ttl_s)
    approved = state == ApprovalState.APPROVED
    # a human decided (DESIGN.md §2): needs_review -> executing (its next attempt runs)
    # or -> failed; the key names the call, whose attempts carry the same args_hash
    task._event("needs_review->executing" if approved else "needs_review->failed",
                record.tool, ALLOW if approved else BLOCK,
                f"{'approved' if approved else 'rejected'} by the host: {key}"
                + (f" ({reason})" if reason else ""))


def _approval_request(task: Task, cfg: _Config, p: _Prepared, snap: Snapshot,
                      verdict: Verdict) -> ApprovalRequest:
    requested = snap.approval.requested_at if snap.approval else task.guard._clock()
    # the reviewer sees every value in full (redaction is for audit and logs)
    return ApprovalRequest(task.task_id, p.entry.spec.name, dict(p.args), p.key,
                           verdict.reason, requested)


def _store_approval(task: Task, cfg: _Config, p: _Prepared, snap: Snapshot,
                    req: ApprovalRequest, answer: ApprovalDecision) -> Snapshot:
    state = {"approve": ApprovalState.APPROVED, "reject": ApprovalState.REJECTED}.get(
        answer.verdict, ApprovalState.PENDING)
    record = ApprovalRecord(state, req.requested_at, answer.reason, req.tool, dict(req.args),
                            p.exact)
    task._store_op(cfg, p, lambda: task.guard._store.set_approval(
        task.task_id, p.key, record, cfg.policy.idempotency.ttl_s), fallback=lambda: None)
    task._event("validating->needs_review", p.entry.spec.name, REVIEW,
                f"approval: {answer.verdict}"
                + (f" ({answer.reason})" if answer.reason else ""), p=p, cfg=cfg,
                count=snap.count)
    return snap._replace(approval=record)


def _spend_approval(task: Task, cfg: _Config, p: _Prepared, snap: Snapshot) -> None:
    """One approval, one execution ("its next identical attempt executes"): spent
    before the tool runs, while this call holds the claim, so an identical call that
    waited on it asks again instead of running on the same approval."""
    if snap.approval is not None and snap.approval.state == ApprovalState.APPROVED:
        used = replace(snap.approval, state=ApprovalState.USED)
        task._store_op(cfg, p, lambda: task.guard._store.set_approval(
            task.task_id, p.key, used, p.entry.settings.idempotency_ttl_s))


async def _ask_async(task: Task, io: _Approve) -> ApprovalDecision:
    """The approver's answer under ``acall``. A plain approver (``ConsoleApprover``, a
    blocking HTTP call) runs in a worker thread, as a sync tool does, so the event loop
    goes on; any approver that has not answered after ``approval.timeout_s`` counts as a
    ``defer`` (the call waits in review, and halts once that timeout passes)."""
    import asyncio

    approver = io.approver
    limit = task.guard._config.policy.approval.timeout_s
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
