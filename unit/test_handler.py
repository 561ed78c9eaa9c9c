"""Mapping a child's events to its controlling owner (the ``owns`` watch)."""

from __future__ import annotations

from typing import Any

from crewlet_operator.handler import requests_for_owner
from crewlet_operator.owners import owner_key_of
from crewlet_operator.reconcile import Request


def child(*refs: dict[str, Any], namespace: str | None = "ns") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "c", "ownerReferences": list(refs)}
    if namespace:
        meta["namespace"] = namespace
    return {"metadata": meta}


WIDGET_V1 = {"apiVersion": "example.com/v1", "kind": "Widget", "name": "w", "controller": True}


def test_the_owner_is_found_whatever_version_it_was_written_with() -> None:
    beta = {**WIDGET_V1, "apiVersion": "example.com/v1beta1"}
    assert requests_for_owner("example.com", "Widget")(child(beta)) == [Request("ns", "w")]


def test_a_cluster_scoped_owner_is_requested_without_a_namespace() -> None:
    mapper = requests_for_owner("example.com", "Widget", owner_namespaced=False)
    assert mapper(child(WIDGET_V1)) == [Request(None, "w")]


def test_only_the_controller_reference_of_the_group_and_kind_counts() -> None:
    plain = {**WIDGET_V1, "controller": False}
    mapper = requests_for_owner("example.com", "Widget")
    assert mapper(child(plain)) == []
    assert requests_for_owner("other.com", "Widget")(child(WIDGET_V1)) == []
    assert requests_for_owner("example.com", "Gadget")(child(WIDGET_V1)) == []


def test_the_handler_maps_exactly_as_owner_key_of() -> None:
    cases = [child(WIDGET_V1), child({**WIDGET_V1, "controller": False}), child()]
    for obj in cases:
        key = owner_key_of(obj, "example.com", "Widget")
        expected = [] if key is None else [Request(*key)]
        assert requests_for_owner("example.com", "Widget")(obj) == expected
