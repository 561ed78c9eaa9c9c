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
    A fresh namespace per test (``t-<test name>-<random>``, named by the API server's
    ``generateName``), deleted afterwards. With workloads, teardown waits until it is gone, its
    pods deleted at once (``gracePeriodSeconds=0``: kwok runs no container to stop), so the next
    test never meets it terminating; without workloads no namespace controller finishes a
    deletion, so it only deletes, as controller-runtime's envtest.
``client_for``
    A factory: ``client_for(rest_config)`` returns a Client for another identity, e.g.
    ``client_for(control_plane.service_account_config(ns, "sa"))`` or
    ``client_for(control_plane.token_config(control_plane.request_token(ns, "sa")))``.

An async test or fixture that uses ``kube_client``, ``namespace`` or ``client_for`` (itself,
or through fixtures of its own) runs on the session's event loop, where they live, unless it
names a loop scope itself (a test's ``asyncio`` marker, ``pytest_asyncio.fixture(loop_scope=...)``):
a suite needs no loop-scope setting. pytest-asyncio itself warns while
``asyncio_default_fixture_loop_scope`` is unset; any value silences it and changes nothing here.

A missing binary fails the session with an error naming ``python -m crewlet_operator.envtest
bins``, which installs them; it never skips.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from crewlet_operator.envtest.controlplane import USER_FIELD_MANAGER, ControlPlane
from crewlet_operator.envtest.crds import load_crds
from crewlet_operator.envtest.wait import delete_namespace
from crewlet_operator.kube.client import Client
from crewlet_operator.kube.config import RestConfig
from crewlet_operator.kube.resources import NAMESPACE


def pytest_addoption(parser: pytest.Parser) -> None:
    """The plugin's options: ``--envtest-workloads`` and ``--envtest-crds``, and the ini
    options ``envtest_workloads`` and ``envtest_crd_paths``."""
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


_SESSION_LOOP_FIXTURES = frozenset({"kube_client", "namespace", "client_for"})
"""The fixtures that run on the session's event loop: a test using any of them must too."""


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run each async test, and each async fixture, that uses the session loop's fixtures
    (directly or through others) on that loop, unless it names a loop scope itself: a suite
    needs no loop-scope setting. Without it, a test or a fixture ran on a loop of its own, and
    the session's client failed there ("Timeout context manager should be used inside a
    task"), a fixture's at its teardown."""
    session_loop = pytest.mark.asyncio(loop_scope="session")
    for item in items:
        if _SESSION_LOOP_FIXTURES.isdisjoint(getattr(item, "fixturenames", ())):
            continue
        _fixtures_on_the_session_loop(item)
        if not pytest_asyncio.is_async_test(item):
            continue
        marker = item.get_closest_marker("asyncio")
        if marker is None or not (marker.kwargs.get("loop_scope") or marker.kwargs.get("scope")):
            item.add_marker(session_loop, append=False)  # the closest marker counts


def _fixtures_on_the_session_loop(item: pytest.Item) -> None:
    """Put each async fixture ``item`` uses that reaches the session loop's fixtures on the
    session's loop, unless it names a loop scope (pytest-asyncio reads ``_loop_scope`` from
    the fixture's function before its ini defaults)."""
    definitions: dict[str, Sequence[Any]] = item._fixtureinfo.name2fixturedefs  # type: ignore[attr-defined]
    reaches: dict[str, bool] = {}

    def reach(name: str, seen: frozenset[str]) -> bool:
        if name in _SESSION_LOOP_FIXTURES:
            return True
        if name not in reaches:
            found = definitions.get(name) or ()
            reaches[name] = (
                len(found) > 0
                and name not in seen
                and any(reach(arg, seen | {name}) for arg in found[-1].argnames)
            )
        return reaches[name]

    for name, found in definitions.items():
        if not found or name in _SESSION_LOOP_FIXTURES:
            continue
        function = found[-1].func
        is_async = inspect.iscoroutinefunction(function) or inspect.isasyncgenfunction(function)
        if is_async and getattr(function, "_loop_scope", None) is None and reach(name, frozenset()):
            function._loop_scope = "session"


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
async def namespace(
    kube_client: Client, control_plane: ControlPlane, request: pytest.FixtureRequest
) -> AsyncIterator[str]:
    """A namespace of its own for each test (``t-<test name>-<random>``), deleted after it.

    With workloads, teardown waits until the namespace is gone (see
    :func:`~crewlet_operator.envtest.wait.delete_namespace`), so the next test's manager does
    not meet it terminating; without, nothing would finish the deletion (kube-controller-manager
    does), so it deletes without waiting, as controller-runtime's envtest."""
    stem = "".join(c if c.isalnum() else "-" for c in request.node.name.lower())[:40].strip("-")
    # The API server picks the suffix, and picks again on a collision.
    created = await kube_client.create(NAMESPACE, {"metadata": {"generateName": f"t-{stem}-"}})
    name: str = created["metadata"]["name"]
    yield name
    await delete_namespace(kube_client, name, wait=control_plane.workloads)
