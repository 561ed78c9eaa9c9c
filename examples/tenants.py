"""Example: a platform team's Tenant controller, with the library installed from PyPI.

A cluster-scoped ``Tenant`` (``platform.example.com/v1``) asks for a namespace of its own with a
ResourceQuota and its admins bound to the ``admin`` ClusterRole there. The controller:

- finds its kinds by discovery (:class:`~crewlet_operator.kube.mapper.RESTMapper`), not
  hand-made constants (the built-ins it writes come as constants: ``NAMESPACE``,
  ``RESOURCE_QUOTA``, ``ROLE_BINDING``);
- keeps a finalizer on each Tenant (:class:`~crewlet_operator.Finalizer`): a deleted Tenant's
  namespace is deleted and gone, contents and all, before the Tenant is, so a new Tenant of the
  same name never meets the old one's terminating namespace;
- never takes over a namespace that exists and is not its Tenant's
  (:meth:`~crewlet_operator.Client.apply_if_changed` refuses, the Tenant says ``NamespaceTaken``);
- writes its status only when it changed, in one call
  (:meth:`~crewlet_operator.Client.apply_status_if_changed`);
- watches Namespaces, so that a tenant's namespace deleted by hand comes back.

Its CRD is generated from the pydantic model below by the library's generator
(``python examples/tenants.py crds`` writes ``platform.example.com_tenants.yaml``), and
``test_tenants.py`` beside it is its envtest suite.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from crewlet_operator import (
    NAMESPACE,
    RESOURCE_QUOTA,
    ROLE_BINDING,
    CrewletError,
    Finalizer,
    Manager,
    NotOwnedError,
    Request,
    Resource,
    condition,
    controller_reference,
    set_condition,
)
from crewlet_operator.crd import ConditionDict, crd_for, list_map, write
from crewlet_operator.objects import labels, name

GROUP = "platform.example.com"
VERSION = "v1"
TENANT_LABEL = "platform.example.com/tenant"
FINALIZER = "platform.example.com/namespace"
QUOTA = "tenant-quota"
ADMINS = "tenant-admins"
HERE = Path(__file__).resolve().parent


class TenantSpec(BaseModel):
    """What a tenant is given."""

    model_config = ConfigDict(extra="forbid")

    quota: dict[str, str] = Field(
        default_factory=dict,
        description="The namespace's ResourceQuota, e.g. {requests.cpu: '4', pods: '20'}.",
    )
    admins: list[str] = Field(
        default_factory=list, description="Users bound to the admin ClusterRole in the namespace."
    )


class TenantStatus(BaseModel):
    """What the controller observed."""

    namespace: str | None = Field(default=None, description="The tenant's namespace.")
    conditions: list[ConditionDict] = Field(
        default_factory=list, json_schema_extra=list_map("type")
    )


class Tenant(BaseModel):
    """A team's share of the cluster: a namespace with a quota and its admins."""

    api_version: str | None = Field(default=None, alias="apiVersion")
    kind: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: TenantSpec = Field(default_factory=TenantSpec)
    status: TenantStatus | None = None


def tenant_crd() -> dict[str, Any]:
    """The Tenant CRD, from the model."""
    return crd_for(
        Tenant,
        group=GROUP,
        version=VERSION,
        kind="Tenant",
        plural="tenants",
        scope="Cluster",
        printer_columns=[
            {"name": "Namespace", "type": "string", "jsonPath": ".status.namespace"},
            {
                "name": "Ready",
                "type": "string",
                "jsonPath": '.status.conditions[?(@.type=="Ready")].status',
            },
        ],
    )


class NamespaceTerminatingError(CrewletError):
    """The deleted Tenant's namespace is still being emptied: try the finalizer again later."""


async def setup(manager: Manager) -> Resource:
    """Register the Tenant controller with ``manager``; return the Tenant resource."""
    client, cache = manager.client, manager.cache
    tenants = await manager.mapper.resource_for(GROUP, "Tenant")

    async def delete_namespace(tenant: dict[str, Any]) -> None:
        namespace = await client.get_or_none(NAMESPACE, name(tenant))
        if namespace is None or labels(namespace).get(TENANT_LABEL) != name(tenant):
            return  # gone, or never the tenant's
        if not (namespace["metadata"].get("deletionTimestamp")):
            await client.delete(NAMESPACE, name(tenant), uid=namespace["metadata"]["uid"])
        # Retried with backoff until the namespace controller has emptied and removed it.
        raise NamespaceTerminatingError(f"namespace {name(tenant)} is terminating")

    finalizer = Finalizer(client, tenants, FINALIZER, cleanup=delete_namespace)

    def tenant_of_namespace(namespace: dict[str, Any]) -> list[Request]:
        tenant = labels(namespace).get(TENANT_LABEL)
        return [Request(None, tenant)] if tenant else []

    async def reconcile(request: Request) -> None:
        found = cache.get(tenants, request.name)
        if found is None:
            return
        tenant = await finalizer.handle(found)
        if tenant is None:
            return  # deleted: its namespace is gone, and so is the finalizer
        owner = controller_reference(tenant)
        ns = request.name
        try:
            await client.apply_if_changed(
                NAMESPACE,
                {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {
                        "name": ns,
                        "labels": {TENANT_LABEL: request.name},
                        "ownerReferences": [owner],
                    },
                },
                cache.get(NAMESPACE, ns),
            )
        except NotOwnedError as taken:
            reason, message, ready = "NamespaceTaken", str(taken), False
        else:
            spec = TenantSpec.model_validate(tenant.get("spec") or {})
            await client.apply_if_changed(
                RESOURCE_QUOTA,
                {
                    "apiVersion": "v1",
                    "kind": "ResourceQuota",
                    "metadata": {"name": QUOTA, "namespace": ns, "ownerReferences": [owner]},
                    "spec": {"hard": spec.quota},
                },
                cache.get(RESOURCE_QUOTA, QUOTA, ns),
            )
            await client.apply_if_changed(
                ROLE_BINDING,
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "RoleBinding",
                    "metadata": {"name": ADMINS, "namespace": ns, "ownerReferences": [owner]},
                    "roleRef": {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "ClusterRole",
                        "name": "admin",
                    },
                    "subjects": [
                        {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}
                        for user in spec.admins
                    ],
                },
                cache.get(ROLE_BINDING, ADMINS, ns),
            )
            reason, message, ready = "Provisioned", f"namespace {ns}, its quota and admins", True
        conditions = (tenant.get("status") or {}).get("conditions")
        verdict = condition(
            "Ready", ready, reason, message, observed_generation=tenant["metadata"]["generation"]
        )
        status: dict[str, Any] = {"conditions": set_condition(conditions, verdict)}
        if ready:
            status["namespace"] = ns
        await client.apply_status_if_changed(tenants, status, tenant)

    (
        manager.controller("tenant")
        .for_(tenants)
        .owns(RESOURCE_QUOTA)
        .owns(ROLE_BINDING)
        .watches(NAMESPACE, tenant_of_namespace)
        .complete(reconcile)
    )
    return tenants


if __name__ == "__main__":
    if sys.argv[1:] != ["crds"]:
        sys.exit("usage: python examples/tenants.py crds")
    for path in write(HERE, [tenant_crd()]):
        print(path)
