"""``crewlet_operator_event_loop_lag_seconds``: how late the loop wakes a sleeping task (no API
server: the loop is blocked by hand)."""

from __future__ import annotations

import asyncio
import time

from prometheus_client import CollectorRegistry, Histogram

from crewlet_operator.metrics import EVENT_LOOP_LAG_BUCKETS, EventLoopLag

INTERVAL = 0.01


def lag_histogram() -> tuple[Histogram, CollectorRegistry]:
    """A histogram of its own, beside the library's."""
    registry = CollectorRegistry()
    histogram = Histogram(
        "crewlet_operator_event_loop_lag_seconds",
        "Lag.",
        buckets=EVENT_LOOP_LAG_BUCKETS,
        registry=registry,
    )
    return histogram, registry


def samples_above(registry: CollectorRegistry, seconds: float) -> float:
    """Samples whose lag was over ``seconds`` (one of the buckets' bounds)."""
    name = "crewlet_operator_event_loop_lag_seconds"
    count = registry.get_sample_value(f"{name}_count") or 0.0
    within = registry.get_sample_value(f"{name}_bucket", {"le": str(seconds)}) or 0.0
    return count - within


async def test_a_blocked_loop_is_recorded_as_late() -> None:
    histogram, registry = lag_histogram()
    lag = EventLoopLag(histogram, interval=INTERVAL)
    await lag.start()
    await asyncio.sleep(3 * INTERVAL)
    assert (registry.get_sample_value("crewlet_operator_event_loop_lag_seconds_count") or 0) >= 1
    assert samples_above(registry, 0.25) == 0
    asyncio.get_running_loop().call_soon(time.sleep, 0.3)  # a callback that blocks the loop
    await asyncio.sleep(3 * INTERVAL)
    assert samples_above(registry, 0.25) >= 1
    await lag.stop()
    count = registry.get_sample_value("crewlet_operator_event_loop_lag_seconds_count")
    await asyncio.sleep(5 * INTERVAL)
    assert registry.get_sample_value("crewlet_operator_event_loop_lag_seconds_count") == count


async def test_stop_before_start_and_twice_is_harmless() -> None:
    lag = EventLoopLag(lag_histogram()[0], interval=INTERVAL)
    await lag.stop()
    await lag.start()
    await lag.stop()
    await lag.stop()
