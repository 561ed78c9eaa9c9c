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

One run path
------------

Whatever the options, the manager sorts what it runs into groups, as controller-runtime's
runnable groups do, and starts them in one order on one path:

1. the *servers*: health probes, metrics, the event loop's lag;
2. the *caches*: the cache's informers, the cluster view (a
   :class:`~crewlet_operator.cache.ClusterView`; without leader election the leader's view
   too), the runnables of :meth:`Manager.add` and the loops that follow them (with sharding,
   the ring's membership and the member's slots), then their first lists (a cold standby
   starts them once it holds its first Lease instead);
3. the controllers that run *everywhere*, on every replica (``need_leader_election=False``);
4. the *elections*, one Lease each, in order: with sharding the member's Lease first (the
   sharded controllers and the fence on its own will run while it holds it), then the leader's
   (the leader's view first, then the other controllers, and the sharder with sharding). The
   first is awaited; the manager counts as started once it holds it and its controllers run.
   Later ones campaign beside.

A feature adds to the groups, never a path of its own.

Order on a graceful stop (SIGTERM, SIGINT or :meth:`Manager.stop`), as controller-runtime:

1. controllers stop taking work; in-flight reconciles finish (within
   ``graceful_shutdown_timeout``; then they are cancelled);
2. the leases are released, the leader's first, so another replica takes over at once;
3. the runnables stop, then the informers;
4. the probe and metrics servers stop.

If the lease is *lost* instead (no renewal within the deadline), nothing is drained: workers are
cancelled at once, so this replica stops writing before anyone else may lead, and :meth:`run`
raises :class:`LeadershipLostError` so the process exits and restarts clean.
"""

from __future__ import annotations

import asyncio
import gc
import re
import signal
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import structlog

from crewlet_operator._tasks import cancel_and_wait
from crewlet_operator.cache import Cache, ClusterView, InformerOptions
from crewlet_operator.controller import Builder, Controller, Narrowing
from crewlet_operator.errors import HealthCheckFailed
from crewlet_operator.errors import LeadershipLostError as LeadershipLostError  # noqa: PLC0414
from crewlet_operator.incarnation import PodRef
from crewlet_operator.kube.client import Client
from crewlet_operator.kube.mapper import RESTMapper
from crewlet_operator.kube.resources import Resource
from crewlet_operator.kube.retry import RetryPolicy
from crewlet_operator.leader import LeaderElectionConfig, LeaderElector, default_identity
from crewlet_operator.metrics import EventLoopLag
from crewlet_operator.objects import KubeObject
from crewlet_operator.rbac import PolicyRule
from crewlet_operator.serving import HealthServer, MetricsServer
from crewlet_operator.sharding import Sharding
from crewlet_operator.sharding.member import RingMember

__all__ = [
    "LeadershipLostError",
    "Manager",
    "ManagerOptions",
    "Runnable",
    "Sharding",
    "default_namespace",
]

log = structlog.get_logger("crewlet_operator.manager")

LEASE_RETRIES = RetryPolicy(max_retries=0)
"""The Lease client's: none. An elector retries each renewal every retry period until its
renew deadline; a transport that retried a refused renewal for up to 10 s more, behind the
``Retry-After`` of a throttled API server, would spend the deadline on one attempt."""

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
    takeover_on_evidence: bool = True
    """With leader election, let a standby take the lease before it expires on the API server's
    word that its holder's process is gone (its Pod deleted, its container terminated or
    restarted), and a process restarted in the same Pod take it back at once: a crash costs
    about a second instead of the lease duration. The replica's Pod comes from the downward
    API (``POD_NAMESPACE`` and ``POD_NAME``, with ``POD_UID`` and ``CONTAINER_NAME`` when set:
    :meth:`~crewlet_operator.incarnation.PodRef.from_env`); without them it does nothing. Needs
    ``get``, ``list`` and ``watch`` on Pods in the Lease's namespace (in the leader election
    Role). :mod:`crewlet_operator.incarnation` says what counts as evidence, and its hazards.
    Without evidence (a node lost, a partition) the lease's expiry still decides."""
    pod: PodRef | None = None
    """The replica's Pod, for ``takeover_on_evidence``; None (the default): the downward API's
    (:meth:`PodRef.from_env <crewlet_operator.incarnation.PodRef.from_env>`). A test that runs
    replicas in one process gives each its own."""
    freeze_gc_after_sync: bool = True
    """Once the caches have synced, collect garbage once and move every object then alive out
    of the cyclic garbage collector's sight (:func:`gc.freeze`): the caches and indexes live as
    long as the process, and every full collection after would walk them again (a start over
    3,000 Companies spent 1.2 s of 17 in full collections). False for a process whose objects
    at that moment are not meant to last."""
    sharding: Sharding | None = None
    """Spread the objects of one primary kind over every replica instead of one active replica
    and warm standbys: each replica holds a member Lease (``<name>-<hash>``, or one of the
    fixed ``<name>-member-<n>`` of ``Sharding.members``) in the leader election namespace and
    reconciles the objects labelled for it; the leader also assigns and
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


Loop = tuple[str, Callable[[], Coroutine[Any, Any, None]]]
"""A loop meant to run until the manager stops, by its name (what a failure names)."""


@dataclass
class Election:
    """A Lease, and what runs on this replica while it holds it."""

    name: str
    """What the Lease is for (``leader``, ``member``), in logs and task names."""
    elector: LeaderElector
    controllers: list[Controller] = field(default_factory=list)
    loops: list[Loop] = field(default_factory=list)
    claim: Callable[[], Awaitable[LeaderElector]] | None = None
    """What chooses the Lease right before the campaign, when it is not known before (a ring
    member's, of a fixed set): it replaces :attr:`elector`."""
    views: list[ClusterView] = field(default_factory=list)
    """Views that start once the Lease is held, before its controllers (the leader's view)."""


@dataclass
class RunnableGroups:
    """What a manager runs, sorted once by when it runs (see the module's "One run path")."""

    everywhere: list[Controller]
    """Controllers that run on every replica, once the caches have synced."""
    elections: list[Election]
    """Leases in the order they are campaigned for, each with what runs while it is held."""
    with_caches: list[Loop]
    """Loops that start once the caches have synced."""
    views: list[ClusterView]
    """Views that start with the caches (the cluster view; the leader's view too where
    nothing is elected)."""


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
        self.cluster_view = ClusterView(self.client, self.cache)
        """Every object of the kinds declared in it, whatever share of them this replica
        reconciles: what a question of the whole cluster reads on every replica (see
        :class:`~crewlet_operator.cache.ClusterView`). Declare in it what a sharded replica
        needs beyond its share, as narrowly as a scope can say (every object of a kind here is
        every object on every replica)."""
        self.leader_view = ClusterView(self.client, self.cache)
        """The same, for what runs on the leader alone (its controllers, the sharder): listed
        once this replica leads, so that the other replicas of a sharded ring do not hold every
        object of a kind for a question only the leader asks. Where the manager's cache holds
        every object already (no sharding), it reads that informer and lists nothing."""
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
        self._lease_client: Client | None = None
        if self.options.leader_election:
            # Made before the fence is set, so that it has none: the Lease's own writes (its
            # renewals, its release) are what the fence is judged by.
            self._lease_client = self.client.with_own_connections(retries=LEASE_RETRIES)
            self.client.write_fence = self._check_leases
            self.elector = LeaderElector(
                self._lease_client,
                LeaderElectionConfig(
                    name=self.options.lease_name,
                    namespace=self.options.leader_election_namespace or default_namespace(),
                    identity=self.options.identity,
                    lease_duration=self.options.lease_duration,
                    renew_deadline=self.options.renew_deadline,
                    retry_period=self.options.retry_period,
                    annotations=self._lease_annotations,
                    exclusive_labels=self.options.exclusive_lease_labels,
                    pod=(self.options.pod or PodRef.from_env())
                    if self.options.takeover_on_evidence
                    else None,
                ),
            )
        self.ring: RingMember | None = None
        """With sharding, this replica's part in the ring (:mod:`crewlet_operator.sharding`);
        None without."""
        if self.options.sharding is not None and self.elector is not None:
            self.ring = RingMember(
                self.client,
                self._lease_client or self.client,
                self.cache,
                self.leader_view,
                self.options.sharding,
                name=self.options.name,
                leader=self.elector.config,
            )
            self.add(self.ring)
            self.cluster_view.narrowed(self.options.sharding.resource)
        self._stop = asyncio.Event()
        self._lost = False
        self._lost_because = "leader election lost"
        self._cold_campaigning = False
        self._caches_started = False
        self._started_runnables: list[Runnable] = []
        self._started_views: list[ClusterView] = []
        self._running: list[Controller] = []
        self._electors: list[LeaderElector] = []
        self._holding: list[asyncio.Task[None]] = []
        self._background: list[asyncio.Task[None]] = []
        self._froze_gc = False
        self.health.add_readyz_check("informers-synced", self.ready_to_lead)
        if self.elector is not None and self.options.exclusive_lease_labels is not None:
            self.health.add_readyz_check("one-leader-per-cluster", self.no_other_install_leads)
        if self.ring is not None:
            self.health.add_readyz_check("shard-member", self.ring.may_write_share)
        self.health.add_healthz_check("informers-watching", lambda: not self.cache.stale())

    @property
    def member(self) -> str | None:
        """With sharding, this replica's member name (its member Lease's); None without."""
        return None if self.ring is None else self.ring.name

    def shard_labels_for(self, obj: KubeObject) -> dict[str, str]:
        """With sharding, the label a sharded controller puts on every child it writes for
        ``obj`` (an object of the sharded kind), so that the owned informers of the member
        holding ``obj`` (which select its slots) see them: ``{slot.<domain>/<ring>: <slot>}``.
        It never changes for an object, so a move rewrites no child. Empty without sharding."""
        return {} if self.ring is None else self.ring.labels_for(obj)

    def may_write_share(self) -> bool:
        """``/readyz``'s ``shard-member`` check (with sharding; True without): see
        :meth:`RingMember.may_write_share
        <crewlet_operator.sharding.member.RingMember.may_write_share>`.

        :raises HealthCheckFailed: with the reason, when it fails.
        """
        return self.ring is None or self.ring.may_write_share()

    def controller(self, name: str) -> Builder:
        """Start building a controller named ``name`` (names label metrics and logs)."""
        if any(c.name == name for c in self.controllers):
            raise ValueError(f"a controller named {name!r} already exists")
        return Builder(self, name)

    def narrowing(self, primary: Resource) -> Narrowing | None:
        """What this manager makes of a controller of ``primary``: with sharding, of the
        sharded kind, its informers narrowed to this member's share and its reconciler behind
        the gate (:class:`~crewlet_operator.sharding.member.RingMember`); else nothing."""
        return self.ring if self.ring is not None and self.ring.narrows(primary) else None

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

    def _check_leases(self) -> None:
        """The client's write fence: raise :class:`LeadershipLostError` when a Lease this
        replica holds may have passed to another (its last renewal is older than the renew
        deadline), so that a leader frozen past its lease writes nothing when it resumes."""
        if self.elector is not None:
            self.elector.check_may_write()
        if self.ring is not None:
            self.ring.elector.check_may_write()

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

    def groups(self) -> RunnableGroups:
        """What this manager runs, sorted by when it runs (see the module's "One run path")."""
        ring, elector = self.ring, self.elector
        sharded = [] if ring is None else ring.controllers
        everywhere = [
            c
            for c in self.controllers
            if c not in sharded and (elector is None or not c.need_leader_election)
        ]
        elections: list[Election] = []
        with_caches: list[Loop] = []
        if ring is not None:
            with_caches += ring.loops
            elections.append(
                Election(
                    "member",
                    ring.elector,
                    list(sharded),
                    [("own will", ring.fence_on_own_will)],
                    claim=ring.claim,
                )
            )
        if elector is not None:
            leader = Election(
                "leader",
                elector,
                [c for c in self.controllers if c not in sharded and c not in everywhere],
            )
            if ring is not None and ring.sharder is not None:
                leader.loops.append(("sharder", ring.sharder.run))
            leader.views.append(self.leader_view)
            elections.append(leader)
        # Without an election, what runs on the leader runs here from the start.
        views = [self.cluster_view] + ([self.leader_view] if elector is None else [])
        return RunnableGroups(everywhere, elections, with_caches, views)

    @property
    def _warm(self) -> bool:
        """Whether the caches start before any Lease is held: without leader election, for a
        warm standby, and with sharding (every member reconciles its share)."""
        return self.elector is None or self.options.warm_standby or self.ring is not None

    async def run(self, *, handle_signals: bool = False) -> None:
        """Run until :meth:`stop` (or SIGTERM/SIGINT with ``handle_signals``).

        Raises :class:`LeadershipLostError` when the lease was lost, and :class:`ValueError`
        when a cold standby (``warm_standby=False``) has a controller that needs no leader
        election.
        """
        groups = self.groups()
        if not self._warm and groups.everywhere:
            raise ValueError(
                f"controllers {[c.name for c in groups.everywhere]} run without leader "
                "election, on every replica, and need the caches there: they cannot run with "
                "warm_standby=False"
            )
        if handle_signals:
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.stop)
        await self.health.start()
        await self.metrics.start()
        await self.loop_lag.start()
        try:
            await self._serve(groups)
        finally:
            await self._shut_down(self._lost)
        if self._lost:
            raise LeadershipLostError(self._lost_because)

    async def _serve(self, groups: RunnableGroups) -> None:
        """Start the groups in order, then wait for a stop or the loss of a Lease."""
        if self._warm and not await self._start_caches(groups):
            return
        await self._start_controllers(groups.everywhere, None)
        elections = iter(groups.elections)
        first = next(elections, None)
        if first is not None and not await self._until_stopped(self._elect(first, groups)):
            return
        for election in elections:
            self._supervise(self._elect(election, groups), f"{election.name} election")
        log.info("controllers started", controllers=[c.name for c in self._running])
        self.started.set()
        await self._stop.wait()

    async def _elect(self, election: Election, groups: RunnableGroups) -> None:
        """Campaign for ``election``'s Lease; once held, renew it (losing it stops everything
        at once), start the caches if they wait for it (a cold standby), then what runs under
        it, the controllers with what a warm standby queued before the takeover demoted."""
        # A standby with no controller running has no first pass to make room for: its
        # metadata-first informers list their objects whole at once (a running controller's
        # first pass asks after its own).
        following = self.cache.request_whole if self._warm and not self._running else None
        self._cold_campaigning = not self._warm
        try:
            if election.claim is not None:
                election.elector = await election.claim()
            await election.elector.acquire(following)
        finally:
            self._cold_campaigning = False
        self._electors.append(election.elector)
        self._holding.append(
            asyncio.create_task(self._hold(election.elector), name=f"{election.name} lease renewal")
        )
        if not self._caches_started and not await self._start_caches(groups):
            return
        for view in election.views:
            await view.start()
            self._started_views.append(view)
        # What a warm standby queued while the previous holder was alive was that holder's
        # work: it waits behind what came after (what that holder may have missed).
        await self._start_controllers(
            election.controllers, election.elector.previous_holder_seen_at
        )
        for name, loop in election.loops:
            self._supervise(loop(), name)

    async def _start_controllers(
        self, controllers: list[Controller], resync_before: float | None
    ) -> None:
        for controller in controllers:
            await controller.start(resync_before=resync_before)
            self._running.append(controller)

    def _supervise(self, work: Coroutine[Any, Any, None], name: str) -> None:
        """Run ``work``, a loop meant to run until the manager stops, beside the controllers.
        Its failure stops the manager as a lost lease does, so that the process exits and is
        restarted: a replica whose membership, slots or sharder stopped would otherwise go on
        on a view that no longer moves (its objects waiting for their slots for ever). A loop
        that raises :class:`LeadershipLostError` (a member that finds a will on its own Lease)
        stops it for the reason it gives."""

        async def supervised() -> None:
            try:
                await work
            except LeadershipLostError as lost:
                log.error("stopping", loop=name, reason=str(lost))
                self._lose(str(lost))
            except Exception as failed:
                log.exception("a background loop failed; stopping", loop=name)
                self._lose(f"the {name} loop failed: {failed!r}")

        self._background.append(asyncio.create_task(supervised(), name=name))

    def _lose(self, because: str) -> None:
        self._lost = True
        self._lost_because = because
        self._stop.set()

    async def _start_caches(self, groups: RunnableGroups) -> bool:
        """Start the informers, the cluster view and the runnables, wait for the informers'
        first lists, then start the loops that follow the caches; False when a stop came
        first. The runnables start first: one may have the view read more (the sharder)."""
        self._caches_started = True
        for runnable in self.runnables:
            await runnable.start()
            self._started_runnables.append(runnable)
        for view in groups.views:
            await view.start()
            self._started_views.append(view)
        await self.cache.start()
        synced = await self._until_stopped(
            self.cache.wait_for_sync(self.options.cache_sync_timeout)
        )
        if synced and self.options.freeze_gc_after_sync and not self._froze_gc:
            gc.collect()
            gc.freeze()
            self._froze_gc = True
        if synced:
            for name, loop in groups.with_caches:
                self._supervise(loop(), name)
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

    async def _shut_down(self, lost: bool) -> None:
        grace = self.options.graceful_shutdown_timeout
        if lost:
            await cancel_and_wait(*self._holding)
            await cancel_and_wait(*self._background)
            await asyncio.gather(*(c.abort() for c in self._running))
        else:
            # The leases are renewed through the drain, which may outlast a lease: a leader
            # that stopped renewing would have its work taken over while it still wrote. One
            # that cannot renew any more writes nothing past its deadline (the client's fence).
            await cancel_and_wait(*self._background)
            await asyncio.gather(*(c.stop(grace) for c in self._running))
            await cancel_and_wait(*self._holding)
            for elector in reversed(self._electors):  # the leader's first
                await elector.release()
        for runnable in reversed(self._started_runnables):
            await runnable.stop()
        for view in self._started_views:
            await view.stop()
        await self.cache.stop()
        await self.loop_lag.stop()
        await self.metrics.stop()
        await self.health.stop()
        if self._lease_client is not None:
            await self._lease_client.close()
        if self._froze_gc:  # what the stopped manager held may be collected again
            gc.unfreeze()
            self._froze_gc = False
        log.info("manager stopped", leadership_lost=lost)
