"""What a member caches, kept in step with what it holds: :class:`MemberSlots` narrows its
informers of the sharded kind to its shard label (and its estates') and its informers of
children to the slots it holds."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable, Set
from dataclasses import replace

import structlog

from crewlet_operator._tasks import cancel_and_wait
from crewlet_operator.cache import Informer
from crewlet_operator.kube.client import Scope
from crewlet_operator.objects import KubeObject, name, namespace
from crewlet_operator.predicate import Predicate, new_predicate_funcs
from crewlet_operator.reconcile import Request
from crewlet_operator.sharding.membership import RingMembers, Settling
from crewlet_operator.sharding.ring import MemberState, RingLabels, slot_of

__all__ = ["WIDEN_SLOTS", "MemberSlots"]

log = structlog.get_logger("crewlet_operator.sharding")

WIDEN_SLOTS = 8
"""Slots a widening's first group lists, those most awaited first; each group after it lists
twice as many as the one before. Each group is covered, and the requests put off for it asked
for, as soon as its children are listed, so that an heir reconciles its first inherited object
after one small group's lists rather than after all of them, which took 5 s on a 2-core
machine; and growing groups list an heir's 85 slots in 4 rounds, not 11 (bench/NOTES.md,
"Widening a few slots at a time", "Groups that double"). A list at the store's version is served
from the API server's cache and costs what it selects: a smaller one costs a round trip more,
and little else."""


def _and(selector: str | None, term: str) -> str:
    return f"{selector},{term}" if selector else term


class MemberSlots:
    """What this member caches, kept in step with what it holds.

    Its informers of the primary kind select its shard label and those of the dead members
    whose objects may fall to it (:meth:`RingView.estates <.ring.RingView.estates>`), at once
    when a will appears. Its informers of children want the slots the ring gives it (from
    :class:`~.membership.Membership`) and the slots of every object its primary informers hold
    (an object still draining towards it, or away from it, or inherited, included). A wider
    want widens them at once (:meth:`Informer.rescope <crewlet_operator.cache.Informer.rescope>`);
    a narrower one narrows them only once it has held for ``settle`` seconds, so that objects
    moving one by one cost one list, not one each.

    It asks for a reconcile of an object the moment one can do something (:meth:`on_ready`):
    a dead member's object when a will leaves it to this member, an object put off for its slot
    when the slot is covered. Nothing polls, and nothing else asks: the add of an object
    labelled for another member and a child listed into a slot not covered yet ask for no
    reconcile (:meth:`primary_predicate`, :meth:`children_predicate`).

    Invariants: :attr:`covered` only holds slots every registered informer of children has
    listed in its current scope, and the gate reconciles an object only when its slot is
    covered; every request put off for a slot not covered (:meth:`covers`) is in
    ``_awaiting[slot]`` until the slot is covered, when it is asked for again, or until the
    slot is no longer wanted: its object went elsewhere, and should it come back, its own
    event asks for it.
    ``_held[(member, slot)]`` holds the requests of the objects of ``slot`` labelled for
    ``member`` in the primary informers (no pair without one), kept by their events (a
    handler), so that neither a want nor an inheritance reads, and decodes, the store. Of a
    dead member's objects, which every heir's cache holds until they are relabelled, only those
    whose heir this member is count as its own: ``_inherited`` holds the (member, slot) pairs
    the wills gave this member at the last list of the ring, each of whose objects was asked
    for when its pair entered it, or when it came into the cache after.
    """

    def __init__(
        self,
        labels: RingLabels,
        member: str,
        membership: RingMembers,
        *,
        key: Callable[[KubeObject], str],
        retry_period: float,
        settle: float,
        ring_settle: float = 0.0,
    ) -> None:
        """``settle``: seconds a narrower want must hold before the informers narrow to it.
        ``ring_settle``: the ring's, the sharder's (:class:`~.membership.Settling`): the slots
        the ring gives this member are wanted only as the ring was when last settled."""
        self._labels = labels
        self._member = member
        self._membership = membership
        self._key = key
        self._retry_period = retry_period
        self._settle = settle
        self._children: list[tuple[Informer, Scope]] = []
        self._primaries: list[tuple[Informer, Scope]] = []
        self._estates: frozenset[str] = frozenset()
        self._held: dict[tuple[str, int], set[Request]] = {}
        self._inherited: frozenset[tuple[str, int]] = frozenset()
        self._awaiting: dict[int, set[Request]] = {}
        self._ready: list[Callable[[Request], None]] = []
        self._requested: frozenset[int] = frozenset()
        self._wanted_since: tuple[frozenset[int], float] = (frozenset(), 0.0)
        self._settling = Settling(membership, ring_settle)
        self._ring: frozenset[int] = frozenset()
        """The slots the ring gave this member when it was last settled."""
        self.covered: frozenset[int] = frozenset()
        """The slots whose children every informer of children holds."""
        # Reconsider the slots wanted at each list of the ring (and when a request finds its
        # slot missing, or the wills change what is held); follow the wills at each list.
        self._reconsider = membership.listed.subscribe()
        self._ring_listed = membership.listed.subscribe()

    @property
    def member(self) -> str:
        """The member name this replica writes as: the one its objects are labelled for."""
        return self._member

    async def rename(self, member: str) -> None:
        """Write as ``member`` from now on (a member Lease this replica claimed, before it
        writes anything): its primary informers select that label, listed by the time this
        returns."""
        self._member = member
        for informer, base in self._primaries:
            informer.rescope(self.primary_scope(base, self._estates))
        for informer, _ in self._primaries:
            await informer.wait_for_scope()
        self._reconsider.set()

    def scope(self, base: Scope, slots: frozenset[int]) -> Scope:
        """``base`` narrowed to ``slots`` (to none when empty: no slot is named ``none``)."""
        values = ",".join(str(slot) for slot in sorted(slots)) or "none"
        term = f"{self._labels.slot} in ({values})"
        return replace(base, label_selector=_and(base.label_selector, term))

    def primary_scope(self, base: Scope, estates: frozenset[str]) -> Scope:
        """``base`` narrowed to the objects labelled for this member or for ``estates``."""
        return replace(
            base, label_selector=_and(base.label_selector, self._in({self._member, *estates}))
        )

    def _in(self, members: Set[str]) -> str:
        """The selector term of the objects labelled for ``members``."""
        return f"{self._labels.shard} in ({','.join(sorted(members))})"

    def add_children(self, informer: Informer, base: Scope) -> None:
        """Keep ``informer`` (of a kind the sharded controller owns, created in
        ``self.scope(base, frozenset())``) on this member's slots."""
        if all(informer is not known for known, _ in self._children):
            self._children.append((informer, base))

    def add_primary(self, informer: Informer, base: Scope) -> None:
        """The informer of the member's own objects (created in ``self.primary_scope(base,
        frozenset())``), whose slots it counts and whose scope follows the wills."""
        if all(informer is not known for known, _ in self._primaries):
            self._primaries.append((informer, base))
            informer.add_handler(_Held(self._came, self._went))

    def _came(self, obj: KubeObject, added: bool) -> None:
        """Keep ``_held`` as a primary informer's ``obj`` comes (``added``, or by an update),
        and ask for one added under a (member, slot) the wills gave this member already."""
        pair, request = self._labelled_slot(obj), Request(namespace(obj), name(obj))
        self._held.setdefault(pair, set()).add(request)
        if added and pair in self._inherited:
            self._ask([request])

    def _went(self, obj: KubeObject) -> None:
        """Keep ``_held`` as a primary informer's ``obj`` goes (deleted, or by an update)."""
        pair = self._labelled_slot(obj)
        held = self._held.get(pair)
        if held is not None:
            held.discard(Request(namespace(obj), name(obj)))
            if not held:
                del self._held[pair]

    def on_ready(self, ask: Callable[[Request], None]) -> None:
        """Call ``ask`` (a controller's :meth:`~crewlet_operator.controller.Controller.requeue`)
        with each object's request the moment a reconcile of it can do something it could
        not before: a will left it to this member, or its slot's children are cached."""
        self._ready.append(ask)

    def _ask(self, requests: Iterable[Request]) -> None:
        for request in requests:
            for ask in self._ready:
                ask(request)

    def covers(self, obj: KubeObject) -> bool:
        """Whether the children of ``obj`` are cached, as far as its slot goes; if not, the
        slots are reconsidered at once, and ``obj`` is asked for once they are
        (:meth:`on_ready`)."""
        slot = slot_of(self._key(obj))
        if slot in self.covered:
            return True
        self._awaiting.setdefault(slot, set()).add(Request(namespace(obj), name(obj)))
        self._reconsider.set()
        return False

    def _labelled_slot(self, obj: KubeObject) -> tuple[str, int]:
        """The member ``obj`` is labelled for ("" for none), and its slot."""
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return str(labels.get(self._labels.shard) or ""), slot_of(self._key(obj))

    def holds(self, obj: KubeObject, labelled: str) -> bool:
        """Whether ``obj``, labelled for the dead member ``labelled``, is this member's by the
        wills as last listed."""
        view = self._membership.view()
        return view is not None and view.holder(labelled, slot_of(self._key(obj))) == self._member

    def asked_for(self, obj: KubeObject, labelled: str) -> bool:
        """Whether ``obj``, labelled for the dead member ``labelled``, was asked for as this
        member's inheritance (:meth:`on_ready`): its (member, slot) was given to this member at
        the last list of the ring, and every cached object of it asked for then or since."""
        return (labelled, slot_of(self._key(obj))) in self._inherited

    def writes(self, obj: KubeObject) -> bool:
        """Whether ``obj`` is labelled for this member, or for a dead one whose will leaves it
        to this member, as cached and last listed."""
        labelled, _ = self._labelled_slot(obj)
        return labelled == self._member or (bool(labelled) and self.holds(obj, labelled))

    def primary_predicate(self) -> Predicate:
        """What the sharded kind's events must pass: neither the add of an object labelled for
        another member (asked for when a will leaves it to this member, :meth:`on_ready`) nor
        any event of an object this member does not write asks for a reconcile."""
        return new_predicate_funcs(
            create=lambda obj: self._labelled_slot(obj)[0] == self._member,
            update=lambda _, new: self.writes(new),
            delete=self.writes,
        )

    def children_predicate(self) -> Predicate:
        """What the children's events must pass: a child listed into a slot not covered yet
        asks for no reconcile (its object is asked for when the slot is, :meth:`on_ready`)."""
        return new_predicate_funcs(create=self._child_covered)

    def _child_covered(self, child: KubeObject) -> bool:
        slot = ((child.get("metadata") or {}).get("labels") or {}).get(self._labels.slot)
        return slot is None or not slot.isdigit() or int(slot) in self.covered

    def awaits_will(self, labelled: str) -> bool:
        """Whether ``labelled`` was found dead and has no will yet, as last listed: its
        objects may fall to this member in a moment."""
        view = self._membership.view()
        return view is not None and view.state(labelled) is MemberState.DEAD

    def willed(self) -> bool:
        """Whether this member's own Lease carries a will: it was found dead (or a will was
        written by hand), so its heirs write its objects, and it writes nothing."""
        view = self._membership.view()
        return view is not None and view.state(self._member) is MemberState.WILLED

    def wanted(self, now: float) -> frozenset[int]:
        """The slots the ring gives this member, as it was when last settled at ``now``
        (monotonic seconds), and those of the objects it holds: labelled for it, or left to it
        by a will."""
        view = self._membership.view()
        if view is not None and self._settling.settled(now):
            self._ring = view.slots(self._member)
        return self._ring | {
            slot
            for member, slot in self._held
            if (
                member == self._member
                or (view is not None and view.holder(member, slot) == self._member)
            )
        }

    async def run(self) -> None:
        """Follow the wills (:meth:`follow_wills`, at each list of the ring's Leases) and
        :meth:`wanted` (:meth:`follow`, every ``retry_period``, at once when a request found
        its slot missing or the Leases were listed) in two loops, so that a long list of
        children never holds up a dead member's objects, until cancelled."""
        wills = asyncio.create_task(self._follow_wills_at_each_list(), name="member wills")
        try:
            while True:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._retry_period):
                        await self._reconsider.wait()
                self._reconsider.clear()
                await self.follow(time.monotonic())
        finally:
            await cancel_and_wait(wills)

    async def _follow_wills_at_each_list(self) -> None:
        while True:
            await self._ring_listed.wait()
            self._ring_listed.clear()
            await self.follow_wills()

    async def follow_wills(self) -> None:
        """Keep the primary informers on this member's label and the dead members' whose
        objects may fall to it: those whose wills lead to it, and those found dead with no
        will yet (caching writes nothing, and the gate waits for the will), so that their
        objects are cached by the time the will comes; then ask for each cached object the
        wills gave this member since the last list (:meth:`on_ready`)."""
        view = self._membership.view()
        estates = frozenset() if view is None else view.estates(self._member) | view.unwilled()
        if estates != self._estates:
            await self._rescope_primaries(estates)
        self._inherit()

    def _inherit(self) -> None:
        """Ask for the cached objects of each (member, slot) the wills give this member now and
        did not at the last list."""
        view = self._membership.view()
        inherited = frozenset(
            (member, slot)
            for member, slot in self._held
            if member != self._member
            and view is not None
            and view.holder(member, slot) == self._member
        )
        gained, self._inherited = inherited - self._inherited, inherited
        self._ask(request for pair in gained for request in self._held[pair])

    async def _rescope_primaries(self, estates: frozenset[str]) -> None:
        """Select the objects of ``estates`` besides this member's own, by a list of them all
        as they are now: a list of the estates' alone would be read at the version the store
        is at, and the changes since (those a dead member left unwritten) would come after it,
        each asking for a second reconcile of an object just asked for (bench/NOTES.md,
        "Nothing polls, each inherited company once")."""
        self._estates = estates
        for informer, base in self._primaries:
            informer.rescope(self.primary_scope(base, estates))
        for informer, _ in self._primaries:
            await informer.wait_for_scope()
        log.info("inheriting", estates=sorted(estates), member=self._member)
        self._reconsider.set()  # what it holds may have changed, and with it the slots it wants

    async def follow(self, now: float) -> None:
        """Widen the informers of children to what is wanted now, or narrow them to it once
        it has not changed for ``settle`` seconds; mark the slots covered once listed."""
        wanted = self.wanted(now)
        # A request put off for a slot no longer wanted is of an object that went elsewhere.
        self._awaiting = {
            slot: put_off for slot, put_off in self._awaiting.items() if slot in wanted
        }
        if wanted != self._wanted_since[0]:
            self._wanted_since = (wanted, now)
        if wanted == self._requested:
            return
        if wanted <= self._requested and now - self._wanted_since[1] < self._settle:
            return  # narrower: wait until it settles
        slots = wanted if wanted <= self._requested else wanted | self._requested
        added, held = slots - self._requested, self._requested
        self._requested = slots
        self.covered = self.covered & slots
        if not held or not held <= slots:
            # From none (the whole scope streams from the API server's cache, cheaper for it:
            # bench/NOTES.md, "Heirs that list only the slots they inherit"), or narrower.
            for informer, base in self._children:
                informer.rescope(self.scope(base, slots))
            await self._cover(slots)
            return
        # Wider than a scope already holding slots: only the slots added are listed, at the
        # store's version, in growing groups.
        for group in self._groups(added):
            held |= group
            for informer, base in self._children:
                informer.widen(self.scope(base, held), self.scope(base, group))
            await self._cover(held)

    def _groups(self, added: Set[int]) -> list[frozenset[int]]:
        """``added`` in groups of :data:`WIDEN_SLOTS`, then twice as many each, the slots with
        most requests put off first."""
        ordered = sorted(added, key=lambda slot: (-len(self._awaiting.get(slot, ())), slot))
        groups, size = [], WIDEN_SLOTS
        while ordered:
            groups.append(frozenset(ordered[:size]))
            ordered, size = ordered[size:], 2 * size
        return groups

    async def _cover(self, slots: frozenset[int]) -> None:
        """Once every informer of children has listed its new scope, ``slots`` are covered:
        ask for the requests put off for them."""
        for informer, _ in self._children:
            await informer.wait_for_scope()
        log.info("children cached for slots", slots=len(slots), member=self._member)
        self.covered = slots
        self._ask(request for slot in slots for request in self._awaiting.pop(slot, ()))


class _Held:
    """The primary informers' handler: tells ``came`` each object that comes (added, or by an
    update) and ``went`` each that goes."""

    def __init__(
        self, came: Callable[[KubeObject, bool], None], went: Callable[[KubeObject], None]
    ) -> None:
        self._came = came
        self._went = went

    def on_add(self, obj: KubeObject, initial: bool = False) -> None:
        self._came(obj, True)

    def on_update(self, old: KubeObject, new: KubeObject) -> None:
        self._went(old)
        self._came(new, False)

    def on_delete(self, obj: KubeObject) -> None:
        self._went(obj)
