"""The work queue that feeds keys to reconcile workers.

An asyncio port of client-go's ``util/workqueue`` (``queue.go``, ``delaying_queue.go`` and
``rate_limiting_queue.go``) with the same guarantees: a key is queued at most once however
often it is added, a key is never handed to two workers at the same time, and a key added
while it is being worked on is worked on again once the worker is done.

Which waiting key comes out next is the queue's order, :mod:`crewlet_operator.fairorder`: it is
**fair** in two ways. Every key has a **priority** (an ``int``; :data:`NORMAL_PRIORITY` unless
the add says otherwise), as in controller-runtime's priority queue: events of an informer's
initial list come in at :data:`LOW_PRIORITY`, so a new tenant does not wait behind a start-up's
backlog. Keys are handed out highest priority first, then earliest ready first. Unlike
controller-runtime's queue, a waiting key **ages**: every ``aging_interval`` seconds it waits
while the queue is being served count as one more priority point, so no key starves under any
arrival pattern. The bound, held by property tests: a key of priority ``p`` that became ready
at ``t`` is handed out before any key of priority at most ``P`` that becomes ready after
``t + (P - p) * aging_interval`` (with the defaults, an initial-list key waits at most 25 s of
service behind later normal work, then only for the keys already waiting, at most one per
distinct key).

Within that order the queue is fair between tenants when given a ``fairness_key`` (a
function of the item; a controller's default is the request's namespace): the waiting items of
each fairness key form a line of their own, in the order above, and the lines take turns.
A key's line is ordered among the others by its first item, as if that item became ready no
earlier than the last time the key was served (while it had items waiting): once served, a key
goes behind every other key waiting at the same priority, so a key with one item waits for at
most one item of each other key, however many items another key's burst holds. Priorities
still rule across keys, aging included: the bound above holds between the lines, with ``t`` the
later of a line's first item's ready time and the key's last service, and within a line among
its own items. Without a ``fairness_key`` every item is in one line: the order above exactly.
With ``max_in_flight_per_key``, a key with that many items handed out (not yet ``done``) waits,
keeping its place, while the other keys are served.

A getter may ask for **urgent** work only (``get(urgent_only=True)``): keys added at
``urgent_priority`` (:data:`NORMAL_PRIORITY` by default) or higher, in the same order among
themselves. A controller's reserved workers get this way, so somebody's create never waits for a
worker behind a backlog of low-priority work that holds every other one. A key's own priority
decides, not its aged one: a backlog that has waited long is served first by the other workers,
never by the reserved ones. A typical worker::

    queue: FairQueue[str] = FairQueue("crewlets")

    async def worker() -> None:
        while True:
            try:
                key = await queue.get()
            except QueueShutDown:
                return
            try:
                await reconcile(key)
            except Exception:
                queue.add_rate_limited(key)  # retry with backoff
            else:
                queue.forget(key)  # success: reset the key's backoff
            finally:
                queue.done(key)  # always, or the key can never run again

The queue is not thread-safe: use it from the event loop it runs on (from another thread,
go through ``loop.call_soon_threadsafe``). Nothing is bound to a loop at construction, so a
queue may be created before the loop starts.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import time
from collections import Counter, deque
from collections.abc import Callable, Hashable
from contextlib import suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, NamedTuple, TypeVar

from crewlet_operator.errors import QueueShutDown
from crewlet_operator.fairorder import FairOrder
from crewlet_operator.ratelimit import Clock, default_controller_rate_limiter

if TYPE_CHECKING:
    from crewlet_operator.metrics import WorkqueueMetrics
    from crewlet_operator.ratelimit import RateLimiter

__all__ = [
    "AGING_INTERVAL",
    "HIGH_PRIORITY",
    "LOW_PRIORITY",
    "NORMAL_PRIORITY",
    "FairQueue",
    "QueueShutDown",
]

K = TypeVar("K", bound=Hashable)

LOW_PRIORITY = -100
"""Work nobody is waiting for: an informer's initial list (controller-runtime's -100)."""
NORMAL_PRIORITY = 0
"""Creates and real changes: somebody just asked for something."""
HIGH_PRIORITY = 100
"""Work to do ahead of ordinary changes (a controller's own choice, e.g. a quick first answer)."""
AGING_INTERVAL = 0.25
"""Seconds of waiting, while the queue is served, that raise a waiting key by one priority
point: a :data:`LOW_PRIORITY` key yields to normal work for at most 25 s of service."""
MAX_PRIORITY_LABELS = 8
"""Distinct ``priority`` label values a queue reports ``workqueue_depth`` under; further ones
share the label ``other`` (a priority per request would otherwise make a series per value)."""

# Below this many delayed entries stale ones are not worth a rebuild.
_COMPACT_MIN_HEAP = 64


@dataclass(slots=True)
class _Dirty:
    """What a dirty item (queued, or re-added while processed) is wanted at."""

    priority: int
    ready: float
    """When it became ready, on the service clock: where it stands in the order."""
    added: float
    """When (on the queue's clock) this record was made: for a takeover's demotion and
    ``workqueue_queue_duration_seconds``."""


@dataclass(slots=True)
class _Delayed:
    """A delayed add: when it is due, its sequence number, and the priority it is added at."""

    at: float
    seq: int
    priority: int


class _Due(NamedTuple, Generic[K]):
    """A delayed add's entry in the timer's heap, compared as a tuple: ``seq`` breaks ties and
    never compares items. Live iff its ``seq`` is the item's :class:`_Delayed` one's."""

    at: float
    seq: int
    item: K


class FairQueue(Generic[K]):
    """A deduplicating work queue, fair between fairness keys and to old work, in priority, with
    delayed and rate-limited adds.

    :param name: The queue's name, for logs and metrics.
    :param rate_limiter: Decides the delay of :meth:`add_rate_limited`. Defaults to
        :func:`~crewlet_operator.ratelimit.default_controller_rate_limiter` (on ``clock``).
    :param metrics: Where to report the ``workqueue_*`` metrics; ``None`` reports nothing.
    :param clock: Monotonic clock in seconds, used for delays, aging and metrics; inject a fake
        one in tests (delayed items then become due when :meth:`_release_ready` runs).
    :param aging_interval: Seconds of waiting (while the queue is served) worth one priority
        point; see the module's docstring for the bound it gives.
    :param paused: Start with aging paused (:meth:`pause`): a controller's queue fills on a
        standby replica long before anything is served.
    :param urgent_priority: The lowest priority :meth:`get` with ``urgent_only`` hands out.
    :param fairness_key: The fairness key of an item (any hashable: a controller's default is
        the request's namespace): the keys take turns, see the module's docstring. It must give
        an item the same key every time (a function of the item alone: a queued item is found
        in the line its key names). ``None`` (the default) puts every item in one line.
    :param max_in_flight_per_key: The most items of one fairness key handed out at once (from
        :meth:`get` until :meth:`done`): a key at that many waits for one of them to be done,
        while the other keys are served, so one tenant's backlog never holds every worker.
        ``None`` (the default): no limit.
    """

    # How the collections keep client-go's guarantees; the queued items are those in
    # ``_order``, whose own invariants (one place an item, the lines, the lanes) are in
    # crewlet_operator/fairorder.py. Every method below preserves:
    #
    # (1) No duplicates: queued ⊆ dirty, and the order holds an item once. ``add`` pushes only
    #     an item that was not dirty (raising a queued item's priority moves it); ``get`` pops
    #     an item and clears its dirty record in the same step; ``done`` pushes only a dirty
    #     item, which cannot already be queued because of (2).
    # (2) Never two workers on one key: processing ∩ queued = ∅. ``get`` moves an item from
    #     the order into processing; ``add`` of a processing item only marks it dirty. So a
    #     processing item cannot be handed to a second getter until ``done`` runs.
    # (3) Added while processing ⇒ runs again after ``done``, exactly once: such an item is
    #     dirty but not queued; ``done`` pushes it once, further adds dedup on dirty.
    # (4) dirty \ queued == the processing items that were re-added, i.e. ⊆ processing.
    # (5) Priorities: ``_dirty`` holds each dirty item's priority and ready time. Adding a dirty
    #     item again keeps the higher priority and the earlier ready time (so a key never moves
    #     back); a queued item stands in the order where its ``_dirty`` record says.
    # (6) Aging: ready times are on the service clock, which stands still while the queue is
    #     paused, so a key's advantage for having waited grows only while the queue is served.
    #
    # Delayed items (``_waiting``/``_heap``) are outside these sets: an item may wait for a
    # timer while also queued or processing; when the timer fires it simply goes through
    # ``add`` and the rules above. Everything runs on one event loop and none of these
    # methods awaits between reading and updating the sets, so no lock is needed.

    def __init__(
        self,
        name: str,
        rate_limiter: RateLimiter[K] | None = None,
        metrics: WorkqueueMetrics | None = None,
        clock: Clock = time.monotonic,
        *,
        aging_interval: float = AGING_INTERVAL,
        paused: bool = False,
        urgent_priority: int = NORMAL_PRIORITY,
        fairness_key: Callable[[K], Hashable] | None = None,
        max_in_flight_per_key: int | None = None,
    ) -> None:
        if aging_interval <= 0:
            raise ValueError("aging_interval must be positive")
        self.name = name
        self._rate_limiter: RateLimiter[K] = (
            default_controller_rate_limiter(clock) if rate_limiter is None else rate_limiter
        )
        self._metrics = metrics
        self._clock = clock

        self._dirty: dict[K, _Dirty] = {}
        self._order: FairOrder[K] = FairOrder(
            aging_interval=aging_interval,
            urgent_priority=urgent_priority,
            fairness_key=fairness_key,
            on_keys=None if metrics is None else metrics.fairness_keys,
            max_in_flight=max_in_flight_per_key,
        )
        self._urgent_priority = urgent_priority
        self._limited = max_in_flight_per_key is not None
        self._processing: dict[K, int] = {}  # item -> the priority it was handed out with
        self._shutting_down = False
        self._drain = False  # shut_down_with_drain() in effect (shut_down() cancels it)
        self._getters: deque[asyncio.Future[None]] = deque()
        self._urgent_getters: deque[asyncio.Future[None]] = deque()  # get(urgent_only=True)
        self._drain_waiters: list[asyncio.Future[None]] = []

        # The service clock: the queue's own time, standing still while paused.
        self._paused = paused
        self._served = 0.0  # service seconds banked before the current run
        self._served_since = clock()

        # Delayed adds, plus a heap of their entries. An entry superseded by an earlier time
        # stays in the heap and is skipped when popped (cheaper than re-heapifying).
        self._waiting: dict[K, _Delayed] = {}
        self._heap: list[_Due[K]] = []
        self._seq = itertools.count()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = math.inf

        # Metrics bookkeeping, only filled when metrics are reported.
        self._start_times: dict[K, float] = {}
        self._labels: dict[int, str] = {}
        self._depth: Counter[str] = Counter()

    def __len__(self) -> int:
        """Return the number of items waiting to be handed out.

        Items re-added while being processed are not counted until :meth:`done` queues them
        (the ``workqueue_depth`` metric counts them, as in client-go).
        """
        return len(self._order)

    @property
    def idle(self) -> bool:
        """Whether nothing is queued and nothing is being processed (items waiting for a timer,
        from :meth:`add_after` or :meth:`add_rate_limited`, may still come)."""
        return not self._order and not self._processing

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} {self.name!r} queued={len(self._order)} "
            f"processing={len(self._processing)} waiting={len(self._waiting)}"
            f"{' shutting down' if self._shutting_down else ''}>"
        )

    @property
    def shutting_down(self) -> bool:
        """Whether :meth:`shut_down` or :meth:`shut_down_with_drain` has been called."""
        return self._shutting_down

    # --- the basic queue ------------------------------------------------------------------

    def add(self, item: K, priority: int = NORMAL_PRIORITY) -> None:
        """Queue ``item`` for processing at ``priority``.

        Adding an item that is already queued only raises its priority, if ``priority`` is
        higher; it keeps its place otherwise (and its ready time always). Adding an item that
        is being processed does not queue it now; it is queued when the worker calls
        :meth:`done`. After shutdown, adds are ignored.
        """
        if self._shutting_down:
            return
        held = self._dirty.get(item)
        if held is not None:
            if priority <= held.priority:
                return
            # Invariant (5): the higher priority, the earlier ready time.
            was = self._reprioritise(item, held, priority)
            if item in self._order and was < self._urgent_priority <= priority:
                self._wake_one_getter(priority)  # it is urgent now
            return
        now = self._clock()
        ready = self._served if self._paused else self._served + now - self._served_since
        self._dirty[item] = _Dirty(priority, ready, now)
        if self._metrics is not None:
            self._metrics.add()
            self._count(priority, +1)
        if item in self._processing:
            # Invariant (2): never queue an item a worker holds; done() will queue it.
            return
        self._order.push(item, priority, ready)
        self._wake_one_getter(priority)

    async def get(self, *, urgent_only: bool = False) -> K:
        """Wait for an item and hand it to the caller, who must call :meth:`done` with it.

        The item handed out is the one with the highest priority, raised by how long it has
        waited (see the module's docstring); among equals, the one ready first. With
        ``urgent_only``, only items added at ``urgent_priority`` or higher are handed out, in
        the same order. After shutdown, the items still queued (those ``urgent_only`` takes)
        are handed out; once there are none left this raises :exc:`QueueShutDown`
        (client-go's ``shutdown == true``). An item of a key at ``max_in_flight_per_key`` is not
        handed out until one of that key's items is done.

        :raises QueueShutDown: The queue is shut down and empty.
        """
        order = self._order
        getters = self._urgent_getters if urgent_only else self._getters
        while not (order.has_urgent() if urgent_only else order.has_ready()):
            if self._shutting_down:
                raise QueueShutDown(self.name)
            waiter = asyncio.get_running_loop().create_future()
            getters.append(waiter)
            try:
                await waiter
            except BaseException:
                waiter.cancel()
                with suppress(ValueError):
                    getters.remove(waiter)
                # If we were woken for an item but cancelled before taking it, pass the
                # wake-up on so the item is not stranded while another getter sleeps.
                if not waiter.cancelled():
                    self._pass_wake_up()
                raise
        item = order.pop(self._service_now(), urgent_only=urgent_only)
        taken = self._dirty.pop(item)
        self._processing[item] = taken.priority
        if self._metrics is not None:
            self._count(taken.priority, -1)
            now = self._clock()
            self._metrics.queue_duration(now - taken.added)
            self._start_times[item] = now
        return item

    def done(self, item: K) -> None:
        """Mark ``item`` as no longer being processed.

        If it was added again meanwhile, it is queued now, at the priority and ready time of
        those adds. Calling this for an item that is not being processed does nothing
        (client-go would queue a duplicate).
        """
        if self._processing.pop(item, None) is None:
            return
        if self._limited and self._order.finished(item):  # its key may be served again
            self._pass_wake_up()
        if self._metrics is not None:
            started = self._start_times.pop(item, None)
            if started is not None:
                self._metrics.work_duration(self._clock() - started)
        again = self._dirty.get(item)
        if again is not None:
            # Invariant (3): it was re-added while processing and is not queued yet (2).
            self._order.push(item, again.priority, again.ready)
            self._wake_one_getter(again.priority)
        if not self._processing:
            self._wake_drain_waiters()

    def demote_added_before(self, moment: float, priority: int = LOW_PRIORITY) -> None:
        """Lower to ``priority`` every waiting item added before ``moment`` (on the queue's
        clock), keeping its ready time; items added since keep theirs.

        For a replica that takes over: what its informers saw while the previous leader was
        alive is that leader's work, to be checked again after what it may have missed.
        """
        for item, held in self._dirty.items():
            if held.added < moment and held.priority > priority:
                self._reprioritise(item, held, priority)

    def _reprioritise(self, item: K, held: _Dirty, priority: int) -> int:
        """Give ``item`` (dirty, as ``held``) ``priority``, in the counts and in the order if it
        waits there; the priority it had."""
        was, held.priority = held.priority, priority
        if self._metrics is not None:
            self._count(was, -1)
            self._count(priority, +1)
        if item in self._order:
            self._order.move(item, priority, held.ready)
        return was

    def pending(self) -> set[K]:
        """The items waiting to be handed out: queued, or re-added while being processed."""
        return set(self._dirty)

    def unsettled(self) -> set[K]:
        """Every item the queue still has work for: waiting, being processed, or due after a
        delay (a requeue, a backoff)."""
        return set(self._dirty) | set(self._processing) | set(self._waiting)

    def priority_of(self, item: K) -> int | None:
        """The priority ``item`` holds: the one it was added with if it is queued or re-added,
        else the one it was handed out with while it is processed; None for any other item."""
        held = self._dirty.get(item)
        if held is not None:
            return held.priority
        return self._processing.get(item)

    # --- aging ----------------------------------------------------------------------------

    def pause(self) -> None:
        """Stop the service clock: keys that wait now do not age, and keep their order by
        priority. For a queue that fills while nothing is served (a standby replica's)."""
        if not self._paused:
            self._served = self._service_now()
            self._paused = True

    def resume(self) -> None:
        """Start the service clock again (it runs from construction unless ``paused``)."""
        if self._paused:
            self._served_since = self._clock()
            self._paused = False

    def _service_now(self) -> float:
        if self._paused:
            return self._served
        return self._served + self._clock() - self._served_since

    def _count(self, priority: int, delta: int) -> None:
        """Keep ``workqueue_depth{priority}``: the dirty items of each priority label."""
        if self._metrics is None:
            return
        label = self._labels.get(priority)
        if label is None:
            label = str(priority) if len(self._labels) < MAX_PRIORITY_LABELS else "other"
            self._labels[priority] = label
        self._depth[label] += delta
        self._metrics.depth(label, self._depth[label])

    # --- shutdown -------------------------------------------------------------------------

    def shut_down(self) -> None:
        """Stop the queue now.

        Later adds are ignored, delayed items are dropped, and waiting getters wake up:
        they receive the items still queued (but those of a key at ``max_in_flight_per_key``),
        then :exc:`QueueShutDown`. A drain in progress (:meth:`drain`,
        :meth:`shut_down_with_drain`) stops waiting and returns.
        """
        self._drain = False
        self._begin_shutdown()
        self._wake_drain_waiters()

    async def shut_down_with_drain(self) -> None:
        """Stop the queue like :meth:`shut_down`, then wait for in-flight items.

        Returns once every item handed out by :meth:`get` has been passed to :meth:`done`,
        so workers can finish what they started. A later :meth:`shut_down` makes it return
        early. Items still queued are not waited for.
        """
        self._drain = True
        self._begin_shutdown()
        await self.drain()

    async def drain(self) -> None:
        """Wait until no item is being processed.

        Returns at once if nothing is in flight. Does not stop new work by itself: on a live
        queue, workers may keep picking up items. :meth:`shut_down` makes it return early.
        """
        loop = asyncio.get_running_loop()
        while self._processing and not (self._shutting_down and not self._drain):
            waiter = loop.create_future()
            self._drain_waiters.append(waiter)
            try:
                await waiter
            finally:
                with suppress(ValueError):
                    self._drain_waiters.remove(waiter)

    def _begin_shutdown(self) -> None:
        self._shutting_down = True
        # Pending delayed items are dropped: their adds would be ignored anyway.
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_at = math.inf
        self._waiting.clear()
        self._heap.clear()
        # Wake every getter: each takes a remaining item or raises QueueShutDown.
        for getters in (self._getters, self._urgent_getters):
            while getters:
                getter = getters.popleft()
                if not getter.done():
                    getter.set_result(None)

    def _wake_one_getter(self, priority: int) -> None:
        """Wake a getter for an item just queued at ``priority``: an urgent one first if the
        item is urgent (the other getters are then left for the rest of the queue)."""
        if priority >= self._urgent_priority and self._wake(self._urgent_getters):
            return
        self._wake(self._getters)

    def _pass_wake_up(self) -> None:
        """Wake a getter for an item that may be handed out now, an urgent getter first: what a
        cancelled getter was woken for, or a key's next item once the key is below its limit."""
        if self._order.has_urgent() and self._wake(self._urgent_getters):
            return
        if self._order.has_ready():
            self._wake(self._getters)

    @staticmethod
    def _wake(getters: deque[asyncio.Future[None]]) -> bool:
        while getters:
            getter = getters.popleft()
            if not getter.done():
                getter.set_result(None)
                return True
        return False

    def _wake_drain_waiters(self) -> None:
        for waiter in self._drain_waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._drain_waiters.clear()

    # --- delayed adds ---------------------------------------------------------------------

    def add_after(self, item: K, delay: float, priority: int | None = None) -> None:
        """Add ``item`` once ``delay`` seconds have passed, at ``priority`` (by default the one
        it holds now, see :meth:`priority_of`, else :data:`NORMAL_PRIORITY`: a requeue keeps
        its priority unless told).

        A ``delay`` of zero or less adds it now. If the item is already waiting, the earlier
        of the two ready times and the higher priority win. An immediate :meth:`add` does not
        cancel a pending delayed add (as in client-go); the later add is then usually
        deduplicated or causes one extra, harmless reconcile. Must be called with the event
        loop running. Counts towards ``workqueue_retries_total``, as client-go's ``AddAfter``
        does.
        """
        if self._shutting_down:
            return
        if self._metrics is not None:
            self._metrics.retry()
        if priority is None:
            held = self.priority_of(item)
            priority = NORMAL_PRIORITY if held is None else held
        if delay <= 0:
            self.add(item, priority)
            return
        ready_at = self._clock() + delay
        current = self._waiting.get(item)
        if current is not None:
            priority = max(priority, current.priority)
            if current.at <= ready_at:
                current.priority = priority
                return  # keep the earlier time
        seq = next(self._seq)
        self._waiting[item] = _Delayed(ready_at, seq, priority)
        heapq.heappush(self._heap, _Due(ready_at, seq, item))
        if len(self._heap) > _COMPACT_MIN_HEAP and len(self._heap) > 2 * len(self._waiting):
            self._heap = [_Due(held.at, held.seq, it) for it, held in self._waiting.items()]
            heapq.heapify(self._heap)
        self._arm_timer()

    def _next_ready_at(self) -> float | None:
        """Return the earliest live ready time, discarding superseded heap entries."""
        heap = self._heap
        while heap:
            due = heap[0]
            held = self._waiting.get(due.item)
            if held is not None and held.seq == due.seq:  # the seq is unique: so is the time
                return due.at
            heapq.heappop(heap)
        return None

    def _arm_timer(self) -> None:
        # One loop timer for the whole heap, aimed at its head: 10k delayed items cost one
        # handle, not 10k tasks.
        head = self._next_ready_at()
        if head is None:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self._timer_at = math.inf
            return
        if self._timer is not None and self._timer_at <= head:
            return  # already due no later than the head
        if self._timer is not None:
            self._timer.cancel()
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(max(0.0, head - self._clock()), self._on_timer)
        self._timer_at = head

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = math.inf
        self._release_ready()

    def _release_ready(self) -> None:
        """Add every delayed item whose time has come and re-aim the timer.

        The loop timer calls this; tests with a fake clock call it after advancing the
        clock. Items due at the same time are added in the order their time was set.
        """
        now = self._clock()
        while (ready_at := self._next_ready_at()) is not None and ready_at <= now:
            item = heapq.heappop(self._heap).item
            self.add(item, self._waiting.pop(item).priority)
        self._arm_timer()

    # --- rate limiting --------------------------------------------------------------------

    def add_rate_limited(self, item: K, priority: int | None = None) -> float:
        """Add ``item`` after the delay the rate limiter asks for (this records a failure), at
        ``priority`` (by default the one it holds now, as :meth:`add_after`); return that delay
        in seconds (0 after shutdown, when nothing is added)."""
        if self._shutting_down:
            return 0.0
        delay = self._rate_limiter.when(item)
        self.add_after(item, delay, priority)
        return delay

    def forget(self, item: K) -> None:
        """Tell the rate limiter ``item`` succeeded, resetting its backoff.

        This does not remove the item from the queue.
        """
        self._rate_limiter.forget(item)

    def num_requeues(self, item: K) -> int:
        """Return how many rate-limited retries of ``item`` the limiter is tracking."""
        return self._rate_limiter.num_requeues(item)

    # --- metrics --------------------------------------------------------------------------

    def update_unfinished_work(self) -> None:
        """Refresh ``workqueue_unfinished_work_seconds`` and ``..._longest_running_...``.

        client-go samples these every 500 ms rather than on every get/done; call this
        periodically (or run :meth:`unfinished_work_loop`). Does nothing without metrics.
        """
        if self._metrics is not None:
            self._metrics.update_unfinished_work(self._start_times.values(), self._clock())

    async def unfinished_work_loop(self, period: float = 0.5) -> None:
        """Call :meth:`update_unfinished_work` every ``period`` seconds until shutdown.

        Meant to run as a background task next to the workers::

            task = asyncio.create_task(queue.unfinished_work_loop())
        """
        while not self._shutting_down:
            self.update_unfinished_work()
            await asyncio.sleep(period)
        self.update_unfinished_work()
