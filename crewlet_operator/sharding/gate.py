"""The gate: what a member reconciles of the sharded kind, read before each reconcile."""

from __future__ import annotations

import contextlib

import structlog

from crewlet_operator.cache import Cache
from crewlet_operator.errors import NotFoundError
from crewlet_operator.kube.resources import Resource
from crewlet_operator.reconcile import ReconcileFunc, Request, Result
from crewlet_operator.sharding.ring import RingLabels, label_path, label_test
from crewlet_operator.sharding.slots import SLOT_WAIT, MemberSlots

__all__ = ["Gate"]

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
