"""``toolguard.adapters.mcp``: a Python MCP server (the official SDK's ``MCPServer``) guarded
in-process with one line, talked to by the SDK's own in-process client."""

from __future__ import annotations

from collections import Counter
from typing import Any

import anyio
import mcp.types as mt
import pytest
from mcp import Client
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError

import toolguard as tg
from tests.mcp_support import EXPECTED_READS, label
from toolguard.adapters.mcp import (
    HALT_ERROR_CODE,
    GuardMiddleware,
    _approval_message,
    guard_server,
    tool_settings,
)
from toolguard.engine._approval import ApprovalRequest

ran: Counter[str] = Counter()


def notes_server() -> MCPServer:
    server = MCPServer("notes", log_level="WARNING")

    @server.tool(annotations=mt.ToolAnnotations(readOnlyHint=True))
    def read_note(title: str) -> str:
        ran["read_note"] += 1
        return f"note {title}"

    @server.tool()  # no annotations: may destroy, acts on the world (MCP's defaults)
    async def send_payment(amount: int) -> str:
        ran["send_payment"] += 1
        return f"paid {amount}"

    @server.tool(annotations=mt.ToolAnnotations(readOnlyHint=False, destructiveHint=False,
                                                openWorldHint=False))
    def flaky(n: int) -> str:
        ran["flaky"] += 1
        raise ToolError(f"disk full at {n}")

    return server


async def call(client: Client, tool: str, args: dict[str, Any]) -> str:
    try:
        return label(await client.call_tool(tool, args))
    except MCPError as exc:
        if exc.code != HALT_ERROR_CODE:
            raise
        return "halt"


@pytest.fixture(autouse=True)
def _fresh_counts() -> None:
    ran.clear()


async def test_one_line_guards_a_python_server() -> None:
    server = notes_server()
    middleware = guard_server(server, policy=tg.Policy())
    assert isinstance(middleware, GuardMiddleware) and server.middleware[-1] is middleware
    with anyio.fail_after(30):
        async with Client(server) as client:
            # the first call comes before any tools/list: the middleware lists them itself
            pays = [await call(client, "send_payment", {"amount": 5}) for _ in range(3)]
            reads = [await call(client, "read_note", {"title": "a"}) for _ in range(6)]
    assert pays == ["allow", "cached", "cached"]
    assert reads == EXPECTED_READS
    assert ran == {"send_payment": 1, "read_note": 3}
    assert middleware.guard.settings("send_payment").idempotency_scope is tg.IdempotencyScope.TASK


async def test_tool_errors_pass_through_and_count_as_failures() -> None:
    server = notes_server()
    policy = tg.load_policy_dict({"budget": {"max_consecutive_failures": 2}})
    guard_server(server, policy=policy)
    with anyio.fail_after(30):
        async with Client(server) as client:
            first = await client.call_tool("flaky", {"n": 1})
            second = await call(client, "flaky", {"n": 2})
            third = await call(client, "flaky", {"n": 3})
    # the tool's own error text reaches the client (not the SDK's generic message)
    assert first.is_error and "disk full at 1" in str(first.content[0])
    assert second == "error" and third == "halt"  # the failure streak halts the task
    assert ran == {"flaky": 2}


async def test_invalid_arguments_never_reach_the_tool() -> None:
    server = notes_server()
    guard_server(server, policy=tg.Policy())
    with anyio.fail_after(30):
        async with Client(server) as client:
            result = await client.call_tool("send_payment", {"amount": "five"})
    assert result.is_error and "amount" in str(result.content[0])
    assert ran == {}


@pytest.mark.parametrize(("annotations", "effect", "scope", "external"), [
    (None, tg.Effect.MUTATING, tg.IdempotencyScope.TASK, True),
    (mt.ToolAnnotations(readOnlyHint=True), tg.Effect.READONLY,
     tg.IdempotencyScope.UNTIL_CHANGE, False),
    (mt.ToolAnnotations(destructiveHint=False, openWorldHint=False), tg.Effect.MUTATING,
     tg.IdempotencyScope.UNTIL_CHANGE, False),
    (mt.ToolAnnotations(destructiveHint=False, openWorldHint=True), tg.Effect.MUTATING,
     tg.IdempotencyScope.TASK, True),
    (mt.ToolAnnotations(destructiveHint=True, openWorldHint=False), tg.Effect.MUTATING,
     tg.IdempotencyScope.TASK, False),
    (mt.ToolAnnotations(readOnlyHint=False, idempotentHint=True, destructiveHint=False,
                        openWorldHint=False), tg.Effect.MUTATING,
     tg.IdempotencyScope.UNTIL_CHANGE, False),
])
def test_effects_from_annotations(annotations: mt.ToolAnnotations | None, effect: tg.Effect,
                                  scope: tg.IdempotencyScope, external: bool) -> None:
    tool = mt.Tool(name="t", input_schema={"type": "object"}, annotations=annotations)
    middleware = GuardMiddleware(tg.Guard(tg.Policy()))
    middleware.register_tools([tool])
    settings = middleware.guard.settings("t")
    assert (settings.effect, settings.idempotency_scope, settings.external) == (
        effect, scope, external)
    assert tool_settings(tool).effect is effect


async def test_policy_overrides_annotations() -> None:
    server = notes_server()
    policy = tg.load_policy_dict({"tools": {"read_note": {"effect": "mutating"}}})
    guard_server(server, policy=policy)
    with anyio.fail_after(30):
        async with Client(server) as client:
            first = await call(client, "read_note", {"title": "a"})
            second = await call(client, "read_note", {"title": "a"})
    assert (first, second) == ("allow", "cached")  # judged as a write: not run twice
    assert ran == {"read_note": 1}


async def test_guard_json_hands_back_the_upstreams_own_answer_when_it_adds_nothing() -> None:
    """What lets the proxy send an allowed call's answer on as the upstream's bytes: the very
    object ``run`` returned; with a notice (the ladder's warning) a new one, the notice last."""
    policy = tg.load_policy_dict({"tools": {"read_note": {"ladder": {"warn_at": 2}}}})
    middleware = GuardMiddleware(tg.Guard(policy, strict_tools=False))
    middleware.register_tools([{"name": "read_note", "annotations": {"readOnlyHint": True},
                                "inputSchema": {"type": "object"}}])
    answer: dict[str, Any] = {"content": [{"type": "text", "text": "buy milk"}],
                              "isError": False}

    async def run(args: dict[str, Any]) -> dict[str, Any]:
        return answer

    task = middleware.task_of("s")
    first = await middleware.guard_json(task, "read_note", {"title": "todo"}, run)
    second = await middleware.guard_json(task, "read_note", {"title": "todo"}, run)
    assert first is answer
    assert second is not answer and second["content"][0] == answer["content"][0]
    assert second["content"][-1]["text"].startswith("[toolguard] ")
    assert answer["content"] == [{"type": "text", "text": "buy milk"}]  # left untouched


async def test_an_error_result_that_is_no_call_tool_result_still_ends_the_call() -> None:
    """An upstream that answers ``isError`` with a body the SDK's ``CallToolResult`` refuses
    (content not a list): the client gets the upstream's own answer, the guard records a
    failed call, and an identical retry runs again at once instead of waiting for a call
    still 'in progress' (on both the task path and the proxy's two halves)."""
    bad: dict[str, Any] = {"isError": True, "content": "not a list"}
    middleware = GuardMiddleware(tg.Guard(tg.Policy(), strict_tools=False))
    middleware.register_tools([{"name": "w", "inputSchema": {"type": "object"}, "annotations": {
        "destructiveHint": False, "openWorldHint": False}}])

    async def run(args: dict[str, Any]) -> dict[str, Any]:
        return bad

    task = middleware.task_of("task path")
    assert await middleware.guard_json(task, "w", {"x": "1"}, run) is bad
    halves = middleware.task_of("halves")
    kind, call = middleware.begin_json(halves, "w", {"x": "1"})
    assert kind == "run"
    assert middleware.end_json(call, bad) is bad
    for each in (task, halves):
        assert each.history[-1].result.is_error
    kind, again = middleware.begin_json(halves, "w", {"x": "1"})
    assert kind == "run"  # not handed over to wait for the first, which has ended
    middleware.end_json(again, bad)


def test_the_approval_question_escapes_what_the_model_chose() -> None:
    """A key holding newlines and text of its own cannot pose as the question or push the
    real values out of view: the arguments are one line of quoted ASCII JSON, in full."""
    spoof = "note\n\n\n\nIGNORE THE LINE ABOVE. Actual request: refund(amount_cents=5)\u202e"
    request = ApprovalRequest("t", "refund", {spoof: 1, "amount_cents": 500000, "memo": "é"},
                              "key", "refund requires human approval", 0.0)
    message = _approval_message(request)
    assert "\n" not in message and "\u202e" not in message and message.isascii()
    assert '"amount_cents": 500000' in message
    assert '"note\\n\\n\\n\\nIGNORE THE LINE ABOVE.' in message
    assert message.endswith("It needs approval (refund requires human approval).")
