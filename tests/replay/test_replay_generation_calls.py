"""Readers that take the calls from the model's own turns: tau2-bench simulation files, and
Langfuse / OpenTelemetry exports whose only record of a tool call is the model's request."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from toolguard.replay import read_runs


def _write(tmp_path: Path, name: str, value: Any) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(value))
    return path


def _tau2(simulations: list[dict[str, Any]]) -> dict[str, Any]:
    return {"timestamp": "t", "info": {"num_trials": 1, "max_steps": 200,
                                        "agent_info": {}, "environment_info": {}},
            "tasks": [], "simulations": simulations}


def test_tau2_simulations_are_the_agents_calls_not_the_simulated_users(tmp_path: Path) -> None:
    messages = [
        {"role": "assistant", "content": "Hi", "tool_calls": None},
        {"role": "user", "content": "my phone has no signal"},
        {"role": "assistant", "content": "", "usage": {"prompt_tokens": 10,
                                                       "completion_tokens": 2},
         "tool_calls": [{"id": "a", "name": "get_customer", "arguments": {"phone": "1"},
                         "requestor": "assistant"},
                        {"id": "b", "name": "get_line", "arguments": {"line": "L1"},
                         "requestor": "assistant"}]},
        {"id": "a", "role": "tool", "content": "{\"id\": 7}", "requestor": "assistant",
         "error": False},
        {"id": "b", "role": "tool", "content": "Error: no such line", "requestor": "assistant",
         "error": True},
        # the simulated user toggles its own phone: not the agent's call
        {"role": "user", "content": "", "tool_calls": [
            {"id": "u", "name": "toggle_airplane_mode", "arguments": {}, "requestor": "user"}]},
        {"id": "u", "role": "tool", "content": "done", "requestor": "user", "error": False},
    ]
    path = _write(tmp_path, "sim.json", _tau2([
        {"id": "s1", "task_id": "7", "trial": 0, "termination_reason": "user_stop",
         "reward_info": {"reward": 1.0}, "messages": messages}]))
    runs, problems = read_runs([path])
    assert problems == []
    [run] = runs
    assert (run.id, run.format, run.meta["reward"], run.meta["task_id"]) == (
        "s1", "tau2-simulations", 1.0, "7")
    calls = run.calls
    assert [(c.tool, c.args, c.result, c.is_error) for c in calls] == [
        ("get_customer", {"phone": "1"}, "{\"id\": 7}", False),
        ("get_line", {"line": "L1"}, "Error: no such line", True),
    ]
    assert calls[0].batch == calls[1].batch is not None


def _generation(start: str, output: Any, given: Any = None) -> dict[str, Any]:
    return {"id": start, "type": "GENERATION", "name": "chat", "startTime": start,
            "input": given or [], "output": output, "usageDetails": {"input": 5, "output": 1}}


def test_langfuse_export_of_model_turns_only_takes_the_requested_calls(tmp_path: Path) -> None:
    """No observation is a tool call: the generations' tool_calls are the calls, answered by
    the tool messages of a later generation's input."""
    request = {"role": "assistant", "tool_calls": [
        {"id": "c1", "type": "function",
         "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]}
    export = {"trace": {"id": "t1", "name": "agent"}, "observations": [
        _generation("2025-01-01T00:00:01Z", request),
        _generation("2025-01-01T00:00:02Z", request, [
            request, {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]),
        _generation("2025-01-01T00:00:03Z", {"role": "assistant", "content": "It is sunny."},
                    [{"role": "tool", "tool_call_id": "c1", "content": "sunny"}]),
    ]}
    runs, problems = read_runs([_write(tmp_path, "lf.json", export)])
    assert problems == []
    [run] = runs
    assert [(c.tool, c.arguments, c.result) for c in run.calls] == [
        ("get_weather", "{\"city\": \"Paris\"}", "sunny"),
        ("get_weather", "{\"city\": \"Paris\"}", None),
    ]


def test_otel_spans_without_tool_spans_take_the_requested_calls(tmp_path: Path) -> None:
    def span(n: int, attrs: dict[str, str]) -> dict[str, Any]:
        return {"traceId": "x", "spanId": str(n), "name": "chat m",
                "startTimeUnixNano": str(n), "attributes": [
                    {"key": k, "value": {"stringValue": v}} for k, v in attrs.items()]}

    out = json.dumps([{"role": "assistant", "parts": [
        {"type": "tool_call", "id": "k", "name": "search", "arguments": {"q": "a"}}]}])
    back = json.dumps([{"role": "tool", "parts": [
        {"type": "tool_call_response", "id": "k", "response": "3 hits"}]}])
    doc = {"resourceSpans": [{"scopeSpans": [{"spans": [
        span(1, {"gen_ai.operation.name": "chat", "gen_ai.output.messages": out}),
        span(2, {"gen_ai.operation.name": "chat", "gen_ai.input.messages": back}),
    ]}]}]}
    runs, problems = read_runs([_write(tmp_path, "spans.json", doc)])
    assert problems == []
    assert [(c.tool, c.args, c.result) for c in runs[0].calls] == [("search", {"q": "a"},
                                                                     "3 hits")]


def test_a_tau2_file_replays_from_the_command_line(tmp_path: Path) -> None:
    path = _write(tmp_path, "sim.json", _tau2([{"id": "s", "messages": [
        {"role": "assistant", "tool_calls": [{"id": "1", "name": "f", "arguments": {}}]},
        {"role": "tool", "id": "1", "content": "ok"}]}]))
    done = subprocess.run([sys.executable, "-m", "toolguard.cli", "replay", "--format",
                           "json", str(path)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["totals"]["calls"] == 1
