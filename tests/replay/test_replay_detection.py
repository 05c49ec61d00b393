"""Which reader reads a file, and no silent success: an unrecognised file, or one without tool
calls, is a problem naming the file, the format it was read as and why (exit 2) unless
``--allow-empty``; ``--input-format`` and ``--list-formats``; records a reader does not use are
noted once per kind; files are read lazily, one run after another; the Responses / Agents SDK
item lists and OTLP spans (formats without a file in ``../shared``) are read as documented."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from rich.progress import Progress

import toolguard as tg
from tests.conftest import SHARED
from tests.replay_support import replay
from toolguard.replay import RecordedCall, TokenUsage, UserTurn, open_file, readers, replay_runs

TRANSCRIPTS = SHARED / "data" / "transcripts"
CLAUDE = TRANSCRIPTS / "claude-code" / "fasthooks-sample_main_transcript.jsonl"
REPRO = SHARED / "repro" / "reliability"


def write_lines(path: Path, values: list[Any]) -> Path:
    path.write_text("".join(json.dumps(v) + "\n" for v in values))
    return path


def test_list_formats_names_every_reader() -> None:
    result = replay("--list-formats")
    assert result.exit_code == 0
    names = [r.name for r in readers()]
    assert names == ["inspect", "langfuse", "otel", "openhands", "swe-agent", "mini-swe-agent",
                     "tau2-simulations", "claude-code", "codex", "responses", "chat", "trace"]
    for name in names:
        assert name in result.stdout


def test_an_unrecognised_file_is_a_problem_naming_what_was_seen(tmp_path: Path) -> None:
    odd = write_lines(tmp_path / "events.jsonl", [{"kind": "x", "at": 1}, {"kind": "y"}])
    zipped = tmp_path / "archive.json"
    zipped.write_bytes(b"PK\x03\x04" + b"\x00" * 40)
    result = replay(odd, zipped, "--fail-on", "block")
    assert result.exit_code == 2
    assert (f"{odd}: format not recognised: JSON lines whose first object has keys at, kind; "
            "give --input-format NAME") in result.stderr
    assert f"{zipped}: format not recognised: a zip archive" in result.stderr


def test_a_file_read_as_a_format_it_is_not_yields_no_calls_and_says_so(tmp_path: Path) -> None:
    """Before: a Claude Code session read as the trace format was "63 runs, 0 calls", exit 0,
    and --fail-on block passed."""
    result = replay(CLAUDE, "--input-format", "trace", "--fail-on", "block")
    assert result.exit_code == 2
    assert f"{CLAUDE}: read as trace: 63 run(s), no tool call" in result.stderr
    assert replay(CLAUDE, "--input-format", "trace", "--allow-empty").exit_code == 0


def test_a_file_without_calls_is_a_problem_unless_allow_empty(tmp_path: Path) -> None:
    headers = write_lines(tmp_path / "t.jsonl", [{"case": "a"}, {"case": "b"}])
    result = replay(headers, "--format", "json")
    assert result.exit_code == 2
    [problem] = json.loads(result.stdout)["problems"]
    assert problem["message"].startswith("read as trace: 2 run(s), no tool call")
    result = replay(headers, "--format", "json", "--allow-empty")
    assert result.exit_code == 0
    assert json.loads(result.stdout)["totals"]["runs"] == 2


def test_a_chat_that_never_called_a_tool_is_a_note_not_a_problem(tmp_path: Path) -> None:
    chat = tmp_path / "c.json"
    chat.write_text(json.dumps([{"role": "user", "content": "hi"},
                                {"role": "assistant", "content": "hello"}]))
    result = replay(chat)
    assert result.exit_code == 0
    assert "no tool call: the model answered 1 time(s) without calling a tool" in result.stderr


def test_unknown_input_format_is_a_usage_error() -> None:
    result = replay(CLAUDE, "--input-format", "claude")
    assert result.exit_code == 2
    assert "unknown --input-format 'claude'; one of: inspect, langfuse" in result.stderr


def test_input_format_forces_the_reader(tmp_path: Path) -> None:
    shutil.copy(CLAUDE, tmp_path / "session.log")
    result = replay(tmp_path / "session.log", "--input-format", "claude-code", "--format",
                    "json")
    assert result.exit_code == 0
    assert json.loads(result.stdout)["totals"]["calls"] == 10


def test_lines_a_reader_does_not_use_are_noted_once_per_kind(tmp_path: Path) -> None:
    lines = CLAUDE.read_text().splitlines()
    odd = [json.dumps({"type": "telemetry", "sessionId": "s", "n": i}) for i in range(3)]
    session = tmp_path / "s.jsonl"
    session.write_text("\n".join([lines[0], *odd, *lines[1:], odd[0]]) + "\n")
    result = replay(session, "--format", "json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["notes"] == [{"file": str(session), "line": 2, "count": 4,
                             "message": "lines of type 'telemetry'"}]
    assert doc["totals"]["runs"] == 1 and doc["totals"]["calls"] == 10
    assert result.stderr.count("lines of type 'telemetry'") == 1


def test_a_directory_walk_takes_every_extension_a_reader_claims(tmp_path: Path) -> None:
    for name in ("swe-agent/swe-agent__test-repo-i1.traj",
                 "inspect-ai/log_message_deduplication.eval",
                 "mini-swe-agent/marshmallow-code__marshmallow-1343.traj.json"):
        shutil.copy(TRANSCRIPTS / name, tmp_path / Path(name).name)
    (tmp_path / "SOURCE.txt").write_text("not a transcript")
    result = replay(tmp_path, "--format", "json")
    assert result.exit_code in (0, 1), result.stderr
    doc = json.loads(result.stdout)
    assert sorted(r["format"] for r in doc["runs"]) == ["inspect", "mini-swe-agent",
                                                        "swe-agent"]
    assert doc["totals"]["calls"] == 5 + 5 + 93


def test_one_bad_trace_header_is_a_problem_of_its_run_and_the_rest_replays() -> None:
    """A header regex too big to compile is a problem of its run, not of the whole replay."""
    path = REPRO / "replay_header_effects_crash.jsonl"
    result = replay(path, "--format", "json")
    assert result.exit_code == 2
    doc = json.loads(result.stdout)
    assert [r["id"] for r in doc["runs"]] == ["good-run"]
    [problem] = doc["problems"]
    assert (problem["file"], problem["line"]) == (str(path), 3)
    assert problem["message"].startswith("run bad-header: invalid header effects:")
    ok = replay(REPRO / "replay_header_effects_ok.jsonl", "--format", "json")
    assert ok.exit_code == 2 and [r["id"] for r in json.loads(ok.stdout)["runs"]] == [
        "good-run"]


def test_a_file_is_read_lazily_run_after_run(tmp_path: Path) -> None:
    """Memory holds one run at a time: the first run is handed on before the end of the file
    is read (here, before its last line is found broken)."""
    path = tmp_path / "t.jsonl"
    path.write_text('{"run": "a"}\n{"tool": "x", "args": {}}\n{"run": "b"}\n'
                    '{"tool": "y", "args": {}}\n{broken\n')
    opened = open_file(path)
    first = next(opened.runs)
    assert first.id == "a" and opened.problems == []
    assert [r.id for r in opened.runs] == ["b"]
    assert [(p.line, p.message.split(":")[0]) for p in opened.problems] == [
        (5, "not valid JSON")]


# -- OpenAI Responses items / Agents SDK to_input_list() ---------------------------------------
RESPONSES_ITEMS: list[dict[str, Any]] = [
    {"role": "user", "content": "What's the weather in Tokyo and Paris?"},
    {"type": "reasoning", "id": "rs_1", "summary": []},
    {"type": "function_call", "id": "fc_1", "call_id": "call_a", "name": "get_weather",
     "arguments": '{"city": "Tokyo"}', "status": "completed"},
    {"type": "function_call", "id": "fc_2", "call_id": "call_b", "name": "get_weather",
     "arguments": '{"city": "Paris"}', "status": "completed"},
    {"type": "function_call_output", "call_id": "call_a", "output": "sunny"},
    {"type": "function_call_output", "call_id": "call_b", "output": "rain"},
    {"type": "web_search_call", "id": "ws_1", "status": "completed"},
    {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
     "content": [{"type": "output_text", "text": "Sunny in Tokyo, rain in Paris."}]},
    {"role": "user", "content": "And Tokyo again?"},
    {"type": "function_call", "id": "fc_3", "call_id": "call_c", "name": "get_weather",
     "arguments": '{"city": "Tokyo"}', "status": "completed"},
    {"type": "function_call_output", "call_id": "call_c", "output": "sunny"},
]


def test_responses_items_calls_batches_turns_and_hosted_tools(tmp_path: Path) -> None:
    path = tmp_path / "items.json"
    path.write_text(json.dumps(RESPONSES_ITEMS))
    opened = open_file(path)
    [run] = list(opened.runs)
    assert opened.format == "responses" and opened.problems == []
    kinds = [type(s).__name__ for s in run.steps]
    assert kinds == ["UserTurn", "RecordedCall", "RecordedCall", "UserTurn", "RecordedCall"]
    calls = run.calls
    assert [(c.tool, c.raw_args, c.result) for c in calls] == [
        ("get_weather", '{"city": "Tokyo"}', "sunny"), ("get_weather", '{"city": "Paris"}',
                                                         "rain"),
        ("get_weather", '{"city": "Tokyo"}', "sunny")]
    assert calls[0].batch == calls[1].batch != calls[2].batch
    assert [n.message.split(":")[0] for n in opened.notes] == [
        "hosted tool calls (web_search_call)"]
    report = replay_runs([run])
    assert [str(s.decision) for s in report.runs[0].steps] == ["allow", "allow", "allow"]


def test_a_response_object_with_usage(tmp_path: Path) -> None:
    path = tmp_path / "response.json"
    path.write_text(json.dumps({
        "id": "resp_1", "object": "response", "model": "gpt-4.1",
        "output": RESPONSES_ITEMS[2:6], "usage": {"input_tokens": 30, "output_tokens": 9}}))
    [run] = list(open_file(path).runs)
    assert run.id == "resp_1" and run.steps[0] == TokenUsage(30, 9)
    assert len(run.calls) == 2


# -- OpenTelemetry GenAI spans, OTLP JSON -------------------------------------------------------
def otel_span(span_id: str, name: str, start: int, attrs: dict[str, Any],
              parent: str = "a1", error: bool = False) -> dict[str, Any]:
    def value(v: Any) -> dict[str, Any]:
        return {"intValue": str(v)} if isinstance(v, int) else {"stringValue": v}

    return {"traceId": "5b8aa5a2d2c872e8321cf37308d69df2", "spanId": span_id,
            "parentSpanId": parent, "name": name, "kind": 1,
            "startTimeUnixNano": str(start), "endTimeUnixNano": str(start + 10),
            "attributes": [{"key": k, "value": value(v)} for k, v in attrs.items()],
            "status": {"code": 2} if error else {}}


def test_otlp_json_execute_tool_spans(tmp_path: Path) -> None:
    spans = [
        otel_span("c1", "chat gpt-4o", 100, {"gen_ai.operation.name": "chat",
                                             "gen_ai.usage.input_tokens": 50,
                                             "gen_ai.usage.output_tokens": 7}),
        otel_span("t1", "execute_tool grep", 200, {
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "grep",
            "gen_ai.tool.call.id": "call_1", "gen_ai.tool.call.arguments": '{"q": "x"}',
            "gen_ai.tool.call.result": "no match"}),
        otel_span("c2", "chat gpt-4o", 300, {"gen_ai.operation.name": "chat"}),
        otel_span("t2", "execute_tool grep", 400, {
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "grep",
            "gen_ai.tool.call.arguments": '{"q": "x"}'}, error=True),
        otel_span("t3", "execute_tool fetch", 500, {"gen_ai.operation.name": "execute_tool"}),
        otel_span("t4", "execute_tool fetch", 501, {"gen_ai.operation.name": "execute_tool"}),
    ]
    document = {"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [
        {"scope": {"name": "agent"}, "spans": spans}]}]}
    path = tmp_path / "spans.json"
    path.write_text(json.dumps(document))
    opened = open_file(path)
    [run] = list(opened.runs)
    assert opened.format == "otel"
    assert run.steps[0] == TokenUsage(50, 7)
    grep1, grep2, fetch1, fetch2 = run.calls
    assert (grep1.tool, grep1.raw_args, grep1.result, grep1.is_error) == (
        "grep", '{"q": "x"}', "no match", False)
    assert grep2.is_error and grep2.raw_args == grep1.raw_args
    # no arguments recorded: counted, never taken for a repeat of each other
    assert fetch1.tool == "fetch" and fetch1.args != fetch2.args
    assert fetch1.batch == fetch2.batch
    assert [n.message for n in opened.notes] == [
        "tool calls without recorded arguments: counted, but not judged for repeats"]
    report = replay_runs([run], tg.Policy())  # every tool mutating: the grep repeat is cached
    assert [str(s.decision) for s in report.runs[0].steps] == ["allow", "cached", "allow",
                                                               "allow"]
    # the same document, one export request per line (the collector's file exporter)
    lines = tmp_path / "spans.jsonl"
    lines.write_text(json.dumps(document) + "\n" + json.dumps(document) + "\n")
    opened = open_file(lines)
    assert opened.format == "otel" and len(next(opened.runs).calls) == 8


def test_claude_code_subagent_lines_are_a_run_of_their_own(tmp_path: Path) -> None:
    main = [json.loads(x) for x in CLAUDE.read_text().splitlines()]
    agent = [{**line, "isSidechain": True, "agentId": "a1"} for line in main[:5]]
    path = write_lines(tmp_path / "s.jsonl", [*main[:5], *agent])
    runs = list(open_file(path).runs)
    assert [r.id for r in runs] == ["s", "s/a1"]
    assert [len(r.calls) for r in runs] == [1, 1]
    assert isinstance(runs[0].steps[0], UserTurn)
    assert isinstance(runs[1].calls[0], RecordedCall) and runs[1].meta["agentId"] == "a1"


def test_an_agents_sdk_to_input_list_file() -> None:
    """Written by the real Agents SDK (see tests/fixtures/agents-sdk/README.md)."""
    path = Path(__file__).parents[1] / "fixtures" / "agents-sdk" / "to_input_list.json"
    opened = open_file(path)
    [run] = list(opened.runs)
    assert opened.format == "responses" and opened.problems == [] and opened.notes == []
    assert [type(s).__name__ for s in run.steps] == ["UserTurn", *["RecordedCall"] * 3]
    first, second, third = run.calls
    assert first.batch == second.batch != third.batch
    assert [(c.raw_args, c.result) for c in run.calls] == [
        ('{"city": "Tokyo"}', "sunny"), ('{"city": "Paris"}', "rain"),
        ('{"city": "Tokyo"}', "sunny")]
    # every tool mutating by default: the Paris call succeeded in between (progress), so
    # asking for Tokyo again runs again
    report = replay_runs([run])
    assert [str(s.decision) for s in report.runs[0].steps] == ["allow", "allow", "allow"]
    assert [r.format for r in report.runs] == ["responses"]


# -- paths of the readers that the shared recordings do not take -------------------------------
def test_codex_local_shell_custom_tools_token_dedupe_and_turns(tmp_path: Path) -> None:
    def line(kind: str, payload: dict[str, Any], second: int = 0) -> dict[str, Any]:
        return {"timestamp": f"2026-02-23T11:40:{second:02d}.000Z", "type": kind,
                "payload": payload}

    def tokens(total_in: int, total_out: int) -> dict[str, Any]:
        usage = {"input_tokens": total_in, "output_tokens": total_out}
        return line("event_msg", {"type": "token_count", "info": {
            "total_token_usage": usage, "last_token_usage": usage}})

    shell = {"type": "local_shell_call", "call_id": "c1", "status": "completed",
             "action": {"type": "exec", "command": ["ls"]}}
    path = write_lines(tmp_path / "rollout-x.jsonl", [
        line("session_meta", {"id": "s-1", "cli_version": "0.1", "originator": "codex_cli"}),
        line("turn_context", {"model": "gpt-5"}),
        line("event_msg", {"type": "user_message", "message": "list files"}),
        line("response_item", shell, 1),
        line("response_item", {"type": "custom_tool_call", "call_id": "c2", "name":
                               "apply_patch", "input": "*** Begin Patch"}, 1),
        line("response_item", {"type": "local_shell_call_output", "call_id": "c1",
                               "output": "a.py"}, 2),
        line("response_item", {"type": "custom_tool_call_output", "call_id": "c2",
                               "output": {"content": "failed", "success": False}}, 3),
        tokens(100, 10), tokens(100, 10), tokens(250, 30),
        line("compacted", {"message": ""}),
        line("ghost_snapshot", {"x": 1}),
        line("event_msg", {"type": "user_message", "message": "again"}),
        line("response_item", shell, 9),
    ])
    opened = open_file(path)
    [run] = list(opened.runs)
    assert opened.format == "codex"
    assert run.meta == {"session": "s-1", "cli_version": "0.1", "originator": "codex_cli",
                        "model": "gpt-5"}
    assert [type(s).__name__ for s in run.steps] == [
        "UserTurn", "RecordedCall", "RecordedCall", "TokenUsage", "TokenUsage", "UserTurn",
        "RecordedCall"]
    first, patch, again = run.calls
    assert (first.tool, first.args, first.result, first.elapsed_s) == (
        "local_shell", {"action": {"type": "exec", "command": ["ls"]}}, "a.py", 1.0)
    assert (patch.tool, patch.args, patch.is_error) == (
        "apply_patch", {"input": "*** Begin Patch"}, True)
    assert first.batch == patch.batch != again.batch
    assert [s for s in run.steps if isinstance(s, TokenUsage)] == [
        TokenUsage(100, 10, 8), TokenUsage(150, 20, 10)]
    assert again.result is None  # no output recorded: replayed as an empty result
    assert [(n.message, n.line) for n in opened.notes] == [("lines of type 'ghost_snapshot'",
                                                            12)]


def test_mini_swe_agent_before_tool_calling_reads_bash_blocks(tmp_path: Path) -> None:
    path = tmp_path / "x.traj.json"
    path.write_text(json.dumps({"info": {"mini_version": "1.0", "exit_status": "Submitted"},
                                "messages": [
        {"role": "system", "content": "You are..."},
        {"role": "user", "content": "<pr_description>fix it</pr_description>"},
        {"role": "assistant", "content": "Look.\n```bash\nls -la\n```"},
        {"role": "user", "content": "<returncode>0</returncode>\n<output>a.py</output>"},
        {"role": "assistant", "content": "No command here."},
        {"role": "user", "content": "Please always provide EXACTLY ONE action"},
        {"role": "assistant", "content": "```bash\nls -la\n```"},
        {"role": "user", "content": "<returncode>0</returncode>\n<output>a.py</output>"},
        {"role": "exit", "content": "", "extra": {"exit_status": "Submitted"}}]}))
    opened = open_file(path)
    [run] = list(opened.runs)
    assert opened.format == "mini-swe-agent" and opened.problems == []
    assert [(c.args, c.result) for c in run.calls] == [
        ({"command": "ls -la"}, "<returncode>0</returncode>\n<output>a.py</output>")] * 2
    assert not any(isinstance(s, UserTurn) for s in run.steps)  # format errors are no person


def test_inspect_runs_are_samples_times_epochs(tmp_path: Path) -> None:
    def sample(sample_id: int, epoch: int) -> dict[str, Any]:
        return {"id": sample_id, "epoch": epoch, "events": [], "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "tool_calls": [
                {"id": f"t{epoch}", "function": "bash", "arguments": {"cmd": "ls"}}]},
            {"role": "tool", "tool_call_id": f"t{epoch}", "content": "",
             "error": {"type": "timeout", "message": "timed out"}}]}

    path = tmp_path / "log.json"
    path.write_text(json.dumps({"version": 2, "status": "success",
                                "eval": {"task": "t", "model": "m"},
                                "samples": [sample(s, e) for s in (1, 2) for e in (1, 2)]}))
    opened = open_file(path)
    runs = list(opened.runs)
    assert opened.format == "inspect"
    assert [r.id for r in runs] == ["log/1:1", "log/1:2", "log/2:1", "log/2:2"]
    assert all(r.calls[0].is_error for r in runs)
    assert runs[0].meta == {"task": "t", "model": "m", "sample": 1, "epoch": 1}


def test_big_inputs_get_a_progress_bar_of_files_and_calls_on_a_terminal(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from toolguard.commands import _progress

    files = [write_lines(tmp_path / f"t{i:02}.jsonl", [{"case": f"c{i}"},
                                                        {"tool": "x", "args": {}}])
             for i in range(20)]
    shown: list[tuple[int, int | None, int]] = []  # (files done, of files, calls) at the end
    stop = Progress.stop

    def stopped(self: Progress) -> None:
        [bar] = self.tasks
        shown.append((int(bar.completed), None if bar.total is None else int(bar.total),
                      bar.fields["calls"]))
        stop(self)

    monkeypatch.setattr(_progress, "_on_terminal", lambda: True)
    monkeypatch.setattr(Progress, "stop", stopped)
    result = replay(tmp_path, "--format", "json")
    assert result.exit_code == 0
    assert shown == [(20, 20, 20)]
    assert replay(files[0], "--format", "json").exit_code == 0  # small: no bar
    assert replay(tmp_path, "--format", "json", "--quiet").exit_code == 0  # asked for none
    assert len(shown) == 1


def test_codex_rollouts_of_earlier_versions_hold_bare_items(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "rollout-old.jsonl", [
        {"id": "s-0", "timestamp": "2025-05-01T10:00:00Z", "instructions": None},
        {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "<environment_context>cwd</environment_context>"}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text",
                                                          "text": "fix the test"}]},
        {"record_type": "state"},
        {"type": "function_call", "name": "shell", "call_id": "c1",
         "arguments": '{"command": ["bash", "-lc", "pytest"]}'},
        {"type": "function_call_output", "call_id": "c1", "output": "1 failed"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text",
                                                               "text": "done"}]},
    ])
    opened = open_file(path)
    [run] = list(opened.runs)
    assert opened.format == "codex" and opened.notes == [] and opened.problems == []
    assert run.meta == {"session": "s-0"}
    assert [type(s).__name__ for s in run.steps] == ["UserTurn", "RecordedCall"]
    assert (run.calls[0].tool, run.calls[0].result) == ("shell", "1 failed")


def test_openai_and_anthropic_name_the_chat_reader() -> None:
    tau = SHARED / "data" / "tau-bench" / "gpt-4o-airline.json"
    for name in ("openai", "anthropic", "chat"):
        result = replay(tau, "--input-format", name, "--format", "json")
        assert result.exit_code == 0, result.stderr
        doc = json.loads(result.stdout)
        assert doc["totals"]["calls"] == 1164
        assert {r["format"] for r in doc["runs"]} == {"openai"}


def test_a_claude_code_file_of_summaries_only_is_a_note(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "old.jsonl", [
        {"type": "summary", "summary": "Fix the login bug", "leafUuid": "u-1"},
        {"type": "summary", "summary": "Refactor", "leafUuid": "u-2"}])
    shutil.copy(CLAUDE, tmp_path / "session.jsonl")
    result = replay(tmp_path, "--format", "json")  # a project folder as Claude Code keeps it
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["problems"] == [] and [r["id"] for r in doc["runs"]] == ["session"]
    assert [(Path(n["file"]).name, n["message"]) for n in doc["notes"]] == [
        ("old.jsonl", "0 run(s), no tool call: only summary, snapshot or system lines")]
    alone = replay(path)
    assert alone.exit_code == 2 and "no runs to replay" in alone.stderr


def test_a_reader_that_fails_on_a_file_is_a_problem_of_that_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from toolguard.replay import _trace

    real = _trace.trace_run

    def fragile(source: Any, chunk: list[tuple[int, dict[str, Any]]]) -> Any:
        if chunk[0][1].get("run") == "b":
            raise TypeError("unexpected shape")
        return real(source, chunk)

    monkeypatch.setattr(_trace, "trace_run", fragile)
    bad = write_lines(tmp_path / "a.jsonl", [{"run": "a"}, {"tool": "x", "args": {}},
                                              {"run": "b"}, {"tool": "y", "args": {}}])
    good = write_lines(tmp_path / "b.jsonl", [{"run": "c"}, {"tool": "z", "args": {}}])
    result = replay(bad, good, "--format", "json")
    assert result.exit_code == 2
    doc = json.loads(result.stdout)
    assert [r["id"] for r in doc["runs"]] == ["a", "c"]
    assert [p["message"] for p in doc["problems"]] == [
        "cannot be read as trace: TypeError: unexpected shape; runs handed on before it still "
        "replay"]


@pytest.mark.parametrize(("name", "content", "reader"), [
    ("t.jsonl", '{"case": "c"}\n{"tool": "x", "args": {}}\n', "trace"),
    ("t.jsonl", '{"messages": [{"role": "user", "content": "hi"}]}\n', "trace"),
    ("t.json", '[{"role": "user", "content": "hi"}]', "chat"),
    ("t.json", '{"messages": []}', "chat"),
])
def test_detection_of_the_existing_formats(tmp_path: Path, name: str, content: str,
                                           reader: str) -> None:
    path = tmp_path / name
    path.write_text(content)
    assert open_file(path).format == reader
