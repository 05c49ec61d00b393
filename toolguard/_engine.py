"""The enforcer, as the call path reads: the modules below, in the order a call meets them.

* :mod:`toolguard._guard` — :class:`Guard`: tools + policy + store; :mod:`toolguard._task` —
  :class:`Task`: one agent task, its public methods;
* :mod:`toolguard._pipeline` — ``_run_sync`` / ``_run_async``: the common call (enforce
  mode, no audit sink) runs straight through the stages below (``_front``, then
  ``_executed_sync`` / ``_executed_async``); a call that needs I/O in the middle (an
  approval, a wait for a twin, a worker thread) goes through the one pipeline for ``call``
  and ``acall``, sans I/O: a generator that yields its I/O requests; :mod:`toolguard._fast`
  — the same straight path with fewer layers for ``call`` and ``acall`` on a plain
  ``MemoryStore``;
* :mod:`toolguard._prepare` — parse, bind defaults, classify, canonical hash, schema;
* :mod:`toolguard._admit` — ``store.begin`` and the pure :func:`toolguard._core.decide`:
  budget → approval → idempotency → ladder (the store's failure policy too);
* :mod:`toolguard._approve` — the approval stage's I/O; :mod:`toolguard._wait` — waiting
  on an identical call in progress (idempotency);
* :mod:`toolguard._execute` — run the tool, time it, the error envelope;
* :mod:`toolguard._record` — ``store.finish`` and the result the model reads;
* :mod:`toolguard._events` — history and the audit events;
* :mod:`toolguard._call` — the records a call carries; :mod:`toolguard._batch` — parallel
  calls of one message; :mod:`toolguard._entries` — checks when a tool is registered.

This module keeps the public names where they always were.
"""

from __future__ import annotations

from ._call import CallRecord
from ._guard import Guard
from ._task import Task, current_idempotency_key

__all__ = ["CallRecord", "Guard", "Task", "current_idempotency_key"]
