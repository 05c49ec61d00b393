"""The toolguard trace JSONL (the ``../shared/cases`` format): one call per line.

``{"tool", "args", "result", "is_error"}``, optionally ``raw_args`` (the model's exact JSON
text, replayed instead of ``args``), ``batch`` (calls emitted together share a value),
``error_type`` (``"timeout"``: the outcome is unknown), ``usage`` (``{"input_tokens",
"output_tokens"}``, the model tokens spent to propose the call; with ``model``, in it or on
the line, the model's name, which prices them) and ``elapsed_s`` (seconds
since the run started when the call was proposed). A line without a ``tool`` key is a header
and starts a new run (unless it holds arguments, ``args``, ``raw_args`` or ``arguments``: then
it is a call that lost its ``tool``, reported and skipped): its ``effects`` are kept for the
runner, its other keys (``case``, ``run``, ``source``, ...) are the run's metadata. A line
holding ``messages`` or ``traj`` is a whole chat run (JSONL of chat transcripts). A line with
``usage`` and no ``tool`` (nor a run id or ``effects``) reports the tokens of a model turn that
proposed no call, such as the final answer: a step of the current run, not a header; its
``elapsed_s`` moves the clock as a call's does.

The file is read line by line and each run is handed on as soon as the next header starts.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, Final

from ._chat_steps import CHAT_KEYS, chat_run
from ._model import (
    RUN_ID_KEYS,
    Malformed,
    Reader,
    Run,
    Source,
    Step,
    arguments,
    model_name,
    new_call,
    run_id,
    seconds,
    usage,
)
from ._reading import head_objects

__all__ = ["READER", "read_trace", "starts_run", "trace_run"]

# The arguments of a call: a line with them but no "tool" is a broken call, not a header.
# (Other call keys, such as "result" or "elapsed_s", are also plausible run metadata.)
_CALL_KEYS: Final = frozenset({"args", "raw_args", "arguments"})


def _detect(path: Path, head: bytes) -> bool:
    signature = {"tool", "effects", "usage", *CHAT_KEYS, *RUN_ID_KEYS}
    objects = head_objects(head)
    if not objects:  # no line parses (bad JSON, nesting too deep): say so line by line
        return path.suffix == ".jsonl"
    return any(obj.keys() & signature for obj in objects)


def read_trace(source: Source) -> Iterator[Run]:
    """The runs of a trace JSONL file (a chat transcript per line is read as such)."""
    chunk: list[tuple[int, dict[str, Any]]] = []
    for number, value in source.json_lines():
        if "tool" in value and _no_chat_key(value):  # a call: nearly every line
            chunk.append((number, value))
        elif not _no_chat_key(value):
            yield from chat_run(source, value, number, f"line {number}")
        elif _is_usage_line(value):
            chunk.append((number, value))  # a usage line: tokens of a turn with no call
        elif stray := sorted(_CALL_KEYS & value.keys()):  # a call that lost its tool
            source.problem(number, "a call without 'tool' (it has "
                           f"{', '.join(repr(k) for k in stray)}); line skipped")
        else:  # a header starts a new run (starts_run says which lines these are)
            if chunk:
                yield from trace_run(source, chunk)
            chunk = [(number, value)]
    if chunk:
        yield from trace_run(source, chunk)


def starts_run(value: Mapping[str, Any]) -> bool:
    """The line ``value`` is a header, which starts a new run in :func:`read_trace`: what
    comes before it in the file reads the same without what follows (``replay --jobs``
    reads a big file in portions cut before such lines)."""
    return not (any(k in value for k in CHAT_KEYS) or "tool" in value
                or _is_usage_line(value) or value.keys() & _CALL_KEYS)


def trace_run(source: Source, chunk: list[tuple[int, dict[str, Any]]]) -> Iterator[Run]:
    """The run of a header line (optional) and the call lines after it."""
    first_line, first = chunk[0]
    headed = not ("tool" in first or _is_usage_line(first))
    header: dict[str, Any] = first if headed else {}
    body = chunk[1:] if headed else chunk  # may be empty: a run without calls
    effects = header.get("effects")
    if effects is not None and not isinstance(effects, dict):
        source.problem(first_line, "header 'effects' must be an object; run skipped")
        return
    meta = {k: v for k, v in header.items() if k != "effects"}
    run = Run(run_id(meta) or source.default_id(), source.file, "trace", meta,
              effects=effects, line=first_line)
    for number, item in body:
        try:
            run.steps.extend(_trace_steps(item, number))
        except Malformed as exc:
            source.problem(number, f"{exc}; line skipped")
    yield run


def _is_usage_line(value: Mapping[str, Any]) -> bool:
    """A trace line that reports model tokens without a call (a turn that proposed none, such
    as the final answer): ``usage`` and no ``tool``, none of a header's keys (a run id or
    ``effects``) and no arguments (then it is a call that lost its tool). A step of the
    current run; its other keys (the answer's text, say) are not used."""
    return ("tool" not in value and "usage" in value
            and not (value.keys() & _HEADER_KEYS) and not (value.keys() & _CALL_KEYS))


_HEADER_KEYS: Final = frozenset({"effects", *RUN_ID_KEYS})
_no_chat_key: Final = frozenset(CHAT_KEYS).isdisjoint  # no "messages" nor "traj" in a line


def _trace_steps(item: Mapping[str, Any], line: int) -> tuple[Step, ...]:
    if "tool" not in item and _is_usage_line(item):
        spent = usage(item["usage"], line)
        return (replace(spent, elapsed_s=seconds(item.get("elapsed_s")),
                        model=spent.model or model_name(item)),)
    # once per recorded call: the usual keys' checks inline, the rest only when present
    tool = item.get("tool")
    if not isinstance(tool, str) or not tool:
        raise Malformed("'tool' must be a non-empty string")
    is_error = item.get("is_error", False)
    if is_error is not False and is_error is not True:
        raise Malformed("'is_error' must be true or false")
    args = item.get("args")
    raw = item.get("raw_args")
    if raw is not None or not (args is None or isinstance(args, dict)):
        if raw is not None and not isinstance(raw, str):
            raise Malformed("'raw_args' must be a string (the model's JSON text)")
        args, raw = arguments(args, raw)
    batch = item.get("batch")
    if batch is not None and (isinstance(batch, bool) or not isinstance(batch, (str, int))):
        raise Malformed("'batch' must be a number or a string")
    elapsed = item.get("elapsed_s")
    if elapsed is not None:
        elapsed = seconds(elapsed)
    call = new_call(tool, args, raw, item.get("result"), is_error,
                    item.get("error_type") == "timeout", batch, elapsed, line)
    if "usage" not in item:
        return (call,)
    spent = usage(item["usage"], line)
    return replace(spent, model=spent.model or model_name(item)), call




READER: Final = Reader(
    name="trace",
    description="toolguard trace JSONL: a header line, then one {'tool', 'args', 'result'} "
                "per call (../shared/cases)",
    suffixes=(".jsonl",),
    detect=_detect,
    read=read_trace,
    calls_expected=True,
)
