"""Redis store: per-task state shared by every worker process and host serving a task.

Needs the extra ``agent-toolguard[redis]`` (redis-py). Semantics are exactly those of
:class:`~toolguard.stores.MemoryStore` (one contract suite, ``tests/stores/test_store_contract.py``,
runs against both); only where the state lives differs.

Key layout, for task ``T`` under ``key_prefix`` ``P`` (``{T}`` is a Redis Cluster hash tag,
so all keys of one task share one slot; in ``P`` and ``T`` alike ``%``, ``{`` and ``}`` are
written ``%25``, ``%7B`` and ``%7D``, so no prefix or task id can reach into another's keys
or split a task over slots, and an empty task id is written ``%``)::

    P:{T}:meta        hash   epoch, changes, calls, in, out (tokens), started, halted (JSON),
                             t:<tool> (calls per tool), f:<tool> (consecutive failures),
                             last (signature of the last counted call), s:<tool> (the
                             stagnation run: "epoch length outcome last_signature"),
                             x:<signature> (its transient failures in a row),
                             gen (the task's generation marker, below)
    P:{T}:sigs        hash   signature -> "epoch count polls last_result_digest resets"
    P:{T}:seen        set    (signature, result digest) pairs seen, and (signature, NUL
                             progress fingerprint) pairs (progress detection)
    P:{T}:appr        hash   idempotency key -> approval record (JSON)
    P:{T}:recs        set    idempotency keys that have a record (for clear_task)
    P:{T}:rec:<key>   string idempotency record: "state|changes|expires_at|created_at|" + JSON;
                             a claim has the end of its TTL before the JSON (past it, and
                             until expires_at, it reads as an unknown outcome)

The five task keys expire ``state_ttl_s`` seconds after the task's last use (every
operation refreshes them); each record carries its own TTL (``PX``: the claim TTL plus the
idempotency TTL for an in-progress claim, which is an unknown outcome after the first,
the idempotency TTL for completed and unknown records). Nothing is kept
without a TTL. Records also store their expiry time on the guard's clock and are ignored
once ``now`` passes it, so expiry follows an injected clock exactly as in memory; ``PX``
removes them physically.

Atomicity and round trips: :meth:`RedisStore.begin` and :meth:`RedisStore.finish` are one
Lua script each (``EVALSHA``), so two workers racing on one signature see consecutive
counts and exactly one of them claims the idempotency key (a ``SET ... PX`` inside the
script: atomic with the read, and a claim left by a crashed worker becomes an unknown
outcome after its TTL).
A call answered from the idempotency cache costs one round trip, an executed call two.
Every other method is one round trip.

Stored results are JSON (orjson): str, int, float, bool, None, list and dict round-trip;
tuples come back as lists, non-string dict keys as strings, and any other value (bytes, an
object, an int beyond 64 bits) as its ``repr()`` string.

Failures: every Redis error becomes :class:`toolguard.StoreError`. A client built here has
``socket_timeout`` and ``socket_connect_timeout`` of ``timeout_s`` and retries a command up
to three times after a connection error (reconnecting; the state is in Redis, so the task
continues intact), never after a timeout (a cluster client also retries timeouts, as
redis-py's ``RedisCluster`` does). A command whose reply was lost with its connection may
then apply twice (counts err high, never low). Three faults get more than an error:

- *A lost begin reply* (a stall or crash after Redis ran the script): the claim it may have
  taken carries the call's id, and this store remembers it, so the next identical call
  through this store (the retry) takes it over at once instead of waiting
  ``in_progress_ttl_s``; it was counted once. As soon as Redis answers again, a thread of
  this store gives the claim up (it marks it abandoned), so an identical call through any
  other worker takes it over too instead of waiting.
- *A lost finish* (the tool ran, then Redis failed): the outcome is kept in this store and
  written before the task's next operation through it, and by the same thread as soon as
  Redis answers, so a retry through any worker finds the stored result rather than an
  unknown outcome (review) when the claim's TTL passes. If this process dies first, the
  outcome is lost with it, and the claim becomes that unknown outcome.
- *Lost state* (a restart without persistence, an eviction, a deletion): the first write of
  a task sets a random generation marker in its meta hash, which this store remembers; a
  task it knows whose marker is gone or changed raises :class:`toolguard.StoreError`
  instead of counting budgets and the ladder from zero. Under ``fail_closed`` every
  operation of the task is refused until :meth:`RedisStore.clear_task` starts it over;
  under ``fail_open`` only the call that found the loss runs unguarded (the error's
  ``restart``): the task then continues, guarded, on fresh state. Expiry by
  ``state_ttl_s`` is told apart by time; a worker that never saw the task cannot tell.

Cluster (``cluster=True``): redis-py's ``RedisCluster`` with the same scripts and keys (each
script names all its keys, which share the task's slot), following ``MOVED`` and ``ASK``;
replicas are never read, so every decision sees the master's state.

Threads: nothing in this store holds a lock across a round trip, so N threads wait on
Redis at the same time (``benchmarks/_redis_bench.py``, "threads"). A store that built its
own single-node client (``url=``, not ``client=``, not ``cluster``) gives each thread a
connection of its own (a single-connection ``redis.Redis`` on the store's pool, made on the
thread's first operation and returned to the pool when the thread ends), so a command
takes no lock shared between threads: redis-py's pool otherwise takes its lock twice per
command and polls the socket once. Up to 32 threads get one; the others share the pool as
before. A client passed in is used as it is for every command (its pool, its subclass).
Fork-safe: a forked child drops the parent's per-thread connections and redis-py's pool
reconnects there.
Signature history is not LRU-bounded per task as in memory: it lives until the task's TTL.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import weakref
from typing import Any, Final, Literal

import orjson

try:
    import redis
    from redis.cluster import RedisCluster
    from redis.exceptions import NoScriptError
except ImportError as _exc:  # pragma: no cover - tests/project/test_imports.py hides redis
    raise ImportError(
        "toolguard.stores.RedisStore needs redis-py: pip install 'agent-toolguard[redis]'"
    ) from _exc

from toolguard._errors import StoreError
from toolguard.policy._model import StorePolicy

from ._base import (
    ApprovalRecord,
    ApprovalState,
    BeginRequest,
    FinishRequest,
    IdempotencyRecord,
    RetryRequest,
    Snapshot,
    TaskUsage,
)
from ._json import _approval, _approval_json, _dumps
from ._redis_lost import (
    _MAX_TASKS,
    _keep_outcome,
    _remember_claim,
    _write_unrecorded,
    failure,
    recover_soon,
)
from ._redis_scripts import (
    _ADD_COST_SCRIPT,
    _ADD_USAGE_SCRIPT,
    _BEGIN_SCRIPT,
    _CLEAR_SCRIPT,
    _FINISH_SCRIPT,
    _NEW_TURN_SCRIPT,
    _READ_HASH_SCRIPT,
    _SET_APPROVAL_SCRIPT,
    _SET_HALTED_SCRIPT,
    _Script,
)
from ._redis_wire import (
    _MAX_TTL_S,
    _bytes,
    _client,
    _escape,
    _ms,
    _record,
    _snapshot,
    _text,
    _time,
    _usage,
    _where,
    retry_unknown,
    startup_nodes,
    unreachable,
)

__all__ = ["RedisStore", "startup_nodes", "unreachable"]

OnError = Literal["fail_closed", "fail_open"]

DEFAULT_URL: Final = "redis://localhost:6379/0"

class RedisStore:
    """Per-task state in Redis, shared by every process that points at the same server or
    cluster (see the module docstring for the key layout, TTLs and failure behaviour).

    Args:
        client: a ready ``redis.Redis`` or ``redis.cluster.RedisCluster`` client (its own
            timeouts and retry apply; give it a ``socket_timeout``). Either this or ``url``.
        url: a Redis URL (``redis://host:6379/0``, ``rediss://`` for TLS, ``unix://``);
            default ``redis://localhost:6379/0`` when no client is given either. With
            ``cluster``, one or several comma-separated startup nodes
            (``redis://10.0.0.1:7000,10.0.0.2:7000``; options such as the password come
            from the first).
        cluster: talk to a Redis Cluster (redis-py's ``RedisCluster``, which follows
            ``MOVED``/``ASK`` redirections): same scripts, same key layout, every read and
            write on the master of the task's slot (replicas are never read).
        key_prefix: namespace of every key (``{key_prefix}:{task}:...``; ``%``, ``{`` and
            ``}`` are escaped in keys, in the prefix and the task id alike).
        state_ttl_s: per-task state expires this many seconds after the task's last use.
        timeout_s: socket connect and read timeout of every Redis command, in seconds
            (clients built here only).
        on_error: what the guard does when this store fails: ``fail_closed`` (the call is
            refused with :class:`toolguard.StoreError`) or ``fail_open`` (the call runs
            unguarded, with a warning audit event); ``None`` (default): the policy's
            ``[store] on_error``. Read by the engine.

    Attributes:
        on_error: as given (``None``: follow the policy).
        blocking: True: every operation waits on the network, so under ``acall`` the engine
            runs it in a worker thread instead of on the event loop.
        round_trips: Redis commands sent by this store so far, from every thread (a script
            call counts one; the one-time script load after a server restart one more;
            redis-py's reconnect retries are not counted). For tests and benchmarks.

    Raises:
        ValueError: both ``client`` and ``url``, a non-positive TTL or timeout, an unknown
            ``on_error``, or several URLs without ``cluster``.

    Every other method raises :class:`toolguard.StoreError` when Redis fails or times out,
    or when a task's state was lost (see the module docstring). Thread-safe.
    """

    blocking: Final = True

    def __init__(
        self,
        client: redis.Redis | RedisCluster | None = None,
        *,
        url: str | None = None,
        cluster: bool = False,
        key_prefix: str = "toolguard",
        state_ttl_s: float = 86_400.0,
        timeout_s: float = 1.0,
        on_error: OnError | None = None,
    ) -> None:
        if client is not None and url is not None:
            raise ValueError("RedisStore: pass a client or a url, not both")
        if not state_ttl_s > 0 or not timeout_s > 0:
            raise ValueError("RedisStore: state_ttl_s and timeout_s must be > 0 seconds")
        if on_error not in (None, "fail_closed", "fail_open"):
            raise ValueError(f"RedisStore: on_error must be fail_closed or fail_open, "
                             f"not {on_error!r}")
        self._owns_client = client is None
        if client is None:
            url = url or DEFAULT_URL
            try:
                client = _client(url, timeout_s, cluster=cluster)
            except redis.RedisError as exc:
                raise StoreError(f"Redis Cluster at {url} cannot be used: {exc}") from exc
        self._client = client
        self.on_error: OnError | None = on_error
        # round trips by thread id: each thread adds to its own entry, so no lock and no
        # lost update (a finished thread's entry stays, and a new thread may reuse its id)
        self._trips: dict[int, int] = {}
        self._lock = threading.Lock()  # the lost-claim and pending-outcome tables only
        # this thread's client (see the module doc: "Threads"), for a pool of our own
        self._pool = (client.connection_pool
                      if self._owns_client and type(client) is redis.Redis else None)
        self._local = threading.local()
        self._bound: weakref.WeakSet[redis.Redis] = weakref.WeakSet()
        if self._pool is not None:
            _STORES.add(self)
        self._prefix = key_prefix
        self._escaped_prefix = _escape(key_prefix)
        self._state_ttl_s = state_ttl_s
        self._state_ms = _ms(state_ttl_s)
        self._state_ms_arg = str(self._state_ms)
        # lost-state detection: task id -> (generation, monotonic time before its last use)
        self._gens: dict[str, tuple[str, float]] = {}
        # claims whose begin reply was lost: (task id, key) -> their record tails, one a line
        self._orphans: dict[tuple[str, str], bytes] = {}
        # outcomes Redis did not take: task id -> finishes to write before its next operation
        self._unrecorded: dict[str, list[FinishRequest]] = {}
        self._where = _where(client)
        self._timeout_s = timeout_s
        self._recovering = self._closed = False  # the recovery thread (_redis_lost)

    @classmethod
    def from_policy(cls, store_policy: StorePolicy) -> RedisStore:
        """A store configured by the policy's ``[store]`` table (``url``, ``cluster``,
        ``key_prefix``, ``state_ttl_s``, ``timeout_s``, ``on_error``)."""
        return cls(url=store_policy.url, cluster=store_policy.cluster,
                   key_prefix=store_policy.key_prefix, state_ttl_s=store_policy.state_ttl_s,
                   timeout_s=store_policy.timeout_s, on_error=store_policy.on_error)

    @property
    def client(self) -> redis.Redis | RedisCluster:
        """The redis-py client (the one passed in, or the one this store built; its threads'
        own connections come from its pool)."""
        return self._client

    @property
    def round_trips(self) -> int:
        """Redis commands this store sent so far, from every thread (see the class doc)."""
        return sum(list(self._trips.values()))

    @round_trips.setter
    def round_trips(self, value: int) -> None:
        self._trips = {threading.get_ident(): value}

    def close(self) -> None:
        """Close the connection pool if this store made the client (one passed in stays open)."""
        self._closed = True
        if self._owns_client:
            self._forget_threads()
            self._client.close()

    def __repr__(self) -> str:
        return f"RedisStore({self._where!r}, key_prefix={self._prefix!r})"

    # -- plumbing ------------------------------------------------------------------------
    def _here(self) -> redis.Redis | RedisCluster:
        """The client for this thread's commands: its own single-connection client on the
        store's pool when the store built a single-node client and fewer than
        ``_MAX_THREADS`` threads hold one, else the store's client.

        Raises:
            redis.RedisError: the thread's connection could not be made.
        """
        pool = self._pool
        if pool is None:
            return self._client
        try:
            here: redis.Redis = self._local.client
        except AttributeError:
            if len(self._bound) >= _MAX_THREADS:
                return self._client  # not kept: a later operation may find room
            here = redis.Redis(connection_pool=pool, single_connection_client=True)
            self._local.client = here
            self._bound.add(here)
        return here

    def _forget_threads(self) -> None:
        """Drop every thread's own client (after a fork: they hold the parent's sockets,
        which the child's pool disowns, so nothing is sent or shut down on them)."""
        self._local = threading.local()
        self._bound = weakref.WeakSet()

    def _count(self) -> None:
        trips, ident = self._trips, threading.get_ident()
        trips[ident] = trips.get(ident, 0) + 1

    def _keys(self, task_id: str, record_key: str = "") -> list[str]:
        base = f"{self._escaped_prefix}:{{{_escape(task_id) or '%'}}}:"
        return [base + "meta", base + "sigs", base + "seen", base + "appr", base + "recs",
                base + "rec:" + record_key]

    def _fail(self, op: str, task_id: str, exc: Exception) -> StoreError:
        return failure(self._where, op, task_id, exc, lambda: self._restart(task_id))

    def _restart(self, task_id: str) -> None:
        """Take whatever state the task has now (after a loss: none, so it starts over) as
        its own, instead of refusing every operation (``fail_open``, see :meth:`_fail`)."""
        self._gens.pop(task_id, None)

    def _eval(self, op: str, task_id: str, script: _Script, keys: list[str],
              args: list[str | bytes | int]) -> Any:
        """Run ``script`` (one round trip; two when the server lacks it) with the task's
        generation arguments appended; return its value after checking the generation."""
        if self._unrecorded and task_id in self._unrecorded:
            _write_unrecorded(self._unrecorded, self._lock, task_id, self._finish_now)
        known = self._gens.get(task_id)
        started = time.monotonic()
        if known is not None and started - known[1] < self._state_ttl_s:
            args += [known[0], ""]
        else:  # new here, or idle long enough that its state may have expired: start over
            args += ["", os.urandom(8).hex()]
        self._count()
        try:
            client = self._here()
            try:
                gen, value = client.evalsha(script.sha, len(keys), *keys, *args)
            except NoScriptError:  # first use on this server (or after SCRIPT FLUSH)
                self._count()
                gen, value = client.eval(script.source, len(keys), *keys, *args)
        except redis.RedisError as exc:
            raise self._fail(op, task_id, exc) from exc
        if gen:
            gens = self._gens
            gens[task_id] = (_text(gen), started)
            if len(gens) > _MAX_TASKS:
                with contextlib.suppress(KeyError, RuntimeError, StopIteration):
                    del gens[next(iter(gens))]  # the oldest: it loses lost-state detection
        return value

    # -- the Store protocol --------------------------------------------------------------
    def begin(self, task_id: str, req: BeginRequest) -> Snapshot:
        """Count the attempt, claim the key if asked, and return the state to decide on:
        one Lua script, one round trip (see :meth:`MemoryStore.begin
        <toolguard.stores.MemoryStore.begin>` for the semantics).

        A claiming begin whose reply was lost (a timeout, a dropped connection) may still
        have claimed the key; the next claiming begin of the same key through this store
        takes that claim over (it never ran), instead of waiting ``in_progress_ttl_s``.

        Raises:
            StoreError: Redis failed or timed out, or the task's state was lost.
        """
        now = _time(req.now)
        tail = orjson.dumps([req.call_id, None])
        key = req.idempotency_key
        orphan = self._orphans.pop((task_id, key), b"") if self._orphans and req.claim else b""
        try:
            r = self._eval("begin", task_id, _BEGIN_SCRIPT, self._keys(task_id, key), [
                req.tool, req.signature, key,
                "1" if req.claim else "0", "1" if req.task_scope else "0",
                "1" if req.count else "0", "1" if req.poll else "0",
                now, _time(req.now + min(req.claim_ttl_s, _MAX_TTL_S)),
                _ms(req.claim_ttl_s), self._state_ms_arg, tail,
                "1" if req.call_id else "0",  # a call id to recognise its claim by
                orphan,
                # kept as an unknown outcome for ttl_s more once the claim's TTL passes
                _time(req.now + min(req.claim_ttl_s + req.ttl_s, _MAX_TTL_S)),
                _ms(req.claim_ttl_s + req.ttl_s),
            ])
        except StoreError:
            if req.claim and req.call_id:  # the script may have claimed the key: ours
                _remember_claim(self._orphans, self._lock, task_id, key, orphan, tail)
                recover_soon(self)
            raise
        return _snapshot(r)

    def finish(self, task_id: str, req: FinishRequest) -> None:
        """Record a call's outcome (progress, failures, idempotency record, halt): one Lua
        script, one round trip.

        An outcome Redis does not take is kept by this store and written before the task's
        next operation through it (``begin`` included), so an identical retry finds the
        completed record instead of an unknown outcome once the claim's TTL passes.

        Raises:
            StoreError: Redis failed or timed out (the outcome is kept, as above), or the
                task's state was lost.
        """
        try:
            self._finish_now(task_id, req)
        except StoreError as exc:
            _keep_outcome(self._unrecorded, self._lock, task_id, req)
            recover_soon(self)
            raise StoreError(f"{exc}; the outcome is kept by this worker and written before "
                             f"the task's next store operation") from exc

    def _finish_now(self, task_id: str, req: FinishRequest) -> None:
        if req.store_result:
            mode, tail = "c", b"[%s,%s]" % (orjson.dumps(req.call_id), _dumps(req.content))
        elif req.unknown:
            mode, tail = "u", orjson.dumps([req.call_id, None])
        else:
            mode, tail = ("r", orjson.dumps([req.call_id, None])) if req.release else ("", b"")
        self._eval("finish", task_id, _FINISH_SCRIPT,
                   self._keys(task_id, req.idempotency_key), [
                       req.tool, req.signature, req.idempotency_key,
                       "1" if req.executed else "0", "1" if req.success else "0",
                       "1" if req.mutating else "0", req.result_digest, mode, tail,
                       _ms(req.ttl_s), _time(req.now),
                       _time(req.now + min(req.ttl_s, _MAX_TTL_S)),
                       b"" if req.halt is None else _dumps(req.halt), self._state_ms_arg,
                       req.outcome, str(req.max_progress_resets),
                       "1" if req.transient else "0", req.progress,
                   ])

    def get_record(self, task_id: str, key: str, now: float) -> IdempotencyRecord | None:
        """The record under ``key`` unless it expired by ``now`` (one ``GET``). As in memory,
        an ``until_change`` record that lapsed at a progress is still returned here.

        Raises:
            StoreError: Redis failed or timed out.
        """
        if self._unrecorded and task_id in self._unrecorded:
            _write_unrecorded(self._unrecorded, self._lock, task_id, self._finish_now)
        self._count()
        try:
            raw = self._here().get(self._keys(task_id, key)[5])
        except redis.RedisError as exc:
            raise self._fail("get_record", task_id, exc) from exc
        if raw is None:
            return None
        raw = _bytes(raw)
        abandoned = raw.startswith(b"p|") and raw.endswith(b"|[null,null]")  # as good as none
        return None if abandoned or float(raw.split(b"|", 3)[2]) <= now else _record(raw, now)

    def set_halted(self, task_id: str, halt: dict[str, Any] | None) -> None:
        """Set (or with None clear) the task's halted flag; clearing it restarts every
        tool's run of consecutive failures.

        Raises:
            StoreError: Redis failed or timed out, or the task's state was lost.
        """
        flag, value = ("0", b"") if halt is None else ("1", _dumps(halt))
        self._eval("set_halted", task_id, _SET_HALTED_SCRIPT, self._keys(task_id)[:5],
                   [flag, value, self._state_ms_arg])

    def new_turn(self, task_id: str) -> None:
        """A new user turn: the epoch moves on (counts restart, until_change records lapse).

        Raises:
            StoreError: Redis failed or timed out, or the task's state was lost.
        """
        self._eval("new_turn", task_id, _NEW_TURN_SCRIPT, self._keys(task_id)[:5],
                   [self._state_ms_arg])

    def add_usage(self, task_id: str, input_tokens: int, output_tokens: int, now: float) -> int:
        """Add token usage (starting the task's clock at ``now`` if not started); return the
        task's total tokens.

        Raises:
            StoreError: Redis failed or timed out, or the task's state was lost.
        """
        total = self._eval("add_usage", task_id, _ADD_USAGE_SCRIPT, self._keys(task_id)[:5],
                           [_time(now), input_tokens, output_tokens, self._state_ms_arg])
        return int(total)

    def add_cost(self, task_id: str, cost_nusd: int, unpriced_tokens: int, tool: str,
                 now: float) -> tuple[int, int]:
        """Add the price of model usage, in nano-dollars, and tokens of unknown price
        (to ``tool``'s cost too, unless ``""``); return the task's and the tool's cost.

        Raises:
            StoreError: Redis failed or timed out, or the task's state was lost.
        """
        total, tool_total = self._eval(
            "add_cost", task_id, _ADD_COST_SCRIPT, self._keys(task_id)[:5],
            [_time(now), cost_nusd, unpriced_tokens, tool, self._state_ms_arg])
        return int(total), int(tool_total)

    def usage(self, task_id: str) -> TaskUsage:
        """The task's counters (zeros for a task never seen).

        Raises:
            StoreError: Redis failed or timed out, or the task's state was lost.
        """
        raw = self._eval("usage", task_id, _READ_HASH_SCRIPT, self._keys(task_id)[:5],
                         ["1", self._state_ms_arg])
        return _usage(raw)

    def set_approval(self, task_id: str, key: str, record: ApprovalRecord, ttl_s: float) -> None:
        """Store a human decision (or a pending request) for ``key``. As in memory, approvals
        live as long as the task's state (``state_ttl_s``); ``ttl_s`` is not used.

        Raises:
            StoreError: Redis failed or timed out, or the task's state was lost.
        """
        self._eval("set_approval", task_id, _SET_APPROVAL_SCRIPT, self._keys(task_id)[:5],
                   [key, _approval_json(record), self._state_ms_arg])

    def retry_unknown(self, task_id: str, req: RetryRequest) -> bool:
        """:meth:`Store.retry_unknown <toolguard.stores.Store.retry_unknown>`: one script."""
        return retry_unknown(self, task_id, req)

    def pending_approvals(self, task_id: str) -> dict[str, ApprovalRecord]:
        """Pending approval requests of the task, by idempotency key.

        Raises:
            StoreError: Redis failed or timed out, or the task's state was lost.
        """
        return {k: r for k, r in self.approvals(task_id).items()
                if r.state == ApprovalState.PENDING}

    def approvals(self, task_id: str) -> dict[str, ApprovalRecord]:
        """Every approval record of the task, by idempotency key.

        Raises:
            StoreError: Redis failed or timed out, or the task's state was lost.
        """
        raw = self._eval("approvals", task_id, _READ_HASH_SCRIPT,
                         self._keys(task_id)[:5], ["4", self._state_ms_arg])
        return {_text(k): _approval(v) for k, v in zip(raw[::2], raw[1::2], strict=True)}

    def clear_task(self, task_id: str) -> None:
        """Delete every key of the task, its idempotency records included, and start it over
        (also after its state was lost: calls are accepted again, counted from zero).

        Raises:
            StoreError: Redis failed or timed out.
        """
        keys = self._keys(task_id)
        self._count()
        with self._lock:
            self._unrecorded.pop(task_id, None)
        try:
            client = self._here()
            try:
                client.evalsha(_CLEAR_SCRIPT.sha, 5, *keys[:5], keys[5])
            except NoScriptError:
                client.eval(_CLEAR_SCRIPT.source, 5, *keys[:5], keys[5])
        except redis.RedisError as exc:
            raise self._fail("clear_task", task_id, exc) from exc
        self._gens.pop(task_id, None)


# Threads of one store with a connection of their own: well under redis-py's default pool
# size (100), so the threads beyond them still find connections in the shared pool.
_MAX_THREADS: Final = 32
# Stores with per-thread clients, so that a forked child drops the parent's connections.
_STORES: Final[weakref.WeakSet[RedisStore]] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for store in list(_STORES):
        store._forget_threads()


os.register_at_fork(after_in_child=_after_fork_in_child)
