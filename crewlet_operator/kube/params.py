"""What a list or a watch asks for, as values: :class:`Scope` (which objects),
:class:`ListParams` and :class:`WatchParams` (a list's and a watch's whole request), each of
which builds its query.

The client's list and watch calls take one of them, or the :class:`Scope` alone (or a
namespace's name) for the defaults::

    await client.list(POD, "team-a")
    await client.list(POD, Scope("team-a", label_selector="app=web"))
    async for page in client.list_pages(POD, ListParams(page_size=100)):
        ...
    async for event in client.watch(POD, WatchParams(scope, resource_version=version)):
        ...

A :class:`ShardSelector` in the scope asks the API server for one shard of the objects
(server-side sharded list and watch, Kubernetes 1.36 on, alpha: the ``ShardedListAndWatch``
feature gate), and tells the objects of that shard from the others where the API server sends
them all.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "METADATA_ACCEPT",
    "METADATA_LIST_ACCEPT",
    "ListParams",
    "QueryValue",
    "Scope",
    "ShardSelector",
    "WatchParams",
    "fnv1a_64",
]

QueryValue = str | int | bool | None
"""A query parameter's value: None and False leave the parameter out, True is ``true``."""
JSON = "application/json"
METADATA_LIST_ACCEPT = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
"""The Accept of a list of objects' metadata alone (meta.k8s.io/v1, served since 1.15)."""
METADATA_ACCEPT = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
"""A watch's Accept for each event's object as its metadata alone (``PartialObjectMetadata``)."""


HASHES = 1 << 64
"""The size of the space a shard selector's field hashes into: 64-bit FNV-1a."""
_FNV_OFFSET, _FNV_PRIME = 0xCBF29CE484222325, 0x100000001B3


def fnv1a_64(value: str) -> int:
    """64-bit FNV-1a of ``value``'s UTF-8 bytes, as the API server hashes a shard selector's
    field (Go's ``hash/fnv``; five lines, not a dependency)."""
    hashed = _FNV_OFFSET
    for byte in value.encode():
        hashed = ((hashed ^ byte) * _FNV_PRIME) % HASHES
    return hashed


ShardField = Literal["object.metadata.namespace", "object.metadata.uid"]
"""The fields the API server shards by."""


@dataclass(frozen=True)
class ShardSelector:
    """One shard of a kind's objects: those whose ``field`` (the namespace by default, so that
    a namespace's objects stay together; or the uid) hashes into one of ``ranges``, each a
    ``[start, end)`` of 64-bit FNV-1a values (``end`` at most 2**64). :meth:`part` cuts the
    space into equal parts, as static shards of a controller would::

        Scope(shard=ShardSelector.part(0, 3))  # replica 0 of 3

    The API server honours it with its ``ShardedListAndWatch`` gate on (alpha since 1.36) and
    sends every object without; an informer keeps the shard's objects alone either way
    (:meth:`matches`).
    """

    ranges: tuple[tuple[int, int], ...]
    field: ShardField = "object.metadata.namespace"

    def __post_init__(self) -> None:
        if not self.ranges:
            raise ValueError("a shard selector needs at least one range")
        for start, end in self.ranges:
            if not 0 <= start < end <= HASHES:
                raise ValueError(f"a shard range is 0 <= start < end <= 2**64, not {start}, {end}")

    @classmethod
    def part(
        cls, index: int, count: int, field: ShardField = "object.metadata.namespace"
    ) -> ShardSelector:
        """Part ``index`` of ``count`` equal, contiguous parts of the hash space."""
        if not 0 <= index < count:
            raise ValueError(f"part {index} of {count}: 0 <= index < count")
        return cls(((HASHES * index // count, HASHES * (index + 1) // count),), field)

    def query(self) -> str:
        """The ``shardSelector`` parameter: ``shardRange(<field>, '0x<start>', '0x<end>')``,
        the ranges joined by ``||``."""
        return " || ".join(
            f"shardRange({self.field}, '0x{start:016x}', '0x{end:016x}')"
            for start, end in self.ranges
        )

    def matches(self, obj: Mapping[str, Any]) -> bool:
        """Whether ``obj`` (an object, or its metadata's holder) is of this shard."""
        meta = obj.get("metadata") or {}
        value = meta.get("namespace" if self.field == "object.metadata.namespace" else "uid")
        hashed = fnv1a_64(str(value or ""))
        return any(start <= hashed < end for start, end in self.ranges)


@dataclass(frozen=True)
class Scope:
    """Which objects of a kind a list or a watch sees: those in ``namespace`` (every namespace,
    or a cluster-scoped kind, when None) that match both selectors, each in the API server's
    syntax (``"app=web,tier!=db"``, ``"metadata.name=acme"``; None matches every object), and
    of ``shard`` (None: of every shard)."""

    namespace: str | None = None
    label_selector: str | None = None
    field_selector: str | None = None
    shard: ShardSelector | None = None

    @property
    def shard_query(self) -> str | None:
        """The ``shardSelector`` parameter, if any."""
        return self.shard.query() if self.shard is not None else None

    @classmethod
    def of(cls, scope: Scope | str | None) -> Scope:
        """``scope`` as a Scope: a namespace's name alone scopes to that namespace, and None
        to every object."""
        if isinstance(scope, Scope):
            return scope
        return cls(namespace=scope)


@dataclass(frozen=True)
class ListParams:
    """A list: of the objects in ``scope``, ``page_size`` a page (0: all in one answer), at
    ``resource_version`` (None: the latest, read from etcd; ``"0"``: whatever the API server's
    watch cache holds), and with ``exact``, at that very version: a snapshot that matches a
    store already at it (410 Gone once etcd has compacted it).

    With ``metadata_only``, the API server sends each object's ``metadata`` alone, as a
    ``PartialObjectMetadataList`` (what controller-runtime's metadata-only caches list): each
    item is ``{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{...}}``,
    a fraction of the object for the API server to encode.
    """

    scope: Scope = Scope()
    page_size: int = 500
    resource_version: str | None = None
    metadata_only: bool = False
    exact: bool = False

    @classmethod
    def of(cls, params: ListParams | Scope | str | None) -> ListParams:
        """``params`` as ListParams: a :class:`Scope` (or a namespace's name, or None) lists it
        with the defaults."""
        if isinstance(params, ListParams):
            return params
        return cls(Scope.of(params))

    @property
    def accept(self) -> str:
        """The Accept header of each page."""
        return METADATA_LIST_ACCEPT if self.metadata_only else JSON

    def query(self, continue_token: str | None = None) -> dict[str, QueryValue]:
        """The query of the first page, or of the page ``continue_token`` continues to (which
        the token pins to the first page's resourceVersion)."""
        return {
            "labelSelector": self.scope.label_selector,
            "fieldSelector": self.scope.field_selector,
            "shardSelector": self.scope.shard_query,
            "limit": self.page_size,
            "continue": continue_token,
            "resourceVersion": self.resource_version if continue_token is None else None,
            "resourceVersionMatch": "Exact" if self.exact and continue_token is None else None,
        }


@dataclass(frozen=True)
class WatchParams:
    """A watch: of the changes after ``resource_version`` to the objects in ``scope`` (from
    the latest when None).

    Two clocks end a watch, because each catches what the other cannot: the server closes it
    after ``timeout_seconds``, and the client gives up when no byte has arrived for
    ``inactivity_timeout`` seconds (a half-dead connection, a frozen server). With
    ``allow_bookmarks``, a healthy idle watch receives a BOOKMARK about every minute, so the 90 s
    default does not fire on one.

    With ``send_initial_events`` (a streaming list, Kubernetes' WatchList), the watch starts
    with an ``ADDED`` event for every object that exists now, then a ``BOOKMARK`` annotated
    ``k8s.io/initial-events-end: "true"``, then goes on with the changes (it asks for
    bookmarks whatever ``allow_bookmarks`` says: one ends the list). With ``metadata_only``,
    each event's object is its metadata alone (``PartialObjectMetadata``).
    """

    scope: Scope = Scope()
    resource_version: str | None = None
    timeout_seconds: int | None = 300
    inactivity_timeout: float | None = 90.0
    allow_bookmarks: bool = True
    send_initial_events: bool = False
    metadata_only: bool = False

    @classmethod
    def of(cls, params: WatchParams | Scope | str | None) -> WatchParams:
        """``params`` as WatchParams: a :class:`Scope` (or a namespace's name, or None) is
        watched with the defaults."""
        if isinstance(params, WatchParams):
            return params
        return cls(Scope.of(params))

    @property
    def accept(self) -> str:
        """The Accept header of the watch."""
        return METADATA_ACCEPT if self.metadata_only else JSON

    def query(self) -> dict[str, QueryValue]:
        """The watch's query."""
        streams = self.send_initial_events
        return {
            "watch": True,
            "allowWatchBookmarks": self.allow_bookmarks or streams or None,
            "sendInitialEvents": streams or None,
            "resourceVersionMatch": "NotOlderThan" if streams else None,
            "resourceVersion": self.resource_version,
            "labelSelector": self.scope.label_selector,
            "fieldSelector": self.scope.field_selector,
            "shardSelector": self.scope.shard_query,
            "timeoutSeconds": self.timeout_seconds,
        }
