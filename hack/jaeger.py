"""A Jaeger process that takes spans over OTLP and serves them back: the receiver of the tracing
e2e test (e2e/test_tracing.py) and of the bench's tracing figure (bench/tracing.py).

Jaeger v2 is built once from the Go module proxy (``make jaeger``, hack/go-tools.txt) into the
tools cache. It runs on free loopback ports, spans in memory, with nothing of its own on a fixed
port; its query API (``/api/traces/<trace id>``) answers in Jaeger's JSON: each span's
``operationName``, ``startTime`` and ``duration`` (microseconds), ``tags`` and ``references``.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from crewlet_operator.envtest.process import ManagedProcess, free_port
from hack.release import built_go_tool

Span = dict[str, Any]
MAX_TRACES = 100_000
"""Traces it keeps in memory; a search asks for fewer (Jaeger refuses a limit not below it)."""


def tags(span: Span) -> dict[str, Any]:
    """A span's attributes, by key."""
    return {tag["key"]: tag["value"] for tag in span.get("tags") or []}


def parent_of(span: Span) -> str | None:
    """The id of a span's parent, if it has one."""
    for reference in span.get("references") or []:
        if reference.get("refType") == "CHILD_OF":
            return str(reference["spanID"])
    return None


def follows_from(span: Span) -> list[str]:
    """The ids of the spans ``span`` links to (OpenTelemetry's links: Jaeger's FOLLOWS_FROM)."""
    return [
        str(reference["spanID"])
        for reference in span.get("references") or []
        if reference.get("refType") == "FOLLOWS_FROM"
    ]


class Jaeger:
    """One Jaeger process: OTLP in over gRPC (:attr:`grpc`) and HTTP (:attr:`http`), its query
    API on :attr:`query`. Start it with :meth:`start`; stop it with :meth:`stop`."""

    def __init__(self, directory: Path) -> None:
        self.grpc, self.http, self.query = free_port(), free_port(), free_port()
        config = {
            "service": {
                "extensions": ["jaeger_storage", "jaeger_query"],
                "pipelines": {
                    "traces": {"receivers": ["otlp"], "exporters": ["jaeger_storage_exporter"]}
                },
                # Its own metrics would take a fixed port.
                "telemetry": {"metrics": {"level": "none"}},
            },
            "extensions": {
                "jaeger_storage": {"backends": {"memory": {"memory": {"max_traces": MAX_TRACES}}}},
                "jaeger_query": {
                    "storage": {"traces": "memory"},
                    "http": {"endpoint": f"127.0.0.1:{self.query}"},
                    "grpc": {"endpoint": f"127.0.0.1:{free_port()}"},
                },
            },
            "receivers": {
                "otlp": {
                    "protocols": {
                        "grpc": {"endpoint": f"127.0.0.1:{self.grpc}"},
                        "http": {"endpoint": f"127.0.0.1:{self.http}"},
                    }
                }
            },
            "exporters": {"jaeger_storage_exporter": {"trace_storage": "memory"}},
        }
        path = directory / "jaeger.yaml"
        path.write_text(yaml.safe_dump(config))
        self.process = ManagedProcess(
            "jaeger",
            [str(built_go_tool("jaeger")), f"--config=file:{path}"],
            directory,
            # Its query service traces itself to OTLP's default port otherwise, where nothing
            # listens: a refused connection logged every few seconds.
            {"OTEL_TRACES_SAMPLER": "always_off"},
        )

    def start(self) -> None:
        self.process.start()

    def stop(self) -> None:
        self.process.stop(timeout=10)

    def endpoint(self, protocol: str = "http/protobuf") -> str:
        """The ``OTEL_EXPORTER_OTLP_ENDPOINT`` of ``protocol`` (``http/protobuf``, ``grpc``)."""
        return f"http://127.0.0.1:{self.grpc if protocol == 'grpc' else self.http}"

    def answers(self) -> bool:
        """Whether its query API answers (it is ready); raises if it exited."""
        if not self.process.running():
            raise RuntimeError(f"Jaeger exited: {self.process.log_tail(40)}")
        try:
            self._get("/api/services")
        except OSError:
            return False
        return True

    def trace(self, trace_id: str) -> list[Span]:
        """The spans of ``trace_id`` that have arrived so far."""
        try:
            found = self._get(f"/api/traces/{trace_id}")
        except urllib.error.HTTPError as error:
            if error.code == 404:
                return []
            raise
        return [span for data in found.get("data") or [] for span in data["spans"]]

    def spans(self, service: str, start_us: int, end_us: int) -> list[Span]:
        """The spans of every trace of ``service`` that began between ``start_us`` and
        ``end_us`` (microseconds since the epoch)."""
        query = f"service={service}&start={start_us}&end={end_us}&limit={MAX_TRACES - 1}"
        found = self._get(f"/api/traces?{query}")
        return [span for data in found.get("data") or [] for span in data["spans"]]

    def everything(self, service: str) -> str:
        """Every trace of ``service`` it holds, as its JSON text."""
        return json.dumps(self._get(f"/api/traces?service={service}&limit={MAX_TRACES - 1}"))

    def _get(self, path: str) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.query}{path}", timeout=10) as answer:
            return json.loads(answer.read())  # type: ignore[no-any-return]
