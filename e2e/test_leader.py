"""Leader election on the real API server: a follower takes a crashed leader's lease when the lease
it saw expires, not at its next retry tick."""

from __future__ import annotations

import asyncio
import datetime

from crewlet_operator import LEASE, Client
from crewlet_operator.leader import LeaderElectionConfig, LeaderElector
from crewlet_operator.objects import micro_time

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
