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

import inspect
import types
import typing
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

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

TypedReconcileFunc = Callable[[Request, Any], Awaitable[Result | None]]
"""A reconcile that declares the model of its kind: ``async def reconcile(request, tenant:
Tenant | None)`` is given the cached object parsed into ``Tenant`` (a pydantic model, or any
class with ``model_validate``), None once it is gone; with a plain ``Tenant`` annotation it is
not called for an object that is gone. What controller-runtime's and kube-rs' typed
reconcilers are handed."""


def as_reconcile_func(reconciler: Reconciler | ReconcileFunc) -> ReconcileFunc:
    """Accept either form."""
    if isinstance(reconciler, Reconciler):
        return reconciler.reconcile
    return reconciler


def declared_model(reconcile: Callable[..., Any]) -> tuple[Any, bool] | None:
    """The model ``reconcile`` declares for its object, and whether it takes None for one that
    is gone: the annotation of its second parameter, a class with ``model_validate`` (or it
    ``| None``). None when it takes the request alone."""
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    parameters = [
        p
        for p in inspect.signature(reconcile).parameters.values()
        if p.kind in positional and p.default is inspect.Parameter.empty
    ]
    if len(parameters) != 2:
        return None
    try:
        annotation = typing.get_type_hints(reconcile).get(parameters[1].name)
    except (NameError, TypeError):
        annotation = parameters[1].annotation
    optional = False
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        optional = len(members) < len(typing.get_args(annotation))
        annotation = members[0] if len(members) == 1 else None
    if not (isinstance(annotation, type) and hasattr(annotation, "model_validate")):
        raise TypeError(
            f"{getattr(reconcile, '__qualname__', reconcile)} takes a second parameter, "
            f"{parameters[1].name}, whose annotation is no model of its kind (a class with "
            "model_validate, such as a pydantic model, or it | None, defined where the "
            "function's module can name it: the annotation is read with typing.get_type_hints): "
            "a reconcile takes the request alone, or the request and its object as that model"
        )
    return annotation, optional
