"""Event handlers: turn an informer's events into reconcile requests (controller-runtime's
``handler`` package). Each maps an object to zero or more requests, filtered by predicates."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from crewlet_operator.objects import name, namespace, owner_references
from crewlet_operator.predicate import Predicate
from crewlet_operator.reconcile import Request
from crewlet_operator.workqueue import RateLimitingQueue

Object = dict[str, Any]
MapFunc = Callable[[Object], Iterable[Request]]
"""Maps a watched object to the requests it should trigger (``watches``)."""


def request_for_object(obj: Object) -> list[Request]:
    """The object itself (``for_``)."""
    return [Request(namespace(obj), name(obj))]


def requests_for_owner(group: str, kind: str, owner_namespaced: bool = True) -> MapFunc:
    """The object's controlling owner of kind ``group``/``kind`` (``owns``).

    Only the owner reference with ``controller: true`` counts, as in controller-runtime's
    ``OnlyControllerOwner``: a child is reconciled by the one controller that owns it.
    """

    def owners(obj: Object) -> list[Request]:
        for ref in owner_references(obj):
            api_version = ref.get("apiVersion", "")
            ref_group = api_version.rpartition("/")[0]
            if ref.get("controller") and ref.get("kind") == kind and ref_group == group:
                return [Request(namespace(obj) if owner_namespaced else None, ref["name"])]
        return []

    return owners


class EnqueueHandler:
    """An informer event handler that maps events to requests and adds them to a queue."""

    def __init__(
        self,
        queue: RateLimitingQueue[Request],
        mapper: MapFunc,
        predicates: Sequence[Predicate] = (),
    ) -> None:
        self.queue = queue
        self.mapper = mapper
        self.predicates = tuple(predicates)

    def _enqueue(self, obj: Object) -> None:
        for request in self.mapper(obj):
            self.queue.add(request)

    def on_add(self, obj: Object) -> None:
        """Enqueue for a created (or initially listed) object."""
        if all(p.create(obj) for p in self.predicates):
            self._enqueue(obj)

    def on_update(self, old: Object, new: Object) -> None:
        """Enqueue for both versions: a changed owner or label must reach the old mapping too."""
        if all(p.update(old, new) for p in self.predicates):
            self._enqueue(old)
            self._enqueue(new)

    def on_delete(self, obj: Object) -> None:
        """Enqueue for a deleted object."""
        if all(p.delete(obj) for p in self.predicates):
            self._enqueue(obj)
