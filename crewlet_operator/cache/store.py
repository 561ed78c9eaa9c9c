"""The informer's local copy of a kind: objects by key, plus secondary indexes."""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable
from typing import Any

from crewlet_operator.objects import object_key

Object = dict[str, Any]
IndexFunc = Callable[[Object], Iterable[str]]
"""Maps an object to the index values it is found under (none, one or several)."""

NAMESPACE_INDEX = "namespace"


def namespace_index(obj: Object) -> list[str]:
    """Index by namespace (every store has it: namespaced lists are index lookups)."""
    ns = obj.get("metadata", {}).get("namespace")
    return [ns] if ns else []


class Store:
    """Objects by ``namespace/name`` key, and indexes from value to keys.

    Invariant: for every index, ``self._indices[index][value]`` holds exactly the keys of the
    stored objects whose index function yields ``value``; ``_put`` and ``_drop`` keep it.
    """

    def __init__(self, indexers: dict[str, IndexFunc] | None = None) -> None:
        self._items: dict[str, Object] = {}
        self._indexers: dict[str, IndexFunc] = {
            NAMESPACE_INDEX: namespace_index,
            **(indexers or {}),
        }
        self._indices: dict[str, dict[str, set[str]]] = {name: {} for name in self._indexers}

    def add_indexer(self, name: str, func: IndexFunc) -> None:
        """Add an index (it is built over the objects already stored)."""
        if name in self._indexers:
            raise ValueError(f"index {name!r} already exists")
        self._indexers[name] = func
        self._indices[name] = {}
        for key, obj in self._items.items():
            for value in func(obj):
                self._indices[name].setdefault(value, set()).add(key)

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: str) -> bool:
        return key in self._items

    def get(self, key: str) -> Object | None:
        """The object stored under ``key``."""
        return self._items.get(key)

    def keys(self) -> builtins.list[str]:
        """Every key."""
        return list(self._items)

    def list(self) -> builtins.list[Object]:
        """Every object."""
        return list(self._items.values())

    def by_index(self, index: str, value: str) -> builtins.list[Object]:
        """The objects whose ``index`` function yields ``value``."""
        if index not in self._indices:
            raise KeyError(f"no index {index!r}; add it with add_indexer")
        return [self._items[k] for k in self._indices[index].get(value, ())]

    def put(self, obj: Object) -> Object | None:
        """Store ``obj``; return the object it replaced."""
        key = object_key(obj)
        old = self._drop(key)
        self._put(key, obj)
        return old

    def delete(self, key: str) -> Object | None:
        """Remove ``key``; return what was stored."""
        return self._drop(key)

    def _put(self, key: str, obj: Object) -> None:
        self._items[key] = obj
        for name, func in self._indexers.items():
            for value in func(obj):
                self._indices[name].setdefault(value, set()).add(key)

    def _drop(self, key: str) -> Object | None:
        old = self._items.pop(key, None)
        if old is not None:
            for name, func in self._indexers.items():
                for value in func(old):
                    keys = self._indices[name].get(value)
                    if keys is not None:
                        keys.discard(key)
                        if not keys:
                            del self._indices[name][value]
        return old
