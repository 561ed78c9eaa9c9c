"""A streamed list's objects decoded only as far as their metadata (an informer's lazy list).

A start decodes every object the API server streams, and most of them are not read again before
they change: a restart's first pass looks at the versions of a company's children, not at what
they hold. Decoding a whole object builds every dict and string of it and frees them again: 70 to
85 us for one of the operator's StatefulSets (7 KiB of JSON), where its metadata alone decodes in
5. The store keeps the object's JSON as it was sent (:meth:`~.store.Store.put`), and a read
decodes it whole.

The metadata is cut from the line by where the API server puts it. A built-in kind is encoded in
the order of its Go struct's fields: ``kind``, ``apiVersion``, then ``metadata``, whose last
field is ``managedFields``; so the bytes from ``"metadata":{`` to ``,"managedFields":[`` are the
metadata without its managed fields. Nothing else in an object's metadata can hold that key with
a list (labels and annotations hold strings, owner references fixed keys), and the cut is decoded
as one JSON object, which it is only if that key closes the metadata's own fields. Any other
line (a custom resource's keys come sorted, an object without managed fields, another event) is
left to be decoded whole.
"""

from __future__ import annotations

import re

import orjson

from crewlet_operator.objects import KubeObject

_ADDED = re.compile(
    rb'\{"type":"ADDED","object":\{"kind":"([^"\\]+)","apiVersion":"([^"\\]+)","metadata":\{'
)
"""A list's event of a built-in kind, up to the opening brace of its object's metadata (Go
encodes the event's two fields, then the object's type, in this order)."""
_MANAGED_FIELDS = b',"managedFields":['
_OBJECT_AT = len(b'{"type":"ADDED","object":')


def listed_metadata(line: bytes) -> tuple[KubeObject, bytes] | None:
    """The object of the ``ADDED`` event ``line`` as its ``apiVersion``, ``kind`` and
    ``metadata`` (without ``managedFields``), and the whole object's JSON as sent; None when
    the line is to be decoded whole (see the module's docstring)."""
    head = _ADDED.match(line)
    if head is None or not line.endswith(b"}"):
        return None
    end = line.find(_MANAGED_FIELDS, head.end())
    if end < 0:
        return None
    try:
        metadata = orjson.loads(line[head.end() - 1 : end] + b"}")
    except orjson.JSONDecodeError:
        return None
    kind, api_version = head.group(1).decode(), head.group(2).decode()
    return {"apiVersion": api_version, "kind": kind, "metadata": metadata}, line[_OBJECT_AT:-1]
