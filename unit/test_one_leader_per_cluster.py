"""One leader per cluster (``LeaderElectionConfig.exclusive_labels``), without an API server: when
another install's Lease is live, what comes first, what the elector does about it against an
in-memory Lease API that records its writes, and what ``/readyz`` says. On the real API server:
e2e/test_leader.py (the library), e2e/test_one_operator_per_cluster.py (the daemon)."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
from collections.abc import AsyncIterator, Callable
from typing import Any, cast

import aiohttp
import pytest
from fakes import offline_client
from structlog.testing import capture_logs

from crewlet_operator import Client, InformerOptions, Manager, ManagerOptions, Resource, Scope
from crewlet_operator.errors import AlreadyExistsError, ConflictError, ForbiddenError, NotFoundError
from crewlet_operator.kube.client import ObjectList
from crewlet_operator.leader import (
    LeaderElectionConfig,
    LeaderElector,
    RivalLease,
    RivalLeases,
    precedence,
)

LABELS = {"example.com/controller": "widgets"}
OLDER, NEWER = "2026-01-01T00:00:00Z", "2026-01-01T00:00:05Z"
BLOCKED = (
    "another install of this controller leads in the cluster; this one does not lead while it does"
)

Object = dict[str, Any]


def lease(namespace: str, name: str, holder: str, *, created: str = OLDER, **spec: Any) -> Object:
    return {
        "metadata": {
            "namespace": namespace,
            "name": name,
            "creationTimestamp": created,
            "labels": dict(LABELS),
        },
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15, **spec},
    }


# -- when a rival is live, by this process's clock --------------------------------------------


def test_a_rival_seen_for_the_first_time_is_live_until_unchanged_for_its_duration() -> None:
    rivals = RivalLeases("mine", "leader", 15.0)
    other = lease("theirs", "leader", "them", renewTime="t1")
    rivals.observe([other], now=100.0)
    assert [str(r) for r in rivals.live(100.0)] == ["theirs/leader"]
    assert rivals.expires_in(100.0) == 15.0
    rivals.observe([other], now=110.0)  # unchanged: still counted from its first sight
    assert rivals.live(114.9) != []
    assert rivals.live(115.0) == []
    assert rivals.expires_in(115.0) is None


def test_a_renewal_seen_keeps_a_rival_live_and_a_release_ends_it_at_once() -> None:
    rivals = RivalLeases("mine", "leader", 15.0)
    rivals.observe([lease("theirs", "leader", "them", renewTime="t1")], now=100.0)
    rivals.observe([lease("theirs", "leader", "them", renewTime="t2")], now=112.0)
    assert rivals.live(126.0) != [], "renewed at 112 by this clock: live until 127"
    assert rivals.live(127.0) == []
    rivals.observe([lease("theirs", "leader", "", renewTime="t3")], now=113.0)
    assert rivals.live(113.0) == [], "released: no holder"


def test_the_renew_time_is_never_compared_with_the_local_clock() -> None:
    """A rival's renewTime from a skewed node, long past, still counts as a live lease."""
    rivals = RivalLeases("mine", "leader", 15.0)
    rivals.observe([lease("theirs", "leader", "them", renewTime="1999-01-01T00:00:00Z")], 100.0)
    assert rivals.live(100.0) != []


def test_its_own_lease_is_no_rival_and_a_rival_no_longer_listed_is_forgotten() -> None:
    rivals = RivalLeases("mine", "leader", 15.0)
    rivals.observe([lease("mine", "leader", "me"), lease("mine", "other", "them")], 100.0)
    assert [str(r) for r in rivals.live(100.0)] == ["mine/other"]
    rivals.observe([], 101.0)
    assert rivals.live(101.0) == []


def test_live_rivals_come_in_order_of_precedence() -> None:
    rivals = RivalLeases("mine", "leader", 15.0)
    rivals.observe(
        [
            lease("b", "leader", "x", created=NEWER),
            lease("c", "leader", "x", created=OLDER),
            lease("a", "z", "x", created=NEWER),
            lease("a", "leader", "x", created=NEWER),
        ],
        100.0,
    )
    assert [str(r) for r in rivals.live(100.0)] == ["c/leader", "a/leader", "a/z", "b/leader"]


def test_precedence_goes_to_the_older_lease_then_by_namespace_and_name() -> None:
    assert precedence(OLDER, "z", "z") < precedence(NEWER, "a", "a")
    assert precedence(OLDER, "a", "z") < precedence(OLDER, "b", "a")
    assert precedence(OLDER, "a", "a") < precedence(OLDER, "a", "b")
    assert precedence(NEWER, "z", "z") < precedence("", "a", "a"), "not stored yet: last"


@pytest.mark.parametrize(
    ("labels", "match"),
    [({}, "at least one label"), ({"not a key!": "x"}, "not a label key")],
)
def test_exclusive_labels_must_select_something_and_be_labels(
    labels: dict[str, str], match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        LeaderElectionConfig("leader", "mine", exclusive_labels=labels)


# -- the elector against an in-memory Lease API ----------------------------------------------


class FakeLeases:
    """The Lease API as the elector uses it: the API server sets ``creationTimestamp`` (to
    :attr:`created`) and ``resourceVersion`` and refuses a stale one. :attr:`writes` records
    the elector's writes; :meth:`put` writes as another install would, unrecorded."""

    def __init__(self) -> None:
        self.leases: dict[tuple[str, str], Object] = {}
        self.writes: list[tuple[str, str]] = []
        self.created = OLDER
        self.version = 0
        self.before_create: Callable[[], None] | None = None
        self.deny_list = False

    def put(self, obj: Object) -> None:
        meta = obj["metadata"]
        self.version += 1
        meta["resourceVersion"] = str(self.version)
        self.leases[(meta["namespace"], meta["name"])] = copy.deepcopy(obj)

    def holder(self, namespace: str, name: str) -> str:
        return str(self.leases[(namespace, name)]["spec"].get("holderIdentity") or "")

    async def get(self, resource: Resource, name: str, namespace: str | None = None) -> Object:
        found = self.leases.get((namespace or "", name))
        if found is None:
            raise NotFoundError(404)
        return copy.deepcopy(found)

    async def create(self, resource: Resource, obj: Object) -> Object:
        if self.before_create is not None:
            self.before_create()
        meta = obj["metadata"]
        if (meta["namespace"], meta["name"]) in self.leases:
            raise AlreadyExistsError(409)
        self.writes.append(("create", f"{meta['namespace']}/{meta['name']}"))
        self.put({**obj, "metadata": {**meta, "creationTimestamp": self.created}})
        return await self.get(resource, meta["name"], meta["namespace"])

    async def replace(self, resource: Resource, obj: Object) -> Object:
        meta = obj["metadata"]
        stored = self.leases[(meta["namespace"], meta["name"])]
        if meta["resourceVersion"] != stored["metadata"]["resourceVersion"]:
            raise ConflictError(409)
        self.writes.append(("update", f"{meta['namespace']}/{meta['name']}"))
        self.put(copy.deepcopy(obj))
        return await self.get(resource, meta["name"], meta["namespace"])

    async def list(self, resource: Resource, scope: Scope | None = None) -> ObjectList:
        scope = scope or Scope()
        if self.deny_list and scope.namespace is None:
            raise ForbiddenError(403, {"reason": "Forbidden", "message": "leases is forbidden"})
        selector = scope.label_selector or ""
        wanted = dict(term.split("=") for term in selector.split(",") if term)
        items = [
            copy.deepcopy(o)
            for (ns, _), o in self.leases.items()
            if scope.namespace in (None, ns)
            and wanted.items() <= (o["metadata"].get("labels") or {}).items()
        ]
        return ObjectList(items, str(self.version))

    async def watch(self, resource: Resource, *args: Any, **kwargs: Any) -> AsyncIterator[Object]:
        await asyncio.Event().wait()  # nothing changes unless a test says so
        yield {}


@pytest.fixture
def api() -> FakeLeases:
    return FakeLeases()


def elector(api: FakeLeases, *, fast: bool = False) -> LeaderElector:
    """This replica, on ``mine/leader``; ``fast`` renews every 0.1 s (for :meth:`hold`)."""
    config = LeaderElectionConfig("leader", "mine", identity="me", exclusive_labels=LABELS)
    if fast:
        config = dataclasses.replace(config, lease_duration=3, renew_deadline=2, retry_period=0.1)
    return LeaderElector(cast(Client, api), config)


async def test_a_replica_another_install_keeps_out_writes_nothing_and_says_why_once(
    api: FakeLeases,
) -> None:
    api.put(lease("theirs", "leader", "them"))
    mine = elector(api)
    with capture_logs() as logs:
        assert not await mine._campaign()
        assert not await mine._campaign()
    assert api.writes == []
    assert mine.blocked_by == RivalLease("theirs", "leader", "them", OLDER)
    said = [e for e in logs if e["event"] == BLOCKED]
    assert len(said) == 1, logs
    assert (said[0]["log_level"], said[0]["rival_lease"], said[0]["rival_holder"]) == (
        "warning",
        "theirs/leader",
        "them",
    )


async def test_once_the_rival_is_released_it_leads_on_a_lease_with_the_labels(
    api: FakeLeases,
) -> None:
    api.put(lease("theirs", "leader", "them"))
    mine = elector(api)
    assert not await mine._campaign()
    api.put(lease("theirs", "leader", ""))  # released
    assert await mine._campaign()
    assert mine.blocked_by is None
    assert api.writes == [("create", "mine/leader")]
    assert api.leases[("mine", "leader")]["metadata"]["labels"] == LABELS


async def test_a_lease_written_before_the_labels_gains_them_with_the_next_write(
    api: FakeLeases,
) -> None:
    unlabelled = lease("mine", "leader", "")
    unlabelled["metadata"]["labels"] = {"team": "blue"}
    api.put(unlabelled)
    assert await elector(api)._campaign()
    assert api.leases[("mine", "leader")]["metadata"]["labels"] == {"team": "blue", **LABELS}


async def test_a_standby_of_the_same_install_is_not_blocked(api: FakeLeases) -> None:
    api.put(lease("mine", "leader", "my-other-replica"))
    mine = elector(api)
    assert not await mine._campaign()
    assert mine.blocked_by is None
    assert api.writes == []


async def test_of_two_that_acquired_at_once_the_later_lease_gives_its_lease_up(
    api: FakeLeases,
) -> None:
    """The other install's Lease, older, appears between this replica's read and its write."""
    api.before_create = lambda: api.put(lease("theirs", "leader", "them", created=OLDER))
    api.created = NEWER
    mine = elector(api)
    assert not await mine._campaign()
    assert not mine.is_leader
    assert mine.blocked_by is not None and str(mine.blocked_by) == "theirs/leader"
    assert api.holder("mine", "leader") == "", "released at once"
    assert api.writes == [("create", "mine/leader"), ("update", "mine/leader")]
    assert not await mine._campaign()
    assert len(api.writes) == 2, "and then writes nothing while the other leads"


async def test_of_two_that_acquired_at_once_the_earlier_lease_waits_for_the_other_to_give_way(
    api: FakeLeases,
) -> None:
    """The other install may not have read this Lease, and lead: the earlier one keeps its
    lease (so the other sees it and steps down) but does not lead while the other is live."""
    api.before_create = lambda: api.put(lease("theirs", "leader", "them", created=NEWER))
    mine = elector(api)
    assert not await mine._campaign()
    assert mine.blocked_by is not None and str(mine.blocked_by) == "theirs/leader"
    assert api.holder("mine", "leader") == "me", "kept"
    assert not await mine._campaign(), "renewed, still waiting"
    assert api.writes[-1] == ("update", "mine/leader")
    api.put(lease("theirs", "leader", "", created=NEWER))  # it gave way
    assert await mine._campaign()
    assert mine.blocked_by is None


async def test_a_graceful_stop_while_waiting_so_releases_its_lease(api: FakeLeases) -> None:
    api.before_create = lambda: api.put(lease("theirs", "leader", "them", created=NEWER))
    mine = elector(api)
    assert not await mine._campaign()
    await mine.release()
    assert api.holder("mine", "leader") == ""


async def test_a_leader_steps_down_for_a_live_lease_that_comes_first(api: FakeLeases) -> None:
    api.put(lease("theirs", "leader", "", created=OLDER))
    api.created = NEWER
    mine = elector(api, fast=True)
    await mine.acquire()
    assert mine.is_leader
    api.put(lease("theirs", "leader", "them", created=OLDER))
    with capture_logs() as logs:
        await asyncio.wait_for(mine.hold(), 5)
    assert not mine.is_leader
    assert mine.blocked_by is not None and str(mine.blocked_by) == "theirs/leader"
    assert any(e["event"].endswith("stepping down") for e in logs), logs


async def test_a_leader_never_yields_to_a_lease_that_comes_after(api: FakeLeases) -> None:
    api.created = OLDER
    mine = elector(api, fast=True)
    await mine.acquire()
    api.put(lease("theirs", "leader", "them", created=NEWER))
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(mine.hold(), 1)
    assert mine.is_leader


async def test_a_replica_that_may_not_list_every_lease_does_not_take_its_own(
    api: FakeLeases,
) -> None:
    api.deny_list = True
    mine = elector(api)
    with capture_logs() as logs:
        assert not await mine._campaign()
        assert not await mine._campaign()
    assert api.writes == []
    assert mine.rivals_denied
    assert sum(1 for e in logs if "cluster-wide" in e["event"]) == 1, logs
    api.deny_list = False
    assert await mine._campaign()
    assert not mine.rivals_denied


async def test_without_exclusive_labels_other_leases_do_not_count(api: FakeLeases) -> None:
    api.put(lease("theirs", "leader", "them"))
    plain = LeaderElector(cast(Client, api), LeaderElectionConfig("leader", "mine", identity="me"))
    assert await plain._campaign()
    assert "labels" not in api.leases[("mine", "leader")]["metadata"]


# -- what /readyz says ---------------------------------------------------------------------------


async def test_readyz_names_the_lease_that_keeps_the_manager_from_leading() -> None:
    options = ManagerOptions(
        name="exclusive",
        leader_election_namespace="mine",
        exclusive_lease_labels=LABELS,
        health_probe_bind_address="127.0.0.1:0",
        metrics_bind_address="0",
        metrics_secure=False,
        cache_options=InformerOptions(transform=lambda obj: obj),  # no client to trim for
    )
    manager = Manager(client=offline_client(), options=options)
    assert manager.elector is not None
    assert manager.cache.synced, "no informers: nothing to sync"
    await manager.health.start()
    try:
        url = f"http://127.0.0.1:{manager.health.port}/readyz?verbose"

        async def readyz() -> tuple[int, str]:
            async with aiohttp.ClientSession() as session, session.get(url) as response:
                return response.status, await response.text()

        status, text = await readyz()
        assert status == 200, "a standby of the same install stays ready"
        assert "[+]one-leader-per-cluster ok" in text
        manager.elector.blocked_by = RivalLease("theirs", "leader", "them-0", OLDER)
        status, text = await readyz()
        assert status == 500
        assert (
            "[-]one-leader-per-cluster failed: another install of this controller leads in the "
            "cluster, on the Lease theirs/leader; this one does not lead while it does\n"
        ) in text
        assert "them-0" not in text, "the holder is for the log"
    finally:
        await manager.health.stop()


def test_without_exclusive_labels_there_is_no_such_check() -> None:
    options = ManagerOptions(
        name="plain", health_probe_bind_address="0", metrics_bind_address="0", metrics_secure=False
    )
    manager = Manager(client=offline_client(), options=options)
    assert "one-leader-per-cluster" not in manager.health._checks["readyz"]


def test_a_rivals_duration_is_trusted_no_further_than_its_own() -> None:
    """Issue 47: a Lease written with leaseDurationSeconds 2147483647 and never renewed is live
    for this replica's own lease duration from its first sight, not for 68 years."""
    rivals = RivalLeases("mine", "leader", 15.0)
    forged = lease("tenant-b", "crewlet-operator-leader", "them", renewTime="t1")
    forged["spec"]["leaseDurationSeconds"] = 2147483647
    rivals.observe([forged], now=100.0)
    assert rivals.expires_in(100.0) == 15.0
    rivals.observe([forged], now=114.0)
    assert rivals.live(115.0) == []
