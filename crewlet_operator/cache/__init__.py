"""Informers and the cache built from them."""

from crewlet_operator.cache.cache import Cache
from crewlet_operator.cache.informer import (
    Compact,
    Decoded,
    EventHandler,
    Informer,
    InformerOptions,
    ListStrategy,
    MetadataOnly,
    Pages,
    Storage,
    Stream,
)
from crewlet_operator.cache.store import Store

__all__ = [
    "Cache",
    "Compact",
    "Decoded",
    "EventHandler",
    "Informer",
    "InformerOptions",
    "ListStrategy",
    "MetadataOnly",
    "Pages",
    "Storage",
    "Store",
    "Stream",
]
