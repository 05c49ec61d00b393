"""OpenTelemetry GenAI spans in the OTLP JSON encoding (``{"resourceSpans": [...]}``, one
document or one per line, as the collector's file exporter writes).

Each trace (``traceId``) is one run, its spans in start order. A span with
``gen_ai.operation.name = execute_tool`` is one call: the tool is ``gen_ai.tool.name`` (else
the span name after ``execute_tool``), the arguments ``gen_ai.tool.call.arguments`` and the
result ``gen_ai.tool.call.result`` when the instrumentation captured them (both are opt-in in
the semantic conventions); an error when the span's status is ``ERROR`` or it has
``error.type``. A call without recorded arguments is counted (budgets) but never taken for a
repeat, and a note says how many there were. Tool spans under one parent with no model span
between them are one batch. Model spans (``chat``, ``text_completion``, ``generate_content``)
are model turns and give ``gen_ai.usage.input_tokens``/``output_tokens``. A trace without any
tool span takes its calls from the model spans' ``gen_ai.output.messages`` (``tool_call``
parts), answered by the ``tool_call_response`` parts of a later ``gen_ai.input.messages``.
(Semantic conventions for generative AI, opentelemetry.io/docs/specs/semconv/gen-ai/.)
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from toolguard.hashing._json_text import load_json

from ._model import (
    Reader,
    RecordedCall,
    ReplayInputError,
    Run,
    Source,
    Step,
    TokenUsage,
    arguments,
    unrecorded_args,
)
from ._reading import field_dict, field_list, head_objects

__all__ = ["READER", "SpanView", "requested_calls", "span_steps"]

_SIGNATURE: Final = re.compile(rb'"resourceSpans"\s*:')
MODEL_OPERATIONS: Final = frozenset({"chat", "text_completion", "generate_content"})


@dataclass(frozen=True, slots=True)
class SpanView:
    """What a replay needs of one span or observation, whatever the export."""

    name: str
    start: str | int  # sortable within one trace
    parent: str | None
    attributes: Mapping[str, Any]
    error: bool = False
    input: Any = None  # the export's own capture of the arguments (Langfuse ``input``)
    output: Any = None
    usage: TokenUsage | None = None
    tool: bool = False  # the export marks it a tool call (Langfuse type TOOL)


def span_steps(source: Source, spans: list[SpanView]) -> list[Step]:
    """The steps of one trace's spans (sorted here by start).

    When no span is a tool call, the calls are the ones the model spans requested (their
    output's ``tool_calls``, or semantic-convention ``tool_call`` parts), each answered by the
    tool message with its id in a later model span's input (``tool_call_id``, or a
    ``tool_call_response`` part): some frameworks export only the model's turns.
    """
    ordered = sorted(spans, key=lambda s: s.start)
    if not any(_is_tool(s) for s in ordered):
        return _requested_steps(source, ordered)
    steps: list[Step] = []
    batch: tuple[str | None, int] | None = None
    for n, span in enumerate(ordered):
        attrs = span.attributes
        if _is_model(span):
            source.model_turns += 1
            batch = None
            spent = span.usage or _semconv_usage(attrs)
            if spent is not None:
                steps.append(spent)
            continue
        if not _is_tool(span):
            continue
        tool = (attrs.get("gen_ai.tool.name") or attrs.get("tool.name")
                or re.sub(r"^(?:execute_tool|running tool:)\s+", "", span.name))
        raw = attrs.get("gen_ai.tool.call.arguments", span.input)  # JSON text: judged as is
        args, text = (arguments(raw, None) if raw is not None
                      else (unrecorded_args(source, None), None))
        result = attrs.get("gen_ai.tool.call.result", span.output)
        if batch is None or batch[0] != span.parent:
            batch = (span.parent, n)
        steps.append(RecordedCall(str(tool), args, text, result, span.error,
                                  batch=f"span {batch[1]}"))
    return steps


def _is_model(span: SpanView) -> bool:
    return (span.usage is not None
            or span.attributes.get("gen_ai.operation.name") in MODEL_OPERATIONS)


def _is_tool(span: SpanView) -> bool:
    attrs = span.attributes
    return (not _is_model(span)
            and (span.tool or attrs.get("gen_ai.operation.name") == "execute_tool"
                 or attrs.get("openinference.span.kind") == "TOOL"))


def _requested_steps(source: Source, spans: list[SpanView]) -> list[Step]:
    """The steps of a trace without tool spans: each model span's usage, then the calls its
    output requested, answered from later model spans' inputs."""
    answers: dict[str, Any] = {}
    for span in spans:
        if _is_model(span):
            _responses(_model_input(span), answers)
    steps: list[Step] = []
    for n, span in enumerate(spans):
        if not _is_model(span):
            continue
        source.model_turns += 1
        spent = span.usage or _semconv_usage(span.attributes)
        if spent is not None:
            steps.append(spent)
        calls = requested_calls(_model_output(span))
        for call_id, name, given in calls:
            args, text = (arguments(given, None) if given is not None
                          else (unrecorded_args(source, None), None))
            result = answers.pop(call_id, None) if call_id else None
            steps.append(RecordedCall(name, args, text, result,
                                      batch=f"span {n}" if len(calls) > 1 else None))
    return steps


def _model_output(span: SpanView) -> Any:
    given = span.attributes.get("gen_ai.output.messages", span.output)
    return _json_text(given)


def _model_input(span: SpanView) -> Any:
    given = span.attributes.get("gen_ai.input.messages", span.input)
    return _json_text(given)


def _json_text(value: Any) -> Any:
    if isinstance(value, str) and value.lstrip()[:1] in ("[", "{"):
        try:
            return load_json(value)
        except (ValueError, RecursionError):
            return value
    return value


def requested_calls(output: Any, depth: int = 0) -> list[tuple[str, str, Any]]:
    """``(call id, tool name, arguments)`` of each tool call a model's output requested: the
    entries of ``tool_calls`` lists (OpenAI ``{"id", "function": {"name", "arguments"}}``,
    LangChain ``{"id", "name", "args"}``) and semantic-convention parts ``{"type":
    "tool_call", "id", "name", "arguments"}``, anywhere in the value, in order."""
    found: list[tuple[str, str, Any]] = []
    if depth > 8:
        return found
    if isinstance(output, Mapping):
        if output.get("type") == "tool_call" and isinstance(output.get("name"), str):
            found.append((str(output.get("id") or ""), output["name"], output.get("arguments")))
            return found
        calls = output.get("tool_calls")
        for tc in calls if isinstance(calls, list) else []:
            if not isinstance(tc, Mapping):
                continue
            function = tc.get("function")
            spec = function if isinstance(function, Mapping) else tc
            name = spec.get("name")
            if isinstance(name, str):
                given = spec.get("arguments", spec.get("args"))
                found.append((str(tc.get("id") or ""), name, given))
        for key, item in output.items():
            if key != "tool_calls":
                found += requested_calls(item, depth + 1)
    elif isinstance(output, list):
        for item in output:
            found += requested_calls(item, depth + 1)
    return found


def _responses(value: Any, answers: dict[str, Any], depth: int = 0) -> None:
    """Tool results in a model span's input, by call id (the first one of an id wins)."""
    if depth > 8:
        return
    if isinstance(value, Mapping):
        if value.get("role") == "tool" and value.get("tool_call_id"):
            answers.setdefault(str(value["tool_call_id"]), value.get("content"))
            return
        if value.get("type") == "tool_call_response" and value.get("id"):
            answers.setdefault(str(value["id"]), value.get("response"))
            return
        for item in value.values():
            _responses(item, answers, depth + 1)
    elif isinstance(value, list):
        for item in value:
            _responses(item, answers, depth + 1)


def _semconv_usage(attrs: Mapping[str, Any]) -> TokenUsage | None:
    counts = [attrs.get(k) for k in ("gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens")]
    numbers = [int(c) if isinstance(c, (int, str)) and str(c).isdigit() else 0 for c in counts]
    model = attrs.get("gen_ai.response.model") or attrs.get("gen_ai.request.model")
    if all(c is None for c in counts):
        return None
    return TokenUsage(numbers[0], numbers[1],
                      model=model if isinstance(model, str) and model else None)


def _detect(path: Path, head: bytes) -> bool:
    return bool(_SIGNATURE.search(head[:4096])) or any(
        "resourceSpans" in obj for obj in head_objects(head, limit=1))


def _read(source: Source) -> Iterator[Run]:
    traces: dict[str, list[SpanView]] = {}
    try:
        documents: Iterator[tuple[int | None, Any]] = iter([(None, source.load_json())])
    except ReplayInputError:  # JSON lines: one export request per line
        documents = ((number, value) for number, value in source.json_lines())
    for line, document in documents:
        if not isinstance(document, dict) or not isinstance(document.get("resourceSpans"), list):
            source.unrecognised("documents without resourceSpans", line)
            continue
        for resource in document["resourceSpans"]:
            for scope in _list(resource, "scopeSpans", "instrumentationLibrarySpans"):
                for span in _list(scope, "spans"):
                    if isinstance(span, dict):
                        trace = str(span.get("traceId", ""))
                        traces.setdefault(trace, []).append(_view(span))
    for trace, spans in sorted(traces.items(), key=lambda t: min(s.start for s in t[1])):
        yield Run(trace or source.default_id(), source.file, "otel",
                  {"spans": len(spans)}, span_steps(source, spans))


def _list(value: Any, *keys: str) -> list[Any]:
    if isinstance(value, dict):
        for key in keys:
            if isinstance(value.get(key), list):
                return list(value[key])
    return []


def _view(span: Mapping[str, Any]) -> SpanView:
    attrs = {a["key"]: _value(a.get("value")) for a in field_list(span, "attributes")
             if isinstance(a, dict) and isinstance(a.get("key"), str)}
    status = field_dict(span, "status")
    error = status.get("code") in (2, "STATUS_CODE_ERROR") or "error.type" in attrs
    start = span.get("startTimeUnixNano", 0)
    return SpanView(str(span.get("name", "")), int(start) if str(start).isdigit() else 0,
                    span.get("parentSpanId") or None, attrs, error)


def _value(value: Any, depth: int = 0) -> Any:
    """An OTLP ``AnyValue`` (``{"stringValue": ...}``, ``{"intValue": "3"}``, arrays,
    key-value lists) as a plain JSON value."""
    if not isinstance(value, dict) or depth > 32:
        return None
    if "intValue" in value:
        try:
            return int(value["intValue"])
        except (TypeError, ValueError):
            return None
    if "arrayValue" in value:
        return [_value(v, depth + 1) for v in field_list(value["arrayValue"], "values")]
    if "kvlistValue" in value:
        return {kv.get("key"): _value(kv.get("value"), depth + 1)
                for kv in field_list(value["kvlistValue"], "values")
                if isinstance(kv, dict)}
    for key in ("stringValue", "boolValue", "doubleValue", "bytesValue"):
        if key in value:
            return value[key]
    return None


READER: Final = Reader(
    name="otel",
    description="OpenTelemetry GenAI spans, OTLP JSON (execute_tool spans are the calls)",
    suffixes=(".json", ".jsonl"),
    detect=_detect,
    read=_read,
)
