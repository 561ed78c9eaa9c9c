"""The chart's ValidatingAdmissionPolicies on the real API server (issues: Helm chart, RBAC,
admission policies; 35, the manager's policy as an allowlist).

The policies are rendered from the chart with the real helm and applied as they are. The
identities under test are bound to cluster-admin, so RBAC allows every write and only the policy
decides. Writes are dry runs where they can be: policies are enforced on dry runs.

The install page is the contract:

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

Issue 47 holds the manager exactly (its namespace and name: a tenant's own ServiceAccount of the
same name is not the manager), takes the adoption allowance away ("The operator never adopts
anything"), and adds what a tenant must not forge, tried as a tenant (a namespace's admin,
through Kubernetes' own ``admin`` role): a Lease that passes for an install's
(crewlet-operator-leases), a ring member's will, and a Company's ring labels
(crewlet-operator-ring-labels, with manager.sharding.enabled); and where a company's pods may
run (managerWrites.placement).

and issue 35 asks for more: "The manager's policy as an allowlist of the shapes the operator
writes, not a list of bad things". So the manager's policy is tested on a table of cases
(:data:`CASES`): each writes one of the objects the operator renders for a company
(``crewlet_operator_daemon.company.desired_children``, never a hand-written imitation), as it is
(admitted) or changed into what a stolen manager token would write (denied, with the message that
says what is allowed). Each runs as the manager twice, impersonated and with its ServiceAccount's
own token, and every denied write is admitted for another ServiceAccount: the policy leaves others
alone.

For the tenant provisioner, "a ValidatingAdmissionPolicy that holds the subjects, and no one
else, to this: ..." (quoted at each test below).

Every rule has at least one admitted and one denied write; the last test checks that and prints
the counts, by category.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import itertools
import json
import os
import sys
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar, cast

import pytest
import pytest_asyncio
import yaml

from crewlet_operator._tasks import cancel_and_wait
from crewlet_operator.cache import Cache, ClusterView
from crewlet_operator.envtest import ControlPlane, binaries
from crewlet_operator.envtest.crds import install_crds, load_crds
from crewlet_operator.envtest.process import ManagerProcess
from crewlet_operator.envtest.wait import eventually
from crewlet_operator.errors import ApiError, ForbiddenError, InvalidError, NotFoundError
from crewlet_operator.incarnation import HOLDER_ANNOTATION, Holder
from crewlet_operator.kube import resources as r
from crewlet_operator.kube.client import Client, Scope
from crewlet_operator.kube.config import RestConfig
from crewlet_operator.kube.resources import Resource
from crewlet_operator.owners import controller_reference
from crewlet_operator.reconcile import Request
from crewlet_operator.sharding import by_namespace
from crewlet_operator.sharding.gate import Gate
from crewlet_operator.sharding.ring import (
    HashRing,
    RingLabels,
    member_name,
    member_names,
    slot_of,
)
from crewlet_operator.sharding.sharder import Sharder
from crewlet_operator.sharding.slots import MemberSlots
from crewlet_operator.testing import StaticRing, replica_pod
from crewlet_operator_daemon import ClusterFacts, Observed, desired_children
from crewlet_operator_daemon.api.v1alpha1 import COMPANY, ENGINE_CLASS
from crewlet_operator_daemon.cli import LEASE_LABELS, SHARDING_DOMAIN
from crewlet_operator_daemon.plan import MANAGER_NAME
from crewlet_operator_daemon.versions import CLAIM_ANNOTATION

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

# Release names other than the chart's: one that Helm's usual name helper kept as it is (it holds
# the chart's name, which unhooked the policy), one that ends with it, and the longest Helm takes.
RELEASES = ["prod", "crewlet-operator-prod", "team-crewlet-operator", "r" * 53]

Doc = dict[str, Any]
ClientFor = Callable[[RestConfig], Client]
T = TypeVar("T")

# -- the tally: every rule, admitted and denied ---------------------------------------------------

MANAGER_RULES: dict[str, tuple[str, str]] = {
    "label-on-write": ("identity", "every object it writes carries app.kubernetes.io/managed-by"),
    "label-to-change-or-delete": ("identity", "it changes or deletes only labelled objects"),
    "labels-allowlist": ("identity", "the operator's labels only (or as they were)"),
    "name-bound": ("identity", "named <company>-<what its kind may be>, with its component"),
    "annotations-allowlist": ("identity", "the operator's annotations only (any on an SA)"),
    "owner-on-create": ("identity", "created controlled by the Company its label names"),
    "owners-unchanged": ("identity", "no change ever changes an object's owners"),
    "secret-opaque": ("secrets", "every Secret it writes is Opaque"),
    "secret-never-immutable": ("secrets", "no Secret is ever made immutable"),
    "finalizers-unchanged": ("identity", "no finalizer set, changed or removed on a child"),
    "secret-data-controlled": ("secrets", "data changed or deleted only while a Company controls"),
    "sts-engine-service-account": ("pod security", "pods run as the company's <company>-engine"),
    "sts-host-namespaces": ("pod security", "no hostNetwork, hostPID or hostIPC"),
    "sts-privileged": ("pod security", "no privileged containers (containers, initContainers)"),
    "pod-spec-fields": ("pod security", "the operator's pod-spec fields only (no nodeName, ...)"),
    "pod-privilege-escalation": ("pod security", "no privilege escalation, drop ALL, add none"),
    "pod-non-root": ("pod security", "runAsNonRoot, never runAsUser 0"),
    "pod-profiles": ("pod security", "seccomp, AppArmor, SELinux, sysctls: restricted"),
    "pod-containers": ("pod security", "the one container engine, the operator's fields only"),
    "pod-host-ports": ("pod security", "no hostPort or hostIP"),
    "pod-priority": ("pod security", "no system-* PriorityClass"),
    "placement-tolerations": ("placement", "tolerations of allowed keys, never the control plane"),
    "placement-node-selection": ("placement", "nodes selected by managerWrites' node labels"),
    "placement-priority-classes": ("placement", "PriorityClasses managerWrites lists"),
    "engine-image": ("pod security", "images under managerWrites.engineImagePrefixes, if set"),
    "sts-host-path": ("volumes", "no hostPath volumes"),
    "sts-no-claim-volumes": ("volumes", "no pod template mounts a persistentVolumeClaim volume"),
    "pod-volume-types": ("volumes", "emptyDir and the company's config Secret only"),
    "sts-claim-templates-data": ("volumes", "claim templates are named data (never another's)"),
    "claim-template-shape": ("volumes", "the one claim template: no owners, sources, selectors"),
    "sts-claims-retained": ("volumes", "every StatefulSet keeps its claims (Retain, Retain)"),
    "pod-template-metadata": ("workload", "the operator's labels and annotations on pods"),
    "sts-shape": ("workload", "selector, serviceName, spec fields and update strategy"),
    "service-cluster-ip": ("services", "every Service is ClusterIP or headless, no externalIPs"),
    "service-selector": ("services", "a Service selects exactly its company's engine pods"),
    "pdb-selector": ("disruption budgets", "a budget selects one company's engine pods"),
    "pdb-max-unavailable": ("disruption budgets", "maxUnavailable: 1, AlwaysAllow"),
    "netpol-selector": ("network policies", "a NetworkPolicy selects one company's engine pods"),
    "netpol-ingress-only": ("network policies", "policyTypes [Ingress], no egress"),
    "netpol-rules": ("network policies", "8080, and 7422 from the company's own pods only"),
    "netpol-never-deleted": ("network policies", "no NetworkPolicy is ever deleted"),
    "ingress-shape": ("routes", "an Ingress: one exact host, /webhooks to <company>-api:8080"),
    "httproute-shape": ("routes", "an HTTPRoute: the same, no filters or extra matches"),
    "httproute-gateways": ("routes", "parentRefs only to Gateways managerWrites.gateways lists"),
    "claim-never-created": ("claims", "no PersistentVolumeClaim is ever created"),
    "claim-never-deleted": ("claims", "no PersistentVolumeClaim is ever deleted"),
    "claim-annotations-only": ("claims", "a claim changes only in its version annotation"),
    "claim-version-kept": ("claims", "the claim's high-water version is never lowered"),
    "status-version-kept": ("company status", "status.highestEngineVersion is never lowered"),
    "company-ring-labels": ("company", "a Company changes only in its two ring labels"),
    "company-ring-label-values": ("company", "shard and drain: a member's name or none"),
    "manager-only": ("scope", "the same writes by another ServiceAccount are unaffected"),
    "release-prefix": ("scope", "every release name keeps the manager checked"),
    "fullname-override": ("scope", "a fullnameOverride that renames the SA leaves it unchecked"),
    "manager-exact": ("scope", "the manager by namespace and name, not the end of a name"),
    "install-lease-writers": ("leases", "an install's Lease only from an install's manager"),
    "will-never-changes": ("leases", "a will is written once, never changed or removed"),
    "will-names-members": ("leases", "a will names member Leases only, on a member Lease"),
    "ring-labels-manager-only": ("ring labels", "only the manager writes a Company's ring labels"),
    "member-writes": ("member fence", "a Company's status from its member's Pod, or its heirs'"),
    "member-children": ("member fence", "no child from the Pod of a member Lease with a will"),
}
FORGERY_RULES = (
    "manager-exact",
    "install-lease-writers",
    "will-never-changes",
    "will-names-members",
    "ring-labels-manager-only",
    "member-writes",
    "member-children",
)
"""Rules tried outside the manager's table, by the tests of what a tenant can forge."""
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


async def admitted(rules: str | tuple[str, ...], write: Awaitable[T]) -> T:
    """The write is admitted (recorded for each of ``rules``, which it was held to)."""
    result = await write
    for rule in (rules,) if isinstance(rules, str) else rules:
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
    probe: Callable[[], Coroutine[Any, Any, Any]],
    policy: str,
    gone: tuple[str, ...] = (),
    says: str = "",
) -> None:
    """Wait until ``probe`` (a violating dry run) is refused by ``policy``, by none of the
    ``gone`` ones, and with a message that ``says`` so: policies compile asynchronously, and an
    API server enforces a policy's previous version for a moment after it changed."""

    async def refused() -> bool:
        try:
            await probe()
        except InvalidError as exc:
            return (
                f"'{policy}'" in exc.message
                and not any(f"'{g}'" in exc.message for g in gone)
                and says in exc.message
            )
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


def secret(namespace: str, name: str, labelled: bool = True, type_: str | None = "Opaque") -> Doc:
    meta: Doc = {"name": name, "namespace": namespace}
    if labelled:
        meta["labels"] = dict(MANAGED)
    obj: Doc = {"metadata": meta, "data": {"k": "dg=="}}
    if type_:
        obj["type"] = type_
    return obj


def sa_token_secret(namespace: str, name: str, labelled: bool = True) -> Doc:
    obj = secret(namespace, name, labelled, type_="kubernetes.io/service-account-token")
    obj["metadata"]["annotations"] = {"kubernetes.io/service-account.name": "default"}
    obj.pop("data")
    return obj


async def merge_patch(
    client: Client,
    resource: Resource,
    name: str,
    namespace: str | None,
    patch: Doc,
    field_manager: str = "policy-test",
) -> Doc:
    """A dry-run merge patch (an UPDATE in admission)."""
    answer: Doc = await client.request(
        "PATCH",
        resource.path(namespace, name),
        body=patch,
        content_type="application/merge-patch+json",
        query={"dryRun": "All", "fieldManager": field_manager},
    )
    return answer


# -- the operator's own shapes ---------------------------------------------------------------------

ACME = "acme"
HOST = "acme.example.com"
GATEWAY = {"namespace": PLATFORM_NS, "name": "public"}
IMAGE_PREFIX = "ghcr.io/crewlet/"
ENGINE_IMAGE = "ghcr.io/crewlet/crewlet-operator/engine:v0.2.0"
NEWER_IMAGE = "ghcr.io/crewlet/crewlet-operator/engine:v0.3.0"
HIGH_WATER = "0.2.0"
MANAGER_VALUES: Doc = {
    "managerWrites": {
        "gateways": [GATEWAY],
        "engineImagePrefixes": [IMAGE_PREFIX],
        "placement": {"nodeSelectorKeys": ["pool"], "priorityClasses": ["engines", "engines-high"]},
    }
}
"""The chart's values for the manager's policy under test: the Gateway the class's routes
attach to, the engine images' registry, and where engines may run (the taint keys left to the
default: any but the control plane's)."""
SOURCE_SECRETS: dict[tuple[str, str], Doc | None] = {
    (PLATFORM_NS, "keys"): {
        "metadata": {"name": "keys", "namespace": PLATFORM_NS},
        "data": {"anthropic": base64.b64encode(b"sk-test").decode()},
    }
}
FULL_CLASS: Doc = {
    "engine": {
        "image": ENGINE_IMAGE,
        "imagePullPolicy": "IfNotPresent",
        "imagePullSecrets": [{"name": "registry"}],
    },
    "storage": {"size": "12Gi", "storageClassName": "fast"},
    # S3 without static keys: workload identity, so the pods mount the ServiceAccount's token.
    "files": {"s3": {"bucket": "crewlet-files", "region": "eu-west-1"}},
    "modelKeys": [
        {
            "name": "ANTHROPIC_API_KEY",
            "secretRef": {"namespace": PLATFORM_NS, "name": "keys", "key": "anthropic"},
        }
    ],
    "env": [{"name": "LOG_COLOR", "value": "false"}],
    "telemetry": {"endpoint": "http://otel.observability:4318", "protocol": "http/protobuf"},
    "serviceAccount": {"annotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/x"}},
    "scheduling": {
        "nodeSelector": {"pool": "engines"},
        "tolerations": [
            {"key": "dedicated", "operator": "Equal", "value": "engines", "effect": "NoSchedule"}
        ],
        "affinity": {
            "podAntiAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 100,
                        "podAffinityTerm": {
                            "topologyKey": "kubernetes.io/hostname",
                            "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "crewlet"}},
                        },
                    }
                ]
            }
        },
        "priorityClassName": "engines",
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "ScheduleAnyway",
            }
        ],
    },
    "resources": {
        "data": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "2Gi"}},
        "seats": {"requests": {"cpu": "250m", "memory": "512Mi"}},
    },
    "networkPolicy": {
        "apiPeers": [
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "gateways"}}}
        ]
    },
    "exposure": {
        "gateway": {"parentRefs": [{"name": GATEWAY["name"], "namespace": GATEWAY["namespace"]}]},
        "ingress": {"className": "nginx", "tlsSecretName": "acme-tls"},
    },
}
"""A class that uses every feature the operator renders."""
PLAIN_CLASS: Doc = {"engine": {"image": ENGINE_IMAGE}}
"""A class that uses none: files on the volume, no scheduling, no exposure."""

Variant = Literal["ingress", "gateway", "plain", "sharded"]
"""Which render: the full class without the Gateway API (an Ingress), with it (an HTTPRoute),
the plain class for a company without a webhook hostname, or the full class without the
Gateway API by a replica of a sharded manager (its shard label on every child)."""

# -- sharding (manager.sharding.enabled) --------------------------------------------------------

RING = RingLabels(SHARDING_DOMAIN, MANAGER_NAME)
SHARD = RING.shard
SLOT = RING.slot
SLOT_OF_ACME = "17"
"""The slot label's value on the sharded render's children: any of 0 to 255 is admitted."""
"""shard.crewlet.ai/crewlet-operator: on a Company, the replica it is assigned to; on each
child, the replica that wrote it."""
DRAIN = RING.drain
"""drain.crewlet.ai/crewlet-operator: on a Company its replica is asked to let go."""
MEMBER = member_name(MANAGER_NAME, "crewlet-operator-controller-manager-6b8f7c9d5-k2x7q")
"""A replica's member name (its member Lease's), as the library names it."""
OLD_MEMBER = member_name(MANAGER_NAME, "crewlet-operator-controller-manager-6b8f7c9d5-z9m4w")
SHARDER = f"{MANAGER_NAME}-sharder"
"""The field manager the leader assigns and drains Companies as (the members write as
crewlet-operator)."""
RESOURCE_VERSION = "<the Company's resourceVersion>"
"""In a case's patch: the resourceVersion of the Company as it stands (every ring label write
is conditional on the version it was decided on)."""
Key = tuple[str, str]
Shapes = dict[Key, tuple[Resource, Doc]]

SA = ("ServiceAccount", "acme-engine")
API_TOKEN = ("Secret", "acme-api-token")
ENV = ("Secret", "acme-env")
CONFIG = ("Secret", "acme-config")
DATA_NETPOL = ("NetworkPolicy", "acme-data")
SEATS_NETPOL = ("NetworkPolicy", "acme-seats")
DATA_SERVICE = ("Service", "acme-data")
SEATS_SERVICE = ("Service", "acme-seats")
API_SERVICE = ("Service", "acme-api")
DATA_PDB = ("PodDisruptionBudget", "acme-data")
SEATS_PDB = ("PodDisruptionBudget", "acme-seats")
INGRESS = ("Ingress", "acme-webhooks")
HTTP_ROUTE = ("HTTPRoute", "acme-webhooks")
DATA_STS = ("StatefulSet", "acme-data")
SEATS_STS = ("StatefulSet", "acme-seats")
CLAIM = ("PersistentVolumeClaim", "data-acme-data-0")
MODEL_KEY = ("Secret", "model-key")
THEIRS = ("Service", "theirs")
THE_COMPANY = ("Company", ACME)


def company_doc(namespace: str) -> Doc:
    return {
        "metadata": {"name": ACME, "namespace": namespace},
        "spec": {"className": "standard", "webhookHostname": HOST},
    }


def shapes(company: Doc, variant: Variant = "ingress") -> Shapes:
    """What the operator renders for ``company`` (``desired_children``), and the objects around
    it that the manager writes or could: the data claim as the StatefulSet controller makes it
    from the claim template (with the version mark the operator keeps on it), a Secret and a
    Service someone else made, and the Company (its status)."""
    rendered = copy.deepcopy(company)
    spec = PLAIN_CLASS if variant == "plain" else FULL_CLASS
    if variant == "plain":
        rendered["spec"].pop("webhookHostname", None)
    engine_class = {
        "apiVersion": ENGINE_CLASS.api_version,
        "kind": ENGINE_CLASS.kind,
        "metadata": {"name": "standard"},
        "spec": copy.deepcopy(spec),
    }
    facts = ClusterFacts(
        gateway_api=variant == "gateway",
        operator_namespace=RELEASE_NS,
        shard_labels=((SLOT, SLOT_OF_ACME),) if variant == "sharded" else (),
    )
    children = desired_children(
        rendered,
        engine_class,
        Observed(secrets=SOURCE_SECRETS),
        facts,
        token_factory=lambda: "operator-token",
    )
    out: Shapes = {
        (a.resource.kind, a.object["metadata"]["name"]): (a.resource, a.object) for a in children
    }
    namespace = company["metadata"]["namespace"]
    template = out[DATA_STS][1]["spec"]["volumeClaimTemplates"][0]
    out[CLAIM] = (
        r.PERSISTENT_VOLUME_CLAIM,
        {
            "metadata": {
                "name": CLAIM[1],
                "namespace": namespace,
                "labels": dict(template["metadata"]["labels"]),
                "annotations": {CLAIM_ANNOTATION: HIGH_WATER},
            },
            "spec": copy.deepcopy(template["spec"]),
        },
    )
    out[MODEL_KEY] = (
        r.SECRET,
        {
            "metadata": {"name": MODEL_KEY[1], "namespace": namespace},
            "type": "Opaque",
            "data": {"k": "dg=="},
        },
    )
    out[THEIRS] = (
        r.SERVICE,
        {
            "metadata": {"name": THEIRS[1], "namespace": namespace},
            "spec": {"selector": {"app": "theirs"}, "ports": [{"port": 80}]},
        },
    )
    out[THE_COMPANY] = (
        COMPANY,
        {
            "metadata": {"name": ACME, "namespace": namespace},
            "status": {"highestEngineVersion": HIGH_WATER},
        },
    )
    return out


# -- changes to them -------------------------------------------------------------------------------

Change = Callable[[Doc], None]
FieldPath = tuple[str | int, ...]
DROP: Any = object()
"""The value that removes a field."""


def at(path: FieldPath, value: Any) -> Change:
    """Set the field at ``path`` (keys and list indexes, made as needed) to ``value``."""

    def change(obj: Doc) -> None:
        node: Any = obj
        for key in path[:-1]:
            node = node.setdefault(key, {}) if isinstance(key, str) else node[key]
        if value is DROP:
            node.pop(path[-1])
        else:
            node[path[-1]] = copy.deepcopy(value)

    return change


def add(path: FieldPath, item: Any) -> Change:
    """Append ``item`` to the list at ``path`` (made as needed)."""

    def change(obj: Doc) -> None:
        node: Any = obj
        for key in path[:-1]:
            node = node.setdefault(key, {}) if isinstance(key, str) else node[key]
        node.setdefault(path[-1], []).append(copy.deepcopy(item))

    return change


def both(*changes: Change) -> Change:
    def change(obj: Doc) -> None:
        for each in changes:
            each(obj)

    return change


LABELS: FieldPath = ("metadata", "labels")
ANNOTATIONS: FieldPath = ("metadata", "annotations")
OWNERS: FieldPath = ("metadata", "ownerReferences")
POD: FieldPath = ("spec", "template", "spec")
POD_SECURITY: FieldPath = (*POD, "securityContext")
ENGINE: FieldPath = (*POD, "containers", 0)
SECURITY: FieldPath = (*ENGINE, "securityContext")
VOLUMES: FieldPath = (*POD, "volumes")
TEMPLATE: FieldPath = ("spec", "template", "metadata")
CLAIM_TEMPLATE: FieldPath = ("spec", "volumeClaimTemplates", 0)
RESTRICTED_CONTAINER: Doc = {
    "name": "proxy",
    "image": ENGINE_IMAGE,
    "securityContext": {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": True,
    },
}
CONFIG_MAP_OWNER: Doc = {
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "name": "doomed",
    "uid": "5d8f1d8e-0000-4000-8000-00000000dead",
}
GLOBEX_PODS: Doc = {
    "matchLabels": {
        "app.kubernetes.io/name": "crewlet",
        "app.kubernetes.io/component": "data",
        "crewlet.ai/company": "globex",
    }
}
KUBE_DNS = {"k8s-app": "kube-dns"}
SOMEONE_ELSE = "someone-else"
"""The field manager of another writer (kubectl, an admin, another controller)."""


# -- the cases -------------------------------------------------------------------------------------

Op = Literal["create", "update", "patch", "delete", "status"]


@dataclass(frozen=True)
class Case:
    """One write of the manager: one of the operator's objects (``target``), written as the
    operator writes it or ``change``\\ d into what a stolen token would write.

    ``create`` is a dry-run create; the others act on the object as it stands, which the admin
    made first as the operator applied it (its field manager), then ``existing`` applied to it,
    then ``someone_else``'s fields applied by another field manager. ``update`` is a dry-run
    server-side apply of the changed object as the operator's field manager (how the operator
    writes), ``patch`` a dry-run merge patch (how it marks the data claim), ``status`` a dry-run
    apply of the Company's status, ``delete`` a dry-run delete.
    """

    id: str
    rules: tuple[str, ...]
    """Admitted: every rule the write is held to. Denied: the one rule that refuses it."""
    target: Key
    op: Op = "create"
    change: Change | None = None
    denied: str | None = None
    """A part of the refusal's message (``{ns}``: the namespace); None: admitted."""
    variant: Variant = "ingress"
    patch: Doc | None = None
    existing: Change | None = None
    someone_else: Doc | None = None
    field_manager: str = "policy-test"
    """The field manager of a ``patch``."""


IDENTITY = (
    "label-on-write",
    "labels-allowlist",
    "name-bound",
    "annotations-allowlist",
    "finalizers-unchanged",
)
CREATED = (*IDENTITY, "owner-on-create")
POD_RULES = (
    "sts-engine-service-account",
    "sts-host-namespaces",
    "sts-privileged",
    "pod-spec-fields",
    "pod-privilege-escalation",
    "pod-non-root",
    "pod-profiles",
    "pod-containers",
    "pod-host-ports",
    "pod-priority",
    "placement-tolerations",
    "placement-node-selection",
    "placement-priority-classes",
    "engine-image",
    "sts-host-path",
    "sts-no-claim-volumes",
    "pod-volume-types",
    "sts-claim-templates-data",
    "claim-template-shape",
    "sts-claims-retained",
    "pod-template-metadata",
    "sts-shape",
)
KIND_RULES: dict[str, tuple[str, ...]] = {
    "ServiceAccount": (),
    "Secret": ("secret-opaque", "secret-never-immutable"),
    "Service": ("service-cluster-ip", "service-selector"),
    "PodDisruptionBudget": ("pdb-selector", "pdb-max-unavailable"),
    "NetworkPolicy": ("netpol-selector", "netpol-ingress-only", "netpol-rules"),
    "Ingress": ("ingress-shape",),
    "HTTPRoute": ("httproute-shape", "httproute-gateways"),
    "StatefulSet": POD_RULES,
}
OPERATOR_CHILDREN: dict[Variant, tuple[Key, ...]] = {
    "ingress": (
        SA,
        API_TOKEN,
        ENV,
        CONFIG,
        DATA_NETPOL,
        SEATS_NETPOL,
        DATA_SERVICE,
        SEATS_SERVICE,
        API_SERVICE,
        DATA_PDB,
        SEATS_PDB,
        INGRESS,
        DATA_STS,
        SEATS_STS,
    ),
    "gateway": (HTTP_ROUTE,),
    "plain": (SA, ENV, CONFIG, DATA_NETPOL, DATA_STS, SEATS_STS),
}
OPERATOR_CHILDREN["sharded"] = OPERATOR_CHILDREN["ingress"]


def creates() -> list[Case]:
    """Every child the operator renders, created as it renders it: admitted."""
    return [
        Case(
            f"create-{variant}-{kind}-{name}",
            (*CREATED, *KIND_RULES[kind]),
            (kind, name),
            variant=variant,
        )
        for variant, keys in OPERATOR_CHILDREN.items()
        for kind, name in keys
    ]


def deny(case_id: str, rule: str, target: Key, message: str, **kwargs: Any) -> Case:
    """A write ``rule`` refuses, with ``message`` (a part of it) in the refusal."""
    return Case(case_id, (rule,), target, denied=message, **kwargs)


WRITES = "the operator's manager may write"

CASES: list[Case] = [
    *creates(),
    # -- identity: labels, names, annotations, owners (every kind) ----------------------------
    deny(
        "sa-unlabelled",
        "label-on-write",
        SA,
        f"{WRITES} ServiceAccount {{ns}}/acme-engine only with the label "
        "app.kubernetes.io/managed-by: crewlet-operator",
        change=at((*LABELS, "app.kubernetes.io/managed-by"), DROP),
    ),
    deny(
        "service-labelled-helm",
        "label-on-write",
        API_SERVICE,
        "only with the label app.kubernetes.io/managed-by: crewlet-operator",
        change=at((*LABELS, "app.kubernetes.io/managed-by"), "Helm"),
    ),
    deny(
        "service-label-dropped",
        "label-on-write",
        API_SERVICE,
        "only with the label app.kubernetes.io/managed-by: crewlet-operator",
        op="update",
        change=at((*LABELS, "app.kubernetes.io/managed-by"), DROP),
    ),
    deny(
        "delete-someone-elses-service",
        "label-to-change-or-delete",
        THEIRS,
        "may change or delete Service {ns}/theirs only if it is labelled "
        "app.kubernetes.io/managed-by: crewlet-operator",
        op="delete",
    ),
    deny(
        "label-someone-elses-service",
        "label-to-change-or-delete",
        THEIRS,
        "only if it is labelled app.kubernetes.io/managed-by: crewlet-operator",
        op="patch",
        patch={"metadata": {"labels": MANAGED}},
    ),
    Case(
        "delete-ingress-when-the-gateway-api-comes",
        ("label-to-change-or-delete",),
        INGRESS,
        op="delete",
    ),
    Case(
        "delete-httproute-when-the-gateway-api-goes",
        ("label-to-change-or-delete",),
        HTTP_ROUTE,
        op="delete",
        variant="gateway",
    ),
    deny(
        "statefulset-labelled-kube-dns",
        "labels-allowlist",
        DATA_STS,
        f"{WRITES} StatefulSet {{ns}}/acme-data only with the operator's labels "
        "(app.kubernetes.io/managed-by: crewlet-operator, app.kubernetes.io/name: crewlet, "
        "crewlet.ai/company: <company>, app.kubernetes.io/component: data or seats and, with "
        "sharding, slot.crewlet.ai/crewlet-operator: <slot, 0 to 255>), not k8s-app: kube-dns",
        change=at((*LABELS, "k8s-app"), "kube-dns"),
    ),
    deny(
        "secret-with-a-component",
        "labels-allowlist",
        ENV,
        "only with the operator's labels (app.kubernetes.io/managed-by: crewlet-operator, "
        "app.kubernetes.io/name: crewlet, crewlet.ai/company: <company> and, with sharding, "
        "slot.crewlet.ai/crewlet-operator: <slot, 0 to 255>), not "
        "app.kubernetes.io/component: data",
        change=at((*LABELS, "app.kubernetes.io/component"), "data"),
    ),
    deny(
        "label-added-on-update",
        "labels-allowlist",
        SA,
        "not team: blue",
        op="update",
        change=at((*LABELS, "team"), "blue"),
    ),
    Case(
        "someone-elses-label-kept",
        ("labels-allowlist", "owners-unchanged", "engine-image"),
        DATA_STS,
        op="update",
        someone_else={"metadata": {"labels": {"team": "blue"}}},
        change=at((*ENGINE, "image"), NEWER_IMAGE),
    ),
    deny(
        "service-account-for-anything",
        "name-bound",
        SA,
        "only as one of a company's own: labelled app.kubernetes.io/name: crewlet and "
        "crewlet.ai/company: <company>, and named <company>-engine, not acme-admin for company "
        "acme",
        change=at(("metadata", "name"), "acme-admin"),
    ),
    deny(
        "secret-of-another-name",
        "name-bound",
        API_TOKEN,
        "named <company>-api-token or <company>-env or <company>-config, not acme-kube-root-ca",
        change=at(("metadata", "name"), "acme-kube-root-ca"),
    ),
    deny(
        "secret-of-no-company",
        "name-bound",
        ENV,
        "(it has no crewlet.ai/company label)",
        change=at((*LABELS, "crewlet.ai/company"), DROP),
    ),
    deny(
        "a-second-network-policy",
        "name-bound",
        DATA_NETPOL,
        "named <company>-data or <company>-seats",
        change=both(at(("metadata", "name"), "acme-broker"), at(("spec", "ingress"), [{}])),
    ),
    deny(
        "service-named-kube-dns",
        "name-bound",
        API_SERVICE,
        "not kube-dns for company acme",
        change=at(("metadata", "name"), "kube-dns"),
    ),
    deny(
        "statefulset-of-the-other-component",
        "name-bound",
        DATA_STS,
        "not acme-data for company acme and component seats",
        change=at((*LABELS, "app.kubernetes.io/component"), "seats"),
    ),
    deny(
        "route-of-another-name",
        "name-bound",
        INGRESS,
        "named <company>-webhooks, not acme-api",
        change=at(("metadata", "name"), "acme-api"),
    ),
    deny(
        "ingress-canary-weight",
        "annotations-allowlist",
        INGRESS,
        f"{WRITES} Ingress {{ns}}/acme-webhooks only with the operator's annotations (none), not "
        "nginx.ingress.kubernetes.io/canary",
        change=at(
            ANNOTATIONS,
            {
                "nginx.ingress.kubernetes.io/canary": "true",
                "nginx.ingress.kubernetes.io/canary-weight": "100",
            },
        ),
    ),
    deny(
        "ingress-cert-manager-issuer",
        "annotations-allowlist",
        INGRESS,
        "not cert-manager.io/cluster-issuer",
        change=at((*ANNOTATIONS, "cert-manager.io/cluster-issuer"), "letsencrypt"),
    ),
    deny(
        "secret-annotated",
        "annotations-allowlist",
        ENV,
        "only with the operator's annotations (none), not kubernetes.io/service-account.name",
        change=at((*ANNOTATIONS, "kubernetes.io/service-account.name"), "default"),
    ),
    deny(
        "config-secret-annotated",
        "annotations-allowlist",
        CONFIG,
        "(crewlet.ai/config-hash, crewlet.ai/files-hash), not example.com/x",
        change=at((*ANNOTATIONS, "example.com/x"), "y"),
    ),
    deny(
        "statefulset-annotated-on-update",
        "annotations-allowlist",
        DATA_STS,
        "not example.com/x",
        op="update",
        change=at((*ANNOTATIONS, "example.com/x"), "y"),
    ),
    Case(
        "someone-elses-annotation-kept",
        ("annotations-allowlist", "service-selector"),
        API_SERVICE,
        op="update",
        someone_else={"metadata": {"annotations": {"example.com/note": "theirs"}}},
    ),
    Case(
        "service-account-annotations-changed",
        ("annotations-allowlist", "owners-unchanged"),
        SA,
        op="update",
        change=at((*ANNOTATIONS, "eks.amazonaws.com/role-arn"), "arn:aws:iam::1:role/y"),
    ),
    deny(
        "created-without-an-owner",
        "owner-on-create",
        SA,
        "may create ServiceAccount {ns}/acme-engine only controlled by the Company its label "
        "crewlet.ai/company names: one ownerReference, crewlet.ai Company acme with "
        "controller: true",
        change=at(OWNERS, DROP),
    ),
    deny(
        "created-owned-by-a-config-map",
        "owner-on-create",
        DATA_NETPOL,
        "only controlled by the Company its label crewlet.ai/company names",
        change=at(OWNERS, [CONFIG_MAP_OWNER]),
    ),
    deny(
        "created-owned-by-another-company",
        "owner-on-create",
        DATA_PDB,
        "only controlled by the Company its label crewlet.ai/company names",
        change=at((*OWNERS, 0, "name"), "globex"),
    ),
    deny(
        "created-not-controlled",
        "owner-on-create",
        API_SERVICE,
        "only controlled by the Company its label crewlet.ai/company names",
        change=at((*OWNERS, 0, "controller"), False),
    ),
    deny(
        "created-with-a-second-owner",
        "owner-on-create",
        SEATS_STS,
        "only controlled by the Company its label crewlet.ai/company names",
        change=add(OWNERS, CONFIG_MAP_OWNER),
    ),
    deny(
        "owner-added",
        "owners-unchanged",
        DATA_STS,
        "may not change the owners of StatefulSet {ns}/acme-data",
        op="update",
        change=add(OWNERS, CONFIG_MAP_OWNER),
    ),
    deny(
        "owners-dropped",
        "owners-unchanged",
        DATA_SERVICE,
        "may not change the owners of Service {ns}/acme-data",
        op="update",
        change=at(OWNERS, DROP),
    ),
    # -- Secrets ---------------------------------------------------------------------------------
    deny(
        "service-account-token-secret",
        "secret-opaque",
        ENV,
        f"{WRITES} only Opaque Secrets, not Secret {{ns}}/acme-env of type "
        "kubernetes.io/service-account-token",
        change=both(
            at(("type",), "kubernetes.io/service-account-token"),
            at(("data",), DROP),
            at((*ANNOTATIONS, "kubernetes.io/service-account.name"), "default"),
        ),
    ),
    deny(
        "docker-config-secret",
        "secret-opaque",
        ENV,
        "of type kubernetes.io/dockerconfigjson",
        change=both(
            at(("type",), "kubernetes.io/dockerconfigjson"),
            at(("data",), {".dockerconfigjson": "e30="}),
        ),
    ),
    # Issue 47: "The operator never adopts anything": no Secret of anyone else's gains the
    # label, is frozen, gains a finalizer or loses its labels or annotations.
    deny(
        "adopt-a-secret",
        "label-to-change-or-delete",
        MODEL_KEY,
        "may change or delete Secret {ns}/model-key only if it is labelled "
        "app.kubernetes.io/managed-by: crewlet-operator (it adopts nothing)",
        op="patch",
        patch={"metadata": {"labels": {**MANAGED, "crewlet.ai/company": ACME}}},
    ),
    deny(
        "adopt-a-secret-and-freeze-it",
        "label-to-change-or-delete",
        MODEL_KEY,
        "(it adopts nothing)",
        op="patch",
        patch={"metadata": {"labels": MANAGED}, "immutable": True},
    ),
    deny(
        "hold-a-users-secret-with-a-finalizer",
        "label-on-write",
        MODEL_KEY,
        f"{WRITES} Secret {{ns}}/model-key only with the label "
        "app.kubernetes.io/managed-by: crewlet-operator",
        op="patch",
        patch={"metadata": {"finalizers": ["example.com/hold"]}},
    ),
    deny(
        "strip-a-users-secret",
        "label-on-write",
        MODEL_KEY,
        f"{WRITES} Secret {{ns}}/model-key only with the label "
        "app.kubernetes.io/managed-by: crewlet-operator",
        op="patch",
        existing=both(at((*LABELS, "team"), "payments"), at((*ANNOTATIONS, "owner"), "ledger")),
        patch={"metadata": {"labels": {"team": None}, "annotations": {"owner": None}}},
    ),
    deny(
        "config-made-immutable",
        "secret-never-immutable",
        CONFIG,
        "may never make Secret {ns}/acme-config immutable",
        op="update",
        change=at(("immutable",), True),
    ),
    deny(
        "finalizer-on-create",
        "finalizers-unchanged",
        SA,
        "may not set, change or remove the finalizers of ServiceAccount {ns}/acme-engine",
        change=at(("metadata", "finalizers"), ["example.com/hold"]),
    ),
    deny(
        "finalizer-added",
        "finalizers-unchanged",
        API_SERVICE,
        "may not set, change or remove the finalizers of Service {ns}/acme-api",
        op="update",
        change=at(("metadata", "finalizers"), ["example.com/hold"]),
    ),
    Case(
        "copied-key-rotated",
        ("secret-data-controlled", "owners-unchanged"),
        ENV,
        op="update",
        change=at(("data", "ANTHROPIC_API_KEY"), base64.b64encode(b"sk-rotated").decode()),
    ),
    Case(
        "controlled-secret-deleted",
        ("secret-data-controlled", "label-to-change-or-delete"),
        API_TOKEN,
        op="delete",
    ),
    deny(
        "uncontrolled-secret-rewritten",
        "secret-data-controlled",
        ENV,
        "may change the data of Secret {ns}/acme-env only while a Company controls it",
        op="patch",
        existing=at(OWNERS, DROP),
        patch={"data": {"ANTHROPIC_API_KEY": "b3RoZXI="}},
    ),
    deny(
        "uncontrolled-secret-deleted",
        "secret-data-controlled",
        ENV,
        "may delete Secret {ns}/acme-env only while a Company controls it",
        op="delete",
        existing=at(OWNERS, DROP),
    ),
    # -- StatefulSets: the pods ------------------------------------------------------------------
    deny(
        "default-service-account",
        "sts-engine-service-account",
        DATA_STS,
        f"{WRITES} StatefulSet {{ns}}/acme-data only with pods that run as a ServiceAccount named "
        "*-engine, its company's acme-engine, not the namespace's default",
        change=at((*POD, "serviceAccountName"), DROP),
    ),
    deny(
        "another-companys-service-account",
        "sts-engine-service-account",
        DATA_STS,
        "its company's acme-engine, not globex-engine",
        change=at((*POD, "serviceAccountName"), "globex-engine"),
    ),
    *(
        deny(
            f"host-{field}",
            "sts-host-namespaces",
            DATA_STS,
            "only with pods that do not use the node's network, PID or IPC namespaces",
            change=at((*POD, field), True),
        )
        for field in ("hostNetwork", "hostPID", "hostIPC")
    ),
    deny(
        "privileged-engine",
        "sts-privileged",
        DATA_STS,
        "only without privileged containers",
        change=both(
            at((*SECURITY, "privileged"), True), at((*SECURITY, "allowPrivilegeEscalation"), DROP)
        ),
    ),
    deny(
        "privileged-init-container",
        "sts-privileged",
        DATA_STS,
        "only without privileged containers",
        change=at(
            (*POD, "initContainers"),
            [{"name": "init", "image": ENGINE_IMAGE, "securityContext": {"privileged": True}}],
        ),
    ),
    *(
        deny(
            f"pod-{field}",
            "pod-spec-fields",
            DATA_STS,
            f"{WRITES} StatefulSet {{ns}}/acme-data only with the pod-spec fields the operator "
            "writes (serviceAccountName, serviceAccount, ",
            change=at((*POD, field), value),
        )
        for field, value in (
            ("nodeName", "kwok-node"),
            ("runtimeClassName", "unconfined"),
            ("initContainers", [RESTRICTED_CONTAINER]),
            ("shareProcessNamespace", True),
            ("hostUsers", True),
            ("schedulerName", "their-scheduler"),
        )
    ),
    deny(
        "dns-config-added",
        "pod-spec-fields",
        DATA_STS,
        "not dnsConfig",
        op="update",
        change=at((*POD, "dnsConfig"), {"nameservers": ["203.0.113.53"]}),
    ),
    Case(
        "someone-elses-pod-field-kept",
        ("pod-spec-fields", "engine-image"),
        DATA_STS,
        op="update",
        someone_else={
            "spec": {
                "template": {"spec": {"dnsConfig": {"options": [{"name": "ndots", "value": "2"}]}}}
            }
        },
        change=at((*ENGINE, "image"), NEWER_IMAGE),
    ),
    deny(
        "capability-sys-admin",
        "pod-privilege-escalation",
        DATA_STS,
        "only with containers that cannot gain privileges (allowPrivilegeEscalation: false, "
        "capabilities drop ALL and add none), as the restricted Pod Security profile requires, "
        "not engine",
        change=at((*SECURITY, "capabilities", "add"), ["SYS_ADMIN"]),
    ),
    deny(
        "privilege-escalation",
        "pod-privilege-escalation",
        DATA_STS,
        "only with containers that cannot gain privileges",
        change=at((*SECURITY, "allowPrivilegeEscalation"), True),
    ),
    deny(
        "privilege-escalation-left-out",
        "pod-privilege-escalation",
        SEATS_STS,
        "only with containers that cannot gain privileges",
        op="update",
        change=at((*SECURITY, "allowPrivilegeEscalation"), DROP),
    ),
    deny(
        "capabilities-kept",
        "pod-privilege-escalation",
        DATA_STS,
        "only with containers that cannot gain privileges",
        change=at((*SECURITY, "capabilities"), DROP),
    ),
    deny(
        "root-user",
        "pod-non-root",
        DATA_STS,
        "only with pods that run as a non-root user",
        change=both(at((*POD_SECURITY, "runAsUser"), 0), at((*POD_SECURITY, "runAsNonRoot"), DROP)),
    ),
    deny(
        "run-as-non-root-left-out",
        "pod-non-root",
        DATA_STS,
        "only with pods that run as a non-root user",
        op="update",
        change=at((*POD_SECURITY, "runAsNonRoot"), DROP),
    ),
    deny(
        "container-may-run-as-root",
        "pod-non-root",
        DATA_STS,
        "only with pods that run as a non-root user",
        change=at((*SECURITY, "runAsNonRoot"), False),
    ),
    deny(
        "container-root-user",
        "pod-non-root",
        SEATS_STS,
        "only with pods that run as a non-root user",
        change=at((*SECURITY, "runAsUser"), 0),
    ),
    *(
        deny(
            f"profile-{case}",
            "pod-profiles",
            DATA_STS,
            "only within the restricted Pod Security profile",
            change=change,
        )
        for case, change in (
            ("seccomp-unconfined", at((*POD_SECURITY, "seccompProfile"), {"type": "Unconfined"})),
            ("seccomp-left-out", at((*POD_SECURITY, "seccompProfile"), DROP)),
            (
                "container-seccomp-unconfined",
                at((*SECURITY, "seccompProfile"), {"type": "Unconfined"}),
            ),
            ("apparmor-unconfined", at((*SECURITY, "appArmorProfile"), {"type": "Unconfined"})),
            (
                "pod-apparmor-unconfined",
                at((*POD_SECURITY, "appArmorProfile"), {"type": "Unconfined"}),
            ),
            ("selinux-spc", at((*SECURITY, "seLinuxOptions"), {"type": "spc_t"})),
            ("selinux-user", at((*POD_SECURITY, "seLinuxOptions"), {"user": "system_u"})),
            (
                "sysctls",
                at((*POD_SECURITY, "sysctls"), [{"name": "kernel.shm_rmid_forced", "value": "1"}]),
            ),
        )
    ),
    deny(
        "sidecar",
        "pod-containers",
        DATA_STS,
        f"{WRITES} StatefulSet {{ns}}/acme-data only with its one container, engine, with the "
        "fields the operator writes (name, image, ",
        change=add((*POD, "containers"), RESTRICTED_CONTAINER),
    ),
    deny(
        "engine-command",
        "pod-containers",
        DATA_STS,
        "not container engine",
        change=at((*ENGINE, "command"), ["/bin/sh", "-c", "cat /var/lib/crewlet/store/*"]),
    ),
    deny(
        "probe-runs-a-command",
        "pod-containers",
        DATA_STS,
        "probes by httpGet to the pod itself, lifecycle hooks that only sleep), not container "
        "engine",
        change=at((*ENGINE, "livenessProbe"), {"exec": {"command": ["/bin/sh", "-c", "id"]}}),
    ),
    deny(
        "probe-sent-elsewhere",
        "pod-containers",
        SEATS_STS,
        "not container engine",
        op="update",
        change=at((*ENGINE, "readinessProbe", "httpGet", "host"), "169.254.169.254"),
    ),
    deny(
        "hook-runs-a-command",
        "pod-containers",
        DATA_STS,
        "not container engine",
        change=at((*ENGINE, "lifecycle", "postStart"), {"exec": {"command": ["/bin/sh"]}}),
    ),
    deny(
        "working-dir-added",
        "pod-containers",
        DATA_STS,
        "not container engine",
        op="update",
        change=at((*ENGINE, "workingDir"), "/tmp"),
    ),
    Case(
        "someone-elses-container-field-kept",
        ("pod-containers", "engine-image"),
        DATA_STS,
        op="update",
        someone_else={
            "spec": {
                "template": {"spec": {"containers": [{"name": "engine", "workingDir": "/tmp"}]}}
            }
        },
        change=at((*ENGINE, "image"), NEWER_IMAGE),
    ),
    deny(
        "host-port",
        "pod-host-ports",
        DATA_STS,
        "only without host ports (hostPort, hostIP) on its containers",
        change=at((*ENGINE, "ports", 1, "hostPort"), 7422),
    ),
    deny(
        "system-node-critical",
        "pod-priority",
        DATA_STS,
        "only without a system-* PriorityClass (system-cluster-critical, system-node-critical "
        "are the cluster's own), not system-node-critical",
        change=at((*POD, "priorityClassName"), "system-node-critical"),
    ),
    deny(
        "system-cluster-critical",
        "pod-priority",
        SEATS_STS,
        "not system-cluster-critical",
        op="update",
        change=at((*POD, "priorityClassName"), "system-cluster-critical"),
    ),
    Case(
        "priority-class-changed",
        ("pod-priority", "placement-priority-classes", "owners-unchanged"),
        SEATS_STS,
        op="update",
        change=at((*POD, "priorityClassName"), "engines-high"),
    ),
    # Issue 47: "a chart value for the tolerations, node selectors and priority classes a
    # company's pods may use (default: never the control-plane taint)".
    deny(
        "tolerates-the-control-plane",
        "placement-tolerations",
        DATA_STS,
        "only with tolerations of taint keys other than the control plane's "
        "(node-role.kubernetes.io/control-plane, node-role.kubernetes.io/master; list the keys "
        "engines may tolerate in the chart value managerWrites.placement.tolerationKeys), each "
        "with a key, not node-role.kubernetes.io/control-plane",
        change=add(
            (*POD, "tolerations"),
            {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"},
        ),
    ),
    deny(
        "tolerates-every-taint",
        "placement-tolerations",
        SEATS_STS,
        "not a toleration of every taint",
        op="update",
        change=add((*POD, "tolerations"), {"operator": "Exists"}),
    ),
    deny(
        "selects-the-control-plane",
        "placement-node-selection",
        DATA_STS,
        "by the labels the chart value managerWrites.placement.nodeSelectorKeys lists (pool), "
        "not node-role.kubernetes.io/control-plane",
        change=at((*POD, "nodeSelector", "node-role.kubernetes.io/control-plane"), ""),
    ),
    deny(
        "names-its-node",
        "placement-node-selection",
        SEATS_STS,
        "not nodeAffinity",
        op="update",
        change=at(
            (*POD, "affinity", "nodeAffinity"),
            {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": ["cp-1"]}
                            ]
                        }
                    ]
                }
            },
        ),
    ),
    Case(
        "node-affinity-on-a-listed-label",
        ("placement-node-selection", "owners-unchanged"),
        SEATS_STS,
        op="update",
        change=at(
            (*POD, "affinity", "nodeAffinity"),
            {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 10,
                        "preference": {
                            "matchExpressions": [
                                {"key": "pool", "operator": "In", "values": ["engines"]}
                            ]
                        },
                    }
                ]
            },
        ),
    ),
    deny(
        "priority-class-not-listed",
        "placement-priority-classes",
        DATA_STS,
        "only with a PriorityClass the chart value managerWrites.placement.priorityClasses "
        "lists (engines, engines-high), not tenant-favourite",
        change=at((*POD, "priorityClassName"), "tenant-favourite"),
    ),
    deny(
        "image-of-its-own",
        "engine-image",
        DATA_STS,
        "only with images under the chart value managerWrites.engineImagePrefixes "
        "(ghcr.io/crewlet/), not docker.io/attacker/engine:v0.2.0",
        change=at((*ENGINE, "image"), "docker.io/attacker/engine:v0.2.0"),
    ),
    deny(
        "image-of-a-lookalike-registry-path",
        "engine-image",
        SEATS_STS,
        "not ghcr.io/crewlet-evil/engine:v0.3.0",
        op="update",
        change=at((*ENGINE, "image"), "ghcr.io/crewlet-evil/engine:v0.3.0"),
    ),
    Case(
        "newer-engine",
        ("engine-image", "pod-containers", "pod-template-metadata", "owners-unchanged"),
        DATA_STS,
        op="update",
        change=at((*ENGINE, "image"), NEWER_IMAGE),
    ),
    Case(
        "suspended",
        ("sts-shape", "owners-unchanged"),
        SEATS_STS,
        op="update",
        change=at(("spec", "replicas"), 0),
    ),
    Case(
        "tolerations-changed",
        ("pod-spec-fields", "owners-unchanged"),
        DATA_STS,
        op="update",
        change=at((*POD, "tolerations"), [{"key": "dedicated", "operator": "Exists"}]),
    ),
    # -- StatefulSets: volumes and claims --------------------------------------------------------
    deny(
        "host-path",
        "sts-host-path",
        DATA_STS,
        f"{WRITES} StatefulSet {{ns}}/acme-data only without hostPath volumes",
        change=add(VOLUMES, {"name": "docker", "hostPath": {"path": "/var/run/docker.sock"}}),
    ),
    deny(
        "claim-volume",
        "sts-no-claim-volumes",
        DATA_STS,
        "only without persistentVolumeClaim volumes in its pod template",
        change=add(
            VOLUMES,
            {"name": "theirs", "persistentVolumeClaim": {"claimName": "data-globex-data-0"}},
        ),
    ),
    *(
        deny(
            f"volume-{name}",
            "pod-volume-types",
            DATA_STS,
            "only with emptyDir volumes and the secret volume of its company's acme-config, not "
            f"volume {name}",
            change=add(VOLUMES, {"name": name, **source}),
        )
        for name, source in (
            ("nfs", {"nfs": {"server": "203.0.113.2", "path": "/exports"}}),
            (
                "iscsi",
                {
                    "iscsi": {
                        "targetPortal": "203.0.113.3:3260",
                        "iqn": "iqn.2001-04.com.example:disk",
                        "lun": 0,
                    }
                },
            ),
            (
                "ephemeral",
                {
                    "ephemeral": {
                        "volumeClaimTemplate": {
                            "spec": {
                                "accessModes": ["ReadWriteOnce"],
                                "resources": {"requests": {"storage": "1Gi"}},
                            }
                        }
                    }
                },
            ),
            ("token", {"secret": {"secretName": "acme-api-token"}}),
            (
                "projected",
                {
                    "projected": {
                        "sources": [{"serviceAccountToken": {"path": "token", "audience": "vault"}}]
                    }
                },
            ),
        )
    ),
    deny(
        "config-map-volume-added",
        "pod-volume-types",
        SEATS_STS,
        "not volume extra",
        op="update",
        change=add(VOLUMES, {"name": "extra", "configMap": {"name": "extra"}}),
    ),
    Case(
        "someone-elses-volume-kept",
        ("pod-volume-types", "engine-image"),
        DATA_STS,
        op="update",
        someone_else={
            "spec": {
                "template": {
                    "spec": {"volumes": [{"name": "extra", "configMap": {"name": "extra"}}]}
                }
            }
        },
        change=at((*ENGINE, "image"), NEWER_IMAGE),
    ),
    deny(
        "claim-template-of-another-name",
        "sts-claim-templates-data",
        DATA_STS,
        "only with claim templates named data (its claims are then data-acme-data-<n>, never "
        "another's)",
        change=add(
            ("spec", "volumeClaimTemplates"),
            {
                "metadata": {"name": "cache"},
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "1Gi"}},
                },
            },
        ),
    ),
    *(
        deny(
            f"claim-template-{case}",
            "claim-template-shape",
            target,
            f"{WRITES} StatefulSet {{ns}}/{target[1]} only with the operator's claim template: "
            "one, data, on <company>-data (none on <company>-seats)",
            change=change,
        )
        for case, target, change in (
            (
                "owned",
                DATA_STS,
                at((*CLAIM_TEMPLATE, "metadata", "ownerReferences"), [CONFIG_MAP_OWNER]),
            ),
            (
                "finalizer",
                DATA_STS,
                at((*CLAIM_TEMPLATE, "metadata", "finalizers"), ["example.com/hold"]),
            ),
            (
                "annotated",
                DATA_STS,
                at((*CLAIM_TEMPLATE, "metadata", "annotations"), {"example.com/x": "y"}),
            ),
            (
                "labelled",
                DATA_STS,
                at((*CLAIM_TEMPLATE, "metadata", "labels", "k8s-app"), "kube-dns"),
            ),
            (
                "cloned",
                DATA_STS,
                at(
                    (*CLAIM_TEMPLATE, "spec", "dataSource"),
                    {"kind": "PersistentVolumeClaim", "name": "data-globex-data-0"},
                ),
            ),
            (
                "populated",
                DATA_STS,
                at(
                    (*CLAIM_TEMPLATE, "spec", "dataSourceRef"),
                    {"kind": "PersistentVolumeClaim", "name": "data-globex-data-0"},
                ),
            ),
            ("bound", DATA_STS, at((*CLAIM_TEMPLATE, "spec", "volumeName"), "pv-globex")),
            (
                "selecting",
                DATA_STS,
                at(
                    (*CLAIM_TEMPLATE, "spec", "selector"),
                    {"matchLabels": {"crewlet.ai/company": "globex"}},
                ),
            ),
            (
                "on-seats",
                SEATS_STS,
                at(
                    ("spec", "volumeClaimTemplates"),
                    [
                        {
                            "metadata": {"name": "data"},
                            "spec": {
                                "accessModes": ["ReadWriteOnce"],
                                "resources": {"requests": {"storage": "1Gi"}},
                            },
                        }
                    ],
                ),
            ),
        )
    ),
    *(
        deny(
            f"claims-{deleted}-{scaled}",
            "sts-claims-retained",
            DATA_STS,
            f"{WRITES} StatefulSet {{ns}}/acme-data only if it keeps its claims: "
            "persistentVolumeClaimRetentionPolicy whenDeleted Retain and whenScaled Retain, not "
            f"whenDeleted {deleted} and whenScaled {scaled}",
            op=op,
            change=at(
                ("spec", "persistentVolumeClaimRetentionPolicy"),
                {"whenDeleted": deleted, "whenScaled": scaled},
            ),
        )
        for deleted, scaled, op in (
            ("Delete", "Retain", "create"),
            ("Retain", "Delete", "update"),
            ("Delete", "Delete", "update"),
        )
    ),
    deny(
        "claims-deleted-with-it",
        "sts-claims-retained",
        DATA_STS,
        "may delete StatefulSet {ns}/acme-data only if it keeps its claims",
        op="delete",
        existing=at(("spec", "persistentVolumeClaimRetentionPolicy", "whenDeleted"), "Delete"),
    ),
    Case(
        "deleted-keeping-its-claims",
        ("sts-claims-retained", "label-to-change-or-delete"),
        DATA_STS,
        op="delete",
    ),
    # -- StatefulSets: the workload ----------------------------------------------------------------
    deny(
        "pods-labelled-kube-dns",
        "pod-template-metadata",
        DATA_STS,
        f"{WRITES} StatefulSet {{ns}}/acme-data only with the operator's labels on its pod "
        "template (app.kubernetes.io/managed-by: crewlet-operator, app.kubernetes.io/name: "
        "crewlet, crewlet.ai/company: acme, app.kubernetes.io/component: data) and annotations "
        "(crewlet.ai/config-hash, crewlet.ai/secrets-hash), not k8s-app",
        change=at((*TEMPLATE, "labels", "k8s-app"), "kube-dns"),
    ),
    deny(
        "pods-apparmor-annotation",
        "pod-template-metadata",
        DATA_STS,
        "not container.apparmor.security.beta.kubernetes.io/engine",
        change=at(
            (*TEMPLATE, "annotations", "container.apparmor.security.beta.kubernetes.io/engine"),
            "unconfined",
        ),
    ),
    deny(
        "restarted-by-the-manager",
        "pod-template-metadata",
        SEATS_STS,
        "not kubectl.kubernetes.io/restartedAt",
        op="update",
        change=at(
            (*TEMPLATE, "annotations", "kubectl.kubernetes.io/restartedAt"), "2026-01-01T00:00:00Z"
        ),
    ),
    Case(
        "restarted-by-kubectl-kept",
        ("pod-template-metadata", "engine-image"),
        DATA_STS,
        op="update",
        someone_else={
            "spec": {
                "template": {
                    "metadata": {
                        "annotations": {"kubectl.kubernetes.io/restartedAt": "2026-01-01T00:00:00Z"}
                    }
                }
            }
        },
        change=at((*ENGINE, "image"), NEWER_IMAGE),
    ),
    deny(
        "selector-of-every-component",
        "sts-shape",
        DATA_STS,
        f"{WRITES} StatefulSet {{ns}}/acme-data only as the operator writes one: spec fields ",
        change=at(("spec", "selector", "matchLabels", "app.kubernetes.io/component"), DROP),
    ),
    deny(
        "governed-by-kube-dns",
        "sts-shape",
        DATA_STS,
        "serviceName acme-data",
        change=at(("spec", "serviceName"), "kube-dns"),
    ),
    deny(
        "updates-held-back",
        "sts-shape",
        SEATS_STS,
        "updateStrategy RollingUpdate without a partition",
        op="update",
        change=at(("spec", "updateStrategy", "rollingUpdate", "partition"), 5),
    ),
    deny(
        "min-ready-seconds",
        "sts-shape",
        SEATS_STS,
        "only as the operator writes one",
        op="update",
        change=at(("spec", "minReadySeconds"), 3600),
    ),
    # -- Services --------------------------------------------------------------------------------
    *(
        deny(
            f"service-{case}",
            "service-cluster-ip",
            API_SERVICE,
            f"{WRITES} Service {{ns}}/acme-api only of type ClusterIP (headless or not) and "
            f"without externalIPs, not {shown}",
            change=change,
        )
        for case, change, shown in (
            ("load-balancer", at(("spec", "type"), "LoadBalancer"), "of type LoadBalancer"),
            ("node-port", at(("spec", "type"), "NodePort"), "of type NodePort"),
            (
                "external-name",
                both(
                    at(("spec", "type"), "ExternalName"),
                    at(("spec", "externalName"), "evil.example.com"),
                ),
                "of type ExternalName",
            ),
            (
                "external-ips",
                at(("spec", "externalIPs"), ["203.0.113.7"]),
                "of type ClusterIP with externalIPs",
            ),
        )
    ),
    *(
        deny(
            f"service-selecting-{case}",
            "service-selector",
            target,
            f"{WRITES} Service {{ns}}/{target[1]} only selecting exactly its company's engine "
            f"pods: app.kubernetes.io/name: crewlet, app.kubernetes.io/component: {component}, "
            "crewlet.ai/company: acme",
            change=at(("spec", "selector"), selector),
            op=op,
        )
        for case, target, component, selector, op in (
            ("kube-dns", API_SERVICE, "data", KUBE_DNS, "create"),
            (
                "seats",
                API_SERVICE,
                "data",
                {
                    **GLOBEX_PODS["matchLabels"],
                    "crewlet.ai/company": ACME,
                    "app.kubernetes.io/component": "seats",
                },
                "create",
            ),
            ("another-company", DATA_SERVICE, "data", GLOBEX_PODS["matchLabels"], "update"),
            ("nothing", SEATS_SERVICE, "seats", DROP, "create"),
        )
    ),
    # -- PodDisruptionBudgets --------------------------------------------------------------------
    *(
        deny(
            f"budget-over-{case}",
            "pdb-selector",
            DATA_PDB,
            f"{WRITES} PodDisruptionBudget {{ns}}/acme-data only selecting one company's engine "
            "pods: matchLabels exactly app.kubernetes.io/name: crewlet, "
            "app.kubernetes.io/component: data or seats, and a non-empty crewlet.ai/company (its "
            "own: app.kubernetes.io/component: data, crewlet.ai/company: acme), and no "
            "matchExpressions",
            change=at(("spec", "selector"), selector),
        )
        for case, selector in (
            ("kube-dns", {"matchLabels": KUBE_DNS}),
            ("another-company", GLOBEX_PODS),
            ("everything", {}),
            (
                "expressions",
                {
                    **GLOBEX_PODS,
                    "matchExpressions": [{"key": "crewlet.ai/company", "operator": "Exists"}],
                },
            ),
        )
    ),
    *(
        deny(
            f"budget-{case}",
            "pdb-max-unavailable",
            target,
            "only with maxUnavailable: 1, no minAvailable, and unhealthyPodEvictionPolicy: "
            "AlwaysAllow (a budget that allows no disruption holds up every drain of the node)",
            op=op,
            change=change,
        )
        for case, target, op, change in (
            ("no-disruption", DATA_PDB, "create", at(("spec", "maxUnavailable"), 0)),
            (
                "min-available",
                DATA_PDB,
                "create",
                both(at(("spec", "maxUnavailable"), DROP), at(("spec", "minAvailable"), 1)),
            ),
            (
                "if-healthy",
                SEATS_PDB,
                "update",
                at(("spec", "unhealthyPodEvictionPolicy"), "IfHealthyBudget"),
            ),
        )
    ),
    Case(
        "budget-applied-again", ("pdb-max-unavailable", "owners-unchanged"), SEATS_PDB, op="update"
    ),
    # -- NetworkPolicies -------------------------------------------------------------------------
    *(
        deny(
            f"network-policy-over-{case}",
            "netpol-selector",
            DATA_NETPOL,
            f"{WRITES} NetworkPolicy {{ns}}/acme-data only selecting one company's engine pods",
            change=at(("spec", "podSelector"), selector),
        )
        for case, selector in (("everything", {}), ("another-company", GLOBEX_PODS))
    ),
    deny(
        "network-policy-egress",
        "netpol-ingress-only",
        SEATS_NETPOL,
        f"{WRITES} NetworkPolicy {{ns}}/acme-seats only for ingress: policyTypes exactly "
        "[Ingress] and no egress rules",
        change=both(
            at(("spec", "policyTypes"), ["Ingress", "Egress"]), at(("spec", "egress"), [{}])
        ),
    ),
    *(
        deny(
            f"ingress-{case}",
            "netpol-rules",
            target,
            f"{WRITES} NetworkPolicy {{ns}}/{target[1]} only with the operator's ingress rules",
            op=op,
            change=change,
        )
        for case, target, op, change in (
            ("from-everywhere-to-everything", DATA_NETPOL, "create", at(("spec", "ingress"), [{}])),
            (
                "leaf-port-from-every-namespace",
                DATA_NETPOL,
                "update",
                at(("spec", "ingress", 0, "from"), [{"namespaceSelector": {}}]),
            ),
            (
                "leaf-port-from-the-api-peers",
                DATA_NETPOL,
                "create",
                add(("spec", "ingress", 1, "ports"), {"protocol": "TCP", "port": 7422}),
            ),
            (
                "ssh",
                DATA_NETPOL,
                "create",
                add(("spec", "ingress", 1, "ports"), {"protocol": "TCP", "port": 22}),
            ),
            ("every-port", DATA_NETPOL, "create", at(("spec", "ingress", 1, "ports"), DROP)),
            (
                "port-range",
                DATA_NETPOL,
                "create",
                at(("spec", "ingress", 1, "ports", 0, "endPort"), 9000),
            ),
            (
                "udp",
                SEATS_NETPOL,
                "create",
                at(("spec", "ingress", 0, "ports", 0, "protocol"), "UDP"),
            ),
            (
                "leaf-port-on-seats",
                SEATS_NETPOL,
                "update",
                add(
                    ("spec", "ingress"),
                    {
                        "from": [
                            {
                                "podSelector": {
                                    "matchLabels": {
                                        "app.kubernetes.io/name": "crewlet",
                                        "crewlet.ai/company": ACME,
                                    }
                                }
                            }
                        ],
                        "ports": [{"protocol": "TCP", "port": 7422}],
                    },
                ),
            ),
        )
    ),
    Case(
        "api-peers-changed",
        ("netpol-rules", "netpol-never-deleted", "owners-unchanged"),
        DATA_NETPOL,
        op="update",
        change=add(("spec", "ingress", 1, "from"), {"ipBlock": {"cidr": "10.0.0.0/8"}}),
    ),
    deny(
        "network-policy-deleted",
        "netpol-never-deleted",
        DATA_NETPOL,
        "may never delete a NetworkPolicy: NetworkPolicy {ns}/acme-data keeps a company's "
        "unauthenticated leaf port to its own pods",
        op="delete",
    ),
    # -- routes ----------------------------------------------------------------------------------
    *(
        deny(
            f"ingress-{case}",
            "ingress-shape",
            INGRESS,
            f"{WRITES} Ingress {{ns}}/acme-webhooks only as its company's webhook route: one rule "
            "with one exact host (no *), one path /webhooks (Prefix) to the Service acme-api port "
            "8080, TLS for that host only, and no defaultBackend",
            op=op,
            change=change,
        )
        for case, op, change in (
            ("every-path", "create", at(("spec", "rules", 0, "http", "paths", 0, "path"), "/")),
            (
                "wildcard-host",
                "create",
                both(
                    at(("spec", "rules", 0, "host"), "*.example.com"),
                    at(("spec", "tls", 0, "hosts"), ["*.example.com"]),
                ),
            ),
            (
                "default-backend",
                "create",
                at(
                    ("spec", "defaultBackend"),
                    {"service": {"name": "acme-api", "port": {"number": 8080}}},
                ),
            ),
            (
                "another-backend",
                "update",
                at(
                    ("spec", "rules", 0, "http", "paths", 0, "backend", "service", "name"),
                    "globex-api",
                ),
            ),
            (
                "leaf-port",
                "create",
                at(
                    ("spec", "rules", 0, "http", "paths", 0, "backend", "service", "port"),
                    {"number": 7422},
                ),
            ),
            (
                "second-host",
                "create",
                add(
                    ("spec", "rules"),
                    {
                        "host": "globex.example.com",
                        "http": {
                            "paths": [
                                {
                                    "path": "/",
                                    "pathType": "Prefix",
                                    "backend": {
                                        "service": {"name": "acme-api", "port": {"number": 8080}}
                                    },
                                }
                            ]
                        },
                    },
                ),
            ),
            (
                "second-path",
                "create",
                add(
                    ("spec", "rules", 0, "http", "paths"),
                    {
                        "path": "/admin",
                        "pathType": "Prefix",
                        "backend": {"service": {"name": "acme-api", "port": {"number": 8080}}},
                    },
                ),
            ),
            (
                "tls-for-another-host",
                "create",
                at(("spec", "tls", 0, "hosts"), ["globex.example.com"]),
            ),
        )
    ),
    Case(
        "webhook-hostname-changed",
        ("ingress-shape", "owners-unchanged"),
        INGRESS,
        op="update",
        change=both(
            at(("spec", "rules", 0, "host"), "hooks.acme.example.com"),
            at(("spec", "tls", 0, "hosts"), ["hooks.acme.example.com"]),
        ),
    ),
    *(
        deny(
            f"httproute-{case}",
            "httproute-shape",
            HTTP_ROUTE,
            f"{WRITES} HTTPRoute {{ns}}/acme-webhooks only as its company's webhook route: one "
            "exact hostname (no *), one rule with the one match path PathPrefix /webhooks",
            op=op,
            change=change,
            variant="gateway",
        )
        for case, op, change in (
            ("wildcard-hostname", "create", at(("spec", "hostnames"), ["*.example.com"])),
            ("second-hostname", "create", add(("spec", "hostnames"), "globex.example.com")),
            ("every-path", "create", at(("spec", "rules", 0, "matches", 0, "path", "value"), "/")),
            (
                "header-match",
                "create",
                at(
                    ("spec", "rules", 0, "matches", 0, "headers"),
                    [{"name": "x-tenant", "value": "globex"}],
                ),
            ),
            (
                "query-match",
                "update",
                at(
                    ("spec", "rules", 0, "matches", 0, "queryParams"),
                    [{"name": "tenant", "value": "globex"}],
                ),
            ),
            (
                "second-match",
                "create",
                add(
                    ("spec", "rules", 0, "matches"), {"path": {"type": "PathPrefix", "value": "/"}}
                ),
            ),
            (
                "mirror",
                "create",
                at(
                    ("spec", "rules", 0, "filters"),
                    [
                        {
                            "type": "RequestMirror",
                            "requestMirror": {"backendRef": {"name": "collector", "port": 80}},
                        }
                    ],
                ),
            ),
            (
                "another-backend",
                "create",
                at(("spec", "rules", 0, "backendRefs", 0, "name"), "globex-api"),
            ),
            (
                "backend-elsewhere",
                "create",
                at(("spec", "rules", 0, "backendRefs", 0, "namespace"), "kube-system"),
            ),
            ("timeouts", "create", at(("spec", "rules", 0, "timeouts"), {"request": "1h"})),
            (
                "second-rule",
                "create",
                add(("spec", "rules"), {"backendRefs": [{"name": "acme-api", "port": 8080}]}),
            ),
        )
    ),
    Case(
        "httproute-hostname-changed",
        ("httproute-shape", "httproute-gateways", "owners-unchanged"),
        HTTP_ROUTE,
        op="update",
        variant="gateway",
        change=at(("spec", "hostnames"), ["hooks.acme.example.com"]),
    ),
    *(
        deny(
            f"httproute-attached-to-{case}",
            "httproute-gateways",
            HTTP_ROUTE,
            f"{WRITES} HTTPRoute {{ns}}/acme-webhooks only attached to the Gateways the chart "
            f"value managerWrites.gateways lists ({PLATFORM_NS}/public), not {shown}",
            op=op,
            change=change,
            variant="gateway",
        )
        for case, op, change, shown in (
            (
                "another-gateway",
                "create",
                at(("spec", "parentRefs", 0), {"name": "internal", "namespace": "kube-system"}),
                "kube-system/internal",
            ),
            (
                "its-own-namespace",
                "create",
                at(("spec", "parentRefs", 0, "namespace"), DROP),
                "{ns}/public",
            ),
            (
                "a-second-gateway",
                "update",
                add(("spec", "parentRefs"), {"name": "internal", "namespace": "kube-system"}),
                "kube-system/internal",
            ),
        )
    ),
    # -- claims and the high-water engine version ----------------------------------------------
    deny(
        "claim-created",
        "claim-never-created",
        CLAIM,
        "may never create a PersistentVolumeClaim (PersistentVolumeClaim {ns}/data-acme-data-0): "
        "a company's claim is made by its data StatefulSet",
    ),
    deny(
        "claim-deleted",
        "claim-never-deleted",
        CLAIM,
        "may never delete a PersistentVolumeClaim: PersistentVolumeClaim {ns}/data-acme-data-0 "
        "holds a company's data",
        op="delete",
    ),
    deny(
        "claim-given-an-owner",
        "owners-unchanged",
        CLAIM,
        "may not change the owners of PersistentVolumeClaim {ns}/data-acme-data-0",
        op="patch",
        patch={"metadata": {"ownerReferences": [CONFIG_MAP_OWNER]}},
    ),
    *(
        deny(
            f"claim-{case}",
            "claim-annotations-only",
            CLAIM,
            "may change PersistentVolumeClaim {ns}/data-acme-data-0 only in its annotation "
            "crewlet.ai/highest-engine-version",
            op="patch",
            patch=patch,
        )
        for case, patch in (
            ("relabelled", {"metadata": {"labels": {"app.kubernetes.io/component": "seats"}}}),
            (
                "annotated",
                {"metadata": {"annotations": {"volume.kubernetes.io/selected-node": "kwok-node"}}},
            ),
            ("held-by-a-finalizer", {"metadata": {"finalizers": ["example.com/hold"]}}),
        )
    ),
    *(
        Case(
            f"claim-version-{case}",
            # The operator's one write to a claim: it neither creates nor deletes one.
            (
                "claim-never-created",
                "claim-never-deleted",
                "claim-annotations-only",
                "claim-version-kept",
            ),
            CLAIM,
            op="patch",
            existing=existing,
            patch={"metadata": {"annotations": {CLAIM_ANNOTATION: version}}},
        )
        for case, existing, version in (
            ("raised", None, "0.3.0"),
            ("kept", None, HIGH_WATER),
            ("first", at(ANNOTATIONS, DROP), HIGH_WATER),
            ("over-junk", at((*ANNOTATIONS, CLAIM_ANNOTATION), "latest"), HIGH_WATER),
            ("without-its-v", at((*ANNOTATIONS, CLAIM_ANNOTATION), "v0.2.0"), HIGH_WATER),
        )
    ),
    *(
        deny(
            f"claim-version-{case}",
            "claim-version-kept",
            CLAIM,
            "may never lower the highest engine version the data of PersistentVolumeClaim "
            f"{{ns}}/data-acme-data-0 has run (annotation crewlet.ai/highest-engine-version "
            f"{old}), nor replace it with a value that is not a higher semantic version or remove "
            f"it: not {shown}",
            op="patch",
            existing=at((*ANNOTATIONS, CLAIM_ANNOTATION), old),
            patch={"metadata": {"annotations": {CLAIM_ANNOTATION: new}}},
        )
        for case, old, new, shown in (
            ("lowered", HIGH_WATER, "0.1.0", "0.1.0"),
            ("lowered-below-its-v", "v0.3.0", HIGH_WATER, HIGH_WATER),
            ("removed", HIGH_WATER, None, "removed"),
            ("made-junk", HIGH_WATER, "latest", "latest"),
        )
    ),
    *(
        Case(
            f"status-version-{case}",
            ("status-version-kept",),
            THE_COMPANY,
            op="status",
            existing=existing,
            change=change,
        )
        for case, existing, change in (
            ("raised", None, at(("status", "highestEngineVersion"), "0.3.0")),
            ("first", at(("status",), {"versionProtection": "Unordered"}), None),
        )
    ),
    *(
        deny(
            f"status-version-{case}",
            "status-version-kept",
            THE_COMPANY,
            "may never lower the highest engine version the data of Company {ns}/acme has run "
            f"(status.highestEngineVersion {HIGH_WATER}), nor replace it with a value that is not "
            f"a higher semantic version or remove it: not {shown}",
            op="status",
            change=change,
        )
        for case, change, shown in (
            ("lowered", at(("status", "highestEngineVersion"), "0.1.0"), "0.1.0"),
            ("removed", at(("status",), {"versionProtection": "Unordered"}), "removed"),
        )
    ),
    # -- sharding: the children's slot label -------------------------------------------------
    # (creates() makes every child of the sharded render, its slot label on each.)
    Case(
        "child-of-a-member-labelled-release-gets-its-slot",
        ("labels-allowlist", "owners-unchanged", "pod-template-metadata"),
        DATA_STS,
        op="update",
        variant="sharded",
        existing=both(at((*LABELS, SLOT), DROP), at((*LABELS, SHARD), OLD_MEMBER)),
    ),
    Case(
        "child-labelled-when-sharding-starts",
        ("labels-allowlist", "owners-unchanged"),
        SA,
        op="update",
        variant="sharded",
        existing=at((*LABELS, SLOT), DROP),
    ),
    deny(
        "child-slot-label-out-of-range",
        "labels-allowlist",
        API_SERVICE,
        "only with the operator's labels (app.kubernetes.io/managed-by: crewlet-operator, "
        "app.kubernetes.io/name: crewlet, crewlet.ai/company: <company>, "
        "app.kubernetes.io/component: data or seats and, with sharding, "
        f"{SLOT}: <slot, 0 to 255>), not {SLOT}: 256",
        variant="sharded",
        change=at((*LABELS, SLOT), "256"),
    ),
    deny(
        "child-labelled-for-a-replica",
        "labels-allowlist",
        SA,
        f"not {SHARD}: {MEMBER}",
        variant="sharded",
        change=at((*LABELS, SHARD), MEMBER),
    ),
    deny(
        "pod-template-slot-label",
        "pod-template-metadata",
        DATA_STS,
        f"{WRITES} StatefulSet {{ns}}/acme-data only with the operator's labels on its pod "
        f"template (app.kubernetes.io/managed-by: crewlet-operator, app.kubernetes.io/name: "
        "crewlet, crewlet.ai/company: acme, app.kubernetes.io/component: data) and annotations "
        f"(crewlet.ai/config-hash, crewlet.ai/secrets-hash), not {SLOT}",
        variant="sharded",
        change=at((*TEMPLATE, "labels", SLOT), SLOT_OF_ACME),
    ),
    deny(
        "pod-template-slot-label-on-update",
        "pod-template-metadata",
        SEATS_STS,
        f"not {SLOT}",
        op="update",
        variant="sharded",
        change=at((*TEMPLATE, "labels", SLOT), SLOT_OF_ACME),
    ),
    deny(
        "claim-template-slot-label",
        "claim-template-shape",
        DATA_STS,
        f"{WRITES} StatefulSet {{ns}}/acme-data only with the operator's claim template",
        variant="sharded",
        change=at((*CLAIM_TEMPLATE, "metadata", "labels", SLOT), SLOT_OF_ACME),
    ),
    # -- sharding: a Company's ring labels -----------------------------------------------------
    # The patches as crewlet_operator.sharding writes them: the sharder's (Sharder.shard_pass)
    # and the member's (Gate._acknowledge), each a merge patch on the resourceVersion it was
    # decided on. test_the_sharder_and_a_member_move_a_company_as_the_manager runs the
    # library's own.
    *(
        Case(
            f"company-{case}",
            ("company-ring-labels", "company-ring-label-values"),
            THE_COMPANY,
            op="patch",
            existing=existing,
            patch={"metadata": {"resourceVersion": RESOURCE_VERSION, "labels": labels}},
            field_manager=field_manager,
        )
        for case, existing, labels, field_manager in (
            ("assigned-by-the-sharder", None, {SHARD: MEMBER, DRAIN: None}, SHARDER),
            (
                "taken-from-a-dead-member",
                both(
                    at((*LABELS, SHARD), OLD_MEMBER),
                    at((*LABELS, "team"), "blue"),
                    at((*ANNOTATIONS, "example.com/note"), "theirs"),
                ),
                {SHARD: MEMBER, DRAIN: None},
                SHARDER,
            ),
            ("drained-by-the-sharder", at((*LABELS, SHARD), OLD_MEMBER), {DRAIN: MEMBER}, SHARDER),
            (
                "handed-on-by-its-member",
                both(at((*LABELS, SHARD), OLD_MEMBER), at((*LABELS, DRAIN), MEMBER)),
                {SHARD: MEMBER, DRAIN: None},
                MANAGER_NAME,
            ),
            (
                # An older version's drain, acknowledged as that version did.
                "let-go-by-its-member",
                both(at((*LABELS, SHARD), MEMBER), at((*LABELS, DRAIN), "true")),
                {SHARD: None, DRAIN: None},
                MANAGER_NAME,
            ),
        )
    ),
    *(
        deny(
            f"company-{case}",
            "company-ring-labels",
            THE_COMPANY,
            "may change Company {ns}/acme only in its labels shard.crewlet.ai/crewlet-operator "
            "and drain.crewlet.ai/crewlet-operator (the replica it is assigned to, with "
            f"sharding), not its {shown}",
            op="patch",
            existing=existing,
            patch={"metadata": {"resourceVersion": RESOURCE_VERSION}, **patch},
            field_manager=SHARDER,
        )
        for case, existing, patch, shown in (
            (
                "spec-changed",
                None,
                {"metadata": {"labels": {SHARD: MEMBER}}, "spec": {"className": "premium"}},
                "spec",
            ),
            ("hostname-taken", None, {"spec": {"webhookHostname": "bank.example.com"}}, "spec"),
            ("relabelled", None, {"metadata": {"labels": {"team": "red"}}}, "other labels"),
            (
                "label-removed",
                at((*LABELS, "team"), "blue"),
                {"metadata": {"labels": {"team": None, SHARD: MEMBER}}},
                "other labels",
            ),
            (
                "annotated",
                None,
                {"metadata": {"annotations": {"example.com/x": "y"}}},
                "annotations",
            ),
            (
                "annotation-removed",
                at((*ANNOTATIONS, "example.com/note"), "theirs"),
                {"metadata": {"annotations": {"example.com/note": None}}},
                "annotations",
            ),
            (
                "given-an-owner",
                None,
                {"metadata": {"ownerReferences": [CONFIG_MAP_OWNER]}},
                "ownerReferences",
            ),
            (
                "held-by-a-finalizer",
                None,
                {"metadata": {"finalizers": ["example.com/hold"]}},
                "finalizers",
            ),
            (
                "moved-and-respecified",
                None,
                {
                    "metadata": {"labels": {SHARD: MEMBER}, "annotations": {"example.com/x": "y"}},
                    "spec": {"className": "premium"},
                },
                "spec, annotations",
            ),
        )
    ),
    *(
        deny(
            f"company-{case}",
            "company-ring-label-values",
            THE_COMPANY,
            f"may set the labels {SHARD} and {DRAIN} of Company {{ns}}/acme only to a "
            f"replica's name (a DNS-1123 label) or remove them, not {shown}",
            op="patch",
            existing=existing,
            patch={"metadata": {"resourceVersion": RESOURCE_VERSION, "labels": labels}},
            field_manager=SHARDER,
        )
        for case, existing, labels, shown in (
            (
                "drain-not-a-member-name",
                at((*LABELS, SHARD), MEMBER),
                {DRAIN: "Member_0"},
                f'{DRAIN}: "Member_0"',
            ),
            ("shard-label-emptied", at((*LABELS, SHARD), MEMBER), {SHARD: ""}, f'{SHARD}: ""'),
            (
                "shard-label-not-a-member-name",
                None,
                {SHARD: "Crewlet_Operator.0"},
                f'{SHARD}: "Crewlet_Operator.0"',
            ),
        )
    ),
]


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
    crewlet-operator with :data:`MANAGER_VALUES`; the manager, another ServiceAccount and
    renamed managers bound to cluster-admin."""
    docs = await helm_template(MANAGER_VALUES)
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
        # Another module may have installed the policy with other values: this render's own
        # Gateways are named in the refusal once this version is the one enforced.
        probe = company_doc("default")
        probe |= {"apiVersion": COMPANY.api_version, "kind": COMPANY.kind}
        probe["metadata"]["uid"] = "00000000-0000-4000-8000-000000000000"
        resource, route = shapes(probe, "gateway")[HTTP_ROUTE]
        elsewhere = copy.deepcopy(route)
        elsewhere["spec"]["parentRefs"] = [{"name": "elsewhere", "namespace": "elsewhere"}]
        await enforced(
            lambda: manager.create(resource, elsewhere, dry_run=True),
            MANAGER_POLICY,
            says=f"managerWrites.gateways lists ({PLATFORM_NS}/public)",
        )
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


def refused_by_manager_policy(
    rule: str, write: Awaitable[Any], message: str = "the operator's manager may"
) -> Awaitable[str]:
    return denied(rule, write, MANAGER_POLICY, message)


# -- the manager's policy -------------------------------------------------------------------------


def identity(obj: Doc) -> Doc:
    return {"name": obj["metadata"]["name"], "namespace": obj["metadata"]["namespace"]}


async def prepare(client: Client, case: Case, objects: Shapes) -> None:
    """The object as it stands before the case's write: made by the admin as the operator
    applies it (its field manager), with ``existing`` applied, then ``someone_else``'s fields
    applied by another field manager (which the operator's apply leaves alone)."""
    if case.op == "create":
        return
    resource, obj = objects[case.target]
    standing = copy.deepcopy(obj)
    if case.existing is not None:
        case.existing(standing)
    if resource is COMPANY:
        status = {"metadata": identity(obj), "status": standing["status"]}
        await client.apply_status(COMPANY, status, field_manager=MANAGER_NAME)
        # Its labels and annotations, as others (the sharder, the tenant) set them.
        if standing["metadata"].keys() - {"name", "namespace"}:
            await client.apply(COMPANY, {"metadata": standing["metadata"]}, field_manager=SHARDER)
        company = await client.get(COMPANY, obj["metadata"]["name"], obj["metadata"]["namespace"])
        obj["metadata"]["resourceVersion"] = company["metadata"]["resourceVersion"]
    else:
        await client.apply(resource, standing, field_manager=MANAGER_NAME)
    if case.someone_else is not None:
        theirs = copy.deepcopy(case.someone_else)
        theirs["metadata"] = {**identity(obj), **theirs.get("metadata", {})}
        await client.apply(resource, theirs, field_manager=SOMEONE_ELSE)


def write(client: Client, case: Case, objects: Shapes) -> Awaitable[Any]:
    """The case's write by ``client``, a dry run; an apply writes as the operator's field
    manager, as ``prepare`` made the object, so that the write is the operator's own whoever
    sends it (the policy judges the sender)."""
    resource, obj = objects[case.target]
    body = copy.deepcopy(obj)
    if case.change is not None:
        case.change(body)
    meta = identity(obj)
    if case.op == "create":
        return client.create(resource, body, dry_run=True)
    if case.op == "update":
        return client.apply(resource, body, dry_run=True, field_manager=MANAGER_NAME)
    if case.op == "patch":
        assert case.patch is not None, case.id
        patch = copy.deepcopy(case.patch)
        if patch.get("metadata", {}).get("resourceVersion") == RESOURCE_VERSION:
            patch["metadata"]["resourceVersion"] = obj["metadata"]["resourceVersion"]
        return merge_patch(
            client, resource, meta["name"], meta["namespace"], patch, case.field_manager
        )
    if case.op == "status":
        return client.apply_status(
            COMPANY,
            {"metadata": meta, "status": body["status"]},
            dry_run=True,
            field_manager=MANAGER_NAME,
        )
    return client.delete(resource, meta["name"], meta["namespace"], dry_run=True)


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
async def test_the_manager_writes_only_the_operators_shapes(
    kube_client: Client, held: Client, other: Client, namespace: str, case: Case
) -> None:
    """Issue 35: "Each rule is tested both ways on the real API server: admitted in the
    operator's own shape (rendered by the operator, not hand-written), denied in the
    attacker's, as the manager's token and by impersonation, and left alone for other users."
    The Company exists, so that the garbage collector keeps what it owns."""
    company = await kube_client.create(COMPANY, company_doc(namespace))
    objects = shapes(company, case.variant)
    await prepare(kube_client, case, objects)
    if case.denied is None:
        await admitted(case.rules, write(held, case, objects))
        return
    [rule] = case.rules
    await refused_by_manager_policy(
        rule, write(held, case, objects), case.denied.format(ns=namespace)
    )
    await admitted("manager-only", write(other, case, objects))


async def test_another_service_account_is_left_alone(
    manager: Client, other: Client, namespace: str
) -> None:
    """The policy matches the manager's ServiceAccount, and no one else: what it refuses the
    manager, it admits for another ServiceAccount (every denied case of the table checks that
    too)."""
    unlabelled = secret(namespace, "x", labelled=False)
    await refused_by_manager_policy(
        "manager-only", manager.create(r.SECRET, unlabelled, dry_run=True), "only with the label"
    )
    await admitted("manager-only", other.create(r.SECRET, unlabelled, dry_run=True))


class CachedCompany:
    """A member's cache as its gate reads it: the Company as last read, and the client."""

    def __init__(self, client: Client, company: Doc) -> None:
        self.client = client
        self.company = company

    def get(self, resource: Resource, name: str, namespace: str | None = None) -> Doc:
        return self.company


RING_RULES = ("company-ring-labels", "company-ring-label-values")


async def test_the_sharder_and_a_member_move_a_company_as_the_manager(
    kube_client: Client, held: Client, namespace: str
) -> None:
    """With manager.sharding.enabled: the library's own Sharder and Gate, writing as the
    manager (its token, and impersonated), move a Company under the policy. The sharder assigns
    it to the one live member, drains it towards a newcomer whose hash takes its namespace, and
    the member hands it on (labels it for the newcomer and clears the drain). Real writes, as
    each step reads the last; the policy holds these same writes to the ring labels."""
    await kube_client.create(COMPANY, company_doc(namespace))
    # Two replicas' members such that the newcomer's arrival takes the namespace's slot: over
    # pairs, since one first member may hold the slot by a margin few newcomers' points reach.
    replicas = [member_name(MANAGER_NAME, f"replica-{i}") for i in range(20)]
    first, newcomer = next(
        (a, b)
        for a, b in itertools.permutations(replicas, 2)
        if HashRing([a, b]).slot_owner(slot_of(namespace)) == b
    )
    ring = StaticRing(first)
    view = ClusterView(held, Cache(held))
    sharder = Sharder(
        held.with_field_manager(SHARDER),
        COMPANY,
        view,
        Scope(namespace),
        labels=RING,
        membership=ring,
        key=by_namespace,
        retry_period=0.2,
    )
    sharder.watch()
    await view.start()
    running = asyncio.create_task(sharder.run(), name="sharder")

    async def labelled(expected: dict[str, str | None]) -> Doc:
        async def done() -> bool:
            if running.done():
                running.result()  # the sharder stopped: a write of its was refused
                raise AssertionError("the sharder stopped")
            company = await kube_client.get(COMPANY, ACME, namespace)
            found = company["metadata"].get("labels") or {}
            return all(found.get(k) == v for k, v in expected.items())

        await eventually(done, timeout=30, interval=0.2, message=f"labelled {expected}")
        return await kube_client.get(COMPANY, ACME, namespace)

    async def never(request: Request) -> None:
        raise AssertionError(f"a draining Company is let go, not reconciled: {request}")

    try:
        await admitted(RING_RULES, labelled({SHARD: first, DRAIN: None}))
        ring.become(first, newcomer)
        draining = await admitted(RING_RULES, labelled({SHARD: first, DRAIN: newcomer}))
        member = CachedCompany(held.with_field_manager(MANAGER_NAME), draining)
        # The slots do not matter here: a drain is acknowledged before any slot is looked at.
        slots = MemberSlots(RING, first, ring, key=by_namespace, retry_period=1, settle=1)
        gate = Gate(never, cast(Cache, member), COMPANY, RING, slots=slots)
        await admitted(RING_RULES, gate.reconcile(Request(namespace, ACME)))
        moved = await admitted(RING_RULES, labelled({SHARD: newcomer, DRAIN: None}))
    finally:
        await cancel_and_wait(running)
        await view.stop()
    # The policy does hold these writes: the same patch, with the spec, is refused.
    await refused_by_manager_policy(
        "company-ring-labels",
        merge_patch(
            held,
            COMPANY,
            ACME,
            namespace,
            {
                "metadata": {
                    "resourceVersion": moved["metadata"]["resourceVersion"],
                    "labels": {SHARD: None, DRAIN: None},
                },
                "spec": {"className": "premium"},
            },
            MANAGER_NAME,
        ),
        f"may change Company {namespace}/acme only in its labels {SHARD} and {DRAIN}",
    )


def test_the_cases_cover_every_rule_both_ways() -> None:
    """The table alone (the run's tally is the last test's): every rule of the manager's policy
    has an admitted and a denied case, and every case names rules that exist."""
    scope = {"manager-only", "release-prefix", "fullname-override", *FORGERY_RULES}
    admits = {rule for case in CASES if case.denied is None for rule in case.rules}
    denies = {case.rules[0] for case in CASES if case.denied is not None}
    assert admits | denies <= set(MANAGER_RULES)
    assert set(MANAGER_RULES) - scope <= admits & denies, (
        set(MANAGER_RULES) - scope - (admits & denies)
    )
    assert len({case.id for case in CASES}) == len(CASES)


async def test_ephemeral_containers_never_reach_the_policy(manager: Client, namespace: str) -> None:
    """The policy checks ephemeralContainers too, but the API server already refuses them in a
    pod template, before admission policies run."""
    _, sts = shapes(fake_company(namespace))[DATA_STS]
    at(
        (*POD, "ephemeralContainers"),
        [{"name": "e", "image": "x", "securityContext": {"privileged": True}}],
    )(sts)
    with pytest.raises(InvalidError, match="ephemeral containers not allowed in pod template"):
        await manager.create(r.STATEFUL_SET, sts, dry_run=True)


def fake_company(namespace: str) -> Doc:
    """A Company that need not exist: dry-run creates name it as their owner all the same."""
    doc = company_doc(namespace)
    doc.update(apiVersion=COMPANY.api_version, kind=COMPANY.kind)
    doc["metadata"]["uid"] = "6f1d2c3b-0000-4000-8000-000000000001"
    return doc


def violations(namespace: str) -> list[tuple[str, Resource, Doc]]:
    """Every create the case table refuses the manager: (rule, resource, object)."""
    found = []
    for case in CASES:
        if case.op != "create" or case.denied is None:
            continue
        resource, obj = shapes(fake_company(namespace), case.variant)[case.target]
        body = copy.deepcopy(obj)
        if case.change is not None:
            case.change(body)
        found.append((case.rules[0], resource, body))
    return found


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
    alone, holds its manager (by its namespace and name, which ends as the install page says)."""
    docs = await helm_template(MANAGER_VALUES, release=release)
    account = next(d for d in docs if d["kind"] == "ServiceAccount")["metadata"]["name"]
    assert account == f"{release[:46]}-{MANAGER}"
    policy = f"{release[:46]}-{MANAGER_POLICY}"
    assert policy in {
        d["metadata"]["name"] for d in docs if d["kind"] == "ValidatingAdmissionPolicy"
    }
    held = client_for(manager_identity(control_plane, account))
    await delete_policies(kube_client, MANAGER_POLICY)
    await apply_policies(kube_client, docs, policy)
    try:
        await wait_manager_policy(held, policy, (MANAGER_POLICY,))
        for rule, resource, obj in violations(namespace):
            await denied(rule, held.create(resource, obj, dry_run=True), policy, "manager may")
        await denied(
            "release-prefix",
            held.create(r.SECRET, secret(namespace, "x", False), dry_run=True),
            policy,
            "only with the label",
        )
        _, token = shapes(fake_company(namespace))[API_TOKEN]
        await admitted("release-prefix", held.create(r.SECRET, token, dry_run=True))
    finally:
        await delete_policies(kube_client, policy)
        await apply_policies(kube_client, await helm_template(MANAGER_VALUES), MANAGER_POLICY)
        await wait_manager_policy(manager, MANAGER_POLICY, (policy,))


async def test_a_fullname_override_that_renames_the_manager_leaves_it_unchecked(
    kube_client: Client,
    control_plane: ControlPlane,
    client_for: ClientFor,
    manager: Client,
    namespace: str,
) -> None:
    """ "a nameOverride or fullnameOverride that changes it leaves the manager unchecked": the
    policy matches the manager exactly (issue 47), and only while its name ends with
    crewlet-operator-controller-manager. With the ending's clause taken out of the same
    rendered policy, it holds the renamed manager: the clause, not a policy not yet enforced,
    is what leaves it unchecked."""
    docs = await helm_template({**MANAGER_VALUES, "fullnameOverride": "platform-ops"})
    account = next(d for d in docs if d["kind"] == "ServiceAccount")["metadata"]["name"]
    assert account == "platform-ops-controller-manager"
    renamed = client_for(manager_identity(control_plane, account))
    policy = "platform-ops-manager-writes"
    [rendered] = [
        d
        for d in docs
        if d["kind"] == "ValidatingAdmissionPolicy" and d["metadata"]["name"] == policy
    ]
    [condition] = rendered["spec"]["matchConditions"]
    exact, ending = condition["expression"].split(" && ")
    assert exact == (f'request.userInfo.username == "system:serviceaccount:{RELEASE_NS}:{account}"')
    assert ending == f'"{account}".endsWith("{MANAGER}")'
    probe = secret(namespace, "x", False)
    await delete_policies(kube_client, MANAGER_POLICY)
    try:
        # The rendered policy without the ending's clause holds the renamed manager ...
        condition["expression"] = exact
        await apply_policies(kube_client, docs, policy)
        await enforced(lambda: renamed.create(r.SECRET, probe, dry_run=True), policy)
        await denied(
            "fullname-override",
            renamed.create(r.SECRET, probe, dry_run=True),
            policy,
            "only with the label",
        )
        # ... and as rendered it does not: every write the policy exists to refuse is admitted.
        condition["expression"] = f"{exact} && {ending}"
        await apply_policies(kube_client, docs, policy)

        async def unchecked() -> bool:
            try:
                await renamed.create(r.SECRET, probe, dry_run=True)
            except InvalidError:
                return False
            return True

        await eventually(unchecked, timeout=60, interval=0.2, message="the rendered policy")
        for _, resource, obj in violations(namespace):
            await admitted("fullname-override", renamed.create(resource, obj, dry_run=True))
    finally:
        await delete_policies(kube_client, policy)
        await apply_policies(kube_client, await helm_template(MANAGER_VALUES), MANAGER_POLICY)
        await wait_manager_policy(manager, MANAGER_POLICY, (policy,))


async def test_by_default_any_engine_image_runs_and_no_httproute_attaches(
    kube_client: Client, manager: Client, namespace: str
) -> None:
    """The chart's defaults: managerWrites.engineImagePrefixes empty admits any image, and
    managerWrites.gateways empty attaches no HTTPRoute anywhere, with a refusal that names the
    value to set."""
    objects = shapes(fake_company(namespace), "gateway")
    _, sts = objects[DATA_STS]
    at((*ENGINE, "image"), "docker.io/someone/engine:v0.2.0")(sts)
    _, route = objects[HTTP_ROUTE]

    async def image_admitted() -> bool:
        try:
            await manager.create(r.STATEFUL_SET, sts, dry_run=True)
        except InvalidError:
            return False
        return True

    async def image_refused() -> bool:
        return not await image_admitted()

    await apply_policies(kube_client, await helm_template({}), MANAGER_POLICY)
    try:
        await eventually(image_admitted, timeout=60, interval=0.2, message="defaults enforced")
        await admitted("engine-image", manager.create(r.STATEFUL_SET, sts, dry_run=True))
        await refused_by_manager_policy(
            "httproute-gateways",
            manager.create(r.HTTP_ROUTE, route, dry_run=True),
            f"{WRITES} HTTPRoute {namespace}/acme-webhooks only attached to the Gateways the "
            "chart value managerWrites.gateways lists (none: list the Gateways webhook routes "
            f"attach to), not {PLATFORM_NS}/public",
        )
    finally:
        await apply_policies(kube_client, await helm_template(MANAGER_VALUES), MANAGER_POLICY)
        await eventually(image_refused, timeout=60, interval=0.2, message="values enforced")


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
    command = [sys.executable, "-m", "crewlet_operator_daemon.cli", "--leader-elect"]
    command += [f"--leader-election-namespace={RELEASE_NS}", "--log-format=json"]
    kubeconfig = tmp_path / "kubeconfig"
    daemon = ManagerProcess("operator", [*command, "--kubeconfig", str(kubeconfig)], tmp_path)
    log = daemon.process.log_path
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
        control_plane.token_config(token).write_kubeconfig(kubeconfig)
        daemon.start()

        async def ready() -> bool:
            if not daemon.check():  # started again on fresh ports
                return False
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
        secrets = (await kube_client.list(r.SECRET, Scope(namespace))).items
        assert secrets and all(
            s["metadata"]["labels"] == {**s["metadata"]["labels"], **MANAGED} for s in secrets
        )
        assert await kube_client.get(r.LEASE, "crewlet-operator-leader", RELEASE_NS)
        assert "denied request" not in log.read_text()
        assert "Forbidden" not in log.read_text()
    finally:
        await asyncio.to_thread(daemon.process.stop, 40)
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


# -- what a tenant can forge (issue 47) ----------------------------------------------------------

LEASES_POLICY = "crewlet-operator-leases"
RING_LABELS_POLICY = "crewlet-operator-ring-labels"
TENANT_ADMIN = "tenant-admin"
SHARDED_VALUES: Doc = {**MANAGER_VALUES, "manager": {"sharding": {"enabled": True}}}


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def forgery_policies(kube_client: Client, manager_policy: list[Doc]) -> AsyncIterator[None]:
    """crewlet-operator-leases and, as manager.sharding.enabled renders it,
    crewlet-operator-ring-labels; and the chart's roles aggregated into Kubernetes' own admin
    role, so that a namespace's admin writes Companies as the install page says."""
    docs = await helm_template(SHARDED_VALUES)
    # The chart's aggregated roles under names of this module's own, removed after it: a helm
    # install of the chart on the same plane (e2e/test_chart.py) owns the chart's names.
    aggregated = []
    for doc in docs:
        name = doc["metadata"]["name"]
        if doc["kind"] == "ClusterRole" and name.endswith(("-crewlet-edit", "-crewlet-view")):
            role = copy.deepcopy(doc)
            role["metadata"]["name"] = name.replace(RELEASE, "crewlet-policies", 1)
            aggregated.append(await kube_client.apply(r.CLUSTER_ROLE, role))
    assert len(aggregated) == 2
    for policy in (LEASES_POLICY, RING_LABELS_POLICY):
        await apply_policies(kube_client, docs, policy)
    yield
    for policy in (LEASES_POLICY, RING_LABELS_POLICY):
        await delete_policies(kube_client, policy)
    for role in aggregated:
        with contextlib.suppress(NotFoundError):
            await kube_client.delete(r.CLUSTER_ROLE, role["metadata"]["name"])


async def namespace_admin(
    kube_client: Client, control_plane: ControlPlane, client_for: ClientFor, ns: str, name: str
) -> Client:
    """A ServiceAccount ``name`` of ``ns`` bound there to Kubernetes' own admin ClusterRole: a
    tenant, once the aggregation controller has given that role the Companies."""
    await kube_client.create(r.SERVICE_ACCOUNT, {"metadata": {"name": name, "namespace": ns}})
    await kube_client.create(
        r.ROLE_BINDING,
        {
            "metadata": {"name": f"{name}-admin", "namespace": ns},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "admin",
            },
            "subjects": [sa_subject(ns, name)],
        },
    )
    tenant = client_for(control_plane.service_account_config(ns, name))

    probe = company_doc(ns)
    probe["metadata"]["name"] = "probe"

    async def writes_companies() -> bool:
        try:
            await tenant.create(COMPANY, probe, dry_run=True)
        except ForbiddenError:
            return False
        return True

    await eventually(writes_companies, timeout=60, interval=0.5, message="admin writes Companies")
    return tenant


@pytest_asyncio.fixture(loop_scope="session")
async def tenant(
    kube_client: Client,
    control_plane: ControlPlane,
    client_for: ClientFor,
    namespace: str,
    forgery_policies: None,
) -> Client:
    return await namespace_admin(kube_client, control_plane, client_for, namespace, TENANT_ADMIN)


def install_lease(namespace: str, duration: int = 15, name: str = "crewlet-operator-leader") -> Doc:
    """A Lease with the labels of the operator's own (``cli.LEASE_LABELS``)."""
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": dict(LEASE_LABELS),
        },
        "spec": {"holderIdentity": "someone", "leaseDurationSeconds": duration},
    }


async def test_a_tenant_writes_no_lease_that_passes_for_an_install(
    tenant: Client, held: Client, namespace: str
) -> None:
    """Issue 47, finding 1: "A Lease in the tenant's own namespace with the operator's two
    exclusive labels (cli.py LEASE_LABELS) and leaseDurationSeconds: 2147483647: the next
    operator process never leads." Refused, as a create and as labels put on a Lease of the
    tenant's own (which it may otherwise write as before); the manager's own Lease, as its
    elector writes it, is admitted."""
    forged = install_lease(namespace, duration=2147483647)
    await enforced(lambda: tenant.create(r.LEASE, forged, dry_run=True), LEASES_POLICY)
    message = f"may not write Lease {namespace}/crewlet-operator-leader with, or change, the labels"
    await denied("install-lease-writers", tenant.create(r.LEASE, forged), LEASES_POLICY, message)
    own = {"metadata": {"name": "mine", "namespace": namespace}, "spec": {"holderIdentity": "me"}}
    await tenant.create(r.LEASE, own)
    await denied(
        "install-lease-writers",
        merge_patch(tenant, r.LEASE, "mine", namespace, {"metadata": {"labels": LEASE_LABELS}}),
        LEASES_POLICY,
        f"may not write Lease {namespace}/mine with, or change, the labels",
    )
    # Another name than the daemon's own Lease, which a test of this module may have made.
    ours = install_lease(RELEASE_NS, name=f"leader-{uuid.uuid4()}")
    await admitted("install-lease-writers", held.create(r.LEASE, ours, dry_run=True))


async def test_every_installs_manager_writes_its_own_lease_under_the_charts_rbac(
    kube_client: Client, control_plane: ControlPlane, client_for: ClientFor, forgery_policies: None
) -> None:
    """The one-install guard keeps working across installs: a second install's manager, with
    nothing but the RBAC its chart gives it, writes its own Lease with the labels (the policy
    asks the authorizer whether the writer may update every namespace's Company status, which
    an install's manager may and a tenant may not)."""
    release, ns = "second", "crewlet-policies-second"
    await ensure_namespace(kube_client, ns)
    docs = [
        d
        for d in await helm_template({"crd": {"enabled": False}}, release=release)
        if d["kind"]
        in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
    ]
    kinds = {
        "ServiceAccount": r.SERVICE_ACCOUNT,
        "ClusterRole": r.CLUSTER_ROLE,
        "ClusterRoleBinding": r.CLUSTER_ROLE_BINDING,
        "Role": r.ROLE,
        "RoleBinding": r.ROLE_BINDING,
    }
    try:
        for doc in docs:
            if doc["kind"] in ("ServiceAccount", "Role", "RoleBinding"):
                doc["metadata"]["namespace"] = ns
            for subject in doc.get("subjects") or []:
                if subject.get("kind") == "ServiceAccount":
                    subject["namespace"] = ns
            await kube_client.apply(kinds[doc["kind"]], doc)
        second = client_for(control_plane.service_account_config(ns, f"{release}-{MANAGER}"))

        async def admitted_once_bound() -> Doc | None:
            try:
                return await second.create(r.LEASE, install_lease(ns), dry_run=True)
            except ForbiddenError:
                return None  # RBAC not in force yet

        await admitted(
            "install-lease-writers",
            eventually(admitted_once_bound, timeout=30, message="the second install's Lease"),
        )
    finally:
        for doc in docs:
            with contextlib.suppress(NotFoundError):
                await kube_client.delete(
                    kinds[doc["kind"]], doc["metadata"]["name"], doc["metadata"].get("namespace")
                )


async def test_a_will_names_member_leases_only_and_never_changes(
    kube_client: Client, held: Client, forgery_policies: None
) -> None:
    """Issue 47, finding 5 and "the policy holds the heirs to member names of this install": a
    will (``sharding.crewlet.ai/heirs``) is written on a member Lease only, names member Leases
    only, and, once written, is never changed or removed, even by the manager's token."""
    await ensure_namespace(kube_client, RELEASE_NS)
    dead, heir, other = (member_name(MANAGER_NAME, f"{uuid.uuid4()}") for _ in range(3))
    lease = {
        "metadata": {"name": dead, "namespace": RELEASE_NS, "labels": {RING.member: RING.ring}},
        "spec": {"holderIdentity": "", "leaseDurationSeconds": 15},
    }
    await kube_client.create(r.LEASE, lease)

    def will(heirs: str | None, name: str = dead, dry_run: bool = True) -> Coroutine[Any, Any, Doc]:
        patch = {"metadata": {"annotations": {RING.heirs: heirs}}}
        if dry_run:
            return merge_patch(held, r.LEASE, name, RELEASE_NS, patch, SHARDER)
        return held.patch(r.LEASE, name, patch, RELEASE_NS)

    await enforced(lambda: will("attacker"), LEASES_POLICY)
    await denied(
        "will-names-members",
        will(f"{heir},attacker"),
        LEASES_POLICY,
        f"names only such members, comma separated: not {heir},attacker on Lease "
        f"{RELEASE_NS}/{dead}",
    )
    plain = {"metadata": {"name": "not-a-member", "namespace": RELEASE_NS}, "spec": {}}
    with contextlib.suppress(ApiError):
        await kube_client.create(r.LEASE, plain)
    await denied("will-names-members", will(heir, "not-a-member"), LEASES_POLICY, "on Lease")
    # The chart's fixed member names (--shard-members) are member names too.
    fixed = ",".join(member_names(MANAGER_NAME, 3))
    await admitted("will-names-members", will(fixed))
    await denied("will-names-members", will(f"{MANAGER_NAME}-member-x"), LEASES_POLICY, "not ")
    await admitted("will-names-members", will(f"{heir},{other}", dry_run=False))
    await denied(
        "will-never-changes",
        will(heir),
        LEASES_POLICY,
        f"(the annotation {RING.heirs}: {heir},{other}) never changes and is never removed",
    )
    await denied("will-never-changes", will(None), LEASES_POLICY, "never changes")
    renewal = {"spec": {"renewTime": "2026-12-06T00:00:00.000000Z"}}
    await admitted(
        "will-never-changes", merge_patch(held, r.LEASE, dead, RELEASE_NS, renewal, SHARDER)
    )


MEMBER_WRITES_POLICY = "crewlet-operator-member-writes"
MEMBER_CHILDREN_POLICY = "crewlet-operator-member-children"


async def test_a_member_found_dead_writes_no_status_or_child_by_the_api_servers_word(
    kube_client: Client,
    control_plane: ControlPlane,
    client_for: ClientFor,
    manager: Client,
    namespace: str,
) -> None:
    """Issue 50: "a member frozen past its Lease is refused by the API server when it resumes".
    Two replicas of the manager in Pods, each with the token its kubelet would project (bound to
    its Pod), each holding a member Lease that records its Pod (as the library's elector
    writes it). A Company labelled for the first: its status is the first's to write, not the
    second's; once the leader writes a will on the first's Lease, the first's Pod may write it
    no more (whatever its process believes), and its heir may. Nor any child of the ring's
    companies (an object with the slot label): both write them until the will, the heir after
    it. A token bound to no Pod is not judged: the replica's own fence holds it."""
    docs = await helm_template(SHARDED_VALUES)
    await ensure_namespace(kube_client, RELEASE_NS)
    if await kube_client.get_or_none(r.SERVICE_ACCOUNT, MANAGER, RELEASE_NS) is None:
        await kube_client.create(
            r.SERVICE_ACCOUNT, {"metadata": {"name": MANAGER, "namespace": RELEASE_NS}}
        )
    suffix = uuid.uuid4().hex[:6]
    writers: dict[str, Client] = {}
    leases: dict[str, str] = {}
    for replica in ("first", "second"):
        pod = await replica_pod(
            kube_client, RELEASE_NS, f"manager-{replica}-{suffix}", service_account=MANAGER
        )
        token = control_plane.request_token(RELEASE_NS, MANAGER, pod=(pod.name, pod.uid))
        writers[replica] = client_for(control_plane.token_config(token))
        holding = f"{pod.name}_{uuid.uuid4()}"
        leases[replica] = member_name(MANAGER_NAME, holding)
        holder = Holder(holding, pod)
        await kube_client.create(
            r.LEASE,
            {
                "metadata": {
                    "name": leases[replica],
                    "namespace": RELEASE_NS,
                    "labels": {RING.member: RING.ring},
                    "annotations": {HOLDER_ANNOTATION: holder.annotation()},
                },
                "spec": {"holderIdentity": holding, "leaseDurationSeconds": 15},
            },
        )
    unbound = client_for(
        control_plane.token_config(control_plane.request_token(RELEASE_NS, MANAGER))
    )
    acme = company_doc(namespace)
    owner = controller_reference(await kube_client.create(COMPANY, acme))
    # Labelled as the leader labels it (only the manager may: crewlet-operator-ring-labels).
    labelled = {"metadata": {"labels": {RING.shard: leases["first"]}}}
    await manager.patch(COMPANY, ACME, labelled, namespace)

    def status(writer: Client) -> Coroutine[Any, Any, Doc]:
        return writer.apply_status(
            COMPANY,
            {"metadata": identity(acme), "status": {"highestEngineVersion": HIGH_WATER}},
            dry_run=True,
            field_manager=MANAGER_NAME,
        )

    def child(writer: Client) -> Coroutine[Any, Any, Doc]:
        """A child of a company of the ring: a ServiceAccount carrying its slot label."""
        labels = {
            **MANAGED,
            "app.kubernetes.io/name": "crewlet",
            "crewlet.ai/company": ACME,
            RING.slot: "7",
        }
        account = {
            "metadata": {
                "name": f"{ACME}-engine",
                "namespace": namespace,
                "labels": labels,
                "ownerReferences": [owner],
            }
        }
        return writer.apply(r.SERVICE_ACCOUNT, account, dry_run=True, field_manager=MANAGER_NAME)

    await apply_policies(kube_client, docs, MEMBER_WRITES_POLICY)
    await apply_policies(kube_client, docs, MEMBER_CHILDREN_POLICY)
    try:
        await enforced(lambda: status(writers["second"]), MEMBER_WRITES_POLICY)
        await admitted("member-writes", status(writers["first"]))
        await admitted("member-children", child(writers["first"]))
        await admitted("member-children", child(writers["second"]))
        await denied(
            "member-writes",
            status(writers["second"]),
            MEMBER_WRITES_POLICY,
            f"is written by the replica holding the member Lease {RELEASE_NS}/{leases['first']}"
            f": not by Pod manager-second-{suffix}",
        )
        await admitted("member-writes", status(unbound))
        will = {"metadata": {"annotations": {RING.heirs: leases["second"]}}}
        await kube_client.patch(r.LEASE, leases["first"], will, RELEASE_NS)

        async def first_refused() -> bool:
            try:
                await status(writers["first"])
            except InvalidError:
                return True
            return False

        await eventually(first_refused, timeout=30, message="the will seen by the API server")
        await enforced(lambda: child(writers["first"]), MEMBER_CHILDREN_POLICY)
        await denied(
            "member-children",
            child(writers["first"]),
            MEMBER_CHILDREN_POLICY,
            f"the companies' children are written by the heirs of the member Lease "
            f"{RELEASE_NS}/{leases['first']}, which carries a will: not by Pod "
            f"manager-first-{suffix}, its holder when it was found dead",
        )
        await admitted("member-children", child(writers["second"]))
        await admitted("member-children", child(unbound))
        await denied(
            "member-writes",
            status(writers["first"]),
            MEMBER_WRITES_POLICY,
            f"the heirs of the member Lease {RELEASE_NS}/{leases['first']}, which carries a "
            f"will: not by Pod manager-first-{suffix}, its holder when it was found dead",
        )
        await admitted("member-writes", status(writers["second"]))
    finally:
        await delete_policies(kube_client, MEMBER_WRITES_POLICY)
        await delete_policies(kube_client, MEMBER_CHILDREN_POLICY)
        for lease in leases.values():
            with contextlib.suppress(NotFoundError):
                await kube_client.delete(r.LEASE, lease, RELEASE_NS)


async def test_a_tenant_writes_no_ring_labels(
    kube_client: Client,
    control_plane: ControlPlane,
    client_for: ClientFor,
    tenant: Client,
    held: Client,
    namespace: str,
) -> None:
    """Issue 47, finding 4: "Tenants write the ring labels on their own Companies: set, replace
    (skipping the drain handoff) or remove the shard label, set the drain label, create a
    Company already labelled." Each is refused; the manager (the sharder and the members)
    writes them, and the tenant changes everything else of its Company as before. A tenant's
    own ServiceAccount named like the manager is not the manager."""
    acme = company_doc(namespace)
    labelled = copy.deepcopy(acme)
    labelled["metadata"]["labels"] = {SHARD: MEMBER}
    await enforced(lambda: tenant.create(COMPANY, labelled, dry_run=True), RING_LABELS_POLICY)
    await denied(
        "ring-labels-manager-only",
        tenant.create(COMPANY, labelled, dry_run=True),
        RING_LABELS_POLICY,
        f"only the operator's manager sets, changes or removes the labels {SHARD} and {DRAIN} "
        f"of Company {namespace}/acme (the replica it is assigned to, with sharding): not "
        f"{SHARD} on a new Company",
    )
    labelled["metadata"]["labels"] = {DRAIN: "true"}
    await denied(
        "ring-labels-manager-only",
        tenant.create(COMPANY, labelled, dry_run=True),
        RING_LABELS_POLICY,
        f"not {DRAIN} on a new Company",
    )
    await admitted("ring-labels-manager-only", tenant.create(COMPANY, acme))

    def relabel(client: Client, labels: dict[str, str | None]) -> Awaitable[Doc]:
        return merge_patch(client, COMPANY, ACME, namespace, {"metadata": {"labels": labels}})

    await denied(
        "ring-labels-manager-only", relabel(tenant, {SHARD: MEMBER}), RING_LABELS_POLICY, SHARD
    )
    await admitted(
        "ring-labels-manager-only",
        held.patch(COMPANY, ACME, {"metadata": {"labels": {SHARD: MEMBER}}}, namespace),
    )
    changes: list[dict[str, str | None]] = [{SHARD: OLD_MEMBER}, {SHARD: None}, {DRAIN: "true"}]
    for labels in changes:
        await denied(
            "ring-labels-manager-only",
            relabel(tenant, labels),
            RING_LABELS_POLICY,
            f"not {next(iter(labels))}",
        )
    await admitted(
        "ring-labels-manager-only",
        merge_patch(
            tenant,
            COMPANY,
            ACME,
            namespace,
            {"metadata": {"labels": {"team": "a"}}, "spec": {"suspend": True}},
        ),
    )
    # A ServiceAccount of the tenant's own, named as the manager's: neither held as the manager
    # by its policy, nor let through as the manager by the ring's.
    impostor = await namespace_admin(kube_client, control_plane, client_for, namespace, MANAGER)
    await denied(
        "manager-exact", relabel(impostor, {SHARD: None}), RING_LABELS_POLICY, f"not {SHARD}"
    )
    await admitted(
        "manager-exact",
        impostor.create(r.SECRET, secret(namespace, "x", labelled=False), dry_run=True),
    )


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
    """Runs last; it needs the whole module (in a partial run it is deselected: e2e/conftest.py).
    Prints the writes checked, by category and by rule."""
    collected = len([i for i in request.session.items if i.module is request.module])  # type: ignore[attr-defined]
    rules = [(rule, category, text) for rule, (category, text) in MANAGER_RULES.items()]
    rules += [(rule, "tenant provisioner", text) for rule, text in TENANT_RULES.items()]
    lines, missing, total = [], [], 0
    categories: dict[str, list[int]] = {}
    for rule, category, text in rules:
        outcomes = TALLY.get(rule, {})
        admits, denies = len(outcomes.get("admitted", [])), len(outcomes.get("denied", []))
        total += admits + denies
        counts = categories.setdefault(category, [0, 0])
        counts[0] += admits
        counts[1] += denies
        lines.append(f"  {rule:28} admitted {admits:4}  denied {denies:4}  ({text})")
        if not admits or not denies:
            missing.append(rule)
    by_category = [
        f"  {category:28} admitted {admits:4}  denied {denies:4}"
        for category, (admits, denies) in categories.items()
    ]
    # The table's cases, each run twice (impersonated, with the token): a case admitted counts
    # once in every category of the rules it is held to, a case denied once in its rule's.
    cases: dict[str, list[int]] = {}
    for case in CASES:
        for category in dict.fromkeys(MANAGER_RULES[rule][0] for rule in case.rules):
            cases.setdefault(category, [0, 0])[case.denied is not None] += 1
    case_lines = [
        f"  {category:28} admitted {admits:4}  denied {denies:4}"
        for category, (admits, denies) in cases.items()
    ]
    report = (
        f"admission policy writes checked: {total} over {len(rules)} rules ({collected} tests)\n"
        "writes by category:\n"
        + "\n".join(by_category)
        + "\nby rule:\n"
        + "\n".join(lines)
        + f"\nthe manager's table, {len(CASES)} cases, by category:\n"
        + "\n".join(case_lines)
    )
    with capsys.disabled():  # shown even when output is captured
        print("\n" + report)
    assert not missing, f"rules without both an admitted and a denied write: {missing}\n{report}"
