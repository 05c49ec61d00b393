"""Stages 2-5, admit: ``store.begin`` counts the attempt and reads the task's state
(budgets, ladder count, idempotency record, approval), and the pure
:func:`toolguard._core.decide` turns it into a verdict: budget -> approval -> idempotency ->
ladder. The store's failure policy (``fail_open`` / ``fail_closed``) lives here too."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from ._approve import _checked
from ._call import T, _Config, _Prepared
from ._core import CallContext, Verdict, decide
from ._errors import (
    StoreError,
    ToolGuardError,
)
from ._limits import UNKNOWN_TOOLS
from ._types import (
    ALLOW,
    MUTATING,
    POLL,
)
from .stores._base import (
    ApprovalRecord,
    ApprovalState,
    BeginRequest,
    Snapshot,
)
from .stores._base import new_tuple as _new

if TYPE_CHECKING:
    from ._engine import Task

log = logging.getLogger("toolguard")


def _begin(task: Task, cfg: _Config, p: _Prepared, count: bool) -> Snapshot:
    # Every field, in BeginRequest's order, built by tuple.__new__ (hot path: the named
    # tuple's own __new__ is a Python function, 0.2 µs more per tuple).
    req: BeginRequest = _new(BeginRequest, (
        # names no tool has share one counter: the model can invent any number of them
        UNKNOWN_TOOLS if p.entry.unknown else p.entry.spec.name, p.signature,
        # records and approvals exist only for mutating or approval-gated calls: other
        # calls skip those look-ups
        p.key if p.effect is MUTATING or p.entry.settings.requires_approval else "",
        p.claim, p.task_scope, count, p.effect is POLL, task.guard._clock(),
        cfg.policy.idempotency.in_progress_ttl_s, p.call_id,
        p.entry.settings.idempotency_ttl_s,  # an expired claim's unknown outcome is kept
    ))
    try:
        snap = task.guard._store.begin(task.task_id, req)
    except Exception as exc:  # noqa: BLE001 - _store_failed re-raises or falls back
        return _begin_failed(task, cfg, p, exc, req.now)
    approval = snap.approval
    if approval is not None and approval.state == ApprovalState.APPROVED:
        # only a human (or this guard's approver) can sign an approval in a shared store
        return snap._replace(approval=_checked(task, p.key, approval))
    return snap


def _begin_failed(task: Task, cfg: _Config, p: _Prepared, exc: Exception, now: float
                  ) -> Snapshot:
    """``store.begin`` raised ``exc``: raise (fail_closed) or, failing open, the snapshot of
    a first call that holds nothing (``now``: the begin request's time)."""
    task._store_failed(cfg, p, exc, fallback=True)
    return Snapshot(halted=None, epoch=0, calls=0, tool_calls=0, consecutive_failures=0,
                    tokens=0, started_at=now, count=1, polls=0, record=None,
                    approval=None, claimed=False)


def _store_op(task: Task, cfg: _Config, p: _Prepared, op: Callable[[], T],
              fallback: Callable[[], T] | None = None) -> T:
    """Run a store operation. When the store fails: ``fail_closed`` (default) raises
    :class:`StoreError`, so nothing runs unguarded; ``fail_open`` returns ``fallback()``
    (a permissive answer) with a warning audit event. Operations without a fallback
    always fail closed. (``begin`` and ``finish``, on every call, inline this with
    :meth:`_store_failed` instead of paying for two closures.)"""
    try:
        return op()
    except Exception as exc:  # noqa: BLE001 - _store_failed re-raises or falls back
        task._store_failed(cfg, p, exc, fallback=fallback is not None)
    assert fallback is not None  # _store_failed raised otherwise
    return fallback()


def _store_failed(task: Task, cfg: _Config, p: _Prepared, exc: Exception, *,
                  fallback: bool, transition: str = "validating->executing") -> None:
    """Handle a failed store operation: re-raise a guard error; otherwise raise
    :class:`StoreError` (chained) unless the operation has a ``fallback`` and the policy
    fails open, in which case log, emit a warning audit event and return (the caller
    then uses its permissive answer)."""
    if isinstance(exc, ToolGuardError) and not isinstance(exc, StoreError):
        raise exc
    error = exc if isinstance(exc, StoreError) else StoreError(
        f"state store failed for {p.entry.spec.name}: {type(exc).__name__}: {exc}")
    on_error = getattr(task.guard._store, "on_error", None) or cfg.policy.store.on_error
    if not fallback or on_error != "fail_open":
        if error is exc:
            raise exc
        raise error from exc
    if error.restart is not None:  # lost state: this call runs unguarded, later ones do not
        error.restart()
    reason = f"state store unavailable, running unguarded (store.on_error = fail_open): {error}"
    log.warning("toolguard: %s", reason)
    task._event(transition, p.entry.spec.name, ALLOW, reason, p, cfg)


def _waited(task: Task, cfg: _Config, p: _Prepared) -> bool:
    """This call's approval is pending: a resumed attempt is the one that waited."""
    if p.effect is not MUTATING and not p.entry.settings.requires_approval:
        return False  # no approval record can exist
    pending: dict[str, ApprovalRecord] = task._store_op(
        cfg, p, lambda: task.guard._store.pending_approvals(task.task_id), fallback=dict)
    return p.key in pending


def _decide(task: Task, cfg: _Config, p: _Prepared, snap: Snapshot) -> Verdict:
    policy = cfg.policy
    return decide(_new(CallContext, (  # every field, in CallContext's order (hot path)
        task.task_id, p.entry.spec.name, p.entry.settings, p.effect, p.sig, p.key,
        p.invalid, policy.budget, policy.approval.timeout_s, task.guard._clock(), p.denied,
        p.exact,
    )), snap)
