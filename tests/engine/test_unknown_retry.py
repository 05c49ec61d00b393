# ruff: noqa: F811  (the store fixture is imported, then taken as a parameter)
"""The approved retry of a call whose outcome is unknown holds the key's claim while it runs,
on every store: an identical call meanwhile waits for it and shares its result (or gets
``CallInProgress``), and of two retries approved at once exactly one runs."""

from __future__ import annotations

import threading
import time

import pytest

import toolguard as tg
from tests.redis_support import (  # noqa: F401
    redis_cluster_store,
    redis_prefix,
    redis_store,
)
from tests.stores.test_store_contract import store  # noqa: F401 - every back-end
from toolguard.policy._model import IdempotencyPolicy
from toolguard.stores import Store
from toolguard.testing import FakeClock

D = tg.Decision
ARGS = {"order": "A-1"}


def _approve(request: tg.ApprovalRequest) -> tg.ApprovalDecision:
    return tg.approve()


def _task(store: Store, clock: FakeClock, paid: list[str], wait_timeout_s: float = 0.05,
          hold: threading.Event | None = None) -> tg.Task:
    @tg.mutating
    def pay(order: str) -> str:
        """Pay an order."""
        paid.append(order)
        if hold is not None:
            hold.wait(10)
        return "paid"

    policy = tg.Policy(idempotency=IdempotencyPolicy(wait_timeout_s=wait_timeout_s,
                                                     in_progress_ttl_s=30))
    return tg.Guard(policy, store=store, tools=[pay], clock=clock).task("t")


def _crashed(task: tg.Task) -> None:
    """The first call ends without a known outcome (its worker crashed)."""
    first = task.begin("pay", ARGS)
    assert first.result is None
    first.unknown("the worker crashed")


def test_an_identical_call_waits_for_the_approved_retry(store: Store, clock: FakeClock
                                                        ) -> None:
    """Regression: the approved retry ran without the claim, so an identical call while it
    ran was approved and ran beside it."""
    paid: list[str] = []
    task = _task(store, clock, paid)
    _crashed(task)
    retry = task.begin("pay", ARGS, approver=_approve)
    assert retry.result is None  # approved: it runs
    asked: list[str] = []

    def count(request: tg.ApprovalRequest) -> tg.ApprovalDecision:
        asked.append(request.reason)
        return tg.approve()

    with pytest.raises(tg.CallInProgress):
        task.begin("pay", ARGS, approver=count)
    assert asked == []  # waited on the retry's claim: no second approval asked
    retry.finish("paid")
    again = task.begin("pay", ARGS, approver=count)
    assert again.result is not None and again.result.decision is D.CACHED
    assert str(again.result.content).startswith("paid") and asked == []


def test_two_threads_retrying_run_the_tool_once(store: Store, clock: FakeClock) -> None:
    paid: list[str] = []
    hold = threading.Event()
    task = _task(store, clock, paid, wait_timeout_s=10, hold=hold)
    _crashed(task)
    results: list[tg.ToolResult] = []
    threads = [threading.Thread(target=lambda: results.append(
        task.call("pay", ARGS, approver=_approve))) for _ in range(2)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 10
    while not paid and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)  # the other thread is waiting on the claim by now
    hold.set()
    for thread in threads:
        thread.join(15)
    assert paid == ["A-1"]  # one execution
    assert sorted(r.decision.value for r in results) == ["allow", "cached"]
    assert all(str(r.content).startswith("paid") for r in results)


def test_of_two_approved_retries_exactly_one_runs(store: Store, clock: FakeClock) -> None:
    """Both were approved before either ran: the first to take the claim runs, the other
    decides again on fresh state and waits for it."""
    paid: list[str] = []
    task = _task(store, clock, paid)
    _crashed(task)
    both = threading.Barrier(2)

    def approve_together(request: tg.ApprovalRequest) -> tg.ApprovalDecision:
        both.wait(5)  # neither takes the claim before both are approved
        return tg.approve()

    begun: list[tg.PendingCall | BaseException] = []

    def retry() -> None:
        try:
            begun.append(task.begin("pay", ARGS, approver=approve_together))
        except tg.CallInProgress as exc:
            begun.append(exc)

    threads = [threading.Thread(target=retry) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(15)
    running = [b for b in begun if isinstance(b, tg.PendingCall) and b.result is None]
    assert len(running) == 1
    assert [type(b) for b in begun if b not in running] == [tg.CallInProgress]


def test_a_retry_that_never_reports_is_unknown_again(store: Store, clock: FakeClock) -> None:
    paid: list[str] = []
    task = _task(store, clock, paid)
    _crashed(task)
    assert task.begin("pay", ARGS, approver=_approve).result is None  # never finished
    clock.advance(30)  # its claim's TTL
    asked: list[str] = []

    def count(request: tg.ApprovalRequest) -> tg.ApprovalDecision:
        asked.append(request.reason)
        return tg.reject("not again")

    again = task.begin("pay", ARGS, approver=count)
    assert again.result is not None and again.result.decision is D.BLOCK
    assert len(asked) == 1 and "without a known outcome" in asked[0]


def test_a_retry_that_failed_leaves_the_outcome_unknown(store: Store, clock: FakeClock
                                                         ) -> None:
    """The first call may still have happened, so the next identical call is reviewed
    again rather than run blind (as when the retry held no claim)."""
    paid: list[str] = []
    task = _task(store, clock, paid)
    _crashed(task)
    task.begin("pay", ARGS, approver=_approve).fail(RuntimeError("card declined"))
    again = task.begin("pay", ARGS)  # no approver: the review is refused
    assert again.result is not None and again.result.decision is D.BLOCK
    assert "without a known outcome" in again.result.reason
