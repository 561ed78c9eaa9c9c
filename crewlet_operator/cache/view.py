"""The cluster view: every object of a kind, read-only, whatever share of it this replica
reconciles.

A controller's cache may hold a share of a kind only (with sharding, a member caches the objects
labelled for it), yet some questions are the cluster's: which objects ask for one hostname,
how many objects a class has. A :class:`ClusterView` answers them from every object of the kinds
declared in it, trimmed by each kind's ``transform`` and indexed by its ``indexers``, on every
replica, sharded or not: the code that reads it has no branch on sharding. A manager has two:
its ``cluster_view``, on every replica, and its ``leader_view``, listed once the replica leads,
for the questions only the leader asks (a count across the cluster; the sharder's), so that the
other members of a sharded ring do not hold every object.

Where the manager's cache already holds every object of a kind in the same scope, whole, with
the indexes asked for (a replica without sharding), the view reads that informer instead of
listing the kind a second time; otherwise it keeps an informer of its own. Which one is decided
when the manager starts, once every controller has declared its kinds.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass, field, replace

from crewlet_operator.cache.cache import Cache
from crewlet_operator.cache.informer import (
    Compact,
    EventHandler,
    Informer,
    InformerOptions,
    MetadataOnly,
)
from crewlet_operator.cache.store import Transform
from crewlet_operator.errors import NoInformerError
from crewlet_operator.kube.client import Client
from crewlet_operator.kube.resources import Resource
from crewlet_operator.objects import KubeObject

__all__ = ["ClusterView"]


@dataclass
class _Kind:
    options: InformerOptions
    handlers: list[EventHandler] = field(default_factory=list)
    source: Cache | None = None
    """Where it is read from once started: the manager's cache, or the view's own."""


class ClusterView:
    """Every object of the kinds declared in it, across the cluster, read-only.

    Declare a kind with :meth:`declare` before the manager runs (the manager starts and stops
    the view with its caches), read it with :meth:`get`, :meth:`keys` and :meth:`list` (as
    :class:`~crewlet_operator.cache.Cache`'s), after :meth:`wait_for_sync` when the first list
    matters. Objects are stored as the kind's ``transform`` leaves them, with their labels
    put back (the sharder reads the view of the sharded kind by them): let the transform keep
    ``metadata``'s ``name``, ``namespace`` and ``resourceVersion``.
    """

    def __init__(self, client: Client, cache: Cache) -> None:
        self._cache = cache
        self._own = Cache(client)
        self._kinds: dict[Resource, _Kind] = {}
        self._narrowed: set[Resource] = set()

    def declare(self, resource: Resource, options: InformerOptions | None = None) -> None:
        """Hold every object of ``resource`` in ``options``'s scope (all of them by default).
        A kind declared twice keeps its first options: a second declaration with other options
        is refused, one without options adds nothing."""
        known = self._kinds.get(resource)
        if known is None:
            self._kinds[resource] = _Kind(options or InformerOptions())
        elif options is not None and options != known.options:
            raise ValueError(f"the cluster view holds {resource.group_kind} with other options")

    def declares(self, resource: Resource) -> bool:
        """Whether ``resource`` is declared."""
        return resource in self._kinds

    def narrowed(self, resource: Resource) -> None:
        """Tell the view that the manager's cache holds a share of ``resource`` alone (its
        informers are narrowed, as sharding narrows them): the view lists it itself."""
        self._narrowed.add(resource)

    def add_handler(self, resource: Resource, handler: EventHandler) -> None:
        """Tell ``handler`` of every change to the objects of ``resource`` (declared) in the
        view, from its first list on."""
        self._kind(resource).handlers.append(handler)

    def _kind(self, resource: Resource) -> _Kind:
        kind = self._kinds.get(resource)
        if kind is None:
            raise NoInformerError(
                f"the cluster view holds no {resource.group_kind}: declare it first"
            )
        return kind

    async def start(self) -> None:
        """Choose where each kind is read from and start the view's own informers: before the
        manager's cache starts, so that every handler hears the first list."""
        for resource, kind in self._kinds.items():
            informer = self._shareable(resource, kind.options)
            if informer is None:
                informer = self._own.informer(resource, _keeping_labels(kind.options))
                kind.source = self._own
            else:
                kind.source = self._cache
            for handler in kind.handlers:
                informer.add_handler(handler)
        await self._own.start()

    def _shareable(self, resource: Resource, wanted: InformerOptions) -> Informer | None:
        """The manager's informer of ``resource``, if it holds what the view would: every
        object of the same scope (not narrowed), whole, indexed as the view is asked to."""
        if resource in self._narrowed:
            return None
        informer = self._cache.informers.get(resource)
        if informer is None:
            return None
        held = informer.options
        storage = held.storage
        whole = not isinstance(storage, MetadataOnly) and not (
            isinstance(storage, Compact) and storage.metadata_first
        )
        indexed = wanted.indexers.keys() <= held.indexers.keys()
        return informer if whole and indexed and held.scope == wanted.scope else None

    async def stop(self) -> None:
        """Stop the view's own informers."""
        await self._own.stop()

    async def wait_for_sync(self, timeout: float | None = None) -> None:
        """Wait until every kind of the view has its first list stored (:class:`TimeoutError`
        after ``timeout`` seconds)."""
        await self._own.wait_for_sync(timeout)
        for resource, kind in self._kinds.items():
            if kind.source is self._cache:
                await self._cache.wait_for_kind(resource, timeout)

    def has_synced(self, resource: Resource) -> bool:
        """Whether the objects of ``resource`` are all listed (the view holds those listed so
        far before: each list stores its objects as they come)."""
        return self._source(resource).has_synced(resource)

    def _source(self, resource: Resource) -> Cache:
        source = self._kind(resource).source
        if source is None:
            raise NoInformerError(f"the cluster view is not started: {resource.group_kind}")
        return source

    def get(self, resource: Resource, name: str, namespace: str | None = None) -> KubeObject | None:
        """The object, as the view keeps it, or None."""
        return self._source(resource).get(resource, name, namespace)

    def keys(self, resource: Resource, index: tuple[str, str]) -> builtins.list[str]:
        """The keys (``namespace/name``) of the objects found under an index value."""
        return self._source(resource).keys(resource, index)

    def list(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        index: tuple[str, str] | None = None,
    ) -> builtins.list[KubeObject]:
        """The objects, optionally in one namespace and under an index value."""
        return self._source(resource).list(resource, namespace, index=index)


def _keeping_labels(options: InformerOptions) -> InformerOptions:
    """``options`` whose transform, if any, gives each object its labels back."""
    trim = options.transform
    if trim is None:
        return options
    return replace(options, transform=_LabelsKept(trim))


class _LabelsKept:
    """A transform, then the object's labels put back into what it made."""

    def __init__(self, trim: Transform) -> None:
        self._trim = trim

    def __call__(self, obj: KubeObject) -> KubeObject:
        kept = self._trim(obj)
        labels = (obj.get("metadata") or {}).get("labels")
        if labels:
            kept["metadata"] = {**(kept.get("metadata") or {}), "labels": labels}
        return kept
