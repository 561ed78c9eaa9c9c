"""Small accessors for Kubernetes objects held as raw JSON dicts.

Objects are never turned into generated models: a Pod, a Deployment or a custom resource is the
``dict`` the API server sent. These helpers read the fields every controller needs, tolerate a
missing ``metadata`` (a half-built desired object) and never mutate their argument::

    >>> pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "prod"}}
    >>> object_key(pod)
    'prod/web'
    >>> labels(pod)
    {}
"""

# No `from __future__ import annotations`: this module defines a function named annotations().
import datetime
import time
from collections.abc import Mapping
from typing import Any, TypeGuard

__all__ = [
    "MAX_LABEL_LENGTH",
    "MAX_NAME_LENGTH",
    "KubeObject",
    "annotations",
    "api_group",
    "finalizers",
    "generation",
    "is_being_deleted",
    "labels",
    "metadata",
    "micro_time",
    "name",
    "namespace",
    "namespaced_key",
    "object_key",
    "owner_references",
    "resource_version",
    "resource_version_at_most",
    "resource_version_before",
    "uid",
]

KubeObject = dict[str, Any]
"""A Kubernetes object as the API server's JSON: ``apiVersion``, ``kind``, ``metadata``, ..."""

MAX_NAME_LENGTH = 253
"""The longest object name (a DNS subdomain, as most kinds' names are), and the longest prefix
of a label key."""

MAX_LABEL_LENGTH = 63
"""The longest DNS label (a namespace's or a Service's name), label name (a key's part after
the prefix) and label value."""


def metadata(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """Return ``obj.metadata``, or an empty mapping when it is missing or null."""
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}  # dict: an ABC check costs more, per call


def name(obj: Mapping[str, Any]) -> str:
    """Return ``metadata.name``, or ``""`` when it is not set yet (``generateName`` objects)."""
    return str(metadata(obj).get("name") or "")


def namespace(obj: Mapping[str, Any]) -> str | None:
    """Return ``metadata.namespace``, or ``None`` for a cluster-scoped (or unset) namespace."""
    # The API server omits an empty namespace, but hand-built objects may carry "".
    return metadata(obj).get("namespace") or None


def uid(obj: Mapping[str, Any]) -> str | None:
    """Return ``metadata.uid``, or ``None`` for an object the server has not created yet."""
    return metadata(obj).get("uid") or None


def resource_version(obj: Mapping[str, Any]) -> str | None:
    """Return ``metadata.resourceVersion`` (an opaque string), or ``None``."""
    return metadata(obj).get("resourceVersion") or None


def resource_version_at_most(version: str | None, bound: str | None) -> bool:
    """Whether ``version`` is known to be no newer than ``bound``, for two objects of one kind.

    Kubernetes 1.35 made resourceVersions comparable within a kind (KEP-5504): a decimal
    integer, without leading zeros, compared by value. Anything else (a missing version, an
    API server that serves another form) compares as unknown, which answers False: a caller
    that skips work for an object no newer than a mark then does the work.
    """
    order = _order(version, bound)
    return order is not None and order <= 0


def resource_version_before(version: str | None, other: str | None) -> bool:
    """Whether ``version`` is known to be older than ``other``, for two objects of one kind.

    The order of :func:`resource_version_at_most`, strict: anything that is not the decimal
    form KEP-5504 compares is unknown, which answers False.
    """
    order = _order(version, other)
    return order is not None and order < 0


def _order(a: str | None, b: str | None) -> int | None:
    """-1, 0 or 1 as resourceVersion ``a`` is older than, equal to or newer than ``b``; None
    when either is not a decimal resourceVersion."""
    if not (_decimal(a) and _decimal(b)):
        return None
    # Without leading zeros, the longer is the larger: no int() of a long string.
    key_a, key_b = (len(a), a), (len(b), b)
    return (key_a > key_b) - (key_a < key_b)


def _decimal(version: str | None) -> TypeGuard[str]:
    return (
        version is not None
        and version.isascii()
        and version.isdigit()
        and (version == "0" or not version.startswith("0"))
    )


def generation(obj: Mapping[str, Any]) -> int | None:
    """Return ``metadata.generation``, or ``None`` for kinds without one (ConfigMap, Secret)."""
    value = metadata(obj).get("generation")
    return value if isinstance(value, int) else None


def labels(obj: Mapping[str, Any]) -> dict[str, str]:
    """Return a copy of ``metadata.labels`` (an empty dict when there are none)."""
    return dict(metadata(obj).get("labels") or {})


def annotations(obj: Mapping[str, Any]) -> dict[str, str]:
    """Return a copy of ``metadata.annotations`` (an empty dict when there are none)."""
    return dict(metadata(obj).get("annotations") or {})


def finalizers(obj: Mapping[str, Any]) -> list[str]:
    """Return a copy of ``metadata.finalizers`` (an empty list when there are none)."""
    return list(metadata(obj).get("finalizers") or [])


def owner_references(obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Return a copy of the list ``metadata.ownerReferences`` (the references are shared)."""
    return list(metadata(obj).get("ownerReferences") or [])


def is_being_deleted(obj: Mapping[str, Any]) -> bool:
    """Whether ``metadata.deletionTimestamp`` is set: the object waits on its finalizers."""
    return bool(metadata(obj).get("deletionTimestamp"))


def api_group(api_version: str) -> str:
    """Return the group of an ``apiVersion``: ``"apps"`` for ``"apps/v1"``, ``""`` for ``"v1"``."""
    group, _, _ = api_version.rpartition("/")
    return group


def namespaced_key(namespace: str | None, name: str) -> str:
    """Return ``"namespace/name"``, or ``"name"`` without a namespace (a cluster-scoped object).

    This is the key the cache indexes by and the form ``kubectl`` and the logs use.
    """
    return f"{namespace}/{name}" if namespace else name


def object_key(obj: Mapping[str, Any]) -> str:
    """Return the :func:`namespaced_key` of ``obj``: ``"namespace/name"``, or ``"name"`` for a
    cluster-scoped object."""
    return namespaced_key(namespace(obj), name(obj))


def micro_time(seconds: float | None = None) -> str:
    """Return a Kubernetes MicroTime (``2026-01-02T03:04:05.123456Z``): RFC 3339 in UTC with
    microseconds, as a Lease's ``renewTime`` and an Event's ``eventTime`` are written.

    :param seconds: Epoch seconds; now by default.
    """
    moment = datetime.datetime.fromtimestamp(
        time.time() if seconds is None else seconds, datetime.UTC
    )
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
