"""The library's retry policies (tenacity's), without an API server: what each retries, how
often, when it gives up, and that a cancellation is never retried. On the real API server:
e2e/test_leader.py (the campaign and the renewals), e2e/test_envtest.py (the start-up),
e2e/test_client_retries.py (the client's, on API Priority and Fairness's 429s)."""

from __future__ import annotations

import asyncio
import errno
import socket
import struct
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, cast

import aiohttp
import pytest
from structlog.testing import capture_logs

from crewlet_operator import Client, Resource
from crewlet_operator.envtest.process import ManagedProcess, free_port
from crewlet_operator.errors import (
    ApiError,
    ConflictError,
    ForbiddenError,
    NotFoundError,
    ProcessFailedError,
    ServerError,
    TooManyRequestsError,
    TransportError,
    api_error,
)
from crewlet_operator.finalizer import CONFLICT_RETRIES, Finalizer
from crewlet_operator.kube.config import RestConfig
from crewlet_operator.kube.resources import CONFIG_MAP
from crewlet_operator.kube.retry import (
    DEFAULT_MAX_RETRIES,
    LOST_CONNECTION_WAIT,
    RetryPolicy,
    connection_lost,
    retry_after_seconds,
    retry_wait,
)
from crewlet_operator.leader import LeaderElectionConfig, LeaderElector
from crewlet_operator.metrics import REGISTRY

Object = dict[str, Any]
WIDGET = Resource("example.com", "v1", "Widget", "widgets", True)


# -- the leader's campaign and renewals --------------------------------------------------------


class Leases:
    """A Lease API whose reads fail (a 503) or hang, as a test says, counting the reads."""

    def __init__(self) -> None:
        self.reads = 0
        self.hang = False
        self.held_by: str | None = None

    async def get(self, resource: Resource, name: str, namespace: str | None = None) -> Object:
        self.reads += 1
        if self.hang:
            await asyncio.Event().wait()
        if self.held_by is None:
            raise ServerError(503, {"message": "unavailable"}, method="GET", path="/lease")
        return {
            "metadata": {"name": name, "namespace": namespace, "resourceVersion": "1"},
            "spec": {"holderIdentity": self.held_by, "leaseDurationSeconds": 15},
        }

    async def list(self, resource: Resource, scope: Any = None) -> Any:
        await asyncio.Event().wait()  # the watches never see a change

    def watch(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("not listed, not watched")


def elector(leases: Leases) -> LeaderElector:
    config = LeaderElectionConfig(
        "leader", "ns", identity="me", lease_duration=1, renew_deadline=0.35, retry_period=0.1
    )
    return LeaderElector(cast(Client, leases), config)


async def test_failed_renewals_are_tried_every_retry_period_until_the_deadline() -> None:
    leases = Leases()
    mine = elector(leases)
    mine._lead(True)
    started = time.monotonic()
    with capture_logs() as logs:
        await asyncio.wait_for(mine.hold(), 5)
    elapsed = time.monotonic() - started
    # Tries at 0.1, 0.2 and 0.3 s; at 0.4 s the deadline (0.35 s) has passed: no fourth.
    assert leases.reads == 3
    assert 0.39 <= elapsed < 0.6, elapsed
    assert not mine.is_leader
    assert [(e["log_level"], e["event"]) for e in logs] == [
        *[("debug", "lease read failed")] * 3,
        ("error", "could not renew the lease within the deadline; stepping down"),
    ]


async def test_a_renewal_that_hangs_is_cut_off_at_the_deadline() -> None:
    leases = Leases()
    leases.hang = True
    mine = elector(leases)
    mine._lead(True)
    started = time.monotonic()
    await asyncio.wait_for(mine.hold(), 5)
    assert leases.reads == 1
    assert 0.34 <= time.monotonic() - started < 0.6
    assert not mine.is_leader


async def test_a_cancelled_renewal_is_not_retried() -> None:
    leases = Leases()
    leases.hang = True
    mine = elector(leases)
    holding = asyncio.create_task(mine.hold())
    await asyncio.sleep(0.15)  # in its first attempt
    holding.cancel()
    with pytest.raises(asyncio.CancelledError):
        await holding
    assert leases.reads == 1


async def test_the_campaign_says_standby_once_and_retries_until_cancelled() -> None:
    leases = Leases()
    leases.held_by = "them"
    mine = elector(leases)
    followed: list[None] = []
    acquiring = asyncio.create_task(mine.acquire(lambda: followed.append(None)))
    await asyncio.sleep(0.5)  # attempts every 0.1 to 0.12 s
    assert followed == [None]
    assert leases.reads >= 3
    acquiring.cancel()
    with pytest.raises(asyncio.CancelledError):
        await acquiring
    reads = leases.reads
    await asyncio.sleep(0.3)
    assert leases.reads == reads, "no attempt after the cancellation"
    assert not mine.is_leader


async def test_a_lease_change_wakes_the_campaign_before_its_retry_period() -> None:
    leases = Leases()
    leases.held_by = "them"
    config = LeaderElectionConfig("leader", "ns", identity="me", retry_period=5.0)
    mine = LeaderElector(cast(Client, leases), config)
    acquiring = asyncio.create_task(mine.acquire())
    await asyncio.sleep(0.05)
    assert leases.reads == 1
    mine._changed.set()
    await asyncio.sleep(0.05)
    assert leases.reads == 2, "woken by the change, not after 5 s"
    acquiring.cancel()
    with pytest.raises(asyncio.CancelledError):
        await acquiring


# -- the finalizer's conflicts -----------------------------------------------------------------


class Widgets:
    """Patches that conflict ``conflicts`` times, then succeed; reads that count."""

    def __init__(self, conflicts: int) -> None:
        self.conflicts = conflicts
        self.patches = 0
        self.reads = 0

    async def patch(self, resource: Resource, name: str, patch: Object, namespace: str) -> Object:
        self.patches += 1
        if self.patches <= self.conflicts:
            raise ConflictError(409, {"reason": "Conflict"}, method="PATCH", path="/w")
        return {"metadata": {"name": name, **patch["metadata"]}}

    async def get(self, resource: Resource, name: str, namespace: str) -> Object:
        self.reads += 1
        return widget(str(self.reads + 1))


def widget(version: str) -> Object:
    return {"metadata": {"name": "w", "namespace": "ns", "resourceVersion": version}}


async def _cleanup(obj: Object) -> None:
    pass


async def test_a_conflict_reads_again_and_patches_again() -> None:
    widgets = Widgets(conflicts=2)
    finalizer = Finalizer(cast(Client, widgets), WIDGET, "example.com/cleanup", _cleanup)
    added = await finalizer.handle(widget("1"))
    assert added is not None
    assert added["metadata"] == {
        "name": "w",
        "finalizers": ["example.com/cleanup"],
        "resourceVersion": "3",
    }
    assert (widgets.patches, widgets.reads) == (3, 2)


async def test_the_last_of_the_conflicts_is_raised_as_it_is() -> None:
    widgets = Widgets(conflicts=100)
    finalizer = Finalizer(cast(Client, widgets), WIDGET, "example.com/cleanup", _cleanup)
    with pytest.raises(ConflictError):
        await finalizer.handle(widget("1"))
    assert (widgets.patches, widgets.reads) == (CONFLICT_RETRIES, CONFLICT_RETRIES - 1)


async def test_an_object_gone_meanwhile_ends_the_retries() -> None:
    class Gone(Widgets):
        async def get(self, resource: Resource, name: str, namespace: str) -> Object:
            raise NotFoundError(404)

    widgets = Gone(conflicts=1)
    finalizer = Finalizer(cast(Client, widgets), WIDGET, "example.com/cleanup", _cleanup)
    assert await finalizer.handle(widget("1")) is None
    assert widgets.patches == 1


# -- envtest's start-up waits ------------------------------------------------------------------


class Process(ManagedProcess):
    """A process that is running until a test says it exited."""

    def __init__(self, log_dir: Path) -> None:
        super().__init__("fake", ["true"], log_dir)
        self.alive = True

    def running(self) -> bool:
        return self.alive


def test_a_probe_is_polled_until_ready_and_its_errors_count_as_not_yet(tmp_path: Path) -> None:
    answers: list[bool | Exception] = [False, OSError("refused"), False, True]

    def probe() -> bool:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    Process(tmp_path).wait_ready(probe, timeout=5, interval=0.01)
    assert answers == []


def test_a_process_that_exits_fails_at_once(tmp_path: Path) -> None:
    process = Process(tmp_path)
    calls: list[None] = []

    def probe() -> bool:
        calls.append(None)
        process.alive = False
        return False

    started = time.monotonic()
    with pytest.raises(ProcessFailedError, match="fake exited early"):
        process.wait_ready(probe, timeout=5, interval=0.01)
    assert len(calls) == 1
    assert time.monotonic() - started < 1


def test_a_probe_never_ready_fails_after_the_timeout(tmp_path: Path) -> None:
    started = time.monotonic()
    with pytest.raises(ProcessFailedError, match=r"fake not ready after 0s; no log at "):
        Process(tmp_path).wait_ready(lambda: False, timeout=0.2, interval=0.05)
    assert 0.2 <= time.monotonic() - started < 1


# -- the client's requests ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        ("1", 1),
        (" 3 ", 3),
        ("0", 0),
        (None, None),
        ("", None),
        ("-1", None),
        ("1.5", None),
        ("\u0663", None),  # a digit, but not an ASCII one
        ("Wed, 21 Oct 2015 07:28:00 GMT", None),  # an HTTP date: client-go ignores it too
    ],
)
def test_retry_after_counts_whole_seconds_only(header: str | None, seconds: int | None) -> None:
    assert retry_after_seconds(header) == seconds


def refused(status: int, retry_after: int | None, method: str = "GET") -> ApiError:
    return api_error(status, {}, method=method, path="/x", retry_after=retry_after)


@pytest.mark.parametrize("method", ["GET", "WATCH", "POST", "PUT", "PATCH", "DELETE"])
@pytest.mark.parametrize(
    ("status", "retry_after", "wait"),
    [
        (429, 1, 1.0),  # API Priority and Fairness turned it away: no handler saw it
        (429, 0, 0.0),
        (503, 5, 5.0),  # a 5xx that asks to be asked again
        (500, 2, 2.0),
        (429, None, None),  # no Retry-After, no retry: client-go's checkWait
        (503, None, None),
        (404, 1, None),  # only a 429 or a 5xx
        (409, 1, None),
    ],
)
def test_an_answer_is_retried_when_it_asks_to_be_whatever_the_verb(
    method: str, status: int, retry_after: int | None, wait: float | None
) -> None:
    assert retry_wait(method, refused(status, retry_after, method)) == wait


def lost(cause: BaseException) -> TransportError:
    error = TransportError("lost")
    error.__cause__ = cause
    return error


LOST = [
    aiohttp.ServerDisconnectedError(),
    aiohttp.ClientPayloadError("Response payload is not completed"),
    aiohttp.ClientOSError(errno.ECONNRESET, "Connection reset by peer"),
    ConnectionResetError(),
    BrokenPipeError(),
]
NOT_LOST = [
    aiohttp.ClientConnectorError(
        cast(Any, None), ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused")
    ),
    TimeoutError(),
    aiohttp.ClientSSLError(cast(Any, None), OSError("certificate verify failed")),
    None,
]


@pytest.mark.parametrize("cause", LOST, ids=repr)
def test_a_read_whose_connection_broke_is_retried_after_a_second_and_a_write_is_not(
    cause: BaseException,
) -> None:
    assert connection_lost(cause)
    for method in ("GET", "WATCH"):
        assert retry_wait(method, lost(cause)) == LOST_CONNECTION_WAIT
    for method in ("POST", "PUT", "PATCH", "DELETE"):  # the server may have acted on it
        assert retry_wait(method, lost(cause)) is None


@pytest.mark.parametrize("cause", NOT_LOST, ids=repr)
def test_a_refused_connection_a_timeout_or_a_tls_failure_is_not_retried(
    cause: BaseException | None,
) -> None:
    assert not connection_lost(cause)
    assert retry_wait("GET", lost(cause) if cause is not None else TransportError("x")) is None


@pytest.mark.parametrize(
    "error", [asyncio.CancelledError(), ValueError("not JSON"), ForbiddenError(403)], ids=repr
)
def test_a_cancellation_or_any_other_error_is_not_retried(error: BaseException) -> None:
    assert retry_wait("GET", error) is None


def test_a_policy_counts_and_waits_forward() -> None:
    assert RetryPolicy().max_retries == DEFAULT_MAX_RETRIES == 10  # client-go's maxRetries
    with pytest.raises(ValueError, match="forward"):
        RetryPolicy(max_retries=-1)
    with pytest.raises(ValueError, match="forward"):
        RetryPolicy(max_wait=-0.5)


class Answers:
    """A request's attempts: each raises the next error given, then the answer is b"{}"."""

    def __init__(self, *errors: BaseException) -> None:
        self.errors = list(errors)
        self.attempts = 0
        self.retried: list[str] = []

    async def attempt(self) -> bytes:
        self.attempts += 1
        if self.errors:
            raise self.errors.pop(0)
        return b"{}"


Send = Callable[
    [RetryPolicy, str, Answers, Callable[[], Awaitable[bytes]]], Coroutine[Any, Any, bytes]
]


@pytest.fixture(params=["call", "retrying"])
def send(request: pytest.FixtureRequest) -> Send:
    """Each entry to a policy: ``call`` (the transport's: the first attempt directly, the rest
    through tenacity) and ``retrying`` (tenacity's from the first): the same attempts, waits and
    retries."""

    async def through_call(
        policy: RetryPolicy, method: str, answers: Answers, attempt: Callable[[], Awaitable[bytes]]
    ) -> bytes:
        return await policy.call(method, attempt, answers.retried.append)

    async def through_retrying(
        policy: RetryPolicy, method: str, answers: Answers, attempt: Callable[[], Awaitable[bytes]]
    ) -> bytes:
        result: bytes = await policy.retrying(method, answers.retried.append)(attempt)
        return result

    return through_call if request.param == "call" else through_retrying


async def test_a_throttled_request_waits_what_it_is_asked_capped_and_then_succeeds(
    send: Send,
) -> None:
    answers = Answers(refused(429, 1), refused(503, 3600), refused(429, 0))
    policy = RetryPolicy(max_wait=0.05)
    started = time.monotonic()
    assert await send(policy, "POST", answers, answers.attempt) == b"{}"
    # 1 s capped at 0.05, an hour capped at 0.05, and 0 s.
    assert 0.1 <= time.monotonic() - started < 0.5
    assert answers.attempts == 4
    assert answers.retried == ["429", "503", "429"]


async def test_after_the_last_retry_the_last_error_reaches_the_caller_as_it_is(
    send: Send,
) -> None:
    last = refused(429, 0)
    answers = Answers(*[refused(429, 0) for _ in range(DEFAULT_MAX_RETRIES)], last)
    with pytest.raises(TooManyRequestsError) as raised:
        await send(RetryPolicy(), "GET", answers, answers.attempt)
    assert raised.value is last
    assert raised.value.retry_after == 0
    assert answers.attempts == DEFAULT_MAX_RETRIES + 1
    assert len(answers.retried) == DEFAULT_MAX_RETRIES


async def test_no_retries_hands_the_first_429_to_the_caller(send: Send) -> None:
    answers = Answers(refused(429, 0))
    with pytest.raises(TooManyRequestsError):
        await send(RetryPolicy(max_retries=0), "GET", answers, answers.attempt)
    assert (answers.attempts, answers.retried) == (1, [])


async def test_an_error_that_is_not_retried_reaches_the_caller_at_once(send: Send) -> None:
    answers = Answers(lost(aiohttp.ServerDisconnectedError()))
    with pytest.raises(TransportError):
        await send(RetryPolicy(), "PATCH", answers, answers.attempt)
    assert (answers.attempts, answers.retried) == (1, [])


async def test_a_request_cancelled_while_it_waits_to_retry_is_not_retried(send: Send) -> None:
    answers = Answers(refused(429, 5))
    sending = asyncio.create_task(send(RetryPolicy(), "GET", answers, answers.attempt))
    await asyncio.sleep(0.05)  # waiting its 5 s
    sending.cancel()
    with pytest.raises(asyncio.CancelledError):
        await sending
    assert (answers.attempts, answers.retried) == (1, ["429"])


async def test_a_request_cancelled_in_its_attempt_is_not_retried(send: Send) -> None:
    answers = Answers()

    async def hang() -> bytes:
        answers.attempts += 1
        await asyncio.Event().wait()
        return b""

    sending = asyncio.create_task(send(RetryPolicy(), "GET", answers, hang))
    await asyncio.sleep(0.05)
    sending.cancel()
    with pytest.raises(asyncio.CancelledError):
        await sending
    assert (answers.attempts, answers.retried) == (1, [])


# A peer that breaks every connection once it has read the request: it closes it, or resets
# it (SO_LINGER 0). What aiohttp raises for each is what the client must call a lost connection.


@pytest.fixture
async def breaking_peer(request: pytest.FixtureRequest) -> AsyncIterator[tuple[str, list[None]]]:
    connections: list[None] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(None)
        await reader.readuntil(b"\r\n\r\n")
        if request.param == "reset":
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        yield f"http://127.0.0.1:{port}", connections


def retries_counted(host: str, verb: str, code: str) -> float:
    labels = {"code": code, "verb": verb, "host": host}
    return REGISTRY.get_sample_value("rest_client_request_retries_total", labels) or 0.0


@pytest.mark.parametrize("breaking_peer", ["close", "reset"], indirect=True)
async def test_reads_on_a_breaking_connection_are_retried_and_writes_are_not(
    breaking_peer: tuple[str, list[None]],
) -> None:
    host, connections = breaking_peer
    netloc = host.removeprefix("http://")
    before = retries_counted(netloc, "GET", "<error>")
    policy = RetryPolicy(max_retries=2, max_wait=0.01)
    async with Client(RestConfig(host=host, token="t"), retries=policy) as client:
        with pytest.raises(TransportError) as read:
            await client.get(CONFIG_MAP, "a", "ns")
        assert connection_lost(read.value.__cause__), repr(read.value.__cause__)
        # Three attempts, each sent twice: aiohttp itself sends an idempotent request once more,
        # at once, when its connection breaks (RFC 9112 section 9.3.1, meant for a kept-alive
        # connection the server had closed).
        assert len(connections) == 3 * 2
        assert retries_counted(netloc, "GET", "<error>") == before + 2
        connections.clear()
        with pytest.raises(TransportError):
            await client.create(CONFIG_MAP, {"metadata": {"name": "a", "namespace": "ns"}})
        assert len(connections) == 1
        connections.clear()
        with pytest.raises(TransportError):
            async for _ in client.watch(CONFIG_MAP, "ns"):
                pass
        assert len(connections) == 3 * 2


async def test_a_read_refused_a_connection_is_not_retried() -> None:
    host = f"127.0.0.1:{free_port()}"  # nothing listens there
    before = retries_counted(host, "GET", "<error>")
    async with Client(RestConfig(host=f"http://{host}", token="t")) as client:
        started = time.monotonic()
        with pytest.raises(TransportError) as read:
            await client.get(CONFIG_MAP, "a", "ns")
    assert isinstance(read.value.__cause__, aiohttp.ClientConnectorError)
    assert time.monotonic() - started < LOST_CONNECTION_WAIT
    assert retries_counted(host, "GET", "<error>") == before
