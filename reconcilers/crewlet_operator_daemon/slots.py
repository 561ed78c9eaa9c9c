"""A semaphore whose size can change while its slots are held: the children's applies narrow
while verdicts wait, and widen again once they are written."""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Iterator
from types import TracebackType

from crewlet_operator.tracing import waiting

CHILD_APPLIES_IN_FLIGHT = 32
"""Children applies and Events in flight at once, across every worker; status writes and the
admission's dry runs take no slot. Enough for a burst to keep up with the API server's best
floor, few enough that a new company's verdict does not wait behind the applies (16 capped a
burst at 1.16x the best floor). Measurements: bench/NOTES.md, "The children's apply slots"."""
CHILD_APPLIES_WHILE_VERDICTS_WAIT = 2
"""Children applies (and Events: the recorder shares these slots) in flight at once while
:data:`VERDICTS_PRESSING` verdicts or more are on their way (from a verdict's reconcile until
its status is written): a verdict waits on the API server, and the backlog's applies are most
of what the API server is busy with. That many on their way means the status writes have
slowed, mostly while the API server collects its garbage; narrowed then, to 2 with the Events
inside, the verdicts fared best through a collection. Narrowing as soon as verdicts flow was
tried and dropped: a burst then converged 1.33x its floor, its verdicts flowing for seconds.
Measurements: bench/NOTES.md, "The children's apply slots"."""
VERDICTS_PRESSING = 8
"""Verdicts on their way from which the children's applies narrow
(:data:`CHILD_APPLIES_WHILE_VERDICTS_WAIT`): half of
:data:`crewlet_operator_daemon.controller.VERDICT_WORKERS`."""


class Slots:
    """At most :attr:`size` holders at once, first come first served.

    Shrinking takes no slot away from a holder: the size is met again as holders leave.
    Growing lets waiters in at once.
    """

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError("size must be at least 1")
        self.size = size
        # Invariants: ``held`` counts the holders, a waiter woken included (its slot is taken
        # for it when it is woken, so nobody overtakes it); a waiter is woken only while
        # ``held < size``, so ``held`` exceeds ``size`` only after a shrink.
        self.held = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    def resize(self, size: int) -> None:
        """Allow ``size`` holders from now on."""
        if size < 1:
            raise ValueError("size must be at least 1")
        self.size = size
        self._wake()

    async def acquire(self) -> None:
        """Wait for a slot and take it."""
        if self.held < self.size and not self._waiters:
            self.held += 1
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            with waiting("an apply slot"):
                await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # woken, then cancelled before it ran: pass the slot on
            else:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(waiter)
            raise

    def release(self) -> None:
        """Give a slot back."""
        self.held -= 1
        self._wake()

    def _wake(self) -> None:
        while self._waiters and self.held < self.size:
            waiter = self._waiters.popleft()
            if not waiter.done():
                self.held += 1
                waiter.set_result(None)

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.release()


class ApplySlots(Slots):
    """The children's apply slots: :data:`CHILD_APPLIES_IN_FLIGHT`, narrowed to
    :data:`CHILD_APPLIES_WHILE_VERDICTS_WAIT` while :data:`VERDICTS_PRESSING` verdicts or more
    are on their way (each inside :meth:`verdict`)."""

    def __init__(self) -> None:
        super().__init__(CHILD_APPLIES_IN_FLIGHT)
        self.verdicts = 0
        """Verdicts on their way."""

    @contextlib.contextmanager
    def verdict(self) -> Iterator[None]:
        """Count a verdict on its way while inside."""
        self.verdicts += 1
        try:
            self._fit()
            yield
        finally:
            self.verdicts -= 1
            self._fit()

    def _fit(self) -> None:
        pressed = self.verdicts >= VERDICTS_PRESSING
        self.resize(CHILD_APPLIES_WHILE_VERDICTS_WAIT if pressed else CHILD_APPLIES_IN_FLIGHT)
