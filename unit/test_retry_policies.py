"""The library's retry policies (tenacity's), without an API server: what each retries, how
often, when it gives up, and that a cancellation is never retried. On the real API server:
e2e/test_leader.py (the campaign and the renewals), e2e/test_envtest.py (the start-up)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any, cast

import pytest
from structlog.testing import capture_logs

from crewlet_operator import Client, Resource
from crewlet_operator.envtest.process import ManagedProcess
from crewlet_operator.errors import ConflictError, NotFoundError, ProcessFailedError, ServerError
from crewlet_operator.finalizer import CONFLICT_RETRIES, Finalizer
from crewlet_operator.leader import LeaderElectionConfig, LeaderElector

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
