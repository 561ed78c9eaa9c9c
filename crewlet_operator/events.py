"""Kubernetes Events about objects, on ``events.k8s.io/v1`` (controller-runtime's recorder).

::

    recorder = EventRecorder(client, "crewlet-operator")
    recorder.record(crew, "Warning", "ImagePullFailed", "Reconcile", "image ... not found")

:meth:`EventRecorder.record` never blocks and never raises: an Event is a hint for humans
(``kubectl describe``, ``kubectl events``), not state, so a failed write must not fail a
reconcile. Repeats are folded as events.k8s.io intends: the same reason and note about the same
object within :data:`SERIES_WINDOW` seconds of the previous one update one Event's
``series`` (count, lastObservedTime) instead of creating an Event each time, which keeps a
reconcile retrying in a loop from flooding etcd.
"""

from __future__ import annotations

import asyncio
import re
import secrets
import socket
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import structlog

from crewlet_operator.errors import NotFoundError
from crewlet_operator.kube.resources import EVENT, Resource
from crewlet_operator.metrics import EVENTS_DROPPED
from crewlet_operator.objects import MAX_NAME_LENGTH, micro_time

__all__ = [
    "MAX_IN_FLIGHT",
    "MAX_QUEUED",
    "NOTE_LIMIT",
    "SERIES_WINDOW",
    "EventClient",
    "EventRecorder",
    "EventType",
    "Series",
    "SeriesKey",
    "SeriesTracker",
    "build_event",
    "event_name",
    "micro_time",
    "object_reference",
    "truncate_note",
]

log = structlog.get_logger("crewlet_operator.events")

EventType = Literal["Normal", "Warning"]

NOTE_LIMIT = 1024
"""The API server refuses a note longer than this many bytes."""

INSTANCE_LIMIT = 128
"""The API server refuses a reportingInstance longer than this."""

SERIES_WINDOW = 300.0
"""Seconds after the last occurrence within which a repeat joins its series."""

_SUFFIX_LENGTH = 17  # "." and 16 hex digits


class EventClient(Protocol):
    """What :class:`EventRecorder` needs of a :class:`~crewlet_operator.kube.client.Client`."""

    async def create(self, resource: Resource, obj: dict[str, Any]) -> dict[str, Any]:
        """Create ``obj``."""
        ...

    async def patch(
        self,
        resource: Resource,
        name: str,
        patch: Any,
        namespace: str | None = None,
        *,
        patch_type: str = "merge",
    ) -> dict[str, Any]:
        """Patch object ``name``."""
        ...


def object_reference(obj: Mapping[str, Any]) -> dict[str, str]:
    """The ObjectReference of ``obj`` (apiVersion, kind, name, namespace, uid, resourceVersion).

    Fields the object lacks are left out, so a cluster-scoped object has no namespace.
    """
    meta = obj.get("metadata") or {}
    fields = {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "name": meta.get("name"),
        "namespace": meta.get("namespace"),
        "uid": meta.get("uid"),
        "resourceVersion": meta.get("resourceVersion"),
    }
    return {k: v for k, v in fields.items() if v}


def event_name(regarding_name: str) -> str:
    """``<regarding name>.<16 random hex digits>``, always a valid object name.

    The regarding name is lowercased, stripped of characters an Event name may not hold (RBAC
    objects are called ``system:...``) and shortened so the whole stays a valid name
    (:data:`~crewlet_operator.objects.MAX_NAME_LENGTH` characters at most).
    The suffix is random rather than client-go's timestamp so that two replicas recording in
    the same nanosecond cannot collide.
    """
    stem = re.sub(r"[^a-z0-9.-]", "-", regarding_name.lower())
    stem = stem[: MAX_NAME_LENGTH - _SUFFIX_LENGTH].strip(".-") or "event"
    return f"{stem}.{secrets.token_hex(8)}"


def truncate_note(note: str) -> str:
    """``note`` cut to :data:`NOTE_LIMIT` bytes of UTF-8, never inside a character."""
    return note.encode()[:NOTE_LIMIT].decode(errors="ignore")


def build_event(
    regarding: Mapping[str, Any],
    type: EventType,
    reason: str,
    action: str,
    note: str,
    *,
    controller: str,
    instance: str,
    event_time: float,
    related: Mapping[str, Any] | None = None,
    name: str | None = None,
    series: tuple[int, float] | None = None,
) -> dict[str, Any]:
    """The ``events.k8s.io/v1`` Event body for one occurrence.

    It lives in the regarding object's namespace, or in ``default`` for a cluster-scoped object
    (the API server accepts Events without a regarding namespace only there or in
    ``kube-system``).

    :param event_time: Epoch seconds of the first occurrence.
    :param name: The Event's name; a fresh :func:`event_name` by default.
    :param series: ``(count, last observed epoch seconds)`` for a repeat (count of 2 or more).
    """
    reference = object_reference(regarding)
    event: dict[str, Any] = {
        "apiVersion": EVENT.api_version,
        "kind": EVENT.kind,
        "metadata": {
            "name": name or event_name(reference.get("name", "")),
            "namespace": reference.get("namespace") or "default",
        },
        "eventTime": micro_time(event_time),
        "reportingController": controller,
        "reportingInstance": instance,
        "action": action,
        "reason": reason,
        "type": type,
        "note": truncate_note(note),
        "regarding": reference,
    }
    if related is not None:
        event["related"] = object_reference(related)
    if series is not None:
        count, last_observed = series
        event["series"] = {"count": count, "lastObservedTime": micro_time(last_observed)}
    return event


SeriesKey = tuple[str, str, str]
"""What makes two occurrences the same: (regarding object, reason, note)."""


@dataclass
class Series:
    """A run of identical occurrences, written as one Event named ``name``."""

    name: str
    first_observed: float
    last_observed: float
    count: int = 1


class SeriesTracker:
    """Decides whether an occurrence starts a new Event or joins the series of an earlier one.

    A series stays open while its occurrences are less than ``window`` seconds apart. At most
    ``max_entries`` series are remembered (the least recently seen are dropped first), so the
    memory is bounded however many objects a controller reports on.

    :param clock: Epoch seconds; injectable for tests.
    """

    def __init__(
        self,
        window: float = SERIES_WINDOW,
        *,
        max_entries: int = 4096,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.window = window
        self.max_entries = max_entries
        self._clock = clock
        # Ordered by last occurrence, oldest first, so expiry pops from the front.
        self._series: OrderedDict[SeriesKey, Series] = OrderedDict()

    def observe(self, key: SeriesKey, regarding_name: str) -> Series:
        """Count one occurrence of ``key``: a new series (``count == 1``) or an open one."""
        now = self._clock()
        while self._series:
            oldest = next(iter(self._series.values()))
            if now - oldest.last_observed < self.window:
                break
            self._series.popitem(last=False)
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = Series(event_name(regarding_name), now, now)
            if len(self._series) > self.max_entries:
                self._series.popitem(last=False)
        else:
            series.count += 1
            series.last_observed = now
            self._series.move_to_end(key)
        return series

    def __len__(self) -> int:
        return len(self._series)


MAX_IN_FLIGHT = 8
"""Events an :class:`EventRecorder` writes at once. client-go writes them one at a time; 8 keep
up with a burst of verdicts (about 100 a second at the ~50 ms a write takes under load) and
leave the rest of the client's connection pool (aiohttp's 100) to the writes that are state:
unbounded, a slow API server (a garbage collection slows its writes tenfold for seconds) held a
write in flight for each Event, and the status writes they announced queued for a connection."""

MAX_QUEUED = 1000
"""Events an :class:`EventRecorder` holds waiting to be written (client-go's
``maxQueuedEvents``); one recorded beyond them is dropped, logged at debug level and counted
in ``crewlet_operator_events_dropped_total``."""


@dataclass
class _Write:
    """One Event to write, after ``previous`` (the write before it of the same series) so a
    patch never overtakes the create of its Event."""

    event: dict[str, Any]
    key: SeriesKey
    previous: asyncio.Future[None] | None
    done: asyncio.Future[None]


class EventRecorder:
    """Records Events about objects for one controller.

    Events are written in the background, in the order recorded, by at most ``max_in_flight``
    writers; at most ``max_queued`` wait for one, and the rest are dropped: an Event is a hint
    for humans, and must not crowd out the controller's own writes when the API server is slow.

    :param client: Usually the manager's :class:`~crewlet_operator.kube.client.Client`; its
        identity needs ``create`` and ``patch`` on ``events.events.k8s.io``.
    :param controller_name: The ``reportingController``; the API server requires a qualified
        name (``my-operator`` or ``example.com/my-operator``).
    :param instance: The ``reportingInstance``; ``<controller_name>-<hostname>`` (the pod)
        by default, cut to 128 characters.
    :param series_window: See :class:`SeriesTracker`.
    :param clock: Epoch seconds, for event times and series; injectable for tests.
    :param max_in_flight: See :data:`MAX_IN_FLIGHT`.
    :param max_queued: See :data:`MAX_QUEUED`.
    :param write_slots: Entered around each write (an :class:`asyncio.Semaphore`, say), to
        share a budget with the controller's other background writes: when the controller
        narrows that budget to make room for writes that cannot wait, its Events give way too.
        None (the default): only ``max_in_flight`` bounds them.
    """

    def __init__(
        self,
        client: EventClient,
        controller_name: str,
        instance: str | None = None,
        *,
        series_window: float = SERIES_WINDOW,
        clock: Callable[[], float] = time.time,
        max_in_flight: int = MAX_IN_FLIGHT,
        max_queued: int = MAX_QUEUED,
        write_slots: AbstractAsyncContextManager[Any] | None = None,
    ) -> None:
        if max_in_flight < 1 or max_queued < 1:
            raise ValueError("max_in_flight and max_queued must be at least 1")
        self.client = client
        self.controller_name = controller_name
        self.instance = (instance or f"{controller_name}-{socket.gethostname()}")[:INSTANCE_LIMIT]
        self.max_in_flight = max_in_flight
        self.max_queued = max_queued
        self._write_slots = write_slots or nullcontext()
        EVENTS_DROPPED.labels(controller=controller_name)  # at zero from the start
        self._clock = clock
        self._series = SeriesTracker(series_window, clock=clock)
        # Invariants: every write recorded and not yet finished is in ``_waiting`` or held by a
        # writer; ``_tails[key]`` is the newest such write of its series (none when all are
        # done). Writers take from the front, so a write's ``previous`` was taken before it
        # and never waits on a write still queued behind it.
        self._waiting: deque[_Write] = deque()
        self._writers: set[asyncio.Task[None]] = set()
        self._writing = 0  # writers that have not returned (a finished task leaves the set later)
        self._tails: dict[SeriesKey, asyncio.Future[None]] = {}

    def record(
        self,
        regarding: Mapping[str, Any],
        type: EventType,
        reason: str,
        action: str,
        note: str,
        *,
        related: Mapping[str, Any] | None = None,
    ) -> None:
        """Record that ``action`` on ``regarding`` happened for ``reason``, explained by ``note``.

        The write runs in the background (:meth:`flush` awaits it); failures are logged at
        debug level. Must be called from the event loop's thread.
        """
        try:
            loop = asyncio.get_running_loop()
            if len(self._waiting) >= self.max_queued:
                EVENTS_DROPPED.labels(controller=self.controller_name).inc()
                log.debug("dropped an event: too many waiting to be written", reason=reason)
                return
            note = truncate_note(note)
            reference = object_reference(regarding)
            identity = reference.get("uid") or "/".join(
                reference.get(k, "") for k in ("apiVersion", "kind", "namespace", "name")
            )
            key = (identity, reason, note)
            series = self._series.observe(key, reference.get("name", ""))
            event = build_event(
                regarding,
                type,
                reason,
                action,
                note,
                controller=self.controller_name,
                instance=self.instance,
                event_time=series.first_observed,
                related=related,
                name=series.name,
                series=(series.count, series.last_observed) if series.count > 1 else None,
            )
            write = _Write(event, key, self._tails.get(key), loop.create_future())
        except Exception as exc:
            log.debug("could not record an event", reason=reason, error=repr(exc))
            return
        self._tails[key] = write.done
        self._waiting.append(write)
        if self._writing < self.max_in_flight:
            self._writing += 1
            writer = loop.create_task(self._writer())
            self._writers.add(writer)
            writer.add_done_callback(self._writers.discard)

    async def _writer(self) -> None:
        """Write what is waiting, oldest first, until nothing is."""
        try:
            while self._waiting:
                write = self._waiting.popleft()
                try:
                    if write.previous is not None:
                        await write.previous
                    async with self._write_slots:
                        await self._write(write.event)
                finally:
                    write.done.set_result(None)
                    if self._tails.get(write.key) is write.done:
                        del self._tails[write.key]
        finally:
            self._writing -= 1  # with no await after the last look at ``_waiting``

    async def _write(self, event: dict[str, Any]) -> None:
        meta = event["metadata"]
        try:
            if "series" in event:
                try:
                    await self.client.patch(
                        EVENT,
                        meta["name"],
                        {"series": event["series"]},
                        meta["namespace"],
                        patch_type="merge",
                    )
                    return
                except NotFoundError:
                    # The first write failed, or the Event expired (the API server keeps
                    # Events for an hour): create it whole, series and all.
                    pass
            await self.client.create(EVENT, event)
        except Exception as exc:
            log.debug(
                "could not write an event",
                event_ref=f"{meta['namespace']}/{meta['name']}",
                reason=event["reason"],
                error=repr(exc),
            )

    async def start(self) -> None:
        """Nothing to start: writers start as Events are recorded (a
        :class:`~crewlet_operator.manager.Runnable`, so ``manager.add(recorder)`` flushes it on
        the way out)."""

    async def stop(self) -> None:
        """Wait for the Events recorded so far (:meth:`flush`)."""
        await self.flush()

    async def flush(self) -> None:
        """Wait until every event recorded so far is written (or has failed)."""
        while writers := [t for t in self._writers if not t.done()]:
            await asyncio.wait(writers)
