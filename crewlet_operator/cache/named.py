"""Watching a changing set of individually named objects (for example the Secrets a class
references) without caching every object of the kind.

Each name gets a small informer scoped by ``metadata.name`` in its namespace: its events arrive
within a second, and memory and watch traffic grow with the names in use, not with the cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from crewlet_operator.cache.informer import EventHandler, Informer, InformerOptions
from crewlet_operator.kube.client import Client
from crewlet_operator.kube.resources import Resource

Object = dict[str, Any]


class NamedObjects:
    """Informers for named objects of one kind, added with :meth:`watch` as they are needed."""

    def __init__(self, client: Client, resource: Resource) -> None:
        self.client = client
        self.resource = resource
        self._informers: dict[tuple[str | None, str], Informer] = {}
        self._tasks: dict[tuple[str | None, str], asyncio.Task[None]] = {}
        self._handlers: list[EventHandler] = []

    def add_handler(self, handler: EventHandler) -> None:
        """Tell ``handler`` about every event of every watched object."""
        self._handlers.append(handler)
        for informer in self._informers.values():
            informer.add_handler(handler)

    def watch(self, namespace: str | None, name: str) -> Informer:
        """Start watching ``namespace/name`` (idempotent); returns its informer."""
        key = (namespace, name)
        informer = self._informers.get(key)
        if informer is None:
            informer = Informer(
                self.client,
                self.resource,
                InformerOptions(
                    namespace=namespace,
                    field_selector=f"metadata.name={name}",
                ),
            )
            for handler in self._handlers:
                informer.add_handler(handler)
            self._informers[key] = informer
            self._tasks[key] = asyncio.create_task(informer.run(), name=f"watch {namespace}/{name}")
        return informer

    def synced(self, namespace: str | None, name: str) -> bool:
        """Whether ``namespace/name`` is watched and its first list is in."""
        informer = self._informers.get((namespace, name))
        return informer is not None and informer.has_synced

    def get(self, namespace: str | None, name: str) -> Object | None:
        """The object, when watched and present."""
        informer = self._informers.get((namespace, name))
        if informer is None:
            return None
        return informer.store.get(f"{namespace}/{name}" if namespace else name)

    def forget(self, keep: set[tuple[str | None, str]]) -> None:
        """Stop watching every name not in ``keep``."""
        for key in [k for k in self._informers if k not in keep]:
            self._informers.pop(key)
            self._tasks.pop(key).cancel()

    async def stop(self) -> None:
        """Stop every watch."""
        tasks = list(self._tasks.values())
        self._tasks.clear()
        self._informers.clear()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
