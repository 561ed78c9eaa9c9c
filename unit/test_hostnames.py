"""A hostname belongs to one workload (issue 47): which routes of other workloads hold a
company's webhook hostname, which hostnames a class gives its companies, and the verdicts that
say so, decided by the pure code (``hostnames``, the reconcile).

"A tenant's Company takes /webhooks of a hostname another workload serves. payments serves
pay.example.com through the platform's Gateway with an HTTPRoute for /; a tenant's Company with
webhookHostname: pay.example.com is Accepted and its route, with a longer prefix, takes every
request under /webhooks of that host."
"""

from __future__ import annotations

from typing import Any

import pytest

from crewlet_operator import controller_reference, find_condition
from crewlet_operator_daemon import ClusterFacts, Observed, Plan, hostnames, reconcile
from crewlet_operator_daemon.api.conditions import HOSTNAME_NOT_ALLOWED, HOSTNAME_TAKEN

Object = dict[str, Any]

PUBLIC = {"name": "public", "namespace": "gateways"}
FACTS = ClusterFacts(gateway_api=True, operator_namespace="crewlet-operator-system")


def company(hostname: str = "pay.example.com", namespace: str = "tenant-b") -> Object:
    return {
        "apiVersion": "crewlet.ai/v1alpha1",
        "kind": "Company",
        "metadata": {"name": "acme", "namespace": namespace, "uid": "uid-acme", "generation": 1},
        "spec": {"className": "standard", "webhookHostname": hostname},
    }


def http_route(
    name: str, namespace: str, *hosts: str, parents: list[Object] | None = None
) -> Object:
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
        "spec": {
            "parentRefs": [PUBLIC] if parents is None else parents,
            "hostnames": list(hosts),
            "rules": [{"backendRefs": [{"name": name, "port": 80}]}],
        },
    }


def ingress(
    name: str, host: str, class_name: str | None = None, annotated: str | None = None
) -> Object:
    meta: Object = {"name": name, "namespace": "payments", "uid": f"uid-{name}"}
    if annotated:
        meta["annotations"] = {hostnames.INGRESS_CLASS_ANNOTATION: annotated}
    spec: Object = {"rules": [{"host": host, "http": {"paths": [{"path": "/"}]}}]}
    if class_name:
        spec["ingressClassName"] = class_name
    return {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": meta, "spec": spec}


def test_a_route_serves_its_names_and_every_name_under_its_wildcards() -> None:
    assert hostnames.serving_keys("a.pay.example.com") == [
        "a.pay.example.com",
        "*.pay.example.com",
        "*.example.com",
        "*.com",
    ]
    assert hostnames.serving_keys("") == []


def test_another_workloads_route_through_the_same_gateway_holds_the_hostname() -> None:
    payments = http_route("pay", "payments", "pay.example.com")
    assert (
        hostnames.foreign_holder(company(), [payments], [PUBLIC], None) == "HTTPRoute payments/pay"
    )
    wildcard = http_route("all", "payments", "*.example.com")
    assert (
        hostnames.foreign_holder(company(), [wildcard], [PUBLIC], None) == "HTTPRoute payments/all"
    )
    # Listed by namespace and name: the same route is named whatever the order.
    both = [payments, wildcard]
    assert hostnames.foreign_holder(company(), both, [PUBLIC], None) == "HTTPRoute payments/all"
    assert (
        hostnames.foreign_holder(company(), both[::-1], [PUBLIC], None) == "HTTPRoute payments/all"
    )


def test_a_route_elsewhere_or_for_other_names_or_the_companys_own_holds_nothing() -> None:
    elsewhere = http_route("pay", "payments", "pay.example.com", parents=[{"name": "internal"}])
    other_name = http_route("shop", "payments", "shop.example.com")
    own = http_route("acme-webhooks", "tenant-b", "pay.example.com")
    own["metadata"]["ownerReferences"] = [controller_reference(company())]
    routes = [elsewhere, other_name, own]
    assert hostnames.foreign_holder(company(), routes, [PUBLIC], None) is None


def test_a_gateway_is_named_with_its_defaults_filled_in() -> None:
    """A parentRef without a namespace is the route's own namespace, without a group and kind
    the Gateway API's Gateway: the class's ref and the route's are compared so."""
    local = http_route("pay", "gateways", "pay.example.com", parents=[{"name": "public"}])
    spelt = http_route(
        "pay",
        "payments",
        "pay.example.com",
        parents=[{**PUBLIC, "group": "gateway.networking.k8s.io", "kind": "Gateway"}],
    )
    assert hostnames.foreign_holder(company(), [local], [PUBLIC], None) == "HTTPRoute gateways/pay"
    assert hostnames.foreign_holder(company(), [spelt], [PUBLIC], None) == "HTTPRoute payments/pay"


@pytest.mark.parametrize(
    ("route", "class_name", "holds"),
    [
        (ingress("pay", "pay.example.com", "nginx"), "nginx", True),
        (ingress("pay", "pay.example.com", "nginx"), "internal", False),
        (ingress("pay", "pay.example.com", annotated="nginx"), "nginx", True),
        (ingress("pay", "pay.example.com", annotated="internal"), "nginx", False),
        # No class on either side: the cluster's default class may be the other's.
        (ingress("pay", "pay.example.com"), "nginx", True),
        (ingress("pay", "pay.example.com", "nginx"), None, True),
        (ingress("pay", "*.example.com", "nginx"), "nginx", True),
    ],
)
def test_an_ingress_on_the_same_class_holds_the_hostname(
    route: Object, class_name: str | None, holds: bool
) -> None:
    found = hostnames.foreign_holder(company(), [route], [], class_name)
    assert found == ("Ingress payments/pay" if holds else None)


def test_what_is_cached_of_another_workloads_route_is_its_hosts_and_attachment() -> None:
    route = http_route("pay", "payments", "pay.example.com")
    route["metadata"] |= {"labels": {"team": "payments"}, "managedFields": [{"manager": "x"}]}
    kept = hostnames.route_identity(route)
    assert kept["spec"] == {"hostnames": ["pay.example.com"], "parentRefs": [PUBLIC]}
    assert set(kept["metadata"]) == {"name", "namespace", "uid"}
    annotated = hostnames.route_identity(ingress("pay", "pay.example.com", annotated="nginx"))
    assert annotated["spec"] == {"rules": [{"host": "pay.example.com"}]}
    assert annotated["metadata"]["annotations"] == {hostnames.INGRESS_CLASS_ANNOTATION: "nginx"}


@pytest.mark.parametrize(
    ("hostname", "patterns", "namespace", "allowed"),
    [
        ("pay.example.com", None, "tenant-b", True),
        ("pay.example.com", [], "tenant-b", False),
        ("hooks.example.com", ["hooks.example.com"], "tenant-b", True),
        ("a.hooks.example.com", ["*.hooks.example.com"], "tenant-b", True),
        ("a.b.hooks.example.com", ["*.hooks.example.com"], "tenant-b", True),
        ("hooks.example.com", ["*.hooks.example.com"], "tenant-b", False),
        ("evilhooks.example.com", ["*.hooks.example.com"], "tenant-b", False),
        ("x.tenant-b.hooks.example.com", ["*.{namespace}.hooks.example.com"], "tenant-b", True),
        ("x.tenant-a.hooks.example.com", ["*.{namespace}.hooks.example.com"], "tenant-b", False),
        ("tenant-b.hooks.example.com", ["{namespace}.hooks.example.com"], "tenant-b", True),
    ],
)
def test_a_class_gives_its_companies_the_hostnames_it_lists(
    hostname: str, patterns: list[str] | None, namespace: str, allowed: bool
) -> None:
    assert hostnames.allowed(hostname, patterns, namespace) is allowed


def engine_class(**exposure: Any) -> Object:
    return {
        "apiVersion": "crewlet.ai/v1alpha1",
        "kind": "EngineClass",
        "metadata": {"name": "standard", "generation": 1},
        "spec": {
            "engine": {"image": "ghcr.io/crewlet/crewlet-operator/engine:v0.2.0"},
            "exposure": {"gateway": {"parentRefs": [PUBLIC]}, **exposure},
        },
    }


def verdict(result: Plan) -> Object:
    assert result.status is not None
    found = find_condition(result.status["conditions"], "Accepted")
    assert found is not None
    return found


def test_a_hostname_another_workload_serves_is_refused_naming_its_route() -> None:
    result = reconcile(
        company(),
        engine_class(),
        {},
        Observed(hostname_route="HTTPRoute payments/pay"),
        FACTS,
        token_factory=lambda: "token",
    )
    accepted = verdict(result)
    assert (accepted["status"], accepted["reason"]) == ("False", HOSTNAME_TAKEN)
    assert accepted["message"].startswith(
        "HTTPRoute payments/pay, a route the operator did not write, serves the webhook hostname "
        "pay.example.com through the same Gateway"
    )
    assert (result.applies, result.deletes) == ([], [])


def test_a_hostname_the_class_does_not_give_is_refused_with_a_reason_of_its_own() -> None:
    result = reconcile(
        company(),
        engine_class(allowedHostnames=["*.{namespace}.hooks.example.com"]),
        {},
        Observed(),
        FACTS,
        token_factory=lambda: "token",
    )
    accepted = verdict(result)
    assert (accepted["status"], accepted["reason"]) == ("False", HOSTNAME_NOT_ALLOWED)
    assert (
        "EngineClass standard gives its companies the webhook hostnames "
        "*.{namespace}.hooks.example.com ({namespace} being tenant-b), and not pay.example.com"
    ) in accepted["message"]
    assert (result.applies, result.deletes) == ([], [])
    given = reconcile(
        company("a.tenant-b.hooks.example.com"),
        engine_class(allowedHostnames=["*.{namespace}.hooks.example.com"]),
        {},
        Observed(),
        FACTS,
        token_factory=lambda: "token",
    )
    assert verdict(given)["status"] == "True"
