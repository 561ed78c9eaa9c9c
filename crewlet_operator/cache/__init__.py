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
from crewlet_operator.cache.view import ClusterView

__all__ = [
    "Cache",
    "ClusterView",
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
