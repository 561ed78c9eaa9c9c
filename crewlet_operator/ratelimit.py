"""Rate limiters that decide how long a failed item waits before it is retried.

The semantics follow client-go's ``util/workqueue/default_rate_limiters.go`` so that an
operator built on this library backs off the way a Go controller would::

    limiter = default_controller_rate_limiter()
    delay = limiter.when(key)   # records a failure and returns seconds to wait
    ...
    limiter.forget(key)         # the key succeeded: start its backoff from scratch

A limiter never refuses: ``when`` always returns a delay (possibly 0). Limiters are not
thread-safe; they are meant to be used from one asyncio event loop, like the queue that owns
them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Hashable
from typing import Generic, Protocol, TypeVar

__all__ = [
    "BucketRateLimiter",
    "Clock",
    "ItemExponentialFailureRateLimiter",
    "MaxOfRateLimiter",
    "RateLimiter",
    "default_controller_rate_limiter",
]

K = TypeVar("K", bound=Hashable)
K_contra = TypeVar("K_contra", bound=Hashable, contravariant=True)

Clock = Callable[[], float]
"""A monotonic clock returning seconds, such as :func:`time.monotonic`."""


class RateLimiter(Protocol[K_contra]):
    """Decides how long an item waits before it is retried.

    Any object with these three methods is a rate limiter; no subclassing is needed.
    """

    def when(self, item: K_contra) -> float:
        """Record a failure of ``item`` and return the seconds to wait before retrying it."""
        ...

    def forget(self, item: K_contra) -> None:
        """Stop tracking ``item`` (it succeeded, or was given up on): reset its backoff."""
        ...

    def num_requeues(self, item: K_contra) -> int:
        """Return how many failures of ``item`` are being tracked."""
        ...


class ItemExponentialFailureRateLimiter(Generic[K]):
    """Per-item exponential backoff: ``base_delay * 2**failures``, capped at ``max_delay``.

    The first ``when(item)`` returns ``base_delay``, the next twice that, and so on, until
    :meth:`forget` resets the item.

    :param base_delay: Seconds to wait after the first failure.
    :param max_delay: Upper bound for any delay, in seconds.
    """

    def __init__(self, base_delay: float = 0.005, max_delay: float = 1000.0) -> None:
        if base_delay < 0 or max_delay < 0:
            raise ValueError("base_delay and max_delay must not be negative")
        self.base_delay = base_delay
        self.max_delay = max_delay
        self._failures: dict[K, int] = {}

    def when(self, item: K) -> float:
        """Record a failure of ``item`` and return its backoff in seconds."""
        exp = self._failures.get(item, 0)
        self._failures[item] = exp + 1
        try:
            # ldexp is exact for powers of two; a huge exponent overflows instead of
            # wrapping, and an overflow can only mean "far beyond the cap".
            backoff = math.ldexp(self.base_delay, exp)
        except OverflowError:
            return self.max_delay
        return min(backoff, self.max_delay)

    def forget(self, item: K) -> None:
        """Reset the failure count of ``item``."""
        self._failures.pop(item, None)

    def num_requeues(self, item: K) -> int:
        """Return the number of failures recorded for ``item`` since it was last forgotten."""
        return self._failures.get(item, 0)


class BucketRateLimiter(Generic[K]):
    """An overall token bucket shared by all items.

    The bucket holds at most ``burst`` tokens and refills at ``qps`` tokens per second. Each
    :meth:`when` reserves one token, going into debt if there is none, and returns how long
    until that token exists. This is the reservation semantics of Go's
    ``golang.org/x/time/rate`` ``Limiter.Reserve().Delay()``: it never refuses, it only delays.

    The bucket limits the overall retry rate, not any single item, so :meth:`forget` does
    nothing and :meth:`num_requeues` is always 0.

    :param qps: Tokens added per second. ``math.inf`` disables the limit.
    :param burst: Bucket size: how many calls may be answered with no delay at once.
    :param clock: Monotonic clock in seconds; inject a fake one in tests.
    """

    def __init__(self, qps: float = 10.0, burst: int = 100, clock: Clock = time.monotonic) -> None:
        if not qps > 0:
            raise ValueError("qps must be positive")
        if burst < 1:
            # With an empty bucket x/time/rate would refuse every reservation; a limiter here
            # must always answer with a delay.
            raise ValueError("burst must be at least 1")
        self.qps = qps
        self.burst = burst
        self._clock = clock
        self._tokens = float(burst)  # a new bucket starts full, like rate.NewLimiter
        self._last = clock()

    def when(self, item: K) -> float:
        """Reserve one token and return the seconds until it is available."""
        if math.isinf(self.qps):
            return 0.0
        now = self._clock()
        # A clock that stepped backwards adds no tokens (x/time/rate does the same).
        elapsed = max(0.0, now - self._last)
        tokens = min(float(self.burst), self._tokens + elapsed * self.qps) - 1.0
        self._tokens = tokens
        self._last = now
        return -tokens / self.qps if tokens < 0 else 0.0

    def forget(self, item: K) -> None:
        """Do nothing: the bucket does not track items."""

    def num_requeues(self, item: K) -> int:
        """Return 0: the bucket does not track items."""
        return 0


class MaxOfRateLimiter(Generic[K]):
    """Combine limiters by taking the longest delay any of them asks for.

    Every limiter's :meth:`when` is called (so each records the failure), :meth:`forget`
    is forwarded to all of them and :meth:`num_requeues` is the largest count.

    :param limiters: One or more limiters.
    """

    def __init__(self, *limiters: RateLimiter[K]) -> None:
        if not limiters:
            raise ValueError("MaxOfRateLimiter needs at least one limiter")
        self.limiters: tuple[RateLimiter[K], ...] = limiters

    def when(self, item: K) -> float:
        """Record a failure in every limiter and return the longest delay."""
        return max(limiter.when(item) for limiter in self.limiters)

    def forget(self, item: K) -> None:
        """Forward to every limiter."""
        for limiter in self.limiters:
            limiter.forget(item)

    def num_requeues(self, item: K) -> int:
        """Return the largest failure count any limiter tracks for ``item``."""
        return max(limiter.num_requeues(item) for limiter in self.limiters)


def default_controller_rate_limiter(clock: Clock = time.monotonic) -> MaxOfRateLimiter[Hashable]:
    """Return client-go's ``DefaultControllerRateLimiter``.

    The per-item exponential backoff protects the API server from one object that keeps
    failing; the overall bucket protects it from many objects failing at once (for example
    when a webhook is down and every reconcile errors).

    :param clock: Monotonic clock for the bucket; inject a fake one in tests.
    """
    return MaxOfRateLimiter[Hashable](
        # 5 ms first retry: a conflict or a stale cache read usually clears almost at once, so
        # the first retries should be nearly immediate. Doubling passes 1 s on the 9th failure
        # and hits the 1000 s (~17 min) cap on the 19th, so a permanently broken object settles
        # to one attempt every ~17 minutes instead of hammering the API server.
        ItemExponentialFailureRateLimiter[Hashable](base_delay=0.005, max_delay=1000.0),
        # 10 qps with a burst of 100: the bucket only matters when many items fail together.
        # The burst lets an ordinary spike of retries (a resync, a short outage) through with
        # no delay; beyond it retries are spread out to 10 per second in total, so a mass
        # failure turns into a steady trickle rather than a retry storm.
        BucketRateLimiter[Hashable](qps=10.0, burst=100, clock=clock),
    )
