"""Each reconcile traced, sent over OTLP to a real receiver (issue 51): Jaeger, built from the Go
module proxy (``make jaeger``), takes the daemon's spans and serves them back on its query API.

The daemon is configured as a user configures it, by OpenTelemetry's standard variables alone,
over each OTLP protocol. A Company created with a ``traceparent`` in its trace annotation is
reconciled inside that trace: its span names the watch and the version that asked for it, holds
the queue's wait and the API requests it made, and nothing in the trace carries the value of the
Secret the company's class references.
"""

from __future__ import annotations

import base64
import secrets
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from operator_helpers import (
    PLATFORM,
    Operator,
    admin_client,
    company,
    engine_class,
    secret,
    wait_condition,
)

from crewlet_operator import SECRET, Client, Scope
from crewlet_operator.envtest import ControlPlane
from crewlet_operator.envtest.wait import eventually
from crewlet_operator_daemon.api.v1alpha1 import COMPANY, ENGINE_CLASS
from crewlet_operator_daemon.naming import TRACE_ANNOTATION
from hack.jaeger import Jaeger, Span, follows_from, parent_of, tags

TENANT = "traced"
SERVICE = "crewlet-operator-e2e"


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def jaeger(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Jaeger]:
    try:
        receiver = Jaeger(tmp_path_factory.mktemp("jaeger"))
    except FileNotFoundError as missing:
        pytest.fail(str(missing))
    receiver.start()
    try:
        await eventually(receiver.answers, timeout=60, message="Jaeger's query API answers")
        yield receiver
    finally:
        receiver.stop()


# A plane of its own, without workloads: a company of no seats needs no pods.
@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    with ControlPlane(tmp_path_factory.mktemp("tracing")) as plane:
        yield plane


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def admin(plane: ControlPlane) -> AsyncIterator[Client]:
    async with admin_client(plane, PLATFORM, TENANT) as client:
        yield client


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
async def test_a_companys_reconcile_is_a_span_of_its_authors_trace(
    plane: ControlPlane, admin: Client, jaeger: Jaeger, tmp_path: Path, protocol: str
) -> None:
    environment = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": jaeger.endpoint(protocol),
        "OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
        "OTEL_SERVICE_NAME": SERVICE,
        "OTEL_BSP_SCHEDULE_DELAY": "200",
    }
    name = "grpc" if protocol == "grpc" else "http"
    key_value = f"sk-never-traced-{secrets.token_hex(8)}"
    await admin.create(SECRET, secret(PLATFORM, f"keys-{name}", anthropic=key_value))
    reference = {"namespace": PLATFORM, "name": f"keys-{name}", "key": "anthropic"}
    await admin.create(
        ENGINE_CLASS,
        engine_class(
            f"traced-{name}", modelKeys=[{"name": "ANTHROPIC_API_KEY", "secretRef": reference}]
        ),
    )
    trace_id, parent_id = secrets.token_hex(16), secrets.token_hex(8)
    operator = Operator(plane.kubeconfig, tmp_path, environment=environment)
    try:
        await eventually(operator.ready, timeout=60, message="operator ready")
        assert operator.count_log("tracing reconciles") == 1
        body = company(TENANT, f"acme-{name}", f"traced-{name}", seats={"replicas": 0})
        body["metadata"]["annotations"] = {TRACE_ANNOTATION: f"00-{trace_id}-{parent_id}-01"}
        created = await admin.create(COMPANY, body)
        await wait_condition(admin, TENANT, f"acme-{name}", "Accepted", "True")

        def reconciled() -> list[Span]:
            return [s for s in jaeger.trace(trace_id) if s["operationName"] == "reconcile company"]

        [root, *_] = await eventually(reconciled, timeout=30, message="the reconcile's span")
        said = tags(root)
        assert said["crewlet.trigger.watch"] == "companies.crewlet.ai"
        assert said["crewlet.trigger.event"] == "added"
        assert said["crewlet.trigger.object"] == f"{TENANT}/acme-{name}"
        assert said["crewlet.trigger.resource_version"] == created["metadata"]["resourceVersion"]
        assert said["k8s.namespace.name"] == TENANT
        assert said["crewlet.queue.fairness_key"] == TENANT
        assert said["crewlet.queue.wait_seconds"] >= 0
        assert said["crewlet.result"] in ("success", "requeue", "requeue_after")
        assert parent_of(root) == parent_id

        def requests() -> list[Span]:
            spans = jaeger.trace(trace_id)
            return [
                s
                for s in spans
                if parent_of(s) == root["spanID"] and "http.request.method" in tags(s)
            ]

        made = await eventually(requests, timeout=30, message="the reconcile's API requests")
        verbs = {(tags(s)["http.request.method"], tags(s)["k8s.resource"]) for s in made}
        # Its verdict: the company's status, written by the reconcile the create asked for.
        print(f"\n{protocol}: {len(jaeger.trace(trace_id))} spans; requests {sorted(verbs)}")
        assert ("PATCH", "companies/status") in verbs, verbs
        assert all(200 <= tags(s)["http.response.status_code"] < 300 for s in made), made
        assert all(tags(s)["crewlet.retries"] == 0 for s in made)
        queued = [s for s in jaeger.trace(trace_id) if s["operationName"] == "queued"]
        assert [parent_of(s) for s in queued] == [root["spanID"]]

        # Its children are written by the next reconcile, which the verdict's queued again at
        # the children's priority. That reconcile links to the verdict's: in a trace of its own
        # (a requeue), or in the author's when the Company's echo queued it first; or the first
        # list of an informer the verdict's reads started (the class's Secrets) queued it while
        # the verdict ran: the first event that queues a request is its trigger.
        def children_reconcile() -> list[Span]:
            spans = jaeger.trace(trace_id)
            spans += jaeger.spans(SERVICE, root["startTime"], int(time.time() * 1e6))
            linked = {s["spanID"]: s for s in spans if root["spanID"] in follows_from(s)}
            return list(linked.values())

        [children] = await eventually(
            children_reconcile, timeout=30, message="the children's reconcile, linked"
        )
        assert children["operationName"] == "reconcile company"
        trigger = tags(children)
        assert trigger["crewlet.trigger.event"] in ("requeued", "updated", "listed"), trigger

        # The Secret's value is copied into the company's namespace by that reconcile, and is
        # nowhere in any trace.
        await eventually(lambda: _copied(admin, key_value), timeout=60, message="the key copied")
        assert key_value not in jaeger.everything(SERVICE)
    finally:
        operator.stop()


async def _copied(admin: Client, value: str) -> bool:
    """Whether a Secret in the tenant's namespace holds ``value`` (the operator's copy)."""
    encoded = base64.b64encode(value.encode()).decode()
    listed = await admin.list(SECRET, Scope(TENANT))
    return any(encoded in (found.get("data") or {}).values() for found in listed.items)
