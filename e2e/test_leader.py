"""Leader election on the real API server: a follower takes a crashed leader's lease when the lease
it saw expires, not at its next retry tick; and with exclusive labels, one leader among the
installs of a controller, each electing in a namespace of its own."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import time
from collections.abc import AsyncIterator

import pytest

from crewlet_operator import (
    CONFIG_MAP,
    LEASE,
    NAMESPACE,
    POD,
    Client,
    LeadershipLostError,
    NotFoundError,
)
from crewlet_operator._tasks import cancel_and_wait
from crewlet_operator.envtest.wait import eventually
from crewlet_operator.incarnation import Evidence, Holder, PodRef
from crewlet_operator.leader import LeaderElectionConfig, LeaderElector, precedence
from crewlet_operator.objects import micro_time
from crewlet_operator.testing import kubelet_time, replica_pod, report_container

LEASE_SECONDS = 4
LATENCY = 0.5
"""What the takeover may take past the expiry: the follower's first read and its write."""


def moment(micro: str) -> datetime.datetime:
    """A Lease's RFC 3339 micro-time."""
    return datetime.datetime.fromisoformat(micro)


async def takeover_after_last_renewal(
    client: Client, namespace: str, name: str, *, wake_at_expiry: bool
) -> float:
    """Seconds from the last renewal of a leader that never renews again to the follower's
    acquisition, both as the Lease records them."""
    renewed = micro_time()
    crashed = await client.create(
        LEASE,
        {
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "holderIdentity": "crashed",
                "leaseDurationSeconds": LEASE_SECONDS,
                "acquireTime": renewed,
                "renewTime": renewed,
                "leaseTransitions": 0,
            },
        },
    )
    # Started at once, the follower first sees the lease about when it was renewed: it may take
    # it over LEASE_SECONDS after that. Its retry ticks fall every 2.4-2.88 s (retry period times
    # up to 1.2), so at ~2.4-2.9 s and ~4.8-5.8 s after its first try: the first tick after the
    # expiry is at least 0.8 s late, past LEASE_SECONDS + LATENCY.
    follower = LeaderElector(
        client,
        LeaderElectionConfig(
            name,
            namespace,
            identity="follower",
            lease_duration=LEASE_SECONDS,
            renew_deadline=3,
            retry_period=2.4,
        ),
    )
    follower._wake_at_expiry = wake_at_expiry
    await asyncio.wait_for(follower.acquire(), 30)
    spec = (await client.get(LEASE, name, namespace))["spec"]
    assert (spec["holderIdentity"], spec["leaseTransitions"]) == ("follower", 1)
    last_renewal = moment(crashed["spec"]["renewTime"])
    return (moment(spec["acquireTime"]) - last_renewal).total_seconds()


async def test_a_follower_takes_over_when_the_lease_it_saw_expires(
    kube_client: Client, namespace: str
) -> None:
    took = await takeover_after_last_renewal(kube_client, namespace, "expiry", wake_at_expiry=True)
    # Never before the expiry (two leaders), and within the lease plus a request's latency.
    assert LEASE_SECONDS <= took <= LEASE_SECONDS + LATENCY


async def test_at_retry_ticks_alone_the_takeover_would_be_late(
    kube_client: Client, namespace: str
) -> None:
    """The control: the same follower without the wake-up at expiry (client-go's schedule)
    misses the bound the test above holds it to."""
    took = await takeover_after_last_renewal(kube_client, namespace, "ticks", wake_at_expiry=False)
    assert took > LEASE_SECONDS + LATENCY


async def test_a_leader_leaves_word_in_the_lease_for_the_next_one(
    kube_client: Client, namespace: str
) -> None:
    """What the leader's annotations callback returns is written with each renewal and with
    its release (the last word, after its work has drained); the next leader finds it as the
    Lease held it when it took over, and an empty answer leaves what is there."""
    said: dict[str, str] = {}

    def elector(identity: str, words: dict[str, str]) -> LeaderElector:
        return LeaderElector(
            kube_client,
            LeaderElectionConfig(
                "word",
                namespace,
                identity=identity,
                lease_duration=4,
                renew_deadline=3,
                retry_period=1,
                annotations=lambda: dict(words),
            ),
        )

    first = elector("first", said)
    await asyncio.wait_for(first.acquire(), 30)
    assert first.annotations_when_acquired == {}, "it created the Lease"
    said["example.com/done"] = "renewed"
    holding = asyncio.create_task(first.hold())

    async def annotations() -> dict[str, str]:
        lease = await kube_client.get(LEASE, "word", namespace)
        return dict(lease["metadata"].get("annotations") or {})

    for _ in range(50):
        if (await annotations()).get("example.com/done") == "renewed":
            break
        await asyncio.sleep(0.2)
    assert (await annotations()).get("example.com/done") == "renewed"
    holding.cancel()
    said["example.com/done"] = "released"
    await first.release()
    assert (await annotations()).get("example.com/done") == "released"

    second = elector("second", {})
    await asyncio.wait_for(second.acquire(), 30)
    assert second.annotations_when_acquired.get("example.com/done") == "released"
    assert (await annotations()).get("example.com/done") == "released", "nothing said, kept"


# -- one leader per cluster: exclusive labels, two installs in two namespaces ----------------------


@contextlib.asynccontextmanager
async def other_namespace(client: Client, namespace: str) -> AsyncIterator[str]:
    """A second namespace beside the test's, for a second install; deleted after it."""
    name = f"{namespace}-b"
    await client.create(NAMESPACE, {"metadata": {"name": name}})
    try:
        yield name
    finally:
        with contextlib.suppress(NotFoundError):
            await client.delete(NAMESPACE, name)


def install(client: Client, namespace: str, identity: str, labels: dict[str, str]) -> LeaderElector:
    """A replica of an install whose Lease (``leader`` in ``namespace``) is exclusive."""
    return LeaderElector(
        client,
        LeaderElectionConfig(
            "leader",
            namespace,
            identity=identity,
            lease_duration=LEASE_SECONDS,
            renew_deadline=3,
            retry_period=1,
            exclusive_labels=labels,
        ),
    )


def unique_labels(namespace: str) -> dict[str, str]:
    """Labels of this test's own (the session's other Leases never count)."""
    return {"e2e.example.com/exclusive": namespace}


async def test_a_second_install_does_not_lead_writes_nothing_and_leads_once_the_first_releases(
    kube_client: Client, namespace: str
) -> None:
    labels = unique_labels(namespace)
    async with other_namespace(kube_client, namespace) as second_ns:
        first = install(kube_client, namespace, "first", labels)
        await asyncio.wait_for(first.acquire(), 30)
        holding = asyncio.create_task(first.hold())
        second = install(kube_client, second_ns, "second", labels)
        campaign = asyncio.create_task(second.acquire())
        try:
            await eventually(lambda: second.blocked_by is not None, message="blocked")
            assert second.blocked_by is not None
            assert (second.blocked_by.namespace, second.blocked_by.holder) == (namespace, "first")
            await asyncio.sleep(LEASE_SECONDS + 1)  # the first renews: still live
            assert not campaign.done() and not second.is_leader
            assert await kube_client.get_or_none(LEASE, "leader", second_ns) is None, "no write"
            lease = await kube_client.get(LEASE, "leader", namespace)
            assert lease["metadata"]["labels"] == labels

            holding.cancel()
            await first.release()
            released = time.monotonic()
            await asyncio.wait_for(campaign, 30)
            # Its watch of the labelled Leases wakes it: sooner than its retry period.
            assert time.monotonic() - released < 1.0
            assert second.blocked_by is None
            taken = await kube_client.get(LEASE, "leader", second_ns)
            assert taken["spec"]["holderIdentity"] == "second"
            assert taken["metadata"]["labels"] == labels
        finally:
            await cancel_and_wait(holding, campaign)


async def test_a_second_install_takes_over_when_the_first_crashed_lease_expires(
    kube_client: Client, namespace: str
) -> None:
    """The first never renews (a crash): the second leads once it has seen the first's Lease
    unchanged for its duration, by its own clock, and not before."""
    labels = unique_labels(namespace)
    async with other_namespace(kube_client, namespace) as second_ns:
        crashed = install(kube_client, namespace, "crashed", labels)
        await asyncio.wait_for(crashed.acquire(), 30)
        first_seen = time.monotonic()
        second = install(kube_client, second_ns, "second", labels)
        await asyncio.wait_for(second.acquire(), 30)
        took = time.monotonic() - first_seen
        assert LEASE_SECONDS <= took <= LEASE_SECONDS + LATENCY, took


async def test_of_two_installs_that_start_at_once_the_earlier_lease_leads_and_never_both(
    kube_client: Client, namespace: str
) -> None:
    """Started together, one may read the other's Lease before it writes its own (and waits), or
    both acquire: then the one whose Lease comes later gives way (at once if it reads the
    other's, at its next renewal if it led meanwhile), and the other leads only once it has."""
    labels = unique_labels(namespace)
    async with other_namespace(kube_client, namespace) as second_ns:
        replicas = [
            install(kube_client, namespace, "a", labels),
            install(kube_client, second_ns, "b", labels),
        ]
        both: list[float] = []

        async def run(elector: LeaderElector) -> None:
            while True:
                await elector.acquire()
                await elector.hold()

        async def watch() -> None:
            while True:
                if all(r.is_leader for r in replicas):
                    both.append(time.monotonic())
                await asyncio.sleep(0.005)

        tasks = [asyncio.create_task(run(r)) for r in replicas] + [asyncio.create_task(watch())]
        try:
            await eventually(
                lambda: sum(r.is_leader for r in replicas) == 1, timeout=30, message="a leader"
            )
            await asyncio.sleep(LEASE_SECONDS + 2)  # one that led too soon has stepped down
            leaders = [r for r in replicas if r.is_leader]
            assert len(leaders) == 1 and both == []
            leader = leaders[0]
            other = next(r for r in replicas if r is not leader)
            # A replica that read the other's Lease before writing never wrote its own.
            created = {}
            for r in replicas:
                lease = await kube_client.get_or_none(LEASE, "leader", r.config.namespace)
                if lease is not None:
                    created[r.config.namespace] = lease["metadata"]["creationTimestamp"]
            order = sorted(created, key=lambda ns: precedence(created[ns], ns, "leader"))
            assert leader.config.namespace == order[0], created
            assert other.blocked_by is not None
            assert str(other.blocked_by) == f"{leader.config.namespace}/leader"
        finally:
            await cancel_and_wait(*tasks)


async def test_a_standby_of_the_same_install_is_not_blocked(
    kube_client: Client, namespace: str
) -> None:
    labels = unique_labels(namespace)
    leader = install(kube_client, namespace, "leader", labels)
    await asyncio.wait_for(leader.acquire(), 30)
    holding = asyncio.create_task(leader.hold())
    standby = install(kube_client, namespace, "standby", labels)
    campaign = asyncio.create_task(standby.acquire())
    try:
        await asyncio.sleep(2)
        assert not campaign.done()
        assert standby.blocked_by is None
        holding.cancel()
        await leader.release()
        await asyncio.wait_for(campaign, 30)
    finally:
        await cancel_and_wait(holding, campaign)


# -- takeover on evidence: the holder's Pod, as the API server and the kubelet have it ----------

EVIDENCE_LEASE = 30
"""A lease long enough that a takeover before it expires is told from one after, by far."""


def replica(client: Client, namespace: str, identity: str, pod: PodRef) -> LeaderElector:
    return LeaderElector(
        client,
        LeaderElectionConfig(
            "evidence",
            namespace,
            identity=identity,
            lease_duration=EVIDENCE_LEASE,
            renew_deadline=10,
            retry_period=2,
            pod=pod,
        ),
    )


async def crashed_leader(client: Client, namespace: str, pod: PodRef) -> LeaderElector:
    """A replica that acquired the lease in ``pod`` and then stopped renewing (a crash: no
    release)."""
    leader = replica(client, namespace, "crashed", pod)
    await asyncio.wait_for(leader.acquire(), 30)
    return leader


async def leads_within(elector: LeaderElector, seconds: float) -> float:
    """Seconds ``elector`` took to lead, failing past ``seconds`` (well before the lease)."""
    began = time.monotonic()
    await asyncio.wait_for(elector.acquire(), seconds)
    return time.monotonic() - began


async def test_a_standby_takes_the_lease_at_once_when_the_holders_pod_is_gone(
    kube_client: Client, namespace: str
) -> None:
    first = await replica_pod(kube_client, namespace, "op-0")
    second = await replica_pod(kube_client, namespace, "op-1")
    await crashed_leader(kube_client, namespace, first)
    lease = await kube_client.get(LEASE, "evidence", namespace)
    assert Holder.of_lease(lease) == Holder("crashed", first), "the holder recorded its Pod"
    standby = replica(kube_client, namespace, "standby", second)
    campaign = asyncio.create_task(leads_within(standby, EVIDENCE_LEASE / 3))
    await asyncio.sleep(3)  # a standby, watching the holder's Pod
    assert not campaign.done(), "no evidence yet: the holder's container runs"
    await kube_client.delete(POD, "op-0", namespace, grace_period_seconds=0)
    await campaign
    assert standby.taken_on is Evidence.POD_GONE
    spec = (await kube_client.get(LEASE, "evidence", namespace))["spec"]
    assert (spec["holderIdentity"], spec["leaseTransitions"]) == ("standby", 1)


async def test_a_standby_takes_the_lease_when_the_kubelet_reports_the_container_ended(
    kube_client: Client, namespace: str
) -> None:
    first = await replica_pod(kube_client, namespace, "op-0")
    second = await replica_pod(kube_client, namespace, "op-1")
    await crashed_leader(kube_client, namespace, first)
    standby = replica(kube_client, namespace, "standby", second)
    campaign = asyncio.create_task(leads_within(standby, EVIDENCE_LEASE / 3))
    await asyncio.sleep(1)
    ended = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=1)
    await report_container(
        kube_client,
        first,
        {"waiting": {"reason": "CrashLoopBackOff"}},
        {"terminated": {"exitCode": 137, "finishedAt": kubelet_time(ended)}},
        restarts=1,
    )
    await campaign
    assert standby.taken_on is Evidence.CONTAINER_TERMINATED


async def test_a_process_restarted_in_its_pod_takes_its_lease_back_at_once(
    kube_client: Client, namespace: str
) -> None:
    pod = await replica_pod(kube_client, namespace, "op-0")
    await crashed_leader(kube_client, namespace, pod)
    restarted = replica(kube_client, namespace, "restarted", pod)  # a new identity, same Pod
    await leads_within(restarted, 5)
    assert restarted.taken_on is Evidence.RESTARTED_HERE


async def test_without_evidence_a_standby_waits_for_the_lease(
    kube_client: Client, namespace: str
) -> None:
    """The control: the holder's Pod is there and its container runs since before it acquired
    (a frozen process, a lost node): the standby takes nothing before the lease expires, and a
    process in another Pod's same-named container is no restart of it."""
    first = await replica_pod(kube_client, namespace, "op-0")
    second = await replica_pod(kube_client, namespace, "op-1")
    await crashed_leader(kube_client, namespace, first)
    standby = replica(kube_client, namespace, "standby", second)
    with contextlib.suppress(TimeoutError):
        await leads_within(standby, 8)
    assert not standby.is_leader
    spec = (await kube_client.get(LEASE, "evidence", namespace))["spec"]
    assert spec["holderIdentity"] == "crashed"


async def test_a_leader_that_finds_another_holder_stops_at_once(
    kube_client: Client, namespace: str
) -> None:
    """The hazard of a Pod deleted while its process runs: a standby takes the lease on that
    evidence, and the old leader, which still renews, stops at its next renewal (a retry
    period) instead of at its renew deadline."""
    first = await replica_pod(kube_client, namespace, "op-0")
    second = await replica_pod(kube_client, namespace, "op-1")
    leader = await crashed_leader(kube_client, namespace, first)
    holding = asyncio.create_task(leader.hold())
    standby = replica(kube_client, namespace, "standby", second)
    campaign = asyncio.create_task(leads_within(standby, EVIDENCE_LEASE / 3))
    await asyncio.sleep(1)
    await kube_client.delete(POD, "op-0", namespace, grace_period_seconds=0)
    await campaign
    try:
        # Its next renewal comes within a retry period (2 s); its deadline is 10 s away.
        await asyncio.wait_for(asyncio.shield(holding), 5)
    finally:
        await cancel_and_wait(holding)
    assert not leader.is_leader


async def test_a_fenced_write_is_refused_at_each_step_before_it_goes_out(
    kube_client: Client, namespace: str
) -> None:
    """The client's write fence is asked before the request waits, once it has a connection,
    and as its first bytes are written (aiohttp writes them from a task of its own, a turn of
    the loop later): a process frozen at any of those steps sends nothing when it resumes."""
    for step in (1, 2, 3):
        asked = 0

        def fence(refuse_at: int = step) -> None:
            nonlocal asked
            asked += 1
            if asked == refuse_at:
                raise LeadershipLostError(f"refused at step {refuse_at}")

        fenced = kube_client.with_field_manager("e2e-fenced")
        fenced.write_fence = fence
        name = f"fenced-{step}"
        with pytest.raises(LeadershipLostError, match=f"step {step}"):
            await fenced.create(CONFIG_MAP, {"metadata": {"name": name, "namespace": namespace}})
        assert await kube_client.get_or_none(CONFIG_MAP, name, namespace) is None
    assert kube_client.write_fence is None, "the view's fence is its own"
