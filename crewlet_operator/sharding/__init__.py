"""Sharding: the objects of one primary kind spread over every replica, each writing its share.

Opt in with ``ManagerOptions(sharding=Sharding(resource=WIDGET, domain="example.com"))``. Every
replica is then active. This is the one place the protocol is written down; the modules below
hold its parts, and the manager runs them on its one run path, as it runs everything else.

- **Membership** (:mod:`.membership`). Each replica holds a Lease of its own,
  ``<name>-<hash of its identity>``, or with ``Sharding.members`` the first free one of the
  fixed names ``<name>-member-<n>`` (:meth:`~.member.RingMember.claim`: a replica that finds
  them all held waits, and takes the one a stopping replica releases, its objects with it, so a
  rolling restart moves nothing), labelled ``sharding.<domain>/ring: <ring>``, acquired and
  renewed by a :class:`~crewlet_operator.leader.LeaderElector` (its timings, its fencing: a
  replica that cannot renew within ``renew_deadline`` stops writing at once, before its Lease
  may be judged expired). The Lease's name is the replica's *member* name. Every replica lists
  the ring's Leases each ``retry_period``; a member is live while its Lease has a holder and was
  seen to change within its duration (a fixed name just released: for one more retry period,
  while a waiting replica may take it), judged at the last successful list
  (:class:`~.ring.MemberState`: live, dead, willed, absent).
- **Assignment** (:mod:`.sharder`). The replica holding the ordinary leader Lease is the
  *sharder*: it hashes each primary object's key (its namespace by default, so that a tenant's
  objects stay together) onto the live members (:class:`~.ring.HashRing`) and writes the member
  into the object's *shard label* ``shard.<domain>/<ring>``. It reads every object of the kind
  from the manager's leader's view (:attr:`Manager.leader_view
  <crewlet_operator.manager.Manager.leader_view>`, a :class:`~crewlet_operator.cache.ClusterView`
  that lists once the replica leads), the same view the leader's controllers read the cluster's
  answers from: the other members hold no copy of every object. It decides nothing until the
  ring has *settled*: no member has joined for :data:`~.sharder.SETTLE_PERIODS` retry periods
  (every member it finds at its own start joined then), so that replicas started together get
  each object once, not all of them first and a drain after
  (:meth:`~.sharder.Sharder.settled`); nor does a member cache the slots the ring gives it
  before (:class:`~.membership.Settling`).
- **Handoff.** An object whose member is live but no longer its hash target gets the *drain
  label* ``drain.<domain>/<ring>``, naming the target. Its member, on its next request for it
  (after any reconcile of it in flight: the queue never hands one request to two workers),
  writes nothing else for it and acknowledges by labelling it for the member the drain names
  and clearing the drain, in one write: a move is two writes, and needs no pass of the
  sharder after the drain.
- **Takeover.** A member whose Lease has expired (it stopped writing before: fencing) or was
  released gets a *will* from the sharder, one write on its Lease (the annotation
  ``sharding.<domain>/heirs``: the members live then, conditional on the Lease's
  ``resourceVersion`` at which it was judged dead; one found gone by its Pod that renewed since
  that list is judged again on a new list at once). From the will every member reads the same
  *heir* for each of the dead member's objects (the ring of the will's members' owner of its
  slot: :meth:`~.ring.RingView.holder`) and the heir writes them at once, whatever their number;
  the sharder relabels them for their heirs afterwards, and deletes the dead member's Lease once
  no object's label leads to it. An heir with no Lease at all (a will written by hand, or naming
  a member that never was) is absent: the ring of the others inherits, and with none left the
  ring's target, so that no will strands an object. Every label write is conditional on the
  labels it was decided on (a JSON patch that tests them; an unassigned object's, on its
  ``resourceVersion``), so a decision on a stale cache fails instead of acting, while a change
  to the object's spec, which no decision read, does not make it fail.
- **Caches** (:mod:`.slots`). A member's informer of the primary kind selects its own shard label
  and those of the dead members whose objects may fall to it by the wills, so it holds and
  reconciles its share alone. The children are placed by *slot*: each key falls in one of
  :data:`~.ring.SLOTS` slots, the ring places slots on members, and every child carries its
  primary object's slot in the *slot label* ``slot.<domain>/<ring>``
  (:meth:`Manager.shard_labels_for <crewlet_operator.manager.Manager.shard_labels_for>`). The
  informers of the kinds a sharded controller owns select the slots the member holds: those the
  ring gives it and those of the objects labelled for it. A slot label never changes, so a move
  writes no child: the new member's informers widen to the slot (a list, no write) and find the
  children there; many slots at once (an heir's) are listed in groups, of
  :data:`~.slots.WIDEN_SLOTS` first and twice the last one's after, each group reconciled as
  soon as it is cached.
- **The gate** (:mod:`.gate`, a reconciler wrapper). Before each reconcile a member reads the
  primary object from its cache: one neither labelled for it nor inherited by it (moved, not yet
  assigned, or another heir's) is not reconciled, one draining is acknowledged instead, one
  whose slot its informers of children do not hold yet waits for them. What it writes for an
  object is therefore always written while the object is its own. Nothing polls: the member
  asks for an object once its slot's children are cached, and for a dead member's objects once
  a will leaves them to it (:meth:`~.slots.MemberSlots.on_ready`), not at their adds; a dead
  member's object relabelled for its heir, who already wrote it by the will, is not reconciled
  again (:func:`~.gate.heirs_relabels_skipped`); the gate counts what it does
  (``crewlet_operator_shard_gate_total``).
- **The wiring** (:mod:`.member`): what a manager with sharding adds to what it runs (a Lease,
  loops, what it makes of a sharded controller), and nothing it runs itself.

Invariants: (1) only the sharder chooses a shard label: it sets one on an object with none, or
with a member that has no Lease, or, for a dead member's, the heir its will names, and it names
in a drain the member an object is to go to; (2) only the member changes its own label, only in
answer to a drain, and only to the member the drain names; (3) a will is written once, for a
member judged dead at the version of its Lease it was judged by, and never changes; (4) a member
writes for an object only while the object carries its label and no drain, or carries a dead
member's label whose will leads to it, read before each reconcile. Hence no object is written by
two live members in any window: an object moves from one live member to another only by the
first one's acknowledgement, its last write for the object, which the second one's cache must
show before it writes; and from a dead member only to the heir its will names, who is already
its writer.
"""

from crewlet_operator.sharding.options import Sharding, by_namespace

__all__ = ["Sharding", "by_namespace"]
