"""Nothing that is not the company's (issue 35), on the real control plane with the garbage
collector running, the operator as the chart's manager under its RBAC and policy.

"A Company never takes a user's object": "the operator reports a taken name with a reason of
its own (not InvalidClass) that names each taken object and says what to do; the verdict is
stable (no flip, one Event per change); the user's objects are never written, labelled or
owned; the company proceeds once the name is free. Test every one of the 13 child kinds, and
that deleting the Company leaves the user's object." And: "A hostname belongs to one company:
the second Company claiming a taken webhookHostname gets Accepted=False with a reason naming the
holder; the first keeps it."

Issue 47 adds: "A hostname belongs to one workload: a hostname served by a route the operator
did not write, on the same Gateway or IngressClass, is HostnameTaken naming that route [...];
and the platform can delegate hostnames [...], with a reason of its own for a hostname outside
them."

The module runs its own control plane: without the Gateway API, so the webhook route is an
Ingress, until its last tests install the Gateway API and restart the daemon for the HTTPRoute.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
import pytest_asyncio
from operator_helpers import (
    CHILD_KINDS,
    PLATFORM,
    Daemon,
    admin_client,
    chart_documents,
    company,
    engine_class,
    fresh_namespace,
    manager_daemon,
    manager_kubeconfig,
    own_control_plane,
    wait_condition,
    wait_converged,
)

from crewlet_operator import (
    CONFIG_MAP,
    EVENT,
    HTTP_ROUTE,
    INGRESS,
    NETWORK_POLICY,
    SECRET,
    Client,
    Resource,
    Scope,
    controller_reference,
    find_condition,
    is_controlled_by,
)
from crewlet_operator.envtest import ControlPlane, binaries, install_crds, load_crds
from crewlet_operator.envtest.wait import eventually
from crewlet_operator_daemon import naming
from crewlet_operator_daemon.api.conditions import (
    HOSTNAME_NOT_ALLOWED,
    HOSTNAME_TAKEN,
    NAME_TAKEN,
)
from crewlet_operator_daemon.api.v1alpha1 import COMPANY, ENGINE_CLASS
from crewlet_operator_daemon.plan import MANAGER_NAME

Object = dict[str, Any]
CLASS = "owned"
KINDS: dict[str, Resource] = {r.kind: r for r in (*CHILD_KINDS, INGRESS)}
WEB = {"app": "web"}


# -- a tenant's own objects, under a child's name ----------------------------------------------


def _meta(ns: str, name: str) -> Object:
    return {"name": name, "namespace": ns, "labels": {"team": "tenant"}}


def _users_object(kind: str, ns: str, name: str) -> Object:
    """What a tenant might already have under the name: nothing the operator would write."""
    meta = _meta(ns, name)
    pod = {"metadata": {"labels": WEB}, "spec": {"containers": [{"name": "web", "image": "web"}]}}
    specs: dict[str, Object] = {
        "ServiceAccount": {},
        "Secret": {"type": "Opaque", "data": {"mine": base64.b64encode(b"precious").decode()}},
        "StatefulSet": {
            "spec": {
                "replicas": 0,
                "serviceName": name,
                "selector": {"matchLabels": WEB},
                "template": pod,
            }
        },
        "Service": {"spec": {"selector": WEB, "ports": [{"port": 80}]}},
        "PodDisruptionBudget": {"spec": {"minAvailable": 1, "selector": {"matchLabels": WEB}}},
        "NetworkPolicy": {"spec": {"podSelector": {"matchLabels": WEB}}},
        "Ingress": {
            "spec": {
                "rules": [
                    {
                        "host": "web.example",
                        "http": {
                            "paths": [
                                {
                                    "path": "/",
                                    "pathType": "Prefix",
                                    "backend": {"service": {"name": "web", "port": {"number": 80}}},
                                }
                            ]
                        },
                    }
                ]
            }
        },
    }
    return {"metadata": meta, **specs[kind]}


CHILDREN = [
    (kind, suffix)
    for kind, suffixes in naming.CHILD_SUFFIXES.items()
    if kind in KINDS
    for suffix in suffixes
]
"""Every child of a company with a webhook hostname and no Gateway API: 13 and the route."""


# -- the module's control plane and daemon -----------------------------------------------------


# A plane of its own: the module installs the Gateway API, which the other modules' daemons
# would take for theirs at start.
@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    with own_control_plane(tmp_path_factory.mktemp("ownership")) as plane:
        yield plane


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def client(plane: ControlPlane) -> AsyncIterator[Client]:
    async with admin_client(plane, PLATFORM) as admin:
        await admin.create(ENGINE_CLASS, engine_class(CLASS))
        yield admin


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def daemon(
    plane: ControlPlane, client: Client, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Daemon]:
    async with manager_daemon(plane, client, tmp_path_factory.mktemp("daemon")) as holder:
        yield holder


def tenant_company(ns: str, name: str = "acme", **spec: Any) -> Object:
    return company(ns, name, CLASS, webhookHostname=f"{name}.{ns}.example", **spec)


async def accepted(client: Client, ns: str, name: str) -> Object:
    got = await client.get(COMPANY, name, ns)
    found = find_condition((got.get("status") or {}).get("conditions"), "Accepted")
    assert found is not None, got.get("status")
    return found


async def operators_objects(client: Client, ns: str) -> list[str]:
    """Everything in ``ns`` labelled as the operator's."""
    found = []
    for resource in KINDS.values():
        listed = await client.list(resource, Scope(ns, label_selector=naming.MANAGED_BY_SELECTOR))
        found += [f"{resource.kind} {o['metadata']['name']}" for o in listed.items]
    return found


async def collected_with(client: Client, owner: Object) -> Callable[[], Any]:
    """A ConfigMap the garbage collector deletes with ``owner``: once it is gone, the collector
    has dealt with ``owner``'s deletion (a probe that needs no clock)."""
    sentinel = {
        "metadata": {
            "name": f"sentinel-{owner['metadata']['name']}",
            "namespace": owner["metadata"]["namespace"],
            "ownerReferences": [{**controller_reference(owner), "blockOwnerDeletion": False}],
        }
    }
    await client.create(CONFIG_MAP, sentinel)

    async def gone() -> bool:
        meta = sentinel["metadata"]
        return await client.get_or_none(CONFIG_MAP, meta["name"], meta["namespace"]) is None

    return gone


def untouched(now: Object, made: Object) -> bool:
    """The tenant's object as the tenant made it: never written by the operator's field manager
    (its status may have been, by its own controller), its labels, owners and content kept."""
    managers = {entry["manager"] for entry in now["metadata"].get("managedFields") or []}
    return (
        MANAGER_NAME not in managers
        and now["metadata"].get("labels") == made["metadata"].get("labels")
        and now["metadata"].get("ownerReferences") == made["metadata"].get("ownerReferences")
        and all(now.get(k) == made.get(k) for k in ("spec", "data", "type"))
    )


# -- a name held by the tenant's own object ----------------------------------------------------


@pytest.mark.parametrize(("kind", "suffix"), CHILDREN, ids=[f"{k}-{s}" for k, s in CHILDREN])
async def test_a_tenants_object_under_a_childs_name_is_never_taken(
    daemon: Daemon, client: Client, kind: str, suffix: str
) -> None:
    """Refused with NameTaken, the object untouched and nothing else written; deleting the
    Company leaves it; once it is gone, the company proceeds and makes its own."""
    ns = await fresh_namespace(client, f"own-{kind.lower()}-{suffix}")
    name = naming.child("acme", suffix)
    resource = KINDS[kind]
    theirs = await client.create(resource, _users_object(kind, ns, name))
    await client.create(COMPANY, tenant_company(ns))
    refused = await wait_condition(client, ns, "acme", "Accepted", "False", reason=NAME_TAKEN)
    assert f"{kind} {name} (controlled by no one)" in refused["message"]
    assert "rename or delete it" in refused["message"]
    assert await operators_objects(client, ns) == []

    first = await client.get(COMPANY, "acme", ns)
    gone = await collected_with(client, first)
    await client.delete(COMPANY, "acme", ns)
    await eventually(gone, timeout=90, message="the garbage collector dealt with the Company")
    after = await client.get(resource, name, ns)
    assert untouched(after, theirs)

    await client.create(COMPANY, tenant_company(ns))
    await wait_condition(client, ns, "acme", "Accepted", "False", reason=NAME_TAKEN)
    await client.delete(resource, name, ns)
    await wait_converged(client, [(ns, "acme")], timeout=90, namespace=ns)
    second = await client.get(COMPANY, "acme", ns)
    made = await client.get(resource, name, ns)
    assert made["metadata"]["uid"] != theirs["metadata"]["uid"]
    assert is_controlled_by(made, second)


async def test_a_name_held_by_an_object_labelled_as_another_companys_is_waited_for(
    daemon: Daemon, client: Client
) -> None:
    """Labels copied by hand make an object look like the operator's: it is still not this
    company's (no Company controls it), and the company proceeds once it is gone."""
    ns = await fresh_namespace(client, "own-labelled")
    mimic = _users_object("Secret", ns, naming.env_secret("acme"))
    mimic["metadata"]["labels"] = naming.labels("globex")
    theirs = await client.create(SECRET, mimic)
    await client.create(COMPANY, tenant_company(ns))
    refused = await wait_condition(client, ns, "acme", "Accepted", "False", reason=NAME_TAKEN)
    assert "Secret acme-env (controlled by no one)" in refused["message"]
    assert untouched(await client.get(SECRET, "acme-env", ns), theirs)
    await client.delete(SECRET, "acme-env", ns)
    await wait_converged(client, [(ns, "acme")], timeout=120, namespace=ns)


async def test_the_verdict_on_a_taken_name_holds_across_reconciles_and_restarts(
    daemon: Daemon, client: Client
) -> None:
    """One verdict and one Event: a change to the Company reconciles it again, a restart
    reconciles everything again, and neither tells it anything new."""
    ns = await fresh_namespace(client, "own-stable")
    await client.create(SECRET, _users_object("Secret", ns, naming.env_secret("acme")))
    await client.create(COMPANY, tenant_company(ns))
    refused = await wait_condition(client, ns, "acme", "Accepted", "False", reason=NAME_TAKEN)

    async def events() -> list[Object]:
        listed = await client.list(EVENT, Scope(ns))
        return [e for e in listed.items if (e.get("regarding") or {}).get("name") == "acme"]

    await eventually(events, timeout=30, message="the refusal's Event")
    operator = daemon.current
    assert operator is not None
    reconciles = 'controller_runtime_reconcile_total{controller="company",result="success"}'
    before = operator.metric(reconciles)
    await client.patch(COMPANY, "acme", {"metadata": {"labels": {"touched": "1"}}}, ns)
    await eventually(lambda: operator.metric(reconciles) > before, timeout=30, message="again")
    daemon.stop()
    restarted = await daemon.start()
    first_pass = 'crewlet_operator_first_pass_seconds{controller="company"}'
    await eventually(
        lambda: restarted.metric(first_pass) > 0, timeout=60, message="the restart's first pass"
    )
    assert await accepted(client, ns, "acme") == refused
    told = await events()
    assert [(e["type"], e["reason"]) for e in told] == [("Warning", NAME_TAKEN)], told
    assert told[0].get("series") is None, "the refusal was told more than once"


async def test_the_companys_own_network_policy_deleted_is_put_back(
    daemon: Daemon, client: Client
) -> None:
    """The broker port stays closed: a deleted NetworkPolicy is the company's to make again."""
    ns = await fresh_namespace(client, "own-netpol")
    await client.create(COMPANY, tenant_company(ns))
    await wait_converged(client, [(ns, "acme")], timeout=90, namespace=ns)
    policy = await client.get(NETWORK_POLICY, "acme-data", ns)
    await client.delete(NETWORK_POLICY, "acme-data", ns)

    async def again() -> Object | None:
        found = await client.get_or_none(NETWORK_POLICY, "acme-data", ns)
        return found if found and found["metadata"]["uid"] != policy["metadata"]["uid"] else None

    remade = await eventually(again, timeout=60, message="the NetworkPolicy made again")
    assert remade["spec"] == policy["spec"]


# -- a hostname held by another company --------------------------------------------------------


async def test_a_hostname_belongs_to_the_company_that_took_it_first(
    daemon: Daemon, client: Client
) -> None:
    """The first to route a hostname keeps it, even against an older company that asks for it
    later; once it lets go, the next in line (the oldest) gets it."""
    a, b, c = [await fresh_namespace(client, f"host-{n}") for n in ("a", "b", "c")]
    shared = "webhooks.shared.example"
    elder = await client.create(
        COMPANY, company(c, "elder", CLASS, webhookHostname="elder.example")
    )
    await wait_converged(client, [(c, "elder")], timeout=90, namespace=c)
    await client.create(COMPANY, company(a, "first", CLASS, webhookHostname=shared))
    await wait_converged(client, [(a, "first")], timeout=90, namespace=a)
    # A creationTimestamp counts whole seconds, and between companies created in the same one
    # the first namespace in order ranks first (host-b before host-c): "second" is younger
    # than "elder" only if created in a later second.
    await _a_second_after(elder["metadata"]["creationTimestamp"])
    await client.create(COMPANY, company(b, "second", CLASS, webhookHostname=shared))
    refused = await wait_condition(client, b, "second", "Accepted", "False", reason=HOSTNAME_TAKEN)
    assert f"Company {a}/first holds the webhook hostname {shared}" in refused["message"]
    assert await client.get_or_none(INGRESS, "second-webhooks", b) is None

    await client.patch(COMPANY, "elder", {"spec": {"webhookHostname": shared}}, c)
    older = await wait_condition(client, c, "elder", "Accepted", "False", reason=HOSTNAME_TAKEN)
    assert f"Company {a}/first" in older["message"]
    assert (await accepted(client, a, "first"))["status"] == "True"
    route = await client.get(INGRESS, "first-webhooks", a)
    assert route["spec"]["rules"][0]["host"] == shared

    await client.delete(COMPANY, "first", a)
    await wait_condition(client, c, "elder", "Accepted", "True")
    after = await wait_condition(client, b, "second", "Accepted", "False", reason=HOSTNAME_TAKEN)
    assert f"Company {c}/elder holds" in after["message"]


async def _a_second_after(timestamp: str) -> None:
    """Return once the clock (the local control plane's too) is in a later second than
    ``timestamp``, an RFC 3339 time in whole seconds."""
    then = datetime.datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()
    await asyncio.sleep(max(0.0, then + 1 - time.time()))


# -- the route's own kind, with the Gateway API ------------------------------------------------

GATEWAY = {"namespace": PLATFORM, "name": "public"}
"""The platform's Gateway, which the class "routed" attaches to and the chart's policy lists."""


async def routed_daemon(
    plane: ControlPlane, daemon: Daemon, client: Client, tmp_path_factory: pytest.TempPathFactory
) -> Daemon:
    """The module's daemon replaced by one that learns at start that the Gateway API is served
    (installed here), under a policy that names :data:`GATEWAY`; and the class "routed" that
    attaches to it. Not started."""
    await install_crds(client, load_crds(binaries.find("gateway-api-crds.yaml")))
    documents = chart_documents({"managerWrites": {"gateways": [GATEWAY]}})
    tmp = tmp_path_factory.mktemp("routed")
    daemon.stop()
    routed = Daemon(
        await manager_kubeconfig(client, plane, tmp, leader_election=True, documents=documents),
        tmp,
    )
    if await client.get_or_none(ENGINE_CLASS, "routed") is None:
        await client.create(
            ENGINE_CLASS, engine_class("routed", exposure={"gateway": {"parentRefs": [GATEWAY]}})
        )
    return routed


async def test_a_tenants_httproute_under_the_routes_name_is_never_taken(
    plane: ControlPlane,
    daemon: Daemon,
    client: Client,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """The webhook route's kind where the Gateway API is served (learnt at start: the module's
    daemon is replaced by one started after it is installed, under a policy that names the
    Gateway): the tenant's HTTPRoute is refused, kept through the Company's deletion, and the
    company makes its own once it is gone. Last in the module: it leaves the Gateway API on."""
    routed = await routed_daemon(plane, daemon, client, tmp_path_factory)
    ns = await fresh_namespace(client, "own-httproute")
    name = naming.webhook_route("acme")
    users_route = {
        "metadata": _meta(ns, name),
        "spec": {
            "parentRefs": [{"name": "theirs"}],
            "hostnames": ["web.example"],
            "rules": [{"backendRefs": [{"name": "web", "port": 80}]}],
        },
    }
    theirs = await client.create(HTTP_ROUTE, users_route)
    acme = company(ns, "acme", "routed", webhookHostname="acme.routed.example")
    await routed.start()
    try:
        await client.create(COMPANY, acme)
        refused = await wait_condition(client, ns, "acme", "Accepted", "False", reason=NAME_TAKEN)
        assert f"HTTPRoute {name} (controlled by no one)" in refused["message"]
        assert await operators_objects(client, ns) == []

        gone = await collected_with(client, await client.get(COMPANY, "acme", ns))
        await client.delete(COMPANY, "acme", ns)
        await eventually(gone, timeout=90, message="the garbage collector dealt with the Company")
        assert untouched(await client.get(HTTP_ROUTE, name, ns), theirs)

        await client.create(COMPANY, acme)
        await wait_condition(client, ns, "acme", "Accepted", "False", reason=NAME_TAKEN)
        await client.delete(HTTP_ROUTE, name, ns)
        await wait_converged(client, [(ns, "acme")], timeout=90, namespace=ns)
        made = await client.get(HTTP_ROUTE, name, ns)
        assert made["metadata"]["uid"] != theirs["metadata"]["uid"]
        assert is_controlled_by(made, await client.get(COMPANY, "acme", ns))
        assert made["spec"]["hostnames"] == ["acme.routed.example"]
    finally:
        routed.stop()


def workload_route(ns: str, name: str, *hosts: str, gateway: Object = GATEWAY) -> Object:
    """Another workload's HTTPRoute: ``/`` of ``hosts`` to its Service, through ``gateway``."""
    return {
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "parentRefs": [gateway],
            "hostnames": list(hosts),
            "rules": [{"backendRefs": [{"name": name, "port": 80}]}],
        },
    }


async def test_a_hostname_another_workload_serves_is_never_taken(
    plane: ControlPlane,
    daemon: Daemon,
    client: Client,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Issue 47, finding 2: "payments serves pay.example.com through the platform's Gateway with
    an HTTPRoute for /; a tenant's Company with webhookHostname: pay.example.com is Accepted and
    its route, with a longer prefix, takes every request under /webhooks of that host." Now
    refused with HostnameTaken naming payments' route, no route written; a route through
    another Gateway holds nothing; a wildcard route holds every name under it; once payments'
    route gives the hostname up, the company routes it."""
    routed = await routed_daemon(plane, daemon, client, tmp_path_factory)
    payments = await fresh_namespace(client, "payments")
    tenant = await fresh_namespace(client, "tenant-b")
    await client.create(HTTP_ROUTE, workload_route(payments, "pay", "pay.example.com"))
    await client.create(HTTP_ROUTE, workload_route(payments, "shop", "*.shop.example.com"))
    await client.create(
        HTTP_ROUTE,
        workload_route(payments, "internal", "internal.example.com", gateway={"name": "internal"}),
    )
    await routed.start()
    try:
        await client.create(
            COMPANY, company(tenant, "acme", "routed", webhookHostname="pay.example.com")
        )
        refused = await wait_condition(
            client, tenant, "acme", "Accepted", "False", reason=HOSTNAME_TAKEN
        )
        assert refused["message"].startswith(
            f"HTTPRoute {payments}/pay, a route the operator did not write, serves the webhook "
            "hostname pay.example.com through the same Gateway"
        ), refused["message"]
        assert await operators_objects(client, tenant) == []
        assert await client.get_or_none(HTTP_ROUTE, "acme-webhooks", tenant) is None

        await client.create(
            COMPANY, company(tenant, "globex", "routed", webhookHostname="a.shop.example.com")
        )
        wildcard = await wait_condition(
            client, tenant, "globex", "Accepted", "False", reason=HOSTNAME_TAKEN
        )
        assert wildcard["message"].startswith(f"HTTPRoute {payments}/shop,")
        # Another Gateway's route for the name takes nothing from this one's.
        await client.create(
            COMPANY, company(tenant, "initech", "routed", webhookHostname="internal.example.com")
        )
        await wait_converged(client, [(tenant, "initech")], timeout=90, namespace=tenant)

        # Payments gives pay.example.com up: the company routes it.
        await client.patch(
            HTTP_ROUTE, "pay", {"spec": {"hostnames": ["pay.payments.example.com"]}}, payments
        )
        await wait_converged(client, [(tenant, "acme")], timeout=90, namespace=tenant)
        made = await client.get(HTTP_ROUTE, "acme-webhooks", tenant)
        assert made["spec"]["hostnames"] == ["pay.example.com"]
        # First come, first served: a workload's route that comes after takes nothing back.
        operator = routed.current
        assert operator is not None
        reconciles = 'controller_runtime_reconcile_total{controller="company",result="success"}'
        before = operator.metric(reconciles)
        await client.create(HTTP_ROUTE, workload_route(payments, "late", "pay.example.com"))
        await eventually(
            lambda: operator.metric(reconciles) > before, timeout=30, message="reconciled again"
        )
        assert (await accepted(client, tenant, "acme"))["status"] == "True"
        after = await client.get(HTTP_ROUTE, "acme-webhooks", tenant)
        assert (after["metadata"]["uid"], after["spec"]) == (made["metadata"]["uid"], made["spec"])
    finally:
        routed.stop()


async def test_a_class_delegates_hostnames_and_refuses_others(
    plane: ControlPlane,
    daemon: Daemon,
    client: Client,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Issue 47: "the platform can delegate hostnames [...] with a reason of its own for a
    hostname outside them": spec.exposure.allowedHostnames, {namespace} standing for the
    company's. A company refused so claims nothing: an older one does not keep the hostname
    from the company it was delegated to."""
    routed = await routed_daemon(plane, daemon, client, tmp_path_factory)
    await client.create(
        ENGINE_CLASS,
        engine_class(
            "delegated",
            exposure={
                "gateway": {"parentRefs": [GATEWAY]},
                "allowedHostnames": ["*.{namespace}.hooks.example"],
            },
        ),
    )
    team_a = await fresh_namespace(client, "team-a")
    team_b = await fresh_namespace(client, "team-b")
    await routed.start()
    try:
        # team-b asks first for a name delegated to team-a: refused, and holds nothing.
        hostname = f"acme.{team_a}.hooks.example"
        await client.create(
            COMPANY, company(team_b, "squatter", "delegated", webhookHostname=hostname)
        )
        refused = await wait_condition(
            client, team_b, "squatter", "Accepted", "False", reason=HOSTNAME_NOT_ALLOWED
        )
        assert (
            "EngineClass delegated gives its companies the webhook hostnames "
            "*.{namespace}.hooks.example ({namespace} being team-b), and not " + hostname
        ) in refused["message"]
        await client.create(COMPANY, company(team_a, "acme", "delegated", webhookHostname=hostname))
        await wait_converged(client, [(team_a, "acme")], timeout=90, namespace=team_a)
        route = await client.get(HTTP_ROUTE, "acme-webhooks", team_a)
        assert route["spec"]["hostnames"] == [hostname]
    finally:
        routed.stop()
