"""Hostile input never crashes a reader: any JSON document or JSON lines, read with any reader
(forced with ``input_format``), gives runs, problems and notes, never an exception, and what
the runs hold replays."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from toolguard.replay import open_file, readers, replay_runs

# Keys and values the readers look at, so generated records get past the first checks.
KEYS = st.sampled_from([
    "type", "payload", "message", "content", "role", "id", "call_id", "name", "arguments",
    "input", "output", "tool_calls", "function", "tool_use_id", "is_error", "usage",
    "input_tokens", "output_tokens", "prompt_tokens", "timestamp", "isSidechain", "agentId",
    "sessionId", "info", "total_token_usage", "history", "trajectory", "action", "observation",
    "tool_call_metadata", "model_response", "choices", "cause", "source", "samples",
    "messages", "events", "event", "epoch", "error", "tool_call_id", "tool_call_ids",
    "resourceSpans", "scopeSpans", "spans", "attributes", "key", "value", "stringValue",
    "intValue", "traceId", "observations", "trace", "usageDetails", "metadata", "tool",
    "args", "effects", "run", "eval", "version", "status", "extra", "response",
    "function_name", "startTime", "record_type", "mini_version", "instance_id"])
SCALARS = (st.none() | st.booleans() | st.integers(-3, 10**20) | st.floats(allow_nan=False)
           | st.sampled_from(["user", "assistant", "tool", "exit", "tool_use", "tool_result",
                              "function_call", "function_call_output", "response_item",
                              "event_msg", "token_count", "user_message", "session_meta",
                              "execute_tool", "TOOL", "GENERATION", "SPAN", "model", "agent",
                              "message", "edit", "2026-01-02T19:18:34.422Z", "x", "",
                              '{"a": 1}', "[REDACTED_ARGUMENTS len=3 sha=0a1b2c3d]"]))
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(KEYS, inner, max_size=6), max_leaves=30)
RECORDS = st.dictionaries(KEYS, VALUES, max_size=8)


def read_all(path: Path, name: str) -> None:
    opened = open_file(path, input_format=name)
    runs = list(opened.runs)
    assert all(str(p) for p in opened.problems) and all(str(n) for n in opened.notes)
    replay_runs(runs)


@settings(max_examples=60, deadline=None)
@given(document=VALUES)
def test_any_json_document_with_any_reader(document: Any) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "doc.json"
        path.write_text(json.dumps(document))
        for reader in readers():
            read_all(path, reader.name)


@settings(max_examples=60, deadline=None)
@given(lines=st.lists(RECORDS | VALUES, min_size=1, max_size=6))
def test_any_json_lines_with_any_reader(lines: list[Any]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "lines.jsonl"
        path.write_text("".join(json.dumps(x) + "\n" for x in lines))
        for reader in readers():
            read_all(path, reader.name)
