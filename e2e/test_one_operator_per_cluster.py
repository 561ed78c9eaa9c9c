"""One operator per cluster (issue 35): a second install does not lead beside the first, says why,
and writes nothing.

On a control plane of the module's own (audit on), two installs of the operator as the chart
makes them: dist/install.yaml (release ``crewlet-operator`` in crewlet-operator-system) and the
chart rendered again as release ``second`` in ``second-system`` with ``crd.enabled=false``. Each
runs the daemon as a process with its own ServiceAccount's token, under its own RBAC and
admission policy, electing on a Lease in its own namespace, so the API server's audit log tells
the two apart. In file order (each test starts from where the one before left off):

1. the first leads and converges a company; the second, started after, does not lead
   (``leader_election_master_status`` 0), says why in its log and in ``/readyz``, and the audit
   log holds no write of its own (its own Lease included) while the first runs;
2. the first stops gracefully (releasing its lease): the second takes over at once;
3. the first, started again, waits in its turn, writing nothing; the second killed, the first
   takes over once the second's lease has expired, and not before;
4. both started at once, on fresh Leases: never both lead, and exactly one ends up leading.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from operator_helpers import (
    LEASE_NAME,
    MANAGER_NAMESPACE,
    PLATFORM,
    AuditedWrite,
    Operator,
    admin_client,
    audited_writes,
    chart_documents,
    company,
    engine_class,
    manager_kubeconfig,
    manager_user,
    own_control_plane,
    wait_converged,
)

from crewlet_operator import LEASE, Client
from crewlet_operator._tasks import cancel_and_wait
from crewlet_operator.envtest import ControlPlane
from crewlet_operator.envtest.wait import eventually
from crewlet_operator_daemon.api.v1alpha1 import COMPANY, ENGINE_CLASS

SECOND_NAMESPACE = "second-system"
NS = "companies"
CLASS = "one"
LEASE_SECONDS = 15.0
"""The daemon's lease duration."""
BLOCKED = (
    "another install of this controller leads in the cluster; this one does not lead while it does"
)


def not_leading_because_of(lease: str) -> str:
    """The line of ``/readyz?verbose`` of an install that another's Lease keeps from leading."""
    return (
        "[-]one-leader-per-cluster failed: another install of this controller leads in the "
        f"cluster, on the Lease {lease}; this one does not lead while it does"
    )


FIRST_LEASE = f"{MANAGER_NAMESPACE}/{LEASE_NAME}"
SECOND_LEASE = f"{SECOND_NAMESPACE}/{LEASE_NAME}"


# A plane of its own: two installs' cluster-wide objects, and the audit log of their writes.
@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    with own_control_plane(tmp_path_factory.mktemp("one-operator")) as plane:
        yield plane


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def client(plane: ControlPlane) -> AsyncIterator[Client]:
    async with admin_client(plane, PLATFORM, NS, SECOND_NAMESPACE) as admin:
        await admin.create(ENGINE_CLASS, engine_class(CLASS, seats={"replicas": 0}))
        yield admin


class Install:
    """One install's identity and its daemon (started, stopped and started again by tests)."""

    def __init__(self, name: str, kubeconfig: Path, user: str, namespace: str, logs: Path) -> None:
        self.name = name
        self.kubeconfig = kubeconfig
        self.user = user
        self.namespace = namespace
        self.logs = logs
        self.starts = 0
        self.daemon: Operator | None = None

    def start(self, *args: str) -> Operator:
        self.starts += 1
        self.daemon = Operator(
            self.kubeconfig,
            self.logs,
            name=f"{self.name}-{self.starts}",
            leader_elect=True,
            lease_namespace=self.namespace,
            args=args,
        )
        return self.daemon

    @property
    def running(self) -> Operator:
        assert self.daemon is not None, f"{self.name} is not running"
        return self.daemon

    def stop(self) -> None:
        if self.daemon is not None:
            self.daemon.stop()
            self.daemon = None

    def writes(self, plane: ControlPlane) -> list[AuditedWrite]:
        return audited_writes(plane, {self.user})


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def installs(
    plane: ControlPlane, client: Client, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[tuple[Install, Install]]:
    """The first (dist/install.yaml) and the second (release ``second``), neither running."""
    tmp = tmp_path_factory.mktemp("installs")
    second = chart_documents(
        {"crd": {"enabled": False}}, release="second", namespace=SECOND_NAMESPACE
    )
    pair = (
        Install(
            "first",
            await manager_kubeconfig(client, plane, tmp, leader_election=True),
            manager_user(),
            MANAGER_NAMESPACE,
            tmp / "first",
        ),
        Install(
            "second",
            await manager_kubeconfig(client, plane, tmp, leader_election=True, documents=second),
            manager_user(second),
            SECOND_NAMESPACE,
            tmp / "second",
        ),
    )
    assert pair[0].user != pair[1].user
    yield pair
    for install in pair:
        install.stop()


def readyz(daemon: Operator) -> tuple[int, str]:
    """``/readyz?verbose``: its status and its body (0 and "" when nothing answers)."""
    url = f"http://127.0.0.1:{daemon.health_port}/readyz?verbose"
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as failed:
        return failed.code, failed.read().decode()
    except OSError:
        return 0, ""


def said_blocked(daemon: Operator, lease: str) -> list[dict[str, Any]]:
    """The warnings in its log that ``lease`` keeps it from leading."""
    return [
        e
        for e in daemon.log_events()
        if e.get("event") == BLOCKED and e.get("rival_lease") == lease
    ]


async def blocked_by(daemon: Operator, lease: str) -> None:
    """Wait until it says, in its log and in ``/readyz``, that ``lease`` keeps it from leading."""
    await eventually(lambda: said_blocked(daemon, lease), timeout=60, message="said blocked")
    await eventually(
        lambda: not_leading_because_of(lease) in readyz(daemon)[1],
        timeout=30,
        message="/readyz says why",
    )


async def holder(client: Client, namespace: str) -> str:
    lease = await client.get_or_none(LEASE, LEASE_NAME, namespace)
    return str(((lease or {}).get("spec") or {}).get("holderIdentity") or "")


async def converge(client: Client, name: str) -> None:
    await client.create(COMPANY, company(NS, name, CLASS, suspend=True))
    await wait_converged(client, [(NS, name)], timeout=90, namespace=NS)


def after(writes: list[AuditedWrite], moment: datetime.datetime) -> list[AuditedWrite]:
    return [w for w in writes if w.received >= moment]


def latest(plane: ControlPlane) -> datetime.datetime:
    """The time of the newest write in the audit log (the API server's clock)."""
    return max(w.completed for w in audited_writes(plane))


async def test_the_second_install_does_not_lead_says_why_and_writes_nothing(
    plane: ControlPlane, client: Client, installs: tuple[Install, Install]
) -> None:
    first, second = installs
    leader = first.start()
    await eventually(leader.leading, timeout=60, message="the first leads")
    await eventually(leader.ready, timeout=60, message="the first ready")
    await converge(client, "before")

    standby = second.start()
    await blocked_by(standby, FIRST_LEASE)
    status, text = readyz(standby)
    assert status == 500, text
    (said,) = said_blocked(standby, FIRST_LEASE)[:1]
    assert said["rival_holder"] == await holder(client, MANAGER_NAMESPACE)
    assert said["level"] == "warning"

    # While both run, the first alone reconciles; the second, a warm standby, waits.
    await converge(client, "during")
    await asyncio.sleep(LEASE_SECONDS)  # a whole lease: the first renews, the second waits on
    assert standby.alive() and not standby.leading()
    assert standby.metric(f'leader_election_master_status{{name="{LEASE_NAME}"}}') == 0.0
    assert len(said_blocked(standby, FIRST_LEASE)) == 1, "said once"
    assert await client.get_or_none(LEASE, LEASE_NAME, SECOND_NAMESPACE) is None
    assert second.writes(plane) == [], [str(w) for w in second.writes(plane)]
    assert any(w.resource == "companies" for w in first.writes(plane))


async def test_when_the_first_stops_the_second_takes_over_at_once(
    plane: ControlPlane, client: Client, installs: tuple[Install, Install]
) -> None:
    first, second = installs
    standby = second.running
    first.stop()  # SIGTERM: it drains and releases its lease
    released = max(w.completed for w in first.writes(plane) if w.resource == "leases")
    await eventually(standby.leading, timeout=10, interval=0.2, message="the second leads")
    await eventually(standby.ready, timeout=30, message="the second ready")
    status, text = readyz(standby)
    assert "[+]one-leader-per-cluster ok" in text, (status, text)
    await converge(client, "after-release")

    writes = second.writes(plane)
    assert writes and writes[0].received >= released, [str(w) for w in writes[:5]]
    assert writes[0].resource == "leases" and writes[0].namespace == SECOND_NAMESPACE
    assert any(w.resource == "companies" for w in writes)
    assert standby.count_log("the other install's lease is no longer live") == 1


async def test_a_restarted_first_waits_then_takes_over_when_the_second_dies(
    plane: ControlPlane, client: Client, installs: tuple[Install, Install]
) -> None:
    first, second = installs
    restarted_at = latest(plane)
    waiting = first.start()
    await blocked_by(waiting, SECOND_LEASE)
    assert not waiting.leading()
    assert after(first.writes(plane), restarted_at) == []

    second.running.kill()  # SIGKILL: its lease is left to expire
    second.daemon = None
    await eventually(waiting.leading, timeout=60, interval=0.2, message="the first leads")
    last_renewal = max(w.received for w in second.writes(plane) if w.resource == "leases")
    first_writes = after(first.writes(plane), restarted_at)
    # Not before the dead leader's lease expired, as the first saw it (by its own clock, from
    # a read that cannot precede the renewal's arrival).
    waited = (first_writes[0].received - last_renewal).total_seconds()
    assert waited >= LEASE_SECONDS, waited
    assert first_writes[0].resource == "leases"
    await converge(client, "after-crash")


async def test_two_installs_started_at_once_never_both_lead(
    plane: ControlPlane, client: Client, installs: tuple[Install, Install]
) -> None:
    installs[0].stop()
    # The second's old Lease still names its killed leader: a replica seeing it for the first
    # time would wait one lease duration for it. Gone, so that the two start together.
    await client.delete(LEASE, LEASE_NAME, SECOND_NAMESPACE)
    lease = "race"
    daemons = [i.start(f"--leader-election-id={lease}") for i in installs]

    def leading(daemon: Operator) -> bool:
        if not daemon.process.running():
            return False
        with contextlib.suppress(OSError):
            return daemon.metric(f'leader_election_master_status{{name="{lease}"}}') == 1.0
        return False

    both: list[float] = []

    async def watch() -> None:
        while True:
            if all(leading(d) for d in daemons):
                both.append(asyncio.get_running_loop().time())
            await asyncio.sleep(0.1)

    watcher = asyncio.create_task(watch())
    try:
        await eventually(
            lambda: sum(leading(d) for d in daemons) == 1, timeout=90, message="one leads"
        )
        # One that led before it read the other's Lease steps down at its next renewal (and
        # exits: the daemon restarts); the other leads once its lease has expired.
        await asyncio.sleep(LEASE_SECONDS + 5)
    finally:
        await cancel_and_wait(watcher)
    assert both == []
    leaders = [i for i in installs if i.daemon is not None and leading(i.daemon)]
    assert len(leaders) == 1
    (leader,) = leaders
    (other,) = [i.running for i in installs if i is not leader]
    if other.alive():
        await blocked_by(other, f"{leader.namespace}/{lease}")
    else:  # it had led before it read the leader's Lease, and stepped down
        assert other.count_log("leader election lost; exiting") == 1, other.process.log_tail(40)
    await converge(client, "after-race")
