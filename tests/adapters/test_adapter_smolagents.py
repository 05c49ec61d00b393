"""toolguard.adapters.smolagents with the real smolagents, a scripted ``Model`` (smolagents'
own model extension point; no network) and its real ``ToolCallingAgent`` loop."""

from __future__ import annotations

from typing import Any

import pytest
from smolagents import CodeAgent, ToolCallingAgent, tool
from smolagents.models import (
    ChatMessage,
    ChatMessageToolCall,
    ChatMessageToolCallFunction,
    MessageRole,
    Model,
)

import toolguard as tg
from tests import adapter_support as s
from tests.adapter_support import fresh_runs  # noqa: F401 - the autouse fixture
from toolguard.adapters.smolagents import guard_agent


class Script(Model):
    """One scripted response per model request (tool calls, then the final answer),
    remembering the messages it was sent."""

    def __init__(self, *steps: list[tuple[str, dict[str, Any]]]) -> None:
        super().__init__(model_id="scripted")
        self.steps = list(steps)
        self.seen: list[list[Any]] = []

    def generate(self, messages: list[Any], stop_sequences: list[str] | None = None,
                 response_format: dict[str, str] | None = None,
                 tools_to_call_from: list[Any] | None = None, **kwargs: Any) -> ChatMessage:
        self.seen.append(list(messages))
        n = len(self.seen)
        calls = self.steps.pop(0) if self.steps else [("final_answer", {"answer": "done"})]
        return ChatMessage(role=MessageRole.ASSISTANT, content=None, tool_calls=[
            ChatMessageToolCall(id=f"call_{n}_{i}", type="function",
                                function=ChatMessageToolCallFunction(name=name, arguments=args))
            for i, (name, args) in enumerate(calls)])

    def observations(self) -> list[str]:
        """Every tool observation or error the model was sent last, in order."""
        out = []
        for m in self.seen[-1]:
            role = m.role if hasattr(m, "role") else m["role"]
            if role in (MessageRole.TOOL_RESPONSE, "tool-response"):
                content = m.content if hasattr(m, "content") else m["content"]
                out.append("".join(c.get("text", "") for c in content)
                           if isinstance(content, list) else str(content))
        return out


@tool
def lookup(city: str) -> str:
    """Look up the weather of a city.

    Args:
        city: the city's name.
    """
    s.RUNS["lookup"] += 1
    return f"sunny in {city}"


@tool
def refund(order_id: str, amount_cents: int) -> str:
    """Refund an order.

    Args:
        order_id: the order.
        amount_cents: how much, in cents.
    """
    return s.refund(order_id, amount_cents)


@tool
def write_file(path: str, text: str) -> str:
    """Write a file.

    Args:
        path: where.
        text: what.
    """
    return s.write_file(path, text)


@tool
def read_file(path: str) -> str:
    """Read a file.

    Args:
        path: which.
    """
    return s.read_file(path)


TOOLS = [lookup, refund, write_file, read_file]


def approve_all(request: tg.ApprovalRequest) -> tg.ApprovalDecision:
    return tg.approve()


def test_the_adapter_script() -> None:
    g, audit = s.guard([], strict_tools=False)
    script = Script(*([call] for call in s.SCRIPT))
    agent = guard_agent(ToolCallingAgent(tools=TOOLS, model=script, max_steps=20), g,
                        task_id="t-smol", approver=approve_all)
    with pytest.raises(tg.RepeatedToolCalls) as halted:
        agent.run("go")
    assert halted.value.count == 5
    assert s.audited(audit) == s.expected(review=False, after_resume=0)
    texts = script.observations()
    assert texts[0].endswith("sunny in Paris") and texts[2].endswith("wrote 5 bytes to notes.txt")
    assert all(s.CACHED_NOTICE in t for t in texts[3:5])
    assert s.WARN_NOTICE in texts[7] and s.BLOCKED in texts[8]

    # resume: the same run goes on; the model's next read runs (a new turn)
    g.task("t-smol").resume()
    script.steps = [[s.READ]]
    assert agent.run("go on", reset=False) == "done"
    assert s.audited(audit) == s.expected(review=False, after_resume=1)
    assert s.bodies(after_resume=1) == s.RUNS


def test_parallel_identical_writes_in_one_response_run_once() -> None:
    script = Script([s.WRITE, s.WRITE, s.WRITE])
    agent = guard_agent(ToolCallingAgent(tools=TOOLS, model=script),
                        s.guard([], strict_tools=False)[0])
    assert agent.run("go") == "done"
    assert s.RUNS == {"write_file": 1}


def test_a_call_that_needs_approval_without_an_approver_never_runs() -> None:
    g, audit = s.guard([], strict_tools=False)
    script = Script([s.REFUND])
    agent = guard_agent(ToolCallingAgent(tools=TOOLS, model=script), g)
    assert agent.run("go") == "done"
    assert s.RUNS == {} and [d for _, d, _ in s.audited(audit)] == [s.BLOCK]
    assert "no approver is configured" in script.observations()[-1]


def test_a_code_agent_is_refused_not_left_unguarded() -> None:
    agent = CodeAgent(tools=TOOLS, model=Script())
    with pytest.raises(TypeError, match="cannot guard a smolagents CodeAgent"):
        guard_agent(agent, s.guard([], strict_tools=False)[0])
