"""What the cache says about its informers' liveness, and how an informer decodes a lazy list
(no API server: nothing is started, or a client sends the lines by hand)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from types import SimpleNamespace

import orjson
import pytest
from fakes import MetadataThenWhole, item_of, partial_item

from crewlet_operator.cache import Cache, Compact, InformerOptions, MetadataOnly, Pages
from crewlet_operator.cache.informer import INITIAL_EVENTS_END, Informer
from crewlet_operator.cache.listing import item_metadata, listed_metadata, partial_item_metadata
from crewlet_operator.errors import MetadataOnlyError
from crewlet_operator.kube.client import RawObjectList
from crewlet_operator.kube.resources import CONFIG_MAP, NAMESPACE, SECRET
from crewlet_operator.objects import KubeObject


def untouched(obj: KubeObject) -> KubeObject:
    return obj


def cache_with_two_informers() -> Cache:
    """A ConfigMap informer with a 10 s watchdog and 1 s backoff, a Secret one with defaults."""
    cache = Cache(client=None)  # type: ignore[arg-type]  # never started: no client needed
    cache.informer(
        CONFIG_MAP, InformerOptions(transform=untouched, inactivity_timeout=10, max_backoff=1)
    )
    cache.informer(SECRET, InformerOptions(transform=untouched))
    return cache


def test_an_informer_may_be_silent_for_two_watchdogs_and_two_backoffs() -> None:
    cache = cache_with_two_informers()
    assert cache.informers[CONFIG_MAP].max_silence == 2 * (10 + 1)
    assert cache.informers[SECRET].max_silence == 2 * (90 + 30)


def test_an_informer_silent_past_its_watchdog_is_stale() -> None:
    cache = cache_with_two_informers()
    config_maps, secrets = cache.informers[CONFIG_MAP], cache.informers[SECRET]
    config_maps.last_event_at = secrets.last_event_at = 1000.0
    assert cache.stale(now=1000.0 + 22) == []
    assert cache.stale(now=1000.0 + 22.5) == ["ConfigMap"]
    assert cache.stale(now=1000.0 + 240.5) == ["ConfigMap", "Secret"]


def test_hearing_anything_makes_an_informer_fresh_again() -> None:
    cache = cache_with_two_informers()
    cache.informers[CONFIG_MAP].last_event_at = 1000.0
    cache.informers[SECRET].last_event_at = 1100.0
    assert cache.stale(now=1100.0) == ["ConfigMap"]
    cache.informers[CONFIG_MAP].last_event_at = 1100.0  # a bookmark arrived
    assert cache.stale(now=1100.0) == []


def test_one_silence_for_every_kind_when_asked() -> None:
    cache = cache_with_two_informers()
    cache.informers[CONFIG_MAP].last_event_at = 1000.0
    cache.informers[SECRET].last_event_at = 1005.0
    assert cache.stale(5.0, now=1010.0) == ["ConfigMap"]
    assert cache.stale(4.0, now=1010.0) == ["ConfigMap", "Secret"]


def test_a_cache_without_informers_has_nothing_stale() -> None:
    assert Cache(client=None).stale() == []  # type: ignore[arg-type]


def test_cached_reads_by_key_and_by_label_selector() -> None:
    cache = cache_with_two_informers()
    store = cache.informers[CONFIG_MAP].store
    for name, labels in (("web", {"app": "web", "tier": "front"}), ("db", {"app": "db"})):
        store.put({"metadata": {"name": name, "namespace": "prod", "labels": labels}})
    assert cache.get(CONFIG_MAP, "web", "prod") is not None
    assert cache.get(CONFIG_MAP, "web", "qa") is None
    selector = {"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}
    assert [o["metadata"]["name"] for o in cache.list(CONFIG_MAP, labels=selector)] == ["db"]
    namespaces = cache.informer(NAMESPACE, InformerOptions(transform=untouched))
    namespaces.store.put({"metadata": {"name": "prod"}})
    assert cache.get(NAMESPACE, "prod") == {"metadata": {"name": "prod"}}


def applied_secret(name: str, *entries: tuple[str, str]) -> KubeObject:
    """A Secret as the API server sends it (its fields in the Go struct's order), with one
    managedFields entry per ``(manager, operation)``."""
    fields = [{"manager": m, "operation": op, "fieldsV1": {"f:data": {}}} for m, op in entries]
    meta = {"name": name, "namespace": "ns", "resourceVersion": "5", "managedFields": fields}
    return {"kind": "Secret", "apiVersion": "v1", "metadata": meta, "data": {"k": "dg=="}}


def added(obj: KubeObject) -> bytes:
    return b'{"type":"ADDED","object":' + orjson.dumps(obj) + b"}"


def metadata_of(obj: KubeObject) -> KubeObject:
    meta = {k: v for k, v in obj["metadata"].items() if k != "managedFields"}
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "metadata": meta}


def test_a_listed_built_in_object_is_decoded_as_far_as_its_metadata() -> None:
    sent = applied_secret("a", ("me", "Apply"), ("kubectl", "Update"))
    sent["metadata"] = {  # what else metadata holds, with keys and braces in its strings
        "labels": {"managedFields": "x", "b": '"managedFields":[{'},
        "ownerReferences": [{"kind": "Company", "name": "c"}],
        **sent["metadata"],
    }
    decoded = listed_metadata(added(sent))
    assert decoded is not None
    partial, raw = decoded
    assert partial == metadata_of(sent)
    assert orjson.loads(raw) == sent


def custom_resource() -> KubeObject:
    """A custom resource as the API server sends it: every key sorted."""
    meta = {"managedFields": [{"manager": "me"}], "name": "w", "uid": "u"}
    return {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": meta}


def without_managed_fields() -> KubeObject:
    obj = applied_secret("a")
    del obj["metadata"]["managedFields"]
    return obj


def managed_fields_first() -> KubeObject:
    obj = applied_secret("a", ("me", "Apply"))
    obj["metadata"] = {"managedFields": obj["metadata"].pop("managedFields"), **obj["metadata"]}
    # The pod template's metadata holds the next "managedFields" list: not the object's.
    obj["spec"] = {"template": {"metadata": {"x": 1, "managedFields": []}}}
    return obj


@pytest.mark.parametrize(
    "line",
    [
        b'{"type":"MODIFIED","object":' + orjson.dumps(applied_secret("a", ("me", "Apply"))) + b"}",
        added(custom_resource()),
        added(without_managed_fields()),
        added(managed_fields_first()),
        b'{"object":' + orjson.dumps(applied_secret("a", ("me", "Apply"))) + b',"type":"ADDED"}',
    ],
    ids=[
        "modified",
        "custom-resource",
        "no-managed-fields",
        "managed-fields-first",
        "other-framing",
    ],
)
def test_other_lines_are_left_to_be_decoded_whole(line: bytes) -> None:
    assert listed_metadata(line) is None


def test_an_item_of_a_page_is_decoded_as_far_as_its_metadata() -> None:
    sent = applied_secret("a", ("me", "Apply"), ("kubectl", "Update"))
    sent["metadata"] = {"labels": {"b": '"managedFields":[{'}, **sent["metadata"]}
    decoded = item_metadata(item_of(sent), SECRET)
    assert decoded is not None
    partial, raw = decoded
    assert partial == metadata_of(sent)
    assert orjson.loads(raw) == sent


@pytest.mark.parametrize(
    "item",
    [
        orjson.dumps(custom_resource()),
        item_of(without_managed_fields()),
        item_of(managed_fields_first()),
        orjson.dumps(applied_secret("a", ("me", "Apply"))),
    ],
    ids=["custom-resource", "no-managed-fields", "managed-fields-first", "kind-first"],
)
def test_other_items_are_left_to_be_decoded_whole(item: bytes) -> None:
    assert item_metadata(item, SECRET) is None


class Lines:
    """A client whose watches send the given lines (an informer's decoding, with no server)."""

    field_manager = "me"

    def __init__(self, lines: list[bytes]) -> None:
        self.lines = lines

    async def watch_lines(self, *_: object, **__: object) -> AsyncIterator[bytes]:
        for line in self.lines:
            yield line
        await asyncio.Event().wait()  # the watch stays open


async def told_until_synced(informer: Informer) -> dict[str, KubeObject]:
    """Run ``informer`` until it has synced; what its handlers were told, by name."""
    told: dict[str, KubeObject] = {}
    informer.add_handler(
        SimpleNamespace(on_add=lambda o, initial: told.__setitem__(o["metadata"]["name"], o))
    )
    task = asyncio.create_task(informer.run())
    try:
        await informer.wait_for_sync(timeout=5)
    finally:
        task.cancel()
    return told


async def test_a_lazy_list_tells_the_metadata_and_reads_the_whole_object_trimmed() -> None:
    ours = applied_secret("ours", ("me", "Apply"))
    touched = applied_secret("touched", ("me", "Apply"), ("kubectl", "Update"))
    end = {"metadata": {"resourceVersion": "9", "annotations": {INITIAL_EVENTS_END: "true"}}}
    client = Lines([added(ours), added(touched), orjson.dumps({"type": "BOOKMARK", "object": end})])
    informer = Informer(client, SECRET, InformerOptions(storage=Compact(lazy_lists=True)))  # type: ignore[arg-type]
    told = await told_until_synced(informer)
    assert told == {"ours": metadata_of(ours), "touched": metadata_of(touched)}
    assert informer.store.get("ns/ours") == ours
    assert informer.store.get("ns/touched") == applied_secret("touched", ("me", "Apply"))


class PagedClient:
    """A client whose lists send the given pages of items, and whose watches stay silent."""

    field_manager = "me"

    def __init__(self, *pages: list[bytes]) -> None:
        self.pages = pages

    async def list_raw_pages(self, *_: object, **__: object) -> AsyncIterator[RawObjectList]:
        for items in self.pages:
            yield RawObjectList(list(items), "9")

    async def watch(self, *_: object, **__: object) -> AsyncIterator[object]:
        await asyncio.Event().wait()  # the watch stays open, and silent
        yield None


async def test_a_lazy_list_in_pages_tells_the_metadata_and_reads_the_whole_object() -> None:
    ours = applied_secret("ours", ("me", "Apply"))
    touched = applied_secret("touched", ("me", "Apply"), ("kubectl", "Update"))
    bare = without_managed_fields()  # decoded whole, and given the kind the page names
    client = PagedClient([item_of(ours), item_of(touched)], [item_of(bare)])
    options = InformerOptions(lists=Pages(), storage=Compact(lazy_lists=True))
    informer = Informer(client, SECRET, options)  # type: ignore[arg-type]
    told = await told_until_synced(informer)
    assert told == {"ours": metadata_of(ours), "touched": metadata_of(touched), "a": bare}
    assert informer.store.get("ns/ours") == ours
    assert informer.store.get("ns/touched") == applied_secret("touched", ("me", "Apply"))
    assert informer.store.get("ns/a") == bare
    assert not informer.streams_lists


def test_a_lazy_list_needs_the_default_transform() -> None:
    options = InformerOptions(transform=untouched, storage=Compact(lazy_lists=True))
    with pytest.raises(ValueError, match=r"Compact\(lazy_lists=True\) needs the default"):
        Informer(Lines([]), SECRET, options)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "item",
    [
        partial_item(applied_secret("a", ("me", "Apply"))),
        orjson.dumps({"metadata": applied_secret("a", ("me", "Apply"))["metadata"]}),
        partial_item(without_managed_fields()),  # decoded whole
        orjson.dumps(
            {"apiVersion": "meta.k8s.io/v1", **orjson.loads(partial_item(managed_fields_first()))}
        ),
    ],
    ids=["as-sent", "without-type", "no-managed-fields", "other-order"],
)
def test_an_item_of_a_metadata_list_is_the_objects_metadata_without_managed_fields(
    item: bytes,
) -> None:
    meta = {"name": "a", "namespace": "ns", "resourceVersion": "5"}
    assert partial_item_metadata(item, SECRET) == {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": meta,
    }


def secret_at(name: str, version: str) -> KubeObject:
    secret = applied_secret(name, ("me", "Apply"))
    secret["metadata"]["resourceVersion"] = version
    return secret


async def test_a_metadata_first_list_syncs_on_the_metadata_then_holds_the_whole_objects() -> None:
    kept, changed, gone, new = (
        secret_at("kept", "5"),
        secret_at("changed", "6"),
        secret_at("gone", "7"),
        secret_at("new", "11"),
    )
    newer = secret_at("changed", "10")
    client = MetadataThenWhole([kept, changed, gone], [kept, newer, new])
    options = InformerOptions(lists=Pages(), storage=Compact(lazy_lists=True, metadata_first=True))
    informer = Informer(client, SECRET, options)  # type: ignore[arg-type]
    told: list[tuple[str, str, str]] = []

    informer.add_handler(
        SimpleNamespace(
            on_add=lambda o, initial: told.append(("add", o["metadata"]["name"], str(initial))),
            on_update=lambda old, new: told.append(
                ("update", new["metadata"]["name"], str(old == metadata_of(changed)))
            ),
            on_delete=lambda o: told.append(
                ("delete", o["metadata"]["name"], str(o == metadata_of(gone)))
            ),
        )
    )
    task = asyncio.create_task(informer.run())
    try:
        await informer.wait_for_sync(timeout=5)
        # Synced on the metadata: versions, keys and the handlers' adds, but no reads yet.
        assert informer.has_synced and not informer.has_whole
        assert informer.resource_version == "9"
        assert informer.store.resource_version("ns/changed") == "6"
        assert informer.store.known("ns/kept") == metadata_of(kept)
        with pytest.raises(MetadataOnlyError):
            informer.store.get("ns/kept")
        assert told == [
            ("add", "kept", "True"),
            ("add", "changed", "True"),
            ("add", "gone", "True"),
        ]
        await asyncio.sleep(0.05)
        assert client.lists == [True]  # nothing lists the whole objects until asked
        client.release.set()
        await informer.wait_for_whole(timeout=5)  # asks
        # The unchanged object is held whole without a word; the rest is told as a relist does.
        assert told[3:] == [
            ("update", "changed", "True"),
            ("add", "new", "False"),
            ("delete", "gone", "True"),
        ]
        assert informer.store.get("ns/kept") == kept
        assert informer.store.get("ns/changed") == newer
        assert informer.store.get("ns/new") == new
        assert informer.resource_version == "12" and informer.store.whole
        assert client.lists == [True, False]
    finally:
        task.cancel()


async def test_an_empty_metadata_list_is_whole_at_once() -> None:
    client = MetadataThenWhole([], [])
    options = InformerOptions(lists=Pages(), storage=Compact(metadata_first=True))
    informer = Informer(client, SECRET, options)  # type: ignore[arg-type]
    task = asyncio.create_task(informer.run())
    try:
        await informer.wait_for_whole(timeout=5)
        await asyncio.sleep(0)
        assert client.lists == [True]  # watched from the metadata list's version
    finally:
        task.cancel()


def test_a_metadata_only_informer_lists_in_pages() -> None:
    informer = Informer(Lines([]), SECRET, InformerOptions(storage=MetadataOnly()))  # type: ignore[arg-type]
    assert not informer.streams_lists
