"""The ring's members as one replica sees them: their Leases, listed every period and judged
live or dead at the last successful list (:class:`Membership`), and the signal each list sends
to the loops that follow it."""

from __future__ import annotations

import asyncio
import time
from typing import Protocol

import structlog

from crewlet_operator.errors import CrewletError
from crewlet_operator.incarnation import Evidence, Holder, holder_gone
from crewlet_operator.kube.client import Client, Scope
from crewlet_operator.kube.resources import LEASE, POD
from crewlet_operator.leader import RivalLeases
from crewlet_operator.sharding.ring import RingLabels, RingView, will_heirs

__all__ = [
    "EXPIRY_MARGIN",
    "HOLD_AT_MOST",
    "VACANCY_PERIODS",
    "WILL_LISTS",
    "Membership",
    "RingMembers",
    "Settling",
    "Signal",
]

log = structlog.get_logger("crewlet_operator.sharding")


class Signal:
    """A fact several loops wait for, named for what it says: each subscriber gets an event of
    its own, set at every :meth:`emit` and cleared by the loop that waits on it, so that one
    loop's clearing never hides the fact from another."""

    def __init__(self) -> None:
        self._events: list[asyncio.Event] = []

    def subscribe(self) -> asyncio.Event:
        """A new event, set at every emit from now on."""
        event = asyncio.Event()
        self._events.append(event)
        return event

    def emit(self) -> None:
        """Set every subscriber's event."""
        for event in self._events:
            event.set()


class RingMembers(Protocol):
    """What the sharder and a member's caches read of the ring's members: :class:`Membership`
    from the member Leases, or a test's stand-in
    (:class:`crewlet_operator.testing.StaticRing`), which mypy then holds to every part."""

    listed: Signal
    """Emitted after every list of the ring: the live members and the wills may have changed."""
    listed_at: float | None
    """When (monotonic seconds) the ring was last listed; None before the first list."""
    versions: dict[str, str]
    """Each listed member Lease's ``resourceVersion``: a will is written at that version."""

    @property
    def namespace(self) -> str:
        """Where the member Leases are."""
        ...

    @property
    def last_join(self) -> float | None:
        """When (monotonic seconds) a member last joined (or came back); None: no join for the
        sharder to let settle."""
        ...

    def view(self) -> RingView | None:
        """The ring at the last list; None until the first."""
        ...

    async def observe(self) -> bool:
        """List the ring once; False when the list failed."""
        ...

    async def gone(self) -> dict[str, Evidence]:
        """The live members whose process the API server shows gone, with the evidence."""
        ...


class Settling:
    """Whether the ring has settled: no member joined (:attr:`RingMembers.last_join`) in the
    last ``settle`` seconds, or it has been waited for :data:`HOLD_AT_MOST` times that in a row.
    A member that dies does not unsettle it. The sharder decides nothing until it has
    (:meth:`Sharder.settled <.sharder.Sharder.settled>`), nor does a member cache the slots the
    ring gives it (:meth:`MemberSlots.wanted <.slots.MemberSlots.wanted>`): a replica that
    starts first finds itself alone in the ring, and would list every child of every object
    for the slots of a ring of one, to drop most of them seconds later."""

    def __init__(self, membership: RingMembers, settle: float) -> None:
        self._membership = membership
        self.settle = settle
        """Seconds in which no member may have joined."""
        self.waiting_since: float | None = None
        """Since when (monotonic seconds) the ring has been waited for; None once settled."""

    def settled(self, now: float) -> bool:
        """Whether the ring has settled at ``now``."""
        joined = self._membership.last_join
        if joined is None or now - joined >= self.settle:
            self.waiting_since = None
            return True
        if self.waiting_since is None:
            self.waiting_since = now
        return now - self.waiting_since >= HOLD_AT_MOST * self.settle


class Membership:
    """The ring's members as this replica sees them: it lists their Leases every
    ``retry_period`` (:meth:`run`), and judges each by the rule of
    :class:`~crewlet_operator.leader.RivalLeases` (live while held and seen to change within
    its duration, by this process's monotonic clock), *at the last successful list*: a replica
    that cannot list never takes a live member for dead. The dead members' wills come with
    the same list.

    With ``vacancy`` (a ring of fixed member names), a member whose Lease was released (a
    graceful stop) counts as live for that many more seconds: a replica waiting to join claims
    the vacant Lease in that time, its name and its objects with it (:meth:`RingMember.claim
    <crewlet_operator.sharding.member.RingMember.claim>`), so a rolling restart moves nothing;
    unclaimed, it is dead at the next list after, and gets its will. Without (names of each
    process's own, which nobody claims), a released Lease is dead at once."""

    def __init__(
        self,
        client: Client,
        namespace: str,
        labels: RingLabels,
        retry_period: float,
        lease_duration: float,
        *,
        vacancy: float = 0.0,
    ) -> None:
        self._client = client
        self._labels = labels
        self._scope = Scope(namespace, label_selector=f"{labels.member}={labels.ring}")
        self._retry_period = retry_period
        self._vacancy = vacancy
        # No Lease is named "": none is left out. The members share the timings of this one.
        self._seen = RivalLeases(namespace, "", lease_duration)
        self._view: RingView | None = None
        self.listed_at: float | None = None
        """When (monotonic seconds) the ring's Leases were last listed; None before the first
        successful list."""
        self._awaiting_will = 0
        """The lists in a row that found a dead member without a will."""
        self.versions: dict[str, str] = {}
        """Each listed Lease's ``resourceVersion``, at which it was judged."""
        self.holders: dict[str, tuple[Holder, str | None]] = {}
        """The members whose Leases record their holder's Pod, with the Lease's
        ``acquireTime``: what :meth:`gone` asks the API server about."""
        self.vacant: frozenset[str] = frozenset()
        """The member Leases with no holder and no will at the last list: released, and
        free to claim."""
        self.listed = Signal()
        """Emitted after every successful list: the live members and the wills may have
        changed. The member's slots, its fence on its own will and the sharder each subscribe."""
        self._joined: dict[str, float] = {}
        """Each live member, with the list (monotonic seconds) that first found it live since
        it was last found not live; those live at this replica's first list, with that list."""

    @property
    def namespace(self) -> str:
        """Where the ring's Leases are."""
        return self._scope.namespace or ""

    def view(self) -> RingView | None:
        """The ring at the last successful list; None until the first."""
        return self._view

    async def observe(self) -> bool:
        """List the ring's Leases once; False when the list failed."""
        try:
            listed = await self._client.list(LEASE, self._scope)
        except CrewletError as exc:
            log.debug("listing the ring's leases failed", error=str(exc))
            return False
        now = time.monotonic()
        self.listed_at = now
        self._seen.observe(listed.items, now)
        metas = [lease.get("metadata") or {} for lease in listed.items]
        wills = {
            str(meta.get("name")): will_heirs(str(annotations[self._labels.heirs]))
            for meta in metas
            if self._labels.heirs in (annotations := meta.get("annotations") or {})
        }
        self.versions = {str(meta.get("name")): str(meta.get("resourceVersion")) for meta in metas}
        self.holders = {
            str((lease.get("metadata") or {}).get("name")): (
                holder,
                (lease.get("spec") or {}).get("acquireTime"),
            )
            for lease in listed.items
            if (holder := Holder.of_lease(lease)) is not None
        }
        self.vacant = frozenset(
            str(meta.get("name"))
            for lease, meta in zip(listed.items, metas, strict=True)
            if not (lease.get("spec") or {}).get("holderIdentity")
        ).difference(wills)
        # A member with a will writes nothing, even while it still renews: it is not live. One
        # just released is, while a replica may claim it.
        live = frozenset(
            lease.name
            for lease in (*self._seen.live(now), *self._seen.released(now, self._vacancy))
        ).difference(wills)
        self._view = RingView(live=live, leases=frozenset(self.versions), wills=wills)
        self._joined = {member: self._joined.get(member, now) for member in live}
        self._awaiting_will = self._awaiting_will + 1 if self._view.unwilled() else 0
        self.listed.emit()
        return True

    @property
    def last_join(self) -> float | None:
        """When (monotonic seconds) the last list found a member live that the list before did
        not: a member joined (or came back). None while no member is live. Every member live at
        this replica's first list joined then, as far as it knows: it cannot tell a ring that is
        still starting from one that has run for days (:class:`~.sharder.Sharder` waits for a
        settled ring by it)."""
        return max(self._joined.values(), default=None)

    async def gone(self) -> dict[str, Evidence]:
        """The live members whose holders the API server shows cannot write any more, at the
        last list (:func:`~crewlet_operator.incarnation.holder_gone`): one list of the Pods in
        the ring's namespace. Empty when it fails or none records its Pod."""
        view = self._view
        recorded = {m: h for m, h in self.holders.items() if view is not None and m in view.live}
        if not recorded:
            return {}
        try:
            pods = await self._client.list(POD, Scope(self.namespace))
        except CrewletError as exc:
            log.debug("listing the members' pods failed", error=str(exc))
            return {}
        by_name = {str((pod.get("metadata") or {}).get("name")): pod for pod in pods.items}
        found = {}
        for member, (holder, acquired) in recorded.items():
            if holder.pod.namespace != self.namespace:
                continue  # its Pods are not listed here
            evidence = holder_gone(holder, acquired, by_name.get(holder.pod.name))
            if evidence is not None:
                found[member] = evidence
        return found

    async def run(self) -> None:
        """Observe every ``retry_period`` until cancelled, and right after a live member's
        Lease would expire unless renewed, if that comes first."""
        while True:
            await self.observe()
            await asyncio.sleep(self.next_list_in(time.monotonic()))

    def next_list_in(self, now: float) -> float:
        """Seconds until the next list: ``retry_period``, or just past the moment the first
        live member's Lease expires unless it changes, if sooner, so that a dead member is
        found dead (and its will written) without waiting for another period; and while a
        member found dead has no will yet (the sharder writes it at once), a quarter period,
        for :data:`WILL_LISTS` lists, so that the heirs learn of it soon after."""
        left = self._seen.expires_in(now)
        wait = self._retry_period if left is None else min(self._retry_period, left + EXPIRY_MARGIN)
        if 0 < self._awaiting_will <= WILL_LISTS:
            wait = min(wait, self._retry_period / 4)
        return wait


HOLD_AT_MOST = 4.0
"""Settle periods a ring is waited for at most in a row (:class:`Settling`): a ring that keeps
growing (a scale-up one replica at a time) still gets its wills and new objects their members."""

VACANCY_PERIODS = 1.0
"""How many retry periods a released member Lease of a ring of fixed names stays live, its slots
and objects its own, for a replica waiting to join to claim it (a waiting replica lists the ring
four times a period); then it is dead, and its will moves its objects."""

WILL_LISTS = 8
"""How many lists a quarter period apart (two periods in all) wait for a dead member's will
before the period applies again (no sharder may be running to write it)."""

EXPIRY_MARGIN = 0.05
"""Seconds past a Lease's expiry at which it is listed again: past it, so the list judges it
expired, by the same clock."""
