"""Several worker processes serving one task, on any store that processes share: start them,
collect what each reports, and the workers and checks that every such store passes."""

from __future__ import annotations

import multiprocessing
import os
import queue
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import toolguard as tg
from toolguard._types import RecordState
from toolguard.policy._model import BudgetPolicy, IdempotencyPolicy, LadderPolicy, LadderThresholds
from toolguard.stores import Store
from toolguard.testing import auto_defer


def run_processes(target: Callable[..., None], args: list[tuple[Any, ...]]) -> list[Any]:
    """Run ``target(*a, barrier, results)`` for each ``a`` of ``args``, each in a spawned
    process; return what they put on ``results`` (one item each), failing the test if a
    worker dies without reporting or 60 s pass."""
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(len(args)), ctx.Queue()
    procs = [ctx.Process(target=target, args=(*a, barrier, results)) for a in args]
    for p in procs:
        p.start()
    out: list[Any] = []
    deadline = time.monotonic() + 60
    try:
        while len(out) < len(procs):
            try:
                out.append(results.get(timeout=0.2))
            except queue.Empty:
                if time.monotonic() > deadline or not any(p.is_alive() for p in procs):
                    pytest.fail(f"workers reported {out}; exit codes "
                                f"{[p.exitcode for p in procs]}")
        return out
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()


# -- workers: each builds its store with ``make_store`` (picklable: a module-level function
# or a functools.partial of one) and logs each execution of the tool as a line in ``log``
def log_line(log: str, line: str) -> int:
    """Append ``line`` to the file ``log`` (one O_APPEND write: atomic between processes);
    return how many lines it holds now."""
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(fd, f"{line}\n".encode())
    finally:
        os.close(fd)
    return len(logged(log))


def logged(log: str) -> list[str]:
    """The lines of ``log`` (none if it was never written)."""
    return Path(log).read_text().splitlines() if Path(log).exists() else []


def same_call_worker(make_store: Callable[[], Store], log: str, ladder: bool, barrier: Any,
                     results: Any) -> None:
    """The same charge, at once from every worker; reports (decision, value)."""
    store = make_store()
    try:
        def charge(order: str) -> str:
            n = log_line(log, order)
            time.sleep(0.3)  # the others arrive while it runs: they wait, then share
            return f"charged {order} (#{n})"

        policy = tg.Policy(ladder=LadderPolicy(
            mutating=LadderThresholds(warn_at=5, block_at=6, halt_at=7))) if ladder else None
        task = tg.Guard(policy, tools=[tg.mutating(charge)], store=store).task("order-task")
        barrier.wait(timeout=30)
        try:
            result = task.call("charge", {"order": "A-17"})
            results.put((str(result.decision), result.value))
        except tg.Halt as exc:
            results.put((type(exc).__name__, None))
    except Exception as exc:
        results.put(("error", repr(exc)))
    finally:
        getattr(store, "close", lambda: None)()


def check_same_call(out: list[Any], log: str, *, ladder: bool) -> None:
    """What :func:`same_call_worker` must give: one execution; with the relaxed ladder one
    allow and three cached answers, with the default ladder (halt_at = 4, which four
    identical attempts reach whatever their timing) one allow and no other execution."""
    assert logged(log) == ["A-17"], out
    decisions = [d for d, _ in out]
    if ladder:
        assert sorted(decisions) == ["allow", "cached", "cached", "cached"], out
        assert {v for _, v in out} == {"charged A-17 (#1)"}
    else:
        assert decisions.count("allow") == 1, out
        assert set(decisions) <= {"allow", "cached", "RepeatedToolCalls"}, out


def budget_worker(make_store: Callable[[], Store], log: str, proc: int, barrier: Any,
                  results: Any) -> None:
    """Five writes of a task whose budget is ten calls; reports (executed, refused)."""
    store = make_store()
    try:
        def write(proc: int, n: int) -> str:
            log_line(log, f"{proc}/{n}")
            return f"{proc}/{n}"

        policy = tg.Policy(budget=BudgetPolicy(max_tool_calls=10))
        task = tg.Guard(policy, tools=[tg.mutating(write)], store=store).task("budget-task")
        barrier.wait(timeout=30)
        executed = halted = 0
        for n in range(5):
            try:
                executed += task.call("write", {"proc": proc, "n": n}).decision.executed
            except tg.BudgetExceeded:
                halted += 1
        results.put((executed, halted))
    except Exception as exc:
        results.put(("error", repr(exc)))
    finally:
        getattr(store, "close", lambda: None)()


def check_budget(out: list[Any], log: str) -> None:
    """Four :func:`budget_worker` processes: exactly ten executions, ten refusals."""
    assert all(isinstance(e, int) for e, _ in out), out
    assert sum(e for e, _ in out) == 10
    assert sum(h for _, h in out) == 10
    assert len(logged(log)) == 10


def crashing_worker(make_store: Callable[[], Store], results: Any) -> None:
    """Claims a write of task "crash" (in_progress_ttl_s = 0.3), says so, and runs until it
    is killed."""
    store = make_store()

    def write(path: str) -> str:
        results.put("claimed")
        time.sleep(120)  # the tool is running when the worker is killed
        return "never"

    policy = tg.Policy(idempotency=IdempotencyPolicy(in_progress_ttl_s=0.3))
    tg.Guard(policy, tools=[tg.mutating(write)], store=store).task("crash").call(
        "write", {"path": "a"})


def check_crashed_claim_is_unknown(make_store: Callable[[], Store]) -> None:
    """A worker killed (SIGKILL) while its mutating call runs: once the claim's TTL passed,
    the identical call from another process is not run but reported unknown (review), and
    the store's record says the outcome is unknown, with the dead call's id."""
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    worker = ctx.Process(target=crashing_worker, args=(make_store, results))
    worker.start()
    try:
        assert results.get(timeout=60) == "claimed"
    finally:
        os.kill(worker.pid or 0, signal.SIGKILL)
        worker.join(10)
    assert worker.exitcode == -signal.SIGKILL
    ran: list[str] = []

    @tg.mutating
    def write(path: str) -> str:
        ran.append(path)
        return f"wrote {path}"

    store = make_store()
    task = tg.Guard(tools=[write], store=store, approver=auto_defer).task("crash")
    start = time.monotonic()
    result = task.call("write", {"path": "a"})  # waits out the claim, not its 30 s timeout
    assert time.monotonic() - start < 5.0
    assert (result.decision, result.executed, ran) == (tg.Decision.REVIEW, False, [])
    assert "without a known outcome" in str(result.content)
    key = next(iter(task.pending_approvals))
    record = store.get_record("crash", key, time.time())
    assert record is not None and record.state is RecordState.UNKNOWN
    assert record.call_id.startswith("crash#")  # the killed worker's call
    assert task.call("write", {"path": "a"}).decision is tg.Decision.REVIEW and ran == []
    getattr(store, "close", lambda: None)()
