"""Chat transcripts: OpenAI Chat Completions and Anthropic Messages message lists.

A message list, an object with ``messages`` (or ``traj``), or a list of such objects (the
tau-bench layout, whose ``task_id``, ``trial`` and ``reward`` become metadata).
``tool_calls[].function.arguments`` is kept as the JSON text the model emitted. Results are
matched by ``tool_call_id``; the Chat format has no error flag, so a result is an error when its
message says ``"is_error": true`` or ``"status": "error"``, or its text starts with ``"Error:"``
(tau-bench's and many frameworks' convention). The deprecated function-calling API is read too:
an assistant ``function_call`` (``{"name", "arguments"}``) is answered by the next
``role: "function"`` message with its ``name``. A result that matches no earlier call without a
result is reported as a problem (its call cannot be replayed, so the replay covers less than
the run) and ignored; the rest of the run replays. Anthropic Messages: ``tool_use`` blocks in
assistant content, ``tool_result`` blocks (with ``is_error``) in user content, in the same
containers.

In both, a user message is a new turn (an Anthropic user message made only of ``tool_result``
blocks is not), several calls in one assistant message form a batch, and a message's ``usage``
(``prompt_tokens``/``completion_tokens`` or ``input_tokens``/``output_tokens``) is reported
before its calls. A file of JSON lines each holding ``messages`` is read by the trace reader.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

from ._chat_steps import CHAT_KEYS, chat_messages, chat_run
from ._model import (
    Reader,
    ReplayInputError,
    Run,
    Source,
    json_type,
)
from ._trace import read_trace, trace_run

__all__ = ["READER"]

_SIGNATURE: Final = re.compile(rb'"(?:messages|traj|role|tool)"\s*:')


def _detect(path: Path, head: bytes) -> bool:
    # JSON lines (a trace, or a chat per line) are the trace reader's
    start = head.lstrip(b"\xef\xbb\xbf \t\r\n")[:1]
    return (path.suffix != ".jsonl" and start in (b"[", b"{")
            and bool(_SIGNATURE.search(head)))


def _read(source: Source) -> Iterator[Run]:
    if _big_list(source):
        yield from _streamed_runs(source)
        return
    data = source.read_bytes()
    try:
        value = source.load_json(data)
    except ReplayInputError:
        lines = [x for x in data.splitlines() if x.strip()]
        if len(lines) > 1 and _is_object(lines[0]):  # JSON lines
            if source.forced:  # --input-format chat: a chat per line, nothing else
                yield from _chat_lines(source)
                return
            yield from read_trace(source)  # detected: chats and trace calls, in a .json file
            return
        raise
    yield from _document(source, value)


def _chat_lines(source: Source) -> Iterator[Run]:
    """JSON lines read as chats only (the format was forced): a line that is not one is
    counted, and noted once per kind."""
    for number, value in source.json_lines():
        if any(k in value for k in CHAT_KEYS):
            yield from chat_run(source, value, number, f"line {number}")
        else:
            source.unrecognised("lines without 'messages' or 'traj' (not a chat)", number)


def _is_object(line: bytes) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except (ValueError, RecursionError):
        return False


def _document(source: Source, value: Any) -> Iterator[Run]:
    if isinstance(value, dict):
        if any(k in value for k in CHAT_KEYS):
            yield from chat_run(source, value, None, "the document")
        elif "tool" in value:  # one trace call as a JSON document
            yield from trace_run(source, [(1, value)])
        else:
            raise ReplayInputError(source.file, None, "a JSON object must hold 'messages' "
                                                      "or 'traj' (a chat transcript)")
    elif isinstance(value, list):
        runs = any(isinstance(r, dict) and any(k in r for k in CHAT_KEYS) for r in value)
        if not runs and any(isinstance(m, dict) and "role" in m for m in value):
            # messages: one without a role is reported by chat_steps, not the whole file
            yield from chat_messages(source, value, {}, None, "the document")
        elif runs:
            for i, item in enumerate(value):
                yield from _list_run(source, i, item)
        else:
            raise ReplayInputError(source.file, None, "a JSON list must hold chat messages "
                                                      "or runs (objects with 'messages')")
    else:
        raise ReplayInputError(source.file, None, "expected a JSON object or list, got "
                                                  f"{type(value).__name__}")


def _list_run(source: Source, i: int, item: Any) -> Iterator[Run]:
    """The ``i``-th element of a list of runs: a bad one is reported and skipped, the rest
    replays."""
    where = f"run {i} of the list"
    if not isinstance(item, dict):
        source.problem(None, f"{where}: expected an object with 'messages' or 'traj', got "
                             f"{json_type(item)}")
    elif any(k in item for k in CHAT_KEYS):
        yield from chat_run(source, item, None, where)
    else:
        source.problem(None, f"{where}: an object without 'messages' or 'traj'")


STREAM_BYTES = 8 << 20  # not Final: a test streams small files
"""A list of runs bigger than this is parsed run by run (ijson), so memory holds one run;
a smaller document is parsed whole (orjson: faster, and exact messages for bad JSON)."""


def _big_list(source: Source) -> bool:
    """The file is bigger than :data:`STREAM_BYTES` and its first element is a run (an
    object with ``messages`` or ``traj``)."""
    try:
        if source.path.stat().st_size <= STREAM_BYTES:
            return False
    except OSError:
        return False  # read_bytes says why
    head = source.read_head().lstrip(b" \t\r\n")
    if not head.startswith(b"["):
        return False
    first = head[1:].lstrip(b" \t\r\n")
    return first.startswith(b"{") and bool(_RUN_KEY.match(first[1:].lstrip()))


_RUN_KEY: Final = re.compile(rb'"(?:messages|traj|id|task_id|trial|reward|run|case)"\s*:')


def _streamed_runs(source: Source) -> Iterator[Run]:
    """The runs of a big JSON list of runs, one element parsed at a time (ijson; numbers
    as the standard library reads them: integers of any size, floats as float)."""
    import ijson

    try:
        with source.path.open("rb") as handle:
            for i, item in enumerate(ijson.items(handle, "item", use_float=True)):
                yield from _list_run(source, i, item)
    except OSError as exc:
        raise ReplayInputError(source.file, None, f"cannot read: {exc.strerror or exc}"
                               ) from None
    except ijson.JSONError as exc:
        raise ReplayInputError(source.file, None, f"not valid JSON ({source.format}): {exc}; "
                               "the runs before it still replay") from None


READER: Final = Reader(
    name="chat",
    description="OpenAI Chat Completions or Anthropic Messages JSON: a message list, "
                "{'messages': [...]}, or a list of runs (tau-bench)",
    suffixes=(".json",),
    detect=_detect,
    read=_read,
)
