"""The Redis store: per-call latency, round trips per call, and throughput under concurrency.

The server is ``TOOLGUARD_BENCH_REDIS_URL``, else ``TOOLGUARD_TEST_REDIS_URL``, else
``redis://127.0.0.1:6379/15`` (the test suite's dedicated database). Every key lives under a
fresh ``tgbench:<hex>`` prefix and is deleted at the end.

* Latency: the guard on ``allow``/``warn``/``cached``/``block``/``executed`` (see
  ``_cases.py``) for small and medium arguments, interleaved in rounds with the same call on
  the in-memory store and the bare call.
* Round trips: Redis commands per call, counted by a ``redis.Redis`` subclass that counts
  ``execute_command`` (every command redis-py sends, scripts included), cross-checked with
  ``RedisStore.round_trips`` where the store has it.
* Throughput: calls/s of the ``allow`` path from 1, 4 and 16 workers, as threads of one
  process sharing one guard (and one connection pool), and as separate processes (forked,
  each with its own guard, store and pool); against one task per worker (``distinct``) or
  one task for all (``shared``: every call serializes on that task's keys in Redis).
"""

from __future__ import annotations

import multiprocessing
import os
import random
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import redis
from _args import args_for, distinct, sized
from _cases import Fresh, guard_variant, kw_calls, make_task, policy_for, prime
from _harness import Variant, median

from toolguard import Effect, Guard, ToolSpec
from toolguard.stores.redis import RedisStore, unreachable

__all__ = ["CountingRedis", "cleanup", "redis_url", "round_trips", "throughput",
           "unreachable", "variants"]

_TIMEOUT_S = 5.0


def redis_url() -> str:
    """The server the benchmark uses."""
    return (os.environ.get("TOOLGUARD_BENCH_REDIS_URL")
            or os.environ.get("TOOLGUARD_TEST_REDIS_URL")
            or "redis://127.0.0.1:6379/15")


class CountingRedis(redis.Redis):
    """A client that counts the commands it sends (one per round trip: no pipelines)."""

    commands = 0

    def execute_command(self, *args: Any, **options: Any) -> Any:
        self.commands += 1
        execute: Callable[..., Any] = super().execute_command  # untyped in redis-py
        return execute(*args, **options)


def new_store(url: str, prefix: str) -> tuple[RedisStore, CountingRedis]:
    """A store on a counting client."""
    client = CountingRedis.from_url(url, socket_timeout=_TIMEOUT_S,
                                    socket_connect_timeout=_TIMEOUT_S)
    assert isinstance(client, CountingRedis)
    return RedisStore(client=client, key_prefix=prefix), client


def cleanup(url: str, prefix: str) -> int:
    """Delete every key under ``prefix:``; return how many."""
    client = redis.Redis.from_url(url, socket_timeout=_TIMEOUT_S)
    try:
        keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
        return int(client.delete(*keys)) if keys else 0
    finally:
        client.close()


def variants(url: str, prefix: str, loop: Any) -> list[Variant]:
    """Per-call latency on the Redis store, with in-memory and bare references."""
    store, _ = new_store(url, prefix)
    out: list[Variant] = []
    for size in ("small", "medium"):
        for path in ("allow", "warn", "cached", "block", "executed"):
            out.append(guard_variant(size, path, "rs", "sync", loop, store=store,
                                     suite="redis"))
        out.append(guard_variant(size, "allow", "rs", "sync", loop))
        out.append(Variant(f"redis/sync/{size}/bare",
                           {"suite": "redis", "mode": "sync", "size": size, "kind": "baseline",
                            "path": "bare"},
                           kw_calls(sized(size).tool, args_for(size))))
    return out


def round_trips(url: str, prefix: str, calls: int) -> list[dict[str, Any]]:
    """Redis commands per call on each decision path (small arguments)."""
    out = []
    for path in ("allow", "warn", "cached", "block", "executed"):
        store, client = new_store(url, prefix)
        try:
            task, name = make_task("small", path, "rs", store=store)
            prime(task, name, "small", path, None)
            fresh = Fresh("small")
            batch = fresh.take(calls) if path == "executed" else [args_for("small")] * calls
            counted, tripped = client.commands, getattr(store, "round_trips", None)
            decisions = {str(task.call(name, a).decision) for a in batch}
            per_call = (client.commands - counted) / calls
            store_count = (None if tripped is None
                           else (getattr(store, "round_trips", 0) - tripped) / calls)
        finally:
            store.close()
            client.close()
        out.append({"path": path, "decisions": sorted(decisions), "calls": calls,
                    "commands_per_call": per_call, "store_round_trips_per_call": store_count})
    return out


# -- throughput -------------------------------------------------------------------------------
def _guard(store: RedisStore | None) -> tuple[Guard, str]:
    tool = sized("small").tool
    spec = ToolSpec(name=tool.__name__, func=tool, effect=Effect.READONLY)
    return Guard(policy_for("allow"), [spec], store=store), tool.__name__


def _threads(url: str | None, prefix: str, workers: int, shared: bool,
             duration_s: float) -> float:
    store = None if url is None else RedisStore(url=url, key_prefix=prefix,
                                                timeout_s=_TIMEOUT_S)
    guard, name = _guard(store)
    run_id = uuid.uuid4().hex[:8]
    tasks = [guard.task(f"tp-{run_id}-{0 if shared else k}") for k in range(workers)]
    barrier = threading.Barrier(workers + 1)
    stop = threading.Event()
    counts = [0] * workers

    def work(k: int) -> None:
        task, args, n = tasks[k], distinct("small", k), 0
        barrier.wait()
        while not stop.is_set():
            task.call(name, args)
            n += 1
        counts[k] = n

    threads = [threading.Thread(target=work, args=(k,)) for k in range(workers)]
    for t in threads:
        t.start()
    barrier.wait()
    start = time.perf_counter()
    time.sleep(duration_s)
    stop.set()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    if store is not None:
        store.close()
    return sum(counts) / elapsed


def _process_worker(url: str | None, prefix: str, task_id: str, k: int, duration_s: float,
                    barrier: Any, results: Any) -> None:
    store = None if url is None else RedisStore(url=url, key_prefix=prefix,
                                                timeout_s=_TIMEOUT_S)
    guard, name = _guard(store)
    task, args, clock = guard.task(task_id), distinct("small", k), time.perf_counter
    barrier.wait()
    start = clock()
    deadline, n = start + duration_s, 0
    while clock() < deadline:
        task.call(name, args)
        n += 1
    results.put(n / (clock() - start))
    if store is not None:
        store.close()


def _processes(url: str | None, prefix: str, workers: int, shared: bool,
               duration_s: float) -> float:
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(workers)
    results = ctx.Queue()
    run_id = uuid.uuid4().hex[:8]
    procs = [ctx.Process(target=_process_worker,
                         args=(url, prefix, f"tp-{run_id}-{0 if shared else k}", k,
                               duration_s, barrier, results))
             for k in range(workers)]
    for p in procs:
        p.start()
    rates = [float(results.get(timeout=60 + duration_s)) for _ in procs]
    for p in procs:
        p.join()
    return sum(rates)


def throughput(url: str | None, prefix: str, worker_counts: tuple[int, ...],
               duration_s: float, reps: int) -> list[dict[str, Any]]:
    """Calls/s of the allow path (``url`` None: the in-memory store, threads only), median
    of ``reps`` runs, the settings interleaved."""
    settings = [(kind, w, shared) for kind in ("threads", "processes") for w in worker_counts
                for shared in (False, True) if url is not None or kind == "threads"]
    rates: dict[tuple[str, int, bool], list[float]] = {s: [] for s in settings}
    rng = random.Random(11)
    for _ in range(reps):
        rng.shuffle(settings)
        for kind, w, shared in settings:
            run = _threads if kind == "threads" else _processes
            rates[(kind, w, shared)].append(run(url, prefix, w, shared, duration_s))
    out = []
    for (kind, w, shared), values in sorted(rates.items()):
        out.append({"store": "memory" if url is None else "redis", "workers": w,
                    "concurrency": kind, "tasks": "shared" if shared else "distinct",
                    "calls_per_s": round(median(values)),
                    "runs": [round(v) for v in values]})
    return out
