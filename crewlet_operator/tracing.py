"""Tracing: a span for each reconcile, from the event that asked for it to its last write.

The library speaks OpenTelemetry's API alone. With no tracer provider installed, as by default,
nothing is recorded and the cost is a check per event. Install one, as any OpenTelemetry
program does, or call :func:`configure_from_environment` (the ``tracing`` extra: the SDK and
the OTLP exporters), which reads OpenTelemetry's standard variables::

    OTEL_TRACES_EXPORTER=otlp OTEL_EXPORTER_OTLP_ENDPOINT=http://collector:4318 my-operator

What a reconcile's trace holds:

- ``reconcile <controller>``, the root (or a child of the ``traceparent`` a user's change carried
  in the controller's trace annotation, :class:`~crewlet_operator.controller.Controller`'s
  ``trace_annotation``): it starts when the first event that queued the request came and ends
  when the reconcile returns. Its attributes name the request, the trigger (the watched
  resource, the event, the object and its ``resourceVersion``, how many events were folded into
  the one request), the queue's priority and fairness key, the wait and the result.
  The reconcile after one that queued its request again (a requeue, a retry, work left to the
  next reconcile) links to that one's span, whatever event came meanwhile, so a change's
  reconciles can be followed from one trace to the next.
- ``queued``: from that event until a worker took the request.
- One span per API request the reconcile makes (``PATCH statefulsets``): the verb, the resource,
  the namespace, the status code and the retries.
- Whatever the reconciler adds: :func:`waiting` for a wait of its own (the operator's apply
  slots), or any span of its own tracer, which nests as usual.

Attributes carry names, never an object's body: no Secret's data reaches a span.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Hashable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, Span, SpanContext, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from crewlet_operator.objects import metadata, object_key, resource_version
from crewlet_operator.reconcile import Request

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

__all__ = [
    "Trigger",
    "Triggers",
    "configure_from_environment",
    "enabled",
    "request_span",
    "tracer",
    "waiting",
]

K = TypeVar("K", bound=Hashable)

INSTRUMENTATION = "crewlet_operator"
"""The instrumentation scope of every span the library starts."""

_PROPAGATOR = TraceContextTextMapPropagator()


_tracer: tuple[trace.TracerProvider, trace.Tracer] | None = None


def tracer() -> trace.Tracer:
    """The library's tracer, from the global tracer provider as it is now: made once for each
    provider (the SDK builds a new one, scope and all, at each ``get_tracer``)."""
    global _tracer  # noqa: PLW0603 (one cached tracer, replaced with its provider)
    provider = trace.get_tracer_provider()
    if _tracer is None or _tracer[0] is not provider:
        _tracer = (provider, provider.get_tracer(INSTRUMENTATION))
    return _tracer[1]


def enabled() -> bool:
    """Whether a tracer provider that records is installed (the API's default records nothing)."""
    return not isinstance(
        trace.get_tracer_provider(), trace.ProxyTracerProvider | trace.NoOpTracerProvider
    )


@dataclass(slots=True)
class Trigger:
    """The first event that queued a request, and how many more were folded into it."""

    watch: str
    """The watched resource, ``plural.group`` (``widgets.example.com``, ``pods``); empty for a
    requeue."""
    event: str
    """``added``, ``updated``, ``deleted``, ``listed`` (an informer's initial list), or
    ``requeued`` (by the controller itself: a requeue, a retry after an error)."""
    object_key: str
    """The object the event was about, ``namespace/name``: the request's own, or a child's."""
    resource_version: str
    """Of that object, in the event."""
    at: float
    """When it was queued (``time.time()``, seconds)."""
    queued_at: float
    """The same moment on the monotonic clock, for the wait."""
    priority: int
    traceparent: str | None = None
    """The W3C ``traceparent`` the object carried in the trace annotation, if any."""
    events: int = 1
    """Events that asked for the request before a worker took it (the queue folds them)."""
    follows: SpanContext | None = None
    """A requeue's: the span it was queued from (the reconcile before), which the next
    reconcile's span links to."""


@dataclass
class Triggers(Generic[K]):
    """The trigger of each queued request, kept only while a tracer records.

    Invariant: a request has an entry from the first event that queues it until a worker takes
    it (:meth:`take`); events meanwhile are counted into that entry. A request queued again while
    a worker holds it gets an entry of its own, for its next reconcile.
    """

    annotation: str | None = None
    """The annotation a user's change may carry a ``traceparent`` in; None reads none."""
    _pending: dict[K, Trigger] = field(default_factory=dict)

    def note(
        self,
        request: K,
        watch: str,
        event: str,
        obj: Mapping[str, Any],
        priority: int,
    ) -> None:
        """Record that ``event`` on ``obj`` (of ``watch``) queued ``request`` at ``priority``."""
        held = self._pending.get(request)
        # A requeue not due yet is overtaken by this event: the reconcile comes now, for it.
        if held is not None and not (
            held.event == "requeued" and held.queued_at > time.monotonic()
        ):
            held.events += 1
            return
        carried = None
        if self.annotation is not None:
            carried = (metadata(obj).get("annotations") or {}).get(self.annotation)
        self._pending[request] = Trigger(
            watch=watch,
            event=event,
            object_key=object_key(obj),
            resource_version=resource_version(obj) or "",
            at=time.time(),
            queued_at=time.monotonic(),
            priority=priority,
            traceparent=carried if isinstance(carried, str) else None,
        )

    def requeued(self, request: K, delay: float, priority: int) -> None:
        """Record that the controller queued ``request`` again itself, due in ``delay`` seconds
        (a requeue, a retry after an error): its next reconcile's wait counts from then, and
        its span links to the current one (the reconcile that queued it)."""
        current = trace.get_current_span().get_span_context()
        follows = current if current.is_valid else None
        held = self._pending.get(request)
        if held is not None:  # an event came first (the echo of a write, say): it triggers
            held.follows = held.follows or follows
            return
        self._pending[request] = Trigger(
            watch="",
            event="requeued",
            object_key="",
            resource_version="",
            at=time.time() + delay,
            queued_at=time.monotonic() + delay,
            priority=priority,
            follows=follows,
        )

    def take(self, request: K) -> Trigger | None:
        """The trigger of ``request``, which a worker has just taken (and forget it)."""
        return self._pending.pop(request, None)

    def __len__(self) -> int:
        return len(self._pending)


@contextlib.contextmanager
def reconcile_span(
    controller: str,
    request: Request,
    *,
    reconcile_id: str,
    trigger: Trigger | None,
    fairness_key: Hashable,
) -> Iterator[Span]:
    """The span of one reconcile, current while inside (a no-op span when nothing records)."""
    if not enabled():
        yield trace.INVALID_SPAN
        return
    parent = otel_context.Context()
    attributes: dict[str, str | int | float] = {
        "crewlet.controller": controller,
        "crewlet.request.name": request.name,
        "crewlet.reconcile_id": reconcile_id,
        "crewlet.queue.fairness_key": str(fairness_key),
    }
    if request.namespace:
        attributes["k8s.namespace.name"] = request.namespace
    start: int | None = None
    links: list[Link] = []
    if trigger is not None:
        if trigger.watch:
            attributes.update(
                {
                    "crewlet.trigger.watch": trigger.watch,
                    "crewlet.trigger.object": trigger.object_key,
                    "crewlet.trigger.resource_version": trigger.resource_version,
                }
            )
        attributes.update(
            {
                "crewlet.trigger.event": trigger.event,
                "crewlet.trigger.events": trigger.events,
                "crewlet.queue.priority": trigger.priority,
                # A requeue taken before it was due (added again by other means) waited none.
                "crewlet.queue.wait_seconds": max(0.0, time.monotonic() - trigger.queued_at),
            }
        )
        if trigger.traceparent:
            parent = _PROPAGATOR.extract({"traceparent": trigger.traceparent})
        start = int(min(trigger.at, time.time()) * 1e9)
        if trigger.follows is not None:
            links.append(Link(trigger.follows))
    else:  # queued before tracing began, or by the queue's own add
        attributes["crewlet.trigger.event"] = "unknown"
    with tracer().start_as_current_span(
        f"reconcile {controller}",
        context=parent,
        kind=SpanKind.CONSUMER,
        attributes=attributes,
        links=links,
        start_time=start,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        if trigger is not None and start is not None:
            tracer().start_span("queued", start_time=start).end()
        yield span


def reconcile_failed(span: Span, error: BaseException, *, terminal: bool) -> None:
    """Mark ``span`` failed by ``error`` (its type and message: an API error's message is the
    API server's, which carries names, not data), and whether it is retried."""
    span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
    span.set_attribute("error.type", type(error).__name__)
    span.set_attribute("crewlet.retried", not terminal)


@contextlib.contextmanager
def request_span(method: str, path: str) -> Iterator[Span | None]:
    """A span for one API request (``method`` on ``path``, its attempts included), current while
    inside, only inside a span that records (a reconcile's): an informer's lists and watches
    make none. A failure raised inside marks it failed."""
    if not trace.get_current_span().is_recording():
        yield None
        return
    resource, namespace = _resource_of(path)
    attributes = {"http.request.method": method, "url.path": path, "k8s.resource": resource}
    if namespace:
        attributes["k8s.namespace.name"] = namespace
    with tracer().start_as_current_span(
        f"{method} {resource}",
        kind=SpanKind.CLIENT,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            yield span
        except Exception as error:
            span.set_status(Status(StatusCode.ERROR, type(error).__name__))
            span.set_attribute("error.type", type(error).__name__)
            raise


def answered(status: int) -> None:
    """Record an API request's answer ``status`` on the current request span, if one records
    (each attempt's: the last one's stays)."""
    span = trace.get_current_span()
    if span.is_recording():
        span.set_attribute("http.response.status_code", status)


def _resource_of(path: str) -> tuple[str, str | None]:
    """The resource (``statefulsets``, ``companies/status``) and namespace an API path names."""
    parts = [part for part in path.split("?", maxsplit=1)[0].split("/") if part]
    # /api/v1/... or /apis/<group>/<version>/...
    rest = parts[2:] if parts[:1] == ["api"] else parts[3:]
    namespace = None
    if len(rest) >= 2 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    if not rest:  # the namespace itself
        return "namespaces", namespace
    resource = rest[0]
    if len(rest) >= 3:  # a subresource: <resource>/<name>/<subresource>
        resource = f"{resource}/{rest[2]}"
    return resource, namespace


@contextlib.contextmanager
def waiting(what: str) -> Iterator[None]:
    """A span named ``wait for <what>`` around a wait, inside a span that records."""
    if not trace.get_current_span().is_recording():
        yield
        return
    with tracer().start_as_current_span(f"wait for {what}"):
        yield


_OFF = frozenset({"", "none"})


def configure_from_environment(service_name: str) -> TracerProvider | None:
    """Install a tracer provider as OpenTelemetry's standard environment variables ask, and
    return it (call its ``shutdown()`` on the way out, which sends what is batched); None when
    they ask for no tracing.

    Tracing is on when ``OTEL_TRACES_EXPORTER`` names an exporter (``otlp``, ``console``;
    ``none`` is off) or, with it unset, when ``OTEL_EXPORTER_OTLP_ENDPOINT`` or
    ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set; ``OTEL_SDK_DISABLED=true`` turns it off. OTLP
    goes over ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`` or ``OTEL_EXPORTER_OTLP_PROTOCOL``:
    ``http/protobuf`` (the specification's default) or ``grpc``. The exporters read their
    endpoint, headers and timeouts from their own variables, the batch processor its
    ``OTEL_BSP_*``, the resource ``OTEL_SERVICE_NAME`` (else ``service_name``) and
    ``OTEL_RESOURCE_ATTRIBUTES``.

    :raises ValueError: An exporter or protocol it does not know, named in those variables.
    :raises ImportError: The SDK is not installed (``pip install crewlet-operator[tracing]``).
    """
    env = os.environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    named = env.get("OTEL_TRACES_EXPORTER")
    if named is None:
        endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get(
            "OTEL_EXPORTER_OTLP_ENDPOINT"
        )
        named = "otlp" if endpoint else "none"
    exporters = [part.strip().lower() for part in named.split(",")]
    exporters = [part for part in exporters if part not in _OFF]
    if not exporters:
        return None
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource  # noqa: PLC0415
    from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415
    from opentelemetry.sdk.trace.export import BatchSpanProcessor  # noqa: PLC0415

    attributes = {} if env.get("OTEL_SERVICE_NAME") else {SERVICE_NAME: service_name}
    provider = TracerProvider(resource=Resource.create(attributes))
    for exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(_exporter(exporter)))
    trace.set_tracer_provider(provider)
    return provider


def _exporter(name: str) -> Any:
    """The span exporter ``OTEL_TRACES_EXPORTER`` names."""
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter  # noqa: PLC0415

        return ConsoleSpanExporter()
    if name != "otlp":
        raise ValueError(f"OTEL_TRACES_EXPORTER: unknown exporter {name!r} (otlp, console, none)")
    protocol = (
        os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    ).strip()
    if protocol == "http/protobuf":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # noqa: PLC0415
            OTLPSpanExporter as HTTPExporter,
        )

        return HTTPExporter()
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (  # noqa: PLC0415
            OTLPSpanExporter as GRPCExporter,
        )

        return GRPCExporter()
    raise ValueError(
        f"OTEL_EXPORTER_OTLP_PROTOCOL: unsupported protocol {protocol!r} (http/protobuf, grpc)"
    )
