"""Whatever the model sends: a clear ``invalid`` (never an internal error), bounded memory,
and an audit event for every call that is never silently dropped.
The fault-injection scenarios (a sink that fails, a sink that cannot serialize) are here too.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import toolguard as tg
from toolguard.engine._limits import MAX_ARGS_DEPTH, UNKNOWN_TOOLS
from toolguard.policy._model import IdempotencyPolicy, StorePolicy
from toolguard.testing import FakeClock

D = tg.Decision


def _nested(depth: int) -> str:
    return '{"key": "k", "value": ' + '{"a":' * depth + "1" + "}" * depth + "}"


@pytest.mark.parametrize("depth", [50, 98, 99, 100, 250, 253, 254, 255, 256, 400, 600, 1000])
def test_deep_arguments_are_invalid_or_run_and_always_audited(
        tmp_path: Path, depth: int) -> None:
    """Regression: depth ≥ 600 raised ToolGuardError (RecursionError in redaction); at
    253-255 a mutating call ran and JsonlSink dropped its audit line."""
    runs: list[int] = []

    @tg.mutating
    def put(key: str, value: dict[str, Any]) -> str:
        runs.append(1)
        return "ok"

    path = tmp_path / "audit.jsonl"
    with tg.JsonlSink(path) as sink:
        result = tg.Guard(tools=[put], audit=[sink]).task("t").call("put", _nested(depth))
    lines = [json.loads(line) for line in path.read_bytes().split(b"\n") if line]
    assert lines and all(line["call_id"] == result.call_id for line in lines)
    if depth + 1 > MAX_ARGS_DEPTH:  # the "value" object is one level below the arguments
        assert result.decision is D.INVALID and "nested deeper than" in result.reason
        assert runs == []
    else:
        assert result.executed and runs == [1]
        assert [line["transition"] for line in lines] == ["validating->executing",
                                                          "executing->planning"]


def test_a_deep_direct_mapping_is_invalid_too() -> None:
    deep: dict[str, Any] = {"a": 1}
    for _ in range(2_000):
        deep = {"a": deep}

    @tg.mutating
    def put(key: str, value: dict[str, Any]) -> str:
        return "ok"

    result = tg.Guard(tools=[put]).task("t").call("put", {"key": "k", "value": deep})
    assert result.decision is D.INVALID


def _pay_with_a_broken_sink(policy: tg.Policy, clock: FakeClock,
                            caplog: pytest.LogCaptureFixture) -> tuple[tg.ToolResult, list[str]]:
    """One call of a payment tool whose only audit sink fails (a full disk)."""
    runs: list[str] = []

    @tg.mutating
    def pay(order: str) -> str:
        runs.append(order)
        return "paid"

    def broken(event: tg.AuditEvent) -> None:
        raise OSError("disk full")

    with caplog.at_level(logging.ERROR, logger="toolguard"):
        result = tg.Guard(policy, [pay], audit=[broken], clock=clock).task("t").call(
            "pay", {"order": "o1"})
    return result, runs


def test_a_failing_sink_under_fail_closed_does_not_run_the_call(
        caplog: pytest.LogCaptureFixture, clock: FakeClock) -> None:
    result, runs = _pay_with_a_broken_sink(tg.Policy(), clock, caplog)
    assert result.decision is D.BLOCK and "not run unaudited" in result.reason and runs == []
    assert "was NOT written" in caplog.text and "validating->executing" in caplog.text


def test_a_failing_sink_under_fail_open_runs_and_says_so(
        caplog: pytest.LogCaptureFixture, clock: FakeClock) -> None:
    policy = tg.Policy(store=StorePolicy(on_error="fail_open"))
    result, runs = _pay_with_a_broken_sink(policy, clock, caplog)
    assert result.executed and runs == ["o1"]
    assert caplog.text.count("was NOT written") == 2  # before and after the run


def test_jsonl_keeps_an_event_it_cannot_serialize(tmp_path: Path) -> None:
    deep: Any = 1
    for _ in range(300):
        deep = [deep]
    path = tmp_path / "audit.jsonl"
    with tg.JsonlSink(path) as sink:
        sink(tg.AuditEvent(1.0, "t", "t#1", "x", "validating->planning", extra={"d": deep}))
    (line,) = path.read_text().splitlines()
    event = json.loads(line)
    assert event["call_id"] == "t#1" and "$unserializable" in event["extra"]


def test_oversized_arguments_are_invalid_and_not_kept() -> None:
    @tg.mutating
    def write_file(path: str, text: str) -> str:
        return "ok"

    policy = tg.load_policy_dict({"max_args_bytes": 10_000})
    task = tg.Guard(policy, [write_file]).task("t")
    big = json.dumps({"path": "a", "text": "x" * 20_000})
    result = task.call("write_file", big)
    assert result.decision is D.INVALID and "max_args_bytes (10,000)" in result.reason
    as_dict = task.call("write_file", {"path": "b", "text": "y" * 20_000})
    assert as_dict.decision is D.INVALID
    assert all(len(repr(record.args)) < 200 for record in task.history)  # not kept
    assert task.call("write_file", {"path": "a", "text": "small"}).executed


def test_max_args_bytes_from_the_environment_and_explain() -> None:
    policy = tg.load_policy(None, env={"TOOLGUARD_MAX_ARGS_BYTES": "5000"})
    assert policy.max_args_bytes == 5000
    assert policy.source_of("max_args_bytes") == "env TOOLGUARD_MAX_ARGS_BYTES"
    assert tg.load_policy(None, env={"TOOLGUARD_MAX_ARGS_BYTES": "null"}).max_args_bytes is None
    assert tg.Policy().max_args_bytes == 1_000_000
    with pytest.raises(tg.PolicyError, match="max_args_bytes"):
        tg.load_policy_dict({"max_args_bytes": 1})


def test_approval_records_are_bounded_by_max_entries() -> None:
    """Regression: 100,000 denied calls kept 100,000 approval records (+74 MB)."""
    @tg.requires_approval
    def refund(order_id: str) -> str:
        return "refunded"

    policy = tg.Policy(idempotency=IdempotencyPolicy(max_entries=50))
    guard = tg.Guard(policy, [refund])
    task = guard.task("t")
    for i in range(500):
        task.call("refund", {"order_id": f"o{i}"})
    assert len(guard.store._tasks["t"].approvals) <= 50  # type: ignore[attr-defined]


def test_unknown_tool_names_share_one_bounded_counter() -> None:
    """Regression: 1,000 invented names of 100 KB kept 1,000 counters (+482 MB)."""
    task = tg.Guard().task("t")
    for i in range(300):
        result = task.call(f"tool_{i}_" + "x" * 20_000, {})
        assert result.decision is D.INVALID and len(result.tool) <= 128
    usage = task.usage
    assert usage.per_tool == {UNKNOWN_TOOLS: 300}
    assert all(len(record.tool) <= 128 for record in task.history)


# -- the fuzz: hostile JSON texts ------------------------------------------------------
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30)
    | st.sampled_from(["\u0000", "\ud800", "Bearer sk-live-zzzzzzzzzz", "9" * 400]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner,
                                                                max_size=4),
    max_leaves=20,
)


@st.composite
def _hostile(draw: st.DrawFn) -> str | bytes:
    kind = draw(st.sampled_from(["json", "deep", "garbage", "bytes", "huge-number"]))
    if kind == "json":
        value = draw(_JSON)
        return json.dumps(value if draw(st.booleans()) else {"path": value, "text": value})
    if kind == "deep":
        depth = draw(st.integers(90, 1100))
        opener = draw(st.sampled_from(['{"a":', "["]))
        closer = "}" if opener.startswith("{") else "]"
        return '{"path": ' + opener * depth + "1" + closer * depth + "}"
    if kind == "garbage":
        return draw(st.text(max_size=60))
    if kind == "bytes":
        return draw(st.binary(max_size=60))
    return '{"path": ' + "1" * draw(st.integers(20, 5000)) + "}"


@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(texts=st.lists(_hostile(), min_size=1, max_size=6))
def test_hostile_arguments_never_break_the_guard_or_lose_an_event(
        tmp_path: Path, texts: list[str | bytes]) -> None:
    @tg.mutating
    def write_file(path: str, text: str = "") -> str:
        return "ok"

    path = tmp_path / "audit.jsonl"
    path.unlink(missing_ok=True)
    ids: list[str] = []
    with tg.JsonlSink(path) as sink:
        task = tg.Guard(tools=[write_file], audit=[sink]).task("t")
        for text in texts:
            try:
                ids.append(task.call("write_file", text).call_id)
            except tg.Halt:  # the ladder may halt a model repeating itself: not an error
                break
    # split on newlines only: str.splitlines() also splits inside a string at U+0085
    written = {json.loads(line)["call_id"] for line in path.read_bytes().split(b"\n") if line}
    assert set(ids) <= written  # every call that was decided left its event


@pytest.mark.parametrize("name", [None, 123, ["a"], {"x": 1}])
def test_a_tool_name_that_is_not_a_string_is_an_unknown_tool(name: Any) -> None:
    # a hand-built message missing its function name gave an internal error
    @tg.readonly
    def grep_search(pattern: str) -> str:
        return "x"

    with tg.Guard(tools=[grep_search]).task("t") as task:
        result = task.call(name, "{}")
        assert result.decision is tg.Decision.INVALID and not result.executed
        assert "Unknown tool" in str(result.content) and "grep_search" in str(result.content)
        (message,) = task.run_tool_calls({"role": "assistant", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"arguments": "{}"}}]})
        assert message["tool_call_id"] == "c1" and "Unknown tool" in message["content"]


_JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.text(max_size=8)
    | st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from([1.0, -0.0, 1e16]),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.text(max_size=4) | st.sampled_from(["$a", "$bytes"]), inner,
                      max_size=3),
    max_leaves=12)


def _nested_lists(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth - 1):
        value = [value]
    return value


@settings(max_examples=300, deadline=None)
@given(args=st.dictionaries(st.text(max_size=5), _JSONISH, max_size=4),
       limit=st.none() | st.integers(0, 400),
       depth=st.sampled_from([0, MAX_ARGS_DEPTH - 1, MAX_ARGS_DEPTH, 150, 300]))
def test_one_serialization_bounds_and_hashes_as_the_separate_checks_do(
        args: dict[str, Any], limit: int | None, depth: int) -> None:
    # the call path measures size and depth with the hash's own serialization: the
    # verdicts and the hash are those of the separate checks, for every argument dict
    from toolguard._errors import CanonicalizationError
    from toolguard.engine._limits import oversized, too_deep, too_large
    from toolguard.hashing._canonical import dump_for_hash, hash_args

    if depth:
        args = {**args, "deep": _nested_lists(depth)}
    dumped = dump_for_hash(args, MAX_ARGS_DEPTH)
    if not dumped:  # too deep, or not JSON: the call path then runs the separate checks
        assert too_deep(None, args) is not None or orjson_refuses(args)
        return
    too = None if limit is None or len(dumped) <= limit else too_large(len(dumped), limit)
    assert too == oversized(args, limit)
    assert too_deep(None, args) is None
    try:
        expected = hash_args(args)
    except CanonicalizationError:
        return
    assert hash_args(args, None, dumped) == expected


def orjson_refuses(args: dict[str, Any]) -> bool:
    """Whether orjson cannot serialize ``args`` natively (sorted keys, nothing passed to a
    default)."""
    try:
        orjson.dumps(args, option=orjson.OPT_SORT_KEYS)
    except (TypeError, orjson.JSONEncodeError):
        return True
    return False


def test_the_depth_probe_gives_the_same_bytes_while_another_thread_holds_its_arrays() -> None:
    from toolguard.hashing._canonical import dump_for_hash
    from toolguard.hashing._dump import _CHAINS

    args = {"rows": [{"a": [1, 2]}, {"b": None}], "deep": _nested_lists(MAX_ARGS_DEPTH - 1)}
    expected = dump_for_hash(args, MAX_ARGS_DEPTH)
    assert expected == orjson.dumps(args, option=orjson.OPT_SORT_KEYS)
    chain = _CHAINS[254 - MAX_ARGS_DEPTH]
    with chain.lock:  # as if another thread were serializing in the prebuilt arrays
        assert dump_for_hash(args, MAX_ARGS_DEPTH) == expected
        assert dump_for_hash({"deep": _nested_lists(MAX_ARGS_DEPTH + 1)}, MAX_ARGS_DEPTH) == b""
    assert dump_for_hash({"deep": _nested_lists(MAX_ARGS_DEPTH + 1)}, MAX_ARGS_DEPTH) == b""
    assert chain.inner[0] is None  # the arguments are not kept


@pytest.mark.parametrize("args", [
    {"x": 10**4300}, {"x": [1, {"y": -(10**5000)}]},
])
def test_an_integer_past_the_interpreters_text_limit_is_invalid(
        tmp_path: Path, args: dict[str, Any]) -> None:
    """Regression: an integer of more than 4,300 digits (Python's limit for int -> str) made
    an internal error, and no audit event."""
    events = tg.MemorySink()

    @tg.mutating
    def anyargs(**kw: Any) -> str:
        return "ok"

    with tg.JsonlSink(tmp_path / "audit.jsonl") as sink:
        result = tg.Guard(tools=[anyargs], audit=[events, sink]).task("t").call("anyargs", args)
    assert result.decision is D.INVALID and "integer" in result.reason
    assert [e.decision for e in events.events] == ["invalid"]
    assert len((tmp_path / "audit.jsonl").read_text().splitlines()) == 1


def test_a_lone_surrogate_never_drops_an_audit_line(tmp_path: Path) -> None:
    """Regression: the event of a tool name holding a lone surrogate was not written to the
    JSONL file (UTF-8 cannot hold it): each event is one line, the surrogate as its escape."""
    path = tmp_path / "audit.jsonl"
    events = tg.MemorySink()

    @tg.mutating
    def anyargs(**kw: Any) -> str:
        return "ok"

    with tg.JsonlSink(path) as sink:
        task = tg.Guard(tools=[anyargs], audit=[events, sink]).task("t")
        task.call("\ud800", {"x": 1})
        task.call("anyargs", {"k\udc80": "v\ud800"})
        task.call("anyargs", {"ok": "fine"})
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert len(lines) == len(events.events) >= 3
    assert lines[0]["tool"] == "\\ud800"
