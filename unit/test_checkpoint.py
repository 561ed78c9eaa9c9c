"""The restart checkpoint (crewlet_operator.checkpoint): what a leader leaves in its Lease, what
a next process of another version, or a garbled one, makes of it, and how that process judges
what a reconcile reads; and the operator's version of it (crewlet_operator_daemon.checkpoint)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

import pytest
from fakes import item_of

from crewlet_operator import (
    CONFIG_MAP,
    SECRET,
    Cache,
    CheckpointReads,
    Controller,
    InformerOptions,
    KubeObject,
    Pages,
    Request,
    Resource,
    RestartCheckpoint,
    Result,
)
from crewlet_operator.checkpoint import Checkpoint
from crewlet_operator.kube.client import RawObjectList
from crewlet_operator_daemon.checkpoint import code_version
from crewlet_operator_daemon.plan import ClusterFacts

KEY = "example.com/checkpoint"
CHECKPOINT = Checkpoint(
    version="v1",
    kinds={"StatefulSet.apps": ("120", 2**64 - 1), "Company.crewlet.ai": ("118", 2570)},
    named={"Secret": {"platform/keys": "40", "platform/gone": None}},
    unsettled=frozenset({"tenant-a/busy"}),
)


def versioned(version: str | None) -> dict[str, Any]:
    return {"metadata": {"name": "x", "resourceVersion": version}}


def test_a_checkpoint_reads_back_as_written_by_the_same_version() -> None:
    annotations = CHECKPOINT.annotations(KEY)
    assert list(annotations) == [KEY]
    assert Checkpoint.parse({"other": "x", **annotations}, KEY, "v1") == CHECKPOINT


@pytest.mark.parametrize(
    "annotations",
    [
        {},
        {KEY: CHECKPOINT.annotations(KEY)[KEY] + "}"},
        {KEY: '{"version": "v1"}'},
        {KEY: '{"version": "v1", "kinds": [], "named": {}, "unsettled": []}'},
        {KEY: '{"version": "v1", "kinds": {}, "named": {"Secret": []}, "unsettled": []}'},
        {KEY: "[]"},
    ],
    ids=["none", "not-json", "incomplete", "kinds-not-a-map", "named-not-a-map", "not-a-map"],
)
def test_a_missing_or_garbled_checkpoint_is_none(annotations: dict[str, str]) -> None:
    assert Checkpoint.parse(annotations, KEY, "v1") is None


def test_another_versions_checkpoint_is_ignored() -> None:
    assert Checkpoint.parse(CHECKPOINT.annotations(KEY), KEY, "v2") is None


def test_versions_no_newer_than_their_kinds_mark_are_unchanged() -> None:
    kind = "StatefulSet.apps"
    assert CHECKPOINT.unchanged(kind, ["119", "120"])
    assert not CHECKPOINT.unchanged(kind, ["119", "121"])
    assert not CHECKPOINT.unchanged(kind, [None])
    assert not CHECKPOINT.unchanged("Service", ["1"]), "a kind with no mark"
    assert CHECKPOINT.unchanged(kind, [])


def test_a_kinds_digest_matches_only_if_it_holds_the_same_objects() -> None:
    assert CHECKPOINT.digest_matches("StatefulSet.apps", 2**64 - 1)
    assert not CHECKPOINT.digest_matches("StatefulSet.apps", 2570)
    assert not CHECKPOINT.digest_matches("Service", 0), "a kind with no mark"


def test_a_named_object_is_unchanged_only_if_it_exists_no_newer_than_recorded() -> None:
    def unchanged(key: str, found: KubeObject | None) -> bool:
        return CHECKPOINT.named_unchanged("Secret", key, found)

    assert unchanged("platform/keys", versioned("40"))
    assert not unchanged("platform/keys", versioned("41"))
    assert not unchanged("platform/keys", None), "deleted since"
    assert not unchanged("platform/gone", versioned("30")), "created since"
    assert not unchanged("platform/other", versioned("1")), "not watched then"
    assert not CHECKPOINT.named_unchanged("ConfigMap", "platform/keys", versioned("40"))


def test_the_version_is_the_code_and_the_cluster_facts() -> None:
    ingress = ClusterFacts(gateway_api=False, operator_namespace="system")
    gateway = ClusterFacts(gateway_api=True, operator_namespace="system")
    assert code_version(ingress) == code_version(ingress)
    assert code_version(ingress) != code_version(gateway)


# -- a leader writes it, the next process judges it --------------------------------------------

APP_INDEX = "app"
PRIMARY = Request("ns", "app")


def config_map(name: str, version: str, app: str | None = None) -> KubeObject:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "uid": f"u-{name}"}
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {**meta, "resourceVersion": version, "labels": {"app": app} if app else {}},
    }


def secret(name: str, version: str, app: str) -> KubeObject:
    return {**config_map(name, version, app), "kind": "Secret"}


def _app_of(obj: KubeObject) -> list[str]:
    app = (obj["metadata"].get("labels") or {}).get("app")
    return [f"ns/{app}"] if app else []


WORLD: dict[Resource, list[KubeObject]] = {
    CONFIG_MAP: [config_map("app", "5"), config_map("other", "8")],
    SECRET: [secret("app-a", "6", "app"), secret("app-b", "7", "app")],
}
"""ConfigMaps are the primary kind, the Secrets labelled ``app`` their children."""


class Listed:
    """A client that lists ``world`` (each kind at resourceVersion 9) and then watches quietly."""

    field_manager = "me"

    def __init__(self, world: Mapping[Resource, list[KubeObject]]) -> None:
        self.world = world

    async def list_raw_pages(self, resource: Resource, *_: object, **__: object) -> Any:
        yield RawObjectList([item_of(o) for o in self.world[resource]], "9")

    async def watch(self, *_: object, **__: object) -> AsyncIterator[object]:
        await asyncio.Event().wait()
        yield None


async def settled(_: Request) -> Result | None:
    return None


@asynccontextmanager
async def process(
    world: Mapping[Resource, list[KubeObject]], found: Mapping[str, str], name: str
) -> AsyncIterator[tuple[Controller, RestartCheckpoint]]:
    """A controller over ``world``'s synced cache, and its checkpoint, which finds ``found``
    in the Lease; the controller is not started (its first pass is to come)."""
    cache = Cache(Listed(world))  # type: ignore[arg-type]
    for resource in world:
        cache.informer(resource, InformerOptions(lists=Pages(), indexers={APP_INDEX: _app_of}))
    controller = Controller(name, settled, cache)
    checkpoint = RestartCheckpoint("v1", annotation=KEY)
    checkpoint.attach(controller, owned=[SECRET], found=lambda: found)
    await cache.start()
    try:
        await cache.wait_for_sync(5)
        yield controller, checkpoint
    finally:
        await controller.stop(1.0)
        await cache.stop()


def reads(uncovered: str | None = None, name: str = "app") -> CheckpointReads:
    """What a reconcile of ``PRIMARY`` reads: itself and its children."""
    return CheckpointReads(
        objects=[(CONFIG_MAP, f"ns/{name}")],
        uncovered=uncovered,
        indexed=[(SECRET, APP_INDEX, str(PRIMARY))],
    )


async def left_by_a_leader() -> Checkpoint:
    """What a leader over ``WORLD`` leaves in its Lease once its first pass is over."""
    async with process(WORLD, {}, "unit-checkpoint-leader") as (controller, checkpoint):
        assert checkpoint.annotations() == {}, "written during the first pass"
        await controller.start()
        assert controller.first_pass_done
        left = Checkpoint.parse(checkpoint.annotations(), KEY, "v1")
    assert left is not None
    return left


async def test_a_leader_records_each_kinds_mark_and_digest_once_its_first_pass_is_over() -> None:
    left = await left_by_a_leader()
    assert {kind: mark[0] for kind, mark in left.kinds.items()} == {"ConfigMap": "9", "Secret": "9"}
    assert left.kinds["Secret"][1] not in (0, left.kinds["ConfigMap"][1])
    assert left.named == {} and left.unsettled == frozenset()


async def test_a_request_nothing_changed_for_is_unchanged_during_the_first_pass_only() -> None:
    left = await left_by_a_leader()
    async with process(WORLD, left.annotations(KEY), "unit-checkpoint-same") as (c, checkpoint):
        assert checkpoint.resumed() == left
        assert await checkpoint.unchanged(PRIMARY, reads)
        assert not await checkpoint.unchanged(PRIMARY, lambda: reads(uncovered="contested"))
        assert not await checkpoint.unchanged(PRIMARY, lambda: reads(name="absent"))
        c.touch([PRIMARY])
        assert not await checkpoint.unchanged(PRIMARY, reads), "an event came for it"
    async with process(WORLD, left.annotations(KEY), "unit-checkpoint-done") as (c, checkpoint):
        await c.start()
        assert not await checkpoint.unchanged(PRIMARY, reads), "after the first pass"


@pytest.mark.parametrize(
    ("world", "left_as"),
    [
        ({**WORLD, CONFIG_MAP: [config_map("app", "10")]}, {}),
        ({**WORLD, SECRET: [secret("app-a", "6", "app"), secret("app-b", "10", "app")]}, {}),
        (WORLD, {"unsettled": frozenset({str(PRIMARY)})}),
        (WORLD, {"version": "v0"}),
        ({**WORLD, SECRET: [secret("app-a", "6", "app")]}, {}),
    ],
    ids=["primary-newer", "child-newer", "unsettled", "other-version", "child-deleted"],
)
async def test_a_request_something_changed_for_is_reconciled_in_full(
    world: dict[Resource, list[KubeObject]], left_as: dict[str, Any]
) -> None:
    left = replace(await left_by_a_leader(), **left_as)
    async with process(world, left.annotations(KEY), "unit-checkpoint-changed") as (_, checkpoint):
        assert not await checkpoint.unchanged(PRIMARY, reads)


async def test_reads_are_declared_only_when_they_are_to_be_judged() -> None:
    async with process(WORLD, {}, "unit-checkpoint-none") as (_, checkpoint):

        def unexpected() -> CheckpointReads:
            raise AssertionError("declared without a checkpoint to judge them by")

        assert await checkpoint.unchanged(PRIMARY, unexpected) is False
        assert checkpoint.resumed() is None
