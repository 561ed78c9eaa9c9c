"""The metrics server: ``/metrics`` for Prometheus, over HTTPS behind Kubernetes auth by default."""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Callable
from pathlib import Path

from aiohttp import web
from cryptography import x509
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from crewlet_operator._tasks import cancel_and_wait
from crewlet_operator.metrics import METRICS_CERTIFICATE_EXPIRY, REGISTRY
from crewlet_operator.serving.auth import DelegatingAuth, ReviewClient
from crewlet_operator.serving.certificates import (
    CERT_POLL_INTERVAL,
    RotatingCertificate,
    context_from_pem,
    self_signed_certificate,
)
from crewlet_operator.serving.server import Server

__all__ = ["MetricsServer"]


class MetricsServer(Server):
    """``/metrics`` in the Prometheus text format, over HTTPS behind Kubernetes auth by default.

    :param client: Reviews tokens and access (see :class:`DelegatingAuth`); may be None when
        ``secure`` is false.
    :param bind_address: ``host:port`` (``":8443"`` = every interface), or ``"0"`` to disable.
    :param secure: HTTPS with TokenReview authentication and SubjectAccessReview authorisation;
        when false, plain HTTP open to anyone who reaches the port.
    :param cert_dir: A directory with ``tls.crt`` and ``tls.key`` (a mounted cert-manager
        Secret, say), reloaded when they change; without it a self-signed certificate is made
        at start.
    :param registry: The metrics to expose.
    :param token_ttl: Seconds an authenticated token's user is cached.
    :param token_failure_ttl: Seconds a rejected token is cached.
    :param allow_ttl: Seconds an allowed SubjectAccessReview is cached.
    :param deny_ttl: Seconds a denied SubjectAccessReview is cached.
    :param clock: Monotonic seconds for the caches; injectable for tests.
    :param cert_poll_interval: Seconds between checks of ``cert_dir`` for a renewed pair.
    """

    def __init__(
        self,
        client: ReviewClient | None,
        bind_address: str = ":8443",
        secure: bool = True,
        cert_dir: str | Path | None = None,
        registry: CollectorRegistry = REGISTRY,
        *,
        token_ttl: float = 60.0,
        token_failure_ttl: float = 10.0,
        allow_ttl: float = 300.0,
        deny_ttl: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        cert_poll_interval: float = CERT_POLL_INTERVAL,
    ) -> None:
        super().__init__(bind_address)
        self.secure = secure
        self.cert_poll_interval = cert_poll_interval
        self.cert_dir = Path(cert_dir) if cert_dir is not None else None
        self.registry = registry
        self.auth: DelegatingAuth | None = None
        if secure:
            if client is None:
                raise ValueError("a secure MetricsServer needs a client for the reviews")
            self.auth = DelegatingAuth(
                client,
                token_ttl=token_ttl,
                token_failure_ttl=token_failure_ttl,
                allow_ttl=allow_ttl,
                deny_ttl=deny_ttl,
                clock=clock,
            )
        self._certificate_pem: bytes | None = None
        self._rotating: RotatingCertificate | None = None
        self._watcher: asyncio.Task[None] | None = None

    @property
    def certificate_pem(self) -> bytes | None:
        """The serving certificate (PEM) while started securely, e.g. to verify the server."""
        if self._rotating is not None:
            return self._rotating.certificate_pem
        return self._certificate_pem

    def _app(self) -> web.Application:
        middlewares = [self.auth.middleware] if self.auth is not None else []
        app = web.Application(middlewares=middlewares)
        app.router.add_get("/metrics", self._metrics)
        return app

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(
            body=generate_latest(self.registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    def _ssl_context(self) -> ssl.SSLContext | None:
        if not self.secure:
            return None
        if self.cert_dir is not None:
            self._rotating = RotatingCertificate(self.cert_dir)
            return self._rotating.context
        cert_pem, key_pem = self_signed_certificate()
        self._certificate_pem = cert_pem
        return context_from_pem(cert_pem, key_pem)

    async def start(self) -> None:
        """Listen (HTTPS when secure); with a ``cert_dir``, also watch it for a new pair."""
        await super().start()
        METRICS_CERTIFICATE_EXPIRY.set_function(self.certificate_expiry)
        if self._rotating is not None and self._watcher is None:
            self._watcher = asyncio.create_task(self._rotating.watch(self.cert_poll_interval))

    async def stop(self) -> None:
        """Stop listening and watching the certificate."""
        if self._watcher is not None:
            await cancel_and_wait(self._watcher)
            self._watcher = None
        self._rotating = None
        self._certificate_pem = None
        METRICS_CERTIFICATE_EXPIRY.set_function(lambda: 0.0)
        await super().stop()

    def certificate_expiry(self) -> float:
        """When the certificate served now expires, in Unix seconds; 0 without one (its
        gauge, ``crewlet_operator_metrics_certificate_expiry_timestamp_seconds``)."""
        try:
            pem = self.certificate_pem
            if pem is None:
                return 0.0
            return x509.load_pem_x509_certificate(pem).not_valid_after_utc.timestamp()
        except (OSError, ValueError):  # a renewal half written: the next scrape reads it whole
            return 0.0
