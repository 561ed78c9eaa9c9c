"""The EngineClass controller: a class's status (how many companies name it, and whether the
Secrets it references resolve), decided by :func:`crewlet_operator_daemon.engineclass.class_status`;
and what it shares with the Company controller: the companies' index by class, the reads of a
class's Secrets and the status writes."""

from __future__ import annotations

import time
from typing import Protocol

from crewlet_operator import (
    ForbiddenError,
    Manager,
    NamedObjects,
    NotFoundError,
    Request,
    Resource,
    Result,
    new_predicate_funcs,
)
from crewlet_operator import KubeObject as Object
from crewlet_operator.errors import UnauthorizedError
from crewlet_operator_daemon.api.v1alpha1 import COMPANY, ENGINE_CLASS
from crewlet_operator_daemon.engineclass import class_status
from crewlet_operator_daemon.references import referenced_secrets

CLASS_INDEX = "class"
"""The companies' index by the class they name."""
SECRET_ANSWER_TIMEOUT = 10.0
"""Seconds a reconcile waits for a newly watched Secret's first answer before it retries."""
VIEW_SYNC_TIMEOUT = 60.0
"""Seconds a reconcile waits for the first list of the cluster view (every company and webhook
route: with sharding, listed beside the caches at start)."""


def class_name(company: Object) -> str:
    """The EngineClass a Company names, as stored ("" when it names none)."""
    return str((company.get("spec") or {}).get("className") or "")


def class_of(company: Object) -> list[str]:
    """The index function of :data:`CLASS_INDEX`."""
    named = class_name(company)
    return [named] if named else []


def _class_changed(old: Object, new: Object) -> bool:
    return class_name(old) != class_name(new)


def _classes_named(company: Object) -> list[Request]:
    return [Request(None, named) for named in class_of(company)]


async def read_references(
    secrets: NamedObjects, engine_class: Object
) -> tuple[dict[tuple[str, str], Object | None], dict[tuple[str, str], str]]:
    """Every Secret the class references, by ``(namespace, name)`` (None when it does not
    exist), and those the operator may not read, with the API server's reason."""
    found: dict[tuple[str, str], Object | None] = {}
    unreadable: dict[tuple[str, str], str] = {}
    for ref in sorted(referenced_secrets(engine_class)):
        try:
            found[ref] = await secrets.read(*ref, timeout=SECRET_ANSWER_TIMEOUT)
        except (ForbiddenError, UnauthorizedError) as denied:
            unreadable[ref] = denied.message or denied.reason
    return found, unreadable


class StatusWrites(Protocol):
    """What :func:`write_status` writes with: a :class:`~crewlet_operator.Client`."""

    async def apply_status(self, resource: Resource, obj: Object) -> Object: ...


async def write_status(
    client: StatusWrites, resource: Resource, meta: Object, status: Object
) -> bool:
    """Apply an object's status (the client falls back to a merge patch where apply cannot
    type the stored object); False when the object is gone. A status for an object deleted
    since it was read is moot, not a failure: its delete event ends its reconciles, as
    controller-runtime's ``client.IgnoreNotFound`` ends them."""
    try:
        await client.apply_status(
            resource,
            {
                "apiVersion": resource.api_version,
                "kind": resource.kind,
                "metadata": meta,
                "status": status,
            },
        )
    except NotFoundError:
        return False
    return True


class EngineClassController:
    """Counts each class's companies and checks that its references resolve."""

    def __init__(self, manager: Manager, secrets: NamedObjects) -> None:
        """The classes count the companies of the manager's leader's view (every company,
        whatever share the caches hold; the controller runs on the leader), which the Company
        controller declares."""
        self.client = manager.client
        self.cache = manager.cache
        self.view = manager.leader_view
        self.secrets = secrets
        self._counted: dict[str, float] = {}
        """EngineClass name to when its status was last written (monotonic seconds)."""
        # A class counts the companies that name it: a company's status write, one or more
        # for each, changes no count.
        class_changed = new_predicate_funcs(update=_class_changed)
        builder = manager.controller("engineclass").for_(ENGINE_CLASS)
        self.controller = builder.with_rbac(status=True).complete(self.reconcile)
        self.view.add_handler(
            COMPANY, self.controller.enqueue_handler(_classes_named, [class_changed])
        )

    async def reconcile(self, request: Request) -> Result | None:
        """Count the class's companies and check that its references resolve."""
        engine_class = self.cache.get(ENGINE_CLASS, request.name)
        if engine_class is None:
            self._counted.pop(request.name, None)
            return None
        self.secrets.forget(self._every_reference())
        secrets, unreadable = await read_references(self.secrets, engine_class)
        await self.view.wait_for_sync(VIEW_SYNC_TIMEOUT)
        decision = class_status(
            engine_class,
            secrets,
            unreadable,
            companies=len(self.view.keys(COMPANY, (CLASS_INDEX, request.name))),
            last_written=self._counted.get(request.name),
            monotonic_now=time.monotonic(),
        )
        if decision.status is None:
            if decision.requeue_after is None:
                return None
            return Result(requeue_after=decision.requeue_after)  # the count alone, held back
        await write_status(self.client, ENGINE_CLASS, {"name": request.name}, decision.status)
        self._counted[request.name] = time.monotonic()
        return None

    def _every_reference(self) -> set[tuple[str | None, str]]:
        """Every Secret some class references: the Secrets still worth watching."""
        refs: set[tuple[str | None, str]] = set()
        for engine_class in self.cache.list(ENGINE_CLASS):
            refs |= set(referenced_secrets(engine_class))
        return refs
