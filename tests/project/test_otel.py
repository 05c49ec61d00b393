"""The OpenTelemetry audit sink (``toolguard.otel``), with the SDK's in-memory exporter and
metric reader: spans and their attributes checked against the GenAI semantic conventions
for tool execution, halts and reviews as events, metrics, the host's own tool span."""

from __future__ import annotations

import gzip
import http.server
import subprocess
import sys
import threading
from typing import Any

import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import toolguard as tg
from toolguard.otel import OtelSink
from toolguard.testing import auto_defer

SECRET = "hunter2-s3cr3t"


def lookup(path: str, password: str = "") -> str:
    """A read-only tool that takes a secret."""
    return f"read {path}"


def charge(amount: int) -> str:
    """An irreversible tool."""
    return f"charged {amount}"


def explode(n: int) -> str:
    """A tool that fails."""
    raise RuntimeError("boom")


class Telemetry:
    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def sink(self, **options: Any) -> OtelSink:
        return OtelSink(tracer_provider=self.tracer_provider,
                        meter_provider=self.meter_provider, **options)

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def metrics(self) -> dict[str, list[tuple[dict[str, Any], Any]]]:
        """metric name -> [(attributes, value (sum, or histogram count))]."""
        out: dict[str, list[tuple[dict[str, Any], Any]]] = {}
        data = self.reader.get_metrics_data()
        assert data is not None
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    out[metric.name] = [
                        (dict(p.attributes or {}), getattr(p, "value", None)
                         if hasattr(p, "value") else (p.count, p.sum))
                        for p in metric.data.data_points]
        return out


@pytest.fixture
def otel() -> Telemetry:
    return Telemetry()


def guard_with(sink: OtelSink, policy: tg.Policy | None = None, **kw: Any) -> tg.Guard:
    return tg.Guard(policy, tools=[tg.readonly(lookup), tg.requires_approval(charge),
                                   tg.mutating(explode)], audit=[sink], **kw)


def test_an_allowed_call_is_one_execute_tool_span_by_the_conventions(otel: Telemetry) -> None:
    task = guard_with(otel.sink()).task("t1")
    result = task.call("lookup", {"path": "a.txt", "password": SECRET})
    (span,) = otel.spans()
    attrs = dict(span.attributes or {})
    # GenAI semantic conventions, execute_tool span
    assert span.name == "execute_tool lookup"
    assert span.kind is SpanKind.INTERNAL
    assert attrs["gen_ai.operation.name"] == "execute_tool"
    assert attrs["gen_ai.tool.name"] == "lookup"
    assert attrs["gen_ai.tool.call.id"] == result.call_id
    assert attrs["gen_ai.tool.type"] == "function"
    assert "error.type" not in attrs
    assert span.status.status_code is StatusCode.UNSET
    # the guard's own
    assert attrs["toolguard.decision"] == "allow"
    assert attrs["toolguard.effect"] == "readonly"
    assert attrs["toolguard.repeat_count"] == 1
    assert attrs["toolguard.args_hash"] == result.args_hash
    assert attrs["toolguard.idempotency_key"] == result.idempotency_key
    assert attrs["toolguard.task.id"] == "t1"
    # arguments are opt-in
    assert "gen_ai.tool.call.arguments" not in attrs


def test_arguments_only_when_asked_and_redacted(otel: Telemetry) -> None:
    task = guard_with(otel.sink(record_arguments=True)).task("t1")
    task.call("lookup", {"path": "a.txt", "password": SECRET})
    (span,) = otel.spans()
    text = str((span.attributes or {})["gen_ai.tool.call.arguments"])
    assert '"path":"a.txt"' in text
    assert SECRET not in text
    assert "[REDACTED]" in text


def test_the_ladder_shows_in_decisions_and_a_halt_is_an_error_event(otel: Telemetry) -> None:
    ladder = {"warn_at": 2, "block_at": 3, "halt_at": 4}
    task = guard_with(otel.sink(), tg.load_policy_dict({"ladder": {"readonly": ladder}})
                      ).task("t1")
    for _ in range(3):
        task.call("lookup", {"path": "a.txt"})
    with pytest.raises(tg.RepeatedToolCalls):
        task.call("lookup", {"path": "a.txt"})
    spans = otel.spans()
    assert [s.attributes["toolguard.decision"] for s in spans if s.attributes] == [
        "allow", "warn", "block", "halt"]
    assert [s.attributes["toolguard.repeat_count"] for s in spans if s.attributes] == [
        1, 2, 3, 4]
    block, halt = spans[2], spans[3]
    assert block.status.status_code is StatusCode.ERROR
    assert (block.attributes or {})["error.type"] == "toolguard.block"
    assert halt.status.status_code is StatusCode.ERROR
    assert (halt.attributes or {})["error.type"] == "RepeatedToolCalls"
    assert (halt.attributes or {})["toolguard.halt.kind"] == "RepeatedToolCalls"
    (event,) = halt.events
    assert event.name == "toolguard.halt"
    assert (event.attributes or {})["toolguard.halt.kind"] == "RepeatedToolCalls"
    metrics = otel.metrics()
    calls = {a["toolguard.decision"]: v for a, v in metrics["toolguard.calls"]}
    assert calls == {"allow": 1, "warn": 1, "block": 1, "halt": 1}
    assert metrics["toolguard.halts"] == [({"toolguard.halt.kind": "RepeatedToolCalls"}, 1)]
    # two executed calls (allow, warn) in the duration histogram
    ((attrs, (count, _)),) = metrics["gen_ai.execute_tool.duration"]
    assert count == 2
    assert attrs == {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup"}


def test_a_review_is_an_event_and_the_approval_another(otel: Telemetry) -> None:
    task = guard_with(otel.sink(), approver=auto_defer).task("t1")
    tracer = otel.tracer_provider.get_tracer("agent")
    pending = task.call("charge", {"amount": 5})
    assert pending.decision is tg.Decision.REVIEW
    with tracer.start_as_current_span("invoke_agent"):
        task.approve(pending.idempotency_key)
    done = task.call("charge", {"amount": 5})
    assert done.decision is tg.Decision.ALLOW
    review, agent, allowed = otel.spans()
    assert review.status.status_code is StatusCode.ERROR
    assert (review.attributes or {})["error.type"] == "toolguard.review"
    assert (review.attributes or {})["toolguard.decision"] == "review"
    # the approver's answer (deferred), then the call's outcome
    assert [e.name for e in review.events] == ["toolguard.review"] * 2
    assert str((review.events[0].attributes or {})["toolguard.reason"]).startswith(
        "approval: defer")
    # the host's decision is no call of its own: an event on the span current then
    (approval,) = agent.events
    assert approval.name == "toolguard.task.executing"
    assert "approved by the host" in str((approval.attributes or {})["toolguard.reason"])
    assert (allowed.attributes or {})["toolguard.decision"] == "allow"
    assert allowed.status.status_code is StatusCode.UNSET


def test_a_tool_that_raises_sets_error_type_to_its_exception(otel: Telemetry) -> None:
    task = guard_with(otel.sink()).task("t1")
    result = task.call("explode", {"n": 1})
    assert result.is_error
    (span,) = otel.spans()
    assert (span.attributes or {})["error.type"] == "RuntimeError"
    assert span.status.status_code is StatusCode.ERROR


def test_a_token_budget_halt_and_the_task_end_are_metrics(otel: Telemetry) -> None:
    policy = tg.load_policy_dict({"budget": {"max_tokens": 100}})
    guard = guard_with(otel.sink(), policy)
    with guard.task("t1") as task:
        task.call("lookup", {"path": "a"})
        with pytest.raises(tg.BudgetExceeded):
            task.record_usage(80, 40, model="gpt-4o")
    metrics = otel.metrics()
    assert metrics["toolguard.halts"] == [
        ({"toolguard.halt.kind": "BudgetExceeded", "toolguard.budget": "max_tokens"}, 1)]
    ((_, (count, total)),) = metrics["toolguard.task.tokens"]
    assert (count, total) == (1, 120)
    ((_, (count, total)),) = metrics["toolguard.task.tool_calls"]
    assert (count, total) == (1, 1)
    ((_, (count, total)),) = metrics["toolguard.task.cost"]  # gpt-4o: $2.50 and $10 a million
    assert (count, total) == (1, pytest.approx(80 * 2.5e-6 + 40 * 10e-6))


def test_the_hosts_own_tool_span_gets_the_attributes_and_events(otel: Telemetry) -> None:
    task = guard_with(otel.sink()).task("t1")
    tracer = otel.tracer_provider.get_tracer("host-framework")
    with tracer.start_as_current_span(
            "execute_tool lookup",
            attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup"}):
        task.call("lookup", {"path": "a"})
        task.call("lookup", {"path": "a"})
    (span,) = otel.spans()  # no second span: the host's carries the guard's attributes
    assert span.instrumentation_scope is not None
    assert span.instrumentation_scope.name == "host-framework"
    assert (span.attributes or {})["toolguard.repeat_count"] == 2
    # a span of another tool is not the call's: the guard opens its own under it
    with tracer.start_as_current_span(
            "execute_tool other",
            attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "other"}
    ) as parent:
        task.call("lookup", {"path": "b"})
    child = otel.spans()[1]
    assert child.name == "execute_tool lookup"
    assert child.parent is not None
    assert child.parent.span_id == parent.get_span_context().span_id


def test_the_call_span_is_a_child_of_the_current_span(otel: Telemetry) -> None:
    task = guard_with(otel.sink()).task("t1")
    tracer = otel.tracer_provider.get_tracer("agent")
    with tracer.start_as_current_span("invoke_agent") as agent:
        task.call("lookup", {"path": "a"})
    tool_span = otel.spans()[0]
    assert tool_span.parent is not None
    assert tool_span.parent.span_id == agent.get_span_context().span_id
    assert tool_span.context is not None
    assert tool_span.context.trace_id == agent.get_span_context().trace_id


def test_import_toolguard_does_not_import_opentelemetry() -> None:
    code = ("import sys, toolguard; g = toolguard.Guard(); g.task('t').usage; "
            "print(any(m.startswith('opentelemetry') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"


# -- end to end over OTLP/HTTP --------------------------------------------------------------


class _Receiver(http.server.BaseHTTPRequestHandler):
    """An OTLP/HTTP receiver (protobuf bodies, decoded with opentelemetry-proto) that keeps
    what it was sent in ``server.received`` (path -> decoded requests)."""

    server: _ReceiverServer

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        kinds: dict[str, Any] = {"/v1/traces": ExportTraceServiceRequest,
                                 "/v1/metrics": ExportMetricsServiceRequest}
        request = kinds[self.path]()
        request.ParseFromString(body)
        self.server.received.setdefault(self.path, []).append(request)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()
        self.wfile.write(b"")

    def log_message(self, *args: Any) -> None:
        pass


class _ReceiverServer(http.server.ThreadingHTTPServer):
    received: dict[str, list[Any]]


def test_spans_and_metrics_reach_an_otlp_receiver_over_http() -> None:
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    server = _ReceiverServer(("127.0.0.1", 0), _Receiver)
    server.received = {}
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(BatchSpanProcessor(
            OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces", timeout=5)))
        reader = PeriodicExportingMetricReader(
            OTLPMetricExporter(endpoint=f"{endpoint}/v1/metrics", timeout=5),
            export_interval_millis=3_600_000)
        meter_provider = MeterProvider(metric_readers=[reader])
        sink = OtelSink(tracer_provider=tracer_provider, meter_provider=meter_provider)
        task = guard_with(sink).task("e2e")
        task.call("lookup", {"path": "a"})
        task.call("explode", {"n": 1})
        assert tracer_provider.force_flush(10_000)
        assert meter_provider.force_flush(10_000)
        tracer_provider.shutdown()
        meter_provider.shutdown()
    finally:
        server.shutdown()
        server.server_close()
    spans = [span for request in server.received["/v1/traces"]
             for resource in request.resource_spans for scope in resource.scope_spans
             for span in scope.spans]
    assert [s.name for s in spans] == ["execute_tool lookup", "execute_tool explode"]
    attributes = [{a.key: a.value for a in s.attributes} for s in spans]
    assert attributes[0]["gen_ai.operation.name"].string_value == "execute_tool"
    assert attributes[0]["toolguard.decision"].string_value == "allow"
    assert attributes[1]["error.type"].string_value == "RuntimeError"
    assert spans[1].status.code == 2  # STATUS_CODE_ERROR
    names = {metric.name for request in server.received["/v1/metrics"]
             for resource in request.resource_metrics for scope in resource.scope_metrics
             for metric in scope.metrics}
    assert {"toolguard.calls", "gen_ai.execute_tool.duration"} <= names


def test_concurrent_calls_each_end_their_own_span(otel: Telemetry) -> None:
    guard = guard_with(otel.sink())

    def work(n: int) -> None:
        task = guard.task(f"t{n}")
        for i in range(25):
            task.call("lookup", {"path": f"{n}/{i}"})

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    spans = otel.spans()
    assert len(spans) == 200
    assert len({(s.attributes or {})["gen_ai.tool.call.id"] for s in spans}) == 200
    assert all((s.attributes or {})["toolguard.decision"] == "allow" for s in spans)


async def test_async_calls_are_spans_too(otel: Telemetry) -> None:
    task = guard_with(otel.sink()).task("t-async")
    await task.acall("lookup", {"path": "a"})
    await task.acall("lookup", {"path": "a"})
    assert [(s.attributes or {})["toolguard.repeat_count"] for s in otel.spans()] == [1, 2]


def test_without_the_extra_the_import_names_it() -> None:
    code = ("import sys; sys.modules['opentelemetry'] = None\n"
            "try:\n    import toolguard.otel\nexcept ImportError as exc:\n    print(exc)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert "pip install 'agent-toolguard[otel]'" in out.stdout
