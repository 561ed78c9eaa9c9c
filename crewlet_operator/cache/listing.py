"""A list's objects decoded only as far as their metadata (an informer's lazy list).

A start decodes every object the API server streams, and most of them are not read again before
they change: a restart's first pass looks at the versions of a company's children, not at what
they hold. Decoding a whole object builds every dict and string of it and frees them again: 70 to
85 us for one of the operator's StatefulSets (7 KiB of JSON), where its metadata alone decodes in
5. The store keeps the object's JSON as it was sent (:meth:`~.store.Store.put`), and a read
decodes it whole.

The metadata is cut from the line by where the API server puts it. A built-in kind is encoded in
the order of its Go struct's fields: ``kind``, ``apiVersion``, then ``metadata``, whose last
field is ``managedFields``; so the bytes from ``"metadata":{`` to ``,"managedFields":[`` are the
metadata without its managed fields. A page of a list names ``kind`` and ``apiVersion`` once,
and each of its items (split by :meth:`~crewlet_operator.kube.client.Client.list_raw_pages`)
starts with ``metadata``. Nothing else in an object's metadata can hold that key with
a list (labels and annotations hold strings, owner references fixed keys), and the cut is decoded
as one JSON object, which it is only if that key closes the metadata's own fields. Any other
line or item (a custom resource's keys come sorted, an object without managed fields, another
event) is left to be decoded whole.
"""

from __future__ import annotations

import functools
import re

import orjson

from crewlet_operator.kube.resources import Resource
from crewlet_operator.objects import KubeObject

_ADDED = re.compile(
    rb'\{"type":"ADDED","object":\{"kind":"([^"\\]+)","apiVersion":"([^"\\]+)","metadata":\{'
)
"""A list's event of a built-in kind, up to the opening brace of its object's metadata (Go
encodes the event's two fields, then the object's type, in this order)."""
_MANAGED_FIELDS = b',"managedFields":['
_ITEM_METADATA = b'{"metadata":{'
_PARTIAL_ITEM = re.compile(
    rb'\{(?:"kind":"PartialObjectMetadata","apiVersion":"meta\.k8s\.io/v1",)?"metadata":\{'
)
"""An item of a ``PartialObjectMetadataList``, up to the opening brace of its metadata."""
_OBJECT_AT = len(b'{"type":"ADDED","object":')


def listed_metadata(line: bytes) -> tuple[KubeObject, bytes] | None:
    """The object of the ``ADDED`` event ``line`` as its ``apiVersion``, ``kind`` and
    ``metadata`` (without ``managedFields``), and the whole object's JSON as sent; None when
    the line is to be decoded whole (see the module's docstring)."""
    head = _ADDED.match(line)
    if head is None or not line.endswith(b"}"):
        return None
    metadata = _metadata(line, head.end() - 1)
    if metadata is None:
        return None
    kind, api_version = head.group(1).decode(), head.group(2).decode()
    return {"apiVersion": api_version, "kind": kind, "metadata": metadata}, line[_OBJECT_AT:-1]


def item_metadata(item: bytes, resource: Resource) -> tuple[KubeObject, bytes] | None:
    """The item of a page of ``resource`` as its ``apiVersion``, ``kind`` and ``metadata``
    (without ``managedFields``), and the whole object's JSON (the item's, with its kind put
    in); None when the item is to be decoded whole (see the module's docstring)."""
    if not item.startswith(_ITEM_METADATA):
        return None
    metadata = _metadata(item, len(_ITEM_METADATA) - 1)
    if metadata is None:
        return None
    head = _object_head(resource.api_version, resource.kind)
    return {"apiVersion": resource.api_version, "kind": resource.kind, "metadata": metadata}, (
        head + item[1:]
    )


def partial_item_metadata(item: bytes, resource: Resource) -> KubeObject:
    """The item of a page of ``resource``'s metadata alone (a ``PartialObjectMetadataList``,
    :meth:`~crewlet_operator.kube.client.Client.list_raw_pages` with ``metadata_only``) as the
    object's ``apiVersion``, ``kind`` and ``metadata`` without ``managedFields``: cut like a
    whole object's, or decoded whole when it cannot be."""
    head = _PARTIAL_ITEM.match(item)
    metadata = None if head is None else _metadata(item, head.end() - 1)
    if metadata is None:
        metadata = dict(orjson.loads(item).get("metadata") or {})
        metadata.pop("managedFields", None)
    return {"apiVersion": resource.api_version, "kind": resource.kind, "metadata": metadata}


@functools.cache
def _object_head(api_version: str, kind: str) -> bytes:
    """The start of an object of ``kind``, up to its first field's: put before a page's item."""
    return orjson.dumps({"kind": kind, "apiVersion": api_version})[:-1] + b","


def _metadata(text: bytes, start: int) -> KubeObject | None:
    """The metadata whose opening brace is at ``start``, cut before its managed fields."""
    end = text.find(_MANAGED_FIELDS, start)
    if end < 0:
        return None
    try:
        metadata: KubeObject = orjson.loads(text[start:end] + b"}")
    except orjson.JSONDecodeError:
        return None
    return metadata
