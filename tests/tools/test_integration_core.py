"""The integration core: ``task.call/acall(run=)``, tools known by name (``guard.register``),
framework tool objects in ``Guard(tools=)`` and framework-injected parameters, with the real
framework packages (LangChain, OpenAI Agents SDK, Anthropic, pydantic-ai, MCP)."""

from __future__ import annotations

import asyncio
import json
import sys
from collections import Counter
from typing import TYPE_CHECKING, Annotated, Any

import pytest

if sys.version_info < (3, 11) and not TYPE_CHECKING:  # CI runs 3.11: there they always run
    pytest.skip("LangChain 1.5 and pydantic-ai 2.68 need Python 3.11", allow_module_level=True)

from agents import FunctionTool, RunContextWrapper, function_tool
from agents.tool_context import ToolContext
from anthropic.lib.tools import beta_async_tool, beta_tool
from jsonschema.exceptions import SchemaError
from langchain.tools import InjectedState, InjectedToolArg, ToolRuntime
from langchain_core.tools import BaseTool, StructuredTool, tool
from mcp.server.mcpserver import Context
from pydantic_ai import RunContext

import toolguard as tg
from toolguard.tools._schema import schema_from_signature

D = tg.Decision


# -- run= ---------------------------------------------------------------------------------
# A loop: a read 4 times, a failing write, a timeout (then held for approval, never re-run
# blind), an identical write 3 times (one execution, then cached), the read 5 times again
# after that progress.
STEPS: list[tuple[str, dict[str, Any]]] = [
    *[("lookup", {"id": 7})] * 4,
    ("save", {"id": 1, "fail": "boom"}),
    *[("save", {"id": 2, "fail": "timeout"})] * 2,
    *[("save", {"id": 3})] * 3,
    *[("lookup", {"id": 7})] * 5,
]


def _outcome(result: tg.ToolResult | tg.Halt) -> tuple[Any, ...]:
    if isinstance(result, tg.Halt):
        return ("halt", type(result).__name__)
    return (str(result.decision), result.is_error,
            result.content if result.is_error else result.value)


def _script(call: Any) -> list[tuple[Any, ...]]:
    out = []
    for tool_name, args in STEPS:
        try:
            out.append(_outcome(call(tool_name, args)))
        except tg.Halt as halt:
            out.append(_outcome(halt))
    return out


async def _ascript(call: Any) -> list[tuple[Any, ...]]:
    out = []
    for tool_name, args in STEPS:
        try:
            out.append(_outcome(await call(tool_name, args)))
        except tg.Halt as halt:
            out.append(_outcome(halt))
    return out


class Backend:
    def __init__(self) -> None:
        self.runs: Counter[str] = Counter()

    def lookup(self, id: int) -> str:  # noqa: A002 - the model's argument name
        self.runs["lookup"] += 1
        return f"record {id}"

    def save(self, id: int, fail: str = "") -> str:  # noqa: A002
        self.runs["save"] += 1
        if fail == "timeout":
            raise TimeoutError("backend did not answer")
        if fail:
            raise RuntimeError(fail)
        return f"saved {id}"


def test_run_records_exactly_what_the_registered_function_would() -> None:
    registered, by_run = Backend(), Backend()
    guard = tg.Guard(tools=[tg.readonly(registered.lookup), tg.mutating(registered.save)])
    expected = _script(guard.task("a").call)

    named = tg.Guard()
    named.register("lookup", effect="readonly",
                   args_schema=schema_from_signature(by_run.lookup))
    named.register("save", effect=tg.Effect.MUTATING,
                   args_schema=schema_from_signature(by_run.save))
    task = named.task("b")
    got = _script(lambda t, a: task.call(t, a, run=lambda args: getattr(by_run, t)(**args)))
    assert got == expected
    assert by_run.runs == registered.runs == Counter(lookup=6, save=3)
    assert ("cached", False, "saved 3") in got
    assert got[-1] == ("halt", "RepeatedToolCalls")


async def test_acall_run_async_or_sync_records_like_acall() -> None:
    registered, by_run = Backend(), Backend()
    guard = tg.Guard(tools=[tg.readonly(registered.lookup), tg.mutating(registered.save)])
    expected = await _ascript(guard.task("a").acall)

    named = tg.Guard()
    named.register("lookup", effect="readonly")
    named.register("save", effect="mutating")
    async_task, sync_task = named.task("b"), named.task("c")

    async def via_async_run(t: str, a: Any) -> tg.ToolResult:
        async def run(args: dict[str, Any]) -> Any:
            await asyncio.sleep(0)
            return getattr(by_run, t)(**args)
        return await async_task.acall(t, a, run=run)

    assert await _ascript(via_async_run) == expected
    assert await _ascript(lambda t, a: sync_task.acall(
        t, a, run=lambda args: getattr(by_run, t)(**args))) == expected
    assert by_run.runs == Counter(lookup=12, save=6)


def test_run_gets_the_validated_arguments_and_replaces_the_registered_function() -> None:
    ran: list[str] = []

    @tg.mutating
    def charge(amount: int, note: str = "") -> str:
        ran.append("registered")
        return "charged"

    task = tg.Guard(tools=[charge]).task("t")
    seen: list[dict[str, Any]] = []
    def run(args: dict[str, Any]) -> str:
        seen.append(args)
        return "via run"

    result = task.call("charge", '{"amount": 5.0}', run=run)
    assert result.decision is D.ALLOW
    assert result.value == "via run"
    assert seen == [{"amount": 5}]  # parsed JSON, the integral float typed as the hint says
    assert type(seen[0]["amount"]) is int
    assert ran == []
    # an invalid call never reaches run
    bad = task.call("charge", {"amount": "five"}, run=lambda args: pytest.fail("ran"))
    assert bad.decision is D.INVALID


def test_run_is_not_called_when_the_guard_blocks() -> None:
    task = tg.Guard().task("t")
    calls: list[int] = []

    def run(args: dict[str, Any]) -> str:
        calls.append(1)
        return "ok"

    decisions = [task.call("other", {"q": 1}, run=run).decision for _ in range(3)]
    # an unregistered name with run= is a tool known by name: default_effect mutating here
    assert decisions == [D.ALLOW, D.CACHED, D.CACHED]
    with pytest.raises(tg.RepeatedToolCalls):
        task.call("other", {"q": 1}, run=run)
    assert calls == [1]


def test_an_async_run_under_call_is_an_error_result_not_a_silent_coroutine() -> None:
    task = tg.Guard(tools=[tg.readonly(Backend().lookup)]).task("t")

    async def run(args: dict[str, Any]) -> str:
        return "never"

    result = task.call("lookup", {"id": 1}, run=run)
    assert result.is_error
    assert result.error_type == "TypeError"
    assert "acall" in result.content


def test_a_sync_run_returning_an_awaitable_is_awaited_under_acall() -> None:
    task = tg.Guard(tools=[tg.readonly(Backend().lookup)]).task("t")

    async def handler() -> str:
        return "from the framework's handler"

    result = asyncio.run(task.acall("lookup", {"id": 1}, run=lambda args: handler()))
    assert result.value == "from the framework's handler"


def test_run_sees_the_idempotency_key_and_a_timeout_is_an_unknown_outcome() -> None:
    guard = tg.Guard()
    guard.register("pay", effect="mutating")
    task = guard.task("t")
    keys: list[str | None] = []

    def run(args: dict[str, Any]) -> str:
        keys.append(tg.current_idempotency_key())
        raise TimeoutError("gateway")

    first = task.call("pay", {"cents": 100}, run=run)
    assert first.is_error
    assert "outcome is unknown" in first.content
    again = task.call("pay", {"cents": 100}, run=run)
    assert again.decision is D.BLOCK  # never re-run blind: the approver (deny_all) said no
    assert "without a known outcome" in again.content
    (forwarded,) = keys  # the guard's key and the execution it belongs to
    assert forwarded is not None and forwarded.startswith(f"{first.idempotency_key}:")


# -- tools known by name ------------------------------------------------------------------
def test_a_tool_known_by_name_needs_run_and_is_not_counted_without_it() -> None:
    guard = tg.Guard()
    spec = guard.register("mcp_search", effect="readonly", description="Search the web.",
                          args_schema={"type": "object", "properties": {"q": {"type": "string"}},
                                       "required": ["q"], "additionalProperties": False})
    assert spec.name == "mcp_search"
    assert guard.settings("mcp_search").effect is tg.Effect.READONLY
    task = guard.task("t")
    with pytest.raises(TypeError, match=r"known by name only.*pass run="):
        task.call("mcp_search", {"q": "x"})
    with pytest.raises(TypeError, match="run="):
        asyncio.run(task.acall("mcp_search", {"q": "x"}))
    assert task.usage.tool_calls == 0
    invalid = task.call("mcp_search", {"q": 3}, run=lambda a: pytest.fail("ran"))
    assert invalid.decision is D.INVALID
    assert "args.q" in invalid.content
    ok = task.call("mcp_search", {"q": "x"}, run=lambda a: f"hits for {a['q']}")
    assert ok.value == "hits for x"
    assert guard.tool_schemas()[0]["function"]["description"] == "Search the web."


def test_register_takes_the_effect_from_the_policy_and_the_decorators_options() -> None:
    policy = tg.load_policy_dict({"default_effect": "readonly",
                                  "tools": {"refund": {"effect": "mutating"}}})
    guard = tg.Guard(policy, strict_tools=False)  # its tools are registered below
    guard.register("search")
    guard.register("refund")
    guard.register("wipe", requires_approval=True, max_calls=2)
    assert guard.settings("search").effect is tg.Effect.READONLY
    assert guard.settings("refund").effect is tg.Effect.MUTATING
    wipe = guard.settings("wipe")
    assert (wipe.effect, wipe.requires_approval, wipe.max_calls) == (
        tg.Effect.MUTATING, True, 2)
    assert str(wipe.idempotency_scope) == "task"
    refused = guard.task("t").call("wipe", {}, run=lambda a: pytest.fail("ran unapproved"))
    assert refused.decision is D.BLOCK  # the default approver (deny_all) said no
    assert "approval" in refused.reason


def test_register_refuses_bad_settings_and_a_second_tool_of_the_same_name() -> None:
    guard = tg.Guard()
    with pytest.raises(TypeError, match="unknown settings ttl"):
        guard.register("x", ttl=3)
    with pytest.raises(ValueError, match="sideways"):
        guard.register("x", effect="sideways")
    with pytest.raises(ValueError, match="non-empty"):
        guard.register("")
    first = guard.register("x", effect="readonly")
    assert guard.register("x", effect="readonly") is first  # idempotent for lazy adapters
    with pytest.raises(tg.PolicyError, match="share this name"):
        guard.register("x", effect="mutating")
    assert guard.settings("x").effect is tg.Effect.READONLY  # nothing half-registered
    with pytest.raises(SchemaError):
        guard.register("y", args_schema={"type": 5})
    assert [s["function"]["name"] for s in guard.tool_schemas()] == ["x"]


def test_register_is_thread_safe_for_the_same_tool() -> None:
    import threading

    guard = tg.Guard()
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []

    def worker() -> None:
        barrier.wait()
        try:
            guard.register("shared", effect="readonly")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert [s["function"]["name"] for s in guard.tool_schemas()] == ["shared"]


# -- framework tool objects ---------------------------------------------------------------
def _lc_search() -> BaseTool:
    @tool
    def search(query: str, limit: int = 3) -> str:
        """Search the catalogue."""
        return f"{limit} hits for {query}"

    return search


def _agents_search() -> FunctionTool:
    @function_tool
    def search(query: str) -> str:
        """Search the catalogue."""
        return f"hits for {query}"

    return search


def test_guard_accepts_framework_tool_objects_with_their_names_and_schemas() -> None:
    @beta_tool
    def lookup(order_id: str) -> str:
        """Look an order up.

        Args:
            order_id: the order's id.
        """
        return f"order {order_id}"

    @beta_async_tool
    async def alookup(order_id: str) -> str:
        """Look an order up, async."""
        return f"order {order_id}"

    policy = tg.load_policy_dict({"default_effect": "readonly",
                                  "tools": {"agents_search": {"effect": "mutating"}}})
    agents_tool = _agents_search()
    agents_tool.name = "agents_search"
    guard = tg.Guard(policy, tools=[_lc_search(), agents_tool, lookup, alookup])
    by_name = {s["function"]["name"]: s["function"] for s in guard.tool_schemas()}
    assert set(by_name) == {"search", "agents_search", "lookup", "alookup"}
    assert by_name["search"]["description"] == "Search the catalogue."
    assert by_name["search"]["parameters"]["properties"]["limit"]["type"] == "integer"
    assert by_name["lookup"]["parameters"]["properties"]["order_id"]["description"] == (
        "the order's id.")
    assert by_name["agents_search"]["parameters"]["required"] == ["query"]
    assert guard.settings("search").effect is tg.Effect.READONLY  # default_effect
    assert guard.settings("agents_search").effect is tg.Effect.MUTATING  # [tools.X]

    task = guard.task("t")
    assert task.call("search", {"query": "tea"}).value == "3 hits for tea"  # tool.invoke
    assert task.call("lookup", {"order_id": "A1"}).value == "order A1"  # tool.call
    assert asyncio.run(task.acall("alookup", {"order_id": "A2"})).value == "order A2"
    assert task.call("search", {"query": 1}).decision is D.INVALID  # its schema validates
    with pytest.raises(TypeError, match="run="):  # on_invoke_tool needs the SDK's context
        task.call("agents_search", {"query": "tea"})

    async def forward(args: dict[str, Any]) -> Any:
        ctx = ToolContext(context=None, tool_name="agents_search", tool_call_id="c1",
                          tool_arguments=json.dumps(args))
        return await agents_tool.on_invoke_tool(ctx, json.dumps(args))

    done = asyncio.run(task.acall("agents_search", {"query": "tea"}, run=forward))
    assert done.value == "hits for tea"


def test_tg_decorators_over_framework_objects_mark_them_and_keep_the_object() -> None:
    lc = tg.mutating(_lc_search())
    assert isinstance(lc, StructuredTool)  # the framework still gets its own tool
    agents_tool = _agents_search()
    agents_tool.name = "agents_search"
    agents_tool = tg.requires_approval(agents_tool)
    assert isinstance(agents_tool, FunctionTool)

    @tg.readonly(max_calls=1)
    @beta_tool
    def lookup(order_id: str) -> str:
        """Look an order up."""
        return order_id

    guard = tg.Guard(tools=[lc, agents_tool, lookup])
    assert guard.settings("search").effect is tg.Effect.MUTATING
    assert guard.settings("search").requires_approval is False
    assert guard.settings("lookup").max_calls == 1
    assert tg.spec_of(agents_tool).requires_approval
    with pytest.raises(TypeError, match="already marked"):
        tg.readonly(lc)


def test_a_framework_tool_over_a_tg_function_keeps_its_options_and_counts_once() -> None:
    runs: list[str] = []

    @tool
    @tg.mutating(idempotency_scope="task")
    def send(to: str) -> str:
        """Send a message."""
        runs.append(to)
        return f"sent to {to}"

    guard = tg.Guard(tools=[send])
    settings = guard.settings("send")
    assert settings.effect is tg.Effect.MUTATING
    assert str(settings.idempotency_scope) == "task"
    with guard.task("t") as task:
        first = task.call("send", {"to": "ann"})  # tool.invoke -> the tg wrapper, inside
        # the guard's own execution: not guarded (counted) a second time
        assert first.count == 1
        assert task.call("send", {"to": "ann"}).decision is D.CACHED
        # the framework invoking the tool itself (its own loop) is guarded as a direct call
        assert send.invoke({"to": "bob"}) == "sent to bob"
        assert send.invoke({"to": "bob"}) == "sent to bob"  # the cached result
    assert runs == ["ann", "bob"]
    assert task.usage.tool_calls == 4


# -- framework-injected parameters --------------------------------------------------------
def pa_tool(ctx: RunContext[int], query: str) -> str:
    """pydantic-ai @agent.tool."""
    return query


def lc_tool(query: str, runtime: ToolRuntime, user: Annotated[str, InjectedToolArg],
            state: Annotated[dict[str, Any], InjectedState]) -> str:
    """LangChain v1."""
    return query


def lc_state_field(query: str, messages: Annotated[list[Any], InjectedState("messages")]
                   ) -> str:
    return query


def mcp_tool(query: str, ctx: Context) -> str:
    return query


def agents_tool(wrapper: RunContextWrapper[Any], query: str) -> str:
    return query


def agents_ctx(ctx: ToolContext[Any], query: str) -> str:
    return query


def optional_ctx(query: str, ctx: RunContext[None] | None = None) -> str:
    return query


@pytest.mark.parametrize("func", [pa_tool, lc_tool, lc_state_field, mcp_tool, agents_tool,
                                  agents_ctx, optional_ctx])
def test_injected_parameters_are_not_part_of_the_schema(func: Any) -> None:
    schema = schema_from_signature(func)
    assert list(schema["properties"]) == ["query"]
    assert schema["properties"]["query"]["type"] == "string"
    assert schema["required"] == ["query"]


def test_an_injected_context_is_left_out_of_the_hash_and_validation() -> None:
    seen: list[Any] = []

    @tg.readonly
    def search(ctx: RunContext[int], query: str) -> str:
        seen.append(ctx)
        return f"hits for {query}"

    guard = tg.Guard(tools=[search])
    decisions = []
    with guard.task("t") as task:
        for deps in range(4):  # a new context object each step, as pydantic-ai passes
            ctx = RunContext(deps=deps, model=None, usage=None)  # type: ignore[arg-type]
            try:
                search(ctx, query="tea")
            except tg.ToolBlocked as blocked:
                decisions.append(blocked.result.decision)
            else:
                decisions.append(task.history[-1].result.decision)
    assert decisions == [D.ALLOW, D.ALLOW, D.WARN, D.BLOCK]  # one signature: the ladder
    assert [c.deps for c in seen] == [0, 1, 2]  # the tool still receives its context
    assert task.history[0].args == {"query": "tea"}


def test_a_string_annotation_that_does_not_resolve_is_still_recognised() -> None:
    def tool_fn(ctx: RunContext[Missing], query: str) -> str:  # type: ignore[name-defined]  # noqa: F821
        return query

    assert list(schema_from_signature(tool_fn)["properties"]) == ["query"]
