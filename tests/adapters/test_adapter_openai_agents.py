"""toolguard.adapters.openai_agents with the real Agents SDK and its own scripted model
(``agents.testing.ScriptedModel``, no network): the adapter script, sync and async."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from agents import (
    Agent,
    AgentsException,
    FunctionTool,
    ItemHelpers,
    RunContextWrapper,
    Runner,
    UserError,
    function_tool,
    set_tracing_disabled,
)
from agents.testing import ScriptedModel, assistant_message, function_call

import toolguard as tg
from tests import adapter_support as s
from tests.adapter_support import fresh_runs  # noqa: F401 - the autouse fixture
from toolguard.adapters.openai_agents import TASK_ID_KEY, ToolGuardHalt, guard_tools

FUNCTIONS: list[Callable[..., Any]] = [s.lookup, s.refund, s.write_file, s.read_file]
CONTEXT = {TASK_ID_KEY: "t-agents"}
set_tracing_disabled(True)  # no trace export attempts (no network)





def scripted(*steps: list[tuple[str, dict[str, Any]]]) -> ScriptedModel:
    return ScriptedModel([
        *([function_call(name, args, call_id=f"call_{i}_{j}")
           for j, (name, args) in enumerate(step)] for i, step in enumerate(steps)),
        [assistant_message("done")],
    ])


def run(agent: Agent[Any], value: Any, mode: str, context: Any = CONTEXT) -> Any:
    if mode == "async":
        return asyncio.run(Runner.run(agent, value, context=context))
    return Runner.run_sync(agent, value, context=context)


def outputs(model: ScriptedModel) -> list[str]:
    """The tool outputs in the model's last input."""
    last = model.last_call
    assert last is not None
    return [str(item["output"]) for item in last.input
            if isinstance(item, dict) and item.get("type") == "function_call_output"]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_the_adapter_script(mode: str) -> None:
    guard, audit = s.guard(FUNCTIONS)
    model = scripted(*([call] for call in s.SCRIPT))
    agent = Agent(name="support", model=model, tools=[*guard_tools(guard, FUNCTIONS)])

    # the refund needs approval: the SDK's own interruption, before the tool runs
    first = run(agent, "go", mode)
    (item,) = first.interruptions
    assert item.tool_name == "refund" and s.RUNS == {"lookup": 1}
    state = first.to_state()
    state.approve(item)

    with pytest.raises(tg.RepeatedToolCalls) as halted:
        run(agent, state, mode)
    assert isinstance(halted.value, ToolGuardHalt) and isinstance(halted.value, AgentsException)
    assert isinstance(halted.value.halt, tg.RepeatedToolCalls) and halted.value.count == 5
    assert s.audited(audit) == s.expected(review=False, after_resume=0)

    texts = outputs(model)
    assert texts[:3] == ["sunny in Paris", "refunded 500 cents on A1",
                         "wrote 5 bytes to notes.txt"]
    assert all(s.CACHED_NOTICE in t for t in texts[3:5])
    assert texts[5:7] == ["contents of notes.txt: hello"] * 2
    assert s.WARN_NOTICE in texts[7] and texts[8].startswith(s.BLOCKED)

    # history kept: the SDK's record of the run continues it once the task is resumed (the
    # halted turn left no dangling call in it), and the model's next read runs
    data = halted.value.run_data
    assert data is not None
    history = ItemHelpers.input_to_new_input_list(data.input) + [
        i.to_input_item() for i in data.new_items if i.type != "tool_approval_item"]
    guard.task("t-agents").resume()
    final = run(agent, history, mode)
    assert final.final_output == "done"
    assert s.audited(audit) == s.expected(review=False, after_resume=1)
    assert s.bodies(after_resume=1) == s.RUNS
    assert len(outputs(model)) == len(s.SCRIPT) - 1  # all but the halted call


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_parallel_identical_calls_in_one_response_run_once(mode: str) -> None:
    guard, _ = s.guard(FUNCTIONS)
    model = scripted([s.WRITE, s.WRITE, s.WRITE])
    agent = Agent(name="a", model=model, tools=[*guard_tools(guard, FUNCTIONS)])
    assert run(agent, "go", mode).final_output == "done"
    assert s.RUNS == {"write_file": 1}
    texts = outputs(model)
    assert len(texts) == 3 and sum(s.CACHED_NOTICE in t for t in texts) == 2


def test_a_rejection_never_reaches_the_tool() -> None:
    guard, audit = s.guard(FUNCTIONS)
    model = scripted([s.REFUND])
    agent = Agent(name="a", model=model, tools=[*guard_tools(guard, FUNCTIONS)])
    first = run(agent, "go", "sync")
    state = first.to_state()
    state.reject(first.interruptions[0])
    assert run(agent, state, "sync").final_output == "done"
    assert s.RUNS == {} and s.audited(audit) == []


def test_function_tools_keep_their_name_schema_and_settings() -> None:
    @function_tool(name_override="lookup_city", strict_mode=True)
    def lookup(ctx: RunContextWrapper[Any], city: str) -> str:
        """Look up a city.

        Args:
            city: the city's name.
        """
        s.RUNS["lookup_city"] += 1
        return f"{city}: {type(ctx.context).__name__}"

    guard = tg.Guard(tools=[tg.readonly(lookup)])
    (wrapped,) = guard_tools(guard, [lookup])
    assert isinstance(wrapped, FunctionTool) and wrapped is not lookup
    assert (wrapped.name, wrapped.description, wrapped.params_json_schema,
            wrapped.strict_json_schema) == (lookup.name, lookup.description,
                                            lookup.params_json_schema, True)
    model = scripted([("lookup_city", {"city": "Oslo"})], [("lookup_city", {"city": "Oslo"})])
    agent = Agent(name="a", model=model, tools=[wrapped])
    assert run(agent, "go", "async").final_output == "done"
    assert s.RUNS == {"lookup_city": 2}  # the context parameter is not an argument
    assert outputs(model) == ["Oslo: dict"] * 2


def test_a_tool_error_is_a_failed_call_the_model_sees() -> None:
    def flaky(path: str) -> str:
        """Fails."""
        raise OSError(f"disk full at {path}")

    guard = tg.Guard(tools=[tg.mutating(flaky)])
    model = scripted([("flaky", {"path": "x"})])
    agent = Agent(name="a", model=model, tools=[*guard_tools(guard, [flaky])])
    assert run(agent, "go", "sync").final_output == "done"
    assert outputs(model) == ["Error (OSError): disk full at x"]


def test_the_task_id_comes_from_the_context_or_task_id() -> None:
    guard, _ = s.guard(FUNCTIONS)

    class Ctx:
        toolguard_task_id = "from-attr"

    agent = Agent(name="a", model=scripted([s.READ]), tools=[*guard_tools(guard, FUNCTIONS)])
    run(agent, "go", "sync", context=Ctx())
    assert guard.task("from-attr").usage.tool_calls == 1
    fixed = Agent(name="a", model=scripted([s.READ]),
                  tools=[*guard_tools(guard, FUNCTIONS, task_id="fixed")])
    run(fixed, "go", "sync", context=None)
    assert guard.task("fixed").usage.tool_calls == 1
    bare = Agent(name="a", model=scripted([s.READ]), tools=[*guard_tools(guard, FUNCTIONS)])
    with pytest.raises(UserError, match=TASK_ID_KEY):
        run(bare, "go", "sync", context={})


def test_guard_tools_refuses_what_is_not_a_tool() -> None:
    with pytest.raises(TypeError, match="FunctionTool objects or functions"):
        guard_tools(tg.Guard(), [42])  # type: ignore[list-item]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_tg_decorated_function_under_function_tool_is_guarded_once(mode: str) -> None:
    save = function_tool(s.save)  # @function_tool over @tg.mutating
    guard = tg.Guard(tools=[save])
    model = scripted([s.SAVE], [s.SAVE])
    agent = Agent(name="a", model=model, tools=[*guard_tools(guard, [save])])
    assert run(agent, "go", mode).final_output == "done"
    assert s.RUNS == {"save": 1} and s.CACHED_NOTICE in outputs(model)[1]
    assert guard.task("t-agents").usage.per_tool == {"save": 2}  # not counted twice
