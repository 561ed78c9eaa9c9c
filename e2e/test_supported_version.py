"""The one Kubernetes minor the operator supports, told apart on a real API server.

The install page: "The operator supports one minor release of Kubernetes, the one it is tested
against ... A cluster on any other minor is not supported." kube-apiserver 1.37 started with
``--emulated-version=1.36`` serves Kubernetes 1.36's APIs and says so in its ``/version``
(``emulationMinor``): the daemon warns that such a cluster is unsupported, naming the minor, and
still runs its companies (stopping would leave every company unmanaged).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from operator_helpers import PLATFORM, ROOT, Operator, admin_client, operator

from crewlet_operator.envtest import ControlPlane
from crewlet_operator.envtest.crds import install_crds, load_crds
from crewlet_operator.envtest.wait import eventually
from crewlet_operator.kube.client import Client


@pytest.fixture(scope="module")
def emulating_1_36(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    with ControlPlane(
        tmp_path_factory.mktemp("plane-1.36"), apiserver_args=("--emulated-version=1.36",)
    ) as plane:
        yield plane


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def admin(emulating_1_36: ControlPlane) -> AsyncIterator[Client]:
    async with admin_client(emulating_1_36, PLATFORM) as client:
        yield client


def unsupported_warnings(daemon: Operator) -> list[dict[str, object]]:
    return [e for e in daemon.log_events() if e.get("event") == "unsupported Kubernetes minor"]


async def test_an_older_minor_is_reported_unsupported_and_the_daemon_runs(
    emulating_1_36: ControlPlane, admin: Client, tmp_path: Path
) -> None:
    version = await admin.server_version()
    assert (version["minor"], version["emulationMinor"]) == ("37", "36")
    async with operator(emulating_1_36.kubeconfig, tmp_path) as daemon:
        [warning] = await eventually(
            lambda: unsupported_warnings(daemon), message="the unsupported-minor warning"
        )
        assert warning["level"] == "warning"
        assert "serves Kubernetes 1.36 (emulated)" in str(warning["reason"])
        assert "supports 1.37 only" in str(warning["reason"])
        assert daemon.ready() and daemon.healthz() == 200


async def test_the_supported_minor_gets_no_warning(
    control_plane: ControlPlane, kube_client: Client, tmp_path: Path
) -> None:
    """The session's plane, 1.37 unemulated: the daemon connects and says nothing of it."""
    await install_crds(kube_client, load_crds(ROOT / "manifests" / "crds"))
    async with operator(control_plane.kubeconfig, tmp_path) as daemon:
        await eventually(
            lambda: any(e.get("event") == "connected" for e in daemon.log_events()),
            message="connected",
        )
        assert unsupported_warnings(daemon) == []
