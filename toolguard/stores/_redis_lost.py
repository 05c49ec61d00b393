"""What :class:`~toolguard.stores.RedisStore` keeps when a reply is lost (see its module
docstring, "Three faults"): the claims whose ``begin`` reply was lost, to take over on the
retry, and the outcomes Redis did not take, written before the task's next operation. Plain
functions on the store's tables (it passes them with its lock), called only on those faults.

So that another worker can recover them too (this one may never call again), a thread of the
store's (:func:`recover_soon`) retries as soon as Redis answers: it writes the kept outcomes
and gives up the lost claims (``_ABANDON``), then ends.
"""

from __future__ import annotations

import contextlib
import threading
import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Final, Protocol

import redis
from redis.exceptions import NoScriptError

from toolguard._errors import StoreError

from ._base import FinishRequest
from ._redis_scripts import _ABANDON_SCRIPT, _LOST

if TYPE_CHECKING:
    from redis.cluster import RedisCluster



class StoreState(Protocol):
    """What recovery reads and writes of a :class:`toolguard.stores.RedisStore`: its tables,
    under its lock, and its connection (a protocol, so that this module does not import the
    store)."""

    _lock: threading.Lock
    _orphans: dict[tuple[str, str], bytes]
    _unrecorded: dict[str, list[FinishRequest]]
    _where: str
    _timeout_s: float
    _recovering: bool
    _closed: bool

    def _here(self) -> redis.Redis | RedisCluster: ...
    def _count(self) -> None: ...
    def _keys(self, task_id: str, record_key: str = "") -> list[str]: ...
    def _finish_now(self, task_id: str, req: FinishRequest) -> None: ...


_MAX_TASKS: Final = 65_536  # tasks one store remembers a generation (and pending writes) of
_MAX_UNRECORDED: Final = 64  # outcomes kept per task while Redis does not take them
_PAUSE_S: Final = (0.05, 1.0)  # the recovery thread's first and longest pause between tries


def _remember_claim(orphans: dict[tuple[str, str], bytes], lock: threading.Lock, task_id: str,
                    key: str, orphan: bytes, tail: bytes) -> None:
    """A claiming begin failed: the script may have run and claimed ``key``; remember the
    claim (``tail``, after up to three earlier lost ones in ``orphan``) as this store's."""
    with lock:  # this begin's claim, or an earlier lost one's
        orphans[(task_id, key)] = b"\n".join(
            [*orphan.split(b"\n")[-3:], tail] if orphan else [tail])
        if len(orphans) > _MAX_TASKS:
            del orphans[next(iter(orphans))]


def _keep_outcome(unrecorded: dict[str, list[FinishRequest]], lock: threading.Lock,
                  task_id: str, req: FinishRequest) -> None:
    """Redis did not take ``req``: keep it (the last ``_MAX_UNRECORDED`` per task)."""
    with lock:
        pending = unrecorded.setdefault(task_id, [])
        pending.append(req)
        del pending[:-_MAX_UNRECORDED]
        if len(unrecorded) > _MAX_TASKS:
            del unrecorded[next(iter(unrecorded))]


def _write_unrecorded(unrecorded: dict[str, list[FinishRequest]], lock: threading.Lock,
                      task_id: str, finish: Callable[[str, FinishRequest], None]) -> None:
    """Write the outcomes Redis did not take with ``finish``, oldest first (before anything
    else about the task, so an identical retry finds the completed record, not a stale claim).

    Raises:
        StoreError: a write failed; it and the ones after it stay kept.
    """
    with lock:
        pending = unrecorded.pop(task_id, None)
    while pending:
        try:
            finish(task_id, pending[0])
        except StoreError:
            with lock:
                pending += unrecorded.pop(task_id, [])
                unrecorded[task_id] = pending
            raise
        pending.pop(0)


def recover_soon(store: StoreState) -> None:
    """Start ``store``'s recovery thread unless it is running (see the module docstring)."""
    with store._lock:
        if store._recovering:
            return
        store._recovering = True
    threading.Thread(target=_recover, args=(weakref.ref(store),), daemon=True,
                     name="toolguard-redis-recovery").start()


def _recover(ref: weakref.ref[StoreState]) -> None:
    """Until the store's tables are empty (or it is closed or gone): write its kept outcomes,
    then give up its lost claims, pausing longer after each round that Redis did not take.

    A lost claim that Redis does not hold (its begin has not run, or never will) is dropped
    once it stayed absent for ``2 * timeout_s + 1`` seconds."""
    pause = _PAUSE_S[0]
    absent_since: dict[tuple[str, str], float] = {}  # lost claims Redis did not hold
    while True:
        time.sleep(pause)
        store = ref()
        if store is None:
            return
        with store._lock:
            tasks, orphans = list(store._unrecorded), dict(store._orphans)
            if store._closed or not (tasks or orphans):
                store._recovering = False
                return
        took = False
        absent_since = {k: t for k, t in absent_since.items() if k in orphans}
        for task_id in tasks:
            with contextlib.suppress(StoreError):
                _write_unrecorded(store._unrecorded, store._lock, task_id, store._finish_now)
                took = True
        for (task_id, key), tails in orphans.items():
            try:
                found = abandon(store, task_id, key, tails)
            except StoreError:
                continue
            took = True
            first = absent_since.setdefault((task_id, key), time.monotonic())
            if found == 0 and time.monotonic() - first < 2 * store._timeout_s + 1:
                continue  # the begin may still be on its way to Redis
            with store._lock:
                if store._orphans.get((task_id, key)) == tails:
                    del store._orphans[(task_id, key)]
        pause = _PAUSE_S[0] if took else min(pause * 2, _PAUSE_S[1])
        del store  # a store nobody else holds may go while this thread sleeps


def abandon(store: StoreState, task_id: str, key: str, tails: bytes) -> int:
    """Give up the claims of ``key`` whose begin replies were lost (their record ``tails``):
    1 given up, 0 no record, 2 a record that is no such claim (see ``_ABANDON``).

    Raises:
        StoreError: Redis failed or timed out.
    """
    keys = store._keys(task_id, key)
    store._count()
    try:
        client = store._here()
        try:
            return int(client.evalsha(_ABANDON_SCRIPT.sha, 1, keys[5], tails))
        except NoScriptError:
            return int(client.eval(_ABANDON_SCRIPT.source, 1, keys[5], tails))
    except redis.RedisError as exc:
        raise failure(store._where, "abandon", task_id, exc) from exc


def failure(where: str, op: str, task_id: str, exc: Exception,
            restart: Callable[[], None] | None = None) -> StoreError:
    """The error of a failed operation of the Redis store at ``where``; ``restart``: how the
    task starts over when its state was lost (see :class:`toolguard.StoreError`)."""
    if isinstance(exc, redis.ResponseError) and str(exc).startswith(_LOST):
        return StoreError(
            f"Redis store at {where}: the state of task {task_id!r} is gone ({op}): "
            "Redis restarted without persistence, or the task's keys were evicted or "
            "deleted. Its counts, halts and idempotency records are lost: under "
            "store.on_error = fail_closed its calls are refused rather than counted from "
            f"zero until clear_task({task_id!r}) starts it over; under fail_open this "
            "call runs unguarded and the task continues, guarded, on fresh state. Give "
            "Redis persistence (appendonly yes).", restart=restart)
    return StoreError(f"Redis store at {where} failed ({op}, task {task_id!r}): "
                      f"{type(exc).__name__}: {exc}")
