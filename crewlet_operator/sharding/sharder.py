"""The sharder: on the leader alone, it assigns the sharded kind's objects to members, moves
them, writes the dead members' wills and forgets their Leases."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from crewlet_operator.cache import ClusterView, InformerOptions, MetadataOnly
from crewlet_operator.errors import ConflictError, InvalidError, NotFoundError
from crewlet_operator.incarnation import Evidence
from crewlet_operator.kube.client import Client, Scope
from crewlet_operator.kube.resources import LEASE, Resource
from crewlet_operator.objects import (
    KubeObject,
    object_key,
    resource_version,
    resource_version_before,
)
from crewlet_operator.sharding.membership import RingMembers, Settling
from crewlet_operator.sharding.ring import (
    Assign,
    Drain,
    RingLabels,
    RingView,
    Step,
    label_path,
    label_test,
    next_step,
    slot_of,
    will_text,
)

__all__ = ["RELABELS_A_PASS", "SETTLE_PERIODS", "SHARDER_WRITES", "Sharder"]

log = structlog.get_logger("crewlet_operator.sharding")

SHARDER_WRITES = 32
"""Label writes the sharder has in flight at once: a takeover of 3,320 objects took 174 s one
at a time on the bench's API server."""


RELABELS_A_PASS = 4 * SHARDER_WRITES
"""Relabels of dead members' objects for their heirs that one pass makes at most, after its
other writes; the passes that follow at once make the rest. They are bookkeeping (the heirs
write those objects by the will already): 4,030 of them held a pass for 52 s, and a new
object's first label with it, while the users' changes of the takeover waited on the same API
server (bench/NOTES.md, "Relabels a pass")."""

SETTLE_PERIODS = 2.0
"""Retry periods with no member joining before the sharder decides (a settled ring): the
replicas of a ring that start together join within a period or two of each other, and a
decision made before the last one joins is undone by a drain of a third of the objects, three
writes each (bench/NOTES.md, "A settled start")."""


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
        membership: RingMembers,
        key: Callable[[KubeObject], str],
        retry_period: float,
        evidence: bool = False,
        settle: float = 0.0,
    ) -> None:
        """``evidence``: write a live member's will at once when the API server shows its
        process gone (its Pod deleted, its container ended: :mod:`crewlet_operator.incarnation`),
        as a standby takes a leader's lease. ``settle``: decide nothing (no will, no label)
        until no member has joined for that many seconds (:meth:`settled`); 0, decide at once."""
        self._client = client
        self._resource = resource
        self._labels = labels
        self._membership = membership
        self._key = key
        self._retry_period = retry_period
        self._view = view
        self._scope = scope
        self._evidence = evidence
        self._evidence_asked_at: float | None = None
        self._settling = Settling(membership, settle)
        self._written: dict[str, tuple[str, str | None]] = {}
        """The objects this sharder labelled, by key, with the version its decision read and
        the version its write made: a pass does not decide one again until the view shows it
        at the written version or later (resourceVersions compare within a kind, KEP-5504;
        where they do not, at any version but the one decided on). The view is behind the
        sharder's own writes (most of all while it still lists, when no watch event comes; a
        user's change made before a write may come in after it), and a decision on labels it
        wrote over would only be refused."""
        # A pass is due at each list of the ring's Leases and at each change to the objects.
        self._pass_due = membership.listed.subscribe()
        self._placed = Placements(key, labels, self._pass_due)

    def watch(self) -> None:
        """Read the objects from the leader's view: its kind's entries as declared there (by
        the controller, trimmed as it reads them), else their metadata alone, in the sharded
        controller's scope. Called before the view starts."""
        if not self._view.declares(self._resource):
            options = InformerOptions(scope=self._scope, storage=MetadataOnly())
            self._view.declare(self._resource, options)
        self._view.add_handler(self._resource, self._placed)

    async def run(self) -> None:
        """Make a pass over the objects (read from the leader's view) whenever they or the
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
        may lead to one). A dead member's objects are relabelled for their heirs after every
        other write, :data:`RELABELS_A_PASS` a pass."""
        view = self._membership.view()
        if view is None or not view.live or not self.settled(time.monotonic()):
            return 0
        bequeathed, changed = await self._wills(view)
        if changed and await self._membership.observe():
            # A member the API server shows gone renewed its Lease after the list this pass
            # read (a new leader's first pass reads one up to a retry period old): judged again
            # on a list made now, its will is written now, not at the next list.
            view = self._membership.view() or view
            bequeathed += (await self._wills(view))[0]
        if bequeathed:
            await self._membership.observe()  # the heirs hold the dead members' objects now
            view = self._membership.view() or view
        listed = self._view.has_synced(self._resource)  # read first: what follows may be more
        steps, on_paths = self._plan(view)
        writes = asyncio.Semaphore(SHARDER_WRITES)

        async def write(key: str, placed: Placed, step: Assign | Drain) -> bool:
            async with writes:
                return await self._write(key, placed, step)

        labelled = await asyncio.gather(*(write(*planned) for planned in steps))
        # A Lease another will names is kept until that will's own Lease is gone: the heirs of
        # a will never change (RingView.heirs), whatever the order of the deletions.
        named = {heir for dead, heirs in view.wills.items() for heir in heirs if heir != dead}
        forgettable = view.wills.keys() - on_paths - named if listed else set()
        forgotten = await asyncio.gather(*(self._forget(dead) for dead in forgettable))
        return bequeathed + sum(labelled) + sum(forgotten)

    async def _wills(self, view: RingView) -> tuple[int, bool]:
        """Write the wills of the members ``view`` finds dead and of those the API server
        shows gone (:meth:`_gone`): how many were written, and whether the Lease of one shown
        gone had changed since the list (its will refused)."""
        gone = await self._gone()
        heirs = view.live.difference(gone)
        dead: dict[str, Evidence | None] = dict.fromkeys(view.unwilled())
        if heirs:
            dead |= gone
        written = await asyncio.gather(
            *(self._bequeath(member, heirs or view.live, why) for member, why in dead.items())
        )
        changed = any(will is None for will in written)
        return sum(bool(will) for will in written), changed

    def _plan(self, view: RingView) -> tuple[list[Planned], set[str]]:
        """A pass's label writes, and the members an object's label leads through. A decision
        reads an object's ring labels and slot alone: made once a pass for each (a few members
        times 2 times SLOTS of them, against 10,000s of objects)."""
        steps: list[Planned] = []
        relabels: list[Planned] = []  # a dead member's objects, for their heirs
        on_paths: set[str] = set()
        decided: dict[tuple[str | None, bool, int], Step] = {}
        written, self._written = self._written, {}
        for key, placed in self._placed.by_key.items():
            inputs = (placed.shard, placed.drain is not None, placed.slot)
            if inputs in decided:
                step = decided[inputs]
            else:
                step = decided[inputs] = next_step(
                    placed.labels(self._labels), self._labels, placed.slot, view
                )
                if placed.shard is not None:
                    on_paths.update(view.path(placed.shard, placed.slot))
            record = written.get(key)
            if record is not None and _behind(placed.version, *record):
                self._written[key] = record  # the view has not shown the write yet
            elif step is not None:
                (relabels if placed.shard in view.wills else steps).append((key, placed, step))
        if len(relabels) > RELABELS_A_PASS:
            self._pass_due.set()  # the rest in the next pass, right after this one
        return steps + relabels[:RELABELS_A_PASS], on_paths

    def settled(self, now: float) -> bool:
        """Whether the ring has settled at ``now`` (:class:`~.membership.Settling`). A member
        that dies does not unsettle it: its will is written at once, naming the members live
        then. A member that joins does: a will or label decided just before it came would be
        undone by a drain (two writes an object), where waiting leaves the objects with their
        members, or unassigned (nothing writes them) for a few seconds."""
        settling = self._settling
        waited_since = settling.waiting_since
        settled = settling.settled(now)
        if waited_since is not None and settling.waiting_since is None:
            log.info("the ring settled; sharding", waited=round(now - waited_since, 2))
        elif waited_since is None and settling.waiting_since is not None:
            log.info("waiting for the ring to settle", seconds=settling.settle)
        return settled

    async def _gone(self) -> dict[str, Evidence]:
        """With ``evidence``, the live members the API server shows gone
        (:meth:`Membership.gone`), asked once a list of the ring: a member whose process
        crashed or whose Pod was deleted gets its will then, not a lease duration later."""
        if not self._evidence:
            return {}
        listed_at = self._membership.listed_at
        if listed_at == self._evidence_asked_at:
            return {}
        self._evidence_asked_at = listed_at
        return await self._membership.gone()

    async def _bequeath(
        self, dead: str, live: frozenset[str], evidence: Evidence | None = None
    ) -> bool | None:
        """Write ``dead``'s will, naming ``live``, while its Lease is at the version it was
        judged dead by (refused otherwise: it changed, so it was not dead). ``evidence``: why a
        member that was live is dead. True when written; None when refused for a member with
        ``evidence`` (its process is gone; its Lease changed since the list, before it went:
        judge it again on a new list); False otherwise."""
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
        except ConflictError:
            return None if evidence is not None else False
        except NotFoundError:
            return False
        log.info(
            "a member's will written",
            member=dead,
            heirs=sorted(live),
            evidence=evidence.value if evidence is not None else None,
        )
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

    async def _write(self, key: str, placed: Placed, step: Assign | Drain) -> bool:
        """Label one object as ``step`` says, while its labels are those it was decided on;
        False when they are not (the watch brings the new ones, and the next pass decides
        again). A takeover's writes race the users' own changes to the same objects: a test of
        the labels alone lets those through, where the whole version would refuse them."""
        labels = placed.labels(self._labels)
        patch, patch_type = self._patch(labels, placed.version, step)
        namespace, _, name = key.rpartition("/")
        try:
            labelled = await self._client.patch(
                self._resource, name, patch, namespace or None, patch_type=patch_type
            )
        except (ConflictError, InvalidError, NotFoundError):
            return False
        self._written[key] = (placed.version, resource_version(labelled))
        if isinstance(step, Assign):
            log.info("assigned", namespace=namespace or None, name=name, member=step.member)
        else:
            log.info(
                "draining",
                namespace=namespace or None,
                name=name,
                member=placed.shard,
                to=step.member,
            )
        return True

    def _patch(
        self, labels: Mapping[str, str], version: str, step: Assign | Drain
    ) -> tuple[Any, str]:
        """The patch for ``step`` on an object with ``labels`` (read at ``version``)."""
        shard, drain = self._labels.shard, self._labels.drain
        member = labels.get(shard)
        if isinstance(step, Drain):  # of an assigned object: next_step drains no other
            # Never over a drain: one the view does not show yet (a new leader's view, or
            # versions that do not compare, let _written pass it) would be written twice, or
            # renamed under the member answering it.
            add = {"op": "add", "path": label_path(drain), "value": step.member}
            return [label_test(shard, member or ""), label_test(drain, None), add], "json"
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


def _behind(version: str, decided: str, wrote: str | None) -> bool:
    """Whether the view's ``version`` of an object the sharder labelled is older than its
    write: the one its decision read, or one known to come before the version the write made."""
    return version == decided or resource_version_before(version, wrote)


Planned = tuple[str, "Placed", Assign | Drain]
"""A label write a pass plans: the object's key, what the sharder read of it, and the step."""


@dataclass(frozen=True, slots=True)
class Placed:
    """What the sharder reads of one object: its version, its slot and its ring labels."""

    version: str
    slot: int
    shard: str | None
    drain: str | None

    def labels(self, keys: RingLabels) -> dict[str, str]:
        """The object's ring labels, by their keys."""
        labels = {keys.shard: self.shard, keys.drain: self.drain}
        return {key: value for key, value in labels.items() if value is not None}


class Placements:
    """What the sharder reads of each object, by key, kept by the leader's view's events (an
    informer handler), which also wake a pass. A pass follows every change during a takeover,
    and decoding the view's compact copies of 10,000 objects took 33 ms a pass where these take
    about 2 (bench/NOTES.md, "One run path")."""

    def __init__(
        self, key: Callable[[KubeObject], str], labels: RingLabels, changed: asyncio.Event
    ) -> None:
        self.by_key: dict[str, Placed] = {}
        self._key = key
        self._labels = labels
        self._changed = changed

    def on_add(self, obj: KubeObject, initial: bool = False) -> None:
        self._place(obj)

    def on_update(self, old: KubeObject, new: KubeObject) -> None:
        self._place(new)

    def on_delete(self, obj: KubeObject) -> None:
        self.by_key.pop(object_key(obj), None)
        self._changed.set()

    def _place(self, obj: KubeObject) -> None:
        meta = obj.get("metadata") or {}
        labels: Mapping[str, str] = meta.get("labels") or {}
        self.by_key[object_key(obj)] = Placed(
            version=str(meta.get("resourceVersion") or ""),
            slot=slot_of(self._key(obj)),
            shard=labels.get(self._labels.shard),
            drain=labels.get(self._labels.drain),
        )
        self._changed.set()
