"""Leader election on a coordination.k8s.io Lease, with client-go's semantics.

- Timings default to client-go's: lease 15 s, renew deadline 10 s, retry 2 s. The deadline is
  shorter than the lease so that a leader that cannot renew gives up *before* any other replica
  may consider the lease expired: two replicas never act at once.
- Followers judge expiry by their own monotonic clock: the lease counts as expired
  ``leaseDurationSeconds`` after they last *saw it change*, never by comparing ``renewTime``
  with their wall clock, so clock skew between nodes does not matter.
- A follower tries to acquire at the moment the lease it observed expires (by that clock), not
  at its next retry tick: a crashed leader is replaced ``leaseDurationSeconds`` after its last
  renewal was seen, plus the latency of one request.
- On graceful shutdown the leader releases the lease (holder cleared, duration 1 s) and a
  follower, which watches the Lease, takes over at once instead of after the full duration.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import socket
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog

from crewlet_operator import metrics
from crewlet_operator.errors import (
    CrewletError,
    ForbiddenError,
    NotFoundError,
    UnauthorizedError,
)
from crewlet_operator.kube.client import Client
from crewlet_operator.kube.resources import LEASE
from crewlet_operator.objects import micro_time

log = structlog.get_logger("crewlet_operator.leader")

JITTER = 1.2
"""Followers retry after ``retry_period`` times up to this factor, like client-go."""


def default_identity() -> str:
    """``<hostname>_<uuid>``: unique even when two replicas share a hostname."""
    return f"{socket.gethostname()}_{uuid.uuid4()}"


@dataclass
class LeaderElectionConfig:
    """Which Lease, who we are, and the timings (seconds)."""

    name: str
    namespace: str
    identity: str = field(default_factory=default_identity)
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    release_on_cancel: bool = True
    annotations: Callable[[], Mapping[str, str]] | None = None
    """Called before each write of the Lease by this replica (its acquisition, each renewal
    and its release): what it returns is merged into the Lease's annotations, in the same
    request. Empty leaves them as they are. For a leader to leave word for the next one."""

    def __post_init__(self) -> None:
        if not self.lease_duration > self.renew_deadline > JITTER * self.retry_period > 0:
            raise ValueError(
                "need lease_duration > renew_deadline > 1.2 * retry_period > 0 (got "
                f"{self.lease_duration}, {self.renew_deadline}, {self.retry_period})"
            )


class LeaderElector:
    """Acquires, renews and releases one Lease.

    :meth:`acquire` returns once this replica leads; :meth:`hold` then renews until the lease
    is lost (and returns: stop acting at once); :meth:`release` hands it over.
    """

    def __init__(self, client: Client, config: LeaderElectionConfig) -> None:
        self.client = client
        self.config = config
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0
        self._observed_duration = config.lease_duration
        self._resource_version: str | None = None
        self._changed = asyncio.Event()
        self._watch_denied = False
        # False leaves only client-go's retry ticks (the e2e test's control for the wake-up).
        self._wake_at_expiry = True
        self.is_leader = False
        self.previous_holder_seen_at: float | None = None
        """Once this replica has taken the lease over from another holder: when (monotonic
        seconds) it last saw another holder renew it, the last moment it knew the previous
        leader at work. A release does not count: a leader that stops takes no new work, so
        what came after its last renewal may be waiting for the next leader. None when it has
        never seen another holder (it created the Lease, or found it released)."""
        self._other_renewed_at: float | None = None
        self.annotations_when_acquired: dict[str, str] = {}
        """The Lease's annotations as this replica found them when it acquired it: what the
        previous holder last wrote there (see :attr:`LeaderElectionConfig.annotations`)."""
        self._gauge = metrics.LEADER_ELECTION_MASTER_STATUS.labels(name=config.name)
        self._gauge.set(0)
        self._log = log.bind(lease=f"{config.namespace}/{config.name}", identity=config.identity)

    async def acquire(self, on_follow: Callable[[], object] | None = None) -> None:
        """Wait until this replica holds the lease; ``on_follow`` is called once if the first
        attempt finds another holder's live lease (this replica is a standby, for now)."""
        watcher = asyncio.create_task(self._watch_lease(), name="lease watch")
        try:
            while not await self._try():
                if on_follow is not None:
                    on_follow()
                    on_follow = None
                self._changed.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), self._next_try_in())
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
        self._lead(True)
        self._log.info("acquired the lease; leading")

    def _next_try_in(self) -> float:
        """Seconds until the next attempt: the jittered retry period, or less when the observed
        lease expires sooner. The watch wakes the loop earlier still when the Lease changes."""
        delay = self.config.retry_period * random.uniform(1.0, JITTER)
        until_expiry = self._observed_at + self._observed_duration - time.monotonic()
        # Not past expiry: a lease seen expired and still not taken (a failed write, an
        # unreachable API server) is retried at the retry period, not in a tight loop.
        if self._wake_at_expiry and 0 < until_expiry < delay:
            return until_expiry
        return delay

    async def hold(self) -> None:
        """Renew every ``retry_period``; return when no renewal succeeded within
        ``renew_deadline`` (the caller must stop acting immediately)."""
        last_renewed = time.monotonic()
        while True:
            await asyncio.sleep(self.config.retry_period)
            deadline = last_renewed + self.config.renew_deadline
            remaining = deadline - time.monotonic()
            renewed = False
            if remaining > 0:
                with contextlib.suppress(TimeoutError):
                    renewed = await asyncio.wait_for(self._try(), remaining)
            if renewed:
                last_renewed = time.monotonic()
            elif time.monotonic() >= deadline:
                self._lead(False)
                self._log.error("could not renew the lease within the deadline; stepping down")
                return

    async def release(self) -> None:
        """Give the lease up so a follower takes over now (only if we still hold it)."""
        if not self.is_leader or not self.config.release_on_cancel:
            self._lead(False)
            return
        self._lead(False)
        try:
            lease = await self.client.get(LEASE, self.config.name, self.config.namespace)
            spec = lease.get("spec", {})
            if spec.get("holderIdentity") != self.config.identity:
                return
            lease["spec"] = {
                **spec,
                "holderIdentity": "",
                "leaseDurationSeconds": 1,
                "renewTime": micro_time(),
            }
            self._annotate(lease)
            await self.client.replace(LEASE, lease)
            self._log.info("released the lease")
        except CrewletError as exc:
            self._log.warning("could not release the lease", error=str(exc))

    def _annotate(self, lease: dict[str, Any]) -> None:
        """Merge the configured annotations into ``lease`` before it is written."""
        if self.config.annotations is None:
            return
        extra = dict(self.config.annotations())
        if extra:
            meta = lease.setdefault("metadata", {})
            meta["annotations"] = {**(meta.get("annotations") or {}), **extra}

    def _lead(self, leading: bool) -> None:
        self.is_leader = leading
        self._gauge.set(1 if leading else 0)

    async def _try(self) -> bool:
        """One attempt to acquire or renew; False when another holder's lease is still live."""
        cfg = self.config
        now = micro_time()
        try:
            lease = await self.client.get(LEASE, cfg.name, cfg.namespace)
        except NotFoundError:
            try:
                await self.client.create(
                    LEASE,
                    {
                        "metadata": {"name": cfg.name, "namespace": cfg.namespace},
                        "spec": self._spec(now, now, 0),
                    },
                )
            except CrewletError as exc:  # AlreadyExists: another replica created it first
                self._log.debug("lease create failed", error=str(exc))
                return False
            return True
        except CrewletError as exc:
            self._log.debug("lease read failed", error=str(exc))
            return False
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        self._observe(lease)
        held_by_other = holder and holder != cfg.identity
        if held_by_other and time.monotonic() < self._observed_at + self._observed_duration:
            return False
        transitions = int(spec.get("leaseTransitions") or 0)
        if holder == cfg.identity:
            new_spec = self._spec(spec.get("acquireTime") or now, now, transitions)
        else:
            new_spec = self._spec(now, now, transitions + 1)
        found = dict((lease.get("metadata") or {}).get("annotations") or {})
        lease["spec"] = new_spec
        self._annotate(lease)
        try:
            updated = await self.client.replace(LEASE, lease)
        except CrewletError as exc:  # a conflict means someone else wrote first
            self._log.debug("lease update failed", error=str(exc))
            return False
        if holder != cfg.identity:
            self.previous_holder_seen_at = self._other_renewed_at
            self.annotations_when_acquired = found
        self._observe(updated)
        return True

    def _spec(self, acquired: str, renewed: str, transitions: int) -> dict[str, Any]:
        return {
            "holderIdentity": self.config.identity,
            "leaseDurationSeconds": math.ceil(self.config.lease_duration),
            "acquireTime": acquired,
            "renewTime": renewed,
            "leaseTransitions": transitions,
        }

    def _observe(self, lease: dict[str, Any]) -> None:
        spec = lease.get("spec") or {}
        record = (
            spec.get("holderIdentity"),
            spec.get("renewTime"),
            spec.get("acquireTime"),
            spec.get("leaseDurationSeconds"),
            spec.get("leaseTransitions"),
        )
        if record != self._observed:
            self._observed = record
            self._observed_at = time.monotonic()
            self._observed_duration = float(spec.get("leaseDurationSeconds") or 0)
            if spec.get("holderIdentity") not in (None, "", self.config.identity):
                self._other_renewed_at = self._observed_at

    async def _watch_lease(self) -> None:
        """Wake the acquire loop whenever the Lease changes (a release is taken at once)."""
        selector = f"metadata.name={self.config.name}"
        while True:
            try:
                listed = await self.client.list(
                    LEASE, self.config.namespace, field_selector=selector
                )
                async for _event in self.client.watch(
                    LEASE,
                    self.config.namespace,
                    field_selector=selector,
                    resource_version=listed.resource_version,
                    timeout_seconds=60,
                    inactivity_timeout=90,
                ):
                    self._changed.set()
            except (ForbiddenError, UnauthorizedError) as denied:
                # Acquiring still works (it reads the Lease each retry period and when the lease
                # it saw expires), but a release is then noticed up to a retry period late. Say
                # so once: the RBAC a leader needs is get, create and update on the Lease; the
                # watch needs list and watch as well.
                if not self._watch_denied:
                    self._watch_denied = True
                    self._log.warning(
                        "may not watch the lease: falling back to polling it every retry "
                        "period; grant list and watch on leases",
                        error=denied.message or denied.reason,
                    )
                await asyncio.sleep(self.config.retry_period)
            except CrewletError:
                await asyncio.sleep(self.config.retry_period)
