"""The enforcement pipeline through Guard and Task: ladder, progress, idempotency, direct
calls, batches, error envelopes, modes, reload."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import enum
from collections import Counter
from typing import Any, TypedDict

import pytest

import toolguard as tg
from toolguard.policy._model import (
    BudgetPolicy,
    IdempotencyPolicy,
    LadderPolicy,
    LadderThresholds,
    ToolPolicy,
)
from toolguard.testing import FakeClock, capture_audit

D = tg.Decision


class Color(enum.Enum):
    RED = "red"


@dataclasses.dataclass
class Box:
    width: int


class Point(TypedDict, total=False):
    x: int
    label: str | None


class World:
    """Side effects of the fake tools, to assert what really ran."""

    def __init__(self) -> None:
        self.runs: Counter[str] = Counter()
        self.files: dict[str, str] = {}

    def tools(self) -> list[Any]:
        world = self

        @tg.readonly
        def grep_search(pattern: str, path: str = ".") -> str:
            """Search files."""
            world.runs["grep"] += 1
            return "no hits"

        @tg.mutating
        def write_file(path: str, content: str) -> str:
            world.runs["write"] += 1
            world.files[path] = content
            return f"wrote {len(content)} bytes to {path}"

        @tg.mutating(name="shell")
        def run(command: str) -> str:
            world.runs[command] += 1
            if command == "boom":
                raise RuntimeError("exploded\nTraceback (most recent call last): secret")
            if command == "slow":
                raise TimeoutError("no answer after 30 s")
            return f"ran {command} #{world.runs[command]}" if command.startswith("date") else "ok"

        return [grep_search, write_file, run]


@pytest.fixture
def world() -> World:
    return World()


@pytest.fixture
def guard(world: World, clock: FakeClock) -> tg.Guard:
    return tg.Guard(tools=world.tools(), clock=clock)


def decisions(task: tg.Task, tool: str, args: dict[str, Any], n: int) -> list[tg.Decision]:
    out = []
    for _ in range(n):
        try:
            out.append(task.call(tool, args).decision)
        except tg.Halt:
            out.append(D.HALT)
    return out


def test_readonly_ladder_through_engine(guard: tg.Guard, world: World) -> None:
    task = guard.task("t")
    got = decisions(task, "grep_search", {"pattern": "TODO"}, 5)
    assert got == [D.ALLOW, D.ALLOW, D.WARN, D.BLOCK, D.HALT]
    assert world.runs["grep"] == 3  # allow, allow, warn ran; block and halt did not


def test_block_of_readonly_carries_previous_result(guard: tg.Guard) -> None:
    task = guard.task("t")
    for _ in range(3):
        task.call("grep_search", {"pattern": "x"})
    r = task.call("grep_search", {"pattern": "x"})
    assert r.decision is D.BLOCK and r.is_error
    assert "previous result" in r.content and "no hits" in r.content


def test_halt_names_tool_and_args_and_stays_until_resume(guard: tg.Guard, world: World) -> None:
    task = guard.task("t")
    decisions(task, "grep_search", {"pattern": "x"}, 4)
    with pytest.raises(tg.RepeatedToolCalls) as info:
        task.call("grep_search", {"pattern": "x"})
    assert info.value.tool == "grep_search" and info.value.args == {"pattern": "x"}
    assert info.value.count == 5 and "grep_search" in str(info.value)
    with pytest.raises(tg.RepeatedToolCalls):  # another tool: still halted
        task.call("write_file", {"path": "a", "content": "b"})
    assert task.halted and world.runs["write"] == 0
    task.resume()
    assert not task.halted
    assert task.call("write_file", {"path": "a", "content": "b"}).decision is D.ALLOW
    assert [h.result.decision for h in task.history][-3:] == [D.HALT, D.HALT, D.ALLOW]


def test_key_order_whitespace_and_defaults_are_one_signature(guard: tg.Guard) -> None:
    task = guard.task("t")
    a = task.call("grep_search", '{"pattern": "x", "path": "."}')
    b = task.call("grep_search", '{ "path" : ".",\n "pattern":"x" }')
    c = task.call("grep_search", {"pattern": "x"})
    d = task.call("grep_search", {"pattern": "x", "path": None})
    assert a.args_hash == b.args_hash == c.args_hash == d.args_hash
    assert d.count == 4


def test_mutating_success_is_cached_until_change(guard: tg.Guard, world: World) -> None:
    task = guard.task("t")
    first = task.call("write_file", {"path": "a", "content": "1"})
    again = task.call("write_file", {"path": "a", "content": "1"})
    assert (first.decision, again.decision) == (D.ALLOW, D.CACHED)
    assert world.runs["write"] == 1
    assert again.value == first.value and "NOT executed again" in again.content
    assert not again.is_error and not again.executed
    # progress elsewhere (another write that changed the world) lapses the record
    task.call("write_file", {"path": "b", "content": "2"})
    third = task.call("write_file", {"path": "a", "content": "1"})
    assert third.decision is D.ALLOW and third.count == 1
    assert world.runs["write"] == 3


def test_task_scope_survives_progress(world: World, clock: FakeClock) -> None:
    @tg.mutating(idempotency_scope="task")
    def charge(order: str) -> str:
        world.runs["charge"] += 1
        return "charged"

    guard = tg.Guard(tools=[charge, *world.tools()], clock=clock)
    task = guard.task("t")
    task.call("charge", {"order": "o1"})
    task.call("write_file", {"path": "b", "content": "2"})  # progress
    task.new_turn()  # progress
    assert task.call("charge", {"order": "o1"}).decision is D.CACHED
    assert world.runs["charge"] == 1


def test_idempotency_ttl_on_injected_clock(world: World, clock: FakeClock) -> None:
    lenient = tg.Policy().ladder.readonly.model_copy(update={"warn_at": 5, "block_at": 6,
                                                            "halt_at": 7})
    policy = tg.Policy(idempotency=IdempotencyPolicy(ttl_s=60),
                       ladder=LadderPolicy(mutating=lenient))
    guard = tg.Guard(policy, world.tools(), clock=clock)
    task = guard.task("t")
    task.call("write_file", {"path": "a", "content": "1"})
    clock.advance(59)
    assert task.call("write_file", {"path": "a", "content": "1"}).decision is D.CACHED
    clock.advance(2)
    r = task.call("write_file", {"path": "a", "content": "1"})
    assert r.decision is D.ALLOW and r.executed
    assert world.runs["write"] == 2


def test_scope_off_never_caches(world: World, clock: FakeClock) -> None:
    policy = tg.Policy(tools={"write_file": ToolPolicy(idempotency_scope=tg.IdempotencyScope.OFF)})
    guard = tg.Guard(policy, world.tools(), clock=clock)
    task = guard.task("t")
    got = decisions(task, "write_file", {"path": "a", "content": "1"}, 3)
    assert got == [D.ALLOW, D.WARN, D.BLOCK]
    assert world.runs["write"] == 2


def test_failed_executions_are_not_cached_and_errors_are_never_progress(
    guard: tg.Guard, world: World
) -> None:
    task = guard.task("t")
    got = decisions(task, "shell", {"command": "boom"}, 4)
    assert got == [D.ALLOW, D.WARN, D.BLOCK, D.HALT]
    assert world.runs["boom"] == 2


def test_error_envelope_is_one_line_without_traceback(guard: tg.Guard) -> None:
    r = guard.task("t").call("shell", {"command": "boom"})
    assert r.is_error and r.error_type == "RuntimeError" and r.executed
    assert "\n" not in r.content and r.content.startswith("Error (RuntimeError): exploded")


def test_tool_crash_leaves_state_consistent(guard: tg.Guard, world: World) -> None:
    task = guard.task("t")
    task.call("shell", {"command": "boom"})
    # the claim of the crashed call was released: an identical retry runs (no wait/hang)
    r = task.call("shell", {"command": "boom"})
    assert r.decision is D.WARN and world.runs["boom"] == 2
    assert task.usage.tool_calls == 2


def test_poll_output_that_moves_is_progress(world: World, clock: FakeClock) -> None:
    outputs = iter(["a", "b", "c", "d", "e", "e", "e", "e"])

    @tg.readonly
    def read_output(handle: str) -> str:
        return next(outputs)

    guard = tg.Guard(tools=[read_output], clock=clock)
    task = guard.task("t")
    got = decisions(task, "read_output", {"handle": "h"}, 8)
    # moving output keeps the count low; once it stops moving the ladder climbs again
    assert got[:5] == [D.ALLOW] * 5
    assert got[5:] == [D.ALLOW, D.WARN, D.BLOCK]


def test_poll_effect_exempt_from_ladder(clock: FakeClock) -> None:
    @tg.readonly(poll=True)
    def wait_for_job(job: str) -> str:
        return "running"

    policy = tg.Policy(tools={"wait_for_job": ToolPolicy(max_polls=6)})
    guard = tg.Guard(policy, [wait_for_job], clock=clock)
    task = guard.task("t")
    assert decisions(task, "wait_for_job", {"job": "j"}, 6) == [D.ALLOW] * 6
    with pytest.raises(tg.BudgetExceeded) as info:
        task.call("wait_for_job", {"job": "j"})
    assert info.value.budget == "max_polls"


def test_rules_classify_one_generic_tool(clock: FakeClock) -> None:
    calls: list[str] = []

    @tg.mutating
    def bash(command: str) -> str:
        calls.append(command)
        return "same output"

    from toolguard.policy._model import ToolRule

    policy = tg.Policy(tools={"bash": ToolPolicy(rules=(
        ToolRule(match={"command": r"^\s*(ls|cat)\b"}, effect=tg.Effect.READONLY),
    ))})
    guard = tg.Guard(policy, [bash], clock=clock)
    task = guard.task("t")
    r1 = task.call("bash", {"command": "cat a.txt"})
    r2 = task.call("bash", {"command": "cat a.txt"})
    assert r1.effect is tg.Effect.READONLY and r2.decision is D.ALLOW  # read-only: not cached
    w1 = task.call("bash", {"command": "rm x"})
    w2 = task.call("bash", {"command": "rm x"})
    assert w1.effect is tg.Effect.MUTATING and w2.decision is D.CACHED
    assert calls == ["cat a.txt", "cat a.txt", "rm x"]


def test_rules_see_default_values_like_the_signature_does(clock: FakeClock) -> None:
    """Omitted, null and the default value are one signature: they must get one effect."""
    from toolguard.policy._model import ToolRule

    @tg.mutating
    def store(key: str, mode: str = "read") -> str:
        return f"{mode} {key}"

    policy = tg.Policy(tools={"store": ToolPolicy(rules=(
        ToolRule(match={"mode": "^read$"}, effect=tg.Effect.READONLY),
    ))})
    task = tg.Guard(policy, [store], clock=clock).task("t")
    results = [task.call("store", args) for args in (
        {"key": "k", "mode": "read"}, {"key": "k"}, {"key": "k", "mode": None})]
    assert {r.effect for r in results} == {tg.Effect.READONLY}
    assert len({r.args_hash for r in results}) == 1
    assert task.call("store", {"key": "k", "mode": "write"}).effect is tg.Effect.MUTATING


def test_new_turn_resets_counts_unless_policy_says_no(world: World, clock: FakeClock) -> None:
    guard = tg.Guard(tools=world.tools(), clock=clock)
    task = guard.task("t")
    decisions(task, "grep_search", {"pattern": "x"}, 3)
    task.new_turn()
    assert task.call("grep_search", {"pattern": "x"}).count == 1
    strict = tg.Guard(tg.Policy(ladder=LadderPolicy(reset_on_user_turn=False)), world.tools(),
                      clock=clock)
    task2 = strict.task("t")
    decisions(task2, "grep_search", {"pattern": "x"}, 3)
    task2.new_turn()
    assert task2.call("grep_search", {"pattern": "x"}).count == 4


def test_tasks_are_isolated(guard: tg.Guard, world: World) -> None:
    guard.task("a").call("write_file", {"path": "p", "content": "c"})
    assert guard.task("b").call("write_file", {"path": "p", "content": "c"}).decision is D.ALLOW
    assert world.runs["write"] == 2


def test_direct_calls_inside_a_task_are_guarded(world: World, clock: FakeClock) -> None:
    tools = world.tools()
    grep_search, write_file = tools[0], tools[1]
    assert write_file(path="x", content="1") == "wrote 1 bytes to x"  # outside: plain
    guard = tg.Guard(tools=tools, clock=clock)
    with guard.task("t"):
        assert write_file("y", content="2") == "wrote 1 bytes to y"
        assert write_file(path="y", content="2") == "wrote 1 bytes to y"  # cached value
        assert world.runs["write"] == 2
        grep_search("q")
        grep_search("q")
        grep_search("q")
        with pytest.raises(tg.ToolBlocked) as info:
            grep_search(pattern="q")
        assert info.value.result.decision is D.BLOCK
    assert write_file(path="y", content="2") == "wrote 1 bytes to y"
    assert world.runs["write"] == 3


def test_direct_call_reraises_the_tools_exception(world: World, clock: FakeClock) -> None:
    run = world.tools()[2]
    guard = tg.Guard(tools=[*world.tools()[:2], run], clock=clock)
    with guard.task("t") as task, pytest.raises(RuntimeError, match="exploded"):
        run(command="boom")
    assert task.history[-1].result.error_type == "RuntimeError"


def test_unknown_tool_is_invalid_not_a_crash(guard: tg.Guard) -> None:
    r = guard.task("t").call("nope", {})
    assert r.decision is D.INVALID and "grep_search" in r.content


def test_unknown_tools_are_counted_halted_and_laddered(clock: FakeClock) -> None:
    """A name no tool has is never run, but it is still a call: budgets count it, a halted
    task raises on it, and a model repeating it is stopped by the ladder."""
    @tg.readonly
    def lookup(key: str) -> str:
        return "v"

    budgeted = tg.Guard(tg.Policy(budget=BudgetPolicy(max_tool_calls=2)), [lookup], clock=clock)
    task = budgeted.task("t")
    assert task.call("nope", '{"a": 1}').decision is D.INVALID
    assert task.call("lookup", {"key": "k"}).executed
    with pytest.raises(tg.BudgetExceeded):
        task.call("nope", '{"a": 2}')
    with pytest.raises(tg.BudgetExceeded):  # halted: even an unknown name raises
        task.call("other", {})
    # names no tool has share one counter (they come from the model)
    assert task.usage.per_tool == {"<unknown tools>": 2, "lookup": 1}

    looping = tg.Guard(tools=[lookup], clock=clock).task("u")
    for _ in range(4):
        assert looping.call("nope", {"a": 1}).decision is D.INVALID
    with pytest.raises(tg.RepeatedToolCalls):  # the fifth: readonly halt_at
        looping.call("nope", {"a": 1})


def test_batch_identical_calls_execute_once(guard: tg.Guard, world: World) -> None:
    task = guard.task("t")
    rs = task.call_batch([
        ("grep_search", {"pattern": "a"}),
        ("grep_search", '{"pattern": "a"}'),
        ("write_file", {"path": "p", "content": "c"}),
        ("grep_search", {"pattern": "b"}),
    ])
    assert [r.decision for r in rs] == [D.ALLOW, D.CACHED, D.ALLOW, D.ALLOW]
    assert rs[1].content == rs[0].content
    assert world.runs["grep"] == 2


def test_observe_mode_runs_everything_and_reports_what_it_would_do(
    world: World, clock: FakeClock
) -> None:
    guard = tg.Guard(tg.Policy(mode=tg.Mode.OBSERVE), world.tools(), clock=clock)
    task = guard.task("t")
    with capture_audit(guard) as events:
        rs = [task.call("write_file", {"path": "a", "content": "1"}) for _ in range(6)]
    assert world.runs["write"] == 6 and not task.halted
    assert all(r.decision is D.ALLOW and r.notice is None for r in rs)
    assert [r.observed for r in rs][:4] == [D.ALLOW, D.CACHED, D.CACHED, D.HALT]
    done = [e for e in events if e.transition == "executing->planning"]
    assert [e.extra.get("observed") for e in done][:2] == ["allow", "cached"]


def test_off_mode_passes_through_and_warns_once(world: World, clock: FakeClock,
                                                caplog: pytest.LogCaptureFixture) -> None:
    guard = tg.Guard(tg.Policy(mode=tg.Mode.OFF), world.tools(), clock=clock)
    task = guard.task("t")
    for _ in range(6):
        assert task.call("write_file", {"path": "a", "content": "1"}).decision is D.ALLOW
    assert world.runs["write"] == 6
    assert sum("not guarded" in r.message for r in caplog.records) == 1


def test_reload_policy_swaps_atomically(world: World, clock: FakeClock) -> None:
    guard = tg.Guard(tools=world.tools(), clock=clock)
    task = guard.task("t")
    task.call("grep_search", {"pattern": "x"})
    strict = tg.Policy(ladder=LadderPolicy(readonly=tg.Policy().ladder.mutating))
    guard.reload_policy(strict)
    assert guard.policy is strict
    assert task.call("grep_search", {"pattern": "x"}).decision is D.WARN  # state kept


def test_strict_tools_rejects_unregistered_policy_tools(world: World) -> None:
    policy = tg.Policy(tools={"ghost": ToolPolicy(max_calls=1), "phantom": ToolPolicy()})
    with pytest.raises(tg.PolicyError) as info:
        tg.Guard(policy, world.tools())
    assert [p.path for p in info.value.problems] == ["tools.ghost", "tools.phantom"]
    tg.Guard(policy.model_copy(update={"strict_tools": False}), world.tools())
    tg.Guard(policy, world.tools(), strict_tools=False)


def test_current_idempotency_key_inside_a_tool(clock: FakeClock) -> None:
    seen: list[str | None] = []

    @tg.mutating
    def pay(order: str) -> str:
        seen.append(tg.current_idempotency_key())
        return "paid"

    guard = tg.Guard(tools=[pay], clock=clock)
    r = guard.task("t").call("pay", {"order": "o"})
    assert r.idempotency_key == f"t:pay:{r.args_hash}"
    (forwarded,) = seen  # the guard's key and the execution it belongs to
    assert forwarded is not None and forwarded.startswith(f"{r.idempotency_key}:")
    assert tg.current_idempotency_key() is None


async def test_async_tools_and_async_direct_calls(clock: FakeClock) -> None:
    runs: list[str] = []

    @tg.mutating
    async def send(to: str) -> str:
        await asyncio.sleep(0)
        runs.append(to)
        return f"sent to {to}"

    @tg.readonly
    def lookup(key: str) -> str:
        return "v"

    guard = tg.Guard(tools=[send, lookup], clock=clock)
    async with guard.task("t") as task:
        assert (await task.acall("send", {"to": "a"})).decision is D.ALLOW
        assert (await task.acall("send", {"to": "a"})).decision is D.CACHED
        assert (await task.acall("lookup", {"key": "k"})).content == "v"
        assert await send(to="b") == "sent to b"
        assert await send(to="b") == "sent to b"
        rs = await task.acall_batch([("send", {"to": "c"}), ("send", {"to": "c"})])
        assert [r.decision for r in rs] == [D.ALLOW, D.CACHED]
    assert runs == ["a", "b", "c"]
    assert await send(to="a") == "sent to a"  # outside the task: plain


def test_internal_bug_surfaces_as_toolguard_error(guard: tg.Guard,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import toolguard.engine._path as path  # the stage that calls the decision core

    def broken(*_: Any) -> Any:
        raise KeyError("oops")

    monkeypatch.setattr(path, "decide", broken)
    task = guard.task("t")
    with pytest.raises(tg.ToolGuardError, match="internal error") as info:
        task.call("grep_search", {"pattern": "x"})
    assert isinstance(info.value.__cause__, KeyError)
    assert len(task.history) == 0  # never a half-recorded call


def test_task_end_is_an_audit_transition(guard: tg.Guard) -> None:
    with capture_audit(guard) as events:
        with guard.task("ok"):
            pass
        def looping() -> None:
            with guard.task("looping") as task:
                decisions(task, "grep_search", {"pattern": "x"}, 4)
                task.call("grep_search", {"pattern": "x"})

        with pytest.raises(tg.RepeatedToolCalls):
            looping()
    ends = [(e.task_id, e.transition) for e in events if e.transition.startswith("planning->")]
    assert ends == [("ok", "planning->completed"), ("looping", "planning->failed")]


def test_same_arguments_to_different_tools_are_different_calls(clock: FakeClock) -> None:
    """Regression: the ladder once counted by the arguments hash alone, so reading a
    reservation and then cancelling it counted as a repeat."""

    @tg.readonly
    def get_reservation(reservation_id: str) -> str:
        return "details"

    @tg.mutating
    def cancel_reservation(reservation_id: str) -> str:
        return "cancelled"

    @tg.readonly
    def get_invoice(reservation_id: str) -> str:
        return "invoice"

    guard = tg.Guard(tools=[get_reservation, cancel_reservation, get_invoice], clock=clock)
    task = guard.task("t")
    args = {"reservation_id": "R1"}
    results = [task.call(name, args) for name in
               ("get_reservation", "get_invoice", "cancel_reservation", "get_invoice")]
    assert [r.count for r in results] == [1, 1, 1, 1]
    assert [r.decision for r in results] == [D.ALLOW] * 4


@pytest.mark.parametrize("mode", [tg.Mode.OBSERVE, tg.Mode.OFF])
def test_unreadable_arguments_never_run_in_any_mode(mode: tg.Mode, clock: FakeClock) -> None:
    """Regression: observe/off mode ran a tool with its default arguments when the model's
    JSON did not parse."""
    ran: list[tuple[str, bool]] = []

    @tg.mutating
    def delete_files(pattern: str = "*", dry_run: bool = False) -> str:
        ran.append((pattern, dry_run))
        return "deleted"

    task = tg.Guard(tg.Policy(mode=mode), [delete_files], clock=clock).task("t")
    r = task.call("delete_files", '{"pattern": "*.tmp", "dry_run": tru')
    assert r.decision is D.INVALID and not r.executed and ran == []
    assert task.call("delete_files", '{"pattern": "*.tmp"}').executed  # readable: runs


def test_a_bound_method_is_a_tool_without_self(clock: FakeClock) -> None:
    class Repo:
        def __init__(self) -> None:
            self.pushed: list[str] = []

        @tg.mutating
        def push(self, branch: str) -> str:
            """Push a branch."""
            self.pushed.append(branch)
            return f"pushed {branch}"

    repo, other = Repo(), Repo()
    guard = tg.Guard(tools=[repo.push], clock=clock)
    params = guard.tool_schemas()[0]["function"]["parameters"]
    assert params["required"] == ["branch"] and "self" not in params["properties"]
    task = guard.task("t")
    assert task.call("push", {"branch": "main"}).executed
    with task:
        assert repo.push("main") == "pushed main"  # guarded: answered from the cache
        assert other.push("main") == "pushed main"  # another object: not this tool
    assert repo.pushed == ["main"] and other.pushed == ["main"]


@pytest.mark.parametrize("bad", [float("nan"), 1.5, True, "50", -1])
def test_record_usage_rejects_non_integers(bad: Any, guard: tg.Guard) -> None:
    with pytest.raises(ValueError, match="integer"):
        guard.task("t").record_usage(input_tokens=bad)


def test_internal_error_after_execution_releases_the_claim(clock: FakeClock,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    """Regression: a failure while recording a mutating call's result left its claim behind,
    so every identical retry waited and failed with CallInProgress."""
    import toolguard.engine._record as record  # the stage that records the outcome

    @tg.mutating
    def write(path: str) -> str:
        return "written"

    policy = tg.Policy(idempotency=IdempotencyPolicy(wait_timeout_s=0.05))
    task = tg.Guard(policy, [write], clock=clock).task("t")
    real = record.value_digest  # type: ignore[attr-defined]
    monkeypatch.setattr(record, "value_digest", lambda v: 1 / 0)
    with pytest.raises(tg.ToolGuardError, match="internal error"):
        task.call("write", {"path": "a"})
    monkeypatch.setattr(record, "value_digest", real)
    retry = task.call("write", {"path": "a"})  # no CallInProgress: the claim was released
    assert retry.decision is not D.CACHED


def test_result_whose_repr_raises_is_still_recorded(clock: FakeClock) -> None:
    class Opaque:
        def __repr__(self) -> str:
            raise RuntimeError("no repr")

    @tg.mutating
    def make(name: str) -> Opaque:
        return Opaque()

    task = tg.Guard(tools=[make], clock=clock).task("t")
    first = task.call("make", {"name": "a"})
    assert first.executed and isinstance(first.value, Opaque)
    assert task.call("make", {"name": "a"}).decision is D.CACHED


def test_unknown_outcome_reason_without_an_approver(clock: FakeClock) -> None:
    @tg.mutating
    def slow_write(path: str) -> str:
        raise TimeoutError("no answer")

    task = tg.Guard(tools=[slow_write], clock=clock).task("t")
    task.call("slow_write", {"path": "a"})
    r = task.call("slow_write", {"path": "a"})
    assert not r.executed and "may already have happened" in r.reason
    assert "requires human approval" not in r.reason


def test_reload_policy_from_a_file_and_api_misuse(guard: tg.Guard) -> None:
    from tests.conftest import ROOT

    guard.reload_policy(ROOT / "policies" / "default.toml")
    assert guard.policy.budget.max_tool_calls == 50
    with pytest.raises(ValueError, match="non-empty string"):
        guard.task(5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="does not belong"):
        guard.task("t").approve(None)  # type: ignore[arg-type]


def test_typed_parameters_get_python_values_from_json(clock: FakeClock) -> None:
    """Regression: a tool typed with an Enum, datetime or dataclass got the raw JSON value."""
    seen: list[Any] = []

    @tg.mutating
    def paint(c: Color, at: dt.datetime, box: Box) -> str:
        seen.append((c, at, box))
        return c.value

    task = tg.Guard(tools=[paint], clock=clock).task("t")
    r = task.call("paint", '{"c": "red", "at": "2024-05-01T10:00:00Z", "box": {"width": 3}}')
    assert r.executed and r.value == "red"
    assert seen == [(Color.RED, dt.datetime(2024, 5, 1, 10, tzinfo=dt.timezone.utc), Box(3))]
    from toolguard.tools._coerce import coercing_call

    def plain(a: str, b: list[int] | None = None, c: dict[str, Any] | None = None) -> None: ...

    assert coercing_call(plain) is plain  # JSON-typed tools are called directly

    def rows(items: list[Point]) -> None: ...

    assert coercing_call(rows) is rows  # a TypedDict is a dict at run time


async def test_a_halt_in_an_async_batch_raises_after_every_call_finished(
        clock: FakeClock) -> None:
    log: list[str] = []

    @tg.mutating
    async def slow_write(x: int) -> str:
        log.append("start")
        await asyncio.sleep(0.1)
        log.append("done")
        return "written"

    @tg.readonly(max_calls=1)
    def lookup(key: str) -> str:
        return "v"

    task = tg.Guard(tools=[slow_write, lookup], clock=clock).task("t")
    task.call("lookup", {"key": "a"})  # its one allowed call
    with pytest.raises(tg.BudgetExceeded):
        await task.acall_batch([("slow_write", {"x": 1}), ("lookup", {"key": "b"})])
    assert log == ["start", "done"]  # the write finished (and was recorded) before the raise
    assert sorted(str(r.result.decision) for r in list(task.history)[-2:]) == ["allow", "halt"]


@pytest.mark.parametrize("path", ["warn", "cached"])
def test_a_tool_returning_none_gets_the_notice_alone(path: str) -> None:
    # allow gives content None; a notice on nothing is the notice, not "null" and a notice
    ran: list[int] = []

    def touch(name: str) -> None:
        ran.append(1)

    effect = tg.Effect.MUTATING if path == "cached" else tg.Effect.READONLY
    ladder = LadderPolicy(readonly=LadderThresholds(warn_at=2, block_at=9,
                                                        halt_at=10))
    guard = tg.Guard(tg.Policy(ladder=ladder),
                     [tg.ToolSpec(name="touch", func=touch, effect=effect)])
    task = guard.task("t")
    first = task.call("touch", {"name": "a"})
    assert first.decision is tg.Decision.ALLOW and first.content is None
    second = task.call("touch", {"name": "a"})
    assert second.decision is (tg.Decision.CACHED if path == "cached" else tg.Decision.WARN)
    assert second.notice
    assert second.content == f"[toolguard] {second.notice}"
    assert second.value is None
    assert len(ran) == (1 if path == "cached" else 2)
    # the agent-loop helpers send the same text
    reply = {"role": "assistant", "tool_calls": [
        {"id": "c1", "type": "function",
         "function": {"name": "touch", "arguments": '{"name": "a"}'}}]}
    [message] = task.run_tool_calls(reply)
    assert not message["content"].startswith("null")
    assert "[toolguard]" in message["content"]


@pytest.mark.parametrize("how", ["decorator", "policy"])
def test_acall_runs_an_inline_sync_tool_on_the_loop_thread(how: str) -> None:
    """A sync tool declared inline (decorator option or policy key) runs on the event
    loop's thread under ``acall``; an undeclared one runs in a worker thread."""
    import asyncio
    import threading

    def where(x: int) -> bool:
        return threading.current_thread() is threading.main_thread()

    inline = tg.readonly(inline=True)(where) if how == "decorator" else tg.readonly(where)

    def other(x: int) -> bool:
        return threading.current_thread() is threading.main_thread()

    policy = tg.load_policy_dict({"tools": {"where": {"inline": True}}} if how == "policy"
                                 else {})
    guard = tg.Guard(policy, tools=[inline, tg.readonly(other)])
    task = guard.task("inline")
    assert asyncio.run(task.acall("where", {"x": 1})).value is True
    assert asyncio.run(task.acall("other", {"x": 1})).value is False
    assert guard._config.entries["where"].settings.sources["inline"] == (
        "decorator" if how == "decorator" else "<dict>")


def test_inline_must_be_a_bool() -> None:
    with pytest.raises(tg.PolicyError, match="inline"):
        tg.readonly(inline="yes")(lambda x: x)  # type: ignore[call-overload]
