"""toolguard.adapters.crewai with the real CrewAI, a scripted ``BaseLLM`` (CrewAI's own
extension point for a custom model; no network) and its real crew, agent executor, native
tool calling and tool call hooks."""

from __future__ import annotations

import os

os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")  # offline: before crewai loads
os.environ.setdefault("OTEL_SDK_DISABLED", "true")
os.environ.setdefault("CREWAI_TRACING_ENABLED", "false")

import io
import json
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import Field

with warnings.catch_warnings():  # crewai.rag refuses the attribute its own submodule sets
    warnings.simplefilter("ignore", ImportWarning)
    from crewai import Agent, Crew, CrewOutput, Task
    from crewai.hooks import HookAborted, get_after_tool_call_hooks
    from crewai.llms.base_llm import BaseLLM
    from crewai.tools import BaseTool, tool

import toolguard as tg
from tests import adapter_support as s
from tests.adapter_support import fresh_runs  # noqa: F401 - the autouse fixture
from toolguard.adapters.crewai import ToolGuard
from toolguard.stores.sqlite import SQLiteStore

# CrewAI reads its own deprecated fields (function_calling_llm, ...) while it sets up
pytestmark = pytest.mark.filterwarnings(r"ignore::DeprecationWarning:crewai\..*")


class Script(BaseLLM):
    """One scripted response per model request (tool calls, then "done"), remembering the
    messages it was sent."""

    steps: list[list[tuple[str, dict[str, Any]]]] = Field(default_factory=list)
    seen: list[list[Any]] = Field(default_factory=list)

    def call(self, messages: Any, tools: Any = None, callbacks: Any = None,
             available_functions: Any = None, from_task: Any = None, from_agent: Any = None,
             response_model: Any = None, **kwargs: Any) -> Any:
        self.seen.append(json.loads(json.dumps(messages, default=str)))
        if not self.steps:
            return "done"
        n = len(self.seen)
        return [{"id": f"call_{n}_{i}", "type": "function",
                 "function": {"name": name, "arguments": json.dumps(call_args)}}
                for i, (name, call_args) in enumerate(self.steps.pop(0))]

    def supports_function_calling(self) -> bool:
        return True

    def results(self) -> list[str]:
        """Every tool result the model was sent last, in order."""
        return [str(m["content"]) for m in self.seen[-1] if m.get("role") == "tool"]


@tool("lookup")
def lookup(city: str) -> str:
    """Look up the weather of a city."""
    s.RUNS["lookup"] += 1
    return f"sunny in {city}"


@tool("refund")
def refund(order_id: str, amount_cents: int) -> str:
    """Refund an order (amount in cents)."""
    return s.refund(order_id, amount_cents)


@tool("write_file")
def write_file(path: str, text: str) -> str:
    """Write a file."""
    return s.write_file(path, text)


@tool("read_file")
def read_file(path: str) -> str:
    """Read a file."""
    return s.read_file(path)


@tool("broken")
def broken(path: str) -> str:
    """A write that fails."""
    s.RUNS["broken"] += 1
    raise OSError(f"disk full writing {path}")


TOOLS: list[BaseTool] = [lookup, refund, write_file, read_file, broken]


def crew_for(script: Script) -> Crew:
    agent = Agent(role="clerk", goal="help", backstory="a clerk", llm=script, tools=TOOLS,
                  max_iter=50)
    return Crew(agents=[agent], tasks=[Task(description="go", expected_output="anything",
                                            agent=agent)])


def finished(crew: Crew) -> str:
    """``crew.kickoff()``'s final answer (the run must end, not halt)."""
    output = crew.kickoff()
    assert isinstance(output, CrewOutput)
    return output.raw


@pytest.fixture
def hooks_closed() -> Iterator[list[ToolGuard]]:
    """The adapters a test registers, unregistered after it (CrewAI's hooks are global)."""
    made: list[ToolGuard] = []
    yield made
    for guard_hooks in made:
        guard_hooks.close()


def test_the_adapter_script(monkeypatch: pytest.MonkeyPatch,
                            hooks_closed: list[ToolGuard]) -> None:
    g, audit = s.guard([], strict_tools=False)  # the hooks register the crew's tools
    guard_hooks = ToolGuard(g)
    hooks_closed.append(guard_hooks)
    # the refund's approval: the person at the console types "approve" (CrewAI's own
    # request_human_input reads it)
    monkeypatch.setattr("sys.stdin", io.StringIO("approve\n"))
    script = Script(model="scripted", steps=[[call] for call in s.SCRIPT])
    crew = crew_for(script)

    with pytest.raises(tg.RepeatedToolCalls) as halted:
        crew.kickoff()
    assert halted.value.count == 5
    assert isinstance(halted.value, HookAborted)  # what CrewAI lets through its hooks
    assert s.audited(audit) == s.expected(review=False, after_resume=0)
    assert s.bodies(after_resume=0) == s.RUNS

    texts = script.results()
    assert texts[:3] == ["sunny in Paris", "refunded 500 cents on A1",
                         "wrote 5 bytes to notes.txt"]
    assert all(s.CACHED_NOTICE in t for t in texts[3:5])
    assert texts[5:7] == ["contents of notes.txt: hello"] * 2
    assert s.WARN_NOTICE in texts[7]
    assert texts[8].startswith(s.BLOCKED)
    assert not any("blocked by hook" in t for t in texts)  # the guard's text, not CrewAI's

    # resume: the task goes on; kickoff again, and the model's next read runs (a new turn)
    guard_hooks.task(str(crew.id)).resume()
    script.steps = [[s.READ]]
    assert finished(crew) == "done"
    assert s.audited(audit) == s.expected(review=False, after_resume=1)
    assert s.bodies(after_resume=1) == s.RUNS


@pytest.mark.parametrize(("answer", "decision"), [
    ("reject\n", s.BLOCK), ("\n", s.REVIEW), ("maybe later\n", s.REVIEW)])
def test_a_call_not_approved_at_the_console_never_runs(
        answer: str, decision: tg.Decision, monkeypatch: pytest.MonkeyPatch,
        hooks_closed: list[ToolGuard]) -> None:
    g, audit = s.guard([], strict_tools=False)
    hooks_closed.append(ToolGuard(g))
    monkeypatch.setattr("sys.stdin", io.StringIO(answer))
    script = Script(model="scripted", steps=[[s.REFUND]])
    assert finished(crew_for(script)) == "done"
    assert s.RUNS == {}  # rejected, or deferred (no clear answer): it waits, not run
    assert [d for _, d, _ in s.audited(audit)] == [decision]
    assert script.results()[-1].startswith("[toolguard]")


def test_an_approver_given_decides_instead_of_the_console(
        hooks_closed: list[ToolGuard]) -> None:
    asked: list[tg.ApprovalRequest] = []

    def approver(request: tg.ApprovalRequest) -> tg.ApprovalDecision:
        asked.append(request)
        return tg.approve()

    g, _ = s.guard([], strict_tools=False)
    hooks_closed.append(ToolGuard(g, task_id="t-crew", approver=approver))
    assert finished(crew_for(Script(model="scripted", steps=[[s.REFUND]]))) == "done"
    assert s.RUNS == {"refund": 1}
    assert [(r.tool, r.task_id) for r in asked] == [("refund", "t-crew")]


def test_parallel_identical_writes_in_one_response_run_once(
        hooks_closed: list[ToolGuard]) -> None:
    g, audit = s.guard([], strict_tools=False)
    hooks_closed.append(ToolGuard(g))
    script = Script(model="scripted", steps=[[s.WRITE, s.WRITE, s.WRITE]])
    assert finished(crew_for(script)) == "done"
    assert s.RUNS == {"write_file": 1}
    assert sorted(d for _, d, _ in s.audited(audit)) == sorted([s.ALLOW, s.CACHED, s.CACHED])


def test_a_tool_that_raises_is_a_failure_not_a_result(hooks_closed: list[ToolGuard]) -> None:
    g = tg.Guard(tg.load_policy_dict({"tools": {"broken": {"effect": "mutating"}}}),
                 strict_tools=False)
    guard_hooks = ToolGuard(g, task_id="t-broken")
    hooks_closed.append(guard_hooks)
    call = ("broken", {"path": "a.txt"})
    script = Script(model="scripted", steps=[[call], [call]])
    assert finished(crew_for(script)) == "done"
    # a failed write is not cached as done: the identical retry runs again
    assert s.RUNS == {"broken": 2}
    assert [r.result.is_error for r in guard_hooks.task("t-broken").history] == [True, True]
    assert all("disk full writing a.txt" in t for t in script.results())


def test_close_unregisters_the_hooks() -> None:
    guard_hooks = ToolGuard(s.guard([], strict_tools=False)[0])
    assert guard_hooks.after_tool_call in get_after_tool_call_hooks()
    with guard_hooks:
        pass
    assert guard_hooks.after_tool_call not in get_after_tool_call_hooks()
    # unguarded now: the identical reads all run (four: CrewAI stops a fifth itself)
    assert finished(crew_for(Script(model="scripted", steps=[[s.READ]] * 4))) == "done"
    assert s.RUNS == {"read_file": 4}


class TextScript(Script):
    """The same script for a model without native tool calling: CrewAI's text (ReAct)
    format, parsed by CrewAI's own tool usage."""

    def call(self, messages: Any, tools: Any = None, callbacks: Any = None,
             available_functions: Any = None, from_task: Any = None, from_agent: Any = None,
             response_model: Any = None, **kwargs: Any) -> Any:
        self.seen.append(json.loads(json.dumps(messages, default=str)))
        if not self.steps:
            return "Thought: I have it.\nFinal Answer: done"
        ((name, call_args),) = self.steps.pop(0)
        return f"Thought: next.\nAction: {name}\nAction Input: {json.dumps(call_args)}"

    def supports_function_calling(self) -> bool:
        return False


def test_the_text_tool_format_is_guarded_too(hooks_closed: list[ToolGuard]) -> None:
    g, audit = s.guard([], strict_tools=False)
    hooks_closed.append(ToolGuard(g))
    script = TextScript(model="scripted", steps=[[s.WRITE]] * 2 + [[s.READ]] * 5)
    with pytest.raises(tg.RepeatedToolCalls):
        crew_for(script).kickoff()
    # the text format refuses an input identical to the previous call's itself: the reads
    # after the first did not run, and are recorded as failed calls, not as results
    assert s.RUNS == {"write_file": 1, "read_file": 1}
    assert [d for _, d, _ in s.audited(audit)] == [
        s.ALLOW, s.CACHED, s.ALLOW, s.ALLOW, s.WARN, s.BLOCK, s.HALT]
    assert any(s.CACHED_NOTICE in str(m) for m in script.seen[-1])


def test_an_agent_kicked_off_alone_halts_as_its_own_task(
        hooks_closed: list[ToolGuard]) -> None:
    g, audit = s.guard([], strict_tools=False)
    guard_hooks = ToolGuard(g)
    hooks_closed.append(guard_hooks)
    agent = Agent(role="clerk", goal="help", backstory="a clerk", tools=TOOLS,
                  llm=Script(model="scripted", steps=[[s.READ]] * 5))
    with pytest.raises(tg.RepeatedToolCalls):
        agent.kickoff("go")
    assert s.RUNS == {"read_file": 3}
    assert {e.task_id for e in audit.events} == {str(agent.id)}
    assert guard_hooks.task(str(agent.id)).halted


async def test_an_async_kickoff_halts_too(hooks_closed: list[ToolGuard]) -> None:
    g, _ = s.guard([], strict_tools=False)
    hooks_closed.append(ToolGuard(g))
    with pytest.raises(tg.RepeatedToolCalls):
        await crew_for(Script(model="scripted", steps=[[s.READ]] * 5)).akickoff()
    assert s.RUNS == {"read_file": 3}


def test_a_failing_store_blocks_the_call_and_stops_the_run(
        tmp_path: Path, hooks_closed: list[ToolGuard]) -> None:
    not_a_store = tmp_path / "state.db"
    not_a_store.write_bytes(b"this is not a SQLite database, " * 200)
    g = tg.Guard(s.policy(), store=SQLiteStore(not_a_store), strict_tools=False)
    hooks_closed.append(ToolGuard(g))
    with pytest.raises(HookAborted) as stopped:  # fail closed: CrewAI does not go on
        crew_for(Script(model="scripted", steps=[[s.WRITE]])).kickoff()
    assert isinstance(stopped.value.__cause__, tg.StoreError)
    assert s.RUNS == {}
