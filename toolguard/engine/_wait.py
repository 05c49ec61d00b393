"""Idempotency while a twin runs: an identical call in progress is waited for (sync: an
event, async: polling) and shares its result instead of running twice."""

from __future__ import annotations

import sys
import threading
import time
from typing import TYPE_CHECKING

from toolguard._errors import CallInProgress
from toolguard._types import (
    BLOCK,
    IN_PROGRESS,
)
from toolguard.stores._base import Snapshot

from . import _events, _storeops
from ._call import _WAIT_POLL_S, _Config, _Prepared
from ._core import Verdict

if TYPE_CHECKING:
    from ._call import TaskState


def loop_running() -> bool:
    asyncio = sys.modules.get("asyncio")  # not imported: no event loop can be running
    if asyncio is None:
        return False
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def enter_flight(task: TaskState, cfg: _Config, p: _Prepared, snap: Snapshot, verdict: Verdict
                  ) -> Verdict:
    """Count this call in flight for ``max_consecutive_failures`` (``toolguard.engine._inflight``)
    and return ``verdict`` itself, or block it (a new verdict) when the calls already running
    use up what is left of the budget."""
    limit = cfg.budget.max_consecutive_failures
    if limit is None:
        return verdict
    running = task.guard._inflight_calls.enter((task.task_id, p.entry.spec.name),
                                               limit - snap.consecutive_failures)
    if running < 0:
        p.counted = True
        return verdict
    return Verdict(BLOCK, reason=(
        f"{p.entry.spec.name} has {running} call(s) running, and the failure budget "
        f"(max_consecutive_failures = {limit}; {snap.consecutive_failures} failed in a "
        "row) counts them: wait for their results before calling it again"))


def notify(task: TaskState, p: _Prepared) -> None:
    """Wake the identical calls waiting for ``p`` to settle. Without the lock when none waits
    on any call: a waiter that registers after this look polls the store first, as one that
    registers after the event is popped does (:func:`wait_sync`)."""
    if p.claim and task.guard._inflight:
        with task.guard._lock:
            event = task.guard._inflight.pop(p.key, None)
        if event is not None:
            event.set()


def waiter(task: TaskState, p: _Prepared) -> threading.Event:
    with task.guard._lock:
        return task.guard._inflight.setdefault(p.key, threading.Event())


def settled(task: TaskState, cfg: _Config, p: _Prepared) -> bool:
    record = _storeops.store_op(task, cfg, p, lambda: task.guard._store.get_record(
        task.task_id, p.key, task.guard._clock()), fallback=lambda: None)
    return record is None or record.state is not IN_PROGRESS


def wait_sync(task: TaskState, cfg: _Config, p: _Prepared) -> None:
    if loop_running():
        # Blocking here would block the event loop, which the identical call (an acall
        # on this loop) needs in order to finish: a deadlock until the timeout.
        raise in_progress(task, cfg, p, CallInProgress(
            p.entry.spec.name, p.key, 0.0,
            "a synchronous call on an event loop's thread cannot wait for it; await "
            "task.acall(...) instead"))
    limit = cfg.policy.idempotency.wait_timeout_s
    start = time.monotonic()
    pause = _WAIT_POLL_S[0]
    event = waiter(task, p)
    while not settled(task, cfg, p):
        waited = time.monotonic() - start
        if waited >= limit:
            raise in_progress(task, cfg, p, CallInProgress(p.entry.spec.name, p.key,
                                                           waited))
        event.wait(min(pause, limit - waited))
        pause = min(pause * 2, _WAIT_POLL_S[1])


def in_progress(task: TaskState, cfg: _Config, p: _Prepared, exc: CallInProgress) -> CallInProgress:
    """Audit a call refused because its identical twin is still running (it was counted
    by begin, so its refusal is on record too)."""
    _events.event(task, "validating->failed", p.entry.spec.name, BLOCK, str(exc), p, cfg)
    return exc


async def wait_async(task: TaskState, cfg: _Config, p: _Prepared) -> None:
    import asyncio

    limit = cfg.policy.idempotency.wait_timeout_s
    start = time.monotonic()
    pause = _WAIT_POLL_S[0]
    while not (await asyncio.to_thread(settled, task, cfg, p) if task.guard._store_blocks
               else settled(task, cfg, p)):
        waited = time.monotonic() - start
        if waited >= limit:
            raise in_progress(task, cfg, p, CallInProgress(p.entry.spec.name, p.key,
                                                           waited))
        await asyncio.sleep(min(pause, limit - waited))
        pause = min(pause * 2, _WAIT_POLL_S[1])
