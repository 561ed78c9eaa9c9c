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
import json
import os
import secrets
import urllib.request
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import yaml
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
from crewlet_operator.envtest.controlplane import free_port
from crewlet_operator.envtest.process import ManagedProcess
from crewlet_operator.envtest.wait import eventually
from crewlet_operator_daemon.api.v1alpha1 import COMPANY, ENGINE_CLASS
from crewlet_operator_daemon.naming import TRACE_ANNOTATION

TENANT = "traced"
SERVICE = "crewlet-operator-e2e"
Span = dict[str, Any]


def jaeger_binary() -> Path:
    cache = Path(os.environ.get("CREWLET_CACHE", Path.home() / ".cache" / "crewlet-operator"))
    found = Path(os.environ.get("CREWLET_TOOLS_DIR", cache / "bin" / "tools")) / "jaeger"
    if not found.is_file():
        pytest.fail(f"Jaeger is missing at {found}: build it with `make jaeger`")
    return found


@dataclass
class Jaeger:
    """A Jaeger process: OTLP in over gRPC and HTTP, its query API out, spans in memory."""

    grpc: int
    http: int
    query: int

    def trace(self, trace_id: str) -> list[Span]:
        """The spans of ``trace_id`` that have arrived so far."""
        try:
            found = self._get(f"/api/traces/{trace_id}")
        except urllib.error.HTTPError as error:
            if error.code == 404:
                return []
            raise
        return [span for data in found.get("data") or [] for span in data["spans"]]

    def everything(self) -> str:
        """Every trace of the daemon's service it holds, as its JSON text."""
        return json.dumps(self._get(f"/api/traces?service={SERVICE}&limit=10000"))

    def _get(self, path: str) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.query}{path}", timeout=5) as answer:
            return json.loads(answer.read())  # type: ignore[no-any-return]


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def jaeger(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Jaeger]:
    binary = jaeger_binary()
    directory = tmp_path_factory.mktemp("jaeger")
    ports = Jaeger(grpc=free_port(), http=free_port(), query=free_port())
    config = {
        "service": {
            "extensions": ["jaeger_storage", "jaeger_query"],
            "pipelines": {
                "traces": {"receivers": ["otlp"], "exporters": ["jaeger_storage_exporter"]}
            },
            # Its own metrics would take a fixed port; a test has no use for them.
            "telemetry": {"metrics": {"level": "none"}},
        },
        "extensions": {
            "jaeger_storage": {"backends": {"memory": {"memory": {"max_traces": 100000}}}},
            "jaeger_query": {
                "storage": {"traces": "memory"},
                "http": {"endpoint": f"127.0.0.1:{ports.query}"},
                "grpc": {"endpoint": f"127.0.0.1:{free_port()}"},
            },
        },
        "receivers": {
            "otlp": {
                "protocols": {
                    "grpc": {"endpoint": f"127.0.0.1:{ports.grpc}"},
                    "http": {"endpoint": f"127.0.0.1:{ports.http}"},
                }
            }
        },
        "exporters": {"jaeger_storage_exporter": {"trace_storage": "memory"}},
    }
    (directory / "jaeger.yaml").write_text(yaml.safe_dump(config))
    process = ManagedProcess(
        "jaeger", [str(binary), f"--config=file:{directory / 'jaeger.yaml'}"], directory
    )
    process.start()
    try:

        def answers() -> bool:
            if not process.running():
                raise AssertionError(f"Jaeger exited: {process.log_tail(40)}")
            try:
                ports.everything()
            except OSError:
                return False
            return True

        await eventually(answers, timeout=60, message="Jaeger's query API answers")
        yield ports
    finally:
        process.stop(timeout=10)


# A plane of its own, without workloads: a company of no seats needs no pods.
@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    with ControlPlane(tmp_path_factory.mktemp("tracing")) as plane:
        yield plane


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def admin(plane: ControlPlane) -> AsyncIterator[Client]:
    async with admin_client(plane, PLATFORM, TENANT) as client:
        yield client


def tags(span: Span) -> dict[str, Any]:
    return {tag["key"]: tag["value"] for tag in span.get("tags") or []}


def parent_of(span: Span) -> str | None:
    for reference in span.get("references") or []:
        if reference.get("refType") == "CHILD_OF":
            return str(reference["spanID"])
    return None


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
async def test_a_companys_reconcile_is_a_span_of_its_authors_trace(
    plane: ControlPlane, admin: Client, jaeger: Jaeger, tmp_path: Path, protocol: str
) -> None:
    port = jaeger.grpc if protocol == "grpc" else jaeger.http
    environment = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
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

        # The Secret's value is copied into the company's namespace by that reconcile, and is
        # nowhere in any trace.
        await eventually(lambda: _copied(admin, key_value), timeout=60, message="the key copied")
        assert key_value not in jaeger.everything()
    finally:
        operator.stop()


async def _copied(admin: Client, value: str) -> bool:
    """Whether a Secret in the tenant's namespace holds ``value`` (the operator's copy)."""
    encoded = base64.b64encode(value.encode()).decode()
    listed = await admin.list(SECRET, Scope(TENANT))
    return any(encoded in (found.get("data") or {}).values() for found in listed.items)
