"""N identical concurrent mutating calls execute exactly once (threads and asyncio); parallel
distinct calls keep exact counts; reload under concurrent calls."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

import toolguard as tg
from tests.loop_support import heartbeat
from toolguard.policy._model import BudgetPolicy, IdempotencyPolicy, LadderPolicy, LadderThresholds
from toolguard.testing import auto_defer

D = tg.Decision
N = 16


def test_threads_identical_mutating_call_executes_once() -> None:
    runs = 0
    lock = threading.Lock()
    barrier = threading.Barrier(N)

    @tg.mutating
    def charge(order: str) -> str:
        nonlocal runs
        with lock:
            runs += 1
        time.sleep(0.05)  # still running while the others arrive
        return "charged"

    lenient = LadderThresholds(warn_at=N + 1, block_at=N + 2, halt_at=N + 3)
    guard = tg.Guard(tg.Policy(ladder=LadderPolicy(mutating=lenient)), [charge])
    task = guard.task("t")

    def worker() -> tg.ToolResult:
        barrier.wait()
        return task.call("charge", {"order": "o1"})

    with ThreadPoolExecutor(N) as pool:
        results = list(pool.map(lambda _: worker(), range(N)))
    assert runs == 1
    assert sorted(r.decision for r in results) == sorted([D.ALLOW] + [D.CACHED] * (N - 1))
    assert all(r.value == "charged" for r in results)


def test_threads_default_ladder_concurrent_duplicates_share_one_execution() -> None:
    runs = 0
    barrier = threading.Barrier(8)

    @tg.mutating
    def charge(order: str) -> str:
        nonlocal runs
        runs += 1
        time.sleep(0.05)
        return "charged"

    task = tg.Guard(tools=[charge]).task("t")

    def worker() -> tg.Decision:
        barrier.wait()
        try:
            return task.call("charge", {"order": "o1"}).decision
        except tg.Halt:
            return D.HALT

    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda _: worker(), range(8)))
    # concurrent duplicates are one call: the flood is not mistaken for a sequential loop
    assert runs == 1 and sorted(got) == sorted([D.ALLOW] + [D.CACHED] * 7)
    # ... but repeating it afterwards is a loop: the ladder goes on counting
    later = [task.call("charge", {"order": "o1"}).decision for _ in range(2)]
    assert later == [D.CACHED, D.CACHED]
    with pytest.raises(tg.RepeatedToolCalls):
        task.call("charge", {"order": "o1"})


async def test_asyncio_identical_mutating_call_executes_once() -> None:
    runs = 0
    lenient = LadderThresholds(warn_at=N + 1, block_at=N + 2, halt_at=N + 3)

    @tg.mutating
    async def send_email(to: str, body: str) -> str:
        nonlocal runs
        runs += 1
        await asyncio.sleep(0.02)
        return "sent"

    guard = tg.Guard(tg.Policy(ladder=LadderPolicy(mutating=lenient)), [send_email])
    task = guard.task("t")
    results = await asyncio.gather(
        *(task.acall("send_email", {"to": "a@b.c", "body": "hi"}) for _ in range(N)))
    assert runs == 1
    assert sorted(r.decision for r in results) == sorted([D.ALLOW] + [D.CACHED] * (N - 1))
    assert all(r.value == "sent" for r in results)


async def test_acall_runs_a_sync_tool_off_the_event_loop() -> None:
    """A plain (sync) tool under acall runs in a worker thread: the loop keeps running while
    it works, and identical concurrent acalls share one execution under the default ladder
    (run inline, they would run one after another, count as repeats and halt the task)."""
    runs: list[str | None] = []
    started = threading.Event()

    @tg.mutating
    def write(path: str) -> str:
        runs.append(tg.current_idempotency_key())
        started.set()
        time.sleep(0.2)
        return "written"

    task = tg.Guard(tools=[write]).task("t")
    async with heartbeat() as beats:
        results = await asyncio.gather(*(task.acall("write", {"path": "a"}) for _ in range(6)))
    assert started.is_set() and len(runs) == 1
    assert runs[0] is not None and runs[0].startswith("t:write:")  # the context came along
    assert sorted(r.decision for r in results) == sorted([D.ALLOW] + [D.CACHED] * 5)
    assert beats.count >= 5  # the loop ran while the tool slept


def test_waiting_call_times_out_with_call_in_progress() -> None:
    release = threading.Event()
    started = threading.Event()

    @tg.mutating
    def slow(x: int) -> str:
        started.set()
        release.wait(5)
        return "done"

    policy = tg.Policy(idempotency=IdempotencyPolicy(wait_timeout_s=0.05))
    guard = tg.Guard(policy, [slow])
    task = guard.task("t")
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(task.call, "slow", {"x": 1})
        assert started.wait(5)
        with pytest.raises(tg.CallInProgress) as info:
            task.call("slow", {"x": 1})
        assert info.value.tool == "slow" and info.value.waited_s >= 0.05
        release.set()
        assert first.result().decision is D.ALLOW


def test_budget_is_exact_under_threads() -> None:
    @tg.readonly
    def lookup(i: int) -> int:
        return i

    guard = tg.Guard(tg.Policy(budget=BudgetPolicy(max_tool_calls=50)), [lookup])
    task = guard.task("t")

    def worker(i: int) -> bool:
        try:
            task.call("lookup", {"i": i})
        except tg.BudgetExceeded:
            return False
        return True

    with ThreadPoolExecutor(8) as pool:
        ran = list(pool.map(worker, range(200)))
    assert sum(ran) == 50
    assert task.usage.tool_calls >= 50


def test_reload_under_concurrent_calls_never_mixes_policies() -> None:
    @tg.readonly
    def probe(i: int) -> int:
        return i

    loose = tg.Policy()
    tight = tg.Policy(budget=BudgetPolicy(max_tool_calls=10**9),
                      ladder=LadderPolicy(readonly=LadderThresholds(warn_at=2, block_at=3,
                                                                     halt_at=4)))
    guard = tg.Guard(loose, [probe])
    stop = threading.Event()
    errors: list[BaseException] = []

    def caller(n: int) -> None:
        task = guard.task(f"t{n}")
        i = 0
        while not stop.is_set():
            try:
                r = task.call("probe", {"i": i})
                assert r.decision is D.ALLOW
            except BaseException as exc:
                errors.append(exc)
                return
            i += 1

    threads = [threading.Thread(target=caller, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for k in range(200):
        guard.reload_policy(tight if k % 2 else loose)
    stop.set()
    for t in threads:
        t.join()
    assert errors == []
    assert guard.policy in (loose, tight)


def test_concurrent_duplicates_of_a_failing_call_do_not_halt_the_task() -> None:
    """Regression: when the running call failed, its waiting duplicates were counted as
    repeats (2, 3, 4) and halted the task."""
    barrier = threading.Barrier(4)
    runs = 0
    lock = threading.Lock()

    @tg.mutating
    def pay(order: str) -> str:
        nonlocal runs
        with lock:
            runs += 1
        time.sleep(0.05)
        raise ConnectionError("payment gateway down")

    task = tg.Guard(tools=[pay]).task("t")

    def worker() -> tg.ToolResult:
        barrier.wait()
        return task.call("pay", {"order": "o1"})

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: worker(), range(4)))
    assert not task.halted
    assert all(r.is_error and r.executed for r in results)
    assert runs == 4  # each duplicate, finding the failure, tried once itself: no loop
    assert [r.count for r in results].count(1) >= 1


async def test_cancelled_call_leaves_its_waiting_duplicates_in_review() -> None:
    started = asyncio.Event()

    @tg.mutating
    async def transfer(amount: int) -> str:
        started.set()
        await asyncio.sleep(10)
        return "done"

    task = tg.Guard(tools=[transfer], approver=auto_defer).task("t")
    first = asyncio.ensure_future(task.acall("transfer", {"amount": 5}))
    await started.wait()
    waiters = [asyncio.ensure_future(task.acall("transfer", {"amount": 5})) for _ in range(3)]
    await asyncio.sleep(0.01)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    results = await asyncio.gather(*waiters)
    assert [r.decision for r in results] == [D.REVIEW] * 3  # the outcome is unknown
    assert not task.halted


async def test_a_call_cancelled_while_asking_the_approver_gives_its_claim_back() -> None:
    """The tool never ran: an identical call must not wait for in_progress_ttl_s."""
    asked = asyncio.Event()
    runs: list[str] = []

    async def slow_then_yes(request: tg.ApprovalRequest) -> tg.ApprovalDecision:
        if not asked.is_set():
            asked.set()
            await asyncio.sleep(10)  # the first time, the human takes long: cancelled
        return tg.approve()

    @tg.requires_approval
    def refund(order: str) -> str:
        runs.append(order)
        return "refunded"

    guard = tg.Guard(tools=[refund], approver=slow_then_yes)
    task = guard.task("t")
    first = asyncio.ensure_future(task.acall("refund", {"order": "o1"}))
    await asyncio.wait_for(asked.wait(), 5)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    key = f"t:refund:{tg.args_hash({'order': 'o1'})}"
    assert guard.store.get_record("t", key, time.time()) is None  # no claim left behind
    retry = await asyncio.wait_for(task.acall("refund", {"order": "o1"}), 5)
    assert (retry.executed, runs) == (True, ["o1"])


@pytest.mark.parametrize("forwards", [False, True])
async def test_a_cancelled_acall_records_what_its_sync_tool_really_did(forwards: bool) -> None:
    """A worker thread cannot be stopped: the cancellation returns at once (it does not
    wait for the tool), the tool's real result is recorded when it ends, and neither a
    concurrent duplicate nor a retry runs it again (the retry neither goes to review nor,
    with a forwarded key, runs beside the first)."""
    log: list[str] = []
    release = threading.Event()

    @tg.mutating(forwards_idempotency_key=forwards)
    def pay(amount: int) -> str:
        log.append("start")
        release.wait(10)
        log.append("done")
        return "paid"

    task = tg.Guard(tools=[pay]).task("t")
    first = asyncio.ensure_future(task.acall("pay", {"amount": 5}))
    await asyncio.sleep(0.1)  # the tool is running in its thread
    duplicate = asyncio.ensure_future(task.acall("pay", {"amount": 5}))
    started = time.monotonic()
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(first, 0.05)
    assert time.monotonic() - started < 1.0 and log == ["start"]  # did not wait for it
    release.set()
    retry = await asyncio.wait_for(task.acall("pay", {"amount": 5}), 5)
    shared = await asyncio.wait_for(duplicate, 5)
    assert (retry.decision, retry.value) == (D.CACHED, "paid")
    assert (shared.decision, shared.value) == (D.CACHED, "paid")
    assert log == ["start", "done"]  # ran once
    assert task.history[0].result.decision is D.ALLOW  # the real run is recorded


async def test_wait_for_a_hung_sync_tool_returns_at_its_timeout() -> None:
    """Regression: ``asyncio.wait_for(task.acall(<sync tool>), 0.5)`` waited the tool's
    full 10 s. The outcome is audited once the thread ends."""
    events: list[tg.AuditEvent] = []
    release = threading.Event()

    @tg.mutating
    def slow_upload(name: str) -> str:
        release.wait(10)
        return "uploaded"

    task = tg.Guard(tools=[slow_upload], audit=[events.append]).task("t")
    started = time.monotonic()
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(task.acall("slow_upload", {"name": "a"}), 0.2)
    assert time.monotonic() - started < 1.0
    assert [e.transition for e in events] == ["validating->executing"]
    release.set()
    for _ in range(200):
        if len(events) > 1:
            break
        await asyncio.sleep(0.01)
    assert [e.transition for e in events][-1] == "executing->planning"
    assert task.history[-1].result.value == "uploaded"


async def test_a_sync_call_on_the_loop_thread_does_not_wait_for_its_own_acall() -> None:
    """Waiting would block the loop the running acall needs to finish: a deadlock until the
    wait timeout. The sync call says so at once instead."""
    @tg.mutating
    def write(path: str) -> str:
        time.sleep(0.2)
        return "written"

    guard = tg.Guard(tools=[write])
    async with guard.task("t") as task:
        running = asyncio.ensure_future(task.acall("write", {"path": "a"}))
        await asyncio.sleep(0.05)  # the tool is running in its thread
        started = time.monotonic()
        with pytest.raises(tg.CallInProgress, match="cannot wait for it"):
            write(path="a")  # a direct call of the decorated tool: sync, on the loop thread
        assert time.monotonic() - started < 0.1
        assert (await running).value == "written"


def test_yielding_lock_excludes_threads_that_interleave_inside_it() -> None:
    from toolguard.stores._lock import YieldingLock, wait_for

    lock, total, rounds = YieldingLock(), [0], 300
    barrier = threading.Barrier(8)

    def worker(k: int) -> None:
        barrier.wait()
        for _ in range(rounds):
            if k % 2:  # the inlined form the store's hot path uses
                raw = lock.raw
                if not raw.acquire(False):
                    wait_for(raw)
                try:
                    seen = total[0]
                    time.sleep(0)  # hand the GIL over mid-section: a race would lose counts
                    total[0] = seen + 1
                finally:
                    raw.release()
            else:
                with lock:
                    seen = total[0]
                    time.sleep(0)
                    total[0] = seen + 1

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert total[0] == 8 * rounds
    assert not lock.locked()


def test_yielding_lock_is_released_when_the_section_raises() -> None:
    from toolguard.stores._lock import YieldingLock

    lock = YieldingLock()
    with pytest.raises(KeyError), lock:
        raise KeyError("x")
    assert not lock.locked()
    with lock:
        assert lock.locked()


async def test_concurrent_duplicates_stay_one_call_when_another_write_ends_between() -> None:
    """The waiting duplicate must get the first charge's result even though an unrelated
    write finished after it and lapsed its until_change record."""
    charges: list[str] = []

    @tg.mutating
    async def charge(order: str) -> str:
        charges.append(order)
        await asyncio.sleep(0.05)
        return "charged"

    @tg.mutating
    async def log_event(msg: str) -> str:
        await asyncio.sleep(0.051)
        return "logged"

    async with tg.Guard(tools=[charge, log_event]).task("t") as task:
        results = await asyncio.gather(task.acall("charge", {"order": "o1"}),
                                       task.acall("charge", {"order": "o1"}),
                                       task.acall("log_event", {"msg": "hi"}))
    assert charges == ["o1"]
    assert [r.decision for r in results] == [D.ALLOW, D.CACHED, D.ALLOW]
