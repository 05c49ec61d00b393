"""The Python API refuses, where they are given, the option values a policy file refuses for
the same keys: a decorator, ``guard.register`` and ``Guard(tools=[ToolSpec(...)])`` run the
policy's own validation (``load_policy_dict`` of ``[tools.<name>]``), so all accept the same."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import toolguard as tg
from toolguard import PolicyError, load_policy_dict
from toolguard.tools._spec import recorded_tool

DECORATORS = [tg.readonly, tg.mutating, tg.requires_approval]
MUTATING = [tg.mutating, tg.requires_approval]


def _sync(x: int) -> int:
    return x


async def _async(x: int) -> int:
    return x


FUNCS = [_sync, _async]


def _decorate(decorator: Callable[..., Any], func: Callable[..., Any], **options: Any) -> Any:
    return decorator(**options)(func)


@pytest.mark.parametrize("func", FUNCS)
@pytest.mark.parametrize("decorator", DECORATORS)
@pytest.mark.parametrize(("value", "expected"), [
    ("three", 'must be an integer ≥ 1, got "three"'),
    (0, "must be an integer ≥ 1, got 0"),
    (-5, "must be an integer ≥ 1, got -5"),
    (True, "must be an integer ≥ 1, got true"),
    (10**30, "must be an integer below 2**63"),
])
def test_a_bad_max_calls_is_refused_at_decoration_naming_tool_and_option(
        decorator: Callable[..., Any], func: Callable[..., Any], value: Any, expected: str
) -> None:
    with pytest.raises(PolicyError) as info:
        _decorate(decorator, func, max_calls=value)
    assert f"tools.{func.__name__}.max_calls: {expected}" in str(info.value)
    assert f"@tg.{decorator.__name__}" in str(info.value)


@pytest.mark.parametrize("func", FUNCS)
@pytest.mark.parametrize("decorator", MUTATING)
@pytest.mark.parametrize(("value", "expected"), [
    (-1, "must be a number > 0, got -1"),
    (0, "must be a number > 0, got 0"),
    (math.nan, "must be a finite number"),
    (math.inf, "must be a finite number"),
    (1e12, "must be"),
    ("1h", "must be a number"),
])
def test_a_bad_idempotency_ttl_is_refused_at_decoration(
        decorator: Callable[..., Any], func: Callable[..., Any], value: Any, expected: str
) -> None:
    with pytest.raises(PolicyError, match=r"tools\.\w+\.idempotency_ttl_s: ") as info:
        _decorate(decorator, func, idempotency_ttl_s=value)
    assert expected in str(info.value)


@pytest.mark.parametrize("decorator", MUTATING)
@pytest.mark.parametrize(("option", "value", "expected"), [
    ("idempotency_scope", "forever", 'must be one of "until_change", "task", "off"'),
    ("forwards_idempotency_key", "yes", "must be true or false"),
    ("external", 1, "must be true or false"),
])
def test_the_other_mutating_options_are_checked_too(
        decorator: Callable[..., Any], option: str, value: Any, expected: str) -> None:
    with pytest.raises(PolicyError, match=rf"tools\._sync\.{option}: {expected}"):
        _decorate(decorator, _sync, **{option: value})


@pytest.mark.parametrize("decorator", DECORATORS)
@pytest.mark.parametrize("option", ["name", "description"])
def test_a_name_or_description_that_is_not_a_string_is_a_type_error(
        decorator: Callable[..., Any], option: str) -> None:
    with pytest.raises(TypeError, match=rf"@{decorator.__name__}: {option}= must be"):
        _decorate(decorator, _sync, **{option: 3})


def test_good_options_are_kept_as_given() -> None:
    spec = tg.spec_of(tg.mutating(max_calls=3, idempotency_ttl_s=1.5,
                                  idempotency_scope="task", name="fs.write")(_sync))
    assert (spec.name, spec.max_calls, spec.idempotency_ttl_s) == ("fs.write", 3, 1.5)
    assert spec.idempotency_scope is tg.IdempotencyScope.TASK
    assert tg.spec_of(tg.requires_approval()(_sync)).idempotency_scope is (
        tg.IdempotencyScope.TASK)
    # the message names the tool by the name it is called by
    with pytest.raises(PolicyError, match=r'tools\."fs\.write"\.max_calls'):
        tg.mutating(max_calls=0, name="fs.write")(_sync)


def test_one_decorator_factory_marks_several_functions() -> None:
    mark = tg.mutating(name="same", max_calls=2)
    first, second = mark(_sync), mark(_async)
    assert tg.spec_of(first).name == tg.spec_of(second).name == "same"


@pytest.mark.parametrize(("settings", "path"), [
    ({"max_calls": 0}, "max_calls"),
    ({"max_calls": "three"}, "max_calls"),
    ({"idempotency_ttl_s": math.nan}, "idempotency_ttl_s"),
    ({"idempotency_scope": "forever"}, "idempotency_scope"),
    ({"requires_approval": "yes"}, "requires_approval"),
    ({"effect": "bogus"}, "effect"),
])
@pytest.mark.parametrize("tool", ["remote", _sync, _async])
def test_register_refuses_what_a_policy_refuses_and_registers_nothing(
        tool: Any, settings: dict[str, Any], path: str) -> None:
    guard = tg.Guard()
    name = tool if isinstance(tool, str) else tool.__name__
    with pytest.raises(PolicyError, match=rf"guard\.register: tools\.{name}\.{path}: must"):
        guard.register(tool, **settings)
    assert guard.tool_schemas() == []


def test_a_hand_built_tool_spec_is_checked_when_the_guard_is_built() -> None:
    with pytest.raises(PolicyError, match=r"Guard\(tools=\): tools\.s\.max_calls: must"):
        tg.Guard(tools=[tg.ToolSpec(name="s", func=_sync, max_calls=0)])


def test_a_hand_built_tool_spec_takes_the_policy_files_spelling_of_an_effect() -> None:
    runs: list[int] = []

    def write(x: int) -> int:
        runs.append(x)
        return x

    spec = tg.ToolSpec(name="write", func=write, effect="mutating",  # type: ignore[arg-type]
                       idempotency_scope="task")  # type: ignore[arg-type]
    assert spec.effect is tg.Effect.MUTATING
    assert spec.idempotency_scope is tg.IdempotencyScope.TASK
    task = tg.Guard(tools=[spec]).task("t")
    # a mutating call repeated is answered from its record, not run again
    assert [task.call("write", {"x": 1}).decision for _ in range(2)] == [
        tg.Decision.ALLOW, tg.Decision.CACHED]
    assert runs == [1]


def test_a_hand_built_tool_spec_refuses_an_effect_it_does_not_know() -> None:
    with pytest.raises(ValueError, match=r"ToolSpec 's': effect must be one of 'readonly', "
                                         r"'mutating', 'poll', got 'writes'"):
        tg.ToolSpec(name="s", func=_sync, effect="writes")  # type: ignore[arg-type]


def _policy_accepts(key: str, value: Any) -> bool:
    try:
        load_policy_dict({"tools": {"t": {key: value}}})
    except PolicyError:
        return False
    return True


def _decorator_accepts(key: str, value: Any) -> bool:
    try:
        tg.mutating(name="t", **{key: value})(_sync)
    except PolicyError:
        return False
    return True


VALUES = st.one_of(st.integers(min_value=-3, max_value=2**64), st.floats(), st.booleans(),
                   st.text(max_size=3))


@given(value=VALUES)
def test_a_decorator_accepts_a_max_calls_exactly_when_a_policy_does(value: Any) -> None:
    assert _decorator_accepts("max_calls", value) is _policy_accepts("max_calls", value)


@given(value=VALUES)
def test_a_decorator_accepts_a_ttl_exactly_when_a_policy_does(value: Any) -> None:
    assert (_decorator_accepts("idempotency_ttl_s", value)
            is _policy_accepts("idempotency_ttl_s", value))


@pytest.mark.parametrize("schema", ["nope", ["type", "object"], 3])
@pytest.mark.parametrize("tool", ["remote", _sync])
def test_register_refuses_an_args_schema_that_is_not_a_mapping(tool: Any, schema: Any
                                                               ) -> None:
    guard = tg.Guard()
    name = tool if isinstance(tool, str) else tool.__name__
    with pytest.raises(TypeError, match=rf"guard\.register: args_schema of tool '{name}' "
                                        r"must be a JSON Schema object \(a mapping"):
        guard.register(tool, args_schema=schema)
    assert guard.tool_schemas() == []


@pytest.mark.parametrize("decorator", DECORATORS)
def test_a_decorator_refuses_an_args_schema_that_is_not_a_mapping(
        decorator: Callable[..., Any]) -> None:
    with pytest.raises(TypeError, match=rf"@tg\.{decorator.__name__}: args_schema of tool "
                                        "'_sync' must be a JSON Schema object"):
        _decorate(decorator, _sync, args_schema="nope")


def test_a_schema_that_does_not_compile_names_the_tool_and_where_it_breaks() -> None:
    from jsonschema.exceptions import SchemaError

    with pytest.raises(SchemaError, match=r"guard\.register: args_schema of tool 'remote' is "
                                          r"not a usable JSON Schema: at \$\.type: 'objekt' "
                                          "is not valid"):
        tg.Guard().register("remote", args_schema={"type": "objekt"})
    with pytest.raises(SchemaError, match=r"@tg\.mutating: args_schema of tool 'w' .* at "
                                          r"\$\.properties\.a\.minimum: 'x' is not of type"):
        tg.mutating(name="w", args_schema={"type": "object",
                                           "properties": {"a": {"minimum": "x"}}})(_sync)
    with pytest.raises(SchemaError, match=r"Guard: args_schema of tool 'r' .*does not compile"):
        tg.Guard(tools=[recorded_tool("r", {"type": "object",
                                            "properties": {"a": {"$ref": "#/nope"}}})])


@pytest.mark.parametrize("poll", ["yes", 1, None])
def test_poll_must_be_a_bool(poll: Any) -> None:
    with pytest.raises(TypeError, match=r"@readonly: poll= must be True or False"):
        tg.readonly(poll=poll)(_sync)
    assert tg.spec_of(tg.readonly(poll=True)(_async)).effect is tg.Effect.POLL


def test_register_refuses_a_description_that_is_not_a_string() -> None:
    guard = tg.Guard()
    with pytest.raises(TypeError, match=r"register\(\): description= must be a string"):
        guard.register("remote", description=["x"])  # type: ignore[arg-type]
    assert guard.tool_schemas() == []
