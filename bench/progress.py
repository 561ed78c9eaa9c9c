"""Watching Companies converge: when each one is Accepted and has every child.

The watches start at each collection's current resourceVersion *before* anything is created, so
every event of the burst arrives and nothing that existed before is replayed. Only names are
kept, never objects, so a burst of thousands costs the bench little memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self

from crewlet_operator import (
    NETWORK_POLICY,
    POD_DISRUPTION_BUDGET,
    SECRET,
    SERVICE,
    SERVICE_ACCOUNT,
    STATEFUL_SET,
    Client,
    Resource,
    Scope,
    TransportError,
    find_condition,
)
from crewlet_operator._tasks import cancel_and_wait
from crewlet_operator.kube import WatchParams
from crewlet_operator.objects import labels, name, namespace, resource_version
from crewlet_operator_daemon import naming
from crewlet_operator_daemon.api.v1alpha1 import COMPANY

CHILDREN: dict[Resource, int] = {
    SERVICE_ACCOUNT: 1,
    SECRET: 3,  # config, env, api-token (reconcilers/crewlet_operator_daemon/naming.py)
    STATEFUL_SET: 2,
    SERVICE: 3,
    POD_DISRUPTION_BUDGET: 2,
    NETWORK_POLICY: 2,
}
"""What the operator writes per Company (no webhook hostname: no route)."""
MANAGED = naming.MANAGED_BY_SELECTOR

Key = tuple[str, str]


@dataclass
class _Company:
    accepted_at: float | None = None
    children: dict[str, set[str]] = field(default_factory=dict)
    converged_at: float | None = None


async def current_version(client: Client, resource: Resource) -> str:
    """The collection's resourceVersion now (a one-item list, read from etcd)."""
    page = await client.request("GET", resource.path(), query={"limit": 1})
    return str(page["metadata"]["resourceVersion"])


class Progress:
    """Tracks ``companies`` from now on; use as ``async with Progress(...) as progress``."""

    def __init__(
        self,
        client: Client,
        companies: Collection[Key],
        *,
        accepted: bool = True,
        on_created: Callable[[dict[str, Any]], object] | None = None,
    ) -> None:
        """``accepted=False`` counts a company converged once every child is seen (the floor,
        which writes no status while timed). ``on_created`` is called with each of the
        companies as its creation's event arrives (the verdict floor's writer)."""
        self._client = client
        self._on_created = on_created
        self._state = {key: _Company(accepted_at=None if accepted else 0.0) for key in companies}
        self._left = len(self._state)
        self._done = asyncio.Event()
        self._failure: BaseException | None = None
        self._tasks: list[asyncio.Task[None]] = []

    async def __aenter__(self) -> Self:
        kinds = [COMPANY, *CHILDREN]
        versions = await asyncio.gather(*(current_version(self._client, r) for r in kinds))
        self._tasks = [
            asyncio.create_task(
                self._watch(r, v, None if r is COMPANY else naming.MANAGED_BY_SELECTOR)
            )
            for r, v in zip(kinds, versions, strict=True)
        ]
        if not self._left:
            self._done.set()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await cancel_and_wait(*self._tasks)

    @property
    def converged(self) -> int:
        """How many of the companies have converged so far."""
        return len(self._state) - self._left

    def accepted_at(self, key: Key) -> float | None:
        return self._state[key].accepted_at

    def has_converged(self, key: Key) -> bool:
        return self._state[key].converged_at is not None

    def last_converged(self) -> float:
        """When the last company converged (monotonic); call after :meth:`wait`."""
        return max(s.converged_at or 0.0 for s in self._state.values())

    async def wait(self, timeout: float) -> None:
        """Until every company has converged; TimeoutError names how many have not."""
        try:
            await asyncio.wait_for(self._done.wait(), timeout)
        except TimeoutError:
            raise TimeoutError(
                f"{self._left} of {len(self._state)} companies not converged after {timeout:.0f}s"
            ) from None
        if self._failure is not None:
            raise self._failure

    async def wait_accepted(self, keys: Collection[Key], timeout: float) -> None:
        """Until each of ``keys`` is Accepted (their children may still be missing)."""
        deadline = time.monotonic() + timeout
        while any(self._state[k].accepted_at is None for k in keys):
            if self._failure is not None:
                raise self._failure
            if time.monotonic() > deadline:
                raise TimeoutError(f"companies not Accepted after {timeout:.0f}s")
            await asyncio.sleep(0.05)

    async def _watch(self, resource: Resource, version: str, selector: str | None) -> None:
        try:
            while True:
                with contextlib.suppress(TransportError):
                    watching = WatchParams(Scope(label_selector=selector), resource_version=version)
                    async for event in self._client.watch(resource, watching):
                        version = resource_version(event.object) or version
                        if event.type in ("ADDED", "MODIFIED"):
                            self._observe(resource, event.object)
                        if event.type == "ADDED" and resource is COMPANY and self._on_created:
                            key = (namespace(event.object) or "", name(event.object))
                            if key in self._state:
                                self._on_created(event.object)
                await asyncio.sleep(0.1)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a 410 or a bug: fail the wait rather than hang it
            self._failure = exc
            self._done.set()

    def _observe(self, resource: Resource, obj: dict[str, Any]) -> None:
        now = time.monotonic()
        if resource is COMPANY:
            state = self._state.get((namespace(obj) or "", name(obj)))
            if state is None or state.accepted_at is not None:
                return
            accepted = find_condition((obj.get("status") or {}).get("conditions"), "Accepted")
            if accepted is None or accepted.get("status") != "True":
                return
            state.accepted_at = now
        else:
            state = self._state.get(
                (namespace(obj) or "", labels(obj).get(naming.COMPANY_LABEL, ""))
            )
            if state is None:
                return
            state.children.setdefault(resource.kind, set()).add(name(obj))
        if state.converged_at is None and state.accepted_at is not None and self._complete(state):
            state.converged_at = now
            self._left -= 1
            if not self._left:
                self._done.set()

    @staticmethod
    def _complete(state: _Company) -> bool:
        return all(len(state.children.get(r.kind, ())) >= n for r, n in CHILDREN.items())
