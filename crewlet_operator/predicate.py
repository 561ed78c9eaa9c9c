"""Event filters, with the semantics of controller-runtime's ``pkg/predicate``.

A predicate decides, per watch event, whether the event reaches the work queue. It sees the raw
objects: ``create(obj)``, ``update(old, new)``, ``delete(obj)`` and ``generic(obj)`` each return
``True`` to let the event through::

    >>> only_spec_changes = GenerationChanged()
    >>> old = {"metadata": {"name": "a", "generation": 1, "resourceVersion": "10"}}
    >>> new = {"metadata": {"name": "a", "generation": 1, "resourceVersion": "11"},
    ...        "status": {"ready": True}}
    >>> only_spec_changes.update(old, new)
    False

Predicates compose with :func:`and_`, :func:`or_` and :func:`not_`; :func:`new_predicate_funcs`
builds one from plain callables. Every predicate here is stateless and safe to share between
controllers, but :class:`OwnStatusWrites` and :class:`OwnWrites`, which a controller tells
what it wrote.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from crewlet_operator.diff import hash_of
from crewlet_operator.label_selector import (
    label_selector_matches,
    validate_label_selector,
)
from crewlet_operator.label_selector import matches as selector_matches
from crewlet_operator.objects import KubeObject, generation, object_key, resource_version, uid

# Aliased: `annotations` would clash with the __future__ import.
from crewlet_operator.objects import annotations as annotations_of
from crewlet_operator.objects import labels as labels_of

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

__all__ = [
    "AnnotationChanged",
    "Funcs",
    "GenerationChanged",
    "LabelChanged",
    "LabelSelectorPredicate",
    "OwnStatusWrites",
    "OwnWrites",
    "Predicate",
    "ResourceVersionChanged",
    "and_",
    "filter_object",
    # Selector matching lives in crewlet_operator.label_selector; importable from here too.
    "label_selector_matches",
    "new_predicate_funcs",
    "not_",
    "or_",
    "validate_label_selector",
]


@runtime_checkable
class Predicate(Protocol):
    """Filters watch events; each method returns whether the event should be handled."""

    def create(self, obj: KubeObject) -> bool:
        """An object was created (or listed when the watch started)."""
        ...

    def update(self, old: KubeObject, new: KubeObject) -> bool:
        """An object changed from ``old`` to ``new``."""
        ...

    def delete(self, obj: KubeObject) -> bool:
        """An object was deleted; ``obj`` is its last known state."""
        ...

    def generic(self, obj: KubeObject) -> bool:
        """An event from outside the API server (a timer, an external channel)."""
        ...


class _UpdateFilter:
    """Lets create, delete and generic events through; subclasses filter updates."""

    def create(self, obj: KubeObject) -> bool:
        return True

    def update(self, old: KubeObject, new: KubeObject) -> bool:
        return True

    def delete(self, obj: KubeObject) -> bool:
        return True

    def generic(self, obj: KubeObject) -> bool:
        return True


class GenerationChanged(_UpdateFilter):
    """Pass updates whose ``metadata.generation`` changed: a change to the spec.

    Status-only and metadata-only updates (labels, annotations, finalizers) are dropped, and so
    are all updates of kinds without a generation (ConfigMap, Secret): combine with
    :class:`LabelChanged` or :class:`AnnotationChanged` through :func:`or_` when those matter.
    """

    def update(self, old: KubeObject, new: KubeObject) -> bool:
        return generation(old) != generation(new)


class ResourceVersionChanged(_UpdateFilter):
    """Pass updates whose ``metadata.resourceVersion`` changed.

    This drops the periodic resync, which replays every cached object as an update to itself.
    """

    def update(self, old: KubeObject, new: KubeObject) -> bool:
        return resource_version(old) != resource_version(new)


class LabelChanged(_UpdateFilter):
    """Pass updates whose ``metadata.labels`` changed."""

    def update(self, old: KubeObject, new: KubeObject) -> bool:
        return labels_of(old) != labels_of(new)


class AnnotationChanged(_UpdateFilter):
    """Pass updates whose ``metadata.annotations`` changed."""

    def update(self, old: KubeObject, new: KubeObject) -> bool:
        return annotations_of(old) != annotations_of(new)


class OwnStatusWrites(_UpdateFilter):
    """Drop the update event a controller's own status write echoes back.

    A controller that writes its object's status sees that write again as an update and
    reconciles once more for nothing. Tell this predicate each status written with
    :meth:`wrote`; an update that changes nothing but the status, into exactly that status, is
    dropped. Anything else passes: a spec or metadata change, someone else's status write (a
    wiped status is noticed at once), and the informer's resync replays.
    """

    def __init__(self) -> None:
        self._written: dict[str, str] = {}  # object key -> hash of the status last written

    def wrote(self, key: str, status: Mapping[str, Any]) -> None:
        """The controller wrote ``status`` to the object ``key`` (``namespace/name``)."""
        self._written[key] = hash_of(status)

    def update(self, old: KubeObject, new: KubeObject) -> bool:
        if resource_version(old) == resource_version(new):
            return True  # a resync replay
        if _apart_from_status(old) != _apart_from_status(new):
            return True
        return self._written.get(object_key(new)) != hash_of(new.get("status") or {})

    def delete(self, obj: KubeObject) -> bool:
        self._written.pop(object_key(obj), None)
        return True


class OwnWrites(_UpdateFilter):
    """Drop the create or update event that echoes an object the controller itself wrote.

    A controller that creates or applies its children sees each write come back through its
    watches and reconciles the owner once more, to find the children as it wrote them. Pass
    each object the API server returned from a write to :meth:`wrote`; the one event that
    carries exactly that ``resourceVersion`` for that ``uid`` is dropped. Every other event
    passes, someone else's change included (it has another resourceVersion), as do resync
    replays.

    A written object is remembered until the next event for its uid arrives, and at most
    ``remember`` of them are (the oldest forgotten first): an echo can beat the write's own
    answer to the process, and then no later event may come to clear the entry. The default is
    far more than the writes a controller has in flight, and under half a MiB.
    """

    def __init__(self, remember: int = 4096) -> None:
        self.remember = remember
        # uid -> resourceVersion the write returned; insertion order is age.
        self._written: dict[str, str] = {}

    def wrote(self, obj: KubeObject) -> None:
        """The controller wrote ``obj`` (as the API server returned it)."""
        written_uid, version = uid(obj), resource_version(obj)
        if written_uid and version:
            self._written.pop(written_uid, None)
            self._written[written_uid] = version
            if len(self._written) > self.remember:
                del self._written[next(iter(self._written))]

    def _is_echo(self, obj: KubeObject) -> bool:
        return self._written.pop(uid(obj) or "", None) == resource_version(obj)

    def create(self, obj: KubeObject) -> bool:
        return not self._is_echo(obj)

    def update(self, old: KubeObject, new: KubeObject) -> bool:
        if resource_version(old) == resource_version(new):
            return True  # a resync replay
        return not self._is_echo(new)

    def delete(self, obj: KubeObject) -> bool:
        self._written.pop(uid(obj) or "", None)
        return True


def _apart_from_status(obj: KubeObject) -> dict[str, Any]:
    meta = {
        k: v
        for k, v in (obj.get("metadata") or {}).items()
        if k not in ("resourceVersion", "managedFields")
    }
    return {**{k: v for k, v in obj.items() if k != "status"}, "metadata": meta}


class LabelSelectorPredicate:
    """Pass events for objects whose labels match a ``metav1.LabelSelector``.

    An update is judged on the new object. The selector is validated on construction; an empty
    selector (``{}``) matches every object.

    Raises:
        ValueError: the selector is invalid (see :func:`validate_label_selector`).
    """

    def __init__(self, selector: Mapping[str, Any]) -> None:
        validate_label_selector(selector)
        self.selector = selector

    def create(self, obj: KubeObject) -> bool:
        return selector_matches(self.selector, labels_of(obj))

    def update(self, old: KubeObject, new: KubeObject) -> bool:
        return selector_matches(self.selector, labels_of(new))

    def delete(self, obj: KubeObject) -> bool:
        return selector_matches(self.selector, labels_of(obj))

    def generic(self, obj: KubeObject) -> bool:
        return selector_matches(self.selector, labels_of(obj))


@dataclass(frozen=True)
class Funcs:
    """A predicate made of optional callables; a missing one lets its events through."""

    create_func: Callable[[KubeObject], bool] | None = None
    update_func: Callable[[KubeObject, KubeObject], bool] | None = None
    delete_func: Callable[[KubeObject], bool] | None = None
    generic_func: Callable[[KubeObject], bool] | None = None

    def create(self, obj: KubeObject) -> bool:
        return self.create_func is None or self.create_func(obj)

    def update(self, old: KubeObject, new: KubeObject) -> bool:
        return self.update_func is None or self.update_func(old, new)

    def delete(self, obj: KubeObject) -> bool:
        return self.delete_func is None or self.delete_func(obj)

    def generic(self, obj: KubeObject) -> bool:
        return self.generic_func is None or self.generic_func(obj)


def new_predicate_funcs(
    create: Callable[[KubeObject], bool] | None = None,
    update: Callable[[KubeObject, KubeObject], bool] | None = None,
    delete: Callable[[KubeObject], bool] | None = None,
    generic: Callable[[KubeObject], bool] | None = None,
) -> Predicate:
    """Build a predicate from plain callables.

    An event kind without a callable always passes::

        skip_deletes = new_predicate_funcs(delete=lambda obj: False)
    """
    return Funcs(create, update, delete, generic)


def filter_object(keep: Callable[[KubeObject], bool]) -> Predicate:
    """Build a predicate that applies ``keep`` to every event's object (the new one on update).

    controller-runtime's ``predicate.NewPredicateFuncs``::

        in_prod = filter_object(lambda obj: namespace(obj) == "prod")
    """
    return Funcs(keep, lambda _old, new: keep(new), keep, keep)


@dataclass(frozen=True)
class _And:
    predicates: tuple[Predicate, ...]

    def create(self, obj: KubeObject) -> bool:
        return all(p.create(obj) for p in self.predicates)

    def update(self, old: KubeObject, new: KubeObject) -> bool:
        return all(p.update(old, new) for p in self.predicates)

    def delete(self, obj: KubeObject) -> bool:
        return all(p.delete(obj) for p in self.predicates)

    def generic(self, obj: KubeObject) -> bool:
        return all(p.generic(obj) for p in self.predicates)


@dataclass(frozen=True)
class _Or:
    predicates: tuple[Predicate, ...]

    def create(self, obj: KubeObject) -> bool:
        return any(p.create(obj) for p in self.predicates)

    def update(self, old: KubeObject, new: KubeObject) -> bool:
        return any(p.update(old, new) for p in self.predicates)

    def delete(self, obj: KubeObject) -> bool:
        return any(p.delete(obj) for p in self.predicates)

    def generic(self, obj: KubeObject) -> bool:
        return any(p.generic(obj) for p in self.predicates)


@dataclass(frozen=True)
class _Not:
    predicate: Predicate

    def create(self, obj: KubeObject) -> bool:
        return not self.predicate.create(obj)

    def update(self, old: KubeObject, new: KubeObject) -> bool:
        return not self.predicate.update(old, new)

    def delete(self, obj: KubeObject) -> bool:
        return not self.predicate.delete(obj)

    def generic(self, obj: KubeObject) -> bool:
        return not self.predicate.generic(obj)


def and_(*predicates: Predicate) -> Predicate:
    """Pass an event when every predicate passes it (all of none: always), short-circuiting."""
    return _And(tuple(predicates))


def or_(*predicates: Predicate) -> Predicate:
    """Pass an event when any predicate passes it (any of none: never), short-circuiting."""
    return _Or(tuple(predicates))


def not_(predicate: Predicate) -> Predicate:
    """Pass exactly the events ``predicate`` drops."""
    return _Not(predicate)
