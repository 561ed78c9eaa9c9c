"""What the API server refuses, and what got past it, answered: never a panic, never a
half-written company.

Objects stored before the CRD tightened (written here under a loosened CRD, then the real one
put back) and children the API server refuses although their class passed its schema. Each case
was first a failing test (the resilience review's findings); the comment above each names what
it guards. (A Secret the operator may not read: e2e/test_faults.py; image references and label
keys: e2e/test_bad_input.py.)
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from operator_helpers import (
    MANAGER_NAMESPACE,
    PLATFORM,
    Operator,
    admin_client,
    children_by_company,
    company,
    engine_class,
    manager_kubeconfig,
    operator,
    own_control_plane,
    secret,
    wait_converged,
)
from test_bad_input import install_loosened

from crewlet_operator import SECRET, Client, find_condition
from crewlet_operator.envtest import ControlPlane
from crewlet_operator.envtest.crds import install_crds
from crewlet_operator.envtest.wait import eventually
from crewlet_operator_daemon.api.crds import all_crds
from crewlet_operator_daemon.api.v1alpha1 import COMPANY, ENGINE_CLASS

NS = "refusals"
KEYS = "keys"
REF = {"namespace": PLATFORM, "name": KEYS, "key": "k"}


# A plane of its own: the module loosens the operator's CRDs and puts them back.
@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    with own_control_plane(tmp_path_factory.mktemp("refusals")) as plane:
        yield plane


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def client(plane: ControlPlane) -> AsyncIterator[Client]:
    async with admin_client(plane, PLATFORM, NS) as admin:
        await admin.create(SECRET, secret(PLATFORM, KEYS, k="v1"))
        yield admin


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def daemon(
    plane: ControlPlane, client: Client, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Operator]:
    """As the chart runs it: the manager's token, its RBAC, leader election in its namespace."""
    tmp = tmp_path_factory.mktemp("daemon")
    kubeconfig = await manager_kubeconfig(client, plane, tmp, leader_election=True)
    async with operator(
        kubeconfig,
        tmp,
        leader_elect=True,
        lease_namespace=MANAGER_NAMESPACE,
    ) as running:
        yield running


async def accepted_condition(client: Client, name: str, timeout: float = 30) -> dict[str, Any]:
    async def found() -> dict[str, Any] | None:
        got = await client.get(COMPANY, name, NS)
        return find_condition((got.get("status") or {}).get("conditions"), "Accepted")

    try:
        cond: dict[str, Any] | None = await eventually(found, timeout=timeout)
    except TimeoutError:
        got = await client.get(COMPANY, name, NS)
        raise AssertionError(f"{name}: no Accepted condition; status {got.get('status')}") from None
    assert cond is not None
    return cond


# The Company name rules are checked on create only (crewlet_operator.crd.on_create):
# at the root nothing is ratcheted, so a rule checked on every write would refuse the very
# status write that tells the owner of a Company stored before it what is wrong.
# (These two run first, each with a daemon of its own started after the real CRD is back, so
# that no reconcile can slip in while the loosened CRD is installed.)
@pytest.mark.parametrize("name", ["c" * 60, "acme.corp"])
async def test_a_stored_company_with_a_name_the_crd_now_refuses_is_reported(
    plane: ControlPlane, client: Client, tmp_path: Path, name: str
) -> None:
    real = all_crds()
    await install_loosened(client, real, NS)
    try:
        await client.create(COMPANY, company(NS, name, "anything"))
    finally:
        await install_crds(client, real)
    async with operator(plane.kubeconfig, tmp_path):
        cond = await accepted_condition(client, name)
    assert (cond["status"], cond["reason"]) == ("False", "InvalidName"), cond


# Server-side apply cannot type a stored object whose spec no longer fits the schema (500
# "failed to create typed live object"): the status goes by a merge patch instead.
async def test_a_stored_company_with_a_mistyped_field_is_reported(
    plane: ControlPlane, client: Client, tmp_path: Path
) -> None:
    real = all_crds()
    await install_loosened(client, real, NS)
    try:
        await client.create(COMPANY, company(NS, "seats-many", "x", seats={"replicas": "many"}))
    finally:
        await install_crds(client, real)
    async with operator(plane.kubeconfig, tmp_path):
        cond = await accepted_condition(client, "seats-many")
    assert (cond["status"], cond["reason"]) == ("False", "InvalidSpec"), cond


# A child the API server refuses (422) although its class passed the CRD: Accepted=False with
# the server's message, and what the pass created is removed.
CHILD_REFUSED: dict[str, dict[str, Any]] = {
    "cpu-lots": {"resources": {"data": {"requests": {"cpu": "lots"}}}},
    "toleration": {"scheduling": {"tolerations": [{"key": "k", "operator": "Bogus"}]}},
    "node-selector": {"scheduling": {"nodeSelector": {"pool": "bad value!"}}},
    "peer-cidr": {"networkPolicy": {"apiPeers": [{"ipBlock": {"cidr": "nope"}}]}},
    "sa-annotation": {"serviceAccount": {"annotations": {"bad key/x/y": "v"}}},
    "storage-class": {"storage": {"storageClassName": "Bad_Class", "size": "12Gi"}},
    "ingress-class": {"exposure": {"ingress": {"className": "Bad_Class!"}}},
}


@pytest.mark.parametrize("case", list(CHILD_REFUSED))
async def test_a_child_the_api_server_refuses_is_reported_and_nothing_half_written(
    client: Client, daemon: Operator, case: str
) -> None:
    await client.create(ENGINE_CLASS, engine_class(f"child-{case}", **CHILD_REFUSED[case]))
    await client.create(
        COMPANY, company(NS, case, f"child-{case}", webhookHostname="hooks.example.com")
    )
    cond = await accepted_condition(client, case)
    assert cond["status"] == "False", cond
    assert (await children_by_company(client, NS)).get((NS, case)) is None


# An EngineClass the model cannot parse references no Secret (crewlet_operator_daemon.references):
# observe, the class reconcile and the Secret event mapper go on, and the reconcile says
# InvalidClass.
async def test_an_unparseable_stored_class_is_reported_not_panicked_on(
    client: Client, daemon: Operator
) -> None:
    real = all_crds()
    await install_loosened(client, real, NS)
    try:
        no_engine = {"metadata": {"name": "no-engine"}, "spec": {"storage": {"size": "12Gi"}}}
        await client.create(ENGINE_CLASS, no_engine)
        await client.create(COMPANY, company(NS, "no-engine", "no-engine"))
    finally:
        await install_crds(client, real)
    cond = await accepted_condition(client, "no-engine")
    assert (cond["status"], cond["reason"]) == ("False", "InvalidClass"), cond
    assert daemon.metric('controller_runtime_reconcile_panics_total{controller="company"}') == 0


# Were the Secret event mapper to fail on that class, it would drop the events of every class.
async def test_a_rotation_reaches_a_valid_class_while_another_class_is_unparseable(
    client: Client, daemon: Operator
) -> None:
    await client.create(SECRET, secret(PLATFORM, "rotated", k="one"))
    keys = [{"name": "K", "secretRef": {"namespace": PLATFORM, "name": "rotated", "key": "k"}}]
    await client.create(ENGINE_CLASS, engine_class("valid", modelKeys=keys))
    await client.create(COMPANY, company(NS, "valid", "valid", suspend=True))
    await wait_converged(client, [(NS, "valid")], timeout=60, namespace=NS)
    await client.patch(
        SECRET, "rotated", {"data": {"k": base64.b64encode(b"two").decode()}}, PLATFORM
    )

    async def rotated() -> bool:
        env = await client.get(SECRET, "valid-env", NS)
        return base64.b64decode(env["data"]["K"]) == b"two"

    await eventually(rotated, timeout=30, message="the copy rotated")
