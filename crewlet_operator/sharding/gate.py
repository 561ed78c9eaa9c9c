"""The gate: what a member reconciles of the sharded kind, read before each reconcile."""

from __future__ import annotations

import contextlib

import structlog

from crewlet_operator import metrics
from crewlet_operator.cache import Cache
from crewlet_operator.errors import NotFoundError
from crewlet_operator.kube.resources import Resource
from crewlet_operator.objects import KubeObject, generation
from crewlet_operator.objects import annotations as annotations_of
from crewlet_operator.objects import labels as labels_of
from crewlet_operator.predicate import Predicate, new_predicate_funcs
from crewlet_operator.reconcile import ReconcileFunc, Request, Result
from crewlet_operator.sharding.ring import RingLabels, label_path, label_test
from crewlet_operator.sharding.slots import MemberSlots

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
        # Each outcome's series, looked up once (labels() validates and hashes at each call).
        self._counted = {
            outcome: metrics.SHARD_GATE.labels(ring=labels.ring, outcome=outcome)
            for outcome in metrics.SHARD_GATE_OUTCOMES
        }

    async def reconcile(self, request: Request) -> Result | None:
        """Reconcile ``request`` if its object, as cached, is labelled for this member and not
        draining, or is labelled for a dead member whose will leads to this one, once its
        children are cached (the slots ask for it again then, as when a will leaves it to
        this member: :meth:`MemberSlots.on_ready <.slots.MemberSlots.on_ready>`); acknowledge
        a drain; leave anything else alone, and everything once this member has a will
        itself."""
        outcome, labels = self._outcome(request)
        self._counted[outcome].inc()
        if outcome == "reconciled":
            return await self._reconcile(request)
        if outcome == "drained":
            await self._acknowledge(request, labels[self._drain])
        return None

    def _outcome(self, request: Request) -> tuple[metrics.ShardGateOutcome, dict[str, str]]:
        """What the gate does with ``request``, and its object's labels, as cached."""
        obj = self._cache.get(self._resource, request.name, request.namespace)
        if obj is None or self._slots.willed():
            return "not_ours", {}  # gone, or another member's: nothing of it is ours to write
        labels: dict[str, str] = (obj.get("metadata") or {}).get("labels") or {}
        labelled = labels.get(self._shard)
        if labelled == self._slots.member:
            if self._drain in labels:
                return "drained", labels
        elif labelled is None:
            return "not_ours", labels
        elif self._slots.awaits_will(str(labelled)):
            return "awaiting_will", labels
        elif not self._slots.holds(obj, str(labelled)):
            return "not_ours", labels
        return ("reconciled" if self._slots.covers(obj) else "awaiting_slot"), labels

    async def _acknowledge(self, request: Request, drain: str) -> None:
        """Hand the object to the member the drain names (``drain``): label it for that member
        and clear the drain, in one write, while the labels still say this member and that
        drain (refused otherwise: the cache was behind, and the request is retried). The
        sharder wrote the drain for the member the ring gave the object, so it writes nothing
        more for the move: two writes an object where clearing both labels, for the sharder to
        label it once it saw them cleared, took three and a pass."""
        patch = [
            label_test(self._shard, self._slots.member),
            label_test(self._drain, drain),
            {"op": "replace", "path": label_path(self._shard), "value": drain},
            {"op": "remove", "path": label_path(self._drain)},
        ]
        with contextlib.suppress(NotFoundError):
            await self._cache.client.patch(
                self._resource, request.name, patch, request.namespace, patch_type="json"
            )
            log.info("handed off", namespace=request.namespace, name=request.name, to=drain)


def heirs_relabels_skipped(labels: RingLabels, slots: MemberSlots) -> Predicate:
    """A predicate on the sharded kind's events: an update that does nothing but relabel an
    object from a dead member for this member, which already writes it as that member's heir,
    asks for no reconcile once the heir has asked for the object as its inheritance
    (:meth:`MemberSlots.asked_for <.slots.MemberSlots.asked_for>`; a relabel that comes first,
    while the heir still lists the dead member's objects, asks for it then). The label changes
    nothing the heir writes: without this, each relabel that comes after the heir's reconcile
    queues the object once more, ahead of changes still waiting for their first
    (bench/NOTES.md, "An heir's own relabels, reconciled no more"). Any other update passes: a
    drain, a first assignment, a move from a live member, a change of the spec, the annotations
    or another label."""

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
        return not (relabelled and slots.asked_for(old, str(dead)))

    return new_predicate_funcs(update=update)
