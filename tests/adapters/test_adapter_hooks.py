"""The two core hooks the adapters need: a per-call ``approver=`` (a framework's own human in
the loop) and ``resumed=`` (a framework re-running the attempt that went to review), plus the
adapters' shared pieces. No framework is imported here."""

from __future__ import annotations

import asyncio
import pickle
import sys
from typing import Any

import pytest

import toolguard as tg
from toolguard.adapters._common import as_decision, framework_halt, require
from toolguard.testing import auto_defer


def refund(order_id: str) -> str:
    return f"refunded {order_id}"


def guard(**kwargs: Any) -> tg.Guard:
    return tg.Guard(tools=[tg.requires_approval(refund)], **kwargs)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_per_call_approver_is_asked_instead_of_the_guards(mode: str) -> None:
    asked: list[tg.ApprovalRequest] = []

    def mine(request: tg.ApprovalRequest) -> tg.ApprovalDecision:
        asked.append(request)
        return tg.approve()

    task = guard().task("t")  # the guard's own approver is deny_all
    if mode == "sync":
        result = task.call("refund", {"order_id": "A1"}, approver=mine)
    else:
        result = asyncio.run(task.acall("refund", {"order_id": "A1"}, approver=mine))
    assert result.decision is tg.Decision.ALLOW and result.value == "refunded A1"
    assert [r.idempotency_key for r in asked] == [result.idempotency_key]
    # without it, the guard's approver decides as before
    assert task.call("refund", {"order_id": "B2"}).decision is tg.Decision.BLOCK


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_resumed_attempt_of_a_pending_call_is_not_counted_again(mode: str) -> None:
    task = guard().task("t")
    args = {"order_id": "A1"}

    def call(**kw: Any) -> tg.ToolResult:
        if mode == "sync":
            return task.call("refund", args, **kw)
        return asyncio.run(task.acall("refund", args, **kw))

    first = call(approver=auto_defer)
    assert first.decision is tg.Decision.REVIEW and first.count == 1
    # the framework resumes twice more without an answer, then with one: still attempt 1
    for _ in range(3):
        assert call(approver=auto_defer, resumed=True).count == 1
    done = call(approver=lambda _: tg.approve(), resumed=True)
    assert done.decision is tg.Decision.ALLOW and done.count == 1
    assert task.usage.tool_calls == 1
    # no approval pending any more: a resumed call counts as any call does
    again = call(resumed=True)
    assert again.decision is tg.Decision.CACHED and again.count == 2
    assert task.usage.tool_calls == 2


def test_without_resumed_a_model_retrying_a_pending_call_climbs_the_ladder() -> None:
    task = guard().task("t")
    counts = [task.call("refund", {"order_id": "A1"}, approver=auto_defer).count
              for _ in range(3)]
    assert counts == [1, 2, 3]
    with pytest.raises(tg.RepeatedToolCalls):
        task.call("refund", {"order_id": "A1"}, approver=auto_defer)


def test_resumed_reads_never_look_for_approvals() -> None:
    def lookup(q: str) -> str:
        return q

    task = tg.Guard(tools=[tg.readonly(lookup)]).task("t")
    assert [task.call("lookup", {"q": "x"}, resumed=True).count for _ in range(2)] == [1, 2]


class _FrameworkBubble(Exception):
    """Stands in for a framework's let-through base class (GraphBubbleUp, AgentsException)."""

    def __init__(self, *args: object) -> None:
        super().__init__(*args)
        self.run_data = None


def test_a_framework_halt_is_both_the_halt_and_the_frameworks_class() -> None:
    halt = tg.RepeatedToolCalls("looped", task_id="t", tool="grep", args={"q": "x"}, count=5)
    mixed = framework_halt(halt, _FrameworkBubble)
    assert isinstance(mixed, tg.RepeatedToolCalls) and isinstance(mixed, _FrameworkBubble)
    assert str(mixed) == str(halt) and mixed.count == 5 and mixed.args == {"q": "x"}
    assert mixed.halt is halt and mixed.run_data is None  # type: ignore[attr-defined]
    assert type(framework_halt(halt, _FrameworkBubble)) is type(mixed)  # one class per pair
    back = pickle.loads(pickle.dumps(mixed))
    assert type(back) is tg.RepeatedToolCalls and str(back) == str(halt)


@pytest.mark.parametrize(("answer", "verdict", "reason"), [
    ("approve", "approve", ""), (True, "approve", ""),
    ("reject", "reject", "rejected by the reviewer"), (False, "reject", "rejected by the reviewer"),
    ({"decision": "reject", "reason": "no"}, "reject", "no"),
    ({"type": "reject", "message": "nope"}, "reject", "nope"),
    ({"decision": "defer"}, "defer", "the reviewer deferred the decision"),
    ("yes please", "defer", "the reviewer's answer 'yes please' is not approve, reject or defer"),
    (tg.reject("x"), "reject", "x"),
])
def test_resume_answers_become_decisions(answer: Any, verdict: str, reason: str) -> None:
    assert as_decision(answer) == tg.ApprovalDecision(verdict, reason)  # type: ignore[arg-type]


def test_a_missing_framework_names_the_extra() -> None:
    with pytest.raises(ImportError, match=r"pip install 'agent-toolguard\[langchain\]'"):
        require("langchain", "no_such_framework_module")


def test_the_core_and_the_adapter_package_import_no_framework() -> None:
    import subprocess

    code = ("import sys, toolguard, toolguard.adapters, toolguard.adapters._common\n"
            "bad = [m for m in ('langchain', 'langgraph', 'agents', 'pydantic_ai')"
            " if m in sys.modules]\nassert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)
