"""In-memory store: the default, per process.

Thread-safe: every operation holds one lock, so ``begin`` and ``finish`` are atomic across
threads (and trivially across asyncio tasks, which never interleave inside them). The lock's
waiters poll rather than queue (``toolguard.stores._lock``): a queued ``threading.Lock`` convoyed
threads to a quarter of one thread's throughput. State is per process: several worker
processes serving one task need :class:`RedisStore`.

Bounded: idempotency records have a per-record TTL, at most ``max_entries`` are kept (least
recently used evicted first); per-task signature history is an LRU of ``max_entries``
signatures, and so are its approval records; tasks are forgotten ``state_ttl_s`` seconds
after their last use and at most ``max_tasks`` are kept (least recently used first out).
Expiry is lazy (on access) and follows the injected ``clock``, so tests advance a fake clock
instead of sleeping.

All three are ordered dicts rather than ``cachetools`` caches, because the numbers say so
(benchmarks/README.md): the task lookup runs twice on every call, where ``TTLCache`` get+set
cost 1.6 µs against 0.09 µs; records are written on every executed mutating call, where a
full ``TLRUCache`` cost 4.1 µs per insert (its expiry heap) against 0.26 µs.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from toolguard._results import _fast_constructor
from toolguard._types import COMPLETED, IN_PROGRESS, UNKNOWN
from toolguard.stores._lock import YieldingLock, wait_for

from ._base import (
    ApprovalRecord,
    ApprovalState,
    BeginRequest,
    FinishRequest,
    IdempotencyRecord,
    RetryRequest,
    Snapshot,
    TaskUsage,
    stagnation_recent,
)
from ._base import new_tuple as _new

__all__ = ["MemoryStore"]

_NO_RUN = (0, 0, "", "")  # no stagnation run of the tool in this epoch
# IdempotencyRecord(...) without the frozen dataclass's object.__setattr__ per field: two
# are built on every executed mutating call
_record: Callable[..., IdempotencyRecord] = _fast_constructor(IdempotencyRecord)


class _Sig:
    __slots__ = ("count", "epoch", "last_digest", "polls", "resets", "transient")

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch
        self.count = 0
        self.polls = 0
        self.resets = 0  # output changes in a row, with no other call in between
        self.last_digest = ""
        self.transient = 0  # transient failures in a row (any epoch)


@dataclass(slots=True)
class _Task:
    max_entries: int
    used_at: float = 0.0
    epoch: int = 0  # moves at progress: ladder counts restart
    changes: int = 0  # moves at every successful write and new turn: until_change records lapse
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_nusd: int = 0
    unpriced_tokens: int = 0
    started_at: float | None = None
    halted: dict[str, Any] | None = None
    tool_calls: dict[str, int] = field(default_factory=dict)
    tool_costs: dict[str, int] = field(default_factory=dict)
    failures: dict[str, int] = field(default_factory=dict)
    # signature -> history, least recently used first (bounded by max_entries)
    sigs: OrderedDict[str, _Sig] = field(default_factory=OrderedDict)
    # (signature, result digest) pairs of successful mutating calls, and (signature, "\0" +
    # progress fingerprint) pairs of successful calls, oldest first (bounded)
    seen: OrderedDict[tuple[str, str], None] = field(default_factory=OrderedDict)
    approvals: dict[str, ApprovalRecord] = field(default_factory=dict)
    last_signature: str = ""  # of the last counted call (max_progress_resets)
    # tool -> (epoch, run length, outcome, its last signatures, newline-separated): the
    # stagnation rule's run
    stagnation: dict[str, tuple[int, int, str, str]] = field(default_factory=dict)

    def sig(self, signature: str) -> _Sig:
        sigs = self.sigs
        entry = sigs.get(signature)
        if entry is None:
            entry = sigs[signature] = _Sig(self.epoch)
            if len(sigs) > self.max_entries:
                sigs.popitem(last=False)
        else:
            sigs.move_to_end(signature)
        return entry


class _Records:
    """Idempotency records: ``(task_id, key) -> (record, expires_at, claim_until)``, least
    recently used first. What ``cachetools.TLRUCache(maxsize, ttu=now + ttl_s,
    timer=clock)`` does, without its expiry heap: a record read at or after ``expires_at``
    is gone; past ``maxsize`` the least recently used goes. An in-progress claim read at or
    after ``claim_until`` (and before ``expires_at``) reads as an unknown outcome (see
    :mod:`toolguard.stores._base`). Not thread-safe: the store's lock guards it."""

    __slots__ = ("_clock", "_data", "_maxsize")

    def __init__(self, maxsize: int, clock: Callable[[], float]) -> None:
        self._data: OrderedDict[tuple[str, str], tuple[IdempotencyRecord, float, float]] = (
            OrderedDict())
        self._maxsize = maxsize
        self._clock = clock

    def get(self, key: tuple[str, str], now: float | None = None) -> IdempotencyRecord | None:
        """The record at ``key``, or None; ``now``: the clock's time, if read already."""
        entry = self._data.get(key)
        if entry is None:
            return None
        if now is None:
            now = self._clock()
        if entry[1] <= now:
            del self._data[key]
            return None
        self._data.move_to_end(key)
        record = entry[0]
        if entry[2] <= now and record.state is IN_PROGRESS:
            # claimed and never finished in time: it may have happened
            return _record(UNKNOWN, record.epoch, entry[2], None, record.call_id)
        return record

    def held(self, key: tuple[str, str], now: float) -> IdempotencyRecord | None:
        """The record at ``key`` as it was written (a claim past ``claim_until`` is still
        the claim), or None once it expired."""
        entry = self._data.get(key)
        return entry[0] if entry is not None and entry[1] > now else None

    def put(self, key: tuple[str, str], record: IdempotencyRecord, ttl_s: float,
            now: float | None = None, then_s: float = 0.0) -> None:
        """Keep ``record`` for ``ttl_s`` seconds from ``now`` (the clock's time, if read);
        for a claim, then as an unknown outcome for ``then_s`` seconds more."""
        data = self._data
        until = (self._clock() if now is None else now) + ttl_s
        data[key] = (record, until + then_s, until)
        data.move_to_end(key)
        if len(data) > self._maxsize:
            data.popitem(last=False)

    def __len__(self) -> int:
        return len(self._data)

    def pop(self, key: tuple[str, str]) -> None:
        self._data.pop(key, None)

    def drop_task(self, task_id: str) -> None:
        for key in [k for k in self._data if k[0] == task_id]:
            del self._data[key]


class MemoryStore:
    """Per-process store (see the module docstring).

    Args:
        max_entries: bound on idempotency records (whole store) and on signatures per task.
        state_ttl_s: a task is forgotten this many seconds after its last use.
        max_tasks: bound on tasks kept at once (least recently used first out).
        clock: returns the current time in seconds; the guard passes its own.

    Attributes:
        blocking: False: operations take microseconds and never wait on I/O, so ``acall``
            calls them on the event loop.
    """

    blocking: Final = False

    def __init__(
        self,
        *,
        max_entries: int = 10_000,
        state_ttl_s: float = 86_400.0,
        max_tasks: int = 100_000,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._lock = YieldingLock()
        self._raw_lock = self._lock.raw  # begin and finish inline the acquire (hot path)
        self._max_entries = max_entries
        self._max_tasks = max_tasks
        self._state_ttl_s = state_ttl_s
        self._clock = clock
        self._tasks: OrderedDict[str, _Task] = OrderedDict()
        self._records = _Records(max_entries, clock)

    def _task(self, task_id: str) -> _Task:
        now = self._clock()
        tasks = self._tasks
        state = tasks.get(task_id)
        if state is None or now - state.used_at > self._state_ttl_s:
            state = tasks[task_id] = _Task(self._max_entries, used_at=now)
            self._evict(now)
        else:
            tasks.move_to_end(task_id)  # most recently used last
            state.used_at = now
        return state

    def _evict(self, now: float) -> None:
        tasks = self._tasks
        while tasks:
            oldest_id, oldest = next(iter(tasks.items()))
            if len(tasks) <= self._max_tasks and now - oldest.used_at <= self._state_ttl_s:
                return
            del tasks[oldest_id]

    def _valid_record(self, state: _Task, task_id: str, key: str,
                      task_scope: bool, now: float | None = None) -> IdempotencyRecord | None:
        record = self._records.get((task_id, key), now)
        if record is None:
            return None
        if (record.state is COMPLETED and not task_scope
                and record.epoch != state.changes):
            return None  # until_change: lapsed at a write or a new turn since
        return record

    def begin(self, task_id: str, req: BeginRequest) -> Snapshot:
        return self.begin_fields(task_id, *req)

    def begin_fields(self, task_id: str, tool: str, signature: str, idempotency_key: str,
                     claim: bool, task_scope: bool, count: bool, poll: bool, at: float,
                     claim_ttl_s: float, call_id: str = "", ttl_s: float = 0.0,
                     now: float | None = None) -> Snapshot:
        """:meth:`begin` with the :class:`BeginRequest`'s fields as arguments (``at``: its
        ``now``), for the call path (``toolguard.engine._admit``) on this store's own begin: no
        request tuple, no attribute reads. ``now``: this store's clock, if the caller read it
        already (the guard's clock is this store's), else None."""
        lock = self._raw_lock
        if not lock.acquire(False):
            wait_for(lock)
        try:
            state = self._tasks.get(task_id)
            if now is None:
                now = self._clock()
            if state is not None and now - state.used_at <= self._state_ttl_s:
                self._tasks.move_to_end(task_id)  # self._task(task_id), inline (hot path)
                state.used_at = now
            else:
                state = self._task(task_id)
            if state.started_at is None:
                state.started_at = at
            sigs = state.sigs  # state.sig(signature), inline (hot path)
            sig = sigs.get(signature)
            if sig is None:
                sig = state.sig(signature)
            else:
                sigs.move_to_end(signature)
            if sig.epoch != state.epoch:
                sig.epoch, sig.count, sig.polls = state.epoch, 0, 0
            record = None
            claimed = False
            if idempotency_key:
                # A call that waited on an identical call in progress (count False) was sent
                # together with it: that call's result is its own, even if an unrelated write
                # finished meanwhile and lapsed the until_change record (else it ran twice).
                record = self._valid_record(state, task_id, idempotency_key,
                                            task_scope or not count, now)
                if (record is not None and claim and call_id
                        and record.state is IN_PROGRESS and record.call_id == call_id):
                    record, claimed = None, True  # its own claim: a retried begin (Redis)
                elif record is None and claim:
                    held = _record(IN_PROGRESS, state.changes, at, None, call_id)
                    self._records.put((task_id, idempotency_key), held, claim_ttl_s, now,
                                      ttl_s)
                    claimed = True
            # a duplicate of a call that is running right now is the same call, not a repeat
            concurrent = record is not None and record.state is IN_PROGRESS
            tool_calls = state.tool_calls.get(tool, 0)
            if count and state.halted is None:  # a refused call of a halted task is free
                state.calls += 1
                tool_calls += 1
                state.tool_calls[tool] = tool_calls
                if poll:
                    sig.polls += 1
                elif not concurrent:
                    sig.count += 1
                if state.last_signature != signature:
                    sig.resets = 0  # another call came in between: its run starts afresh
                    state.last_signature = signature
            approval = state.approvals.get(idempotency_key) if idempotency_key else None
            repeats = sig.count
            run = state.stagnation.get(tool)
            if run is None or run[0] != state.epoch:
                run = _NO_RUN
            return _new(Snapshot, (  # every field, in Snapshot's order (hot path)
                state.halted, state.epoch, state.calls, tool_calls,
                state.failures.get(tool, 0),  # consecutive_failures
                state.input_tokens + state.output_tokens,  # tokens
                state.started_at,
                repeats if repeats > 1 else 1,  # count
                sig.polls, record, approval, claimed, run[1], run[2], run[3], sig.transient,
            ))
        finally:
            lock.release()

    def finish(self, task_id: str, req: FinishRequest) -> None:
        self.finish_fields(task_id, *req)

    def finish_fields(self, task_id: str, tool: str, signature: str, idempotency_key: str,
                      executed: bool, success: bool, unknown: bool, mutating: bool,
                      result_digest: str, store_result: bool, content: Any, release: bool,
                      ttl_s: float, at: float, halt: dict[str, Any] | None = None,
                      call_id: str = "", outcome: str = "", max_progress_resets: int = 0,
                      transient: bool = False, progress: str = "") -> None:
        """:meth:`finish` with the :class:`FinishRequest`'s fields as arguments (``at``: its
        ``now``), for the call path (``toolguard.engine._record``) on this store's own finish."""
        lock = self._raw_lock
        if not lock.acquire(False):
            wait_for(lock)
        try:
            # begin has just refreshed the task: skip the clock and the LRU move unless it
            # was forgotten while the tool ran
            state = self._tasks.get(task_id) or self._task(task_id)
            if executed and success and mutating:
                state.changes += 1
            if executed:
                state.failures[tool] = 0 if success else state.failures.get(tool, 0) + 1
                sig = state.sigs.get(signature)
                if transient:
                    sig = state.sig(signature)
                    if sig.count > 0:
                        sig.count -= 1  # a retry of a transient failure is not a repeat
                    sig.transient += 1
                elif sig is not None:
                    sig.transient = 0
                if success and result_digest:
                    if sig is None:  # forgotten while the tool ran
                        sig = state.sig(signature)
                    else:
                        state.sigs.move_to_end(signature)  # state.sig, inline (hot path)
                    moved = bool(progress) and self._add_seen(state, (signature,
                                                                      "\0" + progress))
                    if mutating and self._add_seen(state, (signature, result_digest)):
                        # Progress (a): the world changed; every count restarts, and this call
                        # is the first of the new epoch.
                        state.epoch += 1
                        sig.epoch, sig.count, sig.polls = state.epoch, 1, 0
                    elif sig.last_digest and sig.last_digest != result_digest:
                        if moved:
                            # Progress (b): its progress fields moved to values it never
                            # had: progress, however often it comes.
                            sig.count, sig.resets = 1, 0
                        else:
                            # Progress (c): its output moved, unless it moved on every one of
                            # the last max_progress_resets back-to-back calls.
                            if not max_progress_resets or sig.resets < max_progress_resets:
                                sig.count = 1
                            sig.resets += 1
                    sig.last_digest = result_digest
            if outcome:  # after progress: a call that made progress starts a new run
                run = state.stagnation.get(tool)
                if run is None or run[0] != state.epoch or run[2] != outcome:
                    state.stagnation[tool] = (state.epoch, 1, outcome, signature)
                elif signature != run[3] and signature not in run[3].split("\n"):
                    # not a cycle's call (nor the same call again, the common case read
                    # first: a split costs ~4x a comparison): grows
                    state.stagnation[tool] = (state.epoch, run[1] + 1, outcome,
                                              stagnation_recent(run[3], signature))
            if idempotency_key:
                key = (task_id, idempotency_key)
                if store_result:
                    record = _record(COMPLETED, state.changes, at, content, call_id)
                    self._records.put(key, record, ttl_s)
                elif unknown:
                    record = _record(UNKNOWN, state.changes, at, None, call_id)
                    self._records.put(key, record, ttl_s)
                elif release:  # also a claim past its TTL: its call reported, late
                    held = self._records.held(key, self._clock())
                    if (held is not None and held.state is IN_PROGRESS
                            and held.call_id == call_id):
                        self._records.pop(key)
            if halt is not None:
                state.halted = halt
        finally:
            lock.release()

    def _add_seen(self, state: _Task, pair: tuple[str, str]) -> bool:
        """Add ``pair`` to the task's seen pairs; False if it was there already."""
        seen = state.seen
        if pair in seen:
            return False
        seen[pair] = None
        if len(seen) > self._max_entries:
            seen.popitem(last=False)
        return True

    def get_record(self, task_id: str, key: str, now: float) -> IdempotencyRecord | None:
        with self._lock:
            return self._records.get((task_id, key))

    def set_halted(self, task_id: str, halt: dict[str, Any] | None) -> None:
        with self._lock:
            state = self._task(task_id)
            state.halted = halt
            if halt is None:  # resumed: failure streaks restart (the user fixed the cause)
                state.failures.clear()

    def new_turn(self, task_id: str) -> None:
        with self._lock:
            state = self._task(task_id)
            state.epoch += 1
            state.changes += 1

    def add_usage(self, task_id: str, input_tokens: int, output_tokens: int, now: float) -> int:
        with self._lock:
            state = self._task(task_id)
            if state.started_at is None:
                state.started_at = now
            state.input_tokens += input_tokens
            state.output_tokens += output_tokens
            return state.input_tokens + state.output_tokens

    def add_cost(self, task_id: str, cost_nusd: int, unpriced_tokens: int, tool: str,
                 now: float) -> tuple[int, int]:
        with self._lock:
            state = self._task(task_id)
            if state.started_at is None:
                state.started_at = now
            state.cost_nusd += cost_nusd
            state.unpriced_tokens += unpriced_tokens
            tool_total = 0
            if tool:
                tool_total = state.tool_costs[tool] = state.tool_costs.get(tool, 0) + cost_nusd
            return state.cost_nusd, tool_total

    def usage(self, task_id: str) -> TaskUsage:
        with self._lock:
            state = self._task(task_id)
            return TaskUsage(
                tool_calls=state.calls,
                per_tool=dict(state.tool_calls),
                input_tokens=state.input_tokens,
                output_tokens=state.output_tokens,
                started_at=state.started_at,
                epoch=state.epoch,
                halted=state.halted,
                cost_nusd=state.cost_nusd,
                cost_per_tool=dict(state.tool_costs),
                unpriced_tokens=state.unpriced_tokens,
            )

    def set_approval(self, task_id: str, key: str, record: ApprovalRecord, ttl_s: float) -> None:
        # Approvals live as long as the task's state (state_ttl_s); ttl_s is for stores
        # that expire keys one by one. At most max_entries per task, the least recently
        # decided first out (100,000 denied calls kept 100,000 records).
        with self._lock:
            self._put_approval(task_id, key, record)

    def _put_approval(self, task_id: str, key: str, record: ApprovalRecord) -> None:
        approvals = self._task(task_id).approvals
        approvals.pop(key, None)
        approvals[key] = record
        if len(approvals) > self._max_entries:
            del approvals[next(iter(approvals))]

    def retry_unknown(self, task_id: str, req: RetryRequest) -> bool:
        """Claim the key of an unknown outcome for its approved retry and spend the
        approval, under the store's lock (see :meth:`Store.retry_unknown
        <toolguard.stores.Store.retry_unknown>`)."""
        with self._lock:
            key = (task_id, req.idempotency_key)
            now = self._clock()
            record = self._records.get(key, now)
            if record is None or record.state is not UNKNOWN or record.call_id != req.origin:
                return False  # claimed by another retry, finished, or expired meanwhile
            held = _record(IN_PROGRESS, record.epoch, req.now, None, req.call_id)
            self._records.put(key, held, req.claim_ttl_s, now, req.ttl_s)
            self._put_approval(task_id, req.idempotency_key, req.approval)
            return True

    def pending_approvals(self, task_id: str) -> dict[str, ApprovalRecord]:
        with self._lock:
            return {k: r for k, r in self._task(task_id).approvals.items()
                    if r.state == ApprovalState.PENDING}

    def approvals(self, task_id: str) -> dict[str, ApprovalRecord]:
        with self._lock:
            return dict(self._task(task_id).approvals)

    def clear_task(self, task_id: str) -> None:
        with self._lock:
            self._tasks.pop(task_id, None)
            self._records.drop_task(task_id)
