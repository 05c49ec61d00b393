"""A mistake in the host's code is raised to the host, before anything is counted, and never
shown to the model as a tool result: a sync call of an ``async def`` tool, a framework object
the guard cannot read."""

from __future__ import annotations

from typing import Any

import pytest

import toolguard as tg

ran: list[str] = []


@tg.readonly
def lookup(key: str) -> str:
    ran.append(f"lookup {key}")
    return key


@tg.mutating
async def send(to: str) -> str:
    ran.append(f"send {to}")
    return "sent"


def _message(*calls: tuple[str, str]) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": f"c{i}", "type": "function", "function": {"name": name, "arguments": args}}
        for i, (name, args) in enumerate(calls)]}


@pytest.fixture(autouse=True)
def _clear() -> None:
    ran.clear()


def test_a_sync_call_of_an_async_tool_raises_for_the_host() -> None:
    task = tg.Guard(tools=[lookup, send]).task("t")
    with pytest.raises(TypeError, match=r"tool 'send' is async def: .*await task\.acall"):
        task.call("send", {"to": "a"})
    assert task.usage.tool_calls == 0 and ran == []  # nothing counted, nothing run


async def test_the_same_call_under_acall_runs() -> None:
    task = tg.Guard(tools=[lookup, send]).task("t")
    assert (await task.acall("send", {"to": "a"})).value == "sent"


def test_run_tool_calls_refuses_the_whole_message_before_any_call() -> None:
    task = tg.Guard(tools=[lookup, send]).task("t")
    message = _message(("lookup", '{"key": "k"}'), ("send", '{"to": "a"}'))
    with pytest.raises(TypeError, match=r"'send' is async def"):
        task.run_tool_calls(message)
    assert ran == [] and task.usage.tool_calls == 0


class _CrewStyleTool:
    """A framework's tool object of a kind toolguard does not read: a name, a run method."""

    name = "web_search"
    description = "Search the web."

    def __call__(self, query: str) -> str:
        return query


class _NotCallable:
    name = "calculator"


@pytest.mark.parametrize("tool", [_CrewStyleTool(), _NotCallable()])
def test_an_unsupported_tool_object_is_named_with_what_to_do(tool: object) -> None:
    with pytest.raises(TypeError) as caught:
        tg.Guard(tools=[tool])
    message = str(caught.value)
    assert f"{type(tool).__qualname__} object {tool.name!r}" in message  # type: ignore[attr-defined]
    assert "LangChain (BaseTool)" in message and "guard.register(NAME" in message
    assert "name=..." not in message
