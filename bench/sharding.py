"""The ``sharding`` figure (only when named): the operator with ``--sharding`` over the start-up
figure's world (10,000 Companies, ten to a namespace; small: 500), as a ring of one replica and
then of three, each replica its own process (its own ports, its own identity, hence its own
member Lease).

1. *The unsharded operator* over the same world, beside: the last restart's pass over it (the
   start-up figure's, when it ran in this run), or one made now.
2. *A ring of one*: the unsharded operator stopped, one replica with ``--sharding`` started.
   Per replica: process start to /readyz 200, to holding its member Lease
   (``leader_election_master_status`` of a Lease other than the leader's), and to its *share
   done*: every Company labelled for a live member of the ring and none draining (the bench's
   own watch of the Companies' labels, :class:`Shards`), and the replica's Company reconciles
   at least the Companies labelled for it and its queues idle (on two scrapes 250 ms apart);
   the Companies labelled for it then, its CPU seconds until then, its write requests
   (``rest_client_requests_total``: its Leases' among them), VmRSS :data:`SETTLE` idle seconds
   after the last replica's share was done and VmHWM. Beside them, the API server's count of
   the ring's writes (``apiserver_request_total``, by verb and resource, Leases aside): a
   member caches only the children labelled for it, so it applies every child of a Company
   new to it again, with its label.
3. *A ring of three*: the one stopped gracefully (its member Lease released, so its Companies
   are relabelled at once), three started at once: each replica's figures as above, with the
   Companies its caches hold (``crewlet_operator_cache_objects``); beside them the bytes the
   API server sends for a whole list of Companies in each scope a replica lists them by: every
   Company (the leader's), those asking for a webhook hostname (every replica's), each
   member's own (its label).
4. *A burst* of new Companies (300; small: 50) with the three running, followed as in the
   convergence figure (:func:`bench.convergence.burst`): every one Accepted with its 13
   children, which includes the sharder's labelling of each.
5. *Takeover*: a member that does not hold the leader Lease (the sharder stays) is frozen
   (SIGSTOP), each Company labelled for it is changed (its ``spec.seats.replicas``, as the
   capacity figure changes it, followed by its :class:`~bench.capacity.Observer`), and the
   member is then killed (SIGKILL) and its Pod deleted (each replica runs "in" a Pod object no
   kubelet runs): every change waits for the heirs at the kill, so the figure measures the
   takeover, not the bench's rate of sending. While the changes go out the bench renews the
   frozen member's Lease in its stead (:func:`_renewed_in_its_stead`), as a member whose
   workers are stuck while its lease client renews would: on a slow machine sending 4,000
   changes outlasts the lease, which would hand them over before the kill (the figure says if
   a will came all the same). Measured
   from the kill: until its Lease carries its will (the sharder writes it once it finds the
   Pod gone, at its next list of the ring; without that evidence, once the Lease has expired,
   :data:`LEASE_DURATION` after its last renewal, which is reported too; from then on the
   heirs hold its Companies), until
   every one of them is labelled for a live member (when the bench's watch saw the last
   relabel: the sharder relabels them for their heirs afterwards), and until each change has
   converged (``Accepted=True`` at the new generation, and the seats StatefulSet with the new
   replicas).
6. *The leader's takeover*: of the two members left, the one holding the leader Lease (the
   sharder's replica) is frozen, its Companies changed and it is killed in the same way (its
   leader Lease renewed in its stead too while it is frozen): measured from the kill as well,
   with when the other replica took the leader Lease (its ``acquireTime``: it finds the Pod
   gone at its next look, or the Lease expired) and starts the sharder, which writes the will;
   every Company then falls to the last member.
7. *A replica joins* the last member, as a replica started after a crash or a scale-up does:
   the Companies the ring of two gives it move to it by drains (the last member hands each on
   once it writes nothing more for it). Its figures as in a ring's start, the Companies that
   moved, and the label writes a move took (the API server's patches of Companies).

The figure runs last: it leaves every Company and child labelled for a member of its rings, and
an unsharded operator started after it would apply every child again, without the label.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import time
from collections import Counter
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

from bench.capacity import DEFAULT_REPLICAS, Change, Observer, next_replicas, send_change
from bench.cluster import CREATE_CONCURRENCY, PLATFORM, each
from bench.convergence import burst
from bench.daemon import LEASE as LEADER_LEASE
from bench.daemon import (
    SHARDED,
    Daemon,
    Memory,
    cpu_seconds,
    idle,
    total,
    until,
)
from bench.failover import LEASE_DURATION, RETRY_PERIOD, moment
from bench.latency import percentile
from bench.progress import Key
from bench.report import MIB, Figure
from bench.session import SETTLE, WRITTEN, Pass, Session, writes_between
from crewlet_operator import LEASE, POD, Client, ConflictError, TransportError
from crewlet_operator._tasks import cancel_and_wait
from crewlet_operator.cache.informer import INITIAL_EVENTS_END
from crewlet_operator.kube import ListParams, Scope, WatchParams
from crewlet_operator.metrics import SHARD_GATE_OUTCOMES
from crewlet_operator.objects import labels, micro_time, name, namespace, resource_version
from crewlet_operator.sharding.ring import RingLabels, ring_of, slot_of
from crewlet_operator.testing import replica_pod
from crewlet_operator_daemon.api.v1alpha1 import COMPANY
from crewlet_operator_daemon.cli import SHARDING_DOMAIN
from crewlet_operator_daemon.controller import CLAIMANTS_OPTIONS
from crewlet_operator_daemon.plan import MANAGER_NAME

RING = RingLabels(SHARDING_DOMAIN, MANAGER_NAME)
"""The daemon's ring: ``shard.crewlet.ai/crewlet-operator`` on each Company and child."""
TAKEOVER_LIMIT = 5.0
"""Seconds from the kill to the will: its Pod deleted, the sharder finds it gone at its next
list of the ring (every retry period, 2 s), and writes at once (the lease duration, 15 s, and
more without that evidence)."""
_PODS = itertools.count()
"""The replicas' Pods' numbers."""
TARGET = (
    f"a killed member's companies (a member's, then the leader's) held by live members (its "
    f"will written) <= {TAKEOVER_LIMIT:.0f} s after the kill and its Pod's deletion; "
    "per-replica steady RSS "
    "with 3 replicas below the single replica's; every company converged"
)
SHARE_RATE = 5.0
"""Companies a second a ring's share must at least be done at before the figure fails (its
first start applies every child again)."""


class Shards:
    """Every Company's member (its shard label; "" for none) and whether it is draining, from
    a streamed list and a watch of their metadata, and when each one's member last changed;
    use as ``async with Shards(client) as shards`` (it enters once the list is read)."""

    def __init__(self, client: Client) -> None:
        self._client = client
        self.members: dict[Key, str] = {}
        self.moved_at: dict[Key, float] = {}
        """When the watch delivered each Company's current member (monotonic)."""
        self.draining: set[Key] = set()
        self.failure: BaseException | None = None
        self._listed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Self:
        self._task = asyncio.create_task(self._watch())
        await self._listed.wait()
        self.check()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._task is not None:
            await cancel_and_wait(self._task)

    def check(self) -> None:
        """Raise what stopped the watch, if anything did."""
        if self.failure is not None:
            raise self.failure

    def held(self, member: str) -> list[Key]:
        """The Companies labelled for ``member``."""
        return [key for key, found in self.members.items() if found == member]

    def settled(self, members: Collection[str]) -> bool:
        """Whether every Company is labelled for one of ``members`` and none is draining."""
        self.check()
        return not self.draining and all(m in members for m in self.members.values())

    def placed(self, members: Collection[str]) -> bool:
        """Whether every Company is labelled for the member the ring of ``members`` gives its
        namespace, and none is draining."""
        ring = ring_of(frozenset(members))
        return self.settled(members) and all(
            member == ring.slot_owner(slot_of(ns)) for (ns, _), member in self.members.items()
        )

    async def _watch(self) -> None:
        version: str | None = None
        try:
            while True:
                with contextlib.suppress(TransportError):
                    watching = WatchParams(
                        resource_version=version,
                        send_initial_events=version is None,
                        metadata_only=True,
                    )
                    async for event in self._client.watch(COMPANY, watching):
                        meta = event.object.get("metadata") or {}
                        if event.type == "BOOKMARK":
                            version = resource_version(event.object) or version
                            if (meta.get("annotations") or {}).get(INITIAL_EVENTS_END) == "true":
                                self._listed.set()
                            continue
                        if self._listed.is_set():  # the list's own versions are in no order
                            version = resource_version(event.object) or version
                        self._observe(event.type, event.object)
                await asyncio.sleep(0.1)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a 410 or a bug: fail the figure rather than hang it
            self.failure = exc
            self._listed.set()

    def _observe(self, kind: str, obj: dict[str, Any]) -> None:
        key = (namespace(obj) or "", name(obj))
        if kind == "DELETED":
            self.members.pop(key, None)
            self.draining.discard(key)
            return
        found = labels(obj)
        member = found.get(RING.shard, "")
        if self.members.get(key) != member:
            self.members[key] = member
            self.moved_at[key] = time.monotonic()
        if RING.drain in found:
            self.draining.add(key)
        else:
            self.draining.discard(key)


@dataclass(frozen=True)
class Replica:
    """One sharded replica's start, from its process start (seconds)."""

    name: str
    member: str
    ready_s: float
    member_s: float
    """Until it held its member Lease."""
    share_s: float
    """Until its share was done (see the module's docstring)."""
    companies: int
    """The Companies labelled for it then."""
    cpu_s: float
    """Its CPU seconds until its share was done."""
    write_requests: int
    """The requests it sent that may write, until its share was done."""
    memory: Memory
    """VmRSS :data:`SETTLE` seconds after every replica's share was done; VmHWM until then."""
    cached: int
    """The Companies its caches held then (``crewlet_operator_cache_objects``): its own, the
    cluster view's (those asking for a hostname) and, on the leader, the leader's view's."""

    def as_json(self) -> dict[str, Any]:
        return {
            "replica": self.name,
            "member": self.member,
            "ready_s": round(self.ready_s, 2),
            "member_s": round(self.member_s, 2),
            "share_done_s": round(self.share_s, 2),
            "companies": self.companies,
            "cpu_s": round(self.cpu_s, 1),
            "write_requests": self.write_requests,
            "rss_mib": round(self.memory.rss / MIB, 1),
            "peak_rss_mib": round(self.memory.peak / MIB, 1),
            "companies_cached": self.cached,
        }


async def _list_bytes(client: Client, members: Sequence[str]) -> dict[str, Any]:
    """The bytes the API server sends for a whole list of Companies in each scope a replica
    lists them by: every company (the leader's view; before, every replica's cluster view), those
    asking for a webhook hostname (the cluster view), each member's own (its label)."""

    async def size(scope: Scope) -> int:
        query = ListParams(scope, page_size=0).query()
        return len(await client.transport.send("GET", COMPANY.path(None), query=query))

    return {
        "every_company": await size(Scope()),
        "claimants": await size(CLAIMANTS_OPTIONS.scope),
        "members": {m: await size(Scope(label_selector=f"{RING.shard}={m}")) for m in members},
    }


async def _member(daemon: Daemon, timeout: float) -> tuple[float, str]:
    """When ``daemon`` held its member Lease, and the Lease's name."""
    found: list[str] = []

    async def holds() -> bool:
        member = await daemon.member()
        found[:] = [member] if member else []
        return bool(found)

    at = await until(holds, timeout, f"{daemon.name} a member")
    return at, found[0]


async def _ring(
    session: Session, shards: Shards, size: int, staying: Collection[str] = ()
) -> tuple[list[Daemon], list[Replica], dict[str, int]]:
    """Start ``size`` sharded replicas at once, each in a Pod of its own, and follow each until
    its share is done (see the module's docstring), beside the members ``staying`` of a ring
    they join: the replicas (running), their figures, and the writes the API server counted
    meanwhile (by verb and resource, Leases aside)."""
    plane = session.cluster.plane
    timeout = session.scale.timeout + len(shards.members) / SHARE_RATE
    before = await asyncio.to_thread(plane.mutating_requests, WRITTEN)
    daemons = []
    for _ in range(size):
        pod = await replica_pod(session.cluster.api, PLATFORM, f"shard-{next(_PODS)}")
        daemons.append(session.new_daemon("shard", sharding=True, pod=pod))
    for daemon in daemons:
        daemon.start()
    try:
        ready = await asyncio.gather(*(until(d.ready, timeout, f"{d.name} ready") for d in daemons))
        joined = await asyncio.gather(*(_member(d, timeout) for d in daemons))
        members = {member for _, member in joined} | set(staying)

        async def share_done(daemon: Daemon, member: str) -> tuple[float, float, int, int]:
            async def done() -> bool:
                # Joining a ring, a member's share is done once the moves to it are.
                if not (shards.placed(members) if staying else shards.settled(members)):
                    return False
                samples = await daemon.samples()
                reconciled = total(
                    samples, "controller_runtime_reconcile_total", {"controller": SHARDED}
                )
                return idle(samples, SHARDED) and reconciled >= len(shards.held(member))

            at = await daemon.quiesce(timeout, done)
            held = len(shards.held(member))
            return at, cpu_seconds(daemon.pid), int(await daemon.write_requests()), held

        shares = await asyncio.gather(
            *(share_done(d, m) for d, (_, m) in zip(daemons, joined, strict=True))
        )
        writes = writes_between(await asyncio.to_thread(plane.mutating_requests, WRITTEN), before)
        await asyncio.sleep(SETTLE)
        cached = await asyncio.gather(
            *(d.metric("crewlet_operator_cache_objects", kind=COMPANY.group_kind) for d in daemons)
        )
    except BaseException:
        for daemon in daemons:
            await daemon.stop()
        raise
    replicas = [
        Replica(
            name=daemon.name,
            member=member,
            ready_s=ready_at - daemon.started_at,
            member_s=member_at - daemon.started_at,
            share_s=share[0] - daemon.started_at,
            companies=share[3],
            cpu_s=share[1],
            write_requests=share[2],
            memory=daemon.memory(),
            cached=int(held),
        )
        for daemon, ready_at, (member_at, member), share, held in zip(
            daemons, ready, joined, shares, cached, strict=True
        )
    ]
    return daemons, replicas, writes


async def _takeover(
    session: Session,
    shards: Shards,
    daemons: Sequence[Daemon],
    members: Sequence[str],
    replicas: dict[Key, int],
    *,
    leader: bool,
) -> dict[str, Any]:
    """Kill a member that leads (``leader``: the sharder's replica) or one that does not,
    change each of its Companies right after, and follow them (see the module's docstring).
    ``replicas``: the seats replicas each Company was last changed to, kept up to date (a
    Company the first takeover changed is changed to another count by the second)."""
    cluster, timeout = session.cluster, session.scale.timeout
    leads = [await d.leading() for d in daemons]
    victim = leads.index(leader)
    gone = members[victim]
    live = {m for m in members if m != gone}
    held = shards.held(gone)
    async with Observer(cluster.api) as observer:
        frozen = time.monotonic()
        daemons[victim].freeze()
        for key in held:
            replicas[key] = next_replicas(replicas.get(key, DEFAULT_REPLICAS))
        changes = [Change(key, "update", frozen, replicas=replicas[key]) for key in held]

        async def send(change: Change) -> None:
            await send_change(cluster, observer, change)

        # A frozen leader's leader Lease is renewed too: it would change hands on expiry.
        async with contextlib.AsyncExitStack() as renewed:
            for lease_name in (gone, LEADER_LEASE) if leader else (gone,):
                await renewed.enter_async_context(_renewed_in_its_stead(cluster.api, lease_name))
            await each(changes, send, CREATE_CONCURRENCY)
        lease = await cluster.api.get(LEASE, gone, PLATFORM)  # deleted once its Companies moved
        willed_while_frozen = await _will(cluster.api, gone) is not None
        heirs = [d for i, d in enumerate(daemons) if i != victim]
        gated = await _gate_outcomes(heirs)
        wall, killed = time.time(), time.monotonic()
        daemons[victim].kill()
        will = asyncio.create_task(_will_written(cluster.api, gone, timeout))
        led = asyncio.create_task(_leading(heirs, timeout)) if leader else None
        pod = daemons[victim].pod
        assert pod is not None
        await cluster.api.delete(POD, pod.name, pod.namespace, grace_period_seconds=0)
        willed = await will
        # When the new leader took the Lease, from its acquireTime: its metrics, polled,
        # would say when it was first seen leading (after its will, at times).
        new_leader_s = await _acquired(cluster.api, led) - wall if led is not None else None

        async def relabelled() -> bool:
            shards.check()
            return all(shards.members.get(key) in live for key in held)

        await until(relabelled, timeout, f"{gone}'s companies relabelled", interval=0.1)
        moved = [shards.moved_at[key] for key in held] or [killed]

        async def converged() -> bool:
            if observer.failure is not None:
                raise observer.failure
            return all(c.failed is not None or not math.isinf(c.converged()) for c in changes)

        await until(converged, timeout, f"{gone}'s companies' changes converged", interval=0.2)
        for heir in heirs:
            await heir.quiesce(timeout)
        gated = await _gate_outcomes(heirs) - gated
    renewed_before_kill = wall - moment(lease["spec"]["renewTime"]).timestamp()
    to_converged = sorted(c.converged() - killed for c in changes if c.failed is None)
    by_member = Counter(shards.members[key] for key in held)
    return {
        "killed": daemons[victim].name,
        "member": gone,
        "leader": leader,
        "new_leader_s": round(new_leader_s, 2) if new_leader_s is not None else None,
        "companies": len(held),
        "to_survivors": dict(sorted(by_member.items())),
        "changes_sent_while_frozen_s": round(killed - frozen, 2),
        "willed_while_frozen": willed_while_frozen,
        "changes_failed": sum(1 for c in changes if c.failed is not None),
        "heirs_gate": dict(sorted(gated.items())),
        "last_renewal_before_kill_s": round(renewed_before_kill, 2),
        "will_written_s": round(willed - killed, 2),
        "first_relabelled_s": round(min(moved) - killed, 2),
        "relabelled_s": round(max(moved) - killed, 2),
        "relabelled_after_last_renewal_s": round(max(moved) - killed + renewed_before_kill, 2),
        "first_converged_s": round(to_converged[0], 2) if to_converged else None,
        "converged_p50_s": round(percentile(to_converged, 0.5), 2) if to_converged else None,
        "converged_s": round(to_converged[-1], 2) if to_converged else None,
    }


@contextlib.asynccontextmanager
async def _renewed_in_its_stead(client: Client, member: str) -> AsyncIterator[None]:
    """Renew ``member``'s Lease every retry period until the block ends, as its frozen holder
    would (a compare-and-swap of its ``renewTime``, the holder unchanged)."""

    async def renew() -> None:
        while True:
            lease = await client.get(LEASE, member, PLATFORM)
            lease["spec"]["renewTime"] = micro_time()
            with contextlib.suppress(ConflictError):
                await client.replace(LEASE, lease)
            await asyncio.sleep(RETRY_PERIOD)

    task = asyncio.create_task(renew())
    try:
        yield
    finally:
        await cancel_and_wait(task)


async def _leading(daemons: Sequence[Daemon], timeout: float) -> float:
    """When one of ``daemons`` was first seen leading (polled every 0.1 s; monotonic)."""

    async def leads() -> bool:
        return any([await d.leading() for d in daemons])

    return await until(leads, timeout, "a new leader", interval=0.1)


async def _acquired(client: Client, led: asyncio.Task[float]) -> float:
    """When the leader Lease was acquired by the replica ``led`` saw leading (its
    ``acquireTime``; epoch seconds)."""
    await led
    lease = await client.get(LEASE, LEADER_LEASE, PLATFORM)
    return moment(lease["spec"]["acquireTime"]).timestamp()


async def _gate_outcomes(daemons: Sequence[Daemon]) -> Counter[str]:
    """What the gates of ``daemons`` did with the companies' requests so far, by outcome
    (``reconciled``: the reconciles that ran)."""
    counts: Counter[str] = Counter()
    for daemon in daemons:
        samples = await daemon.samples()  # one scrape for every outcome
        for outcome in SHARD_GATE_OUTCOMES:
            labels = {"outcome": outcome}
            counts[outcome] += int(total(samples, "crewlet_operator_shard_gate_total", labels))
    return counts


async def _will(client: Client, member: str) -> str | None:
    """The will on ``member``'s Lease, if it carries one."""
    lease = await client.get(LEASE, member, PLATFORM)
    will = ((lease.get("metadata") or {}).get("annotations") or {}).get(RING.heirs)
    return None if will is None else str(will)


async def _will_written(client: Client, member: str, timeout: float) -> float:
    """When ``member``'s Lease was first seen with its will (polled every 0.1 s; monotonic)."""

    async def written() -> bool:
        return await _will(client, member) is not None

    return await until(written, timeout, f"{member}'s will", interval=0.1)


async def sharding(session: Session) -> Figure:
    """The figure (see the module's docstring)."""
    scale = session.scale
    await session.grow(scale.startup)
    unsharded = (
        next((p for p in reversed(session.passes) if p.companies == session.converged), None)
        or await session.restart()
    )
    await session.stop_operator()
    running: list[Daemon] = []
    try:
        async with Shards(session.cluster.api) as shards:
            running, one, one_writes = await _ring(session, shards, 1)
            _progress("a ring of one: " + _ring_text(one, one_writes))
            for daemon in running:
                await daemon.quiesce(scale.timeout)
                await daemon.stop()
            running, three, three_writes = await _ring(session, shards, 3)
            _progress("a ring of three: " + _ring_text(three, three_writes))
            listed = await _list_bytes(session.cluster.api, [r.member for r in three])
            _progress(f"list bytes: {listed}")
            rushed = await burst(session, "shard-burst", scale.sharding_burst, running)
            _progress(f"a burst: {rushed}")
            members = [r.member for r in three]
            replicas: dict[Key, int] = {}
            takeover = await _takeover(session, shards, running, members, replicas, leader=False)
            _progress(f"takeover: {takeover}")
            left = [i for i, member in enumerate(members) if member != takeover["member"]]
            leader_takeover = await _takeover(
                session,
                shards,
                [running[i] for i in left],
                [members[i] for i in left],
                replicas,
                leader=True,
            )
            _progress(f"the leader's takeover: {leader_takeover}")
            last = [m for m in members if m not in (takeover["member"], leader_takeover["member"])]
            before = dict(shards.members)
            joining, joined, join_writes = await _ring(session, shards, 1, staying=last)
            running += joining
            join = _join(joined[0], join_writes, before, shards.members)
            _progress(f"a replica joins: {join}")
            for daemon in running:
                if not await daemon.exited():
                    await daemon.quiesce(scale.timeout)
    finally:
        for daemon in running:
            await daemon.stop()
    data: dict[str, Any] = {
        "companies": unsharded.companies,
        "unsharded": _unsharded(unsharded),
        "ring_of_one": [r.as_json() for r in one],
        "ring_of_one_writes": one_writes,
        "ring_of_three": [r.as_json() for r in three],
        "ring_of_three_writes": three_writes,
        "list_bytes": listed,
        "burst": {"companies": scale.sharding_burst, **rushed},
        "takeover": takeover,
        "leader_takeover": leader_takeover,
        "join": join,
        "lease_duration_s": LEASE_DURATION,
    }
    single = one[0].memory.rss
    takeovers = (takeover, leader_takeover)
    met = (
        all(t["will_written_s"] <= TAKEOVER_LIMIT for t in takeovers)
        and max(r.memory.rss for r in three) < single
        and all(t["changes_failed"] == 0 for t in takeovers)
    )
    return Figure("sharding", _line(data, one, three), TARGET, met, data)


def _join(
    replica: Replica, writes: dict[str, int], before: Mapping[Key, str], after: Mapping[Key, str]
) -> dict[str, Any]:
    """A replica joining the ring of the last member: its figures, the Companies that moved to
    it, and the label writes a move took (the API server's patches of Companies: the drains and
    the old member's acknowledgements)."""
    moved = sum(1 for key, member in after.items() if before.get(key) != member)
    labels = writes.get("PATCH companies", 0)
    return {
        **replica.as_json(),
        "moved": moved,
        "writes": writes,
        "label_writes_a_move": round(labels / moved, 2) if moved else None,
    }


def _join_text(join: dict[str, Any]) -> str:
    return (
        f"a replica joining the last one took {join['moved']} companies, its share done "
        f"{join['share_done_s']} s after its start, {join['label_writes_a_move']} label writes "
        f"a move ({sum(join['writes'].values())} writes in all)"
    )


def _progress(text: str) -> None:
    print(f"bench: sharding: {text}", flush=True)


def _unsharded(result: Pass) -> dict[str, Any]:
    return {
        "ready_s": round(result.ready_s, 2),
        "first_pass_s": round(result.first_pass_s, 2),
        "mutating_requests": sum(result.writes.values()),
        "rss_mib": round(result.memory.rss / MIB, 1),
        "peak_rss_mib": round(result.memory.peak / MIB, 1),
    }


def _replica_text(replica: Replica) -> str:
    shown = replica.as_json()
    return (
        f"ready {shown['ready_s']} s, {replica.companies} companies done at "
        f"{shown['share_done_s']} s ({shown['cpu_s']} CPU s, {replica.write_requests} write "
        f"requests), {shown['rss_mib']} MiB steady ({shown['peak_rss_mib']} peak), "
        f"{replica.cached} companies cached"
    )


def _ring_text(replicas: Sequence[Replica], writes: dict[str, int]) -> str:
    return (
        "; ".join(_replica_text(r) for r in replicas)
        + f" (the API server counted {sum(writes.values())} writes)"
    )


def _list_text(listed: dict[str, Any]) -> str:
    return (
        f"a list of every company {listed['every_company']} B, of those asking for a hostname "
        f"{listed['claimants']} B, of each member's own "
        + ", ".join(f"{size} B" for size in listed["members"].values())
    )


def _line(data: dict[str, Any], one: Sequence[Replica], three: Sequence[Replica]) -> str:
    base, rushed = data["unsharded"], data["burst"]
    return (
        f"{data['companies']} companies: unsharded restart ready {base['ready_s']} s, first "
        f"pass {base['first_pass_s']} s, {base['mutating_requests']} writes, "
        f"{base['rss_mib']} MiB steady ({base['peak_rss_mib']} peak); a ring of one: "
        f"{_ring_text(one, data['ring_of_one_writes'])}; a ring of three: "
        f"{_ring_text(three, data['ring_of_three_writes'])}; {_list_text(data['list_bytes'])}; "
        f"a burst of "
        f"{rushed['companies']} converged in {rushed['operator_s']} s; "
        f"{_takeover_text(data['takeover'])}; then of the two left, "
        f"{_takeover_text(data['leader_takeover'])}; {_join_text(data['join'])}"
    )


def _takeover_text(takeover: dict[str, Any]) -> str:
    after_renewal = takeover["relabelled_after_last_renewal_s"]
    who = "the leader" if takeover["leader"] else "a member"
    return (
        f"{who} holding {takeover['companies']} frozen, each of them changed "
        f"({takeover['changes_sent_while_frozen_s']} s"
        + (", its lease expired meanwhile" if takeover["willed_while_frozen"] else "")
        + "), then SIGKILLed: "
        + (
            f"another replica taking the leader Lease {takeover['new_leader_s']} s after the kill, "
            if takeover["leader"]
            else ""
        )
        + f"its will written {takeover['will_written_s']} s after the kill, "
        f"relabelled for its heirs from {takeover['first_relabelled_s']} s to "
        f"{takeover['relabelled_s']} s ({after_renewal} s after its last renewal), the "
        f"changes converged from {takeover['first_converged_s']} s to "
        f"{takeover['converged_s']} s after the kill (p50 {takeover['converged_p50_s']} s; "
        f"what the heirs' gates did until idle: {takeover['heirs_gate']})"
    )
