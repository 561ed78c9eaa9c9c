"""What is not the company's is never written: names held by other objects, and hostnames held
by other companies, decided by the pure reconcile (issue 35).

"A write of an object that carries a controller reference never lands on an existing object
controlled by someone else or by no one [...]. The operator reports a taken name with a reason
of its own (not InvalidClass) that names each taken object and says what to do; [...] the
company proceeds once the name is free." And: "the second Company claiming a taken
`webhookHostname` gets `Accepted=False` with a reason naming the holder; the first keeps it."
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from crewlet_operator import HTTP_ROUTE, INGRESS, controller_reference, find_condition
from crewlet_operator_daemon import (
    ClusterFacts,
    Observed,
    Plan,
    desired_children,
    hostnames,
    naming,
    reconcile,
)
from crewlet_operator_daemon.api.conditions import HOSTNAME_TAKEN, NAME_TAKEN
from crewlet_operator_daemon.plan import CHILD_RESOURCES, GATEWAY_CHILD_RESOURCES

Object = dict[str, Any]

NAMESPACE = "tenant-a"
COMPANY_UID = "6f1d2c3b-0000-4000-8000-000000000001"
IMAGE = "ghcr.io/crewlet/crewlet-operator/engine:v0.2.0"
FACTS = ClusterFacts(gateway_api=False, operator_namespace="crewlet-operator-system")
GATEWAY_FACTS = ClusterFacts(gateway_api=True, operator_namespace="crewlet-operator-system")
GATEWAY = {"gateway": {"parentRefs": [{"name": "public", "namespace": "gateways"}]}}


def company(**spec: Any) -> Object:
    return {
        "apiVersion": "crewlet.ai/v1alpha1",
        "kind": "Company",
        "metadata": {"name": "acme", "namespace": NAMESPACE, "uid": COMPANY_UID, "generation": 1},
        "spec": {"className": "standard", "webhookHostname": "acme.example", **spec},
    }


def engine_class() -> Object:
    return {
        "apiVersion": "crewlet.ai/v1alpha1",
        "kind": "EngineClass",
        "metadata": {"name": "standard", "generation": 1},
        "spec": {"engine": {"image": IMAGE}, "exposure": GATEWAY},
    }


def token() -> str:
    return "operator-token-for-tests"


def plan(observed: Observed, facts: ClusterFacts = FACTS) -> Plan:
    return reconcile(company(), engine_class(), {}, observed, facts, token_factory=token)


def accepted(result: Plan) -> Object:
    assert result.status is not None
    found = find_condition(result.status["conditions"], "Accepted")
    assert found is not None
    return found


def held_by(kind: str, name: str, controller: Object | None) -> Object:
    """An object's metadata as the namesakes cache keeps it."""
    meta: Object = {"name": name, "namespace": NAMESPACE, "uid": f"uid-of-{name}"}
    if controller is not None:
        meta["ownerReferences"] = [{**controller, "controller": True}]
    return {"apiVersion": "v1", "kind": kind, "metadata": meta}


DEPLOYMENT = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "uid-web"}
EARLIER = {"apiVersion": "crewlet.ai/v1alpha1", "kind": "Company", "name": "acme", "uid": "old"}
THIS = {"apiVersion": "crewlet.ai/v1alpha1", "kind": "Company", "name": "acme", "uid": COMPANY_UID}


def every_child(facts: ClusterFacts) -> list[tuple[str, str]]:
    """(kind, name) of every child the company wants."""
    children = desired_children(company(), engine_class(), Observed(), facts, token_factory=token)
    return [(c.resource.kind, c.object["metadata"]["name"]) for c in children]


@pytest.mark.parametrize(
    ("facts", "child"),
    [(FACTS, c) for c in every_child(FACTS)]
    + [(GATEWAY_FACTS, c) for c in every_child(GATEWAY_FACTS) if c[0] == HTTP_ROUTE.kind],
    ids=lambda v: "/".join(v) if isinstance(v, tuple) else "",
)
def test_a_name_held_by_someone_else_refuses_the_company_and_writes_nothing(
    facts: ClusterFacts, child: tuple[str, str]
) -> None:
    kind, name = child
    result = plan(Observed(namesakes={child: held_by(kind, name, None)}), facts)
    verdict = accepted(result)
    assert (verdict["status"], verdict["reason"]) == ("False", NAME_TAKEN)
    assert f"{kind} {name} (controlled by no one)" in verdict["message"]
    assert "rename or delete it" in verdict["message"]
    assert (result.applies, result.deletes) == ([], [])


def test_every_child_kind_is_covered() -> None:
    """The cases above are every child of every kind the operator writes (13, and a route of
    either kind)."""
    kinds = {k for k, _ in every_child(FACTS)} | {k for k, _ in every_child(GATEWAY_FACTS)}
    assert kinds == {r.kind for r in (*CHILD_RESOURCES, *GATEWAY_CHILD_RESOURCES)}
    assert len(every_child(FACTS)) == 14  # the 13 children and the webhook route
    for kind, name in every_child(FACTS) + every_child(GATEWAY_FACTS):
        assert name in naming.child_names("acme", kind)
        assert naming.companies_named_by(kind, name) == ["acme"]


def test_every_taken_name_is_named_with_who_holds_it() -> None:
    namesakes = {
        ("Secret", "acme-env"): held_by("Secret", "acme-env", None),
        ("Service", "acme-api"): held_by("Service", "acme-api", DEPLOYMENT),
    }
    verdict = accepted(plan(Observed(namesakes=namesakes)))
    assert verdict["reason"] == NAME_TAKEN
    assert verdict["message"].startswith(
        "the names of 2 of the company's objects are held by objects the operator did not make"
    )
    assert "Secret acme-env (controlled by no one)" in verdict["message"]
    assert "Service acme-api (controlled by Deployment web)" in verdict["message"]
    assert "rename or delete them" in verdict["message"]


def test_a_labelled_child_controlled_by_an_earlier_company_of_the_name_is_waited_for() -> None:
    """Labels say ``acme``, but the controller is a Company of that name deleted before: its
    children go with it, and this company waits instead of adding a second controller."""
    earlier = held_by("Secret", "acme-env", EARLIER)
    earlier["metadata"]["labels"] = naming.labels("acme")
    verdict = accepted(plan(Observed(children={("Secret", "acme-env"): earlier})))
    assert verdict["reason"] == NAME_TAKEN
    assert "left by an earlier Company acme (uid old)" in verdict["message"]


def test_an_object_the_company_controls_is_its_own_whatever_its_labels() -> None:
    """A child whose labels someone took off is still the company's: applied onto, by its uid
    (the controller reads it whole into ``children``), never reported as taken."""
    own = held_by("Secret", "acme-env", THIS)
    result = plan(Observed(namesakes={("Secret", "acme-env"): own}))
    assert accepted(result)["status"] == "True"


def test_each_apply_lands_on_the_child_it_was_compared_with_or_only_creates() -> None:
    first = plan(Observed())
    assert first.applies
    assert all(a.existing is None for a in first.applies)
    children = {(a.resource.kind, a.object["metadata"]["name"]): a.object for a in first.applies}
    stale = copy.deepcopy(children)
    env = stale[("Secret", "acme-env")]
    env["metadata"]["uid"] = "uid-env"
    env["metadata"]["labels"] = {**env["metadata"]["labels"], "tampered": "yes"}
    env["metadata"]["labels"].pop(naming.NAME_LABEL)
    again = plan(Observed(children=stale))
    (apply,) = [a for a in again.applies if a.object["metadata"]["name"] == "acme-env"]
    assert apply.existing is not None
    assert apply.existing["metadata"]["uid"] == "uid-env"


def test_a_hostname_held_by_another_company_is_refused_with_the_holder_named() -> None:
    result = plan(Observed(hostname_holder="tenant-b/other"))
    verdict = accepted(result)
    assert (verdict["status"], verdict["reason"]) == ("False", HOSTNAME_TAKEN)
    assert "Company tenant-b/other holds the webhook hostname acme.example" in verdict["message"]
    assert (result.applies, result.deletes) == ([], [])


def test_a_refusal_for_a_taken_name_keeps_a_running_company_as_it_is() -> None:
    """Refused, a company's children are left exactly as they are (nothing applied or
    deleted), as for every other refusal."""
    running = plan(Observed())
    children = {
        (a.resource.kind, a.object["metadata"]["name"]): {
            **a.object,
            "metadata": {**a.object["metadata"], "uid": f"uid-{i}"},
        }
        for i, a in enumerate(running.applies)
    }
    children.pop((INGRESS.kind, "acme-webhooks"))
    namesakes = {(INGRESS.kind, "acme-webhooks"): held_by("Ingress", "acme-webhooks", None)}
    result = plan(Observed(children=children, namesakes=namesakes))
    assert accepted(result)["reason"] == NAME_TAKEN
    assert (result.applies, result.deletes) == ([], [])


@pytest.mark.parametrize(
    ("kind", "name", "companies"),
    [
        ("Secret", "acme-api-token", ["acme"]),
        ("Secret", "acme-api", []),
        ("Service", "acme-api", ["acme"]),
        ("Service", "acme-data", ["acme"]),
        ("StatefulSet", "acme-api", []),
        ("ServiceAccount", "default", []),
        ("Ingress", "-webhooks", []),
        ("ConfigMap", "acme-config", []),
    ],
)
def test_a_name_maps_back_to_the_company_whose_child_it_would_be(
    kind: str, name: str, companies: list[str]
) -> None:
    assert naming.companies_named_by(kind, name) == companies


# -- who holds a hostname (crewlet_operator_daemon.hostnames) ------------------------------------


def claimant(ns: str, name: str, created: str, hostname: str = "shared.example") -> Object:
    return {
        "apiVersion": "crewlet.ai/v1alpha1",
        "kind": "Company",
        "metadata": {
            "name": name,
            "namespace": ns,
            "uid": f"uid-{ns}-{name}",
            "creationTimestamp": created,
        },
        "spec": {"className": "standard", "webhookHostname": hostname},
    }


def route_of(owner: Object, host: str = "shared.example", kind: str = "Ingress") -> Object:
    spec: Object = {"rules": [{"host": host}]} if kind == "Ingress" else {"hostnames": [host]}
    return {
        "kind": kind,
        "metadata": {"ownerReferences": [{**controller_reference(owner)}]},
        "spec": spec,
    }


OLD, MID, NEW = "2026-01-01T00:00:00Z", "2026-02-01T00:00:00Z", "2026-03-01T00:00:00Z"
ELDER, FIRST, SECOND = (
    claimant("c", "elder", OLD),
    claimant("a", "first", MID),
    claimant("b", "second", NEW),
)
EVERYONE = [ELDER, FIRST, SECOND]


@pytest.mark.parametrize(
    ("case", "routes", "holders"),
    [
        # Nobody routes it yet: the oldest Company holds it, every other is refused.
        ("oldest", {}, {"c/elder": None, "a/first": "c/elder", "b/second": "c/elder"}),
        # The first to route it keeps it, against an older company asking later.
        (
            "routed",
            {"a/first": route_of(FIRST)},
            {"c/elder": "a/first", "a/first": None, "b/second": "a/first"},
        ),
        (
            "routed by an HTTPRoute",
            {"b/second": route_of(SECOND, kind="HTTPRoute")},
            {"c/elder": "b/second", "a/first": "b/second", "b/second": None},
        ),
        # A route for another host, or someone else's, holds nothing.
        (
            "another host",
            {"a/first": route_of(FIRST, host="other.example")},
            {"c/elder": None, "a/first": "c/elder", "b/second": "c/elder"},
        ),
        (
            "not its route",
            {"a/first": route_of(ELDER)},
            {"c/elder": None, "a/first": "c/elder", "b/second": "c/elder"},
        ),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_one_company_holds_each_hostname(
    case: str, routes: dict[str, Object | None], holders: dict[str, str | None]
) -> None:
    for company_ in EVERYONE:
        key = f"{company_['metadata']['namespace']}/{company_['metadata']['name']}"
        assert hostnames.holder(company_, EVERYONE, routes) == holders[key], (case, key)


def test_a_company_being_deleted_or_asking_for_another_hostname_holds_nothing() -> None:
    leaving = {**ELDER, "metadata": {**ELDER["metadata"], "deletionTimestamp": NEW}}
    moved = claimant("c", "elder", OLD, hostname="elsewhere.example")
    for gone in (leaving, moved):
        assert hostnames.holder(FIRST, [gone, FIRST, SECOND], {}) is None
        assert hostnames.holder(SECOND, [gone, FIRST, SECOND], {}) == "a/first"


def test_ties_of_age_go_by_namespace_then_name() -> None:
    a, b = claimant("a", "z", OLD), claimant("b", "a", OLD)
    assert hostnames.holder(b, [b, a], {}) == "a/z"
    assert hostnames.holder(a, [b, a], {}) is None


def test_no_hostname_is_held_by_anyone() -> None:
    alone = claimant("a", "alone", OLD, hostname="")
    assert hostnames.holder(alone, [alone, FIRST], {}) is None
