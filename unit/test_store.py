"""The informer store and its indexes."""

from __future__ import annotations

from typing import Any

import pytest

from crewlet_operator.cache.store import NAMESPACE_INDEX, Store


def obj(ns: str | None, name: str, **labels: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": labels}
    if ns:
        meta["namespace"] = ns
    return {"metadata": meta}


def by_app(o: dict[str, Any]) -> list[str]:
    app = o["metadata"]["labels"].get("app")
    return [app] if app else []


def test_put_get_delete_and_indexes_stay_consistent() -> None:
    store = Store({"app": by_app})
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


def test_indexer_added_later_covers_existing_objects_and_unknown_index_errors() -> None:
    store = Store()
    store.put(obj("a", "x", app="web"))
    store.add_indexer("app", by_app)
    assert len(store.by_index("app", "web")) == 1
    with pytest.raises(ValueError, match="already exists"):
        store.add_indexer("app", by_app)
    with pytest.raises(KeyError, match="no index"):
        store.by_index("missing", "v")
