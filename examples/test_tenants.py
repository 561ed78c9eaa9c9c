"""The Tenant controller's envtest suite: a real control plane (workloads on), the manager run
in-process by the library's test harness.

Run it as a platform team runs its own: ``python -m pytest`` in this directory, with the library
installed (``pip install 'crewlet-operator[test]'``) and the binaries fetched once
(``python -m crewlet_operator.envtest bins``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio
from tenants import ADMINS, FINALIZER, QUOTA, TENANT_LABEL, setup, tenant_crd

from crewlet_operator import (
    NAMESPACE,
    RESOURCE_QUOTA,
    ROLE_BINDING,
    Client,
    Manager,
    Resource,
    find_condition,
)
from crewlet_operator.envtest import install_crds
from crewlet_operator.testing import (
    RunningManager,
    consistently,
    eventually,
    manager_options_for_tests,
    run_manager,
)

Object = dict[str, Any]


@pytest_asyncio.fixture(scope="module")
async def tenants(kube_client: Client) -> Resource:
    """The Tenant CRD installed (a no-op when the plane was given it), found by discovery."""
    await install_crds(kube_client, [tenant_crd()])
    manager = Manager(kube_client, manager_options_for_tests("tenants"))
    return await manager.mapper.resource_for("platform.example.com", "Tenant")


@pytest_asyncio.fixture
async def running(kube_client: Client, tenants: Resource) -> AsyncIterator[RunningManager]:
    manager = Manager(kube_client, manager_options_for_tests("tenants"))
    assert await setup(manager) == tenants
    async with run_manager(manager) as running:
        yield running


def tenant(name: str, **spec: Any) -> Object:
    return {"metadata": {"name": name}, "spec": spec}


async def ready(client: Client, tenants: Resource, name: str) -> Object | None:
    """The Tenant's Ready condition, once it is True."""
    got = await client.get(tenants, name)
    found = find_condition((got.get("status") or {}).get("conditions"), "Ready")
    return dict(found) if found and found["status"] == "True" else None


async def test_a_tenant_gets_its_namespace_quota_and_admins(
    running: RunningManager, kube_client: Client, tenants: Resource
) -> None:
    await kube_client.create(
        tenants, tenant("acme", quota={"pods": "10"}, admins=["alice@example.com"])
    )
    condition = await eventually(lambda: ready(kube_client, tenants, "acme"), message="Ready")
    assert condition["reason"] == "Provisioned"
    namespace = await kube_client.get(NAMESPACE, "acme")
    assert namespace["metadata"]["labels"][TENANT_LABEL] == "acme"
    quota = await kube_client.get(RESOURCE_QUOTA, QUOTA, "acme")
    assert quota["spec"]["hard"] == {"pods": "10"}
    admins = await kube_client.get(ROLE_BINDING, ADMINS, "acme")
    assert [s["name"] for s in admins["subjects"]] == ["alice@example.com"]
    got = await kube_client.get(tenants, "acme")
    assert got["metadata"]["finalizers"] == [FINALIZER]
    assert got["status"]["namespace"] == "acme"

    # Converged, it stays quiet: no status write, no further change of the Tenant.
    await running.idle()
    version = got["metadata"]["resourceVersion"]

    async def unchanged() -> bool:
        return bool(
            (await kube_client.get(tenants, "acme"))["metadata"]["resourceVersion"] == version
        )

    assert await consistently(unchanged, duration=1.5)

    # A change of the spec is applied, and a namespace deleted by hand comes back.
    await kube_client.patch(tenants, "acme", {"spec": {"quota": {"pods": "20"}}})

    async def quota_raised() -> bool:
        got = await kube_client.get(RESOURCE_QUOTA, QUOTA, "acme")
        return bool(got["spec"]["hard"] == {"pods": "20"})

    await eventually(quota_raised, message="the quota follows the spec")

    uid = (await kube_client.get(NAMESPACE, "acme"))["metadata"]["uid"]
    await kube_client.delete(NAMESPACE, "acme")

    async def recreated() -> bool:
        again = await kube_client.get_or_none(NAMESPACE, "acme")
        quota = await kube_client.get_or_none(RESOURCE_QUOTA, QUOTA, "acme")
        return again is not None and again["metadata"]["uid"] != uid and quota is not None

    await eventually(recreated, timeout=120, message="the namespace and its quota come back")


async def test_deleting_a_tenant_deletes_its_namespace_first(
    running: RunningManager, kube_client: Client, tenants: Resource
) -> None:
    """The finalizer: the Tenant stays until its namespace, contents and all, is gone."""
    await kube_client.create(tenants, tenant("globex"))
    await eventually(lambda: ready(kube_client, tenants, "globex"), message="Ready")
    await kube_client.delete(tenants, "globex")
    deleting = await kube_client.get_or_none(tenants, "globex")
    assert deleting is not None and deleting["metadata"].get("deletionTimestamp")

    async def tenant_gone() -> bool:
        return await kube_client.get_or_none(tenants, "globex") is None

    await eventually(tenant_gone, timeout=120, message="the Tenant deleted after its namespace")
    assert await kube_client.get_or_none(NAMESPACE, "globex") is None


async def test_a_namespace_that_is_not_the_tenants_is_not_taken_over(
    running: RunningManager, kube_client: Client, tenants: Resource
) -> None:
    """Adoption is explicit: a namespace someone else made keeps its owner, labels and content,
    and the Tenant says why it is not Ready."""
    await kube_client.create(NAMESPACE, {"metadata": {"name": "initech", "labels": {"team": "x"}}})
    try:
        await kube_client.create(tenants, tenant("initech", quota={"pods": "1"}))

        async def refused() -> Object | None:
            got = await kube_client.get(tenants, "initech")
            found = find_condition((got.get("status") or {}).get("conditions"), "Ready")
            return dict(found) if found and found["reason"] == "NamespaceTaken" else None

        condition = await eventually(refused, message="NamespaceTaken")
        assert condition["status"] == "False"
        assert "pass adopt=True" in condition["message"]
        namespace = await kube_client.get(NAMESPACE, "initech")
        assert namespace["metadata"]["labels"] == {
            "team": "x",
            "kubernetes.io/metadata.name": "initech",
        }
        assert not namespace["metadata"].get("ownerReferences")
        assert await kube_client.get_or_none(RESOURCE_QUOTA, QUOTA, "initech") is None
        # Deleting such a Tenant leaves the namespace that was never its own.
        await kube_client.delete(tenants, "initech")

        async def tenant_gone() -> bool:
            return await kube_client.get_or_none(tenants, "initech") is None

        await eventually(tenant_gone, message="the refused Tenant deleted")
        assert await kube_client.get_or_none(NAMESPACE, "initech") is not None
    finally:
        await kube_client.delete(NAMESPACE, "initech")
