"""The enforcer, as the call path reads: the modules of :mod:`toolguard.engine` below, in
the order a call meets them.

* ``_guard`` — :class:`Guard`: tools + policy + store, and :class:`Task`, which names its
  type; ``_guard_args`` — the guard's arguments, checked; ``_task`` —
  :class:`~toolguard.engine._task.TaskBase`: one agent task, its state and public methods;
* ``_path`` — the one call path every call takes (any store, enforce / observe / off, audit
  sinks, the failure budget, sync and async): ``call_sync`` / ``call_async`` run ``admit``
  (prepare, begin, decide), execute, ``record``, straight; a call that needs I/O before it
  is decided (an approval, a wait for an identical call in progress) pauses and branches
  out to ``settle_sync`` / ``settle_async``, which come back through ``resume``;
  ``_pending`` — ``task.begin`` / ``PendingCall``: the same path split where the tool runs
  (``begin_nowait``: its first half without awaiting, for the MCP proxy);
* ``_prepare`` — parse, bind defaults, classify, canonical hash, schema;
* ``_admit`` — ``store.begin`` and the pure :func:`toolguard.engine._core.decide`: budget →
  approval → idempotency → ladder; ``_storeops`` — the store's failure policy
  (``fail_closed`` / ``fail_open``);
* ``_approve`` — the approval stage's I/O; ``_wait`` — waiting on an identical call in
  progress (idempotency), and the failure budget's calls in flight;
* ``_execute`` — run the tool (a worker thread for a sync tool under ``acall`` unless it is
  declared ``inline``), time it, the error envelope;
* ``_record`` — ``store.finish`` and the result the model reads;
* ``_events`` — history and the audit events;
* ``_call`` — the records a call carries and the protocols the stages see the task, the
  guard and a begun call through (:class:`~toolguard.engine._call.TaskState`,
  ``GuardState``, ``CallingTask``, ``Started``: no stage imports ``Task``, ``Guard`` or the
  call path);
  ``_batch`` — parallel calls of one message; :mod:`toolguard.tools._entries` — checks when
  a tool is registered.

This module keeps the public names where they always were.
"""

from __future__ import annotations

from ._call import CallRecord
from ._guard import Guard, Task
from ._task import current_idempotency_key

__all__ = ["CallRecord", "Guard", "Task", "current_idempotency_key"]
