"""Accepted at once under load (issue 16): a new Company hears its verdict ahead of a backlog.

The operator writes a company's verdict (``Accepted``, or a refusal with its reason) on its own,
at the priority of the create, and applies its children later at a lower one. So under a
backlog of a few hundred Companies whose children are still being applied, a Company created
after all of them is Accepted, and one its class does not allow is refused with
``ClassNotAllowed``, while the backlog has not converged: asserted by order (what exists when
the verdicts appear), never by time. Each verdict is also one Event on the Company.

On a control plane of the module's own, without workloads: nothing here needs pods, and the
burst would slow the session's other modules.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from operator_helpers import (
    PLATFORM,
    Operator,
    admin_client,
    company,
    engine_class,
    unconverged,
    wait_condition,
)

from crewlet_operator import EVENT, NAMESPACE, Client
from crewlet_operator.envtest import ControlPlane
from crewlet_operator.envtest.wait import eventually
from reconcilers.api.v1alpha1 import COMPANY, ENGINE_CLASS

BACKLOG = 240
NO_SEATS = {"seats": {"replicas": 0}}
Object = dict[str, Any]


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    with ControlPlane(tmp_path_factory.mktemp("accepted-first")) as plane:
        yield plane


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def admin(plane: ControlPlane) -> AsyncIterator[Client]:
    async with admin_client(plane, PLATFORM, "backlog", "tenants", "outsiders") as client:
        await client.patch(NAMESPACE, "tenants", {"metadata": {"labels": {"tier": "paid"}}})
        yield client


async def events_about(client: Client, namespace: str, name: str) -> list[Object]:
    listed = await client.list(EVENT, namespace)
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
    finally:
        operator.stop()
        for name in ("open", "paid-only"):
            await admin.delete(ENGINE_CLASS, name)
