"""An informer: list, then watch from the list's resourceVersion, into a local store.

What keeps it from going zombie (the commonest complaint about Python operators):

- the server ends each watch after ``watch_timeout`` (jittered, so that many informers do not
  reconnect at once) and the informer resumes from the last resourceVersion it saw;
- a client-side inactivity watchdog ends a watch on which no byte, not even a bookmark, has
  arrived for ``inactivity_timeout`` seconds (a dead TCP connection, a frozen server);
- 410 Gone (the resourceVersion was compacted away) relists, and the relist emits deletes for
  objects that vanished meanwhile, so no delete is ever lost;
- any other failure retries with capped exponential backoff, forever: an informer only stops
  when it is told to;
- :meth:`Informer.rescope` ends the list or watch under way and lists in the new scope, which
  tells adds for what came into it and deletes for what left it, as a relist does.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Protocol

import orjson
import structlog

from crewlet_operator.cache.listing import item_metadata, listed_metadata, partial_item_metadata
from crewlet_operator.cache.store import IndexFunc, Store, Transform
from crewlet_operator.errors import (
    ApiError,
    BadRequestError,
    CrewletError,
    GoneError,
    InvalidError,
    TransportError,
)
from crewlet_operator.fieldset import keep_managed_fields_of
from crewlet_operator.kube.client import Client, WatchEvent, decode_event, decode_item
from crewlet_operator.kube.params import ListParams, Scope, WatchParams
from crewlet_operator.kube.resources import Resource
from crewlet_operator.objects import KubeObject, object_key, resource_version

INITIAL_EVENTS_END = "k8s.io/initial-events-end"
"""The annotation of the bookmark that ends a streamed list."""

log = structlog.get_logger("crewlet_operator.informer")


class EventHandler(Protocol):
    """Receives an informer's changes after the store is updated. Handlers must be quick
    (they typically enqueue a key) and must not raise."""

    def on_add(self, obj: KubeObject, initial: bool = False) -> None:
        """A new object; ``initial`` when it comes with the informer's first list (or the
        replay of its store to a handler added later), not from a create."""
        ...

    def on_update(self, old: KubeObject, new: KubeObject) -> None:
        """An object changed from ``old`` to ``new``."""
        ...

    def on_delete(self, obj: KubeObject) -> None:
        """An object was deleted; ``obj`` is its last known state."""
        ...


@dataclass(frozen=True)
class Stream:
    """List by a watch that sends every object first (Kubernetes' WatchList), decoding each as
    it comes, rather than page by page (each page decoded whole once it has come): the default.

    Pages cost the API server about half the CPU of a stream (it encodes and flushes every
    streamed object as an event of its own; bench/NOTES.md, "Informer lists"). A stream holds
    one object at a time where pages hold one page. An API server that
    refuses to stream, and the metadata alone (:class:`MetadataOnly`, the first list of
    ``Compact(metadata_first=True)``), are listed in pages of ``page_size`` either way.
    """

    page_size: int = 500
    """Objects a page asks for, where the list is paged after all."""


@dataclass(frozen=True)
class Pages:
    """List page by page, ``page_size`` objects at a time: only one page of whole objects is
    ever held, however many are cached."""

    page_size: int = 500
    """Objects a page asks for; 0 lists them all in one answer, which the API server gives from
    its watch cache (for a selector that few objects match)."""


ListStrategy = Stream | Pages
"""How an informer lists its kind: :class:`Stream` (the default) or :class:`Pages`."""


@dataclass(frozen=True)
class Decoded:
    """Keep each object decoded, as the transforms left it (the default): reads return the
    stored objects themselves."""


@dataclass(frozen=True)
class Compact:
    """Keep the objects compressed (see :mod:`crewlet_operator.cache.compact`): for kinds held
    by the thousand, whose reads are few per reconcile. Every read returns a fresh copy.

    Two ways to spend less on a start, which lists every object and reads few (each valid with
    the other and with either :data:`ListStrategy`): ``lazy_lists`` and ``metadata_first``.
    """

    lazy_lists: bool = False
    """Decode each object of a list (streamed or paged) only as far as its metadata, and keep the
    JSON the API server sent (:mod:`crewlet_operator.cache.listing`): handlers and index
    functions are told the listed objects as ``apiVersion``, ``kind`` and ``metadata`` (without
    its ``managedFields``), and each read decodes the whole object and runs both transforms on
    it. For built-in kinds held by the thousand of which a start reads few, with the default
    ``transform`` (the informer raises :class:`ValueError` for another). Custom resources and
    the watch's changes are decoded whole. One of the operator's StatefulSets decodes in 5 us
    instead of 70 to 85."""
    metadata_first: bool = False
    """Start with a list of the objects' metadata alone (a ``PartialObjectMetadataList``, in
    pages), and count as synced once it is stored; then, when asked
    (:meth:`Informer.request_whole`, or something awaits :meth:`Informer.wait_for_whole`), list
    the whole objects (as the :data:`ListStrategy` and ``lazy_lists`` say) and watch. A
    controller asks for those it watches once its first pass is done, and a manager for every
    one as soon as it finds itself a standby. Until the second list has ended, handlers are
    told the objects' metadata, index functions and :meth:`Store.resource_version` work, reads
    raise :class:`MetadataOnlyError`, and nothing is watched: the second list tells what
    changed meanwhile, as a relist does. For kinds held by the thousand, of which a start needs
    the versions alone (a restart's first pass over a checkpoint): the API server encodes a
    StatefulSet's metadata for much less than the whole object, and the first pass does not
    share its CPU with the whole objects' list."""


@dataclass(frozen=True)
class MetadataOnly:
    """List and watch the objects' metadata alone (``PartialObjectMetadata``, as
    controller-runtime's metadata-only informers do), in pages: for a kind of which a controller
    needs to know which objects exist and who owns them, not what they hold, such as every
    object of a kind in the cluster. Each is a few hundred bytes, and the API server encodes a
    fraction of the object. Handlers, index functions and reads get ``apiVersion``, ``kind``
    (the kind's, not ``PartialObjectMetadata``) and ``metadata`` without ``managedFields``."""


Storage = Decoded | Compact | MetadataOnly
"""What an informer's store keeps: :class:`Decoded` objects (the default), :class:`Compact`
ones, or the objects' metadata alone (:class:`MetadataOnly`)."""


@dataclass
class InformerOptions:
    """How an informer lists and watches one kind.

    ``transform`` runs on every object before it is stored. The default (None) drops every
    ``managedFields`` entry (a fifth or more of an object's bytes) except the client's own
    field manager's, which :meth:`Client.apply_if_changed` reads to spot fields to remove.

    ``deferred_transform`` runs after it: on each object of the watch as it arrives (what it
    makes is stored), and on each object of a list each time the object is read from the
    store (it is stored as ``transform`` left it: see :class:`Store`). For a costly transform
    of a kind held by the thousand, of which a restart reads few (it lists them all), and one
    that does not shrink the objects much once compressed (:class:`Compact`). Handlers are told
    a listed object as ``transform`` left it, and index functions must find the same values
    before and after ``deferred_transform`` (let it only drop fields they do not read).
    """

    scope: Scope = field(default_factory=Scope)
    """The objects listed and watched: a namespace, a label and a field selector, a shard."""
    transform: Transform | None = None
    deferred_transform: Transform | None = None
    indexers: dict[str, IndexFunc] = field(default_factory=dict)
    lists: ListStrategy = Stream()
    """How the objects are listed: streamed (the default) or in pages."""
    storage: Storage = Decoded()
    """What the store keeps: the objects decoded (the default), compressed, or their metadata
    alone."""
    watch_timeout: tuple[int, int] = (300, 600)
    """Server-side watch timeout, drawn uniformly from this range (client-go's 5 to 10 min)."""
    inactivity_timeout: float = 90.0
    """Seconds without a byte before the watch is presumed dead (bookmarks come every minute)."""
    max_backoff: float = 30.0


class Informer:
    """Keeps a :class:`Store` of one kind in step with the API server and tells handlers."""

    def __init__(self, client: Client, resource: Resource, options: InformerOptions | None = None):
        self.client = client
        self.resource = resource
        self.options = options or InformerOptions()
        storage = self.options.storage
        self._metadata_only = isinstance(storage, MetadataOnly)
        self._lazy_lists = isinstance(storage, Compact) and storage.lazy_lists
        self._metadata_first = isinstance(storage, Compact) and storage.metadata_first
        if self._lazy_lists and self.options.transform is not None:
            # A lazily listed object is transformed at each read, a custom resource's at its
            # list too: only the default transform gives back what it has trimmed as it is.
            raise ValueError("Compact(lazy_lists=True) needs the default transform")
        self.store = Store(
            self.options.indexers,
            compact=isinstance(storage, Compact),
            finish=self._finish_listed(),
        )
        self._handlers: list[EventHandler] = []
        self._synced = asyncio.Event()
        self._whole = asyncio.Event()
        self._whole_wanted = asyncio.Event()
        self._answered = asyncio.Event()
        self._in_scope = asyncio.Event()
        """Set while the store holds what the current scope selects (a list in it has ended)."""
        self._in_scope.set()  # until the first list, has_synced says it
        self._attempt: asyncio.Timeout | None = None
        """The deadline of the list or watch under way: :meth:`rescope` ends it now."""
        self.last_error: CrewletError | None = None
        """Why the latest list or watch failed; None once a list has succeeded since."""
        self._resource_version: str | None = None
        self._widening: Scope | None = None
        """What a :meth:`widen` added to the scope, to list alone at :attr:`_resource_version`
        before the watch goes on in the whole scope from there; None when none is due."""
        self.streams_lists = isinstance(self.options.lists, Stream) and not self._metadata_only
        """Whether lists are streamed (WatchList): as the options say (never the metadata alone),
        and False once an API server refused it."""
        self.shard_ignored = False
        """Whether the API server sent an object outside the scope's shard (its
        ``ShardedListAndWatch`` gate is off): such objects are left out here."""
        self.relists = 0
        self.watch_failures = 0
        """Lists and watches that failed (including silent watches the watchdog ended)."""
        self.last_event_at = time.monotonic()
        """Monotonic seconds when the API server was last heard: a list, an event or a
        bookmark (see :attr:`max_silence`)."""
        self._trim = self.options.transform or keep_managed_fields_of(client.field_manager)
        self._log = log.bind(kind=resource.group_kind, namespace=self.options.scope.namespace)

    def add_handler(self, handler: EventHandler) -> None:
        """Register a handler; it first receives an add for every object already stored."""
        self._handlers.append(handler)
        for key in self.store.keys():  # noqa: SIM118 (a Store, not a dict)
            handler.on_add(self.store.known(key), initial=True)

    @property
    def max_silence(self) -> float:
        """Seconds this informer may hear nothing (no list, event or bookmark) and still count as
        watching: ``2 * (inactivity_timeout + max_backoff)``, time for its watchdog to end a
        silent watch, for a retry after the longest backoff, and as long again for the new
        watch. A healthy watch hears a bookmark about every minute, so only an informer that
        cannot reach the API server, or is wedged, stays silent longer: it is stale (see
        :meth:`~crewlet_operator.cache.cache.Cache.stale`)."""
        return 2 * (self.options.inactivity_timeout + self.options.max_backoff)

    @property
    def resource_version(self) -> str | None:
        """The resourceVersion up to which the store holds every change of the kind (that of
        the last list, event or bookmark): None until the first list has ended, and again
        while a relist (after a 410) runs."""
        return self._resource_version

    @property
    def has_synced(self) -> bool:
        """Whether the first list has been stored."""
        return self._synced.is_set()

    async def wait_for_sync(self, timeout: float | None = None) -> None:
        """Wait until the first list has been stored."""
        if not self._synced.is_set():  # else no task for wait_for to make: reads ask often
            await asyncio.wait_for(self._synced.wait(), timeout)

    @property
    def has_whole(self) -> bool:
        """Whether every object is stored whole: from the first list on, except with
        ``Compact(metadata_first=True)``, from the end of the list of whole objects after it."""
        return self._whole.is_set()

    def request_whole(self) -> None:
        """Have a metadata-first informer list its objects whole as soon as it has synced (it
        waits to be asked: see :attr:`Compact.metadata_first`)."""
        self._whole_wanted.set()

    async def wait_for_whole(self, timeout: float | None = None) -> None:
        """Wait until every object is stored whole (see :attr:`has_whole`), asking for the
        list of whole objects (:meth:`request_whole`)."""
        if not self._whole.is_set():  # else no task for wait_for to make: reads ask often
            self.request_whole()
            await asyncio.wait_for(self._whole.wait(), timeout)

    async def wait_for_answer(self, timeout: float | None = None) -> None:
        """Wait until the first list has been stored or a list or watch has failed (see
        :attr:`last_error`): a caller that may not read the kind learns it at once, instead of
        after a sync timeout."""
        if not self._answered.is_set():  # else no task for wait_for to make: reads ask often
            await asyncio.wait_for(self._answered.wait(), timeout)

    def rescope(self, scope: Scope) -> None:
        """List and watch ``scope`` from now on: the list or watch under way ends, and a list in
        the new scope follows, telling the handlers an add for each object that came into it,
        a delete for each that left it (see :meth:`wait_for_scope`). For a selector that
        changes while the informer runs, such as a sharded member's slots."""
        if scope == self.options.scope:
            return
        self._resource_version = None
        self._widening = None
        self._end_attempt(scope)

    def widen(self, scope: Scope, added: Scope) -> None:
        """Like :meth:`rescope` to ``scope``, which selects every object of the current scope
        and those ``added`` selects besides, but without listing again what the store holds:
        ``added`` alone is listed, at the resourceVersion the store is at (one snapshot), and
        the watch goes on in ``scope`` from that version. A member's informers of children take
        a dead member's slots so, a list of those slots rather than of all it holds. A whole
        list follows instead when the store is not at one version yet, when another change of
        scope is under way, or when etcd no longer has that version (compacted)."""
        if scope == self.options.scope:
            return
        if (
            self._resource_version is None
            or not self.has_whole
            or not self._in_scope.is_set()
            or self._widening is not None
        ):
            self.rescope(scope)
            return
        self._widening = added
        self._end_attempt(scope)

    def _end_attempt(self, scope: Scope) -> None:
        """Take ``scope`` as the scope, not held yet, and end the list or watch under way."""
        self.options = replace(self.options, scope=scope)
        self._in_scope.clear()
        # An attempt already ending (a rescope a moment ago) lists the latest scope anyway; its
        # timeout cannot be moved once expiring (asyncio raises), which stranded the caller.
        if self._attempt is not None and not self._attempt.expired():
            self._attempt.reschedule(asyncio.get_running_loop().time())

    async def wait_for_scope(self) -> None:
        """Wait until the store holds what the current scope selects: the list that followed
        the last :meth:`rescope` has ended (at once if none is due)."""
        if not self._in_scope.is_set():  # else no task for wait_for to make
            await self._in_scope.wait()

    async def run(self) -> None:
        """List and watch until cancelled.

        The list is streamed (a watch whose first events are every object, Kubernetes'
        WatchList), so objects are decoded, trimmed and stored as the API server sends them,
        while it sends the next ones; with :class:`Pages`, or with an API server that refuses
        to stream, it is listed page by page.
        """
        # A watch loop with its own resume semantics, not a retry policy (no tenacity): a watch
        # that ends resumes from the last resourceVersion, a 410 relists, a refused stream falls
        # back to pages, none of them counted as failures; only what is left backs off, and a
        # watch that ran well resets that count, so no attempt count or stop applies.
        failures = 0
        while True:
            # A rescope clears _in_scope and only a list sets it again: the resourceVersion
            # alone cannot say, since events of the old scope's watch still being read when
            # the rescope came set it again (a watch in the new scope from there would never
            # list what came into it, and wait_for_scope would wait for ever).
            listing = (
                self._resource_version is None or not self.has_whole or not self._in_scope.is_set()
            )
            try:
                try:
                    async with asyncio.timeout(None) as self._attempt:
                        await self._list_and_watch(listing)
                finally:
                    ended, self._attempt = self._attempt, None
                failures = 0
            except TimeoutError:
                if ended is None or not ended.expired():
                    raise  # not ended by rescope()
                self._log.info("rescoped; listing", scope=str(self.options.scope))
            except (BadRequestError, InvalidError) as refused:
                if listing and self.streams_lists:
                    self._log.info("streaming lists refused; listing in pages", error=str(refused))
                    self.streams_lists = False
                else:
                    # Refused in pages too (a field selector on a field the CRD does not make
                    # selectable, say): retried like any failure, as client-go's reflector
                    # does, so that the informer lists once the CRD is upgraded.
                    failures = await self._back_off(refused, failures)
            except GoneError:
                self._log.info("watch resourceVersion expired; relisting")
                self._resource_version = None
                self._widening = None
            except (TransportError, ApiError, CrewletError, ValueError) as exc:
                failures = await self._back_off(exc, failures)

    async def _back_off(self, exc: Exception, failures: int) -> int:
        """Record a failed list or watch, log it and wait before the next attempt, longer after
        each failure in a row; the failures in a row now."""
        failures += 1
        self.watch_failures += 1
        self.last_error = exc if isinstance(exc, CrewletError) else CrewletError(str(exc))
        self._answered.set()
        delay = min(self.options.max_backoff, 0.2 * 2 ** min(failures, 10))
        delay *= random.uniform(0.8, 1.2)
        self._log.warning("list/watch failed; retrying", error=str(exc), delay=delay)
        await asyncio.sleep(delay)
        return failures

    async def _list_and_watch(self, listing: bool) -> None:
        """One attempt: list if ``listing`` (streamed, or in pages; what a :meth:`widen` added,
        alone), then watch."""
        if self._widening is not None and self._resource_version is not None:
            await self._list_added(self._widening, self._resource_version)
            await self._watch()
            return
        if self._metadata_first and not self.has_whole:
            if not self.has_synced:
                await self._relist(metadata=True)
                return
            await self._whole_wanted.wait()
        if listing and self.streams_lists:
            await self._stream()
        else:
            if listing:
                await self._relist()
            await self._watch()

    async def _relist(self, metadata: bool = False) -> None:
        """A list in pages; with ``metadata``, a metadata-first informer's first list: the
        objects' metadata alone."""
        seen: set[str] = set()
        version = ""
        scope = self.options.scope
        partial = metadata or self._metadata_only
        listing = ListParams(scope, page_size=self.options.lists.page_size, metadata_only=partial)
        # Page by page: only one page of whole objects is ever held, however many are cached.
        # Each item comes as its JSON, cut at its metadata for a lazy list, else decoded whole.
        async for page in self.client.list_raw_pages(self.resource, listing):
            version = page.resource_version
            self._listed_page(page.items, seen, partial, metadata)
        self._listed(seen, version, scope)

    async def _list_added(self, added: Scope, version: str) -> None:
        """What a :meth:`widen` added, listed in pages at ``version`` exactly (the version the
        store is at), and stored beside what the store holds: the store is then what the whole
        scope held at ``version``, and the watch goes on from there."""
        scope = self.options.scope
        listing = ListParams(
            added,
            page_size=self.options.lists.page_size,
            resource_version=version,
            exact=True,
            metadata_only=self._metadata_only,
        )
        seen: set[str] = set()
        async for page in self.client.list_raw_pages(self.resource, listing):
            self._listed_page(page.items, seen, self._metadata_only, False)
        self._widening = None
        self.relists += 1
        if scope == self.options.scope:
            self._in_scope.set()
        self._log.info("widened", scope=str(scope), listed=len(seen))

    def _listed_page(
        self, items: list[bytes], seen: set[str], partial: bool, metadata: bool
    ) -> None:
        """A page of a list: each item as its JSON, cut at its metadata for a lazy list (or
        for a list of ``partial`` objects), else decoded whole; the page emptied after."""
        for item in items:
            if partial:
                self._listed_one(
                    partial_item_metadata(item, self.resource), seen, metadata=metadata
                )
            elif lazy := self._lazy_lists and item_metadata(item, self.resource):
                self._listed_one(lazy[0], seen, lazy[1])
            else:
                self._listed_one(decode_item(item, self.resource), seen)
        items.clear()

    async def _stream(self) -> None:
        """One watch that sends every object first, ends that with a bookmark, then watches.

        Until the bookmark the events are the list: what it did not name is gone (as after a
        relist), and the informer has synced. Broken off before the bookmark, the next run
        streams the whole list again.
        """
        opts = self.options
        seen: set[str] = set()
        listing = True
        path = self.resource.path(opts.scope.namespace)
        streaming = WatchParams(
            opts.scope,
            timeout_seconds=random.randint(*opts.watch_timeout),
            inactivity_timeout=opts.inactivity_timeout,
            send_initial_events=True,
        )
        async for line in self.client.watch_lines(self.resource, streaming):
            self.last_event_at = time.monotonic()
            if listing and self._lazy_lists and (lazy := listed_metadata(line)):
                metadata, raw = lazy
                self._listed_one(metadata, seen, raw)
                continue
            event = decode_event(line, path)
            if not listing:
                self._apply(event)
                continue
            if event.type == "BOOKMARK":
                annotations = (event.object.get("metadata") or {}).get("annotations") or {}
                if annotations.get(INITIAL_EVENTS_END) == "true":
                    listing = False
                    self._listed(seen, resource_version(event.object) or "", opts.scope)
                continue
            self._listed_one(event.object, seen)

    def _listed_one(
        self, listed: KubeObject, seen: set[str], raw: bytes | None = None, metadata: bool = False
    ) -> None:
        """One object of a list (paged or streamed): stored, noted as seen, and told. With
        ``raw`` (a lazy list), ``listed`` is the object's metadata and ``raw`` the whole
        object's JSON, which its reads transform. With ``metadata`` (a metadata-first list),
        ``listed`` is all that is known of the object: its metadata."""
        if not self._of_shard(listed):
            return
        obj = listed if raw is not None or metadata else self._transform(listed)
        key = object_key(obj)
        seen.add(key)
        if key not in self.store:
            # Stored as listed: its deferred transform runs at its reads. The first list is the
            # initial one; a relist's new objects were created while the watch was down.
            self.store.put(obj, key, finished=False, raw=raw, metadata_only=metadata)
            self._emit_add(obj, initial=not self.has_synced)
        elif self.store.resource_version(key) != resource_version(obj):
            # Told as a watch's change is: both sides finished (and whole, unless known by
            # their metadata alone).
            new = (
                obj
                if metadata
                else self._deferred(obj if raw is None else self._transform(orjson.loads(raw)))
            )
            old = self.store.put(new, key, metadata_only=metadata)
            assert old is not None
            self._emit_update(old, new)
        elif not metadata and self.store.metadata_only(key):
            # The whole object the metadata list announced, unchanged since: nothing to tell.
            self.store.put(obj, key, finished=False, raw=raw)

    def _listed(self, seen: set[str], version: str, scope: Scope) -> None:
        """A list of ``scope`` has ended: drop what it did not name, and say the informer has
        synced, and holds its scope if ``scope`` is still the one wanted (a rescope can come
        while a list's last events are read: then the list that follows it says so)."""
        self.relists += 1
        for key in list(self.store.keys()):
            if key not in seen:
                gone = self.store.delete(key)
                if gone is not None:
                    self._emit_delete(gone)
        self._resource_version = version
        self.last_event_at = time.monotonic()
        self.last_error = None
        self._synced.set()
        if scope == self.options.scope:
            self._in_scope.set()
        if self.store.whole:
            self._whole.set()
        self._answered.set()

    async def _watch(self) -> None:
        opts = self.options
        watching = WatchParams(
            opts.scope,
            resource_version=self._resource_version,
            timeout_seconds=random.randint(*opts.watch_timeout),
            inactivity_timeout=opts.inactivity_timeout,
            metadata_only=self._metadata_only,
        )
        async for event in self.client.watch(self.resource, watching):
            self.last_event_at = time.monotonic()
            self._apply(event)

    def _apply(self, event: WatchEvent) -> None:
        """One change of a watch: stored, told to the handlers, and where to resume."""
        rv = resource_version(event.object)
        if event.type != "BOOKMARK" and self._of_shard(event.object):
            obj = self._deferred(self._transform(event.object))
            if event.type in ("ADDED", "MODIFIED"):
                old = self.store.put(obj)
                if old is None:
                    self._emit_add(obj)
                else:
                    self._emit_update(old, obj)
            elif event.type == "DELETED":
                gone = self.store.delete(object_key(obj))
                self._emit_delete(gone if gone is not None else obj)
        self._resource_version = rv or self._resource_version

    def _of_shard(self, obj: KubeObject) -> bool:
        """Whether ``obj`` is of the scope's shard (any, without one). An API server that does
        not serve shard selectors sends every object: the first other one says so, once."""
        shard = self.options.scope.shard
        if shard is None or shard.matches(obj):
            return True
        if not self.shard_ignored:
            self.shard_ignored = True
            self._log.warning(
                "the API server sends objects outside the shard selector (its "
                "ShardedListAndWatch feature gate is off): this informer leaves them out",
                shard=shard.query(),
            )
        return False

    def _transform(self, obj: KubeObject) -> KubeObject:
        if self._metadata_only:  # a watch's PartialObjectMetadata, as a list's items are
            meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k != "managedFields"}
            obj = {
                "apiVersion": self.resource.api_version,
                "kind": self.resource.kind,
                "metadata": meta,
            }
        elif "apiVersion" not in obj:
            obj = {"apiVersion": self.resource.api_version, "kind": self.resource.kind, **obj}
        return self._trim(obj)

    def _finish_listed(self) -> Transform | None:
        """What a read runs on a listed object: the deferred transform, after the default
        transform too on a lazy list, which stores objects as sent (the default transform gives
        back an object it has trimmed as it is)."""
        deferred = self.options.deferred_transform
        if not self._lazy_lists:
            return deferred
        if deferred is None:
            return self._transform
        return lambda obj: deferred(self._transform(obj))

    def _deferred(self, obj: KubeObject) -> KubeObject:
        deferred = self.options.deferred_transform
        return obj if deferred is None else deferred(obj)

    def _emit_add(self, obj: KubeObject, initial: bool = False) -> None:
        for handler in self._handlers:
            self._safely(handler.on_add, obj, initial)

    def _emit_update(self, old: KubeObject, new: KubeObject) -> None:
        for handler in self._handlers:
            self._safely(handler.on_update, old, new)

    def _emit_delete(self, obj: KubeObject) -> None:
        for handler in self._handlers:
            self._safely(handler.on_delete, obj)

    def _safely(self, func: Callable[..., None], *args: KubeObject | bool) -> None:
        # A faulty handler must not stop the informer, or every other handler with it.
        try:
            func(*args)
        except Exception:
            self._log.exception("event handler failed", handler=repr(func))
