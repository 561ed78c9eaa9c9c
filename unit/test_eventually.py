"""``eventually``: what counts as "not yet", and what its timeout says."""

from __future__ import annotations

import time

import pytest

from crewlet_operator.errors import ForbiddenError, NotFoundError
from crewlet_operator.testing import eventually


async def test_an_error_that_is_no_assertion_fails_at_once() -> None:
    calls = 0

    def typo() -> bool:
        nonlocal calls
        calls += 1
        status: dict[str, str] = {"phase": "Ready"}
        return status["phsae"] == "Ready"  # a typo: KeyError

    started = time.monotonic()
    with pytest.raises(KeyError, match="phsae"):
        await eventually(typo, timeout=30)
    assert calls == 1 and time.monotonic() - started < 1


async def test_an_assertion_and_a_not_found_are_retried_until_the_probe_holds() -> None:
    results: list[Exception] = [NotFoundError(404), AssertionError("no")]

    async def probe() -> str:
        if results:
            raise results.pop(0)
        return "done"

    assert await eventually(probe, interval=0.01) == "done"


async def test_the_timeout_names_the_last_result() -> None:
    with pytest.raises(TimeoutError, match=r"^Ready not met within 0.05s: it returned \[\]$"):
        await eventually(lambda: [], timeout=0.05, interval=0.01, message="Ready")


async def test_the_timeout_names_the_last_exception_retried_and_chains_it() -> None:
    def probe() -> bool:
        raise AssertionError("replicas 0 != 1")

    with pytest.raises(TimeoutError) as raised:
        await eventually(probe, timeout=0.05, interval=0.01)
    assert str(raised.value) == (
        "probe not met within 0.05s: it raised AssertionError: replicas 0 != 1"
    )
    assert isinstance(raised.value.__cause__, AssertionError)


async def test_retry_on_names_what_else_counts_as_not_yet() -> None:
    refusals = [ForbiddenError(403)]

    def probe() -> bool:
        if refusals:
            raise refusals.pop()
        return True

    assert await eventually(probe, interval=0.01, retry_on=(ForbiddenError,))
    refusals.append(ForbiddenError(403))
    with pytest.raises(ForbiddenError):  # not retried by default
        await eventually(probe, interval=0.01)
