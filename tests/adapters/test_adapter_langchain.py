"""toolguard.adapters.langchain with the real LangChain v1 / LangGraph and LangChain's own fake
chat model (no network): the adapter script, sync and async, and each decision's shape."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import pytest

if sys.version_info < (3, 11) and not TYPE_CHECKING:  # CI runs 3.11: there they always run
    pytest.skip("LangChain 1.5 needs Python 3.11", allow_module_level=True)

from langchain.agents import create_agent
from langchain.agents.middleware import ToolRetryMiddleware
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatResult
from langchain_core.tools import BaseTool, StructuredTool, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from langgraph.types import Command, interrupt
from pydantic import Field

import toolguard as tg
from tests import adapter_support as s
from tests.adapter_support import fresh_runs  # noqa: F401 - the autouse fixture
from toolguard.adapters.langchain import ToolGuardHalt, ToolGuardMiddleware, guard_tools


class ScriptedChatModel(FakeMessagesListChatModel):
    """LangChain's fake chat model, bindable to tools, remembering what it was sent."""

    seen: list[list[BaseMessage]] = Field(default_factory=list)

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChatModel:
        return self

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None,
                  **kwargs: Any) -> ChatResult:
        self.seen.append(list(messages))
        return super()._generate(messages, stop, run_manager, **kwargs)


def calls(*calls: tuple[str, dict[str, Any]], n: int, tokens: int = 0) -> AIMessage:
    usage = {"input_tokens": tokens, "output_tokens": 1, "total_tokens": tokens + 1}
    return AIMessage(content="", tool_calls=[
        {"name": name, "args": args, "id": f"call_{n}_{i}"} for i, (name, args) in enumerate(calls)
    ], usage_metadata=usage if tokens else None)


def model(*messages: AIMessage) -> ScriptedChatModel:
    return ScriptedChatModel(responses=[*messages, AIMessage(content="done")])


def tools() -> list[BaseTool]:
    lookup = StructuredTool.from_function(coroutine=s.lookup, func=_sync_lookup,
                                          name="lookup", description=s.lookup.__doc__)
    return [lookup, *(StructuredTool.from_function(f) for f in
                      (s.refund, s.write_file, s.read_file))]


def _sync_lookup(city: str) -> str:  # LangChain's sync invoke cannot run an async-only tool
    return asyncio.run(s.lookup(city))





CONFIG: Any = {"configurable": {"thread_id": "thread-1"}}


def invoke(agent: Any, value: Any, mode: str, config: Any = CONFIG) -> Any:
    if mode == "async":
        return asyncio.run(agent.ainvoke(value, config))
    return agent.invoke(value, config)


def tool_texts(messages: Sequence[BaseMessage]) -> list[str]:
    return [str(m.content) for m in messages if isinstance(m, ToolMessage)]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_the_adapter_script(mode: str) -> None:
    lc_tools = tools()
    guard, audit = s.guard(lc_tools)
    middleware = ToolGuardMiddleware(guard)
    fake = model(*(calls(c, n=i, tokens=10) for i, c in enumerate(s.SCRIPT)))
    agent = create_agent(fake, lc_tools, middleware=[middleware], checkpointer=InMemorySaver())

    # the refund goes to review: LangGraph's interrupt() with the request
    out = invoke(agent, {"messages": [("user", "go")]}, mode)
    (pending,) = out["__interrupt__"]
    assert pending.value == {"tool": "refund", "args": s.REFUND[1], "task_id": "thread-1",
                             "idempotency_key": pending.value["idempotency_key"],
                             "reason": "refund requires human approval"}
    assert s.RUNS == {"lookup": 1}

    # approved: the same attempt runs (count 1), then the writes and reads until the halt
    with pytest.raises(tg.RepeatedToolCalls) as halted:
        invoke(agent, Command(resume="approve"), mode)
    assert isinstance(halted.value, ToolGuardHalt)
    assert halted.value.tool == "read_file" and halted.value.count == 5
    task = middleware.task("thread-1")
    assert task.halted
    assert s.audited(audit) == s.expected(review=True, after_resume=0)

    # what the model was sent: the cached notice after the 2nd write, warn and block texts
    texts = tool_texts(fake.seen[-1])
    assert texts[:2] == ["sunny in Paris", "refunded 500 cents on A1"]
    assert texts[2] == "wrote 5 bytes to notes.txt"
    assert s.CACHED_NOTICE in texts[3] and texts[3].startswith("wrote 5 bytes")
    assert s.CACHED_NOTICE in texts[4]
    assert texts[5:7] == ["contents of notes.txt: hello"] * 2
    assert s.WARN_NOTICE in texts[7]
    assert texts[8].startswith(s.BLOCKED)
    errors = [m for m in fake.seen[-1] if isinstance(m, ToolMessage) and m.status == "error"]
    assert [str(m.content) for m in errors] == [texts[8]]

    # history kept: after task.resume() the same thread continues to the end
    task.resume()
    final = invoke(agent, None, mode)
    assert final["messages"][-1].content == "done"
    # LangGraph re-runs the call that halted (count 1 after the resume's new turn), then the 6th
    assert s.audited(audit) == s.expected(review=True, after_resume=2)
    assert [(r.tool, r.result.decision) for r in task.history] == [
        (tool, decision) for tool, decision, _ in s.audited(audit)]
    assert s.bodies(after_resume=2) == s.RUNS
    assert len(tool_texts(final["messages"])) == len(s.SCRIPT)
    # every model response's usage_metadata reached the budget
    assert task.usage.input_tokens == 10 * len(s.SCRIPT)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_parallel_identical_calls_in_one_message_run_once(mode: str) -> None:
    guard, _ = s.guard(tools())
    fake = model(calls(s.WRITE, s.WRITE, s.WRITE, n=0))
    agent = create_agent(fake, tools(), middleware=[ToolGuardMiddleware(guard)],
                         checkpointer=InMemorySaver())
    out = invoke(agent, {"messages": [("user", "go")]}, mode)
    assert s.RUNS == {"write_file": 1}
    texts = tool_texts(out["messages"])
    assert len(texts) == 3 and all(t.startswith("wrote 5 bytes") for t in texts)
    assert sum(s.CACHED_NOTICE in t for t in texts) == 2


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_halt_is_not_retried_by_tool_retry_middleware(mode: str) -> None:
    guard, _ = s.guard(tools())
    fake = model(*(calls(s.READ, n=i) for i in range(5)))
    retry = ToolRetryMiddleware(max_retries=3, initial_delay=0)
    agent = create_agent(fake, tools(),  # the retry middleware outermost: it sees the halt
                         middleware=[retry, ToolGuardMiddleware(guard)],
                         checkpointer=InMemorySaver())
    with pytest.raises(tg.RepeatedToolCalls):
        invoke(agent, {"messages": [("user", "go")]}, mode)
    assert s.RUNS == {"read_file": 3}
    assert guard.task("thread-1").usage.per_tool == {"read_file": 5}  # no retried attempts


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_on_halt_end_ends_the_run_with_a_message_naming_the_halt(mode: str) -> None:
    guard, _ = s.guard(tools())
    fake = model(*(calls(s.READ, n=i) for i in range(6)))
    middleware = ToolGuardMiddleware(guard, task_id="t-end", on_halt="end")
    agent = create_agent(fake, tools(), middleware=[middleware], checkpointer=InMemorySaver())
    out = invoke(agent, {"messages": [("user", "go")]}, mode)
    last = out["messages"][-1]
    assert isinstance(last, AIMessage) and "[toolguard] Stopped" in str(last.content)
    assert "read_file was called 5 times" in str(last.content)
    halt_message = out["messages"][-2]
    assert isinstance(halt_message, ToolMessage) and halt_message.status == "error"
    assert str(halt_message.content).startswith("[toolguard] Halted")
    # a later run of the halted task ends at once, without calling the model
    before = len(fake.seen)
    again = invoke(agent, {"messages": [("user", "and now?")]}, mode)
    assert len(fake.seen) == before and "Stopped" in str(again["messages"][-1].content)
    middleware.task("t-end").resume()
    resumed = invoke(agent, {"messages": [("user", "go on")]}, mode)
    assert resumed["messages"][-1].content == "done" and s.RUNS == {"read_file": 4}


@pytest.mark.parametrize(("answer", "decision", "text"), [
    ("reject", tg.Decision.BLOCK, "approval rejected: rejected by the reviewer"),
    ({"decision": "reject", "reason": "too much"}, tg.Decision.BLOCK,
     "approval rejected: too much"),
    ({"type": "defer"}, tg.Decision.REVIEW, "waiting for a human decision"),
    ("maybe", tg.Decision.REVIEW, "not approve, reject or defer"),
])
def test_an_interrupted_call_is_answered_by_the_resume_value(
        answer: Any, decision: tg.Decision, text: str) -> None:
    guard, _ = s.guard(tools())
    middleware = ToolGuardMiddleware(guard)
    agent = create_agent(model(calls(s.REFUND, n=0)), tools(), middleware=[middleware],
                         checkpointer=InMemorySaver())
    assert invoke(agent, {"messages": [("user", "go")]}, "sync")["__interrupt__"]
    out = invoke(agent, Command(resume=answer), "sync")
    assert s.RUNS == {}
    (message,) = (m for m in out["messages"] if isinstance(m, ToolMessage))
    assert message.status == "error" and text in str(message.content)
    task = middleware.task("thread-1")
    # the resumed attempt is the one that waited: same count
    assert [(r.tool, r.result.decision, r.result.count) for r in task.history] == [
        ("refund", tg.Decision.REVIEW, 1), ("refund", decision, 1)]


def test_guard_tools_guards_a_plain_tool_node_graph() -> None:
    guard, _ = s.guard(tools())
    guarded = guard_tools(guard, tools())
    assert [t.name for t in guarded] == ["lookup", "refund", "write_file", "read_file"]
    assert guarded[2].args == tools()[2].args
    fake = model(*(calls(s.WRITE, n=i) for i in range(3)), *(calls(s.READ, n=3 + i)
                                                               for i in range(5)))

    def call_model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [fake.invoke(state["messages"])]}

    def route(state: MessagesState) -> str:
        last = state["messages"][-1]
        return "tools" if isinstance(last, AIMessage) and last.tool_calls else END

    graph = StateGraph(MessagesState)
    graph.add_node("model", call_model)
    graph.add_node("tools", ToolNode(guarded))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", route, ["tools", END])
    graph.add_edge("tools", "model")
    app = graph.compile(checkpointer=InMemorySaver())
    with pytest.raises(tg.RepeatedToolCalls):
        app.invoke(cast(Any, {"messages": [("user", "go")]}), CONFIG)
    assert s.RUNS == {"write_file": 1, "read_file": 3}
    texts = tool_texts(fake.seen[-1])
    assert s.CACHED_NOTICE in texts[1] and texts[-1].startswith(s.BLOCKED)
    guard.task("thread-1").resume()
    assert app.invoke(None, CONFIG)["messages"][-1].content == "done"


def test_a_tool_error_is_a_failed_call_not_a_crash() -> None:
    def flaky(path: str) -> str:
        """Fails."""
        raise OSError(f"disk full at {path}")

    tool = StructuredTool.from_function(flaky)
    guard = tg.Guard(tools=[tg.mutating(tool)])
    middleware = ToolGuardMiddleware(guard, task_id="t-err")
    agent = create_agent(model(calls(("flaky", {"path": "x"}), n=0)), [tool],
                         middleware=[middleware])
    out = agent.invoke({"messages": [("user", "go")]})
    (message,) = (m for m in out["messages"] if isinstance(m, ToolMessage))
    assert message.status == "error" and "Error (OSError): disk full at x" in message.content
    (record,) = middleware.task("t-err").history
    assert record.result.is_error and record.result.error_type == "OSError"


def test_without_a_thread_id_or_task_id_the_error_says_what_to_pass() -> None:
    agent = create_agent(model(calls(s.READ, n=0)), tools(),
                         middleware=[ToolGuardMiddleware(s.guard(tools())[0])])
    with pytest.raises(ValueError, match="thread_id"):
        agent.invoke({"messages": [("user", "go")]})


def test_on_halt_must_be_raise_or_end() -> None:
    with pytest.raises(ValueError, match="on_halt"):
        ToolGuardMiddleware(tg.Guard(), on_halt="stop")  # type: ignore[arg-type]


def test_token_usage_over_the_budget_halts_after_the_model_call() -> None:
    guard, _ = s.guard(tools(), budget={"max_tokens": 50})
    agent = create_agent(model(calls(s.READ, n=0, tokens=100)), tools(),
                         middleware=[ToolGuardMiddleware(guard)], checkpointer=InMemorySaver())
    with pytest.raises(tg.BudgetExceeded) as halted:
        agent.invoke({"messages": [("user", "go")]}, CONFIG)
    assert halted.value.budget == "max_tokens" and s.RUNS == {}


def test_the_responses_model_prices_its_tokens_for_a_dollar_budget() -> None:
    guard, _ = s.guard(tools(), budget={"max_cost_usd": 0.001})
    priced = calls(s.READ, n=0, tokens=1000)  # gpt-4o: 1000 input tokens cost $0.0025
    priced.response_metadata = {"model_name": "gpt-4o"}
    agent = create_agent(model(priced), tools(), middleware=[ToolGuardMiddleware(guard)],
                         checkpointer=InMemorySaver())
    with pytest.raises(tg.BudgetExceeded) as halted:
        agent.invoke({"messages": [("user", "go")]}, CONFIG)
    assert halted.value.budget == "max_cost_usd" and s.RUNS == {}
    assert guard.task("thread-1").usage.cost_usd == pytest.approx(1000 * 2.5e-6 + 10e-6)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_tg_decorated_function_under_tool_is_guarded_once(mode: str) -> None:
    save = tool(s.save)  # @tool over @tg.mutating: the effect comes from the decorator
    guard = tg.Guard(tools=[save])
    agent = create_agent(model(calls(s.SAVE, n=0), calls(s.SAVE, n=1)), [save],
                         middleware=[ToolGuardMiddleware(guard)], checkpointer=InMemorySaver())
    out = invoke(agent, {"messages": [("user", "go")]}, mode)
    texts = tool_texts(out["messages"])
    assert s.RUNS == {"save": 1} and s.CACHED_NOTICE in texts[1]
    assert guard.task("thread-1").usage.per_tool == {"save": 2}  # not counted twice


def test_a_tool_that_interrupts_itself_still_interrupts_the_run() -> None:
    def confirm(item: str) -> str:
        """Ask a human, then act."""
        answer = interrupt({"confirm": item})
        s.RUNS["confirm"] += 1
        return f"{item}: {answer}"

    confirm_tool = StructuredTool.from_function(confirm)
    guard = tg.Guard(tools=[tg.readonly(confirm_tool)])
    agent = create_agent(model(calls(("confirm", {"item": "x"}), n=0)), [confirm_tool],
                         middleware=[ToolGuardMiddleware(guard)], checkpointer=InMemorySaver())
    out = agent.invoke({"messages": [("user", "go")]}, CONFIG)
    assert out["__interrupt__"][0].value == {"confirm": "x"}
    final = agent.invoke(Command(resume="yes"), CONFIG)
    assert tool_texts(final["messages"]) == ["x: yes"] and s.RUNS == {"confirm": 1}
