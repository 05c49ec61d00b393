"""``Guard(...)`` refuses, at construction, arguments it cannot use, naming what it takes;
``Guard(policy=)`` takes what ``reload_policy`` takes (one helper serves both)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import toolguard as tg

POLICY = """
[budget]
max_tool_calls = 7
"""


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    path = tmp_path / "p.toml"
    path.write_text(POLICY)
    return path


@pytest.mark.parametrize("as_path", [str, Path])
def test_the_guard_takes_a_policy_file_path_as_reload_policy_does(
        policy_file: Path, as_path: Any) -> None:
    guard = tg.Guard(policy=as_path(policy_file))
    assert guard.policy.budget.max_tool_calls == 7
    assert guard.policy.sources == (str(policy_file),)
    reloaded = tg.Guard()
    reloaded.reload_policy(as_path(policy_file))
    assert reloaded.policy == guard.policy


def test_a_policy_path_that_is_invalid_is_a_policy_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[budget]\nmax_tool_calls = 0\n")
    with pytest.raises(tg.PolicyError, match=r"budget\.max_tool_calls"):
        tg.Guard(policy=str(bad))


@pytest.mark.parametrize("value", [{"budget": {"max_tool_calls": 3}}, 42, ["p.toml"], b"p.toml"])
def test_anything_else_is_a_type_error_saying_what_is_taken(value: Any) -> None:
    for build in (lambda: tg.Guard(policy=value), lambda: tg.Guard().reload_policy(value)):
        with pytest.raises(TypeError, match=r"takes a toolguard\.Policy or a policy file's "
                                            rf"path \(str or os\.PathLike\), got "
                                            rf"{type(value).__name__}"):
            build()


def test_a_mapping_is_pointed_to_load_policy_dict() -> None:
    with pytest.raises(TypeError, match=r"load_policy_dict"):
        tg.Guard(policy={"budget": {}})  # type: ignore[arg-type]


async def _async_approver(request: tg.ApprovalRequest) -> tg.ApprovalDecision:
    return tg.approve()


class _CountingSink:
    def __init__(self) -> None:
        self.events: list[tg.AuditEvent] = []

    def __call__(self, event: tg.AuditEvent) -> None:
        self.events.append(event)


@pytest.mark.parametrize("approver", ["notcallable", 42, ["a"]])
def test_an_approver_that_is_not_callable_is_refused_at_construction(approver: Any) -> None:
    with pytest.raises(TypeError, match=r"Guard\(approver=\) must be a callable taking an "
                                        r"ApprovalRequest"):
        tg.Guard(approver=approver)


def test_an_approver_that_takes_no_request_is_refused() -> None:
    with pytest.raises(TypeError, match="cannot be called with one argument"):
        tg.Guard(approver=tg.approve)  # type: ignore[arg-type]


@pytest.mark.parametrize("audit", [["notasink"], [tg.MemorySink(), 3], "sink"])
def test_a_sink_that_is_not_callable_is_refused_at_construction(audit: Any) -> None:
    with pytest.raises(TypeError, match=r"Guard\(audit=\)(\[\d\])? (must be|takes) .*"
                                        "AuditEvent"):
        tg.Guard(audit=audit)


def test_a_single_sink_is_told_to_be_wrapped_in_a_list() -> None:
    with pytest.raises(TypeError, match=r"a single sink: pass audit=\[sink\]"):
        tg.Guard(audit=tg.MemorySink())  # type: ignore[arg-type]


def test_a_sink_that_takes_no_event_is_refused() -> None:
    with pytest.raises(TypeError, match=r"Guard\(audit=\)\[1\] must be .* cannot be called"):
        tg.Guard(audit=[tg.MemorySink(), lambda: None])  # type: ignore[list-item,misc]


def test_good_approvers_and_sinks_still_work() -> None:
    sink, memory = _CountingSink(), tg.MemorySink()

    @tg.requires_approval
    def pay(amount: int) -> str:
        return f"paid {amount}"

    guard = tg.Guard(tools=[pay], approver=lambda request: tg.approve(),
                     audit=(s for s in (sink, memory)))
    assert guard.task("t").call("pay", {"amount": 3}).content == "paid 3"
    assert sink.events and len(sink.events) == len(memory.events)
    tg.Guard(approver=_async_approver, audit=[print, tg.LoggingSink()])
