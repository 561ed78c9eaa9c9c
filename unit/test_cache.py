"""What the cache says about its informers' liveness (no API server: nothing is started)."""

from __future__ import annotations

from crewlet_operator.cache import Cache, InformerOptions
from crewlet_operator.kube.resources import CONFIG_MAP, NAMESPACE, SECRET
from crewlet_operator.objects import KubeObject


def untouched(obj: KubeObject) -> KubeObject:
    return obj


def cache_with_two_informers() -> Cache:
    """A ConfigMap informer with a 10 s watchdog and 1 s backoff, a Secret one with defaults."""
    cache = Cache(client=None)  # type: ignore[arg-type]  # never started: no client needed
    cache.informer(
        CONFIG_MAP, InformerOptions(transform=untouched, inactivity_timeout=10, max_backoff=1)
    )
    cache.informer(SECRET, InformerOptions(transform=untouched))
    return cache


def test_an_informer_may_be_silent_for_two_watchdogs_and_two_backoffs() -> None:
    cache = cache_with_two_informers()
    assert cache.informers[CONFIG_MAP].max_silence == 2 * (10 + 1)
    assert cache.informers[SECRET].max_silence == 2 * (90 + 30)


def test_an_informer_silent_past_its_watchdog_is_stale() -> None:
    cache = cache_with_two_informers()
    config_maps, secrets = cache.informers[CONFIG_MAP], cache.informers[SECRET]
    config_maps.last_event_at = secrets.last_event_at = 1000.0
    assert cache.stale(now=1000.0 + 22) == []
    assert cache.stale(now=1000.0 + 22.5) == ["ConfigMap"]
    assert cache.stale(now=1000.0 + 240.5) == ["ConfigMap", "Secret"]


def test_hearing_anything_makes_an_informer_fresh_again() -> None:
    cache = cache_with_two_informers()
    cache.informers[CONFIG_MAP].last_event_at = 1000.0
    cache.informers[SECRET].last_event_at = 1100.0
    assert cache.stale(now=1100.0) == ["ConfigMap"]
    cache.informers[CONFIG_MAP].last_event_at = 1100.0  # a bookmark arrived
    assert cache.stale(now=1100.0) == []


def test_one_silence_for_every_kind_when_asked() -> None:
    cache = cache_with_two_informers()
    cache.informers[CONFIG_MAP].last_event_at = 1000.0
    cache.informers[SECRET].last_event_at = 1005.0
    assert cache.stale(5.0, now=1010.0) == ["ConfigMap"]
    assert cache.stale(4.0, now=1010.0) == ["ConfigMap", "Secret"]


def test_a_cache_without_informers_has_nothing_stale() -> None:
    assert Cache(client=None).stale() == []  # type: ignore[arg-type]


def test_cached_reads_by_key_and_by_label_selector() -> None:
    cache = cache_with_two_informers()
    store = cache.informers[CONFIG_MAP].store
    for name, labels in (("web", {"app": "web", "tier": "front"}), ("db", {"app": "db"})):
        store.put({"metadata": {"name": name, "namespace": "prod", "labels": labels}})
    assert cache.get(CONFIG_MAP, "web", "prod") is not None
    assert cache.get(CONFIG_MAP, "web", "qa") is None
    selector = {"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}
    assert [o["metadata"]["name"] for o in cache.list(CONFIG_MAP, labels=selector)] == ["db"]
    namespaces = cache.informer(NAMESPACE, InformerOptions(transform=untouched))
    namespaces.store.put({"metadata": {"name": "prod"}})
    assert cache.get(NAMESPACE, "prod") == {"metadata": {"name": "prod"}}
