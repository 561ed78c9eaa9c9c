"""The manager's HTTP endpoints: health probes and metrics, as controller-runtime serves them.

:class:`HealthServer`
    ``/healthz`` and ``/readyz`` for the kubelet's liveness and readiness probes (plain HTTP).
:class:`MetricsServer`
    ``/metrics`` for Prometheus. With ``secure=True`` (the default) it is HTTPS and every
    request is authenticated with a TokenReview and authorised with a SubjectAccessReview, like
    controller-runtime's ``filters.WithAuthenticationAndAuthorization``: only identities that
    RBAC allows to ``get`` the non-resource URL ``/metrics`` can read it::

        rules:
          - nonResourceURLs: ["/metrics"]
            verbs: ["get"]

Both are started with ``await server.start()`` and stopped with ``await server.stop()``; a bind
address of ``"0"`` disables a server.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import hashlib
import hmac
import inspect
import ipaddress
import json
import os
import secrets
import socket
import ssl
import tempfile
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

import structlog
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from crewlet_operator import metrics
from crewlet_operator.kube.resources import SUBJECT_ACCESS_REVIEW, TOKEN_REVIEW, Resource

__all__ = [
    "DelegatingAuth",
    "HealthCheck",
    "HealthServer",
    "MetricsServer",
    "ReviewClient",
    "TTLCache",
    "UserInfo",
    "parse_bind_address",
    "self_signed_certificate",
]

log = structlog.get_logger("crewlet_operator.serving")

HealthCheck = Callable[[], bool | Awaitable[bool]]
"""A health or readiness check: it passes by returning true, fails by returning false or raising."""

V = TypeVar("V")

SHUTDOWN_TIMEOUT = 5.0
"""Seconds :meth:`stop` waits for requests in flight; a scrape or a probe takes milliseconds."""

CERT_POLL_INTERVAL = 10.0
"""How often a ``cert_dir`` is checked for a rotated certificate (controller-runtime's
certwatcher polls as often)."""


def parse_bind_address(address: str) -> tuple[str, int] | None:
    """``(host, port)`` for a Go-style bind address, or None for ``"0"`` (disabled).

    ``":8081"`` listens on every IPv4 interface, ``"127.0.0.1:0"`` on an ephemeral loopback port,
    ``"[::1]:8081"`` on IPv6 loopback.

    :raises ValueError: when the address is none of these.
    """
    if address == "0":
        return None
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"bind address {address!r} is not host:port, :port or 0")
    host = host.removeprefix("[").removesuffix("]")
    return host or "0.0.0.0", int(port)


class _Server:
    """What both servers share: the listener's life cycle on an aiohttp runner."""

    def __init__(self, bind_address: str) -> None:
        self.bind_address = bind_address
        self._listen = parse_bind_address(bind_address)
        self._runner: web.AppRunner | None = None
        self._port: int | None = None

    @property
    def port(self) -> int | None:
        """The port listened on while started (the one chosen for port 0); None otherwise."""
        return self._port

    def _app(self) -> web.Application:
        raise NotImplementedError

    def _ssl_context(self) -> ssl.SSLContext | None:
        return None

    async def start(self) -> None:
        """Listen on the bind address; a no-op when disabled (``"0"``) or already started."""
        if self._listen is None or self._runner is not None:
            return
        host, port = self._listen
        # No access log: the kubelet probes every few seconds and Prometheus scrapes as often.
        runner = web.AppRunner(self._app(), access_log=None, shutdown_timeout=SHUTDOWN_TIMEOUT)
        await runner.setup()
        try:
            await web.TCPSite(runner, host, port, ssl_context=self._ssl_context()).start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self._port = int(runner.addresses[0][1])
        log.info("serving", server=type(self).__name__, host=host, port=self._port)

    async def stop(self) -> None:
        """Stop listening, letting requests in flight finish (up to a few seconds)."""
        if self._runner is None:
            return
        runner, self._runner, self._port = self._runner, None, None
        await runner.cleanup()


# -- health probes ---------------------------------------------------------------------------


def _ping() -> bool:
    return True


class HealthServer(_Server):
    """``/healthz`` and ``/readyz`` with named checks, answered the way Kubernetes does.

    Each endpoint runs all of its checks (concurrently) on every request: 200 ``ok`` when every
    check passes, 500 listing each check otherwise. ``?verbose`` lists them on success too::

        [+]ping ok
        [-]informers-synced failed: reason withheld
        readyz check failed

    The reason is withheld because the endpoint is unauthenticated; it is logged instead. A
    ``ping`` check, which always passes, is registered on both endpoints.

    :param bind_address: ``host:port`` (``":8081"`` = every interface), or ``"0"`` to disable.
    :param check_timeout: Seconds an async check may take before it counts as failed, so a hung
        check cannot pile up a coroutine per probe. Synchronous checks must not block.
    """

    def __init__(self, bind_address: str = ":8081", *, check_timeout: float = 10.0) -> None:
        super().__init__(bind_address)
        self.check_timeout = check_timeout
        self._checks: dict[str, dict[str, HealthCheck]] = {
            "healthz": {"ping": _ping},
            "readyz": {"ping": _ping},
        }

    def add_healthz_check(self, name: str, check: HealthCheck) -> None:
        """Register a liveness check; the kubelet restarts the container while it fails.

        :raises ValueError: when a check of that name is already registered.
        """
        self._add("healthz", name, check)

    def add_readyz_check(self, name: str, check: HealthCheck) -> None:
        """Register a readiness check; the pod receives no Service traffic while it fails.

        :raises ValueError: when a check of that name is already registered.
        """
        self._add("readyz", name, check)

    def _add(self, endpoint: str, name: str, check: HealthCheck) -> None:
        checks = self._checks[endpoint]
        if name in checks:
            raise ValueError(f"{endpoint} check {name!r} is already registered")
        checks[name] = check

    def _app(self) -> web.Application:
        app = web.Application()
        for endpoint in self._checks:
            app.router.add_get(f"/{endpoint}", self._handler(endpoint))
        return app

    def _handler(self, endpoint: str) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def handle(request: web.Request) -> web.Response:
            checks = list(self._checks[endpoint].items())
            passed = await asyncio.gather(*(self._run(endpoint, n, c) for n, c in checks))
            failed = [name for (name, _), ok in zip(checks, passed, strict=True) if not ok]
            if not failed and "verbose" not in request.query:
                body = "ok"
            else:
                lines = [
                    f"[+]{name} ok" if ok else f"[-]{name} failed: reason withheld"
                    for (name, _), ok in zip(checks, passed, strict=True)
                ]
                lines.append(f"{endpoint} check {'failed' if failed else 'passed'}")
                body = "\n".join(lines) + "\n"
            if failed:
                log.info(f"{endpoint} check failed", failed=failed)
            return web.Response(
                status=500 if failed else 200,
                text=body,
                headers={"X-Content-Type-Options": "nosniff"},
            )

        return handle

    async def _run(self, endpoint: str, name: str, check: HealthCheck) -> bool:
        try:
            async with asyncio.timeout(self.check_timeout):
                result = check()
                if inspect.isawaitable(result):
                    result = await result
        except Exception as exc:
            log.debug(f"{endpoint} check raised", check=name, error=repr(exc))
            return False
        return bool(result)


# -- metrics, authenticated and authorised by the API server -------------------------------


class ReviewClient(Protocol):
    """What :class:`DelegatingAuth` needs of a :class:`~crewlet_operator.kube.client.Client`."""

    async def create(self, resource: Resource, obj: dict[str, Any]) -> dict[str, Any]:
        """Create ``obj`` and return the server's answer."""
        ...


@dataclass(frozen=True)
class UserInfo:
    """An identity as a TokenReview reports it (and a SubjectAccessReview takes it)."""

    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


class TTLCache(Generic[V]):
    """A bounded map whose entries expire: each value lives for the TTL it was stored with.

    Least recently used entries are evicted beyond ``max_entries``, so clients sending random
    tokens cannot grow it without bound.

    :param clock: Monotonic seconds; injectable for tests.
    """

    def __init__(
        self, max_entries: int = 4096, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.max_entries = max_entries
        self._clock = clock
        self._entries: OrderedDict[str, tuple[float, V]] = OrderedDict()

    def __getitem__(self, key: str) -> V:
        """The live value for ``key``; :class:`KeyError` when absent or expired."""
        expires, value = self._entries[key]
        if self._clock() >= expires:
            del self._entries[key]
            raise KeyError(key)
        self._entries.move_to_end(key)
        return value

    def set(self, key: str, value: V, ttl: float) -> None:
        """Store ``value`` for ``ttl`` seconds."""
        self._entries[key] = (self._clock() + ttl, value)
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)


def _bearer_token(authorization: str) -> str | None:
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def _text(status: int, text: str) -> web.Response:
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return web.Response(status=status, text=text, headers=headers)


class DelegatingAuth:
    """Authentication by TokenReview and authorisation by SubjectAccessReview, cached.

    The answers are cached as controller-runtime caches them: a user a token authenticates for
    ``token_ttl`` (1 min), a rejected token for ``token_failure_ttl`` (10 s, so a scraper whose
    token was just created is not locked out for long), an allowed request for ``allow_ttl``
    (5 min) and a denied one for ``deny_ttl`` (30 s). A failed review (the API server did not
    answer) is not cached. Tokens are cache keys only as an HMAC-SHA256 under a key drawn at
    random per instance, so a memory dump does not give them away; neither tokens nor their
    digests are logged.

    :param client: Usually the manager's :class:`~crewlet_operator.kube.client.Client`; its
        identity needs ``create`` on ``tokenreviews`` and ``subjectaccessreviews`` (the
        ``system:auth-delegator`` ClusterRole).
    :param clock: Monotonic seconds, for the TTLs; injectable for tests.
    """

    def __init__(
        self,
        client: ReviewClient,
        *,
        token_ttl: float = 60.0,
        token_failure_ttl: float = 10.0,
        allow_ttl: float = 300.0,
        deny_ttl: float = 30.0,
        max_entries: int = 4096,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.token_ttl = token_ttl
        self.token_failure_ttl = token_failure_ttl
        self.allow_ttl = allow_ttl
        self.deny_ttl = deny_ttl
        self._hmac_key = secrets.token_bytes(32)
        self._tokens: TTLCache[UserInfo | None] = TTLCache(max_entries, clock)
        self._decisions: TTLCache[bool] = TTLCache(max_entries, clock)

    def _token_key(self, token: str) -> str:
        return hmac.new(self._hmac_key, token.encode(), hashlib.sha256).hexdigest()

    async def authenticate(self, token: str) -> UserInfo | None:
        """The user ``token`` belongs to, or None when the API server does not accept it.

        :raises Exception: whatever the client raises when the review itself fails.
        """
        key = self._token_key(token)
        with contextlib.suppress(KeyError):
            return self._tokens[key]
        review = await self.client.create(
            TOKEN_REVIEW,
            {
                "apiVersion": TOKEN_REVIEW.api_version,
                "kind": TOKEN_REVIEW.kind,
                "metadata": {},
                "spec": {"token": token},
            },
        )
        status = review.get("status") or {}
        user_info = status.get("user") or {}
        user: UserInfo | None = None
        if status.get("authenticated") and user_info.get("username"):
            user = UserInfo(
                username=user_info["username"],
                uid=user_info.get("uid", ""),
                groups=tuple(user_info.get("groups") or ()),
                extra={k: tuple(v) for k, v in (user_info.get("extra") or {}).items()},
            )
        self._tokens.set(key, user, self.token_ttl if user else self.token_failure_ttl)
        return user

    async def authorize(self, user: UserInfo, verb: str, path: str) -> bool:
        """Whether RBAC (or whatever authoriser the API server runs) lets ``user`` do this.

        :raises Exception: whatever the client raises when the review itself fails.
        """
        spec: dict[str, Any] = {
            "user": user.username,
            "groups": list(user.groups),
            "nonResourceAttributes": {"path": path, "verb": verb},
        }
        if user.uid:
            spec["uid"] = user.uid
        if user.extra:
            spec["extra"] = {k: list(v) for k, v in user.extra.items()}
        key = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()
        with contextlib.suppress(KeyError):
            return self._decisions[key]
        review = await self.client.create(
            SUBJECT_ACCESS_REVIEW,
            {
                "apiVersion": SUBJECT_ACCESS_REVIEW.api_version,
                "kind": SUBJECT_ACCESS_REVIEW.kind,
                "metadata": {},
                "spec": spec,
            },
        )
        allowed = bool((review.get("status") or {}).get("allowed"))
        self._decisions.set(key, allowed, self.allow_ttl if allowed else self.deny_ttl)
        return allowed

    @web.middleware
    async def middleware(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        """An aiohttp middleware: 401 unauthenticated, 403 unauthorised, else the handler.

        The verb is the lowercased HTTP method and the path the request's, as the API server
        itself authorises non-resource requests.
        """
        token = _bearer_token(request.headers.get("Authorization", ""))
        if token is None:
            return _text(401, "Unauthorized")
        try:
            user = await self.authenticate(token)
        except Exception as exc:
            log.warning("token review failed", error=str(exc))
            return _text(401, "Authentication failed")
        if user is None:
            log.debug("rejected an unauthenticated request", path=request.path)
            return _text(401, "Unauthorized")
        try:
            allowed = await self.authorize(user, request.method.lower(), request.path)
        except Exception as exc:
            log.warning("subject access review failed", user=user.username, error=str(exc))
            return _text(500, f"Authorization for user {user.username} failed")
        if not allowed:
            log.debug("denied a request", user=user.username, path=request.path)
            return _text(403, f"Authorization denied for user {user.username}")
        return await handler(request)


def self_signed_certificate(
    hosts: Sequence[str] | None = None, *, validity: datetime.timedelta | None = None
) -> tuple[bytes, bytes]:
    """A self-signed ECDSA P-256 serving certificate and its key, both PEM.

    :param hosts: Subject alternative names, IP addresses or DNS names; by default
        ``localhost``, ``127.0.0.1``, ``::1`` and this machine's hostname (the pod's name).
    :param validity: How long it is valid; one year by default.
    """
    if hosts is None:
        hosts = ["localhost", "127.0.0.1", "::1"]
        hostname = socket.gethostname()
        if hostname.isascii() and hostname not in hosts:
            hosts.append(hostname)
    sans: list[x509.GeneralName] = []
    for host in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            sans.append(x509.DNSName(host))
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        # Back-dated a little so that a client whose clock lags accepts it at once.
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + (validity or datetime.timedelta(days=365)))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return certificate.public_bytes(serialization.Encoding.PEM), key_pem


def _server_context() -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


def _context_from_pem(cert_pem: bytes, key_pem: bytes) -> ssl.SSLContext:
    # ssl loads certificates from files only: write them to a private directory for a moment.
    with tempfile.TemporaryDirectory(prefix="crewlet-metrics-") as directory:
        cert, key = Path(directory, "tls.crt"), Path(directory, "tls.key")
        cert.write_bytes(cert_pem)
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(key_pem)
        context = _server_context()
        context.load_cert_chain(cert, key)
    return context


class _RotatingCertificate:
    """The serving certificate from ``tls.crt``/``tls.key`` in a directory, reloaded on change.

    cert-manager and the kubelet's Secret volumes replace the files in place (the latter by
    swapping a symlink), so a long-running server must pick up the renewed pair. Each
    handshake switches to the newest context from the SNI callback, which runs for every
    ClientHello; a half-written pair fails to load and the previous one keeps serving.
    """

    def __init__(self, cert_dir: Path) -> None:
        self.cert_file = cert_dir / "tls.crt"
        self.key_file = cert_dir / "tls.key"
        for path in (self.cert_file, self.key_file):
            if not path.is_file():
                raise FileNotFoundError(f"metrics serving certificate: {path} does not exist")
        self._seen = self._stamp()
        self.context = self._load()
        self.context.sni_callback = self._pick
        self._current = self.context

    def _load(self) -> ssl.SSLContext:
        context = _server_context()
        context.load_cert_chain(self.cert_file, self.key_file)
        return context

    def _stamp(self) -> tuple[tuple[int, int, int], ...]:
        stats = (os.stat(p) for p in (self.cert_file, self.key_file))
        return tuple((s.st_ino, s.st_mtime_ns, s.st_size) for s in stats)

    def _pick(self, connection: ssl.SSLObject, server_name: str | None, _: ssl.SSLContext) -> None:
        connection.context = self._current

    def reload_if_changed(self) -> bool:
        """Load the files again if they changed since the last load; whether it did.

        A pair that does not load (say the key is not written yet) is retried next time.
        """
        try:
            stamp = self._stamp()
            if stamp == self._seen:
                return False
            self._current = self._load()
        except (OSError, ssl.SSLError) as exc:
            log.warning("could not reload the metrics certificate", error=str(exc))
            return False
        self._seen = stamp
        log.info("reloaded the metrics certificate", cert=str(self.cert_file))
        return True

    @property
    def certificate_pem(self) -> bytes:
        """The certificate as it is on disk now."""
        return self.cert_file.read_bytes()


class MetricsServer(_Server):
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
        registry: CollectorRegistry = metrics.REGISTRY,
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
        self._rotating: _RotatingCertificate | None = None
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
            self._rotating = _RotatingCertificate(self.cert_dir)
            return self._rotating.context
        cert_pem, key_pem = self_signed_certificate()
        self._certificate_pem = cert_pem
        return _context_from_pem(cert_pem, key_pem)

    async def start(self) -> None:
        """Listen (HTTPS when secure); with a ``cert_dir``, also watch it for a new pair."""
        await super().start()
        if self._rotating is not None and self._watcher is None:
            self._watcher = asyncio.create_task(self._watch_certificate(self._rotating))

    async def _watch_certificate(self, rotating: _RotatingCertificate) -> None:
        while True:
            await asyncio.sleep(self.cert_poll_interval)
            rotating.reload_if_changed()

    async def stop(self) -> None:
        """Stop listening and watching the certificate."""
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watcher
            self._watcher = None
        self._rotating = None
        self._certificate_pem = None
        await super().stop()
