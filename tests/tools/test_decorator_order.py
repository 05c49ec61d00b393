"""Decorator order with the real frameworks: ``@framework`` over ``@tg.*`` and ``@tg.*`` over
a framework's tool object both work, or fail at decoration time with a ``TypeError`` that
says which order to use; ``require_task`` refuses a registered tool called outside a task."""

from __future__ import annotations

import asyncio
import functools
import sys
from typing import TYPE_CHECKING, Any

import pytest

if sys.version_info < (3, 11) and not TYPE_CHECKING:  # CI runs 3.11: there they always run
    pytest.skip("LangChain 1.5 and pydantic-ai 2.68 need Python 3.11", allow_module_level=True)

from agents import FunctionTool, function_tool
from anthropic.lib.tools import beta_tool
from langchain_core.tools import StructuredTool, tool
from mcp.server.mcpserver import MCPServer
from pydantic_ai import Agent, RunContext, Tool
from pydantic_ai.models.test import TestModel
from typer.testing import CliRunner

import toolguard as tg
from toolguard.cli import app

D = tg.Decision


def _search_body(runs: list[str], query: str) -> str:
    runs.append(query)
    return f"hits for {query}"


@pytest.mark.parametrize("framework", ["langchain", "anthropic"])
def test_framework_over_tg_and_tg_over_framework_guard_the_same(framework: str) -> None:
    wrap = tool if framework == "langchain" else beta_tool
    runs: list[str] = []

    def search(query: str) -> str:
        """Search the catalogue."""
        return _search_body(runs, query)

    outer = wrap(tg.readonly(search))  # @tool above @tg.readonly
    inner = tg.readonly(wrap(search))  # @tg.readonly above @tool: the object, marked
    assert isinstance(inner, type(outer))
    for obj in (outer, inner):
        guard = tg.Guard(tools=[obj])
        assert guard.settings("search").effect is tg.Effect.READONLY
        params = guard.tool_schemas()[0]["function"]["parameters"]
        assert params["properties"]["query"]["type"] == "string"
        task = guard.task(f"t-{id(obj)}")
        decisions = [task.call("search", {"query": "tea"}).decision for _ in range(4)]
        assert decisions == [D.ALLOW, D.ALLOW, D.WARN, D.BLOCK]
    assert runs == ["tea"] * 6


def test_agents_sdk_both_orders() -> None:
    runs: list[str] = []

    def search(query: str) -> str:
        """Search the catalogue."""
        return _search_body(runs, query)

    marked = tg.readonly(search)
    outer = function_tool(marked)
    inner = tg.readonly(function_tool(search))
    assert isinstance(outer, FunctionTool)
    assert isinstance(inner, FunctionTool)
    assert outer.params_json_schema["properties"] == inner.params_json_schema["properties"]
    assert tg.spec_of(inner).effect is tg.Effect.READONLY
    # the SDK's own invocation of the decorated function is guarded inside a task
    guard = tg.Guard(tools=[marked])

    async def invoke(t: FunctionTool) -> Any:
        from agents.tool_context import ToolContext

        ctx = ToolContext(context=None, tool_name="search", tool_call_id="c",
                          tool_arguments='{"query": "tea"}')
        return await t.on_invoke_tool(ctx, '{"query": "tea"}')

    with guard.task("t") as task:
        for _ in range(2):
            asyncio.run(invoke(outer))
    assert [r.result.count for r in task.history] == [1, 2]


def test_pydantic_ai_tool_over_tg_keeps_run_context_out_and_is_guarded() -> None:
    agent = Agent(TestModel())
    runs: list[str] = []

    @agent.tool
    @tg.readonly
    def search(ctx: RunContext[object], query: str) -> str:
        """Search.

        Args:
            query: what to look for.
        """
        return _search_body(runs, query)

    schema = agent._function_toolset.tools["search"].function_schema.json_schema
    assert list(schema["properties"]) == ["query"]
    guard = tg.Guard(tools=[search])
    exported = guard.tool_schemas()[0]["function"]["parameters"]
    assert list(exported["properties"]) == ["query"]
    assert exported["properties"]["query"]["description"] == "what to look for."
    with guard.task("t") as task:
        asyncio.run(agent.run("go"))  # run_sync leaves its event loop open
    assert [(r.tool, r.result.decision) for r in task.history] == [("search", D.ALLOW)]
    assert task.history[0].args == {"query": "a"}  # TestModel's argument, no RunContext


def test_tg_over_a_pydantic_ai_tool_object_says_which_order_to_use() -> None:
    def search(query: str) -> str:
        return query

    with pytest.raises(TypeError, match=r"cannot mark a Tool object.*Tool\(tg.readonly\(func\)\)"):
        tg.readonly(Tool(search))
    assert tg.spec_of(Tool(tg.readonly(search)).function).effect is tg.Effect.READONLY


def test_tg_under_staticmethod_is_the_order_that_works() -> None:
    with pytest.raises(TypeError, match="write @staticmethod above @mutating"):
        class Bad:
            @tg.mutating
            @staticmethod
            def send(to: str) -> str:
                return to

    class Good:
        @staticmethod
        @tg.mutating
        def send(to: str) -> str:
            return to

    assert tg.spec_of(Good.send).effect is tg.Effect.MUTATING


def test_a_callable_without_a_name_needs_name() -> None:
    def send(to: str, cc: str) -> str:
        return to

    with pytest.raises(TypeError, match="pass name="):
        tg.mutating(functools.partial(send, cc="x"))
    named = tg.mutating(name="send")(functools.partial(send, cc="x"))
    assert tg.spec_of(named).name == "send"


def test_a_langchain_tool_object_stays_usable_by_langchain_when_marked() -> None:
    @tg.mutating
    @tool
    def send(to: str) -> str:
        """Send."""
        return f"sent to {to}"

    assert isinstance(send, StructuredTool)
    assert send.invoke({"to": "ann"}) == "sent to ann"  # outside a task: plain


# -- require_task -------------------------------------------------------------------------
def test_require_task_refuses_a_raw_registration_outside_a_task() -> None:
    runs: list[str] = []
    server = MCPServer("demo")

    @server.tool()
    @tg.mutating
    def write(path: str) -> str:
        runs.append(path)
        return "written"

    assert write("a") == "written"  # no guard requires a task yet: plain
    guard = tg.Guard(tools=[write], require_task=True)
    with pytest.raises(tg.ToolGuardError, match=r"write was called outside a task.*require_task"):
        write("b")
    with pytest.raises(Exception, match="write"):  # the SDK wraps it in its own error
        asyncio.run(server.call_tool("write", {"path": "c"}))
    assert runs == ["a"]
    with guard.task("t"):
        assert write("d") == "written"  # inside a task: guarded, runs
    assert runs == ["a", "d"]


def test_require_task_from_the_policy_and_reload() -> None:
    @tg.readonly
    async def look(q: str) -> str:
        return q

    guard = tg.Guard(tg.load_policy_dict({"require_task": True}), tools=[look])
    with pytest.raises(tg.ToolGuardError, match="look was called outside a task"):
        asyncio.run(look("x"))
    guard.reload_policy(tg.load_policy_dict({"require_task": False}))
    assert asyncio.run(look("x")) == "x"
    assert tg.Guard(tools=[look], require_task=False).policy.require_task is False


def test_explain_shows_require_task_and_where_it_came_from(tmp_path: Any) -> None:
    policy = tmp_path / "p.toml"
    policy.write_text("require_task = true\n")
    result = CliRunner().invoke(app, ["explain", str(policy), "--tool", "x"])
    assert result.exit_code == 0, result.output
    line = next(ln for ln in result.output.splitlines() if "require_task" in ln)
    assert "true" in line
    assert "built-in" not in line  # from the file (its path is folded in the table)
    default = CliRunner().invoke(app, ["explain", "--tool", "x"], env={})
    line = next(ln for ln in default.output.splitlines() if "require_task" in ln)
    assert "false" in line
    assert "built-in" in line
