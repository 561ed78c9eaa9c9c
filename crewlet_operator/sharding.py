"""Sharding: the objects of one primary kind spread over every replica, each writing its share.

Opt in with ``ManagerOptions(sharding=Sharding(resource=WIDGET, domain="example.com"))``. Every
replica is then active:

- **Membership.** Each replica holds a Lease of its own, ``<name>-<hash of its identity>``,
  labelled ``sharding.<domain>/ring: <ring>``, acquired and renewed by a
  :class:`~crewlet_operator.leader.LeaderElector` (its timings, its fencing: a replica that
  cannot renew within ``renew_deadline`` stops writing at once, before its Lease may be judged
  expired). The Lease's name is the replica's *member* name. Every replica lists the ring's
  Leases each ``retry_period`` (:class:`Membership`); a member is live while its Lease has a
  holder and was seen to change within its duration, judged at the last successful list.
- **Assignment.** The replica holding the ordinary leader Lease is the *sharder*
  (:class:`Sharder`): it hashes each primary object's key (its namespace by default, so that a
  tenant's objects stay together) onto the live members (:class:`~crewlet_operator.ring.HashRing`)
  and writes the member into the object's shard label ``shard.<domain>/<ring>``.
- **Handoff.** An object whose member is live but no longer its hash target gets the drain label
  ``drain.<domain>/<ring>``. Its member, on its next request for it (after any reconcile of it
  in flight: the queue never hands one request to two workers), writes nothing else for it and
  acknowledges by clearing both labels; only then does the sharder label it for its new member.
- **Takeover.** A member whose Lease has expired (it stopped writing before: fencing) or was
  released gets a *will* from the sharder, one write on its Lease (the annotation
  ``sharding.<domain>/heirs``: the members live then, conditional on the Lease's
  ``resourceVersion`` at which it was judged dead). From the will every member reads the same
  heir for each of the dead member's objects (the ring of the will's members' owner of its
  slot) and the heir writes them at once, whatever their number; the sharder relabels them
  for their heirs afterwards, and deletes the dead member's Lease once no object's label leads
  to it. Every label write is conditional on the labels it was decided on (a JSON patch that
  tests them; an unassigned object's, on its ``resourceVersion``), so a decision on a stale
  cache fails instead of acting, while a change to the object's spec, which no decision read,
  does not make it fail.
- **Caches.** A member's informer of the primary kind selects its own shard label and those of
  the dead members whose objects may fall to it by the wills, so it holds and reconciles its
  share alone. The children are placed by *slot*: each key falls in one of
  :data:`~crewlet_operator.ring.SLOTS` slots, the ring places slots on members, and every child
  carries its primary object's slot in the slot label ``slot.<domain>/<ring>``
  (:meth:`Manager.shard_labels_for <crewlet_operator.manager.Manager.shard_labels_for>`). The
  informers of the kinds a member :meth:`~ShardedBuilder.owns` select the slots it holds
  (:class:`MemberSlots`): those the ring gives it and those of the objects labelled for it. A
  slot label never changes, so a move writes no child: the new member's informers widen to the
  slot (a list, no write) and find the children there.
- **The gate.** Before each reconcile a member reads the primary object from its cache: one
  neither labelled for it nor inherited by it (moved, not yet assigned, or another heir's) is
  not reconciled, one draining is acknowledged instead, one whose slot its informers of
  children do not hold yet waits for them. What it writes for an object is therefore always
  written while the object is its own.

Invariants: (1) only the sharder sets a shard label: on an object with none, or with a member
that has no Lease, or, for a dead member's, the heir its will names; (2) only the member clears
its own label, and only in answer to a drain; (3) a will is written once, for a member judged
dead at the version of its Lease it was judged by, and never changes; (4) a member writes for an
object only while the object carries its label and no drain, or carries a dead member's label
whose will leads to it, read before each reconcile. Hence no object is written by two live
members in any window.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar

import structlog

from crewlet_operator._tasks import cancel_and_wait
from crewlet_operator.cache import Cache, Informer, InformerOptions, MetadataOnly
from crewlet_operator.checkpoint import RestartCheckpoint
from crewlet_operator.controller import Builder, Controller, ControllerHost
from crewlet_operator.errors import ConflictError, CrewletError, InvalidError, NotFoundError
from crewlet_operator.handler import Priority
from crewlet_operator.kube.client import Client, Scope
from crewlet_operator.kube.resources import LEASE, Resource
from crewlet_operator.leader import RivalLeases
from crewlet_operator.objects import KubeObject
from crewlet_operator.predicate import Predicate
from crewlet_operator.rbac import PolicyRule
from crewlet_operator.reconcile import (
    ReconcileFunc,
    Reconciler,
    Request,
    Result,
    TypedReconcileFunc,
)
from crewlet_operator.ring import (
    Assign,
    Drain,
    RingLabels,
    RingView,
    next_step,
    slot_of,
    will_heirs,
    will_text,
)
from crewlet_operator.workqueue import NORMAL_PRIORITY

__all__ = ["MemberSlots", "Membership", "ShardedBuilder", "Sharder", "Sharding", "by_namespace"]

log = structlog.get_logger("crewlet_operator.sharding")

K = TypeVar("K")


SHARDER_WRITES = 32
"""Label writes the sharder has in flight at once: a takeover of 3,320 objects took 174 s one
at a time on the bench's API server."""


def by_namespace(obj: KubeObject) -> str:
    """The default key: the object's namespace (its name for a cluster-scoped kind), so that
    the objects of one namespace (one tenant's) stay on one member."""
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or meta.get("name") or "")


@dataclass(kw_only=True)
class Sharding:
    """Shard the controllers whose primary kind is ``resource`` over every live replica.

    The controllers built with ``manager.controller(...).for_(resource)`` run on every replica,
    each on the objects labelled for it; the other controllers keep leader election (they run
    on the leader, which is also the sharder). See :mod:`crewlet_operator.sharding`.
    """

    resource: Resource
    """The primary kind whose objects are spread over the members."""
    domain: str
    """A DNS domain of the controller's own, for its labels (``shard.<domain>/<ring>``, ...:
    :class:`~crewlet_operator.ring.RingLabels`), such as ``example.com``."""
    ring: str | None = None
    """The ring's name, in the labels; None (the default): the manager's name."""
    key: Callable[[KubeObject], str] = by_namespace
    """What an object is hashed by: its namespace (:func:`by_namespace`) unless told."""


def _and(selector: str | None, term: str) -> str:
    return f"{selector},{term}" if selector else term


SLOT_WAIT = 1.0
"""Seconds after which a request whose slot the children's informers did not hold yet is tried
again: their list in the wider scope takes about that long for a few thousand objects."""


class MemberSlots:
    """What this member caches, kept in step with what it holds.

    Its informers of the primary kind select its shard label and those of the dead members
    whose objects may fall to it (:meth:`RingView.estates
    <crewlet_operator.ring.RingView.estates>`), at once when a will appears. Its informers of
    children want the slots the ring gives it (from :class:`Membership`) and the slots of every
    object its primary informers hold (an object still draining towards it, or away from it,
    or inherited, included). A wider want widens them at once (:meth:`Informer.rescope
    <crewlet_operator.cache.Informer.rescope>`); a narrower one narrows them only once it has
    held for ``settle`` seconds, so that objects moving one by one cost one list, not one each.

    Invariants: :attr:`covered` only holds slots every registered informer of children has
    listed in its current scope, and the gate reconciles an object only when its slot is
    covered; ``_held[(member, slot)]`` is the number of objects of ``slot`` labelled for
    ``member`` in the primary informers, kept by their events (a handler), so that a want is
    computed without reading the store. Of a dead member's objects, which every heir's cache
    holds until they are relabelled, only those whose heir this member is count as its own.
    """

    def __init__(
        self,
        labels: RingLabels,
        member: str,
        membership: Membership,
        *,
        key: Callable[[KubeObject], str],
        retry_period: float,
        settle: float,
    ) -> None:
        self._labels = labels
        self._member = member
        self._membership = membership
        self._key = key
        self._retry_period = retry_period
        self._settle = settle
        self._children: list[tuple[Informer, Scope]] = []
        self._primaries: list[tuple[Informer, Scope]] = []
        self._estates: frozenset[str] = frozenset()
        self._held: dict[tuple[str, int], int] = {}
        self._requested: frozenset[int] = frozenset()
        self._wanted_since: tuple[frozenset[int], float] = (frozenset(), 0.0)
        self.covered: frozenset[int] = frozenset()
        """The slots whose children every informer of children holds."""
        self._poked = asyncio.Event()
        self._listed = asyncio.Event()
        membership.notify(self._poked)
        membership.notify(self._listed)

    def scope(self, base: Scope, slots: frozenset[int]) -> Scope:
        """``base`` narrowed to ``slots`` (to none when empty: no slot is named ``none``)."""
        values = ",".join(str(slot) for slot in sorted(slots)) or "none"
        term = f"{self._labels.slot} in ({values})"
        return replace(base, label_selector=_and(base.label_selector, term))

    def primary_scope(self, base: Scope, estates: frozenset[str]) -> Scope:
        """``base`` narrowed to the objects labelled for this member or for ``estates``."""
        members = ",".join(sorted({self._member, *estates}))
        term = f"{self._labels.shard} in ({members})"
        return replace(base, label_selector=_and(base.label_selector, term))

    def add_children(self, informer: Informer, base: Scope) -> None:
        """Keep ``informer`` (of a kind the sharded controller owns, created in
        ``self.scope(base, frozenset())``) on this member's slots."""
        if all(informer is not known for known, _ in self._children):
            self._children.append((informer, base))

    def add_primary(self, informer: Informer, base: Scope) -> None:
        """The informer of the member's own objects (created in ``self.primary_scope(base,
        frozenset())``), whose slots it counts and whose scope follows the wills."""
        if all(informer is not known for known, _ in self._primaries):
            self._primaries.append((informer, base))
            informer.add_handler(_Count(self._held, self._labelled_slot))

    def covers(self, obj: KubeObject) -> bool:
        """Whether the children of ``obj`` are cached, as far as its slot goes; if not, the
        slots are reconsidered at once."""
        if slot_of(self._key(obj)) in self.covered:
            return True
        self._poked.set()
        return False

    def _labelled_slot(self, obj: KubeObject) -> tuple[str, int]:
        """The member ``obj`` is labelled for ("" for none), and its slot."""
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return str(labels.get(self._labels.shard) or ""), slot_of(self._key(obj))

    def holds(self, obj: KubeObject, labelled: str) -> bool:
        """Whether ``obj``, labelled for the dead member ``labelled``, is this member's by the
        wills as last listed."""
        view = self._membership.view()
        return view is not None and view.holder(labelled, slot_of(self._key(obj))) == self._member

    def awaits_will(self, labelled: str) -> bool:
        """Whether ``labelled`` was found dead and has no will yet, as last listed: its
        objects may fall to this member in a moment."""
        view = self._membership.view()
        return view is not None and labelled in view.unwilled()

    def willed(self) -> bool:
        """Whether this member's own Lease carries a will: it was found dead (or a will was
        written by hand), so its heirs write its objects, and it writes nothing."""
        view = self._membership.view()
        return view is not None and self._member in view.wills

    def wanted(self) -> frozenset[int]:
        """The slots the ring gives this member and those of the objects it holds: labelled
        for it, or left to it by a will."""
        view = self._membership.view()
        ring = frozenset() if view is None else view.slots(self._member)
        return ring | {
            slot
            for (member, slot), count in self._held.items()
            if count > 0
            and (
                member == self._member
                or (view is not None and view.holder(member, slot) == self._member)
            )
        }

    async def run(self) -> None:
        """Follow the wills (:meth:`follow_wills`, at each list of the ring's Leases) and
        :meth:`wanted` (:meth:`follow`, every ``retry_period``, at once when a request found
        its slot missing or the Leases were listed) in two loops, so that a long list of
        children never holds up a dead member's objects, until cancelled."""
        wills = asyncio.create_task(self._follow_wills_at_each_list(), name="member wills")
        try:
            while True:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._retry_period):
                        await self._poked.wait()
                self._poked.clear()
                await self.follow(time.monotonic())
        finally:
            await cancel_and_wait(wills)

    async def _follow_wills_at_each_list(self) -> None:
        while True:
            await self._listed.wait()
            self._listed.clear()
            await self.follow_wills()

    async def follow_wills(self) -> None:
        """Keep the primary informers on this member's label and the dead members' whose
        objects may fall to it: those whose wills lead to it, and those found dead with no
        will yet (caching writes nothing, and the gate waits for the will), so that their
        objects are cached by the time the will comes."""
        view = self._membership.view()
        estates = frozenset() if view is None else view.estates(self._member) | view.unwilled()
        if estates == self._estates:
            return
        self._estates = estates
        for informer, base in self._primaries:
            informer.rescope(self.primary_scope(base, estates))
        for informer, _ in self._primaries:
            await informer.wait_for_scope()
        log.info("inheriting", estates=sorted(estates), member=self._member)
        self._poked.set()  # what it holds may have changed, and with it the slots it wants

    async def follow(self, now: float) -> None:
        """Widen the informers of children to what is wanted now, or narrow them to it once
        it has not changed for ``settle`` seconds; mark the slots covered once listed."""
        wanted = self.wanted()
        if wanted != self._wanted_since[0]:
            self._wanted_since = (wanted, now)
        if wanted == self._requested:
            return
        if wanted <= self._requested and now - self._wanted_since[1] < self._settle:
            return  # narrower: wait until it settles
        slots = wanted if wanted <= self._requested else wanted | self._requested
        self._requested = slots
        self.covered = self.covered & slots
        for informer, base in self._children:
            informer.rescope(self.scope(base, slots))
        for informer, _ in self._children:
            await informer.wait_for_scope()
        log.info("children cached for slots", slots=len(slots), member=self._member)
        self.covered = slots


class _Count(Generic[K]):
    """An informer handler that counts its objects by ``key``, into a dict it shares."""

    def __init__(self, counts: dict[K, int], key: Callable[[KubeObject], K]) -> None:
        self._counts = counts
        self._key = key

    def on_add(self, obj: KubeObject, initial: bool = False) -> None:
        key = self._key(obj)
        self._counts[key] = self._counts.get(key, 0) + 1

    def on_update(self, old: KubeObject, new: KubeObject) -> None:
        self.on_delete(old)
        self.on_add(new)

    def on_delete(self, obj: KubeObject) -> None:
        key = self._key(obj)
        self._counts[key] = self._counts.get(key, 0) - 1


class ShardedBuilder(Builder):
    """A :class:`~crewlet_operator.controller.Builder` for a manager with sharding: a controller
    whose primary kind is the sharded one caches only this member's objects (its primary
    informer selects the member's shard label, its owned informers the member's slots) and
    reconciles them through the gate.
    Other controllers are built as usual."""

    def __init__(
        self,
        manager: ControllerHost,
        name: str,
        *,
        sharding: Sharding,
        labels: RingLabels,
        member: str,
        slots: MemberSlots,
        defaults: InformerOptions | None,
        on_complete: Callable[[Controller, Scope], None],
    ) -> None:
        super().__init__(manager, name)
        self._sharding = sharding
        self._labels = labels
        self._member = member
        self._slots = slots
        self._defaults = defaults
        self._on_complete = on_complete
        self._base_scope: Scope | None = None
        self._owned: list[tuple[Resource, Scope]] = []

    def _mine(self, options: InformerOptions | None) -> InformerOptions:
        base = options or self._defaults or InformerOptions()
        return replace(base, scope=self._slots.primary_scope(base.scope, frozenset()))

    def for_(
        self,
        resource: Resource,
        *,
        predicates: Sequence[Predicate] = (),
        options: InformerOptions | None = None,
        priority: Priority = NORMAL_PRIORITY,
    ) -> Builder:
        """The primary kind; the sharded kind's informer selects this member's label (and
        those of the dead members it inherits from)."""
        if resource == self._sharding.resource:
            self._base_scope = (options or self._defaults or InformerOptions()).scope
            options = self._mine(options)
        return super().for_(resource, predicates=predicates, options=options, priority=priority)

    def owns(
        self,
        resource: Resource,
        *,
        predicates: Sequence[Predicate] = (),
        options: InformerOptions | None = None,
        priority: Priority = NORMAL_PRIORITY,
    ) -> Builder:
        """A child kind; under a sharded primary its informer selects the slots this member
        holds (children written with :meth:`Manager.shard_labels_for`): none until the member
        knows them (:class:`MemberSlots`)."""
        if self._base_scope is not None:
            base = options or self._defaults or InformerOptions()
            self._owned.append((resource, base.scope))
            options = replace(base, scope=self._slots.scope(base.scope, frozenset()))
        return super().owns(resource, predicates=predicates, options=options, priority=priority)

    def complete(self, reconciler: Reconciler | ReconcileFunc | TypedReconcileFunc) -> Controller:
        """Create the controller; a sharded one reconciles through the gate."""
        if self._base_scope is None:
            return super().complete(reconciler)
        gate = Gate(
            self._reconcile_func(reconciler),
            self._manager.cache,
            self._sharding.resource,
            self._labels,
            member=self._member,
            slots=self._slots,
        )
        controller = super().complete(gate.reconcile)
        cache = self._manager.cache
        self._slots.add_primary(cache.informer(self._sharding.resource), self._base_scope)
        for resource, base in self._owned:
            self._slots.add_children(cache.informer(resource), base)
        controller.add_rbac_rules(PolicyRule.on(self._sharding.resource, "patch"))
        self._on_complete(controller, self._base_scope)
        return controller

    def _attach_checkpoint(self, checkpoint: RestartCheckpoint, controller: Controller) -> None:
        """A sharded controller keeps no restart checkpoint: one replica's Lease would speak
        for its share alone, and the share moves with the ring. Each member reconciles its
        share in full at start, as controller-runtime does; other controllers keep theirs."""
        if self._base_scope is None:
            super()._attach_checkpoint(checkpoint, controller)
            return
        log.info("a sharded controller reconciles its share in full at start", name=self._name)
        checkpoint.attach(controller, owned=[], found=dict)


class Gate:
    """Reconciles a request only while its object is this member's; acknowledges a drain."""

    def __init__(
        self,
        reconcile: ReconcileFunc,
        cache: Cache,
        resource: Resource,
        labels: RingLabels,
        *,
        member: str,
        slots: MemberSlots,
    ) -> None:
        self._reconcile = reconcile
        self._cache = cache
        self._resource = resource
        self._shard = labels.shard
        self._drain = labels.drain
        self._member = member
        self._slots = slots

    async def reconcile(self, request: Request) -> Result | None:
        """Reconcile ``request`` if its object, as cached, is labelled for this member and not
        draining, or is labelled for a dead member whose will leads to this one, once its
        children are cached (else again in :data:`SLOT_WAIT` seconds, as while a dead
        member's will is awaited); acknowledge a drain; leave anything else alone, and
        everything once this member has a will itself."""
        obj = self._cache.get(self._resource, request.name, request.namespace)
        if obj is None or self._slots.willed():
            return None  # gone, or another member's: nothing of it is ours to write
        meta = obj.get("metadata") or {}
        labels = meta.get("labels") or {}
        labelled = labels.get(self._shard)
        if labelled == self._member:
            if self._drain in labels:
                await self._acknowledge(request, str(labels[self._drain]))
                return None
        elif labelled is None:
            return None
        elif self._slots.awaits_will(str(labelled)):
            return Result(requeue_after=SLOT_WAIT)  # its will may leave it to this member
        elif not self._slots.holds(obj, str(labelled)):
            return None
        if not self._slots.covers(obj):
            return Result(requeue_after=SLOT_WAIT)
        return await self._reconcile(request)

    async def _acknowledge(self, request: Request, drain: str) -> None:
        """Let the object go: clear both labels, while they still say this member and the
        drain (refused otherwise: the cache was behind, and the request is retried)."""
        patch = [
            _test(self._shard, self._member),
            _test(self._drain, drain),
            {"op": "remove", "path": _label_path(self._shard)},
            {"op": "remove", "path": _label_path(self._drain)},
        ]
        with contextlib.suppress(NotFoundError):
            await self._cache.client.patch(
                self._resource, request.name, patch, request.namespace, patch_type="json"
            )
            log.info("handed off", namespace=request.namespace, name=request.name)


class Membership:
    """The ring's members as this replica sees them: it lists their Leases every
    ``retry_period`` (:meth:`run`), and judges each by the rule of
    :class:`~crewlet_operator.leader.RivalLeases` (live while held and seen to change within
    its duration, by this process's monotonic clock), *at the last successful list*: a replica
    that cannot list never takes a live member for dead. The dead members' wills come with
    the same list."""

    def __init__(
        self,
        client: Client,
        namespace: str,
        labels: RingLabels,
        retry_period: float,
        lease_duration: float,
    ) -> None:
        self._client = client
        self._labels = labels
        self._scope = Scope(namespace, label_selector=f"{labels.member}={labels.ring}")
        self._retry_period = retry_period
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
        self.changed = asyncio.Event()
        """Set when the set of live members may have changed (each list); the sharder clears it."""
        self._listeners = [self.changed]

    @property
    def namespace(self) -> str:
        """Where the ring's Leases are."""
        return self._scope.namespace or ""

    def notify(self, event: asyncio.Event) -> None:
        """Set ``event`` after every successful list too."""
        self._listeners.append(event)

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
        self._view = RingView(
            live=frozenset(lease.name for lease in self._seen.live(now)),
            leases=frozenset(self.versions),
            wills=wills,
        )
        self._awaiting_will = self._awaiting_will + 1 if self._view.unwilled() else 0
        for event in self._listeners:
            event.set()
        return True

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


WILL_LISTS = 8
"""How many lists a quarter period apart (two periods in all) wait for a dead member's will
before the period applies again (no sharder may be running to write it)."""

EXPIRY_MARGIN = 0.05
"""Seconds past a Lease's expiry at which it is listed again: past it, so the list judges it
expired, by the same clock."""


class Sharder:
    """Assigns the primary objects to members and moves them (on the leader alone): see the
    module's documentation for the protocol, and :func:`~crewlet_operator.ring.next_step` for
    each decision. It writes as its own field manager, so its label writes and wills are told
    apart from the members' in an audit log."""

    def __init__(
        self,
        client: Client,
        resource: Resource,
        scope: Scope,
        *,
        labels: RingLabels,
        membership: Membership,
        key: Callable[[KubeObject], str],
        retry_period: float,
    ) -> None:
        self._client = client
        self._resource = resource
        self._labels = labels
        self._membership = membership
        self._key = key
        self._retry_period = retry_period
        self._informer = Informer(
            client, resource, InformerOptions(scope=scope, storage=MetadataOnly())
        )
        self._informer.add_handler(_Wake(membership.changed))

    async def run(self) -> None:
        """Watch the primary objects and make a pass over them whenever they or the members
        change (at least every ``retry_period``), until cancelled."""
        watching = asyncio.create_task(self._informer.run(), name="sharder informer")
        try:
            await self._informer.wait_for_sync()
            while True:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._retry_period):
                        await self._membership.changed.wait()
                self._membership.changed.clear()
                await self.shard_pass()
        finally:
            await cancel_and_wait(watching)

    async def shard_pass(self) -> int:
        """One pass over the cached objects; the number of writes made. First the wills of the
        members found dead (one write each, which hands all their objects to the heirs at
        once), then the label writes, :data:`SHARDER_WRITES` at a time (one at a time, a move
        of thousands would wait a round trip each: bench/NOTES.md, "Sharding"), then the
        deletion of the Leases of the dead members no object's label leads to and no other
        will names."""
        view = self._membership.view()
        if view is None or not view.live:
            return 0
        bequeathed = sum(
            await asyncio.gather(*(self._bequeath(dead, view.live) for dead in view.unwilled()))
        )
        if bequeathed:
            await self._membership.observe()  # the heirs hold the dead members' objects now
            view = self._membership.view() or view
        steps = []
        on_paths: set[str] = set()  # the members an object's label leads through
        for obj in self._informer.store.list():
            labels: Mapping[str, str] = (obj.get("metadata") or {}).get("labels") or {}
            slot = slot_of(self._key(obj))
            member = labels.get(self._labels.shard)
            if member is not None:
                on_paths.update(view.path(member, slot))
            step = next_step(labels, self._labels, slot, view)
            if step is not None:
                steps.append((obj, step))
        writes = asyncio.Semaphore(SHARDER_WRITES)

        async def write(obj: KubeObject, step: Assign | Drain) -> bool:
            async with writes:
                return await self._write(obj, step)

        written = await asyncio.gather(*(write(obj, step) for obj, step in steps))
        # A Lease another will names is kept until that will's own Lease is gone: the heirs of
        # a will never change (RingView.heirs), whatever the order of the deletions.
        named = {heir for dead, heirs in view.wills.items() for heir in heirs if heir != dead}
        forgotten = await asyncio.gather(
            *(self._forget(dead) for dead in view.wills.keys() - on_paths - named)
        )
        return bequeathed + sum(written) + sum(forgotten)

    async def _bequeath(self, dead: str, live: frozenset[str]) -> bool:
        """Write ``dead``'s will, naming ``live``, while its Lease is at the version it was
        judged dead by (refused otherwise: it changed, so it was not dead)."""
        version = self._membership.versions.get(dead, "")
        patch = {
            "metadata": {
                "resourceVersion": version,
                "annotations": {self._labels.heirs: will_text(live)},
            }
        }
        try:
            await self._client.patch(
                LEASE, dead, patch, self._membership.namespace, patch_type="merge"
            )
        except (ConflictError, NotFoundError):
            return False
        log.info("a member's will written", member=dead, heirs=sorted(live))
        return True

    async def _forget(self, dead: str) -> bool:
        """Delete the Lease of ``dead``, a member with a will that no object's label leads
        through any more, at the version it was listed at."""
        version = self._membership.versions.get(dead)
        try:
            await self._client.delete(
                LEASE, dead, self._membership.namespace, resource_version=version
            )
        except (ConflictError, NotFoundError):
            return False
        log.info("a dead member's lease deleted", member=dead)
        return True

    async def _write(self, obj: KubeObject, step: Assign | Drain) -> bool:
        """Label one object as ``step`` says, while its labels are those it was decided on;
        False when they are not (the watch brings the new ones, and the next pass decides
        again). A takeover's writes race the users' own changes to the same objects: a test of
        the labels alone lets those through, where the whole version would refuse them."""
        meta = obj.get("metadata") or {}
        labels: Mapping[str, str] = meta.get("labels") or {}
        patch, patch_type = self._patch(labels, str(meta.get("resourceVersion") or ""), step)
        try:
            await self._client.patch(
                self._resource,
                str(meta.get("name")),
                patch,
                meta.get("namespace"),
                patch_type=patch_type,
            )
        except (ConflictError, InvalidError, NotFoundError):
            return False
        log.info(
            "assigned" if isinstance(step, Assign) else "draining",
            namespace=meta.get("namespace"),
            name=meta.get("name"),
            member=step.member if isinstance(step, Assign) else labels.get(self._labels.shard),
        )
        return True

    def _patch(
        self, labels: Mapping[str, str], version: str, step: Assign | Drain
    ) -> tuple[Any, str]:
        """The patch for ``step`` on an object with ``labels`` (read at ``version``)."""
        shard, drain = self._labels.shard, self._labels.drain
        member = labels.get(shard)
        if isinstance(step, Drain):  # of an assigned object: next_step drains no other
            add = {"op": "add", "path": _label_path(drain), "value": "true"}
            return [_test(shard, member or ""), add], "json"
        if member is None:
            # An unassigned object is new: nothing races its first label but a stale cache.
            change = {shard: step.member, drain: None}
            return {"metadata": {"resourceVersion": version, "labels": change}}, "merge"
        ops: list[dict[str, Any]] = [
            _test(shard, member),
            {"op": "replace", "path": _label_path(shard), "value": step.member},
        ]
        if drain in labels:
            ops += [_test(drain, labels[drain]), {"op": "remove", "path": _label_path(drain)}]
        return ops, "json"


def _label_path(key: str) -> str:
    """The JSON pointer (RFC 6901) of the label ``key``."""
    return "/metadata/labels/" + key.replace("~", "~0").replace("/", "~1")


def _test(key: str, value: str) -> dict[str, str]:
    """A JSON patch operation that fails the patch unless label ``key`` is ``value``."""
    return {"op": "test", "path": _label_path(key), "value": value}


class _Wake:
    """An informer handler that sets an event on every change."""

    def __init__(self, event: asyncio.Event) -> None:
        self._event = event

    def on_add(self, obj: KubeObject, initial: bool = False) -> None:
        self._event.set()

    def on_update(self, old: KubeObject, new: KubeObject) -> None:
        self._event.set()

    def on_delete(self, obj: KubeObject) -> None:
        self._event.set()
