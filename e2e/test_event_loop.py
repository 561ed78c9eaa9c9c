"""The daemon on uvloop (``--event-loop=uvloop``), as a user whose bill is the operator's CPU
runs it: it says which loop it runs on, and a Company converges as on asyncio's own loop (which
every other e2e module runs)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from operator_helpers import (
    PLATFORM,
    Operator,
    admin_client,
    company,
    engine_class,
    wait_converged,
)

from crewlet_operator import Client
from crewlet_operator.envtest import ControlPlane
from crewlet_operator.envtest.wait import eventually
from crewlet_operator_daemon.api.v1alpha1 import COMPANY, ENGINE_CLASS

TENANT = "looped"


# A plane of its own, without workloads: a company of no seats needs no pods.
@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    with ControlPlane(tmp_path_factory.mktemp("event-loop")) as plane:
        yield plane


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def admin(plane: ControlPlane) -> AsyncIterator[Client]:
    async with admin_client(plane, PLATFORM, TENANT) as client:
        yield client


async def test_a_company_converges_on_uvloop(
    plane: ControlPlane, admin: Client, tmp_path: Path
) -> None:
    await admin.create(ENGINE_CLASS, engine_class("looped"))
    operator = Operator(plane.kubeconfig, tmp_path, args=["--event-loop=uvloop"])
    try:
        await eventually(operator.ready, timeout=60, message="operator ready")
        [started] = [e for e in operator.log_events() if e.get("event") == "event loop"]
        assert started["loop"] == "uvloop.Loop"
        await admin.create(COMPANY, company(TENANT, "acme", "looped", seats={"replicas": 0}))
        await wait_converged(admin, [(TENANT, "acme")], timeout=60, namespace=TENANT)
    finally:
        operator.stop()
