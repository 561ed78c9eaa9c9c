"""The informer's local copy of a kind: objects by key, plus secondary indexes."""

from __future__ import annotations

import builtins
import hashlib
from collections.abc import Callable, Iterable
from typing import Any

from crewlet_operator.cache.compact import CompactCodec
from crewlet_operator.errors import MetadataOnlyError
from crewlet_operator.objects import KubeObject, namespace, object_key

IndexFunc = Callable[[KubeObject], Iterable[str]]
"""Maps an object to the index values it is found under (none, one or several)."""
Transform = Callable[[KubeObject], KubeObject]

NAMESPACE_INDEX = "namespace"


def namespace_index(obj: KubeObject) -> list[str]:
    """Index by namespace (every store has it: namespaced lists are index lookups)."""
    ns = namespace(obj)
    return [ns] if ns else []


def _uid_hash(obj: KubeObject) -> int:
    uid = (obj.get("metadata") or {}).get("uid")
    if not isinstance(uid, str):
        return 0
    return int.from_bytes(hashlib.blake2b(uid.encode(), digest_size=8).digest(), "big")


class Store:
    """Objects by ``namespace/name`` key, and indexes from value to keys.

    With ``compact``, objects are kept compressed (:class:`~.compact.CompactCodec`) and every
    read returns a fresh copy; otherwise reads return the stored objects themselves.

    With ``finish``, an object put with ``finished=False`` is stored as it is, and each read
    returns ``finish`` run on it (a restart lists every object, and its first pass reads few).
    What ``finish`` makes is not stored: written back, each object read was packed again amid
    the reader's garbage, and a first pass that read every child of 10,000 companies left the
    process 25 MiB larger. ``finish`` must keep what the index functions read.

    A compact store may also hold objects by their metadata alone (``put`` with
    ``metadata_only``, an informer's ``metadata_first`` list): they are indexed, counted and
    versioned like the others, but reading one raises :class:`MetadataOnlyError` until a whole
    object replaces it. They are packed apart, so that the whole objects' dictionary is learnt
    from a whole object.

    Invariants, which ``_put`` and ``_drop`` keep: ``self._indices[index][value]``
    holds exactly the keys of the stored objects for which the ``index`` function yields
    ``value`` (finished or not: ``finish`` keeps their values), and no value maps to an empty
    set; ``self._unfinished`` holds the keys of the stored objects put with ``finished=False``;
    ``self._uids`` is the XOR of :func:`_uid_hash` over the stored objects; a compact store's
    ``self._versions`` has the keys of ``self._items``, each with its object's resourceVersion;
    ``self._metadata_only`` holds the keys whose ``self._items`` entry ``self._metadata_codec``
    packed (every other entry is the whole object's).
    Index functions must be pure: ``_drop`` finds the values to remove by running them again on
    the stored object (which it decodes anyway, to return it), rather than keeping every
    object's values, ~0.3 KiB an object.
    """

    def __init__(
        self,
        indexers: dict[str, IndexFunc] | None = None,
        *,
        compact: bool = False,
        finish: Transform | None = None,
    ):
        self._items: dict[str, Any] = {}
        self._finish = finish
        self._unfinished: set[str] = set()
        self._codec = CompactCodec() if compact else None
        self._metadata_codec: CompactCodec | None = None
        self._metadata_only: set[str] = set()
        self._indexers: dict[str, IndexFunc] = {
            NAMESPACE_INDEX: namespace_index,
            **(indexers or {}),
        }
        self._indices: dict[str, dict[str, set[str]]] = {name: {} for name in self._indexers}
        self._uids = 0
        self._versions: dict[str, str | None] | None = {} if compact else None
        """A compact store's resourceVersions by key, read without unpacking (see
        :meth:`resource_version`); a plain store reads them from the objects."""

    def add_indexer(self, name: str, func: IndexFunc) -> None:
        """Add an index (it is built over the objects already stored)."""
        if name in self._indexers:
            raise ValueError(f"index {name!r} already exists")
        self._indexers[name] = func
        self._indices[name] = {}
        for key in self._items:
            for value in func(self._stored(key)):
                self._indices[name].setdefault(value, set()).add(key)

    @property
    def uid_digest(self) -> int:
        """A digest of which objects are stored, whatever their versions: the XOR of a 64-bit
        hash of each one's uid. Two stores whose digests are equal hold (but for a chance of
        one in 2**64) the same objects; an object deleted, or created, changes it."""
        return self._uids

    @property
    def whole(self) -> bool:
        """Whether every object is stored whole (none by its metadata alone)."""
        return not self._metadata_only

    @property
    def metadata_only_count(self) -> int:
        """How many objects are stored by their metadata alone."""
        return len(self._metadata_only)

    def metadata_only(self, key: str) -> bool:
        """Whether the object under ``key`` is stored by its metadata alone."""
        return key in self._metadata_only

    def known(self, key: str) -> KubeObject:
        """The object under ``key`` as far as it is known: whole, or its ``apiVersion``,
        ``kind`` and ``metadata`` when it is stored by them alone (what handlers are told)."""
        return self._stored(key)

    def resource_version(self, key: str) -> str | None:
        """The resourceVersion of the object stored under ``key`` (None when there is none),
        without unpacking a compact store's copy: what a caller comparing versions reads."""
        if self._versions is not None:
            return self._versions.get(key)
        stored = self._items.get(key)
        return None if stored is None else (stored.get("metadata") or {}).get("resourceVersion")

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: str) -> bool:
        return key in self._items

    def get(self, key: str) -> KubeObject | None:
        """The object stored under ``key``."""
        return self._read(key) if key in self._items else None

    def keys(self) -> builtins.list[str]:
        """Every key."""
        return list(self._items)

    def list(self) -> builtins.list[KubeObject]:
        """Every object."""
        return [self._read(key) for key in self._items]

    def by_index(self, index: str, value: str) -> builtins.list[KubeObject]:
        """The objects whose ``index`` function yields ``value``."""
        return [self._read(k) for k in self.keys_by_index(index, value)]

    def keys_by_index(self, index: str, value: str) -> builtins.list[str]:
        """The keys of the objects whose ``index`` function yields ``value`` (nothing decoded)."""
        if index not in self._indices:
            raise KeyError(f"no index {index!r}; add it with add_indexer")
        return list(self._indices[index].get(value, ()))

    def put(
        self,
        obj: KubeObject,
        key: str | None = None,
        *,
        finished: bool = True,
        raw: bytes | None = None,
        metadata_only: bool = False,
    ) -> KubeObject | None:
        """Store ``obj`` (under ``key``, its :func:`object_key`, when the caller has it);
        return the object it replaced (as stored: metadata alone, if it was so). ``finished=False``
        leaves the store's ``finish`` to the object's reads.

        ``raw`` (a compact store only) is the whole object's JSON, as the API server sent it:
        the store keeps it, reads decode it, and ``obj`` need then hold only what the index
        functions read (an informer's lazy list passes the metadata alone).

        ``metadata_only`` (a compact store only) stores ``obj``, an object's ``apiVersion``,
        ``kind`` and ``metadata``, as all that is known of it: reads raise
        :class:`MetadataOnlyError` until it is put whole."""
        if (raw is not None or metadata_only) and self._codec is None:
            raise ValueError("only a compact store keeps an object's JSON or its metadata alone")
        key = object_key(obj) if key is None else key
        old: KubeObject | None = None
        held: set[tuple[str, str]] = set()
        if key in self._items:
            # Replaced in place: the key keeps its entries in the dicts and index sets, where a
            # delete and an add would append new ones (a metadata-first start replaces every
            # child: 130,000 of them left the process ~15 MiB larger).
            old = self._stored(key)
            self._uids ^= _uid_hash(old)
            self._unfinished.discard(key)
            self._forget_metadata_only(key)
            held = set(self._index_pairs(old))
        if metadata_only:
            self._metadata_only.add(key)
        self._put(key, obj, raw, held)
        if not finished and self._finish is not None and not metadata_only:
            self._unfinished.add(key)
        return old

    def delete(self, key: str) -> KubeObject | None:
        """Remove ``key``; return what was stored."""
        return self._drop(key)

    def _read(self, key: str) -> KubeObject:
        if key in self._metadata_only:
            raise MetadataOnlyError(f"{key} is cached by its metadata alone as yet")
        return self._stored(key)

    def _stored(self, key: str) -> KubeObject:
        """The object under ``key`` as stored: whole and finished, or its metadata alone."""
        stored = self._items[key]
        if key in self._metadata_only:
            assert self._metadata_codec is not None
            return self._metadata_codec.unpack(stored)
        obj: KubeObject = self._codec.unpack(stored) if self._codec is not None else stored
        if key in self._unfinished:
            assert self._finish is not None
            obj = self._finish(obj)
        return obj

    def _put(
        self, key: str, obj: KubeObject, raw: bytes | None, held: set[tuple[str, str]]
    ) -> None:
        """Store ``obj`` under ``key``, whose index pairs are ``held`` already (a replace)."""
        if key in self._metadata_only:
            if self._metadata_codec is None:
                self._metadata_codec = CompactCodec()
            self._items[key] = self._metadata_codec.pack(obj)
        else:
            self._items[key] = self._codec.pack(obj, raw) if self._codec is not None else obj
        self._uids ^= _uid_hash(obj)
        if self._versions is not None:
            self._versions[key] = (obj.get("metadata") or {}).get("resourceVersion")
        pairs = self._index_pairs(obj)
        for name, value in pairs:
            if (name, value) not in held:
                self._indices[name].setdefault(value, set()).add(key)
        self._unindex(key, held.difference(pairs))

    def _unindex(self, key: str, pairs: Iterable[tuple[str, str]]) -> None:
        for name, value in pairs:
            keys = self._indices[name].get(value)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._indices[name][value]

    def _forget_metadata_only(self, key: str) -> None:
        if key in self._metadata_only:
            self._metadata_only.discard(key)
            if not self._metadata_only:
                # Its dictionary goes (the next metadata learns anew), and so does the set's
                # table, which emptying does not shrink.
                self._metadata_codec = None
                self._metadata_only = set()

    def _index_pairs(self, obj: KubeObject) -> builtins.list[tuple[str, str]]:
        return [(name, value) for name, func in self._indexers.items() for value in func(obj)]

    def _drop(self, key: str) -> KubeObject | None:
        if key not in self._items:
            return None
        old = self._stored(key)
        del self._items[key]
        self._unfinished.discard(key)
        self._forget_metadata_only(key)
        self._uids ^= _uid_hash(old)
        if self._versions is not None:
            del self._versions[key]
        self._unindex(key, self._index_pairs(old))
        return old
