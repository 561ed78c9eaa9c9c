"""The cluster view without an API server: which informer it reads a kind from (the manager's,
when that one holds every object whole, in the same scope, with the indexes asked for; its own
otherwise), and what its own keeps of an object."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import pytest_asyncio

from crewlet_operator import CONFIG_MAP, SECRET, Client, RestConfig
from crewlet_operator.cache import Cache, ClusterView, Compact, InformerOptions, MetadataOnly
from crewlet_operator.errors import NoInformerError
from crewlet_operator.kube.client import Scope


@pytest_asyncio.fixture
async def client() -> AsyncIterator[Client]:
    made = Client(RestConfig(host="https://127.0.0.1:1", token="t"))
    yield made
    await made.close()


def by_team(obj: dict[str, Any]) -> Iterator[str]:
    return iter([str((obj.get("metadata") or {}).get("labels", {}).get("team", ""))])


def trim(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    return {"metadata": {"name": meta.get("name"), "namespace": meta.get("namespace")}}


INDEXED = InformerOptions(indexers={"team": by_team}, storage=Compact())


async def started(view: ClusterView) -> None:
    await view.start()
    await view.stop()  # the choice is made at start; nothing here is listed


async def test_the_view_reads_the_managers_informer_when_it_holds_every_object(
    client: Client,
) -> None:
    cache = Cache(client)
    mine = cache.informer(CONFIG_MAP, INDEXED)
    view = ClusterView(client, cache)
    view.declare(CONFIG_MAP, InformerOptions(transform=trim, indexers={"team": by_team}))
    await started(view)
    mine.store.put({"metadata": {"name": "a", "namespace": "n", "labels": {"team": "x"}}})
    assert view.keys(CONFIG_MAP, ("team", "x")) == ["n/a"]
    assert view.get(CONFIG_MAP, "a", "n") is not None


@pytest.mark.parametrize(
    "held",
    [
        InformerOptions(indexers={"team": by_team}, scope=Scope(label_selector="app=web")),
        InformerOptions(),  # no index "team"
        InformerOptions(indexers={"team": by_team}, storage=MetadataOnly()),
        InformerOptions(indexers={"team": by_team}, storage=Compact(metadata_first=True)),
    ],
    ids=["another scope", "without the index", "metadata only", "metadata first"],
)
async def test_the_view_lists_a_kind_itself_when_the_managers_informer_holds_less(
    client: Client, held: InformerOptions
) -> None:
    cache = Cache(client)
    mine = cache.informer(CONFIG_MAP, held)
    view = ClusterView(client, cache)
    view.declare(CONFIG_MAP, InformerOptions(indexers={"team": by_team}))
    await started(view)
    mine.store.put({"metadata": {"name": "a", "namespace": "n", "labels": {"team": "x"}}})
    assert view.get(CONFIG_MAP, "a", "n") is None, "read from an informer of its own"


async def test_a_narrowed_kind_is_listed_by_the_view_itself(client: Client) -> None:
    cache = Cache(client)
    mine = cache.informer(CONFIG_MAP, INDEXED)
    view = ClusterView(client, cache)
    view.declare(CONFIG_MAP, InformerOptions(indexers={"team": by_team}))
    view.narrowed(CONFIG_MAP)  # sharding: the manager's cache holds a share
    await started(view)
    mine.store.put({"metadata": {"name": "a", "namespace": "n"}})
    assert view.get(CONFIG_MAP, "a", "n") is None


async def test_the_views_own_informer_keeps_the_labels_its_transform_dropped(
    client: Client,
) -> None:
    view = ClusterView(client, Cache(client))
    view.declare(SECRET, InformerOptions(transform=trim))
    await started(view)
    own = view._own.informers[SECRET]
    assert own.options.transform is not None
    obj = {"metadata": {"name": "s", "namespace": "n", "labels": {"shard": "a"}}, "data": {}}
    assert own.options.transform(obj) == {
        "metadata": {"name": "s", "namespace": "n", "labels": {"shard": "a"}}
    }


async def test_a_kind_is_declared_once(client: Client) -> None:
    view = ClusterView(client, Cache(client))
    view.declare(SECRET, InformerOptions(transform=trim))
    view.declare(SECRET)  # adds nothing
    with pytest.raises(ValueError, match="other options"):
        view.declare(SECRET, InformerOptions())
    with pytest.raises(NoInformerError, match="not started"):
        view.get(SECRET, "s", "n")
    with pytest.raises(NoInformerError, match="declare it"):
        view.get(CONFIG_MAP, "c", "n")
