"""The three fault-injection tests of DESIGN.md §2, plus unknown outcomes and forwarded keys."""

from __future__ import annotations

import json
from typing import Any

import pytest

import toolguard as tg
from toolguard._types import IdempotencyScope
from toolguard.policy._model import BudgetPolicy, IdempotencyPolicy
from toolguard.testing import FakeClock, auto_approve, auto_defer

D = tg.Decision


def test_corrupted_json_from_a_tool_loop_is_stopped_by_the_ladder(clock: FakeClock) -> None:
    """A tool returns corrupted JSON; the model, thinking its arguments were wrong, retries.
    The guard stops the loop before any turn limit and nothing crashes."""
    calls = 0

    @tg.readonly
    def get_order(order_id: str) -> str:
        nonlocal calls
        calls += 1
        return '{"order": {"id": "A1", "status": '  # truncated JSON, every time

    guard = tg.Guard(tools=[get_order], clock=clock)
    task = guard.task("t")
    seen: list[tg.Decision] = []

    def model_loop() -> None:
        for _ in range(50):  # a model that would retry forever
            r = task.call("get_order", {"order_id": "A1"})
            seen.append(r.decision)
            with pytest.raises(json.JSONDecodeError):
                json.loads(r.content if r.executed else "{")

    with pytest.raises(tg.RepeatedToolCalls) as info:
        model_loop()
    assert seen == [D.ALLOW, D.ALLOW, D.WARN, D.BLOCK]
    assert calls == 3 and info.value.tool == "get_order"


def test_corrupted_json_with_varying_arguments_is_stopped_by_failure_budget(
    clock: FakeClock,
) -> None:
    """The same loop where the model varies its arguments each time (no two calls equal):
    the tool raises on the junk, and max_consecutive_failures halts the guessing."""

    @tg.readonly
    def parse_report(report_id: str) -> dict[str, str]:
        return json.loads('{"rows": [1, 2,')  # type: ignore[no-any-return]

    guard = tg.Guard(tg.Policy(budget=BudgetPolicy(max_consecutive_failures=3)),
                     [parse_report], clock=clock)
    task = guard.task("t")
    results = [task.call("parse_report", {"report_id": f"r{i}"}) for i in range(3)]
    assert all(r.is_error and r.error_type == "JSONDecodeError" for r in results)
    with pytest.raises(tg.BudgetExceeded) as info:
        task.call("parse_report", {"report_id": "r3"})
    assert info.value.budget == "max_consecutive_failures" and info.value.limit == 3


def test_timeout_after_the_backend_wrote_does_not_write_twice(clock: FakeClock) -> None:
    """A network timeout arrives after the backend already succeeded; the model retries the
    same write. The idempotency key stops the second write: the retry goes to review."""
    backend: list[str] = []

    @tg.mutating
    def create_issue(title: str) -> str:
        backend.append(title)  # the write happened...
        raise TimeoutError("request timed out, no response received")  # ...the answer did not

    guard = tg.Guard(tools=[create_issue], approver=auto_defer, clock=clock)
    task = guard.task("t")
    first = task.call("create_issue", {"title": "Proposal"})
    assert first.is_error and "outcome is unknown" in first.content
    retry = task.call("create_issue", {"title": "Proposal"})
    assert retry.decision is D.REVIEW and "may already have happened" in retry.reason
    assert backend == ["Proposal"]
    assert list(task.pending_approvals) == [first.idempotency_key]


def test_unknown_outcome_retry_runs_once_a_human_approves(clock: FakeClock) -> None:
    attempts: list[int] = []

    @tg.mutating
    def transfer(amount: int) -> str:
        attempts.append(amount)
        if len(attempts) == 1:
            raise TimeoutError("gateway timeout")
        return "ok"

    guard = tg.Guard(tools=[transfer], approver=auto_approve, clock=clock)
    task = guard.task("t")
    task.call("transfer", {"amount": 5})
    r = task.call("transfer", {"amount": 5})
    assert r.executed and attempts == [5, 5]
    assert task.call("transfer", {"amount": 5}).decision is D.CACHED


def test_forwarded_idempotency_key_is_retried_with_the_same_key(clock: FakeClock) -> None:
    keys: list[str | None] = []

    @tg.mutating(forwards_idempotency_key=True)
    def charge(amount: int) -> str:
        keys.append(tg.current_idempotency_key())
        if len(keys) == 1:
            raise TimeoutError("timed out")
        return "charged"

    guard = tg.Guard(tools=[charge], clock=clock)
    task = guard.task("t")
    task.call("charge", {"amount": 5})
    r = task.call("charge", {"amount": 5})
    assert r.executed and keys[0] == keys[1]
    assert keys[0] is not None and keys[0].startswith(f"{r.idempotency_key}:")


def test_policy_timeout_exceptions_by_name(clock: FakeClock) -> None:
    from toolguard.policy._model import IdempotencyPolicy

    class GatewayTimeout(Exception):
        pass

    ran: list[int] = []

    @tg.mutating
    def pay(amount: int) -> str:
        ran.append(amount)
        raise GatewayTimeout("504")

    policy = tg.Policy(idempotency=IdempotencyPolicy(timeout_exceptions=("GatewayTimeout",)))
    guard = tg.Guard(policy, [pay], approver=auto_defer, clock=clock)
    task = guard.task("t")
    task.call("pay", {"amount": 1})
    assert task.call("pay", {"amount": 1}).decision is D.REVIEW and ran == [1]


def test_a_tool_error_that_cannot_be_printed_is_still_an_error_result(clock: FakeClock) -> None:
    """The exception's own __str__ raises: the call still ends as a known failure (an error
    result naming the type), not a guard error with the outcome recorded as unknown."""
    runs: list[str] = []

    class Unprintable(Exception):
        def __str__(self) -> str:
            raise RuntimeError("__str__ failed")

    @tg.mutating
    def pay(order: str) -> str:
        runs.append(order)
        if len(runs) == 1:
            raise Unprintable
        return "paid"

    sink = tg.MemorySink()
    task = tg.Guard(tools=[pay], audit=[sink], clock=clock).task("t")
    first = task.call("pay", {"order": "A"})
    assert (first.decision, first.is_error, first.error_type) == (D.ALLOW, True, "Unprintable")
    assert "Unprintable" in first.content
    assert sink.events[-1].transition == "executing->planning"
    retry = task.call("pay", {"order": "A"})  # a known failure: the retry runs, no review
    assert (retry.decision, retry.value, runs) == (D.WARN, "paid", ["A", "A"])  # 2nd: warn


def test_a_result_nested_deeper_than_json_allows_is_returned_and_recorded(
        clock: FakeClock) -> None:
    """orjson stops at 255 levels; the result digest falls back to repr instead of turning a
    completed write into a guard error with an unknown outcome."""
    def nest(depth: int) -> list[Any]:
        value: list[Any] = []
        for _ in range(depth):
            value = [value]
        return value

    @tg.mutating
    def build(depth: int) -> list[Any]:
        return nest(depth)

    task = tg.Guard(tools=[build], clock=clock).task("t")
    first = task.call("build", {"depth": 300})
    assert (first.decision, first.is_error) == (D.ALLOW, False)
    again = task.call("build", {"depth": 300})
    assert again.decision is D.CACHED and again.value == first.value


def test_a_store_failure_before_the_tool_runs_gives_the_claim_back() -> None:
    """fail_closed refuses the call when storing the approver's answer fails; the call did
    not run, so an identical retry must not wait on its claim (CallInProgress)."""
    from toolguard.stores import MemoryStore

    class ApprovalsDown(MemoryStore):  # the real store, with one operation failing
        failing = True

        def set_approval(self, *args: Any, **kwargs: Any) -> None:
            if self.failing:
                raise ConnectionError("approvals table down")
            super().set_approval(*args, **kwargs)

    runs: list[str] = []

    @tg.requires_approval
    def refund(order: str) -> str:
        runs.append(order)
        return "refunded"

    store = ApprovalsDown()
    policy = tg.Policy(idempotency=IdempotencyPolicy(wait_timeout_s=0.2))
    task = tg.Guard(policy, [refund], store=store, approver=auto_approve).task("t")
    with pytest.raises(tg.StoreError):
        task.call("refund", {"order": "o1"})
    store.failing = False
    assert task.call("refund", {"order": "o1"}).decision is tg.Decision.ALLOW
    assert runs == ["o1"]


def test_the_forwarded_key_changes_when_the_guard_runs_a_new_execution(
        clock: FakeClock) -> None:
    """After another write, an identical charge the guard runs again as a new call forwards
    a new key, so a Stripe-like backend does not replay the first response in place of the
    real second charge."""
    backend: dict[str, str] = {}
    charges: list[int] = []

    @tg.mutating(forwards_idempotency_key=True)
    def charge(customer: str, amount: int) -> str:
        key = tg.current_idempotency_key()
        assert key is not None
        if key not in backend:
            charges.append(amount)
            backend[key] = f"ch_{len(charges)}"
        return backend[key]

    @tg.mutating
    def add_note(text: str) -> str:
        return "noted"

    task = tg.Guard(tools=[charge, add_note], clock=clock).task("t")
    assert task.call("charge", {"customer": "c1", "amount": 500}).value == "ch_1"
    task.call("add_note", {"text": "the customer asked for a second, separate charge"})
    second = task.call("charge", {"customer": "c1", "amount": 500})
    assert second.executed and second.value == "ch_2" and charges == [500, 500]


@pytest.mark.parametrize("scope", [IdempotencyScope.OFF, IdempotencyScope.UNTIL_CHANGE])
def test_each_execution_forwards_its_own_key_and_a_retry_reuses_it(
        clock: FakeClock, scope: IdempotencyScope) -> None:
    keys: list[str | None] = []

    @tg.mutating(forwards_idempotency_key=True, idempotency_scope=scope)
    def charge(amount: int) -> str:
        keys.append(tg.current_idempotency_key())
        if len(keys) == 2:
            raise TimeoutError("the server may have taken it")
        return "charged"

    task = tg.Guard(tools=[charge], clock=clock).task("t")
    task.call("charge", {"amount": 5})
    task.new_turn()  # a new execution is intended
    task.call("charge", {"amount": 5})  # times out
    task.call("charge", {"amount": 5})  # the retry of that execution
    assert keys[0] != keys[1] and keys[1] == keys[2]
