"""toolguard.adapters.llama_index with the real LlamaIndex ``FunctionAgent``, its own
``MockFunctionCallingLLM`` (scripted through its ``response_generator``: it requests the tool
calls; no network) and the real workflow runtime's events and waits."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest
from llama_index.core.agent.workflow import AgentOutput, FunctionAgent, ToolCallResult
from llama_index.core.base.llms.types import ChatMessage, MessageRole, ToolCallBlock
from llama_index.core.llms import MockFunctionCallingLLM
from llama_index.core.workflow import Context, Event, HumanResponseEvent

import toolguard as tg
from tests import adapter_support as s
from tests.adapter_support import fresh_runs  # noqa: F401 - the autouse fixture
from toolguard.adapters.llama_index import ApprovalRequired, Halted, ToolGuard

# LlamaIndex's workflows read every attribute of the agent (a pydantic model) when they
# collect its steps, the deprecated ones included: pydantic's warnings about LlamaIndex's code
pytestmark = [
    pytest.mark.filterwarnings("ignore:The `__fields:pydantic.warnings.PydanticDeprecatedSince20"),
    pytest.mark.filterwarnings("ignore:Accessing the:pydantic.warnings.PydanticDeprecatedSince211"),
]


class Script:
    """The model: one scripted message per request (tool calls, then "done"), remembering
    the messages it was sent."""

    def __init__(self, *steps: list[tuple[str, dict[str, Any]]]) -> None:
        self.steps = list(steps)
        self.seen: list[list[ChatMessage]] = []

    def __call__(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatMessage:
        self.seen.append(list(messages))
        n = len(self.seen)
        if not self.steps:
            return ChatMessage(role="assistant", content="done")
        return ChatMessage(role="assistant", blocks=[
            ToolCallBlock(tool_call_id=f"call_{n}_{i}", tool_name=name, tool_kwargs=args)
            for i, (name, args) in enumerate(self.steps.pop(0))])

    def results(self) -> list[ChatMessage]:
        """The tool results the model was sent last, in order."""
        return [m for m in self.seen[-1] if m.role == MessageRole.TOOL]


def agent_for(script: Script, guard_tools: ToolGuard) -> FunctionAgent:
    return FunctionAgent(
        tools=guard_tools.wrap([s.lookup, s.refund, s.write_file, s.read_file]),
        llm=MockFunctionCallingLLM(response_generator=script), timeout=60)


async def drive(guard_tools: ToolGuard, handler: Any, answer: str | None = None
                ) -> list[Event]:
    """Stream the run through the adapter, answering each approval with ``answer``."""
    seen: list[Event] = []
    async for event in guard_tools.stream(handler):
        seen.append(event)
        if isinstance(event, ApprovalRequired):
            assert answer is not None, event.payload
            handler.ctx.send_event(event.answer(answer))
    return seen


async def final(handler: Any) -> str:
    """The agent's answer, once the run ends."""
    output = await handler
    assert isinstance(output, AgentOutput)
    return str(output.response.content)


async def test_the_adapter_script() -> None:
    g, audit = s.guard([], strict_tools=False)  # the wrapper registers the agent's tools
    guard_tools = ToolGuard(g)
    script = Script(*([call] for call in s.SCRIPT))
    agent = agent_for(script, guard_tools)
    handler = agent.run(user_msg="go")

    asked: list[ApprovalRequired] = []
    seen: list[Event] = []

    async def approve_once() -> None:
        async for event in guard_tools.stream(handler):
            seen.append(event)
            if isinstance(event, ApprovalRequired):
                asked.append(event)
                assert s.RUNS == {"lookup": 1}  # the refund waits: it has not run
                handler.ctx.send_event(event.answer("approve"))

    # the refund's approval goes through LlamaIndex's InputRequiredEvent / HumanResponseEvent
    with pytest.raises(tg.RepeatedToolCalls) as halted:
        await approve_once()
    assert halted.value.count == 5
    (request,) = asked
    assert request.payload["tool"] == "refund" and request.payload["args"] == dict(s.REFUND[1])
    assert s.audited(audit) == s.expected(review=True, after_resume=0)
    assert s.bodies(after_resume=0) == s.RUNS
    # the halt paused the run: no model call after the halted one (the 10th request made it)
    assert len(script.seen) == s.HALT_AT + 1 and not handler.is_done()

    texts = [str(m.content) for m in script.results()]
    assert texts[:3] == ["sunny in Paris", "refunded 500 cents on A1",
                         "wrote 5 bytes to notes.txt"]
    assert all(s.CACHED_NOTICE in t for t in texts[3:5])
    assert texts[5:7] == ["contents of notes.txt: hello"] * 2
    assert s.WARN_NOTICE in texts[7]
    assert texts[8].startswith(s.BLOCKED)
    outputs = [e.tool_output for e in seen if isinstance(e, ToolCallResult)]
    assert [o.is_error for o in outputs] == [False] * 8 + [True]  # the block is an error

    # resume: the halted read goes through the guard again (a new turn) and runs; the run
    # goes on in the same handler to the model's answer
    guard_tools.resume(handler, halted.value)
    script.steps = [[s.READ]]
    await drive(guard_tools, handler)
    assert await final(handler) == "done"
    assert s.audited(audit) == s.expected(review=True, after_resume=2)
    assert s.bodies(after_resume=2) == s.RUNS
    assert str(script.results()[-1].content) == "contents of notes.txt: hello"
    # the approval's and the halt's waits were consumed: nothing is left in the workflow state
    assert await handler.ctx.store.get("toolguard_asked") == {}
    assert await handler.ctx.store.get("toolguard_halted") == {}


async def test_a_halt_without_the_stream_wrapper_is_a_paused_run_not_a_done() -> None:
    guard_tools = ToolGuard(s.guard([], strict_tools=False)[0])
    script = Script(*[[s.READ]] * 6)
    handler = agent_for(script, guard_tools).run(user_msg="go")
    kinds = []
    async for event in handler.stream_events():
        kinds.append(type(event).__name__)
        if isinstance(event, Halted):
            assert event.kind == "RepeatedToolCalls" and event.task_id
            break
    assert kinds[-1] == "Halted" and not handler.is_done()
    assert s.RUNS == {"read_file": 3} and len(script.seen) == 5
    await handler.cancel_run()


async def test_a_rejected_call_never_runs_and_the_answer_is_for_that_call_only() -> None:
    g, audit = s.guard([], strict_tools=False)
    guard_tools = ToolGuard(g)
    other = ("refund", {"order_id": "B2", "amount_cents": 700})
    script = Script([s.REFUND, other])  # two calls in review at once, in one message
    handler = agent_for(script, guard_tools).run(user_msg="go")
    answers = {"A1": "reject", "B2": "approve"}
    async for event in guard_tools.stream(handler):
        if isinstance(event, ApprovalRequired):
            order = event.payload["args"]["order_id"]
            handler.ctx.send_event(event.answer(answers[order]))
    await handler
    assert s.RUNS == {"refund": 1}
    rejected, approved = (str(m.content) for m in script.results())
    assert rejected.startswith(s.BLOCKED) and "rejected by the reviewer" in rejected
    assert approved == "refunded 700 cents on B2"
    assert sorted(d for _, d, _ in s.audited(audit)) == sorted(
        [s.REVIEW, s.REVIEW, s.BLOCK, s.ALLOW])


async def test_a_plain_human_response_does_not_approve() -> None:
    """A ``HumanResponseEvent`` that names no call (what a generic human-in-the-loop loop
    sends) answers nothing: the call stays in review until its own answer comes."""
    g, audit = s.guard([], strict_tools=False)
    guard_tools = ToolGuard(g)
    handler = agent_for(Script([s.REFUND]), guard_tools).run(user_msg="go")
    async for event in guard_tools.stream(handler):
        if isinstance(event, ApprovalRequired):
            handler.ctx.send_event(HumanResponseEvent(response="approve"))
            await asyncio.sleep(0.2)
            assert s.RUNS == {}
            handler.ctx.send_event(event.answer("reject"))
    assert await final(handler) == "done"
    assert s.RUNS == {}
    assert [d for _, d, _ in s.audited(audit)] == [s.REVIEW, s.BLOCK]


# LlamaIndex snapshots a Context between runs and warns that the agent's memory is not
# serialisable: its own warning, about its own state
@pytest.mark.filterwarnings("ignore::workflows.context.state_store.UnserializableKeyWarning")
async def test_one_task_per_context_and_ids_in_results_are_not_progress() -> None:
    """Every call carries a new ``tool_id``; the guard records the content only, so the same
    read in the next run of the same Context repeats (warn, block), while another Context is
    another task."""
    g, audit = s.guard([], strict_tools=False)
    guard_tools = ToolGuard(g)
    script = Script()
    agent = agent_for(script, guard_tools)
    ctx = Context(agent)
    results: list[ToolCallResult] = []
    for run_ctx in (ctx, ctx, Context(agent)):
        script.steps = [[s.READ], [s.READ]] if run_ctx is ctx else [[s.READ]]
        handler = agent.run(user_msg="go", ctx=run_ctx)
        results += [e for e in await drive(guard_tools, handler)
                    if isinstance(e, ToolCallResult)]
        assert await final(handler) == "done"
    assert len({r.tool_id for r in results}) == len(results) == 5
    assert s.audited(audit) == [("read_file", s.ALLOW, 1), ("read_file", s.ALLOW, 2),
                                ("read_file", s.WARN, 3), ("read_file", s.BLOCK, 4),
                                ("read_file", s.ALLOW, 1)]
    assert s.RUNS == {"read_file": 4}


async def test_a_tool_that_raises_is_a_failed_call_the_model_reads() -> None:
    def flaky(path: str) -> str:
        """Read a flaky file.

        Args:
            path: which.
        """
        s.RUNS["flaky"] += 1
        raise OSError(f"disk error on {path}")

    g, audit = s.guard([], strict_tools=False)
    guard_tools = ToolGuard(g)
    script = Script([("flaky", {"path": "a.txt"})])
    agent = FunctionAgent(tools=guard_tools.wrap([flaky]),
                          llm=MockFunctionCallingLLM(response_generator=script), timeout=60)
    handler = agent.run(user_msg="go")
    (result,) = [e for e in await drive(guard_tools, handler) if isinstance(e, ToolCallResult)]
    assert await final(handler) == "done"
    assert result.tool_output.is_error and "disk error on a.txt" in result.tool_output.content
    assert isinstance(result.tool_output.exception, OSError)
    assert s.RUNS == {"flaky": 1}
    assert s.audited(audit) == [("flaky", s.ALLOW, 1)]
    assert script.results()[-1].content == result.tool_output.content


async def test_parallel_calls_paused_by_a_halt_all_go_on_after_one_resume() -> None:
    guard_tools = ToolGuard(s.guard([], strict_tools=False)[0])
    other = ("read_file", {"path": "other.txt"})
    script = Script(*[[s.READ]] * 4, [s.READ, other])  # the halt comes in a parallel pair
    handler = agent_for(script, guard_tools).run(user_msg="go")
    with pytest.raises(tg.Halt) as halted:
        await drive(guard_tools, handler)
    assert s.RUNS == {"read_file": 3}
    guard_tools.resume(handler, halted.value)
    await asyncio.wait_for(drive(guard_tools, handler), 30)
    assert await final(handler) == "done"
    assert s.RUNS == {"read_file": 5}  # both paused calls ran once, after the resume
    assert await handler.ctx.store.get("toolguard_halted") == {}  # no waiter left behind


async def test_an_agent_workflow_halts_the_same_way() -> None:
    """``AgentWorkflow`` (LlamaIndex's multi-agent runner) calls the tools through its own
    step: the wrapped tools guard them, and the halt leaves its stream too."""
    from llama_index.core.agent.workflow import AgentWorkflow

    guard_tools = ToolGuard(s.guard([], strict_tools=False)[0])
    script = Script(*[[s.READ]] * 6)
    workflow = AgentWorkflow(agents=[agent_for(script, guard_tools)], timeout=60)
    handler = workflow.run(user_msg="go")
    with pytest.raises(tg.RepeatedToolCalls):
        await drive(guard_tools, handler)
    assert s.RUNS == {"read_file": 3} and len(script.seen) == 5
    await handler.cancel_run()


async def test_a_code_act_agent_refuses_the_guarded_tools() -> None:
    """``CodeActAgent`` calls its tools from generated code, outside any step the guard
    sees; it refuses tools that take the workflow ``Context`` (as the guarded ones do), so
    its run fails before any tool runs: no silent bypass."""
    from llama_index.core.agent.workflow import CodeActAgent

    async def execute(code: str) -> str:
        raise AssertionError("the generated code never runs")

    script = Script()
    agent = CodeActAgent(tools=ToolGuard(s.guard([], strict_tools=False)[0]).wrap([s.read_file]),
                         code_execute_fn=execute,
                         llm=MockFunctionCallingLLM(response_generator=script))
    with pytest.raises(ValueError, match="requires context"):
        await agent.run(user_msg="go")
    assert s.RUNS == {} and script.seen == []
