"""Rate limiter arithmetic, checked exactly with a fake clock (no sleeping)."""

from __future__ import annotations

from collections.abc import Hashable

import pytest
from fakes import FakeClock, RecordingLimiter

from crewlet_operator.ratelimit import (
    BucketRateLimiter,
    ItemExponentialFailureRateLimiter,
    MaxOfRateLimiter,
    RateLimiter,
    default_controller_rate_limiter,
)


def test_exponential_doubles_from_base_until_the_cap() -> None:
    limiter = ItemExponentialFailureRateLimiter[str](base_delay=0.005, max_delay=1000.0)
    delays = [limiter.when("a") for _ in range(22)]
    assert delays[:5] == [0.005, 0.01, 0.02, 0.04, 0.08]
    # 0.005 * 2**17 = 655.36 s is the last uncapped delay; 2**18 would be 1310.72 s.
    assert delays[17] == pytest.approx(655.36)
    assert delays[18:] == [1000.0] * 4
    for i, delay in enumerate(delays[:18]):
        assert delay == pytest.approx(0.005 * 2**i)
    assert limiter.num_requeues("a") == 22


def test_exponential_does_not_overflow_on_huge_failure_counts() -> None:
    limiter = ItemExponentialFailureRateLimiter[str](base_delay=0.005, max_delay=1000.0)
    delays = [limiter.when("a") for _ in range(10_000)]
    assert max(delays) == 1000.0
    assert delays[-1] == 1000.0
    assert limiter.num_requeues("a") == 10_000


def test_exponential_tracks_items_independently_and_forget_resets() -> None:
    limiter = ItemExponentialFailureRateLimiter[str](base_delay=1.0, max_delay=60.0)
    assert [limiter.when("a") for _ in range(3)] == [1.0, 2.0, 4.0]
    assert limiter.when("b") == 1.0
    assert limiter.num_requeues("a") == 3
    assert limiter.num_requeues("b") == 1

    limiter.forget("a")
    assert limiter.num_requeues("a") == 0
    assert limiter.when("a") == 1.0
    assert limiter.when("b") == 2.0  # untouched by forgetting "a"
    limiter.forget("never-seen")  # no error


def test_exponential_with_zero_base_never_waits() -> None:
    limiter = ItemExponentialFailureRateLimiter[int](base_delay=0.0, max_delay=10.0)
    assert {limiter.when(1) for _ in range(2000)} == {0.0}


def test_exponential_rejects_negative_delays() -> None:
    with pytest.raises(ValueError, match="negative"):
        ItemExponentialFailureRateLimiter[int](base_delay=-1.0)
    with pytest.raises(ValueError, match="negative"):
        ItemExponentialFailureRateLimiter[int](max_delay=-1.0)


# --- BucketRateLimiter ------------------------------------------------------------------------


def test_bucket_allows_the_burst_then_spaces_by_one_over_qps() -> None:
    clock = FakeClock()
    bucket = BucketRateLimiter[str](qps=10.0, burst=100, clock=clock)
    assert [bucket.when("x") for _ in range(100)] == [0.0] * 100
    # At the same instant, each further reservation waits one more 1/qps = 0.1 s.
    after_burst = [bucket.when("x") for _ in range(5)]
    assert after_burst == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.5])


def test_bucket_refills_at_qps() -> None:
    clock = FakeClock()
    bucket = BucketRateLimiter[str](qps=10.0, burst=100, clock=clock)
    for _ in range(100):
        bucket.when("x")
    clock.advance(1.0)  # 10 tokens
    assert [bucket.when("x") for _ in range(10)] == [0.0] * 10
    assert bucket.when("x") == pytest.approx(0.1)


def test_bucket_debt_is_paid_before_new_tokens() -> None:
    clock = FakeClock()
    bucket = BucketRateLimiter[str](qps=10.0, burst=100, clock=clock)
    for _ in range(100):
        bucket.when("x")
    assert [bucket.when("x") for _ in range(5)] == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.5])
    clock.advance(0.5)  # exactly pays back the 5 reserved tokens
    assert bucket.when("x") == pytest.approx(0.1)
    clock.advance(0.05)  # repays half of the 1 token owed: the next is 1.5 tokens away
    assert bucket.when("x") == pytest.approx(0.15)


def test_bucket_never_holds_more_than_burst() -> None:
    clock = FakeClock()
    bucket = BucketRateLimiter[str](qps=10.0, burst=100, clock=clock)
    clock.advance(10_000.0)
    assert [bucket.when("x") for _ in range(100)] == [0.0] * 100
    assert bucket.when("x") == pytest.approx(0.1)


def test_bucket_ignores_a_clock_going_backwards() -> None:
    clock = FakeClock()
    bucket = BucketRateLimiter[str](qps=10.0, burst=1, clock=clock)
    assert bucket.when("x") == 0.0
    clock.advance(-5.0)
    assert bucket.when("x") == pytest.approx(0.1)


def test_bucket_is_shared_by_all_items_and_does_not_track_them() -> None:
    clock = FakeClock()
    bucket = BucketRateLimiter[str](qps=2.0, burst=2, clock=clock)
    assert bucket.when("a") == 0.0
    assert bucket.when("b") == 0.0
    assert bucket.when("c") == pytest.approx(0.5)
    bucket.forget("c")
    assert bucket.num_requeues("a") == 0
    assert bucket.when("d") == pytest.approx(1.0)  # forget did not give a token back


def test_bucket_with_infinite_qps_never_waits() -> None:
    bucket = BucketRateLimiter[int](qps=float("inf"), burst=1, clock=FakeClock())
    assert {bucket.when(1) for _ in range(1000)} == {0.0}


def test_bucket_rejects_unusable_settings() -> None:
    with pytest.raises(ValueError, match="qps"):
        BucketRateLimiter[int](qps=0.0)
    with pytest.raises(ValueError, match="burst"):
        BucketRateLimiter[int](burst=0)


# --- MaxOfRateLimiter -------------------------------------------------------------------------


def test_max_of_returns_the_longest_delay_and_asks_every_limiter() -> None:
    short, long = RecordingLimiter(0.5, requeues=1), RecordingLimiter(3.0, requeues=7)
    limiter = MaxOfRateLimiter[Hashable](short, long)
    assert limiter.when("a") == 3.0
    assert short.whens == ["a"]
    assert long.whens == ["a"]
    assert limiter.num_requeues("a") == 7


def test_max_of_forwards_forget_to_every_limiter() -> None:
    first, second = RecordingLimiter(1.0), RecordingLimiter(2.0)
    limiter = MaxOfRateLimiter[Hashable](first, second)
    limiter.forget("a")
    assert first.forgotten == ["a"]
    assert second.forgotten == ["a"]


def test_max_of_with_real_limiters_switches_between_them() -> None:
    clock = FakeClock()
    exponential = ItemExponentialFailureRateLimiter[str](base_delay=0.01, max_delay=100.0)
    bucket = BucketRateLimiter[str](qps=1.0, burst=1, clock=clock)
    limiter = MaxOfRateLimiter[str](exponential, bucket)
    assert limiter.when("a") == 0.01  # bucket had a token: the exponential delay wins
    assert limiter.when("b") == pytest.approx(1.0)  # bucket is empty: its delay wins
    assert limiter.num_requeues("a") == 1
    limiter.forget("a")
    assert limiter.num_requeues("a") == 0


def test_max_of_needs_a_limiter() -> None:
    with pytest.raises(ValueError, match="at least one"):
        MaxOfRateLimiter[int]()


# --- default_controller_rate_limiter ----------------------------------------------------------


def test_default_controller_rate_limiter_is_client_go_default() -> None:
    clock = FakeClock()
    limiter = default_controller_rate_limiter(clock)
    exponential, bucket = limiter.limiters
    assert isinstance(exponential, ItemExponentialFailureRateLimiter)
    assert (exponential.base_delay, exponential.max_delay) == (0.005, 1000.0)
    assert isinstance(bucket, BucketRateLimiter)
    assert (bucket.qps, bucket.burst) == (10.0, 100)

    # 100 different failing items: each waits its first 5 ms; then the bucket takes over.
    assert [limiter.when(i) for i in range(100)] == [0.005] * 100
    assert limiter.when(100) == pytest.approx(0.1)
    # One item failing on its own: pure exponential backoff.
    clock.advance(3600.0)
    assert [limiter.when("x") for _ in range(4)] == [0.005, 0.01, 0.02, 0.04]
    assert limiter.num_requeues("x") == 4


def test_limiters_satisfy_the_protocol() -> None:
    limiters: list[RateLimiter[str]] = [
        ItemExponentialFailureRateLimiter[str](),
        BucketRateLimiter[str](clock=FakeClock()),
        MaxOfRateLimiter[str](RecordingLimiter(1.0)),
        default_controller_rate_limiter(FakeClock()),
    ]
    assert [limiter.num_requeues("a") for limiter in limiters] == [0, 0, 0, 0]
