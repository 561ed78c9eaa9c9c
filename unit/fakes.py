"""Test doubles shared by the unit tests."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Hashable
from typing import cast

import orjson

from crewlet_operator.kube.client import Client, ListParams, RawObjectList
from crewlet_operator.objects import KubeObject


class FakeClock:
    """A clock (monotonic or epoch seconds) that only moves when told to."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class RecordingLimiter:
    """A rate limiter with a fixed delay that records what it was asked.

    ``num_requeues`` answers ``requeues`` when given, else how often ``when`` was called.
    """

    def __init__(self, delay: float, requeues: int | None = None) -> None:
        self.delay = delay
        self.requeues = requeues
        self.whens: list[Hashable] = []
        self.forgotten: list[Hashable] = []

    def when(self, item: Hashable) -> float:
        self.whens.append(item)
        return self.delay

    def forget(self, item: Hashable) -> None:
        self.forgotten.append(item)

    def num_requeues(self, item: Hashable) -> int:
        return len(self.whens) if self.requeues is None else self.requeues


class OfflineClient:
    """A client nothing calls: a manager built on it (which takes a view of it under its own
    field manager) reads no server until it runs."""

    def __init__(self, field_manager: str | None = None) -> None:
        self.field_manager = field_manager

    def with_field_manager(self, field_manager: str) -> OfflineClient:
        return OfflineClient(field_manager)

    def with_own_connections(self, **_: object) -> OfflineClient:
        return OfflineClient(self.field_manager)


def offline_client() -> Client:
    """An :class:`OfflineClient`, typed as the client a manager takes."""
    return cast(Client, OfflineClient())


def item_of(obj: KubeObject) -> bytes:
    """``obj`` as an item of a list's page: the page names its kind, the item does not."""
    return orjson.dumps({k: v for k, v in obj.items() if k not in ("kind", "apiVersion")})


def partial_item(obj: KubeObject) -> bytes:
    """``obj`` as an item of a ``PartialObjectMetadataList``: its metadata alone."""
    partial = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1"}
    return orjson.dumps({**partial, "metadata": obj["metadata"]})


class MetadataThenWhole:
    """A client whose metadata list sends ``first``, and whose list of whole objects, once
    ``release`` is set, sends ``then`` (what changed in between); watches stay silent."""

    field_manager = "me"

    def __init__(self, first: list[KubeObject], then: list[KubeObject]) -> None:
        self.first, self.then = first, then
        self.release = asyncio.Event()
        self.lists: list[bool] = []

    async def list_raw_pages(self, _: object, params: ListParams) -> AsyncIterator[RawObjectList]:
        self.lists.append(params.metadata_only)
        if params.metadata_only:
            yield RawObjectList([partial_item(o) for o in self.first], "9")
        else:
            await self.release.wait()
            yield RawObjectList([item_of(o) for o in self.then], "12")

    async def watch(self, *_: object, **__: object) -> AsyncIterator[object]:
        await asyncio.Event().wait()
        yield None
