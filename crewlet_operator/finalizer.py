"""The finalizer flow every controller with external state repeats, written once.

A finalizer keeps a deleted object in the API server until its controller has cleaned up what the
object stood for outside the object's own children (which garbage collection removes): cloud
resources, rows in a database, objects in other namespaces. The flow is always the same:

1. before the first write on the object's behalf, add the finalizer (else a delete racing with
   that write would leave its result behind);
2. once the object is being deleted (``metadata.deletionTimestamp``), run the cleanup;
3. when the cleanup has succeeded, remove the finalizer, and the API server deletes the object.

:class:`Finalizer` does all three from one call at the top of a reconcile::

    finalizer = Finalizer(client, TENANT, "example.com/tenant-cleanup", cleanup=delete_namespace)

    async def reconcile(request: Request) -> None:
        tenant = cache.get(TENANT, request.name)
        if tenant is None:
            return
        tenant = await finalizer.handle(tenant)
        if tenant is None:
            return  # being deleted: cleaned up, finalizer removed
        ...  # write what the tenant asks for

A failing cleanup raises out of :meth:`Finalizer.handle`, so the reconcile is retried with
backoff and the finalizer stays. Every change of ``metadata.finalizers`` is a merge patch
conditional on the object's ``resourceVersion``: the finalizers other controllers add or remove
meanwhile are never lost (a conflict re-reads the object and tries again), and a patch never
creates an object that was deleted meanwhile.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import structlog
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt

from crewlet_operator.errors import ConflictError, NotFoundError
from crewlet_operator.kube.client import Client
from crewlet_operator.kube.resources import Resource
from crewlet_operator.objects import KubeObject, is_being_deleted, name, namespace
from crewlet_operator.owners import has_finalizer

log = structlog.get_logger("crewlet_operator.finalizer")

Cleanup = Callable[[KubeObject], Awaitable[None]]
"""Cleans up after a deleted object; raises to be retried (the finalizer stays meanwhile)."""

CONFLICT_RETRIES = 5
"""Writes of ``metadata.finalizers`` tried before a conflict is left to the reconcile's own
backoff: each retry re-reads the object, so only a hot object exhausts them."""


class Finalizer:
    """One controller's finalizer on one kind, and the cleanup it guards.

    :param client: The client that patches the objects (its identity needs ``patch`` on them).
    :param resource: The kind of the objects.
    :param finalizer: The finalizer's name, qualified by a domain of yours
        (``example.com/cleanup``), as the API server asks of finalizers that are not its own.
    :param cleanup: Awaited with the object once it is being deleted and still carries the
        finalizer; it must be safe to run again (it is retried after a failure, and again
        if the process dies before the finalizer is removed).
    """

    def __init__(
        self, client: Client, resource: Resource, finalizer: str, cleanup: Cleanup
    ) -> None:
        if "/" not in finalizer:
            raise ValueError(f"finalizer {finalizer!r} must be qualified: <domain>/<name>")
        self.client = client
        self.resource = resource
        self.finalizer = finalizer
        self.cleanup = cleanup

    async def handle(self, obj: KubeObject) -> KubeObject | None:
        """Run the flow for ``obj`` (usually read from the cache).

        Returns the object, carrying the finalizer (added now if it was missing), when it is not
        being deleted: go on reconciling it. Returns None when it is being deleted (the cleanup
        has run and the finalizer is removed, or it never carried it) or is gone: stop.

        Raises:
            Exception: whatever the cleanup raised; the finalizer stays.
            ConflictError: the object kept changing under every retry (retried with backoff).
        """
        if is_being_deleted(obj):
            if has_finalizer(obj, self.finalizer):
                await self.cleanup(obj)
                await self._change(obj, add=False)
                log.info("finalized", kind=self.resource.kind, name=name(obj))
            return None
        if has_finalizer(obj, self.finalizer):
            return obj
        return await self._change(obj, add=True)

    async def _change(self, obj: KubeObject, *, add: bool) -> KubeObject | None:
        """Add or remove the finalizer, conditional on the resourceVersion; re-read and try
        again on a conflict. Returns the patched object, or None when it is gone (or, adding,
        when it has begun to be deleted: no finalizer may be added then)."""
        current = obj
        # Retried at once on a conflict, CONFLICT_RETRIES patches in all, the last conflict
        # raised as it is; each retry first reads the object again.
        conflicts = AsyncRetrying(
            retry=retry_if_exception_type(ConflictError),
            stop=stop_after_attempt(CONFLICT_RETRIES),
            reraise=True,
        )
        async for attempt in conflicts:
            with attempt:
                if attempt.retry_state.attempt_number > 1:
                    try:
                        current = await self.client.get(self.resource, name(obj), namespace(obj))
                    except NotFoundError:
                        return None
                    if add and is_being_deleted(current):
                        return None
                    if has_finalizer(current, self.finalizer) == add:
                        return current
                meta = current.get("metadata") or {}
                finalizers = [f for f in meta.get("finalizers") or [] if f != self.finalizer]
                if add:
                    finalizers.append(self.finalizer)
                patch = {
                    "metadata": {
                        "finalizers": finalizers,
                        "resourceVersion": meta.get("resourceVersion"),
                    }
                }
                try:
                    return await self.client.patch(
                        self.resource, name(current), patch, namespace(current)
                    )
                except NotFoundError:
                    return None
        raise AssertionError("unreachable: the last conflict is raised")
