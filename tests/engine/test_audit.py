"""Audit events, sinks and redaction (``toolguard.engine._audit``, emitted by the engine)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
import pickle
import re
import threading
from pathlib import Path
from typing import Any

import orjson
import pytest

import toolguard as tg
from toolguard.engine._audit import AuditSink, redact
from toolguard.hashing._redact import REDACTED
from toolguard.policy._model import AuditPolicy
from toolguard.testing import FakeClock, auto_approve, auto_defer

SECRET = "hunter2-s3cr3t"


def lookup(path: str, password: str = "", options: dict[str, Any] | None = None) -> str:
    """A read-only tool that takes a secret."""
    return f"read {path}"


def charge(amount: int, api_key: str) -> str:
    """An irreversible tool."""
    return f"charged {amount}"


def make_guard(
    clock: FakeClock, *sinks: AuditSink, policy: tg.Policy | None = None,
    approver: tg.Approver | None = None,
) -> tg.Guard:
    return tg.Guard(policy, tools=[tg.readonly(lookup), tg.requires_approval(charge)],
                    audit=sinks, clock=clock, approver=approver)


# -- event contents ---------------------------------------------------------------------------


def test_every_event_carries_the_call_context(clock: FakeClock) -> None:
    sink = tg.MemorySink()
    guard = make_guard(clock, sink)
    task = guard.task("task-1")
    args = {"path": "a.txt", "password": SECRET}
    result = task.call("lookup", args)
    clock.advance(5)
    task.call("lookup", args)
    # every executed call is two transitions: validating->executing, executing->planning
    assert [e.transition for e in sink.events] == ["validating->executing",
                                                   "executing->planning"] * 2
    assert [e.time for e in sink.events] == [1_000_000.0] * 2 + [1_000_005.0] * 2
    assert sink.events[0].duration_s == 0.0  # not yet executed
    events = sink.events[1::2]
    first = events[0]
    assert first.task_id == "task-1"
    assert first.call_id == result.call_id
    assert re.fullmatch(r"task-1#1@[0-9a-f]{8}", result.call_id)
    assert events[1].call_id == result.call_id.replace("#1@", "#2@")
    assert first.tool == "lookup"
    assert first.transition == "executing->planning"
    assert first.decision == "allow"
    assert first.reason == ""
    assert first.effect == "readonly"
    assert first.args_hash == tg.args_hash(args) == result.args_hash
    assert len(first.args_hash) == 32
    assert first.args == {"path": "a.txt", "password": REDACTED}
    assert [e.count for e in sink.events] == [1, 1, 2, 2]
    assert first.duration_s == result.duration_s
    assert first.duration_s > 0
    json.dumps(first.to_dict())


def test_transitions(clock: FakeClock) -> None:
    sink = tg.MemorySink()
    guard = make_guard(clock, sink, approver=auto_defer)
    task = guard.task("t")
    task.call("lookup", {"path": 1})  # invalid
    task.call("charge", {"amount": 3, "api_key": SECRET})  # approval deferred
    args = {"path": "same"}
    for _ in range(4):  # allow, allow, warn, block
        task.call("lookup", args)
    with pytest.raises(tg.RepeatedToolCalls):
        task.call("lookup", args)
    seen = [(e.tool, e.transition, e.decision) for e in sink.events]
    assert seen == [
        ("lookup", "validating->planning", "invalid"),
        ("charge", "validating->needs_review", "review"),  # the approver's answer
        ("charge", "validating->needs_review", "review"),  # the call's result
        ("lookup", "validating->executing", "allow"),
        ("lookup", "executing->planning", "allow"),
        ("lookup", "validating->executing", "allow"),
        ("lookup", "executing->planning", "allow"),
        ("lookup", "validating->executing", "warn"),
        ("lookup", "executing->planning", "warn"),
        ("lookup", "validating->planning", "block"),
        ("lookup", "validating->failed", "halt"),
    ]
    block, halt = sink.events[-2:]
    assert block.duration_s == 0.0
    assert (block.count, halt.count) == (4, 5)
    assert "same arguments" in halt.reason
    assert sink.events[1].reason == "approval: defer (waiting for a human decision)"
    assert sink.events[2].reason == ("charge requires human approval "
                                     "(waiting for a human decision)")


def test_approved_call_records_the_approval_then_the_execution(clock: FakeClock) -> None:
    sink = tg.MemorySink()
    task = make_guard(clock, sink, approver=auto_approve).task("t")
    assert task.call("charge", {"amount": 3, "api_key": SECRET}).decision is tg.Decision.ALLOW
    assert [(e.transition, e.reason) for e in sink.events] == [
        ("validating->needs_review", "approval: approve"),
        ("validating->executing", ""),
        ("executing->planning", ""),
    ]
    assert all(e.args["api_key"] == REDACTED for e in sink.events)


def test_resume_is_audited(clock: FakeClock) -> None:
    sink = tg.MemorySink()
    task = make_guard(clock, sink).task("t")
    task.resume()
    assert sink.events[-1].transition == "halted->planning"
    assert sink.events[-1].task_id == "t"


# -- sinks ------------------------------------------------------------------------------------


def test_any_callable_is_a_sink(clock: FakeClock) -> None:
    received: list[tg.AuditEvent] = []
    task = make_guard(clock, received.append).task("t")
    task.call("lookup", {"path": "x"})
    assert len(received) == 2
    assert all(isinstance(e, tg.AuditEvent) for e in received)


def test_a_failing_sink_does_not_break_the_call(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(event: tg.AuditEvent) -> None:
        raise RuntimeError("disk full")

    after = tg.MemorySink()
    task = make_guard(clock, broken, after).task("t")
    with caplog.at_level(logging.ERROR, logger="toolguard"):
        result = task.call("lookup", {"path": "x"})
    assert result.decision is tg.Decision.ALLOW
    assert result.content == "read x"
    assert len(after.events) == 2  # later sinks still receive every event
    failures = [r for r in caplog.records if "audit sink" in r.getMessage()]
    assert len(failures) == 2
    assert failures[0].levelno == logging.ERROR
    assert failures[0].exc_info is not None
    assert "disk full" in str(failures[0].exc_info[1])


def test_jsonl_sink_writes_one_flushed_line_per_event(clock: FakeClock, tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    with tg.JsonlSink(path) as sink:
        task = make_guard(clock, sink).task("t")
        task.call("lookup", {"path": "a", "password": SECRET})
        # read while the sink is still open: the line is already on disk
        lines = path.read_text(encoding="utf-8").splitlines()
        assert len(lines) == 2
        assert json.loads(lines[1])["transition"] == "executing->planning"
        task.call("lookup", {"path": 1})
        lines = path.read_text(encoding="utf-8").splitlines()
        assert len(lines) == 3
    records = [json.loads(line) for line in lines]
    assert records[1]["args"] == {"path": "a", "password": REDACTED}
    assert records[1]["time"] == 1_000_000.0
    assert records[2]["decision"] == "invalid"
    assert SECRET not in path.read_text(encoding="utf-8")


def test_jsonl_lines_splice_the_arguments_serialized_once_per_call(
        clock: FakeClock, tmp_path: Path) -> None:
    """The nested arguments of a call are redacted into one JSON text, spliced into each
    line as it is: the lines are byte for byte what serializing each event with a plain
    dict writes, and each event decodes a copy of its own."""
    from toolguard.engine._audit import _jsonl

    memory = tg.MemorySink()
    rows = [{"id": k, "name": f"row {k}", "password": SECRET, "tags": ["a", "b"]}
            for k in range(30)]
    with tg.JsonlSink(tmp_path / "audit.jsonl") as sink:
        task = make_guard(clock, memory, sink).task("t")
        task.call("lookup", {"path": "a", "options": {"rows": rows}})
        task.call("lookup", {"path": "b", "options": {"bad": "\ud800", "token": SECRET}})
    lines = (tmp_path / "audit.jsonl").read_bytes().splitlines(keepends=True)
    assert lines == [_jsonl(dataclasses.replace(e, args=dict(e.args))) for e in memory.events]
    first, final = memory.events[:2]
    assert first.args == final.args and first.args is not final.args
    first.args["options"]["rows"].clear()  # a sink changing one event's copy
    assert final.args["options"]["rows"][0]["password"] == REDACTED
    assert SECRET.encode() not in b"".join(lines)
    assert json.loads(lines[1])["args"]["options"]["rows"][0]["password"] == REDACTED


@pytest.mark.parametrize("jsonl_first", [True, False])
def test_a_jsonl_line_is_the_event_other_sinks_receive(
        clock: FakeClock, tmp_path: Path, jsonl_first: bool) -> None:
    """A JSONL sink is given its line serialized from the fields the event is made of, not
    the event: whichever sink comes first, the line is byte for byte the event's, for flat
    and nested arguments, a string JSON cannot hold and an event of the task."""
    from toolguard.engine._audit import _jsonl

    memory = tg.MemorySink()
    with tg.JsonlSink(tmp_path / "audit.jsonl") as sink:
        sinks = (sink, memory) if jsonl_first else (memory, sink)
        with make_guard(clock, *sinks).task("t") as task:
            task.call("lookup", {"path": "a", "password": SECRET})
            task.call("lookup", {"path": "\ud800"})
            task.call("lookup", {"path": "b", "options": {"deep": [{"token": SECRET}]}})
            task.call("lookup", {"path": 1})
    lines = (tmp_path / "audit.jsonl").read_bytes().splitlines(keepends=True)
    assert len(lines) == len(memory.events) == 7
    assert lines == [_jsonl(dataclasses.replace(e, args=dict(e.args))) for e in memory.events]
    assert memory.events[-1].transition == "planning->completed"
    assert b"\\ud800" in lines[2]
    assert SECRET.encode() not in b"".join(lines)
    assert all(e.args["path"] == "a" and e.args["password"] == REDACTED
               for e in memory.events[:2])


def test_events_of_arguments_the_tool_changes_in_place_show_them_as_called(
        clock: FakeClock, tmp_path: Path) -> None:
    """Nested arguments with nothing to redact are held as their JSON text: what the
    tool does to its arguments afterwards changes neither the lines nor ``event.args``."""
    def write_rows(table: str, rows: list[dict[str, Any]]) -> int:
        rows[0]["name"] = "changed by the tool"
        rows.append({"id": 99, "name": "added"})
        return len(rows)

    memory, sink = tg.MemorySink(), tg.JsonlSink(tmp_path / "a.jsonl")
    guard = tg.Guard(None, tools=[tg.mutating(write_rows)], audit=[memory, sink], clock=clock)
    rows: list[dict[str, Any]] = [{"id": 1, "name": "ann"}, {"id": 2, "name": "bob"}]
    with sink:
        guard.task("t").call("write_rows", {"table": "people", "rows": rows})
    called = {"rows": [{"id": 1, "name": "ann"}, {"id": 2, "name": "bob"}], "table": "people"}
    assert rows[0]["name"] == "changed by the tool"
    assert [e.args for e in memory.events] == [called, called]
    assert [e.to_dict()["args"] for e in memory.events] == [called, called]
    lines = (tmp_path / "a.jsonl").read_bytes().splitlines()
    assert [json.loads(line)["args"] for line in lines] == [called, called]
    event = memory.events[-1]
    assert orjson.loads(orjson.dumps(event))["args"] == called  # a sink of its own: orjson
    assert pickle.loads(pickle.dumps(event)) == event
    assert dataclasses.replace(event, reason="r").args == called


def test_flat_arguments_a_hook_changes_in_place_are_logged_as_called(
        clock: FakeClock, tmp_path: Path) -> None:
    """Flat arguments are copied once per call before the first event (also when their
    text was decided unchanged before, the repeated call): a ``run=`` hook changing the
    dict it is passed changes neither line of the call."""
    def read(path: str, limit: int) -> str:  # no defaults: the hash's text is redaction's
        return path

    def hook(args: dict[str, Any]) -> str:
        args["path"] = "changed by the hook"
        args["token"] = SECRET
        return "done"

    with tg.JsonlSink(tmp_path / "a.jsonl") as sink:
        task = tg.Guard(None, tools=[tg.readonly(read)], audit=[sink], clock=clock).task("t")
        for _ in range(3):
            task.call("read", {"path": "a.txt", "limit": 5}, run=hook)
    lines = (tmp_path / "a.jsonl").read_bytes().splitlines()
    assert len(lines) >= 6
    assert all(json.loads(line)["args"] == {"path": "a.txt", "limit": 5} for line in lines)
    assert SECRET.encode() not in b"".join(lines)


def test_jsonl_sink_appends(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    path.write_text('{"earlier": true}\n', encoding="utf-8")
    event = tg.AuditEvent(time=1.0, task_id="t", call_id="t#1", tool="x", transition="a->b")
    with tg.JsonlSink(path) as sink:
        sink(event)
    with tg.JsonlSink(path) as sink:
        sink(event)
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 3
    assert json.loads(lines[0]) == {"earlier": True}
    assert json.loads(lines[2]) == event.to_dict()


def test_jsonl_sink_serializes_non_json_values(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    event = tg.AuditEvent(time=1.0, task_id="t", call_id="", tool="x", transition="a->b",
                          extra={"obj": object(), "set": {1}})
    with tg.JsonlSink(path) as sink:
        sink(event)
    record = json.loads(path.read_text(encoding="utf-8"))
    assert record["extra"]["obj"].startswith("<object object")
    assert record["extra"]["set"] == "{1}"


def test_jsonl_sink_is_safe_across_threads(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    threads_n, events_n = 8, 200
    barrier = threading.Barrier(threads_n)
    # long values make interleaved (torn) writes visible as invalid JSON
    padding = "x" * 2000

    with tg.JsonlSink(path) as sink:
        def work(n: int) -> None:
            barrier.wait()
            for i in range(events_n):
                sink(tg.AuditEvent(time=float(i), task_id=f"thread-{n}", call_id=f"{n}#{i}",
                                   tool="t", transition="a->b", reason=padding))

        threads = [threading.Thread(target=work, args=(n,)) for n in range(threads_n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b""
    records = [json.loads(line) for line in lines[:-1]]
    assert len(records) == threads_n * events_n
    assert {r["call_id"] for r in records} == {
        f"{n}#{i}" for n in range(threads_n) for i in range(events_n)
    }
    for n in range(threads_n):  # each thread's events in its own order
        mine = [r["time"] for r in records if r["task_id"] == f"thread-{n}"]
        assert mine == sorted(mine)


def test_logging_sink_levels(clock: FakeClock, caplog: pytest.LogCaptureFixture) -> None:
    task = make_guard(clock, tg.LoggingSink(), approver=auto_defer).task("t")
    with caplog.at_level(logging.INFO, logger="toolguard.audit"):
        task.call("lookup", {"path": "x", "password": SECRET})  # allow
        task.call("lookup", {"path": 1})  # invalid
        task.call("charge", {"amount": 1, "api_key": SECRET})  # review
        for _ in range(3):  # allow, warn, block
            task.call("lookup", {"path": "x", "password": SECRET})
        with pytest.raises(tg.Halt):
            task.call("lookup", {"path": "x", "password": SECRET})
    records = [r for r in caplog.records if r.name == "toolguard.audit"]
    by_decision: dict[str, set[int]] = {}
    for r in records:
        audit: dict[str, Any] = r.audit  # type: ignore[attr-defined]
        by_decision.setdefault(audit["decision"], set()).add(r.levelno)
    assert by_decision == {
        "allow": {logging.INFO},
        "warn": {logging.INFO},
        "invalid": {logging.WARNING},
        "review": {logging.WARNING},
        "block": {logging.WARNING},
        "halt": {logging.WARNING},
    }
    halt = records[-1]
    assert halt.getMessage().startswith("t lookup validating->failed halt: ")
    assert SECRET not in caplog.text


def test_logging_sink_uses_the_given_logger(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("my.app.audit")
    event = tg.AuditEvent(time=1.0, task_id="t", call_id="", tool="x", transition="a->b",
                          decision="allow")
    with caplog.at_level(logging.INFO, logger="my.app.audit"):
        tg.LoggingSink(logger)(event)
    assert [(r.name, r.levelno, r.getMessage()) for r in caplog.records] == [
        ("my.app.audit", logging.INFO, "t x a->b allow")
    ]


def test_logging_sink_skips_disabled_levels(caplog: pytest.LogCaptureFixture) -> None:
    event = tg.AuditEvent(time=1.0, task_id="t", call_id="", tool="x", transition="a->b",
                          decision="allow")
    with caplog.at_level(logging.WARNING, logger="toolguard.audit"):
        tg.LoggingSink()(event)
    assert caplog.records == []


# -- redaction --------------------------------------------------------------------------------

NESTED_ARGS: dict[str, Any] = {
    "path": "p",
    "password": SECRET,
    "options": {
        "Authorization": f"Bearer {SECRET}",
        "headers": [{"X-Api_Key-Id": SECRET}, {"ok": "visible"}],
        "my_TOKEN": SECRET,
        "client_secret": {"nested": SECRET},
        "plain": "visible",
    },
}


def test_redaction_in_events_at_any_depth(clock: FakeClock) -> None:
    sink = tg.MemorySink()
    make_guard(clock, sink).task("t").call("lookup", NESTED_ARGS)
    args = sink.events[0].args
    assert args == {
        "path": "p",
        "password": REDACTED,
        "options": {
            "Authorization": REDACTED,
            "headers": [{"X-Api_Key-Id": REDACTED}, {"ok": "visible"}],
            "my_TOKEN": REDACTED,
            "client_secret": REDACTED,
            "plain": "visible",
        },
    }
    assert SECRET not in repr(sink.events[0])


def test_redaction_does_not_change_what_the_tool_receives(clock: FakeClock) -> None:
    received: list[dict[str, Any]] = []

    def login(user: str, password: str) -> str:
        received.append({"user": user, "password": password})
        return "ok"

    guard = tg.Guard(tools=[tg.readonly(login)], audit=[tg.MemorySink()], clock=clock)
    guard.task("t").call("login", {"user": "u", "password": SECRET})
    assert received == [{"user": "u", "password": SECRET}]


def test_redaction_in_the_halt_exception(clock: FakeClock) -> None:
    task = make_guard(clock).task("t")
    for _ in range(4):
        task.call("lookup", NESTED_ARGS)
    with pytest.raises(tg.RepeatedToolCalls) as info:
        task.call("lookup", NESTED_ARGS)
    halt = info.value
    assert isinstance(halt.args, dict)
    assert halt.args["password"] == REDACTED
    assert halt.args["options"]["Authorization"] == REDACTED
    assert halt.args["options"]["headers"][0]["X-Api_Key-Id"] == REDACTED
    assert halt.arguments == halt.args
    assert SECRET not in str(halt)
    assert SECRET not in repr(halt)
    assert "password='[REDACTED]'" in str(halt)
    assert (halt.task_id, halt.tool, halt.count) == ("t", "lookup", 5)
    assert halt.args_hash == tg.args_hash(NESTED_ARGS)


def test_the_approver_sees_what_the_audit_redacts(clock: FakeClock) -> None:
    """Redaction is for audit and logs; the reviewer approves the real values."""
    seen: list[tg.ApprovalRequest] = []

    def approver(request: tg.ApprovalRequest) -> tg.ApprovalDecision:
        seen.append(request)
        return tg.approve()

    sink = tg.MemorySink()
    make_guard(clock, sink, approver=approver).task("t").call(
        "charge", {"amount": 5, "api_key": SECRET})
    assert seen[0].args == {"amount": 5, "api_key": SECRET}
    assert sink.events and all(SECRET not in repr(e) for e in sink.events)


def test_long_values_are_truncated(clock: FakeClock) -> None:
    sink = tg.MemorySink()
    policy = tg.Policy(audit=AuditPolicy(max_value_chars=10))
    long = "abcdefghij" * 5
    make_guard(clock, sink, policy=policy).task("t").call(
        "lookup", {"path": long, "options": {"deep": [long, "short"]}})
    assert sink.events[0].args == {
        "path": "abcdefghij…[50 chars]",
        "options": {"deep": ["abcdefghij…[50 chars]", "short"]},
    }


def test_custom_redact_patterns_replace_the_defaults(clock: FakeClock) -> None:
    sink = tg.MemorySink()
    policy = tg.Policy(audit=AuditPolicy(redact=("ssn", r"^path$")))
    make_guard(clock, sink, policy=policy).task("t").call(
        "lookup", {"path": "p", "password": "pw",
                   "options": {"SSN_last4": "1234", "pathname": "kept"}})
    assert sink.events[0].args == {
        "path": REDACTED,
        "password": "pw",
        "options": {"SSN_last4": REDACTED, "pathname": "kept"},
    }


def test_no_redaction_when_patterns_are_empty(clock: FakeClock) -> None:
    sink = tg.MemorySink()
    policy = tg.Policy(audit=AuditPolicy(redact=()))
    make_guard(clock, sink, policy=policy).task("t").call(
        "lookup", {"path": "p", "password": "pw"})
    assert sink.events[0].args == {"path": "p", "password": "pw"}


def test_redact_function() -> None:
    pattern = AuditPolicy().redact_pattern
    assert pattern is not None
    out = redact({"token": [1, 2], "t": ("a", {"secret": 1}), "n": None, "o": object()},
                 pattern, 200)
    assert out["token"] == REDACTED
    assert out["t"] == ["a", {"secret": REDACTED}]
    assert out["n"] is None
    assert out["o"].startswith("<object object")
    assert redact({"x": "y" * 20}, None, 8) == {"x": "yyyyyyyy…[20 chars]"}


def test_invalid_secret_is_not_leaked_through_the_reason(clock: FakeClock) -> None:
    sink = tg.MemorySink()
    schema = {"type": "object", "properties": {"password": {"type": "string", "maxLength": 4}}}

    def login(**kwargs: Any) -> str:
        return "ok"

    guard = tg.Guard(tools=[tg.readonly(args_schema=schema)(login)], audit=[sink], clock=clock)
    result = guard.task("t").call("login", {"password": SECRET})
    assert result.decision is tg.Decision.INVALID
    assert SECRET not in repr(sink.events[0])


def test_a_nested_secret_is_not_leaked_through_a_validation_message(clock: FakeClock) -> None:
    """The message quotes the offending value, here a list holding the secret two levels
    down: it reaches neither the model, nor the audit event, nor the log."""
    sink = tg.MemorySink()

    @tg.readonly
    def fetch(url: str, headers: dict[str, str]) -> str:
        return "ok"

    guard = tg.Guard(tools=[fetch], audit=[sink], clock=clock)
    result = guard.task("t").call("fetch", {"url": "u", "headers": [{"token": SECRET}]})
    assert result.decision is tg.Decision.INVALID
    assert "is not of type 'object'" in result.content
    assert SECRET not in result.content and SECRET not in result.reason
    assert all(SECRET not in repr(e) for e in sink.events)


@dataclasses.dataclass
class _Creds:
    user: str
    password: str


def test_secrets_inside_dataclass_and_model_arguments_are_redacted() -> None:
    import pydantic

    class Login(pydantic.BaseModel):
        user: str
        token: str

    events: list[tg.AuditEvent] = []

    @tg.mutating
    def login(creds: Any, extra: Any = None) -> str:
        return "ok"

    policy = tg.load_policy_dict({"audit": {"redact": ["password", "token"]}})
    guard = tg.Guard(policy, [login], audit=[events.append])
    with guard.task("t"):
        for _ in range(3):
            login(_Creds("bob", SECRET), extra=Login(user="bob", token=SECRET))
        with pytest.raises(tg.Halt) as info:
            login(_Creds("bob", SECRET), extra=Login(user="bob", token=SECRET))
    assert SECRET not in str(info.value) and SECRET not in repr(info.value.args)
    assert events and all(SECRET not in repr(e.args) for e in events)
    assert events[0].args["creds"] == {"$type": "_Creds", "user": "bob",
                                       "password": "[REDACTED]"}


def test_a_typed_direct_call_is_validated_by_its_json_form() -> None:
    @tg.mutating
    def login(creds: _Creds, when: dt.date) -> str:
        return f"{type(creds).__name__} {when.year}"

    with tg.Guard(tools=[login]).task("t"):
        assert login(_Creds("bob", "x"), dt.date(2026, 1, 2)) == "_Creds 2026"
    task = tg.Guard(tools=[login]).task("u")
    assert task.call("login", '{"creds": {"user": "bob"}, "when": "2026-01-02"}'
                     ).decision is tg.Decision.INVALID  # JSON still judged as it is


def test_host_decisions_refusals_in_progress_and_interruptions_are_audited() -> None:
    import asyncio
    import time

    events: list[tg.AuditEvent] = []

    @tg.requires_approval
    def refund(order: str) -> str:
        return "refunded"

    @tg.mutating
    def slow(order: str) -> str:
        time.sleep(0.3)
        return "done"

    @tg.mutating
    async def hang(order: str) -> str:
        await asyncio.sleep(10)
        return "never"

    policy = tg.load_policy_dict({"idempotency": {"wait_timeout_s": 0.05}})
    guard = tg.Guard(policy, [refund, slow, hang], audit=[events.append])
    task = guard.task("t")
    key = task.call("refund", {"order": "o1"}).idempotency_key
    task.approve(key)
    task.reject(key, "changed my mind")
    assert [(e.transition, e.decision) for e in events[-2:]] == [
        ("needs_review->executing", "allow"), ("needs_review->failed", "block")]
    assert "changed my mind" in events[-1].reason and events[-1].tool == "refund"

    import threading
    runner = threading.Thread(target=task.call, args=("slow", {"order": "o2"}))
    runner.start()
    time.sleep(0.05)
    with pytest.raises(tg.CallInProgress):
        task.call("slow", {"order": "o2"})
    runner.join()
    refused = [e for e in events if e.transition == "validating->failed" and e.tool == "slow"]
    assert len(refused) == 1 and refused[0].decision == "block"

    async def cancel_one() -> None:
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(task.acall("hang", {"order": "o3"}), 0.05)

    asyncio.run(cancel_one())
    assert any(e.transition == "executing->failed" and e.tool == "hang" for e in events)
