"""Test doubles shared by the unit tests."""

from __future__ import annotations

from collections.abc import Hashable


class FakeClock:
    """A clock (monotonic or epoch seconds) that only moves when told to."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class RecordingLimiter:
    """A rate limiter with a fixed delay that records what it was asked.

    ``num_requeues`` answers ``requeues`` when given, else how often ``when`` was called.
    """

    def __init__(self, delay: float, requeues: int | None = None) -> None:
        self.delay = delay
        self.requeues = requeues
        self.whens: list[Hashable] = []
        self.forgotten: list[Hashable] = []

    def when(self, item: Hashable) -> float:
        self.whens.append(item)
        return self.delay

    def forget(self, item: Hashable) -> None:
        self.forgotten.append(item)

    def num_requeues(self, item: Hashable) -> int:
        return len(self.whens) if self.requeues is None else self.requeues
