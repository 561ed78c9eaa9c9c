"""Renewals apart from reconciles (issue 50): the chart's FlowSchema puts the manager's Lease
traffic at the API server's leader-election priority level, and the manager renews through a
client of its own. A manager whose reconciles API Priority and Fairness refuses (a priority
level with no seat for them, where a saturated one would queue and then refuse them) still
takes and renews its Lease; without the FlowSchema, the same elector cannot.

The chart is rendered for a release of this test's own (its ServiceAccount, FlowSchema and
Role), so that starving it starves no other test's manager.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from operator_helpers import chart_documents

from crewlet_operator import (
    CONFIG_MAP,
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
from crewlet_operator.kube.retry import RetryPolicy
from crewlet_operator.leader import LeaderElectionConfig, LeaderElector
from crewlet_operator.manager import LEASE_RETRIES

FLOW_SCHEMA = Resource("flowcontrol.apiserver.k8s.io", "v1", "FlowSchema", "flowschemas")
PRIORITY_LEVEL = Resource(
    "flowcontrol.apiserver.k8s.io",
    "v1",
    "PriorityLevelConfiguration",
    "prioritylevelconfigurations",
)
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


class Flood:
    """Lists of ConfigMaps through the manager's main client, :data:`FLOOD` at a time, until
    stopped: its reconciles' traffic."""

    def __init__(self, client: Client, namespace: str) -> None:
        self.refused = 0
        self.served = 0
        self._workers = [asyncio.create_task(self._one(client, namespace)) for _ in range(FLOOD)]

    async def _one(self, client: Client, namespace: str) -> None:
        while True:
            try:
                await client.list(CONFIG_MAP, namespace)
                self.served += 1
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
    level, catch_all = starved(f"e2e-starved-{namespace}", name, namespace)
    token = control_plane.request_token(namespace, name)
    async with (
        Client(control_plane.token_config(token), retries=RetryPolicy(max_retries=0)) as manager,
        created(kube_client, PRIORITY_LEVEL, level),
        created(kube_client, FLOW_SCHEMA, catch_all),
    ):

        async def refused() -> bool:
            try:
                await manager.list(CONFIG_MAP, namespace)
            except TooManyRequestsError:
                return True
            return False

        await eventually(refused, timeout=30, message="the manager's requests refused")
        flooding = Flood(manager, namespace)
        try:
            # The control: without the chart's FlowSchema, the Lease's requests are refused
            # with the rest.
            control = elector(manager, namespace)
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(control.acquire(), 6)
            async with created(kube_client, FLOW_SCHEMA, schema):
                leader = elector(manager, namespace)
                await asyncio.wait_for(leader.acquire(), 30)
                holding = asyncio.create_task(leader.hold())
                await asyncio.sleep(8)  # eight retry periods, over twice the renew deadline
                assert not holding.done(), "the lease was lost"
                assert leader.is_leader
                await cancel_and_wait(holding)
                await leader.release()
        finally:
            await flooding.stop()
    assert flooding.refused > 0
    assert flooding.served == 0, "every reconcile-like request was refused"
