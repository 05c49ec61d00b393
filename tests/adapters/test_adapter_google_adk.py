"""toolguard.adapters.google_adk with the real Google ADK, a scripted ``BaseLlm`` (ADK's own
model extension point; no network) and ADK's in-memory runner and sessions."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

import pytest
from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.events import Event
from google.adk.models import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import InMemoryRunner
from google.genai import types
from pydantic import Field

import toolguard as tg
from tests import adapter_support as s
from tests.adapter_support import fresh_runs  # noqa: F401 - the autouse fixture
from toolguard.adapters.google_adk import ToolGuard


class Script(BaseLlm):
    """One scripted response per model request (tool calls, then "done"), remembering the
    requests it was sent."""

    steps: list[list[tuple[str, dict[str, Any]]]]
    seen: list[LlmRequest] = Field(default_factory=list)

    async def generate_content_async(self, llm_request: LlmRequest, stream: bool = False
                                     ) -> AsyncGenerator[LlmResponse, None]:
        self.seen.append(llm_request)
        n = len(self.seen)
        if not self.steps:
            yield LlmResponse(content=types.Content(role="model",
                                                    parts=[types.Part(text="done")]))
            return
        calls = self.steps.pop(0)
        yield LlmResponse(content=types.Content(role="model", parts=[
            types.Part(function_call=types.FunctionCall(name=name, args=args,
                                                        id=f"call_{n}_{i}"))
            for i, (name, args) in enumerate(calls)]))

    def responses(self) -> list[dict[str, Any]]:
        """The function responses in the last request the model was sent, in order."""
        return [dict(p.function_response.response or {})
                for c in self.seen[-1].contents for p in c.parts or []
                if p.function_response is not None]


def runner_for(script: Script, plugin: ToolGuard) -> InMemoryRunner:
    agent = LlmAgent(name="helper", model=script, instruction="help",
                     tools=[s.lookup, s.refund, s.write_file, s.read_file])
    return InMemoryRunner(app=App(name="app", root_agent=agent, plugins=[plugin]))


def message(text: str) -> types.Content:
    return types.Content(role="user", parts=[types.Part(text=text)])


async def run(plugin: ToolGuard, runner: InMemoryRunner, new_message: types.Content
              ) -> list[Event]:
    return [event async for event in plugin.run_async(
        runner, user_id="u", session_id="s1", new_message=new_message)]


async def start(runner: InMemoryRunner) -> None:
    await runner.session_service.create_session(app_name="app", user_id="u", session_id="s1")


def confirmations(events: list[Event]) -> list[types.FunctionCall]:
    return [call for e in events for call in e.get_function_calls()
            if call.name == "adk_request_confirmation"]


def answer(call: types.FunctionCall, confirmed: bool) -> types.Content:
    return types.Content(role="user", parts=[types.Part(function_response=types.FunctionResponse(
        name=call.name, id=call.id, response={"confirmed": confirmed}))])


async def test_the_adapter_script() -> None:
    g, audit = s.guard([], strict_tools=False)  # the plugin registers the agent's tools
    plugin = ToolGuard(g)
    script = Script(model="scripted", steps=[[call] for call in s.SCRIPT])
    runner = runner_for(script, plugin)
    await start(runner)

    # the refund goes to review: ADK's own confirmation request, with the guard's payload
    first = await run(plugin, runner, message("go"))
    (asked,) = confirmations(first)
    assert asked.args is not None
    payload = asked.args["toolConfirmation"]["payload"]
    assert payload["tool"] == "refund" and payload["args"] == {"order_id": "A1",
                                                              "amount_cents": 500}
    assert s.RUNS == {"lookup": 1}
    assert payload["idempotency_key"] in plugin.task("s1").pending_approvals

    # approved: ADK runs the call again; then the write runs once and the read halts
    with pytest.raises(tg.RepeatedToolCalls) as halted:
        await run(plugin, runner, answer(asked, True))
    assert type(halted.value) is tg.RepeatedToolCalls and halted.value.count == 5
    assert s.audited(audit) == s.expected(review=True, after_resume=0)
    assert plugin.halt is None  # raised once, not again

    texts = [str(r.get("result", r.get("error"))) for r in script.responses()]
    assert texts[:3] == ["sunny in Paris", "refunded 500 cents on A1",
                         "wrote 5 bytes to notes.txt"]
    assert all(s.CACHED_NOTICE in t for t in texts[3:5])
    assert texts[5:7] == ["contents of notes.txt: hello"] * 2
    assert s.WARN_NOTICE in texts[7]
    assert "error" in script.responses()[8] and texts[8].startswith(s.BLOCKED)

    # resume: a new message in the same session; the model's next read runs (a new turn)
    plugin.task("s1").resume()
    script.steps = [[s.READ]]
    final = await run(plugin, runner, message("go on"))
    assert final[-1].content is not None and final[-1].content.parts is not None
    assert final[-1].content.parts[0].text == "done"
    assert s.audited(audit) == s.expected(review=True, after_resume=1)
    assert s.bodies(after_resume=1) == s.RUNS


async def test_a_halt_through_the_plain_runner_is_not_a_done() -> None:
    plugin = ToolGuard(s.guard([], strict_tools=False)[0])
    script = Script(model="scripted", steps=[[s.READ]] * 6)
    runner = runner_for(script, plugin)
    await start(runner)
    with pytest.raises(RuntimeError) as raised:  # ADK wraps what a plugin raises
        async for _ in runner.run_async(user_id="u", session_id="s1", new_message=message("go")):
            pass
    assert isinstance(raised.value.__cause__, tg.RepeatedToolCalls)
    with pytest.raises(tg.RepeatedToolCalls):
        plugin.check()
    plugin.check()  # once
    assert s.RUNS == {"read_file": 3}


async def test_a_rejected_confirmation_never_runs_the_call() -> None:
    g, audit = s.guard([], strict_tools=False)
    plugin = ToolGuard(g)
    script = Script(model="scripted", steps=[[s.REFUND]])
    runner = runner_for(script, plugin)
    await start(runner)
    (asked,) = confirmations(await run(plugin, runner, message("go")))
    await run(plugin, runner, answer(asked, False))
    assert s.RUNS == {}
    assert [d for _, d, _ in s.audited(audit)] == [s.REVIEW, s.BLOCK]
    assert plugin.task("s1").pending_approvals == {}
    assert "rejected by the user" in str(script.responses()[-1])


async def test_parallel_identical_writes_in_one_response_run_once() -> None:
    plugin = ToolGuard(s.guard([], strict_tools=False)[0])
    script = Script(model="scripted", steps=[[s.WRITE, s.WRITE, s.WRITE]])
    runner = runner_for(script, plugin)
    await start(runner)
    await run(plugin, runner, message("go"))
    assert s.RUNS == {"write_file": 1}
    texts = [str(r) for r in script.responses()]
    assert len(texts) == 3 and sum(s.CACHED_NOTICE in t for t in texts) == 2


async def test_a_tool_that_raises_is_a_failed_call_the_model_reads() -> None:
    g, audit = s.guard([], strict_tools=False)
    plugin = ToolGuard(g)

    def explode(path: str) -> str:
        """Fail.

        Args:
            path: which.
        """
        raise OSError(f"disk on fire at {path}")

    script = Script(model="scripted", steps=[[("explode", {"path": "x"})]])
    agent = LlmAgent(name="helper", model=script, instruction="help", tools=[explode])
    runner = InMemoryRunner(app=App(name="app", root_agent=agent, plugins=[plugin]))
    await start(runner)
    await run(plugin, runner, message("go"))
    (response,) = script.responses()
    assert "disk on fire at x" in response["error"]
    assert [e.tool for e in audit.events if e.transition == "executing->planning"] == ["explode"]
