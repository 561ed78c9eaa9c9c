"""``crewlet_operator_cache_objects{kind}``: the sizes of the caches' stores, read when scraped
(no API server: the stores are filled by hand)."""

from __future__ import annotations

import gc
import time

from prometheus_client import CollectorRegistry, Gauge, generate_latest

from crewlet_operator.cache import Cache, Compact, InformerOptions
from crewlet_operator.kube.resources import CONFIG_MAP, SECRET, STATEFUL_SET, Resource
from crewlet_operator.metrics import CachedObjectCounts
from crewlet_operator.objects import KubeObject


def config_map(name: str) -> KubeObject:
    return {"metadata": {"name": name, "namespace": "default", "resourceVersion": "1"}}


def untouched(obj: KubeObject) -> KubeObject:
    return obj


def cache_of(*resources: Resource) -> Cache:
    cache = Cache(client=None)  # type: ignore[arg-type]  # never started: no client needed
    for resource in resources:
        cache.informer(resource, InformerOptions(transform=untouched))
    return cache


def scraped() -> tuple[CachedObjectCounts, CollectorRegistry]:
    """Counts kept on a gauge of their own, beside the library's."""
    registry = CollectorRegistry()
    gauge = Gauge("crewlet_operator_cache_objects", "Objects.", ["kind"], registry=registry)
    return CachedObjectCounts(gauge), registry


def objects(registry: CollectorRegistry, kind: str) -> float | None:
    return registry.get_sample_value("crewlet_operator_cache_objects", {"kind": kind})


def test_the_gauge_follows_the_stores_at_each_scrape() -> None:
    counts, registry = scraped()
    cache = cache_of(CONFIG_MAP, SECRET, STATEFUL_SET)
    counts.track(cache)
    store = cache.informers[CONFIG_MAP].store
    for name in ("a", "b", "c"):
        store.put(config_map(name))
    assert objects(registry, "ConfigMap") == 3
    assert objects(registry, "Secret") == 0
    assert objects(registry, "StatefulSet.apps") == 0  # the kind label names the group
    store.delete("default/b")
    assert objects(registry, "ConfigMap") == 2
    exposed = generate_latest(registry).decode()
    assert "# TYPE crewlet_operator_cache_objects gauge" in exposed
    assert 'crewlet_operator_cache_objects{kind="ConfigMap"} 2.0' in exposed


def test_the_caches_of_one_process_are_summed_by_kind() -> None:
    counts, registry = scraped()
    first, second = cache_of(CONFIG_MAP), cache_of(CONFIG_MAP, SECRET)
    counts.track(first)
    counts.track(second)
    first.informers[CONFIG_MAP].store.put(config_map("a"))
    second.informers[CONFIG_MAP].store.put(config_map("a"))
    second.informers[CONFIG_MAP].store.put(config_map("b"))
    assert objects(registry, "ConfigMap") == 3
    counts.untrack(second)
    assert objects(registry, "ConfigMap") == 1
    assert objects(registry, "Secret") is None


def test_a_cache_dropped_without_a_stop_counts_nothing() -> None:
    counts, registry = scraped()
    cache = cache_of(CONFIG_MAP)
    counts.track(cache)
    cache.informers[CONFIG_MAP].store.put(config_map("a"))
    assert objects(registry, "ConfigMap") == 1
    del cache
    gc.collect()
    assert objects(registry, "ConfigMap") == 0


def test_a_kind_declared_later_is_reported_once_tracked_again() -> None:
    counts, registry = scraped()
    cache = cache_of(CONFIG_MAP)
    counts.track(cache)
    cache.informer(SECRET, InformerOptions(transform=untouched))
    assert objects(registry, "Secret") is None
    counts.track(cache)  # what a running cache does when it declares a kind
    cache.informers[SECRET].store.put(config_map("s"))
    assert objects(registry, "Secret") == 1


def test_a_cache_counts_the_objects_of_each_informer() -> None:
    cache = cache_of(CONFIG_MAP, SECRET)
    assert cache.object_counts() == {"ConfigMap": 0, "Secret": 0}
    cache.informers[SECRET].store.put(config_map("s"))
    assert cache.object_counts() == {"ConfigMap": 0, "Secret": 1}


def test_the_objects_held_by_their_metadata_alone_have_a_gauge_of_their_own() -> None:
    registry = CollectorRegistry()
    gauge = Gauge("crewlet_operator_cache_objects", "Objects.", ["kind"], registry=registry)
    partial = Gauge("metadata_only", "Objects by their metadata.", ["kind"], registry=registry)
    counts = CachedObjectCounts(gauge, partial)
    cache = Cache(client=None)  # type: ignore[arg-type]  # never started: no client needed
    options = InformerOptions(transform=untouched, storage=Compact(metadata_first=True))
    cache.informer(CONFIG_MAP, options)
    counts.track(cache)
    store = cache.informers[CONFIG_MAP].store
    store.put(config_map("a"), metadata_only=True)
    store.put(config_map("b"), metadata_only=True)
    assert registry.get_sample_value("metadata_only", {"kind": "ConfigMap"}) == 2
    store.put(config_map("a"))  # held whole now
    assert registry.get_sample_value("metadata_only", {"kind": "ConfigMap"}) == 1
    assert objects(registry, "ConfigMap") == 2
    assert cache.object_counts(metadata_only=True) == {"ConfigMap": 1}


def test_the_silence_of_each_kind_is_a_gauge() -> None:
    """crewlet_operator_cache_silence_seconds{kind}: the longest any cache has not heard of a
    kind, read when scraped (the input of the stale-informer alert)."""
    registry = CollectorRegistry()
    gauge = Gauge("crewlet_operator_cache_objects", "Objects.", ["kind"], registry=registry)
    silence = Gauge("silence", "Seconds.", ["kind"], registry=registry)
    counts = CachedObjectCounts(gauge, silence=silence)
    caches = [cache_of(CONFIG_MAP), cache_of(CONFIG_MAP, SECRET)]
    for cache in caches:
        counts.track(cache)
    now = time.monotonic()
    caches[0].informers[CONFIG_MAP].last_event_at = now - 500
    caches[1].informers[CONFIG_MAP].last_event_at = now - 20
    caches[1].informers[SECRET].last_event_at = now - 5
    assert 500 <= (registry.get_sample_value("silence", {"kind": "ConfigMap"}) or 0) < 510
    assert 5 <= (registry.get_sample_value("silence", {"kind": "Secret"}) or 0) < 15
    counts.untrack(caches[1])
    assert registry.get_sample_value("silence", {"kind": "Secret"}) is None
