"""The reconcile contract: a request names an object; the reconciler makes the world match it.

Level-based by design, as in controller-runtime: the request carries only a namespace and a
name, never the event that caused it, so a reconciler reads the current state and converges
whatever happened (and however many events were merged into one request).

Outcomes, as the controller treats them:

- returns ``None`` or ``Result()`` → done; the item's backoff is forgotten;
- returns ``Result(requeue_after=s)`` → backoff forgotten; reconciled again after ``s`` seconds
  (use this for polling, instead of a periodic resync);
- returns ``Result(requeue=True)`` → reconciled again after the item's backoff, which grows as
  for an error (use this for a state that may be transient but is no error of the reconciler);
- raises :class:`~crewlet_operator.errors.TerminalError` → logged and counted, not retried;
- raises anything else → retried with per-item exponential backoff (5 ms doubling to 1000 s)
  under an overall token bucket.

A requeue keeps the priority the request had in the queue (an initial list's ``LOW_PRIORITY``,
an event's ``NORMAL_PRIORITY``), unless ``Result(priority=...)`` says otherwise.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from crewlet_operator.objects import namespaced_key


@dataclass(frozen=True, order=True)
class Request:
    """Which object to reconcile: ``namespace`` is None for cluster-scoped kinds."""

    namespace: str | None
    name: str

    def __str__(self) -> str:
        return namespaced_key(self.namespace, self.name)


@dataclass(frozen=True)
class Result:
    """What a successful reconcile asks for next: ``requeue_after`` seconds from now, or (with
    ``requeue``) again after the item's growing backoff. ``requeue_after`` wins when both are set,
    as in controller-runtime."""

    requeue_after: float | None = None
    requeue: bool = False
    priority: int | None = None
    """The priority of the requeue (see :mod:`crewlet_operator.workqueue`); None keeps the one
    the request had."""


@runtime_checkable
class Reconciler(Protocol):
    """An object with an async ``reconcile`` method."""

    async def reconcile(self, request: Request) -> Result | None:
        """Make the world match the object named by ``request``."""
        ...


ReconcileFunc = Callable[[Request], Awaitable[Result | None]]
"""A plain async function works as a reconciler too."""


def as_reconcile_func(reconciler: Reconciler | ReconcileFunc) -> ReconcileFunc:
    """Accept either form."""
    if isinstance(reconciler, Reconciler):
        return reconciler.reconcile
    return reconciler
