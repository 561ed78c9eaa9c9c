"""The probe and metrics servers, with fake reviews: no API server here."""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import ipaddress
import socket
import ssl
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from fakes import FakeClock
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter
from structlog.testing import capture_logs

from crewlet_operator import metrics
from crewlet_operator.errors import ServerError
from crewlet_operator.kube.resources import Resource
from crewlet_operator.serving import (
    DelegatingAuth,
    HealthCheckFailed,
    HealthServer,
    MetricsServer,
    TTLCache,
    UserInfo,
    parse_bind_address,
    self_signed_certificate,
)

GOOD_TOKEN = "good-token-0123456789"
DENIED_TOKEN = "denied-token-0123456789"


class FakeReviews:
    """Answers TokenReviews and SubjectAccessReviews as an API server would, and records them.

    ``GOOD_TOKEN`` is user ``alice`` (allowed), ``DENIED_TOKEN`` user ``bob`` (denied); any other
    token is not authenticated. ``fail`` names a kind whose next review raises.
    """

    def __init__(self) -> None:
        self.bodies: list[tuple[str, dict[str, Any]]] = []
        self.fail: str | None = None

    def count(self, kind: str) -> int:
        return sum(1 for k, _ in self.bodies if k == kind)

    async def create(self, resource: Resource, obj: dict[str, Any]) -> dict[str, Any]:
        self.bodies.append((resource.kind, obj))
        if self.fail == resource.kind:
            self.fail = None
            raise ServerError(503, {"message": "unavailable"}, method="POST", path="/x")
        spec = obj["spec"]
        if resource.kind == "TokenReview":
            users = {
                GOOD_TOKEN: {
                    "username": "alice",
                    "uid": "u-1",
                    "groups": ["team-a", "system:authenticated"],
                    "extra": {"scopes": ["read"]},
                },
                DENIED_TOKEN: {"username": "bob", "groups": ["system:authenticated"]},
            }
            user = users.get(spec["token"])
            status = {"authenticated": True, "user": user} if user else {"error": "invalid"}
            # The API server echoes the spec, token included.
            return {**obj, "status": status}
        assert resource.kind == "SubjectAccessReview"
        return {**obj, "status": {"allowed": spec["user"] == "alice"}}


# -- bind addresses ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        (":8081", ("0.0.0.0", 8081)),
        ("127.0.0.1:0", ("127.0.0.1", 0)),
        ("localhost:9443", ("localhost", 9443)),
        ("[::1]:8081", ("::1", 8081)),
        ("0", None),
    ],
)
def test_bind_addresses(address: str, expected: tuple[str, int] | None) -> None:
    assert parse_bind_address(address) == expected


@pytest.mark.parametrize("address", ["8081", "", "host:", ":http", ":65536"])
def test_invalid_bind_addresses(address: str) -> None:
    with pytest.raises(ValueError, match="bind address"):
        parse_bind_address(address)


# -- health probes -----------------------------------------------------------------------------


@pytest.fixture
async def health() -> AsyncIterator[HealthServer]:
    server = HealthServer("127.0.0.1:0")
    await server.start()
    yield server
    await server.stop()


async def get(url: str, **kwargs: Any) -> tuple[int, str, dict[str, str]]:
    async with aiohttp.ClientSession() as session, session.get(url, **kwargs) as response:
        return response.status, await response.text(), dict(response.headers)


async def probe(server: HealthServer, path: str) -> tuple[int, str]:
    status, text, _ = await get(f"http://127.0.0.1:{server.port}{path}")
    return status, text


async def test_ping_alone_is_ok_on_both_endpoints(health: HealthServer) -> None:
    assert health.port
    assert await probe(health, "/healthz") == (200, "ok")
    assert await probe(health, "/readyz") == (200, "ok")


async def test_verbose_lists_every_check(health: HealthServer) -> None:
    health.add_readyz_check("informers", lambda: True)
    status, text = await probe(health, "/readyz?verbose")
    assert status == 200
    assert text == "[+]ping ok\n[+]informers ok\nreadyz check passed\n"


async def test_failing_check_fails_its_endpoint_only_and_names_itself(
    health: HealthServer,
) -> None:
    health.add_readyz_check("informers", lambda: True)
    health.add_readyz_check("leader", lambda: False)
    status, text = await probe(health, "/readyz")
    assert status == 500
    assert text == (
        "[+]ping ok\n[+]informers ok\n[-]leader failed: reason withheld\nreadyz check failed\n"
    )
    assert await probe(health, "/healthz") == (200, "ok")


async def test_a_raising_check_fails_and_its_reason_stays_out_of_the_body(
    health: HealthServer,
) -> None:
    def broken() -> bool:
        raise RuntimeError("database password is hunter2")

    health.add_healthz_check("db", broken)
    status, text = await probe(health, "/healthz")
    assert status == 500
    assert "[-]db failed: reason withheld" in text
    assert "hunter2" not in text


async def test_a_check_that_says_why_has_its_reason_in_the_body(health: HealthServer) -> None:
    def alone() -> bool:
        raise HealthCheckFailed("another install leads,\non the Lease ops/leader")

    health.add_readyz_check("alone", alone)
    status, text = await probe(health, "/readyz")
    assert status == 500
    assert "[-]alone failed: another install leads, on the Lease ops/leader\n" in text
    assert await probe(health, "/healthz") == (200, "ok")


async def test_async_checks(health: HealthServer) -> None:
    synced = False

    async def informers_synced() -> bool:
        await asyncio.sleep(0)
        return synced

    health.add_readyz_check("informers", informers_synced)
    assert (await probe(health, "/readyz"))[0] == 500
    synced = True
    assert await probe(health, "/readyz") == (200, "ok")


async def test_a_hung_async_check_times_out_as_failed() -> None:
    server = HealthServer("127.0.0.1:0", check_timeout=0.05)

    async def hangs() -> bool:
        await asyncio.sleep(60)
        return True

    server.add_healthz_check("hangs", hangs)
    await server.start()
    try:
        status, text = await asyncio.wait_for(probe(server, "/healthz"), 5)
    finally:
        await server.stop()
    assert status == 500
    assert "[-]hangs failed" in text


async def test_duplicate_check_names_are_refused() -> None:
    server = HealthServer("127.0.0.1:0")
    server.add_healthz_check("db", lambda: True)
    server.add_readyz_check("db", lambda: True)  # the other endpoint is separate
    with pytest.raises(ValueError, match="already registered"):
        server.add_healthz_check("db", lambda: True)
    with pytest.raises(ValueError, match="already registered"):
        server.add_readyz_check("ping", lambda: True)


async def test_disabled_server_does_not_listen() -> None:
    server = HealthServer("0")
    await server.start()
    assert server.port is None
    await server.stop()


async def test_stop_closes_the_port() -> None:
    server = HealthServer("127.0.0.1:0")
    await server.start()
    port = server.port
    await server.stop()
    assert server.port is None
    with pytest.raises(aiohttp.ClientConnectionError):
        await get(f"http://127.0.0.1:{port}/healthz")


# -- metrics -----------------------------------------------------------------------------------


async def test_insecure_metrics_serves_the_registry_over_plain_http() -> None:
    metrics.init_controller_metrics("unit-serving", 3)
    server = MetricsServer(None, bind_address="127.0.0.1:0", secure=False)
    await server.start()
    try:
        status, text, headers = await get(f"http://127.0.0.1:{server.port}/metrics")
    finally:
        await server.stop()
    assert status == 200
    assert headers["Content-Type"] == CONTENT_TYPE_LATEST
    assert 'controller_runtime_max_concurrent_reconciles{controller="unit-serving"} 3.0' in text
    assert 'controller_runtime_reconcile_total{controller="unit-serving",result="error"}' in text
    assert server.certificate_pem is None


async def test_metrics_serves_the_registry_it_is_given() -> None:
    registry = CollectorRegistry()
    Counter("unit_only_here", "A counter in a registry of its own.", registry=registry).inc(7)
    server = MetricsServer(None, bind_address="127.0.0.1:0", secure=False, registry=registry)
    await server.start()
    try:
        _, text, _ = await get(f"http://127.0.0.1:{server.port}/metrics")
    finally:
        await server.stop()
    assert "unit_only_here_total 7.0" in text
    assert "controller_runtime_reconcile_total" not in text


def test_secure_metrics_needs_a_client() -> None:
    with pytest.raises(ValueError, match="client"):
        MetricsServer(None, secure=True)


def test_self_signed_certificate_names_loopback_and_this_host_for_a_year() -> None:
    cert_pem, key_pem = self_signed_certificate()
    cert = x509.load_pem_x509_certificate(cert_pem)
    key = serialization.load_pem_private_key(key_pem, password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    assert key.curve.name == "secp256r1"
    assert cert.public_key() == key.public_key()
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(sans.get_values_for_type(x509.DNSName)) >= {"localhost", socket.gethostname()}
    assert ipaddress.ip_address("127.0.0.1") in sans.get_values_for_type(x509.IPAddress)
    lifetime = cert.not_valid_after_utc - datetime.datetime.now(datetime.UTC)
    assert datetime.timedelta(days=364) < lifetime <= datetime.timedelta(days=365)


@pytest.fixture
async def secure_metrics() -> AsyncIterator[tuple[MetricsServer, FakeReviews]]:
    reviews = FakeReviews()
    server = MetricsServer(reviews, bind_address="127.0.0.1:0")
    await server.start()
    yield server, reviews
    await server.stop()


def trusting(cert_pem: bytes | None) -> ssl.SSLContext:
    """A client context that trusts exactly ``cert_pem`` and checks the host name."""
    assert cert_pem is not None
    return ssl.create_default_context(cadata=cert_pem.decode())


async def scrape(
    server: MetricsServer, token: str | None = None, host: str = "127.0.0.1"
) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        aiohttp.ClientSession() as session,
        session.get(
            f"https://{host}:{server.port}/metrics",
            headers=headers,
            ssl=trusting(server.certificate_pem),
        ) as response,
    ):
        return response.status, await response.text()


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
async def test_generated_certificate_verifies_for_loopback(
    secure_metrics: tuple[MetricsServer, FakeReviews], host: str
) -> None:
    server, _ = secure_metrics
    status, _ = await scrape(server, GOOD_TOKEN, host=host)
    assert status == 200


async def test_secure_metrics_refuses_plain_http(
    secure_metrics: tuple[MetricsServer, FakeReviews],
) -> None:
    server, _ = secure_metrics
    with pytest.raises(aiohttp.ClientError):
        await get(f"http://127.0.0.1:{server.port}/metrics")


async def test_no_token_is_401_without_asking_the_api_server(
    secure_metrics: tuple[MetricsServer, FakeReviews],
) -> None:
    server, reviews = secure_metrics
    assert await scrape(server) == (401, "Unauthorized")
    assert reviews.bodies == []


async def test_unauthenticated_token_is_401(
    secure_metrics: tuple[MetricsServer, FakeReviews],
) -> None:
    server, reviews = secure_metrics
    assert await scrape(server, "forged") == (401, "Unauthorized")
    assert reviews.count("TokenReview") == 1
    assert reviews.count("SubjectAccessReview") == 0


async def test_authenticated_but_denied_is_403(
    secure_metrics: tuple[MetricsServer, FakeReviews],
) -> None:
    server, _ = secure_metrics
    assert await scrape(server, DENIED_TOKEN) == (403, "Authorization denied for user bob")


async def test_allowed_user_reads_metrics_and_the_reviews_carry_the_identity(
    secure_metrics: tuple[MetricsServer, FakeReviews],
) -> None:
    metrics.init_controller_metrics("unit-serving-secure", 1)
    server, reviews = secure_metrics
    status, text = await scrape(server, GOOD_TOKEN)
    assert status == 200
    assert 'controller_runtime_reconcile_total{controller="unit-serving-secure"' in text
    (_, token_review), (_, access_review) = reviews.bodies
    assert token_review["spec"] == {"token": GOOD_TOKEN}
    assert access_review["apiVersion"] == "authorization.k8s.io/v1"
    assert access_review["spec"] == {
        "user": "alice",
        "uid": "u-1",
        "groups": ["team-a", "system:authenticated"],
        "extra": {"scopes": ["read"]},
        "nonResourceAttributes": {"path": "/metrics", "verb": "get"},
    }


async def test_failed_token_review_is_401_and_logs_no_token(
    secure_metrics: tuple[MetricsServer, FakeReviews],
) -> None:
    server, reviews = secure_metrics
    reviews.fail = "TokenReview"
    with capture_logs() as logs:
        assert await scrape(server, GOOD_TOKEN) == (401, "Authentication failed")
    assert logs, "the failure is logged"
    digest = hashlib.sha256(GOOD_TOKEN.encode()).hexdigest()
    assert GOOD_TOKEN not in repr(logs)
    assert digest not in repr(logs)


async def test_failed_access_review_is_500(
    secure_metrics: tuple[MetricsServer, FakeReviews],
) -> None:
    server, reviews = secure_metrics
    reviews.fail = "SubjectAccessReview"
    assert await scrape(server, DENIED_TOKEN) == (500, "Authorization for user bob failed")


# -- cache arithmetic --------------------------------------------------------------------------


def test_ttl_cache_entries_expire_exactly_at_their_ttl() -> None:
    clock = FakeClock()
    cache: TTLCache[str] = TTLCache(clock=clock)
    cache.set("short", "a", ttl=10)
    cache.set("long", "b", ttl=60)
    clock.advance(9.999)
    assert cache["short"] == "a"
    clock.advance(0.001)
    with pytest.raises(KeyError):
        cache["short"]
    assert cache["long"] == "b"
    assert len(cache) == 1  # the expired entry was dropped when found expired


def test_ttl_cache_evicts_the_least_recently_used_beyond_its_bound() -> None:
    cache: TTLCache[int] = TTLCache(max_entries=2, clock=FakeClock())
    cache.set("a", 1, ttl=60)
    cache.set("b", 2, ttl=60)
    assert cache["a"] == 1  # a is now more recent than b
    cache.set("c", 3, ttl=60)
    assert len(cache) == 2
    with pytest.raises(KeyError):
        cache["b"]
    assert (cache["a"], cache["c"]) == (1, 3)


def auth_with_clock() -> tuple[DelegatingAuth, FakeReviews, FakeClock]:
    clock = FakeClock()
    reviews = FakeReviews()
    return DelegatingAuth(reviews, clock=clock), reviews, clock


async def test_authenticated_token_is_cached_for_a_minute() -> None:
    auth, reviews, clock = auth_with_clock()
    user = await auth.authenticate(GOOD_TOKEN)
    assert user == UserInfo(
        "alice", "u-1", ("team-a", "system:authenticated"), {"scopes": ("read",)}
    )
    clock.advance(59.9)
    assert await auth.authenticate(GOOD_TOKEN) == user
    assert reviews.count("TokenReview") == 1
    clock.advance(0.1)
    assert await auth.authenticate(GOOD_TOKEN) == user
    assert reviews.count("TokenReview") == 2


async def test_unauthenticated_token_is_cached_for_ten_seconds() -> None:
    auth, reviews, clock = auth_with_clock()
    assert await auth.authenticate("forged") is None
    clock.advance(9.9)
    assert await auth.authenticate("forged") is None
    assert reviews.count("TokenReview") == 1
    clock.advance(0.1)
    assert await auth.authenticate("forged") is None
    assert reviews.count("TokenReview") == 2


async def test_allowed_decision_is_cached_for_five_minutes_and_denied_for_thirty_seconds() -> None:
    auth, reviews, clock = auth_with_clock()
    alice = await auth.authenticate(GOOD_TOKEN)
    bob = await auth.authenticate(DENIED_TOKEN)
    assert alice is not None and bob is not None
    assert await auth.authorize(alice, "get", "/metrics") is True
    assert await auth.authorize(bob, "get", "/metrics") is False
    assert reviews.count("SubjectAccessReview") == 2

    clock.advance(29.9)
    assert await auth.authorize(bob, "get", "/metrics") is False
    assert reviews.count("SubjectAccessReview") == 2
    clock.advance(0.1)
    assert await auth.authorize(bob, "get", "/metrics") is False
    assert reviews.count("SubjectAccessReview") == 3  # the denial expired

    clock.advance(300 - 30 - 0.1)
    assert await auth.authorize(alice, "get", "/metrics") is True
    assert reviews.count("SubjectAccessReview") == 3
    clock.advance(0.1)
    assert await auth.authorize(alice, "get", "/metrics") is True
    assert reviews.count("SubjectAccessReview") == 4  # the allowance expired


async def test_decisions_are_cached_per_verb_and_path() -> None:
    auth, reviews, _ = auth_with_clock()
    alice = UserInfo("alice")
    await auth.authorize(alice, "get", "/metrics")
    await auth.authorize(alice, "head", "/metrics")
    await auth.authorize(alice, "get", "/other")
    assert reviews.count("SubjectAccessReview") == 3


async def test_ttls_are_configurable() -> None:
    clock = FakeClock()
    reviews = FakeReviews()
    auth = DelegatingAuth(reviews, token_ttl=1, deny_ttl=2, clock=clock)
    bob = await auth.authenticate(DENIED_TOKEN)
    assert bob is not None
    await auth.authorize(bob, "get", "/metrics")
    clock.advance(2)
    await auth.authenticate(DENIED_TOKEN)
    await auth.authorize(bob, "get", "/metrics")
    assert (reviews.count("TokenReview"), reviews.count("SubjectAccessReview")) == (2, 2)


async def test_failed_reviews_are_not_cached() -> None:
    auth, reviews, _ = auth_with_clock()
    reviews.fail = "TokenReview"
    with pytest.raises(ServerError):
        await auth.authenticate(GOOD_TOKEN)
    assert await auth.authenticate(GOOD_TOKEN) is not None
    reviews.fail = "SubjectAccessReview"
    with pytest.raises(ServerError):
        await auth.authorize(UserInfo("alice"), "get", "/metrics")
    assert await auth.authorize(UserInfo("alice"), "get", "/metrics") is True


async def test_token_cache_keys_are_neither_tokens_nor_their_plain_digests() -> None:
    auth, _, _ = auth_with_clock()
    await auth.authenticate(GOOD_TOKEN)
    keys = list(auth._tokens._entries)
    assert len(keys) == 1
    assert GOOD_TOKEN not in keys[0]
    assert keys[0] != hashlib.sha256(GOOD_TOKEN.encode()).hexdigest()


# -- a certificate directory -------------------------------------------------------------------


def write_pair(directory: Path, cert_pem: bytes, key_pem: bytes | None = None) -> None:
    (directory / "tls.crt").write_bytes(cert_pem)
    if key_pem is not None:
        (directory / "tls.key").write_bytes(key_pem)


async def served_certificate(port: int) -> bytes:
    """The DER certificate the server presents (no verification: we only look at it)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
    try:
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    finally:
        writer.close()
        await writer.wait_closed()
    assert isinstance(der, bytes)
    return der


def der(cert_pem: bytes) -> bytes:
    return x509.load_pem_x509_certificate(cert_pem).public_bytes(serialization.Encoding.DER)


async def test_cert_dir_pair_is_served_and_reloaded_when_renewed(tmp_path: Path) -> None:
    first = self_signed_certificate(["127.0.0.1"])
    write_pair(tmp_path, *first)
    server = MetricsServer(
        FakeReviews(), bind_address="127.0.0.1:0", cert_dir=tmp_path, cert_poll_interval=0.02
    )
    await server.start()
    try:
        assert server.port is not None
        port = server.port
        assert server.certificate_pem == first[0]
        assert (await scrape(server, GOOD_TOKEN))[0] == 200

        # Half a renewal (a certificate without its key) does not load: the old pair serves on.
        second = self_signed_certificate(["127.0.0.1"])
        write_pair(tmp_path, second[0])
        await asyncio.sleep(0.1)
        assert await served_certificate(port) == der(first[0])

        write_pair(tmp_path, *second)

        for _ in range(250):
            if await served_certificate(port) == der(second[0]):
                break
            await asyncio.sleep(0.02)
        else:
            pytest.fail("the renewed certificate was not served within 5 s")
        assert (await scrape(server, GOOD_TOKEN))[0] == 200  # verified against the new one
    finally:
        await server.stop()


async def test_cert_dir_without_a_pair_fails_to_start(tmp_path: Path) -> None:
    server = MetricsServer(FakeReviews(), bind_address="127.0.0.1:0", cert_dir=tmp_path)
    with pytest.raises(FileNotFoundError, match=r"tls\.crt"):
        await server.start()
    assert server.port is None


async def test_the_served_certificates_expiry_is_a_gauge_renewals_included(
    tmp_path: Path,
) -> None:
    """crewlet_operator_metrics_certificate_expiry_timestamp_seconds: Prometheus cannot see its
    target's certificate, so the endpoint says when its own expires (an alert's input)."""

    def expiry() -> float | None:
        return metrics.REGISTRY.get_sample_value(
            "crewlet_operator_metrics_certificate_expiry_timestamp_seconds"
        )

    short = self_signed_certificate(["127.0.0.1"], validity=datetime.timedelta(days=3))
    write_pair(tmp_path, *short)
    server = MetricsServer(FakeReviews(), bind_address="127.0.0.1:0", cert_dir=tmp_path)
    await server.start()
    try:
        in_three_days = time.time() + 3 * 86400
        assert abs((expiry() or 0) - in_three_days) < 120
        write_pair(tmp_path, *self_signed_certificate(["127.0.0.1"]))  # renewed for a year
        assert abs((expiry() or 0) - (time.time() + 365 * 86400)) < 2 * 86400
    finally:
        await server.stop()
    assert expiry() == 0, "no certificate served, none to expire"
