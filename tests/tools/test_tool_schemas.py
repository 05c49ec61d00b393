"""``guard.tool_schemas(format=, strict=)``: each provider's shape, checked against that
SDK's own types (pydantic over the TypedDicts, MCP's ``Tool`` model), OpenAI strict mode
checked against the Agents SDK's own strict-schema rewriter, docstring descriptions."""

from __future__ import annotations

import enum
import json
import typing
from typing import Any

import mcp.types as mcp_types
import pytest
from agents.strict_schema import ensure_strict_json_schema
from anthropic.types import ToolParam
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.chat import ChatCompletionToolParam
from openai.types.responses import FunctionToolParam
from openai.types.shared_params import FunctionDefinition
from pydantic import BaseModel, TypeAdapter
from typing_extensions import TypedDict  # pydantic needs it below Python 3.12

import toolguard as tg
from toolguard.tools._exports import strict_schema


class Cabin(enum.Enum):
    ECONOMY = "economy"
    BUSINESS = "business"


class Passenger(TypedDict):
    name: str
    age: int


class Address(BaseModel):
    street: str
    zip_code: str | None = None


def book(user_id: str, seats: int, cabin: Cabin, passengers: list[Passenger],
         address: Address | None = None, note: str = "", window: bool = False) -> str:
    """Book seats for a user.

    Args:
        user_id: the user's account id.
        seats: how many seats (1-9).
        cabin: which cabin class.
        passengers: one entry per
            traveller.
        address: where the tickets go.
    """
    return "booked"


async def search(query: str, limit: int = 5) -> list[str]:
    """Search the catalogue.

    Parameters
    ----------
    query
        Free text.
    """
    return []


def _guard() -> tg.Guard:
    return tg.Guard(tools=[tg.mutating(book), tg.readonly(search)])


def _keys_of(typed_dict: Any) -> set[str]:
    return set(typing.get_type_hints(typed_dict))


@pytest.mark.parametrize("strict", [False, True])
def test_openai_chat_shape_is_a_chat_completion_tool_param(strict: bool) -> None:
    tools = _guard().tool_schemas("openai_chat", strict=strict)
    adapter = TypeAdapter(ChatCompletionToolParam)
    for tool in tools:
        assert adapter.validate_python(tool) == tool
        assert set(tool) <= _keys_of(ChatCompletionToolParam)
        assert set(tool["function"]) <= _keys_of(FunctionDefinition)
        assert tool["function"].get("strict", False) is strict
    json.dumps(tools)


@pytest.mark.parametrize("strict", [False, True])
def test_openai_responses_shape_is_a_function_tool_param(strict: bool) -> None:
    tools = _guard().tool_schemas("openai_responses", strict=strict)
    adapter = TypeAdapter(FunctionToolParam)
    for tool in tools:
        assert adapter.validate_python(tool) == tool
        assert set(tool) <= _keys_of(FunctionToolParam)
        assert tool["strict"] is strict  # Required by the Responses type, even when False
    assert [t["name"] for t in tools] == ["book", "search"]


@pytest.mark.parametrize("strict", [False, True])
def test_anthropic_shape_is_a_tool_param(strict: bool) -> None:
    tools = _guard().tool_schemas("anthropic", strict=strict)
    adapter = TypeAdapter(ToolParam)
    for tool in tools:
        assert adapter.validate_python(tool) == tool
        assert set(tool) <= _keys_of(ToolParam)
        assert tool["input_schema"]["type"] == "object"


def test_mcp_shape_is_an_mcp_tool() -> None:
    tools = _guard().tool_schemas("mcp")
    for tool in tools:
        parsed = mcp_types.Tool.model_validate(tool)
        assert parsed.model_dump(by_alias=True, exclude_none=True) == tool
    assert tools[1]["inputSchema"]["required"] == ["query"]


def test_the_default_is_the_previous_openai_chat_output() -> None:
    guard = _guard()
    assert guard.tool_schemas() == guard.tool_schemas("openai_chat", strict=False)
    assert guard.tool_schemas()[0]["function"]["parameters"] == guard._config.entries[
        "book"].schema  # exactly what the guard validates with
    with pytest.raises(ValueError, match=r"unknown tool schema format 'gemini'.*openai_chat"):
        guard.tool_schemas("gemini")  # type: ignore[arg-type]


def test_argument_descriptions_come_from_the_docstring() -> None:
    props = _guard().tool_schemas("mcp")[0]["inputSchema"]["properties"]
    assert props["user_id"]["description"] == "the user's account id."
    assert props["passengers"]["description"] == "one entry per traveller."
    assert "description" not in props["note"]
    numpy_style = _guard().tool_schemas("mcp")[1]["inputSchema"]["properties"]
    assert numpy_style["query"]["description"] == "Free text."


def _objects(node: Any) -> list[dict[str, Any]]:
    found = []
    if isinstance(node, dict):
        if node.get("type") == "object" or "properties" in node:
            found.append(node)
        for value in node.values():
            found.extend(_objects(value))
    elif isinstance(node, list):
        for value in node:
            found.extend(_objects(value))
    return found


def test_strict_mode_requires_every_property_and_makes_optional_ones_nullable() -> None:
    params = _guard().tool_schemas("openai_chat", strict=True)[0]["function"]["parameters"]
    for obj in _objects(params):
        assert obj["additionalProperties"] is False
        assert obj["required"] == list(obj["properties"])
    props = params["properties"]
    assert props["note"]["type"] == ["string", "null"]
    assert "default" not in props["note"]
    assert props["address"]["anyOf"][-1] == {"type": "null"}
    assert props["user_id"]["type"] == "string"  # required stays non-nullable
    # the Agents SDK's own strict rewriter finds nothing left to change
    assert ensure_strict_json_schema(json.loads(json.dumps(params))) == params


def test_a_strict_models_null_for_an_optional_argument_means_omitted() -> None:
    received: list[tuple[int, str]] = []

    @tg.readonly
    def find(query: str, limit: int = 5) -> str:
        received.append((limit, query))
        return "ok"

    task = tg.Guard(tools=[find]).task("t")
    first = task.call("find", {"query": "tea", "limit": None})
    assert first.decision is tg.Decision.ALLOW
    assert received == [(5, "tea")]  # the default, not None
    # the same signature as omitting it: the ladder counts one call
    assert task.call("find", {"query": "tea"}).count == 2
    assert task.call("find", {"query": None}).decision is tg.Decision.INVALID


def test_strict_mode_refuses_what_it_cannot_express() -> None:
    def loose(**kwargs: Any) -> str:
        return ""

    def free(meta: dict[str, int]) -> str:
        return ""

    def untyped(x) -> str:  # type: ignore[no-untyped-def]
        return ""

    for func, where in ((loose, "accepts undeclared|open object"),
                        (free, r"parameters\.meta is an open object"),
                        (untyped, r"parameters\.x has no type")):
        guard = tg.Guard(tools=[tg.readonly(func)])
        with pytest.raises(ValueError, match=where):
            guard.tool_schemas("openai_chat", strict=True)
        guard.tool_schemas("openai_chat")  # fine without strict


_json_scalars: st.SearchStrategy[dict[str, Any]] = st.sampled_from([
    {"type": "string"}, {"type": "integer"}, {"type": "boolean"}, {"type": "number"},
    {"enum": ["a", "b"]}])


def _object_schemas(children: st.SearchStrategy[dict[str, Any]]
                    ) -> st.SearchStrategy[dict[str, Any]]:
    return st.builds(
        lambda props, req: {"type": "object", "properties": props,
                            "required": [k for k in props if k in req]},
        st.dictionaries(st.sampled_from(list("abcdef")), children, max_size=4),
        st.sets(st.sampled_from(list("abcdef"))))


@settings(max_examples=60, deadline=None)
@given(_object_schemas(st.recursive(
    _json_scalars,
    lambda inner: _object_schemas(inner) | st.builds(lambda i: {"type": "array", "items": i},
                                                     inner),
    max_leaves=10)))
def test_strict_rewrite_is_what_the_agents_sdk_accepts_unchanged(schema: dict[str, Any]
                                                                 ) -> None:
    strict = strict_schema(schema)
    for obj in _objects(strict):
        assert obj["required"] == list(obj["properties"])
        assert obj["additionalProperties"] is False
    assert ensure_strict_json_schema(json.loads(json.dumps(strict))) == strict
    assert strict_schema(strict) == strict  # idempotent
