"""The two-step call (``task.begin`` → ``pending.finish`` / ``fail`` / ``unknown``) gives
what ``task.call(..., run=)`` gives: random call sequences produce the same results, halts,
executions, history and store state, on a plain ``MemoryStore`` and on one passed request
tuples, with an audit sink or without, sync and async, and when the pending call is carried
to another task handle as JSON (a hook command's next process)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import toolguard as tg
from toolguard.engine._pending import attach
from toolguard.policy._model import IdempotencyPolicy, LadderPolicy, ToolPolicy
from toolguard.stores.memory import MemoryStore
from toolguard.testing import FakeClock
from toolguard.tools._context import CURRENT_KEY

from .test_fast_path import _CALLS, _POLICIES, _functions, _ladder, _run, _tools

_HOWS = ("begin", "abegin", "detach")
_STEPS = st.one_of(st.tuples(*_CALLS.wrapped_strategy.element_strategies,  # type: ignore[attr-defined]
                             st.sampled_from(_HOWS)),
                   st.sampled_from(["tick", "turn"]))


def _key(pending: tg.PendingCall) -> Any:
    """The idempotency-key context ``call(run=)`` gives its hook, so that what the tools
    note of it compares (a host's tool reads none)."""
    state = pending._begun.p  # type: ignore[union-attr]  # it runs: begun
    return CURRENT_KEY.set((state.key, state.origin or state.call_id))


def _two_step(loop: asyncio.AbstractEventLoop, task: tg.Task, func: Callable[..., Any],
              tool: str, args: Any, how: str) -> tg.ToolResult | str:
    """One call made in two steps: ``begin`` (``abegin``: under asyncio; ``detach``: its
    state carried as JSON through :func:`attach`), the tool run by the host, and its
    outcome reported."""
    if how == "abegin":
        return loop.run_until_complete(_async_two_step(task, func, tool, args))
    pending = task.begin(tool, args)
    if pending.result is not None:
        return pending.result
    token = _key(pending)
    try:
        value, failed = func(**pending.args), None
    except Exception as exc:
        value, failed = None, exc
    finally:
        CURRENT_KEY.reset(token)
    if how == "detach":
        again = attach(task, json.loads(json.dumps(pending.detach())))
        assert again is not None
        pending = again
    return pending.fail(failed) if failed is not None else pending.finish(value)


async def _async_two_step(task: tg.Task, func: Callable[..., Any], tool: str, args: Any
                          ) -> tg.ToolResult:
    pending = await task.abegin(tool, args)
    if pending.result is not None:
        return pending.result
    token = _key(pending)
    try:
        value = func(**pending.args)
    except Exception as exc:
        CURRENT_KEY.reset(token)
        return await pending.afail(exc)
    CURRENT_KEY.reset(token)
    return await pending.afinish(value)


def _with_run(loop: asyncio.AbstractEventLoop, task: tg.Task, func: Callable[..., Any],
              tool: str, args: Any, how: str) -> tg.ToolResult | str:
    """The same call made with ``call(run=)`` (``acall(run=)`` for ``abegin``)."""
    def hook(args: dict[str, Any]) -> Any:
        return func(**args)

    if how == "abegin":
        return loop.run_until_complete(task.acall(tool, args, run=hook))
    return task.call(tool, args, run=hook)


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(range(len(_POLICIES))), st.booleans(), st.lists(_STEPS, max_size=40))
@example(0, True, [("write", 1, False, "begin"), ("write", 1, False, "detach"),  # cached
                   ("slow", 1, False, "detach"), ("slow", 1, False, "begin"),  # review
                   ("search", 1, False, "abegin"), ("search", 2, False, "begin"),
                   ("search", "", False, "detach"), ("search", 3, True, "begin")])
@example(0, False, [("deploy", 1, False, "begin"), ("status", 1, False, "detach"),
                    ("flaky", 1, False, "abegin"), ("nope", 1, False, "detach")])
@example(2, True, [("flaky", 1, False, "begin"), ("flaky", 1, False, "detach"),
                   ("flaky", 1, False, "abegin"), ("flaky", 2, False, "begin")])
def test_two_steps_equal_call_with_run(policy: int, fast: bool, steps: list[Any]) -> None:
    assert (_run(_POLICIES[policy], steps, fast, one=_two_step)
            == _run(_POLICIES[policy], steps, fast, one=_with_run))


def _guard(clock: FakeClock | None = None, **policy: Any) -> tg.Guard:
    clock = clock or FakeClock(1000.0)
    return tg.Guard(tg.Policy(**policy), _tools(_functions([])), clock=clock,
                    store=MemoryStore(clock=clock))


def test_a_pending_call_says_what_the_host_does() -> None:
    """A warned call runs with its notice; a call that must not run carries its result and
    refuses an outcome; an outcome is reported once."""
    task = _guard(ladder=LadderPolicy(readonly=_ladder(2, 3, 4))).task("t")
    first = task.begin("search", {"q": 1})
    assert (first.result, first.decision, first.notice, first.args) == (
        None, tg.Decision.ALLOW, None, {"q": 1})
    assert first.finish("found 1").content == "found 1"
    with pytest.raises(RuntimeError, match="reported already"):
        first.finish("again")
    second = task.begin("search", {"q": 1})
    assert second.decision is tg.Decision.WARN and second.notice
    assert second.notice in second.finish("found 1").content
    third = task.begin("search", {"q": 1})
    assert third.result is not None and third.result.decision is tg.Decision.BLOCK
    with pytest.raises(RuntimeError, match="must not run"):
        third.finish("x")
    with pytest.raises(tg.RepeatedToolCalls):
        task.begin("search", {"q": 1})


def test_unknown_is_recorded_as_an_unknown_outcome() -> None:
    task = _guard().task("t")
    result = task.begin("write", {"q": 1}).unknown("the hook process was killed")
    assert result.is_error and "the outcome is unknown" in result.content
    again = task.begin("write", {"q": 1})  # review, which no approver answers: refused
    assert again.result is not None and "without a known outcome" in again.result.reason


@pytest.mark.parametrize("forwards", [False, True])
def test_a_pending_call_never_reported_becomes_an_unknown_outcome(forwards: bool) -> None:
    """Begun, never finished: past ``in_progress_ttl_s`` an identical call is not run as a
    fresh call but gets the unknown outcome's treatment: review (refused without an
    approver), or for a tool that forwards its idempotency key, the same execution again
    (the backend deduplicates by the key the lost call forwarded)."""
    clock = FakeClock(1000.0)
    task = _guard(clock, idempotency=IdempotencyPolicy(in_progress_ttl_s=30,
                                                        wait_timeout_s=0.01),
                  tools={"write": ToolPolicy(forwards_idempotency_key=True)} if forwards
                  else {}).task("t")
    lost = task.begin("write", {"q": 1})
    assert lost.result is None
    clock.advance(29)
    with pytest.raises(tg.CallInProgress):
        task.begin("write", {"q": 1})  # still running: the wait times out
    clock.advance(1)
    again = task.begin("write", {"q": 1})
    if forwards:
        assert again.result is None  # it runs, as the same execution (a repeat: counted)
    else:
        assert again.result is not None and again.result.decision is tg.Decision.BLOCK
        assert "without a known outcome" in again.result.reason


def test_approval_is_asked_at_begin() -> None:
    task = _guard(tools={"deploy": ToolPolicy(requires_approval=True)}).task("t")
    denied = task.begin("deploy", {"q": 1})
    assert denied.result is not None and denied.result.decision is tg.Decision.BLOCK  # deny_all
    approved = task.begin("deploy", {"q": 2}, approver=lambda request: tg.approve())
    assert approved.result is None
    assert approved.finish("deployed").decision is tg.Decision.ALLOW


@pytest.mark.parametrize("how", ["begin", "abegin"])
def test_mode_off_runs_every_call_in_two_steps_as_call_does(how: str) -> None:
    """With ``mode = "off"`` nothing is decided: every call runs (an allow with no notice)
    and its outcome is reported as ``call`` reports it."""
    guard = _guard(mode="off", ladder=LadderPolicy(readonly=_ladder(2, 3, 4)))
    task = guard.task("t")
    for _ in range(5):  # past every rung: nothing blocks
        if how == "abegin":
            pending = asyncio.run(task.abegin("search", {"q": 1}))
        else:
            pending = task.begin("search", {"q": 1})
        assert (pending.result, pending.decision, pending.notice) == (
            None, tg.Decision.ALLOW, None)
        assert pending.finish("found 1").content == "found 1"
    assert [r.result.content for r in task.history] == ["found 1"] * 5


def test_fail_takes_an_exception_only() -> None:
    pending = _guard().task("t").begin("search", {"q": 1})
    with pytest.raises(TypeError, match="unknown"):
        pending.fail(KeyboardInterrupt())  # type: ignore[arg-type]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_resumed_begin_is_the_attempt_that_waited_not_a_repeat(mode: str) -> None:
    # a framework that asks its own human (ADK's confirmation, a Strands interrupt) runs
    # the call again once answered: that run is the same attempt, as call(resumed=True) is
    policy = tg.load_policy_dict({"tools": {"refund": {"requires_approval": True}}})
    sink = tg.MemorySink()
    task = tg.Guard(policy, audit=[sink], strict_tools=False).task("t")

    def waiting(_: tg.ApprovalRequest) -> tg.ApprovalDecision:
        return tg.defer("waiting for the human")

    def approved(_: tg.ApprovalRequest) -> tg.ApprovalDecision:
        return tg.approve()

    args = {"order_id": "A1"}

    def begin(approver: Any, resumed: bool) -> tg.PendingCall:
        if mode == "sync":
            return task.begin("refund", args, approver=approver, resumed=resumed)
        return asyncio.run(task.abegin("refund", args, approver=approver, resumed=resumed))

    first = begin(waiting, False)
    assert first.result is not None and first.result.decision is tg.Decision.REVIEW
    again = begin(approved, True)
    assert again.result is None
    done = again.finish("refunded")
    assert done.decision is tg.Decision.ALLOW and done.count == 1
