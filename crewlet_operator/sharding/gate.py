"""The gate: what a member reconciles of the sharded kind, read before each reconcile."""

from __future__ import annotations

import contextlib

import structlog

from crewlet_operator.cache import Cache
from crewlet_operator.errors import NotFoundError
from crewlet_operator.kube.resources import Resource
from crewlet_operator.objects import KubeObject, generation
from crewlet_operator.objects import annotations as annotations_of
from crewlet_operator.objects import labels as labels_of
from crewlet_operator.predicate import Predicate, new_predicate_funcs
from crewlet_operator.reconcile import ReconcileFunc, Request, Result
from crewlet_operator.sharding.ring import RingLabels, label_path, label_test
from crewlet_operator.sharding.slots import SLOT_WAIT, MemberSlots

__all__ = ["Gate", "heirs_relabels_skipped"]

log = structlog.get_logger("crewlet_operator.sharding")


class Gate:
    """A reconciler wrapper: reconciles a request only while its object is this member's, and
    acknowledges a drain instead. Every sharded controller reconciles through one; the rest of
    the controller (its queue, its workers) knows nothing of sharding."""

    def __init__(
        self,
        reconcile: ReconcileFunc,
        cache: Cache,
        resource: Resource,
        labels: RingLabels,
        *,
        slots: MemberSlots,
    ) -> None:
        self._reconcile = reconcile
        self._cache = cache
        self._resource = resource
        self._shard = labels.shard
        self._drain = labels.drain
        self._slots = slots

    async def reconcile(self, request: Request) -> Result | None:
        """Reconcile ``request`` if its object, as cached, is labelled for this member and not
        draining, or is labelled for a dead member whose will leads to this one, once its
        children are cached (else again in :data:`SLOT_WAIT` seconds, as while a dead
        member's will is awaited); acknowledge a drain; leave anything else alone, and
        everything once this member has a will itself."""
        obj = self._cache.get(self._resource, request.name, request.namespace)
        if obj is None or self._slots.willed():
            return None  # gone, or another member's: nothing of it is ours to write
        meta = obj.get("metadata") or {}
        labels = meta.get("labels") or {}
        labelled = labels.get(self._shard)
        if labelled == self._slots.member:
            if self._drain in labels:
                await self._acknowledge(request, str(labels[self._drain]))
                return None
        elif labelled is None:
            return None
        elif self._slots.awaits_will(str(labelled)):
            return Result(requeue_after=SLOT_WAIT)  # its will may leave it to this member
        elif not self._slots.holds(obj, str(labelled)):
            return None
        if not self._slots.covers(obj):
            return Result(requeue_after=SLOT_WAIT)
        return await self._reconcile(request)

    async def _acknowledge(self, request: Request, drain: str) -> None:
        """Let the object go: clear both labels, while they still say this member and the
        drain (refused otherwise: the cache was behind, and the request is retried)."""
        patch = [
            label_test(self._shard, self._slots.member),
            label_test(self._drain, drain),
            {"op": "remove", "path": label_path(self._shard)},
            {"op": "remove", "path": label_path(self._drain)},
        ]
        with contextlib.suppress(NotFoundError):
            await self._cache.client.patch(
                self._resource, request.name, patch, request.namespace, patch_type="json"
            )
            log.info("handed off", namespace=request.namespace, name=request.name)


def heirs_relabels_skipped(labels: RingLabels, slots: MemberSlots) -> Predicate:
    """A predicate on the sharded kind's events: an update that does nothing but relabel an
    object from a dead member for this member, which already writes it as that member's heir,
    asks for no reconcile. The heir reconciled the object when the will came (its cache listed
    the dead member's objects then), and the label changes nothing it writes: without this,
    each relabel that comes after that reconcile queues the object once more, ahead of changes
    still waiting for their first (bench/NOTES.md, "An heir's own relabels, reconciled no
    more"). Any other update passes: a drain, a first assignment, a move from a live member,
    a change of the spec, the annotations or another label."""

    def update(old: KubeObject, new: KubeObject) -> bool:
        before, after = dict(labels_of(old)), dict(labels_of(new))
        dead = before.pop(labels.shard, None)
        if after.pop(labels.shard, None) != slots.member or dead in (None, slots.member):
            return True  # not a relabel for this member: most updates stop here
        relabelled = (
            labels.drain not in after
            and before == after
            and generation(old) == generation(new)
            and annotations_of(old) == annotations_of(new)
        )
        return not (relabelled and slots.holds(old, str(dead)))

    return new_predicate_funcs(update=update)
