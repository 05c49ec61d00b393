"""``toolguard replay`` on the command line: output formats, exit codes 0/1/2, --fail-on,
--verbose, --tools, --policy / --env, errors on stderr naming the file and line."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.conftest import ROOT
from tests.replay_support import make_app, replay

TRACES = ROOT / "examples" / "traces"
POLICIES = ROOT / "examples" / "policies"
GREP_LOOP = str(TRACES / "grep-loop.jsonl")  # warn, block, then halt
STEP_KEYS = {"index", "tool", "args_hash", "effect", "decision", "reason", "count", "executed"}
SUMMARY_KEYS = {"calls", "replayed", "not_replayed", "executed", "allow", "warn", "cached",
                "block", "review", "invalid", "halt", "halted_at", "halt_reason", "error", "meta",
                "tokens", "cost_usd", "unpriced_tokens"}


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if name.upper().startswith("TOOLGUARD_") and name != "TOOLGUARD_SHARED":
            monkeypatch.delenv(name)


def write(path: Path, lines: list[Any]) -> Path:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def block_only_trace(tmp_path: Path) -> Path:
    """A run with a block and no halt (a write repeated three times, failing each time)."""
    failing = {"tool": "w", "args": {"k": 1}, "result": "Error: no", "is_error": True}
    return write(tmp_path / "block.jsonl", [{"case": "block-only"}, failing, failing, failing])


def test_table_is_the_default(tmp_path: Path) -> None:
    result = replay(str(TRACES / "test-rerun-after-edit.jsonl"))
    assert result.exit_code == 0
    for text in ("toolguard replay", "test-rerun-after-edit", "total (1 run)", "executed"):
        assert text in result.stdout
    assert "steps that were not a plain allow" not in result.stdout


def test_table_shows_where_a_run_halted_and_verbose_lists_steps() -> None:
    result = replay(GREP_LOOP, "--verbose")
    assert result.exit_code == 0
    assert "step 5: grep was called 5 times" in result.stdout
    assert "runs with warn 1, cached 0, block 1, review 0, invalid 0, halt 1" in result.stdout
    assert "steps that were not a plain allow" in result.stdout
    for decision in ("warn", "block", "halt"):
        assert decision in result.stdout.split("steps that were not a plain allow")[1]
    assert "def load_config" in result.stdout  # the args excerpt


def test_json_output_schema() -> None:
    result = replay(str(TRACES / "grep-loop.jsonl"), str(TRACES / "duplicate-payment.jsonl"),
                    "--format", "json")
    assert result.exit_code == 0
    doc = json.loads(result.stdout)
    assert set(doc) == {"runs", "totals", "problems", "notes"}
    assert [r["id"] for r in doc["runs"]] == ["grep-loop", "duplicate-payment-after-timeout"]
    for run in doc["runs"]:
        assert set(run) == {"id", "file", "format", "steps", "summary"}
        assert run["format"] == "trace" and run["file"].endswith(".jsonl")
        assert set(run["summary"]) == SUMMARY_KEYS
        for index, step in enumerate(run["steps"]):
            assert set(step) == STEP_KEYS
            assert step["index"] == index
            assert step["executed"] is (step["decision"] in ("allow", "warn"))
            assert len(step["args_hash"]) == 32
    grep, payment = (r["summary"] for r in doc["runs"])
    assert (grep["halt"], grep["halted_at"], grep["warn"], grep["block"]) == (True, 5, 1, 1)
    assert grep["meta"]["source"] == "written for toolguard's examples"
    assert (payment["review"], payment["cached"], payment["halt"]) == (1, 1, False)
    totals = doc["totals"]
    assert (totals["runs"], totals["calls"], totals["executed"]) == (2, 11, 7)
    assert totals["runs_with"] == {"warn": 1, "cached": 1, "block": 1, "review": 1,
                                   "invalid": 0, "halt": 1}
    assert totals["decisions"]["halt"] == 1
    assert doc["problems"] == []


def test_jsonl_is_one_step_per_line() -> None:
    result = replay(GREP_LOOP, str(TRACES / "test-rerun-after-edit.jsonl"), "--format", "jsonl")
    assert result.exit_code == 0
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(lines) == 6 + 7
    assert all(set(line) == STEP_KEYS | {"run"} for line in lines)
    assert [line["decision"] for line in lines if line["run"] == "grep-loop"] == [
        "allow", "allow", "allow", "warn", "block", "halt"]


@pytest.mark.parametrize(("fail_on", "trace", "code"), [
    ("never", "halt", 0), ("halt", "halt", 1), ("block", "halt", 1),
    ("halt", "block", 0), ("block", "block", 1), ("block", "clean", 0),
])
def test_fail_on(tmp_path: Path, fail_on: str, trace: str, code: int) -> None:
    path = {"halt": GREP_LOOP, "block": str(block_only_trace(tmp_path)),
            "clean": str(TRACES / "test-rerun-after-edit.jsonl")}[trace]
    result = replay(path, "--fail-on", fail_on, "--format", "json")
    assert result.exit_code == code
    json.loads(result.stdout)  # the report is printed either way


def test_unknown_fail_on_value_is_a_usage_error() -> None:
    assert replay(GREP_LOOP, "--fail-on", "warn").exit_code == 2


def test_missing_file_exits_2_naming_it(tmp_path: Path) -> None:
    result = replay(str(tmp_path / "nope.jsonl"))
    assert result.exit_code == 2
    assert f"{tmp_path / 'nope.jsonl'}: cannot read" in result.stderr
    assert result.stdout == ""


def test_bad_line_exits_2_naming_file_and_line_and_the_rest_replays(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"case": "c"}\n{"tool": "a", "args": {}}\n{oops\n{"tool": "a", "args": {}}\n')
    result = replay(str(path), "--format", "json")
    assert result.exit_code == 2
    assert f"{path}:3: not valid JSON" in result.stderr
    doc = json.loads(result.stdout)
    assert doc["totals"]["calls"] == 2
    assert doc["problems"] == [{"file": str(path), "line": 3,
                                "message": doc["problems"][0]["message"]}]


def test_bad_line_wins_over_fail_on(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(Path(GREP_LOOP).read_text() + "not json\n")
    assert replay(str(path), "--fail-on", "halt").exit_code == 2


def test_invalid_policy_exits_2_naming_the_file(tmp_path: Path) -> None:
    policy = tmp_path / "bad.toml"
    policy.write_text('mode = "enforce"\nfrobnicate = 3\n')
    result = replay(GREP_LOOP, "--policy", str(policy))
    assert result.exit_code == 2
    assert str(policy) in result.stderr
    assert "frobnicate" in result.stderr
    assert result.stdout == ""


def test_policy_and_env_together_is_an_error() -> None:
    result = replay(GREP_LOOP, "--policy", str(POLICIES / "airline.toml"), "--env", "prod")
    assert result.exit_code == 2
    assert "not both" in result.stderr


def test_env_selects_policies_name_toml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "policies").mkdir()
    # a strict read-only ladder: the grep loop is blocked at its 2nd call
    (tmp_path / "policies" / "strict.toml").write_text(
        "[ladder.readonly]\nwarn_at = 2\nblock_at = 2\nhalt_at = 3\n")
    monkeypatch.chdir(tmp_path)
    result = replay(GREP_LOOP, "--env", "strict", "--format", "jsonl")
    assert result.exit_code == 0
    assert [json.loads(x)["decision"] for x in result.stdout.splitlines()] == [
        "allow", "allow", "block", "halt"]
    missing = replay(GREP_LOOP, "--env", "nope")
    assert missing.exit_code == 2
    assert "policies/nope.toml" in missing.stderr


def test_policy_file_applies(tmp_path: Path) -> None:
    policy = tmp_path / "p.toml"
    policy.write_text("[budget]\nmax_tool_calls = 2\n")
    result = replay(GREP_LOOP, "--policy", str(policy), "--format", "json")
    assert result.exit_code == 0
    summary = json.loads(result.stdout)["runs"][0]["summary"]
    assert (summary["halted_at"], summary["not_replayed"]) == (2, 3)
    assert "max_tool_calls" in summary["halt_reason"]


def test_tools_validate_recorded_arguments(tmp_path: Path) -> None:
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps([{"type": "function", "function": {
        "name": "grep", "parameters": {"type": "object", "required": ["pattern", "path"],
                                       "properties": {"pattern": {"type": "string"},
                                                      "path": {"type": "string"}},
                                       "additionalProperties": False}}}]))
    trace = write(tmp_path / "t.jsonl", [
        {"case": "c"},
        {"tool": "grep", "args": {"pattern": "x", "path": "."}, "result": ""},
        {"tool": "grep", "args": {"pattern": "x"}, "result": ""},
        {"tool": "view_file", "args": {"path": "a"}, "result": ""},
    ])
    result = replay(str(trace), "--tools", str(tools), "--format", "jsonl")
    assert result.exit_code == 0
    steps = [json.loads(x) for x in result.stdout.splitlines()]
    assert [s["decision"] for s in steps] == ["allow", "invalid", "invalid"]
    assert "'path' is a required property" in steps[1]["reason"]
    assert "unknown tool 'view_file'" in steps[2]["reason"]


def test_bad_tools_file_exits_2(tmp_path: Path) -> None:
    tools = tmp_path / "tools.json"
    tools.write_text('[{"name": "a"}, {"name": "a"}]')
    result = replay(GREP_LOOP, "--tools", str(tools))
    assert result.exit_code == 2
    assert f"{tools}: tool 'a' is defined twice" in result.stderr


def test_a_directory_of_transcripts(tmp_path: Path) -> None:
    write(tmp_path / "a.jsonl", [{"case": "one"}, {"tool": "x", "args": {}, "result": 1}])
    write(tmp_path / "b.jsonl", [{"case": "two"}, {"tool": "x", "args": {}, "result": 1}])
    result = replay(str(tmp_path), "--format", "json")
    assert result.exit_code == 0
    assert [r["id"] for r in json.loads(result.stdout)["runs"]] == ["one", "two"]


def test_no_path_is_a_usage_error() -> None:
    assert replay().exit_code == 2


def test_brackets_in_the_data_are_printed_as_written_not_as_markup(tmp_path: Path) -> None:
    """Run ids, arguments and reasons are data: '[/INST]' once crashed rich's markup parser
    and '[bold]file' lost its brackets."""
    trace = write(tmp_path / "t.jsonl", [
        {"run": "[red]colored[/red]", "effects": {"bash": {"effect": "readonly"}}},
        *[{"tool": "bash", "args": {"command": "grep -rn '[/INST]' [bold]src"}, "result": ""}
          for _ in range(4)],
    ])
    result = CliRunner().invoke(make_app(), ["replay", str(trace), "-v"],
                                env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    assert "[red]colored[/red]" in result.output
    assert "[/INST]" in result.output and "[bold]src" in result.output


@pytest.mark.parametrize("fmt", ["table", "json", "jsonl"])
def test_text_the_terminal_cannot_encode_is_printed_escaped(tmp_path: Path, fmt: str) -> None:
    """A lone surrogate escape is valid JSON; the installed script prints it escaped."""
    import subprocess
    import sys

    trace = tmp_path / "s.jsonl"
    trace.write_text('{"run": "r\\ud800"}\n'
                     '{"tool": "f\\ud800", "args": {"q": "\\ud800"}, "result": "x"}\n')
    done = subprocess.run([sys.executable, "-m", "toolguard.cli", "replay", str(trace), "-v",
                           "--format", fmt], capture_output=True, timeout=120, check=False,
                          env={**os.environ, "PYTHONIOENCODING": "utf-8"})
    assert done.returncode == 0, done.stderr.decode()
    assert b"ud800" in done.stdout and b"Traceback" not in done.stderr


def test_deeply_nested_values_are_reported_not_a_traceback(tmp_path: Path) -> None:
    deep_args = "[" * 1000 + "]" * 1000
    trace = tmp_path / "deep.jsonl"
    trace.write_text(
        '{"run": "d", "meta": ' + deep_args + "}\n"
        '{"tool": "f", "args": {"a": ' + deep_args + '}, "result": "ok"}\n'
        '{"run": "e", "effects": {"f": {"args": ' + deep_args + "}}}\n"
        '{"tool": "f", "args": {}, "result": "ok"}\n')
    for fmt in ("table", "json", "jsonl"):
        result = CliRunner().invoke(make_app(), ["replay", str(trace), "-v", "--format", fmt])
        assert result.exception is None or isinstance(result.exception, SystemExit), fmt
        assert result.exit_code == 2, (fmt, result.output)  # the effects of run e: a problem


# -- an explicit --input-format wins; a wrong one is summarized, not one line per line ----------


def test_input_format_chat_on_a_jsonl_trace_is_read_as_chat(tmp_path: Path) -> None:
    """Regression: the chat reader handed JSON lines to the trace reader, so
    ``--input-format chat`` on a trace ``.jsonl`` replayed it as a trace."""
    path = ROOT / "examples" / "traces" / "grep-loop.jsonl"
    result = replay(path, "--input-format", "chat", "--format", "json")
    assert result.exit_code == 2
    assert f"{path}: read as chat: 0 run(s), no tool call" in result.stderr
    notes = [line for line in result.stderr.splitlines() if ": note: " in line]
    assert notes == [f"toolguard replay: {path}:1: note: lines without 'messages' or 'traj' "
                     "(not a chat) (7 times)"]


def test_input_format_chat_reads_jsonl_of_chats(tmp_path: Path) -> None:
    chat = {"messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {
            "name": "look", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"}]}
    path = write(tmp_path / "chats.jsonl", [{**chat, "id": "a"}, {**chat, "id": "b"}])
    result = replay(path, "--input-format", "chat", "--format", "json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert [(r["id"], r["format"], r["summary"]["calls"]) for r in doc["runs"]] == [
        ("a", "openai", 1), ("b", "openai", 1)]


@pytest.mark.parametrize("forced", ["trace", "claude-code", "codex"])
def test_a_wrong_jsonl_format_is_one_problem_per_kind_with_its_count(forced: str) -> None:
    """Regression: a pretty-printed JSON file forced through a JSON-lines reader printed one
    'not valid JSON' problem per line (169 lines)."""
    path = ROOT / "examples" / "traces" / "openai-airline.json"
    lines = len([x for x in path.read_text().splitlines() if x.strip()])
    result = replay(path, "--input-format", forced)
    assert result.exit_code == 2
    problems = [line for line in result.stderr.splitlines() if "not valid JSON" in line]
    assert problems == [f"toolguard replay: {path}:1: not valid JSON: unexpected end of data "
                        f"(column 1), and {lines - 1} more line(s) like it; {lines} lines "
                        "skipped (not JSON lines? see --input-format)"]


# -- --allow-empty: input without tool calls, whatever its shape -------------------------------


def test_allow_empty_accepts_a_directory_without_recordings(tmp_path: Path) -> None:
    """Regression: ``--allow-empty`` on an empty directory still exited 2."""
    (tmp_path / "readme.txt").write_text("not a recording")
    result = replay(tmp_path, "--allow-empty", "--format", "json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["runs"] == [] and doc["problems"] == []
    assert [n["file"] for n in doc["notes"]] == [str(tmp_path)]
    assert "nothing to replay" in result.stderr
    without = replay(tmp_path)
    assert without.exit_code == 2
    assert f"{tmp_path}: no .eval, .json, .jsonl, .traj, .traj.json files (--allow-empty " \
           "allows it)" in without.stderr


def test_allow_empty_accepts_empty_files(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text("")
    (tmp_path / "b.json").write_text("  \n")
    result = replay(tmp_path, "--allow-empty", "--format", "json")
    assert result.exit_code == 0, result.stderr
    assert [n["message"] for n in json.loads(result.stdout)["notes"]] == [
        "empty file: nothing to replay"] * 2
    assert replay(tmp_path).exit_code == 2


def test_allow_empty_still_reports_unreadable_and_unrecognised_files(tmp_path: Path) -> None:
    (tmp_path / "x.json").write_text('{"neither": "chat nor trace"}')
    result = replay(tmp_path / "x.json", tmp_path / "missing.jsonl", "--allow-empty")
    assert result.exit_code == 2
    assert f"{tmp_path / 'missing.jsonl'}: cannot read" in result.stderr
    assert f"{tmp_path / 'x.json'}: format not recognised" in result.stderr


def test_a_fifo_is_refused_not_waited_on(tmp_path: Path) -> None:
    """Regression (break-it pass): ``replay FIFO`` and ``--tools FIFO`` blocked forever in
    open(), waiting for a writer; now each is a problem naming the file. Run in a child with
    a timeout so that a regression fails instead of hanging the suite."""
    import subprocess
    import sys

    fifo = tmp_path / "calls.jsonl"
    os.mkfifo(fifo)
    trace = ROOT / "examples" / "traces" / "grep-loop.jsonl"
    for args in ([str(fifo)], [str(trace), "--tools", str(fifo)]):
        done = subprocess.run([sys.executable, "-m", "toolguard.cli", "replay", *args],
                              capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 2, done.stderr
        assert f"{fifo}: cannot read: not a regular file (a directory, FIFO or device)" \
               in done.stderr
        assert "Traceback" not in done.stderr


def test_a_utf16_recording_is_named_as_such(tmp_path: Path) -> None:
    path = tmp_path / "chat.json"
    path.write_bytes(json.dumps({"messages": []}).encode("utf-16"))
    result = replay(path)
    assert result.exit_code == 2
    assert (f"{path}: format not recognised: UTF-16 or UTF-32 text (a byte order mark): save "
            "it as UTF-8") in result.stderr


def test_control_characters_of_a_recording_are_printed_escaped(tmp_path: Path) -> None:
    """Regression (break-it pass): a run id, tool name or argument holding ESC sequences
    (clear the screen, retitle the window) reached the terminal raw through the table and
    the problem lines on stderr."""
    call = {"tool": "x\u001b[2Jred", "args": {"k": "\u001b[5m"}}
    path = write(tmp_path / "esc.jsonl", [{"case": "esc\u001b]0;pwned\u0007"}, call, call, call,
                                          {"tool": "\u001b[31m", "args": 5}])
    result = replay(path, "-v")
    assert "\u001b" not in result.stdout and "\u0007" not in result.stdout
    assert "\u001b" not in result.stderr
    assert "esc\\x1b]0;pwned\\x07" in result.stdout and "x\\x1b[2Jred" in result.stdout


def test_printable_escapes_c0_and_c1_controls_but_tab_and_newline() -> None:
    from toolguard.replay._report import printable

    assert printable("a\tb\nc\x00\x1b\x7f\x85\x9fé€") == "a\tb\nc\\x00\\x1b\\x7f\\x85\\x9fé€"


def test_a_kind_seen_once_is_not_counted_as_1_times(tmp_path: Path) -> None:
    path = write(tmp_path / "s.jsonl", [{"type": "session_meta"}, {"type": "odd"}, {"type": "odd"}])
    result = replay(path, "--input-format", "claude-code")
    assert result.exit_code == 2
    assert "(1 times)" not in result.stderr
    assert "lines of type 'session_meta'; lines of type 'odd' (2 times)" in result.stderr


def test_verbose_excerpts_are_redacted_as_the_audit_redacts(tmp_path: Path) -> None:
    """The excerpt is made when the table reads it, not per step: it must still be redacted
    by key (``password``) and by token shape (a GitHub token), for JSON text and objects."""
    token = "ghp_" + "a1B2" * 9
    as_object = {"tool": "w", "args": {"user": "bob", "password": "hunter2"},
                 "result": "Error: no", "is_error": True}
    as_text = {"tool": "t", "args": json.dumps({"header": f"Bearer {token}"}),
               "result": "Error: no", "is_error": True}
    trace = write(tmp_path / "secrets.jsonl",
                  [{"case": "secrets"}, *[as_object] * 3, *[as_text] * 3])
    result = replay(str(trace), "--verbose")
    assert result.exit_code == 0, result.stdout
    steps = result.stdout.split("steps that were not a plain allow")[1]
    assert "block" in steps and "bob" in steps  # the excerpts are there ...
    assert "hunter2" not in result.stdout and token not in result.stdout  # ... redacted
    assert "[REDACTED]" in steps


def test_step_reports_carry_the_excerpt_for_every_decision(tmp_path: Path) -> None:
    from toolguard.replay import read_runs, replay_runs

    trace = write(tmp_path / "one.jsonl", [{"case": "one"}, {
        "tool": "read", "args": {"path": "a.txt", "api_key": "k-123456789"}, "result": "x"}])
    runs, problems = read_runs([trace])
    assert problems == []
    report = replay_runs(runs)
    (step,) = report.runs[0].steps
    assert step.decision == "allow"
    assert step.args == '{"path": "a.txt", "api_key": "[REDACTED]"}'


def test_a_tools_file_sharing_no_tool_with_the_recording_is_noted_once(tmp_path: Path) -> None:
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps([{"type": "function", "function": {
        "name": "other", "parameters": {"type": "object"}}}]))
    result = replay(GREP_LOOP, str(TRACES / "test-rerun-after-edit.jsonl"), "--tools",
                    str(tools), "--format", "json")
    assert result.exit_code == 0
    notes = [n for n in json.loads(result.stdout)["notes"] if n["file"] == str(tools)]
    assert len(notes) == 1 and "defines none of the recordings'" in notes[0]["message"]
    assert result.stderr.count(f"{tools}: note: the tools file defines none") == 1


def test_a_tools_file_sharing_a_tool_is_not_noted(tmp_path: Path) -> None:
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps([{"type": "function", "function": {
        "name": "grep", "parameters": {"type": "object"}}}]))
    result = replay(GREP_LOOP, "--tools", str(tools))
    assert result.exit_code == 0 and "note" not in result.stderr


@pytest.mark.parametrize("mode", ["observe", "off"])
def test_a_policy_mode_replay_does_not_apply_is_noted(tmp_path: Path, mode: str) -> None:
    policy = tmp_path / "p.toml"
    policy.write_text(f'mode = "{mode}"\n')
    result = replay(GREP_LOOP, "--policy", str(policy))
    assert result.exit_code == 0
    assert (f"{policy}: note: replay judges as in enforce mode; the policy's mode = {mode} "
            "is not applied") in result.stderr
    assert "halt" in result.stdout  # judged as enforce all the same


def test_an_enforcing_policy_gets_no_mode_note(tmp_path: Path) -> None:
    policy = tmp_path / "p.toml"
    policy.write_text('mode = "enforce"\n')
    assert "note" not in replay(GREP_LOOP, "--policy", str(policy)).stderr


def test_html_report_is_written_beside_the_table(tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    plain = replay(GREP_LOOP)
    result = replay(GREP_LOOP, "--html", page)
    assert result.exit_code == 0
    assert result.stdout == plain.stdout  # the table is unchanged
    text = page.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>")
    assert '"id":"grep-loop"' in text
    assert "http://" not in text and "https://" not in text  # nothing to fetch
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"]  # no temporary left


def test_html_report_that_cannot_be_written_is_a_clear_error(tmp_path: Path) -> None:
    result = replay(GREP_LOOP, "--html", tmp_path / "missing" / "report.html")
    assert result.exit_code == 2
    assert "cannot write" in result.output
    assert "report.html" in result.output
