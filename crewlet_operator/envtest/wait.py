"""Polling helper for tests: the API is eventually consistent, so tests wait for conditions."""

from __future__ import annotations

import asyncio
import inspect
import reprlib
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar, overload

from crewlet_operator.errors import NotFoundError
from crewlet_operator.kube.resources import NAMESPACE

if TYPE_CHECKING:
    from crewlet_operator.kube.client import Client

T = TypeVar("T")

RETRIED: tuple[type[BaseException], ...] = (AssertionError, NotFoundError)
"""What :func:`eventually` counts as "not yet" by default, besides a falsy result: a failed
``assert``, and a 404 (``client.get`` of an object not written yet)."""


# A probe may return None for "not yet": the result is typed without it (mypy infers
# ``dict[str, Any]`` from a probe of ``dict[str, Any] | None``).
@overload
async def eventually(
    probe: Callable[[], Awaitable[T | None]],
    timeout: float = ...,
    interval: float = ...,
    message: str = ...,
    *,
    retry_on: tuple[type[BaseException], ...] = ...,
) -> T: ...


@overload
async def eventually(
    probe: Callable[[], T | None],
    timeout: float = ...,
    interval: float = ...,
    message: str = ...,
    *,
    retry_on: tuple[type[BaseException], ...] = ...,
) -> T: ...


async def eventually(
    probe: Callable[[], T | Awaitable[T | None] | None],
    timeout: float = 30.0,
    interval: float = 0.1,
    message: str = "",
    *,
    retry_on: tuple[type[BaseException], ...] = RETRIED,
) -> T:
    """Call ``probe`` until it returns a truthy value and return it.

    "Not yet" is a falsy result or an exception of ``retry_on`` (by default
    :data:`RETRIED`: :class:`AssertionError` and :class:`~crewlet_operator.errors.NotFoundError`;
    pass others, e.g. ``retry_on=(ForbiddenError,)`` while an RBAC grant propagates). Any other
    exception propagates at once: a typo in a probe fails the test now, not after ``timeout``.

    Raises:
        TimeoutError: not met within ``timeout`` seconds; the message names ``message`` (or the
            probe) and the last result or exception, which is also its ``__cause__``.
    """
    deadline = time.monotonic() + timeout
    while True:
        last_error: BaseException | None = None
        try:
            result = probe()
            if inspect.isawaitable(result):
                result = await result
            if result:
                return result
            last = f"it returned {reprlib.repr(result)}"
        except retry_on as exc:
            last_error = exc
            last = f"it raised {type(exc).__name__}: {exc}"
        if time.monotonic() > deadline:
            what = message or getattr(probe, "__name__", "condition")
            raise TimeoutError(f"{what} not met within {timeout}s: {last}") from last_error
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
