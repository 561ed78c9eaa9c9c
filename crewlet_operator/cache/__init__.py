"""Informers and the cache built from them."""

from crewlet_operator.cache.cache import Cache
from crewlet_operator.cache.informer import EventHandler, Informer, InformerOptions
from crewlet_operator.cache.store import Store

__all__ = ["Cache", "EventHandler", "Informer", "InformerOptions", "Store"]
