"""How the Company controller finds what a company reads (crewlet_operator_daemon.indexes)."""

from __future__ import annotations

import pytest

from crewlet_operator import KubeObject as Object
from crewlet_operator_daemon.hostnames import route_hosts
from crewlet_operator_daemon.indexes import (
    company_of_child,
    hostname_changed,
    hostname_of,
    namesake_identity,
    refused_for_others,
    view_entry,
)


def company(hostname: str | None = None, reason: str | None = None) -> Object:
    spec: Object = {"className": "standard"}
    if hostname is not None:
        spec["webhookHostname"] = hostname
    status: Object = {}
    if reason is not None:
        status["conditions"] = [{"type": "Accepted", "status": "False", "reason": reason}]
    return {"metadata": {"name": "acme", "namespace": "team-a"}, "spec": spec, "status": status}


def test_a_child_is_indexed_under_the_company_its_label_names() -> None:
    child = {"metadata": {"namespace": "team-a", "labels": {"crewlet.ai/company": "acme"}}}
    assert company_of_child(child) == ["team-a/acme"]
    assert company_of_child({"metadata": {"namespace": "team-a", "labels": {}}}) == []
    assert company_of_child({"metadata": {"namespace": "team-a"}}) == []


def test_a_company_is_indexed_under_the_hostname_it_asks_for_and_its_wildcards() -> None:
    """Under each wildcard host that serves it too, so that another workload's route for
    *.example.com finds the companies whose hostname it serves."""
    assert hostname_of(company("hooks.example.com")) == [
        "hooks.example.com",
        "*.example.com",
        "*.com",
    ]
    assert hostname_of(company()) == []


@pytest.mark.parametrize(
    ("old", "new", "changed"),
    [
        (None, "a.example.com", True),
        ("a.example.com", "b.example.com", True),
        ("a.example.com", None, True),
        ("a.example.com", "a.example.com", False),
        (None, None, False),
    ],
)
def test_a_hostname_change_is_one_given_taken_or_replaced(
    old: str | None, new: str | None, changed: bool
) -> None:
    assert hostname_changed(company(old), company(new)) is changed


def test_a_namesake_is_kept_as_who_it_is_and_who_controls_it() -> None:
    owners = [{"kind": "Company", "name": "x", "uid": "u1", "controller": True}]
    obj = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": "acme-env",
            "namespace": "team-a",
            "uid": "u2",
            "resourceVersion": "7",
            "ownerReferences": owners,
            "labels": {"team": "a"},
            "annotations": {"note": "n"},
            "managedFields": [{"manager": "kubectl"}],
        },
        "data": {"token": "c2VjcmV0"},
    }
    assert namesake_identity(obj) == {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": "acme-env",
            "namespace": "team-a",
            "uid": "u2",
            "resourceVersion": "7",
            "ownerReferences": owners,
        },
    }


@pytest.mark.parametrize(
    ("reason", "contested"),
    [
        ("NameTaken", True),
        ("HostnameTaken", True),
        ("InvalidClass", False),
        ("ClassNotFound", False),
        (None, False),
    ],
)
def test_only_refusals_for_others_objects_are_contested(
    reason: str | None, contested: bool
) -> None:
    assert refused_for_others(company(reason=reason)) is contested


def test_the_directory_keeps_a_companys_class_and_hostname_and_who_it_is() -> None:
    stored = company("hooks.example.com") | {"apiVersion": "crewlet.ai/v1alpha1", "kind": "Company"}
    stored["metadata"] |= {
        "uid": "u1",
        "resourceVersion": "7",
        "creationTimestamp": "2026-12-05T00:00:00Z",
        "labels": {"team": "a"},
        "annotations": {"note": "x"},
        "managedFields": [{"manager": "kubectl"}],
    }
    stored["spec"] |= {"seats": {"replicas": 3}}
    entry = view_entry(stored)
    assert entry == {
        "apiVersion": "crewlet.ai/v1alpha1",
        "kind": "Company",
        "metadata": {
            "name": "acme",
            "namespace": "team-a",
            "uid": "u1",
            "resourceVersion": "7",
            "creationTimestamp": "2026-12-05T00:00:00Z",
        },
        "spec": {"className": "standard", "webhookHostname": "hooks.example.com"},
    }
    assert hostname_of(entry)[0] == "hooks.example.com"


@pytest.mark.parametrize(
    ("route", "hosts"),
    [
        (
            {"kind": "HTTPRoute", "spec": {"hostnames": ["a.example"], "rules": [{"matches": []}]}},
            ["a.example"],
        ),
        (
            {"kind": "Ingress", "spec": {"rules": [{"host": "b.example", "http": {"paths": []}}]}},
            ["b.example"],
        ),
    ],
)
def test_the_directory_keeps_the_hosts_a_route_routes_and_its_owner(
    route: Object, hosts: list[str]
) -> None:
    owner = {"kind": "Company", "name": "acme", "uid": "u1", "controller": True}
    route["metadata"] = {"name": "acme-webhooks", "namespace": "team-a", "ownerReferences": [owner]}
    entry = view_entry(route)
    assert route_hosts(entry) == hosts
    assert entry["metadata"]["ownerReferences"] == [owner]
    assert "matches" not in str(entry) and "http" not in entry["spec"].get("rules", [{}])[0]
