"""RedisStore under threads and its round trips per call (the Redis targets of the benchmarks).

Round trips are counted three ways, on a private ``redis-server``: by the server itself
(``MONITOR``: every command a client sent, not those its scripts ran), by a client that
counts what it sends, and by ``RedisStore.round_trips``.

Threads: the store must not make threads take turns at Redis. Through a proxy that delays
every byte (``DelayProxy``: each round trip ≥ 40 ms longer), a lock held across a round
trip would make 4 threads take ≥ 4x one thread's time for the same calls each; waiting
together they take about 1x. The tests assert < 2x (a margin of hundreds of milliseconds
against a few milliseconds of CPU per call), and a control store with such a lock takes
≥ 4x the least one thread can take, so the check can fail. Throughput itself is measured
in ``benchmarks/_redis_bench.py``.
"""

from __future__ import annotations

import gc
import json
import multiprocessing
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import toolguard as tg
from tests.redis_servers import Server, server
from tests.redis_support import missing_extra, write_and_lookup
from toolguard.policy._model import LadderPolicy, LadderThresholds

try:
    import redis

    from toolguard.stores.redis import RedisStore
except ImportError as exc:
    missing_extra(exc)

from tests.redis_support import DelayProxy

pytestmark = pytest.mark.redis

DELAY_S = 0.02  # one way: every round trip through the proxy takes ≥ 40 ms more


@pytest.fixture(scope="module")
def srv() -> Iterator[Server]:
    """A private server: its command counts and client list are this module's alone."""
    with server() as private:
        yield private


@pytest.fixture
def prefix() -> str:
    return f"tgthreads:{os.urandom(6).hex()}"


class _Sent:
    """The commands clients sent the server, as it logs them (``MONITOR``): the commands
    scripts run inside are left out, and so are this object's own markers."""

    def __init__(self, srv: Server) -> None:
        self._marker = srv.client()
        self._watch = srv.client()
        self._monitor = self._watch.monitor().__enter__()
        self._n = 0
        self.since()

    def since(self) -> list[str]:
        """The commands (their names) sent since the last call."""
        self._n += 1
        token = f"tg-marker-{self._n}"
        self._marker.echo(token)
        names: list[str] = []
        while True:
            event = self._monitor.next_command()
            command = str(event["command"])
            if command == f"ECHO {token}":
                return names
            if event.get("client_type") != "lua" and not command.startswith("ECHO tg-marker"):
                names.append(command.split(" ", 1)[0].upper())

    def close(self) -> None:
        self._monitor.__exit__()
        self._watch.close()
        self._marker.close()


class CountingRedis(redis.Redis):
    """A client that counts the commands it sends."""

    sent = 0

    def execute_command(self, *args: Any, **options: Any) -> Any:
        self.sent += 1
        execute: Callable[..., Any] = super().execute_command
        return execute(*args, **options)


# -- round trips --------------------------------------------------------------------------
@pytest.mark.parametrize("client", ["own", "passed"])
def test_round_trips_per_path_counted_by_the_server(srv: Server, prefix: str,
                                                    client: str) -> None:
    # cached and blocked: begin only (1); executed: begin and finish (2); what the store
    # counts is what the server ran, and what a client passed in sent
    counting: CountingRedis | None = None
    if client == "own":  # the store's own client: this thread's own connection
        store = RedisStore(url=srv.url, key_prefix=prefix, timeout_s=5.0)
    else:
        made = CountingRedis.from_url(srv.url, socket_timeout=5.0)
        assert isinstance(made, CountingRedis)
        counting = made
        store = RedisStore(counting, key_prefix=prefix)
    ran: list[str] = []
    policy = tg.Policy(ladder=LadderPolicy(readonly=LadderThresholds(warn_at=2, block_at=3,
                                                                      halt_at=9)))
    task = tg.Guard(policy, tools=write_and_lookup(ran), store=store).task("rt")
    task.call("write", {"path": "warm-up"})  # loads the scripts on the fresh server
    sent = _Sent(srv)

    def trips(tool: str, args: dict[str, Any]) -> tuple[tg.Decision, int]:
        store_before = store.round_trips
        counted_before = counting.sent if counting is not None else 0
        decision = task.call(tool, args).decision
        by_server = sent.since()
        assert set(by_server) == {"EVALSHA"}, by_server  # one script a round trip
        assert store.round_trips - store_before == len(by_server)
        if counting is not None:
            assert counting.sent - counted_before == len(by_server)
        return decision, len(by_server)

    assert trips("write", {"path": "a"}) == (tg.Decision.ALLOW, 2)  # executed
    assert trips("write", {"path": "a"}) == (tg.Decision.CACHED, 1)
    assert trips("lookup", {"q": "a"}) == (tg.Decision.ALLOW, 2)  # executed
    assert trips("lookup", {"q": "a"}) == (tg.Decision.WARN, 2)  # executed, with a warning
    assert trips("lookup", {"q": "a"}) == (tg.Decision.BLOCK, 1)
    assert ran == ["warm-up", "a"]
    sent.close()
    store.close()
    if counting is not None:
        counting.close()


# -- threads wait on Redis together -------------------------------------------------------
class _SerializedStore(RedisStore):
    """The control: a store that holds one lock across every round trip."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._turns = threading.Lock()

    def _eval(self, *args: Any, **kwargs: Any) -> Any:
        with self._turns:
            return super()._eval(*args, **kwargs)


def _wall_s(store: RedisStore, threads: int, calls: int, path: str) -> float:
    """Seconds for ``threads`` threads (each on a task of its own, connections warmed up)
    to make ``calls`` calls each on ``path`` (``executed``: new arguments every call;
    ``cached``: the same mutating call again)."""
    far = LadderThresholds(warn_at=1000, block_at=1001, halt_at=1002)  # out of reach
    guard = tg.Guard(tg.Policy(ladder=LadderPolicy(mutating=far)), tools=write_and_lookup([]),
                     store=store)
    run = os.urandom(4).hex()
    tasks = [guard.task(f"{run}-{k}") for k in range(threads)]
    ready = threading.Barrier(threads + 1)
    done = threading.Barrier(threads + 1)
    errors: list[BaseException] = []

    def work(k: int) -> None:
        try:
            tasks[k].call("write", {"path": "warm"})  # this thread's connection, scripts
            ready.wait()
            for n in range(calls):
                result = tasks[k].call("write", {"path": "warm" if path == "cached"
                                                 else f"p{n}"})
                want = tg.Decision.CACHED if path == "cached" else tg.Decision.ALLOW
                assert result.decision is want, result
        except BaseException as exc:  # reported by the test below
            errors.append(exc)
            ready.abort()
        finally:
            done.wait()

    workers = [threading.Thread(target=work, args=(k,), daemon=True) for k in range(threads)]
    for w in workers:
        w.start()
    ready.wait()
    start = time.perf_counter()
    done.wait()
    wall = time.perf_counter() - start
    for w in workers:
        w.join()
    assert not errors, errors
    return wall


@pytest.mark.parametrize(("client", "path"), [("own", "executed"), ("own", "cached"),
                                              ("passed", "executed")])
def test_four_threads_wait_on_redis_together(srv: Server, prefix: str, client: str,
                                             path: str) -> None:
    with DelayProxy(DELAY_S, srv.url) as proxy:
        if client == "own":
            store = RedisStore(url=proxy.url, key_prefix=prefix, timeout_s=5.0)
        else:  # one shared redis-py pool: its lock is not held across a round trip either
            store = RedisStore(redis.Redis.from_url(proxy.url, socket_timeout=5.0),
                               key_prefix=prefix)
        one = _wall_s(store, 1, 4, path)
        four = _wall_s(store, 4, 4, path)
        store.close()
    trips = 2 if path == "executed" else 1
    assert one >= 4 * trips * 2 * DELAY_S  # the delay is real
    assert four < 2 * one, (one, four)  # taking turns would be ≥ 4x


def test_the_check_sees_a_lock_across_the_round_trip(srv: Server, prefix: str) -> None:
    # the control: on a store that takes turns at Redis, 4 threads' 32 round trips run one
    # after another, ≥ 4x the least one thread can take, which the check above allows 2x of
    with DelayProxy(DELAY_S, srv.url) as proxy:
        store = _SerializedStore(url=proxy.url, key_prefix=prefix, timeout_s=5.0)
        four = _wall_s(store, 4, 4, "executed")
        store.close()
    least_one = 4 * 2 * 2 * DELAY_S  # 4 calls of 2 round trips, each ≥ 2 delays
    assert four >= 4 * least_one, four


# -- per-thread connections ---------------------------------------------------------------
def _connections(srv: Server, name: str) -> int:
    client = srv.client()
    try:
        return sum(1 for c in client.client_list() if c.get("name") == name)
    finally:
        client.close()


def _in_threads(n: int, target: Callable[[int], None]) -> None:
    errors: list[BaseException] = []

    def run(k: int) -> None:
        try:
            target(k)
        except BaseException as exc:  # reported below
            errors.append(exc)

    workers = [threading.Thread(target=run, args=(k,)) for k in range(n)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not errors, errors


def test_each_thread_has_a_connection_and_returns_it_when_it_ends(srv: Server,
                                                                  prefix: str) -> None:
    name = f"tg-{os.urandom(4).hex()}"  # this store's connections only
    store = RedisStore(url=f"{srv.url}?client_name={name}", key_prefix=prefix, timeout_s=5.0)
    assert _connections(srv, name) == 0
    inside = threading.Barrier(4)

    def use(k: int) -> None:
        store.add_usage(f"t{k}", 1, 0, 0.0)
        inside.wait()  # all four hold their connection at once
        store.add_usage("all", 1, 0, 0.0)

    _in_threads(4, use)
    assert _connections(srv, name) == 4
    gc.collect()
    _in_threads(4, use)  # the ended threads' connections came back to the pool
    assert _connections(srv, name) == 4
    assert store.usage("t0").input_tokens == 2
    assert store.usage("all").input_tokens == 8
    store.close()


def test_threads_beyond_those_with_a_connection_share_the_pool(srv: Server,
                                                               prefix: str) -> None:
    store = RedisStore(url=srv.url, key_prefix=prefix, timeout_s=5.0)
    store.add_usage("warm", 1, 0, 0.0)  # the scripts are loaded
    store.usage("warm")
    before = store.round_trips
    together = threading.Barrier(40)

    def use(k: int) -> None:
        store.add_usage("shared", 1, 0, 0.0)
        together.wait()
        store.add_usage("shared", 1, 0, 0.0)

    _in_threads(40, use)
    assert store.usage("shared").input_tokens == 80
    assert store.round_trips - before == 81  # every thread's count, none lost
    store.close()


def _child(store: RedisStore, out: Any) -> None:
    try:
        out.put(store.add_usage("forked", 1, 0, 0.0))
    except BaseException as exc:  # sent to the parent
        out.put(repr(exc))


def test_a_forked_child_gets_connections_of_its_own(srv: Server, prefix: str) -> None:
    # the child must not talk on the parent's socket (replies would cross)
    store = RedisStore(url=srv.url, key_prefix=prefix, timeout_s=5.0)
    assert store.add_usage("forked", 1, 0, 0.0) == 1  # this thread holds a connection now
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    children = [ctx.Process(target=_child, args=(store, out)) for _ in range(3)]
    for child in children:
        child.start()
    got = sorted(out.get(timeout=30) for _ in children)
    for child in children:
        child.join(timeout=10)
    assert got == [2, 3, 4]
    assert store.add_usage("forked", 1, 0, 0.0) == 5  # the parent's connection is intact
    store.close()


def test_the_thread_benchmark_runs(tmp_path: Path) -> None:
    # benchmarks/_redis_bench.py's smoke run takes every code path (no timing asserted)
    root = Path(__file__).resolve().parents[2]
    out = tmp_path / "threads"
    done = subprocess.run(
        [sys.executable, str(root / "benchmarks" / "_redis_bench.py"), "--smoke",
         "--out", str(out)], cwd=root / "benchmarks", capture_output=True, text=True,
        timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    report = json.loads(out.with_suffix(".json").read_text(encoding="utf-8"))
    rows = report["threads"]["rows"]
    assert {(r["delay_ms"], r["client"], r["threads"]) for r in rows} == {
        (d, c, n) for d in (0.0, 1.0) for c in ("bare", "own", "passed") for n in (1, 2, 4)}
    assert all(r["calls_per_s"] > 0 for r in rows)
    trips = {t["path"]: t["commands_per_call"] for t in report["round_trips"]}
    assert trips == {"allow": 2, "warn": 2, "cached": 1, "block": 1, "executed": 2}
