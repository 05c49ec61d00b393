"""Tools that act on the outside world remember a completed call for the whole task:
under ``until_change`` a completed payment would run again after any other write."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import toolguard as tg
from toolguard._types import IdempotencyScope
from toolguard.testing import FakeClock

D = tg.Decision


def test_an_external_tool_is_not_re_run_after_another_write(clock: FakeClock) -> None:
    """Regression: a retried payment ran again once another payment had succeeded."""
    paid: list[str] = []

    @tg.mutating(external=True)
    def pay(invoice: str, amount_cents: int) -> str:
        paid.append(invoice)
        return f"paid {invoice}"

    task = tg.Guard(tools=[pay], clock=clock).task("t")
    assert task.call("pay", {"invoice": "INV-1", "amount_cents": 900}).decision is D.ALLOW
    assert task.call("pay", {"invoice": "INV-2", "amount_cents": 400}).decision is D.ALLOW
    retry = task.call("pay", {"invoice": "INV-1", "amount_cents": 900})
    assert retry.decision is D.CACHED and paid == ["INV-1", "INV-2"]
    assert tg.Guard(tools=[pay]).settings("pay").idempotency_scope is IdempotencyScope.TASK


def test_local_state_keeps_until_change(clock: FakeClock) -> None:
    written: list[str] = []

    @tg.mutating
    def write_file(path: str, text: str) -> str:
        written.append(path)
        return "ok"

    task = tg.Guard(tools=[write_file], clock=clock).task("t")
    task.call("write_file", {"path": "a", "text": "1"})
    task.call("write_file", {"path": "b", "text": "2"})
    assert task.call("write_file", {"path": "a", "text": "1"}).executed
    settings = tg.Guard(tools=[write_file]).settings("write_file")
    assert settings.idempotency_scope is IdempotencyScope.UNTIL_CHANGE and not settings.external


def test_the_policy_marks_a_tool_external() -> None:
    @tg.mutating
    def send_email(to: str) -> str:
        return "sent"

    policy = tg.load_policy_dict({"tools": {"send_email": {"external": True}}})
    settings = tg.Guard(policy, [send_email]).settings("send_email")
    assert settings.external and settings.idempotency_scope is IdempotencyScope.TASK
    assert settings.sources["external"] == "<dict>"
    # the policy can also take it back from a decorator
    marked = tg.mutating(external=True)(lambda to: "sent")
    spec = tg.spec_of(marked)
    off = tg.load_policy_dict({"tools": {spec.name: {"external": False}}})
    assert tg.Guard(off, [marked]).settings(spec.name).idempotency_scope is (
        IdempotencyScope.UNTIL_CHANGE)


def test_a_named_scope_beats_external() -> None:
    @tg.mutating(external=True, idempotency_scope="off")
    def post_message(text: str) -> str:
        return "posted"

    assert tg.Guard(tools=[post_message]).settings("post_message").idempotency_scope is (
        IdempotencyScope.OFF)


def test_concurrent_retries_of_an_external_payment_pay_once(clock: FakeClock) -> None:
    """The break-it pass: an immediate retry beside another payment, under 4 threads."""
    paid: list[tuple[int, str]] = []
    lock = threading.Lock()

    @tg.mutating(external=True)
    def pay(invoice: str, round_no: int) -> str:
        with lock:
            paid.append((round_no, invoice))
        return "paid"

    guard = tg.Guard(tools=[pay], clock=clock)
    with ThreadPoolExecutor(4) as pool:
        for round_no in range(100):
            task = guard.task(f"t{round_no}")
            calls = [{"invoice": inv, "round_no": round_no} for inv in ("A", "B", "A", "A")]
            list(pool.map(lambda args: task.call("pay", args), calls))  # noqa: B023
    assert sorted(paid) == sorted({(r, inv) for r in range(100) for inv in ("A", "B")})


def test_an_external_payment_is_paid_once_while_other_threads_write() -> None:
    """Four threads each pay, write something else, and retry the payment: with scope
    ``task`` (``external``) no retry pays again, however the writes interleave. (Under
    ``until_change``, the default for local state, another thread's write lapses the record:
    a payment tool must be marked external.)"""
    paid: list[str] = []
    lock = threading.Lock()

    @tg.mutating(external=True)
    def pay(order: str) -> str:
        with lock:
            paid.append(order)
        return f"paid {order}"

    @tg.mutating
    def note(text: str) -> str:
        return "noted"

    task = tg.Guard(tools=[pay, note]).task("t")

    def worker(n: int) -> None:
        for i in range(150):
            order = f"o-{n}-{i}"
            task.call("pay", {"order": order})
            task.call("note", {"text": order})
            assert task.call("pay", {"order": order}).decision is D.CACHED

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(worker, range(4)))
    assert len(paid) == len(set(paid)) == 600
