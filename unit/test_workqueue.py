"""The work queue's guarantees: dedup, priorities with aging (no starvation), FIFO among
equals, fairness keys taking turns, one worker per key, delays, shutdown, metrics."""

from __future__ import annotations

import asyncio
import itertools
import math
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pytest
from fakes import FakeClock, RecordingLimiter
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import generate_latest

from crewlet_operator.metrics import REGISTRY, WorkqueueMetrics
from crewlet_operator.ratelimit import ItemExponentialFailureRateLimiter
from crewlet_operator.workqueue import (
    AGING_INTERVAL,
    HIGH_PRIORITY,
    LOW_PRIORITY,
    NORMAL_PRIORITY,
    FairQueue,
    QueueShutDown,
)

_names = itertools.count()
T = TypeVar("T")


def unique(prefix: str) -> str:
    """A queue name no other test uses, so metric series never mix between tests."""
    return f"{prefix}-{next(_names)}"


async def get_soon(queue: FairQueue[T], timeout: float = 1.0) -> T:
    return await asyncio.wait_for(queue.get(), timeout)


async def assert_nothing_to_get(queue: FairQueue[str]) -> None:
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(queue.get(), 0.01)


async def settle(rounds: int = 5) -> None:
    for _ in range(rounds):
        await asyncio.sleep(0)


def check_invariants(queue: FairQueue[Any]) -> None:
    """The invariants documented in workqueue.py and fairorder.py, read off the internals
    (the queue's (1)-(6), the order's (a)-(e))."""
    order = queue._order
    live = [
        (entry, line)
        for line in order._lines.values()
        for entry in line.every.heap
        if entry.place.seq == entry.seq
    ]
    queued = [entry.place.item for entry, _ in live]
    assert len(queued) == len(set(queued)), f"duplicate in queue: {queued}"  # (1)
    assert set(queued) == set(order._places)  # (1), (a): every queued item has one live entry
    assert all(order._places[entry.place.item] is entry.place for entry, _ in live)  # (a)
    assert set(queued) <= set(queue._dirty)  # (1), (4)
    assert not set(queued) & set(queue._processing)  # (2)
    assert set(queue._dirty) - set(queued) <= set(queue._processing)  # (3), (4)
    # Each dirty item's add time is a field of its record: one for each, by construction.
    for entry, line in live:  # (5): the live entry is the dirty record's, ranked as the order says
        held = queue._dirty[entry.place.item]
        assert entry.ready == held.ready
        assert entry.rank == pytest.approx(held.ready - held.priority * order._aging)
        item = entry.place.item
        fairness = None if order._fairness is None else order._fairness(item)
        assert order._lines[fairness] is line is entry.place.line  # (b): in its key's line
    urgent = {
        entry.place.item
        for line in order._lines.values()
        for entry in line.urgent.heap
        if entry.place.seq == entry.seq
    }
    assert urgent == {  # (c): the urgent lane holds exactly the urgent queued items
        item for item in order._places if queue._dirty[item].priority >= order._urgent_priority
    }
    if order._max_in_flight is not None:  # (f): each key's count is its items being processed
        handed_out: dict[object, int] = {}
        for item in queue._processing:
            fairness = None if order._fairness is None else order._fairness(item)
            handed_out[fairness] = handed_out.get(fairness, 0) + 1
        assert order._in_flight == handed_out
    for fairness, line in order._lines.items():  # (b), (d), (f)
        assert line.key == fairness
        assert line.size == sum(1 for _, held in live if held is line) > 0
        assert line.every.lane is order._every
        assert line.urgent.lane is order._urgent
        assert line.parked == order._at_limit(fairness)
        for track in line.tracks:
            turn = track.turn
            if line.parked or not any(entry.place.seq == entry.seq for entry in track.heap):
                assert turn is None
                continue
            head = track.heap[0]
            assert head.place.seq == head.seq  # the top is live
            assert turn is not None
            raised = head.rank + max(0.0, line.served - head.ready)
            assert (turn.rank, turn.handout, turn.ready, turn.seq) == (
                raised,
                line.handout,
                head.ready,
                head.seq,
            )
            assert turn.track is track
            assert turn in track.lane
    for lane in (order._every, order._urgent):  # (d): a lane's live turns are the tracks'
        turns = [turn for turn in lane if turn.track.turn is turn]
        assert len(turns) == len({id(turn.track.line) for turn in turns})
        assert all(order._lines.get(turn.track.line.key) is turn.track.line for turn in turns)


def sample(metric: str, name: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(metric, {"name": name, "controller": "ctl", **labels})


# --- basic queue ------------------------------------------------------------------------------


async def test_add_deduplicates_queued_items() -> None:
    queue = FairQueue[str]("dedup")
    for item in ["a", "a", "b", "a", "b"]:
        queue.add(item)
    assert len(queue) == 2
    check_invariants(queue)
    assert await get_soon(queue) == "a"
    assert await get_soon(queue) == "b"
    assert len(queue) == 0
    await assert_nothing_to_get(queue)


async def test_items_come_out_in_fifo_order() -> None:
    queue = FairQueue[str]("fifo")
    items = [f"k{i}" for i in range(20)]
    for item in items:
        queue.add(item)
    assert [await get_soon(queue) for _ in items] == items


async def test_get_waits_for_an_add() -> None:
    queue = FairQueue[str]("wait")
    getter = asyncio.create_task(queue.get())
    await settle()
    assert not getter.done()
    queue.add("a")
    assert await asyncio.wait_for(getter, 1.0) == "a"


async def test_readd_while_processing_runs_again_after_done_exactly_once() -> None:
    queue = FairQueue[str]("readd")
    queue.add("a")
    assert await get_soon(queue) == "a"
    for _ in range(3):
        queue.add("a")
    # Not handed out while a worker holds it, however many times it was added.
    assert len(queue) == 0
    check_invariants(queue)
    await assert_nothing_to_get(queue)

    queue.done("a")
    assert len(queue) == 1
    assert await get_soon(queue) == "a"
    queue.done("a")
    assert len(queue) == 0
    await assert_nothing_to_get(queue)


async def test_done_without_readd_does_not_requeue() -> None:
    queue = FairQueue[str]("done-plain")
    queue.add("a")
    await get_soon(queue)
    queue.done("a")
    assert len(queue) == 0
    queue.add("a")  # accepted again once done
    assert await get_soon(queue) == "a"


async def test_done_for_an_item_not_processing_is_a_noop() -> None:
    queue = FairQueue[str]("done-noop")
    queue.add("a")
    queue.done("a")  # queued, not processing: must not queue a duplicate
    queue.done("zzz")
    assert len(queue) == 1
    check_invariants(queue)


async def test_never_two_workers_on_one_key() -> None:
    queue = FairQueue[str]("workers")
    active: set[str] = set()
    overlaps: list[str] = []
    runs: list[str] = []

    async def worker() -> None:
        while True:
            try:
                key = await queue.get()
            except QueueShutDown:
                return
            if key in active:
                overlaps.append(key)
            active.add(key)
            runs.append(key)
            await asyncio.sleep(0)
            if len(runs) < 200:
                queue.add(key)  # re-add itself while processing
                queue.add(f"k{len(runs) % 3}")
            await asyncio.sleep(0)
            active.discard(key)
            queue.done(key)

    workers = [asyncio.create_task(worker()) for _ in range(8)]
    for i in range(3):
        queue.add(f"k{i}")
    for _ in range(2000):
        await asyncio.sleep(0)
        if len(runs) >= 200 and not active and len(queue) == 0:
            break
    queue.shut_down()
    await asyncio.wait_for(asyncio.gather(*workers), 1.0)
    assert overlaps == []
    assert len(runs) >= 200
    assert set(runs) == {"k0", "k1", "k2"}


async def test_cancelled_getter_passes_its_wakeup_on() -> None:
    queue = FairQueue[str]("cancel")
    first = asyncio.create_task(queue.get())
    second = asyncio.create_task(queue.get())
    await settle()
    queue.add("a")  # wakes `first`...
    first.cancel()  # ...which is cancelled before it can take the item
    assert await asyncio.wait_for(second, 1.0) == "a"
    with pytest.raises(asyncio.CancelledError):
        await first


# --- delayed adds -----------------------------------------------------------------------------


async def test_add_after_releases_in_ready_time_order_with_real_timers() -> None:
    queue = FairQueue[str]("after-real")
    queue.add_after("slow", 0.03)
    queue.add_after("fast", 0.01)
    queue.add_after("mid", 0.02)
    assert len(queue) == 0
    assert [await get_soon(queue) for _ in range(3)] == ["fast", "mid", "slow"]


async def test_add_after_with_fake_clock() -> None:
    clock = FakeClock()
    queue = FairQueue[str]("after-fake", clock=clock)
    queue.add_after("a", 10.0)
    queue.add_after("b", 5.0)
    queue._release_ready()
    assert len(queue) == 0
    clock.advance(4.999)
    queue._release_ready()
    assert len(queue) == 0
    clock.advance(0.001)
    queue._release_ready()
    assert len(queue) == 1
    assert await get_soon(queue) == "b"
    clock.advance(5.0)
    queue._release_ready()
    assert await get_soon(queue) == "a"
    queue.shut_down()


async def test_add_after_keeps_the_earlier_ready_time() -> None:
    clock = FakeClock()
    queue = FairQueue[str]("after-min", clock=clock)
    queue.add_after("later-first", 10.0)
    queue.add_after("later-first", 3.0)  # earlier: replaces
    queue.add_after("earlier-first", 3.0)
    queue.add_after("earlier-first", 10.0)  # later: ignored
    clock.advance(3.0)
    queue._release_ready()
    assert sorted([await get_soon(queue), await get_soon(queue)]) == [
        "earlier-first",
        "later-first",
    ]
    queue.done("earlier-first")
    queue.done("later-first")
    clock.advance(7.0)
    queue._release_ready()
    assert len(queue) == 0  # neither comes back at t=10
    assert queue._waiting == {}
    queue.shut_down()


async def test_add_after_with_no_delay_adds_now() -> None:
    queue = FairQueue[str]("after-zero", clock=FakeClock())
    queue.add_after("zero", 0.0)
    queue.add_after("negative", -1.0)
    assert len(queue) == 2
    assert queue._waiting == {}


async def test_many_delayed_items_share_one_timer() -> None:
    clock = FakeClock()
    queue = FairQueue[str]("after-many", clock=clock)
    for i in range(10_000):
        queue.add_after(f"k{i}", 1.0 + (i % 100) / 10)
    timer = queue._timer
    assert timer is not None
    assert len(queue._waiting) == 10_000
    clock.advance(100.0)
    queue._release_ready()
    assert len(queue) == 10_000
    assert queue._timer is None
    assert timer.cancelled()  # re-aimed at nothing once the heap was empty
    queue.shut_down()


async def test_superseded_heap_entries_are_compacted() -> None:
    queue = FairQueue[str]("after-compact", clock=FakeClock())
    for i in range(1000):
        queue.add_after("a", 1000.0 - i)  # each call moves the same item earlier
    assert len(queue._waiting) == 1
    assert len(queue._heap) <= 65
    queue.shut_down()


async def test_the_timer_fires_for_the_new_head_when_an_earlier_item_arrives() -> None:
    queue = FairQueue[str]("after-rearm")
    queue.add_after("late", 30.0)
    queue.add_after("early", 0.01)
    assert await get_soon(queue) == "early"
    assert len(queue._waiting) == 1
    queue.shut_down()


# --- rate limiting ----------------------------------------------------------------------------


async def test_add_rate_limited_waits_for_the_limiter() -> None:
    clock = FakeClock()
    limiter = RecordingLimiter(7.0)
    queue = FairQueue[str]("limited", rate_limiter=limiter, clock=clock)
    queue.add_rate_limited("a")
    assert limiter.whens == ["a"]
    clock.advance(6.9)
    queue._release_ready()
    assert len(queue) == 0
    clock.advance(0.1)
    queue._release_ready()
    assert await get_soon(queue) == "a"
    assert queue.num_requeues("a") == 1
    queue.forget("a")
    assert limiter.forgotten == ["a"]
    queue.shut_down()


async def test_forget_resets_the_backoff() -> None:
    clock = FakeClock()
    limiter = ItemExponentialFailureRateLimiter[str](base_delay=1.0, max_delay=100.0)
    queue = FairQueue[str]("forget", rate_limiter=limiter, clock=clock)
    for _ in range(3):
        queue.add_rate_limited("a")  # delays 1, 2, 4: the earliest (1 s) stays
    assert queue.num_requeues("a") == 3
    queue.forget("a")
    assert queue.num_requeues("a") == 0
    clock.advance(1.0)
    queue._release_ready()
    assert await get_soon(queue) == "a"
    queue.done("a")

    queue.add_rate_limited("a")  # back to the base delay, not 8 s
    clock.advance(0.999)
    queue._release_ready()
    assert len(queue) == 0
    clock.advance(0.001)
    queue._release_ready()
    assert len(queue) == 1
    queue.shut_down()


async def test_default_rate_limiter_backs_off_exponentially() -> None:
    clock = FakeClock()
    queue = FairQueue[str]("default-limiter", clock=clock)
    queue.add_rate_limited("a")
    queue._release_ready()
    assert len(queue) == 0
    clock.advance(0.005)
    queue._release_ready()
    assert len(queue) == 1
    assert queue.num_requeues("a") == 1
    queue.shut_down()


# --- shutdown ---------------------------------------------------------------------------------


async def test_shut_down_wakes_every_getter() -> None:
    queue = FairQueue[str]("shutdown-wake")
    getters = [asyncio.create_task(queue.get()) for _ in range(3)]
    await settle()
    assert not any(getter.done() for getter in getters)
    queue.shut_down()
    results = await asyncio.wait_for(asyncio.gather(*getters, return_exceptions=True), 1.0)
    assert all(isinstance(result, QueueShutDown) for result in results)
    assert queue.shutting_down


async def test_getters_drain_queued_items_after_shut_down() -> None:
    queue = FairQueue[str]("shutdown-drain-queue")
    queue.add("a")
    queue.add("b")
    queue.shut_down()
    assert await get_soon(queue) == "a"
    assert await get_soon(queue) == "b"
    with pytest.raises(QueueShutDown):
        await get_soon(queue)


async def test_adds_after_shut_down_are_ignored() -> None:
    limiter = RecordingLimiter(1.0)
    queue = FairQueue[str]("shutdown-adds", rate_limiter=limiter)
    queue.shut_down()
    queue.add("a")
    queue.add_after("b", 0.0)
    queue.add_after("c", 0.01)
    queue.add_rate_limited("d")
    assert len(queue) == 0
    assert queue._waiting == {}
    assert limiter.whens == []
    with pytest.raises(QueueShutDown):
        await get_soon(queue)


async def test_shut_down_drops_delayed_items() -> None:
    queue = FairQueue[str]("shutdown-delayed")
    queue.add_after("a", 0.01)
    queue.shut_down()
    assert queue._timer is None
    await asyncio.sleep(0.03)
    assert len(queue) == 0
    with pytest.raises(QueueShutDown):
        await get_soon(queue)


async def test_item_readded_before_shutdown_is_still_handed_out() -> None:
    queue = FairQueue[str]("shutdown-dirty")
    queue.add("a")
    await get_soon(queue)
    queue.add("a")
    queue.shut_down()
    queue.done("a")
    assert await get_soon(queue) == "a"


async def test_shut_down_with_drain_waits_for_in_flight_work() -> None:
    queue = FairQueue[str]("drain")
    queue.add("a")
    queue.add("b")
    assert await get_soon(queue) == "a"
    assert await get_soon(queue) == "b"
    draining = asyncio.create_task(queue.shut_down_with_drain())
    await settle()
    assert queue.shutting_down
    assert not draining.done()
    queue.done("a")
    await settle()
    assert not draining.done()  # "b" is still in flight
    queue.done("b")
    await asyncio.wait_for(draining, 1.0)


async def test_drain_returns_at_once_when_idle() -> None:
    queue = FairQueue[str]("drain-idle")
    queue.add("queued-but-not-started")
    await asyncio.wait_for(queue.drain(), 1.0)
    await asyncio.wait_for(queue.shut_down_with_drain(), 1.0)


async def test_shut_down_abandons_a_drain() -> None:
    queue = FairQueue[str]("drain-abandon")
    queue.add("stuck")
    await get_soon(queue)
    draining = asyncio.create_task(queue.shut_down_with_drain())
    await settle()
    assert not draining.done()
    queue.shut_down()
    await asyncio.wait_for(draining, 1.0)


async def test_drain_on_a_live_queue_waits_for_processing_to_empty() -> None:
    queue = FairQueue[str]("drain-live")
    queue.add("a")
    await get_soon(queue)
    draining = asyncio.create_task(queue.drain())
    await settle()
    assert not draining.done()
    assert not queue.shutting_down
    queue.done("a")
    await asyncio.wait_for(draining, 1.0)


# --- metrics ----------------------------------------------------------------------------------


async def test_metrics_follow_the_queue() -> None:
    name = unique("metrics")
    clock = FakeClock()
    queue = FairQueue[str](
        name,
        rate_limiter=RecordingLimiter(2.0),
        metrics=WorkqueueMetrics(name, "ctl"),
        clock=clock,
    )
    # Series exist (at zero) before the first add.
    assert sample("workqueue_adds_total", name) == 0.0
    assert sample("workqueue_depth", name, priority="0") == 0.0

    queue.add("a")
    queue.add("b")
    queue.add("a")  # deduplicated: not an add
    assert sample("workqueue_adds_total", name) == 2.0
    assert sample("workqueue_depth", name, priority="0") == 2.0

    clock.advance(1.5)
    assert await get_soon(queue) == "a"
    assert sample("workqueue_depth", name, priority="0") == 1.0
    assert sample("workqueue_queue_duration_seconds_count", name) == 1.0
    assert sample("workqueue_queue_duration_seconds_sum", name) == pytest.approx(1.5)
    assert sample("workqueue_queue_duration_seconds_bucket", name, le="1.0") == 0.0
    assert sample("workqueue_queue_duration_seconds_bucket", name, le="10.0") == 1.0

    clock.advance(2.0)
    queue.update_unfinished_work()
    assert sample("workqueue_unfinished_work_seconds", name) == pytest.approx(2.0)
    assert sample("workqueue_longest_running_processor_seconds", name) == pytest.approx(2.0)

    assert await get_soon(queue) == "b"  # t = 3.5; "a" started at 1.5
    clock.advance(1.0)
    queue.update_unfinished_work()
    assert sample("workqueue_unfinished_work_seconds", name) == pytest.approx(3.0 + 1.0)
    assert sample("workqueue_longest_running_processor_seconds", name) == pytest.approx(3.0)

    # Re-added while processing: counted in depth (client-go), not yet in len().
    queue.add("a")
    assert sample("workqueue_adds_total", name) == 3.0
    assert sample("workqueue_depth", name, priority="0") == 1.0
    assert len(queue) == 0

    queue.done("a")
    assert sample("workqueue_work_duration_seconds_count", name) == 1.0
    assert sample("workqueue_work_duration_seconds_sum", name) == pytest.approx(3.0)
    queue.done("b")
    assert sample("workqueue_work_duration_seconds_count", name) == 2.0
    queue.update_unfinished_work()
    assert sample("workqueue_unfinished_work_seconds", name) == 0.0
    assert sample("workqueue_longest_running_processor_seconds", name) == 0.0

    assert sample("workqueue_retries_total", name) == 0.0
    queue.add_rate_limited("c")
    queue.add_after("d", 5.0)
    assert sample("workqueue_retries_total", name) == 2.0
    queue.shut_down()


async def test_queue_latency_of_a_readd_includes_the_wait_for_done() -> None:
    name = unique("metrics-readd")
    clock = FakeClock()
    queue = FairQueue[str](name, metrics=WorkqueueMetrics(name, "ctl"), clock=clock)
    queue.add("a")
    await get_soon(queue)
    queue.add("a")  # t = 0, while processing
    clock.advance(4.0)
    queue.done("a")
    await get_soon(queue)
    assert sample("workqueue_queue_duration_seconds_sum", name) == pytest.approx(4.0)


async def test_unfinished_work_loop_samples_until_shutdown() -> None:
    name = unique("metrics-loop")
    clock = FakeClock()
    queue = FairQueue[str](name, metrics=WorkqueueMetrics(name, "ctl"), clock=clock)
    queue.add("a")
    await get_soon(queue)
    loop_task = asyncio.create_task(queue.unfinished_work_loop(period=0.001))
    clock.advance(5.0)
    await asyncio.sleep(0.01)
    assert sample("workqueue_unfinished_work_seconds", name) == pytest.approx(5.0)
    queue.shut_down()
    await asyncio.wait_for(loop_task, 1.0)


async def test_metric_names_are_exposed_verbatim() -> None:
    WorkqueueMetrics(unique("exposed"), "ctl")
    text = generate_latest(REGISTRY).decode()
    for metric in [
        "workqueue_depth",
        "workqueue_adds_total",
        "workqueue_queue_duration_seconds_bucket",
        "workqueue_work_duration_seconds_bucket",
        "workqueue_unfinished_work_seconds",
        "workqueue_longest_running_processor_seconds",
        "workqueue_retries_total",
    ]:
        assert f"\n{metric}{{" in text, metric
    assert "_total_total" not in text
    for help_line in [
        "# TYPE controller_runtime_reconcile_total counter",
        "# TYPE controller_runtime_reconcile_errors_total counter",
        "# TYPE controller_runtime_terminal_reconcile_errors_total counter",
        "# TYPE controller_runtime_reconcile_panics_total counter",
        "# TYPE controller_runtime_reconcile_time_seconds histogram",
        "# TYPE controller_runtime_max_concurrent_reconciles gauge",
        "# TYPE controller_runtime_active_workers gauge",
        "# TYPE leader_election_master_status gauge",
        "# TYPE rest_client_requests_total counter",
        "# TYPE rest_client_request_duration_seconds histogram",
    ]:
        assert help_line in text, help_line
    buckets = 'le="1e-08"', 'le="1e-07"', 'le="0.1"', 'le="10.0"', 'le="+Inf"'
    for bucket in buckets:
        assert f'workqueue_work_duration_seconds_bucket{{controller="ctl",{bucket}' in text


# --- properties -------------------------------------------------------------------------------


@dataclass
class Op:
    kind: str
    key: int = 0
    n: int = 0
    priority: int | None = None


KEYS = st.integers(min_value=0, max_value=5)
PRIORITIES = st.sampled_from([LOW_PRIORITY, NORMAL_PRIORITY, 1, 7, HIGH_PRIORITY])
OPS = st.one_of(
    st.builds(Op, kind=st.just("add"), key=KEYS, priority=PRIORITIES),
    st.builds(Op, kind=st.sampled_from(["get", "get_urgent"])),
    st.builds(Op, kind=st.just("done"), n=st.integers(min_value=0, max_value=10)),
    # Few keys for delayed adds, so the same key is often scheduled twice.
    st.builds(
        Op,
        kind=st.just("add_after"),
        key=st.integers(min_value=0, max_value=2),
        n=st.integers(min_value=-1, max_value=5),
        priority=st.none() | PRIORITIES,
    ),
    st.builds(Op, kind=st.just("tick"), n=st.integers(min_value=0, max_value=30)),
    st.builds(Op, kind=st.sampled_from(["pause", "resume"])),
)


@dataclass
class Model:
    """The queue's specification, written as plainly as possible: within a line (the keys of
    one fairness key, ``key % lines``), keys come first by the smallest
    ``ready - priority * aging`` (then earliest ready, then first queued); the line handed out
    from is the one whose first key comes first with its ready time raised to the line's turn
    (when the line last handed one out, while it had keys queued), then the line served
    longest ago; re-adds keep the higher priority and the earlier ready time; ready times are
    on a service clock that stands still while paused."""

    aging: float = AGING_INTERVAL
    lines: int = 1  # 1: no fairness key, every key in one line
    turns: dict[int, tuple[float, int]] = field(default_factory=dict)  # line -> (turn, rank)
    handouts: int = 0
    dirty: dict[int, tuple[int, float]] = field(default_factory=dict)
    queued: dict[int, int] = field(default_factory=dict)  # key -> when it was (re)queued
    processing: dict[int, int] = field(default_factory=dict)
    waiting: dict[int, tuple[float, int, int]] = field(default_factory=dict)
    seq: int = 0
    now: float = 0.0
    served: float = 0.0
    since: float = 0.0
    paused: bool = False
    owed: set[int] = field(default_factory=set)  # added and not handed out since

    def service_now(self) -> float:
        return self.served if self.paused else self.served + self.now - self.since

    def _queue(self, key: int) -> None:
        self.queued[key] = self.seq
        self.seq += 1

    def add(self, key: int, priority: int = NORMAL_PRIORITY) -> None:
        self.owed.add(key)
        if key in self.dirty:
            held, ready = self.dirty[key]
            if priority > held:
                self.dirty[key] = (priority, ready)
                if key in self.queued:
                    self._queue(key)
            return
        self.dirty[key] = (priority, self.service_now())
        if key not in self.processing:
            self._queue(key)

    def order(self, key: int) -> tuple[float, float, int]:
        priority, ready = self.dirty[key]
        return (ready - priority * self.aging, ready, self.queued[key])

    def line(self, key: int) -> int:
        return key % self.lines

    def turn(self, line: int) -> tuple[float, int]:
        return self.turns.get(line, (-math.inf, -1))

    def raised(self, key: int) -> tuple[float, int, float, int]:
        """Where the line whose first key is ``key`` stands among the lines."""
        own, ready, seq = self.order(key)
        turn, rank = self.turn(self.line(key))
        return (own + max(0.0, turn - ready), rank, ready, seq)

    def urgent(self) -> list[int]:
        return [k for k in self.queued if self.dirty[k][0] >= NORMAL_PRIORITY]

    def heads(self, urgent_only: bool = False) -> dict[int, int]:
        """Each line's first key."""
        heads: dict[int, int] = {}
        for key in self.urgent() if urgent_only else self.queued:
            line = self.line(key)
            if line not in heads or self.order(key) < self.order(heads[line]):
                heads[line] = key
        return heads

    def get(self, urgent_only: bool = False) -> int:
        key = min(self.heads(urgent_only).values(), key=self.raised)
        del self.queued[key]
        priority, _ = self.dirty.pop(key)
        self.processing[key] = priority
        self.owed.discard(key)
        line = self.line(key)
        if any(self.line(k) == line for k in self.queued):
            self.turns[line] = (self.service_now(), self.handouts)
            self.handouts += 1
        else:
            self.turns.pop(line, None)
        return key

    def done(self, key: int) -> None:
        del self.processing[key]
        if key in self.dirty:
            self._queue(key)

    def priority_of(self, key: int) -> int:
        if key in self.dirty:
            return self.dirty[key][0]
        return self.processing.get(key, NORMAL_PRIORITY)

    def add_after(self, key: int, delay: float, priority: int | None) -> None:
        if priority is None:
            priority = self.priority_of(key)
        if delay <= 0:
            self.add(key, priority)
            return
        at = self.now + delay
        if key in self.waiting:
            held_at, held_seq, held_priority = self.waiting[key]
            priority = max(priority, held_priority)
            if held_at <= at:
                self.waiting[key] = (held_at, held_seq, priority)
                return
        self.waiting[key] = (at, self.seq, priority)
        self.seq += 1

    def tick(self, seconds: float) -> None:
        self.now += seconds
        due = sorted((at, seq, k) for k, (at, seq, _) in self.waiting.items() if at <= self.now)
        for _, _, key in due:
            _, _, priority = self.waiting.pop(key)
            self.add(key, priority)

    def pause(self) -> None:
        if not self.paused:
            self.served = self.service_now()
            self.paused = True

    def resume(self) -> None:
        if self.paused:
            self.since = self.now
            self.paused = False


@pytest.mark.parametrize("lines", [1, 3])
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(OPS, max_size=80))
async def test_property_queue_matches_model_and_delivers_everything(
    lines: int, ops: list[Op]
) -> None:
    """Every invariant after every step, the order of the specification, and the starvation
    bound: when a key is handed out, no key still waiting in its line became ready more than
    its priority advantage earlier (``ready_out - ready_waiting <= (p_out - p_waiting) *
    aging``), nor did any other line's first key, each ready time raised to its line's turn.
    Without a fairness key (one line) or with three."""
    clock = FakeClock(0.0)
    fairness = None if lines == 1 else (lambda key: key % lines)
    queue = FairQueue[int]("property-model", clock=clock, fairness_key=fairness)
    model = Model(lines=lines)
    try:
        for op in ops:
            if op.kind == "add":
                assert op.priority is not None
                queue.add(op.key, op.priority)
                model.add(op.key, op.priority)
            elif op.kind == "get" and model.queued:
                waiting_before = dict(model.dirty)
                heads = set(model.heads().values())
                turns = {line: model.turn(line)[0] for line in range(lines)}
                expected = model.get()
                assert await asyncio.wait_for(queue.get(), 1.0) == expected
                p_out, ready_out = waiting_before.pop(expected)
                line_out = model.line(expected)
                for key, (p_wait, ready_wait) in waiting_before.items():
                    line = model.line(key)
                    if key not in model.queued or (line != line_out and key not in heads):
                        continue
                    ahead, behind = ready_out, ready_wait
                    if line != line_out:  # another line's first key: at their turns
                        ahead, behind = max(ahead, turns[line_out]), max(behind, turns[line])
                    assert ahead - behind <= (p_out - p_wait) * model.aging, key
            elif op.kind == "get_urgent" and model.urgent():
                expected = model.get(urgent_only=True)
                assert await asyncio.wait_for(queue.get(urgent_only=True), 1.0) == expected
            elif op.kind == "done" and model.processing:
                key = sorted(model.processing)[op.n % len(model.processing)]
                queue.done(key)
                model.done(key)
            elif op.kind == "add_after":
                queue.add_after(op.key, op.n, op.priority)
                model.add_after(op.key, op.n, op.priority)
            elif op.kind == "tick":
                clock.advance(op.n)
                queue._release_ready()
                model.tick(op.n)
            elif op.kind == "pause":
                queue.pause()
                model.pause()
            elif op.kind == "resume":
                queue.resume()
                model.resume()
            check_invariants(queue)
            assert len(queue) == len(model.queued)
            assert {k: (d.priority, d.ready) for k, d in queue._dirty.items()} == model.dirty
            assert queue._processing == model.processing
            assert {k: (d.at, d.priority) for k, d in queue._waiting.items()} == {
                k: (at, p) for k, (at, _, p) in model.waiting.items()
            }

        # Let everything finish: every key added must come out after its last add.
        for key in sorted(model.processing):
            queue.done(key)
            model.done(key)
        clock.advance(10.0)
        queue._release_ready()
        model.tick(10.0)
        delivered = 0
        while model.queued:
            expected = model.get()
            assert await asyncio.wait_for(queue.get(), 1.0) == expected
            queue.done(expected)
            model.done(expected)
            delivered += 1
            assert delivered <= 6, "a key came back without being re-added"
        assert len(queue) == 0
        assert model.owed == set()
    finally:
        queue.shut_down()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    arrivals=st.lists(
        st.tuples(st.integers(min_value=0, max_value=3), PRIORITIES), min_size=1, max_size=60
    ),
    low_priority=st.sampled_from([LOW_PRIORITY, NORMAL_PRIORITY, 7]),
    service=st.integers(min_value=1, max_value=4),
    fair=st.booleans(),
)
async def test_property_no_key_starves_under_any_arrival_pattern(
    arrivals: list[tuple[int, int]], low_priority: int, service: int, fair: bool
) -> None:
    """One key X of some priority waits while keys keep arriving, some of higher priority,
    and one worker serves one key per ``service`` seconds. X is handed out no later than the
    first time the queue holds only keys that became ready after X's deadline,
    ``ready_x + (P - p_x) * aging`` for the highest priority P that arrives: then nothing can
    overtake it however the arrivals go on. The same with fairness keys, X alone in its own
    and the arrivals spread over three others, which take turns."""
    clock = FakeClock(0.0)
    queue = FairQueue[str](
        "property-starvation",
        clock=clock,
        fairness_key=(lambda key: key if key == "x" else int(key[1:]) % 3) if fair else None,
    )
    queue.add("x", low_priority)
    highest = max(p for _, p in arrivals)
    deadline = (highest - low_priority) * AGING_INTERVAL
    readiness: dict[str, float] = {"x": 0.0}
    served: list[str] = []
    n = 0
    # Arrivals keep coming after x (each arrival: wait some seconds, then add a new key), and
    # then keep coming at the same pattern again, past the deadline: an endless stream.
    for _round in range(int(deadline) // 4 + 3):
        for gap, priority in arrivals:
            clock.advance(gap)
            key = f"k{n}"
            n += 1
            queue.add(key, priority)
            readiness[key] = clock()
            if clock() % service == 0 and len(queue):
                out = await get_soon(queue)
                queue.done(out)
                served.append(out)
                if out == "x":
                    break
        if "x" in served:
            break
    if "x" not in served:
        # No more arrivals: x must come out before every key that arrived after its deadline.
        while "x" not in served:
            out = await get_soon(queue)
            queue.done(out)
            served.append(out)
    overtook = [k for k in served[: served.index("x")] if readiness[k] > deadline]
    assert overtook == []
    queue.shut_down()


async def test_higher_priority_first_then_earliest_ready() -> None:
    clock = FakeClock()
    queue = FairQueue[str]("priority-order", clock=clock)
    queue.add("low-1", LOW_PRIORITY)
    queue.add("normal-1")
    clock.advance(1.0)
    queue.add("normal-2")
    queue.add("high-1", HIGH_PRIORITY)
    queue.add("low-2", LOW_PRIORITY)
    out = [await get_soon(queue) for _ in range(5)]
    assert out == ["high-1", "normal-1", "normal-2", "low-1", "low-2"]


async def test_a_readd_keeps_the_higher_priority_and_the_earlier_ready_time() -> None:
    clock = FakeClock()
    queue = FairQueue[str]("priority-readd", clock=clock)
    queue.add("a", LOW_PRIORITY)
    clock.advance(1.0)
    queue.add("b")
    clock.advance(1.0)
    queue.add("a")  # raised to normal, still ready at 0: ahead of b
    queue.add("b", LOW_PRIORITY)  # lower: ignored
    assert queue.priority_of("a") == NORMAL_PRIORITY
    assert [await get_soon(queue), await get_soon(queue)] == ["a", "b"]


async def test_an_urgent_getter_takes_only_urgent_keys_even_aged_ones_not() -> None:
    """A reserved worker's ``get(urgent_only=True)``: keys added at normal priority or higher,
    in the queue's order among them; a low key that has aged past them stays for the others."""
    clock = FakeClock()
    queue = FairQueue[str]("urgent-lane", clock=clock)
    queue.add("backlog", LOW_PRIORITY)
    clock.advance(-LOW_PRIORITY * AGING_INTERVAL + 10.0)  # aged past anything new
    queue.add("create")
    queue.add("change", HIGH_PRIORITY)
    assert await asyncio.wait_for(queue.get(urgent_only=True), 1.0) == "change"
    assert await asyncio.wait_for(queue.get(urgent_only=True), 1.0) == "create"
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(queue.get(urgent_only=True), 0.01)
    assert await get_soon(queue) == "backlog"
    check_invariants(queue)


async def test_an_urgent_key_wakes_an_urgent_getter_first() -> None:
    queue = FairQueue[str](unique("urgent-wake"))
    general = asyncio.create_task(queue.get())
    urgent = asyncio.create_task(queue.get(urgent_only=True))
    await settle()
    queue.add("backlog", LOW_PRIORITY)  # only the general getter may take it
    await settle()
    assert general.done() and general.result() == "backlog"
    assert not urgent.done()
    general = asyncio.create_task(queue.get())
    await settle()
    queue.add("create")
    await settle()
    assert urgent.done() and urgent.result() == "create"
    assert not general.done()  # left for the rest of the queue
    queue.shut_down()
    with pytest.raises(QueueShutDown):
        await general


async def test_a_key_raised_to_urgent_wakes_an_urgent_getter() -> None:
    queue = FairQueue[str](unique("urgent-raise"))
    queue.add("company", LOW_PRIORITY)
    urgent = asyncio.create_task(queue.get(urgent_only=True))
    await settle()
    assert not urgent.done()
    queue.add("company")  # an event about it: now somebody is waiting
    assert await asyncio.wait_for(urgent, 1.0) == "company"
    check_invariants(queue)


async def test_a_key_demoted_below_urgent_leaves_the_urgent_lane() -> None:
    clock = FakeClock()
    queue = FairQueue[str]("urgent-demote", clock=clock)
    queue.add("seen-by-the-old-leader")
    clock.advance(1.0)
    queue.demote_added_before(clock())
    check_invariants(queue)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(queue.get(urgent_only=True), 0.01)
    assert await get_soon(queue) == "seen-by-the-old-leader"


async def test_an_urgent_getter_drains_urgent_keys_then_stops_at_shut_down() -> None:
    queue = FairQueue[str](unique("urgent-shutdown"))
    queue.add("backlog", LOW_PRIORITY)
    queue.add("create")
    queue.shut_down()
    assert await asyncio.wait_for(queue.get(urgent_only=True), 1.0) == "create"
    with pytest.raises(QueueShutDown):
        await queue.get(urgent_only=True)
    assert await get_soon(queue) == "backlog"


async def test_a_cancelled_urgent_getter_passes_its_wakeup_on() -> None:
    queue = FairQueue[str](unique("urgent-cancel"))
    first = asyncio.create_task(queue.get(urgent_only=True))
    second = asyncio.create_task(queue.get(urgent_only=True))
    await settle()
    queue.add("create")  # wakes the first
    first.cancel()
    assert await asyncio.wait_for(second, 1.0) == "create"
    with pytest.raises(asyncio.CancelledError):
        await first


async def test_the_urgent_lane_drops_stale_entries_without_urgent_getters() -> None:
    """Without reserved workers nothing pops the urgent heap: it must not grow with every
    urgent key the other workers take."""
    queue = FairQueue[int](unique("urgent-compact"))
    queue.add(-1, LOW_PRIORITY)  # keeps the line alive: its heaps are never dropped whole
    for item in range(1_000):
        queue.add(item)
        assert await asyncio.wait_for(queue.get(), 1.0) == item
        queue.done(item)
    [line] = queue._order._lines.values()
    assert len(line.urgent.heap) <= 2 * line.size + 65
    assert len(queue._order._urgent) <= 2 * len(queue._order._lines) + 65
    check_invariants(queue)


async def test_a_waiting_low_key_ages_past_later_normal_work() -> None:
    """The bound with the defaults: an initial-list key waits at most 25 s of service behind
    later normal work."""
    clock = FakeClock()
    queue = FairQueue[str]("priority-aging", clock=clock)
    queue.add("old-low", LOW_PRIORITY)
    clock.advance(-LOW_PRIORITY * AGING_INTERVAL - 0.01)
    queue.add("normal-before-its-deadline")
    clock.advance(0.02)
    queue.add("normal-after-its-deadline")
    out = [await get_soon(queue) for _ in range(3)]
    assert out == ["normal-before-its-deadline", "old-low", "normal-after-its-deadline"]


async def test_a_paused_queue_does_not_age_its_keys() -> None:
    """A standby's queue fills long before it is served: waiting then earns no priority, and
    a new normal key still goes first once the standby leads."""
    clock = FakeClock()
    queue = FairQueue[str]("priority-paused", clock=clock, paused=True)
    queue.add("listed", LOW_PRIORITY)
    clock.advance(3600.0)  # an hour as a standby
    queue.add("created-while-standby")
    queue.resume()
    clock.advance(10.0)
    queue.add("created-after-takeover")
    out = [await get_soon(queue) for _ in range(3)]
    assert out == ["created-while-standby", "created-after-takeover", "listed"]


async def test_a_requeue_keeps_its_priority_unless_told() -> None:
    clock = FakeClock()
    queue = FairQueue[str]("priority-requeue", clock=clock)
    queue.add("a", LOW_PRIORITY)
    assert await get_soon(queue) == "a"
    queue.add_after("a", 5.0)
    queue.done("a")
    queue.add("b", LOW_PRIORITY)
    queue.add_after("b", 5.0, priority=HIGH_PRIORITY)
    clock.advance(5.0)
    queue._release_ready()
    assert queue.priority_of("a") == LOW_PRIORITY
    assert queue.priority_of("b") == HIGH_PRIORITY
    queue.shut_down()


async def test_a_takeover_demotes_what_was_seen_while_the_old_leader_lived() -> None:
    """Keys added before the moment stop outranking later ones; their ready time stays."""
    clock = FakeClock()
    queue = FairQueue[str]("priority-demote", clock=clock, paused=True)
    queue.add("changed-by-the-old-leader")
    queue.add("listed", LOW_PRIORITY)
    clock.advance(20.0)
    queue.add("created-after-it-died")
    queue.demote_added_before(clock() - 15.0)
    assert queue.priority_of("changed-by-the-old-leader") == LOW_PRIORITY
    assert queue.priority_of("created-after-it-died") == NORMAL_PRIORITY
    check_invariants(queue)
    queue.resume()
    out = [await get_soon(queue) for _ in range(3)]
    assert out[0] == "created-after-it-died"
    assert set(out[1:]) == {"changed-by-the-old-leader", "listed"}


async def test_depth_is_reported_by_priority_with_few_labels() -> None:
    name = unique("metrics-priority")
    queue = FairQueue[str](name, metrics=WorkqueueMetrics(name, "ctl"))
    queue.add("a", LOW_PRIORITY)
    queue.add("b")
    queue.add("c")
    assert sample("workqueue_depth", name, priority="-100") == 1.0
    assert sample("workqueue_depth", name, priority="0") == 2.0
    queue.add("a", NORMAL_PRIORITY)  # raised: moves between labels
    assert sample("workqueue_depth", name, priority="-100") == 0.0
    assert sample("workqueue_depth", name, priority="0") == 3.0
    for i in range(20):
        queue.add(f"p{i}", i + 1)
    labels = {
        s.labels["priority"]
        for metric in REGISTRY.collect()
        if metric.name == "workqueue_depth"
        for s in metric.samples
        if s.labels.get("name") == name
    }
    assert len(labels) <= 9 and "other" in labels
    queue.shut_down()


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.data(),
    n_workers=st.integers(min_value=1, max_value=6),
    adds=st.lists(st.tuples(KEYS, st.integers(min_value=0, max_value=3)), min_size=1, max_size=40),
    fair=st.booleans(),
    limit=st.sampled_from([None, 1, 2]),
)
async def test_property_never_two_workers_on_one_key(
    data: st.DataObject,
    n_workers: int,
    adds: list[tuple[int, int]],
    fair: bool,
    limit: int | None,
) -> None:
    """Never two workers on one key, every add served, and with a limit per fairness key
    never more of one key's items at once than that."""
    queue = FairQueue[int](
        "property-workers",
        fairness_key=(lambda key: key % 2) if fair else None,
        max_in_flight_per_key=limit,
    )
    active: set[int] = set()
    overlaps: list[int] = []
    over_limit: list[set[int]] = []
    owed: set[int] = set()  # added and not picked up by a worker since
    readd_budget = [30]

    async def worker() -> None:
        while True:
            try:
                key = await queue.get()
            except QueueShutDown:
                return
            if key in active:
                overlaps.append(key)
            active.add(key)
            owed.discard(key)
            if limit is not None:
                line = {held for held in active if not fair or held % 2 == key % 2}
                if len(line) > limit:
                    over_limit.append(line)
            try:
                for _ in range(data.draw(st.integers(min_value=0, max_value=3))):
                    await asyncio.sleep(0)
                if readd_budget[0] > 0 and data.draw(st.booleans()):
                    readd_budget[0] -= 1
                    again = data.draw(KEYS)  # often the key being processed
                    owed.add(again)
                    queue.add(again)
                    for _ in range(data.draw(st.integers(min_value=0, max_value=2))):
                        await asyncio.sleep(0)
            finally:
                active.discard(key)
                queue.done(key)

    workers = [asyncio.create_task(worker()) for _ in range(n_workers)]
    try:
        for key, pause in adds:
            owed.add(key)
            queue.add(key)
            for _ in range(pause):
                await asyncio.sleep(0)
        # Bounded: at most 40 adds and 30 re-adds, each held for a few yields.
        for _ in range(10_000):
            await asyncio.sleep(0)
            if overlaps or (not active and len(queue) == 0):
                break
        else:
            pytest.fail("the workers never went idle")
    finally:
        queue.shut_down()
        await asyncio.wait_for(asyncio.gather(*workers), 5.0)
    assert overlaps == []
    assert over_limit == []
    assert owed == set()


# --- fairness -----------------------------------------------------------------------------


Tenanted = tuple[str, int]


def by_tenant(item: Tenanted) -> str:
    return item[0]


async def test_a_quiet_key_is_served_within_one_round_of_a_burst() -> None:
    queue = FairQueue[Tenanted]("fair-round", fairness_key=by_tenant)
    for i in range(10):
        queue.add(("busy", i))
    assert await get_soon(queue) == ("busy", 0)
    queue.add(("quiet", 0))
    out = [await get_soon(queue) for _ in range(10)]
    assert out[:2] == [("busy", 1), ("quiet", 0)]  # busy was served before quiet came
    assert out[2:] == [("busy", i) for i in range(2, 10)]
    check_invariants(queue)


async def test_a_key_at_its_limit_leaves_the_other_workers_to_the_other_keys() -> None:
    """``max_in_flight_per_key``: a key with that many items handed out waits, in its place,
    while the others are served, and the next of its items comes as soon as one is done, to a
    worker already waiting (reserved ones too)."""
    queue = FairQueue[Tenanted](
        unique("fair-limit"), fairness_key=by_tenant, max_in_flight_per_key=2
    )
    for i in range(5):
        queue.add(("busy", i))
    queue.add(("quiet", 0), LOW_PRIORITY)
    assert [await get_soon(queue) for _ in range(3)] == [("busy", 0), ("busy", 1), ("quiet", 0)]
    check_invariants(queue)
    waiting = asyncio.create_task(queue.get())
    urgent = asyncio.create_task(queue.get(urgent_only=True))
    await settle()
    assert not waiting.done() and not urgent.done(), "busy is at its limit, nothing else waits"
    assert len(queue) == 3
    queue.done(("quiet", 0))  # not busy's: busy stays at its limit
    await settle()
    assert not waiting.done() and not urgent.done()
    queue.done(("busy", 0))
    assert await asyncio.wait_for(urgent, 1.0) == ("busy", 2)  # the urgent getter is woken first
    assert not waiting.done()
    queue.done(("busy", 1))
    assert await asyncio.wait_for(waiting, 1.0) == ("busy", 3)
    check_invariants(queue)
    queue.shut_down()  # busy is at its limit: its last item stays queued
    with pytest.raises(QueueShutDown):
        await get_soon(queue)
    assert len(queue) == 1


def test_a_limit_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="max_in_flight"):
        FairQueue[str]("limit-zero", max_in_flight_per_key=0)


async def test_busy_keys_take_turns() -> None:
    queue = FairQueue[Tenanted]("fair-turns", fairness_key=by_tenant)
    for tenant, n in (("a", 4), ("b", 2), ("c", 3)):
        for i in range(n):
            queue.add((tenant, i))
    out = [await get_soon(queue) for _ in range(9)]
    assert [tenant for tenant, _ in out] == ["a", "b", "c", "a", "b", "c", "a", "c", "a"]
    assert [i for tenant, i in out if tenant == "a"] == [0, 1, 2, 3]  # FIFO within a key


async def test_a_key_served_goes_behind_keys_ready_before_its_turn() -> None:
    """A key's next item counts as ready no earlier than the key's last service."""
    clock = FakeClock(0.0)
    queue = FairQueue[Tenanted]("fair-turn-time", clock=clock, fairness_key=by_tenant)
    queue.add(("a", 1))
    queue.add(("a", 2))
    clock.advance(1.0)
    queue.add(("b", 1))
    clock.advance(1.0)
    assert await get_soon(queue) == ("a", 1)
    assert await get_soon(queue) == ("b", 1)
    assert await get_soon(queue) == ("a", 2)


async def test_priorities_rule_across_keys_with_aging() -> None:
    """Keys take turns within a priority: another key's burst of higher priority goes first,
    until the lower item has waited its priority gap (25 s between high and normal) longer
    than the burst's key's last turn."""
    clock = FakeClock(0.0)
    queue = FairQueue[Tenanted]("fair-priorities", clock=clock, fairness_key=by_tenant)
    for i in range(10):
        queue.add(("busy", i), HIGH_PRIORITY)
    queue.add(("quiet", 0))
    out = []
    while ("quiet", 0) not in out:
        out.append(await get_soon(queue))
        clock.advance(10.0)  # one hand-out every 10 s: busy's turns at 0, 10, 20, 30
    assert out == [("busy", 0), ("busy", 1), ("busy", 2), ("busy", 3), ("quiet", 0)]
    check_invariants(queue)


async def test_reserved_getters_take_keys_in_turn_too() -> None:
    queue = FairQueue[Tenanted]("fair-urgent", fairness_key=by_tenant)
    queue.add(("busy", -1), LOW_PRIORITY)  # not for them
    for i in range(5):
        queue.add(("busy", i))
    assert await asyncio.wait_for(queue.get(urgent_only=True), 1.0) == ("busy", 0)
    queue.add(("quiet", 0))
    out = [await asyncio.wait_for(queue.get(urgent_only=True), 1.0) for _ in range(3)]
    assert out == [("busy", 1), ("quiet", 0), ("busy", 2)]
    check_invariants(queue)


async def test_an_emptied_key_is_dropped_with_its_turn() -> None:
    queue = FairQueue[Tenanted]("fair-drop", fairness_key=by_tenant)
    queue.add(("a", 0))
    assert await get_soon(queue) == ("a", 0)
    assert queue._order._lines == {}
    queue.add(("b", 0))
    queue.add(("a", 1))  # a new line: a's turn was forgotten, arrival order decides
    assert [await get_soon(queue), await get_soon(queue)] == [("b", 0), ("a", 1)]
    assert queue._order._lines == {}


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    bursts=st.lists(st.integers(min_value=1, max_value=25), min_size=1, max_size=5),
    arrival=st.integers(min_value=0, max_value=60),
    step=st.sampled_from([0.0, 0.01, 1.0]),
    priority=PRIORITIES,
    interleaved=st.booleans(),
    urgent_only=st.booleans(),
)
async def test_property_a_quiet_key_waits_at_most_one_round(
    bursts: list[int],
    arrival: int,
    step: float,
    priority: int,
    interleaved: bool,
    urgent_only: bool,
) -> None:
    """Busy keys hold bursts of any size at one priority (added one key after another, or
    interleaved); one worker serves them, the clock moving ``step`` a hand-out. After
    ``arrival`` hand-outs a quiet key adds one item at the same priority: no busy key is served
    twice before it, and every item comes out once."""
    clock = FakeClock(0.0)
    queue = FairQueue[Tenanted]("property-round", clock=clock, fairness_key=by_tenant)
    items = [(f"busy{k}", i) for k, n in enumerate(bursts) for i in range(n)]
    if interleaved:
        items.sort(key=lambda item: item[1])
    for item in items:
        queue.add(item, priority)
    quiet = ("quiet", 0)
    urgent = urgent_only and priority >= NORMAL_PRIORITY
    served: list[Tenanted] = []
    came = -1
    while came < 0 or quiet not in served:
        if len(served) == arrival or (came < 0 and not len(queue)):
            queue.add(quiet, priority)
            came = len(served)
        out = await asyncio.wait_for(queue.get(urgent_only=urgent), 1.0)
        queue.done(out)
        served.append(out)
        clock.advance(step)
        check_invariants(queue)
    before = [tenant for tenant, _ in served[came : served.index(quiet)]]
    assert len(before) == len(set(before)), before
    while len(queue):
        served.append(await get_soon(queue))
    assert sorted(served) == sorted([*items, quiet])


async def test_fairness_keys_are_counted_not_labelled() -> None:
    name = unique("metrics-fairness")
    queue = FairQueue[Tenanted](name, metrics=WorkqueueMetrics(name, "ctl"), fairness_key=by_tenant)
    for tenant in ("a", "b", "c"):
        queue.add((tenant, 0))
        queue.add((tenant, 1))
    assert sample("crewlet_operator_workqueue_fairness_keys", name) == 3.0
    for _ in range(3):
        await get_soon(queue)
    assert sample("crewlet_operator_workqueue_fairness_keys", name) == 3.0
    for _ in range(3):
        await get_soon(queue)
    assert sample("crewlet_operator_workqueue_fairness_keys", name) == 0.0
    series = [
        s
        for metric in REGISTRY.collect()
        if metric.name == "crewlet_operator_workqueue_fairness_keys"
        for s in metric.samples
        if s.labels.get("name") == name
    ]
    assert len(series) == 1
