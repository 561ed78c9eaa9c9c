"""One dry run a class generation (crewlet_operator_daemon.admission): a burst of new companies of a
class nobody has run yet waits for the first one's, and a refused one admits nobody."""

from __future__ import annotations

import asyncio

import pytest

from crewlet_operator_daemon.admission import Admissions


class DryRuns:
    """Counts dry runs; each one waits until released, then passes or raises ``refusal``."""

    def __init__(self, refusal: Exception | None = None) -> None:
        self.refusal = refusal
        self.started = 0
        self.release = asyncio.Event()

    async def __call__(self) -> None:
        self.started += 1
        await self.release.wait()
        if self.refusal is not None:
            raise self.refusal


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_a_burst_of_one_class_generation_dry_runs_once() -> None:
    admissions, dry_run = Admissions(), DryRuns()
    burst = [asyncio.create_task(admissions.admit("uid-a", 1, dry_run)) for _ in range(20)]
    await settle()
    assert dry_run.started == 1
    assert not any(task.done() for task in burst), "admitted before the dry run passed"
    dry_run.release.set()
    await asyncio.gather(*burst)
    assert dry_run.started == 1
    assert admissions.admitted("uid-a", 1)
    await admissions.admit("uid-a", 1, dry_run)  # admitted: no request at all
    assert dry_run.started == 1


async def test_a_new_generation_or_another_class_is_dry_run_again() -> None:
    admissions, dry_run = Admissions(), DryRuns()
    dry_run.release.set()
    await admissions.admit("uid-a", 1, dry_run)
    await admissions.admit("uid-a", 2, dry_run)
    await admissions.admit("uid-b", 1, dry_run)
    assert dry_run.started == 3
    assert not admissions.admitted("uid-a", 1), "only the class's newest generation counts"
    assert admissions.admitted("uid-a", 2) and admissions.admitted("uid-b", 1)


async def test_a_refused_dry_run_admits_nobody_and_each_waiter_runs_its_own() -> None:
    admissions, shared = Admissions(), DryRuns(ValueError("spec.tolerations: Invalid value"))
    first = asyncio.create_task(admissions.admit("uid-a", 1, shared))
    await settle()
    own = [DryRuns(ValueError(f"company {i}'s own refusal")) for i in range(3)]
    waiters = [asyncio.create_task(admissions.admit("uid-a", 1, d)) for d in own]
    await settle()
    assert [d.started for d in own] == [0, 0, 0], "waiters ran before the shared one ended"
    shared.release.set()
    with pytest.raises(ValueError, match="tolerations"):
        await first
    await settle()
    assert [d.started for d in own] == [1, 1, 1]
    for d in own:
        d.release.set()
    outcomes = await asyncio.gather(*waiters, return_exceptions=True)
    assert [str(o) for o in outcomes] == [f"company {i}'s own refusal" for i in range(3)]
    assert not admissions.admitted("uid-a", 1)


async def test_a_cancelled_waiter_does_not_cancel_the_dry_run_the_others_wait_for() -> None:
    admissions, dry_run = Admissions(), DryRuns()
    first = asyncio.create_task(admissions.admit("uid-a", 1, dry_run))
    await settle()
    impatient = asyncio.create_task(admissions.admit("uid-a", 1, dry_run))
    patient = asyncio.create_task(admissions.admit("uid-a", 1, dry_run))
    await settle()
    impatient.cancel()
    await settle()
    dry_run.release.set()
    await asyncio.gather(first, patient)
    assert impatient.cancelled()
    assert dry_run.started == 1 and admissions.admitted("uid-a", 1)


async def test_a_cancelled_dry_run_lets_the_waiters_run_their_own() -> None:
    admissions, shared = Admissions(), DryRuns()
    first = asyncio.create_task(admissions.admit("uid-a", 1, shared))
    await settle()
    own = DryRuns()
    waiter = asyncio.create_task(admissions.admit("uid-a", 1, own))
    await settle()
    first.cancel()
    await settle()
    assert own.started == 1
    own.release.set()
    await waiter
    assert admissions.admitted("uid-a", 1)
