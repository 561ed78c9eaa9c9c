"""The ownership rule: a client applies only onto objects it made, unless told to adopt.

A server-side apply forces its way over other managers' fields, so it would quietly take over
an object someone else made under the same name. The rule, as
:meth:`~crewlet_operator.kube.client.Client.apply_owned` and
:meth:`~crewlet_operator.kube.client.Client.apply_if_changed` follow it:

- an object is ours when it is controlled by the owner the desired object names as its
  controller, or, when that names none, when our field manager applied it before
  (:func:`is_ours`);
- with no object known, the apply only creates (:func:`create_only`): a name someone else
  holds, which a label-scoped cache never sees, is found by the API server instead of written
  over;
- onto a known object, the apply is allowed only when it is ours, and lands on that object or
  on none (:func:`claim`): one deleted or replaced since it was read is a conflict
  (:func:`replaced`), not a write onto its successor;
- ``adopt=True`` takes over whatever holds the name, on purpose (a plain apply).

These functions decide; the client sends the requests. None of them does I/O.
"""

from __future__ import annotations

from typing import Literal

from crewlet_operator.errors import ConflictError, InvalidError, NotOwnedError
from crewlet_operator.fieldset import apply_would_change
from crewlet_operator.kube.resources import Resource
from crewlet_operator.objects import KubeObject as Object
from crewlet_operator.owners import get_controller_of

__all__ = ["NO_OBJECT_VERSION", "Write", "claim", "create_only", "is_ours", "replaced", "write_for"]

NO_OBJECT_VERSION = "18446744073709551615"
"""A resourceVersion no object holds (etcd's revisions count up from 1 and never reach 2**64 - 1).
A server-side apply that carries it is a create that never lands on anything: the API server
ignores an apply's resourceVersion when the name is free and creates the object, and compares it
when the name is taken, which fails with 409 Conflict whoever holds the name. Unlike a POST, it
leaves the fields owned by an apply (a POST's ``Update`` entry would hold the server's defaults
too, and a later apply could not tell them from fields it no longer wants)."""

Write = Literal["nothing", "apply", "owned"]
"""What :meth:`~crewlet_operator.kube.client.Client.apply_if_changed` sends: nothing, a plain
apply, or an apply that keeps the ownership rule (``apply_owned``)."""


def is_ours(desired: Object, observed: Object, field_manager: str) -> bool:
    """Whether ``observed`` is the object ``desired`` describes, made by us.

    With a controller reference in ``desired``, it must be ``observed``'s controller too (the
    same owner, by uid). Without one, ``observed`` must carry a server-side apply of
    ``field_manager`` in its ``managedFields`` (which the cache keeps by default).
    """
    wanted = get_controller_of(desired)
    if wanted is not None:
        found = get_controller_of(observed)
        return found is not None and found.get("uid") == wanted.get("uid")
    entries = (observed.get("metadata") or {}).get("managedFields") or []
    return any(e.get("manager") == field_manager and e.get("operation") == "Apply" for e in entries)


def write_for(
    desired: Object,
    observed: Object | None,
    field_manager: str,
    *,
    subresource: str = "",
    adopt: bool = False,
) -> Write:
    """What applying ``desired`` over ``observed`` needs: ``"nothing"`` when ``observed`` holds
    every desired field and no field we applied before and no longer want (a resync of a
    converged world writes nothing), and is ours to write (or is adopted, or the write is a
    subresource's, which changes no object's ownership); else a plain ``"apply"`` (``adopt``, a
    subresource) or an ``"owned"`` one."""
    plain = adopt or bool(subresource)
    if (
        observed is not None
        and not apply_would_change(desired, observed, field_manager, subresource)
        and (plain or is_ours(desired, observed, field_manager))
    ):
        return "nothing"
    return "apply" if plain else "owned"


def create_only(desired: Object) -> Object:
    """``desired`` as an apply that only creates (it carries :data:`NO_OBJECT_VERSION`)."""
    return _with_metadata(desired, resourceVersion=NO_OBJECT_VERSION)


def claim(resource: Resource, desired: Object, observed: Object, field_manager: str) -> Object:
    """``desired`` as an apply onto ``observed`` and onto no other object: it carries
    ``observed``'s uid, which the API server refuses on any object but that one.

    Raises:
        NotOwnedError: ``observed`` is not ours (:func:`is_ours`); its message says who holds
            it, and how to take it over.
    """
    if not is_ours(desired, observed, field_manager):
        raise NotOwnedError(_not_ours(resource, desired, observed, field_manager), observed)
    held = (observed.get("metadata") or {}).get("uid")
    return _with_metadata(desired, uid=held) if held else desired


def replaced(
    resource: Resource, desired: Object, observed: Object, refused: InvalidError
) -> ConflictError | None:
    """The conflict to raise when the API server refused a :func:`claim` of ``observed`` for
    its uid (the object was deleted, or replaced by another of the same name, since it was
    read); None when ``refused`` is about something else."""
    if not _refused_uid(refused):
        return None
    meta = desired["metadata"]
    held = (observed.get("metadata") or {}).get("uid")
    return ConflictError(
        409,
        {
            "reason": "Conflict",
            "message": f"{resource.kind} {meta.get('namespace') or ''}/{meta['name']} "
            f"is no longer the object of uid {held}: read it again",
        },
        method=refused.method,
        path=refused.path,
    )


def _not_ours(resource: Resource, desired: Object, observed: Object, manager: str) -> str:
    meta = observed.get("metadata") or {}
    where = (
        f"{meta.get('namespace')}/{meta.get('name')}" if meta.get("namespace") else meta.get("name")
    )
    wanted = get_controller_of(desired)
    if wanted is not None:
        found = get_controller_of(observed)
        held = (
            f"controlled by {found.get('kind')} {found.get('name')} (uid {found.get('uid')})"
            if found
            else "controlled by no one"
        )
        return (
            f"{resource.kind} {where} exists and is {held}, not by {wanted.get('kind')} "
            f"{wanted.get('name')} (uid {wanted.get('uid')}): not taken over; pass adopt=True "
            "to take it over"
        )
    return (
        f"{resource.kind} {where} exists and was never applied by field manager {manager}: not "
        "taken over; pass adopt=True to take it over"
    )


def _with_metadata(obj: Object, **fields: str) -> Object:
    """A shallow copy of ``obj`` with ``fields`` set in its metadata (the caller's is kept)."""
    return {**obj, "metadata": {**obj["metadata"], **fields}}


def _refused_uid(error: InvalidError) -> bool:
    """Whether the API server refused a write for its ``metadata.uid`` (an apply that named the
    uid of an object since replaced by another of the same name)."""
    causes = error.details.get("causes") or []
    return any(c.get("field") == "metadata.uid" for c in causes) or (
        "metadata.uid" in error.message and "field is immutable" in error.message
    )
