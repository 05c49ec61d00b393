"""Begin: ``store.begin`` counts the attempt and reads the task's state (budgets, ladder
count, idempotency record, approval), which the pure :func:`toolguard.engine._core.decide`
then turns into a verdict (:func:`toolguard.engine._path.decided`). A store that fails is
handled by :mod:`toolguard.engine._storeops`."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from toolguard._types import (
    MUTATING,
    POLL,
)
from toolguard.stores._base import (
    ApprovalRecord,
    ApprovalState,
    BeginRequest,
    Snapshot,
)
from toolguard.stores._base import new_tuple as _new

from . import _approve, _storeops
from ._call import _Config, _Prepared
from ._limits import UNKNOWN_TOOLS

if TYPE_CHECKING:
    from ._call import TaskState

log = logging.getLogger("toolguard")


def begin(task: TaskState, cfg: _Config, p: _Prepared, count: bool, now: float) -> Snapshot:
    """``store.begin``: count the attempt (unless not ``count``: a call that waited on an
    identical one, or a resumed attempt), claim the idempotency key, read the task's state.
    ``now``: the guard's clock, read once for begin and the decision. A store whose
    ``begin`` is the in-memory store's own (a ``MemoryStore`` or a subclass that leaves
    ``begin`` and ``finish`` alone: ``Guard._fields``) is passed the request's fields as
    arguments, without a request tuple."""
    guard = task.guard
    entry = p.entry
    store = guard._store
    snap: Snapshot
    try:
        if guard._fields:
            snap = store.begin_fields(  # type: ignore[attr-defined]  # a MemoryStore's
                task.task_id, UNKNOWN_TOOLS if entry.unknown else entry.spec.name,
                p.signature,
                p.key if p.effect is MUTATING or entry.settings.requires_approval else "",
                p.claim, p.task_scope, count, p.effect is POLL, now,
                cfg.claim_ttl_s, p.call_id,
                entry.settings.idempotency_ttl_s,  # an expired claim's unknown outcome is kept
                now if store._clock is guard._clock else None)  # type: ignore[attr-defined]
        else:
            # every field, in BeginRequest's order, built by tuple.__new__ (the named
            # tuple's own __new__ is a Python function, 0.2 µs more per tuple)
            snap = store.begin(task.task_id, _new(BeginRequest, (
                # names no tool has share one counter: the model can invent any number
                UNKNOWN_TOOLS if entry.unknown else entry.spec.name, p.signature,
                # records and approvals exist only for mutating or approval-gated calls:
                # other calls skip those look-ups
                p.key if p.effect is MUTATING or entry.settings.requires_approval else "",
                p.claim, p.task_scope, count, p.effect is POLL, now,
                cfg.claim_ttl_s, p.call_id,
                entry.settings.idempotency_ttl_s,  # an expired claim's unknown outcome is kept
            )))
    except Exception as exc:  # noqa: BLE001 - begin_failed re-raises or falls back
        return begin_failed(task, cfg, p, exc, now)
    approval = snap.approval
    if approval is not None and approval.state == ApprovalState.APPROVED:
        # only a human (or this guard's approver) can sign an approval in a shared store
        return snap._replace(approval=_approve.checked(task, cfg, p, approval))
    return snap


def begin_failed(task: TaskState, cfg: _Config, p: _Prepared, exc: Exception, now: float
                  ) -> Snapshot:
    """``store.begin`` raised ``exc``: raise (fail_closed) or, failing open, the snapshot of
    a first call that holds nothing (``now``: the begin request's time)."""
    _storeops.store_failed(task, cfg, p, exc, fallback=True)
    return Snapshot(halted=None, epoch=0, calls=0, tool_calls=0, consecutive_failures=0,
                    tokens=0, started_at=now, count=1, polls=0, record=None,
                    approval=None, claimed=False)


def waited(task: TaskState, cfg: _Config, p: _Prepared) -> bool:
    """This call's approval is pending: a resumed attempt is the one that waited."""
    if p.effect is not MUTATING and not p.entry.settings.requires_approval:
        return False  # no approval record can exist
    pending: dict[str, ApprovalRecord] = _storeops.store_op(task,
        cfg, p, lambda: task.guard._store.pending_approvals(task.task_id), fallback=dict)
    return p.key in pending
