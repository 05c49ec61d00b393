"""The Redis store on a real Redis Cluster under faults, each test on its own
private cluster (``redis_servers.Cluster``, stopped afterwards whatever happens):

- a master killed with a replica present: calls fail closed with a clear StoreError while
  the slot has no master, and after the replica is promoted the same task goes on with its
  counts, halts and idempotency records intact (redis-py follows the new topology);
- a slot migration mid-task (``redis-cli --cluster reshard``) loses nothing.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

import toolguard as tg
from tests.redis_servers import Cluster
from tests.redis_support import missing_extra
from toolguard.policy._model import BudgetPolicy, ToolPolicy

try:
    from redis.crc import key_slot

    from toolguard.stores.redis import RedisStore
except ImportError as exc:
    missing_extra(exc)

pytestmark = pytest.mark.redis


def _guard(store: RedisStore, runs: list[str], **budget: Any) -> tg.Guard:
    @tg.mutating
    def pay(order: str) -> str:
        runs.append(order)
        return f"paid {order}"

    return tg.Guard(tg.Policy(budget=BudgetPolicy(**budget),
                              tools={"pay": ToolPolicy(idempotency_scope="task")}),
                    [pay], store=store)


def _retry(op: Callable[[], Any], timeout_s: float = 30.0) -> tuple[Any, list[Exception]]:
    """``op()``'s value once it stops raising StoreError, and the errors raised until then."""
    errors: list[Exception] = []
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return op(), errors
        except tg.StoreError as exc:
            errors.append(exc)
        if time.monotonic() > deadline:
            pytest.fail(f"still failing after {timeout_s} s: {errors[-1]}")
        time.sleep(0.2)


def test_master_failover_fails_closed_then_the_task_continues() -> None:
    with Cluster(3, replicas=1, node_timeout_ms=1000) as cluster:
        store = RedisStore(url=cluster.url, cluster=True, key_prefix="fo", timeout_s=0.5)
        runs: list[str] = []
        guard = _guard(store, runs)
        task = guard.task("t1")
        master = cluster.master_of(store._keys("t1")[0])
        # a second task on the same master, halted by its budget
        halted_id = next(t for t in (f"h{i}" for i in range(10_000))
                         if cluster.master_of(store._keys(t)[0]) is master)
        halted = _guard(store, runs, max_tool_calls=1).task(halted_id)
        assert task.call("pay", {"order": "a"}).decision == "allow"
        assert task.call("pay", {"order": "b"}).decision == "allow"
        halted.call("pay", {"order": "x"})
        with pytest.raises(tg.BudgetExceeded):
            halted.call("pay", {"order": "y"})
        client = master.client()
        assert client.execute_command("WAIT", 1, 5000) == 1  # the replica has every write
        client.close()

        master.kill()
        with pytest.raises(tg.StoreError, match=r"Redis store at cluster .* failed"):
            task.call("pay", {"order": "c"})  # fail closed: the slot has no master
        usage, errors = _retry(lambda: task.usage)  # until the replica is promoted
        assert all("Redis store at cluster" in str(e) for e in errors)
        # the promoted replica serves the task already; the other nodes may learn of it a
        # gossip round later, and master_of asks whichever node runs first
        deadline = time.monotonic() + 10
        while cluster.master_of(store._keys("t1")[0]) is master:
            assert time.monotonic() < deadline, "no node reports a new master"
            time.sleep(0.1)
        assert usage.tool_calls == 2  # counts intact
        again = task.call("pay", {"order": "a"})
        assert (again.decision, again.value) == ("cached", "paid a")  # records intact
        assert task.call("pay", {"order": "c"}).decision == "allow"
        assert halted.halted  # halts intact
        with pytest.raises(tg.BudgetExceeded):
            halted.call("pay", {"order": "z"})
        assert runs == ["a", "b", "x", "c"]
        store.close()


def test_slot_migration_mid_task_loses_nothing() -> None:
    with Cluster(3, node_timeout_ms=2000) as cluster:
        store = RedisStore(url=cluster.url, cluster=True, key_prefix="mv", timeout_s=2.0)
        moved = 200  # reshard moves the lowest slots of the source first
        task_id = next(t for t in (f"task-{i}" for i in range(100_000))
                       if key_slot(store._keys(t)[0].encode()) < moved)
        source = cluster.master_of(store._keys(task_id)[0])
        target = next(n for n in cluster.nodes if n is not source)
        runs: list[str] = []
        task = _guard(store, runs).task(task_id)
        done = threading.Event()
        results: list[tuple[str, str, Any]] = []
        errors: list[Exception] = []

        def agent() -> None:
            n = 0
            while not done.is_set() or n < 20:
                order = f"o-{n}"
                for _ in range(2):  # each order twice: executed once, then cached
                    try:
                        r = task.call("pay", {"order": order})
                        results.append((order, str(r.decision), r.value))
                    except tg.StoreError as exc:
                        errors.append(exc)
                n += 1

        worker = threading.Thread(target=agent)
        worker.start()
        try:
            time.sleep(0.2)
            subprocess.run(
                ["redis-cli", "--cluster", "reshard", f"127.0.0.1:{source.port}",
                 "--cluster-from", cluster.node_id(source),
                 "--cluster-to", cluster.node_id(target),
                 "--cluster-slots", str(moved), "--cluster-yes"],
                check=True, capture_output=True, timeout=120)
            time.sleep(0.2)
        finally:
            done.set()
            worker.join(timeout=60)
        assert cluster.master_of(store._keys(task_id)[0]) is target  # the task really moved
        assert len(runs) == len(set(runs))  # nothing ran twice
        assert len(results) >= 40
        executed = {o for o, d, _ in results if d == "allow"}
        assert executed == set(runs)
        for order, decision, value in results:
            assert decision in ("allow", "cached") and value == f"paid {order}"
        # every counted attempt is on the new master: a call either got its answer or failed
        # closed before it was counted
        assert task.usage.tool_calls == len(results), errors
        assert not errors, errors
        store.close()
