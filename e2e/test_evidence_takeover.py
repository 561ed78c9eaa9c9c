"""Takeover on evidence, with two replicas of the daemon as processes (issue 50).

Each replica runs "in" a Pod of its own, as the chart's downward API says (``POD_NAMESPACE``,
``POD_NAME``, ``POD_UID``, ``CONTAINER_NAME``); the Pods are real objects on the API server that
no kubelet runs, so the test writes their status as a kubelet would. Each replica connects as a
user of its own, so the audit log tells them apart. In file order:

1. a leader SIGKILLed and started again in its Pod takes its lease back at once;
2. a leader SIGKILLed whose Pod is then deleted: the standby takes over at once;
3. a leader SIGKILLed whose container the kubelet reports terminated: the same;
4. no evidence: a leader frozen (SIGSTOP) while its Pod still runs is replaced only once its
   lease has expired, and when it resumes (SIGCONT) the audit log shows no write from it after
   the new holder's first.

"At once" is before the lease (15 s) would have expired, by the Lease's own times; the figures
are the bench's (``make bench FIGURES=failover``).
"""

from __future__ import annotations

import asyncio
import datetime
import itertools
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from operator_helpers import (
    IMAGE,
    LEASE_NAME,
    PLATFORM,
    Operator,
    accepted,
    admin_client,
    audited_writes,
    company,
    engine_class,
    say,
    wait_condition,
)

from crewlet_operator import LEASE, POD, Client
from crewlet_operator.envtest import ControlPlane
from crewlet_operator.envtest.wait import eventually
from crewlet_operator.incarnation import PodRef
from crewlet_operator.testing import kubelet_time, replica_pod, report_container
from crewlet_operator_daemon.api.v1alpha1 import COMPANY, ENGINE_CLASS

LEASE_SECONDS = 15.0
"""The daemon's lease duration."""
TENANT = "evidence-tenant"
CLASS = "evidence"
_names = itertools.count()


def moment(stamp: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A plane of the module's own, with the audit log; no workloads (no Pod here runs)."""
    with ControlPlane(tmp_path_factory.mktemp("evidence"), audit=True) as plane:
        yield plane


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def client(plane: ControlPlane) -> AsyncIterator[Client]:
    async with admin_client(plane, PLATFORM, TENANT) as admin:
        await admin.create(
            ENGINE_CLASS, engine_class(CLASS, seats={"replicas": 0}, engine={"image": IMAGE})
        )
        yield admin


class Pair:
    """Two replicas, each in a Pod of its own; stopped after the test."""

    def __init__(self, plane: ControlPlane, client: Client, log_dir: Path) -> None:
        self.plane = plane
        self.client = client
        self.log_dir = log_dir
        self.started: list[Operator] = []
        self.pods: dict[str, PodRef] = {}

    async def start(self, name: str | None = None, pod: PodRef | None = None) -> Operator:
        """A replica as user ``name`` (a new one by default), in ``pod`` (a new one)."""
        name = name or f"evidence-{next(_names)}"
        if pod is None:
            pod = await replica_pod(self.client, PLATFORM, f"{name}-pod")
        config = self.plane.user_config(name, ("system:masters",))
        kubeconfig = config.write_kubeconfig(self.log_dir / f"{name}.kubeconfig")
        replica = Operator(kubeconfig, self.log_dir, name=name, leader_elect=True, pod=pod)
        self.started.append(replica)
        self.pods[name] = pod
        return replica

    async def leader(self) -> tuple[Operator, Operator]:
        """The leader and the standby, once both are ready and one leads."""
        running = [r for r in self.started if r.alive()]
        for replica in running:
            await eventually(replica.ready, timeout=60, message=f"{replica.name} ready")

        def one() -> Operator | None:
            leading = [r for r in running if r.leading()]
            return leading[0] if len(leading) == 1 else None

        leader = await eventually(one, timeout=60, interval=0.1, message="one leader")
        assert leader is not None
        (standby,) = [r for r in running if r is not leader]
        return leader, standby

    def stop(self) -> None:
        for replica in self.started:
            if replica.process.running():
                replica.resume()  # a frozen one would not hear SIGTERM
                replica.stop()


@pytest_asyncio.fixture(loop_scope="session")
async def pair(plane: ControlPlane, client: Client, tmp_path: Path) -> AsyncIterator[Pair]:
    replicas = Pair(plane, client, tmp_path)
    await replicas.start()
    await replicas.start()
    try:
        yield replicas
    finally:
        replicas.stop()


async def last_renewal(client: Client) -> tuple[str, datetime.datetime]:
    """The Lease's holder and its last renewal."""
    spec = (await client.get(LEASE, LEASE_NAME, PLATFORM))["spec"]
    return spec["holderIdentity"], moment(spec["renewTime"])


async def taken_by(client: Client, replica: Operator, before: str) -> datetime.datetime:
    """Wait until ``replica`` leads on a Lease held by another than ``before``; when it
    acquired, by the Lease."""
    await eventually(replica.leading, timeout=2 * LEASE_SECONDS, interval=0.1, message="leads")
    spec = (await client.get(LEASE, LEASE_NAME, PLATFORM))["spec"]
    assert spec["holderIdentity"] != before
    return moment(spec["acquireTime"])


async def new_company_accepted(client: Client) -> None:
    name = f"after-{next(_names)}"
    await client.create(COMPANY, company(TENANT, name, CLASS, suspend=True))
    await wait_condition(client, TENANT, name, "Accepted", "True", timeout=30)


def took_on(replica: Operator) -> list[str]:
    return [
        str(e.get("evidence"))
        for e in replica.log_events()
        if e.get("event") == "took the lease before it expired: its holder cannot write any more"
    ]


async def test_a_leader_restarted_in_its_pod_takes_its_lease_back_at_once(
    pair: Pair, client: Client, capsys: pytest.CaptureFixture[str]
) -> None:
    leader, standby = await pair.leader()
    leader.kill()
    holder, renewed = await last_renewal(client)
    again = await pair.start(f"{leader.name}-again", pair.pods[leader.name])
    acquired = await taken_by(client, again, holder)
    assert (acquired - renewed).total_seconds() < LEASE_SECONDS, "before the lease expired"
    assert took_on(again) == ["restarted-in-this-pod"]
    assert not standby.leading()
    await new_company_accepted(client)
    say(capsys, f"\nrestarted in its Pod: led {(acquired - renewed).total_seconds():.2f} s "
        "after the killed leader's last renewal")  # fmt: skip


async def test_a_standby_takes_over_at_once_when_the_leaders_pod_is_deleted(
    pair: Pair, client: Client, capsys: pytest.CaptureFixture[str]
) -> None:
    leader, standby = await pair.leader()
    leader.kill()
    holder, renewed = await last_renewal(client)
    await client.delete(POD, pair.pods[leader.name].name, PLATFORM, grace_period_seconds=0)
    acquired = await taken_by(client, standby, holder)
    assert (acquired - renewed).total_seconds() < LEASE_SECONDS, "before the lease expired"
    assert took_on(standby) == ["pod-gone"]
    await new_company_accepted(client)
    say(capsys, f"\nPod deleted: the standby led {(acquired - renewed).total_seconds():.2f} s "
        "after the killed leader's last renewal")  # fmt: skip


async def test_a_standby_takes_over_at_once_when_the_kubelet_reports_the_container_ended(
    pair: Pair, client: Client
) -> None:
    leader, standby = await pair.leader()
    leader.kill()
    holder, renewed = await last_renewal(client)
    await asyncio.sleep(1)  # the kubelet's stamp is whole seconds: one after the acquisition
    await report_container(
        client,
        pair.pods[leader.name],
        {"terminated": {"exitCode": 137, "finishedAt": kubelet_time()}},
    )
    acquired = await taken_by(client, standby, holder)
    assert (acquired - renewed).total_seconds() < LEASE_SECONDS, "before the lease expired"
    assert took_on(standby) == ["container-terminated"]
    await new_company_accepted(client)


async def test_a_frozen_leader_is_replaced_after_its_lease_and_writes_nothing_when_it_resumes(
    pair: Pair, plane: ControlPlane, client: Client, capsys: pytest.CaptureFixture[str]
) -> None:
    leader, standby = await pair.leader()
    # Work in flight when it freezes: a burst of Companies it is reconciling.
    burst = [f"frozen-{next(_names)}" for _ in range(30)]
    await asyncio.gather(
        *(client.create(COMPANY, company(TENANT, n, CLASS, suspend=True)) for n in burst)
    )
    leader.pause()
    holder, renewed = await last_renewal(client)
    acquired = await taken_by(client, standby, holder)
    assert (acquired - renewed).total_seconds() >= LEASE_SECONDS, "no evidence: the lease"
    assert took_on(standby) == []
    resumed = datetime.datetime.now(datetime.UTC)
    leader.resume()

    async def converged() -> bool:
        listed = await client.list(COMPANY, TENANT)
        mine = [o for o in listed.items if o["metadata"]["name"] in burst]
        return len(mine) == len(burst) and all(accepted(o) for o in mine)

    await eventually(converged, timeout=60, message="the burst converged under the new leader")
    await eventually(lambda: not leader.leading(), timeout=30, message="the old leader stopped")
    writes = audited_writes(plane, {leader.name, standby.name})
    first = min(w.received for w in writes if w.user == standby.name and w.ok)
    late = [str(w) for w in writes if w.user == leader.name and w.received >= first]
    assert late == [], f"written after the new holder's first ({first}; resumed {resumed})"
    by_old = sum(1 for w in writes if w.user == leader.name)
    say(capsys, f"\nfrozen leader: replaced {(acquired - renewed).total_seconds():.2f} s after "
        f"its last renewal; {by_old} writes by it, none after the new holder's first")  # fmt: skip
