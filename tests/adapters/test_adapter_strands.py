"""toolguard.adapters.strands with the real Strands Agents, a scripted ``Model`` (Strands' own
model extension point; no network) and its real event loop, hooks and interrupts."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from strands import Agent, tool
from strands.models import Model
from strands.types.interrupt import InterruptResponseContent

import toolguard as tg
from tests import adapter_support as s
from tests.adapter_support import fresh_runs  # noqa: F401 - the autouse fixture
from toolguard.adapters.strands import APPROVAL, ToolGuard


class Script(Model):
    """One scripted response per model request (tool calls, then "done"), remembering the
    messages it was sent."""

    def __init__(self, *steps: list[tuple[str, dict[str, Any]]]) -> None:
        self.steps = list(steps)
        self.seen: list[list[Any]] = []

    def update_config(self, **model_config: Any) -> None:
        pass

    def get_config(self) -> Any:
        return {}

    def structured_output(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def stream(self, messages: Any, *args: Any, **kwargs: Any
                     ) -> AsyncIterator[Any]:
        self.seen.append(json.loads(json.dumps(messages, default=str)))
        n = len(self.seen)
        yield {"messageStart": {"role": "assistant"}}
        if not self.steps:
            yield {"contentBlockDelta": {"delta": {"text": "done"}}}
            yield {"contentBlockStop": {}}
            yield {"messageStop": {"stopReason": "end_turn"}}
            return
        for i, (name, call_args) in enumerate(self.steps.pop(0)):
            yield {"contentBlockStart": {"start": {"toolUse": {"toolUseId": f"call_{n}_{i}",
                                                               "name": name}}}}
            yield {"contentBlockDelta": {"delta": {"toolUse": {"input": json.dumps(call_args)}}}}
            yield {"contentBlockStop": {}}
        yield {"messageStop": {"stopReason": "tool_use"}}

    def results(self) -> list[dict[str, Any]]:
        """Every tool result the model was sent last, in order."""
        return [block["toolResult"] for m in self.seen[-1] for block in m["content"]
                if "toolResult" in block]


def agent_for(script: Script, hooks: ToolGuard) -> Agent:
    return Agent(model=script, tools=[tool(s.lookup), tool(s.refund), tool(s.write_file),
                                      tool(s.read_file)],
                 hooks=[hooks], callback_handler=None, agent_id="a1")


def answer(interrupt_id: str, response: str) -> list[InterruptResponseContent]:
    return [{"interruptResponse": {"interruptId": interrupt_id, "response": response}}]


def text(result: dict[str, Any]) -> str:
    return "".join(str(block.get("text", "")) for block in result["content"])


async def test_the_adapter_script() -> None:
    g, audit = s.guard([], strict_tools=False)  # the hooks register the agent's tools
    hooks = ToolGuard(g)
    script = Script(*([call] for call in s.SCRIPT))
    agent = agent_for(script, hooks)

    # the refund goes to review: a Strands interrupt with the guard's payload
    first = await agent.invoke_async("go")
    assert first.stop_reason == "interrupt"
    (interrupt,) = first.interrupts or ()
    assert interrupt.name == APPROVAL and interrupt.reason["tool"] == "refund"
    assert s.RUNS == {"lookup": 1}

    with pytest.raises(tg.RepeatedToolCalls) as halted:
        await agent.invoke_async(answer(interrupt.id, "approve"))
    assert halted.value.count == 5
    assert s.audited(audit) == s.expected(review=True, after_resume=0)

    results = script.results()
    texts = [text(r) for r in results]
    assert texts[:3] == ["sunny in Paris", "refunded 500 cents on A1",
                         "wrote 5 bytes to notes.txt"]
    # a cached answer reaches the model as a success, not an error
    assert all(s.CACHED_NOTICE in t for t in texts[3:5])
    assert [r["status"] for r in results[3:5]] == ["success", "success"]
    assert texts[5:7] == ["contents of notes.txt: hello"] * 2
    assert s.WARN_NOTICE in texts[7]
    assert texts[8].startswith(s.BLOCKED) and results[8]["status"] == "error"

    # resume: the next message; the model's next read runs (a new turn)
    hooks.task("a1").resume()
    script.steps = [[s.READ]]
    final = await agent.invoke_async("go on")
    assert str(final).strip() == "done"
    assert s.bodies(after_resume=1) == s.RUNS


async def test_a_halt_is_not_wrapped_by_the_event_loop() -> None:
    from strands.types.exceptions import EventLoopException

    agent = agent_for(Script(*[[s.READ]] * 6), ToolGuard(s.guard([], strict_tools=False)[0]))
    with pytest.raises(tg.Halt) as halted:
        await agent.invoke_async("go")
    assert isinstance(halted.value, tg.RepeatedToolCalls)
    assert isinstance(halted.value, EventLoopException)  # what Strands lets through
    assert s.RUNS == {"read_file": 3}


async def test_a_rejected_interrupt_never_runs_the_call() -> None:
    g, audit = s.guard([], strict_tools=False)
    script = Script([s.REFUND])
    agent = agent_for(script, ToolGuard(g))
    (interrupt,) = (await agent.invoke_async("go")).interrupts or ()
    await agent.invoke_async(answer(interrupt.id, "reject"))
    assert s.RUNS == {}
    assert [d for _, d, _ in s.audited(audit)] == [s.REVIEW, s.BLOCK]
