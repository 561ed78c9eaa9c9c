"""Server-side shards (issue 50), on the real API server: a list, a watch and an informer that
ask for one shard of a kind's objects (:class:`ShardSelector`, ``shardSelector``), on a control
plane with the ``ShardedListAndWatch`` gate on (alpha since Kubernetes 1.36: it sends that shard
alone) and on the session's, with the gate off (it sends every object: the informer leaves the
others out, and says so).

The shard is made of the namespaces themselves (a range of one hash each): names that differ in
their last characters alone fall into few equal parts of the hash space (bench/NOTES.md,
"Server-side shards").
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import pytest_asyncio

from crewlet_operator import CONFIG_MAP, NAMESPACE, Client, InformerOptions
from crewlet_operator._tasks import cancel_and_wait
from crewlet_operator.cache import Informer
from crewlet_operator.envtest import USER_FIELD_MANAGER, ControlPlane, install_crds, load_crds
from crewlet_operator.envtest.wait import eventually
from crewlet_operator.kube.params import ListParams, Scope, ShardSelector, fnv1a_64
from crewlet_operator.kube.resources import Resource

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
sys.path.insert(0, str(EXAMPLES))

from widgets import WIDGET  # noqa: E402

KINDS = [CONFIG_MAP, WIDGET]
SPACES = 8


@pytest.fixture(scope="module")
def sharded_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    plane = ControlPlane(
        tmp_path_factory.mktemp("shards"),
        apiserver_args=("--feature-gates=ShardedListAndWatch=true",),
    )
    with plane:
        yield plane


@pytest_asyncio.fixture(loop_scope="session")
async def sharded_client(sharded_plane: ControlPlane) -> AsyncIterator[Client]:
    async with Client(sharded_plane.admin_config(), field_manager=USER_FIELD_MANAGER) as client:
        yield client


async def world(client: Client, stem: str) -> tuple[list[str], ShardSelector]:
    """``SPACES`` namespaces, each with a ConfigMap and a Widget, and a shard of every other
    one of them (the first, the third...)."""
    await install_crds(client, load_crds(EXAMPLES / "example.crewlet.ai_widgets.yaml"))
    spaces = []
    for _ in range(SPACES):
        made = await client.create(NAMESPACE, {"metadata": {"generateName": f"{stem}-"}})
        space = made["metadata"]["name"]
        spaces.append(space)
        await client.create(CONFIG_MAP, {"metadata": {"name": "c", "namespace": space}})
        await client.create(WIDGET, {"metadata": {"name": "w", "namespace": space}, "spec": {}})
    shard = ShardSelector(tuple((fnv1a_64(s), fnv1a_64(s) + 1) for s in spaces[::2]))
    return spaces, shard


async def listed(client: Client, resource: Resource, scope: Scope) -> dict[str, Any]:
    """One whole list, as the API server answered it."""
    query = ListParams(scope, page_size=0).query()
    body = await client.transport.send("GET", resource.path(None), query=query)
    answer: dict[str, Any] = orjson.loads(body)
    return answer


@contextlib.asynccontextmanager
async def informed(
    client: Client, resource: Resource, shard: ShardSelector
) -> AsyncIterator[Informer]:
    """An informer of ``resource`` in ``shard``, synced, running until the block ends."""
    informer = Informer(client, resource, InformerOptions(scope=Scope(shard=shard)))
    task = asyncio.create_task(informer.run())
    try:
        await informer.wait_for_sync(30)
        yield informer
    finally:
        await cancel_and_wait(task)


async def create(client: Client, resource: Resource, name: str, namespace: str) -> None:
    body: dict[str, Any] = {"metadata": {"name": name, "namespace": namespace}}
    await client.create(resource, {**body, "spec": {}} if resource is WIDGET else body)


def spaces_held(informer: Informer) -> set[str]:
    return {str(o["metadata"]["namespace"]) for o in informer.store.list()}


async def watched_alone(
    client: Client, informer: Informer, resource: Resource, inside: str, outside: str
) -> None:
    """An object created in ``inside`` (of the shard) is watched; one in ``outside`` is not."""
    for namespace in (inside, outside):
        await create(client, resource, "new", namespace)
    await eventually(
        lambda: informer.store.get(f"{inside}/new") is not None,
        timeout=10,
        message="the shard's new object watched",
    )
    assert informer.store.get(f"{outside}/new") is None


@pytest.mark.parametrize("resource", KINDS, ids=lambda r: r.kind)
async def test_with_the_gate_on_the_api_server_sends_the_shard_alone(
    sharded_client: Client, resource: Resource
) -> None:
    """A list in the shard lists its objects alone, and an informer of it is sent nothing
    else, by its list or its watch."""
    spaces, shard = await world(sharded_client, f"on-{resource.kind.lower()}")
    chosen = spaces[::2]
    everything = await listed(sharded_client, resource, Scope())
    sharded = await listed(sharded_client, resource, Scope(shard=shard))
    assert {o["metadata"]["namespace"] for o in sharded["items"]} == set(chosen)
    assert len(sharded["items"]) < len(everything["items"])
    async with informed(sharded_client, resource, shard) as informer:
        assert spaces_held(informer) & set(chosen) == set(chosen)
        assert spaces_held(informer) <= set(chosen)
        await watched_alone(sharded_client, informer, resource, chosen[0], spaces[1])
        assert not informer.shard_ignored, "the API server sent nothing outside the shard"


@pytest.mark.parametrize("resource", KINDS, ids=lambda r: r.kind)
async def test_with_the_gate_off_an_informer_leaves_the_others_out_and_says_so(
    kube_client: Client, resource: Resource
) -> None:
    """The session's API server (gate off) sends every object: the informer holds the shard's
    alone all the same, by its list and its watch, and says the server did not shard."""
    spaces, shard = await world(kube_client, f"off-{resource.kind.lower()}")
    chosen = spaces[::2]
    everything = await listed(kube_client, resource, Scope(shard=shard))
    assert {o["metadata"]["namespace"] for o in everything["items"]} > set(chosen)
    async with informed(kube_client, resource, shard) as informer:
        assert spaces_held(informer) == set(chosen)
        await watched_alone(kube_client, informer, resource, chosen[0], spaces[1])
        assert informer.shard_ignored
