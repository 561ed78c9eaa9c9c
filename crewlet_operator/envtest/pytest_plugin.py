"""pytest fixtures for envtest-style suites against a real local control plane.

Enable it in a suite's ``conftest.py``::

    pytest_plugins = ["crewlet_operator.envtest.pytest_plugin"]

Fixtures:

``control_plane``
    One :class:`~crewlet_operator.envtest.ControlPlane` for the whole session. Set
    ``envtest_workloads = true`` in the ini file (or pass ``--envtest-workloads``, or set
    ``CREWLET_ENVTEST_WORKLOADS=1``) to also run kube-controller-manager, kube-scheduler and
    kwok: garbage collection, StatefulSet pods, Ready pods and the aggregated ClusterRoles
    ``admin``, ``edit`` and ``view`` then work. Without workloads those roles have no rules (the
    controller-manager fills them in), so the plane warns with
    :class:`~crewlet_operator.envtest.EmptyAggregatedRolesWarning`: an RBAC test that expects
    ``view`` to deny passes for the wrong reason, and one that expects ``edit`` to grant fails.
``envtest_crds``
    The CRDs installed into ``control_plane`` before kube-controller-manager starts (so its
    garbage collector knows their kinds from the start), as controller-runtime's
    ``CRDDirectoryPaths``: by default those in the files and directories of the
    ``envtest_crd_paths`` ini option (relative to the ini file) or of ``--envtest-crds PATH``
    (repeatable; replaces the ini option). Override the fixture in ``conftest.py`` to give
    others::

        @pytest.fixture(scope="session")
        def envtest_crds() -> list[dict[str, Any]]:
            return load_crds(Path(__file__).parent / "config" / "crd")
``kube_client``
    A :class:`~crewlet_operator.Client` as cluster admin.
``namespace``
    A fresh namespace per test, deleted afterwards.
``client_for``
    A factory: ``client_for(rest_config)`` returns a Client for another identity, e.g.
    ``client_for(control_plane.service_account_config(ns, "sa"))`` or
    ``client_for(control_plane.token_config(control_plane.request_token(ns, "sa")))``.

A missing binary fails the session with an error naming ``python -m crewlet_operator.envtest
bins``, which installs them; it never skips.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from crewlet_operator.envtest.controlplane import USER_FIELD_MANAGER, ControlPlane
from crewlet_operator.envtest.crds import load_crds
from crewlet_operator.errors import NotFoundError
from crewlet_operator.kube.client import Client
from crewlet_operator.kube.config import RestConfig
from crewlet_operator.kube.resources import NAMESPACE


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("envtest")
    group.addoption(
        "--envtest-workloads",
        action="store_true",
        default=None,
        help="run kube-controller-manager, kube-scheduler and kwok beside the API server",
    )
    parser.addini(
        "envtest_workloads",
        type="bool",
        default=False,
        help="run kube-controller-manager, kube-scheduler and kwok beside the API server",
    )
    crds_help = "CRD files or directories installed before kube-controller-manager starts"
    group.addoption(
        "--envtest-crds",
        action="append",
        type=Path,
        metavar="PATH",
        help=f"{crds_help} (repeatable; replaces the envtest_crd_paths ini option)",
    )
    parser.addini("envtest_crd_paths", type="paths", default=[], help=crds_help)


def _workloads(config: pytest.Config) -> bool:
    option = config.getoption("--envtest-workloads")
    if option is not None:
        return bool(option)
    if os.environ.get("CREWLET_ENVTEST_WORKLOADS"):
        return os.environ["CREWLET_ENVTEST_WORKLOADS"] not in ("0", "false", "")
    return bool(config.getini("envtest_workloads"))


@pytest.fixture(scope="session")
def envtest_crds(request: pytest.FixtureRequest) -> list[dict[str, Any]]:
    """The CRDs ``control_plane`` installs before its workloads start: those of
    ``--envtest-crds`` or else of the ``envtest_crd_paths`` ini option. Override it to give
    others."""
    paths: list[Path] = request.config.getoption("--envtest-crds") or list(
        request.config.getini("envtest_crd_paths")
    )
    return load_crds(*paths)


@pytest.fixture(scope="session")
def control_plane(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    envtest_crds: list[dict[str, Any]],
) -> Iterator[ControlPlane]:
    """A real control plane for the session, with ``envtest_crds`` installed; every process it
    started is stopped after."""
    plane = ControlPlane(
        tmp_path_factory.mktemp("envtest"),
        workloads=_workloads(request.config),
        crds=envtest_crds,
    )
    with plane:
        yield plane


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def kube_client(control_plane: ControlPlane) -> AsyncIterator[Client]:
    """A cluster-admin client, writing as the cluster's user (``USER_FIELD_MANAGER``), not as
    a controller: what a test makes is not a controller's own, and a manager built on this
    client writes as its own name."""
    async with Client(control_plane.admin_config(), field_manager=USER_FIELD_MANAGER) as client:
        yield client


@pytest_asyncio.fixture(loop_scope="session")
async def client_for() -> AsyncIterator[Callable[[RestConfig], Client]]:
    """Make clients for other identities; they are closed after the test."""
    made: list[Client] = []

    def make(config: RestConfig) -> Client:
        client = Client(config, field_manager=USER_FIELD_MANAGER)
        made.append(client)
        return client

    yield make
    for client in made:
        await client.close()


@pytest_asyncio.fixture(loop_scope="session")
async def namespace(kube_client: Client, request: pytest.FixtureRequest) -> AsyncIterator[str]:
    """A namespace of its own for each test (``t-<test name>-<random>``), deleted after it."""
    stem = "".join(c if c.isalnum() else "-" for c in request.node.name.lower())[:40].strip("-")
    name = f"t-{stem}-{uuid.uuid4().hex[:6]}"
    await kube_client.create(NAMESPACE, {"metadata": {"name": name}})
    yield name
    with contextlib.suppress(NotFoundError):
        await kube_client.delete(NAMESPACE, name)
