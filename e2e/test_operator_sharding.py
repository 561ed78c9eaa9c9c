"""The operator sharded over three replicas (issue 38): ``manager.sharding.enabled``, each
replica the daemon with ``--sharding`` as the chart runs it (the manager's token, the chart's
RBAC and admission policy for that value), on the real control plane.

Asserted from the API server's records:

- every Company converges, each labelled for a live member, its children labelled with the
  slot of its namespace (the member's caches select its slots), and more than one member holds
  companies;
- what needs every company still sees every company: an EngineClass counts the companies of
  every member, and a webhook hostname asked for by companies on two members goes to the first;
  yet a replica other than the leader holds its own companies and those that ask for a hostname
  alone (``crewlet_operator_cache_objects``);
- a killed member's companies are relabelled for live members, and a change made to each of
  them after the kill is converged by its new member, which writes none of their children the
  change leaves alone (a move rewrites nothing);
- the audit log (each replica's user agent names it): for every Company and its children, the
  writing replica changes only at a handoff (e2e/handoffs.py);
- with the chart's fixed member names (``--shard-members``), a rolling restart of the ring of
  three, each new replica started before the old one stops as a Deployment's surge does, writes
  no Company label and no child: each new replica takes the name the old one released.
"""

from __future__ import annotations

import asyncio
import datetime
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from handoffs import handoff_violations
from operator_helpers import (
    MANAGER_NAMESPACE,
    Operator,
    admin_client,
    audited_writes,
    chart_documents,
    company,
    engine_class,
    manager_kubeconfig,
    manager_user,
    wait_condition,
    wait_converged,
)

from crewlet_operator import LEASE, SERVICE, SERVICE_ACCOUNT, STATEFUL_SET, Client, Scope
from crewlet_operator.envtest import ControlPlane
from crewlet_operator.envtest.wait import eventually
from crewlet_operator.sharding.ring import RingLabels, member_names, slot_of
from crewlet_operator_daemon import naming
from crewlet_operator_daemon.api.conditions import HOSTNAME_TAKEN
from crewlet_operator_daemon.api.v1alpha1 import COMPANY, ENGINE_CLASS
from crewlet_operator_daemon.cli import SHARDING_DOMAIN, user_agent
from crewlet_operator_daemon.plan import CHILD_RESOURCES, MANAGER_NAME

CLASS = "sharded"
NAMESPACES = [f"shard-{i}" for i in range(12)]
PER_NAMESPACE = 2
REPLICAS = 3
LABELS = RingLabels(SHARDING_DOMAIN, MANAGER_NAME)
SHARD = LABELS.shard
SLOT = LABELS.slot
PLURALS = {r.plural: r.kind for r in CHILD_RESOURCES}
"""The children's kinds by the plural an audit event names them by."""

Object = dict[str, Any]
Key = tuple[str, str]


# A plane of its own: the module kills a replica and reads the audit log.
@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    with ControlPlane(tmp_path_factory.mktemp("sharding"), audit=True) as started:
        yield started


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def client(plane: ControlPlane) -> AsyncIterator[Client]:
    async with admin_client(plane, MANAGER_NAMESPACE, *NAMESPACES) as admin:
        await admin.create(ENGINE_CLASS, engine_class(CLASS))
        yield admin


SHARDED_CHART = {"manager": {"sharding": {"enabled": True}, "replicas": REPLICAS}}
WRITES = frozenset({"create", "update", "patch", "delete", "deletecollection"})


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def kubeconfig(
    plane: ControlPlane, client: Client, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """The manager's token under the chart's RBAC and policy with sharding enabled."""
    documents = chart_documents(SHARDED_CHART)
    return await manager_kubeconfig(
        client, plane, tmp_path_factory.mktemp("manager"), leader_election=True, documents=documents
    )


def companies() -> list[Key]:
    return [(ns, f"co-{i}") for ns in NAMESPACES for i in range(PER_NAMESPACE)]


def member_of(obj: Object) -> str:
    return str((obj["metadata"].get("labels") or {}).get(SHARD, ""))


async def members_of(client: Client) -> dict[Key, str]:
    """Each Company's member."""
    return {
        (c["metadata"]["namespace"], c["metadata"]["name"]): member_of(c)
        for c in (await client.list(COMPANY)).items
    }


async def live_members(client: Client) -> dict[str, str]:
    """The ring's member Leases: member name to the identity holding it."""
    leases = await client.list(
        LEASE, Scope(MANAGER_NAMESPACE, label_selector=f"{LABELS.member}={MANAGER_NAME}")
    )
    return {
        lease["metadata"]["name"]: str(lease["spec"].get("holderIdentity") or "")
        for lease in leases.items
    }


def held_companies(replica: Operator) -> int:
    """The Companies a replica's caches hold, by its ``crewlet_operator_cache_objects``."""
    return int(replica.metric('crewlet_operator_cache_objects{kind="Company.crewlet.ai"}'))


def ring_member(replica: Operator) -> str | None:
    """The member name a replica logged when it joined the ring (None: not yet)."""
    for event in replica.log_events():
        if event.get("event") == "member of the ring":
            return str(event["member"])
    return None


async def children_slots(client: Client) -> dict[Key, set[str]]:
    """Each company's children's slot labels (every value any of its children carries)."""
    found: dict[Key, set[str]] = {}
    for resource in CHILD_RESOURCES:
        listed = await client.list(resource, Scope(label_selector=naming.MANAGED_BY_SELECTOR))
        for child in listed.items:
            meta = child["metadata"]
            key = (meta["namespace"], meta["labels"][naming.COMPANY_LABEL])
            found.setdefault(key, set()).add(str(meta["labels"].get(SLOT, "")))
    return found


async def untouched_by_seats(client: Client, keys: list[Key]) -> dict[Key, tuple[str, str]]:
    """The resourceVersions of two children of each company that a change of its seats leaves
    alone: its engine ServiceAccount and its API Service."""
    found: dict[Key, tuple[str, str]] = {}
    for ns, name in keys:
        account = await client.get(SERVICE_ACCOUNT, naming.service_account(name), ns)
        api = await client.get(SERVICE, naming.api_service(name), ns)
        found[(ns, name)] = (
            account["metadata"]["resourceVersion"],
            api["metadata"]["resourceVersion"],
        )
    return found


def object_of(known: set[Key]) -> Any:
    """The Company an audited write is about (its own, its status, a child's), or None."""

    def company_of(event: Object) -> str | None:
        ref = event.get("objectRef") or {}
        ns, name, plural = ref.get("namespace") or "", ref.get("name") or "", ref.get("resource")
        if plural == "companies":
            return f"{ns}/{name}" if (ns, name) in known else None
        kind = PLURALS.get(str(plural))
        for owner in naming.companies_named_by(kind, name) if kind else []:
            if (ns, owner) in known:
                return f"{ns}/{owner}"
        return None

    return company_of


@pytest.mark.filterwarnings(
    "ignore::crewlet_operator.envtest.controlplane.EmptyAggregatedRolesWarning"
)
async def test_three_replicas_share_the_companies_and_pick_up_a_killed_ones(
    plane: ControlPlane, client: Client, kubeconfig: Path, tmp_path: Path
) -> None:
    for ns, name in companies():
        await client.create(COMPANY, company(ns, name, CLASS))
    replicas = [
        Operator(
            kubeconfig,
            tmp_path,
            name=f"replica-{i}",
            leader_elect=True,
            lease_namespace=MANAGER_NAMESPACE,
            args=["--sharding"],
        )
        for i in range(REPLICAS)
    ]
    left: dict[str, datetime.datetime] = {}
    agents: dict[Operator, str] = {}
    try:
        await eventually(
            lambda: all(r.ready() and ring_member(r) for r in replicas),
            timeout=90,
            message="every replica in the ring",
        )
        members = {str(ring_member(r)): r for r in replicas}
        # Each replica's user agent, by its member Lease's holder: what the audit log names.
        agents = {
            members[member]: user_agent(identity)
            for member, identity in (await live_members(client)).items()
        }
        await wait_converged(client, companies(), timeout=240)

        async def spread() -> bool:
            held = await members_of(client)
            live = set(await live_members(client))
            return set(held.values()) <= live and set(members) <= live

        await eventually(spread, timeout=60, message="every company on a live member")
        held = await members_of(client)
        assert len(set(held.values())) > 1, f"the companies are spread: {held}"
        children = await children_slots(client)
        assert {key: {str(slot_of(key[0]))} for key in companies()} == {
            key: children.get(key) for key in companies()
        }, "each company's children carry the slot of its namespace"

        # What needs every company sees every company, whichever member holds it.
        async def counted() -> bool:
            status = (await client.get(ENGINE_CLASS, CLASS)).get("status") or {}
            return bool(status.get("companies") == len(companies()))

        await eventually(counted, timeout=90, message="the class counts every member's companies")
        by_member: dict[str, list[Key]] = {}
        for key, member in held.items():
            by_member.setdefault(member, []).append(key)
        (first_ns, _), (second_ns, _) = (keys[0] for keys in list(by_member.values())[:2])
        shared = "hooks.sharded.example"
        await client.create(COMPANY, company(first_ns, "first", CLASS, webhookHostname=shared))
        await wait_converged(client, [(first_ns, "first")], timeout=90, namespace=first_ns)
        await client.create(COMPANY, company(second_ns, "second", CLASS, webhookHostname=shared))
        refused = await wait_condition(
            client, second_ns, "second", "Accepted", "False", reason=HOSTNAME_TAKEN
        )
        assert f"Company {first_ns}/first holds the webhook hostname {shared}" in refused["message"]

        # What each replica holds of the companies: its share, and the two that ask for a
        # hostname (the cluster view's field selector); the leader every company besides (its
        # view, where the class counts them). No other replica holds every company.
        async def held_as_wanted() -> bool:
            shares = Counter((await members_of(client)).values())
            total, claimants = sum(shares.values()), 2
            held = {member: held_companies(r) for member, r in members.items()}
            wanted = {
                member: shares[member] + claimants + (total if r.leading() else 0)
                for member, r in members.items()
            }
            return held == wanted

        await eventually(held_as_wanted, timeout=30, message="each replica holds its share")
        assert sum(r.leading() for r in replicas) == 1

        # The member holding most companies is killed; each of them is changed at once.
        victim_member = max(by_member, key=lambda m: len(by_member[m]))
        victim = members[victim_member]
        theirs = by_member[victim_member]
        before_the_move = await untouched_by_seats(client, theirs)
        left[agents[victim]] = datetime.datetime.now(datetime.UTC)
        victim.kill()
        killed = time.monotonic()
        for ns, name in theirs:
            await client.patch(COMPANY, name, {"spec": {"seats": {"replicas": 2}}}, ns)
        survivors = set(members) - {victim_member}

        async def picked_up() -> bool:
            now = await members_of(client)
            return all(now[key] in survivors for key in theirs)

        await eventually(picked_up, timeout=90, message="the killed member's companies moved")
        print(
            f"\ncompanies by member {sorted(len(k) for k in by_member.values())}; the killed "
            f"member's {len(theirs)} moved {time.monotonic() - killed:.1f} s after the kill"
        )
        await wait_converged(client, theirs, timeout=120)
        for ns, name in theirs:
            seats = await client.get(STATEFUL_SET, naming.statefulset(name, naming.SEATS), ns)
            assert seats["spec"]["replicas"] == 2
            assert seats["metadata"]["labels"][SLOT] == str(slot_of(ns))
        assert await untouched_by_seats(client, theirs) == before_the_move, (
            "the new members wrote none of the moved companies' children the change left alone"
        )
    finally:
        # A replica told to stop hands its companies over without a drain: its departure.
        for replica in replicas:
            if replica in agents:
                left.setdefault(agents[replica], datetime.datetime.now(datetime.UTC))
            replica.stop()

    written = {
        event.get("userAgent", "")
        for event in plane.audit_events()
        if str(event.get("userAgent", "")).startswith(f"{MANAGER_NAME}/")
    }
    assert set(agents.values()) <= written, f"each replica wrote under its user agent: {written}"
    known = {*companies(), (first_ns, "first"), (second_ns, "second")}
    violations = handoff_violations(
        plane.audit_events(),
        {agents[replica]: member for member, replica in members.items()},
        left,
        object_of=object_of(known),
        primary="companies",
        sharder=f"{MANAGER_NAME}-sharder",
    )
    assert violations == []


def written_for(plural: str, ns: str, name: str) -> Key | None:
    """The Company a write to ``plural`` ``ns``/``name`` is about (itself, or its child's),
    or None."""
    if plural == "companies":
        return (ns, name)
    kind = PLURALS.get(plural)
    owners = naming.companies_named_by(kind, name) if kind else []
    return (ns, owners[0]) if owners else None


def chart_args() -> list[str]:
    """The sharding flags the chart passes its manager (``manager.sharding.enabled``)."""
    (deployment,) = [d for d in chart_documents(SHARDED_CHART) if d["kind"] == "Deployment"]
    (manager,) = deployment["spec"]["template"]["spec"]["containers"]
    return [a for a in manager["args"] if a.startswith(("--sharding", "--shard-members"))]


@pytest.mark.filterwarnings(
    "ignore::crewlet_operator.envtest.controlplane.EmptyAggregatedRolesWarning"
)
async def test_a_rolling_restart_of_the_ring_writes_no_company_label_and_no_child(
    plane: ControlPlane, client: Client, kubeconfig: Path, tmp_path: Path
) -> None:
    """The install page's rollout, as the chart's Deployment makes it (a surge of one): for each
    replica, a new one starts and is Ready, then the old one is told to stop. The new one waits
    as a standby while every member name is held, and takes the one the old one releases."""
    args = chart_args()
    assert args == ["--sharding", f"--shard-members={REPLICAS}"]
    names = set(member_names(MANAGER_NAME, REPLICAS))
    for ns, name in companies():
        if await client.get_or_none(COMPANY, name, ns) is None:
            await client.create(COMPANY, company(ns, name, CLASS))
    started = 0

    def start() -> Operator:
        nonlocal started
        started += 1
        return Operator(
            kubeconfig,
            tmp_path,
            name=f"rollout-{started}",
            leader_elect=True,
            lease_namespace=MANAGER_NAMESPACE,
            args=args,
        )

    ring = [start() for _ in range(REPLICAS)]
    everyone = list(ring)
    try:
        await eventually(
            lambda: {ring_member(r) for r in ring} == names,
            timeout=90,
            message="each replica holds one of the fixed member names",
        )

        async def settled() -> bool:
            held = await members_of(client)
            return set(held.values()) == names

        await eventually(settled, timeout=120, message="every company on a fixed member")
        await wait_converged(client, companies(), timeout=240)
        before = await members_of(client)
        since = datetime.datetime.now(datetime.UTC)
        for place, old in enumerate(list(ring)):
            new = start()
            everyone.append(new)
            await eventually(new.ready, timeout=60, message="the new replica Ready")
            assert ring_member(new) is None, "every name is held: it waits as a standby"
            member = ring_member(old)
            old.stop()

            def took_its_name(new: Operator = new, member: str | None = member) -> bool:
                return ring_member(new) == member

            await eventually(took_its_name, timeout=30, message="it takes the old name")
            ring[place] = new
        # A change after the rollout is converged by the new ring, on the same labels.
        ns, name = companies()[0]
        await client.patch(COMPANY, name, {"spec": {"seats": {"replicas": 2}}}, ns)
        await wait_converged(client, [(ns, name)], timeout=90)
        await asyncio.sleep(3)  # three retry periods for a late write to show
        assert await members_of(client) == before, "no company moved"
        written = [
            w
            for w in audited_writes(plane, {manager_user(chart_documents(SHARDED_CHART))})
            if w.received >= since
            and w.verb in WRITES
            and written_for(w.resource, w.namespace, w.name) not in (None, (ns, name))
        ]
        assert written == [], f"the rollout wrote {len(written)} times: {written[:5]}"
    finally:
        for replica in everyone:
            replica.stop()
