"""OpenTelemetry audit sink: every guarded call as a span, its decision as attributes.

Needs the extra ``agent-toolguard[otel]`` (``opentelemetry-api``; the host brings the SDK
and its exporters). ``import toolguard`` never imports OpenTelemetry: only this module does.

Spans follow the OpenTelemetry GenAI semantic conventions for tool execution (the
``execute_tool`` span of ``semantic-conventions-genai``, status Development): span name
``execute_tool {gen_ai.tool.name}``, kind ``INTERNAL``, ``gen_ai.operation.name =
"execute_tool"``, ``gen_ai.tool.name``, ``gen_ai.tool.call.id``, ``gen_ai.tool.type``,
``error.type`` when the call ended in an error, and the opt-in
``gen_ai.tool.call.arguments`` (the *redacted* arguments, only with
``record_arguments=True``). What the guard decided is in ``toolguard.*`` attributes:

=============================  =========================================================
attribute                      value
=============================  =========================================================
``toolguard.decision``         allow, warn, cached, block, review, invalid, halt
``toolguard.reason``           why (empty for a plain allow)
``toolguard.effect``           readonly, mutating, poll
``toolguard.repeat_count``     repeat count of the identical call (1 = first)
``toolguard.args_hash``        canonical hash of the arguments (32 hex digits)
``toolguard.idempotency_key``  the call's idempotency key
``toolguard.task.id``          the task
``toolguard.observed``         the decision a ``shadow`` policy would have taken
``toolguard.halt.kind``        RepeatedToolCalls, BudgetExceeded, ApprovalTimedOut
``toolguard.budget``           the budget that halted the task (``max_tokens``, ...)
=============================  =========================================================

A halt adds the span event ``toolguard.halt``, a call sent to review ``toolguard.review``,
a human's decision on it ``toolguard.approval``; each of block, review, invalid and halt
(the call did not run) and a tool that raised set the span's status to ``ERROR`` with
``error.type`` (the halt's kind, ``toolguard.block``, ``toolguard.review``,
``toolguard.invalid``, or the exception's class name).

When the host already opened a tool span for the same tool (a framework's own
instrumentation: its current span has ``gen_ai.operation.name = "execute_tool"``), the
guard adds its attributes and events to that span instead of opening a second one, and
leaves ending it to the host.

Metrics (through the global or a given ``MeterProvider``): ``toolguard.calls`` (counter, by
``gen_ai.tool.name`` and ``toolguard.decision``), ``toolguard.halts`` (counter, by
``toolguard.halt.kind`` and ``toolguard.budget``), ``gen_ai.execute_tool.duration``
(histogram, seconds, executed calls), and the budget use of each task that ends in a
``with task:`` block: ``toolguard.task.tool_calls``, ``toolguard.task.tokens`` and
``toolguard.task.cost`` (histograms; cost in USD).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Final

import orjson

try:
    from opentelemetry import metrics, trace
    from opentelemetry.trace import SpanKind, Status, StatusCode
except ImportError as exc:  # pragma: no cover - exercised without the extra installed
    raise ImportError(
        "toolguard.otel needs opentelemetry-api: pip install 'agent-toolguard[otel]'"
    ) from exc

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import Span, TracerProvider

    from .engine._audit import AuditEvent

__all__ = ["OtelSink"]

_SCOPE: Final = "toolguard"
_OPERATION: Final = "execute_tool"
# decisions whose call did not run: the span's status is ERROR with error.type toolguard.<d>
_REFUSED: Final = frozenset({"block", "review", "invalid", "halt"})
# spans of calls whose outcome event never came (a process stopping mid-call) are ended
# once this many newer calls are open
_MAX_OPEN: Final = 10_000


def _target(transition: str) -> str:
    return transition.rpartition("->")[2]


class OtelSink:
    """Records each guarded call as an OpenTelemetry span (or as events on the host's own
    tool span), and counts calls, halts and budget use as metrics.

    Use: ``Guard(policy, audit=[OtelSink()])``. Thread-safe (a lock guards the open spans).
    A call's span starts with its first audit event and ends with its outcome event (the
    one with ``extra["final"]``, or a transition to ``planning`` or ``failed``); its parent
    is the span current when the call began. Times are the wall clock at the events (the
    guard's own clock may be a fake or monotonic one).

    Args:
        tracer_provider: where spans go; the global provider by default (the host's
            ``opentelemetry-sdk`` set-up).
        meter_provider: where metrics go; the global provider by default.
        record_arguments: put the redacted arguments, as JSON, in
            ``gen_ai.tool.call.arguments`` (opt-in in the conventions: they may be large or
            sensitive even after redaction).
        use_host_span: add to the current span instead of opening one when it is the host's
            ``execute_tool`` span of the same tool.
    """

    def __init__(self, *, tracer_provider: TracerProvider | None = None,
                 meter_provider: MeterProvider | None = None,
                 record_arguments: bool = False, use_host_span: bool = True) -> None:
        from . import __version__

        self._tracer = trace.get_tracer(_SCOPE, __version__, tracer_provider)
        meter = metrics.get_meter(_SCOPE, __version__, meter_provider)
        self._calls = meter.create_counter(
            "toolguard.calls", unit="{call}", description="Guarded tool calls, by decision.")
        self._halts = meter.create_counter(
            "toolguard.halts", unit="{halt}", description="Halted tasks, by kind of halt.")
        self._duration = meter.create_histogram(
            "gen_ai.execute_tool.duration", unit="s",
            description="Duration of executed tool calls.")
        self._task_calls = meter.create_histogram(
            "toolguard.task.tool_calls", unit="{call}",
            description="Tool calls of a task, at its end.")
        self._task_tokens = meter.create_histogram(
            "toolguard.task.tokens", unit="{token}",
            description="Tokens a task reported, at its end.")
        self._task_cost = meter.create_histogram(
            "toolguard.task.cost", unit="USD",
            description="What a task's model usage cost, at its end (when the price is known).")
        self._record_arguments = record_arguments
        self._use_host_span = use_host_span
        self._lock = threading.Lock()
        # call_id -> (span, ours: whether this sink ends it)
        self._open: OrderedDict[str, tuple[Span, bool]] = OrderedDict()

    def __call__(self, event: AuditEvent) -> None:
        """Record one audit event (see the module docstring for what becomes what)."""
        if not event.call_id:
            self._task_event(event)
            return
        final = bool(event.extra.get("final")) or _target(event.transition) in {
            "planning", "failed"}
        with self._lock:
            opened = self._open.pop(event.call_id, None) if final else self._open.get(
                event.call_id)
        if opened is None:
            opened = self._start(event)
            if not final:
                with self._lock:
                    self._open[event.call_id] = opened
                    while len(self._open) > _MAX_OPEN:
                        _, (stale, ours) = self._open.popitem(last=False)
                        if ours:
                            stale.end()
        span, ours = opened
        if final or event.transition != "validating->executing":
            # the start of an execution says nothing its outcome event will not say again
            self._annotate(span, event)
        if final:
            self._count(event)
            if ours:
                span.end()

    # -- spans -----------------------------------------------------------------------------
    def _start(self, event: AuditEvent) -> tuple[Span, bool]:
        if self._use_host_span:
            current = trace.get_current_span()
            attributes = getattr(current, "attributes", None) or {}
            if (current.is_recording()
                    and attributes.get("gen_ai.operation.name") == _OPERATION
                    and attributes.get("gen_ai.tool.name", event.tool) == event.tool):
                return current, False
        span = self._tracer.start_span(
            f"{_OPERATION} {event.tool}", kind=SpanKind.INTERNAL,
            attributes={"gen_ai.operation.name": _OPERATION, "gen_ai.tool.name": event.tool,
                        "gen_ai.tool.call.id": event.call_id, "gen_ai.tool.type": "function"})
        return span, True

    def _annotate(self, span: Span, event: AuditEvent) -> None:
        extra = event.extra
        attributes: dict[str, Any] = {
            "toolguard.decision": event.decision, "toolguard.reason": event.reason,
            "toolguard.task.id": event.task_id,
        }
        if event.effect:
            attributes["toolguard.effect"] = event.effect
        if event.count:
            attributes["toolguard.repeat_count"] = event.count
        if event.args_hash:
            attributes["toolguard.args_hash"] = event.args_hash
        for key, name in (("idempotency_key", "toolguard.idempotency_key"),
                          ("observed", "toolguard.observed"),
                          ("halt", "toolguard.halt.kind"), ("budget", "toolguard.budget")):
            if extra.get(key):
                attributes[name] = str(extra[key])
        if self._record_arguments and event.args:
            attributes["gen_ai.tool.call.arguments"] = orjson.dumps(
                event.args, default=repr, option=orjson.OPT_SORT_KEYS).decode()
        span.set_attributes(attributes)
        event_attributes = {"toolguard.decision": event.decision,
                            "toolguard.reason": event.reason,
                            "toolguard.transition": event.transition}
        source = event.transition.partition("->")[0]
        if event.decision == "halt":
            span.add_event("toolguard.halt", {
                **event_attributes, "toolguard.halt.kind": str(extra.get("halt", "Halt"))})
        elif source == "needs_review":
            span.add_event("toolguard.approval", event_attributes)
        elif event.decision == "review":
            span.add_event("toolguard.review", event_attributes)
        error = self._error_type(event)
        if error:
            span.set_attribute("error.type", error)
            span.set_status(Status(StatusCode.ERROR, event.reason or error))

    @staticmethod
    def _error_type(event: AuditEvent) -> str:
        if event.decision == "halt":
            return str(event.extra.get("halt") or "Halt")
        if event.decision in _REFUSED:
            return f"toolguard.{event.decision}"
        if event.extra.get("error_type"):
            return str(event.extra["error_type"])
        if event.transition == "executing->failed":  # interrupted: its outcome is unknown
            return "toolguard.interrupted"
        return ""

    # -- metrics ---------------------------------------------------------------------------
    def _count(self, event: AuditEvent) -> None:
        self._calls.add(1, {"gen_ai.tool.name": event.tool,
                            "toolguard.decision": event.decision})
        if event.decision == "halt":
            self._halt(event)
        if event.decision in {"allow", "warn"} and event.transition.startswith("executing"):
            attributes = {"gen_ai.operation.name": _OPERATION, "gen_ai.tool.name": event.tool}
            if event.extra.get("error_type"):
                attributes["error.type"] = str(event.extra["error_type"])
            self._duration.record(event.duration_s, attributes)

    def _halt(self, event: AuditEvent) -> None:
        attributes = {"toolguard.halt.kind": str(event.extra.get("halt") or "Halt")}
        if event.extra.get("budget"):
            attributes["toolguard.budget"] = str(event.extra["budget"])
        self._halts.add(1, attributes)

    def _task_event(self, event: AuditEvent) -> None:
        """A task's own event (its end, a token budget's halt, a resume): an event on the
        current span, and the halt or the task's budget use as metrics."""
        if event.extra.get("halt"):
            self._halt(event)
        usage = event.extra.get("usage")
        if isinstance(usage, dict):
            tokens = int(usage.get("input_tokens", 0)) + int(usage.get("output_tokens", 0))
            self._task_calls.record(int(usage.get("tool_calls", 0)))
            self._task_tokens.record(tokens)
            if tokens > int(usage.get("unpriced_tokens", 0)):  # some tokens had a price
                self._task_cost.record(float(usage.get("cost_usd", 0.0)))
        current = trace.get_current_span()
        if current.is_recording():
            current.add_event(f"toolguard.task.{_target(event.transition)}", {
                "toolguard.task.id": event.task_id, "toolguard.decision": event.decision,
                "toolguard.reason": event.reason})
