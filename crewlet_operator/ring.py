"""The decisions of sharding, without I/O: the hash ring and the sharder's next step for an object.

Vocabulary (see :mod:`crewlet_operator.sharding` for the protocol that runs on them):

- A *ring* is a set of replicas of one controller that share its objects; each *member* holds a
  Lease of its own labelled ``sharding.<domain>/ring: <ring>`` and is named by that Lease.
- An object's member is the value of its *shard label* ``shard.<domain>/<ring>``; a *drain
  label* ``drain.<domain>/<ring>`` asks that member to let the object go (:class:`RingLabels`).
- Keys fall into :data:`SLOTS` *slots* (:func:`slot_of`), and the ring places slots, not keys:
  an object's children carry its slot in the *slot label* ``slot.<domain>/<ring>``, which never
  changes, so a member caches the children of the slots it holds and a move rewrites none.

Invariant the decisions keep: an object moves from one live member to another only through an
empty shard label, which only its member writes (the acknowledgement of a drain). So two members
never both find an object labelled for them, and each writes only what is labelled for it.
"""

from __future__ import annotations

import bisect
import functools
import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

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

    def owner(self, key: str) -> str | None:
        """The member ``key`` belongs to; None on an empty ring."""
        if not self._points:
            return None
        at = bisect.bisect_left(self._points, _point(key)) % len(self._points)
        return self._members[at]

    def slot_owner(self, slot: int) -> str | None:
        """The member ``slot`` belongs to (and with it every key of the slot); None on an
        empty ring."""
        return self.owner(f"slot-{slot}")

    def slots(self, member: str) -> frozenset[int]:
        """The slots ``member`` holds."""
        return frozenset(slot for slot in range(SLOTS) if self.slot_owner(slot) == member)


@dataclass(frozen=True)
class Assign:
    """Set the shard label to ``member`` (and drop any drain label)."""

    member: str


@dataclass(frozen=True)
class Drain:
    """Ask the object's current member to let it go (set the drain label)."""


Step = Assign | Drain | None
"""What the sharder does to an object next; None: nothing (it is where it belongs, or a drain
waits for its member's acknowledgement)."""


def next_step(
    labels: Mapping[str, str], keys: RingLabels, target: str | None, live: frozenset[str]
) -> Step:
    """The sharder's next step for an object with ``labels``, whose hash says ``target`` among
    the ``live`` members (None: no member is live).

    - Unassigned, or assigned to a member no longer live (its Lease expired: it has stopped
      writing, since a member that cannot renew within its deadline stops before its Lease
      expires): assign it to the target straight away.
    - Assigned to a live member other than the target: drain it, then wait. Only that member's
      acknowledgement (it clears both labels once nothing of its own is in flight) leaves it
      unassigned, and only then is it assigned to the target.
    - Draining: wait, even if the target is the member again; a drain is never withdrawn, so the
      member's acknowledgement can never clear a label the sharder wrote after it.
    """
    member = labels.get(keys.shard) or None
    if target is None:
        return None
    if member is None or member not in live:
        return Assign(target)
    if keys.drain in labels or member == target:
        return None
    return Drain()


def member_name(controller: str, identity: str) -> str:
    """The name of the member Lease of the replica ``identity`` of ``controller``: at most 63
    characters, so that it is also a label value."""
    digest = hashlib.sha256(identity.encode()).hexdigest()[:10]
    return f"{controller[:52]}-{digest}"
