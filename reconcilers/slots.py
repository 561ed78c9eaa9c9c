"""A semaphore whose size can change while its slots are held: the children's applies narrow
while verdicts wait, and widen again once they are written."""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Iterator
from types import TracebackType

CHILD_APPLIES_IN_FLIGHT = 32
"""Children applies and Events in flight at once, across every worker; status writes and the
admission's dry runs take no slot. Measured with the bench (convergence and latency figures,
one machine): 16 held a new company's verdict to 0.17 s (p99) but capped a burst at the API
server's 16-writer floor, 1.16x its best; 64 matched the best floor (with 16 workers) but let
verdicts wait behind the applies (p99 0.48 s); 32 did both (0.88x the best floor, p99 0.83 s
on a machine slowed to 1.6x its floor)."""
CHILD_APPLIES_WHILE_VERDICTS_WAIT = 2
"""Children applies (and Events: the recorder shares these slots) in flight at once while
:data:`VERDICTS_PRESSING` verdicts or more are on their way (from a verdict's reconcile until
its status is written): a verdict waits on the API server, and the backlog's applies are most
of what the API server is busy with. At 100 creates a second about 5 are on their way when a
status write takes ~50 ms; 8 or more means the writes have slowed (the API server's garbage
collection slows them tenfold for seconds, and what it is asked meanwhile slows them more).
Measured with the bench's latency figure, 64 verdict workers, narrowed to 8 and not at all:
status writes took 0.03 s on average (0.12 s not narrowed) outside a collection and 0.4 to
0.5 s (0.6 to 0.9 s) in one, the verdicts' p50 0.09 s (0.32 s); the backlog converged 1.06x
its floor in both. Narrowed to 8 with the Events apart, a collection still held verdicts for
0.8 to 1.2 s; at 2 with the Events inside, 1.1 s (p99; 116 of the load's 3,030 a second or
more, the creates answered within 0.2 s). Narrowing as soon as verdicts flow (one begun within
the last second) was tried and dropped: at 8, p99 1.68 s and the backlog 1.22x its floor; at 2,
p50 0.06 s but p99 1.26 s, and a burst of 1,000 converged 1.33x its floor (its verdicts flow
for seconds). Through the load the machine's two cores stayed busy either way (the API server
about one, the operator half of one), so a collection's extra third of a core slowed
everything whatever the children were held to."""
VERDICTS_PRESSING = 8
"""Verdicts on their way from which the children's applies narrow
(:data:`CHILD_APPLIES_WHILE_VERDICTS_WAIT`): half of
:data:`reconcilers.controller.VERDICT_WORKERS`."""


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
