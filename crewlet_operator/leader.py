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
- With ``pod`` (the replica's Pod, from the downward API), a follower takes a crashed leader's
  lease before it expires, on the API server's word that the leader's process is gone: its Pod
  deleted, or its container terminated or restarted since it acquired
  (:mod:`crewlet_operator.incarnation`). Without such evidence (a node lost, a partition) it
  waits for the lease to expire, as above.
- With ``exclusive_labels`` the Lease is one of a kind across the cluster: every install of a
  controller elects on a Lease of its own namespace, so two installs would each elect a leader
  and act on the same objects. Each puts the labels on its Lease and does not lead while
  another Lease with them is held and live, by the same monotonic rule (:class:`RivalLeases`).
  When two acquire at once, the older Lease takes precedence (:func:`precedence`).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import math
import random
import socket
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_result,
    wait_fixed,
)

from crewlet_operator import metrics
from crewlet_operator._tasks import cancel_and_wait
from crewlet_operator.errors import (
    CrewletError,
    ForbiddenError,
    LeadershipLostError,
    NotFoundError,
    UnauthorizedError,
)
from crewlet_operator.incarnation import HOLDER_ANNOTATION, Evidence, Holder, PodRef, holder_gone
from crewlet_operator.kube.client import Client, Scope, WatchParams
from crewlet_operator.kube.resources import LEASE, POD, Resource
from crewlet_operator.label_selector import validate_label_selector
from crewlet_operator.objects import micro_time

__all__ = [
    "LeaderElectionConfig",
    "LeaderElector",
    "RivalLease",
    "default_identity",
]

log = structlog.get_logger("crewlet_operator.leader")

JITTER = 1.2
"""Followers retry after ``retry_period`` times up to this factor, like client-go."""


def default_identity() -> str:
    """``<hostname>_<uuid>``: unique even when two replicas share a hostname."""
    return f"{socket.gethostname()}_{uuid.uuid4()}"


def _record(spec: Mapping[str, Any]) -> tuple[Any, ...]:
    """What a change of a Lease is judged by (client-go compares the whole leader record)."""
    return (
        spec.get("holderIdentity"),
        spec.get("renewTime"),
        spec.get("acquireTime"),
        spec.get("leaseDurationSeconds"),
        spec.get("leaseTransitions"),
    )


Precedence = tuple[datetime.datetime, str, str]


def precedence(created: str, namespace: str, name: str) -> Precedence:
    """Where a Lease with exclusive labels stands among the others: the lower comes first.

    The older Lease (``metadata.creationTimestamp``, set by the API server) comes first; ties
    (the timestamp counts whole seconds) go by namespace, then name, so every replica of every
    install orders them alike. The order settles only who gives way when two installs acquired
    at once: a replica never takes its lease while another install's is live, whatever their
    order, and a leader never yields to a Lease that comes after its own.
    """
    try:
        moment = datetime.datetime.fromisoformat(created)
    except ValueError:  # no timestamp: a Lease the API server has not stored
        moment = datetime.datetime.max.replace(tzinfo=datetime.UTC)
    return (moment, namespace, name)


@dataclass(frozen=True)
class RivalLease:
    """Another Lease with the same exclusive labels (another install's), as last listed."""

    namespace: str
    name: str
    holder: str
    """Its ``holderIdentity``: the replica of the other install that holds it."""
    created: str
    """Its ``metadata.creationTimestamp``."""

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def precedence(self) -> Precedence:
        """Its place in the order of :func:`precedence`."""
        return precedence(self.created, self.namespace, self.name)


@dataclass
class _Sighting:
    lease: RivalLease
    record: tuple[Any, ...]
    changed_at: float
    duration: float

    def expires_in(self, now: float) -> float:
        """Seconds until it expires unless it changes (not above zero: not live)."""
        return self.changed_at + self.duration - now if self.lease.holder else 0.0


class RivalLeases:
    """The other Leases with the exclusive labels, and when this replica saw each change.

    A rival is *live* while it has a holder and was seen to change within its
    ``leaseDurationSeconds``, by this process's monotonic clock: client-go's rule for a
    follower, so clock skew between nodes does not matter (``renewTime`` is never compared
    with the local clock). A rival seen for the first time counts as just renewed: it is live
    until it has stayed unchanged for its duration. Its duration is trusted up to
    ``max_duration`` (this replica's own lease duration): a Lease written with a duration of
    years, and never renewed, is not live for years.
    """

    def __init__(self, namespace: str, name: str, max_duration: float) -> None:
        self._own = (namespace, name)
        self._max_duration = max_duration
        self._seen: dict[tuple[str, str], _Sighting] = {}

    def observe(self, leases: Iterable[Mapping[str, Any]], now: float) -> None:
        """Take a list of the Leases with the labels, read at ``now`` (monotonic seconds). This
        replica's own Lease is left out; a rival no longer listed is forgotten."""
        seen: dict[tuple[str, str], _Sighting] = {}
        for lease in leases:
            meta = lease.get("metadata") or {}
            key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
            if key == self._own:
                continue
            spec = lease.get("spec") or {}
            record = _record(spec)
            before = self._seen.get(key)
            seen[key] = _Sighting(
                RivalLease(
                    namespace=key[0],
                    name=key[1],
                    holder=str(spec.get("holderIdentity") or ""),
                    created=str(meta.get("creationTimestamp") or ""),
                ),
                record,
                before.changed_at if before is not None and before.record == record else now,
                min(float(spec.get("leaseDurationSeconds") or 0), self._max_duration),
            )
        self._seen = seen

    def live(self, now: float) -> list[RivalLease]:
        """The live rivals, the first in precedence first."""
        live = [s.lease for s in self._seen.values() if s.expires_in(now) > 0]
        return sorted(live, key=lambda lease: lease.precedence)

    def released(self, now: float, within: float) -> list[RivalLease]:
        """The rivals with no holder that were seen to change within the last ``within``
        seconds (seen for the first time: just now): released that recently."""
        return [
            s.lease
            for s in self._seen.values()
            if not s.lease.holder and now - s.changed_at < within
        ]

    def expires_in(self, now: float) -> float | None:
        """Seconds until the first live rival expires, unless it changes; None if none is live."""
        left = [s.expires_in(now) for s in self._seen.values()]
        return min((seconds for seconds in left if seconds > 0), default=None)


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
    exclusive_labels: Mapping[str, str] | None = None
    """Labels that make this Lease one of a kind in the cluster, for a controller of which one
    install may act at a time. They are put on the Lease with each write of it, and this
    replica does not take its lease while another Lease carrying them (in any namespace, or
    under another name) is held and live: another install leads. It writes nothing meanwhile,
    and says why (:attr:`LeaderElector.blocked_by`, a warning). When two installs acquire at
    once, the one whose Lease comes later in :func:`precedence` gives its lease up again; a
    leader that finds a live Lease ahead of its own steps down (its :meth:`~LeaderElector.hold`
    returns, as when a renewal fails). Needs ``get``, ``list`` and ``watch`` on Leases in every
    namespace. None (the default): only this Lease counts.

    Whoever may write a Lease with these labels can keep this controller from leading, and
    Kubernetes' own ``admin`` and ``edit`` roles let a namespace's editors write Leases there:
    hold the labels with an admission policy that admits them only from your installs. The
    Crewlet operator's chart does it with a ValidatingAdmissionPolicy that asks the API
    server's authorizer whether the writer may do what only an install may (``authorizer``
    in CEL). A rival's ``leaseDurationSeconds`` is trusted up to ``lease_duration``, never
    beyond."""
    labels: Mapping[str, str] | None = None
    """Labels put on the Lease with each write of it, for others to find it by (a shard
    member's ring: see :mod:`crewlet_operator.sharding`)."""
    pod: PodRef | None = None
    """The Pod and container this replica runs in (:meth:`PodRef.from_env`). With it, the
    replica records them on the Lease it holds, and, as a standby, takes a live lease at once on
    the API server's evidence that its holder's process is gone, as
    :mod:`crewlet_operator.incarnation` says. Needs ``get``, ``list`` and ``watch`` on Pods in
    the namespace of the holders' Pods (the Lease's, usually). None (the default): a standby
    waits for the lease to expire."""

    def __post_init__(self) -> None:
        if not self.lease_duration > self.renew_deadline > JITTER * self.retry_period > 0:
            raise ValueError(
                "need lease_duration > renew_deadline > 1.2 * retry_period > 0 (got "
                f"{self.lease_duration}, {self.renew_deadline}, {self.retry_period})"
            )
        if self.exclusive_labels is not None:
            if not self.exclusive_labels:
                # An empty selector selects every Lease: kube-controller-manager's included.
                raise ValueError("exclusive_labels needs at least one label")
            validate_label_selector({"matchLabels": dict(self.exclusive_labels)})


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
        self._denied_watches: set[str] = set()
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
        labels = config.exclusive_labels
        self._rivals = (
            None
            if labels is None
            else RivalLeases(config.namespace, config.name, config.lease_duration)
        )
        self._rival_selector = ",".join(f"{k}={v}" for k, v in (labels or {}).items())
        self._holds = False
        self._created = ""
        self.blocked_by: RivalLease | None = None
        """With exclusive labels: the other install's Lease that keeps this replica from
        leading (held and live), while it does; None otherwise."""
        self.rivals_denied = False
        """With exclusive labels: True while this replica may not list the Leases of every
        namespace, so cannot tell whether another install leads (it does not take its lease
        meanwhile)."""
        self._holder: Holder | None = None
        """The other replica holding the lease, as it recorded itself there (last read)."""
        self._holder_moved = asyncio.Event()
        self._first_read = True
        self._pods_denied = False
        self._displaced = False
        """Set when a renewal found another replica holding the lease this one held."""
        self._renewed_from: float | None = None
        """When (monotonic) the last write of the lease this replica held began; None before
        it ever held it."""
        self.taken_on: Evidence | None = None
        """Why this replica last took a live lease from its holder (None: it never did)."""
        self._gauge = metrics.LEADER_ELECTION_MASTER_STATUS.labels(name=config.name)
        self._gauge.set(0)
        self._log = log.bind(lease=f"{config.namespace}/{config.name}", identity=config.identity)

    async def acquire(self, on_follow: Callable[[], object] | None = None) -> None:
        """Wait until this replica holds the lease; ``on_follow`` is called once if the first
        attempt finds another holder's live lease (this replica is a standby, for now)."""
        selector = f"metadata.name={self.config.name}"
        watchers = [
            asyncio.create_task(
                self._watch(
                    LEASE,
                    Scope(self.config.namespace, field_selector=selector),
                    denied="may not watch the lease: falling back to polling it every retry "
                    "period; grant list and watch on leases",
                ),
                name="lease watch",
            )
        ]
        if self._rivals is not None:
            watchers.append(
                asyncio.create_task(
                    self._watch(
                        LEASE,
                        Scope(label_selector=self._rival_selector),
                        denied="may not watch the leases of every namespace: another "
                        "install's release is noticed a retry period late; grant list and "
                        "watch on leases cluster-wide",
                    ),
                    name="rival leases watch",
                )
            )
        if self.config.pod is not None:
            watchers.append(asyncio.create_task(self._watch_holder(), name="holder pod watch"))

        def lost(state: RetryCallState) -> None:
            # A lost attempt: a standby from now on (said once), and wait for a change from here.
            nonlocal on_follow
            if on_follow is not None:
                on_follow()
                on_follow = None
            self._changed.clear()

        # The campaign's policy: attempts until one leads, never giving up, each after the
        # jittered retry period or at the observed lease's expiry (the wait), or as soon as a
        # watched Lease changes (the sleep). An exception is not retried: _campaign turns the
        # API's errors into a lost attempt, so what escapes it (a cancellation) ends the loop.
        campaign = AsyncRetrying(
            retry=retry_if_result(lambda led: not led),
            after=lost,
            wait=lambda state: self._next_try_in(),
            sleep=self._until_changed,
        )
        try:
            await campaign(self._campaign)
        finally:
            await cancel_and_wait(*watchers)
        self._lead(True)
        self._log.info("acquired the lease; leading")

    async def try_acquire(self) -> bool:
        """One attempt to take the lease (or renew it), without leading: True when this replica
        holds it now, and :meth:`acquire` then leads at once. A ring member claims a vacant
        member Lease with it (:meth:`RingMember.claim
        <crewlet_operator.sharding.member.RingMember.claim>`)."""
        return await self._campaign()

    async def _campaign(self) -> bool:
        """One attempt to lead: True once this replica holds its lease and, with exclusive
        labels, no other install's Lease is live."""
        if self._rivals is None:
            return await self._try()
        # Read before writing: a replica kept out by another install writes nothing.
        if not self._holds:
            if not await self._scan(self._rivals):
                return False
            live = self._rivals.live(time.monotonic())
            self._block(live[0] if live else None)
            if live:
                return False
        if not await self._try():
            return False
        # Read after writing: another install may have acquired at the same moment. Of two
        # that did, at least one reads the other's Lease; the one that comes later gives way.
        if not await self._scan(self._rivals):
            return False  # it keeps its lease and checks again at the next attempt
        live = self._rivals.live(time.monotonic())
        self._block(live[0] if live else None)
        if not live:
            return True
        if live[0].precedence < self._precedence:
            await self._give_up()
        # Otherwise the rival comes later, and gives way once it reads this Lease; until then
        # (or until its lease expires) this replica keeps its lease without leading: the rival
        # may not have read it, and lead meanwhile.
        return False

    @property
    def _precedence(self) -> Precedence:
        return precedence(self._created, self.config.namespace, self.config.name)

    def _next_try_in(self) -> float:
        """Seconds until the next attempt: the jittered retry period, or less when the observed
        lease (or another install's) expires sooner. The watches wake the loop earlier still
        when a Lease changes."""
        delay = self.config.retry_period * random.uniform(1.0, JITTER)
        now = time.monotonic()
        expiries = [self._observed_at + self._observed_duration - now]
        if self._rivals is not None and (rival := self._rivals.expires_in(now)) is not None:
            expiries.append(rival)
        # Not past expiry: a lease seen expired and still not taken (a failed write, an
        # unreachable API server) is retried at the retry period, not in a tight loop.
        sooner = [e for e in expiries if 0 < e < delay]
        if self._wake_at_expiry and sooner:
            return min(sooner)
        return delay

    async def hold(self) -> None:
        """Renew every ``retry_period``; return when no renewal succeeded within
        ``renew_deadline``, or when another install's live Lease comes before this one (the
        caller must stop acting immediately)."""
        last_renewed = time.monotonic()
        # A ticker, not a retry: a renewal every retry period for as long as this replica
        # leads. Each renewal's failed attempts are the retry policy (_renew).
        while True:
            await asyncio.sleep(self.config.retry_period)
            if await self._renew(last_renewed + self.config.renew_deadline):
                last_renewed = time.monotonic()
                rival = await self._ahead()
                if rival is not None:
                    self._lead(False)
                    self._holds = False
                    self._log.error(
                        "another install of this controller leads in the cluster on a Lease "
                        "that comes first; stepping down",
                        rival_lease=str(rival),
                        rival_holder=rival.holder,
                    )
                    self._block(rival)
                    return
            elif self._displaced:
                self._lead(False)
                self._log.error(
                    "another replica holds the lease now; stepping down",
                    holder=self._observed[0] if self._observed else None,
                )
                return
            else:
                self._lead(False)
                self._holds = False
                self._log.error("could not renew the lease within the deadline; stepping down")
                return

    async def _renew(self, deadline: float) -> bool:
        """One renewal: an attempt now, then one every ``retry_period`` while the last failed,
        until one succeeds (True), ``deadline`` (monotonic seconds) has passed, or an attempt
        found another holder's live lease (False: a standby took it, on evidence that this
        replica was gone; a leader that finds itself wrong stops at once, where client-go's
        would go on writing until its deadline). Each attempt is cut off at the deadline."""

        async def attempt() -> bool:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            # asyncio.timeout, never wait_for, in the campaign and the renewals: on Python
            # 3.11 wait_for swallows a cancellation that lands as the awaited call ends, and
            # a stopping manager's loop would then run on.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    return await self._try()
            return False

        renewal = AsyncRetrying(
            retry=retry_if_result(lambda renewed: not renewed),
            wait=wait_fixed(self.config.retry_period),
            stop=lambda state: time.monotonic() >= deadline or self._displaced,
            retry_error_callback=lambda state: False,
        )
        renewed: bool = await renewal(attempt)
        return renewed

    async def _until_changed(self, seconds: float) -> None:
        """The campaign's sleep: ``seconds``, or less when a watched Lease changes."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._changed.wait()

    async def _ahead(self) -> RivalLease | None:
        """A live rival whose Lease comes before this leader's, or None. A list that fails or
        takes longer than a retry period answers None: a leader does not step down for what
        it cannot see (the other install, reading this Lease, gives way)."""
        if self._rivals is None:
            return None
        scanned = False
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.config.retry_period):
                scanned = await self._scan(self._rivals)
        if scanned:
            live = self._rivals.live(time.monotonic())
            if live and live[0].precedence < self._precedence:
                return live[0]
        return None

    def check_may_write(self) -> None:
        """Raise :class:`LeadershipLostError` unless this replica may still write as the
        lease's holder: it never held it (a standby's controllers that need no lease write as
        they please), or it holds it and its last renewal began within ``renew_deadline``, when
        no other replica can have taken it yet (a standby waits ``lease_duration`` from when it
        saw that renewal). A leader frozen past that (SIGSTOP, a paused VM) writes nothing when
        it resumes: its renewal then finds another holder, and it stops. A leader that stepped
        down or released the lease writes nothing more either."""
        if self._renewed_from is None:
            return
        age = time.monotonic() - self._renewed_from
        if not self.is_leader and not self._holds:
            raise LeadershipLostError("this replica no longer holds the lease")
        if age >= self.config.renew_deadline:
            raise LeadershipLostError(
                f"the lease was last renewed {age:.1f} s ago: another replica may hold it"
            )

    async def release(self) -> None:
        """Give the lease up so a follower takes over now (only if we still hold it)."""
        held = self.is_leader or self._holds
        self._lead(False)
        if held and self.config.release_on_cancel:
            await self._give_up()

    async def _give_up(self) -> None:
        """Clear the holder of the Lease if it is still this replica, so that another replica,
        or another install, takes over at once."""
        self._holds = False
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

    def _label(self, lease: dict[str, Any]) -> None:
        """Put the exclusive labels and the configured labels on ``lease`` before it is written
        (a Lease written before they were configured gains them with this replica's next
        write)."""
        extra = {**(self.config.labels or {}), **(self.config.exclusive_labels or {})}
        if extra:
            meta = lease.setdefault("metadata", {})
            meta["labels"] = {**(meta.get("labels") or {}), **extra}

    def _lead(self, leading: bool) -> None:
        self.is_leader = leading
        self._gauge.set(1 if leading else 0)

    def _block(self, rival: RivalLease | None) -> None:
        """Record which rival keeps this replica from leading; say so once per change."""
        before, self.blocked_by = self.blocked_by, rival
        if rival is not None and rival != before:
            self._log.warning(
                "another install of this controller leads in the cluster; this one does not "
                "lead while it does",
                rival_lease=str(rival),
                rival_holder=rival.holder,
            )
        elif rival is None and before is not None:
            self._log.info("the other install's lease is no longer live", rival_lease=str(before))

    async def _scan(self, rivals: RivalLeases) -> bool:
        """List the Leases with the exclusive labels in every namespace into ``rivals``;
        False when the list failed (then no one can tell whether another install leads)."""
        try:
            listed = await self.client.list(LEASE, Scope(label_selector=self._rival_selector))
        except (ForbiddenError, UnauthorizedError) as denied:
            if not self.rivals_denied:
                self._log.warning(
                    "may not list the leases of every namespace: cannot tell whether another "
                    "install of this controller leads, so this one does not take its lease; "
                    "grant get, list and watch on leases cluster-wide",
                    error=denied.message or denied.reason,
                )
            self.rivals_denied = True
            return False
        except CrewletError as exc:
            self._log.debug("listing the rival leases failed", error=str(exc))
            return False
        self.rivals_denied = False
        rivals.observe(listed.items, time.monotonic())
        return True

    async def _try(self) -> bool:
        """One attempt to acquire or renew; False when another holder's lease is still live
        (and no evidence says that holder is gone)."""
        cfg = self.config
        now, started = micro_time(), time.monotonic()
        first_read, self._first_read = self._first_read, False
        try:
            lease = await self.client.get(LEASE, cfg.name, cfg.namespace)
        except NotFoundError:
            return await self._create(now, started)
        except CrewletError as exc:
            self._first_read = first_read
            self._log.debug("lease read failed", error=str(exc))
            return False
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        self._observe(lease)
        held_by_other = holder and holder != cfg.identity
        evidence: Evidence | None = None
        if held_by_other and time.monotonic() < self._observed_at + self._observed_duration:
            # A leader that finds another holder stops (hold); a standby takes the lease only
            # on evidence that the holder cannot write any more.
            if not self._holds:
                evidence = await self._evidence(lease, first_read)
            if evidence is None:
                self._displaced = self._holds
                self._holds = False
                return False
        transitions = int(spec.get("leaseTransitions") or 0)
        if holder == cfg.identity:
            new_spec = self._spec(spec.get("acquireTime") or now, now, transitions)
        else:
            new_spec = self._spec(now, now, transitions + 1)
        found = dict((lease.get("metadata") or {}).get("annotations") or {})
        lease["spec"] = new_spec
        self._annotate(lease)
        self._label(lease)
        self._record_holder(lease)
        try:
            updated = await self.client.replace(LEASE, lease)
        except CrewletError as exc:  # a conflict means someone else wrote first
            self._log.debug("lease update failed", error=str(exc))
            return False
        if holder != cfg.identity:
            self.previous_holder_seen_at = self._other_renewed_at
            self.annotations_when_acquired = found
        self._renewed_from = started
        if evidence is not None:
            self.taken_on = evidence
            self._log.warning(
                "took the lease before it expired: its holder cannot write any more",
                evidence=evidence.value,
                previous_holder=holder,
            )
        self._observe(updated)
        self._took(updated)
        return True

    async def _create(self, now: str, started: float) -> bool:
        """Create the Lease, held by this replica; False when another replica did first."""
        fresh: dict[str, Any] = {
            "metadata": {"name": self.config.name, "namespace": self.config.namespace},
            "spec": self._spec(now, now, 0),
        }
        self._label(fresh)
        self._record_holder(fresh)
        try:
            created = await self.client.create(LEASE, fresh)
        except CrewletError as exc:  # AlreadyExists: another replica created it first
            self._log.debug("lease create failed", error=str(exc))
            return False
        self._renewed_from = started
        self._took(created)
        return True

    async def _evidence(self, lease: Mapping[str, Any], first_read: bool) -> Evidence | None:
        """The evidence that the holder of the live ``lease`` cannot write any more, as
        :mod:`crewlet_operator.incarnation` says; None without (or without ``pod``)."""
        own = self.config.pod
        holder = Holder.of_lease(lease)
        if own is None or holder is None:
            return None
        if first_read and holder.pod.same_container(own):
            return Evidence.RESTARTED_HERE
        if self._pods_denied:
            return None
        try:
            pod = await self.client.get_or_none(POD, holder.pod.name, holder.pod.namespace)
        except (ForbiddenError, UnauthorizedError) as denied:
            self._pods_denied = True
            self._log.warning(
                "may not read the lease holder's Pod: a standby waits for its lease to expire; "
                "grant get, list and watch on pods in its namespace",
                pod_namespace=holder.pod.namespace,
                error=denied.message or denied.reason,
            )
            return None
        except CrewletError as exc:
            self._log.debug("reading the lease holder's Pod failed", error=str(exc))
            return None
        acquired = (lease.get("spec") or {}).get("acquireTime")
        return holder_gone(holder, acquired, pod)

    def _record_holder(self, lease: dict[str, Any]) -> None:
        """Record this replica's Pod on ``lease`` before it writes it as the holder."""
        if self.config.pod is None:
            return
        record = Holder(self.config.identity, self.config.pod).annotation()
        meta = lease.setdefault("metadata", {})
        meta["annotations"] = {**(meta.get("annotations") or {}), HOLDER_ANNOTATION: record}

    def _took(self, lease: dict[str, Any]) -> None:
        """This replica's write made it the holder of ``lease``."""
        self._holds = True
        self._displaced = False
        self._created = str((lease.get("metadata") or {}).get("creationTimestamp") or "")

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
        record = _record(spec)
        if record != self._observed:
            self._observed = record
            self._observed_at = time.monotonic()
            self._observed_duration = float(spec.get("leaseDurationSeconds") or 0)
            if spec.get("holderIdentity") not in (None, "", self.config.identity):
                self._other_renewed_at = self._observed_at
        holder = Holder.of_lease(lease)
        if holder is not None and holder.identity == self.config.identity:
            holder = None
        if (holder and holder.pod) != (self._holder and self._holder.pod):
            self._holder_moved.set()
        self._holder = holder

    async def _watch_holder(self) -> None:
        """Wake the acquire loop whenever the Pod of the lease's other holder changes (or
        goes), watching the Pod the holder last recorded on the Lease."""
        while True:
            self._holder_moved.clear()
            holder = self._holder
            if holder is None or self._pods_denied:
                await self._holder_moved.wait()
                continue
            selector = f"metadata.name={holder.pod.name}"
            watching = asyncio.create_task(
                self._watch(
                    POD,
                    Scope(holder.pod.namespace, field_selector=selector),
                    denied="may not watch the lease holder's Pod: its end is noticed a retry "
                    "period late; grant list and watch on pods in its namespace",
                ),
                name="holder pod watch",
            )
            try:
                await self._holder_moved.wait()
            finally:
                await cancel_and_wait(watching)

    async def _watch(self, resource: Resource, scope: Scope, *, denied: str) -> None:
        """Wake the acquire loop whenever an object of ``resource`` in ``scope`` changes (a
        Lease's release is taken at once); ``denied`` is the warning, said once, when the watch
        is refused."""
        # A watch loop, not a retry policy (no tenacity): a watch that ends (every 60 s) is
        # listed and watched again at once, a failure pauses one retry period, and it runs
        # until cancelled, with no attempt to count and no outcome to return.
        while True:
            try:
                listed = await self.client.list(resource, scope)
                watching = WatchParams(
                    scope,
                    resource_version=listed.resource_version,
                    timeout_seconds=60,
                    inactivity_timeout=90,
                )
                async for _event in self.client.watch(resource, watching):
                    self._changed.set()
            except (ForbiddenError, UnauthorizedError) as exc:
                # Acquiring still works (it reads the Leases each retry period and when a lease
                # it saw expires), but a release is then noticed up to a retry period late.
                # Say so once: the RBAC a leader needs is get, create and update on its Lease;
                # the watch needs list and watch as well.
                if denied not in self._denied_watches:
                    self._denied_watches.add(denied)
                    self._log.warning(denied, error=exc.message or exc.reason)
                await asyncio.sleep(self.config.retry_period)
            except CrewletError:
                await asyncio.sleep(self.config.retry_period)
