"""Sharding's decisions without an API server: the hash ring (balanced, deterministic, moving
little when members come and go), the sharder's next step for an object, a model of the whole
handoff run under random schedules (never two members writing one object), and how a manager
with sharding builds its controllers."""

from __future__ import annotations

import asyncio
import hashlib
import random
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
    Result,
    Sharding,
    TransportError,
)
from crewlet_operator.cache import Cache, Informer, InformerOptions
from crewlet_operator.kube.client import ObjectList, Scope
from crewlet_operator.ring import (
    SLOTS,
    Assign,
    Drain,
    HashRing,
    RingLabels,
    member_name,
    next_step,
    slot_of,
)
from crewlet_operator.sharding import (
    SHARDER_WRITES,
    SLOT_WAIT,
    Gate,
    Membership,
    MemberSlots,
    Sharder,
    by_namespace,
)

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


@pytest.mark.parametrize(
    ("labels", "target", "step"),
    [
        ({}, "a", Assign("a")),  # new
        ({SHARD: "a"}, "a", None),  # in place
        ({SHARD: "a"}, "b", Drain()),  # live, elsewhere: its member must let go first
        ({SHARD: "a", DRAIN: "true"}, "b", None),  # waiting for the acknowledgement
        ({SHARD: "a", DRAIN: "true"}, "a", None),  # a drain is never withdrawn
        ({DRAIN: "true"}, "b", Assign("b")),  # acknowledged (or a leftover drain label)
        ({SHARD: "dead"}, "b", Assign("b")),  # its member stopped: straight over
        ({SHARD: "dead", DRAIN: "true"}, "a", Assign("a")),
        ({SHARD: "a"}, None, None),  # no live member: nothing to do
    ],
)
def test_the_next_step(labels: dict[str, str], target: str | None, step: object) -> None:
    assert next_step(labels, KEYS_R, target, LIVE) == step


def test_labels_of_another_ring_do_not_count() -> None:
    other = RingLabels("example.com", "other").shard
    assert next_step({other: "a"}, KEYS_R, "b", LIVE) == Assign("b")


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
    writing: dict[str, set[str]] = field(default_factory=dict)
    """Per object, the members that may write it now by the gate's rule."""

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


def gate_allows(labels: dict[str, str], member: str) -> bool:
    return labels.get(SHARD) == member and DRAIN not in labels


@pytest.mark.parametrize("seed", range(10))
def test_no_object_is_ever_writable_by_two_live_members(seed: int) -> None:
    """Members join and die at random while a sharder (acting on stale snapshots, as from an
    informer) and the members (acknowledging drains from their own stale snapshots) step in a
    random order. At every moment at most one live member finds an object writable, and at
    the end every object sits with its hash target."""
    rnd = random.Random(seed)
    objects = [f"ns-{i}" for i in range(40)]
    world = World({o: {} for o in objects}, dict.fromkeys(objects, 0), {"a"})
    snapshot: dict[str, tuple[dict[str, str], int]] = {}
    next_member = iter(f"m{i}" for i in range(100))

    def refresh() -> None:
        for o in objects:
            snapshot[o] = (dict(world.labels[o]), world.version[o])

    def check() -> None:
        for o in objects:
            writers = {m for m in world.live if gate_allows(world.labels[o], m)}
            assert len(writers) <= 1, (o, writers)

    rings: dict[frozenset[str], HashRing] = {}

    def ring_of(live: set[str]) -> HashRing:
        return rings.setdefault(frozenset(live), HashRing(live))

    refresh()
    for _ in range(2000):
        action = rnd.random()
        if action < 0.02 and len(world.live) < 5:
            world.live.add(next(next_member))
        elif action < 0.03 and len(world.live) > 1:
            world.live.discard(rnd.choice(sorted(world.live)))  # dies: stops writing at once
        elif action < 0.3:
            refresh()  # the caches catch up
        elif action < 0.65:
            ring = ring_of(world.live)
            o = rnd.choice(objects)
            labels, version = snapshot[o]
            step = next_step(labels, KEYS_R, ring.owner(o), frozenset(world.live))
            if isinstance(step, Assign):
                world.write(o, version, {SHARD: step.member, DRAIN: None})
            elif isinstance(step, Drain):
                world.write(o, version, {DRAIN: "true"})
        else:
            o = rnd.choice(objects)
            labels, version = snapshot[o]
            member = labels.get(SHARD)
            if member in world.live and DRAIN in labels:
                world.write(o, version, {SHARD: None, DRAIN: None})
        check()
    # Settle: no more membership changes.
    for _ in range(20):
        refresh()
        ring = ring_of(world.live)
        for o in objects:
            labels, version = snapshot[o]
            step = next_step(labels, KEYS_R, ring.owner(o), frozenset(world.live))
            if isinstance(step, Assign):
                world.write(o, version, {SHARD: step.member, DRAIN: None})
            elif isinstance(step, Drain):
                world.write(o, version, {DRAIN: "true"})
        refresh()
        for o in objects:
            labels, version = snapshot[o]
            if labels.get(SHARD) in world.live and DRAIN in labels:
                world.write(o, version, {SHARD: None, DRAIN: None})
        check()
    ring = HashRing(world.live)
    assert {o: world.labels[o] for o in objects} == {o: {SHARD: ring.owner(o)} for o in objects}


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
    mine = f"shard.example.com/widgets={member}"
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
        self.field_manager = "r"
        self.leases = leases or []
        self.fail = False

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
        return {}

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


async def test_the_gate_reconciles_only_its_members_objects_and_acknowledges_a_drain() -> None:
    client = Recorder()
    cache = StoreStandIn(
        {
            "mine": widget("mine", **{SHARD: "a"}),
            "theirs": widget("theirs", **{SHARD: "b"}),
            "unassigned": widget("unassigned"),
            "draining": widget("draining", **{SHARD: "a", DRAIN: "true"}),
        },
        client,
    )
    reconciled: list[str] = []

    async def inner(request: Request) -> None:
        reconciled.append(request.name)

    gate = Gate(inner, cast(Cache, cache), CONFIG_MAP, KEYS_R, member="a", slots=all_slots())
    for name in ("mine", "theirs", "unassigned", "draining", "gone"):
        await gate.reconcile(Request("ns", name))
    assert reconciled == ["mine"]
    # The acknowledgement clears both labels while they still say this member and the drain.
    assert client.patches == [
        (
            "draining",
            [
                {"op": "test", "path": "/metadata/labels/shard.example.com~1r", "value": "a"},
                {"op": "test", "path": "/metadata/labels/drain.example.com~1r", "value": "true"},
                {"op": "remove", "path": "/metadata/labels/shard.example.com~1r"},
                {"op": "remove", "path": "/metadata/labels/drain.example.com~1r"},
            ],
        )
    ]


class Live:
    """A Membership stand-in: the live members, as last listed."""

    def __init__(self, *members: str) -> None:
        self.members: frozenset[str] | None = frozenset(members)
        self.changed = asyncio.Event()

    def live(self) -> frozenset[str] | None:
        return self.members


class ChildInformer:
    """An informer stand-in that records its scopes; a list in a new scope ends when told."""

    def __init__(self) -> None:
        self.scopes: list[str | None] = []
        self.listed = asyncio.Event()
        self.listed.set()

    def rescope(self, scope: Scope) -> None:
        self.scopes.append(scope.label_selector)
        self.listed.clear()

    async def wait_for_scope(self) -> None:
        await self.listed.wait()


class PrimaryInformer:
    """An informer stand-in holding the member's objects."""

    def __init__(self, *namespaces: str) -> None:
        self.store = self
        self.namespaces = list(namespaces)

    def list(self) -> list[dict[str, object]]:
        return [{"metadata": {"name": "w", "namespace": ns}} for ns in self.namespaces]


async def finish(following: Coroutine[None, None, None], children: ChildInformer) -> None:
    """Run a follow whose informer's list ends as soon as it has begun."""
    task = asyncio.create_task(following)
    await asyncio.sleep(0)
    children.listed.set()
    await task


def member_slots(live: Live, settle: float = 10) -> MemberSlots:
    return MemberSlots(
        KEYS_R, "a", cast(Membership, live), key=by_namespace, retry_period=1, settle=settle
    )


def all_slots() -> MemberSlots:
    slots = member_slots(Live("a"))
    slots.covered = frozenset(range(SLOTS))
    return slots


def selector(slots: frozenset[int]) -> str:
    return "app=web,slot.example.com/r in (" + ",".join(map(str, sorted(slots))) + ")"


async def test_a_member_caches_the_children_of_its_slots_widening_at_once() -> None:
    """The children's informers select the slots the ring gives the member and those of the
    objects labelled for it; a slot counts as covered only once every informer has listed it."""
    live = Live("a", "b")
    slots = member_slots(live)
    children, primary = ChildInformer(), PrimaryInformer()
    slots.add_children(cast(Informer, children), Scope(label_selector="app=web"))
    slots.add_primary(cast(Informer, primary))
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
    primary.namespaces.append(theirs)
    await finish(slots.follow(now=1), children)
    assert children.scopes[-1] == selector(ring | {slot_of(theirs)})
    assert slots.covers(obj)


async def test_a_member_narrows_its_slots_once_they_have_settled() -> None:
    live = Live("a")
    slots = member_slots(live, settle=10)
    children = ChildInformer()
    slots.add_children(cast(Informer, children), Scope(label_selector="app=web"))
    await finish(slots.follow(now=0), children)
    assert slots.covered == frozenset(range(SLOTS))
    live.members = frozenset({"a", "b"})  # b joins: a's slots shrink, but only once settled
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

    slots = member_slots(Live("a"))
    gate = Gate(inner, cast(Cache, cache), CONFIG_MAP, KEYS_R, member="a", slots=slots)
    assert await gate.reconcile(Request("ns", "mine")) == Result(requeue_after=SLOT_WAIT)
    assert reconciled == []
    await slots.follow(now=0)
    await gate.reconcile(Request("ns", "mine"))
    assert reconciled == ["mine"]


def lease(name: str, renewed: str, holder: str = "someone") -> dict[str, object]:
    return {
        "metadata": {"name": name, "namespace": "ops"},
        "spec": {"holderIdentity": holder, "renewTime": renewed, "leaseDurationSeconds": 15},
    }


async def test_membership_judges_at_its_last_successful_list(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [100.0]
    monkeypatch.setattr("crewlet_operator.sharding.time.monotonic", lambda: now[0])
    client = Recorder([lease("a", "t1"), lease("b", "t1"), lease("c", "t1", holder="")])
    membership = Membership(cast(Client, client), "ops", KEYS_R, retry_period=1)
    assert membership.live() is None, "nothing is known before the first list"
    assert await membership.observe()
    # First seen counts as renewed; a released Lease (no holder) is not live.
    assert membership.live() == frozenset({"a", "b"})
    now[0] = 110.0
    client.leases = [lease("a", "t2"), lease("b", "t1")]
    assert await membership.observe()
    now[0] = 116.0
    client.fail = True
    assert not await membership.observe()
    # b has not changed for 16 s, past its 15 s; but the last list that succeeded was 10 s in.
    assert membership.live() == frozenset({"a", "b"})
    client.fail = False
    assert await membership.observe()
    assert membership.live() == frozenset({"a"})


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
    membership = Membership(cast(Client, client), "ops", KEYS_R, retry_period=1)
    assert await membership.observe()
    sharder = Sharder(
        cast(Client, client),
        CONFIG_MAP,
        Scope(),
        labels=KEYS_R,
        membership=membership,
        key=by_namespace,
        retry_period=1,
    )
    objects = 3 * SHARDER_WRITES
    for i in range(objects):
        obj = widget(f"w{i}")
        obj["metadata"] = {**obj["metadata"], "namespace": f"ns-{i}"}  # type: ignore[dict-item]
        sharder._informer.store.put(obj)
    assert await sharder.shard_pass() == objects
    assert client.most_in_flight == SHARDER_WRITES
    assigned = {name: patch["metadata"] for name, patch in client.patches}
    assert len(assigned) == objects
    assert all(meta["resourceVersion"] == "7" for meta in assigned.values())
    assert {meta["labels"][SHARD] for meta in assigned.values()} == {"a", "b"}


def test_the_sharders_writes_test_the_labels_they_were_decided_on() -> None:
    """A relabel or a drain tests the labels its decision read (a JSON patch), not the whole
    version: users changing their objects during a takeover do not make it fail. A first label
    is conditional on the version (nothing else writes an unassigned object's labels)."""
    sharder = Sharder(
        cast(Client, Recorder()),
        CONFIG_MAP,
        Scope(),
        labels=KEYS_R,
        membership=cast(Membership, Live("a")),
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
    assert sharder._patch({SHARD: "b"}, "7", Drain()) == (
        [
            {"op": "test", "path": shard, "value": "b"},
            {"op": "add", "path": drain, "value": "true"},
        ],
        "json",
    )
    assert sharder._patch({}, "7", Assign("a")) == (
        {"metadata": {"resourceVersion": "7", "labels": {SHARD: "a", DRAIN: None}}},
        "merge",
    )
