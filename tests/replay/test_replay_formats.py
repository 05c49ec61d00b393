"""Reading transcripts for ``toolguard replay`` (trace JSONL, OpenAI Chat Completions, Anthropic
Messages) and replaying them through the engine: batches, user turns, usage, malformed
arguments, bad lines, header effects."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import toolguard as tg
from toolguard.policy._model import BudgetPolicy, LadderPolicy, StorePolicy, ToolPolicy
from toolguard.replay import (
    RecordedCall,
    ReplayInputError,
    Run,
    TokenUsage,
    UserTurn,
    policy_with_effects,
    read_file,
    read_runs,
    read_tool_definitions,
    replay_runs,
)


def write_jsonl(path: Path, lines: list[Any]) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return path


def write_json(path: Path, value: Any) -> Path:
    path.write_text(json.dumps(value))
    return path


def call(tool: str, args: dict[str, Any], result: Any = "ok", **extra: Any) -> dict[str, Any]:
    return {"tool": tool, "args": args, "result": result, "is_error": False, **extra}


def decisions(run: Any) -> list[str]:
    return [str(s.decision) for s in run.steps]


def openai_call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


# -- trace JSONL ------------------------------------------------------------------------------
def test_trace_header_is_metadata_and_effects(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "t.jsonl", [
        {"case": "c1", "source": "https://example.com/1",
         "effects": {"grep": {"effect": "readonly"}}},
        call("grep", {"pattern": "x"}),
    ])
    runs, problems = read_file(path)
    assert problems == []
    [run] = runs
    assert (run.id, run.format, run.line) == ("c1", "trace", 1)
    assert run.meta == {"case": "c1", "source": "https://example.com/1"}
    assert run.effects == {"grep": {"effect": "readonly"}}
    assert run.calls == [RecordedCall("grep", {"pattern": "x"}, None, "ok", line=2)]


def test_trace_optional_fields(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "t.jsonl", [
        {"tool": "pay", "args": {"a": 1}, "raw_args": '{"a": 1.0}', "result": "late",
         "is_error": True, "error_type": "timeout", "batch": 3, "elapsed_s": 2.5,
         "usage": {"input_tokens": 10, "output_tokens": 2}},
    ])
    [run], _ = read_file(path)
    usage, recorded = run.steps
    assert usage == TokenUsage(10, 2, line=1)
    assert isinstance(recorded, RecordedCall)
    assert recorded.arguments == '{"a": 1.0}'  # the model's exact text wins over args
    assert (recorded.timeout, recorded.is_error, recorded.batch, recorded.elapsed_s) == (
        True, True, 3, 2.5)


def test_several_runs_in_one_trace_file(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "many.jsonl", [
        call("a", {}),  # before any header: a run named after the file
        {"run": "second"}, call("b", {}), call("b", {}),
        {"note": "no id"}, call("c", {}),
    ])
    runs, problems = read_file(path)
    assert problems == []
    assert [r.id for r in runs] == ["many", "second", "many#3"]
    assert [len(r.calls) for r in runs] == [1, 2, 1]


def test_run_ids_are_unique_across_files(tmp_path: Path) -> None:
    a = write_jsonl(tmp_path / "a.jsonl", [{"case": "same"}, call("x", {})])
    b = write_jsonl(tmp_path / "b.jsonl", [{"case": "same"}, call("x", {})])
    runs, _ = read_runs([a, b])
    assert [r.id for r in runs] == ["same", "same#2"]


def test_bad_lines_are_reported_with_their_number_and_the_rest_replays(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "t.jsonl", [
        {"case": "c"},
        call("grep", {"q": "x"}),
        "{not json",
        {"tool": 7, "args": {}},
        "[1, 2]",
        {"tool": "grep", "args": {"q": "x"}, "is_error": "yes"},
        call("grep", {"q": "x"}),
        call("grep", {"q": "x"}),
    ])
    runs, problems = read_runs([path])
    assert [(p.file, p.line) for p in problems] == [(str(path), n) for n in (3, 4, 5, 6)]
    assert "not valid JSON" in problems[0].message
    assert "'tool' must be a non-empty string" in problems[1].message
    assert str(problems[3]).startswith(f"{path}:6: 'is_error' must be true or false")
    report = replay_runs(runs, tg.Policy(tools={"grep": ToolPolicy(effect=tg.Effect.READONLY)}))
    assert decisions(report.runs[0]) == ["allow", "allow", "warn"]


def test_a_call_line_that_lost_its_tool_is_reported_not_taken_for_a_header(
        tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "t.jsonl", [
        {"case": "c"},
        call("grep", {"q": "x"}),
        {"args": {"q": "x"}, "result": "y"},
        {"tol": "grep", "args": {"q": "x"}},  # a typo
        {"name": "grep", "arguments": "{}"},  # another format's call
        call("grep", {"q": "x"}),
        {"case": "d", "result": "success", "elapsed_s": 12.5},  # a header with metadata
        call("grep", {"q": "x"}),
    ])
    runs, problems = read_file(path)
    assert [(p.line, p.message) for p in problems] == [
        (3, "a call without 'tool' (it has 'args'); line skipped"),
        (4, "a call without 'tool' (it has 'args'); line skipped"),
        (5, "a call without 'tool' (it has 'arguments'); line skipped")]
    assert [(r.id, len(r.calls)) for r in runs] == [("c", 2), ("d", 1)]


def test_header_effects_that_are_not_an_object_skip_the_run(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "t.jsonl", [
        {"case": "bad", "effects": ["grep"]}, call("grep", {}),
        {"case": "good"}, call("grep", {}),
    ])
    runs, problems = read_file(path)
    assert [r.id for r in runs] == ["good"]
    assert [(p.line, p.message) for p in problems] == [
        (1, "header 'effects' must be an object; run skipped")]


def test_invalid_header_effects_are_a_problem_and_other_runs_replay(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "t.jsonl", [
        {"case": "bad", "effects": {"grep": {"effect": "sometimes"}}}, call("grep", {}),
        {"case": "good", "effects": {"grep": {"effect": "readonly"}}}, call("grep", {}),
    ])
    runs, _ = read_file(path)
    report = replay_runs(runs)
    assert [r.id for r in report.runs] == ["good"]
    [problem] = report.problems
    assert (problem.file, problem.line) == (str(path), 1)
    assert "run bad: invalid header effects: tools.grep.effect" in problem.message


def test_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(ReplayInputError, match="cannot read"):
        read_file(tmp_path / "missing.jsonl")
    empty = tmp_path / "empty.json"
    empty.write_text("  \n")
    with pytest.raises(ReplayInputError, match="empty file"):
        read_file(empty)
    broken = tmp_path / "broken.json"
    broken.write_text('{"messages": [\n  {"role": "user"\n')
    with pytest.raises(ReplayInputError) as info:
        read_file(broken)
    assert info.value.line is not None
    assert "not valid JSON" in info.value.message
    scalar = write_json(tmp_path / "scalar.json", 3)
    with pytest.raises(ReplayInputError, match="format not recognised: a JSON number"):
        read_file(scalar)
    runs, problems = read_runs([tmp_path / "missing.jsonl", scalar])
    assert runs == []
    assert [Path(p.file).name for p in problems] == ["missing.jsonl", "scalar.json"]


def test_a_directory_stands_for_its_transcripts(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "b.jsonl", [call("x", {})])
    write_json(tmp_path / "a.json", [{"role": "user", "content": "hi"}])
    (tmp_path / "notes.txt").write_text("not a transcript")
    runs, problems = read_runs([tmp_path], allow_empty=True)  # a.json has no call
    assert problems == []
    assert [r.id for r in runs] == ["a", "b"]
    (tmp_path / "empty").mkdir()
    runs, problems = read_runs([tmp_path / "empty"])
    assert runs == []
    assert problems[0].message == ("no .eval, .json, .jsonl, .traj, .traj.json files "
                                   "(--allow-empty allows it)")


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["grep", "bash", "edit"]),
                          st.dictionaries(st.sampled_from(["a", "b"]), st.integers()),
                          st.booleans()), max_size=12))
def test_trace_round_trip(calls: list[tuple[str, dict[str, int], bool]]) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = write_jsonl(Path(tmp) / "r.jsonl", [
            {"case": "r"}, *(call(t, a, is_error=e) for t, a, e in calls)])
        runs, problems = read_file(path, allow_empty=True)  # calls may be []
    assert problems == []
    assert [(c.tool, c.args, c.is_error) for c in runs[0].calls] == calls


# -- OpenAI Chat Completions -----------------------------------------------------------------
def test_openai_messages_turns_usage_and_results(tmp_path: Path) -> None:
    path = write_json(tmp_path / "chat.json", {"messages": [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "usage": {"prompt_tokens": 100,
                                                         "completion_tokens": 7},
         "tool_calls": [openai_call("c1", "lookup", '{"id": 1}')]},
        {"role": "tool", "tool_call_id": "c1", "content": "found"},
        {"role": "assistant", "content": None, "tool_calls": [openai_call("c2", "pay", "{}")]},
        {"role": "tool", "tool_call_id": "c2", "content": "Error: card declined"},
        {"role": "user", "content": [{"type": "text", "text": "try again"}]},
    ], "model": "gpt-x", "info": {"bulky": True}})
    [run], problems = read_file(path)
    assert problems == []
    assert (run.id, run.format, run.meta) == ("chat", "openai", {"model": "gpt-x"})
    assert [type(s).__name__ for s in run.steps] == [
        "UserTurn", "TokenUsage", "RecordedCall", "RecordedCall", "UserTurn"]
    lookup, pay = run.calls
    assert (lookup.raw_args, lookup.result, lookup.is_error) == ('{"id": 1}', "found", False)
    assert (pay.result, pay.is_error) == ("Error: card declined", True)  # "Error:" convention
    assert run.steps[1] == TokenUsage(100, 7)


def test_openai_results_match_the_earliest_call_with_that_id(tmp_path: Path) -> None:
    # tau-bench reuses tool_call ids inside one run: a result belongs to the call before it.
    path = write_json(tmp_path / "reused.json", [
        {"role": "assistant", "tool_calls": [openai_call("dup", "think", '{"t": "a"}')]},
        {"role": "tool", "tool_call_id": "dup", "content": ""},
        {"role": "assistant", "tool_calls": [openai_call("x", "calc", '{"e": "1+1"}')]},
        {"role": "tool", "tool_call_id": "x", "content": "2"},
        {"role": "assistant", "tool_calls": [openai_call("dup", "calc", '{"e": "2+2"}')]},
        {"role": "tool", "tool_call_id": "dup", "content": "4"},
        {"role": "assistant", "tool_calls": [openai_call("never", "calc", '{"e": "3"}')]},
    ])
    [run], _ = read_file(path)
    assert [c.result for c in run.calls] == ["", "2", "4", None]


def test_openai_list_of_runs_tau_bench_layout(tmp_path: Path) -> None:
    messages = [{"role": "user", "content": "hi"},
                {"role": "assistant", "tool_calls": [openai_call("a", "t", "{}")]}]
    path = write_json(tmp_path / "bench.json", [
        {"task_id": 3, "trial": 1, "reward": 1.0, "info": {}, "traj": messages},
        {"task_id": 4, "trial": 0, "reward": 0.0, "traj": messages},
        {"task_id": 5, "no_messages": True},
    ])
    runs, problems = read_file(path)
    assert [(r.id, r.meta) for r in runs] == [
        ("3-1", {"task_id": 3, "trial": 1, "reward": 1.0}),
        ("4-0", {"task_id": 4, "trial": 0, "reward": 0.0})]
    assert [p.message for p in problems] == ["run 2 of the list: an object without 'messages' "
                                             "or 'traj'"]


def test_openai_malformed_arguments_are_invalid_as_at_run_time(tmp_path: Path) -> None:
    path = write_json(tmp_path / "bad-args.json", [
        {"role": "assistant", "tool_calls": [openai_call("a", "search", '{"q": "x"')]},
        {"role": "tool", "tool_call_id": "a", "content": "Error: bad arguments"},
        {"role": "assistant", "tool_calls": [openai_call("b", "search", '["q"]')]},
        {"role": "assistant", "tool_calls": [openai_call("c", "search", '{"q": "x"}')]},
    ])
    [run], _ = read_file(path)
    report = replay_runs([run])
    steps = report.runs[0].steps
    assert decisions(report.runs[0]) == ["invalid", "invalid", "allow"]
    assert "not a valid JSON object" in steps[0].reason
    assert not steps[0].executed
    assert report.runs[0].summary()["invalid"] == 2


def test_openai_batch_runs_identical_calls_once(tmp_path: Path) -> None:
    path = write_json(tmp_path / "batch.json", [
        {"role": "user", "content": "cancel it"},
        {"role": "assistant", "tool_calls": [
            openai_call("a", "cancel", '{"id": "R1"}'),
            openai_call("b", "lookup", '{"reservation": "R1"}'),
            openai_call("c", "cancel", '{ "id" : "R1" }')]},
        {"role": "tool", "tool_call_id": "a", "content": "cancelled"},
        {"role": "tool", "tool_call_id": "b", "content": "status: cancelled"},
        {"role": "tool", "tool_call_id": "c", "content": "Error: already cancelled"},
    ])
    [run], _ = read_file(path)
    assert {c.batch for c in run.calls} == {"message 1"}
    report = replay_runs([run])
    assert decisions(report.runs[0]) == ["allow", "allow", "cached"]
    assert report.runs[0].steps[2].reason == "identical to another call in the same batch"


def test_consecutive_trace_calls_with_one_batch_number_form_a_batch(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "t.jsonl", [
        call("w", {"k": 1}, batch=1), call("w", {"k": 1}, batch=1),
        call("w", {"k": 1}, batch=2),
    ])
    report = replay_runs(read_runs([path])[0])
    # the batch runs once; the next message repeats a completed write: the cache answers
    assert decisions(report.runs[0]) == ["allow", "cached", "cached"]


# -- Anthropic Messages ------------------------------------------------------------------------
def anthropic_run() -> dict[str, Any]:
    def use(i: int, command: str) -> dict[str, Any]:
        return {"type": "tool_use", "id": f"t{i}", "name": "bash", "input": {"command": command}}

    def result(i: int, text: str, error: bool = False) -> dict[str, Any]:
        return {"type": "tool_result", "tool_use_id": f"t{i}",
                "content": [{"type": "text", "text": text}], "is_error": error}

    return {"id": "anth", "system": "long system prompt", "messages": [
        {"role": "user", "content": "fix the test"},
        {"role": "assistant", "content": [{"type": "text", "text": "running"}, use(1, "ls")],
         "usage": {"input_tokens": 50, "output_tokens": 5}},
        {"role": "user", "content": [result(1, "a.py")]},
        {"role": "assistant", "content": [use(2, "ls"), use(3, "cat a.py")]},
        {"role": "user", "content": [result(2, "a.py"), result(3, "boom", True)]},
        {"role": "assistant", "content": [use(4, "ls")]},
        {"role": "user", "content": [result(4, "a.py"),
                                     {"type": "text", "text": "look elsewhere"}]},
        {"role": "assistant", "content": [use(5, "ls")]},
        {"role": "user", "content": [result(5, "a.py")]},
    ]}


def test_anthropic_tool_use_and_results(tmp_path: Path) -> None:
    [run], problems = read_file(write_json(tmp_path / "a.json", anthropic_run()))
    assert problems == []
    assert (run.id, run.format, run.meta) == ("anth", "anthropic", {"id": "anth"})
    kinds = [type(s).__name__ for s in run.steps]
    # only the first user message and the one with text are turns; tool_result-only are not
    assert kinds == ["UserTurn", "TokenUsage", "RecordedCall", "RecordedCall", "RecordedCall",
                     "RecordedCall", "UserTurn", "RecordedCall"]
    calls = run.calls
    assert calls[0].args == {"command": "ls"}
    assert calls[0].result == [{"type": "text", "text": "a.py"}]
    assert calls[2].is_error
    assert calls[1].batch == calls[2].batch == "message 3"
    assert calls[0].batch is None


def test_anthropic_user_turn_resets_the_ladder(tmp_path: Path) -> None:
    runs, _ = read_runs([write_json(tmp_path / "a.json", anthropic_run())])
    policy = tg.Policy(tools={"bash": ToolPolicy(effect=tg.Effect.READONLY)})
    report = replay_runs(runs, policy)
    # ls x3 climbs to warn (readonly warn_at 3); the user's hint is progress: the 4th is a 1st
    assert decisions(report.runs[0]) == ["allow", "allow", "allow", "warn", "allow"]
    assert [s.count for s in report.runs[0].steps] == [1, 2, 1, 3, 1]


# -- replay semantics ---------------------------------------------------------------------------
def test_halt_ends_the_run_and_the_rest_is_not_replayed(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "t.jsonl", [call("w", {"k": 1}, is_error=False)] * 2
                       + [{"tool": "w", "args": {"k": 1}, "result": "e", "is_error": True}] * 4
                       + [call("other", {})])
    report = replay_runs(read_runs([path])[0])
    run = report.runs[0]
    # a completed write repeated: cached, cached, then the ladder halts at its 4th attempt
    assert decisions(run) == ["allow", "cached", "cached", "halt"]
    summary = run.summary()
    assert (summary["halt"], summary["halted_at"], summary["calls"], summary["replayed"],
            summary["not_replayed"]) == (True, 3, 7, 4, 3)
    assert "called 4 times" in summary["halt_reason"]
    assert run.steps[-1].effect is tg.Effect.MUTATING
    assert report.totals()["runs_with"]["halt"] == 1


def test_token_usage_counts_toward_the_budget(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "t.jsonl", [
        call("a", {"i": 1}, usage={"input_tokens": 600, "output_tokens": 10}),
        call("a", {"i": 2}, usage={"input_tokens": 600, "output_tokens": 10}),
        call("a", {"i": 3}),
    ])
    report = replay_runs(read_runs([path])[0], tg.Policy(budget=BudgetPolicy(max_tokens=1000)))
    run = report.runs[0]
    assert decisions(run) == ["allow", "halt"]
    halt = run.steps[-1]
    assert (halt.index, halt.tool, halt.effect) == (1, None, None)
    assert "max_tokens" in halt.reason
    assert (run.halted_at, run.replayed, run.calls) == (1, 1, 3)


def test_elapsed_seconds_drive_the_time_budget(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "t.jsonl", [
        call("a", {"i": 1}, elapsed_s=0), call("a", {"i": 2}, elapsed_s=50),
        call("a", {"i": 3}, elapsed_s=130),
    ])
    runs, _ = read_runs([path, path])  # a second run starts its own timeline
    report = replay_runs(runs, tg.Policy(budget=BudgetPolicy(timeout_s=100)))
    for run in report.runs:
        assert decisions(run) == ["allow", "allow", "halt"]
        assert "timeout_s" in (run.halt_reason or "")


def test_a_timed_out_write_retried_goes_to_review(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "t.jsonl", [
        {"tool": "pay", "args": {"n": 1}, "result": "timeout", "is_error": True,
         "error_type": "timeout"},
        call("pay", {"n": 1}),
    ])
    report = replay_runs(read_runs([path])[0])
    assert decisions(report.runs[0]) == ["allow", "review"]
    assert report.runs[0].summary()["review"] == 1


def test_tool_definitions_validate_and_name_the_tools(tmp_path: Path) -> None:
    tools = write_json(tmp_path / "tools.json", [
        {"type": "function", "function": {"name": "search", "description": "Find.",
                                          "parameters": {"type": "object",
                                                         "properties": {"q": {"type": "string"}},
                                                         "required": ["q"]}}},
        {"name": "anthropic_style", "input_schema": {"type": "object"}},
    ])
    specs = read_tool_definitions(tools)
    assert [(s.name, s.description) for s in specs] == [("search", "Find."),
                                                        ("anthropic_style", "")]
    path = write_jsonl(tmp_path / "t.jsonl", [
        call("search", {"q": "x"}), call("search", {"q": 3}), call("nope", {}),
        call("anthropic_style", {"anything": 1}),
    ])
    report = replay_runs(read_runs([path])[0], tools=specs)
    run = report.runs[0]
    assert decisions(run) == ["allow", "invalid", "invalid", "allow"]
    assert "args.q" in run.steps[1].reason
    assert "unknown tool 'nope'" in run.steps[2].reason


@pytest.mark.parametrize(("content", "message"), [
    ('{"tools": 3}', "expected a list of tool definitions"),
    ('[{"function": {}}]', "tool 0: no function.name"),
    ('[{"name": "a"}, {"name": "a"}]', "tool 'a' is defined twice"),
    ('[{"name": "a", "parameters": {"type": "nonsense"}}]', "not a valid JSON Schema"),
    ('[{"name": "a", "parameters": []}]', "parameters must be an object"),
    ("[", "not valid JSON"),
])
def test_bad_tool_definitions(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "tools.json"
    path.write_text(content)
    with pytest.raises(ReplayInputError, match=message):
        read_tool_definitions(path)


def test_header_effects_override_the_policy_key_by_key() -> None:
    policy = tg.Policy(tools={"bash": ToolPolicy(effect=tg.Effect.READONLY, max_polls=7)})
    merged = policy_with_effects(policy, {"bash": {"effect": "mutating"},
                                          "grep": {"effect": "readonly"}}, "<test>")
    assert merged.tools["bash"].effect is tg.Effect.MUTATING
    assert merged.tools["bash"].max_polls == 7  # not set by the header: kept
    assert merged.tools["grep"].effect is tg.Effect.READONLY
    assert policy.tools["bash"].effect is tg.Effect.READONLY  # the original is unchanged


def test_replay_enforces_in_memory_whatever_the_policy_mode_and_store() -> None:
    policy = tg.Policy(mode=tg.Mode.OBSERVE, store=StorePolicy(backend="redis",
                                                               url="redis://nowhere:1/0"),
                       ladder=LadderPolicy(), tools={"a": ToolPolicy(effect=tg.Effect.READONLY)})
    run = Run("r", "<mem>", "trace", steps=[RecordedCall("a", {"x": 1}, result="same")] * 5)
    report = replay_runs([run], policy)
    assert decisions(report.runs[0]) == ["allow", "allow", "warn", "block", "halt"]


def test_a_user_turn_step_alone_is_harmless() -> None:
    run = Run("r", "<mem>", "trace", steps=[UserTurn(), TokenUsage(1, 1)])
    report = replay_runs([run])
    assert report.runs[0].summary()["calls"] == 0
    assert report.totals()["runs"] == 1


def test_a_malformed_chat_run_is_skipped_and_the_others_are_read(tmp_path: Path) -> None:
    good = {"task_id": 1, "trial": 0, "traj": [{"role": "user", "content": "hi"}]}
    path = write_json(tmp_path / "runs.json", [
        {"task_id": 0, "trial": 0, "traj": [{"role": "assistant", "tool_calls": [{"id": "a"}]}]},
        good,
        {"task_id": 2, "trial": 0, "traj": "not a list"},
    ])
    runs, problems = read_file(path)
    assert [r.id for r in runs] == ["1-0"]
    assert [p.message for p in problems] == [
        "run 0 of the list (0-0): message 0: a tool call without function.name; run skipped",
        "run 2 of the list: 'messages' must be a list; run skipped"]


def test_jsonl_of_chat_transcripts(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "chats.jsonl", [
        {"id": "one", "messages": [{"role": "user", "content": "a"}]},
        {"id": "two", "messages": [{"role": "assistant", "tool_calls": [
            openai_call("x", "t", "{}")]}]},
    ])
    runs, problems = read_file(path)
    assert problems == []
    assert [(r.id, r.line, len(r.calls)) for r in runs] == [("one", 1, 0), ("two", 2, 1)]


def test_integers_beyond_64_bits_stay_exact(tmp_path: Path) -> None:
    """Regression: trace lines were parsed with orjson, which turns integers beyond 64 bits
    into floats, so three distinct order ids became one signature."""
    path = tmp_path / "big.jsonl"
    path.write_text("".join(
        json.dumps({"tool": "refund", "args": {"order": 12345678901234567890120 + i},
                    "result": "ok", "is_error": False}) + "\n" for i in range(3)))
    runs, problems = read_runs([path])
    assert problems == []
    assert [c.args["order"] for c in runs[0].calls if c.args] == [
        12345678901234567890120, 12345678901234567890121, 12345678901234567890122]
    report = replay_runs(runs, tg.Policy())
    assert [str(s.decision) for s in report.runs[0].steps] == ["allow"] * 3
    assert len({s.args_hash for s in report.runs[0].steps}) == 3


def test_a_binary_file_is_reported_not_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "noise.json"
    path.write_bytes(bytes(range(256)) * 4)
    runs, problems = read_runs([path])
    assert runs == []
    assert len(problems) == 1 and "not UTF-8" in str(problems[0])
    assert str(problems[0]).startswith(f"{path}:")


def test_a_bad_element_in_a_list_of_runs_is_skipped(tmp_path: Path) -> None:
    run = {"messages": [
        {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {
            "name": "lookup", "arguments": '{"q": "a"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "found"}]}
    path = tmp_path / "runs.json"
    path.write_text(json.dumps([run, 5, run]))
    runs, problems = read_runs([path])
    assert len(runs) == 2
    assert [str(p) for p in problems] == [
        f"{path}: run 1 of the list: expected an object with 'messages' or 'traj', got number"]


def test_a_byte_order_mark_and_a_lone_surrogate_escape_are_read(tmp_path: Path) -> None:
    """Both are what Python's json reads; orjson refuses them, and the whole file was lost."""
    path = tmp_path / "t.jsonl"
    lines = [json.dumps({"case": "c"}), json.dumps(call("grep", {"q": "x"})),
             '{"tool": "grep", "args": {"q": "y"}, "result": "bad \\ud800 byte"}']
    path.write_bytes(b"\xef\xbb\xbf" + "\n".join(lines).encode())
    runs, problems = read_file(path)
    assert problems == []
    assert [(r.id, len(r.calls)) for r in runs] == [("c", 2)]
    assert runs[0].calls[1].result == "bad \ud800 byte"


def test_a_usage_only_trace_line_is_a_step_of_its_run_not_a_header(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "t.jsonl", [
        {"usage": {"input_tokens": 5, "output_tokens": 1}},  # before any call: still no header
        {"case": "c1"},
        call("a", {"i": 1}),
        {"usage": {"input_tokens": 700, "output_tokens": 20}, "elapsed_s": 3},  # final answer
        {"case": "c2"},
        call("a", {"i": 1}),
    ])
    runs, problems = read_file(path)
    assert problems == []
    assert [r.id for r in runs] == ["t", "c1", "c2"]
    assert runs[0].steps == [TokenUsage(5, 1, 1)]
    assert [type(s).__name__ for s in runs[1].steps] == ["RecordedCall", "TokenUsage"]
    assert runs[1].steps[1] == TokenUsage(700, 20, 4, elapsed_s=3.0)
    report = replay_runs([runs[1]], tg.Policy(budget=BudgetPolicy(max_tokens=500)))
    assert report.runs[0].halted_at is not None  # the answer's tokens count toward the budget


def test_a_bad_usage_only_line_is_reported_with_its_number(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "t.jsonl", [call("a", {}), {"usage": {"input_tokens": -1}}])
    [run], [problem] = read_file(path)
    assert problem.line == 2 and "usage.input_tokens" in problem.message
    assert len(run.calls) == 1


def test_openai_legacy_function_call_transcripts(tmp_path: Path) -> None:
    path = write_json(tmp_path / "legacy.json", [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": None,
         "function_call": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}},
        {"role": "function", "name": "get_weather", "content": "rain"},
        {"role": "assistant", "content": None,
         "function_call": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}},
        {"role": "function", "name": "get_weather", "content": "Error: rate limited"},
    ])
    [run], problems = read_file(path)
    assert problems == []
    assert [(c.tool, c.raw_args, c.result, c.is_error) for c in run.calls] == [
        ("get_weather", '{"city": "Oslo"}', "rain", False),
        ("get_weather", '{"city": "Oslo"}', "Error: rate limited", True)]
    bad = write_json(tmp_path / "bad.json", [{"role": "assistant", "function_call": "x"}])
    assert read_file(bad)[0] == []
    assert "function_call without a name" in read_file(bad)[1][0].message


def test_a_tool_result_without_its_call_is_reported_and_the_run_still_replays(
        tmp_path: Path) -> None:
    path = write_json(tmp_path / "cut.json", {"id": "r1", "messages": [
        {"role": "tool", "tool_call_id": "gone", "content": "cut off from its call"},
        {"role": "assistant", "tool_calls": [openai_call("c1", "lookup", "{}")]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        {"role": "tool", "tool_call_id": "c1", "content": "a second answer"},
    ]})
    [run], problems = read_file(path)
    assert [c.result for c in run.calls] == ["ok"]
    assert [p.message for p in problems] == [
        "the document (r1): message 0: a tool result for call id 'gone', which no earlier "
        "call without a result has; result ignored",
        "the document (r1): message 3: a tool result for call id 'c1', which no earlier "
        "call without a result has; result ignored"]


def test_a_usage_line_with_other_keys_is_still_a_step_and_its_elapsed_moves_the_clock(
        tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "t.jsonl", [
        {"case": "g", "usage": {"input_tokens": 1}},  # a run id: a header, usage is metadata
        call("pay", {"id": 1}, usage={"input_tokens": 50}),
        {"usage": {"input_tokens": 60}, "text": "Done!", "elapsed_s": 30},
        call("pay", {"id": 2}),
    ])
    [run], problems = read_file(path)
    assert problems == [] and run.id == "g" and run.meta["usage"] == {"input_tokens": 1}
    assert [type(s).__name__ for s in run.steps] == [
        "TokenUsage", "RecordedCall", "TokenUsage", "RecordedCall"]
    tokens = replay_runs([run], tg.Policy(budget=BudgetPolicy(max_tokens=100))).runs[0]
    assert tokens.halted_at == 1 and "max_tokens" in (tokens.halt_reason or "")
    timed = replay_runs([run], tg.Policy(budget=BudgetPolicy(timeout_s=10))).runs[0]
    assert timed.halted_at == 1 and "timeout_s" in (timed.halt_reason or "")


@pytest.mark.parametrize("elapsed", ['"yesterday"', "-1", "true", "1" + "0" * 400])
def test_a_bad_elapsed_s_is_a_problem_on_call_and_usage_lines(tmp_path: Path,
                                                              elapsed: str) -> None:
    path = write_jsonl(tmp_path / "t.jsonl", [
        f'{{"tool": "a", "args": {{}}, "elapsed_s": {elapsed}}}',
        f'{{"usage": {{"input_tokens": 1}}, "elapsed_s": {elapsed}}}',
    ])
    _, problems = read_file(path)
    assert [(p.line, p.message) for p in problems] == [
        (1, "'elapsed_s' must be a number of seconds ≥ 0; line skipped"),
        (2, "'elapsed_s' must be a number of seconds ≥ 0; line skipped")]


def test_integers_beyond_64_bits_in_metadata_and_effects_replay_and_print(
        tmp_path: Path) -> None:
    from toolguard.replay._report import jsonl_lines, to_json_text

    big = 123456789012345678901234567890
    path = write_jsonl(tmp_path / "t.jsonl", [
        {"case": "b", "ticket": big, "effects": {"a": {"max_calls": 5}}},
        call("a", {"n": big}),
    ])
    runs, problems = read_file(path)
    assert problems == []
    report = replay_runs(runs, tg.Policy())
    assert report.problems == [] and report.runs[0].replayed == 1
    assert json.loads(to_json_text(report))["runs"][0]["id"] == "b"
    assert str(big) in to_json_text(report)  # exact, not a float
    assert all(json.loads(line) for line in jsonl_lines(report))
    # a count no store can hold is an invalid header, named with its key path
    huge = write_jsonl(tmp_path / "h.jsonl", [{"case": "h", "effects": {"a": {"max_calls": big}}},
                                             call("a", {})])
    report = replay_runs(read_file(huge)[0], tg.Policy())
    assert [p.message for p in report.problems] == [
        f"run h: invalid header effects: tools.a.max_calls: must be an integer below 2**63, "
        f"got {big}"]


def test_a_guard_error_inside_a_run_is_a_problem(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_: Any, **__: Any) -> Any:
        raise tg.ToolGuardError("internal error while guarding a: boom")

    monkeypatch.setattr(tg.Task, "_replay_call", broken)
    path = write_jsonl(tmp_path / "t.jsonl", [call("a", {}), call("a", {"i": 2})])
    report = replay_runs(read_runs([path])[0], tg.Policy())
    assert report.runs[0].error is not None
    [problem] = report.problems
    assert problem.message == ("run t: stopped after 0 call(s) by a guard error: "
                               "ToolGuardError: internal error while guarding a: boom")


def test_messages_the_replay_cannot_use_are_reported_not_dropped(tmp_path: Path) -> None:
    messages = [
        {"role": "developer", "content": "be brief"},  # instructions: quietly skipped
        {"role": "assistant", "tool_calls": [openai_call("c1", "lookup", "{}")],
         "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "?"}]},
        {"tool_call_id": "c1", "content": "no role"},
        {"role": "Tool", "tool_call_id": "c1", "content": "wrong case"},
        {"role": "user", "content": [{"type": "tool_use", "id": "u", "name": "x", "input": {}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
    ]
    for document in (messages, {"id": "r", "messages": messages}):
        [run], problems = read_file(write_json(tmp_path / "m.json", document))
        assert [c.result for c in run.calls] == ["ok"]
        assert [p.message.split(": ", 1)[1] for p in problems] == [
            "message 1: a tool_result block in an assistant message (results come from the "
            "user); block ignored",
            "message 2: role None is not one of user, assistant, tool, function, system or "
            "developer; message ignored",
            "message 3: role 'Tool' is not one of user, assistant, tool, function, system or "
            "developer; message ignored",
            "message 4: a tool_use block in a user message (calls come from the assistant); "
            "block ignored"]


def test_a_string_id_cannot_take_a_legacy_function_result(tmp_path: Path) -> None:
    path = write_json(tmp_path / "clash.json", [
        {"role": "assistant", "tool_calls": [openai_call("function_call:get", "get", "{}")]},
        {"role": "assistant", "function_call": {"name": "get", "arguments": "{}"}},
        {"role": "function", "name": "get", "content": "legacy result"},
        {"role": "tool", "tool_call_id": "function_call:get", "content": "tool result"},
    ])
    [run], problems = read_file(path)
    assert problems == []
    assert [c.result for c in run.calls] == ["tool result", "legacy result"]


def test_a_line_with_usage_and_arguments_but_no_tool_is_a_broken_call(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "t.jsonl", [
        {"run": "r"}, call("f", {"a": 1}),
        {"usage": {"input_tokens": 5}, "args": {"a": 2}, "result": "lost"},
    ])
    [run], [problem] = read_file(path)
    assert (problem.line, problem.message) == (
        3, "a call without 'tool' (it has 'args'); line skipped")
    assert len(run.calls) == 1
