"""Stopping background tasks: the one cancel-and-await the library's components share."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any


async def cancel_and_wait(*tasks: asyncio.Future[Any]) -> None:
    """Cancel ``tasks`` and wait until each has ended.

    Their own cancellation is swallowed and any other failure re-raised. A cancellation of the
    caller while it waits propagates once every task has ended: a bare
    ``suppress(CancelledError)`` would swallow it too, and a manager being stopped would run on.
    The caller's cancellation is told apart from theirs by its count of pending cancellations
    (:meth:`asyncio.Task.cancelling`), which a cancellation already under way when this is
    called does not raise.
    """
    caller = asyncio.current_task()
    cancelling = caller.cancelling() if caller is not None else 0
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError):
            await task
    if caller is not None and caller.cancelling() > cancelling:
        raise asyncio.CancelledError
