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
controllers; those that drop the echoes of a controller's own writes, which it tells what it
wrote, are in :mod:`crewlet_operator.writes`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from crewlet_operator.label_selector import (
    label_selector_matches,
    validate_label_selector,
)
from crewlet_operator.label_selector import matches as selector_matches
from crewlet_operator.objects import KubeObject, generation, resource_version

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
        """Pass every create."""
        return True

    def update(self, old: KubeObject, new: KubeObject) -> bool:
        """Pass every update (a subclass filters them)."""
        return True

    def delete(self, obj: KubeObject) -> bool:
        """Pass every delete."""
        return True

    def generic(self, obj: KubeObject) -> bool:
        """Pass every generic event."""
        return True


class GenerationChanged(_UpdateFilter):
    """Pass updates whose ``metadata.generation`` changed: a change to the spec.

    Status-only and metadata-only updates (labels, annotations, finalizers) are dropped, and so
    are all updates of kinds without a generation (ConfigMap, Secret): combine with
    :class:`LabelChanged` or :class:`AnnotationChanged` through :func:`or_` when those matter.
    """

    def update(self, old: KubeObject, new: KubeObject) -> bool:
        """Pass the update when ``metadata.generation`` changed."""
        return generation(old) != generation(new)


class ResourceVersionChanged(_UpdateFilter):
    """Pass updates whose ``metadata.resourceVersion`` changed.

    This drops the periodic resync, which replays every cached object as an update to itself.
    """

    def update(self, old: KubeObject, new: KubeObject) -> bool:
        """Pass the update when ``metadata.resourceVersion`` changed."""
        return resource_version(old) != resource_version(new)


class LabelChanged(_UpdateFilter):
    """Pass updates whose ``metadata.labels`` changed."""

    def update(self, old: KubeObject, new: KubeObject) -> bool:
        """Pass the update when the labels changed."""
        return labels_of(old) != labels_of(new)


class AnnotationChanged(_UpdateFilter):
    """Pass updates whose ``metadata.annotations`` changed."""

    def update(self, old: KubeObject, new: KubeObject) -> bool:
        """Pass the update when the annotations changed."""
        return annotations_of(old) != annotations_of(new)


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
        """Pass the create when the object's labels match."""
        return selector_matches(self.selector, labels_of(obj))

    def update(self, old: KubeObject, new: KubeObject) -> bool:
        """Pass the update when the new object's labels match."""
        return selector_matches(self.selector, labels_of(new))

    def delete(self, obj: KubeObject) -> bool:
        """Pass the delete when the object's labels match."""
        return selector_matches(self.selector, labels_of(obj))

    def generic(self, obj: KubeObject) -> bool:
        """Pass the event when the object's labels match."""
        return selector_matches(self.selector, labels_of(obj))


@dataclass(frozen=True)
class Funcs:
    """A predicate made of optional callables; a missing one lets its events through."""

    create_func: Callable[[KubeObject], bool] | None = None
    update_func: Callable[[KubeObject, KubeObject], bool] | None = None
    delete_func: Callable[[KubeObject], bool] | None = None
    generic_func: Callable[[KubeObject], bool] | None = None

    def create(self, obj: KubeObject) -> bool:
        """Whether a create event passes: ``create_func``'s answer, or True without one."""
        return self.create_func is None or self.create_func(obj)

    def update(self, old: KubeObject, new: KubeObject) -> bool:
        """Whether an update event passes: ``update_func``'s answer, or True without one."""
        return self.update_func is None or self.update_func(old, new)

    def delete(self, obj: KubeObject) -> bool:
        """Whether a delete event passes: ``delete_func``'s answer, or True without one."""
        return self.delete_func is None or self.delete_func(obj)

    def generic(self, obj: KubeObject) -> bool:
        """Whether a generic event passes: ``generic_func``'s answer, or True without one."""
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
