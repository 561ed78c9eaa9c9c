"""Sharding's decisions without an API server: the hash ring (balanced, deterministic, moving
little when members come and go), the sharder's next step for an object, a model of the whole
handoff run under random schedules (never two members writing one object), and how a manager
with sharding builds its controllers."""

from __future__ import annotations

import asyncio
import copy
import hashlib
import random
import time
from collections import Counter
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass, field
from typing import Any, cast

import pytest
import pytest_asyncio

from crewlet_operator import (
    CONFIG_MAP,
    SECRET,
    Client,
    Manager,
    ManagerOptions,
    Request,
    RestartCheckpoint,
    RestConfig,
    Sharding,
    TransportError,
    metrics,
)
from crewlet_operator.cache import Cache, ClusterView, EventHandler, Informer, InformerOptions
from crewlet_operator.kube.client import ObjectList, Scope
from crewlet_operator.sharding import by_namespace
from crewlet_operator.sharding.gate import Gate, heirs_relabels_skipped
from crewlet_operator.sharding.membership import (
    EXPIRY_MARGIN,
    HOLD_AT_MOST,
    WILL_LISTS,
    Membership,
)
from crewlet_operator.sharding.ring import (
    SLOTS,
    Assign,
    Drain,
    HashRing,
    RingLabels,
    RingView,
    member_name,
    member_names,
    next_step,
    slot_of,
)
from crewlet_operator.sharding.sharder import (
    RELABELS_A_PASS,
    SHARDER_WRITES,
    Sharder,
)
from crewlet_operator.sharding.slots import WIDEN_SLOTS, MemberSlots
from crewlet_operator.testing import StaticRing

KEYS = [f"tenant-{i}" for i in range(3000)]
KEYS_R = RingLabels("example.com", "r")
SHARD = KEYS_R.shard
DRAIN = KEYS_R.drain


def owners(ring: HashRing) -> dict[str, str | None]:
    return {key: ring.owner(key) for key in KEYS}


# -- the ring --------------------------------------------------------------------------------


def test_an_empty_ring_has_no_owner() -> None:
    assert HashRing([]).owner("a") is None


def test_the_ring_is_the_same_in_every_process_and_for_any_order() -> None:
    assert owners(HashRing(["a", "b", "c"])) == owners(HashRing(["c", "a", "b", "a"]))
    # Fixed points (SHA-256, not Python's salted hash): the same answer in every process.
    assert [HashRing(["a", "b", "c"]).owner(k) for k in ("x", "y", "z")] == [
        HashRing(["a", "b", "c"]).owner(k) for k in ("x", "y", "z")
    ]


@pytest.mark.parametrize("members", [2, 3, 5])
def test_keys_spread_evenly(members: int) -> None:
    ring = HashRing([f"m{i}" for i in range(members)])
    counts = Counter(owners(ring).values())
    assert len(counts) == members
    fair = len(KEYS) / members
    assert all(abs(n - fair) < 0.2 * fair for n in counts.values()), counts


def test_a_member_that_joins_takes_keys_for_itself_alone() -> None:
    before = owners(HashRing(["a", "b", "c"]))
    after = owners(HashRing(["a", "b", "c", "d"]))
    moved = {key for key in KEYS if before[key] != after[key]}
    assert {after[key] for key in moved} == {"d"}
    assert 0.15 < len(moved) / len(KEYS) < 0.35  # about a quarter


def test_a_member_that_leaves_gives_away_its_own_keys_alone() -> None:
    before = owners(HashRing(["a", "b", "c"]))
    after = owners(HashRing(["a", "c"]))
    assert {key for key in KEYS if before[key] != after[key]} == {
        key for key in KEYS if before[key] == "b"
    }


@pytest.mark.parametrize("members", [2, 3])
def test_the_slots_are_shared_out_evenly_and_whole(members: int) -> None:
    names = [f"m{i}" for i in range(members)]
    ring = HashRing(names)
    held = {name: ring.slots(name) for name in names}
    assert set().union(*held.values()) == set(range(SLOTS))
    assert sum(len(slots) for slots in held.values()) == SLOTS, "no slot held twice"
    fair = SLOTS / members
    assert all(abs(len(slots) - fair) < 0.2 * fair for slots in held.values()), held
    assert all(ring.slot_owner(slot) == name for name in names for slot in held[name])


def test_a_key_has_one_slot_everywhere() -> None:
    slots = [slot_of(key) for key in KEYS]
    assert slots == [slot_of(key) for key in KEYS]
    assert set(slots) == set(range(SLOTS)), "3,000 keys reach every slot"
    # SHA-256, not Python's salted hash: every process finds the same slot.
    assert slot_of("tenant-0") == int.from_bytes(hashlib.sha256(b"tenant-0").digest()[:8]) % SLOTS


def test_a_member_that_leaves_gives_away_its_own_slots_alone() -> None:
    before, after = HashRing(["a", "b", "c"]), HashRing(["a", "c"])
    assert before.slots("a") <= after.slots("a")
    assert before.slots("c") <= after.slots("c")
    assert after.slots("a") | after.slots("c") == set(range(SLOTS))


def test_a_member_name_is_a_label_value_and_differs_by_identity() -> None:
    long = member_name("x" * 63, "host_1")
    assert len(long) <= 63
    assert member_name("widgets", "host_1") != member_name("widgets", "host_2")
    assert member_name("widgets", "host_1") == member_name("widgets", "host_1")


# -- the sharder's next step -----------------------------------------------------------------

LIVE = frozenset({"a", "b"})
VIEW = RingView(
    live=LIVE,
    leases=LIVE | {"dead", "willed", "orphan"},
    wills={"willed": frozenset({"a"}), "orphan": frozenset({"dead"})},
)


def slot_for(target: str) -> int:
    """A slot the ring of LIVE gives ``target``."""
    return next(slot for slot in range(SLOTS) if VIEW.target(slot) == target)


@pytest.mark.parametrize(
    ("labels", "target", "step"),
    [
        ({}, "a", Assign("a")),  # new
        ({SHARD: "a"}, "a", None),  # in place
        ({SHARD: "a"}, "b", Drain("b")),  # live, elsewhere: its member hands it to the target
        ({SHARD: "a", DRAIN: "b"}, "b", None),  # waiting for the acknowledgement
        ({SHARD: "a", DRAIN: "b"}, "a", None),  # a drain is never withdrawn
        ({SHARD: "b", DRAIN: "b"}, "b", None),  # not one the sharder writes: left alone
        ({SHARD: "true"}, "b", Assign("b")),  # an older version's drain ("true"), acknowledged
        ({DRAIN: "true"}, "b", Assign("b")),  # a leftover drain label
        ({SHARD: "nobody"}, "b", Assign("b")),  # a member without a Lease: straight over
        ({SHARD: "dead"}, "b", None),  # dead: its will comes first
        ({SHARD: "willed"}, "b", Assign("a")),  # to the heir its will names, who writes it
        ({SHARD: "willed", DRAIN: "true"}, "a", Assign("a")),
        ({SHARD: "orphan"}, "a", None),  # its heir died too, with no will yet
    ],
)
def test_the_next_step(labels: dict[str, str], target: str, step: object) -> None:
    assert next_step(labels, KEYS_R, slot_for(target), VIEW) == step


def test_no_step_without_a_live_member() -> None:
    assert next_step({SHARD: "a"}, KEYS_R, 0, RingView(live=frozenset())) is None


def test_labels_of_another_ring_do_not_count() -> None:
    other = RingLabels("example.com", "other").shard
    assert next_step({other: "a"}, KEYS_R, slot_for("b"), VIEW) == Assign("b")


def test_a_will_gives_each_slot_to_one_heir_followed_through_the_heirs_wills() -> None:
    """A dead member's slots go to the ring of its will's members; an heir that died in turn
    passes them on by its own will, and a dead member without a will keeps them (nobody
    writes them yet). Each heir's cache selects the dead members it may inherit from."""
    view = RingView(
        live=frozenset({"c", "d"}),
        leases=frozenset({"a", "b", "c", "d", "e"}),
        wills={"a": frozenset({"b", "c"}), "b": frozenset({"c", "d"}), "e": frozenset({"b"})},
    )
    first = HashRing(["b", "c"])
    then = HashRing(["c", "d"])
    for slot in range(SLOTS):
        heir = first.slot_owner(slot)
        expected = then.slot_owner(slot) if heir == "b" else heir
        assert view.holder("a", slot) == expected
        assert view.holder("e", slot) == then.slot_owner(slot)
        assert view.holder("c", slot) == "c"
    assert view.path("a", slot_for_ring(first, "b")) == [
        "a",
        "b",
        then.slot_owner(slot_for_ring(first, "b")),
    ]
    assert view.estates("c") == {"a", "b", "e"}
    assert view.estates("d") == {"b", "a", "e"}
    assert view.unwilled() == frozenset()
    assert RingView(live=frozenset({"c"}), leases=frozenset({"c", "x"})).unwilled() == {"x"}
    cycle = RingView(
        live=frozenset(),
        leases=frozenset({"p", "q"}),
        wills={"p": frozenset({"q"}), "q": frozenset({"p"})},
    )
    assert cycle.holder("p", 0) == "q", "a cycle written by hand ends the walk"


def slot_for_ring(ring: HashRing, member: str) -> int:
    return next(slot for slot in range(SLOTS) if ring.slot_owner(slot) == member)


def test_a_will_naming_no_member_with_a_lease_leaves_the_objects_to_the_ring() -> None:
    """Issue 47: a will naming members that have no Lease (written by hand, or by a stolen
    token) strands nothing. Heirs without a Lease are absent: the will's other heirs inherit,
    and with none left the ring's target; every member's cache selects the dead member's
    objects, and the sharder relabels them for their holders."""
    view = RingView(
        live=frozenset({"c", "d"}),
        leases=frozenset({"c", "d", "x", "y"}),
        wills={"x": frozenset({"ghost-1", "ghost-2"}), "y": frozenset({"ghost-1", "c"})},
    )
    for slot in range(SLOTS):
        assert view.holder("x", slot) == view.target(slot)
        assert view.holder("y", slot) == "c"
    assert view.heirs("x") == {"c", "d"}
    assert view.heirs("c") == frozenset(), "a member without a will leaves nothing"
    assert view.estates("c") == {"x", "y"}
    assert view.estates("d") == {"x"}
    slot = slot_of("tenant-1")
    assert next_step({SHARD: "x"}, KEYS_R, slot, view) == Assign(view.target(slot) or "")
    assert next_step({SHARD: "y"}, KEYS_R, slot, view) == Assign("c")


def test_a_label_naming_no_member_is_nobodys_and_is_assigned() -> None:
    """Issue 47: a shard label naming no member (written by hand) is held by no member (the
    gate of each reconciles nothing of it) and the sharder assigns the object to the ring's
    target."""
    view = RingView(live=frozenset({"c", "d"}), leases=frozenset({"c", "d"}))
    slot = slot_of("tenant-1")
    assert view.holder("nobody", slot) == "nobody"
    assert view.estates("c") == frozenset() and view.unwilled() == frozenset()
    assert next_step({SHARD: "nobody"}, KEYS_R, slot, view) == Assign(view.target(slot) or "")


def test_the_label_keys() -> None:
    assert (KEYS_R.member, KEYS_R.shard, KEYS_R.drain) == (
        "sharding.example.com/ring",
        "shard.example.com/r",
        "drain.example.com/r",
    )
    assert KEYS_R.slot == "slot.example.com/r"


# -- the protocol, under random schedules ------------------------------------------------------


@dataclass
class World:
    """Objects' labels as the API server holds them, a version each, and the members."""

    labels: dict[str, dict[str, str]]
    version: dict[str, int]
    live: set[str]
    leases: set[str] = field(default_factory=set)
    """Every member that ever joined: a Lease outlives its member."""
    wills: dict[str, frozenset[str]] = field(default_factory=dict)

    def write(self, obj: str, expected: int, change: dict[str, str | None]) -> bool:
        """A conditional label write (a merge patch carrying the resourceVersion)."""
        if self.version[obj] != expected:
            return False
        for key, value in change.items():
            if value is None:
                self.labels[obj].pop(key, None)
            else:
                self.labels[obj][key] = value
        self.version[obj] += 1
        return True

    def view(self) -> RingView:
        """The ring as the sharder judges it: a member it finds dead has stopped (fencing)."""
        return RingView(
            live=frozenset(self.live), leases=frozenset(self.leases), wills=dict(self.wills)
        )


def gate_allows(labels: dict[str, str], member: str, known: RingView, obj: str) -> bool:
    """The gate's rule, on ``member``'s cached labels and the wills as it last listed them."""
    labelled = labels.get(SHARD)
    if labelled == member:
        return DRAIN not in labels
    return labelled is not None and known.holder(labelled, slot_of(obj)) == member


@dataclass
class Member:
    """A member's stale views: its cache of the objects, the ring as it last listed it, and
    the reconciles it has in flight (each began when the gate allowed it, on those views)."""

    cache: dict[str, tuple[dict[str, str], int]] = field(default_factory=dict)
    known: RingView = field(default_factory=lambda: RingView(frozenset()))
    in_flight: set[str] = field(default_factory=set)


@pytest.mark.parametrize("seed", range(10))
def test_no_object_is_ever_written_by_two_live_members(seed: int) -> None:
    """Members join and die at random while a sharder (acting on a stale cache, as from an
    informer) writes wills and labels, and each member starts reconciles the gate allows on its
    own stale cache and view of the wills, finishes them later, and acknowledges drains (never
    with a reconcile of the object in flight: the queue's rule), all in a random order. At
    every moment at most one live member has a reconcile of an object in flight, and at the
    end every object sits with its slot's target."""
    rnd = random.Random(seed)
    objects = [f"ns-{i}" for i in range(40)]
    world = World({o: {} for o in objects}, dict.fromkeys(objects, 0), {"a"}, {"a"})
    members = {"a": Member()}
    sharders_cache: dict[str, tuple[dict[str, str], int]] = {}
    next_member = iter(f"m{i}" for i in range(100))

    def read() -> dict[str, tuple[dict[str, str], int]]:
        return {o: (dict(world.labels[o]), world.version[o]) for o in objects}

    def check() -> None:
        for o in objects:
            writers = {m for m in world.live if o in members[m].in_flight}
            assert len(writers) <= 1, (o, writers)

    def shard(o: str) -> None:
        labels, version = sharders_cache[o]
        step = next_step(labels, KEYS_R, slot_of(o), world.view())
        if isinstance(step, Assign):
            world.write(o, version, {SHARD: step.member, DRAIN: None})
        elif isinstance(step, Drain):
            world.write(o, version, {DRAIN: step.member})

    def acknowledge(name: str, o: str) -> None:
        member = members[name]
        labels, version = member.cache.get(o, ({}, -1))
        if labels.get(SHARD) == name and DRAIN in labels and o not in member.in_flight:
            world.write(o, version, {SHARD: labels[DRAIN], DRAIN: None})

    def bequeath() -> None:
        for dead in world.view().unwilled():
            world.wills[dead] = frozenset(world.live)

    sharders_cache.update(read())
    for _ in range(4000):
        action = rnd.random()
        name = rnd.choice(sorted(world.live))
        member = members[name]
        o = rnd.choice(objects)
        if action < 0.02 and len(world.live) < 5:
            joined = next(next_member)
            world.live.add(joined)
            world.leases.add(joined)
            members[joined] = Member()
        elif action < 0.03 and len(world.live) > 1:
            world.live.discard(name)  # dies: stops writing at once
        elif action < 0.05:
            bequeath()
        elif action < 0.12:
            member.known = world.view()  # the member lists the Leases
        elif action < 0.25:
            member.cache = read()  # its cache catches up
        elif action < 0.3:
            sharders_cache.update(read())
        elif action < 0.5:
            shard(o)
        elif action < 0.7:
            labels, _ = member.cache.get(o, ({}, -1))
            if gate_allows(labels, name, member.known, o):
                member.in_flight.add(o)
        elif action < 0.85:
            member.in_flight.discard(o)
        else:
            acknowledge(name, o)
        check()
    # Settle: no more membership changes; every reconcile ends.
    bequeath()
    for _ in range(20):
        sharders_cache.update(read())
        for o in objects:
            shard(o)
        for name in world.live:
            members[name].in_flight.clear()
            members[name].cache = read()
            for o in objects:
                acknowledge(name, o)
    view = world.view()
    assert {o: world.labels[o] for o in objects} == {
        o: {SHARD: view.target(slot_of(o))} for o in objects
    }


# -- the manager -------------------------------------------------------------------------------


@pytest_asyncio.fixture
async def client() -> AsyncIterator[Client]:
    made = Client(RestConfig(host="https://127.0.0.1:1", token="t"))
    yield made
    await made.close()


def sharded(**overrides: object) -> ManagerOptions:
    settings: dict[str, object] = {
        "health_probe_bind_address": "0",
        "metrics_bind_address": "0",
        "metrics_secure": False,
        "leader_election_namespace": "ops",
        "identity": "host_1",
        "sharding": Sharding(resource=CONFIG_MAP, domain="example.com"),
        **overrides,
    }
    return ManagerOptions(name="widgets", **settings)  # type: ignore[arg-type]


def test_sharding_needs_leader_election() -> None:
    with pytest.raises(ValueError, match="needs leader_election"):
        sharded(leader_election=False)


async def reconcile(request: Request) -> None:
    return None


async def test_a_sharded_controller_caches_its_members_objects_and_children(
    client: Client,
) -> None:
    manager = Manager(client, sharded())
    member = member_name("widgets", "host_1")
    assert manager.member == member
    widget = {"metadata": {"name": "w", "namespace": "tenant-a"}}
    assert manager.shard_labels_for(widget) == {
        "slot.example.com/widgets": str(slot_of("tenant-a"))
    }
    base = InformerOptions(scope=Scope(label_selector="app=web"))
    manager.controller("widget").for_(CONFIG_MAP, options=base).owns(SECRET).complete(reconcile)
    informers = manager.cache.informers
    mine = f"shard.example.com/widgets in ({member})"
    assert informers[CONFIG_MAP].options.scope.label_selector == f"app=web,{mine}"
    # No slot is known before the member has seen the ring: its children's informer holds none.
    assert informers[SECRET].options.scope.label_selector == "slot.example.com/widgets in (none)"
    assert any(
        rule.resources == ("configmaps",) and "patch" in rule.verbs
        for rule in manager.controllers[0].rbac_rules
    )


async def test_other_controllers_are_built_as_without_sharding(client: Client) -> None:
    manager = Manager(client, sharded())
    manager.controller("other").for_(SECRET).complete(reconcile)
    assert manager.cache.informers[SECRET].options.scope.label_selector is None


async def test_a_sharded_controller_keeps_no_restart_checkpoint_and_others_do(
    client: Client,
) -> None:
    manager = Manager(client, sharded())
    sharded_checkpoint = RestartCheckpoint("v1", annotation="example.com/sharded")
    other_checkpoint = RestartCheckpoint("v1", annotation="example.com/other")
    manager.controller("widget").for_(CONFIG_MAP).with_checkpoint(sharded_checkpoint).complete(
        reconcile
    )
    manager.controller("other").for_(SECRET).with_checkpoint(other_checkpoint).complete(reconcile)
    # A leader's checkpoint would speak for its own share alone: the sharded controller writes
    # none into the leader's Lease (and judges none), the other controller keeps its own.
    assert manager._lease_words == [other_checkpoint.annotations]
    assert sharded_checkpoint.resumed() is None


async def test_without_sharding_there_is_no_member(client: Client) -> None:
    manager = Manager(client, sharded(sharding=None))
    assert manager.member is None
    assert manager.shard_labels_for({"metadata": {"namespace": "tenant-a"}}) == {}


# -- the gate and the membership, on stand-ins for the cache and the client ------------------


class Recorder:
    """A client stand-in that records patches and answers lists from ``leases``."""

    def __init__(self, leases: list[dict[str, object]] | None = None) -> None:
        self.patches: list[tuple[str, Any]] = []
        self.deleted: list[tuple[str, object]] = []
        self.field_manager = "r"
        self.leases = leases or []
        self.fail = False
        self.written_version: str | None = None
        """The resourceVersion a patch answers with; None: an object without one."""

    async def patch(
        self,
        resource: object,
        name: str,
        patch: object,
        namespace: str | None = None,
        *,
        patch_type: str = "merge",
    ) -> dict[str, object]:
        self.patches.append((name, patch))
        if self.written_version is None:
            return {}
        return {"metadata": {"name": name, "resourceVersion": self.written_version}}

    async def delete(
        self, resource: object, name: str, namespace: str | None = None, **options: object
    ) -> None:
        self.deleted.append((name, options.get("resource_version")))

    async def list(self, resource: object, scope: object = None) -> ObjectList:
        if self.fail:
            raise TransportError("unreachable")
        return ObjectList(items=list(self.leases), resource_version="1")


class StoreStandIn:
    def __init__(self, objects: dict[str, dict[str, object]], client: Recorder) -> None:
        self.objects = objects
        self.client = client

    def get(self, resource: object, name: str, namespace: str | None = None) -> object:
        return self.objects.get(name)


def widget(name: str, **labels: str) -> dict[str, object]:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": "7", "labels": labels}}


def gate_outcomes() -> Counter[str]:
    """``crewlet_operator_shard_gate_total`` of the ring ``r`` so far, by outcome."""
    return Counter(
        {
            outcome: int(
                metrics.REGISTRY.get_sample_value(
                    "crewlet_operator_shard_gate_total", {"ring": "r", "outcome": outcome}
                )
                or 0
            )
            for outcome in metrics.SHARD_GATE_OUTCOMES
        }
    )


async def test_the_gate_reconciles_only_its_members_objects_and_acknowledges_a_drain() -> None:
    client = Recorder()
    cache = StoreStandIn(
        {
            "mine": widget("mine", **{SHARD: "a"}),
            "theirs": widget("theirs", **{SHARD: "b"}),
            "unassigned": widget("unassigned"),
            "draining": widget("draining", **{SHARD: "a", DRAIN: "b"}),
        },
        client,
    )
    reconciled: list[str] = []

    async def inner(request: Request) -> None:
        reconciled.append(request.name)

    gate = Gate(inner, cast(Cache, cache), CONFIG_MAP, KEYS_R, slots=all_slots())
    before = gate_outcomes()
    for name in ("mine", "theirs", "unassigned", "draining", "gone"):
        await gate.reconcile(Request("ns", name))
    assert reconciled == ["mine"]
    # crewlet_operator_shard_gate_total tells what the gate did with each.
    assert gate_outcomes() - before == Counter(reconciled=1, drained=1, not_ours=3)
    # The acknowledgement labels the object for the member the drain names and clears the
    # drain, while the labels still say this member and that drain.
    shard, drain = "/metadata/labels/shard.example.com~1r", "/metadata/labels/drain.example.com~1r"
    assert client.patches == [
        (
            "draining",
            [
                {"op": "test", "path": shard, "value": "a"},
                {"op": "test", "path": drain, "value": "b"},
                {"op": "replace", "path": shard, "value": "b"},
                {"op": "remove", "path": drain},
            ],
        )
    ]


async def test_the_gate_reconciles_what_a_will_leaves_to_its_member() -> None:
    """An object labelled for a dead member is its heir's, by the will as last listed: the
    heir reconciles it before any label changes; nobody does while no will names it."""
    client = Recorder()
    slot = slot_of("ns")
    heirs = frozenset({"a", "b"})
    heir = str(HashRing(heirs).slot_owner(slot))
    other = ({"a", "b"} - {heir}).pop()
    cache = StoreStandIn(
        {
            "willed": widget("willed", **{SHARD: "dead", DRAIN: "true"}),
            "unwilled": widget("unwilled", **{SHARD: "dying"}),
        },
        client,
    )
    reconciled: list[tuple[str, str]] = []
    for member in ("a", "b"):

        async def inner(request: Request, member: str = member) -> None:
            reconciled.append((member, request.name))

        slots = member_slots(StaticRing("a", "b", wills={"dead": heirs}), member=member)
        slots.covered = frozenset(range(SLOTS))
        gate = Gate(inner, cast(Cache, cache), CONFIG_MAP, KEYS_R, slots=slots)
        for name in ("willed", "unwilled"):
            await gate.reconcile(Request("ns", name))
    assert reconciled == [(heir, "willed")]
    assert other != heir
    assert client.patches == [], "a drain left by the dead member is not acknowledged"
    # Labelled for a member found dead whose will is not written yet: tried again shortly.
    waiting = StaticRing("a", "b")
    waiting.dead = frozenset({"dying"})
    slots = member_slots(waiting, member=heir)
    slots.covered = frozenset(range(SLOTS))
    gate = Gate(inner, cast(Cache, cache), CONFIG_MAP, KEYS_R, slots=slots)
    before = gate_outcomes()
    assert await gate.reconcile(Request("ns", "unwilled")) is None  # asked for at the will
    assert gate_outcomes() - before == Counter(awaiting_will=1)
    # A member whose own Lease carries a will (written by hand: a live member never gets one
    # from the sharder) writes nothing: its heirs do.
    cache.objects["mine"] = widget("mine", **{SHARD: heir, DRAIN: "true"})
    slots = member_slots(StaticRing("a", "b", wills={heir: frozenset({other})}), member=heir)
    slots.covered = frozenset(range(SLOTS))
    gate = Gate(inner, cast(Cache, cache), CONFIG_MAP, KEYS_R, slots=slots)
    await gate.reconcile(Request("ns", "mine"))
    assert reconciled == [(heir, "willed")]
    assert client.patches == []


class ChildInformer:
    """An informer stand-in that records its scopes; a list in a new scope ends when told."""

    def __init__(self) -> None:
        self.scopes: list[str | None] = []
        self.added: list[str | None] = []
        self.listed = asyncio.Event()
        self.listed.set()

    def rescope(self, scope: Scope) -> None:
        self.scopes.append(scope.label_selector)
        self.listed.clear()

    def widen(self, scope: Scope, added: Scope) -> None:
        """A wider scope, of which only ``added`` is listed (recorded in :attr:`added`)."""
        self.rescope(scope)
        self.added.append(added.label_selector)

    async def wait_for_scope(self) -> None:
        await self.listed.wait()


class PrimaryInformer(ChildInformer):
    """An informer stand-in holding the member's objects, telling its handlers of each."""

    def __init__(self) -> None:
        super().__init__()
        self.handlers: list[Any] = []

    def add_handler(self, handler: Any) -> None:
        self.handlers.append(handler)

    def add(self, namespace: str, member: str = "a") -> None:
        for handler in self.handlers:
            handler.on_add(self._object(namespace, member))

    def delete(self, namespace: str, member: str = "a") -> None:
        """The object leaves the member's selection (relabelled for another, or deleted)."""
        for handler in self.handlers:
            handler.on_delete(self._object(namespace, member))

    @staticmethod
    def _object(namespace: str, member: str) -> dict[str, Any]:
        return {"metadata": {"name": "w", "namespace": namespace, "labels": {SHARD: member}}}


async def finish(following: Coroutine[None, None, None], children: ChildInformer) -> None:
    """Run a follow whose informer's lists (one, or a widening's, one a group) each end as
    soon as it has begun."""
    task = asyncio.create_task(following)
    while not task.done():
        await asyncio.sleep(0)
        children.listed.set()
    await task


def member_slots(
    live: StaticRing, settle: float = 10, member: str = "a", ring_settle: float = 0.0
) -> MemberSlots:
    return MemberSlots(
        KEYS_R,
        member,
        live,
        key=by_namespace,
        retry_period=1,
        settle=settle,
        ring_settle=ring_settle,
    )


def all_slots() -> MemberSlots:
    slots = member_slots(StaticRing("a"))
    slots.covered = frozenset(range(SLOTS))
    return slots


def selector(slots: frozenset[int]) -> str:
    return "app=web,slot.example.com/r in (" + ",".join(map(str, sorted(slots))) + ")"


async def test_a_member_caches_the_children_of_its_slots_widening_at_once() -> None:
    """The children's informers select the slots the ring gives the member and those of the
    objects labelled for it; a slot counts as covered only once every informer has listed it."""
    live = StaticRing("a", "b")
    slots = member_slots(live)
    children, primary = ChildInformer(), PrimaryInformer()
    slots.add_children(cast(Informer, children), Scope(label_selector="app=web"))
    slots.add_primary(cast(Informer, primary), Scope(label_selector="app=web"))
    ring = HashRing(["a", "b"]).slots("a")
    following = asyncio.create_task(slots.follow(now=0))
    await asyncio.sleep(0)
    assert children.scopes == [selector(ring)]
    assert slots.covered == frozenset(), "nothing is covered before the list has ended"
    children.listed.set()
    await following
    assert slots.covered == ring
    # An object of b's slot labelled for a (a move towards a): its slot is added at once.
    theirs = next(f"tenant-{i}" for i in range(100) if slot_of(f"tenant-{i}") not in ring)
    obj = {"metadata": {"namespace": theirs}}
    assert not slots.covers(obj)
    primary.add(theirs)
    await finish(slots.follow(now=1), children)
    assert children.scopes[-1] == selector(ring | {slot_of(theirs)})
    assert children.added == [selector(frozenset({slot_of(theirs)}))], (
        "from none, the whole scope is listed; then each widening lists only the slots it adds"
    )
    assert slots.covers(obj)


async def test_a_members_cache_of_its_objects_widens_to_what_the_wills_leave_it() -> None:
    """A will naming the member (or naming a member whose own will does) adds the dead
    member's label to the selector of its primary informer, at once; a will that cannot lead
    to it does not."""
    live = StaticRing("a", "b")
    slots = member_slots(live)
    primary = PrimaryInformer()
    slots.add_primary(cast(Informer, primary), Scope(label_selector="app=web"))
    await slots.follow_wills()
    assert primary.scopes == []
    live.wills = {"x": frozenset({"b"}), "y": frozenset({"x", "b"}), "z": frozenset({"y"})}
    await slots.follow_wills()
    assert primary.scopes == []
    live.wills = {**live.wills, "w": frozenset({"a", "b"})}
    await finish(slots.follow_wills(), primary)
    assert primary.scopes == ["app=web,shard.example.com/r in (a,w)"]
    # A member found dead with no will yet is cached at once: its will may name a.
    live.dead = frozenset({"v"})
    await finish(slots.follow_wills(), primary)
    assert primary.scopes[-1] == "app=web,shard.example.com/r in (a,v,w)"
    assert primary.added == [], "listed whole, as they are now: not at the store's version"


async def test_a_member_caches_the_children_of_what_it_inherits_alone() -> None:
    """A dead member's objects are all in each heir's cache until relabelled; only those
    whose heir this member is widen its children's informers."""
    ring = HashRing(["a", "b"])
    live = StaticRing("a", "b", wills={"dead": frozenset({"a", "b"})})
    slots = member_slots(live)
    children, primary = ChildInformer(), PrimaryInformer()
    slots.add_children(cast(Informer, children), Scope(label_selector="app=web"))
    slots.add_primary(cast(Informer, primary), Scope(label_selector="app=web"))
    mine_by_will = next(f"t-{i}" for i in range(200) if ring.slot_owner(slot_of(f"t-{i}")) == "a")
    theirs_by_will = next(f"t-{i}" for i in range(200) if ring.slot_owner(slot_of(f"t-{i}")) == "b")
    primary.add(mine_by_will, member="dead")
    primary.add(theirs_by_will, member="dead")
    assert slots.wanted(now=1) == ring.slots("a")
    assert slot_of(mine_by_will) in slots.wanted(now=1)
    assert slot_of(theirs_by_will) not in slots.wanted(now=1)
    primary.add(theirs_by_will, member="a")  # labelled for a: moving to it
    assert slot_of(theirs_by_will) in slots.wanted(now=1)


async def test_a_member_narrows_its_slots_once_they_have_settled() -> None:
    live = StaticRing("a")
    slots = member_slots(live, settle=10)
    children = ChildInformer()
    slots.add_children(cast(Informer, children), Scope(label_selector="app=web"))
    await finish(slots.follow(now=0), children)
    assert slots.covered == frozenset(range(SLOTS))
    live.become("a", "b")  # b joins: a's slots shrink, but only once settled
    await slots.follow(now=1)
    await slots.follow(now=10)
    assert len(children.scopes) == 1
    assert slots.covered == frozenset(range(SLOTS))
    await finish(slots.follow(now=11), children)
    assert children.scopes[-1] == selector(HashRing(["a", "b"]).slots("a"))
    assert slots.covered == HashRing(["a", "b"]).slots("a")


async def test_the_gate_waits_for_the_children_of_a_slot_it_does_not_hold() -> None:
    client = Recorder()
    cache = StoreStandIn({"mine": widget("mine", **{SHARD: "a"})}, client)
    reconciled: list[str] = []

    async def inner(request: Request) -> None:
        reconciled.append(request.name)

    slots = member_slots(StaticRing("a"))
    asked: list[Request] = []
    slots.on_ready(asked.append)
    gate = Gate(inner, cast(Cache, cache), CONFIG_MAP, KEYS_R, slots=slots)
    before = gate_outcomes()
    assert await gate.reconcile(Request("ns", "mine")) is None
    assert reconciled == []
    assert gate_outcomes() - before == Counter(awaiting_slot=1)
    assert asked == [], "nothing polls: the request is asked for once its slot is covered"
    await slots.follow(now=0)
    assert asked == [Request("ns", "mine")]
    await gate.reconcile(Request("ns", "mine"))
    assert reconciled == ["mine"]
    await slots.follow(now=1)
    assert asked == [Request("ns", "mine")], "asked for once"


async def a_following_its_slots() -> tuple[
    StaticRing, MemberSlots, ChildInformer, PrimaryInformer, list[Request]
]:
    """Member a of the ring of a and b, its informers of children covering the ring's slots
    (settling in 10 s), and the requests it asks for."""
    live = StaticRing("a", "b")
    slots = member_slots(live, settle=10)
    asked: list[Request] = []
    slots.on_ready(asked.append)
    children, primary = ChildInformer(), PrimaryInformer()
    slots.add_children(cast(Informer, children), Scope(label_selector="app=web"))
    slots.add_primary(cast(Informer, primary), Scope(label_selector="app=web"))
    await finish(slots.follow(now=0), children)
    return live, slots, children, primary, asked


async def test_a_request_put_off_for_a_slot_is_dropped_once_its_object_went_elsewhere() -> None:
    """An object moving towards this member, put off until its slot is cached, that moves away
    again before: its slot is no longer wanted, and it is not asked for, even when the ring
    later gives this member the slot."""
    live, slots, children, primary, asked = await a_following_its_slots()
    ring = HashRing(["a", "b"]).slots("a")
    theirs = next(f"tenant-{i}" for i in range(100) if slot_of(f"tenant-{i}") not in ring)
    primary.add(theirs)  # labelled for a: moving to it
    assert not slots.covers({"metadata": {"namespace": theirs, "name": "w"}})
    primary.delete(theirs)  # relabelled for b again before a cached its slot
    await slots.follow(now=1)  # what a wants is the ring's again: nothing to list
    live.become("a")  # b leaves: every slot is a's, the moved object's included
    await finish(slots.follow(now=13), children)
    assert slot_of(theirs) in slots.covered
    assert asked == [], "put off for a slot no longer wanted: not asked for"


async def test_a_member_caches_no_slot_of_the_ring_before_it_settles() -> None:
    """A replica that starts first finds itself alone in the ring. Until the ring has settled
    (no member joined for the sharder's settle), it lists the slots of the objects labelled
    for it alone, not those of a ring of one (every slot); then the settled ring's. A member's
    death does not unsettle the ring: an heir widens at once."""
    live = StaticRing("a")
    live.last_join = 100.0  # a joined (its own first list)
    slots = member_slots(live, ring_settle=4)
    children, primary = ChildInformer(), PrimaryInformer()
    slots.add_children(cast(Informer, children), Scope(label_selector="app=web"))
    slots.add_primary(cast(Informer, primary), Scope(label_selector="app=web"))
    primary.add("mine")  # labelled for a: a restarted member's own
    await finish(slots.follow(now=100.5), children)
    assert slots.covered == {slot_of("mine")}, "its own object's slot, not all 256"
    live.become("a", "b")
    live.last_join = 101.0  # b joined
    await finish(slots.follow(now=104.5), children)
    assert slots.covered == {slot_of("mine")}, "b joined 3.5 s ago"
    await finish(slots.follow(now=105.0), children)
    assert slots.covered == HashRing(["a", "b"]).slots("a") | {slot_of("mine")}
    live.become("a")  # b died: no join
    await finish(slots.follow(now=105.5), children)
    assert slots.covered == frozenset(range(SLOTS)), "a's, b's by its death, at once"


async def test_a_widening_covers_its_slots_a_group_at_a_time_the_awaited_first() -> None:
    """Slots added to a scope already held are listed in groups, :data:`WIDEN_SLOTS` first and
    then twice the last one's, those with requests put off first: each group is covered, and
    its put-off requests asked for, once its lists end, before the next group is listed."""
    _, slots, children, primary, asked = await a_following_its_slots()
    ring = HashRing(["a", "b"]).slots("a")
    moving: dict[int, str] = {}  # a namespace of each of 3 * WIDEN_SLOTS + 3 slots of b's
    for candidate in (f"tenant-{i}" for i in range(5000)):
        if slot_of(candidate) not in ring and len(moving) < 3 * WIDEN_SLOTS + 3:
            moving.setdefault(slot_of(candidate), candidate)
    for moved in moving.values():
        primary.add(moved)  # labelled for a: moving to it
    awaited = max(moving)  # last in slot order, first by its put-off request
    assert not slots.covers({"metadata": {"namespace": moving[awaited], "name": "w"}})

    async def widened(groups: int) -> None:
        for _ in range(100):
            if len(children.added) == groups:
                return
            await asyncio.sleep(0)
        raise AssertionError(children.added)

    following = asyncio.create_task(slots.follow(now=1))
    await widened(1)
    first = frozenset(sorted(set(moving) - {awaited})[: WIDEN_SLOTS - 1]) | {awaited}
    assert children.added == [selector(first)]
    assert slots.covered == ring, "nothing new is covered before its lists end"
    children.listed.set()
    await widened(2)
    assert slots.covered == ring | first, "the first group, before the second is listed"
    assert asked == [Request(moving[awaited], "w")]
    second = frozenset(sorted(set(moving) - first)[: 2 * WIDEN_SLOTS])
    assert children.added[1] == selector(second), "twice as many, in slot order"
    children.listed.set()
    await widened(3)
    assert slots.covered == ring | first | second
    assert children.added[2] == selector(frozenset(moving) - first - second), "the last 3"
    children.listed.set()
    await following
    assert slots.covered == ring | set(moving)


async def test_a_member_asks_for_what_a_will_leaves_it_once() -> None:
    """The cached objects of a dead member are asked for when a will leaves them to this
    member, each once, those of its heir's slots alone; then any that comes into the cache
    after; and those a second will passes on to it (a chain of wills)."""
    ring = HashRing(["a", "b"])
    live = StaticRing("a", "b")
    live.dead = frozenset({"dead"})
    slots = member_slots(live)
    asked: list[Request] = []
    slots.on_ready(asked.append)
    primary = PrimaryInformer()
    slots.add_primary(cast(Informer, primary), Scope())
    spaces = [f"t-{i}" for i in range(40)]
    for space in spaces:
        primary.add(space, member="dead")
    await finish(slots.follow_wills(), primary)
    assert asked == [], "no will yet: nobody writes them"
    live.dead, live.wills = frozenset(), {"dead": frozenset({"a", "b"})}
    await finish(slots.follow_wills(), primary)
    mine = {s for s in spaces if ring.slot_owner(slot_of(s)) == "a"}
    assert mine and mine != set(spaces)
    assert {r.namespace for r in asked} == mine and len(asked) == len(mine)
    await slots.follow_wills()
    assert len(asked) == len(mine), "asked for once"
    later = next(f"u-{i}" for i in range(200) if slot_of(f"u-{i}") in {slot_of(s) for s in mine})
    primary.add(later, member="dead")
    assert asked[-1] == Request(later, "w"), "one that comes into the cache after: at once"
    # b dies too, leaving everything to a: the dead member's objects of b's slots fall to a.
    live.become("a")
    live.wills = {"dead": frozenset({"a", "b"}), "b": frozenset({"a"})}
    await finish(slots.follow_wills(), primary)
    assert {r.namespace for r in asked} == {*spaces, later}


def test_a_members_predicates_let_through_what_it_writes() -> None:
    """Of the sharded kind: the add of its own object, and any event of one it writes; not the
    add of a dead member's object (asked for at its will), nor another heir's. Of the
    children: no add listed into a slot not covered yet."""
    ring = HashRing(["a", "b"])
    slots = member_slots(StaticRing("a", "b", wills={"dead": frozenset({"a", "b"})}))
    mine = next(f"t-{i}" for i in range(200) if ring.slot_owner(slot_of(f"t-{i}")) == "a")
    theirs = next(f"t-{i}" for i in range(200) if ring.slot_owner(slot_of(f"t-{i}")) == "b")
    primary = slots.primary_predicate()

    def obj(space: str, member: str) -> dict[str, Any]:
        return {"metadata": {"name": "w", "namespace": space, "labels": {SHARD: member}}}

    assert primary.create(obj(theirs, "a"))
    assert not primary.create(obj(mine, "dead")), "asked for at its will, not at its add"
    assert not primary.create(obj(mine, "b"))
    assert primary.update(obj(mine, "dead"), obj(mine, "dead"))
    assert not primary.update(obj(theirs, "dead"), obj(theirs, "dead"))
    assert primary.delete(obj(mine, "dead")) and primary.delete(obj(theirs, "a"))
    assert not primary.delete(obj(theirs, "dead"))
    children = slots.children_predicate()
    slots.covered = frozenset({slot_of(mine)})

    def child(slot: int | None) -> dict[str, Any]:
        labels = {} if slot is None else {"slot.example.com/r": str(slot)}
        return {"metadata": {"name": "c", "namespace": "n", "labels": labels}}

    assert children.create(child(slot_of(mine)))
    assert not children.create(child(slot_of(theirs)))
    assert children.create(child(None)), "not a child of the sharded kind's: not for the gate"
    assert children.update(child(slot_of(theirs)), child(slot_of(theirs)))


def lease(
    name: str, renewed: str, holder: str = "someone", **annotations: str
) -> dict[str, object]:
    return {
        "metadata": {
            "name": name,
            "namespace": "ops",
            "resourceVersion": f"{name}-{renewed}",
            "annotations": annotations,
        },
        "spec": {"holderIdentity": holder, "renewTime": renewed, "leaseDurationSeconds": 15},
    }


def live(membership: Membership) -> frozenset[str]:
    view = membership.view()
    assert view is not None
    return view.live


async def test_membership_judges_at_its_last_successful_list(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [100.0]
    monkeypatch.setattr("crewlet_operator.sharding.membership.time.monotonic", lambda: now[0])
    client = Recorder([lease("a", "t1"), lease("b", "t1"), lease("c", "t1", holder="")])
    membership = Membership(cast(Client, client), "ops", KEYS_R, retry_period=1, lease_duration=15)
    assert membership.view() is None, "nothing is known before the first list"
    assert await membership.observe()
    # First seen counts as renewed; a released Lease (no holder) is not live.
    assert live(membership) == frozenset({"a", "b"})
    now[0] = 110.0
    client.leases = [lease("a", "t2"), lease("b", "t1")]
    assert await membership.observe()
    now[0] = 116.0
    client.fail = True
    assert not await membership.observe()
    # b has not changed for 16 s, past its 15 s; but the last list that succeeded was 10 s in.
    assert live(membership) == frozenset({"a", "b"})
    client.fail = False
    assert await membership.observe()
    assert live(membership) == frozenset({"a"})


async def test_a_released_member_of_fixed_names_stays_live_while_a_standby_may_claim_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Sharding.members: a released member Lease keeps its slots for the vacancy (one retry
    period), so the replica waiting to join takes its name before the sharder wills it."""
    now = [100.0]
    monkeypatch.setattr("crewlet_operator.sharding.membership.time.monotonic", lambda: now[0])
    client = Recorder([lease("a", "t1"), lease("b", "t1")])
    membership = Membership(
        cast(Client, client), "ops", KEYS_R, retry_period=2, lease_duration=15, vacancy=2
    )
    assert await membership.observe()
    assert live(membership) == frozenset({"a", "b"})
    assert membership.vacant == frozenset()
    now[0] = 101.0
    client.leases = [lease("a", "t2"), lease("b", "t2", holder="")]
    assert await membership.observe()
    assert live(membership) == frozenset({"a", "b"}), "released just now: still its slots"
    assert membership.vacant == frozenset({"b"}), "and free to claim"
    now[0] = 103.0
    client.leases = [lease("a", "t3"), lease("b", "t2", holder="")]
    assert await membership.observe()
    assert live(membership) == frozenset({"a"}), "unclaimed a vacancy later: dead"
    view = membership.view()
    assert view is not None and view.unwilled() == frozenset({"b"}), "its will is due"
    client.leases = [lease("a", "t3"), lease("b", "t2", holder="", **{KEYS_R.heirs: "a"})]
    assert await membership.observe()
    assert membership.vacant == frozenset(), "a willed name is its heirs' until deleted"


async def test_without_fixed_names_a_released_member_is_dead_at_once() -> None:
    client = Recorder([lease("a", "t1"), lease("b", "t1", holder="")])
    membership = Membership(cast(Client, client), "ops", KEYS_R, retry_period=2, lease_duration=15)
    assert await membership.observe()
    assert live(membership) == frozenset({"a"})
    assert membership.vacant == frozenset({"b"})


def test_fixed_member_names_are_lease_names_and_label_values() -> None:
    names = member_names("crewlet-operator", 3)
    assert names == [
        "crewlet-operator-member-0",
        "crewlet-operator-member-1",
        "crewlet-operator-member-2",
    ]
    long = member_names("x" * 80, 99999)
    assert max(len(n) for n in long) <= 63
    assert len(set(long)) == len(long)
    with pytest.raises(ValueError, match="at least 1"):
        Sharding(resource=CONFIG_MAP, domain="example.com", members=0)


async def test_membership_lists_again_right_after_a_lease_would_expire(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [100.0]
    monkeypatch.setattr("crewlet_operator.sharding.membership.time.monotonic", lambda: now[0])
    client = Recorder([lease("a", "t1")])
    membership = Membership(cast(Client, client), "ops", KEYS_R, retry_period=2, lease_duration=15)
    assert membership.next_list_in(100.0) == 2, "nothing listed: the period"
    assert await membership.observe()
    assert membership.next_list_in(100.0) == 2
    # a's Lease has not changed for 14 s: it expires in 1 s unless renewed.
    assert membership.next_list_in(114.0) == pytest.approx(1 + EXPIRY_MARGIN)
    now[0] = 115.0 + EXPIRY_MARGIN
    assert await membership.observe()
    assert live(membership) == frozenset(), "listed just past the expiry: dead"
    assert membership.next_list_in(now[0]) == 0.5, "its will awaited: a quarter period"


async def test_membership_lists_quickly_while_a_dead_member_awaits_its_will() -> None:
    client = Recorder([lease("a", "t1"), lease("dead", "t0", holder="")])
    membership = Membership(cast(Client, client), "ops", KEYS_R, retry_period=2, lease_duration=15)
    quick = []
    for _ in range(WILL_LISTS + 1):
        assert await membership.observe()
        quick.append(membership.next_list_in(time.monotonic()))
    assert quick == [0.5] * WILL_LISTS + [2], "a quarter period, then the period again"
    client.leases[1] = lease("dead", "t0", holder="", **{KEYS_R.heirs: "a"})
    assert await membership.observe()
    assert membership.next_list_in(time.monotonic()) == 2


async def test_membership_reads_the_wills_and_versions_of_the_leases() -> None:
    heirs = KEYS_R.heirs
    client = Recorder([lease("a", "t1"), lease("dead", "t0", holder="", **{heirs: "a,b,"})])
    membership = Membership(cast(Client, client), "ops", KEYS_R, retry_period=1, lease_duration=15)
    assert await membership.observe()
    view = membership.view()
    assert view is not None
    assert view.wills == {"dead": frozenset({"a", "b"})}
    assert view.leases == {"a", "dead"}
    assert membership.versions == {"a": "a-t1", "dead": "dead-t0"}


class ViewStandIn:
    """A cluster view stand-in: it tells the sharder of the objects put in it."""

    def __init__(self) -> None:
        self.handlers: list[EventHandler] = []
        self.synced = True

    def declares(self, resource: object) -> bool:
        return True

    def add_handler(self, resource: object, handler: EventHandler) -> None:
        self.handlers.append(handler)

    def put(self, obj: dict[str, Any]) -> None:
        for handler in self.handlers:
            handler.on_add(obj)

    def has_synced(self, resource: object) -> bool:
        return self.synced


def sharder_over(
    client: Recorder,
    membership: Membership,
    objects: int,
    *,
    settle: float = 0.0,
    labels: dict[str, str] | None = None,
) -> Sharder:
    """A sharder whose cache holds ``objects`` Widgets with ``labels``, each in a namespace of
    its own (``ns-<i>``)."""
    view = ViewStandIn()
    sharder = Sharder(
        cast(Client, client),
        CONFIG_MAP,
        cast(ClusterView, view),
        Scope(),
        labels=KEYS_R,
        membership=membership,
        key=by_namespace,
        retry_period=1,
        settle=settle,
    )
    sharder.watch()
    for i in range(objects):
        obj = widget(f"w{i}", **(labels or {}))
        obj["metadata"] = {**obj["metadata"], "namespace": f"ns-{i}"}  # type: ignore[dict-item]
        view.put(obj)
    return sharder


async def test_the_sharder_writes_a_dead_members_will_then_relabels_and_forgets_it() -> None:
    """A dead member without a will gets one, at the version it was judged dead by, naming
    the live members; in the same pass its objects are relabelled for the heirs the will
    gives them. A member with a will whose objects have all moved has its Lease deleted."""
    heirs = KEYS_R.heirs
    client = Recorder(
        [
            lease("a", "t1"),
            lease("b", "t1"),
            lease("dead", "t0", holder=""),
            lease("gone", "t0", holder="", **{heirs: "a"}),
        ]
    )
    membership = Membership(cast(Client, client), "ops", KEYS_R, retry_period=1, lease_duration=15)
    assert await membership.observe()

    async def bequeathed(
        resource: object, name: str, patch: Any, namespace: str | None = None, **_: object
    ) -> dict[str, object]:
        client.patches.append((name, patch))
        if name == "dead":  # what the API server then lists
            client.leases[2] = lease("dead", "t0", holder="", **{heirs: "a,b"})
        return {}

    client.patch = bequeathed  # type: ignore[method-assign]
    sharder = sharder_over(client, membership, 20, labels={SHARD: "dead"})
    assert await sharder.shard_pass() == 1 + 20 + 1
    will = client.patches[0]
    assert will == (
        "dead",
        {"metadata": {"resourceVersion": "dead-t0", "annotations": {heirs: "a,b"}}},
    )
    ring = HashRing(["a", "b"])
    relabelled = {name: patch[1]["value"] for name, patch in client.patches[1:]}
    assert relabelled == {f"w{i}": ring.slot_owner(slot_of(f"ns-{i}")) for i in range(20)}
    assert client.deleted == [("gone", "gone-t0")], "dead's objects still lead to it"


async def test_before_the_view_has_listed_everything_the_sharder_writes_wills_and_labels_only() -> (
    None
):
    """A will needs no object and a label decision reads one object's labels: the sharder
    writes them while the view still lists, so a ring's start does not wait for the list. It
    deletes no dead member's Lease then: an object not listed yet may still lead to it."""
    heirs = KEYS_R.heirs
    client = Recorder(
        [lease("a", "t1"), lease("dead", "t0", holder=""), lease("gone", "t0", holder="")]
    )
    client.leases[2] = lease("gone", "t0", holder="", **{heirs: "a"})
    membership = Membership(cast(Client, client), "ops", KEYS_R, retry_period=1, lease_duration=15)
    assert await membership.observe()
    sharder = sharder_over(client, membership, 3, labels={SHARD: "dead"})
    cast(ViewStandIn, sharder._view).synced = False
    assert await sharder.shard_pass() == 1  # the will; its objects wait for the will's list
    assert [name for name, _ in client.patches] == ["dead"]
    assert client.deleted == [], "no Lease is deleted before every object is listed"
    cast(ViewStandIn, sharder._view).synced = True
    assert await sharder.shard_pass() >= 1
    assert client.deleted == [("gone", "gone-t0")]


async def test_the_sharder_decides_nothing_until_no_member_has_joined_for_the_settle_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A settled start: the members found at the sharder's first list joined then, and one that
    joins later unsettles the ring again. Until it settles the sharder writes no will and no
    label; then the will names every member, and the objects go to their members once, with no
    drain. A member that dies does not unsettle it: its will is written at once."""
    now = [100.0]
    monkeypatch.setattr("crewlet_operator.sharding.membership.time.monotonic", lambda: now[0])
    client = Recorder([lease("a", "t1"), lease("b", "t1"), lease("dead", "t0", holder="")])
    membership = Membership(cast(Client, client), "ops", KEYS_R, retry_period=1, lease_duration=15)
    assert await membership.observe()
    sharder = sharder_over(client, membership, 30, settle=4, labels={SHARD: "dead"})
    now[0] = 102.0
    client.leases.append(lease("c", "t1"))
    assert await membership.observe()
    assert membership.last_join == 102.0
    now[0] = 105.0
    assert await sharder.shard_pass() == 0, "c joined 3 s ago: the ring is still changing"
    assert client.patches == []

    async def bequeathed(
        resource: object, name: str, patch: Any, namespace: str | None = None, **_: object
    ) -> dict[str, object]:
        client.patches.append((name, patch))
        if name == "dead":
            client.leases[2] = lease("dead", "t0", holder="", **{KEYS_R.heirs: "a,b,c"})
        return {}

    client.patch = bequeathed  # type: ignore[method-assign]
    now[0] = 106.0
    assert await membership.observe()
    assert await sharder.shard_pass() == 1 + 30, "settled: the will, then each object once"
    assert client.patches[0][1]["metadata"]["annotations"] == {KEYS_R.heirs: "a,b,c"}
    ring = HashRing(["a", "b", "c"])
    relabelled = {name: patch[1]["value"] for name, patch in client.patches[1:]}
    assert relabelled == {f"w{i}": ring.slot_owner(slot_of(f"ns-{i}")) for i in range(30)}

    client.patches.clear()
    now[0] = 118.0  # c has not renewed for 16 s: dead, and the ring does not wait for it
    client.leases = [lease("a", "t2"), lease("b", "t2"), lease("c", "t1")]
    assert await membership.observe()
    assert live(membership) == frozenset({"a", "b"})
    assert await sharder.shard_pass() >= 1
    assert client.patches[0][0] == "c", "a death is not a join: the will at once"


async def test_a_ring_that_keeps_growing_is_waited_for_a_bounded_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A member joining every 3 s never leaves the ring settled for 4 s: the sharder waits
    :data:`HOLD_AT_MOST` settle periods in a row, then decides anyway."""
    now = [100.0]
    monkeypatch.setattr("crewlet_operator.sharding.membership.time.monotonic", lambda: now[0])
    client = Recorder([lease("m0", "t1")])
    membership = Membership(cast(Client, client), "ops", KEYS_R, retry_period=1, lease_duration=15)
    assert await membership.observe()
    sharder = sharder_over(client, membership, 5, settle=4)
    waited = []
    for joiner in range(1, 10):
        now[0] += 3
        client.leases = [lease(f"m{i}", f"t{joiner}") for i in range(joiner + 1)]  # renewed
        assert await membership.observe()
        if await sharder.shard_pass():
            break
        waited.append(now[0])
    assert waited[-1] - waited[0] < HOLD_AT_MOST * 4 <= now[0] - waited[0]
    assert len(client.patches) == 5, "every object assigned once the wait ran out"


async def test_the_sharder_does_not_decide_again_on_labels_it_wrote_over() -> None:
    """While the view lists, no watch event shows the sharder its own writes: it labels an
    object once, and decides again only once the view shows the object at another version."""
    client = Recorder([lease("a", "t1"), lease("b", "t1")])
    membership = Membership(cast(Client, client), "ops", KEYS_R, retry_period=1, lease_duration=15)
    assert await membership.observe()
    sharder = sharder_over(client, membership, 5)
    view = cast(ViewStandIn, sharder._view)
    view.synced = False
    assert await sharder.shard_pass() == 5
    assert await sharder.shard_pass() == 0, "the view still shows the versions it wrote over"
    moved = widget("w0")
    moved["metadata"] = {**cast(dict[str, object], moved["metadata"]), "resourceVersion": "8"}
    view.put(moved)
    assert await sharder.shard_pass() == 1, "a new version is decided again"
    assert len(client.patches) == 6


async def test_the_sharder_decides_again_once_the_view_reaches_its_write() -> None:
    """A user's change made before the sharder's write, whose event comes in after it, is
    older than the write (resourceVersions compare, KEP-5504): the sharder does not decide on
    its labels again, which its write changed. A version at its write or later is decided."""
    client = Recorder([lease("a", "t1"), lease("b", "t1")])
    client.written_version = "10"
    membership = Membership(cast(Client, client), "ops", KEYS_R, retry_period=1, lease_duration=15)
    assert await membership.observe()
    sharder = sharder_over(client, membership, 1)
    view = cast(ViewStandIn, sharder._view)
    assert await sharder.shard_pass() == 1
    at = {"name": "w0", "namespace": "ns-0", "labels": {}}
    view.put({"metadata": {**at, "resourceVersion": "9"}})
    assert await sharder.shard_pass() == 0, "a change made before the write"
    view.put({"metadata": {**at, "resourceVersion": "11"}})
    assert await sharder.shard_pass() == 1, "a version past the write, its label gone"
    assert len(client.patches) == 2


async def test_the_sharder_deletes_a_lease_a_will_names_only_after_that_wills_own() -> None:
    """A dead member named as an heir in another dead member's will keeps its Lease until that
    will's Lease is gone, so that the will's heirs (those with a Lease) never change while a
    member may still read it."""
    heirs = KEYS_R.heirs
    client = Recorder(
        [
            lease("a", "t1"),
            lease("first", "t0", holder="", **{heirs: "second"}),
            lease("second", "t0", holder="", **{heirs: "a"}),
        ]
    )
    membership = Membership(cast(Client, client), "ops", KEYS_R, retry_period=1, lease_duration=15)
    assert await membership.observe()
    sharder = sharder_over(client, membership, 0)
    assert await sharder.shard_pass() == 1
    assert client.deleted == [("first", "first-t0")]
    client.leases = client.leases[::2]  # what the API server then lists
    assert await membership.observe()
    assert await sharder.shard_pass() == 1
    assert client.deleted == [("first", "first-t0"), ("second", "second-t0")]


class SlowRecorder(Recorder):
    """A Recorder whose patches take a while, counting how many are in flight at once."""

    def __init__(self, leases: list[dict[str, object]]) -> None:
        super().__init__(leases)
        self.field_manager = "r-sharder"
        self.in_flight = 0
        self.most_in_flight = 0

    async def patch(
        self,
        resource: object,
        name: str,
        patch: object,
        namespace: str | None = None,
        *,
        patch_type: str = "merge",
    ) -> dict[str, object]:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        await asyncio.sleep(0.01)
        self.in_flight -= 1
        return await super().patch(resource, name, patch, namespace, patch_type=patch_type)


async def test_the_sharder_writes_its_labels_several_at_a_time() -> None:
    """A dead member's objects all need a new label at once: the sharder sends them
    SHARDER_WRITES at a time, each on the version it was decided on."""
    client = SlowRecorder([lease("a", "t1"), lease("b", "t1")])
    membership = Membership(cast(Client, client), "ops", KEYS_R, retry_period=1, lease_duration=15)
    assert await membership.observe()
    objects = 3 * SHARDER_WRITES
    sharder = sharder_over(client, membership, objects)
    assert await sharder.shard_pass() == objects
    assert client.most_in_flight == SHARDER_WRITES
    assigned = {name: patch["metadata"] for name, patch in client.patches}
    assert len(assigned) == objects
    assert all(meta["resourceVersion"] == "7" for meta in assigned.values())
    assert {meta["labels"][SHARD] for meta in assigned.values()} == {"a", "b"}


async def test_a_pass_relabels_a_dead_members_objects_after_the_rest_and_a_share_at_a_time() -> (
    None
):
    """Relabelling a dead member's objects for their heirs is bookkeeping (the heirs write them
    by the will already): a pass makes :data:`RELABELS_A_PASS` of them at most, after its other
    writes, so a new object's first label does not wait behind thousands, and asks for another
    pass right after for the rest."""
    heirs = KEYS_R.heirs
    client = Recorder([lease("a", "t1"), lease("dead", "t0", holder="", **{heirs: "a"})])
    membership = Membership(cast(Client, client), "ops", KEYS_R, retry_period=1, lease_duration=15)
    assert await membership.observe()
    willed = RELABELS_A_PASS + 10
    sharder = sharder_over(client, membership, willed, labels={SHARD: "dead"})
    new = widget("new")
    new["metadata"] = {**cast(dict[str, object], new["metadata"]), "namespace": "ns-new"}
    cast(ViewStandIn, sharder._view).put(new)
    sharder._pass_due.clear()
    assert await sharder.shard_pass() == 1 + RELABELS_A_PASS
    assert client.patches[0][0] == "new", "the new object's first label comes first"
    assert sharder._pass_due.is_set(), "another pass follows at once"
    sharder._pass_due.clear()
    assert await sharder.shard_pass() == 10
    assert not sharder._pass_due.is_set()
    assert {name for name, _ in client.patches} == {"new"} | {f"w{i}" for i in range(willed)}


def test_the_sharders_writes_test_the_labels_they_were_decided_on() -> None:
    """A relabel or a drain tests the labels its decision read (a JSON patch), not the whole
    version: users changing their objects during a takeover do not make it fail. A first label
    is conditional on the version (nothing else writes an unassigned object's labels)."""
    sharder = Sharder(
        cast(Client, Recorder()),
        CONFIG_MAP,
        cast(ClusterView, ViewStandIn()),
        Scope(),
        labels=KEYS_R,
        membership=StaticRing("a"),
        key=by_namespace,
        retry_period=1,
    )
    shard, drain = "/metadata/labels/shard.example.com~1r", "/metadata/labels/drain.example.com~1r"
    assert sharder._patch({SHARD: "dead", DRAIN: "true"}, "7", Assign("a")) == (
        [
            {"op": "test", "path": shard, "value": "dead"},
            {"op": "replace", "path": shard, "value": "a"},
            {"op": "test", "path": drain, "value": "true"},
            {"op": "remove", "path": drain},
        ],
        "json",
    )
    assert sharder._patch({SHARD: "b"}, "7", Drain("a")) == (
        [
            {"op": "test", "path": shard, "value": "b"},
            {"op": "test", "path": drain, "value": None},
            {"op": "add", "path": drain, "value": "a"},
        ],
        "json",
    )
    assert sharder._patch({}, "7", Assign("a")) == (
        {"metadata": {"resourceVersion": "7", "labels": {SHARD: "a", DRAIN: None}}},
        "merge",
    )


def test_a_static_ring_tells_of_a_join_as_a_list_of_the_leases_would() -> None:
    ring = StaticRing("a", wills={"dead": frozenset({"a"})})
    listed = ring.listed.subscribe()
    assert ring.last_join is None
    assert ring.view().holder("dead", 0) == "a"
    ring.become("a", "b")
    assert listed.is_set()
    joined = ring.last_join
    assert joined is not None
    ring.become("b")  # a leaves: no join
    assert ring.last_join == joined
    assert ring.view().live == frozenset({"b"})


def relabelled(before: dict[str, object], **labels: str) -> dict[str, object]:
    after = copy.deepcopy(before)
    after["metadata"]["labels"] = labels  # type: ignore[index]
    return after


async def test_a_dead_members_object_relabelled_for_its_heir_is_not_reconciled_again() -> None:
    """The heir asked for the object when the will came: the sharder's relabel for it asks
    for no second reconcile. Every other update passes, and the relabel too before the heir
    has asked for the object (it was relabelled while the heir listed its estate)."""
    heir = str(HashRing(["a", "b"]).slot_owner(slot_of("ns")))
    other = "b" if heir == "a" else "a"
    ring = StaticRing("a", "b", wills={"dead": frozenset({"a", "b"})})
    slots = member_slots(ring, member=heir)
    passes = heirs_relabels_skipped(KEYS_R, slots).update
    old = widget("w", **{SHARD: "dead", "app": "web"})
    assert passes(old, relabelled(old, **{SHARD: heir, "app": "web"})), "not asked for yet"
    primary = PrimaryInformer()
    slots.add_primary(cast(Informer, primary), Scope())
    primary.add("ns", member="dead")
    await finish(slots.follow_wills(), primary)

    assert not passes(old, relabelled(old, **{SHARD: heir, "app": "web"}))
    # Not the heir's to skip: another member's relabel, a drain, a live member's object moved,
    # a first assignment, another label changed at once.
    assert passes(old, relabelled(old, **{SHARD: other, "app": "web"}))
    assert passes(old, relabelled(old, **{SHARD: heir, DRAIN: "true", "app": "web"}))
    assert passes(old, relabelled(old, **{SHARD: heir, "app": "api"}))
    assert passes(widget("w", **{SHARD: other}), widget("w", **{SHARD: heir}))
    assert passes(widget("w"), widget("w", **{SHARD: heir}))
    # A change of the spec or the annotations at once.
    changed = relabelled(old, **{SHARD: heir, "app": "web"})
    changed["metadata"]["generation"] = 2  # type: ignore[index]
    assert passes(old, changed)
    annotated = relabelled(old, **{SHARD: heir, "app": "web"})
    annotated["metadata"]["annotations"] = {"note": "x"}  # type: ignore[index]
    assert passes(old, annotated)
    # A dead member with no will yet leaves its objects to nobody: its relabel passes.
    unwilled = heirs_relabels_skipped(KEYS_R, member_slots(StaticRing("a", "b"), member=heir))
    assert unwilled.update(old, relabelled(old, **{SHARD: heir, "app": "web"}))
