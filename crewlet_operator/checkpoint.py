"""Restarts that redo nothing: the leader's word, in its Lease, on what it left done.

A restart (a rolling update, a rescheduled pod, a takeover) reconciles every object again, as
controller-runtime's does: the only way to catch what changed while no leader ran. When a
reconcile is costly and nothing changed, most of that is waste. A :class:`RestartCheckpoint`
given to a controller (``Builder.with_checkpoint``) lets its first pass skip it safely.

On each renewal of its Lease, and on its release (no request of its own), the leader records,
once its controller's first pass is over (a :class:`Checkpoint`):

- which code it is (a version of the caller's: a hash of its sources, say);
- for each kind its cache holds, the resourceVersion up to which the cache holds every change,
  and a digest of which objects it holds (:attr:`Store.uid_digest
  <crewlet_operator.cache.store.Store.uid_digest>`);
- the resourceVersion of each object its :class:`~crewlet_operator.cache.named.NamedObjects`
  watch;
- the requests it still has work for (queued, failing, waiting for a retry): at most
  ``max_unsettled``, else it records nothing new (the last checkpoint stays true, only older).

It records nothing while a cache relists (its marks would say more than it holds). The next
process of the same version judges the checkpoint once, at its first reconcile: void if a kind
the controller owns gained or lost an object (a deleted child leaves nothing newer behind).
Then, during its first pass, :meth:`RestartCheckpoint.unchanged` answers True for a request
when every object its reconcile reads (declared as :class:`CheckpointReads`) is no newer than
its kind's mark (resourceVersions are comparable within a kind since Kubernetes 1.35), nothing
has happened to it since the process started (:meth:`Controller.touch
<crewlet_operator.controller.Controller.touch>`), and it was settled at the checkpoint. Its last
reconcile then saw exactly these objects and left nothing to do, and the same code would
decide the same. Anything else is reconciled in full.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import structlog

from crewlet_operator.cache import Cache
from crewlet_operator.cache.named import NamedObjects
from crewlet_operator.errors import ForbiddenError, UnauthorizedError
from crewlet_operator.kube.resources import Resource
from crewlet_operator.objects import KubeObject, namespaced_key, resource_version
from crewlet_operator.objects import resource_version_at_most as _at_most
from crewlet_operator.reconcile import Request

__all__ = [
    "MAX_UNSETTLED",
    "NAMED_READ_TIMEOUT",
    "Checkpoint",
    "CheckpointLines",
    "CheckpointReads",
    "RestartCheckpoint",
]


class CheckpointedController(Protocol):
    """What a checkpoint reads of the controller it is attached to (a
    :class:`~crewlet_operator.controller.Controller` is one; a protocol keeps this module below
    the controller's)."""

    touched: set[Request]
    """Requests an event touched since the process started, until its first pass ends."""

    @property
    def cache(self) -> Cache:
        """The cache its watches read."""

    @property
    def first_pass_done(self) -> bool:
        """Whether every request waiting at start has been reconciled."""

    def unsettled(self) -> set[Request]:
        """Requests with work left: queued, waiting or failed."""


log = structlog.get_logger("crewlet_operator.checkpoint")

MAX_UNSETTLED = 100
"""Requests with work left that a checkpoint lists at most, by default: it is written every
renewal, and a longer list means a backlog, which the next process reconciles in full anyway."""
NAMED_READ_TIMEOUT = 10.0
"""Seconds a judgement waits, by default, for a newly watched named object's first answer."""


@dataclass(frozen=True)
class Checkpoint:
    """One leader's word on what it left done, as its Lease carries it."""

    version: str
    """The code that wrote it: a checkpoint of another version is ignored."""
    kinds: Mapping[str, tuple[str, int]]
    """By ``Resource.group_kind``: the resourceVersion the cache held every change up to, and
    its objects' uid digest."""
    named: Mapping[str, Mapping[str, str | None]]
    """By ``Resource.group_kind``, then ``namespace/name``: a watched named object's
    resourceVersion (None: it did not exist)."""
    unsettled: frozenset[str]
    """The requests (``str(request)``) with work left."""

    def annotations(self, key: str) -> dict[str, str]:
        """The Lease annotation that carries it (JSON under ``key``)."""
        body = {
            "version": self.version,
            "kinds": {k: list(v) for k, v in sorted(self.kinds.items())},
            "named": {k: dict(sorted(v.items())) for k, v in sorted(self.named.items())},
            "unsettled": sorted(self.unsettled),
        }
        return {key: json.dumps(body, separators=(",", ":"))}

    @classmethod
    def parse(cls, annotations: Mapping[str, str], key: str, version: str) -> Checkpoint | None:
        """The checkpoint under ``key`` in a Lease's annotations, if one of ``version`` is
        there and reads."""
        try:
            body = json.loads(annotations[key])
            if body["version"] != version:
                return None
            return cls(
                version=version,
                kinds={str(k): (str(v[0]), int(v[1])) for k, v in body["kinds"].items()},
                named={
                    str(kind): {str(k): None if v is None else str(v) for k, v in objs.items()}
                    for kind, objs in body["named"].items()
                },
                unsettled=frozenset(str(k) for k in body["unsettled"]),
            )
        except (KeyError, TypeError, ValueError, IndexError, AttributeError):
            return None

    def unchanged(self, kind: str, versions: Iterable[str | None]) -> bool:
        """Whether each of ``versions`` (resourceVersions of objects of ``kind``,
        ``Resource.group_kind``) is no newer than the mark."""
        mark = self.kinds.get(kind)
        if mark is None:
            return False
        return all(_at_most(version, mark[0]) for version in versions)

    def digest_matches(self, kind: str, digest: int) -> bool:
        """Whether the objects of ``kind`` are those the cache held then (by their uid
        digest): False when one was created or deleted since, or ``kind`` has no mark."""
        mark = self.kinds.get(kind)
        return mark is not None and mark[1] == digest

    def named_unchanged(self, kind: str, key: str, found: KubeObject | None) -> bool:
        """Whether the named object ``key`` (``namespace/name``) of ``kind`` exists and is no
        newer than when recorded (False for one not watched then)."""
        recorded = self.named.get(kind, {})
        if found is None or key not in recorded:
            return False
        return _at_most(resource_version(found), recorded[key])


@dataclass(frozen=True)
class CheckpointReads:
    """What one reconcile reads, declared for :meth:`RestartCheckpoint.unchanged`, which
    judges them in this order and names the first kind found changed. Keys are the cache's
    (``namespace/name``, or the name of a cluster-scoped object); every kind must be cached."""

    objects: Sequence[tuple[Resource, str]] = ()
    """Objects that must exist: one absent is not judged (the reconcile runs in full)."""
    uncovered: str | None = None
    """Why the reconcile hangs on something a checkpoint does not cover (another object's
    claim on a name, say), or None: a reason makes it run in full, and is logged as the kind."""
    optional: Sequence[tuple[Resource, str]] = ()
    """Objects read when they exist: one absent is no change."""
    indexed: Sequence[tuple[Resource, str, str]] = ()
    """``(resource, index, value)``: every object the index holds under the value (children,
    say). Deletions show in the uid digests of the kinds the controller owns."""
    named: Sequence[tuple[NamedObjects, str | None, str]] = ()
    """``(named_objects, namespace, name)``: an object watched by name, which must exist; one
    the identity may not read is a change. It is watched from then on, as a reconcile would."""


@dataclass(frozen=True)
class CheckpointLines:
    """The info lines a :class:`RestartCheckpoint` logs when it judges the previous leader's
    checkpoint (once a process), in your controller's words."""

    missing: str = "no restart checkpoint of this version: every request is reconciled in full"
    """None of this version in the Lease."""
    moved: str = (
        "objects of an owned kind were created or deleted since the restart checkpoint: every "
        "request is reconciled in full"
    )
    """Void: an owned kind gained or lost an object (logged with ``kinds``)."""
    resuming: str = (
        "resuming from the restart checkpoint: requests unchanged since are not reconciled again"
    )
    """Resumed from (logged with ``unsettled``, how many requests it lists)."""


@dataclass
class _Attachment:
    controller: CheckpointedController
    owned: list[Resource]
    found: Callable[[], Mapping[str, str]]
    judged: bool = False
    resumed: Checkpoint | None = None


class RestartCheckpoint:
    """Captures, writes into the leader's Lease and judges a :class:`Checkpoint` for one
    controller, so that a restart's first pass skips what nothing has changed for since.

    ``version`` names the code that decides (a checkpoint of another is ignored: an upgrade
    reconciles everything in full); ``annotation`` is the Lease annotation that carries it;
    ``named`` are the :class:`~crewlet_operator.cache.named.NamedObjects` whose objects
    reconciles read; ``max_unsettled`` bounds the requests with work left a checkpoint lists;
    ``read_timeout`` is how long a judgement waits for a named object's first answer;
    ``lines`` are what it logs when it judges the previous leader's checkpoint.

    Give it to the controller's builder (``.with_checkpoint(checkpoint)``), and ask
    :meth:`unchanged` at the top of each reconcile.
    """

    def __init__(
        self,
        version: str,
        *,
        annotation: str,
        named: Sequence[NamedObjects] = (),
        max_unsettled: int = MAX_UNSETTLED,
        read_timeout: float = NAMED_READ_TIMEOUT,
        lines: CheckpointLines = CheckpointLines(),
    ) -> None:
        self.version = version
        self.annotation = annotation
        self.named = tuple(named)
        self.max_unsettled = max_unsettled
        self.read_timeout = read_timeout
        self.lines = lines
        self._attached: _Attachment | None = None

    def attach(
        self,
        controller: CheckpointedController,
        *,
        owned: Iterable[Resource],
        found: Callable[[], Mapping[str, str]],
    ) -> None:
        """Serve ``controller``, whose children are of the ``owned`` kinds; ``found`` gives
        the Lease's annotations as the previous leader left them. ``Builder.with_checkpoint``
        does this (with ``manager.lease_annotations_found``), and has the manager write
        :meth:`annotations` into its Lease: call both yourself for a controller built by hand.
        """
        if self._attached is not None:
            raise ValueError("a checkpoint serves one controller")
        self._attached = _Attachment(controller, list(owned), found)

    def _attachment(self) -> _Attachment:
        if self._attached is None:
            raise ValueError("the checkpoint serves no controller: give it to a builder")
        return self._attached

    def annotations(self) -> dict[str, str]:
        """The checkpoint for the Lease (each renewal and the release), or nothing while the
        first pass runs, a cache relists, or more than ``max_unsettled`` requests have work
        left."""
        controller = self._attachment().controller
        if not controller.first_pass_done:
            return {}
        kinds: dict[str, tuple[str, int]] = {}
        for resource, informer in controller.cache.informers.items():
            if informer.resource_version is None:
                return {}
            kinds[resource.group_kind] = (informer.resource_version, informer.store.uid_digest)
        named: dict[str, dict[str, str | None]] = {}
        for watched in self.named:
            versions = named.setdefault(watched.resource.group_kind, {})
            for (ns, name), informer in watched.informers.items():
                if informer.resource_version is None:
                    return {}
                key = namespaced_key(ns, name)
                versions[key] = informer.store.resource_version(key)
        unsettled = controller.unsettled()
        if len(unsettled) > self.max_unsettled:
            return {}
        return Checkpoint(
            self.version, kinds, named, frozenset(str(r) for r in unsettled)
        ).annotations(self.annotation)

    def resumed(self) -> Checkpoint | None:
        """The previous leader's checkpoint, judged once, at the first call (the first
        reconcile, before it writes anything): None when there is none of this version, or
        when a kind the controller owns has gained or lost an object since."""
        attached = self._attachment()
        if attached.judged:
            return attached.resumed
        attached.judged = True
        found = Checkpoint.parse(attached.found(), self.annotation, self.version)
        informers = attached.controller.cache.informers
        moved = (
            []
            if found is None
            else [
                r.kind
                for r in attached.owned
                if not found.digest_matches(r.group_kind, informers[r].store.uid_digest)
            ]
        )
        if found is None:
            log.info(self.lines.missing)
        elif moved:
            log.info(self.lines.moved, kinds=moved)
        else:
            attached.resumed = found
            log.info(self.lines.resuming, unsettled=len(found.unsettled))
        return attached.resumed

    async def unchanged(self, request: Request, reads: Callable[[], CheckpointReads]) -> bool:
        """Whether this first-pass reconcile of ``request`` would find what the previous
        leader's last one did, and so nothing to do: return at once when True. ``reads``
        declares what the reconcile reads, and is called only when that is to be judged.
        Stored objects' resourceVersions are read from the stores' keys, never unpacked."""
        checkpoint = self.resumed()
        controller = self._attachment().controller
        if (
            checkpoint is None
            or controller.first_pass_done
            or request in controller.touched
            or str(request) in checkpoint.unsettled
        ):
            return False
        changed = await self._changed_since(checkpoint, reads())
        if changed is None:
            log.debug("unchanged since the checkpoint")
            return True
        if changed:
            # Why a restart reconciles a request again: something it reads changed meanwhile.
            log.debug("changed since the checkpoint", kind=changed)
        return False

    async def _changed_since(self, checkpoint: Checkpoint, reads: CheckpointReads) -> str | None:
        """The first kind of which an object ``reads`` declares is newer than the checkpoint
        (or ``reads.uncovered``, or a named object unreadable), "" for an object that must
        exist and does not, or None."""
        changed = self._cached_changed(checkpoint, reads)
        if changed is not None:
            return changed
        for watched, ns, name in reads.named:
            try:
                found = await watched.read(ns, name, timeout=self.read_timeout)
            except (ForbiddenError, UnauthorizedError):
                return watched.resource.kind
            kind = watched.resource.group_kind
            if not checkpoint.named_unchanged(kind, namespaced_key(ns, name), found):
                return watched.resource.kind
        return None

    def _cached_changed(self, checkpoint: Checkpoint, reads: CheckpointReads) -> str | None:
        """:meth:`_changed_since` for what the cache holds (all but the named objects)."""
        informers = self._attachment().controller.cache.informers
        if any(key not in informers[r].store for r, key in reads.objects):
            return ""
        for resource, key in reads.objects:
            version = informers[resource].store.resource_version(key)
            if not checkpoint.unchanged(resource.group_kind, [version]):
                return resource.kind
        if reads.uncovered is not None:
            return reads.uncovered
        for resource, key in reads.optional:
            store = informers[resource].store
            if key in store and not checkpoint.unchanged(
                resource.group_kind, [store.resource_version(key)]
            ):
                return resource.kind
        for resource, index, value in reads.indexed:
            store = informers[resource].store
            keys = store.keys_by_index(index, value)
            if not checkpoint.unchanged(resource.group_kind, map(store.resource_version, keys)):
                return resource.kind
        return None
