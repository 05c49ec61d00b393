"""The fused in-memory call path (``toolguard._fast``) gives what the general path gives:
random sequences of calls (repeats, writes, polls, errors, timeouts, invalid and unknown
calls, approvals, budgets, ladder and stagnation rungs, a moving clock) produce the same
results, exceptions, executions, history and task state with it on and forced off."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import toolguard as tg
from toolguard._policy import (
    BudgetPolicy,
    IdempotencyPolicy,
    LadderPolicy,
    LadderThresholds,
    ToolPolicy,
)
from toolguard.stores.memory import MemoryStore
from toolguard.testing import FakeClock


def _ladder(warn_at: int, block_at: int, halt_at: int) -> LadderThresholds:
    return LadderThresholds(warn_at=warn_at, block_at=block_at, halt_at=halt_at)


_POLICIES = [
    tg.Policy(ladder=LadderPolicy(readonly=_ladder(2, 3, 5), mutating=_ladder(2, 3, 4),
                                  stagnation_warn_at=3, stagnation_block_at=4),
              tools={"status": ToolPolicy(effect=tg.Effect.POLL, max_polls=4),
                     "deploy": ToolPolicy(requires_approval=True)}),
    tg.Policy(budget=BudgetPolicy(max_tool_calls=12),
              idempotency=IdempotencyPolicy(ttl_s=30.0),
              tools={"write": ToolPolicy(idempotency_scope="task"),
                     "flaky": ToolPolicy(idempotency_scope="off")}),
    tg.Policy(budget=BudgetPolicy(max_consecutive_failures=3)),
]

# (tool, argument, the JSON-text spelling) the model sends; "nope" is no tool
_CALLS = st.tuples(
    st.sampled_from(["search", "search", "search", "write", "write", "status", "flaky",
                     "slow", "deploy", "nope"]),
    st.one_of(st.integers(0, 3), st.integers(0, 3), st.sampled_from(["x", "", None, 2.0, [1, 2]])),
    st.booleans(),
)
_STEPS = st.one_of(_CALLS, st.sampled_from(["tick", "turn"]))


def _tools(runs: list[tuple[str, Any]]) -> list[Any]:
    def search(q: Any = 0) -> Any:
        runs.append(("search", q))
        # the same outcome under other arguments: the stagnation rule's runs
        return None if q == 0 else "nothing found" if q in (1, 2, "") else f"found {q}"

    def write(q: Any = 0) -> str:
        runs.append(("write", q))
        return f"wrote {q}"

    def status(q: Any = 0) -> str:
        runs.append(("status", q))
        return "pending"

    def flaky(q: Any = 0) -> str:
        runs.append(("flaky", q))
        if q in (1, "x"):
            raise ValueError(f"bad {q}")
        return "ok"

    def slow(q: Any = 0) -> str:
        runs.append(("slow", q))
        if q == 1:
            raise TimeoutError("took too long")
        return "done"

    def deploy(q: Any = 0) -> str:
        runs.append(("deploy", q))
        return "deployed"

    return [tg.ToolSpec(name="search", func=search, effect=tg.Effect.READONLY),
            tg.ToolSpec(name="write", func=write, effect=tg.Effect.MUTATING),
            tg.ToolSpec(name="status", func=status, effect=tg.Effect.POLL),
            tg.ToolSpec(name="flaky", func=flaky, effect=tg.Effect.MUTATING),
            tg.ToolSpec(name="slow", func=slow, effect=tg.Effect.MUTATING),
            tg.ToolSpec(name="deploy", func=deploy, effect=tg.Effect.MUTATING)]


def _view(result: tg.ToolResult) -> dict[str, Any]:
    """A result without what differs between any two runs (the call id, the duration)."""
    fields = dataclasses.asdict(result)
    fields.pop("call_id")
    fields.pop("duration_s")
    return fields


def _run(policy: tg.Policy, steps: list[Any], fast: bool) -> list[Any]:
    runs: list[tuple[str, Any]] = []
    clock = FakeClock(1000.0)
    store = MemoryStore(max_entries=6, clock=clock)
    guard = tg.Guard(policy, _tools(runs), clock=clock, store=store)
    task = guard.task("fast")  # one id for both runs: it is in the keys
    task._fast = fast
    seen: list[Any] = []
    for step in steps:
        if step == "tick":
            clock.advance(7.0)
            continue
        if step == "turn":
            task.new_turn()
            continue
        tool, arg, as_text = step
        args: Any = {} if arg is None and as_text else {"q": arg}
        if as_text:
            args = f'{{"q": {arg!r}}}'.replace("'", '"') if arg is not None else "{}"
        try:
            seen.append(_view(task.call(tool, args)))
        except tg.Halt as halt:
            seen.append(("halt", type(halt).__name__, str(halt)))
            task.resume()
        except tg.ToolGuardError as error:
            seen.append(("error", type(error).__name__, str(error)))
    seen.append(runs)
    seen.append([(r.tool, r.args, _view(r.result)) for r in task.history])
    usage = task.usage
    seen.append((usage.tool_calls, usage.per_tool, task.halted,
                 sorted(task.pending_approvals)))
    # the store's own state: idempotency records (claims included) and ladder counts
    seen.append([(key, record.state, record.content, expires)
                 for key, (record, expires) in store._records._data.items()])
    state = store._tasks["fast"]
    seen.append(([(k, v.count, v.polls, v.resets, v.last_digest, v.epoch)
                  for k, v in state.sigs.items()], list(state.seen), state.stagnation,
                 state.epoch, state.changes, state.failures))
    return seen


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(range(len(_POLICIES))), st.lists(_STEPS, max_size=40))
@example(0, [("search", 1, False), ("search", 2, True), ("search", "", False),  # stagnation
             ("search", 3, False), ("search", 3, False), ("search", 3, False)])
@example(0, [("flaky", 1, False), ("flaky", 1, True), ("flaky", 1, False), "tick",  # a claim
             ("flaky", 2, False), ("flaky", 3, False), ("flaky", 3, False)])  # blocked
@example(0, [("write", 1, False), ("write", 1, False), ("write", 2, False), "tick",
             ("slow", 1, False), ("slow", 1, False), "turn", ("write", 1, False)])
def test_the_fused_path_equals_the_general_path(policy: int, steps: list[Any]) -> None:
    assert _run(_POLICIES[policy], steps, True) == _run(_POLICIES[policy], steps, False)


def test_the_fused_path_is_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pins that the comparison above compares something: a plain MemoryStore call goes
    through ``_memory_sync``, a forced-off task and a subclassed store do not."""
    taken: list[str] = []
    original = tg.Task._memory_sync

    def spy(task: tg.Task, *args: Any) -> Any:
        taken.append(task.task_id)
        return original(task, *args)

    class Store(MemoryStore):
        pass

    monkeypatch.setattr(tg.Task, "_memory_sync", spy)
    for name, store, fast in (("on", MemoryStore(), True), ("off", MemoryStore(), False),
                              ("sub", Store(), True)):
        guard = tg.Guard(tools=_tools([]), store=store)
        task = guard.task(name)
        task._fast = fast
        assert task.call("search", {"q": 1}).decision is tg.Decision.ALLOW
    assert taken == ["on"]
