"""Polling helper for tests: the API is eventually consistent, so tests wait for conditions."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar, overload

from crewlet_operator.kube.resources import NAMESPACE

if TYPE_CHECKING:
    from crewlet_operator.kube.client import Client

T = TypeVar("T")


# A probe may return None for "not yet": the result is typed without it (mypy infers
# ``dict[str, Any]`` from a probe of ``dict[str, Any] | None``).
@overload
async def eventually(
    probe: Callable[[], Awaitable[T | None]],
    timeout: float = ...,
    interval: float = ...,
    message: str = ...,
) -> T: ...


@overload
async def eventually(
    probe: Callable[[], T | None], timeout: float = ..., interval: float = ..., message: str = ...
) -> T: ...


async def eventually(
    probe: Callable[[], T | Awaitable[T | None] | None],
    timeout: float = 30.0,
    interval: float = 0.1,
    message: str = "",
) -> T:
    """Call ``probe`` until it returns a truthy value and return it.

    Exceptions from ``probe`` count as "not yet"; after ``timeout`` seconds the last one (or a
    :class:`TimeoutError` naming ``message``) is raised, so a failing test says what it waited for.
    """
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        try:
            result = probe()
            if inspect.isawaitable(result):
                result = await result
            if result:
                return result
            last_error = None
        except Exception as exc:
            last_error = exc
        if time.monotonic() > deadline:
            what = message or getattr(probe, "__name__", "condition")
            raise TimeoutError(f"{what} not met within {timeout}s") from last_error
        await asyncio.sleep(interval)


def no_namespace_terminating(client: Client) -> Callable[[], Awaitable[bool]]:
    """A probe for :func:`eventually`: no namespace is being deleted.

    kube-controller-manager deletes a deleted namespace's objects one by one, after the test that
    owned it has ended: wait for this before counting writes
    (:meth:`~crewlet_operator.envtest.ControlPlane.mutating_requests` counts every namespace's) or
    running a controller that watches every namespace."""

    async def probe() -> bool:
        listed = await client.list(NAMESPACE)
        return all(n.get("status", {}).get("phase") != "Terminating" for n in listed.items)

    return probe
