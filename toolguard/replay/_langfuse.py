"""Langfuse trace exports (``{"trace": {...}, "observations": [...]}``, as the UI's trace
download writes; a list of such objects is several runs).

Each trace is one run, its observations in ``startTime`` order, read as OpenTelemetry spans
(:mod:`._otel`): an observation is a call when its type is ``TOOL``, or its
``metadata.attributes`` say ``gen_ai.operation.name = execute_tool`` (or OpenInference's
``openinference.span.kind = TOOL``), or it is a span named after a tool call that a preceding
generation requested and no observation has answered yet (LangChain's tool spans). Arguments
are ``gen_ai.tool.call.arguments``, else the observation's ``input`` (LangChain's
``metadata.inputs`` when ``input`` is Python text); the result its ``output``; an error when its
``level`` is ``ERROR``. Generations are model turns; their ``usageDetails`` (``input``,
``output``) the usage. A trace in which no observation is a call (a framework that exports
only its model turns) takes its calls from the generations' outputs (``tool_calls``), each
answered by the ``tool`` message with its ``tool_call_id`` in a later generation's input.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

from ._model import Reader, Run, Source, TokenUsage, model_name, usage_counts
from ._otel import SpanView, requested_calls, span_steps
from ._reading import field_dict

__all__ = ["READER"]

_SIGNATURE: Final = re.compile(rb'"observations"\s*:')
_TRACE: Final = re.compile(rb'"trace"\s*:\s*\{')


def _detect(path: Path, head: bytes) -> bool:
    return bool(_SIGNATURE.search(head)) and bool(_TRACE.search(head))


def _read(source: Source) -> Iterator[Run]:
    value = source.load_json()
    exports = value if isinstance(value, list) else [value]
    for export in exports:
        if not (isinstance(export, dict) and isinstance(export.get("observations"), list)):
            source.unrecognised("exports without an 'observations' list")
            continue
        trace = field_dict(export, "trace")
        observations = [o for o in export["observations"] if isinstance(o, dict)]
        meta = {k: trace[k] for k in ("name",) if isinstance(trace.get(k), str)}
        given_id = trace.get("id")
        run_id = given_id if isinstance(given_id, str) else source.default_id()
        yield Run(run_id, source.file, "langfuse", meta,
                  span_steps(source, _views(observations)))


def _views(observations: list[dict[str, Any]]) -> list[SpanView]:
    requested: Counter[str] = Counter()  # tool calls generations asked for, not yet answered
    views: list[SpanView] = []
    for o in sorted(observations, key=lambda o: str(o.get("startTime", ""))):
        metadata = field_dict(o, "metadata")
        attrs = field_dict(metadata, "attributes")
        kind, name = o.get("type"), str(o.get("name", ""))
        usage = None
        if kind == "GENERATION":
            # a model turn even when it recorded no usage
            usage = usage_counts(o.get("usageDetails"), ("input",), ("output",),
                                 model=model_name(o)) or TokenUsage(model=model_name(o))
            requested.update(name for _, name, _ in requested_calls(o.get("output")))
        tool = kind == "TOOL" or (kind == "SPAN" and requested[name] > 0)
        if tool and requested[name] > 0:
            requested[name] -= 1
        given = o.get("input")
        if isinstance(given, str) and isinstance(metadata.get("inputs"), dict):
            given = metadata["inputs"]  # LangChain writes Python text; its inputs are JSON
        views.append(SpanView(name, str(o.get("startTime", "")),
                              o.get("parentObservationId"), attrs,
                              error=o.get("level") == "ERROR", input=given,
                              output=o.get("output"), usage=usage, tool=tool))
    return views


READER: Final = Reader(
    name="langfuse",
    description="Langfuse trace export JSON ({'trace', 'observations'}; TOOL observations "
                "and gen_ai.* attributes)",
    suffixes=(".json",),
    detect=_detect,
    read=_read,
)
