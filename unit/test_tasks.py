"""Stopping background tasks: their cancellation swallowed, the caller's kept."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from crewlet_operator._tasks import cancel_and_wait


async def _forever() -> None:
    await asyncio.Event().wait()


async def test_every_task_is_cancelled_and_has_ended() -> None:
    tasks = [asyncio.create_task(_forever()) for _ in range(3)]
    await asyncio.sleep(0)
    await cancel_and_wait(*tasks)
    assert all(t.cancelled() for t in tasks)


async def test_a_task_that_failed_before_has_its_failure_re_raised() -> None:
    async def fail() -> None:
        raise ValueError("broken")

    task = asyncio.create_task(fail())
    await asyncio.sleep(0)
    with pytest.raises(ValueError, match="broken"):
        await cancel_and_wait(task)


async def test_the_caller_cancelled_while_it_waits_is_cancelled_once_the_tasks_ended() -> None:
    """Even when the task it waits for swallows that cancellation (asyncio hands a waiter's
    cancellation to what it awaits) and ends as if nothing happened."""
    release = asyncio.Event()

    async def stubborn() -> None:
        while not release.is_set():
            with contextlib.suppress(asyncio.CancelledError):
                await release.wait()

    task = asyncio.create_task(stubborn())
    await asyncio.sleep(0)
    stopper = asyncio.create_task(cancel_and_wait(task))
    await asyncio.sleep(0)
    stopper.cancel()
    await asyncio.sleep(0)
    assert not task.done()
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await stopper
    assert task.done() and not task.cancelled()


async def test_a_cancellation_already_under_way_lets_the_caller_clean_up() -> None:
    stopped = []

    async def cleans_up_after_a_cancel() -> None:
        task = asyncio.create_task(_forever())
        try:
            await _forever()
        finally:
            await cancel_and_wait(task)  # inside the caller's own cancellation
            stopped.append(task.cancelled())

    caller = asyncio.create_task(cleans_up_after_a_cancel())
    await asyncio.sleep(0)
    caller.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await caller
    assert stopped == [True]
