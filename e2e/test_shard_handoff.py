"""Sharding on the real control plane (issue 38): replicas of a sharded controller
(e2e/shardlet.py) share Widgets across several namespaces: two, then a third joins (Widgets move
to it by drain and acknowledgement), then the sharder's replica is killed.

Asserted from the API server's records:

- every Widget converges (its ConfigMap and its Ready condition at its generation), while the
  test keeps changing them, before and after the kill;
- the dead member's Widgets are all assigned to live members within about one lease duration
  of the kill; its heirs write them before any relabel (with every relabel refused by a
  policy, they still converge), and its Lease is deleted once they are relabelled;
- the audit log (each replica writes with a user agent of its own): for every Widget and its
  ConfigMap, the writing replica changes only at a handoff: the previous writer's last write
  was its acknowledgement of a drain (a patch of the Widget), or it was killed before the next
  writer's first write; and the sharder labelled the object after the previous writer's last
  write and before the next one's first.
"""

from __future__ import annotations

import asyncio
import datetime
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from handoffs import handoff_violations, moment

from crewlet_operator import (
    CONFIG_MAP,
    LEASE,
    NAMESPACE,
    VALIDATING_ADMISSION_POLICY,
    VALIDATING_ADMISSION_POLICY_BINDING,
    ApiError,
    Client,
    LeadershipLostError,
    Manager,
    Scope,
    find_condition,
)
from crewlet_operator._tasks import cancel_and_wait
from crewlet_operator.envtest import ControlPlane, install_crds, load_crds
from crewlet_operator.envtest.wait import eventually
from crewlet_operator.sharding.ring import RingLabels, member_name
from crewlet_operator.sharding.slots import MemberSlots

E2E = Path(__file__).resolve().parent
EXAMPLES = E2E.parent / "examples"
sys.path.insert(0, str(EXAMPLES))

import shardlet  # noqa: E402
from widgets import WIDGET  # noqa: E402

NAME = "shardlet"
LEASE_SECONDS = 4.0
LEASE_NAMESPACE = "shard-system"
NAMESPACES = [f"tenant-{i}" for i in range(12)]
PER_NAMESPACE = 3
LABELS = RingLabels("example.crewlet.ai", NAME)
SHARD = LABELS.shard
SLACK = 4.0
"""Seconds past the lease duration the pick-up may take: a membership list (every second), the
new leader's campaign and its sharder's first list, and one label write a Widget."""

Object = dict[str, Any]


class Replica:
    """e2e/shardlet.py as a process, identified by ``identity`` (also its user agent)."""

    def __init__(self, kubeconfig: Path, identity: str, log: Path) -> None:
        self.identity = identity
        self.member = member_name(NAME, identity)
        self.left_at: datetime.datetime | None = None
        """When it was killed or told to stop: after it, it may be gone without a handoff."""
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    str(E2E / "shardlet.py"),
                    "--kubeconfig",
                    str(kubeconfig),
                    "--identity",
                    identity,
                    "--lease-namespace",
                    LEASE_NAMESPACE,
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def kill(self) -> None:
        """SIGKILL: no release; its Leases must expire."""
        self.left_at = datetime.datetime.now(datetime.UTC)
        self.proc.kill()
        self.proc.wait()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.left_at = datetime.datetime.now(datetime.UTC)
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def plane(tmp_path: Path) -> Iterator[ControlPlane]:
    with ControlPlane(tmp_path / "plane", audit=True) as started:
        yield started


@pytest_asyncio.fixture
async def admin(plane: ControlPlane) -> AsyncIterator[Client]:
    async with Client(plane.admin_config(), field_manager="e2e-test") as client:
        await install_crds(client, load_crds(EXAMPLES / "example.crewlet.ai_widgets.yaml"))
        for ns in [LEASE_NAMESPACE, *NAMESPACES]:
            await client.create(NAMESPACE, {"metadata": {"name": ns}})
        yield client


class Replicas:
    """The replicas a test starts, each stopped after it."""

    def __init__(self, kubeconfig: Path, logs: Path) -> None:
        self.kubeconfig = kubeconfig
        self.logs = logs
        self.started: list[Replica] = []

    def start(self) -> Replica:
        identity = f"replica-{len(self.started)}"
        replica = Replica(self.kubeconfig, identity, self.logs / f"{identity}.log")
        self.started.append(replica)
        return replica

    def stop(self) -> None:
        for replica in self.started:
            replica.stop()

    def departures(self) -> dict[str, datetime.datetime]:
        """When each replica that has left was killed or told to stop."""
        return {r.identity: r.left_at for r in self.started if r.left_at is not None}


@pytest.fixture
def replicas(plane: ControlPlane, tmp_path: Path) -> Iterator[Replicas]:
    started = Replicas(plane.kubeconfig, tmp_path)
    try:
        yield started
    finally:
        started.stop()


def widget(ns: str, name: str, value: str) -> Object:
    return {"metadata": {"name": name, "namespace": ns}, "spec": {"data": {"v": value}}}


def widgets() -> list[tuple[str, str]]:
    return [(ns, f"w{i}") for ns in NAMESPACES for i in range(PER_NAMESPACE)]


async def keep_changing(client: Client) -> None:
    """Change one Widget after another, so that every replica keeps writing."""
    round_ = 0
    while True:
        round_ += 1
        for ns, name in widgets():
            patch = {"spec": {"data": {"v": str(round_)}}}
            await client.patch(WIDGET, name, patch, ns)
            await asyncio.sleep(0.02)


async def converged(client: Client, live: set[str]) -> bool:
    """Every Widget is with a live member, Ready at its generation, its ConfigMap rendered."""
    items = (await client.list(WIDGET)).items
    maps = {
        (m["metadata"]["namespace"], m["metadata"]["name"]): m
        for m in (await client.list(CONFIG_MAP, Scope(label_selector=LABELS.slot))).items
    }
    if len(items) != len(widgets()):
        return False
    for item in items:
        meta = item["metadata"]
        ready = find_condition((item.get("status") or {}).get("conditions"), "Ready")
        rendered = maps.get((meta["namespace"], f"{meta['name']}-rendered"))
        if (
            (meta.get("labels") or {}).get(SHARD) not in live
            or ready is None
            or ready.get("observedGeneration") != meta["generation"]
            or rendered is None
            or rendered.get("data") != item["spec"]["data"]
        ):
            return False
    return True


async def members_of(client: Client) -> dict[str, str]:
    """Each Widget's member."""
    return {
        f"{w['metadata']['namespace']}/{w['metadata']['name']}": (
            (w["metadata"].get("labels") or {}).get(SHARD, "")
        )
        for w in (await client.list(WIDGET)).items
    }


def company_of(event: Object) -> str | None:
    """The Widget an audited write is about (the Widget's own, its status, its ConfigMap)."""
    ref = event.get("objectRef") or {}
    ns, name = ref.get("namespace"), ref.get("name") or ""
    if ref.get("resource") == "widgets":
        return f"{ns}/{name}"
    if ref.get("resource") == "configmaps" and name.endswith("-rendered"):
        return f"{ns}/{name.removesuffix('-rendered')}"
    return None


def violations(
    events: list[Object], replicas: Mapping[str, str], departures: dict[str, datetime.datetime]
) -> list[str]:
    """The Widgets' writers changed other than through a handoff (e2e/handoffs.py)."""
    return handoff_violations(
        events,
        replicas,
        departures,
        object_of=company_of,
        primary="widgets",
        sharder=f"{NAME}-sharder",
    )


async def shared(client: Client, members: set[str]) -> bool:
    """Every Widget converged, and every member holds some."""
    owners = set((await members_of(client)).values())
    return owners == members and await converged(client, members)


# No RBAC is tested here: the control plane runs without kube-controller-manager.
@pytest.mark.filterwarnings(
    "ignore::crewlet_operator.envtest.controlplane.EmptyAggregatedRolesWarning"
)
async def test_replicas_share_the_widgets_hand_over_on_join_and_pick_up_the_dead(
    plane: ControlPlane, admin: Client, replicas: Replicas
) -> None:
    for ns, name in widgets():
        await admin.create(WIDGET, widget(ns, name, "0"))
    first = {replicas.start().member, replicas.start().member}
    changing = asyncio.create_task(keep_changing(admin))
    try:
        await eventually(
            lambda: shared(admin, first), timeout=120, interval=0.5, message="over 2 members"
        )
        before = await members_of(admin)
        joined_at = datetime.datetime.now(datetime.UTC)
        joined = replicas.start()
        everyone = {*first, joined.member}
        await eventually(
            lambda: shared(admin, everyone), timeout=120, interval=0.5, message="over 3 members"
        )
        moved = {k for k, m in (await members_of(admin)).items() if m != before[k]}
        assert moved, "the member that joined took Widgets over"
        leases = (
            await admin.list(
                LEASE, Scope(LEASE_NAMESPACE, label_selector=f"{LABELS.member}={NAME}")
            )
        ).items
        assert {lease["metadata"]["name"] for lease in leases} == everyone

        leader_lease = await admin.get(LEASE, f"{NAME}-leader", LEASE_NAMESPACE)
        holder = leader_lease["spec"]["holderIdentity"]
        victim = next(r for r in replicas.started if r.identity == holder)
        theirs = {k for k, m in (await members_of(admin)).items() if m == victim.member}
        assert theirs, "the sharder's replica has Widgets of its own"
        await asyncio.sleep(3)  # keep writing everywhere a while longer
        killed_at = datetime.datetime.now(datetime.UTC)
        started = time.monotonic()
        victim.kill()
        survivors = everyone - {victim.member}

        async def picked_up() -> bool:
            return not set((await members_of(admin)).values()) - survivors

        await eventually(picked_up, timeout=60, interval=0.1, message="the dead member's Widgets")
        took = time.monotonic() - started
        print(f"\nthe dead member's {len(theirs)} Widgets picked up {took:.2f} s after the kill")
        assert took <= LEASE_SECONDS + SLACK, took
        await asyncio.sleep(3)
    finally:
        await cancel_and_wait(changing)

    await eventually(
        lambda: converged(admin, survivors), timeout=60, interval=0.5, message="converged"
    )
    assert set((await members_of(admin)).values()) == survivors
    replicas.stop()

    events = plane.audit_events()
    identities = {r.identity: r.member for r in replicas.started}
    written = {e.get("userAgent") for e in events if company_of(e) is not None}
    assert set(identities) <= written, "every replica wrote, under its own user agent"
    acknowledged = {
        company_of(e)
        for e in events
        if e.get("userAgent") in identities
        and e["objectRef"].get("resource") == "widgets"
        and not e["objectRef"].get("subresource")
        and e.get("verb") == "patch"
        and f"fieldManager={NAME}-sharder" not in str(e.get("requestURI"))
        and (e.get("responseStatus") or {}).get("code") == 200
    }
    assert moved <= acknowledged, "each move on the join was acknowledged"
    # A move is two label writes: the sharder's drain, naming the newcomer, and the old
    # member's acknowledgement, which labels the Widget for it (clearing both labels instead,
    # for the sharder to label it after, made three).
    label_writes = Counter(
        company_of(e)
        for e in events
        if company_of(e) in moved
        and e["objectRef"].get("resource") == "widgets"
        and not e["objectRef"].get("subresource")
        and e.get("verb") == "patch"
        and (
            e.get("userAgent") in identities
            or f"fieldManager={NAME}-sharder" in str(e.get("requestURI"))
        )
        and 200 <= int((e.get("responseStatus") or {}).get("code") or 0) < 300
        and joined_at < moment(e["stageTimestamp"]) < killed_at
    )
    assert set(label_writes.values()) == {2}, label_writes
    assert violations(events, identities, replicas.departures()) == []


@pytest.mark.filterwarnings(
    "ignore::crewlet_operator.envtest.controlplane.EmptyAggregatedRolesWarning"
)
async def test_a_member_that_stops_gracefully_hands_over_without_waiting_for_expiry(
    plane: ControlPlane, admin: Client, replicas: Replicas
) -> None:
    """SIGTERM: the member drains its reconciles and releases its Lease, so its Widgets move at
    the next membership list, well within a lease duration, and still never to two writers."""
    for ns, name in widgets():
        await admin.create(WIDGET, widget(ns, name, "0"))
    members = {replicas.start().member, replicas.start().member}
    changing = asyncio.create_task(keep_changing(admin))
    try:
        await eventually(
            lambda: shared(admin, members), timeout=120, interval=0.5, message="over 2 members"
        )
        leader_lease = await admin.get(LEASE, f"{NAME}-leader", LEASE_NAMESPACE)
        # The one that does not lead stops: the sharder keeps running throughout.
        leaving = next(
            r for r in replicas.started if r.identity != leader_lease["spec"]["holderIdentity"]
        )
        leaving.stop()
        assert leaving.proc.returncode == 0
        gone = time.monotonic()
        staying = members - {leaving.member}

        async def picked_up() -> bool:
            return not set((await members_of(admin)).values()) - staying

        await eventually(picked_up, timeout=60, interval=0.1, message="the Widgets it left")
        took = time.monotonic() - gone
        print(f"\nthe stopped member's Widgets picked up {took:.2f} s after it exited")
        assert took < LEASE_SECONDS, took
        await asyncio.sleep(2)
    finally:
        await cancel_and_wait(changing)
    await eventually(
        lambda: converged(admin, staying), timeout=60, interval=0.5, message="converged"
    )
    replicas.stop()
    identities = {r.identity: r.member for r in replicas.started}
    events = plane.audit_events()
    assert violations(events, identities, replicas.departures()) == []


def pinned_to(member: str) -> tuple[Object, Object]:
    """A policy and its binding that refuse every change of a Widget's shard label away from
    ``member``: the sharder cannot relabel its Widgets."""
    policy = {
        "metadata": {"name": "pin-shard"},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [WIDGET.group],
                        "apiVersions": ["*"],
                        "resources": [WIDGET.plural],
                        "operations": ["UPDATE"],
                    }
                ]
            },
            "validations": [
                {
                    "expression": (
                        f"!has(oldObject.metadata.labels) || !('{SHARD}' in "
                        f"oldObject.metadata.labels) || oldObject.metadata.labels['{SHARD}'] != "
                        f"'{member}' || (has(object.metadata.labels) && '{SHARD}' in "
                        f"object.metadata.labels && object.metadata.labels['{SHARD}'] == "
                        f"'{member}')"
                    ),
                    "message": "pinned",
                }
            ],
        },
    }
    binding = {
        "metadata": {"name": "pin-shard"},
        "spec": {"policyName": "pin-shard", "validationActions": ["Deny"]},
    }
    return policy, binding


@pytest.mark.filterwarnings(
    "ignore::crewlet_operator.envtest.controlplane.EmptyAggregatedRolesWarning"
)
async def test_a_dead_members_heirs_write_its_widgets_before_any_relabel(
    plane: ControlPlane, admin: Client, replicas: Replicas
) -> None:
    """The takeover is the will: with every relabel of the dead member's Widgets refused (an
    admission policy), the survivor still converges a change to each of them while they stay
    labelled for the dead member; once the policy goes, the sharder relabels them for that
    survivor and deletes the dead member's Lease. Never two writers (the audit log)."""
    for ns, name in widgets():
        await admin.create(WIDGET, widget(ns, name, "0"))
    members = {replicas.start().member, replicas.start().member}
    await eventually(
        lambda: shared(admin, members), timeout=120, interval=0.5, message="over 2 members"
    )
    leader_lease = await admin.get(LEASE, f"{NAME}-leader", LEASE_NAMESPACE)
    victim = next(
        r for r in replicas.started if r.identity != leader_lease["spec"]["holderIdentity"]
    )
    survivor = (members - {victim.member}).pop()
    theirs = [k for k, m in (await members_of(admin)).items() if m == victim.member]
    assert theirs, "the member that does not lead has Widgets"
    policy, binding = pinned_to(victim.member)
    await admin.create(VALIDATING_ADMISSION_POLICY, policy)
    await admin.create(VALIDATING_ADMISSION_POLICY_BINDING, binding)
    ns, name = theirs[0].split("/")

    async def refused() -> bool:
        relabel = {"metadata": {"labels": {SHARD: survivor}}}
        try:
            await admin.request(
                "PATCH",
                WIDGET.path(ns, name),
                body=relabel,
                content_type="application/merge-patch+json",
                query={"dryRun": "All"},
            )
        except ApiError:
            return True
        return False

    await eventually(refused, timeout=30, message="the policy in force")
    victim.kill()
    for key in theirs:
        ns, name = key.split("/")
        await admin.patch(WIDGET, name, {"spec": {"data": {"v": "after"}}}, ns)

    async def inherited() -> bool:
        for key in theirs:
            ns, name = key.split("/")
            item = await admin.get(WIDGET, name, ns)
            meta = item["metadata"]
            ready = find_condition((item.get("status") or {}).get("conditions"), "Ready")
            rendered = await admin.get_or_none(CONFIG_MAP, f"{name}-rendered", ns)
            assert meta["labels"][SHARD] == victim.member, "no relabel gets through"
            if (
                ready is None
                or ready.get("observedGeneration") != meta["generation"]
                or rendered is None
                or rendered.get("data") != {"v": "after"}
            ):
                return False
        return True

    await eventually(inherited, timeout=60, interval=0.5, message="converged by the heir")
    will = await admin.get(LEASE, victim.member, LEASE_NAMESPACE)
    assert will["metadata"]["annotations"][LABELS.heirs] == survivor
    await admin.delete(VALIDATING_ADMISSION_POLICY_BINDING, "pin-shard")

    async def relabelled_and_forgotten() -> bool:
        labelled = set((await members_of(admin)).values())
        gone = await admin.get_or_none(LEASE, victim.member, LEASE_NAMESPACE) is None
        return labelled == {survivor} and gone

    await eventually(relabelled_and_forgotten, timeout=60, message="relabelled, Lease deleted")
    replicas.stop()
    identities = {r.identity: r.member for r in replicas.started}
    assert violations(plane.audit_events(), identities, replicas.departures()) == []


@pytest.mark.filterwarnings(
    "ignore::crewlet_operator.envtest.controlplane.EmptyAggregatedRolesWarning"
)
async def test_a_member_whose_slots_loop_fails_stops_instead_of_waiting_for_ever(
    plane: ControlPlane, admin: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A background loop of a sharded replica (membership, slots, sharder) that fails stops
    the manager, as a lost lease does, so that the process exits and is restarted: once a
    failing follow left a replica's slots uncovered, its objects waited for them for ever."""

    async def failing(self: MemberSlots, now: float) -> None:
        raise RuntimeError("a follow that fails")

    monkeypatch.setattr(MemberSlots, "follow", failing)
    manager = Manager(admin, shardlet.options(LEASE_NAMESPACE, "failing-replica"))
    shardlet.setup(manager)
    with pytest.raises(LeadershipLostError, match="the member slots loop failed"):
        await asyncio.wait_for(manager.run(), 60)
