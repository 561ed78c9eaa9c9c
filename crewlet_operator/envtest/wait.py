"""Polling helper for tests: the API is eventually consistent, so tests wait for conditions."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import reprlib
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar, overload

from crewlet_operator.errors import ConflictError, NotFoundError
from crewlet_operator.kube.resources import NAMESPACE, Resource

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


async def delete_namespace(
    client: Client, name: str, *, wait: bool = True, timeout: float = 60.0
) -> None:
    """Delete namespace ``name``; with ``wait``, until it is gone.

    kube-controller-manager's namespace controller empties a deleted namespace only 5 s after
    it sees the deletion (time for other API servers of an HA control plane to see it too), and
    then waits out its pods' graceful termination: seconds per test. With ``wait``, this does
    the same work at once, for the one API server of an envtest plane: once the namespace is
    Terminating (no object can be created in it), it deletes every namespaced kind's objects in
    it (pods with ``gracePeriodSeconds=0``: kwok's run nothing to stop), and once none is left
    (objects with finalizers go when their controllers let them), finalizes it as the
    controller would. Only a control plane with workloads lets finalizers such as
    ``kubernetes.io/pvc-protection`` go: without kube-controller-manager, pass ``wait=False``.

    Raises:
        TimeoutError: still there after ``timeout`` seconds; the message names what is left.
    """
    try:
        await client.delete(NAMESPACE, name)
    except NotFoundError:
        return
    if not wait:
        return
    kinds = await _namespaced_kinds(client)
    options = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}
    await asyncio.gather(
        *(_suppress_gone(client.request("DELETE", k.path(name), body=options)) for k in kinds)
    )
    deadline = time.monotonic() + timeout
    while True:
        counts = await asyncio.gather(*(_count(client, k, name) for k in kinds))
        left = [f"{k.group_kind}: {n}" for k, n in zip(kinds, counts, strict=True) if n]
        if not left:
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"namespace {name} not emptied within {timeout}s: {left}")
        await asyncio.sleep(0.05)
    found = await client.get_or_none(NAMESPACE, name)
    if found is not None:
        spec = {**found.get("spec", {}), "finalizers": []}
        await _suppress_gone(
            client.request(
                "PUT",
                NAMESPACE.path(name=name, subresource="finalize"),
                body={**found, "spec": spec},
            )
        )
    while await client.get_or_none(NAMESPACE, name) is not None:
        if time.monotonic() > deadline:
            raise TimeoutError(f"namespace {name} not gone within {timeout}s")
        await asyncio.sleep(0.05)


async def _namespaced_kinds(client: Client) -> list[Resource]:
    """Every namespaced kind the server serves that can be deleted by collection, in each
    group's preferred version (as the namespace controller finds them)."""
    versions = ["v1"] + [
        g["preferredVersion"]["groupVersion"]
        for g in (await client.request("GET", "/apis")).get("groups", [])
    ]
    listings = await asyncio.gather(
        *(client.request("GET", f"/apis/{v}" if "/" in v else f"/api/{v}") for v in versions)
    )
    kinds: list[Resource] = []
    for version, listing in zip(versions, listings, strict=True):
        group, _, v = version.rpartition("/")
        kinds.extend(
            Resource(group, v, r["kind"], r["name"], True)
            for r in listing.get("resources", [])
            if r.get("namespaced")
            and "/" not in r["name"]
            and {"deletecollection", "list"} <= set(r.get("verbs", []))
        )
    return kinds


async def _count(client: Client, kind: Resource, namespace: str) -> int:
    with contextlib.suppress(NotFoundError):
        listed = await client.request("GET", kind.path(namespace), query={"limit": "1"})
        return len(listed.get("items") or [])
    return 0


async def _suppress_gone(request: Awaitable[object]) -> None:
    with contextlib.suppress(NotFoundError, ConflictError):
        await request
