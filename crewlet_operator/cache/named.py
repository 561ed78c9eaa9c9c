"""Watching a changing set of individually named objects (for example the Secrets a class
references) without caching every object of the kind.

Each name gets a small informer scoped by ``metadata.name`` in its namespace: its events arrive
within a second, and memory and watch traffic grow with the names in use, not with the cluster.
Give the :class:`NamedObjects` to the manager (``manager.add(named)``), which stops every watch
on the way out.
"""

from __future__ import annotations

import asyncio

from crewlet_operator._tasks import cancel_and_wait
from crewlet_operator.cache.informer import EventHandler, Informer, InformerOptions
from crewlet_operator.errors import CrewletError
from crewlet_operator.kube.client import Client, Scope
from crewlet_operator.kube.resources import Resource
from crewlet_operator.objects import KubeObject, namespaced_key


class NamedObjects:
    """Informers for named objects of one kind, added with :meth:`watch` as they are needed."""

    def __init__(self, client: Client, resource: Resource) -> None:
        self.client = client
        self.resource = resource
        self._informers: dict[tuple[str | None, str], Informer] = {}
        self._tasks: dict[tuple[str | None, str], asyncio.Task[None]] = {}
        self._handlers: list[EventHandler] = []

    @property
    def informers(self) -> dict[tuple[str | None, str], Informer]:
        """The informer of each watched ``(namespace, name)``."""
        return dict(self._informers)

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
                InformerOptions(scope=Scope(namespace, field_selector=f"metadata.name={name}")),
            )
            for handler in self._handlers:
                informer.add_handler(handler)
            self._informers[key] = informer
            self._tasks[key] = asyncio.create_task(
                informer.run(), name=f"watch {namespaced_key(namespace, name)}"
            )
        return informer

    async def read(self, namespace: str | None, name: str, timeout: float) -> KubeObject | None:
        """The object, watching it first if need be, once the API server has answered its
        watch: None when it does not exist. A stored object is returned at once, even while
        its list runs: the handlers told of it read it then, never a refusal from before.

        Raises:
            ForbiddenError, UnauthorizedError: the identity may not read it (at once, not after
                ``timeout``: an informer that is refused says so on its first answer).
            CrewletError: no answer within ``timeout`` seconds; try again later.
        """
        informer = self.watch(namespace, name)
        key = namespaced_key(namespace, name)
        if (stored := informer.store.get(key)) is not None:
            # Until the list ends, last_error may be a refusal its attempt has already outlived.
            return stored
        try:
            await informer.wait_for_answer(timeout)
        except TimeoutError:
            raise CrewletError(
                f"{self.resource.kind} {key}: no answer from the API server in {timeout:g}s"
            ) from None
        if informer.has_synced:
            return informer.store.get(key)
        raise informer.last_error or CrewletError(f"{self.resource.kind} {key}: not listed yet")

    def get(self, namespace: str | None, name: str) -> KubeObject | None:
        """The object, when watched and present."""
        informer = self._informers.get((namespace, name))
        if informer is None:
            return None
        return informer.store.get(namespaced_key(namespace, name))

    def forget(self, keep: set[tuple[str | None, str]]) -> None:
        """Stop watching every name not in ``keep``."""
        for key in [k for k in self._informers if k not in keep]:
            self._informers.pop(key)
            self._tasks.pop(key).cancel()

    async def start(self) -> None:
        """Nothing to start: each name's watch starts when it is first watched (a
        :class:`~crewlet_operator.manager.Runnable` for ``manager.add``)."""

    async def stop(self) -> None:
        """Stop every watch."""
        tasks = list(self._tasks.values())
        self._tasks.clear()
        self._informers.clear()
        await cancel_and_wait(*tasks)
