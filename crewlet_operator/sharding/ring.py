"""The decisions of sharding, without I/O: the ring's labels, the hash ring, what the members
of a ring are (:class:`RingView`, :class:`MemberState`) and the sharder's next step for an object.

The protocol these decisions serve, its vocabulary (ring, member, shard and drain labels, will,
heir, slot) and the invariant they keep are written once, in :mod:`crewlet_operator.sharding`.
"""

from __future__ import annotations

import bisect
import enum
import functools
import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

VIRTUAL_NODES = 128
"""Points per member on the ring: with 128, each of 3 members holds within about a fifth of a
third of the keys (the unit tests hold it to that)."""

SLOTS = 256
"""How many slots the keys fall into: enough that the slots add little to the spread the ring's
points give (the unit tests hold 3 members to a fifth of a third of them, as for keys), few
enough that a member's selector of its slots (``slot in (...)``) stays short."""


@dataclass(frozen=True)
class RingLabels:
    """The label keys of one ring, under a DNS domain of the controller's own (the library has
    none to lend: two controllers' rings never share a key)."""

    domain: str
    """Such as ``example.com``."""
    ring: str
    """The ring's name, a DNS-1123 label (the controller's name, usually)."""

    @property
    def member(self) -> str:
        """On each member's Lease, with the ring's name as its value: ``sharding.<domain>/ring``."""
        return f"sharding.{self.domain}/ring"

    @property
    def shard(self) -> str:
        """On each object, naming its member: ``shard.<domain>/<ring>``."""
        return f"shard.{self.domain}/{self.ring}"

    @property
    def slot(self) -> str:
        """On each child of an object, naming the object's slot (:func:`slot_of`):
        ``slot.<domain>/<ring>``."""
        return f"slot.{self.domain}/{self.ring}"

    @property
    def drain(self) -> str:
        """On an object whose member is asked to let it go: ``drain.<domain>/<ring>``."""
        return f"drain.{self.domain}/{self.ring}"

    @property
    def heirs(self) -> str:
        """On a dead member's Lease, its will: the members live when it was found dead, comma
        separated: ``sharding.<domain>/heirs``."""
        return f"sharding.{self.domain}/heirs"


def _point(text: str) -> int:
    """A place on the ring: the first 8 bytes of SHA-256 (the same in every process, unlike
    :func:`hash`)."""
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


@functools.lru_cache(maxsize=65536)
def slot_of(key: str) -> int:
    """The slot of ``key``, from 0 to :data:`SLOTS` - 1: the same in every process. Cached: a
    member asks it for each of its objects' keys, which repeat (a tenant's namespace)."""
    return _point(key) % SLOTS


class HashRing:
    """Consistent hashing of keys over members, with :data:`VIRTUAL_NODES` points a member.

    A key belongs to the member of the first point at or after the key's own, going round. Every
    replica that knows the same members finds the same member for a key; a member that joins
    takes keys only for itself, and one that leaves gives only its own keys away.
    """

    def __init__(self, members: Iterable[str], virtual_nodes: int = VIRTUAL_NODES) -> None:
        points = sorted(
            (_point(f"{member}#{i}"), member)
            for member in set(members)
            for i in range(virtual_nodes)
        )
        self._points = [point for point, _ in points]
        self._members = [member for _, member in points]
        # Every slot's owner, found once: a sharder's pass asks it of each object.
        self._slot_owners = [self.owner(f"slot-{slot}") for slot in range(SLOTS)]

    def owner(self, key: str) -> str | None:
        """The member ``key`` belongs to; None on an empty ring."""
        if not self._points:
            return None
        at = bisect.bisect_left(self._points, _point(key)) % len(self._points)
        return self._members[at]

    def slot_owner(self, slot: int) -> str | None:
        """The member ``slot`` belongs to (and with it every key of the slot); None on an
        empty ring."""
        return self._slot_owners[slot]

    def slots(self, member: str) -> frozenset[int]:
        """The slots ``member`` holds."""
        return frozenset(slot for slot, owner in enumerate(self._slot_owners) if owner == member)


def will_text(heirs: Iterable[str]) -> str:
    """A will's annotation value: the heirs' names, sorted, comma separated."""
    return ",".join(sorted(heirs))


def will_heirs(text: str) -> frozenset[str]:
    """The heirs a will's annotation value names (:func:`will_text`'s inverse)."""
    return frozenset(name for name in text.split(",") if name)


@functools.lru_cache(maxsize=64)
def ring_of(members: frozenset[str]) -> HashRing:
    """The ring of ``members``, built once per set: every decision of a pass asks it."""
    return HashRing(members)


class MemberState(enum.Enum):
    """What a member is, as a replica last listed the ring's Leases."""

    LIVE = "live"
    """Its Lease is held and was seen to change within its duration: it writes its share."""
    DEAD = "dead"
    """Its Lease was listed, expired or released, and carries no will yet: nobody writes its
    objects until the sharder writes the will."""
    WILLED = "willed"
    """Its Lease carries a will: its heirs write its objects, and it writes nothing."""
    ABSENT = "absent"
    """No Lease of that name was listed: an object labelled for it is assigned afresh."""


@dataclass(frozen=True)
class RingView:
    """The ring as one replica last listed its Leases."""

    live: frozenset[str]
    """The members whose Leases are held and renewed."""
    leases: frozenset[str] = frozenset()
    """Every member Lease listed, live or not (``live`` is a subset)."""
    wills: Mapping[str, frozenset[str]] = field(default_factory=dict)
    """The wills of dead members: each one's heirs, the members live when it was found dead."""

    def state(self, member: str) -> MemberState:
        """What ``member`` is in this view (a will counts before liveness: a member whose
        Lease carries one writes nothing, even while it still renews)."""
        if member in self.wills:
            return MemberState.WILLED
        if member in self.live:
            return MemberState.LIVE
        return MemberState.DEAD if member in self.leases else MemberState.ABSENT

    def target(self, slot: int) -> str | None:
        """The live member the ring gives ``slot``; None on an empty ring."""
        return ring_of(self.live).slot_owner(slot)

    def slots(self, member: str) -> frozenset[int]:
        """The slots the ring of the live members gives ``member``."""
        return ring_of(self.live).slots(member)

    def heirs(self, dead: str) -> frozenset[str]:
        """Whom ``dead``'s will leaves its objects to (none without a will): the members it
        names that have a Lease (live, or dead with a will of their own to follow), or, when
        it names none that has, the live members (the ring's target takes them). A Lease
        named in a will is deleted only after that will's own
        (:class:`~crewlet_operator.sharding.sharder.Sharder`), so the heirs of a will written by the
        sharder never change."""
        if dead not in self.wills:
            return frozenset()
        return (self.wills[dead] & self.leases) or self.live

    def path(self, member: str, slot: int) -> list[str]:
        """``member``, then the heirs its objects of ``slot`` pass to through the wills, in
        order: the last one holds them. A will names members live before its member was found
        dead, who never comes back, so the wills form no cycle; the walk stops at one written
        by hand all the same."""
        path = [member]
        while path[-1] in self.wills:
            heir = ring_of(self.heirs(path[-1])).slot_owner(slot)
            if heir is None or heir in path:
                break
            path.append(heir)
        return path

    def holder(self, member: str, slot: int) -> str:
        """Who writes the objects of ``slot`` labelled for ``member``: ``member`` itself, unless
        it left a will, then the heir the will gives the slot (:meth:`heirs`), and so on
        (:meth:`path`). A dead member without a will holds its objects still: nobody writes
        them until the sharder writes its will."""
        return self.path(member, slot)[-1]

    def estates(self, member: str) -> frozenset[str]:
        """The dead members whose objects may fall to ``member`` through the wills: those its
        cache of the primary kind must select besides its own label."""
        return frozenset(dead for dead in self.wills if member in self._reach(dead))

    def _reach(self, dead: str) -> set[str]:
        """Every heir of ``dead``'s will, and of theirs, transitively."""
        found: set[str] = set()
        todo = [dead]
        while todo:
            for heir in self.heirs(todo.pop()) - found:
                found.add(heir)
                todo.append(heir)
        return found

    def unwilled(self) -> frozenset[str]:
        """The members found dead (their Leases listed, not live) that have no will yet."""
        return self.leases - self.live - self.wills.keys()


@dataclass(frozen=True)
class Assign:
    """Set the shard label to ``member`` (and drop any drain label)."""

    member: str


@dataclass(frozen=True)
class Drain:
    """Ask the object's current member to hand it to ``member`` (the drain label, naming it)."""

    member: str


Step = Assign | Drain | None
"""What the sharder does to an object next; None: nothing (it is where it belongs, a drain
waits for its member's acknowledgement, or a dead member's will is not written yet)."""


def next_step(labels: Mapping[str, str], keys: RingLabels, slot: int, view: RingView) -> Step:
    """The sharder's next step for an object with ``labels`` in ``slot``, the ring being
    ``view``.

    - Unassigned, or assigned to a member that has no Lease: assign it to the ring's target for
      the slot straight away.
    - Assigned to a live member other than the target: drain it towards the target, then wait.
      Only that member's acknowledgement moves it: once nothing of its own is in flight, it
      labels the object for the member the drain names and clears the drain, in one write.
    - Draining: wait, even if the target is another member by now, or the member again; a drain
      is never withdrawn nor written over (its write tests the label absent), so the member's
      acknowledgement can never undo a label the sharder wrote after it. The member it named,
      if no longer the target, is drained in turn; if it has no Lease any more, the object is
      assigned afresh (as one a drain of an older version, ``"true"``, named).
    - Assigned to a dead member (it stopped writing before its Lease could be judged expired:
      a member that cannot renew within its deadline stops): label it for the heir its will
      names, who writes it already (:meth:`RingView.holder`); without a will yet, wait (the
      sharder writes the will first). Should the heir not be the target, a drain follows.
    """
    member = labels.get(keys.shard) or None
    target = view.target(slot)
    if target is None:
        return None
    if member is None or member not in view.leases:
        return Assign(target)
    if member in view.live:
        if keys.drain in labels or member == target:
            return None
        return Drain(target)
    heir = view.holder(member, slot)
    return Assign(heir) if heir in view.live else None


def member_name(controller: str, identity: str) -> str:
    """The name of the member Lease of the replica ``identity`` of ``controller``: at most 63
    characters, so that it is also a label value."""
    digest = hashlib.sha256(identity.encode()).hexdigest()[:10]
    return f"{controller[:52]}-{digest}"


def member_names(controller: str, members: int) -> list[str]:
    """The fixed member names of ``controller``'s ring of ``members`` (``Sharding.members``),
    in the order a joining replica tries them: at most 63 characters each."""
    return [f"{controller[:48]}-member-{index}" for index in range(members)]


def label_path(key: str) -> str:
    """The JSON pointer (RFC 6901) of the label ``key``."""
    return "/metadata/labels/" + key.replace("~", "~0").replace("/", "~1")


def label_test(key: str, value: str | None) -> dict[str, str | None]:
    """A JSON patch operation that fails the patch unless label ``key`` is ``value``; None:
    unless it is absent (the API server's JSON patch finds a missing member equal to null)."""
    return {"op": "test", "path": label_path(key), "value": value}
