"""Wills that cannot strand (issue 47), and a ring on exactly its generated roles (issue 48), on
the real API server: the library's sharded manager
(e2e/shardlet.py's controller, in this process) and Leases written as a stolen token or a hand
would write them.

"A will naming no live member strands that member's companies for good (even after a restart):
no verdict for new companies, no change applied, nothing says so." And: "heirs without a live
Lease count as absent and the ring's target takes the objects; a member that finds a will on
the Lease it still holds fences and rejoins; a member with nothing it may write says so (readyz
and a metric)".
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from crewlet_operator import (
    CLUSTER_ROLE,
    CLUSTER_ROLE_BINDING,
    CONFIG_MAP,
    LEASE,
    NAMESPACE,
    POD,
    ROLE,
    ROLE_BINDING,
    SERVICE_ACCOUNT,
    Client,
    HealthCheckFailed,
    LeadershipLostError,
    Manager,
    find_condition,
)
from crewlet_operator._tasks import cancel_and_wait
from crewlet_operator.cache import Cache, ClusterView
from crewlet_operator.envtest import ControlPlane, install_crds, load_crds
from crewlet_operator.envtest.wait import eventually
from crewlet_operator.errors import NotFoundError
from crewlet_operator.incarnation import PodRef
from crewlet_operator.kube.client import Scope, WatchParams
from crewlet_operator.leader import LeaderElectionConfig, LeaderElector
from crewlet_operator.metrics import REGISTRY
from crewlet_operator.objects import micro_time
from crewlet_operator.rbac import manifests
from crewlet_operator.sharding import by_namespace
from crewlet_operator.sharding.membership import Membership
from crewlet_operator.sharding.ring import RingLabels, member_name, member_names
from crewlet_operator.sharding.sharder import Sharder
from crewlet_operator.testing import replica_pod

E2E = Path(__file__).resolve().parent
EXAMPLES = E2E.parent / "examples"
sys.path.insert(0, str(E2E))
sys.path.insert(0, str(EXAMPLES))

import shardlet  # noqa: E402
from widgets import WIDGET  # noqa: E402

LABELS = RingLabels(shardlet.DOMAIN, shardlet.NAME)
Object = dict[str, Any]


@pytest_asyncio.fixture(loop_scope="session")
async def widgets_crd(kube_client: Client) -> None:
    await install_crds(kube_client, load_crds(EXAMPLES / "example.crewlet.ai_widgets.yaml"))


@contextlib.asynccontextmanager
async def member(client: Client, namespace: str, identity: str) -> AsyncIterator[Manager]:
    """A sharded replica running in this process until the block ends."""
    manager = Manager(client, shardlet.options(namespace, identity))
    shardlet.setup(manager)
    running = asyncio.create_task(manager.run(), name=identity)
    try:
        yield manager
    finally:
        manager.stop()
        with contextlib.suppress(LeadershipLostError):
            await asyncio.wait_for(running, 30)
        await cancel_and_wait(running)


async def write_widgets(client: Client, namespace: str, labels: dict[str, str]) -> list[str]:
    names = [f"w{i}" for i in range(3)]
    for name in names:
        await client.create(
            WIDGET,
            {
                "metadata": {"name": name, "namespace": namespace, "labels": labels},
                "spec": {"data": {"v": name}},
            },
        )
    return names


async def converged_for(client: Client, namespace: str, names: list[str], holder: str) -> bool:
    """Each Widget rendered and Ready at its generation, labelled for ``holder``."""
    for name in names:
        item = await client.get(WIDGET, name, namespace)
        ready = find_condition((item.get("status") or {}).get("conditions"), "Ready")
        rendered = await client.get_or_none(CONFIG_MAP, f"{name}-rendered", namespace)
        if (
            (item["metadata"].get("labels") or {}).get(LABELS.shard) != holder
            or ready is None
            or ready.get("observedGeneration") != item["metadata"]["generation"]
            or rendered is None
            or rendered.get("data") != item["spec"]["data"]
        ):
            return False
    return True


def shard_member_status() -> float | None:
    return REGISTRY.get_sample_value(
        "crewlet_operator_shard_member_status", {"ring": shardlet.NAME}
    )


async def test_a_will_naming_no_member_with_a_lease_strands_nothing(
    kube_client: Client, namespace: str, widgets_crd: None
) -> None:
    """A dead member's will names members that have no Lease (a stolen token may write any
    member-shaped name; the policy admits those): its Widgets go to the ring's target, which
    writes them and relabels them, and the dead member's Lease is deleted. Before, they waited
    for those heirs for good, through any restart."""
    dead = member_name(shardlet.NAME, "dead-replica")
    ghosts = sorted(member_name(shardlet.NAME, f"ghost-{i}") for i in range(2))
    await kube_client.create(
        LEASE,
        {
            "metadata": {
                "name": dead,
                "namespace": namespace,
                "labels": {LABELS.member: LABELS.ring},
                "annotations": {LABELS.heirs: ",".join(ghosts)},
            },
            "spec": {"holderIdentity": "", "leaseDurationSeconds": 4},
        },
    )
    names = await write_widgets(kube_client, namespace, {LABELS.shard: dead})
    async with member(kube_client, namespace, "survivor") as survivor:
        assert survivor.member is not None

        async def taken_over() -> bool:
            gone = await kube_client.get_or_none(LEASE, dead, namespace) is None
            done = await converged_for(kube_client, namespace, names, survivor.member or "")
            return gone and done

        await eventually(
            taken_over, timeout=60, interval=0.5, message="the ring's target took over"
        )
        assert survivor.may_write_share()
        assert shard_member_status() == 1.0


async def test_a_member_that_finds_a_will_on_its_own_lease_fences_and_rejoins(
    kube_client: Client, namespace: str, widgets_crd: None
) -> None:
    """A will on the Lease a member still holds (written by hand, or by a stolen token): the
    member says why it may write nothing, stops as a lost lease stops it, and a replica started
    again joins under a new name and takes the Widgets over (the will names no member with a
    Lease). Before, the member wrote nothing of its share for good and nothing said so."""
    names = await write_widgets(kube_client, namespace, {})
    manager = Manager(kube_client, shardlet.options(namespace, "first"))
    shardlet.setup(manager)
    running = asyncio.create_task(manager.run(), name="first")
    first = manager.member
    assert first is not None
    try:
        await eventually(
            lambda: converged_for(kube_client, namespace, names, first),
            timeout=60,
            interval=0.5,
            message="the first member holds the Widgets",
        )
        assert shard_member_status() == 1.0
        heir = member_name(shardlet.NAME, "nobody")
        will = {"metadata": {"annotations": {LABELS.heirs: heir}}}
        await kube_client.patch(LEASE, first, will, namespace)

        with pytest.raises(LeadershipLostError, match=f"Lease {namespace}/{first} carries a will"):
            await asyncio.wait_for(asyncio.shield(running), 30)
    finally:
        manager.stop()
        with contextlib.suppress(LeadershipLostError):
            await cancel_and_wait(running)
    assert shard_member_status() is None, "a stopped member reports nothing"
    await kube_client.patch(WIDGET, names[0], {"spec": {"data": {"v": "after"}}}, namespace)
    async with member(kube_client, namespace, "second") as again:
        assert again.member not in (None, first)

        async def rejoined() -> bool:
            gone = await kube_client.get_or_none(LEASE, first, namespace) is None
            return gone and await converged_for(kube_client, namespace, names, again.member or "")

        await eventually(rejoined, timeout=60, interval=0.5, message="rejoined under a new name")


async def test_a_member_that_may_not_list_the_ring_says_so(
    kube_client: Client, control_plane: ControlPlane, namespace: str, widgets_crd: None
) -> None:
    """A member holding its Lease that cannot list the ring's Leases (its RBAC grants get and
    update on Leases, not list) holds no slot it can vouch for and writes nothing of its share:
    /readyz's shard-member check fails saying why, and crewlet_operator_shard_member_status is
    0, where before nothing said so."""
    account = "member-without-list"
    await kube_client.create(
        SERVICE_ACCOUNT, {"metadata": {"name": account, "namespace": namespace}}
    )
    subject = [{"kind": "ServiceAccount", "name": account, "namespace": namespace}]
    everything = ["get", "list", "watch", "create", "update", "patch", "delete"]
    cluster_role = f"{namespace}-widgets"
    await kube_client.create(
        CLUSTER_ROLE,
        {
            "metadata": {"name": cluster_role},
            "rules": [
                {
                    "apiGroups": [WIDGET.group],
                    "resources": ["widgets", "widgets/status"],
                    "verbs": everything,
                },
                {"apiGroups": [""], "resources": ["configmaps"], "verbs": everything},
            ],
        },
    )
    await kube_client.create(
        CLUSTER_ROLE_BINDING,
        {
            "metadata": {"name": cluster_role},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": cluster_role,
            },
            "subjects": subject,
        },
    )
    await kube_client.create(
        ROLE,
        {
            "metadata": {"name": "leases-without-list", "namespace": namespace},
            "rules": [
                {
                    "apiGroups": ["coordination.k8s.io"],
                    "resources": ["leases"],
                    "verbs": ["get", "create", "update", "patch"],
                },
                {
                    "apiGroups": ["", "events.k8s.io"],
                    "resources": ["events"],
                    "verbs": ["create", "patch"],
                },
            ],
        },
    )
    await kube_client.create(
        ROLE_BINDING,
        {
            "metadata": {"name": "leases-without-list", "namespace": namespace},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "leases-without-list",
            },
            "subjects": subject,
        },
    )
    try:
        limited = Client(control_plane.service_account_config(namespace, account))
        async with limited, member(limited, namespace, "unlisted") as manager:

            async def says_so() -> str | None:
                try:
                    manager.may_write_share()
                except HealthCheckFailed as failed:
                    return str(failed)
                return None

            why = await eventually(says_so, timeout=60, interval=0.5, message="readyz fails")
            assert "has not listed the ring's Leases" in why, why
            assert "grant list on leases there" in why, why
            assert shard_member_status() == 0.0
    finally:
        for resource, name in ((CLUSTER_ROLE_BINDING, cluster_role), (CLUSTER_ROLE, cluster_role)):
            with contextlib.suppress(NotFoundError):
                await kube_client.delete(resource, name)


async def test_sharded_replicas_run_on_exactly_the_generated_roles_one_leaving(
    kube_client: Client, control_plane: ControlPlane, namespace: str, widgets_crd: None
) -> None:
    """Issue 48, a newcomer's finding: "the RBAC generated for a sharded manager lacks patch
    (and delete) on its member Leases; two replicas running on exactly the generated roles stop
    with a 403 on the Lease and LeadershipLostError when one leaves." Two replicas with
    nothing but ``crewlet_operator.rbac.manifests``' roles: the one holding the Widgets stops,
    the other writes its will, takes the Widgets over and deletes its Lease, and runs on."""
    probe = Manager(kube_client, shardlet.options(namespace, "probe"))
    shardlet.setup(probe)
    account, cluster_role = "replica", f"{namespace}-shardlet"
    role, lease_role = manifests(probe, cluster_role)
    assert lease_role is not None
    await kube_client.create(
        SERVICE_ACCOUNT, {"metadata": {"name": account, "namespace": namespace}}
    )
    subjects = [{"kind": "ServiceAccount", "name": account, "namespace": namespace}]
    await kube_client.create(CLUSTER_ROLE, role)
    await kube_client.create(ROLE, lease_role)
    for resource, granted in ((CLUSTER_ROLE_BINDING, role), (ROLE_BINDING, lease_role)):
        await kube_client.create(
            resource,
            {
                "metadata": granted["metadata"],
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": granted["kind"],
                    "name": granted["metadata"]["name"],
                },
                "subjects": subjects,
            },
        )
    names = await write_widgets(kube_client, namespace, {})
    replica = Client(control_plane.service_account_config(namespace, account))
    try:
        async with replica, member(replica, namespace, "holder") as holder:
            first = holder.member or ""
            await eventually(
                lambda: converged_for(kube_client, namespace, names, first),
                timeout=60,
                interval=0.5,
                message="the first replica holds the Widgets",
            )
            async with member(replica, namespace, "survivor") as survivor:
                other = survivor.member or ""
                await eventually(
                    lambda: kube_client.get_or_none(LEASE, other, namespace),
                    timeout=30,
                    message="the second replica joined",
                )
                holder.stop()

                async def taken_over() -> bool:
                    gone = await kube_client.get_or_none(LEASE, first, namespace) is None
                    return gone and await converged_for(kube_client, namespace, names, other)

                await eventually(taken_over, timeout=60, interval=0.5, message="taken over")
                assert survivor.is_leader and survivor.may_write_share()
    finally:
        for resource, name in ((CLUSTER_ROLE_BINDING, cluster_role), (CLUSTER_ROLE, cluster_role)):
            with contextlib.suppress(NotFoundError):
                await kube_client.delete(resource, name)


@dataclasses.dataclass
class TwoMembers:
    """Members ``a`` and ``b`` of a ring, each holding its Lease from a Pod of its own (neither
    renews: lease_duration 60, so only evidence makes one dead within a test), an object
    labelled for ``b``, the ring's membership and a sharder with evidence over its view."""

    pods: dict[str, PodRef]
    members: dict[str, str]
    membership: Membership
    sharder: Sharder

    async def will_of(self, client: Client, member: str) -> str | None:
        lease = await client.get(LEASE, self.members[member], self.membership.namespace)
        return (lease["metadata"].get("annotations") or {}).get(LABELS.heirs)


@contextlib.asynccontextmanager
async def two_members(client: Client, namespace: str) -> AsyncIterator[TwoMembers]:
    pods = {name: await replica_pod(client, namespace, f"{name}-pod") for name in "ab"}
    members = {}
    for name, pod in pods.items():
        elector = LeaderElector(
            client,
            LeaderElectionConfig(
                f"ring-{name}",
                namespace,
                identity=name,
                lease_duration=60,  # long: only evidence makes it dead within the test
                renew_deadline=10,
                retry_period=2,
                labels={LABELS.member: LABELS.ring},
                pod=pod,
            ),
        )
        await asyncio.wait_for(elector.acquire(), 30)  # then renews no more
        members[name] = elector.config.name
    # An object "b" holds: its Lease is kept (with its will) while an object leads to it.
    await client.create(
        CONFIG_MAP,
        {"metadata": {"name": "held", "namespace": namespace, "labels": {LABELS.shard: "ring-b"}}},
    )
    membership = Membership(client, namespace, LABELS, retry_period=2, lease_duration=60)
    view = ClusterView(client, Cache(client))
    sharder = Sharder(
        client.with_field_manager("e2e-sharder"),
        CONFIG_MAP,
        view,
        Scope(namespace),
        labels=LABELS,
        membership=membership,
        key=by_namespace,
        retry_period=2,
        evidence=True,
    )
    sharder.watch()
    await view.start()
    try:
        await view.wait_for_sync(30)
        yield TwoMembers(pods, members, membership, sharder)
    finally:
        await view.stop()


async def test_a_member_whose_pod_is_gone_gets_its_will_without_waiting_for_its_lease(
    kube_client: Client, namespace: str
) -> None:
    """Issue 50: a member crashed, or its Pod deleted, is found gone by the API server's word,
    as a standby finds a leader gone, and the sharder writes its will at once rather than a
    lease duration later. A live member whose Pod runs gets none."""
    async with two_members(kube_client, namespace) as ring:
        membership, sharder, members = ring.membership, ring.sharder, ring.members
        assert await membership.observe()
        assert await membership.gone() == {}, "both Pods run: no evidence"
        await sharder.shard_pass()
        assert await ring.will_of(kube_client, "b") is None
        await kube_client.delete(POD, ring.pods["b"].name, namespace, grace_period_seconds=0)
        assert await membership.observe()
        assert await sharder.shard_pass() >= 1
        assert await ring.will_of(kube_client, "b") == members["a"]
        assert await ring.will_of(kube_client, "a") is None
        assert await membership.observe()
        view = membership.view()
        assert view is not None and view.live == {members["a"]}, "a willed member is not live"


async def test_a_member_gone_after_renewing_since_the_last_list_gets_its_will_at_once(
    kube_client: Client, namespace: str
) -> None:
    """Issue 50: a new leader's sharder makes its first pass on the ring as last listed, up to
    a retry period before; a member killed after renewing its Lease since then is shown gone
    by its Pod, but its will, conditional on the listed version, is refused. The sharder
    lists the ring again and writes the will in the same pass, not at the next list (a leader
    killed with its share took 1.4 s for its will, bench/NOTES.md)."""
    async with two_members(kube_client, namespace) as ring:
        assert await ring.membership.observe()
        lease = await kube_client.get(LEASE, ring.members["b"], namespace)
        lease["spec"]["renewTime"] = micro_time()  # "b" renews once more, after the list
        await kube_client.replace(LEASE, lease)
        await kube_client.delete(POD, ring.pods["b"].name, namespace, grace_period_seconds=0)
        assert await ring.sharder.shard_pass() >= 1
        assert await ring.will_of(kube_client, "b") == ring.members["a"]
        assert await ring.will_of(kube_client, "a") is None


def replica(
    client: Client,
    namespace: str,
    identity: str,
    sharding: dict[str, Any] | None = None,
    **options: Any,
) -> Manager:
    """A shardlet replica in this process (not started), its options and its ``Sharding``
    changed as given."""
    given = shardlet.options(namespace, identity)
    assert given.sharding is not None
    ring = dataclasses.replace(given.sharding, **(sharding or {}))
    manager = Manager(client, dataclasses.replace(given, sharding=ring, **options))
    shardlet.setup(manager)
    return manager


async def test_with_fixed_member_names_a_standby_takes_the_name_a_member_releases(
    kube_client: Client, namespace: str, widgets_crd: None
) -> None:
    """``Sharding(members=1)``: a second replica finds the one name held and waits, holding no
    Lease and writing nothing; when the first stops, it takes the name and its Widgets, which
    keep their label, and converges a change made after."""
    (name,) = member_names(shardlet.NAME, 1)
    widgets = await write_widgets(kube_client, namespace, {})
    first = replica(kube_client, namespace, "first", {"members": 1})
    first_running = asyncio.create_task(first.run(), name="first")
    second = replica(kube_client, namespace, "second", {"members": 1})
    second_running: asyncio.Task[None] | None = None
    try:
        await eventually(
            lambda: converged_for(kube_client, namespace, widgets, name),
            timeout=60,
            interval=0.5,
            message="the first replica holds the one name and the Widgets",
        )
        assert first.member == name
        second_running = asyncio.create_task(second.run(), name="second")
        await asyncio.sleep(3)  # three retry periods of waiting
        assert second.member != name
        assert await kube_client.get_or_none(LEASE, second.member or "", namespace) is None
        first.stop()
        await asyncio.wait_for(first_running, 30)
        await eventually(lambda: second.member == name, timeout=10, message="the name taken")
        await kube_client.patch(WIDGET, widgets[0], {"spec": {"data": {"v": "after"}}}, namespace)
        await eventually(
            lambda: converged_for(kube_client, namespace, widgets, name),
            timeout=60,
            interval=0.5,
            message="the second replica writes the Widgets under the same name",
        )
    finally:
        for manager in (first, second):
            manager.stop()
        for task in (first_running, second_running):
            if task is not None:
                with contextlib.suppress(LeadershipLostError):
                    await asyncio.wait_for(task, 30)


async def test_with_fixed_member_names_a_process_restarted_in_its_pod_takes_its_name_back(
    kube_client: Client, namespace: str, widgets_crd: None
) -> None:
    """Issue 50: "a process restarted in the same Pod re-acquires at once". A replica in a Pod
    held the ring's one fixed name and crashed (its Lease, of a minute, renewed no more). Started
    again in the same Pod and container, it takes the name back at once, long before the Lease
    would expire, and writes the Widgets under it; no will is written."""
    (name,) = member_names(shardlet.NAME, 1)
    pod = await replica_pod(kube_client, namespace, "replica-pod")
    crashed = LeaderElector(
        kube_client,
        LeaderElectionConfig(
            name,
            namespace,
            identity="before-the-restart",
            lease_duration=60,
            renew_deadline=40,
            retry_period=1,
            labels={LABELS.member: LABELS.ring},
            pod=pod,
        ),
    )
    await asyncio.wait_for(crashed.acquire(), 30)  # then renews no more
    widgets = await write_widgets(kube_client, namespace, {LABELS.shard: name})
    restarted = replica(
        kube_client,
        namespace,
        "after-the-restart",
        {"members": 1},
        lease_duration=60,
        renew_deadline=40,
        pod=pod,
    )
    running = asyncio.create_task(restarted.run(), name="restarted")
    try:
        await eventually(
            lambda: restarted.member == name, timeout=20, message="its name taken back"
        )
        lease = await kube_client.get(LEASE, name, namespace)
        assert lease["spec"]["holderIdentity"] == "after-the-restart"
        assert LABELS.heirs not in (lease["metadata"].get("annotations") or {})
        await eventually(
            lambda: converged_for(kube_client, namespace, widgets, name),
            timeout=30,
            interval=0.5,
            message="the Widgets written under the same name",
        )
    finally:
        restarted.stop()
        with contextlib.suppress(LeadershipLostError):
            await asyncio.wait_for(running, 30)
        await cancel_and_wait(running)


async def test_replicas_joining_within_the_settle_time_label_each_widget_once_drain_none(
    kube_client: Client, namespace: str, widgets_crd: None
) -> None:
    """A settled start: three replicas, each started once the one before has joined the ring.
    The first leads and shards, but decides nothing until no member has joined for the settle
    time (10 s here, :attr:`Sharding.settle`), so each Widget (one in each of six namespaces,
    six slots) is labelled once, for the member it stays with, and none is drained: without
    the wait the first would take them all, and drain the others' share after."""
    spaces = []
    for _ in range(6):
        created = await kube_client.create(
            NAMESPACE, {"metadata": {"generateName": f"{namespace[:50]}-"}}
        )
        spaces.append(created["metadata"]["name"])
    for space in spaces:
        await kube_client.create(
            WIDGET, {"metadata": {"name": "w", "namespace": space}, "spec": {"data": {"v": "1"}}}
        )
    listed = await kube_client.list(WIDGET)
    seen: dict[str, list[tuple[str | None, str | None]]] = {space: [] for space in spaces}

    async def watch() -> None:
        params = WatchParams(Scope(), resource_version=listed.resource_version)
        async for event in kube_client.watch(WIDGET, params):
            meta = event.object.get("metadata") or {}
            if meta.get("namespace") in seen:
                labels = meta.get("labels") or {}
                seen[meta["namespace"]].append((labels.get(LABELS.shard), labels.get(LABELS.drain)))

    identities = ("first", "second", "third")
    members = {member_name(shardlet.NAME, identity) for identity in identities}

    async def labelled_and_ready() -> bool:
        for space in spaces:
            item = await kube_client.get(WIDGET, "w", space)
            ready = find_condition((item.get("status") or {}).get("conditions"), "Ready")
            if (item["metadata"].get("labels") or {}).get(LABELS.shard) not in members or (
                ready is None or ready.get("status") != "True"
            ):
                return False
        return True

    async def joined(identity: str) -> bool:
        lease = await kube_client.get_or_none(
            LEASE, member_name(shardlet.NAME, identity), namespace
        )
        return lease is not None and (lease.get("spec") or {}).get("holderIdentity") == identity

    watcher = asyncio.create_task(watch())
    replicas = [replica(kube_client, namespace, i, {"settle": 10.0}) for i in identities]

    def first_leads() -> bool:
        return replicas[0].is_leader

    running: list[asyncio.Task[None]] = []
    try:
        for identity, started in zip(identities, replicas, strict=True):
            running.append(asyncio.create_task(started.run(), name=identity))
            await eventually(
                functools.partial(joined, identity), timeout=30, message=f"{identity} joined"
            )
            if started is replicas[0]:
                await eventually(first_leads, timeout=30, message="the first leads")
                await asyncio.sleep(3)  # its passes: without the wait, they label every Widget
        await eventually(
            labelled_and_ready, timeout=60, interval=0.5, message="every Widget labelled"
        )
        await asyncio.sleep(3)  # anything still to move would have begun to
    finally:
        await cancel_and_wait(watcher)
        for manager in replicas:
            manager.stop()
        for task in running:
            with contextlib.suppress(LeadershipLostError):
                await asyncio.wait_for(task, 30)
        for space in spaces:
            with contextlib.suppress(NotFoundError):
                await kube_client.delete(WIDGET, "w", space)
            await kube_client.delete(NAMESPACE, space)
    drained = {space: states for space, states in seen.items() if any(d for _, d in states)}
    assert drained == {}, "a Widget was drained"
    shards = {space: {s for s, _ in states if s is not None} for space, states in seen.items()}
    assert all(len(labels) == 1 for labels in shards.values()), shards
