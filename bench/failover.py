"""Figure 5, failover: two replicas with leader election on one Lease, and a burst of
Companies; a quarter of the way through, the leader is stopped gracefully (SIGTERM) or crashes
(SIGKILL). Measured: signal to the Lease naming the other replica (the API server's record),
signal to that replica's ``leader_election_master_status`` = 1, and burst start to every
Company converged."""

from __future__ import annotations

import asyncio
import time

from bench.cluster import PLATFORM, Cluster
from bench.daemon import LEASE, Daemon, until
from bench.progress import Progress
from bench.report import Figure
from bench.session import Session
from crewlet_operator import LEASE as LEASE_RESOURCE
from crewlet_operator.objects import resource_version

GRACEFUL_LIMIT = 3.0
CRASH_LIMIT = 17.0
TARGET = f"< {GRACEFUL_LIMIT:.0f} s graceful, < {CRASH_LIMIT:.0f} s crash"


async def _new_holder(cluster: Cluster, old: str, version: str) -> float:
    """When the Lease first names a holder other than ``old`` (monotonic)."""
    while True:
        async for event in cluster.api.watch(
            LEASE_RESOURCE,
            PLATFORM,
            resource_version=version,
            field_selector=f"metadata.name={LEASE}",
        ):
            version = resource_version(event.object) or version
            holder = (event.object.get("spec") or {}).get("holderIdentity") or ""
            if holder and holder != old:
                return time.monotonic()


async def _leader(replicas: list[Daemon], timeout: float) -> Daemon:
    found: list[Daemon] = []

    async def one_leads() -> bool:
        found[:] = [r for r in replicas if await r.leading()]
        return bool(found)

    await until(one_leads, timeout, "a replica leading")
    return found[0]


async def _handover(
    session: Session, leader: Daemon, follower: Daemon, crash: bool
) -> dict[str, float]:
    cluster, timeout = session.cluster, session.scale.timeout
    count = session.scale.failover_burst
    refs = cluster.allocate("crash" if crash else "graceful", count)
    await cluster.create_namespaces(refs)
    lease = await cluster.api.get(LEASE_RESOURCE, LEASE, PLATFORM)
    old = lease["spec"]["holderIdentity"]
    async with Progress(cluster.api, [r.key for r in refs]) as progress:
        started = time.monotonic()
        creates = asyncio.create_task(cluster.create_companies(refs))

        async def a_quarter() -> bool:
            return progress.converged >= count // 4

        try:
            await until(a_quarter, timeout, "a quarter of the burst")
            holder = asyncio.create_task(
                _new_holder(cluster, old, lease["metadata"]["resourceVersion"])
            )
            signalled = time.monotonic()
            if crash:
                leader.kill()
            else:
                leader.terminate()
            exited = asyncio.create_task(until(leader.exited, timeout, f"{leader.name} exit"))
            leads = await until(follower.leading, timeout, f"{follower.name} leading")
            acquired = await asyncio.wait_for(holder, timeout)
            await creates
            await progress.wait(timeout)
        except Exception:
            session.unfilled += await creates  # the floor script completes them
            raise
        converged = progress.last_converged()
        gone = await exited
    session.converged += count
    return {
        "signal_after_s": round(signalled - started, 2),
        "old_leader_exited_s": round(gone - signalled, 2),
        "lease_taken_s": round(acquired - signalled, 2),
        "leading_s": round(leads - signalled, 2),
        "burst_converged_s": round(converged - started, 2),
    }


async def failover(session: Session) -> Figure:
    await session.grow(0)
    await session.stop_operator()
    replicas = [session.new_daemon("replica"), session.new_daemon("replica")]
    try:
        for replica in replicas:
            replica.start()
        for replica in replicas:
            await until(replica.ready, session.scale.timeout, f"{replica.name} ready")
        leader = await _leader(replicas, session.scale.timeout)
        total = session.converged

        async def first_pass() -> bool:
            return await leader.reconciles() >= total

        await until(first_pass, session.scale.timeout, "the leader's first pass")
        follower = next(r for r in replicas if r is not leader)
        graceful = await _handover(session, leader, follower, crash=False)
        spare = session.new_daemon("replica")
        replicas.append(spare)
        spare.start()
        await until(spare.ready, session.scale.timeout, f"{spare.name} ready")
        crash = await _handover(session, follower, spare, crash=True)
        await spare.quiesce(session.scale.timeout)  # no follow-up left for the next operator
    finally:
        for replica in replicas:
            await replica.stop()
    return Figure(
        "failover",
        f"graceful: lease taken {graceful['lease_taken_s']} s after SIGTERM, burst converged "
        f"in {graceful['burst_converged_s']} s; crash: lease taken {crash['lease_taken_s']} s "
        f"after SIGKILL, burst converged in {crash['burst_converged_s']} s "
        f"({session.scale.failover_burst} companies a burst)",
        TARGET,
        graceful["lease_taken_s"] < GRACEFUL_LIMIT and crash["lease_taken_s"] < CRASH_LIMIT,
        {
            "burst": session.scale.failover_burst,
            "companies_before": session.converged - 2 * session.scale.failover_burst,
            "graceful": graceful,
            "crash": crash,
        },
    )
