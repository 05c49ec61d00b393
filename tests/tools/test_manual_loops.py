"""Manual loops with the real ``openai`` and ``anthropic`` types and hand-made responses (no
network): ``task.run_tool_calls`` / ``arun_tool_calls`` and ``task.record_usage(<usage>)``.

The scripted loop (the issue's "done when"): one approval (a refund), an identical write
three times (in a batch of two, then once more), an identical read six times (four
messages of one, then a message holding it twice beside a pending write). The read gives
allow, allow, warn, block, halt; the write executes once and is then cached; notices reach
the returned messages; every call of the halting message gets a closing result."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from anthropic.types import Message, MessageParam, ToolResultBlockParam, ToolUseBlock
from anthropic.types import Usage as AnthropicUsage
from openai.types import CompletionUsage
from openai.types.chat import (
    ChatCompletion,
    ChatCompletionMessage,
    ChatCompletionMessageFunctionToolCall,
    ChatCompletionToolMessageParam,
)
from openai.types.chat.chat_completion import Choice
from openai.types.chat.chat_completion_message_function_tool_call import Function
from openai.types.responses import Response, ResponseFunctionToolCall, ResponseUsage
from openai.types.responses.response_input_param import FunctionCallOutput
from openai.types.responses.response_usage import InputTokensDetails, OutputTokensDetails
from pydantic import TypeAdapter

import toolguard as tg

Call = tuple[str, dict[str, Any]]
READ: Call = ("read_file", {"path": "notes.txt"})
WRITE: Call = ("write_file", {"path": "out.txt", "content": "hi"})
REFUND: Call = ("refund", {"order": "A1"})
SCRIPT: list[list[Call]] = [
    [REFUND],
    [WRITE, WRITE],
    [WRITE],
    [READ], [READ], [READ], [READ],
    [READ, ("write_file", {"path": "b.txt", "content": "x"}), READ],
]
_ids = itertools.count(1)


# -- hand-made model messages, one builder per provider shape -----------------------------
def chat_message(calls: list[Call]) -> ChatCompletionMessage:
    return ChatCompletionMessage(role="assistant", content=None, tool_calls=[
        ChatCompletionMessageFunctionToolCall(
            id=f"call_{next(_ids)}", type="function",
            function=Function(name=name, arguments=json.dumps(args)))
        for name, args in calls])


def responses_items(calls: list[Call]) -> list[ResponseFunctionToolCall]:
    return [ResponseFunctionToolCall(type="function_call", call_id=f"call_{next(_ids)}",
                                     id=f"fc_{next(_ids)}", name=name,
                                     arguments=json.dumps(args))
            for name, args in calls]


def anthropic_message(calls: list[Call]) -> Message:
    return Message(id=f"msg_{next(_ids)}", type="message", role="assistant",
                   model="claude-test", stop_reason="tool_use", stop_sequence=None,
                   usage=AnthropicUsage(input_tokens=10, output_tokens=5),
                   content=[ToolUseBlock(type="tool_use", id=f"toolu_{next(_ids)}", name=name,
                                         input=args) for name, args in calls])


BUILDERS: dict[str, Callable[[list[Call]], Any]] = {
    "openai_chat": chat_message, "openai_responses": responses_items,
    "anthropic": anthropic_message,
}


def _as_dicts(message: Any) -> Any:
    if isinstance(message, list):
        return [item.model_dump() for item in message]
    return message.model_dump()


def _validate(shape: str, messages: list[dict[str, Any]]) -> list[tuple[str, bool]]:
    """Check each answer against the SDK's own input type; ``(text, is_error)`` per call."""
    if shape == "openai_chat":
        adapter: TypeAdapter[Any] = TypeAdapter(ChatCompletionToolMessageParam)
        for m in messages:
            assert adapter.validate_python(m) == m
        return [(m["content"], m["content"].startswith("[toolguard]")) for m in messages]
    if shape == "openai_responses":
        adapter = TypeAdapter(FunctionCallOutput)
        for m in messages:
            assert adapter.validate_python(m) == m
        return [(m["output"], m["output"].startswith("[toolguard]")) for m in messages]
    (message,) = messages
    TypeAdapter(MessageParam).validate_python(message)  # its content is a lazy Iterable:
    blocks = TypeAdapter(list[ToolResultBlockParam]).validate_python(message["content"])
    assert blocks == message["content"]
    assert message["role"] == "user"
    return [(b["content"], b["is_error"]) for b in message["content"]]


def _ids_of(shape: str, message: Any) -> list[str]:
    if shape == "openai_chat":
        return [c.id for c in message.tool_calls]
    if shape == "openai_responses":
        return [i.call_id for i in message]
    return [b.id for b in message.content]


def _answered_ids(shape: str, messages: list[dict[str, Any]]) -> list[str]:
    if shape == "openai_chat":
        return [m["tool_call_id"] for m in messages]
    if shape == "openai_responses":
        return [m["call_id"] for m in messages]
    return [b["tool_use_id"] for b in messages[0]["content"]]


class World:
    """The tools (the write is ``async def`` for the async loop) and what really ran."""

    def __init__(self, async_write: bool = False) -> None:
        self.runs: Counter[str] = Counter()
        self.asked: list[str] = []
        self.async_write = async_write

    def guard(self) -> tg.Guard:
        world = self

        @tg.readonly
        def read_file(path: str) -> str:
            """Read a file."""
            world.runs["read"] += 1
            return f"contents of {path}"

        def write_file(path: str, content: str) -> str:
            """Write a file."""
            world.runs[f"write {path}"] += 1
            return f"wrote {path}"

        async def awrite_file(path: str, content: str) -> str:
            return write_file(path, content)

        write = tg.mutating(name="write_file")(awrite_file if self.async_write
                                                 else write_file)

        @tg.requires_approval
        def refund(order: str) -> str:
            """Refund an order."""
            world.runs["refund"] += 1
            return f"refunded {order}"

        def approver(request: tg.ApprovalRequest) -> tg.ApprovalDecision:
            world.asked.append(request.tool)
            return tg.approve()

        return tg.Guard(tools=[read_file, write, refund], approver=approver)


def _check_script(shape: str, answers: list[list[tuple[str, bool]]], halt: tg.Halt,
                  world: World) -> None:
    refund, batch, again, *reads, last = answers
    assert refund == [("refunded A1", False)]
    assert world.asked == ["refund"]  # one approval
    (first, first_error), (dup, dup_error) = batch
    assert (first, first_error, dup_error) == ("wrote out.txt", False, False)
    assert dup.startswith("wrote out.txt\n\n[toolguard]")  # cached, with its notice
    assert again[0][0].startswith("wrote out.txt\n\n[toolguard]")
    assert world.runs["write out.txt"] == 1  # one execution of the identical write
    texts = [answer[0] for (answer,) in reads]
    assert texts[0] == texts[1] == "contents of notes.txt"  # allow, allow
    assert texts[2].startswith("contents of notes.txt\n\n[toolguard]")  # warn: notice
    assert texts[3].startswith("[toolguard] Blocked")  # block
    assert reads[3][0][1] is True
    assert world.runs["read"] == 3
    # the halting message: the read halts (and its duplicate), the write never ran
    (halted, e1), (pending, e2), (halted_dup, e3) = last
    assert halted.startswith("[toolguard] Halted:") and e1
    assert halted_dup == halted and e3
    assert pending.startswith("[toolguard] Not executed: the task halted") and e2
    assert world.runs["write b.txt"] == 0
    assert isinstance(halt, tg.RepeatedToolCalls)
    assert halt.tool == "read_file"


def _run_script(shape: str, run: Callable[[Any], list[dict[str, Any]]], as_dicts: bool,
                world: World) -> None:
    answers: list[list[tuple[str, bool]]] = []
    halt: tg.Halt | None = None
    for calls in SCRIPT:
        message = BUILDERS[shape](calls)
        try:
            messages = run(_as_dicts(message) if as_dicts else message)
        except tg.Halt as exc:
            halt, messages = exc, exc.tool_messages
        assert _answered_ids(shape, messages) == _ids_of(shape, message)
        answers.append(_validate(shape, messages))
    assert halt is not None
    _check_script(shape, answers, halt, world)


@pytest.mark.parametrize("as_dicts", [False, True], ids=["sdk", "dicts"])
@pytest.mark.parametrize("shape", list(BUILDERS))
def test_the_scripted_loop_through_run_tool_calls(shape: str, as_dicts: bool) -> None:
    world = World()
    task = world.guard().task("t")
    _run_script(shape, task.run_tool_calls, as_dicts, world)


@pytest.mark.parametrize("as_dicts", [False, True], ids=["sdk", "dicts"])
@pytest.mark.parametrize("shape", list(BUILDERS))
def test_the_scripted_loop_through_arun_tool_calls(shape: str, as_dicts: bool) -> None:
    world = World(async_write=True)
    task = world.guard().task("t")

    def run(message: Any) -> list[dict[str, Any]]:
        return asyncio.run(task.arun_tool_calls(message))

    _run_script(shape, run, as_dicts, world)


@pytest.mark.parametrize("shape", list(BUILDERS))
def test_on_halt_return_gives_the_closing_results_and_the_task_stays_halted(shape: str
                                                                          ) -> None:
    world = World()
    task = world.guard().task("t")
    for _ in range(4):
        task.run_tool_calls(BUILDERS[shape]([READ]))
    messages = task.run_tool_calls(BUILDERS[shape]([READ, WRITE]), on_halt="return")
    texts = _validate(shape, messages)
    assert texts[0][0].startswith("[toolguard] Halted:")
    assert texts[1][0].startswith("[toolguard] Not executed")
    assert task.halted
    # a framework that swallows the halt cannot talk around it: nothing runs any more
    again = task.run_tool_calls(BUILDERS[shape]([WRITE]), on_halt="return")
    assert _validate(shape, again)[0][0].startswith("[toolguard] Halted:")
    with pytest.raises(tg.RepeatedToolCalls):
        task.call("write_file", {"path": "c.txt", "content": "x"})
    assert world.runs["write out.txt"] == 0
    task.resume()
    assert _validate(shape, task.run_tool_calls(BUILDERS[shape]([WRITE])))[0] == (
        "wrote out.txt", False)


def test_a_swallowed_halt_keeps_refusing_calls() -> None:
    world = World()
    task = world.guard().task("t")
    for _ in range(4):
        task.call(*READ)
    with contextlib.suppress(Exception):  # what a framework that feeds errors back does
        task.call(*READ)
    for call in (READ, WRITE, REFUND):
        with pytest.raises(tg.Halt):
            task.call(*call)
    with pytest.raises(tg.Halt):
        asyncio.run(task.acall(*WRITE))
    assert world.runs == Counter(read=3)


def test_messages_without_tool_calls_and_other_input() -> None:
    task = World().guard().task("t")
    text_only = ChatCompletionMessage(role="assistant", content="done")
    assert task.run_tool_calls(text_only) == []
    assert task.run_tool_calls([]) == []
    assert task.run_tool_calls({"role": "assistant", "content": [
        {"type": "text", "text": "done"}]}) == []
    completion = ChatCompletion(
        id="c", object="chat.completion", created=0, model="gpt-test",
        choices=[Choice(index=0, finish_reason="tool_calls", message=chat_message([READ]))])
    assert task.run_tool_calls(completion)[0]["content"] == "contents of notes.txt"
    with pytest.raises(TypeError, match="not a model message"):
        task.run_tool_calls("read_file")
    with pytest.raises(ValueError, match="on_halt"):
        task.run_tool_calls([], on_halt="ignore")  # type: ignore[arg-type]


def test_malformed_arguments_and_unknown_tools_answer_the_model() -> None:
    task = World().guard().task("t")
    message = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "a", "type": "function", "function": {"name": "read_file",
                                                     "arguments": '{"path": '}},
        {"id": "b", "type": "function", "function": {"name": "nope", "arguments": "{}"}}]}
    bad, unknown = task.run_tool_calls(message)
    assert bad["content"].startswith("[toolguard] Invalid arguments")
    assert unknown["content"].startswith("[toolguard] Unknown tool 'nope'")


def test_an_anthropic_content_list_is_answered_like_its_message() -> None:
    # passing reply.content instead of reply returned [] and ran nothing
    task = World().guard().task("t")
    (answer,) = task.run_tool_calls(anthropic_message([READ]).content)
    assert answer["role"] == "user"
    (block,) = answer["content"]
    assert block["type"] == "tool_result" and block["is_error"] is False
    assert block["content"] == "contents of notes.txt"


# -- record_usage -------------------------------------------------------------------------
def _budget_guard(max_tokens: int) -> tg.Guard:
    return tg.Guard(tg.load_policy_dict({"budget": {"max_tokens": max_tokens}}))


def test_record_usage_reads_openai_chat_and_responses_usage() -> None:
    task = _budget_guard(10_000).task("t")
    task.record_usage(CompletionUsage(prompt_tokens=100, completion_tokens=20,
                                      total_tokens=120))
    completion = ChatCompletion(id="c", object="chat.completion", created=0,
                                model="gpt-test", choices=[],
                                usage=CompletionUsage(prompt_tokens=7, completion_tokens=3,
                                                      total_tokens=10))
    task.record_usage(completion)
    usage = ResponseUsage(input_tokens=50, output_tokens=5, total_tokens=55,
                          input_tokens_details=InputTokensDetails(cached_tokens=40,
                                                                 cache_write_tokens=0),
                          output_tokens_details=OutputTokensDetails(reasoning_tokens=2))
    response = Response(id="r", object="response", created_at=0, model="gpt-test",
                        output=[], parallel_tool_calls=True, tool_choice="auto", tools=[],
                        usage=usage)
    task.record_usage(response)
    task.record_usage({"prompt_tokens": 1, "completion_tokens": 1})
    u = task.usage
    assert (u.input_tokens, u.output_tokens) == (158, 29)  # cached tokens are inside


def test_record_usage_adds_anthropic_cache_tokens_and_halts_at_max_tokens() -> None:
    task = _budget_guard(1_000).task("t")
    task.record_usage(AnthropicUsage(input_tokens=10, output_tokens=5,
                                     cache_creation_input_tokens=200,
                                     cache_read_input_tokens=300))
    assert (task.usage.input_tokens, task.usage.output_tokens) == (510, 5)
    message = anthropic_message([READ])
    task.record_usage(message)  # a Message's usage: 10 in, 5 out
    assert task.usage.total_tokens == 530
    with pytest.raises(tg.BudgetExceeded, match="max_tokens"):
        task.record_usage(AnthropicUsage(input_tokens=10, output_tokens=5,
                                         cache_read_input_tokens=600))
    assert task.halted


def test_record_usage_keeps_its_count_signature_and_refuses_what_it_cannot_read() -> None:
    task = _budget_guard(10_000).task("t")
    task.record_usage(3, 4)
    task.record_usage(input_tokens=1, output_tokens=1)
    assert (task.usage.input_tokens, task.usage.output_tokens) == (4, 5)
    with pytest.raises(ValueError, match="integer"):
        task.record_usage(1.5)
    with pytest.raises(TypeError, match="no token usage"):
        task.record_usage({"tokens": 3})
    with pytest.raises(TypeError, match="alone"):
        task.record_usage(CompletionUsage(prompt_tokens=1, completion_tokens=1,
                                          total_tokens=2), 5)


# -- the documented loops, run as written against hand-made SDK responses -----------------
def _documented_loops() -> list[str]:
    from pathlib import Path

    page = Path(__file__).resolve().parents[2] / "docs" / "integrations" / "manual-loops.md"
    text = page.read_text()
    section = text.split("## A manual OpenAI or Anthropic loop", 1)[1].split("\n## ", 1)[0]
    return [block.split("```", 1)[0] for block in section.split("```python\n")[1:]]


class _Replies:
    """Hands out hand-made replies in order, as ``client.<api>.create`` would."""

    def __init__(self, replies: list[Any]) -> None:
        self.replies, self.seen = list(replies), 0

    def create(self, **_: Any) -> Any:
        self.seen += 1
        return self.replies.pop(0)


def _completion(message: ChatCompletionMessage) -> ChatCompletion:
    return ChatCompletion(id="c", object="chat.completion", created=0, model="gpt-test",
                          choices=[Choice(index=0, finish_reason="stop", message=message)],
                          usage=CompletionUsage(prompt_tokens=10, completion_tokens=2,
                                                total_tokens=12))


def test_the_documented_openai_loop_runs_as_written() -> None:
    from types import SimpleNamespace

    world = World()
    replies = _Replies([_completion(chat_message([READ])), _completion(chat_message([WRITE])),
                        _completion(ChatCompletionMessage(role="assistant", content="done"))])
    client = SimpleNamespace(chat=SimpleNamespace(completions=replies))
    scope: dict[str, Any] = {"guard": world.guard(), "client": client, "MODEL": "gpt-test",
                             "messages": []}
    code = _documented_loops()[0]
    toolguard_lines = [ln for ln in code.splitlines() if "task." in ln or "guard." in ln]
    assert len([ln for ln in toolguard_lines if "record_usage" not in ln]) <= 3
    exec(code, scope)  # the documented code
    tool_messages = [m for m in scope["messages"] if isinstance(m, dict)]
    assert [m["content"] for m in tool_messages] == ["contents of notes.txt", "wrote out.txt"]
    assert scope["task"].usage.input_tokens == 30
    assert world.runs == Counter({"read": 1, "write out.txt": 1})


def test_the_documented_anthropic_loop_runs_as_written() -> None:
    from types import SimpleNamespace

    world = World()
    done = Message(id="m", type="message", role="assistant", model="claude-test",
                   stop_reason="end_turn", stop_sequence=None, content=[],
                   usage=AnthropicUsage(input_tokens=1, output_tokens=1))
    replies = _Replies([anthropic_message([READ, READ]), done])
    scope: dict[str, Any] = {"guard": world.guard(), "MODEL": "claude-test", "messages": [],
                             "client": SimpleNamespace(messages=replies)}
    exec(_documented_loops()[1], scope)  # the documented code
    results = scope["messages"][-1]["content"]
    assert [r["content"].split("\n")[0] for r in results] == ["contents of notes.txt"] * 2
    assert world.runs["read"] == 1  # identical calls in one message: one execution


@pytest.mark.parametrize(("tool_calls", "what"), [
    ("x", r"its tool_calls is a str"),
    ({"id": "a", "type": "function"}, r"its tool_calls is a dict"),
    (42, r"its tool_calls is a int"),
    ([None], r"tool_calls\[0\] is a NoneType"),
    ([{"id": "a", "type": "function", "function": {"name": "read_file"}}, "x"],
     r"tool_calls\[1\] is a str"),
])
def test_a_malformed_tool_calls_value_is_a_type_error_not_a_call_of_tool_null(
        tool_calls: Any, what: str) -> None:
    # {"tool_calls": "x"} was iterated into a call of tool None with tool_call_id None
    world = World()
    task = world.guard().task("t")
    message = {"role": "assistant", "content": None, "tool_calls": tool_calls}
    with pytest.raises(TypeError, match=rf"not a model message with tool calls: {what} "
                                        r"\(expected a (list of tool calls|tool call)"):
        task.run_tool_calls(message)
    with pytest.raises(TypeError, match=what):
        asyncio.run(task.arun_tool_calls(message))
    assert task.usage.tool_calls == 0 and not world.runs
