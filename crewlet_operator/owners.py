"""Owner references and finalizers, with the semantics of controller-runtime's ``controllerutil``.

Every function is pure: the ones that "set" or "add" return a modified deep copy and leave the
argument alone, so the object read from the cache is never changed behind the cache's back::

    >>> owner = {"apiVersion": "example.com/v1", "kind": "Crew",
    ...          "metadata": {"name": "alpha", "namespace": "prod", "uid": "1234"}}
    >>> child = {"apiVersion": "v1", "kind": "ConfigMap",
    ...          "metadata": {"name": "alpha-config", "namespace": "prod"}}
    >>> child = set_controller_reference(owner, child)
    >>> is_controlled_by(child, owner)
    True
    >>> owner_key_of(child, "example.com", "Crew")
    ('prod', 'alpha')

Identity is the owner's ``uid``: a re-created owner with the same name is another object.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from crewlet_operator.errors import AlreadyOwnedError
from crewlet_operator.objects import (
    KubeObject,
    api_group,
    finalizers,
    name,
    namespace,
    object_key,
    owner_references,
    uid,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "AlreadyOwnedError",  # raised here, defined with every other error of the library
    "add_finalizer",
    "controller_reference",
    "get_controller_of",
    "has_finalizer",
    "is_controlled_by",
    "owner_key_of",
    "remove_finalizer",
    "set_controller_reference",
]


def controller_reference(owner: Mapping[str, Any]) -> dict[str, Any]:
    """Return the ``ownerReferences`` entry that makes ``owner`` the controller of an object.

    ``blockOwnerDeletion`` is set so that a foreground deletion of the owner waits for its
    children, as ``metav1.NewControllerRef`` does.

    Raises:
        ValueError: ``owner`` lacks ``apiVersion``, ``kind``, ``metadata.name`` or
            ``metadata.uid`` (an owner must have been created before it can own anything).
    """
    ref = {
        "apiVersion": owner.get("apiVersion"),
        "kind": owner.get("kind"),
        "name": name(owner),
        "uid": uid(owner),
    }
    missing = [field for field, value in ref.items() if not value]
    if missing:
        raise ValueError(
            f"cannot reference owner {object_key(owner) or '<unnamed>'}: it has no "
            f"{', '.join(missing)} (read the owner back from the API server first)"
        )
    return {**ref, "controller": True, "blockOwnerDeletion": True}


def set_controller_reference(owner: Mapping[str, Any], obj: Mapping[str, Any]) -> KubeObject:
    """Return a copy of ``obj`` whose controller is ``owner``.

    A reference already pointing at ``owner`` (same ``uid``) is replaced in place, so calling
    this on every reconcile is idempotent; other, non-controller references are kept.

    Raises:
        AlreadyOwnedError: another object (a different ``uid``) is already the controller.
        ValueError: ``owner`` is namespaced and ``obj`` is cluster-scoped or in another
            namespace: the garbage collector would treat such a reference as dangling and
            delete ``obj``.
    """
    ref = controller_reference(owner)
    owner_ns = namespace(owner)
    if owner_ns is not None:
        obj_ns = namespace(obj)
        if obj_ns is None:
            raise ValueError(
                f"cluster-scoped {obj.get('kind', 'object')} {object_key(obj)} cannot be owned "
                f"by namespaced {ref['kind']} {owner_ns}/{ref['name']}"
            )
        if obj_ns != owner_ns:
            raise ValueError(
                f"cross-namespace owner references are not allowed: {ref['kind']} "
                f"{owner_ns}/{ref['name']} cannot own {obj.get('kind', 'object')} "
                f"{object_key(obj)}"
            )
    current = get_controller_of(obj)
    if current is not None and current.get("uid") != ref["uid"]:
        raise AlreadyOwnedError(obj, current)
    refs = owner_references(obj)
    for index, existing in enumerate(refs):
        if existing.get("uid") == ref["uid"]:
            refs[index] = ref
            break
    else:
        refs.append(ref)
    return _with_metadata(obj, "ownerReferences", refs)


def get_controller_of(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    """Return a copy of the owner reference with ``controller: true``, or ``None``."""
    for ref in owner_references(obj):
        if ref.get("controller") is True:
            return dict(ref)
    return None


def is_controlled_by(obj: Mapping[str, Any], owner: Mapping[str, Any]) -> bool:
    """Whether ``owner`` (matched by ``uid``) is the controller of ``obj``."""
    ref = get_controller_of(obj)
    owner_uid = uid(owner)
    return ref is not None and owner_uid is not None and ref.get("uid") == owner_uid


def owner_key_of(
    obj: Mapping[str, Any],
    owner_group: str,
    owner_kind: str,
    *,
    owner_namespaced: bool = True,
) -> tuple[str | None, str] | None:
    """Return ``(namespace, name)`` of the controller of ``obj`` if it is a ``group``/``kind``.

    This maps an event on a child to the request for its owner (an ``owns`` watch). Owner
    references carry no namespace: a namespaced owner lives in the child's namespace (see
    :func:`set_controller_reference`); pass ``owner_namespaced=False`` for a cluster-scoped
    owner kind to get ``None`` as the namespace. The version in ``apiVersion`` is ignored,
    so an object owned through ``v1beta1`` still maps after the owner's API moves to ``v1``.
    Use ``""`` as the group of the core API (``"v1"``).
    """
    ref = get_controller_of(obj)
    if ref is None or ref.get("kind") != owner_kind:
        return None
    if api_group(str(ref.get("apiVersion", ""))) != owner_group:
        return None
    return (namespace(obj) if owner_namespaced else None), str(ref.get("name", ""))


def has_finalizer(obj: Mapping[str, Any], finalizer: str) -> bool:
    """Whether ``metadata.finalizers`` contains ``finalizer``."""
    return finalizer in finalizers(obj)


def add_finalizer(obj: Mapping[str, Any], finalizer: str) -> KubeObject:
    """Return a copy of ``obj`` with ``finalizer`` appended, unless it is already present."""
    current = finalizers(obj)
    if finalizer not in current:
        current.append(finalizer)
    return _with_metadata(obj, "finalizers", current)


def remove_finalizer(obj: Mapping[str, Any], finalizer: str) -> KubeObject:
    """Return a copy of ``obj`` without ``finalizer`` (every occurrence; absent is fine)."""
    return _with_metadata(obj, "finalizers", [f for f in finalizers(obj) if f != finalizer])


def _with_metadata(obj: Mapping[str, Any], field: str, value: Any) -> KubeObject:
    result: KubeObject = copy.deepcopy(dict(obj))
    meta = result.get("metadata")
    if not isinstance(meta, dict):
        meta = result["metadata"] = {}
    meta[field] = copy.deepcopy(value)
    return result
