"""The cache: one informer per kind, and cached reads that never start an informer by surprise."""

from __future__ import annotations

import asyncio
import builtins
import time
from dataclasses import replace
from typing import Any

from crewlet_operator import metrics
from crewlet_operator._tasks import cancel_and_wait
from crewlet_operator.cache.informer import Informer, InformerOptions
from crewlet_operator.cache.store import NAMESPACE_INDEX
from crewlet_operator.errors import CrewletError, NoInformerError, NotFoundError
from crewlet_operator.kube.client import Client
from crewlet_operator.kube.resources import Resource
from crewlet_operator.label_selector import label_selector_matches
from crewlet_operator.objects import KubeObject, namespaced_key
from crewlet_operator.objects import namespace as namespace_of


class Cache:
    """Informers by kind, started together, read through :meth:`get` and :meth:`list`.

    Declare each kind (and its scope: a namespace, a label or field selector) with
    :meth:`informer` before reading it. Reading an undeclared kind raises
    :class:`~crewlet_operator.errors.NoInformerError` rather than silently starting a
    cluster-wide informer, the footgun behind most operator OOMs.
    """

    def __init__(self, client: Client, default_options: InformerOptions | None = None) -> None:
        self.client = client
        self.default_options = default_options
        self._informers: dict[Resource, Informer] = {}
        self._tasks: dict[Resource, asyncio.Task[None]] = {}
        self._started = False

    def informer(self, resource: Resource, options: InformerOptions | None = None) -> Informer:
        """The informer for ``resource``, created on first use (started if the cache runs)."""
        existing = self._informers.get(resource)
        if existing is not None:
            if options is not None and options != existing.options:
                raise ValueError(
                    f"{resource.group_kind} already has an informer with other options"
                )
            return existing
        informer = Informer(self.client, resource, options or self._copy_defaults())
        self._informers[resource] = informer
        if self._started:
            self._run(resource, informer)
            metrics.CACHED_OBJECT_COUNTS.track(self)  # a sample for the new kind
        return informer

    def _copy_defaults(self) -> InformerOptions | None:
        return None if self.default_options is None else replace(self.default_options)

    @property
    def informers(self) -> dict[Resource, Informer]:
        """The informers by kind."""
        return dict(self._informers)

    async def start(self) -> None:
        """Start every informer (later ones start as they are declared), and report their
        objects in ``crewlet_operator_cache_objects`` until :meth:`stop`."""
        self._started = True
        metrics.CACHED_OBJECT_COUNTS.track(self)
        for resource, informer in self._informers.items():
            if resource not in self._tasks:
                self._run(resource, informer)

    def _run(self, resource: Resource, informer: Informer) -> None:
        self._tasks[resource] = asyncio.create_task(
            informer.run(), name=f"informer {resource.group_kind}"
        )

    async def stop(self) -> None:
        """Stop every informer."""
        self._started = False
        metrics.CACHED_OBJECT_COUNTS.untrack(self)
        tasks = list(self._tasks.values())
        self._tasks.clear()
        await cancel_and_wait(*tasks)

    async def wait_for_sync(self, timeout: float | None = None) -> None:
        """Wait until every informer has stored its first list.

        Raises:
            TimeoutError: not within ``timeout`` seconds; the message names each kind not
                synced and why (see :meth:`not_synced`).
        """

        async def every_informer() -> None:
            for informer in list(self._informers.values()):
                await informer.wait_for_sync()

        try:
            await asyncio.wait_for(every_informer(), timeout)
        except TimeoutError:
            waiting = "; ".join(self.not_synced())
            raise TimeoutError(f"caches not synced within {timeout}s: {waiting}") from None

    def has_synced(self, resource: Resource) -> bool:
        """Whether the informer of ``resource`` has stored its first list."""
        return self._reader(resource).has_synced

    async def wait_for_kind(self, resource: Resource, timeout: float | None = None) -> None:
        """Wait until the informer of ``resource`` has stored its first list
        (:class:`TimeoutError` after ``timeout`` seconds)."""
        await self._reader(resource).wait_for_sync(timeout)

    async def wait_for_whole(
        self, resource: Resource, index: tuple[str, str], timeout: float | None = None
    ) -> None:
        """Wait, if need be, until the objects of ``resource`` under an index value are held
        whole: a ``metadata_first`` informer holds its objects by their metadata alone until it
        has listed them whole (:meth:`Informer.wait_for_whole
        <crewlet_operator.cache.Informer.wait_for_whole>`, asked for now). No object under the
        value, or none held by its metadata alone, waits for nothing."""
        informer = self._reader(resource)
        if informer.has_whole:
            return
        if any(informer.store.metadata_only(key) for key in informer.store.keys_by_index(*index)):
            await informer.wait_for_whole(timeout)

    def not_synced(self) -> builtins.list[str]:
        """Each kind whose informer has not stored its first list, and why: its list's last
        error, if any. A kind the API server does not serve (a 404: its CRD is not installed)
        says to install its CRD."""
        return [
            _why_not_synced(resource, informer.last_error)
            for resource, informer in self._informers.items()
            if not informer.has_synced
        ]

    def request_whole(self) -> None:
        """Have every ``metadata_first`` informer list its objects whole now (see
        :meth:`Informer.request_whole`)."""
        for informer in self._informers.values():
            informer.request_whole()

    def object_counts(self, metadata_only: bool = False) -> dict[str, int]:
        """How many objects each informer holds, by kind (``Kind.group``): the sizes of the
        stores, read without decoding anything; with ``metadata_only``, how many of them are
        held by their metadata alone (see :attr:`.Compact.metadata_first`)."""
        return {
            resource.group_kind: (
                informer.store.metadata_only_count if metadata_only else len(informer.store)
            )
            for resource, informer in self._informers.items()
        }

    def silences(self, now: float | None = None) -> dict[str, float]:
        """Seconds since each informer last heard the API server (a list, an event or a
        bookmark), by kind (``Kind.group``): see :meth:`stale`."""
        now = time.monotonic() if now is None else now
        return {
            resource.group_kind: now - informer.last_event_at
            for resource, informer in self._informers.items()
        }

    @property
    def synced(self) -> bool:
        """Whether every informer has synced (readiness)."""
        return all(i.has_synced for i in self._informers.values())

    def stale(
        self, max_silence: float | None = None, *, now: float | None = None
    ) -> builtins.list[str]:
        """Kinds whose informer has heard nothing (no event, bookmark or list) for too long.

        The manager's ``/healthz`` fails while any is stale, so the kubelet restarts a process
        whose watch is wedged, as controller-runtime users expect of liveness.

        :param max_silence: Seconds of silence that make an informer stale; by default each
            informer's own :attr:`~crewlet_operator.cache.informer.Informer.max_silence`,
            past its watchdog.
        :param now: Monotonic seconds; now by default.
        """
        now = time.monotonic() if now is None else now
        return [
            resource.group_kind
            for resource, informer in self._informers.items()
            if now - informer.last_event_at
            > (informer.max_silence if max_silence is None else max_silence)
        ]

    def _reader(self, resource: Resource) -> Informer:
        informer = self._informers.get(resource)
        if informer is None:
            raise NoInformerError(
                f"no informer for {resource.group_kind}: declare it (cache.informer(...), or "
                "for_/owns/watches on a controller) before reading it from the cache"
            )
        return informer

    def get(self, resource: Resource, name: str, namespace: str | None = None) -> KubeObject | None:
        """The cached object, or None."""
        return self._reader(resource).store.get(namespaced_key(namespace, name))

    def known(
        self, resource: Resource, name: str, namespace: str | None = None
    ) -> KubeObject | None:
        """The cached object as far as it is known, or None: whole, or its ``apiVersion``,
        ``kind`` and ``metadata`` when the informer holds it by them alone (a
        ``metadata_first`` informer before its list of whole objects). Nothing is listed or
        waited for: what a caller asking who holds a name reads."""
        store = self._reader(resource).store
        key = namespaced_key(namespace, name)
        return store.known(key) if key in store else None

    def keys(self, resource: Resource, index: tuple[str, str]) -> builtins.list[str]:
        """The keys (``namespace/name``, or ``name``) of the cached objects found under an index
        value: cheaper than :meth:`list` when the keys are all a caller needs."""
        return self._reader(resource).store.keys_by_index(*index)

    def list(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        labels: dict[str, Any] | None = None,
        index: tuple[str, str] | None = None,
    ) -> builtins.list[KubeObject]:
        """Cached objects, optionally in one namespace, matching a label selector (a
        ``metav1.LabelSelector`` dict) and found under an index value."""
        store = self._reader(resource).store
        if index is not None:
            objects = store.by_index(*index)
            if namespace is not None:
                objects = [o for o in objects if namespace_of(o) == namespace]
        elif namespace is not None:
            objects = store.by_index(NAMESPACE_INDEX, namespace)
        else:
            objects = store.list()
        if labels is not None:
            objects = [
                o
                for o in objects
                if label_selector_matches(labels, o.get("metadata", {}).get("labels") or {})
            ]
        return objects


def _why_not_synced(resource: Resource, error: CrewletError | None) -> str:
    served_as = f"{resource.group_kind} ({resource.api_version} {resource.plural})"
    if isinstance(error, NotFoundError):
        return f"{served_as} is not served by the API server: install its CRD"
    if error is None:
        return f"{served_as} not listed yet"
    return f"{served_as} not listed: {error}"
