"""How a manager is told to shard: :class:`Sharding`, and the default key an object is hashed by."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from crewlet_operator.kube.resources import Resource
from crewlet_operator.objects import KubeObject


def by_namespace(obj: KubeObject) -> str:
    """The default key: the object's namespace (its name for a cluster-scoped kind), so that
    the objects of one namespace (one tenant's) stay on one member."""
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or meta.get("name") or "")


@dataclass(kw_only=True)
class Sharding:
    """Shard the controllers whose primary kind is ``resource`` over every live replica.

    The controllers built with ``manager.controller(...).for_(resource)`` run on every replica,
    each on the objects labelled for it; the other controllers keep leader election (they run
    on the leader, which is also the sharder). See :mod:`crewlet_operator.sharding`.
    """

    resource: Resource
    """The primary kind whose objects are spread over the members."""
    domain: str
    """A DNS domain of the controller's own, for its labels (``shard.<domain>/<ring>``, ...:
    :class:`~crewlet_operator.sharding.ring.RingLabels`), such as ``example.com``."""
    ring: str | None = None
    """The ring's name, in the labels; None (the default): the manager's name."""
    key: Callable[[KubeObject], str] = by_namespace
    """What an object is hashed by: its namespace (:func:`by_namespace`) unless told."""
    members: int | None = None
    """A fixed set of member names, ``<name>-member-0`` to ``<name>-member-<members - 1>``
    (:func:`~crewlet_operator.sharding.ring.member_names`), each held by whichever replica takes
    its Lease: one that finds them all held waits as a standby, and takes the first one
    released. A rolling restart's new replica, started before the old one stops, so takes its
    predecessor's name and objects, and no object moves (set it to the replica count). None
    (the default): each replica joins under a name of its own, from its identity, and every
    restart moves its objects twice."""

    settle: float | None = None
    """Seconds in which no member may have joined before the leader assigns or moves an
    object (a settled ring: :meth:`~crewlet_operator.sharding.sharder.Sharder.settled`), so that
    replicas started together get each object once. None (the default): two retry periods
    (:data:`~crewlet_operator.sharding.sharder.SETTLE_PERIODS`); 0: decide at once."""

    def __post_init__(self) -> None:
        if self.members is not None and self.members < 1:
            raise ValueError(f"members must be at least 1, not {self.members}")
