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
    from collections.abc import Callable, Iterable, Mapping

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
        """The controller writes ``status`` to the object ``key`` (``namespace/name``).

        Call it before the write: the echo can reach the informer before the write's answer
        reaches the caller (one status write in eight, in a burst). A write that fails leaves
        the entry, which then drops only an update into exactly that status, nothing to act on.
        """
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
    far more than the writes a controller has in flight.

    The same race makes a controller read its cache behind its own writes: an echo that beats
    its answer passes (nothing says yet that it is one), so the owner is reconciled again at
    once, before the children written last have reached the cache, and they would be written
    a second time (a new object created twice; worse, a value the reconcile invents when the
    child is missing, such as a generated password, invented anew). :meth:`newest` gives the
    controller its own writes until the cache holds them: read your writes.

    A controller that also calls :meth:`writing` before each write loses no reconcile to the
    race either: an event for an object being written is held until the answer comes, then
    dropped when the answer covers it (its own echo, or a change the write was applied over);
    :meth:`wrote` returns True when one came after the write, and :meth:`abandoned` (the write
    failed) when any came: the caller reconciles again, as the held event would have made it.
    """

    def __init__(self, remember: int = 4096) -> None:
        self.remember = remember
        # uid -> resourceVersion the write returned; insertion order is age.
        self._written: dict[str, str] = {}
        # (kind, namespace) -> name -> the object the write returned, until the cache holds it
        # or something newer; and uid -> (kind, namespace, name) of each, in age order.
        self._objects: dict[tuple[str, str], dict[str, KubeObject]] = {}
        self._where: dict[str, tuple[str, str, str]] = {}
        # (kind, namespace, name) being written -> the largest resourceVersion of the events
        # held meanwhile ("" while none came).
        self._writing: dict[tuple[str, str, str], str] = {}

    def writing(self, obj: KubeObject) -> None:
        """The controller is about to write ``obj`` (its kind, namespace and name are read)."""
        self._writing[_written_key(obj)] = ""

    def abandoned(self, obj: KubeObject) -> bool:
        """The write of ``obj`` announced by :meth:`writing` failed: whether an event for it
        was held meanwhile (then reconcile again)."""
        return bool(self._writing.pop(_written_key(obj), ""))

    def wrote(self, obj: KubeObject) -> bool:
        """The controller wrote ``obj`` (as the API server returned it): whether an event held
        since :meth:`writing` came after the write (then reconcile again)."""
        written_uid, version, where = uid(obj), resource_version(obj), _written_key(obj)
        held = self._writing.pop(where, None)
        if not (written_uid and version):
            return bool(held)
        if held and not _before(held, version):  # the cache holds the write, or newer
            self._written.pop(written_uid, None)
            self._forget(written_uid)
            return held != version
        self._written.pop(written_uid, None)
        self._written[written_uid] = version
        if len(self._written) > self.remember:
            del self._written[next(iter(self._written))]
        self._forget(written_uid)
        replaced = self._objects.get(where[:2], {}).get(where[2])
        if replaced is not None:  # the same name, recreated: another uid
            self._forget(uid(replaced) or "")
        self._objects.setdefault(where[:2], {})[where[2]] = obj
        self._where[written_uid] = where
        if len(self._where) > self.remember:
            self._forget(next(iter(self._where)))
        return False

    def newest(
        self, kind: str, cached: Iterable[KubeObject], namespace: str | None = None
    ) -> list[KubeObject]:
        """``cached`` (objects of ``kind`` in ``namespace``, from the cache), each replaced by
        the one this controller last wrote where that is newer, and followed by those it wrote
        that the cache does not hold yet.

        Newer is a larger ``resourceVersion``: Kubernetes has compared them as integers since
        1.35 (KEP-5504). A written object is forgotten once the cache holds it or something
        newer, or a delete event for it passed this predicate.
        """
        pending = self._objects.get((kind, namespace or ""))
        if not pending:
            return list(cached)
        unseen = dict(pending)
        found: list[KubeObject] = []
        for obj in cached:
            written = unseen.pop(str((obj.get("metadata") or {}).get("name") or ""), None)
            if written is not None and _newer(written, obj):
                found.append(written)
                continue
            if written is not None:
                self._forget(uid(written) or "")
            found.append(obj)
        return found + list(unseen.values())

    def _forget(self, written_uid: str) -> None:
        where = self._where.pop(written_uid, None)
        if where is not None:
            objects = self._objects[where[:2]]
            del objects[where[2]]
            if not objects:
                del self._objects[where[:2]]

    def _is_echo(self, obj: KubeObject) -> bool:
        key = _written_key(obj)
        if key in self._writing:  # held until the write's answer says what it was
            held, seen = self._writing[key], resource_version(obj) or ""
            self._writing[key] = seen if not held or _before(held, seen) else held
            return True
        seen_uid = uid(obj) or ""
        where = self._where.get(seen_uid)
        if where is not None and not _newer(self._objects[where[:2]][where[2]], obj):
            self._forget(seen_uid)  # the cache holds the write now
        version = self._written.get(seen_uid)
        if version is None or _before(resource_version(obj), version):
            return False  # not written, or an older change the watch delivers late
        del self._written[seen_uid]
        return version == resource_version(obj)

    def create(self, obj: KubeObject) -> bool:
        return not self._is_echo(obj)

    def update(self, old: KubeObject, new: KubeObject) -> bool:
        if resource_version(old) == resource_version(new):
            return True  # a resync replay
        return not self._is_echo(new)

    def delete(self, obj: KubeObject) -> bool:
        self._written.pop(uid(obj) or "", None)
        self._forget(uid(obj) or "")
        return True


def _written_key(obj: KubeObject) -> tuple[str, str, str]:
    meta = obj.get("metadata") or {}
    return str(obj.get("kind") or ""), str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _newer(a: KubeObject, b: KubeObject) -> bool:
    """Whether ``a``'s resourceVersion is larger than ``b``'s (False where one is not a number:
    then the cache is believed)."""
    return _before(resource_version(b), resource_version(a))


def _before(a: str | None, b: str | None) -> bool:
    """Whether resourceVersion ``a`` is smaller than ``b`` (False where one is not a number)."""
    try:
        return int(a or "") < int(b or "")
    except ValueError:
        return False


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
