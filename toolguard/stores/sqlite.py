"""SQLite store: per-task state in one file, shared by every process on one machine.

Standard library only (``sqlite3``). Semantics are exactly those of
:class:`~toolguard.stores.MemoryStore` (one contract suite, ``tests/stores/test_store_contract.py``,
runs against both, with a differential test over random histories); only where the state
lives differs. It is what survives between the processes of one machine that serve one task
without a server to run: a coding agent's hook commands (a new process per event),
``toolguard approve`` and ``toolguard resume``. :func:`default_path` is its per-user file.

Atomicity: every operation is one transaction, ``BEGIN IMMEDIATE`` (it takes the database's
write lock before reading), so two processes racing on one signature see consecutive counts
and exactly one of them claims the idempotency key; a process that finds the lock taken waits
up to ``timeout_s`` (SQLite's busy timeout). The file is in WAL mode (readers never block the
writer) with ``synchronous = NORMAL``: a committed operation survives the crash of any
process; a power loss may lose the last operations before it (SQLite's documented trade-off
for WAL). A call answered from the idempotency cache costs one transaction, an executed call
two.

Tables (``task`` in each; one row per)::

    tasks      task: used_at, epoch, changes, calls, tokens in/out, started_at, halted (JSON),
               last counted signature
    tools      (task, tool): calls, consecutive failures, the stagnation run
    sigs       (task, signature): epoch, count, polls, last result digest, progress resets,
               transient failures in a row
    seen       (task, signature, result digest) of successful mutating calls, and
               (task, signature, NUL + progress fingerprint) of successful calls
    records    (task, idempotency key): state, changes, created_at, expires_at, call id,
               result (JSON), and for a claim the end of its TTL (claim_until: from then
               until expires_at it reads as an unknown outcome)
    approvals  (task, idempotency key): the approval record (JSON)

Time: every TTL follows the store's ``clock`` (the guard passes its own), as in memory: a
record read at or after its expiry is gone; a task idle for ``state_ttl_s`` starts over
(its idempotency records keep their own TTLs).

Bounded: ``sigs``, ``seen``, ``records`` and ``approvals`` each keep at most ``max_entries``
rows over the whole file, the least recently written first out (a row is rewritten whenever
its call is counted or recorded, so this is least recently *used* for signatures and written
for records); at most ``max_tasks`` tasks are kept, the least recently used first out.
When the pages in use pass ``max_bytes``, the oldest idempotency records go until they fit
again (the newest stays). Expired records and idle tasks are deleted by a sweep that runs in
about one write in 64 (so in hook commands too, each of which makes one or two).

Stored results, halts and approvals are JSON (orjson), exactly as in Redis: str, int, float,
bool, None, list and dict round-trip; tuples come back as lists, non-string dict keys as
strings, any other value as its ``repr()``.

Failures: every SQLite error becomes :class:`toolguard.StoreError`, naming the file and what
the guard does about it (``on_error``): a file that is not a database, is corrupt, or holds
another schema is never replaced by a fresh state; a lock held past the busy timeout is a
failure, not a wait forever. The file is created with mode 0600 (its directory 0700):
approvals hold the arguments of the calls they approve.

Threads and processes: each operation borrows a connection from a small pool (at most four
kept open, however many threads come and go) and gives it back; a forked child opens its
own. Thread-safe and process-safe.
"""

from __future__ import annotations

import os
import random
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal, TypeVar

import orjson

from toolguard._types import COMPLETED, IN_PROGRESS, UNKNOWN, RecordState

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
from ._json import _approval, _dumps
from ._sqlite_file import (
    PUT_RECORD,
    STATE_DIR_VARIABLE,
    SWEEP_ONE_IN,
    Pool,
    add_seen,
    bound,
    default_path,
    drop_task,
    failure,
    fit,
    load_record,
    load_task,
    load_tool,
    path_from_url,
    put_approval,
    put_task,
    put_tool,
    retry_unknown,
    sweep,
    transaction,
)

if TYPE_CHECKING:
    from toolguard.policy._model import StorePolicy

__all__ = ["STATE_DIR_VARIABLE", "SQLiteStore", "default_path", "path_from_url"]

OnError = Literal["fail_closed", "fail_open"]
T = TypeVar("T")

class SQLiteStore:
    """Per-task state in a SQLite file, shared by every process of the machine that opens it
    (see the module docstring for the tables, bounds and failure behaviour).

    Args:
        path: the database file (created with its directory on first use); default
            :func:`default_path`.
        timeout_s: how long an operation waits for another process's write lock (SQLite's
            busy timeout), in seconds.
        max_entries: bound on rows of each of signature history, progress pairs,
            idempotency records and approvals, over the whole file.
        max_tasks: bound on tasks kept at once (least recently used first out).
        max_bytes: bound on the database's pages in use, in bytes: past it the oldest
            idempotency records go.
        state_ttl_s: a task starts over this many seconds after its last use.
        on_error: what the guard does when this store fails: ``fail_closed`` (the call is
            refused with :class:`toolguard.StoreError`) or ``fail_open`` (the call runs
            unguarded, with a warning audit event); ``None`` (default): the policy's
            ``[store] on_error``. Read by the engine.
        clock: returns the current time in seconds; the guard passes its own.

    Attributes:
        path: the database file.
        on_error: as given (``None``: follow the policy).
        blocking: True: an operation may wait on the disk or another process's lock, so
            under ``acall`` the engine runs it in a worker thread.

    Raises:
        ValueError: a non-positive timeout, TTL or bound, or an unknown ``on_error``.

    Every other method raises :class:`toolguard.StoreError` when SQLite fails (a file that
    is not a toolguard store, corrupt, unwritable, or locked past ``timeout_s``).
    """

    blocking: Final = True

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        timeout_s: float = 5.0,
        max_entries: int = 100_000,
        max_tasks: int = 10_000,
        max_bytes: int = 256 * 2**20,
        state_ttl_s: float = 86_400.0,
        on_error: OnError | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        if not timeout_s > 0 or not state_ttl_s > 0:
            raise ValueError("SQLiteStore: timeout_s and state_ttl_s must be > 0 seconds")
        if min(max_entries, max_tasks, max_bytes) < 1:
            raise ValueError("SQLiteStore: max_entries, max_tasks and max_bytes must be >= 1")
        if on_error not in (None, "fail_closed", "fail_open"):
            raise ValueError(f"SQLiteStore: on_error must be fail_closed or fail_open, "
                             f"not {on_error!r}")
        self.path = Path(default_path() if path is None else path).absolute()
        self.on_error: OnError | None = on_error
        self._timeout_s = timeout_s
        self._max_entries = max_entries
        self._max_tasks = max_tasks
        self._max_bytes = max_bytes
        self._state_ttl_s = state_ttl_s
        self._clock = clock or time.time
        self._pool = Pool(self.path, timeout_s)
        self._random = random.Random()  # noqa: S311 - when to sweep, not a secret

    @classmethod
    def from_policy(cls, store_policy: StorePolicy, *, max_entries: int = 100_000,
                    clock: Callable[[], float] | None = None) -> SQLiteStore:
        """A store configured by the policy's ``[store]`` table: the file of its ``url``
        (:func:`path_from_url`; no URL: :func:`default_path`), ``timeout_s`` as the busy
        timeout, ``state_ttl_s``, ``on_error``.

        Raises:
            ValueError: the URL is not a usable ``sqlite:`` URL.
        """
        url = store_policy.url
        return cls(None if not url else path_from_url(url), timeout_s=store_policy.timeout_s,
                   state_ttl_s=store_policy.state_ttl_s, on_error=store_policy.on_error,
                   max_entries=max_entries, clock=clock)

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.path)!r})"

    def close(self) -> None:
        """Close the store's idle connections (a later operation opens a new one)."""
        self._pool.close()

    # -- plumbing ------------------------------------------------------------------------
    def _run(self, op: str, task_id: str, body: Callable[[sqlite3.Connection], T]) -> T:
        """``body`` in one write transaction; an SQLite error becomes a StoreError."""
        try:
            with self._pool.lend() as conn, transaction(conn):
                value = body(conn)
                if self._random.randrange(SWEEP_ONE_IN) == 0:
                    sweep(conn, self._clock(), self._state_ttl_s, self._max_tasks)
        except (sqlite3.Error, OSError) as exc:
            raise failure(self.path, self._timeout_s, self.on_error, op, task_id,
                          exc) from exc
        return value

    def _put_record(self, conn: sqlite3.Connection, task_id: str, key: str,
                    state: RecordState, changes: int, at: float, expires_at: float,
                    call_id: str, content: bytes | None, claim_until: float | None = None
                    ) -> None:
        conn.execute(PUT_RECORD, (task_id, key, state.value, changes, at, expires_at, call_id,
                                  content, claim_until))
        bound(conn, "records", self._max_entries)
        if content is not None:
            fit(conn, self._max_bytes)

    # -- the Store protocol --------------------------------------------------------------
    def begin(self, task_id: str, req: BeginRequest) -> Snapshot:
        """Count the attempt, claim the key if asked, and return the state to decide on: one
        transaction (see :meth:`MemoryStore.begin <toolguard.stores.MemoryStore.begin>` for
        the semantics).

        Raises:
            StoreError: SQLite failed (see the class doc).
        """
        return self._run("begin", task_id, lambda conn: self._begin(conn, task_id, req))

    def _begin(self, conn: sqlite3.Connection, task_id: str, req: BeginRequest) -> Snapshot:
        (tool, signature, key, claim, task_scope, count, poll, at, claim_ttl_s,
         call_id, ttl_s) = req
        now = self._clock()
        state = load_task(conn, task_id, now, self._state_ttl_s)
        _, epoch, changes, calls, tokens_in, tokens_out, started_at, halted, last_sig = state
        if started_at is None:
            state[6] = started_at = at
        row = conn.execute("SELECT epoch, count, polls, resets, digest, transient FROM sigs "
                           "WHERE task = ? AND sig = ?", (task_id, signature)).fetchone()
        sig_epoch, repeats, polls, resets, digest, transient = row or (epoch, 0, 0, 0, "", 0)
        if sig_epoch != epoch:
            sig_epoch, repeats, polls = epoch, 0, 0
        record = None
        claimed = False
        if key:
            # A call that waited on an identical call in progress (count False) was sent
            # together with it: that call's result is its own (see MemoryStore.begin).
            record = load_record(conn, task_id, key, now)
            if (record is not None and record.state is COMPLETED
                    and not (task_scope or not count) and record.epoch != changes):
                record = None  # until_change: lapsed at a write or a new turn since
            if (record is not None and claim and call_id
                    and record.state is IN_PROGRESS and record.call_id == call_id):
                record, claimed = None, True  # its own claim: a retried begin
            elif record is None and claim:
                # kept past its TTL as an unknown outcome, for ttl_s (see _base)
                self._put_record(conn, task_id, key, IN_PROGRESS, changes, at,
                                 now + claim_ttl_s + ttl_s, call_id, None,
                                 now + claim_ttl_s)
                claimed = True
        # a duplicate of a call that is running right now is the same call, not a repeat
        concurrent = record is not None and record.state is IN_PROGRESS
        tool_state = load_tool(conn, task_id, tool)
        if count and halted is None:  # a refused call of a halted task is free
            state[3] = calls + 1
            tool_state[0] += 1
            if poll:
                polls += 1
            elif not concurrent:
                repeats += 1
            if last_sig != signature:
                resets = 0  # another call came in between: its run starts afresh
                state[8] = signature
            put_tool(conn, task_id, tool, tool_state)
        put_task(conn, task_id, state)
        conn.execute("INSERT OR REPLACE INTO sigs VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                     (task_id, signature, sig_epoch, repeats, polls, resets, digest,
                      transient))
        if row is None:  # one more row (a rewritten one only moves to the newest rowid)
            bound(conn, "sigs", self._max_entries)
        approval = None
        if key:
            found = conn.execute("SELECT record FROM approvals WHERE task = ? AND key = ?",
                                 (task_id, key)).fetchone()
            approval = found and _approval(found[0])
        run: list[Any] = tool_state[2:] if tool_state[2] == epoch else [0, 0, "", ""]
        return Snapshot(
            None if halted is None else orjson.loads(halted), epoch, state[3], tool_state[0],
            tool_state[1], tokens_in + tokens_out, started_at, repeats if repeats > 1 else 1,
            polls, record, approval, claimed, run[1], run[2], run[3], transient)

    def finish(self, task_id: str, req: FinishRequest) -> None:
        """Record a call's outcome (progress, failures, idempotency record, halt): one
        transaction.

        Raises:
            StoreError: SQLite failed (see the class doc).
        """
        self._run("finish", task_id, lambda conn: self._finish(conn, task_id, req))

    def _finish(self, conn: sqlite3.Connection, task_id: str, req: FinishRequest) -> None:
        (tool, signature, key, executed, success, unknown, mutating, result_digest,
         store_result, content, release, ttl_s, at, halt, call_id, outcome,
         max_progress_resets, transient, progress) = req
        now = self._clock()
        state = load_task(conn, task_id, now, self._state_ttl_s)
        epoch = state[1]
        if executed and success and mutating:
            state[2] += 1
        tool_state = load_tool(conn, task_id, tool)
        if executed:
            tool_state[1] = 0 if success else tool_state[1] + 1
            row = conn.execute("SELECT epoch, count, polls, resets, digest, transient "
                               "FROM sigs WHERE task = ? AND sig = ?",
                               (task_id, signature)).fetchone()
            sig: list[Any] | None = list(row) if row else None
            if transient:
                sig = sig or [epoch, 0, 0, 0, "", 0]
                if sig[1] > 0:
                    sig[1] -= 1  # a retry of a transient failure is not a repeat
                sig[5] += 1
            elif sig is not None:
                sig[5] = 0
            if success and result_digest:
                sig = sig or [epoch, 0, 0, 0, "", 0]
                cap = self._max_entries
                moved = bool(progress) and add_seen(conn, task_id, signature,
                                                    "\0" + progress, cap)
                if mutating and add_seen(conn, task_id, signature, result_digest, cap):
                    # Progress (a): the world changed; every count restarts, and this call
                    # is the first of the new epoch.
                    state[1] = epoch = epoch + 1
                    sig[0:3] = [epoch, 1, 0]
                elif sig[4] and sig[4] != result_digest:
                    if moved:
                        # Progress (b): its progress fields moved to values it never had:
                        # progress, however often it comes.
                        sig[1], sig[3] = 1, 0
                    else:
                        # Progress (c): its output moved, unless it moved on every one of
                        # the last max_progress_resets back-to-back calls.
                        if not max_progress_resets or sig[3] < max_progress_resets:
                            sig[1] = 1
                        sig[3] += 1
                sig[4] = result_digest
            if sig is not None and (row is None or tuple(sig) != tuple(row)):
                conn.execute("INSERT OR REPLACE INTO sigs VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                             (task_id, signature, *sig))
                if row is None:
                    bound(conn, "sigs", self._max_entries)
        if outcome:  # after progress: a call that made progress starts a new run
            if (tool_state[2] != epoch or tool_state[4] != outcome):
                tool_state[2:] = [epoch, 1, outcome, signature]
            elif signature not in tool_state[5].split("\n"):  # not a cycle's call: grows
                tool_state[2:] = [epoch, tool_state[3] + 1, outcome,
                                  stagnation_recent(tool_state[5], signature)]
        if executed or outcome:
            put_tool(conn, task_id, tool, tool_state)
        if key:
            if store_result:
                self._put_record(conn, task_id, key, COMPLETED, state[2], at, now + ttl_s,
                                 call_id, _dumps(content))
            elif unknown:
                self._put_record(conn, task_id, key, UNKNOWN, state[2], at, now + ttl_s,
                                 call_id, None)
            elif release:
                conn.execute("DELETE FROM records WHERE task = ? AND key = ? AND state = ? "
                             "AND call_id = ? AND expires_at > ?",
                             (task_id, key, IN_PROGRESS.value, call_id, now))
        if halt is not None:
            state[7] = _dumps(halt)
        put_task(conn, task_id, state)

    def get_record(self, task_id: str, key: str, now: float) -> IdempotencyRecord | None:
        """The idempotency record under ``key`` unless it expired (by the store's clock).

        Raises:
            StoreError: SQLite failed (see the class doc).
        """
        return self._run("get_record", task_id,
                         lambda conn: load_record(conn, task_id, key, self._clock()))

    def set_halted(self, task_id: str, halt: dict[str, Any] | None) -> None:
        """Set (or with None clear) the task's halted flag; clearing it restarts every
        tool's run of consecutive failures.

        Raises:
            StoreError: SQLite failed (see the class doc).
        """
        def body(conn: sqlite3.Connection) -> None:
            state = load_task(conn, task_id, self._clock(), self._state_ttl_s)
            state[7] = None if halt is None else _dumps(halt)
            if halt is None:  # resumed: failure streaks restart (the user fixed the cause)
                conn.execute("UPDATE tools SET failures = 0 WHERE task = ?", (task_id,))
            put_task(conn, task_id, state)

        self._run("set_halted", task_id, body)

    def new_turn(self, task_id: str) -> None:
        """A new user turn: the epoch moves on (counts restart, until_change records lapse).

        Raises:
            StoreError: SQLite failed (see the class doc).
        """
        def body(conn: sqlite3.Connection) -> None:
            state = load_task(conn, task_id, self._clock(), self._state_ttl_s)
            state[1] += 1
            state[2] += 1
            put_task(conn, task_id, state)

        self._run("new_turn", task_id, body)

    def add_usage(self, task_id: str, input_tokens: int, output_tokens: int, now: float) -> int:
        """Add token usage (starting the task's clock at ``now`` if not started); return the
        task's total tokens.

        Raises:
            StoreError: SQLite failed (see the class doc).
        """
        def body(conn: sqlite3.Connection) -> int:
            state = load_task(conn, task_id, self._clock(), self._state_ttl_s)
            if state[6] is None:
                state[6] = now
            state[4] += input_tokens
            state[5] += output_tokens
            put_task(conn, task_id, state)
            return int(state[4] + state[5])

        return self._run("add_usage", task_id, body)

    def add_cost(self, task_id: str, cost_nusd: int, unpriced_tokens: int, tool: str,
                 now: float) -> tuple[int, int]:
        """Add the price of model usage, in nano-dollars, and tokens of unknown price (to
        ``tool``'s cost too, unless ``""``); return the task's and the tool's cost.

        Raises:
            StoreError: SQLite failed (see the class doc).
        """
        def body(conn: sqlite3.Connection) -> tuple[int, int]:
            state = load_task(conn, task_id, self._clock(), self._state_ttl_s)
            if state[6] is None:
                state[6] = now
            put_task(conn, task_id, state)
            totals = []
            for name, unpriced in (("", unpriced_tokens), *(((tool, 0),) if tool else ())):
                conn.execute(
                    "INSERT INTO costs VALUES (?, ?, ?, ?) ON CONFLICT (task, tool) DO UPDATE "
                    "SET nusd = nusd + excluded.nusd, unpriced = unpriced + excluded.unpriced",
                    (task_id, name, cost_nusd, unpriced))
                (total,) = conn.execute("SELECT nusd FROM costs WHERE task = ? AND tool = ?",
                                        (task_id, name)).fetchone()
                totals.append(int(total))
            return totals[0], totals[1] if tool else 0

        return self._run("add_cost", task_id, body)

    def usage(self, task_id: str) -> TaskUsage:
        """The task's counters (zeros for a task never seen).

        Raises:
            StoreError: SQLite failed (see the class doc).
        """
        def body(conn: sqlite3.Connection) -> TaskUsage:
            state = load_task(conn, task_id, self._clock(), self._state_ttl_s)
            put_task(conn, task_id, state)
            per_tool: dict[str, int] = dict(conn.execute(
                "SELECT tool, calls FROM tools WHERE task = ? AND calls > 0 ORDER BY tool",
                (task_id,)))
            costs = {tool: (int(nusd), int(unpriced)) for tool, nusd, unpriced in conn.execute(
                "SELECT tool, nusd, unpriced FROM costs WHERE task = ?", (task_id,))}
            task_cost, unpriced = costs.pop("", (0, 0))
            return TaskUsage(tool_calls=state[3], per_tool=per_tool, input_tokens=state[4],
                             output_tokens=state[5], started_at=state[6], epoch=state[1],
                             halted=None if state[7] is None else orjson.loads(state[7]),
                             cost_nusd=task_cost,
                             cost_per_tool={k: v[0] for k, v in costs.items()},
                             unpriced_tokens=unpriced)

        return self._run("usage", task_id, body)

    def set_approval(self, task_id: str, key: str, record: ApprovalRecord, ttl_s: float) -> None:
        """Store a human decision (or a pending request) for ``key``. As in memory, approvals
        live as long as the task's state (``state_ttl_s``); ``ttl_s`` is not used.

        Raises:
            StoreError: SQLite failed (see the class doc).
        """
        def body(conn: sqlite3.Connection) -> None:
            put_task(conn, task_id, load_task(conn, task_id, self._clock(), self._state_ttl_s))
            put_approval(conn, task_id, key, record, self._max_entries)

        self._run("set_approval", task_id, body)

    def retry_unknown(self, task_id: str, req: RetryRequest) -> bool:
        """:meth:`Store.retry_unknown <toolguard.stores.Store.retry_unknown>`: one transaction
        (a failure raises :class:`toolguard.StoreError`, see the class doc)."""
        return self._run("retry_unknown", task_id, lambda conn: retry_unknown(
            conn, task_id, req, self._clock(), self._max_entries))

    def pending_approvals(self, task_id: str) -> dict[str, ApprovalRecord]:
        """Pending approval requests of the task, by idempotency key.

        Raises:
            StoreError: SQLite failed (see the class doc).
        """
        return {k: r for k, r in self.approvals(task_id).items()
                if r.state == ApprovalState.PENDING}

    def approvals(self, task_id: str) -> dict[str, ApprovalRecord]:
        """Every approval record of the task, by idempotency key.

        Raises:
            StoreError: SQLite failed (see the class doc).
        """
        def body(conn: sqlite3.Connection) -> dict[str, ApprovalRecord]:
            put_task(conn, task_id, load_task(conn, task_id, self._clock(), self._state_ttl_s))
            rows = conn.execute("SELECT key, record FROM approvals WHERE task = ? "
                                "ORDER BY rowid", (task_id,))
            return {key: _approval(raw) for key, raw in rows}

        return self._run("approvals", task_id, body)

    def waiting_approvals(self) -> list[tuple[str, str, ApprovalRecord]]:
        """The pending approval requests of every task in the file, oldest first, as
        ``(task id, idempotency key, record)``: what ``toolguard status`` lists for the
        user, who may have missed the message naming the key.

        Raises:
            StoreError: SQLite failed (see the class doc).
        """
        def body(conn: sqlite3.Connection) -> list[tuple[str, str, ApprovalRecord]]:
            rows = conn.execute("SELECT task, key, record FROM approvals ORDER BY rowid")
            found = [(task, key, _approval(raw)) for task, key, raw in rows]
            waiting = [row for row in found if row[2].state == ApprovalState.PENDING]
            return sorted(waiting, key=lambda row: row[2].requested_at)

        return self._run("waiting_approvals", "", body)

    def clear_task(self, task_id: str) -> None:
        """Delete every row of the task, its idempotency records included.

        Raises:
            StoreError: SQLite failed (see the class doc).
        """
        def body(conn: sqlite3.Connection) -> None:
            drop_task(conn, task_id)
            conn.execute("DELETE FROM records WHERE task = ?", (task_id,))

        self._run("clear_task", task_id, body)
