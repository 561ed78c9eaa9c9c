"""Objects kept compressed in a cache: a tenth of their memory, for a few microseconds per read.

A decoded Kubernetes object costs several times its JSON in Python dicts and strings, and
objects of one kind differ little from each other. :class:`CompactCodec` keeps each object as
its JSON compressed with zstd, primed with a dictionary: the JSON of the first object the store
held, so what every object of the kind shares costs almost nothing.

zstd rather than zlib: the dictionary is digested once per store, where zlib primes it again for
every object, and a start packs every object the API server sends (a first pass unpacks every
one again). :data:`_LEVEL` says which level. Measurements: bench/NOTES.md, "Compact caches".
"""

from __future__ import annotations

import orjson
import zstandard

from crewlet_operator.objects import KubeObject

_LEVEL = -1
"""The first of zstd's fast levels (negative ones trade size for speed). A start packs every
object it lists, so packing is on the path to the caches' sync, where the operator's CPU and the
API server's share the machine: against the default level (3) objects pack and unpack faster,
for some 6 MiB more over 10,000 companies; lower levels pack about as fast, and larger.
Measurements: bench/NOTES.md, "Compact caches: zstd's level"."""


class CompactCodec:
    """Packs objects of one kind to compressed JSON and back (one instance per store: the
    dictionary it learns from its first object is needed to read everything packed after)."""

    def __init__(self) -> None:
        self._packer: zstandard.ZstdCompressor | None = None
        self._unpacker: zstandard.ZstdDecompressor | None = None

    def pack(self, obj: KubeObject, text: bytes | None = None) -> bytes:
        """``obj`` as compressed JSON; ``text``, when the caller has it, is that JSON (as the
        API server sent it), which is kept instead of encoding ``obj``."""
        text = orjson.dumps(obj) if text is None else text
        if self._packer is None:
            dictionary = zstandard.ZstdCompressionDict(
                text, dict_type=zstandard.DICT_TYPE_RAWCONTENT
            )
            dictionary.precompute_compress(level=_LEVEL)
            # No checksum or dictionary id: a pack never leaves the process that made it.
            self._packer = zstandard.ZstdCompressor(
                level=_LEVEL, dict_data=dictionary, write_checksum=False, write_dict_id=False
            )
            self._unpacker = zstandard.ZstdDecompressor(dict_data=dictionary)
        # Copied to a bytes of its own size: zstd answers in a buffer of the worst case (about
        # the JSON's size), whose unused tail the allocator cannot give back while the pack
        # lives (without the copy the RSS over 10,000 companies more than doubled: bench/NOTES.md).
        return bytes(memoryview(self._packer.compress(text)))

    def unpack(self, packed: bytes) -> KubeObject:
        """A fresh copy of the object :meth:`pack` was given."""
        assert self._unpacker is not None, "unpack before any pack"
        obj: KubeObject = orjson.loads(self._unpacker.decompress(packed))
        return obj
