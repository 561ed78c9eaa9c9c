"""Renewals apart from reconciles (issue 50): the chart's FlowSchema puts the manager's Lease
traffic at the API server's leader-election priority level, and the manager renews through a
client of its own. A manager whose reconciles saturate their priority level (one with no seat
of its own, kept busy by a flood of lists, so that API Priority and Fairness refuses the rest
with a 429) still takes and renews its Lease; without the FlowSchema its Lease's requests are
refused with the rest.

The chart is rendered for a release of this test's own (its ServiceAccount, FlowSchema and
Role), so that starving it starves no other test's manager.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from operator_helpers import chart_documents

from crewlet_operator import (
    CONFIG_MAP,
    LEASE,
    ROLE,
    ROLE_BINDING,
    SERVICE_ACCOUNT,
    Client,
    NotFoundError,
    Resource,
)
from crewlet_operator._tasks import cancel_and_wait
from crewlet_operator.envtest import ControlPlane
from crewlet_operator.envtest.wait import eventually
from crewlet_operator.errors import TooManyRequestsError
from crewlet_operator.kube.resources import FLOW_SCHEMA, PRIORITY_LEVEL_CONFIGURATION
from crewlet_operator.kube.retry import RetryPolicy
from crewlet_operator.leader import LeaderElectionConfig, LeaderElector
from crewlet_operator.manager import LEASE_RETRIES

RELEASE = "apf"
FLOOD = 16
"""Reconcile-like requests in flight at once, all through the manager's main client."""


def starved(name: str, account: str, namespace: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A priority level with no seat (it borrows none), and a FlowSchema that sends every
    request of the ServiceAccount there, matched after the chart's (200)."""
    level = {
        "metadata": {"name": name},
        "spec": {
            "type": "Limited",
            "limited": {
                "nominalConcurrencyShares": 0,
                "lendablePercent": 0,
                "borrowingLimitPercent": 0,
                "limitResponse": {"type": "Reject"},
            },
        },
    }
    everything = {"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}
    schema = {
        "metadata": {"name": name},
        "spec": {
            "matchingPrecedence": 1000,
            "priorityLevelConfiguration": {"name": name},
            "distinguisherMethod": {"type": "ByUser"},
            "rules": [
                {
                    "subjects": [
                        {
                            "kind": "ServiceAccount",
                            "serviceAccount": {"name": account, "namespace": namespace},
                        }
                    ],
                    "resourceRules": [
                        {**everything, "clusterScope": True, "namespaces": ["*"]},
                    ],
                }
            ],
        },
    }
    return level, schema


@contextlib.asynccontextmanager
async def created(client: Client, resource: Resource, obj: dict[str, Any]) -> AsyncIterator[None]:
    await client.create(resource, obj)
    try:
        yield
    finally:
        with contextlib.suppress(NotFoundError):
            await client.delete(resource, obj["metadata"]["name"], obj["metadata"].get("namespace"))


BULK = 400
"""ConfigMaps of 8 KiB each: a list of them keeps a seat for a while."""


async def slow_to_list(client: Client, namespace: str, account: str) -> None:
    """ConfigMaps the flood's lists take a while to serve, and a Role that lets the manager
    list them (a refused list would let its seat go at once)."""
    gate = asyncio.Semaphore(16)

    async def one(i: int) -> None:
        async with gate:
            body = {"metadata": {"name": f"bulk-{i}", "namespace": namespace}}
            await client.create(CONFIG_MAP, {**body, "data": {"v": "x" * 8192}})

    await asyncio.gather(*(one(i) for i in range(BULK)))
    rule = {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}
    await client.create(
        ROLE, {"metadata": {"name": "e2e-bulk", "namespace": namespace}, "rules": [rule]}
    )
    subject = {"kind": "ServiceAccount", "name": account, "namespace": namespace}
    ref = {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "e2e-bulk"}
    binding = {"metadata": {"name": "e2e-bulk", "namespace": namespace}, "roleRef": ref}
    await client.create(ROLE_BINDING, {**binding, "subjects": [subject]})


class Flood:
    """Lists of ConfigMaps through the manager's main client, :data:`FLOOD` at a time, until
    stopped: its reconciles' traffic. A level with no seat still lets a request through while
    none of its own runs: the flood keeps one running at all times."""

    def __init__(self, client: Client, namespace: str) -> None:
        self.refused = 0
        self._workers = [asyncio.create_task(self._one(client, namespace)) for _ in range(FLOOD)]

    async def _one(self, client: Client, namespace: str) -> None:
        while True:
            try:
                await client.list(CONFIG_MAP, namespace)
            except TooManyRequestsError:
                self.refused += 1
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        await cancel_and_wait(*self._workers)


def elector(client: Client, namespace: str) -> LeaderElector:
    """The manager's elector, as the manager wires it: a client of its own, no retries."""
    return LeaderElector(
        client.with_own_connections(retries=LEASE_RETRIES),
        LeaderElectionConfig(
            "apf-leader",
            namespace,
            identity="starved-manager",
            lease_duration=4,
            renew_deadline=3,
            retry_period=1,
        ),
    )


async def test_a_manager_whose_reconciles_are_refused_still_renews_its_lease(
    kube_client: Client, control_plane: ControlPlane, namespace: str
) -> None:
    docs = chart_documents(release=RELEASE, namespace=namespace)
    (schema,) = [d for d in docs if d["kind"] == "FlowSchema"]
    (account,) = [d for d in docs if d["kind"] == "ServiceAccount"]
    name = account["metadata"]["name"]
    assert schema["spec"]["priorityLevelConfiguration"] == {"name": "leader-election"}
    await kube_client.create(SERVICE_ACCOUNT, account)
    for doc in docs:  # the Lease's Role and its binding, in the release's namespace
        if doc["kind"] in ("Role", "RoleBinding"):
            await kube_client.create(ROLE if doc["kind"] == "Role" else ROLE_BINDING, doc)
    await slow_to_list(kube_client, namespace, name)
    level, catch_all = starved(f"e2e-starved-{namespace}", name, namespace)
    token = control_plane.request_token(namespace, name)
    async with (
        Client(control_plane.token_config(token), retries=RetryPolicy(max_retries=0)) as manager,
        created(kube_client, PRIORITY_LEVEL_CONFIGURATION, level),
        created(kube_client, FLOW_SCHEMA, catch_all),
    ):
        flooding = Flood(manager, namespace)
        leases = manager.with_own_connections(retries=LEASE_RETRIES)
        try:
            await eventually(lambda: flooding.refused > 0, timeout=30, message="saturated")
            # The control: without the chart's FlowSchema, the Lease's requests fall in the
            # starved level with the rest, and are refused.
            assert await refusals(leases, namespace, 20) > 0
            async with created(kube_client, FLOW_SCHEMA, schema):
                await eventually(
                    lambda: _none_refused(leases, namespace),
                    timeout=30,
                    message="the lease requests classified by the chart's FlowSchema",
                )
                leader = elector(manager, namespace)
                await asyncio.wait_for(leader.acquire(), 30)
                holding = asyncio.create_task(leader.hold())
                await asyncio.sleep(8)  # eight retry periods, over twice the renew deadline
                assert not holding.done(), "the lease was lost"
                assert leader.is_leader
                assert await refusals(leases, namespace, 20) == 0
                await cancel_and_wait(holding)
                await leader.release()
        finally:
            await flooding.stop()
            await leases.close()
    assert flooding.refused > 0


async def refusals(leases: Client, namespace: str, tries: int) -> int:
    """Of ``tries`` reads of the Lease (one each 0.1 s), how many were refused (429)."""
    refused = 0
    for _ in range(tries):
        try:
            await leases.get_or_none(LEASE, "apf-leader", namespace)
        except TooManyRequestsError:
            refused += 1
        await asyncio.sleep(0.1)
    return refused


async def _none_refused(leases: Client, namespace: str) -> bool:
    return await refusals(leases, namespace, 5) == 0
