"""The sharder: on the leader alone, it assigns the sharded kind's objects to members, moves
them, writes the dead members' wills and forgets their Leases."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from crewlet_operator.cache import ClusterView, InformerOptions, MetadataOnly
from crewlet_operator.errors import ConflictError, InvalidError, NotFoundError
from crewlet_operator.kube.client import Client, Scope
from crewlet_operator.kube.resources import LEASE, Resource
from crewlet_operator.objects import KubeObject
from crewlet_operator.sharding.membership import Membership
from crewlet_operator.sharding.ring import (
    Assign,
    Drain,
    RingLabels,
    label_path,
    label_test,
    next_step,
    slot_of,
    will_text,
)

__all__ = ["SHARDER_WRITES", "Sharder"]

log = structlog.get_logger("crewlet_operator.sharding")

SHARDER_WRITES = 32
"""Label writes the sharder has in flight at once: a takeover of 3,320 objects took 174 s one
at a time on the bench's API server."""


class Sharder:
    """Assigns the primary objects to members and moves them (on the leader alone): see the
    package's documentation for the protocol, and :func:`~.ring.next_step` for each decision.
    It writes as its own field manager, so its label writes and wills are told apart from the
    members' in an audit log."""

    def __init__(
        self,
        client: Client,
        resource: Resource,
        view: ClusterView,
        scope: Scope,
        *,
        labels: RingLabels,
        membership: Membership,
        key: Callable[[KubeObject], str],
        retry_period: float,
    ) -> None:
        self._client = client
        self._resource = resource
        self._labels = labels
        self._membership = membership
        self._key = key
        self._retry_period = retry_period
        self._view = view
        self._scope = scope
        self._written: dict[str, str] = {}
        """The objects this sharder labelled, by key, with the version its decision read: a
        pass does not decide one again until the view shows it at another version. The view
        is behind the sharder's own writes (most of all while it still lists, when no watch
        event comes), and a decision on the labels it wrote over would only be refused."""
        # A pass is due at each list of the ring's Leases and at each change to the objects.
        self._pass_due = membership.listed.subscribe()

    def watch(self) -> None:
        """Read the objects from the cluster view: its kind's entries as declared there (by
        the controller, trimmed as it reads them), else their metadata alone, in the sharded
        controller's scope. Called before the view starts."""
        if not self._view.declares(self._resource):
            options = InformerOptions(scope=self._scope, storage=MetadataOnly())
            self._view.declare(self._resource, options)
        self._view.add_handler(self._resource, _Wake(self._pass_due))

    async def run(self) -> None:
        """Make a pass over the objects (read from the cluster view) whenever they or the
        members change, at least every ``retry_period``, until cancelled. It does not wait for
        the view's first list: a will needs no object, and each label decision reads one
        object's labels alone, so the first passes write the wills at once and label the
        objects listed so far (see :meth:`shard_pass`)."""
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._retry_period):
                    await self._pass_due.wait()
            self._pass_due.clear()
            await self.shard_pass()

    async def shard_pass(self) -> int:
        """One pass over the cached objects; the number of writes made. First the wills of the
        members found dead (one write each, which hands all their objects to the heirs at
        once), then the label writes, :data:`SHARDER_WRITES` at a time (one at a time, a move
        of thousands would wait a round trip each: bench/NOTES.md, "Sharding"), then the
        deletion of the Leases of the dead members no object's label leads to and no other
        will names, once the view has listed every object (before, an object not listed yet
        may lead to one)."""
        view = self._membership.view()
        if view is None or not view.live:
            return 0
        bequeathed = sum(
            await asyncio.gather(*(self._bequeath(dead, view.live) for dead in view.unwilled()))
        )
        if bequeathed:
            await self._membership.observe()  # the heirs hold the dead members' objects now
            view = self._membership.view() or view
        listed = self._view.has_synced(self._resource)  # read first: what follows may be more
        steps = []
        on_paths: set[str] = set()  # the members an object's label leads through
        written, self._written = self._written, {}
        for obj in self._view.list(self._resource):
            meta = obj.get("metadata") or {}
            labels: Mapping[str, str] = meta.get("labels") or {}
            slot = slot_of(self._key(obj))
            member = labels.get(self._labels.shard)
            if member is not None:
                on_paths.update(view.path(member, slot))
            key, version = _key(meta), str(meta.get("resourceVersion") or "")
            if written.get(key) == version:
                self._written[key] = version  # the view has not shown the write yet
                continue
            step = next_step(labels, self._labels, slot, view)
            if step is not None:
                steps.append((obj, step))
        writes = asyncio.Semaphore(SHARDER_WRITES)

        async def write(obj: KubeObject, step: Assign | Drain) -> bool:
            async with writes:
                return await self._write(obj, step)

        labelled = await asyncio.gather(*(write(obj, step) for obj, step in steps))
        # A Lease another will names is kept until that will's own Lease is gone: the heirs of
        # a will never change (RingView.heirs), whatever the order of the deletions.
        named = {heir for dead, heirs in view.wills.items() for heir in heirs if heir != dead}
        forgettable = view.wills.keys() - on_paths - named if listed else set()
        forgotten = await asyncio.gather(*(self._forget(dead) for dead in forgettable))
        return bequeathed + sum(labelled) + sum(forgotten)

    async def _bequeath(self, dead: str, live: frozenset[str]) -> bool:
        """Write ``dead``'s will, naming ``live``, while its Lease is at the version it was
        judged dead by (refused otherwise: it changed, so it was not dead)."""
        version = self._membership.versions.get(dead, "")
        patch = {
            "metadata": {
                "resourceVersion": version,
                "annotations": {self._labels.heirs: will_text(live)},
            }
        }
        try:
            await self._client.patch(
                LEASE, dead, patch, self._membership.namespace, patch_type="merge"
            )
        except (ConflictError, NotFoundError):
            return False
        log.info("a member's will written", member=dead, heirs=sorted(live))
        return True

    async def _forget(self, dead: str) -> bool:
        """Delete the Lease of ``dead``, a member with a will that no object's label leads
        through any more, at the version it was listed at."""
        version = self._membership.versions.get(dead)
        try:
            await self._client.delete(
                LEASE, dead, self._membership.namespace, resource_version=version
            )
        except (ConflictError, NotFoundError):
            return False
        log.info("a dead member's lease deleted", member=dead)
        return True

    async def _write(self, obj: KubeObject, step: Assign | Drain) -> bool:
        """Label one object as ``step`` says, while its labels are those it was decided on;
        False when they are not (the watch brings the new ones, and the next pass decides
        again). A takeover's writes race the users' own changes to the same objects: a test of
        the labels alone lets those through, where the whole version would refuse them."""
        meta = obj.get("metadata") or {}
        labels: Mapping[str, str] = meta.get("labels") or {}
        patch, patch_type = self._patch(labels, str(meta.get("resourceVersion") or ""), step)
        try:
            await self._client.patch(
                self._resource,
                str(meta.get("name")),
                patch,
                meta.get("namespace"),
                patch_type=patch_type,
            )
        except (ConflictError, InvalidError, NotFoundError):
            return False
        self._written[_key(meta)] = str(meta.get("resourceVersion") or "")
        log.info(
            "assigned" if isinstance(step, Assign) else "draining",
            namespace=meta.get("namespace"),
            name=meta.get("name"),
            member=step.member if isinstance(step, Assign) else labels.get(self._labels.shard),
        )
        return True

    def _patch(
        self, labels: Mapping[str, str], version: str, step: Assign | Drain
    ) -> tuple[Any, str]:
        """The patch for ``step`` on an object with ``labels`` (read at ``version``)."""
        shard, drain = self._labels.shard, self._labels.drain
        member = labels.get(shard)
        if isinstance(step, Drain):  # of an assigned object: next_step drains no other
            add = {"op": "add", "path": label_path(drain), "value": "true"}
            return [label_test(shard, member or ""), add], "json"
        if member is None:
            # An unassigned object is new: nothing races its first label but a stale cache.
            change = {shard: step.member, drain: None}
            return {"metadata": {"resourceVersion": version, "labels": change}}, "merge"
        ops: list[dict[str, Any]] = [
            label_test(shard, member),
            {"op": "replace", "path": label_path(shard), "value": step.member},
        ]
        if drain in labels:
            ops += [label_test(drain, labels[drain]), {"op": "remove", "path": label_path(drain)}]
        return ops, "json"


def _key(meta: Mapping[str, Any]) -> str:
    return f"{meta.get('namespace') or ''}/{meta.get('name')}"


class _Wake:
    """An informer handler that sets an event on every change."""

    def __init__(self, event: asyncio.Event) -> None:
        self._event = event

    def on_add(self, obj: KubeObject, initial: bool = False) -> None:
        self._event.set()

    def on_update(self, old: KubeObject, new: KubeObject) -> None:
        self._event.set()

    def on_delete(self, obj: KubeObject) -> None:
        self._event.set()
