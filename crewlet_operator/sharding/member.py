"""This replica's part in a ring: what a manager with sharding adds, and nothing it runs itself.

A :class:`RingMember` is built by the manager from ``ManagerOptions.sharding``. It gives the
manager what to run, and the manager runs it on its one run path, as it runs everything else:

- a Lease of its own (:attr:`RingMember.elector`), under which the sharded controllers run;
- loops that start with the caches: the membership's lists of the ring's Leases and the
  member's slots (:attr:`RingMember.loops`); one that runs while it holds its Lease, the fence on
  its own will (:meth:`RingMember.fence_on_own_will`); one that runs while it leads, the sharder
  (:attr:`RingMember.sharder`);
- what it makes of a controller whose primary kind is the sharded one (it is a
  :class:`~crewlet_operator.controller.Narrowing`): the primary's informer narrowed to the
  member's shard label, the children's to its slots, the reconciler wrapped in the
  :class:`~crewlet_operator.sharding.gate.Gate`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import replace
from typing import Any

import structlog

from crewlet_operator import metrics
from crewlet_operator.cache import Cache, ClusterView, InformerOptions
from crewlet_operator.controller import Controller
from crewlet_operator.errors import HealthCheckFailed, LeadershipLostError
from crewlet_operator.kube.client import Client, Scope
from crewlet_operator.kube.resources import Resource
from crewlet_operator.leader import LeaderElectionConfig, LeaderElector
from crewlet_operator.objects import KubeObject
from crewlet_operator.predicate import Predicate
from crewlet_operator.rbac import PolicyRule
from crewlet_operator.reconcile import ReconcileFunc
from crewlet_operator.sharding.gate import Gate, heirs_relabels_skipped
from crewlet_operator.sharding.membership import VACANCY_PERIODS, Membership
from crewlet_operator.sharding.options import Sharding
from crewlet_operator.sharding.ring import (
    MemberState,
    RingLabels,
    member_name,
    member_names,
    slot_of,
)
from crewlet_operator.sharding.sharder import SETTLE_PERIODS, Sharder
from crewlet_operator.sharding.slots import MemberSlots

__all__ = ["RingMember"]

log = structlog.get_logger("crewlet_operator.sharding")

Loop = tuple[str, Callable[[], Coroutine[Any, Any, None]]]
"""A loop meant to run until the manager stops, by its name (what a failure names)."""


class RingMember:
    """A replica's membership of the ring ``sharding`` describes, for a manager ``name``,
    whose leader Lease is ``leader`` (the members share its namespace and timings). Its member
    Lease is renewed through ``lease_client`` (the manager's connections for Leases), the rest
    through ``client``. The sharder reads every object of the sharded kind from ``view``, the
    manager's leader's view."""

    def __init__(
        self,
        client: Client,
        lease_client: Client,
        cache: Cache,
        view: ClusterView,
        sharding: Sharding,
        *,
        name: str,
        leader: LeaderElectionConfig,
    ) -> None:
        self._client = client
        self._cache = cache
        self._view = view
        self.sharding = sharding
        self.labels = RingLabels(sharding.domain, sharding.ring or name)
        """The ring's label keys."""
        self._lease_client = lease_client
        self._leader = leader
        self._names = None if sharding.members is None else member_names(name, sharding.members)
        self.name = member_name(name, leader.identity)
        """This replica's member name: its member Lease's. With ``Sharding.members``, the one
        it claims (:meth:`claim`); until then one of its own, which labels nothing."""
        self.elector = self._elector(self.name)
        """The member Lease (renewed, and fencing, as the leader's)."""
        self.membership = Membership(
            client,
            leader.namespace,
            self.labels,
            leader.retry_period,
            leader.lease_duration,
            vacancy=0.0 if self._names is None else VACANCY_PERIODS * leader.retry_period,
        )
        # Narrowing waits a lease duration: the objects of a member that joins move one by one.
        self.slots = MemberSlots(
            self.labels,
            self.name,
            self.membership,
            key=sharding.key,
            retry_period=leader.retry_period,
            settle=leader.lease_duration,
            ring_settle=self._ring_settle(leader.retry_period),
        )
        self._sharder_client = client.with_field_manager(f"{client.field_manager}-sharder")
        self._retry_period = leader.retry_period
        self.controllers: list[Controller] = []
        """The sharded controllers: they run on every member, while it holds its Lease."""
        self.sharder: Sharder | None = None
        """Assigns and moves the objects while this replica leads; built with the first
        sharded controller."""
        self.loops: list[Loop] = [
            ("ring membership", self.membership.run),
            ("member slots", self.slots.run),
        ]
        """What runs with the caches, on every replica."""
        view.narrowed(sharding.resource)

    # -- what the manager asks ------------------------------------------------------------------
    def narrows(self, primary: Resource) -> bool:
        """Whether a controller of ``primary`` is sharded."""
        return primary == self.sharding.resource

    def primary(self, options: InformerOptions) -> InformerOptions:
        """The sharded kind's informer selects this member's label (and those of the dead
        members it inherits from, as the wills come)."""
        return replace(options, scope=self.slots.primary_scope(options.scope, frozenset()))

    def owned(self, options: InformerOptions) -> InformerOptions:
        """A child kind's informer selects the slots this member holds (children written with
        :meth:`labels_for`): none until the member knows them."""
        return replace(options, scope=self.slots.scope(options.scope, frozenset()))

    def wrap(self, reconcile: ReconcileFunc) -> ReconcileFunc:
        """``reconcile`` behind the gate."""
        gate = Gate(
            reconcile,
            self._cache,
            self.sharding.resource,
            self.labels,
            slots=self.slots,
        )
        return gate.reconcile

    def predicates(self) -> Sequence[Predicate]:
        """The events of objects this member does not write ask for no reconcile, nor does the
        add of a dead member's object (:meth:`MemberSlots.primary_predicate
        <.slots.MemberSlots.primary_predicate>`: asked for when its will leaves it here), nor
        its relabel for this member, its heir (:func:`~.gate.heirs_relabels_skipped`)."""
        return [self.slots.primary_predicate(), heirs_relabels_skipped(self.labels, self.slots)]

    def owned_predicates(self) -> Sequence[Predicate]:
        """A child listed into a slot not covered yet asks for no reconcile
        (:meth:`MemberSlots.children_predicate <.slots.MemberSlots.children_predicate>`)."""
        return [self.slots.children_predicate()]

    def built(
        self, controller: Controller, primary: Scope, owned: Sequence[tuple[Resource, Scope]]
    ) -> None:
        """A sharded controller was built, its primary's informer in ``primary`` and each
        child kind's in its scope (before they were narrowed): the slots follow its informers,
        it runs on every member, and the leader shards its objects."""
        resource = self.sharding.resource
        self.slots.add_primary(self._cache.informer(resource), primary)
        for child, scope in owned:
            self.slots.add_children(self._cache.informer(child), scope)
        controller.add_rbac_rules(PolicyRule.on(resource, "patch"))
        self.slots.on_ready(controller.requeue)
        self.controllers.append(controller)
        if self.sharder is None:
            self.sharder = Sharder(
                self._sharder_client,
                resource,
                self._view,
                primary,
                labels=self.labels,
                membership=self.membership,
                key=self.sharding.key,
                retry_period=self._retry_period,
                evidence=self.elector.config.pod is not None,
                settle=self._ring_settle(self._retry_period),
            )

    def _ring_settle(self, retry_period: float) -> float:
        """Seconds in which no member may have joined for the ring to be settled: the sharder
        decides nothing, and a member caches no slot the ring gives it, before."""
        settle = self.sharding.settle
        return SETTLE_PERIODS * retry_period if settle is None else settle

    def labels_for(self, obj: KubeObject) -> dict[str, str]:
        """The slot label of ``obj``'s children: ``{slot.<domain>/<ring>: <slot>}``."""
        return {self.labels.slot: str(slot_of(self.sharding.key(obj)))}

    # -- what runs ------------------------------------------------------------------------------
    def _elector(self, name: str) -> LeaderElector:
        """An elector of the member Lease ``name``, with the leader Lease's timings and Pod."""
        leader = self._leader
        return LeaderElector(
            self._lease_client,
            LeaderElectionConfig(
                name=name,
                namespace=leader.namespace,
                identity=leader.identity,
                lease_duration=leader.lease_duration,
                renew_deadline=leader.renew_deadline,
                retry_period=leader.retry_period,
                labels={self.labels.member: self.labels.ring},
                pod=leader.pod,
            ),
        )

    async def claim(self) -> LeaderElector:
        """The elector of the member Lease this replica campaigns for, before it campaigns.

        Without ``Sharding.members``, its own (:attr:`elector`). With them, the first of the
        fixed names that is free: never created, or released (:attr:`Membership.vacant
        <crewlet_operator.sharding.membership.Membership.vacant>`), and with no will, which
        leaves its objects to its heirs until the sharder deletes it. This replica takes it
        at once, with its objects, which keep their labels. While every name is held it waits
        as a standby, listing the ring's Leases four times a retry period: a rolling restart's
        new replica takes the name its predecessor releases before the sharder may judge it
        dead (:data:`~crewlet_operator.sharding.membership.VACANCY_PERIODS`). A name held
        by a replica that died is taken only after its will and relabelling, when the sharder
        deletes its Lease; but a process restarted in the Pod (and container) that held a
        name takes that name back at once, its objects with it, as a restarted leader takes
        back its lease, unless the sharder wrote its will first."""
        if self._names is None:
            return self.elector
        waiting = False
        while True:
            if await self.membership.observe():
                listed, view = self.membership.versions, self.membership.view()
                wills = view.wills if view is not None else {}
                # Its own name first: a process restarted in its Pod takes back the name it
                # held (the elector's evidence, restarted here), unless a will came first.
                for name in sorted(self._names, key=lambda n: not self._held_here(n)):
                    free = name not in listed or name in self.membership.vacant
                    if name in wills or not (free or self._held_here(name)):
                        continue
                    if await self._take(name):
                        return self.elector
                if not waiting:
                    waiting = True
                    log.info("every member name is held: waiting for one", ring=self.labels.ring)
            await asyncio.sleep(self._retry_period / 4)

    def _held_here(self, name: str) -> bool:
        """Whether the member Lease ``name`` was last held from this replica's Pod and
        container, at the last list: by this process before a restart."""
        own, held = self._leader.pod, self.membership.holders.get(name)
        return own is not None and held is not None and held[0].pod.same_container(own)

    async def _take(self, name: str) -> bool:
        """Take the member Lease ``name`` and write as it; False when another replica did
        first, or a will came with it."""
        elector = self._elector(name)
        if not await elector.try_acquire():
            return False
        if self.labels.heirs in elector.annotations_when_acquired:
            await elector.release()  # the sharder found it dead first: its heirs' now
            return False
        with contextlib.suppress(KeyError):  # the name it had until now labels nothing
            metrics.LEADER_ELECTION_MASTER_STATUS.remove(self.name)
        self.name, self.elector = name, elector
        await self.slots.rename(name)
        return True

    async def start(self) -> None:
        """Report ``crewlet_operator_shard_member_status`` (a Runnable, with the caches), and
        have the sharder read the leader's view (which starts once this replica leads)."""
        metrics.SHARD_MEMBER_STATUS.labels(ring=self.labels.ring).set_function(
            lambda: 0 if self.blocked() else 1
        )
        if self.sharder is not None:
            self.sharder.watch()

    async def stop(self) -> None:
        """A stopped member reports nothing."""
        with contextlib.suppress(KeyError):
            metrics.SHARD_MEMBER_STATUS.remove(self.labels.ring)

    async def fence_on_own_will(self) -> None:
        """Raise :class:`LeadershipLostError` once a list of the ring shows a will on the
        member Lease this replica still holds: its objects are its heirs' from then on (the
        gate writes nothing of them already), and a new process joins the ring under a new
        name, where the same name would stay willed for good. It starts once this replica holds
        its member Lease and its sharded controllers run: it says so first."""
        log.info("member of the ring", ring=self.labels.ring, member=self.name)
        listed = self.membership.listed.subscribe()
        while True:
            await listed.wait()
            listed.clear()
            view = self.membership.view()
            if view is not None and view.state(self.name) is MemberState.WILLED:
                raise LeadershipLostError(self.blocked() or "this member's Lease carries a will")

    def blocked(self) -> str | None:
        """Why this replica may write none of its share now, or None: it does not hold its
        member Lease, has not listed the ring's Leases within a lease duration (so it holds no
        slot it can vouch for), or its own Lease carries a will (its objects are its heirs')."""
        lease = self.elector.config
        if not self.elector.is_leader:
            return f"this replica does not hold its member Lease {lease.namespace}/{lease.name}"
        listed_at, view = self.membership.listed_at, self.membership.view()
        if listed_at is None or view is None or time.monotonic() - listed_at > lease.lease_duration:
            return (
                f"this member has not listed the ring's Leases in {lease.namespace} within a "
                f"lease duration ({lease.lease_duration:g} s), so it writes nothing of its share: "
                "grant list on leases there"
            )
        if view.state(lease.name) is MemberState.WILLED:
            return (
                f"this member's Lease {lease.namespace}/{lease.name} carries a will (heirs: "
                f"{', '.join(sorted(view.wills[lease.name]))}): its objects are its heirs', it "
                "writes nothing of them, and it stops to rejoin the ring under a new name"
            )
        return None

    def may_write_share(self) -> bool:
        """``/readyz``'s ``shard-member`` check: fails, saying why, while this replica holds its
        member Lease but may write none of its share (:meth:`blocked`). Before it holds its
        Lease the check passes: it is then starting, which ``informers-synced`` tells.

        :raises HealthCheckFailed: with the reason, when it fails.
        """
        if not self.elector.is_leader:
            return True
        blocked = self.blocked()
        if blocked is not None:
            raise HealthCheckFailed(blocked)
        return True
