"""The children's apply slots: a semaphore that narrows while verdicts wait."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from crewlet_operator_daemon.slots import (
    CHILD_APPLIES_IN_FLIGHT,
    CHILD_APPLIES_WHILE_VERDICTS_WAIT,
    VERDICTS_PRESSING,
    ApplySlots,
    Slots,
)


async def _holders(slots: Slots, count: int, release: asyncio.Event) -> list[asyncio.Task[None]]:
    async def hold() -> None:
        async with slots:
            await release.wait()

    tasks = [asyncio.create_task(hold()) for _ in range(count)]
    await asyncio.sleep(0)
    return tasks


async def test_at_most_size_hold_a_slot() -> None:
    slots, release = Slots(3), asyncio.Event()
    tasks = await _holders(slots, 5, release)
    assert slots.held == 3
    release.set()
    await asyncio.gather(*tasks)
    assert slots.held == 0


async def test_a_shrink_takes_no_slot_away_and_is_met_as_holders_leave() -> None:
    slots, first = Slots(4), asyncio.Event()
    holding = await _holders(slots, 4, first)
    slots.resize(1)
    assert slots.held == 4  # nobody is interrupted
    second = asyncio.Event()
    waiting = await _holders(slots, 2, second)
    first.set()
    await asyncio.gather(*holding)
    assert slots.held == 1  # one of the waiters, not both
    slots.resize(4)
    assert slots.held == 2  # growing lets the other in at once
    second.set()
    await asyncio.gather(*waiting)
    assert slots.held == 0


async def test_waiters_are_served_in_order() -> None:
    slots, order = Slots(1), []
    await slots.acquire()

    async def take(i: int) -> None:
        async with slots:
            order.append(i)

    tasks = [asyncio.create_task(take(i)) for i in range(4)]
    await asyncio.sleep(0)
    slots.release()
    await asyncio.gather(*tasks)
    assert order == [0, 1, 2, 3]


async def test_a_cancelled_waiter_leaves_no_slot_taken() -> None:
    slots = Slots(1)
    await slots.acquire()
    waiter = asyncio.create_task(slots.acquire())
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    slots.release()
    assert slots.held == 0
    await asyncio.wait_for(slots.acquire(), 1)  # the slot is free, not lost


async def test_a_waiter_cancelled_after_it_was_woken_passes_its_slot_on() -> None:
    slots = Slots(1)
    await slots.acquire()
    woken = asyncio.create_task(slots.acquire())
    after = asyncio.create_task(slots.acquire())
    await asyncio.sleep(0)
    slots.release()  # hands the slot to ``woken``, which has not run yet
    woken.cancel()
    with pytest.raises(asyncio.CancelledError):
        await woken
    await asyncio.wait_for(after, 1)
    assert slots.held == 1


def test_a_size_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        Slots(0)
    with pytest.raises(ValueError, match="at least 1"):
        Slots(1).resize(0)


async def test_the_applies_narrow_while_verdicts_press_and_widen_after() -> None:
    slots = ApplySlots()
    assert slots.size == CHILD_APPLIES_IN_FLIGHT
    with contextlib.ExitStack() as verdicts:
        for _ in range(VERDICTS_PRESSING - 1):
            verdicts.enter_context(slots.verdict())
        assert slots.size == CHILD_APPLIES_IN_FLIGHT  # a status write's usual company
        with slots.verdict():
            assert (slots.verdicts, slots.size) == (
                VERDICTS_PRESSING,
                CHILD_APPLIES_WHILE_VERDICTS_WAIT,
            )
        assert slots.size == CHILD_APPLIES_IN_FLIGHT
    assert slots.verdicts == 0


async def test_a_verdict_that_raises_is_no_longer_counted() -> None:
    slots = ApplySlots()
    with pytest.raises(RuntimeError), slots.verdict():
        raise RuntimeError("refused")
    assert slots.verdicts == 0
