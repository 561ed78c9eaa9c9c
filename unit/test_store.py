"""The informer store and its indexes."""

from __future__ import annotations

import json
import subprocess
import sys
from types import SimpleNamespace
from typing import Any

import orjson
import pytest

from crewlet_operator.cache import compact
from crewlet_operator.cache.store import NAMESPACE_INDEX, Store
from crewlet_operator.errors import MetadataOnlyError


def obj(ns: str | None, name: str, **labels: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": labels}
    if ns:
        meta["namespace"] = ns
    return {"metadata": meta}


def by_app(o: dict[str, Any]) -> list[str]:
    app = o["metadata"]["labels"].get("app")
    return [app] if app else []


@pytest.mark.parametrize("compact", [False, True])
def test_put_get_delete_and_indexes_stay_consistent(compact: bool) -> None:
    store = Store({"app": by_app}, compact=compact)
    store.put(obj("a", "x", app="web"))
    store.put(obj("b", "y", app="web"))
    store.put(obj(None, "cluster"))
    assert store.get("a/x") is not None and store.get("cluster") is not None
    assert sorted(o["metadata"]["name"] for o in store.by_index("app", "web")) == ["x", "y"]
    # Re-putting with another label moves the key between index values.
    store.put(obj("a", "x", app="db"))
    assert [o["metadata"]["name"] for o in store.by_index("app", "web")] == ["y"]
    assert [o["metadata"]["name"] for o in store.by_index("app", "db")] == ["x"]
    assert store.delete("b/y") is not None
    assert store.by_index("app", "web") == []
    assert [o["metadata"]["name"] for o in store.by_index(NAMESPACE_INDEX, "a")] == ["x"]
    assert store.delete("b/y") is None
    assert len(store) == 2


@pytest.mark.parametrize("compact", [False, True])
def test_indexer_added_later_covers_existing_objects_and_unknown_index_errors(
    compact: bool,
) -> None:
    store = Store(compact=compact)
    store.put(obj("a", "x", app="web"))
    store.add_indexer("app", by_app)
    assert len(store.by_index("app", "web")) == 1
    with pytest.raises(ValueError, match="already exists"):
        store.add_indexer("app", by_app)
    with pytest.raises(KeyError, match="no index"):
        store.by_index("missing", "v")


def stateful_set(i: int) -> dict[str, Any]:
    containers = [
        {"name": n, "image": f"ghcr.io/crewlet/crewlet:v0.{i}.0", "args": ["run", "-config"]}
        for n in ("engine", "sidecar")
    ]
    return {
        "metadata": {"name": f"c{i}-data", "namespace": f"t{i % 7}", "labels": {"app": "web"}},
        "spec": {"replicas": 1, "template": {"spec": {"containers": containers}}},
        "status": {"replicas": 1, "readyReplicas": i % 2},
    }


def test_a_compact_store_returns_what_was_put_as_fresh_copies() -> None:
    store = Store({"app": by_app}, compact=True)
    for i in range(50):
        store.put(stateful_set(i))
    assert [store.get(f"t{i % 7}/c{i}-data") for i in range(50)] == [
        stateful_set(i) for i in range(50)
    ]
    first = store.get("t0/c0-data")
    assert first is not None
    first["spec"]["replicas"] = 5  # a reader's change stays the reader's
    assert store.get("t0/c0-data") == stateful_set(0)
    assert store.put(stateful_set(0) | {"status": {}}) == stateful_set(0)
    assert sorted(store.keys_by_index("app", "web")) == sorted(store.keys())
    assert store.delete("t1/c1-data") == stateful_set(1)


def test_a_compact_store_keeps_objects_of_a_kind_in_a_fraction_of_their_json() -> None:
    store = Store(compact=True)
    for i in range(50):
        store.put(stateful_set(i))
    packed = sum(len(v) for v in store._items.values())
    as_json = sum(len(json.dumps(stateful_set(i), separators=(",", ":"))) for i in range(50))
    assert packed * 3 < as_json


_PACK_MEMORY = """
import random
from crewlet_operator.cache.store import Store

def rss_kib():
    return int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0])

env = [{"name": f"E{i}", "value": "v" * 40} for i in range(30)]
store = Store(compact=True)
before = rss_kib()
for i in range(20_000):
    store.put({
        "metadata": {"name": f"c{i}-{random.random()}", "namespace": "t"},
        "spec": {"template": {"spec": {"containers": [{"name": "engine", "env": env}]}}},
    })
packed = sum(len(v) for v in store._items.values())
print(rss_kib() - before, packed // 1024)
"""


def test_a_compact_store_holds_about_what_it_packed() -> None:
    """A pack of 2 KiB of JSON is ~100 bytes; the store's memory grows by about that, not by
    the JSON's size (zstd answers in a buffer of the worst case, which must not be what is
    kept: 10,000 companies' children once held 466 MiB for ~25 MiB of packs). In a process of
    its own, so that nothing else this suite allocated moves its memory."""
    run = subprocess.run(
        [sys.executable, "-c", _PACK_MEMORY], capture_output=True, text=True, check=True
    )
    grew_kib, packed_kib = map(int, run.stdout.split())
    assert grew_kib < 4 * packed_kib + 8 * 1024, run.stdout


@pytest.mark.parametrize("compact", [False, True])
def test_the_uid_digest_says_which_objects_are_stored_whatever_their_versions(
    compact: bool,
) -> None:
    """A change of an object keeps the digest; a delete, or a new object under an old name,
    changes it; storing the same objects again, in any order, gives the same digest."""

    def versioned(name: str, uid: str, version: str) -> dict[str, Any]:
        return {
            "metadata": {"name": name, "namespace": "ns", "uid": uid, "resourceVersion": version}
        }

    store = Store(compact=compact)
    assert store.uid_digest == 0
    store.put(versioned("a", "uid-a", "1"))
    store.put(versioned("b", "uid-b", "2"))
    both = store.uid_digest
    store.put(versioned("a", "uid-a", "3"))
    assert store.uid_digest == both
    store.delete("ns/b")
    assert store.uid_digest != both
    store.put(versioned("b", "uid-b2", "4"))  # deleted and made again: another object
    assert store.uid_digest not in (both, 0)
    store.delete("ns/b")
    store.put(versioned("b", "uid-b", "2"))
    assert store.uid_digest == both
    again = Store(compact=compact)
    again.put(versioned("b", "uid-b", "9"))
    again.put(versioned("a", "uid-a", "8"))
    assert again.uid_digest == both
    store.delete("ns/a")
    store.delete("ns/b")
    assert store.uid_digest == 0


@pytest.mark.parametrize("compact", [False, True])
def test_a_stores_resource_versions_are_read_without_the_objects(compact: bool) -> None:
    """What a caller comparing versions reads: the stored object's, None once it is gone."""
    store = Store(compact=compact)
    store.put({"metadata": {"name": "a", "namespace": "ns", "resourceVersion": "7"}})
    assert store.resource_version("ns/a") == "7"
    store.put({"metadata": {"name": "a", "namespace": "ns", "resourceVersion": "9"}})
    assert store.resource_version("ns/a") == "9"
    store.put({"metadata": {"name": "b", "namespace": "ns"}})
    assert store.resource_version("ns/b") is None
    store.delete("ns/a")
    assert store.resource_version("ns/a") is None


class CountedFinish:
    """A store's ``finish`` that drops ``spec.defaults`` and counts its runs."""

    def __init__(self) -> None:
        self.runs = 0

    def __call__(self, o: dict[str, Any]) -> dict[str, Any]:
        self.runs += 1
        spec = {k: v for k, v in o.get("spec", {}).items() if k != "defaults"}
        return {**o, "spec": spec}


def listed(name: str, app: str, rv: str = "1") -> dict[str, Any]:
    o = obj("ns", name, app=app)
    o["metadata"]["resourceVersion"] = rv
    o["spec"] = {"replicas": 1, "defaults": {"dnsPolicy": "ClusterFirst"}}
    return o


@pytest.mark.parametrize("compact", [False, True])
def test_an_unfinished_object_is_stored_as_put_and_read_finished(compact: bool) -> None:
    finish = CountedFinish()
    store = Store({"app": by_app}, compact=compact, finish=finish)
    for name in ("a", "b", "c"):
        store.put(listed(name, "web"), finished=False)
    # Stored, indexed and versioned as they came: nothing has run the finish yet.
    assert store.resource_version("ns/a") == "1"
    assert sorted(store.keys_by_index("app", "web")) == ["ns/a", "ns/b", "ns/c"]
    assert finish.runs == 0
    first = store.get("ns/a")
    assert first is not None and first["spec"] == {"replicas": 1}
    assert finish.runs == 1
    # Not written back (see Store): each read finishes what it returns, by every read path.
    assert store.get("ns/a") == first
    assert finish.runs == 2
    assert all(o["spec"] == {"replicas": 1} for o in store.by_index("app", "web"))
    assert all(o["spec"] == {"replicas": 1} for o in store.list())
    assert finish.runs == 8
    # A finished put is stored and read as given, and so is the next put of a key.
    store.put(listed("d", "web"))
    store.put(listed("a", "web", rv="2"))
    assert store.get("ns/d") == listed("d", "web")
    assert store.get("ns/a") == listed("a", "web", rv="2")
    assert finish.runs == 9  # the replaced "a", returned finished


@pytest.mark.parametrize("compact", [False, True])
def test_dropping_an_unfinished_object_returns_it_finished_and_keeps_the_indexes(
    compact: bool,
) -> None:
    finish = CountedFinish()
    store = Store({"app": by_app}, compact=compact, finish=finish)
    store.put(listed("a", "web"), finished=False)
    store.put(listed("b", "web"), finished=False)
    replaced = store.put(listed("a", "db", rv="2"))
    assert replaced is not None and replaced["spec"] == {"replicas": 1}
    assert store.keys_by_index("app", "web") == ["ns/b"]
    assert store.keys_by_index("app", "db") == ["ns/a"]
    gone = store.delete("ns/b")
    assert gone is not None and gone["spec"] == {"replicas": 1}
    assert store.keys_by_index("app", "web") == []
    # A key put again after its unfinished object was dropped is what the new put says.
    store.put(listed("b", "web", rv="3"))
    assert store.get("ns/b") == listed("b", "web", rv="3")
    assert finish.runs == 2


def test_without_a_finish_an_unfinished_put_is_stored_as_given() -> None:
    store = Store()
    store.put(listed("a", "web"), finished=False)
    assert store.get("ns/a") == listed("a", "web")


def test_a_compact_store_keeps_the_json_it_is_given_without_encoding_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_encoding(_: object) -> bytes:
        raise AssertionError("the store encoded an object it was given the JSON of")

    monkeypatch.setattr(compact, "orjson", SimpleNamespace(dumps=no_encoding, loads=orjson.loads))
    finish = CountedFinish()
    store = Store({"app": by_app}, compact=True, finish=finish)
    for name in ("a", "b"):
        sent = listed(name, "web")
        # As the API server sends it: its own spacing and key order, which decode the same;
        # and as a lazy list puts it, with only the metadata the index functions read.
        raw = json.dumps(dict(reversed(sent.items())), indent=1).encode()
        store.put({"metadata": sent["metadata"]}, finished=False, raw=raw)
    assert store.get("ns/b") == finish(listed("b", "web"))
    assert sorted(store.keys_by_index("app", "web")) == ["ns/a", "ns/b"]
    assert store.resource_version("ns/a") == "1"
    assert store.delete("ns/a") == finish(listed("a", "web"))
    assert store.keys_by_index("app", "web") == ["ns/b"]


def test_a_plain_store_keeps_objects_not_json() -> None:
    with pytest.raises(ValueError, match="only a compact store"):
        Store().put(listed("a", "web"), raw=b"{}")


def test_an_object_known_by_its_metadata_is_indexed_and_versioned_but_not_read() -> None:
    store = Store({"app": by_app}, compact=True)
    whole = listed("a", "web")
    whole["metadata"]["uid"] = "uid-a"
    meta = {"apiVersion": "v1", "kind": "Secret", "metadata": dict(whole["metadata"])}
    store.put(meta, metadata_only=True)
    assert store.uid_digest != 0
    assert not store.whole and store.metadata_only("ns/a")
    assert store.keys_by_index("app", "web") == ["ns/a"]
    assert store.resource_version("ns/a") == "1"
    assert "ns/a" in store and store.keys() == ["ns/a"]
    assert store.known("ns/a") == meta
    with pytest.raises(MetadataOnlyError, match="ns/a is cached by its metadata alone"):
        store.get("ns/a")
    with pytest.raises(MetadataOnlyError):
        store.by_index("app", "web")
    digest = store.uid_digest
    # Put whole: read as any other, and the digest of which objects are held is the same.
    assert store.put(whole, finished=False) == meta
    assert store.whole and not store.metadata_only("ns/a")
    assert store.get("ns/a") == whole
    assert store.uid_digest == digest
    assert store.keys_by_index("app", "web") == ["ns/a"]


def test_a_deleted_object_known_by_its_metadata_leaves_no_index_behind() -> None:
    store = Store({"app": by_app}, compact=True)
    a, b = listed("a", "web"), listed("b", "db")
    a["metadata"]["uid"], b["metadata"]["uid"] = "uid-a", "uid-b"
    store.put(a, metadata_only=True)
    store.put(b, metadata_only=True)
    assert store.delete("ns/a") == a
    assert store.keys_by_index("app", "web") == [] and not store.whole
    newer = listed("b", "web", rv="2")
    newer["metadata"]["uid"] = "uid-b"
    store.put(newer, metadata_only=True)  # a newer version, still by its metadata
    assert store.keys_by_index("app", "db") == [] and store.resource_version("ns/b") == "2"
    store.delete("ns/b")
    assert store.whole and store.uid_digest == 0 and len(store) == 0


def test_only_a_compact_store_keeps_objects_by_their_metadata() -> None:
    with pytest.raises(ValueError, match="only a compact store"):
        Store().put(listed("a", "web"), metadata_only=True)
