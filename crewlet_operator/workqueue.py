"""The work queue that feeds keys to reconcile workers.

An asyncio port of client-go's ``util/workqueue`` (``queue.go``, ``delaying_queue.go`` and
``rate_limiting_queue.go``) with the same guarantees: a key is queued at most once however
often it is added, a key is never handed to two workers at the same time, and a key added
while it is being worked on is worked on again once the worker is done. A typical worker::

    queue: RateLimitingQueue[str] = RateLimitingQueue("crewlets")

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
from collections import deque
from collections.abc import Hashable
from contextlib import suppress
from typing import TYPE_CHECKING, Generic, TypeVar

from crewlet_operator.errors import QueueShutDown
from crewlet_operator.ratelimit import Clock, default_controller_rate_limiter

if TYPE_CHECKING:
    from crewlet_operator.metrics import WorkqueueMetrics
    from crewlet_operator.ratelimit import RateLimiter

__all__ = ["QueueShutDown", "RateLimitingQueue"]

K = TypeVar("K", bound=Hashable)

# Below this many heap entries stale ones are not worth a rebuild.
_COMPACT_MIN_HEAP = 64


class RateLimitingQueue(Generic[K]):
    """A deduplicating FIFO work queue with delayed and rate-limited adds.

    :param name: The queue's name, for logs and metrics.
    :param rate_limiter: Decides the delay of :meth:`add_rate_limited`. Defaults to
        :func:`~crewlet_operator.ratelimit.default_controller_rate_limiter` (on ``clock``).
    :param metrics: Where to report the ``workqueue_*`` metrics; ``None`` reports nothing.
    :param clock: Monotonic clock in seconds, used for delays and metrics; inject a fake
        one in tests (delayed items then become due when :meth:`_release_ready` runs).
    """

    # How the three collections keep client-go's guarantees. Every method below preserves:
    #
    # (1) No duplicates: an item appears in ``_queue`` at most once, and queue ⊆ dirty.
    #     ``add`` appends only an item that was not dirty and marks it dirty; ``get`` pops
    #     and clears dirty in the same step; ``done`` appends only a dirty item, which
    #     cannot already be queued because of (2).
    # (2) Never two workers on one key: processing ∩ queue = ∅. ``get`` moves an item from
    #     the queue into processing; ``add`` of a processing item only marks it dirty. So a
    #     processing item cannot be handed to a second getter until ``done`` runs.
    # (3) Added while processing ⇒ runs again after ``done``, exactly once: such an item is
    #     dirty but not queued; ``done`` appends it once, further adds dedup on dirty.
    # (4) dirty ∩ queue == queue, and dirty \ queue == the processing items that were
    #     re-added, i.e. dirty \ queue ⊆ processing.
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
    ) -> None:
        self.name = name
        self._rate_limiter: RateLimiter[K] = (
            default_controller_rate_limiter(clock) if rate_limiter is None else rate_limiter
        )
        self._metrics = metrics
        self._clock = clock

        self._queue: deque[K] = deque()  # FIFO order of items ready to be handed out
        self._dirty: set[K] = set()  # items that need processing
        self._processing: set[K] = set()  # items handed out and not yet done()
        self._shutting_down = False
        self._drain = False  # shut_down_with_drain() in effect (shut_down() cancels it)
        self._getters: deque[asyncio.Future[None]] = deque()
        self._drain_waiters: list[asyncio.Future[None]] = []

        # Delayed adds: item -> (ready time, sequence) plus a heap of the same entries. An
        # entry superseded by an earlier time stays in the heap and is skipped when popped
        # (cheaper than re-heapifying); the sequence breaks ties and never compares items.
        self._waiting: dict[K, tuple[float, int]] = {}
        self._heap: list[tuple[float, int, K]] = []
        self._seq = itertools.count()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = math.inf

        # Metrics bookkeeping, only filled when metrics are reported.
        self._add_times: dict[K, float] = {}
        self._start_times: dict[K, float] = {}

    def __len__(self) -> int:
        """Return the number of items waiting in the FIFO to be handed out.

        Items re-added while being processed are not counted until :meth:`done` queues them
        (the ``workqueue_depth`` metric counts them, as in client-go).
        """
        return len(self._queue)

    @property
    def idle(self) -> bool:
        """Whether nothing is queued and nothing is being processed (items waiting for a timer,
        from :meth:`add_after` or :meth:`add_rate_limited`, may still come)."""
        return not self._queue and not self._processing

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} {self.name!r} queued={len(self._queue)} "
            f"processing={len(self._processing)} waiting={len(self._waiting)}"
            f"{' shutting down' if self._shutting_down else ''}>"
        )

    @property
    def shutting_down(self) -> bool:
        """Whether :meth:`shut_down` or :meth:`shut_down_with_drain` has been called."""
        return self._shutting_down

    # --- the basic queue ------------------------------------------------------------------

    def add(self, item: K) -> None:
        """Queue ``item`` for processing.

        Adding an item that is already queued does nothing. Adding an item that is being
        processed does not queue it now; it is queued when the worker calls :meth:`done`.
        After shutdown, adds are ignored.
        """
        if self._shutting_down or item in self._dirty:
            return
        self._dirty.add(item)
        if self._metrics is not None:
            self._metrics.add()
            self._metrics.depth(len(self._dirty))
            self._add_times.setdefault(item, self._clock())
        if item in self._processing:
            # Invariant (2): never queue an item a worker holds; done() will queue it.
            return
        self._queue.append(item)
        self._wake_one_getter()

    async def get(self) -> K:
        """Wait for an item and hand it to the caller, who must call :meth:`done` with it.

        After shutdown, the items still queued are handed out; once there are none left
        this raises :exc:`QueueShutDown` (client-go's ``shutdown == true``).

        :raises QueueShutDown: The queue is shut down and empty.
        """
        while not self._queue:
            if self._shutting_down:
                raise QueueShutDown(self.name)
            waiter = asyncio.get_running_loop().create_future()
            self._getters.append(waiter)
            try:
                await waiter
            except BaseException:
                waiter.cancel()
                with suppress(ValueError):
                    self._getters.remove(waiter)
                # If we were woken for an item but cancelled before taking it, pass the
                # wake-up on so the item is not stranded while another getter sleeps.
                if self._queue and not waiter.cancelled():
                    self._wake_one_getter()
                raise
        item = self._queue.popleft()
        self._processing.add(item)
        self._dirty.discard(item)
        if self._metrics is not None:
            now = self._clock()
            self._metrics.depth(len(self._dirty))
            added = self._add_times.pop(item, None)
            if added is not None:
                self._metrics.queue_duration(now - added)
            self._start_times[item] = now
        return item

    def done(self, item: K) -> None:
        """Mark ``item`` as no longer being processed.

        If it was added again meanwhile, it is queued now. Calling this for an item that is
        not being processed does nothing (client-go would queue a duplicate).
        """
        if item not in self._processing:
            return
        self._processing.remove(item)
        if self._metrics is not None:
            started = self._start_times.pop(item, None)
            if started is not None:
                self._metrics.work_duration(self._clock() - started)
        if item in self._dirty:
            # Invariant (3): it was re-added while processing and is not queued yet (2).
            self._queue.append(item)
            self._wake_one_getter()
        if not self._processing:
            self._wake_drain_waiters()

    # --- shutdown -------------------------------------------------------------------------

    def shut_down(self) -> None:
        """Stop the queue now.

        Later adds are ignored, delayed items are dropped, and waiting getters wake up:
        they receive the items still queued, then :exc:`QueueShutDown`. A drain in progress
        (:meth:`drain`, :meth:`shut_down_with_drain`) stops waiting and returns.
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
        while self._getters:
            getter = self._getters.popleft()
            if not getter.done():
                getter.set_result(None)

    def _wake_one_getter(self) -> None:
        while self._getters:
            getter = self._getters.popleft()
            if not getter.done():
                getter.set_result(None)
                return

    def _wake_drain_waiters(self) -> None:
        for waiter in self._drain_waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._drain_waiters.clear()

    # --- delayed adds ---------------------------------------------------------------------

    def add_after(self, item: K, delay: float) -> None:
        """Add ``item`` once ``delay`` seconds have passed.

        A ``delay`` of zero or less adds it now. If the item is already waiting, the earlier
        of the two ready times wins. An immediate :meth:`add` does not cancel a pending
        delayed add (as in client-go); the later add is then usually deduplicated or causes
        one extra, harmless reconcile. Must be called with the event loop running.
        Counts towards ``workqueue_retries_total``, as client-go's ``AddAfter`` does.
        """
        if self._shutting_down:
            return
        if self._metrics is not None:
            self._metrics.retry()
        if delay <= 0:
            self.add(item)
            return
        ready_at = self._clock() + delay
        current = self._waiting.get(item)
        if current is not None and current[0] <= ready_at:
            return  # keep the earlier time
        seq = next(self._seq)
        self._waiting[item] = (ready_at, seq)
        heapq.heappush(self._heap, (ready_at, seq, item))
        if len(self._heap) > _COMPACT_MIN_HEAP and len(self._heap) > 2 * len(self._waiting):
            self._heap = [(at, s, it) for it, (at, s) in self._waiting.items()]
            heapq.heapify(self._heap)
        self._arm_timer()

    def _next_ready_at(self) -> float | None:
        """Return the earliest live ready time, discarding superseded heap entries."""
        heap = self._heap
        while heap:
            ready_at, seq, item = heap[0]
            if self._waiting.get(item) == (ready_at, seq):
                return ready_at
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
            _, _, item = heapq.heappop(self._heap)
            del self._waiting[item]
            self.add(item)
        self._arm_timer()

    # --- rate limiting --------------------------------------------------------------------

    def add_rate_limited(self, item: K) -> None:
        """Add ``item`` after the delay the rate limiter asks for (this records a failure)."""
        if self._shutting_down:
            return
        self.add_after(item, self._rate_limiter.when(item))

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
