"""Event handlers: turn an informer's events into reconcile requests (controller-runtime's
``handler`` package). Each maps an object to zero or more requests, filtered by predicates."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence

from crewlet_operator.objects import KubeObject, name, namespace
from crewlet_operator.owners import owner_key_of
from crewlet_operator.predicate import Predicate
from crewlet_operator.reconcile import Request
from crewlet_operator.tracing import Triggers, enabled
from crewlet_operator.workqueue import LOW_PRIORITY, NORMAL_PRIORITY, FairQueue

__all__ = [
    "EnqueueHandler",
    "MapFunc",
    "Priority",
    "request_for_object",
    "requests_for_owner",
]

MapFunc = Callable[[KubeObject], Iterable[Request]]
"""Maps a watched object to the requests it should trigger (``watches``)."""

Priority = int | Callable[[KubeObject], int]
"""The priority at which an event's requests are queued: a number (the workqueue's
``NORMAL_PRIORITY`` by default, higher first), or a function of the object the event is about
(a tenant's tier from its label, say)."""


def request_for_object(obj: KubeObject) -> list[Request]:
    """The object itself (``for_``)."""
    return [Request(namespace(obj), name(obj))]


def requests_for_owner(group: str, kind: str, owner_namespaced: bool = True) -> MapFunc:
    """The object's controlling owner of kind ``group``/``kind`` (``owns``).

    Only the owner reference with ``controller: true`` counts, as in controller-runtime's
    ``OnlyControllerOwner``: a child is reconciled by the one controller that owns it.
    """

    def owners(obj: KubeObject) -> list[Request]:
        key = owner_key_of(obj, group, kind, owner_namespaced=owner_namespaced)
        return [] if key is None else [Request(*key)]

    return owners


class EnqueueHandler:
    """An informer event handler that maps events to requests and adds them to a queue.

    Objects of an informer's initial list are queued at ``LOW_PRIORITY`` (nobody is waiting
    for them: a start-up's or a new leader's pass over everything), every other event at
    ``priority``, by default ``NORMAL_PRIORITY`` (a create, a change, a delete: somebody just
    asked for something), as controller-runtime's priority queue does.

    ``initial=False`` leaves the initial list's objects out: for an owned kind, whose owners
    the primary kind's own initial list already requests (an owner that is not listed there
    does not exist, and its reconcile would find nothing). A start over 10,000 owners with 13
    children each then maps 10,000 objects to requests instead of 140,000.

    ``touched``, when given, is called with the requests of every event that is not the
    initial list's (a create, a change, a delete), whatever the predicates say: what has
    changed for a request since the process started (see :meth:`Controller.touch
    <crewlet_operator.controller.Controller.touch>`). The requests are mapped as it iterates
    them, so it iterates them during the call, or not at all when it has no use for them.

    ``triggers``, when given, records while a tracer records which event queued each request
    (the reconcile's span names it: :mod:`crewlet_operator.tracing`), under ``watch``, the
    watched resource's name.
    """

    def __init__(
        self,
        queue: FairQueue[Request],
        mapper: MapFunc,
        predicates: Sequence[Predicate] = (),
        *,
        initial: bool = True,
        touched: Callable[[Iterable[Request]], None] | None = None,
        priority: Priority = NORMAL_PRIORITY,
        triggers: Triggers[Request] | None = None,
        watch: str = "",
    ) -> None:
        self.queue = queue
        self.mapper = mapper
        self.predicates = tuple(predicates)
        self.initial = initial
        self.touched = touched
        self.priority = priority
        self.triggers = triggers
        self.watch = watch

    def _enqueue(self, obj: KubeObject, event: str, priority: int | None = None) -> None:
        if priority is None:
            priority = self.priority(obj) if callable(self.priority) else self.priority
        triggers = self.triggers if self.triggers is not None and enabled() else None
        for request in self.mapper(obj):
            if triggers is not None:
                triggers.note(request, self.watch, event, obj, priority)
            self.queue.add(request, priority)

    def _touch(self, obj: KubeObject) -> None:
        if self.touched is not None:
            self.touched(self._mapped(obj))

    def _mapped(self, obj: KubeObject) -> Iterator[Request]:
        # Mapped only if iterated: after the first pass nothing is (Controller.touch), and an
        # EngineClass's status write mapped to every company of the class, twice, for nothing.
        yield from self.mapper(obj)

    def on_add(self, obj: KubeObject, initial: bool = False) -> None:
        """Enqueue for a created object, or one of the initial list (at low priority)."""
        if initial and not self.initial:
            return
        if not initial:
            self._touch(obj)
        if all(p.create(obj) for p in self.predicates):
            self._enqueue(obj, "listed" if initial else "added", LOW_PRIORITY if initial else None)

    def on_update(self, old: KubeObject, new: KubeObject) -> None:
        """Enqueue for both versions: a changed owner or label must reach the old mapping too."""
        self._touch(old)
        self._touch(new)
        if all(p.update(old, new) for p in self.predicates):
            # The new version first: a trace names the version that asked for the reconcile.
            self._enqueue(new, "updated")
            self._enqueue(old, "updated")

    def on_delete(self, obj: KubeObject) -> None:
        """Enqueue for a deleted object."""
        self._touch(obj)
        if all(p.delete(obj) for p in self.predicates):
            self._enqueue(obj, "deleted")
