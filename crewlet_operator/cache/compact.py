"""Objects kept compressed in a cache: a tenth of their memory, for a fraction of a millisecond
per read.

A decoded Kubernetes object costs about five times its JSON in Python dicts and strings, and
objects of one kind differ little from each other. :class:`CompactCodec` keeps each object as
its JSON compressed with zlib, primed with a dictionary: the JSON of the first object the store
held, so what every object of the kind shares costs almost nothing (a StatefulSet of 44 KiB as
dicts becomes about 600 bytes).
"""

from __future__ import annotations

import zlib

import orjson

from crewlet_operator.objects import KubeObject

_LEVEL = 6
"""zlib's default level: on the objects a company's children are cached as, a quarter smaller
than level 1 (2.9 against 3.8 KiB a company, measured) for ~0.15 ms more a company."""


class CompactCodec:
    """Packs objects of one kind to compressed JSON and back (one instance per store: the
    dictionary it learns from its first object is needed to read everything packed after)."""

    def __init__(self) -> None:
        self._dictionary: bytes | None = None

    def pack(self, obj: KubeObject) -> bytes:
        """``obj`` as compressed JSON."""
        text = orjson.dumps(obj)
        if self._dictionary is None:
            self._dictionary = text
        compressor = zlib.compressobj(_LEVEL, zdict=self._dictionary)
        return compressor.compress(text) + compressor.flush()

    def unpack(self, packed: bytes) -> KubeObject:
        """A fresh copy of the object :meth:`pack` was given."""
        assert self._dictionary is not None, "unpack before any pack"
        decompressor = zlib.decompressobj(zdict=self._dictionary)
        obj: KubeObject = orjson.loads(decompressor.decompress(packed) + decompressor.flush())
        return obj
