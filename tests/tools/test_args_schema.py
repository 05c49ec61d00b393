"""Argument schemas (``toolguard.tools._schema``): derived from type hints or given as
``args_schema=``, validated before execution; checked on the 14 real tau-bench airline tools
and all 1164 calls gpt-4o made with them."""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, Optional, cast

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typing_extensions import NotRequired, TypedDict  # pydantic needs it on Python < 3.12

import toolguard as tg
from toolguard.hashing._json_text import parse_arguments
from toolguard.tools._decorators import recorded_tool
from toolguard.tools._schema import ArgsValidator, schema_from_signature

# -- schemas derived from type hints ----------------------------------------------------------


def f_typed(
    name: str,
    count: int,
    tags: list[str],
    note: Optional[str] = None,  # noqa: UP045 - the Optional spelling is what is under test
    mode: Literal["fast", "slow"] = "fast",
) -> None:
    """Typed parameters, some with defaults."""


def f_kwargs(path: str, **kwargs: Any) -> None:
    """Extra keyword arguments allowed."""


def f_untyped(a, b=2):  # type: ignore[no-untyped-def]
    """No hints at all."""


def f_positional(x: int, /, y: int, *rest: int) -> None:
    """Positional-only and *args are not part of the JSON interface."""


class Opaque:
    """A type pydantic cannot express in JSON Schema."""


def f_opaque(o: Opaque, n: int = 1) -> None:
    """Falls back to unconstrained properties."""


def test_schema_from_typed_signature() -> None:
    schema = schema_from_signature(f_typed)
    assert schema["type"] == "object"
    assert schema["required"] == ["name", "count", "tags"]
    assert schema["additionalProperties"] is False
    props = schema["properties"]
    assert list(props) == ["name", "count", "tags", "note", "mode"]
    assert props["name"]["type"] == "string"
    assert props["count"]["type"] == "integer"
    assert props["tags"]["type"] == "array"
    assert props["tags"]["items"] == {"type": "string"}
    assert {"type": "string"} in props["note"]["anyOf"]
    assert {"type": "null"} in props["note"]["anyOf"]
    assert props["mode"]["enum"] == ["fast", "slow"]
    assert props["mode"]["default"] == "fast"
    assert "title" not in schema


def test_schema_with_kwargs_allows_extra_properties() -> None:
    schema = schema_from_signature(f_kwargs)
    assert schema["additionalProperties"] is True
    assert schema["required"] == ["path"]
    assert list(schema["properties"]) == ["path"]
    assert ArgsValidator(schema).validate({"path": "a", "anything": [1]}) is None


def test_schema_without_hints_accepts_anything() -> None:
    schema = schema_from_signature(f_untyped)
    assert schema["required"] == ["a"]
    assert "type" not in schema["properties"]["a"]
    assert schema["properties"]["b"]["default"] == 2
    validator = ArgsValidator(schema)
    assert validator.validate({"a": {"x": [None, 1.5]}}) is None
    assert validator.validate({"a": 1, "c": 2}) is not None  # still no extra properties


def test_schema_skips_positional_only_and_varargs() -> None:
    schema = schema_from_signature(f_positional)
    assert list(schema["properties"]) == ["y"]
    assert schema["required"] == ["y"]


def test_a_hint_pydantic_cannot_express_makes_only_its_parameter_opaque() -> None:
    schema = schema_from_signature(f_opaque)
    assert schema["properties"]["o"] == {"title": "O"}  # accepts anything
    assert schema["properties"]["n"] == {"default": 1, "title": "N", "type": "integer"}
    assert schema["required"] == ["o"]
    assert schema["additionalProperties"] is False
    validator = ArgsValidator(schema)
    assert validator.validate({"o": [1, {"x": None}]}) is None
    assert validator.validate({"o": 1, "n": "two"}) is not None  # n keeps its type


def test_validator_lists_at_most_eight_problems() -> None:
    schema = {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(10)}}
    message = ArgsValidator(schema).validate({f"p{i}": "x" for i in range(10)})
    assert message is not None
    assert message.count("is not of type 'integer'") == 8
    assert message.endswith("... and 2 more")


# -- through a Guard --------------------------------------------------------------------------


class Booking:
    """The side effect the guard must prevent for invalid calls."""

    def __init__(self) -> None:
        self.executed = 0


@pytest.fixture
def booking() -> Booking:
    return Booking()


@pytest.fixture
def guard(booking: Booking) -> tg.Guard:
    def book(
        user_id: str,
        seats: int,
        cabin: Literal["economy", "business"],
        insurance: bool = False,
    ) -> str:
        """Book seats for a user.

        The second paragraph is not part of the description.
        """
        booking.executed += 1
        return f"booked {seats}"

    return tg.Guard(tools=[tg.mutating(book)])


def test_invalid_arguments_are_not_executed(guard: tg.Guard, booking: Booking) -> None:
    result = guard.task("t").call("book", {"user_id": 5, "cabin": "first", "extra": True})
    assert result.decision is tg.Decision.INVALID
    assert not result.executed
    assert result.is_error
    assert booking.executed == 0
    content = str(result.content)
    assert content.startswith("[toolguard] Invalid arguments for book, not executed:")
    assert "args.user_id: 5 is not of type 'string'" in content
    assert "args.cabin: 'first' is not one of ['economy', 'business']" in content
    assert "args: 'seats' is a required property" in content
    assert "Additional properties are not allowed ('extra' was unexpected)" in content
    assert "args.user_id" in result.reason
    assert content.endswith("Fix the arguments and call again.")


def test_valid_arguments_run(guard: tg.Guard, booking: Booking) -> None:
    result = guard.task("t").call("book", '{"user_id": "u1", "seats": 2, "cabin": "economy"}')
    assert result.decision is tg.Decision.ALLOW
    assert result.content == "booked 2"
    assert booking.executed == 1


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ('{"user_id": "u1", "seats": 2,', "line 1, column 30 (char 29)"),
        ('{"user_id": "u1",\n "seats": 2 "cabin": "economy"}', "line 2, column 13 (char 30)"),
        ("[1, 2]", "got an array"),
        ('{"seats": NaN}', "line 1, column 11 (char 10)"),
    ],
)
def test_malformed_json_is_invalid_with_its_position(
    guard: tg.Guard, booking: Booking, text: str, where: str
) -> None:
    result = guard.task("t").call("book", text)
    assert result.decision is tg.Decision.INVALID
    assert result.is_error
    assert "arguments are not a valid JSON object" in result.reason
    assert where in result.reason
    assert where in str(result.content)
    assert booking.executed == 0


class CountingValidator:
    """Wraps a compiled validator and counts ``is_valid`` calls."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls = 0

    def is_valid(self, instance: Any) -> bool:
        self.calls += 1
        return bool(self.inner.is_valid(instance))

    def iter_errors(self, instance: Any) -> Any:
        self.calls += 1
        return self.inner.iter_errors(instance)


def test_a_signature_validated_once_is_not_validated_again(
    guard: tg.Guard, monkeypatch: pytest.MonkeyPatch
) -> None:
    validator = guard._config.entries["book"].validator
    assert validator is not None
    # the memo serves the jsonschema path (with jsonschema-rs, validity is decided faster
    # than a memo key is computed, so there is no memo)
    monkeypatch.setattr(validator, "_fast", None)
    validator._py()  # jsonschema's validator, built on first use
    counters = []
    for attr in ("_fast", "_validator"):
        if getattr(validator, attr) is not None:
            counter = CountingValidator(getattr(validator, attr))
            monkeypatch.setattr(validator, attr, counter)
            counters.append(counter)

    def checks() -> int:
        return sum(c.calls for c in counters)

    task = guard.task("t")
    first = task.call("book", {"user_id": "u", "seats": 1, "cabin": "economy"})
    assert checks() == 1
    assert len(validator._seen) == 1
    task.new_turn()
    # the same arguments as JSON text, in another key order and spacing: not validated again
    again = task.call("book", '{"cabin": "economy",   "seats": 1, "user_id": "u"}')
    assert again.args_hash == first.args_hash
    assert again.decision is tg.Decision.ALLOW
    assert checks() == 1
    # the memo is keyed by the exact arguments (nulls included), not the canonical hash:
    # a spelling the hash folds away (an explicit default) is validated once more
    task.new_turn()
    spelled = task.call("book", {"user_id": "u", "seats": 1, "cabin": "economy",
                                 "insurance": False})
    assert spelled.args_hash == first.args_hash and checks() == 2
    task.call("book", {"user_id": "u", "seats": 2, "cabin": "economy"})
    assert checks() == 3
    # invalid arguments are remembered as invalid, with their problems: never as valid
    messages = set()
    for _ in range(2):
        task.new_turn()
        bad = task.call("book", {"user_id": "u", "seats": "2", "cabin": "economy"})
        assert bad.decision is tg.Decision.INVALID
        messages.add(str(bad.content))
    assert checks() == 4 and len(messages) == 1 and "args.seats: '2'" in messages.pop()
    assert len(validator._seen) == 4


def test_explicit_null_for_an_optional_argument_means_omitted_memo_or_not() -> None:
    # A null where the schema takes none is the argument left out (OpenAI strict mode sends
    # null for every optional argument not given); the tool never sees the null, and the
    # validation memo (keyed by the exact arguments) does not change the verdict.
    received: list[dict[str, Any]] = []

    def send(**kwargs: Any) -> str:
        received.append(kwargs)
        return "sent"

    schema = {"type": "object", "properties": {"to": {"type": "string"}}}
    task = tg.Guard(tools=[tg.readonly(args_schema=schema)(send)]).task("t")
    assert task.call("send", {"to": None}).decision is tg.Decision.ALLOW
    assert task.call("send", {}).decision is tg.Decision.ALLOW
    assert task.call("send", {"to": 5}).decision is tg.Decision.INVALID
    assert received == [{}, {}]
    required = {**schema, "required": ["to"]}
    strict = tg.Guard(tools=[tg.readonly(args_schema=required, name="s")(send)]).task("t")
    assert strict.call("s", {"to": None}).decision is tg.Decision.INVALID  # still missing


def test_explicit_null_for_a_defaulted_argument_is_judged_the_same_every_time() -> None:
    received: list[tuple[str, int]] = []

    def page(name: str, n: int = 1) -> str:
        received.append((name, n))
        return "ok"

    task = tg.Guard(tools=[tg.readonly(page)]).task("t")
    first = task.call("page", {"name": "a", "n": None})
    plain = task.call("page", {"name": "a"})
    again = task.call("page", {"name": "a", "n": None})
    assert first.args_hash == plain.args_hash == again.args_hash  # one call, three times
    assert [first.count, plain.count, again.count] == [1, 2, 3]
    assert received == [("a", 1)] * 3  # the default, never None


def test_tool_schemas_in_openai_format(guard: tg.Guard) -> None:
    schemas = guard.tool_schemas()
    assert len(schemas) == 1
    tool = schemas[0]
    assert tool["type"] == "function"
    assert tool["function"]["name"] == "book"
    assert tool["function"]["description"] == "Book seats for a user."
    params = tool["function"]["parameters"]
    assert params["required"] == ["user_id", "seats", "cabin"]
    assert params["properties"]["cabin"]["enum"] == ["economy", "business"]
    assert params["additionalProperties"] is False
    json.dumps(schemas)  # plain JSON


def test_tool_schemas_use_given_schema_name_and_description() -> None:
    schema = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}

    def search(**kwargs: Any) -> str:
        """Ignored docstring."""
        return ""

    tool = tg.readonly(name="web.search", args_schema=schema, description="Search the web.")(
        search
    )
    assert tg.Guard(tools=[tool]).tool_schemas() == [
        {"type": "function",
         "function": {"name": "web.search", "description": "Search the web.",
                      "parameters": schema}},
    ]


# -- the real tau-bench airline tools and calls ----------------------------------------------


@pytest.fixture(scope="module")
def airline_tools(shared: Path) -> list[dict[str, Any]]:
    tools: list[dict[str, Any]] = json.loads(
        (shared / "data" / "tau-bench" / "airline-tools.json").read_text(encoding="utf-8")
    )
    assert len(tools) == 14
    return tools


@pytest.fixture(scope="module")
def airline_params(airline_tools: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {t["function"]["name"]: t["function"]["parameters"] for t in airline_tools}


RecordedCall = tuple[str, str, str]  # (where, tool name, argument JSON text)


@pytest.fixture(scope="module")
def recorded_calls(shared: Path) -> list[RecordedCall]:
    runs = json.loads(
        (shared / "data" / "tau-bench" / "gpt-4o-airline.json").read_text(encoding="utf-8")
    )
    assert len(runs) == 200
    calls: list[RecordedCall] = []
    for r, run in enumerate(runs):
        for m, message in enumerate(run["traj"]):
            if message.get("role") != "assistant":
                continue
            for call in message.get("tool_calls") or []:
                fn = call["function"]
                calls.append((f"run {r} ({run['task_id']}) message {m}", fn["name"],
                              fn["arguments"]))
    return calls


def make_tool(name: str, params: dict[str, Any], description: str,
              log: list[tuple[str, dict[str, Any]]]) -> Callable[..., str]:
    def tool(**kwargs: Any) -> str:
        log.append((name, kwargs))
        return "ok"

    return tg.mutating(name=name, args_schema=params, description=description)(tool)


def test_recorded_calls_count(recorded_calls: list[RecordedCall]) -> None:
    assert len(recorded_calls) == 1164


def test_decorated_airline_tools_accept_every_recorded_call(
    airline_tools: list[dict[str, Any]], recorded_calls: list[RecordedCall]
) -> None:
    log: list[tuple[str, dict[str, Any]]] = []
    tools = [make_tool(t["function"]["name"], t["function"]["parameters"],
                       t["function"]["description"], log) for t in airline_tools]
    guard = tg.Guard(tools=tools)
    assert guard.tool_schemas() == airline_tools
    for i, (where, name, text) in enumerate(recorded_calls):
        result = guard.task(f"call-{i}").call(name, text)
        assert result.decision is tg.Decision.ALLOW, f"{where}: {name}: {result.content}"
    assert len(log) == 1164
    assert log[0] == (recorded_calls[0][1], json.loads(recorded_calls[0][2]))


def test_recorded_airline_tools_validate_every_recorded_call(
    airline_tools: list[dict[str, Any]],
    airline_params: dict[str, dict[str, Any]],
    recorded_calls: list[RecordedCall],
) -> None:
    specs = [recorded_tool(t["function"]["name"], args_schema=t["function"]["parameters"],
                           description=t["function"]["description"]) for t in airline_tools]
    entries = tg.Guard(tools=specs)._config.entries
    validators = {name: ArgsValidator(params) for name, params in airline_params.items()}
    assert set(entries) == set(validators)
    by_tool: dict[str, int] = {}
    for where, name, text in recorded_calls:
        args = parse_arguments(text)
        entry_validator = entries[name].validator
        assert entry_validator is not None
        assert entry_validator.validate(args) is None, where
        assert validators[name].validate(args) is None, where
        by_tool[name] = by_tool.get(name, 0) + 1
    assert sum(by_tool.values()) == 1164
    assert set(by_tool) == set(validators)  # every tool was called at least once


def first_args(calls: list[RecordedCall], tool: str) -> dict[str, Any]:
    return next(parse_arguments(text) for _, name, text in calls if name == tool)


def _set(path: list[str | int], value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(args: dict[str, Any]) -> None:
        target: Any = args
        for part in path[:-1]:
            target = target[part]
        target[path[-1]] = value
    return mutate


def _drop(path: list[str | int]) -> Callable[[dict[str, Any]], None]:
    def mutate(args: dict[str, Any]) -> None:
        target: Any = args
        for part in path[:-1]:
            target = target[part]
        del target[path[-1]]
    return mutate


MUTATIONS: list[tuple[str, str, Callable[[dict[str, Any]], None], str]] = [
    ("wrong_type", "update_reservation_baggages", _set(["total_baggages"], "2"),
     "args.total_baggages: '2' is not of type 'integer'"),
    ("wrong_type_number", "send_certificate", _set(["amount"], "200"),
     "args.amount: '200' is not of type 'number'"),
    ("missing_required", "book_reservation", _drop(["insurance"]),
     "args: 'insurance' is a required property"),
    ("bad_enum", "book_reservation", _set(["cabin"], "first"),
     "args.cabin: 'first' is not one of ['basic_economy', 'economy', 'business']"),
    ("nested_missing", "update_reservation_passengers", _drop(["passengers", 0, "dob"]),
     "args.passengers[0]: 'dob' is a required property"),
    ("nested_type", "update_reservation_flights", _set(["flights", 1, "flight_number"], 28),
     "args.flights[1].flight_number: 28 is not of type 'string'"),
    ("array_type", "update_reservation_flights", _set(["flights"], {"flight_number": "HAT1"}),
     "args.flights: {'flight_number': 'HAT1'} is not of type 'array'"),
]


@pytest.mark.parametrize(("tool", "mutate", "expected"),
                         [m[1:] for m in MUTATIONS], ids=[m[0] for m in MUTATIONS])
def test_mutated_recorded_calls_are_invalid(
    airline_params: dict[str, dict[str, Any]],
    recorded_calls: list[RecordedCall],
    tool: str,
    mutate: Callable[[dict[str, Any]], None],
    expected: str,
) -> None:
    original = first_args(recorded_calls, tool)
    validator = ArgsValidator(airline_params[tool])
    assert validator.validate(original) is None
    args = copy.deepcopy(original)
    mutate(args)
    message = validator.validate(args)
    assert message is not None
    assert expected in message.split("; ")
    # and through a guard: decision invalid, the same message, nothing executed
    log: list[tuple[str, dict[str, Any]]] = []
    guard = tg.Guard(tools=[make_tool(tool, airline_params[tool], "", log)])
    result = guard.task("t").call(tool, json.dumps(args))
    assert result.decision is tg.Decision.INVALID
    assert expected in str(result.content)
    assert log == []


def test_extra_property_is_allowed_unless_the_schema_forbids_it(
    airline_params: dict[str, dict[str, Any]], recorded_calls: list[RecordedCall]
) -> None:
    params = airline_params["cancel_reservation"]
    assert "additionalProperties" not in params  # none of the 14 schemas forbids extras
    args = {**first_args(recorded_calls, "cancel_reservation"), "reason": "changed plans"}
    assert ArgsValidator(params).validate(args) is None
    strict = {**params, "additionalProperties": False}
    assert ArgsValidator(strict).validate(args) == (
        "args: Additional properties are not allowed ('reason' was unexpected)"
    )


def test_an_integral_float_reaches_an_int_parameter_as_an_int() -> None:
    """JSON Schema's "integer" accepts 5.0 and a model may send it; the tool gets 5, as
    pydantic-validating frameworks would pass it (range(5.0) would raise)."""
    @tg.readonly
    def page(limit: int, offset: int | None = None, ratio: float = 1.0) -> str:
        return " ".join(type(v).__name__ for v in (limit, offset, ratio))

    task = tg.Guard(tools=[page]).task("t")
    assert task.call("page", '{"limit": 5.0, "offset": 2.0, "ratio": 3.0}').value == (
        "int int float")
    assert task.call("page", {"limit": 5.5}).decision is tg.Decision.INVALID


class _Row(TypedDict):
    id: int
    score: float
    tags: NotRequired[list[int]]


def test_integral_floats_inside_containers_reach_int_hints_as_ints() -> None:
    """The same rule inside list[int], tuple[int, ...], dict[str, int] and TypedDict fields;
    floats stay floats where the hint says float, and the caller's containers are not
    changed."""
    seen: dict[str, Any] = {}

    @tg.readonly
    def load(ids: list[int], pair: tuple[int, float], counts: dict[str, int] | None = None,
             rows: list[_Row] | None = None) -> str:
        seen.update(ids=ids, pair=pair, counts=counts, rows=rows)
        return "ok"

    @tg.readonly
    def pick(mixed: list[int | str]) -> str:
        seen.update(mixed=mixed)
        return "ok"

    task = tg.Guard(tools=[load, pick]).task("t")
    assert task.call("pick", {"mixed": [10.0]}).decision is tg.Decision.ALLOW
    args = {"ids": [1.0, 2, 3.0], "pair": [4.0, 5.0], "counts": {"a": 6.0},
            "rows": [{"id": 7.0, "score": 8.0, "tags": [9.0]}]}
    before = json.dumps(args)
    assert task.call("load", args).decision is tg.Decision.ALLOW
    assert json.dumps(args) == before  # the caller's nested values are untouched
    assert seen["ids"] == [1, 2, 3] and all(type(i) is int for i in seen["ids"])
    assert [type(v) for v in seen["pair"]] == [int, float]
    assert type(seen["counts"]["a"]) is int
    row = seen["rows"][0]
    assert (type(row["id"]), type(row["score"]), type(row["tags"][0])) == (int, float, int)
    assert type(seen["mixed"][0]) is float  # int | str: pydantic's choice, left alone
    assert task.call("load", {"ids": [1.5], "pair": [1, 1]}).decision is tg.Decision.INVALID


def test_containers_without_integral_floats_are_passed_as_they_are() -> None:
    seen: list[Any] = []

    @tg.readonly
    def load(ids: list[int]) -> str:
        seen.append(ids)
        return "ok"

    ids = [1, 2, 3]
    tg.Guard(tools=[load]).task("t").call("load", {"ids": ids})
    assert seen[0] is ids  # no copy when there is nothing to convert


class _Fetches:
    """A local HTTP server that answers every GET with an integer schema, counting them."""

    def __enter__(self) -> _Fetches:
        import http.server
        import threading

        hits: list[str] = []
        self.hits = hits

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                hits.append(self.path)
                body = b'{"type": "integer"}'
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: Any) -> None:
                pass

        self.server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/remote.json"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *_: Any) -> None:
        self.server.shutdown()
        self.server.server_close()


BROKEN_REFS = [
    {"type": "object", "properties": {"a": {"$ref": "#/nope"}}},
    {"$ref": "#/$defs/Missing", "$defs": {"A": {}}},
    # a property named like a data keyword is still a schema
    {"type": "object", "properties": {"default": {"$ref": "#/nope"}}},
    {"type": "object", "properties": {"a": {"$ref": "http://[::1"}}},  # not a URI
]


@pytest.mark.parametrize("schema", BROKEN_REFS)
def test_a_reference_that_does_not_resolve_is_a_schema_error_at_build(
        schema: dict[str, Any]) -> None:
    from jsonschema.exceptions import SchemaError

    with pytest.raises(SchemaError, match="the schema does not compile"):
        ArgsValidator(schema)
    with pytest.raises(SchemaError):
        tg.Guard(tools=[recorded_tool("t", schema)])


@pytest.mark.parametrize("name", ["a", "default", "enum"])
def test_a_remote_reference_is_never_fetched(name: str, monkeypatch: pytest.MonkeyPatch
                                             ) -> None:
    from jsonschema.exceptions import SchemaError

    with _Fetches() as remote:
        schema = {"type": "object", "properties": {name: {"$ref": remote.url}}}
        with pytest.raises(SchemaError, match="is not fetched"):
            ArgsValidator(schema)
        monkeypatch.setattr("toolguard.tools._schema._rs", None)  # jsonschema alone: at validation
        message = ArgsValidator(schema).validate({name: "x"})
        assert message is not None and message.startswith(
            "the tool's argument schema cannot be applied:")
        assert remote.hits == []


@pytest.mark.parametrize("schema", BROKEN_REFS[:3])
def test_without_jsonschema_rs_a_broken_reference_refuses_the_call_not_the_guard(
        schema: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("toolguard.tools._schema._rs", None)
    task = tg.Guard(tools=[recorded_tool("t", schema)]).task("x")
    result = task.call("t", {"a": 1, "default": 1}, run=lambda args: "ran")
    assert result.decision is tg.Decision.INVALID
    assert "the tool's argument schema cannot be applied" in result.content


@pytest.mark.parametrize("schema", [
    {"$id": "https://example.com/args.json", "type": "object",
     "properties": {"a": {"$ref": "#/$defs/A"},
                    "b": {"$id": "sub/b.json", "$ref": "../args.json#/$defs/A"},
                    "c": {"enum": [{"$ref": "#/not-a-schema"}]}},
     "$defs": {"A": {"type": "integer"}}},
    {"$id": "urn:ex:root", "type": "object",  # a nested urn: scope
     "properties": {"b": {"$id": "urn:ex:b", "$defs": {"A": {"type": "integer"}},
                          "$ref": "#/$defs/A"},
                    "a": {"$ref": "#/$defs/A"}},
     "$defs": {"A": {"type": "integer"}}},
    {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
     "definitions": {"A": {"type": "integer"}},  # draft 7: $id beside $ref is ignored
     "properties": {"a": {"$ref": "#/definitions/A"},
                    "b": {"$id": "other.json", "$ref": "#/definitions/A"}}},
    {"$schema": "http://json-schema.org/draft-04/schema#", "type": "object",
     "id": "http://example.com/root.json", "definitions": {"A": {"type": "integer"}},
     "properties": {"a": {"$ref": "#/definitions/A"}, "b": {"$ref": "#/definitions/A"}}},
    {"type": "object", "$defs": {"a/b": {"type": "integer"}, "c%d": {"type": "integer"}},
     "properties": {"a": {"$ref": "#/$defs/a~1b"}, "b": {"$ref": "#/$defs/c%25d"}}},
])
@pytest.mark.parametrize("fast", [True, False])
def test_self_contained_references_resolve_in_every_dialect(
        schema: dict[str, Any], fast: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if not fast:
        monkeypatch.setattr("toolguard.tools._schema._rs", None)
    validator = ArgsValidator(schema)
    assert validator.validate({"a": 1, "b": 2}) is None
    assert validator.validate({"a": "x"}) == "args.a: 'x' is not of type 'integer'"


@pytest.mark.parametrize("schema", [
    {"type": "object", "$schema": 5},
    {"type": "object", "$schema": []},
    functools.reduce(lambda inner, _: {"type": "object", "properties": {"a": inner}},
                     range(2000), cast(dict[str, Any], {"type": "integer"})),
])
def test_an_unusable_schema_is_a_schema_error(schema: dict[str, Any]) -> None:
    from jsonschema.exceptions import SchemaError

    with pytest.raises(SchemaError):
        ArgsValidator(schema)


class _Tree(TypedDict):
    value: int
    children: NotRequired[list[_Tree] | None]


def test_a_recursive_typed_dict_builds_at_any_stack_depth_and_converts() -> None:
    seen: list[Any] = []

    @tg.readonly
    def walk(tree: _Tree) -> str:
        seen.append(tree)
        return "ok"

    def deep(n: int) -> tg.Guard:  # build with most of the stack already used
        return deep(n - 1) if n else tg.Guard(tools=[walk])

    import sys
    guard = deep(sys.getrecursionlimit() - 200)
    tree = {"value": 1.0, "children": [{"value": 2.0, "children": None}]}
    assert guard.task("t").call("walk", {"tree": tree}).decision is tg.Decision.ALLOW
    assert seen[0]["value"] == 1 and type(seen[0]["value"]) is int
    assert type(seen[0]["children"][0]["value"]) is int


def test_a_tuple_in_a_direct_call_is_converted_like_a_list() -> None:
    seen: list[Any] = []

    @tg.readonly
    def load(xs: list[int], pair: tuple[int, float]) -> str:
        seen.append((xs, pair))
        return "ok"

    tg.Guard(tools=[load]).task("t").call("load", {"xs": (1.0, 2), "pair": (3.0, 4.0)})
    assert seen == [([1, 2], [3, 4.0])]
    assert [type(v) for v in seen[0][0]] == [int, int]
    assert [type(v) for v in seen[0][1]] == [int, float]


def _rows_tool() -> tg.Guard:
    @tg.readonly
    def load(table: str, rows: list[dict[str, Any]], note: str | None = "none") -> int:
        return len(rows)

    return tg.Guard(tools=[load])


def _counted(guard: tg.Guard, monkeypatch: pytest.MonkeyPatch) -> CountingValidator:
    validator = guard._config.entries["load"].validator
    assert validator is not None and validator._fast is not None  # jsonschema-rs decides
    counter = CountingValidator(validator._fast)
    monkeypatch.setattr(validator, "_fast", counter)
    return counter


ROWS = [{"id": i, "name": f"customer {i:04d}", "score": 0.5} for i in range(40)]  # ~1.5 KB


def test_large_plain_arguments_validated_once_skip_validation(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The canonical hash of arguments that serialized as plain JSON names them exactly:
    # the second identical call needs no validation (85 µs on 100 KB).
    guard = _rows_tool()
    counter = _counted(guard, monkeypatch)
    task = guard.task("t")
    args = {"table": "t", "rows": ROWS, "note": "n"}
    for _ in range(3):
        assert task.call("load", args).executed  # allow, allow, warn
    assert counter.calls == 1
    assert task.call("load", {**args, "table": "u"}).executed
    assert counter.calls == 2  # other arguments: validated


def test_the_memo_never_answers_for_arguments_the_hash_folds(
        monkeypatch: pytest.MonkeyPatch) -> None:
    guard = _rows_tool()
    counter = _counted(guard, monkeypatch)
    task = guard.task("t")
    with_default = {"table": "t", "rows": ROWS}  # note filled in from its default: not plain
    nested_null = {"table": "t", "rows": [*ROWS, {"id": None}], "note": "n"}  # null dropped
    for _ in range(2):
        task.call("load", with_default)
        task.call("load", nested_null)
    assert counter.calls == 4
    # an invalid value is refused however often its valid twin was seen
    bad = {"table": "t", "rows": ROWS, "note": 5}
    assert task.call("load", bad).decision is tg.Decision.INVALID
    assert task.call("load", bad).decision is tg.Decision.INVALID


# --- messages inside anyOf / oneOf (an optional or union parameter) -----------------------


def _optional_tools(tags: list[str] | None = None, n: int | str = 0,
                    counts: dict[str, int] | None = None) -> None:
    """A tool with optional and union parameters (pydantic makes them anyOf)."""


_UNIONS = ArgsValidator(schema_from_signature(_optional_tools))


@pytest.mark.parametrize(("args", "message"), [
    ({"tags": [1, 2]}, "args.tags[0]: 1 is not of type 'string'; "
                       "args.tags[1]: 2 is not of type 'string'"),
    ({"tags": ["a", 1]}, "args.tags[1]: 1 is not of type 'string'"),
    ({"counts": {"a": "x"}}, "args.counts.a: 'x' is not of type 'integer'"),
    ({"tags": "x"}, "args.tags: 'x' is not of type 'array' or 'null'"),
    ({"n": 1.5}, "args.n: 1.5 is not of type 'integer' or 'string'"),
    ({"n": None, "tags": [3]}, "args.n: None is not of type 'integer' or 'string'; "
                               "args.tags[0]: 3 is not of type 'string'"),
])
def test_an_invalid_optional_argument_names_each_failing_path_inside_the_union(
        args: dict[str, Any], message: str) -> None:
    assert _UNIONS.validate(args) == message


def test_a_oneof_branch_is_descended_too() -> None:
    validator = ArgsValidator({"type": "object", "properties": {"p": {"oneOf": [
        {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]},
        {"type": "string"}]}}})
    assert validator.validate({"p": {"x": "1"}}) == "args.p.x: '1' is not of type 'integer'"


def test_the_guard_tells_the_model_each_failing_path_of_an_optional_list() -> None:
    guard = tg.Guard(tools=[tg.readonly(_optional_tools)])
    result = guard.task("t").call("_optional_tools", {"tags": [1, 2]})
    assert result.decision == "invalid"
    assert "args.tags[0]: 1 is not of type 'string'" in result.content
    assert "args.tags[1]: 2 is not of type 'string'" in result.content


@given(st.lists(st.integers(), min_size=1, max_size=12))
def test_every_wrong_item_of_an_optional_list_is_named_up_to_the_cap(items: list[int]) -> None:
    message = _UNIONS.validate({"tags": items})
    assert message is not None
    for index, item in enumerate(items[:8]):
        assert f"args.tags[{index}]: {item} is not of type 'string'" in message
    assert ("more" in message) is (len(items) > 8)


# Schemas of the keywords a tool's arguments use (from type hints and hand-written
# args_schema=), and JSON instances, to hold the two validators' wording equal.
_LEAF_SCHEMAS = st.one_of(
    st.sampled_from([{"type": t} for t in
                     ("string", "integer", "number", "boolean", "null", "array", "object")]),
    st.just({"type": ["integer", "string"]}),
    st.builds(lambda n: {"type": "integer", "minimum": n}, st.integers(-3, 3)),
    st.builds(lambda n: {"type": "number", "exclusiveMaximum": n}, st.integers(-3, 3)),
    st.builds(lambda n: {"type": "string", "minLength": n}, st.integers(0, 3)),
    st.builds(lambda n: {"type": "string", "maxLength": n}, st.integers(0, 3)),
    st.builds(lambda n: {"type": "array", "maxItems": n}, st.integers(0, 2)),
    st.builds(lambda n: {"type": "array", "minItems": n}, st.integers(0, 2)),
    st.just({"type": "string", "pattern": "^[a-c]+$"}),
    st.just({"enum": ["economy", "business", 3]}),
    st.just({"const": "x"}),
    st.just({"type": "integer", "multipleOf": 3}),
    st.just({"type": "array", "uniqueItems": True}),
)


def _object_of(children: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    return st.builds(
        lambda props, required, closed: {
            "type": "object", "properties": props,
            "required": [k for k in props if k in required],
            **({"additionalProperties": False} if closed else {})},
        st.dictionaries(st.sampled_from("abc"), children, max_size=3),
        st.sets(st.sampled_from("abc")), st.booleans())


_SCHEMAS = st.recursive(
    _LEAF_SCHEMAS,
    lambda inner: st.one_of(
        _object_of(inner),
        st.builds(lambda items: {"type": "array", "items": items}, inner),
        # a union as type hints give it: one branch per type, at most one can match by type
        st.builds(lambda items: {"anyOf": [{"type": "array", "items": items},
                                           {"type": "null"}]}, inner),
        st.builds(lambda obj: {"anyOf": [obj, {"type": "string"}]}, _object_of(inner))),
    max_leaves=6)
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.sampled_from([1.5, 0.25])
    | st.sampled_from(["", "a", "abc", "x", "economy", "zz", "1"]),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.sampled_from("abcd"), inner, max_size=3),
    max_leaves=8)


@given(schema=_object_of(_SCHEMAS), args=st.dictionaries(st.sampled_from("abcd"), _JSON,
                                                         max_size=4))
def test_jsonschema_rs_words_every_problem_as_jsonschema_does(
        schema: dict[str, Any], args: dict[str, Any]) -> None:
    """The model reads the same message whichever validator found the problems: jsonschema-rs
    (a dependency) or pure-Python jsonschema (where no wheel exists)."""
    fast = ArgsValidator(schema)
    import toolguard.tools._schema as schema_module

    saved = schema_module.fast_validators()
    schema_module._rs = None
    try:
        slow = ArgsValidator(schema)
    finally:
        schema_module._rs = saved
    assert fast.validate(args) == slow.validate(args)
