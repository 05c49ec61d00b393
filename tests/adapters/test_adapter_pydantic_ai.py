"""toolguard.adapters.pydantic_ai with the real pydantic-ai and its own ``FunctionModel`` (no
network): the adapter script, sync and async."""

from __future__ import annotations

import asyncio
import sys
from typing import TYPE_CHECKING, Any

import pytest

if sys.version_info < (3, 11) and not TYPE_CHECKING:  # CI runs 3.11: there they always run
    pytest.skip("pydantic-ai 2.68 needs Python 3.11", allow_module_level=True)

from pydantic_ai import (
    Agent,
    DeferredToolRequests,
    DeferredToolResults,
    RunContext,
    capture_run_messages,
)
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

import toolguard as tg
from tests import adapter_support as s
from tests.adapter_support import fresh_runs  # noqa: F401 - the autouse fixture
from toolguard.adapters.pydantic_ai import ToolGuard


class Script:
    """A ``FunctionModel`` function: one scripted response per model request (tool calls,
    then "done"), remembering the messages it was sent."""

    def __init__(self, *steps: list[tuple[str, dict[str, Any]]], tokens: int = 0) -> None:
        self.steps = list(steps)
        self.tokens = tokens
        self.seen: list[list[ModelMessage]] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.seen.append(list(messages))
        usage = RequestUsage(input_tokens=self.tokens, output_tokens=1 if self.tokens else 0)
        if not self.steps:
            return ModelResponse(parts=[TextPart("done")], usage=usage)
        n = len(self.seen)
        return ModelResponse(parts=[ToolCallPart(name, args, tool_call_id=f"call_{n}_{i}")
                                    for i, (name, args) in enumerate(self.steps.pop(0))],
                             usage=usage)

    def returns(self) -> list[ToolReturnPart]:
        """The tool results in the last request the model was sent."""
        return [p for m in self.seen[-1] if isinstance(m, ModelRequest) for p in m.parts
                if isinstance(p, ToolReturnPart)]


def agent_for(script: Script, capability: ToolGuard) -> Agent[None, str | DeferredToolRequests]:
    agent: Agent[None, str | DeferredToolRequests] = Agent(
        FunctionModel(script), output_type=[str, DeferredToolRequests],
        capabilities=[capability])

    @agent.tool  # a RunContext parameter is the framework's, not an argument
    async def lookup(ctx: RunContext[None], city: str) -> str:
        """Look up the weather of a city."""
        return await s.lookup(city)

    for func in (s.refund, s.write_file, s.read_file):
        agent.tool_plain(func)
    return agent


def run(agent: Agent[None, Any], mode: str, prompt: str | None = "go", **kwargs: Any) -> Any:
    if mode == "async":
        return asyncio.run(agent.run(prompt, **kwargs))
    return agent.run_sync(prompt, **kwargs)


def guard() -> tuple[tg.Guard, tg.MemorySink]:
    return s.guard([], strict_tools=False)  # the capability registers the agent's tools


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_the_adapter_script(mode: str) -> None:
    g, audit = guard()
    capability = ToolGuard(g, task_id="t-pai")
    script = Script(*([call] for call in s.SCRIPT), tokens=7)
    agent = agent_for(script, capability)

    # the refund goes to review: the run ends with DeferredToolRequests naming the key
    first = run(agent, mode)
    requests = first.output
    assert isinstance(requests, DeferredToolRequests)
    (pending,) = requests.approvals
    assert pending.tool_name == "refund" and s.RUNS == {"lookup": 1}
    key = requests.metadata[pending.tool_call_id]["toolguard_key"]
    assert key in capability.task("t-pai").pending_approvals

    approvals = DeferredToolResults(approvals={pending.tool_call_id: True})
    with capture_run_messages() as messages, pytest.raises(tg.RepeatedToolCalls) as halted:
        run(agent, mode, None, message_history=first.all_messages(),
            deferred_tool_results=approvals)
    assert type(halted.value) is tg.RepeatedToolCalls and halted.value.count == 5
    assert s.audited(audit) == s.expected(review=True, after_resume=0)

    texts = [str(p.content) for p in script.returns()]
    assert texts[:3] == ["sunny in Paris", "refunded 500 cents on A1",
                         "wrote 5 bytes to notes.txt"]
    assert all(s.CACHED_NOTICE in t for t in texts[3:5])
    assert texts[5:7] == ["contents of notes.txt: hello"] * 2
    assert s.WARN_NOTICE in texts[7] and texts[8].startswith(s.BLOCKED)
    assert script.returns()[8].outcome == "failed"  # ToolFailed: the model sees a failure

    # history kept: pydantic-ai marks the turn interrupted; a run on those messages closes
    # the call that halted with an "interrupted" result, and the model's next read runs
    # (count 1: resuming starts a new turn)
    capability.task("t-pai").resume()
    final = run(agent, mode, None, message_history=messages)
    assert final.output == "done"
    closed = [p for m in final.all_messages() if isinstance(m, ModelRequest) for p in m.parts
              if isinstance(p, ToolReturnPart) and p.outcome == "interrupted"]
    assert [p.tool_name for p in closed] == ["read_file"]
    assert s.audited(audit) == s.expected(review=True, after_resume=1)
    assert s.bodies(after_resume=1) == s.RUNS
    # every model response's usage reached the budget
    assert capability.task("t-pai").usage.input_tokens == 7 * len(script.seen)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_parallel_identical_calls_in_one_response_run_once(mode: str) -> None:
    script = Script([s.WRITE, s.WRITE, s.WRITE])
    out = run(agent_for(script, ToolGuard(guard()[0], task_id="t")), mode)
    assert out.output == "done" and s.RUNS == {"write_file": 1}
    texts = [str(p.content) for p in script.returns()]
    assert len(texts) == 3 and sum(s.CACHED_NOTICE in t for t in texts) == 2


def test_a_denied_call_is_rejected_in_the_guard_too() -> None:
    g, audit = guard()
    capability = ToolGuard(g)  # task id: the conversation id pydantic-ai keeps
    script = Script([s.REFUND], [s.REFUND])
    agent = agent_for(script, capability)
    first = run(agent, "sync")
    (pending,) = first.output.approvals
    denied = DeferredToolResults(approvals={pending.tool_call_id: False})
    final = run(agent, "sync", None, message_history=first.all_messages(),
                deferred_tool_results=denied)
    assert final.output == "done" and s.RUNS == {}
    assert "approval rejected: The tool call was denied." in str(script.returns()[-1].content)
    assert [d for _, d, _ in s.audited(audit)] == [s.REVIEW, s.BLOCK]
    assert capability.task(first.conversation_id).pending_approvals == {}


def test_model_retry_from_a_tool_still_asks_the_model_again() -> None:
    from pydantic_ai import ModelRetry

    calls: list[str] = []
    script = Script([("pick", {"n": 0})], [("pick", {"n": 1})])
    agent: Agent[None, str] = Agent(FunctionModel(script),
                                    capabilities=[ToolGuard(guard()[0], task_id="t")])

    @agent.tool_plain
    def pick(n: int) -> str:
        """Pick a number."""
        calls.append(str(n))
        if n == 0:
            raise ModelRetry("zero is not allowed, pick another")
        return f"picked {n}"

    assert agent.run_sync("go").output == "done"
    assert calls == ["0", "1"]
    assert "zero is not allowed" in str(script.seen[1][-1].parts[0].content)  # type: ignore[union-attr]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_tg_decorated_tool_per_run_capability_is_guarded_once(mode: str) -> None:
    guard = tg.Guard(tools=[s.save])
    script = Script([s.SAVE], [s.SAVE])
    agent: Agent[None, str] = Agent(FunctionModel(script))
    agent.tool_plain(s.save)  # over @tg.mutating
    out = run(agent, mode, capabilities=[ToolGuard(guard, task_id="t")])  # per run
    assert out.output == "done" and s.RUNS == {"save": 1}
    assert s.CACHED_NOTICE in str(script.returns()[1].content)
    assert guard.task("t").usage.per_tool == {"save": 2}  # not counted twice


def test_two_capabilities_are_two_guards() -> None:
    # the dataclass fields it inherits (id, description) are equal: identity decides
    one, two = ToolGuard(guard()[0]), ToolGuard(guard()[0])
    assert one != two and len({one, two, one}) == 2


def test_the_responses_model_prices_its_tokens_for_a_dollar_budget() -> None:
    g, _ = s.guard([], strict_tools=False, budget={"max_cost_usd": 0.001})
    script = Script([s.READ], tokens=1000)  # gpt-4o: 1000 input tokens cost $0.0025
    agent: Agent[None, str | DeferredToolRequests] = Agent(
        FunctionModel(script, model_name="gpt-4o"), output_type=[str, DeferredToolRequests],
        capabilities=[ToolGuard(g, task_id="t")])
    with pytest.raises(tg.BudgetExceeded) as halted:
        run(agent, "sync")
    assert halted.value.budget == "max_cost_usd"
    assert g.task("t").usage.cost_usd == pytest.approx(1000 * 2.5e-6 + 10e-6)


def test_token_usage_over_the_budget_halts_the_run() -> None:
    g, _ = s.guard([], strict_tools=False, budget={"max_tokens": 50})
    script = Script([s.READ], tokens=100)
    with pytest.raises(tg.BudgetExceeded) as halted:
        run(agent_for(script, ToolGuard(g, task_id="t")), "sync")
    assert halted.value.budget == "max_tokens" and s.RUNS == {}
