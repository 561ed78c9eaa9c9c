"""The spans of a reconcile, recorded by OpenTelemetry's SDK in memory (no API server: the API
requests' spans are checked against a real one and a real receiver, e2e/test_tracing.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.test.globals_test import reset_trace_globals

from crewlet_operator.cache import Cache
from crewlet_operator.controller import Controller
from crewlet_operator.handler import EnqueueHandler, request_for_object
from crewlet_operator.reconcile import Request, Result
from crewlet_operator.tracing import (
    Triggers,
    configure_from_environment,
    enabled,
    request_span,
    tracer,
    waiting,
)
from crewlet_operator.workqueue import HIGH_PRIORITY, LOW_PRIORITY, FairQueue

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
PARENT = f"00-{TRACE_ID}-b7ad6b7169203331-01"
ANNOTATION = "example.com/traceparent"
OTEL_VARIABLES = (
    "OTEL_SDK_DISABLED",
    "OTEL_TRACES_EXPORTER",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_SERVICE_NAME",
)


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """A tracer provider that records into memory, installed for the test alone."""
    reset_trace_globals()
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    yield exporter
    provider.shutdown()
    reset_trace_globals()


@pytest.fixture
def untraced() -> Iterator[None]:
    reset_trace_globals()
    yield
    reset_trace_globals()


@pytest.fixture
def otel_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    for name in OTEL_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    reset_trace_globals()
    yield monkeypatch
    reset_trace_globals()


def company(
    name: str, version: str, annotations: dict[str, str] | None = None
) -> dict[str, object]:
    return {
        "metadata": {
            "name": name,
            "namespace": "tenant",
            "resourceVersion": version,
            "annotations": annotations or {},
        }
    }


def by_name(exporter: InMemorySpanExporter) -> dict[str, ReadableSpan]:
    return {span.name: span for span in exporter.get_finished_spans()}


async def test_a_reconcile_is_a_span_from_its_event_with_its_trigger(
    spans: InMemorySpanExporter,
) -> None:
    """The reconcile's span names the event that queued it (the newest version of an update),
    how many events the queue folded into it, and the queue's wait; it is a child of the
    traceparent the change carried, and holds the queue's wait and the reconciler's own spans."""

    async def reconcile(request: Request) -> None:
        with waiting("a slot"):
            await asyncio.sleep(0)

    controller = Controller(
        "unit-traced",
        reconcile,
        Cache(client=None),  # type: ignore[arg-type]
        trace_annotation=ANNOTATION,
    )
    handler = controller.enqueue_handler(request_for_object, watch="companies.example.com")
    old = company("acme", "41")
    handler.on_update(old, company("acme", "42", {ANNOTATION: PARENT}))
    handler.on_add(company("acme", "43"))
    assert len(controller.triggers) == 1
    request = await controller.queue.get()
    await controller.reconcile_once(request, controller.triggers.take(request))
    controller.queue.done(request)

    found = by_name(spans)
    root = found["reconcile unit-traced"]
    assert root.attributes is not None
    assert dict(root.attributes) | {
        "crewlet.queue.wait_seconds": 0,
        "crewlet.reconcile_id": "",
    } == {
        "crewlet.controller": "unit-traced",
        "crewlet.request.name": "acme",
        "k8s.namespace.name": "tenant",
        "crewlet.reconcile_id": "",
        "crewlet.queue.fairness_key": "tenant",
        "crewlet.trigger.watch": "companies.example.com",
        "crewlet.trigger.event": "updated",
        "crewlet.trigger.object": "tenant/acme",
        "crewlet.trigger.resource_version": "42",
        "crewlet.trigger.events": 3,
        "crewlet.queue.priority": 0,
        "crewlet.queue.wait_seconds": 0,
        "crewlet.result": "success",
    }
    assert root.context is not None and root.parent is not None
    assert format(root.context.trace_id, "032x") == TRACE_ID
    assert format(root.parent.span_id, "016x") == "b7ad6b7169203331"
    for child in ("queued", "wait for a slot"):
        parent = found[child].parent
        assert parent is not None and parent.span_id == root.context.span_id
    assert root.start_time is not None and found["queued"].start_time == root.start_time
    assert len(controller.triggers) == 0


async def test_a_failure_marks_the_span_and_its_retry_is_a_requeue(
    spans: InMemorySpanExporter,
) -> None:
    """A reconcile that raises is a failed span; the controller queues it again itself, and the
    retry's span says so, its wait counted from when it was due."""
    outcomes: list[Result | None] = [None]

    async def reconcile(request: Request) -> Result | None:
        if len(outcomes) == 1:
            outcomes.append(None)
            raise RuntimeError("no luck")
        return Result(requeue_after=0.01, priority=HIGH_PRIORITY)

    controller = Controller("unit-traced-failure", reconcile, Cache(client=None))  # type: ignore[arg-type]
    request = Request("tenant", "acme")
    await controller.reconcile_once(request)
    [failed] = spans.get_finished_spans()
    assert failed.attributes is not None
    assert failed.attributes["crewlet.trigger.event"] == "unknown"  # queued before any trace
    assert failed.attributes["crewlet.result"] == "error"
    assert failed.attributes["error.type"] == "RuntimeError"
    assert failed.status.status_code is trace.StatusCode.ERROR
    assert failed.parent is None

    retry = controller.triggers.take(request)
    assert retry is not None and (retry.event, retry.watch) == ("requeued", "")
    await controller.reconcile_once(request, retry)
    again = controller.triggers.take(request)
    assert again is not None and again.priority == HIGH_PRIORITY
    # A reconcile leaving work to the next one (Controller.requeue) is traced as a requeue.
    controller.requeue(request, LOW_PRIORITY)
    left = controller.triggers.take(request)
    assert left is not None and (left.event, left.priority) == ("requeued", LOW_PRIORITY)
    assert controller.queue.priority_of(request) is not None
    # An event before the requeue is due overtakes it: the reconcile comes now, for the event.
    controller.triggers.requeued(request, 60.0, HIGH_PRIORITY)
    handler = controller.enqueue_handler(request_for_object, watch="companies.example.com")
    handler.on_add(company("acme", "44"))
    overtaken = controller.triggers.take(request)
    assert overtaken is not None and (overtaken.event, overtaken.resource_version) == (
        "added",
        "44",
    )
    queued, retried = spans.get_finished_spans()[-2:]
    assert retried.attributes is not None
    assert retried.attributes["crewlet.trigger.event"] == "requeued"
    assert "crewlet.trigger.watch" not in retried.attributes
    assert retried.attributes["crewlet.result"] == "requeue_after"
    # The retry links to the reconcile that queued it: a trace of its own, followed from it.
    assert failed.context is not None and retried.context is not None
    assert retried.context.trace_id != failed.context.trace_id
    assert [link.context for link in retried.links] == [failed.context]
    assert queued.name == "queued" and not queued.links
    # An event queued it first (the echo of the reconcile's own write): it triggers the next
    # reconcile, which still links to the one that queued the request again.
    handler.on_update(company("acme", "45"), company("acme", "46"))
    with tracer().start_as_current_span("a reconcile") as reconciling:
        controller.requeue(request, LOW_PRIORITY)
    echoed = controller.triggers.take(request)
    assert echoed is not None and (echoed.event, echoed.follows) == (
        "updated",
        reconciling.get_span_context(),
    )
    # Queued from outside any reconcile, a requeue links to nothing.
    controller.triggers.requeued(request, 0.0, HIGH_PRIORITY)
    alone = controller.triggers.take(request)
    assert alone is not None and alone.follows is None


def test_an_initial_list_and_a_delete_are_named_and_an_untraced_handler_notes_nothing(
    spans: InMemorySpanExporter,
) -> None:
    queue: FairQueue[Request] = FairQueue("unit-traced-handler")
    triggers: Triggers[Request] = Triggers()
    handler = EnqueueHandler(queue, request_for_object, triggers=triggers, watch="widgets")
    handler.on_add(company("listed", "7", {ANNOTATION: PARENT}), initial=True)
    handler.on_delete(company("gone", "8"))
    listed = triggers.take(Request("tenant", "listed"))
    assert listed is not None
    assert (listed.event, listed.priority, listed.traceparent) == ("listed", LOW_PRIORITY, None)
    deleted = triggers.take(Request("tenant", "gone"))
    assert deleted is not None and deleted.event == "deleted"
    assert triggers.take(Request("tenant", "gone")) is None


def test_nothing_is_noted_or_recorded_without_a_tracer_provider(untraced: None) -> None:
    assert not enabled()
    queue: FairQueue[Request] = FairQueue("unit-untraced-handler")
    triggers: Triggers[Request] = Triggers()
    EnqueueHandler(queue, request_for_object, triggers=triggers).on_add(company("a", "1"))
    assert len(queue) == 1
    assert len(triggers) == 0
    with request_span("GET", "/api/v1/namespaces/a/pods") as span:
        assert span is None


@pytest.mark.parametrize(
    ("path", "name", "namespace"),
    [
        ("/api/v1/namespaces/t/secrets/engine-keys", "GET secrets", "t"),
        ("/apis/apps/v1/namespaces/t/statefulsets/acme", "PATCH statefulsets", "t"),
        (
            "/apis/crewlet.ai/v1alpha1/namespaces/t/companies/acme/status",
            "PATCH companies/status",
            "t",
        ),
        ("/apis/crewlet.ai/v1alpha1/engineclasses", "PATCH engineclasses", None),
        ("/api/v1/namespaces/t", "PATCH namespaces", "t"),
    ],
)
def test_a_request_span_names_its_verb_resource_and_namespace(
    spans: InMemorySpanExporter, path: str, name: str, namespace: str | None
) -> None:
    method = name.split(maxsplit=1)[0]
    with tracer().start_as_current_span("reconcile"), request_span(method, path) as span:
        assert span is not None
    found = by_name(spans)[name]
    assert found.attributes is not None
    assert found.attributes.get("k8s.namespace.name") == namespace
    assert found.attributes["http.request.method"] == method
    assert found.kind is trace.SpanKind.CLIENT


def test_a_failed_request_marks_its_span(spans: InMemorySpanExporter) -> None:
    with (
        pytest.raises(ValueError, match="refused"),
        tracer().start_as_current_span("reconcile"),
        request_span("PATCH", "/api/v1/namespaces/t/configmaps/c"),
    ):
        raise ValueError("refused")
    found = by_name(spans)["PATCH configmaps"]
    assert found.status.status_code is trace.StatusCode.ERROR
    assert found.attributes is not None and found.attributes["error.type"] == "ValueError"


def test_the_environment_leaves_tracing_off_unless_it_names_an_exporter(
    otel_env: pytest.MonkeyPatch,
) -> None:
    assert configure_from_environment("unit") is None
    otel_env.setenv("OTEL_TRACES_EXPORTER", "none")
    assert configure_from_environment("unit") is None
    otel_env.setenv("OTEL_TRACES_EXPORTER", "otlp")
    otel_env.setenv("OTEL_SDK_DISABLED", "true")
    assert configure_from_environment("unit") is None
    assert not enabled()


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc", None])
def test_an_otlp_endpoint_turns_it_on_over_the_protocol_named(
    otel_env: pytest.MonkeyPatch, protocol: str | None
) -> None:
    otel_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    otel_env.setenv("OTEL_SERVICE_NAME", "from-the-environment")
    if protocol is not None:
        otel_env.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
    provider = configure_from_environment("unit")
    assert provider is not None
    try:
        assert enabled()
        assert provider.resource.attributes["service.name"] == "from-the-environment"
        processors = provider._active_span_processor._span_processors
        exporter = type(processors[0].span_exporter).__module__  # type: ignore[attr-defined]
        assert exporter.split(".")[4] == ("grpc" if protocol == "grpc" else "http")
    finally:
        provider.shutdown()


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("OTEL_TRACES_EXPORTER", "zipkin", "unknown exporter 'zipkin'"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json", "unsupported protocol 'http/json'"),
    ],
)
def test_what_it_cannot_follow_is_a_clear_error(
    otel_env: pytest.MonkeyPatch, variable: str, value: str, message: str
) -> None:
    otel_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    otel_env.setenv(variable, value)
    with pytest.raises(ValueError, match=message):
        configure_from_environment("unit")
