"""The fair queue's order: which waiting item a worker gets next, without a clock or a loop.

:class:`~crewlet_operator.workqueue.FairQueue` decides *whether* an item waits (deduplication,
the items being processed, delays, shutdown) and on which clock; :class:`FairOrder` holds the
items that wait and says which comes next. Its whole interface is what the queue needs:
:meth:`~FairOrder.push` places an item, :meth:`~FairOrder.move` moves one
to another priority; :meth:`~FairOrder.pop` takes the next one; ``len()`` and ``in`` say what waits;
:meth:`~FairOrder.has_urgent` whether an urgent item does. Times are the caller's (the queue's
service clock, which stands still while it is paused), and nothing here awaits.

The order. Every item has a **priority** and a **ready** time. Within a fairness key's *line*,
items come out by the smallest *rank*, ``ready - priority * aging_interval`` (ties: the earlier
ready, then the earlier push): ordering by that fixed number is ordering by priority raised one
point for every ``aging_interval`` waited, without re-sorting as time passes, so no item starves.
Between lines, a line is ranked by its first item, as if that item became ready no earlier than
the line was last served (while it had items waiting), then by how long ago that was: once
served, a line goes behind every other line waiting at the same priority, so the lines of a
priority take turns, and aging works between lines as within one. Without a ``fairness_key``
every item is in one line: the order within a line alone. An item pushed at ``urgent_priority``
or higher is also in the *urgent lane*, which ``pop(urgent_only=True)`` serves in the same order;
its own priority decides, not its aged one.

With ``max_in_flight`` (per fairness key), a key whose items handed out and not yet
:meth:`~FairOrder.finished` reach that many is *parked*: its line keeps its items and its place
but takes no turn in either lane until one of them is finished, so one tenant never holds more
than that many workers, whatever its backlog (controller-runtime#3257 asks for this per
namespace). Without it nothing is parked.

How it is kept (every method preserves these):

(a) Places: every item in the order has one :class:`_Place`, in ``_places``; its ``seq`` is the
    sequence number of its one *live* entry. An entry whose number is not its place's ``seq``
    is stale (its item moved, or was popped) and is skipped where it surfaces.
(b) Lines: every placed item is in the line of its fairness key, whose ``size`` counts them;
    ``_lines`` holds exactly the lines with an item (an emptied line is dropped, its turn with
    it, and ``on_keys`` is told the new count).
(c) Lanes: a live entry of priority >= ``urgent_priority`` is in both heaps of its line (its
    :class:`_Track` of each lane), any other only in the track of the every-item lane; so an
    entry is live in one iff in the other.
(d) Heads: the top of each track's heap is live (stale entries are dropped as they reach it,
    and a heap is rebuilt once over half of it is stale), and ``track.turn`` is the track's one
    live entry in its lane's heap of :class:`_Turn`\\ s, made from that top and the line's last
    service; None iff the heap is empty. Whatever may change a line's top or last service (an
    entry pushed ahead of the top, an item moved, one popped) calls ``_refresh``, which restores
    this; an item pushed behind the top changes neither.
(e) Turns: ``pop`` takes the smallest live turn of its lane and the top of that track; the
    line's ``served`` and ``handout`` become the service time and the hand-out count of that
    moment (-inf and -1 for a line not yet served).
(f) In flight: ``_in_flight`` counts each key's items popped and not finished (a key at zero
    has no entry); a line is ``parked`` iff its key's count is at ``max_in_flight``, and a
    parked line's tracks have no turn (so neither lane serves it; (d) holds for the others).
    ``pop`` and ``finished`` change a count, ``push`` makes a line parked from the start.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Hashable
from typing import Generic, NamedTuple, TypeVar

__all__ = ["FairOrder"]

K = TypeVar("K", bound=Hashable)

_COMPACT_MIN_HEAP = 64
"""Below this many entries a heap's stale ones are not worth a rebuild."""


class _Place(Generic[K]):
    """An item in the order: its line, and the sequence number of its live entry (-1 once
    popped: every entry left of it is stale)."""

    __slots__ = ("item", "line", "seq")

    def __init__(self, item: K, line: _Line[K]) -> None:
        self.item = item
        self.line = line
        self.seq = -1


class _Entry(NamedTuple, Generic[K]):
    """An item's entry in its line's heaps, compared as a tuple: ``seq`` is unique, so
    ``place`` is never compared."""

    rank: float
    """``ready - priority * aging_interval``: the smaller, the sooner."""
    ready: float
    seq: int
    place: _Place[K]


class _Turn(NamedTuple, Generic[K]):
    """A line's entry in a lane's heap, compared as a tuple: ``number`` is unique, so ``track``
    is never compared."""

    rank: float
    """The line's first item's rank, raised by how much later than its ready time the line was
    last served."""
    handout: int
    """The line's ``handout``: among equals, the line served longest ago first."""
    ready: float
    """The first item's ready time, then its sequence number: as within a line."""
    seq: int
    number: int
    track: _Track[K]


class _Track(Generic[K]):
    """A line's items in one lane: a heap of their entries, and the line's live turn in the
    lane's heap (None while the heap is empty)."""

    __slots__ = ("heap", "lane", "line", "turn")

    def __init__(self, line: _Line[K], lane: list[_Turn[K]]) -> None:
        self.line = line
        self.lane = lane
        self.heap: list[_Entry[K]] = []
        self.turn: _Turn[K] | None = None


class _Line(Generic[K]):
    """The items of one fairness key, and when the key was last served."""

    __slots__ = ("every", "handout", "key", "parked", "served", "size", "tracks", "urgent")

    def __init__(self, key: Hashable, every: list[_Turn[K]], urgent: list[_Turn[K]]) -> None:
        self.key = key
        self.parked = False
        """Its key has ``max_in_flight`` items handed out: it takes no turn (invariant (f))."""
        self.every = _Track(self, every)
        self.urgent = _Track(self, urgent)
        self.tracks = (self.every, self.urgent)
        self.size = 0
        self.served = -math.inf
        """The service time of its last hand-out."""
        self.handout = -1
        """The order's hand-out count at its last hand-out."""


class FairOrder(Generic[K]):
    """The waiting items of a fair queue, in its order (see the module's docstring).

    :param aging_interval: Seconds of waiting worth one priority point.
    :param urgent_priority: The lowest priority :meth:`pop` with ``urgent_only`` hands out.
    :param fairness_key: The fairness key of an item, the same every time; ``None`` puts every
        item in one line.
    :param on_keys: Called with the number of fairness keys with items, whenever it changes.
    :param max_in_flight: The most items of one fairness key handed out and not yet
        :meth:`finished`; ``None`` (the default): no limit.
    """

    def __init__(
        self,
        *,
        aging_interval: float,
        urgent_priority: int,
        fairness_key: Callable[[K], Hashable] | None = None,
        on_keys: Callable[[int], None] | None = None,
        max_in_flight: int | None = None,
    ) -> None:
        if max_in_flight is not None and max_in_flight < 1:
            raise ValueError("max_in_flight must be at least 1")
        self._max_in_flight = max_in_flight
        self._in_flight: dict[Hashable, int] = {}  # fairness key -> its items handed out
        self._aging = aging_interval
        self._urgent_priority = urgent_priority
        self._fairness = fairness_key
        self._on_keys = on_keys
        self._places: dict[K, _Place[K]] = {}
        self._lines: dict[Hashable, _Line[K]] = {}  # fairness key -> its line
        self._every: list[_Turn[K]] = []  # the lines' turns in the every-item lane
        self._urgent: list[_Turn[K]] = []  # ... and in the urgent lane
        self._seq = itertools.count()
        self._handouts = itertools.count()

    def __len__(self) -> int:
        return len(self._places)

    def __contains__(self, item: object) -> bool:
        return item in self._places

    def push(self, item: K, priority: int, ready: float) -> None:
        """Place ``item``, which is not in the order, at ``priority``, ready at ``ready``."""
        key = None if self._fairness is None else self._fairness(item)
        line = self._lines.get(key)
        if line is None:
            line = self._lines[key] = _Line(key, self._every, self._urgent)
            if self._max_in_flight is not None:
                line.parked = self._at_limit(key)
            if self._on_keys is not None:
                self._on_keys(len(self._lines))
        line.size += 1
        place = self._places[item] = _Place(item, line)
        self._enter(place, priority, ready, moved=False)

    def move(self, item: K, priority: int, ready: float) -> None:
        """Move ``item``, which is in the order, to ``priority`` and ``ready`` (up or down),
        in its line."""
        self._enter(self._places[item], priority, ready, moved=True)

    def pop(self, now: float, *, urgent_only: bool = False) -> K:
        """Take the next item (invariant (e)), served at ``now``; with ``urgent_only``, the next
        urgent one. There must be one (``len``, :meth:`has_urgent`)."""
        lane = self._urgent if urgent_only else self._every
        while True:
            turn = heapq.heappop(lane)
            track = turn.track
            if track.turn is turn:
                break
        place = heapq.heappop(track.heap).place
        del self._places[place.item]
        place.seq = -1  # its entry in the other lane, if any, is stale from now on
        line = place.line
        line.size -= 1
        if self._max_in_flight is not None:  # invariant (f)
            self._in_flight[line.key] = self._in_flight.get(line.key, 0) + 1
            line.parked = self._at_limit(line.key)
        if line.size:
            line.served = now
            line.handout = next(self._handouts)
            self._refresh(line)
        else:  # invariant (b): an empty line is dropped, its turn with it
            del self._lines[line.key]
            for emptied in line.tracks:
                emptied.turn = None
                emptied.heap.clear()  # stale entries only
            if self._on_keys is not None:
                self._on_keys(len(self._lines))
        return place.item

    def finished(self, item: K) -> bool:
        """Count ``item``, popped earlier, as no longer handed out (invariant (f)): whether
        that unparked its key's line, which may then be served."""
        if self._max_in_flight is None:
            return False
        key = None if self._fairness is None else self._fairness(item)
        left = self._in_flight.get(key, 0) - 1
        if left > 0:
            self._in_flight[key] = left
        else:
            self._in_flight.pop(key, None)
        line = self._lines.get(key)
        if line is None or not line.parked:
            return False
        line.parked = False
        self._refresh(line)
        return True

    def has_urgent(self) -> bool:
        """Whether an urgent item may be popped (dropping the stale turns on top of its lane)."""
        return self._has_turn(self._urgent)

    def has_ready(self) -> bool:
        """Whether any item may be popped: one waits, in a line not parked."""
        if self._max_in_flight is None:  # no line is ever parked: every one has its turn
            return bool(self._places)
        return self._has_turn(self._every)

    @staticmethod
    def _has_turn(lane: list[_Turn[K]]) -> bool:
        while lane and lane[0].track.turn is not lane[0]:
            heapq.heappop(lane)
        return bool(lane)

    def _at_limit(self, key: Hashable) -> bool:
        limit = self._max_in_flight
        return limit is not None and self._in_flight.get(key, 0) >= limit

    def _enter(self, place: _Place[K], priority: int, ready: float, *, moved: bool) -> None:
        """Give ``place`` its live entry (a moved item's previous one goes stale)."""
        line = place.line
        seq = place.seq = next(self._seq)
        entry = _Entry(ready - priority * self._aging, ready, seq, place)
        every, urgent = line.every.heap, line.urgent.heap
        heapq.heappush(every, entry)
        if priority >= self._urgent_priority:  # invariant (c)
            heapq.heappush(urgent, entry)
        # An item behind its line's first changes nothing of (d): the turns stay live.
        if moved or every[0] is entry or (urgent and urgent[0] is entry):
            self._refresh(line)

    def _refresh(self, line: _Line[K]) -> None:
        """Restore invariant (d) for ``line``, whose entries or last service just changed."""
        for track in line.tracks:
            heap = track.heap
            if len(heap) > _COMPACT_MIN_HEAP and len(heap) > 2 * line.size:
                heap[:] = [entry for entry in heap if entry.place.seq == entry.seq]
                heapq.heapify(heap)
            while heap and heap[0].place.seq != heap[0].seq:
                heapq.heappop(heap)
            if not heap or line.parked:  # invariant (f): a parked line takes no turn
                track.turn = None
                continue
            head = heap[0]
            turn = track.turn
            if turn is not None and turn.seq == head.seq and turn.handout == line.handout:
                continue  # still the line's turn
            raised = head.rank + max(0.0, line.served - head.ready)
            turn = _Turn(raised, line.handout, head.ready, head.seq, next(self._seq), track)
            track.turn = turn
            lane = track.lane
            heapq.heappush(lane, turn)
            if len(lane) > _COMPACT_MIN_HEAP and len(lane) > 2 * len(self._lines):
                lane[:] = [held for held in lane if held.track.turn is held]
                heapq.heapify(lane)
