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
* Thread scaling (the Redis target: N threads >= 0.7 N x one thread's calls/s, "the
  calls wait on I/O, not on a lock"): :func:`thread_scaling`, run by ``python
  benchmarks/_redis_bench.py`` on a private ``redis-server`` (see :func:`main`). The
  executed path (a mutating no-op with new arguments: begin and finish, two round trips)
  from 1, 2 and 4 threads of one process sharing one guard and one store, each on its own
  task, on plain loopback and through ``tests/redis_delay_proxy.py`` (a child process that
  delays every byte, so each round trip waits on a network as it would between hosts), for
  the store's own client (a connection per thread) and a client passed in (one shared
  redis-py pool: the store's only path before per-thread connections). Beside calls/s: the
  process's CPU per call (user, system) and the server's, from which the loopback ceiling
  follows (see :func:`loopback_ceiling`).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import random
import resource
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import redis
from _args import args_for, distinct, sized
from _cases import Fresh, guard_variant, kw_calls, make_task, policy_for, prime
from _harness import Variant, median

from toolguard import Effect, Guard, ToolSpec
from toolguard.stores.redis import RedisStore, unreachable

__all__ = ["CountingRedis", "cleanup", "loopback_ceiling", "redis_url", "round_trips",
           "thread_scaling", "throughput", "unreachable", "variants"]

ROOT = Path(__file__).resolve().parent.parent

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


# -- thread scaling ----------------------------------------------------------------------
def _scaling_store(url: str, client: str, prefix: str) -> RedisStore:
    """``own``: the store builds its client (a connection per thread); ``passed``: a client
    passed in, used as it is (one redis-py pool shared by the threads). (``bare``, no store
    at all, is :func:`_bare_calls`.)"""
    if client == "own":
        return RedisStore(url=url, key_prefix=prefix, timeout_s=_TIMEOUT_S)
    return RedisStore(redis.Redis.from_url(url, socket_timeout=_TIMEOUT_S,
                                           socket_connect_timeout=_TIMEOUT_S),
                      key_prefix=prefix)


def _server_cpu_s(info_url: str) -> float:
    client = redis.Redis.from_url(info_url, socket_timeout=_TIMEOUT_S)
    try:
        cpu = client.info("cpu")
        return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])
    finally:
        client.close()


def _bare_calls(url: str, threads: int) -> tuple[list[Callable[[int], object]],
                                                  Callable[[], None]]:
    """The ``bare`` baseline: no guard, each "call" two ``EVALSHA`` of a script that does
    nothing (the executed path's round trips), on a connection of each thread's own."""
    shared = redis.Redis.from_url(url, socket_timeout=_TIMEOUT_S)
    sha = shared.script_load("return 1")
    clients = [redis.Redis(connection_pool=shared.connection_pool,
                           single_connection_client=True) for _ in range(threads)]

    def call_on(client: redis.Redis) -> Callable[[int], object]:
        def call(n: int) -> object:
            client.evalsha(sha, 0)
            return client.evalsha(sha, 0)
        return call

    def close() -> None:
        for client in clients:
            client.close()
        shared.close()

    return [call_on(c) for c in clients], close


def _guarded_calls(url: str, client: str, threads: int, prefix: str
                   ) -> tuple[list[Callable[[int], object]], Callable[[], None]]:
    """Each thread's call on the executed path: a task of its own, new arguments."""
    store = _scaling_store(url, client, f"{prefix}:{uuid.uuid4().hex[:8]}")

    def write(k: int, n: int) -> int:
        return n

    spec = ToolSpec(name="write", func=write, effect=Effect.MUTATING)
    guard = Guard(policy_for("executed"), [spec], store=store)

    def call_in(k: int) -> Callable[[int], object]:
        task = guard.task(f"thread-{k}")
        return lambda n: task.call("write", {"k": k, "n": n})

    def close() -> None:
        store.close()
        if client == "passed":
            store.client.close()

    return [call_in(k) for k in range(threads)], close


def _scaling_round(url: str, info_url: str, client: str, threads: int, seconds: float,
                   prefix: str) -> dict[str, float]:
    """One measurement: ``threads`` threads on the executed path for ``seconds``."""
    calls, close = (_bare_calls(url, threads) if client == "bare"
                    else _guarded_calls(url, client, threads, prefix))
    counts = [0] * threads
    ready = threading.Barrier(threads + 1)
    end = [0.0]

    def work(k: int) -> None:
        call = calls[k]
        call(-1)  # connection made, scripts loaded
        ready.wait()
        n = 0
        while time.perf_counter() < end[0]:
            call(n)
            n += 1
        counts[k] = n

    workers = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    for w in workers:
        w.start()
    time.sleep(0.05 * threads)  # every thread at the barrier
    usage0, server0 = resource.getrusage(resource.RUSAGE_SELF), _server_cpu_s(info_url)
    start = time.perf_counter()
    end[0] = start + seconds
    ready.wait()
    for w in workers:
        w.join()
    elapsed = time.perf_counter() - start
    usage1, server1 = resource.getrusage(resource.RUSAGE_SELF), _server_cpu_s(info_url)
    close()
    made = max(1, sum(counts))
    return {"calls_per_s": made / elapsed,
            "user_us": (usage1.ru_utime - usage0.ru_utime) / made * 1e6,
            "sys_us": (usage1.ru_stime - usage0.ru_stime) / made * 1e6,
            "server_us": (server1 - server0) / made * 1e6}


def _rtt_ms(url: str, pings: int = 50) -> float:
    client = redis.Redis.from_url(url, socket_timeout=_TIMEOUT_S)
    try:
        client.ping()
        start = time.perf_counter()
        for _ in range(pings):
            client.ping()
        return (time.perf_counter() - start) / pings * 1e3
    finally:
        client.close()


@contextmanager
def _delayed(url: str, delay_s: float) -> Iterator[str]:
    """``url``, or with ``delay_s`` > 0 a delay proxy's URL in front of it."""
    if delay_s <= 0:
        yield url
        return
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from tests.redis_support import DelayProxy

    with DelayProxy(delay_s, url) as proxy:
        yield proxy.url


def loopback_ceiling(one_thread: dict[str, float], cores: int) -> float:
    """How many times one thread's calls/s any number of threads could reach on this
    machine, from one thread's costs per call: the process's Python work runs one thread
    at a time (the GIL), so at most ``1 / user_us`` calls/s; and the process with the
    server share ``cores`` CPUs, so at most ``cores / (user_us + sys_us + server_us)``
    (system time and the server run outside the GIL). An upper bound: it leaves out the
    machine's other jobs and the cost of switching threads."""
    per_call = one_thread["user_us"] + one_thread["sys_us"] + one_thread["server_us"]
    best = min(1e6 / one_thread["user_us"], cores * 1e6 / per_call)
    return best / one_thread["calls_per_s"]


def thread_scaling(url: str, *, threads: tuple[int, ...] = (1, 2, 4),
                   delays_s: tuple[float, ...] = (0.0, 0.001), clients: tuple[str, ...] =
                   ("own", "passed", "bare"), seconds: float = 1.0, rounds: int = 9,
                   prefix: str = "tgbench:threads") -> dict[str, Any]:
    """Calls/s of the executed path from each of ``threads`` threads sharing one store, on
    ``url`` directly (delay 0) and through a proxy adding each of ``delays_s`` (seconds,
    each way), for each of ``clients`` (see :func:`_scaling_store`).

    Each of ``rounds`` rounds runs every (delay, client) group in a shuffled order, and
    within a group its thread counts back to back, shuffled: a ratio (N threads against one,
    ``own`` against ``passed``) is taken within a round, then its median over rounds
    reported, so the machine's load swings (2-3x between rounds here) cancel out. Needs
    ``url`` to be a server no one else uses for the server's CPU figures."""
    groups = [(d, c) for d in delays_s for c in clients]
    samples: dict[tuple[float, str, int], list[dict[str, float]]] = {
        (d, c, n): [] for d, c in groups for n in threads}
    rng = random.Random(18)
    with ExitStack() as stack:
        urls = {d: stack.enter_context(_delayed(url, d)) for d in delays_s}
        rtts = {d: _rtt_ms(u) for d, u in urls.items()}
        for _ in range(rounds):
            rng.shuffle(groups)
            for d, c in groups:
                for n in rng.sample(threads, len(threads)):
                    samples[(d, c, n)].append(
                        _scaling_round(urls[d], url, c, n, seconds, prefix))
    rows = []
    for d, c, n in sorted(samples):
        values = samples[(d, c, n)]
        med = {k: statistics.median(v[k] for v in values) for k in values[0]}
        ones = samples[(d, c, 1)] if 1 in threads else values
        ratios = [v["calls_per_s"] / (n * one["calls_per_s"])
                  for v, one in zip(values, ones, strict=True)]
        row: dict[str, Any] = {
            "delay_ms": d * 1e3, "rtt_ms": round(rtts[d], 3), "client": c, "threads": n,
            "calls_per_s": round(med["calls_per_s"]),
            "runs": [round(v["calls_per_s"]) for v in values],
            "x_n_one_thread": round(statistics.median(ratios), 2),
            "user_us": round(med["user_us"], 1), "sys_us": round(med["sys_us"], 1),
            "server_us": round(med["server_us"], 1)}
        row["status"] = "PASS" if row["x_n_one_thread"] >= 0.7 else "MISS"
        if c == "own" and "passed" in clients:
            row["x_passed"] = round(statistics.median(
                v["calls_per_s"] / p["calls_per_s"]
                for v, p in zip(values, samples[(d, "passed", n)], strict=True)), 2)
        if n == 1 and d == 0:
            row["ceiling_x"] = round(loopback_ceiling(med, os.cpu_count() or 1), 2)
        rows.append(row)
    return {"rows": rows, "rounds": rounds, "seconds": seconds}


def scaling_markdown(report: dict[str, Any]) -> str:
    """The thread-scaling table."""
    lines = ["| network | client | threads | calls/s | ÷ (N x one thread), target ≥ 0.7 "
             "| own ÷ passed | µs CPU/call: user, system, Redis |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for r in report["rows"]:
        where = ("loopback" if r["delay_ms"] == 0
                 else f"+{r['delay_ms']:g} ms each way")
        versus = f"{r['x_passed']:.2f}" if "x_passed" in r else ""
        lines.append(f"| {where} (PING {r['rtt_ms']:.2f} ms) | {r['client']} | {r['threads']} "
                     f"| {r['calls_per_s']} | {r['x_n_one_thread']:.2f} {r['status']} "
                     f"| {versus} | {r['user_us']:.0f}, {r['sys_us']:.0f}, "
                     f"{r['server_us']:.0f} |")
    ceilings = [f"{r['client']} {r['ceiling_x']:.2f}x" for r in report["rows"]
                if "ceiling_x" in r]
    lines += ["", "Loopback ceiling (the most any number of threads could reach, x one "
              f"thread, from one thread's CPU per call on {os.cpu_count()} CPUs): "
              + ", ".join(ceilings) + "."]
    return "\n".join(lines)


def main() -> int:
    """``python benchmarks/_redis_bench.py``: thread scaling and round trips on a private
    ``redis-server`` (started on a free loopback port, stopped at the end); writes
    ``benchmarks/results/redis_threads.json`` and ``.md``."""
    parser = argparse.ArgumentParser(description="Redis store: threads and round trips")
    parser.add_argument("--seconds", type=float, default=1.0, help="per setting and round")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--delay-ms", type=float, action="append",
                        help="one-way delay of the proxied runs (repeatable; default 1)")
    parser.add_argument("--smoke", action="store_true", help="seconds-long run")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results"
                        / "redis_threads")
    opts = parser.parse_args()
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from tests.redis_servers import server

    delays = tuple(d / 1e3 for d in (opts.delay_ms or [1.0]))
    seconds, rounds = (0.3, 1) if opts.smoke else (opts.seconds, opts.rounds)
    load_before = os.getloadavg()[0]
    with server() as srv:
        started = time.time()
        scaling = thread_scaling(srv.url, delays_s=(0.0, *delays), seconds=seconds,
                                 rounds=rounds)
        trips = round_trips(srv.url, "tgbench:trips", 50 if opts.smoke else 500)
    report = {"machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                          "redis_py": redis.__version__,
                          "load_avg_before_after": [round(load_before, 1),
                                                    round(os.getloadavg()[0], 1)]},
              "started": started, "threads": scaling, "round_trips": trips}
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    opts.out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
    md = scaling_markdown(scaling) + "\n\n| path | commands/call |\n| --- | ---: |\n" + "".join(
        f"| {t['path']} | {t['commands_per_call']:g} |\n" for t in trips)
    opts.out.with_suffix(".md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
