"""The chart's ValidatingAdmissionPolicies on the real API server (issue: Helm chart, RBAC,
admission policies).

The policies are rendered from the chart with the real helm and applied as they are. The
identities under test are bound to cluster-admin, so RBAC allows every write and only the policy
decides. Writes are dry runs where they can be: policies are enforced on dry runs.

The install page is the contract (and issue 13 the list of what a stolen manager token must not
do to a company's data or traffic: delete or disown a claim, have the StatefulSet controller delete
claims, mount another company's claim, or take traffic with a LoadBalancer, NodePort or
externalIPs Service):

    "every object it writes, changes or deletes carries app.kubernetes.io/managed-by:
    crewlet-operator (a Secret it adopts may gain the label, with its data unchanged), every
    Secret it writes is Opaque, and every StatefulSet runs its pods as a ServiceAccount named
    *-engine, without the node's network, PID or IPC namespaces, host paths or privileged
    containers, and every PodDisruptionBudget and NetworkPolicy selects a company's engine pods
    (by app.kubernetes.io/name: crewlet, a component of data or seats, and crewlet.ai/company)
    and nothing else."

    "The policy matches the manager's ServiceAccount by the end of its name,
    crewlet-operator-controller-manager; a nameOverride or fullnameOverride that changes it
    leaves the manager unchecked."

and, for the tenant provisioner, "a ValidatingAdmissionPolicy that holds the subjects, and no
one else, to this: ..." (quoted at each test below).

Every rule has at least one admitted and one denied write; the last test checks that and prints
the count.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest
import pytest_asyncio
import yaml

from crewlet_operator.envtest import ControlPlane, binaries
from crewlet_operator.envtest.controlplane import free_port
from crewlet_operator.envtest.crds import install_crds, load_crds
from crewlet_operator.envtest.wait import eventually
from crewlet_operator.errors import InvalidError, NotFoundError
from crewlet_operator.kube import resources as r
from crewlet_operator.kube.client import Client
from crewlet_operator.kube.config import RestConfig
from crewlet_operator.kube.resources import Resource
from reconcilers.api.v1alpha1 import COMPANY, ENGINE_CLASS
from reconcilers.versions import CLAIM_ANNOTATION

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "charts" / "crewlet-operator"
RELEASE = "crewlet-operator"
RELEASE_NS = "crewlet-policies-system"
MANAGER = "crewlet-operator-controller-manager"
MANAGER_POLICY = "crewlet-operator-manager-writes"
TENANT_POLICY = "crewlet-operator-tenant-provisioner"
TENANT_ACCESS = "crewlet-operator-tenant-access"
PLATFORM_NS = "crewlet-policies-platform"
TENANT = "crewlet.ai/tenant"
ENFORCE = "pod-security.kubernetes.io/enforce"
MANAGED = {"app.kubernetes.io/managed-by": "crewlet-operator"}
ENGINE = {
    "app.kubernetes.io/name": "crewlet",
    "app.kubernetes.io/component": "data",
    "crewlet.ai/company": "acme",
}

# Release names other than the chart's: one that Helm's usual name helper kept as it is (it holds
# the chart's name, which unhooked the policy), one that ends with it, and the longest Helm takes.
RELEASES = ["prod", "crewlet-operator-prod", "team-crewlet-operator", "r" * 53]

Doc = dict[str, Any]
ClientFor = Callable[[RestConfig], Client]
T = TypeVar("T")

# -- the tally: every rule, admitted and denied ---------------------------------------------------

MANAGER_RULES = {
    "label-on-write": "every object it writes carries app.kubernetes.io/managed-by",
    "label-to-change-or-delete": "it changes or deletes only objects that carry the label",
    "secret-adoption": "a Secret it adopts may gain the label, with its data unchanged",
    "secret-opaque": "every Secret it writes is Opaque",
    "sts-engine-service-account": "StatefulSet pods run as a ServiceAccount named *-engine",
    "sts-host-namespaces": "no hostNetwork, hostPID or hostIPC",
    "sts-host-path": "no hostPath volumes",
    "sts-privileged": "no privileged containers (containers, initContainers)",
    "pdb-selector": "a PodDisruptionBudget selects one company's engine pods",
    "netpol-selector": "a NetworkPolicy selects one company's engine pods",
    "claim-never-deleted": "no PersistentVolumeClaim is ever deleted",
    "claim-owners-kept": "no claim is given (or loses) an owner the garbage collector follows",
    "sts-claims-retained": "every StatefulSet keeps its claims on delete and on scale-down",
    "sts-no-claim-volumes": "no pod template mounts a persistentVolumeClaim volume",
    "sts-claim-templates-data": "claim templates are named data (never another's claim)",
    "service-cluster-ip": "every Service is ClusterIP or headless, without externalIPs",
    "manager-only": "the same writes by another ServiceAccount are unaffected",
    "release-prefix": "every release name keeps the manager checked (the chart name kept last)",
    "fullname-override": "a fullnameOverride that renames the ServiceAccount leaves it unchecked",
}
TENANT_RULES = {
    "ns-create-tenant-label": "a namespace is created with the tenant label",
    "ns-create-protected-exact": "... and exactly the required labels under protected prefixes",
    "ns-change-only-tenant": "only tenants' namespaces are changed or deleted",
    "ns-tenant-label-kept": "the tenant label is never removed",
    "ns-protected-unchanged": "protected labels are never set, changed or removed",
    "rb-tenant-namespace": "RoleBindings only in tenants' namespaces",
    "rb-tenant-access-only": "RoleBindings only to the tenant-access ClusterRole",
    "secret-tenant-namespace": "Secrets only in tenants' namespaces",
    "secret-no-sa-token": "never a kubernetes.io/service-account-token Secret",
    "subject-kinds": "ServiceAccount, User and Group subjects are all held",
    "subjects-only": "no one but the subjects is held",
}
TALLY: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))


def _record(rule: str, outcome: str) -> None:
    assert rule in MANAGER_RULES or rule in TENANT_RULES, rule
    test = os.environ.get("PYTEST_CURRENT_TEST", "?").split("::")[-1].split(" ")[0]
    TALLY[rule][outcome].append(test)


async def admitted(rule: str, write: Awaitable[T]) -> T:
    """The write is admitted (recorded for ``rule``)."""
    result = await write
    _record(rule, "admitted")
    return result


async def denied(rule: str, write: Awaitable[Any], policy: str, message: str) -> str:
    """The write is refused by ``policy`` with ``message`` in its answer (recorded)."""
    with pytest.raises(InvalidError) as info:
        await write
    text = info.value.message
    assert f"ValidatingAdmissionPolicy '{policy}'" in text, text
    assert message in text, text
    _record(rule, "denied")
    return text


# -- helm, the policies and the identities ---------------------------------------------------------


async def helm_template(values: dict[str, Any], release: str = RELEASE) -> list[Doc]:
    proc = await asyncio.create_subprocess_exec(
        str(binaries.find("helm")),
        "template",
        release,
        str(CHART),
        "-n",
        RELEASE_NS,
        "--values",
        "-",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={
            "PATH": os.environ.get("PATH", ""),
            "HOME": "/nonexistent",
            "KUBECONFIG": "/nonexistent",
        },
    )
    out, err = await proc.communicate(json.dumps(values).encode())
    assert proc.returncode == 0, err.decode()
    return [d for d in yaml.safe_load_all(out.decode()) if d]


POLICY_KINDS = {
    "ValidatingAdmissionPolicy": r.VALIDATING_ADMISSION_POLICY,
    "ValidatingAdmissionPolicyBinding": r.VALIDATING_ADMISSION_POLICY_BINDING,
}


async def apply_policies(client: Client, docs: list[Doc], name: str) -> None:
    """Apply the chart's policy ``name`` and its binding, as rendered."""
    found = [d for d in docs if d["kind"] in POLICY_KINDS and d["metadata"]["name"] == name]
    assert [d["kind"] for d in found] == list(POLICY_KINDS), [d["kind"] for d in found]
    for doc in found:
        await client.apply(POLICY_KINDS[doc["kind"]], doc)


async def delete_policies(client: Client, name: str) -> None:
    for resource in (r.VALIDATING_ADMISSION_POLICY_BINDING, r.VALIDATING_ADMISSION_POLICY):
        with contextlib.suppress(NotFoundError):
            await client.delete(resource, name)


async def enforced(
    probe: Callable[[], Coroutine[Any, Any, Any]], policy: str, gone: tuple[str, ...] = ()
) -> None:
    """Wait until ``probe`` (a violating dry run) is refused by ``policy``, and by none of the
    ``gone`` ones: policies compile asynchronously."""

    async def refused() -> bool:
        try:
            await probe()
        except InvalidError as exc:
            return f"'{policy}'" in exc.message and not any(f"'{g}'" in exc.message for g in gone)
        return False

    await eventually(refused, timeout=60, interval=0.2, message=f"{policy} enforced")


async def cluster_admin(client: Client, name: str, subjects: list[Doc]) -> None:
    """Bind cluster-admin: RBAC allows everything, so only the policy decides."""
    await client.apply(
        r.CLUSTER_ROLE_BINDING,
        {
            "metadata": {"name": name},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "cluster-admin",
            },
            "subjects": subjects,
        },
    )


def sa_subject(namespace: str, name: str) -> Doc:
    return {"kind": "ServiceAccount", "name": name, "namespace": namespace}


def user_subject(kind: str, name: str) -> Doc:
    return {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name}


async def ensure_namespace(client: Client, name: str) -> None:
    if await client.get_or_none(r.NAMESPACE, name) is None:
        await client.create(r.NAMESPACE, {"metadata": {"name": name}})


# -- objects --------------------------------------------------------------------------------------


def meta(namespace: str, name: str, labelled: bool = True) -> Doc:
    out: Doc = {"name": name, "namespace": namespace}
    if labelled:
        out["labels"] = dict(MANAGED)
    return out


def secret(namespace: str, name: str, labelled: bool = True, type_: str | None = "Opaque") -> Doc:
    obj: Doc = {"metadata": meta(namespace, name, labelled), "data": {"k": "dg=="}}
    if type_:
        obj["type"] = type_
    return obj


def service_account(namespace: str, name: str, labelled: bool = True) -> Doc:
    return {"metadata": meta(namespace, name, labelled)}


def service(namespace: str, name: str, labelled: bool = True, **spec: Any) -> Doc:
    return {
        "metadata": meta(namespace, name, labelled),
        "spec": {"ports": [{"name": "api", "port": 8080}], "selector": ENGINE, **spec},
    }


def claim(namespace: str, name: str, labelled: bool = True) -> Doc:
    return {
        "metadata": meta(namespace, name, labelled),
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }


def statefulset(
    namespace: str, name: str, labelled: bool = True, *, sts: Doc | None = None, **pod: Any
) -> Doc:
    """An engine-shaped StatefulSet; ``pod`` sets pod-spec fields, ``sts`` StatefulSet-spec ones."""
    spec: Doc = {
        "serviceAccountName": "acme-engine",
        "containers": [{"name": "engine", "image": "ghcr.io/crewlet/crewlet:main"}],
    }
    spec.update(pod)
    spec = {k: v for k, v in spec.items() if v is not None}
    return {
        "metadata": meta(namespace, name, labelled),
        "spec": {
            "serviceName": name,
            "selector": {"matchLabels": ENGINE},
            "template": {"metadata": {"labels": ENGINE}, "spec": spec},
            **(sts or {}),
        },
    }


def retention(when_deleted: str, when_scaled: str) -> Doc:
    return {
        "persistentVolumeClaimRetentionPolicy": {
            "whenDeleted": when_deleted,
            "whenScaled": when_scaled,
        }
    }


def claim_templates(*names: str) -> Doc:
    spec = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "12Gi"}}}
    return {"volumeClaimTemplates": [{"metadata": {"name": n}, "spec": spec} for n in names]}


def pdb(namespace: str, name: str, selector: Doc | None = None, labelled: bool = True) -> Doc:
    selector = {"matchLabels": ENGINE} if selector is None else selector
    return {
        "metadata": meta(namespace, name, labelled),
        "spec": {"maxUnavailable": 1, "selector": selector},
    }


def network_policy(
    namespace: str, name: str, selector: Doc | None = None, labelled: bool = True
) -> Doc:
    selector = {"matchLabels": ENGINE} if selector is None else selector
    return {
        "metadata": meta(namespace, name, labelled),
        "spec": {"podSelector": selector, "policyTypes": ["Ingress"]},
    }


def ingress(namespace: str, name: str, labelled: bool = True) -> Doc:
    backend = {"service": {"name": "acme-api", "port": {"number": 8080}}}
    path = {"path": "/webhooks", "pathType": "Prefix", "backend": backend}
    return {
        "metadata": meta(namespace, name, labelled),
        "spec": {"rules": [{"host": "acme.example.com", "http": {"paths": [path]}}]},
    }


def http_route(namespace: str, name: str, labelled: bool = True) -> Doc:
    return {
        "metadata": meta(namespace, name, labelled),
        "spec": {"parentRefs": [{"name": "public"}], "hostnames": ["acme.example.com"]},
    }


Builder = Callable[..., Doc]
KINDS: list[tuple[Resource, Builder]] = [
    (r.SECRET, secret),
    (r.SERVICE_ACCOUNT, service_account),
    (r.SERVICE, service),
    (r.PERSISTENT_VOLUME_CLAIM, claim),
    (r.STATEFUL_SET, statefulset),
    (r.POD_DISRUPTION_BUDGET, pdb),
    (r.NETWORK_POLICY, network_policy),
    (r.INGRESS, ingress),
    (r.HTTP_ROUTE, http_route),
]


def violations(ns: str) -> list[tuple[str, str, Resource, Doc]]:
    """One write the policy refuses the manager for each rule: (rule, id, resource, object)."""
    return [
        ("label-on-write", "unlabelled-secret", r.SECRET, secret(ns, "v1", labelled=False)),
        ("secret-opaque", "sa-token", r.SECRET, sa_token_secret(ns, "v2")),
        (
            "sts-engine-service-account",
            "default-sa",
            r.STATEFUL_SET,
            statefulset(ns, "v3", serviceAccountName=None),
        ),
        (
            "sts-host-namespaces",
            "host-network",
            r.STATEFUL_SET,
            statefulset(ns, "v4", hostNetwork=True),
        ),
        (
            "sts-host-path",
            "host-path",
            r.STATEFUL_SET,
            statefulset(ns, "v5", volumes=[{"name": "root", "hostPath": {"path": "/"}}]),
        ),
        (
            "sts-privileged",
            "privileged",
            r.STATEFUL_SET,
            statefulset(
                ns,
                "v6",
                containers=[{"name": "c", "image": "x", "securityContext": {"privileged": True}}],
            ),
        ),
        (
            "pdb-selector",
            "dns-budget",
            r.POD_DISRUPTION_BUDGET,
            pdb(ns, "v7", {"matchLabels": {"k8s-app": "kube-dns"}}),
        ),
        ("netpol-selector", "every-pod", r.NETWORK_POLICY, network_policy(ns, "v8", {})),
        (
            "sts-claims-retained",
            "claims-deleted",
            r.STATEFUL_SET,
            statefulset(ns, "v9", sts=retention("Delete", "Retain")),
        ),
        (
            "sts-no-claim-volumes",
            "claim-volume",
            r.STATEFUL_SET,
            statefulset(
                ns, "v10", volumes=[{"name": "d", "persistentVolumeClaim": {"claimName": "x"}}]
            ),
        ),
        (
            "sts-claim-templates-data",
            "anothers-claim",
            r.STATEFUL_SET,
            statefulset(ns, "data", sts=claim_templates("data-acme")),
        ),
        (
            "service-cluster-ip",
            "load-balancer",
            r.SERVICE,
            service(ns, "v11", type="LoadBalancer"),
        ),
    ]


def sa_token_secret(namespace: str, name: str, labelled: bool = True) -> Doc:
    obj = secret(namespace, name, labelled, type_="kubernetes.io/service-account-token")
    obj["metadata"]["annotations"] = {"kubernetes.io/service-account.name": "default"}
    obj.pop("data")
    return obj


async def merge_patch(
    client: Client, resource: Resource, name: str, namespace: str | None, patch: Doc
) -> Doc:
    """A dry-run merge patch (an UPDATE in admission)."""
    answer: Doc = await client.request(
        "PATCH",
        resource.path(namespace, name),
        body=patch,
        content_type="application/merge-patch+json",
        query={"dryRun": "All", "fieldManager": "policy-test"},
    )
    return answer


# -- fixtures -------------------------------------------------------------------------------------

GATEWAY_CRDS = "gateway-api-crds.yaml"


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def gateway_api(kube_client: Client) -> AsyncIterator[None]:
    """HTTPRoutes are served (installed here, and removed after, unless already installed)."""
    crds = [d for d in yaml.safe_load_all(binaries.find(GATEWAY_CRDS).read_text()) if d]
    route_crd = "httproutes.gateway.networking.k8s.io"
    installed = await kube_client.get_or_none(r.CUSTOM_RESOURCE_DEFINITION, route_crd) is None
    if installed:
        for crd in crds:
            await kube_client.apply(r.CUSTOM_RESOURCE_DEFINITION, crd)

        async def served() -> bool:
            kube_client.forget_discovery()
            return await kube_client.is_served(r.HTTP_ROUTE.api_version, r.HTTP_ROUTE.kind)

        await eventually(served, timeout=60, message="HTTPRoute served")
    yield
    if installed:
        for crd in crds:
            with contextlib.suppress(NotFoundError):
                await kube_client.delete(r.CUSTOM_RESOURCE_DEFINITION, crd["metadata"]["name"])
        kube_client.forget_discovery()


def manager_identity(control_plane: ControlPlane, name: str = MANAGER) -> RestConfig:
    return control_plane.service_account_config(RELEASE_NS, name)


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def manager_policy(
    kube_client: Client, control_plane: ControlPlane, gateway_api: None
) -> AsyncIterator[list[Doc]]:
    """crewlet-operator-manager-writes as the chart renders it for a release named
    crewlet-operator; the manager, another ServiceAccount and renamed managers bound to
    cluster-admin."""
    docs = await helm_template({})
    await ensure_namespace(kube_client, RELEASE_NS)
    accounts = [
        MANAGER,
        "other",
        "platform-ops-controller-manager",
        *(f"{release[:46]}-{MANAGER}" for release in RELEASES),
    ]
    binding = "crewlet-policies-manager-admin"
    await cluster_admin(kube_client, binding, [sa_subject(RELEASE_NS, a) for a in accounts])
    await apply_policies(kube_client, docs, MANAGER_POLICY)
    async with Client(manager_identity(control_plane)) as manager:
        await wait_manager_policy(manager, MANAGER_POLICY, ("platform-ops-manager-writes",))
    yield docs
    await delete_policies(kube_client, MANAGER_POLICY)
    for resource, name in ((r.CLUSTER_ROLE_BINDING, binding), (r.NAMESPACE, RELEASE_NS)):
        with contextlib.suppress(NotFoundError):
            await kube_client.delete(resource, name)


async def wait_manager_policy(manager: Client, policy: str, gone: tuple[str, ...] = ()) -> None:
    await enforced(
        lambda: manager.create(r.SECRET, secret("default", "probe", labelled=False), dry_run=True),
        policy,
        gone,
    )


@pytest_asyncio.fixture(loop_scope="session")
async def manager(
    control_plane: ControlPlane, client_for: ClientFor, manager_policy: list[Doc]
) -> Client:
    return client_for(manager_identity(control_plane))


@pytest_asyncio.fixture(loop_scope="session")
async def other(
    control_plane: ControlPlane, client_for: ClientFor, manager_policy: list[Doc]
) -> Client:
    return client_for(control_plane.service_account_config(RELEASE_NS, "other"))


def refused_by_manager_policy(
    rule: str, write: Awaitable[Any], message: str = "the operator's manager may"
) -> Awaitable[str]:
    return denied(rule, write, MANAGER_POLICY, message)


# -- the manager's policy -------------------------------------------------------------------------


@pytest.mark.parametrize(("resource", "build"), KINDS, ids=[k.plural for k, _ in KINDS])
async def test_every_kind_is_written_only_with_the_managed_by_label(
    manager: Client, namespace: str, resource: Resource, build: Builder
) -> None:
    created = await admitted(
        "label-on-write", manager.create(resource, build(namespace, "acme"), dry_run=True)
    )
    assert created["metadata"]["labels"] == MANAGED
    await refused_by_manager_policy(
        "label-on-write",
        manager.create(resource, build(namespace, "acme", labelled=False), dry_run=True),
        f"may write {resource.kind} {namespace}/acme only with the label "
        "app.kubernetes.io/managed-by: crewlet-operator",
    )
    wrong = build(namespace, "acme")
    wrong["metadata"]["labels"] = {"app.kubernetes.io/managed-by": "Helm"}
    await refused_by_manager_policy(
        "label-on-write", manager.create(resource, wrong, dry_run=True), "only with the label"
    )


@pytest.mark.parametrize(("resource", "build"), KINDS, ids=[k.plural for k, _ in KINDS])
async def test_changes_and_deletes_only_objects_with_the_label(
    kube_client: Client, manager: Client, namespace: str, resource: Resource, build: Builder
) -> None:
    """The objects exist (written by the admin); the manager's changes and deletes are dry runs."""
    await kube_client.create(resource, build(namespace, "mine"))
    await kube_client.create(resource, build(namespace, "theirs", labelled=False))
    note = {"metadata": {"annotations": {"crewlet.ai/note": "x"}}}
    await admitted(
        "label-to-change-or-delete", merge_patch(manager, resource, "mine", namespace, note)
    )
    if resource == r.PERSISTENT_VOLUME_CLAIM:
        await refused_by_manager_policy(
            "claim-never-deleted",
            manager.delete(resource, "mine", namespace, dry_run=True),
            f"may never delete a PersistentVolumeClaim: PersistentVolumeClaim {namespace}/mine",
        )
    else:
        await admitted(
            "label-to-change-or-delete", manager.delete(resource, "mine", namespace, dry_run=True)
        )
    # Dropping the label is a write without it.
    unlabel = {"metadata": {"labels": {"app.kubernetes.io/managed-by": None}}}
    await refused_by_manager_policy(
        "label-on-write",
        merge_patch(manager, resource, "mine", namespace, unlabel),
        "only with the label",
    )
    await refused_by_manager_policy(
        "label-to-change-or-delete",
        manager.delete(resource, "theirs", namespace, dry_run=True),
        f"may change or delete {resource.kind} {namespace}/theirs only if it is labelled",
    )
    # Labelling someone else's object does not make it the manager's (a Secret is adopted,
    # below, only with its data unchanged).
    if resource != r.SECRET:
        await refused_by_manager_policy(
            "label-to-change-or-delete",
            merge_patch(manager, resource, "theirs", namespace, {"metadata": {"labels": MANAGED}}),
            "only if it is labelled",
        )
    await refused_by_manager_policy(
        "label-on-write",
        merge_patch(manager, resource, "theirs", namespace, note),
        "only with the label",
    )


async def test_the_data_claims_version_annotation_is_written_on_a_labelled_claim(
    kube_client: Client, manager: Client, namespace: str
) -> None:
    """The StatefulSet controller creates the claim with the template's labels; the manager
    patches its annotations (the engine version's high-water mark)."""
    await kube_client.create(r.PERSISTENT_VOLUME_CLAIM, claim(namespace, "data-acme-data-0"))
    await kube_client.create(r.PERSISTENT_VOLUME_CLAIM, claim(namespace, "other-0", False))
    mark = {"metadata": {"annotations": {"crewlet.ai/engine-version": "0.2.0"}}}
    claims = r.PERSISTENT_VOLUME_CLAIM
    patched = await admitted(
        "label-to-change-or-delete",
        merge_patch(manager, claims, "data-acme-data-0", namespace, mark),
    )
    assert patched["metadata"]["annotations"]["crewlet.ai/engine-version"] == "0.2.0"
    await refused_by_manager_policy(
        "label-to-change-or-delete",
        merge_patch(
            manager,
            claims,
            "other-0",
            namespace,
            {**mark, "metadata": {**mark["metadata"], "labels": MANAGED}},
        ),
        "only if it is labelled",
    )


async def test_an_adopted_secret_gains_the_label_with_its_data_unchanged(
    kube_client: Client, manager: Client, namespace: str
) -> None:
    """ "a Secret it adopts may gain the label, with its data unchanged" """
    await kube_client.create(r.SECRET, secret(namespace, "model-key", labelled=False))
    adopt = {"metadata": {"labels": MANAGED, "annotations": {"crewlet.ai/adopted": "true"}}}
    adopted = await admitted(
        "secret-adoption", merge_patch(manager, r.SECRET, "model-key", namespace, adopt)
    )
    assert adopted["data"] == {"k": "dg=="}
    for change in (
        {"data": {"k": "b3RoZXI="}},
        {"data": {"extra": "eA=="}},
        {"stringData": {"k": "other"}},
        {"data": {"k": None}},
    ):
        await refused_by_manager_policy(
            "secret-adoption",
            merge_patch(manager, r.SECRET, "model-key", namespace, {**adopt, **change}),
            "(a Secret it adopts may gain the label, with its data and type unchanged)",
        )
    # Once labelled it is the manager's, and its data may change.
    await kube_client.patch(r.SECRET, "model-key", {"metadata": {"labels": MANAGED}}, namespace)
    await admitted(
        "label-to-change-or-delete",
        merge_patch(manager, r.SECRET, "model-key", namespace, {"data": {"k": "b3RoZXI="}}),
    )


async def test_every_secret_it_writes_is_opaque(
    kube_client: Client, manager: Client, namespace: str
) -> None:
    """ "Whoever takes over the manager's token therefore cannot mint a token for another
    ServiceAccount" """
    await admitted("secret-opaque", manager.create(r.SECRET, secret(namespace, "a"), dry_run=True))
    defaulted = await admitted(
        "secret-opaque", manager.create(r.SECRET, secret(namespace, "b", type_=None), dry_run=True)
    )
    assert defaulted["type"] == "Opaque"
    await refused_by_manager_policy(
        "secret-opaque",
        manager.create(r.SECRET, sa_token_secret(namespace, "token"), dry_run=True),
        f"may write only Opaque Secrets, not Secret {namespace}/token of type "
        "kubernetes.io/service-account-token",
    )
    docker = secret(namespace, "pull", type_="kubernetes.io/dockerconfigjson")
    docker["data"] = {".dockerconfigjson": "e30="}
    await refused_by_manager_policy(
        "secret-opaque", manager.create(r.SECRET, docker, dry_run=True), "only Opaque Secrets"
    )
    # Adopting an existing token Secret (data and type unchanged) is still not Opaque.
    await kube_client.create(r.SECRET, sa_token_secret(namespace, "existing", labelled=False))
    await refused_by_manager_policy(
        "secret-opaque",
        merge_patch(manager, r.SECRET, "existing", namespace, {"metadata": {"labels": MANAGED}}),
        "only Opaque Secrets",
    )


async def test_statefulset_pods_run_as_an_engine_service_account(
    manager: Client, namespace: str
) -> None:
    await admitted(
        "sts-engine-service-account",
        manager.create(r.STATEFUL_SET, statefulset(namespace, "acme-data"), dry_run=True),
    )
    for account, shown in (
        (None, "the namespace's default"),
        ("default", "default"),
        ("engine", "engine"),
        ("acme-engine-admin", "acme-engine-admin"),
    ):
        await refused_by_manager_policy(
            "sts-engine-service-account",
            manager.create(
                r.STATEFUL_SET,
                statefulset(namespace, "acme-data", serviceAccountName=account),
                dry_run=True,
            ),
            f"may write StatefulSet {namespace}/acme-data only with pods that run as a "
            f"ServiceAccount named *-engine, not {shown}",
        )


@pytest.mark.parametrize("field", ["hostNetwork", "hostPID", "hostIPC"])
async def test_statefulset_pods_stay_out_of_the_nodes_namespaces(
    manager: Client, namespace: str, field: str
) -> None:
    def pod(on: bool) -> Doc:
        return {field: on}

    await admitted(
        "sts-host-namespaces",
        manager.create(
            r.STATEFUL_SET, statefulset(namespace, "acme-data", **pod(False)), dry_run=True
        ),
    )
    await refused_by_manager_policy(
        "sts-host-namespaces",
        manager.create(
            r.STATEFUL_SET, statefulset(namespace, "acme-data", **pod(True)), dry_run=True
        ),
        "only with pods that do not use the node's network, PID or IPC namespaces",
    )


async def test_statefulset_pods_have_no_host_paths(manager: Client, namespace: str) -> None:
    scratch = [{"name": "scratch", "emptyDir": {}}]
    await admitted(
        "sts-host-path",
        manager.create(
            r.STATEFUL_SET, statefulset(namespace, "acme-data", volumes=scratch), dry_run=True
        ),
    )
    host = [*scratch, {"name": "docker", "hostPath": {"path": "/var/run/docker.sock"}}]
    await refused_by_manager_policy(
        "sts-host-path",
        manager.create(
            r.STATEFUL_SET, statefulset(namespace, "acme-data", volumes=host), dry_run=True
        ),
        f"may write StatefulSet {namespace}/acme-data only without hostPath volumes",
    )


@pytest.mark.parametrize("where", ["containers", "initContainers"])
async def test_statefulset_pods_have_no_privileged_containers(
    manager: Client, namespace: str, where: str
) -> None:
    def containers(privileged: bool) -> Doc:
        engine = {"name": "engine", "image": "ghcr.io/crewlet/crewlet:main"}
        other = {"name": "x", "image": "x", "securityContext": {"privileged": privileged}}
        if where == "containers":
            return {"containers": [engine, other]}
        return {"containers": [engine], "initContainers": [other]}

    await admitted(
        "sts-privileged",
        manager.create(
            r.STATEFUL_SET, statefulset(namespace, "acme-data", **containers(False)), dry_run=True
        ),
    )
    await refused_by_manager_policy(
        "sts-privileged",
        manager.create(
            r.STATEFUL_SET, statefulset(namespace, "acme-data", **containers(True)), dry_run=True
        ),
        "only without privileged containers",
    )


async def test_ephemeral_containers_never_reach_the_policy(manager: Client, namespace: str) -> None:
    """The policy checks ephemeralContainers too, but the API server already refuses them in a
    pod template, before admission policies run."""
    sts = statefulset(
        namespace,
        "acme-data",
        ephemeralContainers=[{"name": "e", "image": "x", "securityContext": {"privileged": True}}],
    )
    with pytest.raises(InvalidError, match="ephemeral containers not allowed in pod template"):
        await manager.create(r.STATEFUL_SET, sts, dry_run=True)


SELECTORS_ADMITTED = {
    "data": {"matchLabels": ENGINE},
    "seats": {"matchLabels": {**ENGINE, "app.kubernetes.io/component": "seats"}},
    "empty-expressions": {"matchLabels": ENGINE, "matchExpressions": []},
}
SELECTORS_DENIED = {
    "everything": {},
    "no-company": {"matchLabels": {k: v for k, v in ENGINE.items() if k != "crewlet.ai/company"}},
    "empty-company": {"matchLabels": {**ENGINE, "crewlet.ai/company": ""}},
    "other-component": {"matchLabels": {**ENGINE, "app.kubernetes.io/component": "web"}},
    "other-name": {"matchLabels": {**ENGINE, "app.kubernetes.io/name": "coredns"}},
    "extra-label": {"matchLabels": {**ENGINE, "tier": "db"}},
    "kube-dns": {"matchLabels": {"k8s-app": "kube-dns"}},
    "expressions": {
        "matchLabels": ENGINE,
        "matchExpressions": [{"key": "crewlet.ai/company", "operator": "Exists"}],
    },
    "only-expressions": {
        "matchExpressions": [
            {"key": "app.kubernetes.io/name", "operator": "In", "values": ["crewlet"]}
        ]
    },
}


@pytest.mark.parametrize(
    ("rule", "resource", "build"),
    [
        ("pdb-selector", r.POD_DISRUPTION_BUDGET, pdb),
        ("netpol-selector", r.NETWORK_POLICY, network_policy),
    ],
    ids=["poddisruptionbudget", "networkpolicy"],
)
async def test_budgets_and_network_policies_select_one_companys_engine_pods(
    manager: Client, namespace: str, rule: str, resource: Resource, build: Builder
) -> None:
    """ "cannot ... hold up every node drain with a budget over the cluster's DNS, or cut off a
    namespace with a policy that selects all of its pods" """
    for name, selector in SELECTORS_ADMITTED.items():
        await admitted(
            rule, manager.create(resource, build(namespace, name, selector), dry_run=True)
        )
    for name, selector in SELECTORS_DENIED.items():
        await refused_by_manager_policy(
            rule,
            manager.create(resource, build(namespace, name, selector), dry_run=True),
            f"may write {resource.kind} {namespace}/{name} only selecting one company's engine "
            "pods: matchLabels exactly app.kubernetes.io/name: crewlet, "
            "app.kubernetes.io/component: data or seats, and a non-empty crewlet.ai/company, "
            "and no matchExpressions",
        )


@pytest_asyncio.fixture(loop_scope="session", params=["impersonation", "token"])
async def held(
    request: pytest.FixtureRequest,
    kube_client: Client,
    control_plane: ControlPlane,
    client_for: ClientFor,
    manager: Client,
) -> Client:
    """The manager, impersonated or with its ServiceAccount's own token (TokenRequest API)."""
    if request.param == "impersonation":
        return manager
    if await kube_client.get_or_none(r.SERVICE_ACCOUNT, MANAGER, RELEASE_NS) is None:
        await kube_client.create(
            r.SERVICE_ACCOUNT, {"metadata": {"name": MANAGER, "namespace": RELEASE_NS}}
        )
    return client_for(control_plane.token_config(control_plane.request_token(RELEASE_NS, MANAGER)))


async def test_a_claim_is_never_deleted_nor_given_an_owner(
    kube_client: Client, held: Client, other: Client, namespace: str
) -> None:
    """A company's data outlives it: not even a labelled claim is deleted by the manager, and it
    cannot hand a claim to an owner whose deletion would have the garbage collector delete it."""
    claims = r.PERSISTENT_VOLUME_CLAIM
    await kube_client.create(claims, claim(namespace, "data-acme-data-0"))
    await refused_by_manager_policy(
        "claim-never-deleted",
        held.delete(claims, "data-acme-data-0", namespace, dry_run=True),
        f"may never delete a PersistentVolumeClaim: PersistentVolumeClaim "
        f"{namespace}/data-acme-data-0 holds a company's data",
    )
    # What the operator does write on it: the engine version's mark.
    mark = {"metadata": {"annotations": {CLAIM_ANNOTATION: "0.2.0"}}}
    await admitted(
        "claim-owners-kept", merge_patch(held, claims, "data-acme-data-0", namespace, mark)
    )
    owner = await kube_client.create(
        r.CONFIG_MAP, {"metadata": {"name": "doomed", "namespace": namespace}}
    )
    owned = {
        "metadata": {
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "name": "doomed",
                    "uid": owner["metadata"]["uid"],
                }
            ]
        }
    }
    await refused_by_manager_policy(
        "claim-owners-kept",
        merge_patch(held, claims, "data-acme-data-0", namespace, owned),
        f"may not change the owners of PersistentVolumeClaim {namespace}/data-acme-data-0",
    )
    # Someone else's owners are not removed by it either.
    await kube_client.patch(claims, "data-acme-data-0", owned, namespace)
    await refused_by_manager_policy(
        "claim-owners-kept",
        merge_patch(
            held, claims, "data-acme-data-0", namespace, {"metadata": {"ownerReferences": None}}
        ),
        "may not change the owners of",
    )
    # Other users are not held.
    await admitted("claim-never-deleted", other.delete(claims, "data-acme-data-0", namespace))


async def test_a_statefulset_keeps_its_claims_on_delete_and_scale_down(
    kube_client: Client, held: Client, namespace: str
) -> None:
    """ "the StatefulSet controller deletes the claims" of a StatefulSet whose retention policy
    says Delete: the manager writes Retain, Retain or nothing, and deletes only such a one."""
    for name, sts in (("explicit", retention("Retain", "Retain")), ("defaulted", None)):
        written = await admitted(
            "sts-claims-retained",
            held.create(r.STATEFUL_SET, statefulset(namespace, name, sts=sts), dry_run=True),
        )
        assert written["spec"]["persistentVolumeClaimRetentionPolicy"] == {
            "whenDeleted": "Retain",
            "whenScaled": "Retain",
        }
    for deleted, scaled in (("Delete", "Retain"), ("Retain", "Delete"), ("Delete", "Delete")):
        await refused_by_manager_policy(
            "sts-claims-retained",
            held.create(
                r.STATEFUL_SET,
                statefulset(namespace, "acme-data", sts=retention(deleted, scaled)),
                dry_run=True,
            ),
            f"may write StatefulSet {namespace}/acme-data only if it keeps its claims: "
            "persistentVolumeClaimRetentionPolicy whenDeleted Retain and whenScaled Retain, not "
            f"whenDeleted {deleted} and whenScaled {scaled}",
        )
    # Turning Retain into Delete on one it wrote, then deleting it, is the attack: both refused.
    await kube_client.create(r.STATEFUL_SET, statefulset(namespace, "acme-data"))
    await refused_by_manager_policy(
        "sts-claims-retained",
        merge_patch(
            held, r.STATEFUL_SET, "acme-data", namespace, {"spec": retention("Delete", "Delete")}
        ),
        "only if it keeps its claims",
    )
    await kube_client.create(
        r.STATEFUL_SET, statefulset(namespace, "set-by-hand", sts=retention("Delete", "Retain"))
    )
    await refused_by_manager_policy(
        "sts-claims-retained",
        held.delete(r.STATEFUL_SET, "set-by-hand", namespace, dry_run=True),
        f"may delete StatefulSet {namespace}/set-by-hand only if it keeps its claims",
    )
    await admitted(
        "sts-claims-retained", held.delete(r.STATEFUL_SET, "acme-data", namespace, dry_run=True)
    )


async def test_a_pod_template_mounts_no_claim(held: Client, namespace: str) -> None:
    """ "mount another company's claim into an engine-shaped pod": not by a claim volume in the
    pod template, and not by a claim template whose claims are named like another's (a
    StatefulSet named data with a template data-acme would get data-acme-data-0)."""
    await admitted(
        "sts-no-claim-volumes",
        held.create(
            r.STATEFUL_SET,
            statefulset(
                namespace,
                "acme-data",
                sts=claim_templates("data"),
                volumes=[{"name": "scratch", "emptyDir": {}}],
            ),
            dry_run=True,
        ),
    )
    volume = {"name": "theirs", "persistentVolumeClaim": {"claimName": "data-other-data-0"}}
    await refused_by_manager_policy(
        "sts-no-claim-volumes",
        held.create(
            r.STATEFUL_SET, statefulset(namespace, "acme-data", volumes=[volume]), dry_run=True
        ),
        f"may write StatefulSet {namespace}/acme-data only without persistentVolumeClaim "
        "volumes in its pod template",
    )
    await admitted(
        "sts-claim-templates-data",
        held.create(
            r.STATEFUL_SET,
            statefulset(namespace, "other-data", sts=claim_templates("data")),
            dry_run=True,
        ),
    )
    for templates in (("data-acme",), ("data", "extra")):
        await refused_by_manager_policy(
            "sts-claim-templates-data",
            held.create(
                r.STATEFUL_SET,
                statefulset(namespace, "data", sts=claim_templates(*templates)),
                dry_run=True,
            ),
            f"may write StatefulSet {namespace}/data only with claim templates named data "
            "(its claims are then data-data-<n>, never another's)",
        )


@pytest.mark.parametrize(
    ("spec", "shown"),
    [
        ({"type": "LoadBalancer"}, "of type LoadBalancer"),
        ({"type": "NodePort"}, "of type NodePort"),
        ({"type": "ExternalName", "externalName": "evil.example.com"}, "of type ExternalName"),
        ({"externalIPs": ["203.0.113.7"]}, "of type ClusterIP with externalIPs"),
    ],
    ids=["load-balancer", "node-port", "external-name", "external-ips"],
)
async def test_every_service_is_cluster_ip_without_external_ips(
    held: Client, other: Client, namespace: str, spec: Doc, shown: str
) -> None:
    """Nothing the manager writes takes traffic from outside the cluster or for an address it
    does not own."""
    cluster_ip: list[tuple[str, Doc]] = [
        ("acme-api", {"type": "ClusterIP"}),
        ("acme-data", {"clusterIP": "None"}),
    ]
    for name, admitted_spec in cluster_ip:
        await admitted(
            "service-cluster-ip",
            held.create(r.SERVICE, service(namespace, name, **admitted_spec), dry_run=True),
        )
    await refused_by_manager_policy(
        "service-cluster-ip",
        held.create(r.SERVICE, service(namespace, "acme-api", **spec), dry_run=True),
        f"may write Service {namespace}/acme-api only of type ClusterIP (headless or not) and "
        f"without externalIPs, not {shown}",
    )
    await admitted(
        "manager-only", other.create(r.SERVICE, service(namespace, "x", **spec), dry_run=True)
    )


async def test_another_service_account_is_unaffected(
    manager: Client, other: Client, namespace: str
) -> None:
    for rule, _, resource, obj in violations(namespace):
        await refused_by_manager_policy(rule, manager.create(resource, obj, dry_run=True))
        await admitted("manager-only", other.create(resource, obj, dry_run=True))
    await refused_by_manager_policy(
        "manager-only", manager.create(r.SECRET, secret(namespace, "x", False), dry_run=True)
    )


async def test_the_managers_real_token_is_held_too(
    kube_client: Client,
    control_plane: ControlPlane,
    client_for: ClientFor,
    manager: Client,
    namespace: str,
) -> None:
    """Not only impersonation: the ServiceAccount's own token (TokenRequest API)."""
    if await kube_client.get_or_none(r.SERVICE_ACCOUNT, MANAGER, RELEASE_NS) is None:
        await kube_client.create(
            r.SERVICE_ACCOUNT, {"metadata": {"name": MANAGER, "namespace": RELEASE_NS}}
        )
    real = client_for(control_plane.token_config(control_plane.request_token(RELEASE_NS, MANAGER)))
    await admitted("label-on-write", real.create(r.SECRET, secret(namespace, "a"), dry_run=True))
    await refused_by_manager_policy(
        "label-on-write", real.create(r.SECRET, secret(namespace, "b", False), dry_run=True)
    )


@pytest.mark.parametrize("release", RELEASES, ids=lambda n: n if len(n) < 30 else "53-chars")
async def test_every_release_name_keeps_the_manager_checked(
    kube_client: Client,
    control_plane: ControlPlane,
    client_for: ClientFor,
    manager: Client,
    namespace: str,
    release: str,
) -> None:
    """ "the chart prefixes them with the release's name otherwise": a release named prod names
    its manager prod-crewlet-operator-controller-manager, and so does one whose name holds the
    chart's (crewlet-operator-prod-crewlet-operator-...), so the policy that release installs,
    alone, holds its manager by the end of its name."""
    docs = await helm_template({}, release=release)
    account = next(d for d in docs if d["kind"] == "ServiceAccount")["metadata"]["name"]
    assert account == f"{release[:46]}-{MANAGER}"
    policy = next(d for d in docs if d["kind"] == "ValidatingAdmissionPolicy")["metadata"]["name"]
    assert policy == f"{release[:46]}-{MANAGER_POLICY}"
    held = client_for(manager_identity(control_plane, account))
    await delete_policies(kube_client, MANAGER_POLICY)
    await apply_policies(kube_client, docs, policy)
    try:
        await wait_manager_policy(held, policy, (MANAGER_POLICY,))
        for rule, _, resource, obj in violations(namespace):
            await denied(rule, held.create(resource, obj, dry_run=True), policy, "manager may")
        await denied(
            "release-prefix",
            held.create(r.SECRET, secret(namespace, "x", False), dry_run=True),
            policy,
            "only with the label",
        )
        await admitted(
            "release-prefix", held.create(r.SECRET, secret(namespace, "x"), dry_run=True)
        )
    finally:
        await delete_policies(kube_client, policy)
        await apply_policies(kube_client, await helm_template({}), MANAGER_POLICY)
        await wait_manager_policy(manager, MANAGER_POLICY, (policy,))


async def test_a_fullname_override_that_renames_the_manager_leaves_it_unchecked(
    kube_client: Client,
    control_plane: ControlPlane,
    client_for: ClientFor,
    manager: Client,
    namespace: str,
) -> None:
    """ "a nameOverride or fullnameOverride that changes it leaves the manager unchecked" """
    docs = await helm_template({"fullnameOverride": "platform-ops"})
    account = next(d for d in docs if d["kind"] == "ServiceAccount")["metadata"]["name"]
    assert account == "platform-ops-controller-manager"
    renamed = client_for(manager_identity(control_plane, account))
    # Only the override's policy is installed, and it is enforced (it still holds a ServiceAccount
    # named crewlet-operator-controller-manager) ...
    await delete_policies(kube_client, MANAGER_POLICY)
    await apply_policies(kube_client, docs, "platform-ops-manager-writes")
    try:
        await wait_manager_policy(manager, "platform-ops-manager-writes", (MANAGER_POLICY,))
        await denied(
            "fullname-override",
            manager.create(r.SECRET, secret(namespace, "x", False), dry_run=True),
            "platform-ops-manager-writes",
            "only with the label",
        )
        # ... but not the renamed manager: every write the policy exists to refuse is admitted.
        for _, _, resource, obj in violations(namespace):
            await admitted("fullname-override", renamed.create(resource, obj, dry_run=True))
    finally:
        await delete_policies(kube_client, "platform-ops-manager-writes")
        await apply_policies(kube_client, await helm_template({}), MANAGER_POLICY)
        await wait_manager_policy(manager, MANAGER_POLICY, ("platform-ops-manager-writes",))


RBAC_KINDS = {
    "ServiceAccount": r.SERVICE_ACCOUNT,
    "ClusterRole": r.CLUSTER_ROLE,
    "ClusterRoleBinding": r.CLUSTER_ROLE_BINDING,
    "Role": r.ROLE,
    "RoleBinding": r.ROLE_BINDING,
}


async def test_the_operator_runs_a_company_under_the_charts_rbac_and_policy(
    kube_client: Client,
    control_plane: ControlPlane,
    manager: Client,
    namespace: str,
    tmp_path: Path,
) -> None:
    """The daemon, with the token of a manager ServiceAccount that holds only the chart's RBAC
    (release e2e: e2e-crewlet-operator-controller-manager, which the policy matches by the end of
    its name), runs a company to Ready: every write it makes passes the policy, including the
    copy of a referenced Secret and the version annotation on the data claim."""
    await install_crds(kube_client, load_crds(ROOT / "manifests" / "crds"))
    docs = await helm_template({}, release="e2e")
    rbac = [
        d
        for d in docs
        if d["kind"] in RBAC_KINDS
        and d["metadata"]["name"].startswith(
            (
                "e2e-crewlet-operator-controller-manager",
                "e2e-crewlet-operator-manager-",
                "e2e-crewlet-operator-leader-election-",
            )
        )
    ]
    assert sorted(d["kind"] for d in rbac) == sorted(RBAC_KINDS)
    for doc in rbac:
        await kube_client.apply(RBAC_KINDS[doc["kind"]], doc)
    account = "e2e-crewlet-operator-controller-manager"
    platform = f"{namespace}-platform"[:63]
    class_name = f"policy-{namespace}"[:63]
    await kube_client.create(r.NAMESPACE, {"metadata": {"name": platform}})
    log = tmp_path / "operator.log"
    daemon: asyncio.subprocess.Process | None = None
    try:
        await kube_client.create(
            r.SECRET,
            {
                "metadata": {"name": "keys", "namespace": platform},
                "stringData": {"anthropic": "sk-test"},
            },
        )
        await kube_client.create(
            ENGINE_CLASS,
            {
                "metadata": {"name": class_name},
                "spec": {
                    "engine": {"image": "ghcr.io/crewlet/crewlet-operator/engine:v0.2.0"},
                    "modelKeys": [
                        {
                            "name": "ANTHROPIC_API_KEY",
                            "secretRef": {
                                "namespace": platform,
                                "name": "keys",
                                "key": "anthropic",
                            },
                        }
                    ],
                },
            },
        )
        await kube_client.create(
            COMPANY,
            {
                "metadata": {"name": "acme", "namespace": namespace},
                "spec": {"className": class_name},
            },
        )
        token = control_plane.request_token(RELEASE_NS, account)
        kubeconfig = control_plane.token_config(token).write_kubeconfig(tmp_path / "kubeconfig")
        health = free_port()
        with log.open("ab") as out:
            daemon = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "reconcilers.cli",
                "--kubeconfig",
                str(kubeconfig),
                "--leader-elect",
                f"--leader-election-namespace={RELEASE_NS}",
                "--metrics-bind-address=0",
                f"--health-probe-bind-address=127.0.0.1:{health}",
                "--log-format=json",
                stdout=out,
                stderr=asyncio.subprocess.STDOUT,
            )

        async def ready() -> bool:
            assert daemon is not None and daemon.returncode is None, log.read_text()[-3000:]
            company = await kube_client.get(COMPANY, "acme", namespace)
            conditions = (company.get("status") or {}).get("conditions") or []
            return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

        try:
            await eventually(ready, timeout=120, interval=0.5, message="Company Ready")
        except TimeoutError as exc:
            raise AssertionError(f"not Ready; operator log:\n{log.read_text()[-4000:]}") from exc

        async def claim_marked() -> bool:
            claim = await kube_client.get_or_none(
                r.PERSISTENT_VOLUME_CLAIM, "data-acme-data-0", namespace
            )
            annotations = ((claim or {}).get("metadata") or {}).get("annotations") or {}
            return CLAIM_ANNOTATION in annotations

        await eventually(claim_marked, timeout=60, message="the data claim's version mark")
        secrets = (await kube_client.list(r.SECRET, namespace)).items
        assert secrets and all(
            s["metadata"]["labels"] == {**s["metadata"]["labels"], **MANAGED} for s in secrets
        )
        assert await kube_client.get(r.LEASE, "crewlet-operator-leader", RELEASE_NS)
        assert "denied request" not in log.read_text()
        assert "Forbidden" not in log.read_text()
    finally:
        if daemon is not None and daemon.returncode is None:
            daemon.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(daemon.wait(), 40)
            except TimeoutError:
                daemon.kill()
                await daemon.wait()
        for doc in rbac:
            if doc["kind"] != "ServiceAccount":
                with contextlib.suppress(NotFoundError):
                    await kube_client.delete(
                        RBAC_KINDS[doc["kind"]],
                        doc["metadata"]["name"],
                        doc["metadata"].get("namespace"),
                    )
        with contextlib.suppress(NotFoundError):
            await kube_client.delete(ENGINE_CLASS, class_name)
        with contextlib.suppress(NotFoundError):
            await kube_client.delete(r.NAMESPACE, platform)


# -- the tenant provisioner's policy -------------------------------------------------------------

SUBJECTS = [
    {"kind": "ServiceAccount", "name": "control-plane", "namespace": PLATFORM_NS},
    {"kind": "User", "name": "tenant-bot"},
    {"kind": "Group", "name": "tenant-provisioners"},
]


def provisioner_identities(control_plane: ControlPlane) -> dict[str, RestConfig]:
    return {
        "service-account": control_plane.service_account_config(PLATFORM_NS, "control-plane"),
        "user": control_plane.impersonation_config("tenant-bot"),
        "group": control_plane.impersonation_config("someone", ("tenant-provisioners",)),
    }


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def tenant_policy(kube_client: Client, control_plane: ControlPlane) -> AsyncIterator[None]:
    """The tenant provisioner's policy as the chart renders it for three subjects (a
    ServiceAccount, a User and a Group); they and two outsiders bound to cluster-admin."""
    docs = await helm_template({"tenantProvisioner": {"enabled": True, "subjects": SUBJECTS}})
    access = next(d for d in docs if d["metadata"]["name"] == TENANT_ACCESS)
    await kube_client.apply(r.CLUSTER_ROLE, access)
    binding = "crewlet-policies-tenant-admin"
    await cluster_admin(
        kube_client,
        binding,
        [
            sa_subject(PLATFORM_NS, "control-plane"),
            sa_subject(PLATFORM_NS, "outsider"),
            user_subject("User", "tenant-bot"),
            user_subject("User", "not-a-provisioner"),
            user_subject("Group", "tenant-provisioners"),
        ],
    )
    await apply_policies(kube_client, docs, TENANT_POLICY)
    async with Client(control_plane.service_account_config(PLATFORM_NS, "control-plane")) as sa:
        await enforced(
            lambda: sa.create(r.NAMESPACE, {"metadata": {"name": "probe"}}, dry_run=True),
            TENANT_POLICY,
        )
    yield
    await delete_policies(kube_client, TENANT_POLICY)
    for resource, name in ((r.CLUSTER_ROLE_BINDING, binding), (r.CLUSTER_ROLE, TENANT_ACCESS)):
        with contextlib.suppress(NotFoundError):
            await kube_client.delete(resource, name)


@pytest_asyncio.fixture(loop_scope="session")
async def provisioner(
    control_plane: ControlPlane, client_for: ClientFor, tenant_policy: None
) -> Client:
    return client_for(control_plane.service_account_config(PLATFORM_NS, "control-plane"))


@pytest_asyncio.fixture(loop_scope="session")
async def tenant_ns(kube_client: Client, namespace: str) -> AsyncIterator[str]:
    """A tenant's namespace (made by the admin), beside ``namespace``, which is not one."""
    name = f"{namespace}-tenant"[:63]
    labels = {TENANT: "acme", ENFORCE: "restricted"}
    await kube_client.create(r.NAMESPACE, {"metadata": {"name": name, "labels": labels}})
    yield name
    with contextlib.suppress(NotFoundError):
        await kube_client.delete(r.NAMESPACE, name)


def namespace_doc(name: str, **labels: str) -> Doc:
    return {"metadata": {"name": name, "labels": labels}}


def tenant_labels(**extra: str) -> dict[str, str]:
    return {TENANT: "acme", ENFORCE: "restricted", **extra}


def refused_by_tenant_policy(
    rule: str, write: Awaitable[Any], message: str = "the tenant provisioner may"
) -> Awaitable[str]:
    return denied(rule, write, TENANT_POLICY, message)


def role_binding(
    namespace: str, name: str, kind: str = "ClusterRole", role: str = TENANT_ACCESS
) -> Doc:
    return {
        "metadata": {"name": name, "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": "engine", "namespace": namespace}],
    }


async def test_a_namespace_is_created_with_the_tenant_label(
    provisioner: Client, namespace: str
) -> None:
    """ "a namespace is created with the tenant label and, under the protected prefixes, exactly
    the required labels" """
    name = f"{namespace}-new"[:63]
    await admitted(
        "ns-create-tenant-label",
        provisioner.create(r.NAMESPACE, namespace_doc(name, **tenant_labels()), dry_run=True),
    )
    await refused_by_tenant_policy(
        "ns-create-tenant-label",
        provisioner.create(
            r.NAMESPACE, namespace_doc(name, **{ENFORCE: "restricted"}), dry_run=True
        ),
        f"may create a namespace only with the tenant label {TENANT}, not Namespace {name}",
    )


@pytest.mark.parametrize(
    ("labels", "ok"),
    [
        pytest.param(tenant_labels(), True, id="exactly-required"),
        pytest.param(tenant_labels(team="blue"), True, id="unprotected-extra"),
        pytest.param({TENANT: "acme"}, False, id="required-missing"),
        pytest.param(tenant_labels(**{ENFORCE: "privileged"}), False, id="required-changed"),
        pytest.param(
            tenant_labels(**{"pod-security.kubernetes.io/warn": "baseline"}),
            False,
            id="protected-extra",
        ),
    ],
)
async def test_a_namespace_is_created_with_exactly_the_required_protected_labels(
    provisioner: Client, namespace: str, labels: dict[str, str], ok: bool
) -> None:
    name = f"{namespace}-new"[:63]
    write = provisioner.create(r.NAMESPACE, namespace_doc(name, **labels), dry_run=True)
    if ok:
        await admitted("ns-create-protected-exact", write)
    else:
        await refused_by_tenant_policy(
            "ns-create-protected-exact",
            write,
            f"may create Namespace {name} only with exactly the required labels under the "
            f"protected prefixes (pod-security.kubernetes.io/): {ENFORCE}=restricted",
        )


async def test_only_tenant_namespaces_are_changed_or_deleted(
    provisioner: Client, namespace: str, tenant_ns: str
) -> None:
    """ "only namespaces with the tenant label are changed or deleted" """
    note = {"metadata": {"labels": {"team": "blue"}}}
    await admitted(
        "ns-change-only-tenant", merge_patch(provisioner, r.NAMESPACE, tenant_ns, None, note)
    )
    await admitted(
        "ns-change-only-tenant", provisioner.delete(r.NAMESPACE, tenant_ns, dry_run=True)
    )
    await refused_by_tenant_policy(
        "ns-change-only-tenant",
        merge_patch(provisioner, r.NAMESPACE, namespace, None, note),
        f"may change or delete only tenants' namespaces (labelled {TENANT}), not Namespace "
        f"{namespace}",
    )
    # Labelling a namespace as a tenant's is changing it.
    await refused_by_tenant_policy(
        "ns-change-only-tenant",
        merge_patch(
            provisioner, r.NAMESPACE, namespace, None, {"metadata": {"labels": tenant_labels()}}
        ),
        "may change or delete only tenants' namespaces",
    )
    await refused_by_tenant_policy(
        "ns-change-only-tenant",
        provisioner.delete(r.NAMESPACE, namespace, dry_run=True),
        "may change or delete only tenants' namespaces",
    )


async def test_the_tenant_label_is_never_removed(provisioner: Client, tenant_ns: str) -> None:
    await admitted(
        "ns-tenant-label-kept",
        merge_patch(
            provisioner,
            r.NAMESPACE,
            tenant_ns,
            None,
            {"metadata": {"labels": {TENANT: "acme-renamed"}}},
        ),
    )
    await refused_by_tenant_policy(
        "ns-tenant-label-kept",
        merge_patch(
            provisioner, r.NAMESPACE, tenant_ns, None, {"metadata": {"labels": {TENANT: None}}}
        ),
        f"may not remove the tenant label {TENANT} from Namespace {tenant_ns}",
    )


@pytest.mark.parametrize(
    ("labels", "ok"),
    [
        pytest.param({"team": "blue"}, True, id="unprotected-set"),
        pytest.param({ENFORCE: "restricted"}, True, id="protected-unchanged"),
        pytest.param({"pod-security.kubernetes.io/warn": "baseline"}, False, id="protected-set"),
        pytest.param({ENFORCE: "privileged"}, False, id="protected-changed"),
        pytest.param({ENFORCE: None}, False, id="protected-removed"),
    ],
)
async def test_protected_labels_are_never_set_changed_or_removed(
    provisioner: Client, tenant_ns: str, labels: dict[str, str | None], ok: bool
) -> None:
    write = merge_patch(provisioner, r.NAMESPACE, tenant_ns, None, {"metadata": {"labels": labels}})
    if ok:
        await admitted("ns-protected-unchanged", write)
    else:
        await refused_by_tenant_policy(
            "ns-protected-unchanged",
            write,
            "may not set, change or remove labels under the protected prefixes "
            f"(pod-security.kubernetes.io/) of Namespace {tenant_ns}",
        )


async def test_role_bindings_only_in_tenant_namespaces(
    kube_client: Client, provisioner: Client, namespace: str, tenant_ns: str
) -> None:
    """ "RoleBindings are made only in tenants' namespaces, and only to the tenant-access role" """
    await admitted(
        "rb-tenant-namespace",
        provisioner.create(r.ROLE_BINDING, role_binding(tenant_ns, "access"), dry_run=True),
    )
    await refused_by_tenant_policy(
        "rb-tenant-namespace",
        provisioner.create(r.ROLE_BINDING, role_binding(namespace, "access"), dry_run=True),
        f"may write RoleBindings only in tenants' namespaces (labelled {TENANT}), not "
        f"RoleBinding {namespace}/access",
    )
    await kube_client.create(r.ROLE_BINDING, role_binding(namespace, "existing"))
    await kube_client.create(r.ROLE_BINDING, role_binding(tenant_ns, "existing"))
    await admitted(
        "rb-tenant-namespace",
        provisioner.delete(r.ROLE_BINDING, "existing", tenant_ns, dry_run=True),
    )
    await refused_by_tenant_policy(
        "rb-tenant-namespace",
        provisioner.delete(r.ROLE_BINDING, "existing", namespace, dry_run=True),
        "may write RoleBindings only in tenants' namespaces",
    )


async def test_role_bindings_only_to_the_tenant_access_role(
    provisioner: Client, tenant_ns: str
) -> None:
    await admitted(
        "rb-tenant-access-only",
        provisioner.create(r.ROLE_BINDING, role_binding(tenant_ns, "access"), dry_run=True),
    )
    for kind, role in (
        ("ClusterRole", "admin"),
        ("ClusterRole", "cluster-admin"),
        ("Role", TENANT_ACCESS),
    ):
        await refused_by_tenant_policy(
            "rb-tenant-access-only",
            provisioner.create(
                r.ROLE_BINDING, role_binding(tenant_ns, "b", kind, role), dry_run=True
            ),
            f"may bind only the ClusterRole {TENANT_ACCESS}, not the {kind} {role} "
            f"(RoleBinding {tenant_ns}/b)",
        )


async def test_secrets_only_in_tenant_namespaces(
    kube_client: Client, provisioner: Client, namespace: str, tenant_ns: str
) -> None:
    """ "Secrets are written only in tenants' namespaces" """
    plain = {"stringData": {"k": "v"}}
    await admitted(
        "secret-tenant-namespace",
        provisioner.create(
            r.SECRET, {"metadata": {"name": "k", "namespace": tenant_ns}, **plain}, dry_run=True
        ),
    )
    await refused_by_tenant_policy(
        "secret-tenant-namespace",
        provisioner.create(
            r.SECRET, {"metadata": {"name": "k", "namespace": namespace}, **plain}, dry_run=True
        ),
        f"may write Secrets only in tenants' namespaces (labelled {TENANT}), not Secret "
        f"{namespace}/k",
    )
    await kube_client.create(r.SECRET, {"metadata": {"name": "e", "namespace": namespace}, **plain})
    await refused_by_tenant_policy(
        "secret-tenant-namespace",
        merge_patch(provisioner, r.SECRET, "e", namespace, {"stringData": {"k": "w"}}),
        "may write Secrets only in tenants' namespaces",
    )
    await refused_by_tenant_policy(
        "secret-tenant-namespace",
        provisioner.delete(r.SECRET, "e", namespace, dry_run=True),
        "may write Secrets only in tenants' namespaces",
    )


async def test_never_a_service_account_token_secret(provisioner: Client, tenant_ns: str) -> None:
    """ "and never as kubernetes.io/service-account-token, whose token the API server would
    fill in for any ServiceAccount" """
    await admitted(
        "secret-no-sa-token",
        provisioner.create(r.SECRET, secret(tenant_ns, "opaque", labelled=False), dry_run=True),
    )
    await refused_by_tenant_policy(
        "secret-no-sa-token",
        provisioner.create(r.SECRET, sa_token_secret(tenant_ns, "token", False), dry_run=True),
        "may not write a Secret of type kubernetes.io/service-account-token "
        f"(Secret {tenant_ns}/token)",
    )


@pytest.mark.parametrize("who", ["service-account", "user", "group"])
async def test_every_kind_of_subject_is_held(
    control_plane: ControlPlane,
    client_for: ClientFor,
    tenant_policy: None,
    namespace: str,
    who: str,
) -> None:
    subject = client_for(provisioner_identities(control_plane)[who])
    name = f"{namespace}-new"[:63]
    await admitted(
        "subject-kinds",
        subject.create(r.NAMESPACE, namespace_doc(name, **tenant_labels()), dry_run=True),
    )
    await refused_by_tenant_policy(
        "subject-kinds",
        subject.create(r.NAMESPACE, namespace_doc(name), dry_run=True),
        "may create a namespace only with the tenant label",
    )
    await refused_by_tenant_policy(
        "subject-kinds",
        subject.create(r.SECRET, {"metadata": {"name": "k", "namespace": namespace}}, dry_run=True),
        "may write Secrets only in tenants' namespaces",
    )


def tenant_violations(namespace: str, tenant_ns: str) -> list[tuple[Resource, Doc]]:
    return [
        (r.NAMESPACE, namespace_doc(f"{namespace}-new"[:63])),
        (
            r.NAMESPACE,
            namespace_doc(f"{namespace}-new"[:63], **tenant_labels(**{ENFORCE: "privileged"})),
        ),
        (r.ROLE_BINDING, role_binding(namespace, "access")),
        (r.ROLE_BINDING, role_binding(tenant_ns, "admin", role="cluster-admin")),
        (r.SECRET, {"metadata": {"name": "k", "namespace": namespace}}),
        (r.SECRET, sa_token_secret(tenant_ns, "token", False)),
    ]


async def test_no_one_but_the_subjects_is_held(
    control_plane: ControlPlane,
    client_for: ClientFor,
    provisioner: Client,
    namespace: str,
    tenant_ns: str,
) -> None:
    """ "holds the subjects, and no one else" """
    outsiders = [
        client_for(control_plane.impersonation_config("not-a-provisioner")),
        client_for(control_plane.service_account_config(PLATFORM_NS, "outsider")),
    ]
    for resource, obj in tenant_violations(namespace, tenant_ns):
        await refused_by_tenant_policy(
            "subjects-only", provisioner.create(resource, obj, dry_run=True)
        )
        for outsider in outsiders:
            await admitted("subjects-only", outsider.create(resource, obj, dry_run=True))
    for outsider in outsiders:
        await admitted(
            "subjects-only",
            merge_patch(
                outsider, r.NAMESPACE, tenant_ns, None, {"metadata": {"labels": {ENFORCE: None}}}
            ),
        )


# -- every rule, both ways ------------------------------------------------------------------------


@pytest.mark.whole_module
def test_every_rule_was_admitted_and_denied_at_least_once(
    request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]
) -> None:
    """Runs last; it needs the whole module (in a partial run it is deselected: e2e/conftest.py)."""
    collected = len([i for i in request.session.items if i.module is request.module])  # type: ignore[attr-defined]
    lines, missing, total = [], [], 0
    for rules in (MANAGER_RULES, TENANT_RULES):
        for rule, text in rules.items():
            outcomes = TALLY.get(rule, {})
            admits, denies = len(outcomes.get("admitted", [])), len(outcomes.get("denied", []))
            total += admits + denies
            lines.append(f"  {rule:28} admitted {admits:3}  denied {denies:3}  ({text})")
            for outcome in ("admitted", "denied"):
                tests = ", ".join(dict.fromkeys(outcomes.get(outcome, [])))
                lines.append(f"      {outcome}: {tests or '-'}")
            if not admits or not denies:
                missing.append(rule)
    report = (
        f"admission policy writes checked: {total} over {len(MANAGER_RULES) + len(TENANT_RULES)}"
        f" rules ({collected} tests)\n" + "\n".join(lines)
    )
    with capsys.disabled():  # shown even when output is captured
        print("\n" + report)
    assert not missing, f"rules without both an admitted and a denied write: {missing}\n{report}"
