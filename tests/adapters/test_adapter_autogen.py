"""toolguard.adapters.autogen with the real AutoGen agentchat: an ``AssistantAgent``, its
own ``ReplayChatCompletionClient`` (a scripted model from ``autogen-ext``; no network) and
its real tool loop."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Callable
from typing import Any

import pytest
from autogen_agentchat.agents import AssistantAgent
from autogen_core import FunctionCall
from autogen_core.models import (
    CreateResult,
    FunctionExecutionResult,
    FunctionExecutionResultMessage,
    ModelInfo,
    RequestUsage,
)
from autogen_core.tools import FunctionTool, StaticWorkbench, ToolOverride
from autogen_ext.models.replay import ReplayChatCompletionClient

import toolguard as tg
from tests import adapter_support as s
from tests.adapter_support import fresh_runs  # noqa: F401 - the autouse fixture
from toolguard.adapters.autogen import ToolGuard
from toolguard.stores import RedisStore

TOOLS: list[Callable[..., Any]] = [s.lookup, s.refund, s.write_file, s.read_file]
INFO = ModelInfo(vision=False, function_calling=True, json_output=False, family="unknown",
                 structured_output=False)
LIMIT = 10.0  # seconds: an agent that waits forever fails the test instead of hanging it


def calls(*step: tuple[str, dict[str, Any]]) -> CreateResult:
    """One model response asking for ``step``'s tool calls."""
    return CreateResult(finish_reason="function_calls", cached=False,
                        usage=RequestUsage(prompt_tokens=0, completion_tokens=0),
                        content=[FunctionCall(id=f"call_{i}", name=name,
                                              arguments=json.dumps(args))
                                 for i, (name, args) in enumerate(step)])


def model(*steps: list[tuple[str, dict[str, Any]]]) -> ReplayChatCompletionClient:
    """AutoGen's scripted model: each step's tool calls, then "done"."""
    return ReplayChatCompletionClient([*(calls(*step) for step in steps), "done"],
                                      model_info=INFO)


def approve_all(request: tg.ApprovalRequest) -> tg.ApprovalDecision:
    return tg.approve()


def agent_for(client: ReplayChatCompletionClient, guarded: ToolGuard, *, context: bool = True,
              **options: Any) -> AssistantAgent:
    return AssistantAgent("agent", client, workbench=guarded.workbench(TOOLS),
                          model_context=guarded.context() if context else None, **options)


async def run(agent: AssistantAgent, task: str) -> Any:
    return await asyncio.wait_for(agent.run(task=task), LIMIT)


async def results(guarded_agent: AssistantAgent) -> list[FunctionExecutionResult]:
    """Every tool result in the agent's model context (what the model reads), in order."""
    return [r for m in await guarded_agent.model_context.get_messages()
            if isinstance(m, FunctionExecutionResultMessage) for r in m.content]


async def test_the_adapter_script() -> None:
    g, audit = s.guard([], strict_tools=False)  # the workbench registers the agent's tools
    guarded = ToolGuard(g, task_id="t-ag", approver=approve_all)
    client = model(*([call] for call in s.SCRIPT))
    agent = agent_for(client, guarded, max_tool_iterations=20)

    with pytest.raises(tg.RepeatedToolCalls) as halted:
        await run(agent, "go")
    assert halted.value.count == 5
    assert s.audited(audit) == s.expected(review=False, after_resume=0)
    assert len(client.create_calls) == s.HALT_AT + 1  # the model is not asked again

    out = await results(agent)
    texts = [r.content for r in out]
    assert texts[:3] == ["sunny in Paris", "refunded 500 cents on A1",
                         "wrote 5 bytes to notes.txt"]
    # a cached answer reaches the model as a success, not an error
    assert all(s.CACHED_NOTICE in t for t in texts[3:5])
    assert [r.is_error for r in out[3:5]] == [False, False]
    assert texts[5:7] == ["contents of notes.txt: hello"] * 2
    assert texts[7].startswith("contents of notes.txt: hello") and s.WARN_NOTICE in texts[7]
    assert texts[8].startswith(s.BLOCKED) and out[8].is_error
    # the halted call has its result in the history (every call the model made has one)
    assert texts[9].startswith("[toolguard] Halted") and out[9].is_error

    # resume: the next message; the model's next read (the script's 6th) runs (a new turn)
    guarded.task.resume()
    final = await run(agent, "go on")
    assert final.messages[-1].content == "done"
    assert s.audited(audit) == s.expected(review=False, after_resume=1)
    assert s.bodies(after_resume=1) == s.RUNS


@pytest.mark.parametrize("reflect", [False, True])
async def test_a_halt_leaves_run_with_autogens_default_one_round_per_run(reflect: bool) -> None:
    # max_tool_iterations=1 (AutoGen's default): each run is one model call and one round of
    # tools, then a summary (or, reflecting, one more model call): the halt still leaves the
    # run in which it happened, before any summary or reflection
    step: list[str | CreateResult] = [calls(s.READ), "reflected"] if reflect else [calls(s.READ)]
    client = ReplayChatCompletionClient(step * 5, model_info=INFO)
    guarded = ToolGuard(s.guard([], strict_tools=False)[0], task_id="t-one")
    agent = agent_for(client, guarded, reflect_on_tool_use=reflect)
    for _ in range(4):  # allow, allow, warn, block: the run ends normally
        await run(agent, "read it")
    asked = len(client.create_calls)
    with pytest.raises(tg.RepeatedToolCalls):
        await run(agent, "read it")
    assert len(client.create_calls) == asked + 1  # no reflection after the halt
    assert s.RUNS == {"read_file": 3}


async def test_a_halt_waits_for_the_rest_of_its_round_and_never_hangs_the_agent() -> None:
    # the 5th read halts while a lookup of the same model response runs (it started first):
    # the lookup finishes and is recorded, then the halt leaves run() (AutoGen gathers a
    # round's calls and waits for all of them: an exception out of a workbench would leave
    # it waiting forever)
    client = model(*[[s.READ]] * 4, [s.LOOKUP, s.READ])
    g, audit = s.guard([], strict_tools=False)
    agent = agent_for(client, ToolGuard(g, task_id="t-par"), max_tool_iterations=10)
    with pytest.raises(tg.RepeatedToolCalls):
        await run(agent, "go")
    assert s.RUNS == {"read_file": 3, "lookup": 1}
    assert ("lookup", s.ALLOW, 1) in s.audited(audit)
    assert len(await results(agent)) == 6


async def test_parallel_identical_writes_in_one_response_run_once() -> None:
    client = model([s.WRITE, s.WRITE, s.WRITE])
    agent = agent_for(client, ToolGuard(s.guard([], strict_tools=False)[0], task_id="t-w"))
    await run(agent, "go")
    assert s.RUNS == {"write_file": 1}
    texts = [r.content for r in await results(agent)]
    assert sum(s.CACHED_NOTICE in t for t in texts) == 2


@pytest.mark.parametrize(("approver", "decisions"), [
    (None, [s.BLOCK]),
    (lambda request: tg.reject("not today"), [s.BLOCK]),
])
async def test_a_call_that_needs_approval_runs_only_when_the_host_approves(
        approver: Any, decisions: list[tg.Decision]) -> None:
    g, audit = s.guard([], strict_tools=False)
    client = model([s.REFUND])
    agent = agent_for(client, ToolGuard(g, task_id="t-ap", approver=approver))
    await run(agent, "refund A1")
    assert s.RUNS == {}
    assert [d for _, d, _ in s.audited(audit)] == decisions
    (out,) = await results(agent)
    assert out.is_error and out.content.startswith(s.BLOCKED)


async def test_an_approved_call_runs_once() -> None:
    g, audit = s.guard([], strict_tools=False)
    asked: list[tg.ApprovalRequest] = []

    async def human(request: tg.ApprovalRequest) -> tg.ApprovalDecision:
        asked.append(request)
        return tg.approve()

    agent = agent_for(model([s.REFUND]), ToolGuard(g, task_id="t-ok", approver=human))
    await run(agent, "refund A1")
    assert s.RUNS == {"refund": 1}
    assert s.audited(audit) == [("refund", s.ALLOW, 1)]
    assert [(r.tool, dict(r.args)) for r in asked] == [s.REFUND]
    assert [r.content for r in await results(agent)] == ["refunded 500 cents on A1"]


async def test_a_workbench_without_the_guards_context_runs_nothing() -> None:
    # without model_context=guarded.context() a halt could not stop the run: fail closed
    agent = agent_for(model([s.WRITE]), ToolGuard(s.guard([], strict_tools=False)[0],
                                                  task_id="t-nc"), context=False)
    await run(agent, "go")
    assert s.RUNS == {}
    (out,) = await results(agent)
    assert out.is_error and "model_context=guarded.context()" in out.content


async def test_invalid_arguments_never_reach_the_tool() -> None:
    # the schema AutoGen lists for the tool validates the call
    client = model([("write_file", {"path": "notes.txt"})])
    agent = agent_for(client, ToolGuard(s.guard([], strict_tools=False)[0], task_id="t-inv"))
    await run(agent, "go")
    assert s.RUNS == {}
    (out,) = await results(agent)
    assert out.is_error and "text" in out.content


def test_a_task_id_is_required() -> None:
    with pytest.raises(ValueError, match="task_id must be a non-empty string"):
        ToolGuard(s.guard([], strict_tools=False)[0], task_id="")


async def test_a_store_that_is_down_stops_the_run_and_runs_nothing() -> None:
    # a guard error leaves agent.run() as itself (fail closed), never into AutoGen's gather
    with socket.socket() as probe:  # a loopback port where no Redis listens
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    store = RedisStore(url=f"redis://127.0.0.1:{port}/0", timeout_s=0.3)
    g = tg.Guard(s.policy(), store=store, strict_tools=False)
    agent = agent_for(model([s.WRITE]), ToolGuard(g, task_id="t-down"))
    with pytest.raises(tg.StoreError):
        await run(agent, "go")
    assert s.RUNS == {}
    (out,) = await results(agent)
    assert out.is_error and "StoreError" in out.content


async def test_a_halt_leaves_run_stream_too() -> None:
    agent = agent_for(model(*[[s.READ]] * 6), ToolGuard(s.guard([], strict_tools=False)[0],
                                                         task_id="t-st"), max_tool_iterations=10)
    seen: list[str] = []

    async def drain() -> None:
        async for item in agent.run_stream(task="go"):
            seen.append(type(item).__name__)

    with pytest.raises(tg.RepeatedToolCalls):
        await asyncio.wait_for(drain(), LIMIT)
    assert "TaskResult" not in seen  # never a result that looks done
    assert seen.count("ToolCallExecutionEvent") == 4 and s.RUNS == {"read_file": 3}


async def test_a_whole_workbench_is_guarded_by_the_names_it_lists() -> None:
    # a workbench (here AutoGen's StaticWorkbench, renaming a tool as McpWorkbench users
    # do) is wrapped as it is: the guard judges the name the model sees and calls
    inner = StaticWorkbench([FunctionTool(s.write_file, "Write a file.")],
                            tool_overrides={"write_file": ToolOverride(name="save_note")})
    g, audit = s.guard([], strict_tools=False)
    guarded = ToolGuard(g, task_id="t-wb")
    agent = AssistantAgent("agent", model(*[[("save_note", dict(s.WRITE[1]))]] * 2),
                           workbench=guarded.workbench(inner), model_context=guarded.context(),
                           max_tool_iterations=5)
    await run(agent, "go")
    assert s.RUNS == {"write_file": 1}
    # a tool the policy does not name is judged as a write (the default): run once
    assert [(tool, d) for tool, d, _ in s.audited(audit)] == [("save_note", s.ALLOW),
                                                               ("save_note", s.CACHED)]
    state = await agent.save_state()  # the agent's state: the inner workbench's and context's
    assert len(state["llm_context"]["messages"]) == 6
