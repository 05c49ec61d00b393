"""Hard per-task quotas through the engine: each budget raises BudgetExceeded naming the budget,
limit and usage; the task stays halted; ``task.usage`` reports every counter."""

from __future__ import annotations

import pytest

import toolguard as tg
from tests.redis_support import redis_prefix, redis_store  # noqa: F401
from toolguard.policy._model import BudgetPolicy, ToolPolicy
from toolguard.testing import FakeClock, capture_audit


@tg.readonly
def lookup(key: str) -> str:
    return f"value of {key}"


@tg.mutating
def flaky(key: str) -> str:
    raise ConnectionError("backend down")


def guard_with(clock: FakeClock, **budget: float) -> tg.Guard:
    return tg.Guard(tg.Policy(budget=BudgetPolicy.model_validate(budget)), [lookup, flaky],
                    clock=clock)


def test_max_tool_calls(clock: FakeClock) -> None:
    task = guard_with(clock, max_tool_calls=3).task("t")
    for i in range(3):
        task.call("lookup", {"key": str(i)})
    with pytest.raises(tg.BudgetExceeded) as info:
        task.call("lookup", {"key": "3"})
    e = info.value
    assert (e.budget, e.limit, e.usage, e.tool) == ("max_tool_calls", 3, 4, "lookup")
    assert task.halted
    with pytest.raises(tg.BudgetExceeded) as again:
        task.call("lookup", {"key": "new"})
    # the repeated halt names the budget that halted the task, not "unknown"
    assert (again.value.budget, again.value.limit, again.value.usage) == ("max_tool_calls", 3, 4)
    assert task.usage.tool_calls == 4  # calls refused because the task is halted are free


def test_calls_refused_while_halted_do_not_spend_the_budget(clock: FakeClock) -> None:
    """Regression: a framework that catches Exception and retries while the task is halted
    used up max_tool_calls, so the first call after resume() exceeded it."""
    task = guard_with(clock, max_tool_calls=10).task("t")
    for _ in range(4):
        task.call("lookup", {"key": "same"})
    with pytest.raises(tg.RepeatedToolCalls):
        task.call("lookup", {"key": "same"})
    for _ in range(5):
        with pytest.raises(tg.RepeatedToolCalls):
            task.call("lookup", {"key": "other"})
    assert task.usage.tool_calls == 5
    task.resume()
    assert task.call("lookup", {"key": "other"}).executed


def test_max_tokens_via_record_usage(clock: FakeClock) -> None:
    task = guard_with(clock, max_tokens=1000).task("t")
    task.record_usage(input_tokens=600, output_tokens=300)
    assert task.usage.total_tokens == 900 and task.usage.input_tokens == 600
    task.call("lookup", {"key": "a"})
    with capture_audit(task.guard) as events, pytest.raises(tg.BudgetExceeded) as info:
        task.record_usage(input_tokens=200)
    assert (info.value.budget, info.value.limit, info.value.usage) == ("max_tokens", 1000, 1100)
    assert str(info.value).startswith("task 't' halted: budget max_tokens exceeded")  # no tool
    assert [(e.transition, e.decision) for e in events] == [("planning->failed", "halt")]
    with pytest.raises(tg.BudgetExceeded) as again:
        task.call("lookup", {"key": "b"})
    assert (again.value.budget, again.value.limit, again.value.usage) == ("max_tokens", 1000, 1100)


def test_timeout_on_the_injected_clock(clock: FakeClock) -> None:
    task = guard_with(clock, timeout_s=60).task("t")
    task.call("lookup", {"key": "a"})
    clock.advance(59)
    task.call("lookup", {"key": "b"})
    assert task.usage.elapsed_s == 59
    clock.advance(2)
    with pytest.raises(tg.BudgetExceeded) as info:
        task.call("lookup", {"key": "c"})
    assert info.value.budget == "timeout_s" and info.value.usage == 61


def test_per_tool_max_calls(clock: FakeClock) -> None:
    policy = tg.Policy(tools={"lookup": ToolPolicy(max_calls=2)})
    task = tg.Guard(policy, [lookup, flaky], clock=clock).task("t")
    task.call("lookup", {"key": "a"})
    task.call("lookup", {"key": "b"})
    with pytest.raises(tg.BudgetExceeded) as info:
        task.call("lookup", {"key": "c"})
    assert info.value.budget == "max_calls" and task.usage.per_tool == {"lookup": 3}


def test_decorator_max_calls(clock: FakeClock) -> None:
    @tg.readonly(max_calls=1)
    def once(x: int) -> int:
        return x

    task = tg.Guard(tools=[once], clock=clock).task("t")
    task.call("once", {"x": 1})
    with pytest.raises(tg.BudgetExceeded):
        task.call("once", {"x": 2})


def test_max_consecutive_failures_any_arguments(clock: FakeClock) -> None:
    task = guard_with(clock, max_consecutive_failures=2).task("t")
    assert task.call("flaky", {"key": "a"}).is_error
    assert task.call("flaky", {"key": "b"}).is_error
    with pytest.raises(tg.BudgetExceeded) as info:
        task.call("flaky", {"key": "c"})
    assert info.value.budget == "max_consecutive_failures"
    assert ("budget max_consecutive_failures reached: flaky failed twice in a row "
            "(limit 2, used 2)") in str(info.value)


def test_a_success_resets_consecutive_failures(clock: FakeClock) -> None:
    outcomes = iter([False, True, False, False])

    @tg.readonly
    def sometimes(i: int) -> str:
        if not next(outcomes):
            raise ValueError("no")
        return "yes"

    task = tg.Guard(tg.Policy(budget=BudgetPolicy(max_consecutive_failures=2)), [sometimes],
                    clock=clock).task("t")
    assert [task.call("sometimes", {"i": i}).is_error for i in range(4)] == [
        True, False, True, True]


def test_unlimited_by_default(clock: FakeClock) -> None:
    task = tg.Guard(tools=[lookup], clock=clock).task("t")
    for i in range(500):
        task.call("lookup", {"key": str(i)})
    clock.advance(1e6)
    task.record_usage(input_tokens=10**9)
    assert task.call("lookup", {"key": "x"}).executed


@pytest.mark.parametrize("store_kind", ["memory", pytest.param("redis", marks=pytest.mark.redis)])
def test_resume_restarts_a_failure_streak_but_not_a_spent_budget(
        store_kind: str, request: pytest.FixtureRequest) -> None:
    up = {"registry": False}

    @tg.mutating
    def deploy(version: str) -> str:
        if not up["registry"]:
            raise ConnectionError("registry down")
        return f"deployed {version}"

    store = None if store_kind == "memory" else request.getfixturevalue("redis_store")
    policy = tg.Policy(budget=BudgetPolicy(max_consecutive_failures=3, max_tool_calls=6))
    task = tg.Guard(policy, [deploy], store=store).task("t")
    for i in range(3):
        task.call("deploy", {"version": f"v{i}"})
    with pytest.raises(tg.BudgetExceeded):
        task.call("deploy", {"version": "v3"})
    up["registry"] = True  # the user fixed the cause
    task.resume()
    assert task.call("deploy", {"version": "new"}).value == "deployed new"
    task.call("deploy", {"version": "newer"})
    with pytest.raises(tg.BudgetExceeded) as spent:
        task.call("deploy", {"version": "newest"})  # call 7 of 6
    task.resume()
    with pytest.raises(tg.BudgetExceeded) as again:  # the usage stays
        task.call("deploy", {"version": "newest"})
    assert spent.value.budget == again.value.budget == "max_tool_calls"
    with pytest.raises(tg.BudgetExceeded) as halted:
        task.call("deploy", {"version": "x"})
    assert "raise max_tool_calls (guard.reload_policy)" in str(halted.value)


def test_a_halted_task_raises_the_first_halts_numbers_unchanged() -> None:
    @tg.readonly
    def look(i: int) -> str:
        return "ok"

    task = tg.Guard(tg.Policy(budget=BudgetPolicy(max_tool_calls=2)), [look]).task("t")
    task.call("look", {"i": 1})
    task.call("look", {"i": 2})
    with pytest.raises(tg.BudgetExceeded) as first:
        task.call("look", {"i": 3})
    with pytest.raises(tg.BudgetExceeded) as later:
        task.call("look", {"i": 4})
    assert (first.value.limit, first.value.usage) == (later.value.limit, later.value.usage)
    assert type(later.value.limit) is type(first.value.limit)
    assert type(later.value.usage) is type(first.value.usage)
