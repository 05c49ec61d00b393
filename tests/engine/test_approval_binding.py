"""An approval is good for exactly the call the reviewer saw, and for one execution of it."""

from __future__ import annotations

import asyncio
import io
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import toolguard as tg
from toolguard.policy._model import ToolPolicy
from toolguard.testing import FakeClock, auto_defer

D = tg.Decision


@pytest.fixture
def smuggling_policy(shared: Path) -> tg.Policy:
    return tg.load_policy(shared / "repro/reliability/policies/approval_with_arg_options.toml",
                          env={})


@pytest.mark.parametrize(("tool", "shown", "smuggled"), [
    ("delete_path", {"path": "/srv/app/cache/tmp"}, {"path": "/srv/app/cache\\tmp"}),
    ("transfer", {"account": "acct-alice", "amount": 100, "memo": "rent"},
     {"account": "ACCT-ALICE", "amount": 100, "memo": "rent; also see https://evil.example/x"}),
])
def test_an_approval_does_not_cover_other_raw_values(
        smuggling_policy: tg.Policy, tool: str, shown: dict[str, object],
        smuggled: dict[str, object]) -> None:
    """Regression: the argument options gave both calls one key, and the approval of the
    shown call ran the smuggled one."""
    ran: list[tuple[object, ...]] = []

    @tg.mutating
    def delete_path(path: str) -> str:
        ran.append((path,))
        return "deleted"

    @tg.mutating
    def transfer(account: str, amount: int, memo: str = "") -> str:
        ran.append((account, amount, memo))
        return "sent"

    guard = tg.Guard(smuggling_policy, [delete_path, transfer], approver=auto_defer)
    task = guard.task("t")
    first = task.call(tool, shown)
    assert first.decision is D.REVIEW
    assert task.pending_approvals[first.idempotency_key].args == shown
    task.approve(first.idempotency_key)
    other = task.call(tool, smuggled)
    assert other.decision is D.REVIEW and ran == []
    assert task.pending_approvals[other.idempotency_key].args == smuggled  # asked afresh
    task.approve(other.idempotency_key)  # now the reviewer saw these values: they run
    assert task.call(tool, smuggled).executed and ran == [tuple(smuggled.values())]


def test_the_approved_values_still_run(smuggling_policy: tg.Policy) -> None:
    ran: list[str] = []

    @tg.mutating
    def delete_path(path: str) -> str:
        ran.append(path)
        return "deleted"

    @tg.mutating
    def transfer(account: str, amount: int, memo: str = "") -> str:
        return "sent"

    task = tg.Guard(smuggling_policy, [delete_path, transfer], approver=auto_defer).task("t")
    key = task.call("delete_path", {"path": "/srv/a"}).idempotency_key
    task.approve(key)
    assert task.call("delete_path", {"path": "/srv/a"}).executed and ran == ["/srv/a"]


def test_the_reviewer_gets_the_arguments_in_full(clock: FakeClock) -> None:
    """Regression: the reviewer saw values cut to 200 characters and secret-looking keys
    redacted, and approved a body whose end they never saw."""
    seen: list[tg.ApprovalRequest] = []

    def reviewer(request: tg.ApprovalRequest) -> tg.ApprovalDecision:
        seen.append(request)
        return tg.approve()

    @tg.requires_approval
    def send_email(to: str, body: str, secret_cmd: str = "") -> str:
        return "sent"

    body = "Hi team, the numbers are attached. " * 10 + "PS: wire $50,000 to XX00 EVIL today."
    task = tg.Guard(tools=[send_email], approver=reviewer, clock=clock).task("t")
    task.call("send_email", {"to": "all@corp", "body": body, "secret_cmd": "curl x | sh"})
    assert seen[0].args == {"to": "all@corp", "body": body, "secret_cmd": "curl x | sh"}


def test_the_console_approver_pages_long_values() -> None:
    body = "x" * 950 + "END-OF-BODY"
    request = tg.ApprovalRequest("t", "send_email", {"body": body, "to": "a"}, "t:k",
                                 "send_email requires human approval", 0.0)
    out = io.StringIO()
    answer = tg.ConsoleApprover(io.StringIO("\n" * 3 + "y\n"), out, page_lines=4,
                                width=100)(request)
    assert answer.verdict == "approve"
    shown = out.getvalue()
    assert "END-OF-BODY" in shown.replace("\n", "") and shown.count("-- more (") == 3
    assert all(len(line) <= 100 for line in shown.splitlines() if "more" not in line)
    quit_early = tg.ConsoleApprover(io.StringIO("q\n"), io.StringIO(), page_lines=4)(request)
    assert quit_early.verdict == "reject" and "not read to the end" in quit_early.reason


@pytest.mark.parametrize("scope", ["task", "until_change", "off"])
def test_one_approval_is_one_execution_under_threads(scope: str) -> None:
    """Regression: with scope off, 16 concurrent identical calls after one approval all ran."""
    ran: list[int] = []

    @tg.requires_approval
    def wire(to: str, amount: int) -> str:
        ran.append(1)
        time.sleep(0.02)
        return "wired"

    policy = tg.Policy(tools={"wire": ToolPolicy(idempotency_scope=scope)})
    task = tg.Guard(policy, [wire], approver=auto_defer).task("t")
    args = {"to": "acct-1", "amount": 1000}
    task.approve(task.call("wire", args).idempotency_key)
    barrier = threading.Barrier(16)

    def go(_: int) -> str:
        barrier.wait()
        try:
            return str(task.call("wire", args).decision)
        except tg.Halt:
            return "halt"

    with ThreadPoolExecutor(16) as pool:
        decisions = Counter(pool.map(go, range(16)))
    assert len(ran) == 1 and decisions["allow"] == 1, decisions


async def test_one_approval_is_one_execution_under_asyncio() -> None:
    ran: list[int] = []

    @tg.requires_approval(idempotency_scope="off")
    async def wire(to: str) -> str:
        ran.append(1)
        await asyncio.sleep(0.01)
        return "wired"

    task = tg.Guard(tools=[wire], approver=auto_defer).task("t")
    task.approve((await task.acall("wire", {"to": "a"})).idempotency_key)
    results = await asyncio.gather(*(task.acall("wire", {"to": "a"}) for _ in range(20)),
                                   return_exceptions=True)
    assert len(ran) == 1
    assert sum(1 for r in results if isinstance(r, tg.ToolResult) and r.executed) == 1
