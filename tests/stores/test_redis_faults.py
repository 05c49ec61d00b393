"""What the Redis store guarantees under faults, on private ``redis-server`` processes that
the tests stall (SIGSTOP), kill and restart (``redis_servers``): a claim whose ``begin``
reply was lost is its own retry's, a stall never freezes the event loop, a restart without
persistence is a store fault rather than a silent reset, an outcome Redis did not take is
written before the next call, and key prefixes and task ids never share keys.

The reproductions in ``../shared/repro/reliability/`` run here as regression tests.
"""
# ruff: noqa: F811  (the redis_prefix fixture is imported, then taken as a parameter)

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import toolguard as tg
from tests.loop_support import heartbeat
from tests.redis_servers import Server, private_server
from tests.redis_support import REDIS_URL, missing_extra, redis_prefix, redis_store  # noqa: F401
from toolguard.policy._model import (
    BudgetPolicy,
    IdempotencyPolicy,
    LadderPolicy,
    LadderThresholds,
    ToolPolicy,
)
from toolguard.stores import BeginRequest
from toolguard.testing import capture_audit

try:
    import redis
    from redis.crc import key_slot

    from toolguard.stores.redis import RedisStore
except ImportError as exc:
    missing_extra(exc)

pytestmark = pytest.mark.redis


def _payer(runs: list[str]) -> Callable[..., str]:
    @tg.mutating
    def pay(order: str) -> str:
        runs.append(order)
        return f"paid {order}"

    return pay


def _records(srv: Server, state: bytes) -> list[bytes]:
    client = srv.client()
    try:
        return [k for k in client.scan_iter("*rec:*") if (client.get(k) or b"")[:1] == state]
    finally:
        client.close()


def _wait_until(check: Callable[[], Any], timeout_s: float = 5.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while not (found := check()):
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.02)
    return found


# -- item 1: a claim whose begin reply was lost ------------------------------------------
def test_lost_begin_reply_leaves_a_claim_its_retry_takes_over() -> None:
    with private_server() as srv:
        runs: list[str] = []
        store = RedisStore(url=srv.url, key_prefix="ghost", timeout_s=0.3)
        policy = tg.Policy(idempotency=IdempotencyPolicy(wait_timeout_s=2))
        task = tg.Guard(policy, [_payer(runs)], store=store).task("t1")
        task.call("pay", {"order": "warm-up"})  # scripts loaded, as in a running worker
        srv.stall()
        with pytest.raises(tg.StoreError):
            task.call("pay", {"order": "o-1"})
        srv.resume()  # Redis runs the begin whose reply was lost: a claim nobody runs
        _wait_until(lambda: _records(srv, b"p"))
        start = time.monotonic()
        assert task.call("pay", {"order": "o-1"}).decision == "allow"  # not CallInProgress
        assert time.monotonic() - start < 1.0  # no wait for the claim
        assert task.call("pay", {"order": "o-1"}).decision == "cached"
        assert runs.count("o-1") == 1
        assert task.usage.tool_calls == 3  # warm-up, o-1 (lost attempt and retry: once), cached
        assert not _records(srv, b"p")
        store.close()


def test_two_lost_begin_replies_then_the_retry_claims(redis_prefix: str) -> None:
    # Redis runs each begin but its reply is lost (a dropped connection after the script):
    # the second begin takes the first one's claim over; the third must still find it its own.
    # A client passed in carries every command of the store, so patching it intercepts them.
    client = redis.Redis.from_url(REDIS_URL, socket_timeout=5.0)
    redis_store = RedisStore(client, key_prefix=redis_prefix)
    real = client.evalsha

    def reply_lost(*args: Any, **kwargs: Any) -> Any:
        real(*args, **kwargs)
        raise redis.TimeoutError("reply lost")

    def begin(call_id: str) -> Any:
        return redis_store.begin("t1", BeginRequest(
            tool="pay", signature="s1", idempotency_key="t1:pay:s1", claim=True,
            task_scope=False, count=True, poll=False, now=1000.0, claim_ttl_s=600.0,
            call_id=call_id))

    redis_store.usage("t1")  # scripts loaded
    client.evalsha = reply_lost  # type: ignore[method-assign]
    for call_id in ("a", "b"):
        with pytest.raises(tg.StoreError, match="reply lost"):
            begin(call_id)
    client.evalsha = real  # type: ignore[method-assign]
    snap = begin("c")
    assert snap.claimed and snap.record is None
    assert snap.calls == 1  # the lost attempts and the retry are one call
    client.close()


def test_a_lost_claim_is_given_up_for_another_worker() -> None:
    # The worker whose begin reply was lost may never call again: as soon as Redis answers,
    # it gives the claim up, and another worker's identical call takes it over (not
    # CallInProgress until in_progress_ttl_s, then a run).
    with private_server() as srv:
        runs: list[str] = []
        mine = RedisStore(url=srv.url, key_prefix="ghost", timeout_s=0.3)
        other = RedisStore(url=srv.url, key_prefix="ghost", timeout_s=0.3)
        policy = tg.Policy(idempotency=IdempotencyPolicy(wait_timeout_s=5))
        task = tg.Guard(policy, [_payer(runs)], store=mine).task("t1")
        task.call("pay", {"order": "warm-up"})
        srv.stall()
        with pytest.raises(tg.StoreError):
            task.call("pay", {"order": "o-1"})
        srv.resume()
        elsewhere = tg.Guard(policy, [_payer(runs)], store=other).task("t1")
        assert elsewhere.call("pay", {"order": "o-1"}).decision == "allow"
        assert task.call("pay", {"order": "o-1"}).decision == "cached"
        assert runs.count("o-1") == 1
        assert not _records(srv, b"p")
        mine.close()
        other.close()


def test_a_claim_lost_before_it_reached_redis_is_forgotten() -> None:
    # A begin that never reached Redis left no claim: the worker stops looking for it.
    with private_server() as srv:
        store = RedisStore(url=srv.url, key_prefix="ghost", timeout_s=0.2)
        task = tg.Guard(tg.Policy(), [_payer([])], store=store).task("t1")
        task.call("pay", {"order": "warm-up"})
        srv.kill()
        with pytest.raises(tg.StoreError):
            task.call("pay", {"order": "o-1"})
        srv.start()
        _wait_until(lambda: not store._orphans, timeout_s=10.0)
        store.close()


# -- item 9: a Redis stall under acall ----------------------------------------------------
def test_redis_stall_does_not_freeze_the_event_loop() -> None:
    with private_server() as srv:
        @tg.mutating
        async def write(i: int) -> str:
            return "ok"

        store = RedisStore(url=srv.url, key_prefix="loop", timeout_s=0.5)
        task = tg.Guard(tg.Policy(), [write], store=store).task("t")

        async def main() -> tuple[list[str], int, float]:
            await task.acall("write", {"i": -1})  # warm up (scripts loaded)

            async def one(i: int) -> str:
                try:
                    return str((await task.acall("write", {"i": i})).decision)
                except tg.StoreError:
                    return "StoreError"

            srv.stall()
            try:
                start = time.monotonic()
                async with heartbeat() as beats:
                    outcomes = await asyncio.gather(*(one(i) for i in range(12)))
                took = time.monotonic() - start
            finally:
                srv.resume()
            return outcomes, beats.count, took

        outcomes, beats, took = asyncio.run(main())
        store.close()
        assert outcomes == ["StoreError"] * 12  # fail closed, as before
        # 12 calls x 0.5 s of timeout: the loop, blocked, would have beaten ~0 times in 6 s
        assert beats >= 0.5 * took / 0.01, (beats, took)


def test_acall_on_redis_still_decides() -> None:
    with private_server() as srv:
        runs: list[str] = []
        store = RedisStore(url=srv.url, key_prefix="loop", timeout_s=2.0)
        # four identical attempts reach the default halt_at = 4 when the first has already
        # finished: raise the ladder, as the multi-process tests do
        policy = tg.Policy(ladder=LadderPolicy(
            mutating=LadderThresholds(warn_at=5, block_at=6, halt_at=7)))
        task = tg.Guard(policy, [_payer(runs)], store=store).task("t")

        async def main() -> list[str]:
            same = await asyncio.gather(*(task.acall("pay", {"order": "x"}) for _ in range(4)))
            return [str(r.decision) for r in same]

        decisions = asyncio.run(main())
        store.close()
        assert runs == ["x"]  # concurrent identical acalls share one execution
        assert sorted(decisions) == ["allow", "cached", "cached", "cached"]


def test_cancelled_acall_gives_its_claim_back_off_the_loop() -> None:
    with private_server() as srv:
        release = asyncio.Event()

        @tg.mutating
        async def slow(order: str) -> str:
            await release.wait()
            return "done"

        @tg.requires_approval
        def refund(order: str) -> str:
            return "refunded"

        async def never(_: Any) -> Any:
            await asyncio.sleep(3600)

        store = RedisStore(url=srv.url, key_prefix="loop", timeout_s=2.0)
        task = tg.Guard(tg.Policy(), [slow, refund], store=store, approver=never).task("t")

        async def main() -> None:
            call = asyncio.create_task(task.acall("refund", {"order": "r"}))
            await asyncio.sleep(0.3)  # asking the approver: the claim is held
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call

        asyncio.run(main())
        assert not _records(srv, b"p")  # given back at once, not left for in_progress_ttl_s
        store.close()


def test_acall_cancelled_during_a_slow_begin_gives_the_claim_back() -> None:
    # The cancellation arrives while begin runs off the loop; begin then claims the call.
    # The tool never started: the claim is given back, not recorded as an unknown outcome.
    with private_server() as srv:
        runs: list[str] = []
        store = RedisStore(url=srv.url, key_prefix="loop", timeout_s=5.0)
        task = tg.Guard(tg.Policy(), [_payer(runs)], store=store).task("t")

        async def main() -> None:
            await task.acall("pay", {"order": "warm-up"})
            srv.stall()
            call = asyncio.create_task(task.acall("pay", {"order": "o-1"}))
            await asyncio.sleep(0.2)
            call.cancel()
            await asyncio.sleep(0.2)
            srv.resume()
            with pytest.raises(asyncio.CancelledError):
                await call

        asyncio.run(main())
        assert runs == ["warm-up"]
        assert not _records(srv, b"p") and not _records(srv, b"u")
        retry = task.call("pay", {"order": "o-1"})  # the cancelled attempt counted once
        assert retry.decision.executed and runs == ["warm-up", "o-1"]  # not review
        store.close()


# -- item 13: lost state, and an outcome Redis did not take --------------------------------
def _halted_task(srv: Server, runs: list[str], **store_kwargs: Any) -> tg.Task:
    store = RedisStore(url=srv.url, key_prefix="rst", timeout_s=1.0, **store_kwargs)
    guard = tg.Guard(tg.Policy(budget=BudgetPolicy(max_tool_calls=3),
                               tools={"pay": ToolPolicy(idempotency_scope="task")}),
                     [_payer(runs)], store=store)
    task = guard.task("t1")
    for order in "abc":
        task.call("pay", {"order": order})
    with pytest.raises(tg.BudgetExceeded):
        task.call("pay", {"order": "d"})
    return task


def test_restart_without_persistence_is_a_store_fault() -> None:
    with private_server() as srv:
        runs: list[str] = []
        task = _halted_task(srv, runs)
        other = RedisStore(url=srv.url, key_prefix="rst", timeout_s=1.0)
        assert other.usage("t1").halted is not None  # a second worker knows the task too
        srv.kill()
        srv.start()  # same port, no persistence: every key is gone
        with pytest.raises(tg.StoreError, match="state of task 't1' is gone"):
            task.call("pay", {"order": "a"})  # fail_closed: not run again
        with pytest.raises(tg.StoreError, match="appendonly"):
            _ = task.halted
        with pytest.raises(tg.StoreError, match="gone"):
            other.usage("t1")
        assert runs == ["a", "b", "c"]
        # a worker that never saw the task cannot tell; one that did still refuses after it
        fresh = RedisStore(url=srv.url, key_prefix="rst", timeout_s=1.0)
        assert fresh.usage("t1").tool_calls == 0
        fresh.add_usage("t1", 1, 1, 0.0)
        with pytest.raises(tg.StoreError, match="gone"):
            task.call("pay", {"order": "a"})
        # starting the task over is explicit
        task.guard.store.clear_task("t1")
        assert task.call("pay", {"order": "e"}).decision == "allow"
        for store in (other, fresh):
            store.close()


def test_restart_with_persistence_keeps_the_task() -> None:
    # With AOF (appendfsync always) a restart loses nothing: the halted task stays halted
    # with its counts, and no worker sees a loss.
    with private_server("--appendonly", "yes", "--appendfsync", "always") as srv:
        runs: list[str] = []
        task = _halted_task(srv, runs)
        counted = task.usage.tool_calls
        srv.kill()
        srv.start()
        with pytest.raises(tg.BudgetExceeded):
            task.call("pay", {"order": "a"})
        assert task.usage.tool_calls == counted
        assert runs == ["a", "b", "c"]


def test_restart_without_persistence_fails_open_when_asked() -> None:
    # fail_open runs the call that found the state gone unguarded (with a warning), then
    # guards the task again on fresh state: each payment, retried at once, is paid once.
    with private_server() as srv:
        runs: list[str] = []
        task = _halted_task(srv, runs, on_error="fail_open")
        srv.kill()
        srv.start()
        with capture_audit(task.guard) as events:
            result = task.call("pay", {"order": "z"})
        assert result.decision == "allow" and runs[-1] == "z"  # unguarded, as configured
        assert any("running unguarded" in e.reason for e in events)
        decisions = [str(task.call("pay", {"order": order}).decision)
                     for order in ("z", "y", "y")]
        assert decisions == ["cached", "allow", "cached"]
        with pytest.raises(tg.BudgetExceeded):  # the budget counts again, from zero
            task.call("pay", {"order": "x"})
        assert runs == ["a", "b", "c", "z", "y"]


def test_every_worker_continues_guarded_after_a_restart_under_fail_open() -> None:
    # Four workers that all knew the task, each paying orders and retrying each at once,
    # after a restart without persistence: at most the one call per worker that finds the
    # state gone runs unguarded; no order is paid twice by a retry after that.
    with private_server() as srv:
        runs: list[str] = []
        lock = threading.Lock()

        @tg.mutating(idempotency_scope="task")
        def pay(order: str) -> str:
            with lock:
                runs.append(order)
            return f"paid {order}"

        stores = [RedisStore(url=srv.url, key_prefix="rst", on_error="fail_open")
                  for _ in range(4)]
        tasks = [tg.Guard(tg.Policy(), [pay], store=s).task("t1") for s in stores]
        for n, task in enumerate(tasks):
            task.call("pay", {"order": f"known-{n}"})
        srv.kill()
        srv.start()

        def worker(n: int) -> None:
            for i in range(25):
                for _ in range(2):
                    tasks[n].call("pay", {"order": f"w{n}-{i}"})

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        paid_twice = [o for o in set(runs) if runs.count(o) > 1]
        assert len(paid_twice) <= len(tasks), paid_twice  # each worker's first call, at most
        assert len(set(runs)) == 104
        for store in stores:
            store.close()


def test_a_lost_outcome_reaches_another_worker() -> None:
    # The tool ran, then Redis died before finish; this worker never calls again (it
    # crashed or was scaled down, but its process lives on): once Redis is back (AOF kept
    # the claim), it writes the outcome, and another worker's retry is answered from it.
    aof = ("--appendonly", "yes", "--appendfsync", "always")
    with private_server(*aof) as srv:
        runs: list[str] = []

        @tg.mutating(idempotency_scope="task")
        def pay(order: str) -> str:
            runs.append(order)
            if len(runs) == 1:
                srv.kill()  # Redis dies while the payment is being made
            return f"paid {order}"

        policy = tg.Policy(idempotency=IdempotencyPolicy(in_progress_ttl_s=600,
                                                         wait_timeout_s=10))
        mine = RedisStore(url=srv.url, key_prefix="fin", timeout_s=0.3)
        other = RedisStore(url=srv.url, key_prefix="fin", timeout_s=0.3)
        assert tg.Guard(policy, [pay], store=mine).task("t1").call(
            "pay", {"order": "o-1"}).value == "paid o-1"
        srv.start()
        retry = tg.Guard(policy, [pay], store=other).task("t1").call("pay", {"order": "o-1"})
        assert (retry.decision, retry.value, runs) == ("cached", "paid o-1", ["o-1"])
        mine.close()
        other.close()


def test_state_that_expired_by_its_ttl_is_not_lost() -> None:
    with private_server() as srv:
        store = RedisStore(url=srv.url, key_prefix="ttl", state_ttl_s=0.3)
        store.add_usage("t", 5, 5, 0.0)
        time.sleep(0.5)  # expired on its TTL, as designed
        assert store.usage("t").input_tokens == 0
        assert store.add_usage("t", 1, 1, 0.0) == 2
        store.close()


def test_an_outcome_redis_did_not_take_is_written_before_the_next_call(tmp_path: Any) -> None:
    # The tool ran, then Redis went away before finish: once Redis is back (AOF kept the
    # claim) and the claim has expired, the retry must get the stored result, not run again.
    aof = ("--appendonly", "yes", "--appendfsync", "always")
    with private_server(*aof) as srv:
        runs: list[str] = []

        @tg.mutating
        def pay(order: str) -> str:
            runs.append(order)
            srv.kill()  # Redis dies while the payment is being made
            return f"paid {order}"

        store = RedisStore(url=srv.url, key_prefix="fin", timeout_s=0.3)
        policy = tg.Policy(idempotency=IdempotencyPolicy(in_progress_ttl_s=0.5,
                                                         wait_timeout_s=0.2),
                           tools={"pay": ToolPolicy(idempotency_scope="task")})
        task = tg.Guard(policy, [pay], store=store).task("t1")
        with capture_audit(task.guard) as events:
            first = task.call("pay", {"order": "o-1"})
        assert first.decision == "allow" and first.value == "paid o-1"  # returned anyway
        assert any("kept by this worker" in e.reason for e in events)
        srv.start()  # AOF reloaded: the claim is back, and expires
        time.sleep(0.7)
        retry = task.call("pay", {"order": "o-1"})
        assert retry.decision == "cached" and retry.value == "paid o-1"
        assert runs == ["o-1"]
        store.close()


def test_an_unwritten_outcome_keeps_the_task_refused_while_redis_is_down() -> None:
    with private_server() as srv:
        runs: list[str] = []
        store = RedisStore(url=srv.url, key_prefix="fin", timeout_s=0.3)

        @tg.mutating
        def pay(order: str) -> str:
            runs.append(order)
            srv.kill()
            return f"paid {order}"

        task = tg.Guard(tg.Policy(), [pay], store=store).task("t1")
        task.call("pay", {"order": "o-1"})
        with pytest.raises(tg.StoreError):  # the pending write fails first: nothing runs
            task.call("pay", {"order": "o-1"})
        assert runs == ["o-1"]
        store.close()


# -- item 14: namespaces -------------------------------------------------------------------
def test_prefix_and_task_id_with_braces_do_not_collide(redis_prefix: str) -> None:
    runs: list[str] = []
    a = tg.Guard(tg.Policy(), [_payer(runs)],
                 store=RedisStore(url=REDIS_URL, key_prefix=f"{redis_prefix}:app"))
    b = tg.Guard(tg.Policy(), [_payer(runs)],
                 store=RedisStore(url=REDIS_URL, key_prefix=f"{redis_prefix}:app:{{acme}}"))
    ta, tb = a.task("acme}:{inv-7"), b.task("inv-7")
    assert ta.call("pay", {"order": "o-9"}).decision == "allow"
    assert tb.call("pay", {"order": "o-9"}).decision == "allow"  # not tenant A's record
    assert runs == ["o-9", "o-9"]
    a.store.set_halted("acme}:{inv-7", {"kind": "BudgetExceeded", "reason": "A over budget"})
    assert tb.call("pay", {"order": "o-10"}).decision == "allow"  # A's halt is A's
    assert (ta.usage.tool_calls, tb.usage.tool_calls) == (1, 2)


_TEXT = st.text(alphabet=st.sampled_from("ab:{}%\\ \x00é"), max_size=6)


@settings(max_examples=300, deadline=None)
@given(_TEXT, _TEXT, _TEXT, _TEXT)
def test_keys_are_unique_and_one_slot_per_task(p1: str, t1: str, p2: str, t2: str) -> None:
    one = RedisStore(url=REDIS_URL, key_prefix=p1)._keys(t1, "k")
    two = RedisStore(url=REDIS_URL, key_prefix=p2)._keys(t2, "k")
    if (p1, t1) != (p2, t2):
        assert not set(one) & set(two)
    assert len({key_slot(k.encode()) for k in one}) == 1  # a cluster keeps a task together


def test_a_private_server_that_loses_its_port_says_why_and_another_port_is_taken() -> None:
    """The test servers' own harness: a port another run took between the check and the
    bind is retried on another port (a cluster node too), and the error names the cause."""
    from tests.redis_servers import _on_a_free_port

    with private_server() as first:
        loser = Server(first.port)
        with pytest.raises(RuntimeError, match=r"exited .*(in use|Address)"):
            loser.start()
        loser.stop()
        second = _on_a_free_port(())
        try:
            assert second.port != first.port and second.client().ping()
        finally:
            second.stop()
