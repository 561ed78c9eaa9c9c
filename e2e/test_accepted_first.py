"""Accepted at once under load (issue 16): a new Company hears its verdict ahead of a backlog.

The operator writes a company's verdict (``Accepted``, or a refusal with its reason) on its own,
at the priority of the create, and applies its children later at a lower one. So under a
backlog of a few hundred Companies whose children are still being applied, a Company created
after all of them is Accepted, and one its class does not allow is refused with
``ClassNotAllowed``, while the backlog has not converged: asserted by order (what exists when
the verdicts appear), never by time. Each verdict is also one Event on the Company. The
dry run that admits a class's children before its first verdict is made once for a burst of
new companies of the class, not once for each. And the verdicts take turns between namespaces
(issue 38): a burst's verdicts in one namespace do not hold back another namespace's.

On a control plane of the module's own, without workloads: nothing here needs pods, and the
burst would slow the session's other modules.
"""

from __future__ import annotations

import asyncio
import datetime
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from operator_helpers import (
    CHILD_KINDS,
    LEASE_NAME,
    PLATFORM,
    Operator,
    accepted,
    admin_client,
    children_by_company,
    company,
    engine_class,
    unconverged,
    wait_condition,
    wait_converged,
)

from crewlet_operator import EVENT, LEASE, NAMESPACE, Client, Scope
from crewlet_operator._tasks import cancel_and_wait
from crewlet_operator.envtest import ControlPlane
from crewlet_operator.envtest.wait import eventually
from crewlet_operator.kube import WatchParams
from crewlet_operator_daemon.api.v1alpha1 import COMPANY, ENGINE_CLASS
from crewlet_operator_daemon.cli import gateway_api_served
from crewlet_operator_daemon.company import reconcile
from crewlet_operator_daemon.plan import MANAGER_NAME, ClusterFacts, Observed

BACKLOG = 240
BURST = 300
"""The busy tenant's burst: its verdicts keep the operator's workers busy for seconds."""
NO_SEATS = {"seats": {"replicas": 0}}
CHILD_PLURALS = {resource.plural for resource in CHILD_KINDS}
Object = dict[str, Any]


# A plane of its own, without workloads (reconfigured): the burst needs no pods, and its
# StatefulSets would have a session plane's controller-manager and kwok make hundreds.
@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    with ControlPlane(tmp_path_factory.mktemp("accepted-first")) as plane:
        yield plane


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def admin(plane: ControlPlane) -> AsyncIterator[Client]:
    async with admin_client(
        plane, PLATFORM, "backlog", "tenants", "outsiders", "busy", "quiet"
    ) as client:
        await client.patch(NAMESPACE, "tenants", {"metadata": {"labels": {"tier": "paid"}}})
        yield client


async def events_about(client: Client, namespace: str, name: str) -> list[Object]:
    listed = await client.list(EVENT, Scope(namespace))
    return [e for e in listed.items if (e.get("regarding") or {}).get("name") == name]


async def test_a_new_company_hears_its_verdict_before_the_backlog_converges(
    plane: ControlPlane, admin: Client, tmp_path: Path
) -> None:
    await admin.create(ENGINE_CLASS, engine_class("open"))
    await admin.create(
        ENGINE_CLASS,
        engine_class("paid-only", allowedNamespaces={"matchLabels": {"tier": "paid"}}),
    )
    operator = Operator(plane.kubeconfig, tmp_path)
    try:
        await eventually(operator.ready, timeout=60, message="operator ready")
        backlog = [("backlog", f"c{i:03d}") for i in range(BACKLOG)]
        await asyncio.gather(
            *(admin.create(COMPANY, company(ns, n, "open", **NO_SEATS)) for ns, n in backlog)
        )
        await admin.create(COMPANY, company("tenants", "newcomer", "open", **NO_SEATS))
        await admin.create(COMPANY, company("outsiders", "gatecrasher", "paid-only", **NO_SEATS))

        accepted = await wait_condition(admin, "tenants", "newcomer", "Accepted", "True")
        refused = await wait_condition(
            admin, "outsiders", "gatecrasher", "Accepted", "False", reason="ClassNotAllowed"
        )
        # Both verdicts are in while the backlog's children are still being applied.
        left = await unconverged(admin, backlog, "backlog")
        assert left, "the backlog converged before the newcomers heard their verdicts"
        print(f"\nverdicts written with {len(left)} of {BACKLOG} backlog companies unconverged")
        assert "EngineClass open runs" in accepted["message"]
        assert "spec.allowedNamespaces" in refused["message"]

        # One Event per verdict, saying the same.
        async def announced(namespace: str, name: str) -> list[Object]:
            return await events_about(admin, namespace, name)

        [welcome] = await eventually(lambda: announced("tenants", "newcomer"), message="Event")
        assert (welcome["type"], welcome["reason"], welcome["action"]) == (
            "Normal",
            "Accepted",
            "Accept",
        )
        assert welcome["note"] == accepted["message"]
        assert welcome["reportingController"] == "crewlet-operator"
        [warning] = await eventually(lambda: announced("outsiders", "gatecrasher"), message="Event")
        assert (warning["type"], warning["reason"]) == ("Warning", "ClassNotAllowed")

        # Children converge behind the verdicts: nobody starves.
        async def all_converged() -> bool:
            return not await unconverged(admin, [*backlog, ("tenants", "newcomer")])

        await eventually(all_converged, timeout=300, interval=2.0, message="everything converged")
        # The newcomer's children did not change its verdict, nor add an Event.
        again = await wait_condition(admin, "tenants", "newcomer", "Accepted", "True")
        assert again == accepted
        assert len(await events_about(admin, "tenants", "newcomer")) == 1

        # The class's children were dry-run once, for the whole burst: one company's worth.
        dry_runs = plane.mutating_requests(CHILD_PLURALS, dry_run=True)
        assert dry_runs == await applies_of_one(admin, "tenants", "newcomer")
    finally:
        operator.stop()
        for name in ("open", "paid-only"):
            await admin.delete(ENGINE_CLASS, name)


async def test_a_start_over_new_companies_of_one_class_dry_runs_one_companys_children(
    plane: ControlPlane, admin: Client, tmp_path: Path
) -> None:
    """The first pass serves its workers many new companies of a class nobody has run yet, at
    once: their verdicts share one dry run of a company's children instead of one each."""
    await admin.create(ENGINE_CLASS, engine_class("fresh"))
    companies = [("backlog", f"fresh{i:02d}") for i in range(40)]
    await asyncio.gather(
        *(admin.create(COMPANY, company(ns, n, "fresh", **NO_SEATS)) for ns, n in companies)
    )
    before = plane.mutating_requests(CHILD_PLURALS, dry_run=True)
    operator = Operator(plane.kubeconfig, tmp_path)
    try:
        await wait_converged(admin, companies, timeout=300, namespace="backlog")
    finally:
        operator.stop()
        await admin.delete(ENGINE_CLASS, "fresh")
    after = plane.mutating_requests(CHILD_PLURALS, dry_run=True)
    dry_runs = {key: count - before.get(key, 0) for key, count in after.items()}
    assert {key: count for key, count in dry_runs.items() if count} == await applies_of_one(
        admin, "backlog", "fresh00"
    )


async def test_a_takeover_tells_new_companies_their_verdicts_before_it_applies_what_was_left(
    plane: ControlPlane, admin: Client, tmp_path: Path
) -> None:
    """A leader that stopped between its verdicts and their children (the failover figure's
    crash, a second into a burst) leaves companies Accepted with nothing applied. The standby
    that takes over has queued each of them on the events of those verdicts, ahead of a company
    created after them: it sends their children back to the queue at the children's priority,
    and tells the newcomer its verdict first."""
    await admin.create(NAMESPACE, {"metadata": {"name": "inherited"}})
    engine = await admin.create(ENGINE_CLASS, engine_class("inherited"))
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    await admin.create(
        LEASE,
        {
            "metadata": {"name": LEASE_NAME, "namespace": PLATFORM},
            "spec": {
                "holderIdentity": "the-previous-leader",
                "leaseDurationSeconds": 60,
                "acquireTime": now,
                "renewTime": now,
                "leaseTransitions": 0,
            },
        },
    )
    operator = Operator(plane.kubeconfig, tmp_path, leader_elect=True)
    try:
        await eventually(operator.ready, timeout=60, message="standby ready")
        # What the previous leader wrote before it stopped: each company's verdict, as the
        # operator decides it, and no child.
        facts = ClusterFacts(
            gateway_api=await gateway_api_served(admin), operator_namespace=PLATFORM
        )
        backlog = [("inherited", f"left{i:03d}") for i in range(BACKLOG)]

        async def told(ns: str, name: str) -> None:
            created = await admin.create(COMPANY, company(ns, name, "inherited", **NO_SEATS))
            plan = reconcile(created, engine, {}, Observed(), facts)
            assert plan.status is not None
            body = {
                "apiVersion": COMPANY.api_version,
                "kind": COMPANY.kind,
                "metadata": {"name": name, "namespace": ns},
                "status": plan.status,
            }
            await admin.apply_status(COMPANY, body, field_manager=MANAGER_NAME)

        await asyncio.gather(*(told(ns, n) for ns, n in backlog))
        await admin.create(COMPANY, company("inherited", "newcomer", "inherited", **NO_SEATS))
        # At the priority of events: the earlier tests' companies wait below, from the list.
        await eventually(
            lambda: queued(operator) >= BACKLOG + 1, timeout=60, message="all of them queued"
        )
        lease = await admin.get(LEASE, LEASE_NAME, PLATFORM)
        lease["spec"]["holderIdentity"] = ""  # released: the standby takes over at once
        await admin.replace(LEASE, lease)

        await wait_condition(admin, "inherited", "newcomer", "Accepted", "True")
        applied = await children_by_company(admin, "inherited")
        started = [key for key in backlog if key in applied]
        print(f"\nthe newcomer accepted once {len(started)} of {BACKLOG} had a child")
        assert len(started) < BACKLOG // 2, "the inherited children went before the verdict"

        await wait_converged(admin, backlog, timeout=300, namespace="inherited")
        # The inherited verdicts were the operator's own: none was written again as news.
        regarding = {
            (e.get("regarding") or {}).get("name")
            for e in (await admin.list(EVENT, Scope("inherited"))).items
            if (e.get("regarding") or {}).get("kind") == COMPANY.kind
        }
        assert regarding == {"newcomer"}
    finally:
        operator.stop()
        await admin.delete(ENGINE_CLASS, "inherited")


async def test_a_quiet_tenants_verdict_waits_for_one_turn_of_a_busy_tenants_burst(
    plane: ControlPlane, admin: Client, tmp_path: Path
) -> None:
    """A burst of new Companies in one namespace, then one in another: the queue takes
    namespaces in turn, so the quiet namespace's request goes to a worker after at most one
    more of the burst's, not after all of them. Read off one watch of the API server, in the
    order the writes were made: when the quiet Company's Accepted is written, more of the
    burst's are still to come than the operator has workers. One line for every namespace
    would have handed out every request of the burst first (its creates came first), leaving
    at most the ones in flight, fewer than the workers."""
    await admin.create(ENGINE_CLASS, engine_class("turns"))
    operator = Operator(plane.kubeconfig, tmp_path)
    order: list[tuple[str, str]] = []  # the Companies of busy and quiet, as they are Accepted

    async def watch(resource_version: str) -> None:
        """Until the quiet Company is Accepted (resumed where it was if the server ends it, as
        it does when the CRD's storage is remade)."""
        while True:
            async for event in admin.watch(COMPANY, WatchParams(resource_version=resource_version)):
                meta = event.object.get("metadata", {})
                resource_version = meta.get("resourceVersion", resource_version)
                key = (meta.get("namespace", ""), meta.get("name", ""))
                if key[0] in ("busy", "quiet") and key not in order and accepted(event.object):
                    order.append(key)
                    if key == ("quiet", "newcomer"):
                        return

    watcher: asyncio.Task[None] | None = None
    try:
        await eventually(operator.ready, timeout=60, message="operator ready")
        workers = operator.metric(
            'controller_runtime_max_concurrent_reconciles{controller="company"}'
        )
        watcher = asyncio.create_task(watch((await admin.list(COMPANY)).resource_version))
        burst = [("busy", f"b{i:03d}") for i in range(BURST)]
        await asyncio.gather(
            *(admin.create(COMPANY, company(ns, n, "turns", **NO_SEATS)) for ns, n in burst)
        )
        await admin.create(COMPANY, company("quiet", "newcomer", "turns", **NO_SEATS))
        await asyncio.wait_for(watcher, timeout=120)

        ahead = order.index(("quiet", "newcomer"))
        print(f"\nthe quiet tenant accepted after {ahead} of the busy tenant's {BURST}")
        assert BURST - ahead > workers, (
            f"{ahead} of the burst's {BURST} verdicts came first: it waited behind the burst"
        )
    finally:
        if watcher is not None:
            await cancel_and_wait(watcher)
        operator.stop()
        await admin.delete(ENGINE_CLASS, "turns")


def queued(operator: Operator) -> float:
    """Requests waiting in the operator's company queue at the priority of events (creates and
    changes), not an initial list's."""
    url = f"http://127.0.0.1:{operator.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as response:
        lines = response.read().decode().splitlines()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in lines
        if line.startswith("workqueue_depth{")
        and 'name="company"' in line
        and 'priority="0"' in line
    )


async def applies_of_one(client: Client, namespace: str, name: str) -> dict[str, int]:
    """The applies of one company's children, by ``"APPLY plural"``, as the cluster has them."""
    children = (await children_by_company(client, namespace))[(namespace, name)]
    return {
        f"APPLY {resource.plural}": len(children[resource.kind])
        for resource in CHILD_KINDS
        if children.get(resource.kind)
    }
