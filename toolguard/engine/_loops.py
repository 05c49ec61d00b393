"""Manual agent loops: the tool calls of one model message through the guard, answered in
that provider's shape (:meth:`Task.run_tool_calls`), and token usage from the SDKs' usage
objects (:meth:`Task.record_usage`).

The SDKs are read by duck typing (attributes of their pydantic models, or the keys of the
same data as plain dicts); none is imported. Shapes:

==================  ============================================  ==========================
provider            the model message                             the answer
==================  ============================================  ==========================
OpenAI Chat         an assistant message with ``tool_calls``      one ``{"role": "tool",
                    (or a ``ChatCompletion``: its first choice)   "tool_call_id", "content"}``
                                                                  per call
OpenAI Responses    the output items (``response.output``, or     one ``{"type":
                    the ``Response``): ``function_call`` items    "function_call_output",
                                                                  "call_id", "output"}`` each
Anthropic           a ``Message`` (or ``{"role": "assistant",     one user message of
                    "content": [...]}``, or that content list):   ``tool_result`` blocks
                    ``tool_use`` blocks                           (``is_error`` set)
==================  ============================================  ==========================

The calls of one message are one batch (:meth:`Task.call_batch`: identical calls execute
once). When a call halts the task, every call of the message still gets a closing result
(the halt, or "not executed"), so the transcript stays valid for a resumed run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from toolguard._errors import Halt
from toolguard._types import CACHED

from . import _batch
from ._content import as_text, with_notice

if TYPE_CHECKING:
    from toolguard._results import ToolResult

    from ._call import CallingTask

__all__ = ["OnHalt", "arun_tool_calls", "run_tool_calls", "usage_tokens"]

OnHalt = Literal["raise", "return"]
Shape = Literal["openai_chat", "openai_responses", "anthropic"]


def _get(obj: Any, key: str, default: Any = None) -> Any:
    """``obj[key]`` for a mapping, ``obj.key`` for an SDK object."""
    if isinstance(obj, dict):
        return obj.get(key, default)
    return getattr(obj, key, default)


@dataclass(frozen=True, slots=True)
class _Call:
    id: str
    tool: str
    args: Any  # JSON text (OpenAI) or a dict (Anthropic)


def parse_message(message: Any) -> tuple[Shape, list[_Call]]:
    """The provider shape of ``message`` and its tool calls, in order.

    Raises:
        TypeError: ``message`` is none of the shapes in the module's table.
    """
    if _get(message, "choices") is not None:  # a whole ChatCompletion
        choices = _get(message, "choices") or []
        if not choices:
            return "openai_chat", []
        message = _get(choices[0], "message")
    if isinstance(message, list | tuple) and any(_get(b, "type") == "tool_use" for b in message):
        message = {"role": "assistant", "content": list(message)}  # an Anthropic reply.content
    elif isinstance(message, list | tuple) or _get(message, "object") == "response":
        items = _get(message, "output") if not isinstance(message, list | tuple) else message
        return "openai_responses", [
            _Call(_get(i, "call_id"), _get(i, "name"), _get(i, "arguments"))
            for i in items or () if _get(i, "type") == "function_call"]
    content = _get(message, "content")
    if _get(message, "tool_calls") is not None or (
            _get(message, "role") == "assistant" and not isinstance(content, list)):
        return "openai_chat", [
            _Call(_get(c, "id"), _get(_get(c, "function"), "name"),
                  _get(_get(c, "function"), "arguments"))
            for c in _chat_calls(_get(message, "tool_calls"))
            if _get(c, "type", "function") == "function"]
    if isinstance(content, list) and _get(message, "role", "assistant") == "assistant":
        return "anthropic", [_Call(_get(b, "id"), _get(b, "name"), _get(b, "input"))
                             for b in content if _get(b, "type") == "tool_use"]
    raise TypeError(
        f"not a model message with tool calls: {type(message).__name__} (expected an OpenAI "
        "Chat assistant message or ChatCompletion, a list of Responses output items or a "
        "Response, or an Anthropic Message)")


_SCALARS = (str, bytes, int, float, list, tuple)


def _chat_calls(tool_calls: Any) -> Sequence[Any]:
    """An OpenAI Chat message's ``tool_calls``, checked: a list of tool calls (dicts or SDK
    objects). A string or a mapping there would be iterated into calls of tool ``None``.

    Raises:
        TypeError: ``tool_calls`` is not a list or tuple, or an item is not a tool call.
    """
    if tool_calls is None:
        return ()
    if not isinstance(tool_calls, list | tuple):
        raise TypeError(
            f"not a model message with tool calls: its tool_calls is a "
            f"{type(tool_calls).__name__} (expected a list of tool calls, each "
            '{"id", "type": "function", "function": {"name", "arguments"}})')
    for index, call in enumerate(tool_calls):
        if call is None or isinstance(call, _SCALARS):
            raise TypeError(
                f"not a model message with tool calls: tool_calls[{index}] is a "
                f"{type(call).__name__} (expected a tool call: "
                '{"id", "type": "function", "function": {"name", "arguments"}})')
    return tool_calls


def _text(result: ToolResult) -> str:
    return as_text(result.content)


def _with_notice(text: str, notice: str) -> str:
    return str(with_notice(text, notice))


_BATCH_NOTICE = ("This call is identical to another call in the same message: it ran once, "
                 "and this is that result. Do not repeat it.")


def _answer(shape: Shape, calls: list[_Call], texts: list[tuple[str, bool]]
            ) -> list[dict[str, Any]]:
    if shape == "openai_chat":
        return [{"role": "tool", "tool_call_id": c.id, "content": text}
                for c, (text, _) in zip(calls, texts, strict=True)]
    if shape == "openai_responses":
        return [{"type": "function_call_output", "call_id": c.id, "output": text}
                for c, (text, _) in zip(calls, texts, strict=True)]
    if not calls:
        return []
    return [{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": c.id, "content": text, "is_error": error}
        for c, (text, error) in zip(calls, texts, strict=True)]}]


_NOT_RUN = ("[toolguard] Not executed: the task halted before this call ran. It may run "
            "when the task is resumed.")


def _halted(exc: Halt) -> str:
    return f"[toolguard] Halted: {exc}"


def _finish(shape: Shape, calls: list[_Call], order: list[tuple[int, bool]],
            outcomes: Sequence[ToolResult | BaseException | None], on_halt: OnHalt
            ) -> list[dict[str, Any]]:
    """Messages for every call (copies for batch duplicates); raise the first halt, or
    another error, once all are answered."""
    texts: list[tuple[str, bool]] = []
    halt: Halt | None = None
    for i, duplicate in order:
        outcome = outcomes[i]
        if isinstance(outcome, Halt):
            # the first halt speaks for the message; a concurrent call that then found the
            # task halted did not run either
            halt = halt or outcome
            texts.append((_halted(outcome) if outcome is halt else _NOT_RUN, True))
        elif outcome is None:
            texts.append((_NOT_RUN, True))
        elif isinstance(outcome, BaseException):
            raise outcome
        else:
            result = _batch.copy_for(outcome, duplicate)
            text = _text(result)
            if duplicate and result.decision is CACHED:
                text = _with_notice(text, _BATCH_NOTICE)
            texts.append((text, result.is_error))
    messages = _answer(shape, calls, texts)
    if halt is not None and on_halt == "raise":
        halt.tool_messages = messages
        raise halt
    return messages


def _check(on_halt: str) -> None:
    if on_halt not in ("raise", "return"):
        raise ValueError(f"on_halt must be 'raise' or 'return', got {on_halt!r}")


def run_tool_calls(task: CallingTask, message: Any, on_halt: OnHalt) -> list[dict[str, Any]]:
    """See :meth:`Task.run_tool_calls`."""
    _check(on_halt)
    shape, calls = parse_message(message)
    order, unique = _batch.dedupe(task, [(c.tool, c.args) for c in calls])
    for tool, _ in unique:  # a host's mistake refuses the whole message before any call
        task._runnable(tool, sync=True)
    outcomes: list[ToolResult | BaseException | None] = []
    for tool, args in unique:
        if outcomes and isinstance(outcomes[-1], Halt):
            outcomes.append(None)  # the task is halted: the rest do not run
            continue
        try:
            outcomes.append(task.call(tool, args))
        except Halt as exc:
            outcomes.append(exc)
    return _finish(shape, calls, order, outcomes, on_halt)


async def arun_tool_calls(task: CallingTask, message: Any, on_halt: OnHalt
                          ) -> list[dict[str, Any]]:
    """See :meth:`Task.arun_tool_calls`: distinct calls run concurrently."""
    import asyncio  # loaded already under a running loop; not by ``import toolguard``

    _check(on_halt)
    shape, calls = parse_message(message)
    order, unique = _batch.dedupe(task, [(c.tool, c.args) for c in calls])
    outcomes = await asyncio.gather(*(task.acall(t, a) for t, a in unique),
                                    return_exceptions=True)
    return _finish(shape, calls, order, outcomes, on_halt)


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def usage_tokens(obj: Any) -> tuple[int, int]:
    """``(input_tokens, output_tokens)`` of an SDK response or its ``usage``.

    OpenAI Chat (``prompt_tokens``, ``completion_tokens``) and Responses (``input_tokens``,
    ``output_tokens``) count cached prompt tokens inside the input already. Anthropic's
    ``input_tokens`` leaves them out: ``cache_creation_input_tokens`` and
    ``cache_read_input_tokens`` are added, so every token the model read counts.

    Raises:
        TypeError: no token counts found in ``obj``.
    """
    usage = _get(obj, "usage")
    usage = obj if usage is None else usage
    if _get(usage, "prompt_tokens") is not None or _get(usage, "completion_tokens") is not None:
        return _int(_get(usage, "prompt_tokens")), _int(_get(usage, "completion_tokens"))
    if _get(usage, "input_tokens") is not None or _get(usage, "output_tokens") is not None:
        cached = (_int(_get(usage, "cache_creation_input_tokens"))
                  + _int(_get(usage, "cache_read_input_tokens")))
        return _int(_get(usage, "input_tokens")) + cached, _int(_get(usage, "output_tokens"))
    raise TypeError(f"no token usage in {type(obj).__name__}: pass an OpenAI or Anthropic "
                    "response or its usage, or record_usage(input_tokens=, output_tokens=)")
