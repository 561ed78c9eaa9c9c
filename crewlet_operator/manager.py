"""The manager: runs the cache, the controllers, the leader elector and the servers, and shuts
them down in order.

Lifecycle
---------

::

    async with await Client.from_environment() as client:   # the manager never closes it
        manager = Manager(client, ManagerOptions(name="tenants"))  # its Lease: tenants-leader
        manager.controller("tenant").for_(TENANT).owns(NAMESPACE).complete(reconcile)
        await manager.run(handle_signals=True)   # returns once stopped

1. Build: ``Manager(client, options)`` makes no request; declare the controllers
   (:meth:`Manager.controller`), the runnables (:meth:`Manager.add`) and the RBAC they need
   before :meth:`Manager.run`.
2. Run: ``await manager.run()`` starts the health and metrics servers and the informers,
   waits for the caches to sync (:class:`TimeoutError` after ``cache_sync_timeout``), takes the
   lease with leader election, then starts the controllers, and returns only once the manager
   has stopped. :attr:`Manager.started` (an :class:`asyncio.Event`) is set once the controllers
   run: ``await manager.started.wait()`` from another task. A manager runs once.
3. Stop: :meth:`Manager.stop` is a plain method, not a coroutine: it asks :meth:`Manager.run`
   to shut down and returns at once (so a signal handler may call it). Await the task running
   :meth:`Manager.run` to know the shutdown is over. With ``run(handle_signals=True)`` SIGTERM
   and SIGINT call it. :func:`crewlet_operator.testing.run_manager` does all this for a test.

A standby replica (a follower, with leader election on) is *warm* by default: it runs its caches
and fills its controllers' queues while it waits, so a takeover reconciles at once. A *cold*
standby (``ManagerOptions.warm_standby=False``) starts its caches only once it leads.

Order on a graceful stop (SIGTERM, SIGINT or :meth:`Manager.stop`), as controller-runtime:

1. controllers stop taking work; in-flight reconciles finish (within
   ``graceful_shutdown_timeout``; then they are cancelled);
2. the lease is released, so another replica takes over at once;
3. the runnables stop, then the informers;
4. the probe and metrics servers stop.

If the lease is *lost* instead (no renewal within the deadline), nothing is drained: workers are
cancelled at once, so this replica stops writing before anyone else may lead, and :meth:`run`
raises :class:`LeadershipLostError` so the process exits and restarts clean.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import re
import signal
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import structlog

from crewlet_operator import metrics
from crewlet_operator._tasks import cancel_and_wait
from crewlet_operator.cache import Cache, InformerOptions
from crewlet_operator.controller import Builder, Controller
from crewlet_operator.errors import HealthCheckFailed
from crewlet_operator.errors import LeadershipLostError as LeadershipLostError  # noqa: PLC0414
from crewlet_operator.kube.client import Client, Scope
from crewlet_operator.kube.mapper import RESTMapper
from crewlet_operator.leader import LeaderElectionConfig, LeaderElector, default_identity
from crewlet_operator.metrics import EventLoopLag
from crewlet_operator.objects import KubeObject
from crewlet_operator.rbac import PolicyRule
from crewlet_operator.ring import RingLabels, member_name, slot_of
from crewlet_operator.serving import HealthServer, MetricsServer
from crewlet_operator.sharding import Membership, MemberSlots, ShardedBuilder, Sharder, Sharding

__all__ = [
    "LeadershipLostError",
    "Manager",
    "ManagerOptions",
    "Runnable",
    "Sharding",
    "default_namespace",
]

log = structlog.get_logger("crewlet_operator.manager")

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


class Runnable(Protocol):
    """Something the manager starts with its cache and stops after its controllers: watches
    beside the cache, such as :class:`~crewlet_operator.cache.named.NamedObjects`, or a
    background task of yours. Like the cache, it runs on every replica when standbys are warm
    (the default), and on the leader only when they are cold (``warm_standby=False``)."""

    async def start(self) -> None:
        """Begin; return once running (the manager awaits each start in turn)."""

    async def stop(self) -> None:
        """End everything it began; called once, on the way out."""


def default_namespace() -> str:
    """The pod's namespace in a cluster, else ``default``."""
    try:
        return SERVICE_ACCOUNT_NAMESPACE.read_text().strip()
    except OSError:
        return "default"


@dataclass(kw_only=True)
class ManagerOptions:
    """Manager settings; the defaults are controller-runtime's and kubebuilder's, but for the
    name, which has none: two controllers left on one default would share one Lease (one of
    them never runs, silently) and one field manager (each would take the other's objects for
    its own)."""

    name: str
    """The controller's name, unique among the controllers of a cluster (``my-controller``: a
    DNS-1123 label). The manager writes as it (its field manager, through
    :meth:`~crewlet_operator.kube.client.Client.with_field_manager`) and, unless
    ``leader_election_id`` says otherwise, elects on the Lease ``<name>-leader``. Objects
    applied under another field manager are not its own: renaming a controller that runs
    already orphans what it applied, so keep the name it applied under."""
    leader_election: bool = True
    leader_election_id: str | None = None
    """The Lease's name; None (the default): ``<name>-leader``."""
    leader_election_namespace: str | None = None
    identity: str = field(default_factory=default_identity)
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    health_probe_bind_address: str = ":8081"
    metrics_bind_address: str = ":8443"
    metrics_secure: bool = True
    metrics_cert_dir: Path | None = None
    graceful_shutdown_timeout: float = 30.0
    max_concurrent_reconciles: int = 1
    """Workers per controller unless its builder says otherwise (controller-runtime: 1)."""
    cache_sync_timeout: float = 120.0
    cache_options: InformerOptions | None = None
    warm_standby: bool = True
    """With leader election, whether a follower runs its caches (and the runnables of
    :meth:`Manager.add`) while it waits for the lease. True: it lists and watches every kind its
    controllers declare and queues their requests, so a takeover reconciles at once, from a warm
    cache; the cost is the caches' memory on *every* replica (each holds every watched object).
    False: a follower starts its caches and runnables only once it leads, so a standby costs
    little memory, but a takeover first lists everything (a slower takeover on a large cluster).
    A cold standby runs nothing before it leads, so it cannot run controllers with
    ``need_leader_election=False`` (:meth:`Manager.run` refuses them). Without leader election
    this has no effect."""
    exclusive_lease_labels: Mapping[str, str] | None = None
    """With leader election, labels that make the Lease one of a kind in the cluster: for a
    controller of which one install may act at a time, when each install elects on a Lease of
    its own namespace (two Helm releases, say). The labels are put on this manager's Lease, and
    it does not lead while another Lease carrying them, in any namespace or under another name,
    is held and live: it waits as a standby (a warm one keeps its caches), writes nothing, and
    says why in a warning and in ``/readyz`` (its ``one-leader-per-cluster`` check fails,
    naming that Lease). Of two installs that acquire at once, the one whose Lease is older
    (by creation, ties by namespace and name) leads, the other gives its lease up again. The
    manager's identity needs ``get``, ``list`` and ``watch`` on Leases in every namespace.
    None (the default): only its own Lease counts. Without leader election there is no Lease,
    and this has no effect."""
    freeze_gc_after_sync: bool = True
    """Once the caches have synced, collect garbage once and move every object then alive out
    of the cyclic garbage collector's sight (:func:`gc.freeze`): the caches and indexes live as
    long as the process, and every full collection after would walk them again (a start over
    3,000 Companies spent 1.2 s of 17 in full collections). False for a process whose objects
    at that moment are not meant to last."""
    sharding: Sharding | None = None
    """Spread the objects of one primary kind over every replica instead of one active replica
    and warm standbys: each replica holds a member Lease ``<name>-<hash>`` in the leader
    election namespace and reconciles the objects labelled for it; the leader also assigns and
    moves them (see :mod:`crewlet_operator.sharding`). Needs leader election; every replica
    runs its caches, so ``warm_standby`` has no effect. None (the default): one active
    replica."""

    def __post_init__(self) -> None:
        if len(self.name) > 63 or not _DNS1123_LABEL.fullmatch(self.name):
            raise ValueError(
                f"ManagerOptions(name={self.name!r}): the name must be a DNS-1123 label (at most "
                "63 lowercase letters, digits and '-', starting and ending with a letter or a "
                "digit), such as 'my-controller': the manager writes as it and elects on the "
                "Lease '<name>-leader'"
            )
        if self.sharding is not None and not self.leader_election:
            raise ValueError(
                "ManagerOptions(sharding=...) needs leader_election: the leader is the sharder"
            )

    @property
    def lease_name(self) -> str:
        """The Lease the manager elects on: ``leader_election_id``, else ``<name>-leader``."""
        return self.leader_election_id or f"{self.name}-leader"


class Manager:
    """Owns the shared cache and runs everything a controller process needs.

    It writes as its name (``options.name``), whatever field manager ``client`` has: its
    :attr:`client` is ``client`` under that field manager, and what it builds (the cache, which
    keeps that manager's ``managedFields``; the Lease; the controllers' writes through
    :attr:`client`) goes through it. Hand finalizers and event recorders :attr:`client` too.
    """

    def __init__(self, client: Client, options: ManagerOptions) -> None:
        self.options = options
        self.field_manager = options.name
        """The field manager of the manager's writes: its name."""
        self.client = client.with_field_manager(self.field_manager)
        """The client the manager and its controllers write with, as :attr:`field_manager`:
        ``client``'s connections, under the manager's name."""
        self.cache = Cache(self.client, self.options.cache_options)
        self.mapper = RESTMapper(self.client)
        """Kinds to resources by discovery, shared by the controllers."""
        self.controllers: list[Controller] = []
        self.runnables: list[Runnable] = []
        self.rbac_rules: list[PolicyRule] = []
        """Rules added with :meth:`add_rbac_rules`."""
        self._lease_words: list[Callable[[], Mapping[str, str]]] = []
        self.started = asyncio.Event()
        """Set once the caches have synced and this replica's controllers run (a follower's
        leader-only controllers wait for the lease, so a follower never sets it)."""
        self.health = HealthServer(self.options.health_probe_bind_address)
        self.metrics = MetricsServer(
            self.client,
            bind_address=self.options.metrics_bind_address,
            secure=self.options.metrics_secure,
            cert_dir=self.options.metrics_cert_dir,
        )
        self.loop_lag = EventLoopLag()
        """Keeps ``crewlet_operator_event_loop_lag_seconds`` while the manager runs."""
        self.elector: LeaderElector | None = None
        if self.options.leader_election:
            self.elector = LeaderElector(
                self.client,
                LeaderElectionConfig(
                    name=self.options.lease_name,
                    namespace=self.options.leader_election_namespace or default_namespace(),
                    identity=self.options.identity,
                    lease_duration=self.options.lease_duration,
                    renew_deadline=self.options.renew_deadline,
                    retry_period=self.options.retry_period,
                    annotations=self._lease_annotations,
                    exclusive_labels=self.options.exclusive_lease_labels,
                ),
            )
        self._stop = asyncio.Event()
        self._lost = False
        self._lost_because = "leader election lost"
        self._cold_campaigning = False
        self._started_runnables: list[Runnable] = []
        self._holding: asyncio.Task[None] | None = None
        self._froze_gc = False
        self._background: list[asyncio.Task[None]] = []
        self._sharded: set[str] = set()
        self.member: str | None = None
        """With sharding, this replica's member name (its member Lease's); None without."""
        self._member_elector: LeaderElector | None = None
        self._membership: Membership | None = None
        self._slots: MemberSlots | None = None
        self._sharder: Sharder | None = None
        if self.options.sharding is not None and self.elector is not None:
            self._shard_setup(self.options.sharding, self.elector.config)
        self.health.add_readyz_check("informers-synced", self.ready_to_lead)
        if self.elector is not None and self.options.exclusive_lease_labels is not None:
            self.health.add_readyz_check("one-leader-per-cluster", self.no_other_install_leads)
        if self.member is not None:
            self.health.add_readyz_check("shard-member", self.may_write_share)
        self.health.add_healthz_check("informers-watching", lambda: not self.cache.stale())

    def _shard_setup(self, sharding: Sharding, leader: LeaderElectionConfig) -> None:
        """The member Lease (renewed, and fencing, like the leader's) and the membership view."""
        self.member = member_name(self.options.name, self.options.identity)
        self._member_elector = LeaderElector(
            self.client,
            LeaderElectionConfig(
                name=self.member,
                namespace=leader.namespace,
                identity=leader.identity,
                lease_duration=leader.lease_duration,
                renew_deadline=leader.renew_deadline,
                retry_period=leader.retry_period,
                labels={self.ring_labels.member: self.ring_labels.ring},
            ),
        )
        self._membership = Membership(
            self.client,
            leader.namespace,
            self.ring_labels,
            leader.retry_period,
            leader.lease_duration,
        )
        # Narrowing waits a lease duration: the objects of a member that joins move one by one.
        self._slots = MemberSlots(
            self.ring_labels,
            self.member,
            self._membership,
            key=sharding.key,
            retry_period=leader.retry_period,
            settle=leader.lease_duration,
        )

    @property
    def ring_labels(self) -> RingLabels:
        """The ring's label keys: under ``Sharding.domain``, for the ring ``Sharding.ring``,
        else the manager's name. Without sharding, unused."""
        sharding = self.options.sharding
        if sharding is None:
            return RingLabels("", self.options.name)
        return RingLabels(sharding.domain, sharding.ring or self.options.name)

    def shard_labels_for(self, obj: KubeObject) -> dict[str, str]:
        """With sharding, the label a sharded controller puts on every child it writes for
        ``obj`` (an object of the sharded kind), so that the owned informers of the member
        holding ``obj`` (which select its slots) see them: ``{slot.<domain>/<ring>: <slot>}``.
        It never changes for an object, so a move rewrites no child. Empty without sharding."""
        sharding = self.options.sharding
        if sharding is None or self.member is None:
            return {}
        return {self.ring_labels.slot: str(slot_of(sharding.key(obj)))}

    def controller(self, name: str) -> Builder:
        """Start building a controller named ``name`` (names label metrics and logs)."""
        if any(c.name == name for c in self.controllers):
            raise ValueError(f"a controller named {name!r} already exists")
        if self.options.sharding is None or self.member is None or self._slots is None:
            return Builder(self, name)
        return ShardedBuilder(
            self,
            name,
            sharding=self.options.sharding,
            labels=self.ring_labels,
            member=self.member,
            slots=self._slots,
            defaults=self.options.cache_options,
            on_complete=self._sharded_controller,
        )

    def _sharded_controller(self, controller: Controller, scope: Scope) -> None:
        """A sharded controller was built: it runs on every member; the leader shards its
        primary kind's objects in ``scope``."""
        sharding = self.options.sharding
        if sharding is None or self._membership is None or self.elector is None:
            return
        self._sharded.add(controller.name)
        if self._sharder is None:
            self._sharder = Sharder(
                self.client.with_field_manager(f"{self.field_manager}-sharder"),
                sharding.resource,
                scope,
                labels=self.ring_labels,
                membership=self._membership,
                key=sharding.key,
                retry_period=self.elector.config.retry_period,
            )

    def add_controller(self, controller: Controller) -> None:
        """Run ``controller`` with the manager."""
        self.controllers.append(controller)

    def add(self, runnable: Runnable) -> None:
        """Start ``runnable`` with the cache and stop it after the controllers."""
        self.runnables.append(runnable)

    def add_rbac_rules(self, *rules: PolicyRule) -> None:
        """Declare rules the process needs beyond its controllers' (what its runnables read
        or write, say), for the RBAC generated from it: see :mod:`crewlet_operator.rbac`."""
        self.rbac_rules.extend(rules)

    def stop(self) -> None:
        """Ask :meth:`run` to shut down gracefully (safe to call from a signal handler)."""
        self._stop.set()

    def add_lease_annotations(self, provider: Callable[[], Mapping[str, str]]) -> None:
        """With leader election, call ``provider`` before each write of the Lease by this
        replica (each renewal, every ``retry_period``, and the release on a graceful stop):
        what it returns is merged into the Lease's annotations in the same request, so a
        leader can leave word for the next one (what it had finished, say) without a write of
        its own. The next leader finds it in :attr:`lease_annotations_found`. Empty leaves
        them as they are. ``Builder.with_checkpoint`` adds its
        :class:`~crewlet_operator.checkpoint.RestartCheckpoint` so."""
        self._lease_words.append(provider)

    def _lease_annotations(self) -> Mapping[str, str]:
        merged: dict[str, str] = {}
        for provider in self._lease_words:
            merged.update(provider())
        return merged

    @property
    def lease_annotations_found(self) -> dict[str, str]:
        """The Lease's annotations as this replica found them when it took the lease (what
        the previous leader left there: see :meth:`add_lease_annotations`); empty without
        leader election, before the lease is taken, or on a Lease it created."""
        return {} if self.elector is None else dict(self.elector.annotations_when_acquired)

    @property
    def is_leader(self) -> bool:
        """Whether this replica runs the leader-only controllers now."""
        return self.elector is None or self.elector.is_leader

    def ready_to_lead(self) -> bool:
        """``/readyz``'s ``informers-synced`` check: whether this replica could lead now.

        A leader, or a warm standby, is ready once every informer has synced: a warm standby
        that takes over reconciles at once from its caches, so readiness on a standby means
        "ready to lead", and a rolling update waits for the new replicas' caches before it
        stops the old ones. A cold standby (``warm_standby=False``) has no caches to sync
        until it leads: it is ready while it runs and campaigns for the lease, and once it
        leads, when its caches have synced.
        """
        return self._cold_campaigning or self.cache.synced

    def no_other_install_leads(self) -> bool:
        """``/readyz``'s ``one-leader-per-cluster`` check (with ``exclusive_lease_labels``):
        fails, saying why, while another install's Lease keeps this replica from leading.

        Such a replica could not lead now, so it is not ready, whatever its caches: a rollout
        of the second install stalls where everyone sees it, instead of passing for a standby.
        The answer names the other install's Lease, which anyone who can list Leases may read
        anyway, not its holder (the log names that).

        :raises HealthCheckFailed: with the reason, when it fails.
        """
        elector = self.elector
        if elector is None:
            return True
        rival = elector.blocked_by
        if rival is not None:
            raise HealthCheckFailed(
                f"another install of this controller leads in the cluster, on the Lease {rival}; "
                "this one does not lead while it does"
            )
        if elector.rivals_denied and not elector.is_leader:
            raise HealthCheckFailed(
                "may not list the Leases of every namespace, so cannot tell whether another "
                "install of this controller leads; this one does not lead until it can"
            )
        return True

    def member_blocked(self) -> str | None:
        """With sharding, why this replica may write none of its share now, or None: it does
        not hold its member Lease, has not listed the ring's Leases within a lease duration
        (so it holds no slot it can vouch for), or its own Lease carries a will (its objects
        are its heirs'). None without sharding."""
        if self._member_elector is None or self._membership is None:
            return None
        lease = self._member_elector.config
        if not self._member_elector.is_leader:
            return f"this replica does not hold its member Lease {lease.namespace}/{lease.name}"
        listed_at, view = self._membership.listed_at, self._membership.view()
        if listed_at is None or view is None or time.monotonic() - listed_at > lease.lease_duration:
            return (
                f"this member has not listed the ring's Leases in {lease.namespace} within a "
                f"lease duration ({lease.lease_duration:g} s), so it writes nothing of its share: "
                "grant list on leases there"
            )
        if lease.name in view.wills:
            return (
                f"this member's Lease {lease.namespace}/{lease.name} carries a will (heirs: "
                f"{', '.join(sorted(view.wills[lease.name]))}): its objects are its heirs', it "
                "writes nothing of them, and it stops to rejoin the ring under a new name"
            )
        return None

    def may_write_share(self) -> bool:
        """``/readyz``'s ``shard-member`` check (with sharding): fails, saying why, while this
        replica holds its member Lease but may write none of its share
        (:meth:`member_blocked`). Before it holds its Lease the check passes: it is then
        starting, which ``informers-synced`` tells.

        :raises HealthCheckFailed: with the reason, when it fails.
        """
        if self._member_elector is None or not self._member_elector.is_leader:
            return True
        blocked = self.member_blocked()
        if blocked is not None:
            raise HealthCheckFailed(blocked)
        return True

    async def run(self, *, handle_signals: bool = False) -> None:
        """Run until :meth:`stop` (or SIGTERM/SIGINT with ``handle_signals``).

        Raises :class:`LeadershipLostError` when the lease was lost, and :class:`ValueError`
        when a cold standby (``warm_standby=False``) has a controller that needs no leader
        election.
        """
        warm = self.elector is None or self.options.warm_standby
        everywhere = [c.name for c in self.controllers if not c.need_leader_election]
        if not warm and everywhere:
            raise ValueError(
                f"controllers {everywhere} run without leader election, on every replica, and "
                "need the caches there: they cannot run with warm_standby=False"
            )
        if handle_signals:
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.stop)
        await self.health.start()
        await self.metrics.start()
        await self.loop_lag.start()
        started: list[Controller] = []
        try:
            await self._serve(warm, started)
        finally:
            await self._shut_down(started, self._lost)
        if self._lost:
            raise LeadershipLostError(self._lost_because)

    async def _serve(self, warm: bool, started: list[Controller]) -> None:
        """Start the caches and controllers in order (the caches before the lease when warm,
        after it when cold), then wait for a stop or the loss of the lease."""
        if self._member_elector is not None:
            await self._serve_sharded(self._member_elector, started)
            return
        if warm and not await self._start_caches():
            return
        for controller in self.controllers:
            if not controller.need_leader_election:
                await controller.start()
                started.append(controller)
        if self.elector is not None:
            self._cold_campaigning = not warm
            try:
                # A standby has no first pass to make room for: its metadata-first informers
                # list their objects whole at once (a leader's controllers ask after theirs).
                following = self.cache.request_whole if warm else None
                if not await self._until_stopped(self.elector.acquire(following)):
                    return
            finally:
                self._cold_campaigning = False
            # Renew from now on, also while a cold standby's caches take their first list.
            self._holding = asyncio.create_task(self._hold(self.elector), name="lease renewal")
        if not warm and not await self._start_caches():
            return
        # What a warm standby queued while the previous leader was alive was that leader's
        # work: it waits behind what came after (what that leader may have missed).
        took_over_from = None if self.elector is None else self.elector.previous_holder_seen_at
        for controller in self.controllers:
            if controller not in started:
                await controller.start(resync_before=took_over_from)
                started.append(controller)
        log.info("controllers started", controllers=[c.name for c in started])
        self.started.set()
        await self._stop.wait()

    async def _serve_sharded(self, member: LeaderElector, started: list[Controller]) -> None:
        """With sharding: the caches, the member Lease, then the sharded controllers (and those
        that need no leader), at once on every replica; the leader-only controllers and the
        sharder once this replica leads. Losing either Lease stops everything at once."""
        metrics.SHARD_MEMBER_STATUS.labels(ring=self.ring_labels.ring).set_function(
            lambda: 0 if self.member_blocked() else 1
        )
        if not await self._start_caches():
            return
        if self._membership is not None:
            self._supervise(self._membership.run(), "ring membership")
        if self._slots is not None:
            self._supervise(self._slots.run(), "member slots")
        if not await self._until_stopped(member.acquire()):
            return
        if self._membership is not None:
            self._supervise(self._fence_on_own_will(self._membership, member), "own will")
        self._holding = asyncio.create_task(self._hold(member), name="member lease renewal")
        for controller in self.controllers:
            if controller.name in self._sharded or not controller.need_leader_election:
                await controller.start()
                started.append(controller)
        log.info("member of the ring", ring=self.ring_labels.ring, member=self.member)
        self.started.set()
        self._supervise(self._lead_and_shard(started), "sharder")
        await self._stop.wait()

    def _supervise(self, work: Coroutine[Any, Any, None], name: str) -> None:
        """Run ``work``, a loop meant to run until the manager stops, beside the controllers.
        Its failure stops the manager as a lost lease does, so that the process exits and is
        restarted: a replica whose membership, slots or sharder stopped would otherwise go on
        on a view that no longer moves (its objects waiting for their slots for ever)."""

        async def supervised() -> None:
            try:
                await work
            except Exception as failed:
                log.exception("a background loop failed; stopping", loop=name)
                self._lost = True
                self._lost_because = f"the {name} loop failed: {failed!r}"
                self._stop.set()

        self._background.append(asyncio.create_task(supervised(), name=name))

    async def _fence_on_own_will(self, membership: Membership, member: LeaderElector) -> None:
        """Stop the manager as a lost lease does once a list of the ring shows a will on the
        member Lease this replica still holds: its objects are its heirs' from then on (the
        gate writes nothing of them already), and a new process joins the ring under a new
        name, where the same name would stay willed for good."""
        listed = asyncio.Event()
        membership.notify(listed)
        while True:
            await listed.wait()
            listed.clear()
            view = membership.view()
            if view is not None and member.config.name in view.wills:
                self._lost_because = self.member_blocked() or "this member's Lease carries a will"
                log.error("this member's Lease carries a will; stopping", reason=self._lost_because)
                self._lost = True
                self._stop.set()
                return

    async def _lead_and_shard(self, started: list[Controller]) -> None:
        """Campaign for the leader Lease; once leading, start the leader-only controllers and
        run the sharder."""
        if self.elector is None:
            return
        await self.elector.acquire()
        self._background.append(asyncio.create_task(self._hold(self.elector), name="lease renewal"))
        for controller in self.controllers:
            if controller not in started:
                await controller.start()
                started.append(controller)
        if self._sharder is not None:
            await self._sharder.run()

    async def _start_caches(self) -> bool:
        """Start the informers and the runnables, and wait for the informers' first lists;
        False when a stop came first."""
        await self.cache.start()
        for runnable in self.runnables:
            await runnable.start()
            self._started_runnables.append(runnable)
        synced = await self._until_stopped(
            self.cache.wait_for_sync(self.options.cache_sync_timeout)
        )
        if synced and self.options.freeze_gc_after_sync and not self._froze_gc:
            gc.collect()
            gc.freeze()
            self._froze_gc = True
        return synced

    async def _hold(self, elector: LeaderElector) -> None:
        """Renew the lease; when it is lost, stop everything at once (fencing)."""
        try:
            await elector.hold()
        except Exception:
            # A replica that cannot renew cannot tell that it still leads: treat it as lost.
            log.exception("renewing the lease failed")
        self._lost = True
        self._stop.set()

    async def _until_stopped(self, awaitable: Awaitable[object]) -> bool:
        """Await ``awaitable`` unless a stop is requested first; True when it finished."""
        task = asyncio.ensure_future(awaitable)
        stopper = asyncio.create_task(self._stop.wait())
        done, pending = await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
        await cancel_and_wait(*pending)
        if task in done:
            task.result()  # re-raise a failure
            return True
        return False

    async def _shut_down(self, controllers: list[Controller], lost: bool) -> None:
        grace = self.options.graceful_shutdown_timeout
        if self._holding is not None:
            # Renewals end before the drain, as they always have: a leader that loses the
            # lease while draining could not be stopped from writing any more.
            await cancel_and_wait(self._holding)
        await cancel_and_wait(*self._background)
        if lost:
            await asyncio.gather(*(c.abort() for c in controllers))
        else:
            await asyncio.gather(*(c.stop(grace) for c in controllers))
            if self.elector is not None:
                await self.elector.release()
            if self._member_elector is not None:
                await self._member_elector.release()
        for runnable in reversed(self._started_runnables):
            await runnable.stop()
        await self.cache.stop()
        await self.loop_lag.stop()
        await self.metrics.stop()
        await self.health.stop()
        if self.member is not None:  # a stopped member reports nothing
            with contextlib.suppress(KeyError):
                metrics.SHARD_MEMBER_STATUS.remove(self.ring_labels.ring)
        if self._froze_gc:  # what the stopped manager held may be collected again
            gc.unfreeze()
            self._froze_gc = False
        log.info("manager stopped", leadership_lost=lost)
