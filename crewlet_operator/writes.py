"""A controller's own writes: the events that echo them, and reading them back.

A controller sees each of its writes come back through its watches, and may run again before
its cache holds them. :class:`OwnWrites` (for the objects it creates or applies, such as its
children) and :class:`OwnStatusWrites` (for the status of its own object) are predicates that
drop those echoes; :class:`OwnWrites` also holds the events of an object while a write of it is
in flight (:meth:`OwnWrites.writing`) and reads the writes back until the cache holds them
(:meth:`OwnWrites.newest`)::

    with own_writes.writing(child) as write:
        write.done(await client.apply(STATEFUL_SET, child))
    if write.reconcile_again:
        ...  # a change came while it was written: look again, as its event would have made it

Newer is a larger ``resourceVersion``, in the order of
:func:`~crewlet_operator.objects.resource_version_before`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Self

from crewlet_operator.diff import hash_of
from crewlet_operator.objects import (
    KubeObject,
    object_key,
    resource_version,
    resource_version_before,
    uid,
)

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from types import TracebackType

__all__ = ["OwnStatusWrites", "OwnWrites", "Write"]


class OwnStatusWrites:
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

    def create(self, obj: KubeObject) -> bool:
        """Every create passes."""
        return True

    def update(self, old: KubeObject, new: KubeObject) -> bool:
        """Drop the update into exactly the status last written, if it changes nothing else."""
        if resource_version(old) == resource_version(new):
            return True  # a resync replay
        if _apart_from_status(old) != _apart_from_status(new):
            return True
        return self._written.get(object_key(new)) != hash_of(new.get("status") or {})

    def delete(self, obj: KubeObject) -> bool:
        """Every delete passes, and forgets what was written to the object."""
        self._written.pop(object_key(obj), None)
        return True

    def generic(self, obj: KubeObject) -> bool:
        """Every generic event passes."""
        return True


class Write:
    """One write in flight, as :meth:`OwnWrites.writing` gives it: a context manager.

    Inside the block, events for the object are held; give the API server's answer to
    :meth:`done`. A block left without an answer (the write failed, or was cancelled) is a
    write that did not happen. Once the block has exited, :attr:`reconcile_again` says whether
    an event held meanwhile needs the reconcile it would have caused.
    """

    def __init__(self, writes: OwnWrites, obj: KubeObject) -> None:
        self._writes = writes
        self._where = _written_key(obj)
        self._answer: KubeObject | None = None
        self.reconcile_again = False
        """Whether an event held during the write is not covered by its answer: a change made
        after the write, or any change when the write failed. Set when the block exits."""

    def done(self, answer: KubeObject) -> None:
        """The write succeeded: ``answer`` is the object as the API server returned it."""
        self._answer = answer

    def __enter__(self) -> Self:
        self._writes._hold(self._where)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        held = self._writes._release(self._where)
        if self._answer is None:
            self.reconcile_again = bool(held)
        else:
            self.reconcile_again = self._writes._wrote(self._answer, held)


class OwnWrites:
    """Drop the create or update event that echoes an object the controller itself wrote.

    A controller that creates or applies its children sees each write come back through its
    watches and reconciles the owner once more, to find the children as it wrote them. Make
    each write inside :meth:`writing` and give it the object the API server returned; the one
    event that carries exactly that ``resourceVersion`` for that ``uid`` is dropped. Every
    other event passes, someone else's change included (it has another resourceVersion), as do
    resync replays.

    The echo can beat the write's answer to the process, so while a write is in flight the
    events for its object are held (dropped, and remembered): when the answer comes, those it
    covers (its own echo, or a change the write was applied over) are done with, and
    :attr:`Write.reconcile_again` says whether one came after the write, or any came to a
    write that failed: then the caller reconciles again, as the held event would have made it.

    A written object is remembered until the next event for its uid arrives, and at most
    ``remember`` of them are (the oldest forgotten first): an echo can beat the write's own
    answer, and then no later event may come to clear the entry. The default is far more than
    the writes a controller has in flight.

    The same race makes a controller read its cache behind its own writes: the owner may be
    reconciled again before the children written last have reached the cache, and they would
    be written a second time (a new object created twice; worse, a value the reconcile invents
    when the child is missing, such as a generated password, invented anew). :meth:`newest`
    gives the controller its own writes until the cache holds them: read your writes.
    """

    def __init__(self, remember: int = 4096) -> None:
        self.remember = remember
        """How many written objects are remembered at most."""
        # uid -> resourceVersion the write returned; insertion order is age.
        self._written: dict[str, str] = {}
        # (kind, namespace) -> name -> the object the write returned, until the cache holds it
        # or something newer; and uid -> (kind, namespace, name) of each, in age order.
        self._objects: dict[tuple[str, str], dict[str, KubeObject]] = {}
        self._where: dict[str, tuple[str, str, str]] = {}
        # (kind, namespace, name) being written -> the largest resourceVersion of the events
        # held meanwhile ("" while none came).
        self._writing: dict[tuple[str, str, str], str] = {}

    def writing(self, obj: KubeObject) -> Write:
        """A write of ``obj`` (its kind, namespace and name are read), to make inside the
        returned context manager: enter it before the request is sent."""
        return Write(self, obj)

    def newest(
        self, kind: str, cached: Iterable[KubeObject], namespace: str | None = None
    ) -> list[KubeObject]:
        """``cached`` (objects of ``kind`` in ``namespace``, from the cache), each replaced by
        the one this controller last wrote where that is newer, and followed by those it wrote
        that the cache does not hold yet.

        A written object is forgotten once the cache holds it or something newer, or a delete
        event for it passed this predicate; where either resourceVersion is not a number, the
        cache is believed.
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

    def create(self, obj: KubeObject) -> bool:
        """Drop the echo of a write, and hold the creates of an object being written."""
        return not self._is_echo(obj)

    def update(self, old: KubeObject, new: KubeObject) -> bool:
        """Drop the echo of a write, and hold the updates of an object being written."""
        if resource_version(old) == resource_version(new):
            return True  # a resync replay
        return not self._is_echo(new)

    def delete(self, obj: KubeObject) -> bool:
        """Every delete passes, and forgets what was written to the object."""
        self._written.pop(uid(obj) or "", None)
        self._forget(uid(obj) or "")
        return True

    def generic(self, obj: KubeObject) -> bool:
        """Every generic event passes."""
        return True

    def _hold(self, where: tuple[str, str, str]) -> None:
        self._writing[where] = ""

    def _release(self, where: tuple[str, str, str]) -> str | None:
        """Stop holding the events of ``where``: the largest resourceVersion held ("" when
        none came)."""
        return self._writing.pop(where, None)

    def _wrote(self, obj: KubeObject, held: str | None) -> bool:
        """The controller wrote ``obj`` (as the API server returned it) while the events
        ``held`` were held: whether one came after the write."""
        written_uid, version, where = uid(obj), resource_version(obj), _written_key(obj)
        if not (written_uid and version):
            return bool(held)
        if held and not resource_version_before(held, version):  # the cache holds it, or newer
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
            self._writing[key] = seen if not held or resource_version_before(held, seen) else held
            return True
        seen_uid = uid(obj) or ""
        where = self._where.get(seen_uid)
        if where is not None and not _newer(self._objects[where[:2]][where[2]], obj):
            self._forget(seen_uid)  # the cache holds the write now
        version = self._written.get(seen_uid)
        if version is None or resource_version_before(resource_version(obj), version):
            return False  # not written, or an older change the watch delivers late
        del self._written[seen_uid]
        return version == resource_version(obj)


def _written_key(obj: KubeObject) -> tuple[str, str, str]:
    meta = obj.get("metadata") or {}
    return str(obj.get("kind") or ""), str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _newer(a: KubeObject, b: KubeObject) -> bool:
    """Whether ``a``'s resourceVersion is known to be larger than ``b``'s."""
    return resource_version_before(resource_version(b), resource_version(a))


def _apart_from_status(obj: KubeObject) -> dict[str, Any]:
    meta = {
        k: v
        for k, v in (obj.get("metadata") or {}).items()
        if k not in ("resourceVersion", "managedFields")
    }
    return {**{k: v for k, v in obj.items() if k != "status"}, "metadata": meta}
