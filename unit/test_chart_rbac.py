"""The chart grants what the operator's own controllers declare (issue 37, point 4).

The operator's manager is built as the daemon builds it, from the chart's rendered Deployment
arguments, with a client it never calls; :func:`crewlet_operator.rbac.manager_rules` reads its
controllers' declarations, and every rule must be granted by the roles the chart binds to the
manager's ServiceAccount: a verb missing from the chart fails here, not in a cluster. So with
manager.sharding.enabled: the chart passes --sharding, and grants what a sharded manager declares.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from fakes import offline_client

from crewlet_operator import Manager, PolicyRule, Request
from crewlet_operator.envtest import binaries
from crewlet_operator.rbac import manager_rules, ungranted
from crewlet_operator_daemon.api.v1alpha1 import COMPANY
from crewlet_operator_daemon.cli import manager_options, parse_args
from crewlet_operator_daemon.controller import CrewletControllers
from crewlet_operator_daemon.plan import ClusterFacts

CHART = Path(__file__).resolve().parent.parent / "charts" / "crewlet-operator"
RELEASE = "crewlet-operator"
NAMESPACE = "crewlet-operator-system"

Doc = dict[str, Any]


def rendered(*sets: str) -> list[Doc]:
    """``helm template`` the chart with its default values, and ``sets`` (``--set``)."""
    result = subprocess.run(
        [
            str(binaries.find("helm")),
            "template",
            RELEASE,
            str(CHART),
            "--namespace",
            NAMESPACE,
            *(arg for value in sets for arg in ("--set", value)),
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        env={"HOME": "/nonexistent", "PATH": "/usr/bin:/bin", "KUBECONFIG": "/nonexistent"},
    )
    return [d for d in yaml.safe_load_all(result.stdout) if d]


@pytest.fixture(scope="module")
def docs() -> list[Doc]:
    return rendered()


@pytest.fixture(scope="module")
def sharded_docs() -> list[Doc]:
    return rendered("manager.sharding.enabled=true")


def the_deployment(docs: list[Doc]) -> Doc:
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    return deployment


def operator_manager(docs: list[Doc], gateway_api: bool) -> Manager:
    """The daemon's manager and controllers, as ``crewlet_operator_daemon.cli.run`` builds them
    from the chart's arguments; nothing here reaches the client."""
    (container,) = the_deployment(docs)["spec"]["template"]["spec"]["containers"]
    args = parse_args(container["args"])
    manager = Manager(offline_client(), manager_options(args))
    facts = ClusterFacts(
        gateway_api=gateway_api,
        operator_namespace=args.leader_election_namespace,
        field_manager=manager.field_manager,
    )
    CrewletControllers(manager, facts)
    return manager


def granted(docs: list[Doc], kind: str, namespace: str | None) -> list[PolicyRule]:
    """The rules of the roles the chart binds to the manager's ServiceAccount with bindings of
    ``kind`` (ClusterRoleBinding, or RoleBinding in ``namespace``)."""
    account = the_deployment(docs)["spec"]["template"]["spec"]["serviceAccountName"]
    roles = {(d["kind"], d["metadata"]["name"]): d for d in docs if d["kind"].endswith("Role")}
    rules = []
    for binding in docs:
        if binding["kind"] != kind or binding["metadata"].get("namespace") != namespace:
            continue
        subjects = binding.get("subjects") or []
        if not any(
            s["kind"] == "ServiceAccount" and s["name"] == account and s["namespace"] == NAMESPACE
            for s in subjects
        ):
            continue
        ref = binding["roleRef"]
        role = roles[(ref["kind"], ref["name"])]
        assert role["metadata"].get("namespace") == namespace, ref
        rules += [PolicyRule.from_dict(r) for r in role["rules"]]
    return rules


@pytest.mark.parametrize("sharded", [False, True], ids=["one-leader", "sharded"])
@pytest.mark.parametrize("gateway_api", [True, False], ids=["gateway-api", "ingress"])
def test_the_chart_grants_what_the_controllers_declare(
    request: pytest.FixtureRequest, gateway_api: bool, sharded: bool
) -> None:
    docs: list[Doc] = request.getfixturevalue("sharded_docs" if sharded else "docs")
    manager = operator_manager(docs, gateway_api)
    assert (manager.options.sharding is not None) == sharded, "the chart passes --sharding"
    required = manager_rules(manager)
    assert required.lease_namespace == NAMESPACE, "the Lease lives in the release's namespace"
    everywhere = granted(docs, "ClusterRoleBinding", None)
    missing = ungranted(required.cluster, everywhere)
    assert missing == [], f"not in the chart's ClusterRoles: {[r.to_dict() for r in missing]}"
    in_namespace = everywhere + granted(docs, "RoleBinding", NAMESPACE)
    missing = ungranted(required.lease, in_namespace)
    assert missing == [], f"not granted on the Lease: {[r.to_dict() for r in missing]}"


# What the chart grants beyond the controllers' declarations, each for a reason of its own.
BEYOND_DECLARED = {
    # The install page: "the manager's ClusterRole lets it create, change and delete Secrets,
    # ServiceAccounts, Services, StatefulSets, PodDisruptionBudgets, volume claims,
    # NetworkPolicies and routes in every namespace". The operator itself only reads and
    # patches claims (the StatefulSet controller makes them); the page is the contract.
    ("", "persistentvolumeclaims"): {"create", "delete", "update"},
    # Routes of both kinds: whether the Gateway API is served is learnt when the operator
    # starts, not when the chart is rendered, and may change between two restarts.
    ("gateway.networking.k8s.io", "httproutes"): {
        "create", "delete", "get", "list", "patch", "update", "watch",
    },
}  # fmt: skip


@pytest.mark.parametrize("sharded", [False, True], ids=["one-leader", "sharded"])
@pytest.mark.parametrize("gateway_api", [True, False], ids=["gateway-api", "ingress"])
def test_the_chart_grants_no_more_than_declared_but_what_the_install_page_names(
    request: pytest.FixtureRequest, gateway_api: bool, sharded: bool
) -> None:
    """Least privilege, the other way round: every rule the chart binds to the manager is
    declared by a controller, but for :data:`BEYOND_DECLARED`."""
    docs: list[Doc] = request.getfixturevalue("sharded_docs" if sharded else "docs")
    required = manager_rules(operator_manager(docs, gateway_api))
    extra: dict[tuple[str, str], set[str]] = {}
    # The ClusterRoles against the cluster-wide declarations: the Role in the release's
    # namespace is the Lease's own (the check above holds it to them).
    for rule in ungranted(granted(docs, "ClusterRoleBinding", None), required.cluster):
        for group in rule.api_groups:
            for resource in rule.resources:
                extra.setdefault((group, resource), set()).update(rule.verbs)
    allowed = {
        key: verbs
        for key, verbs in BEYOND_DECLARED.items()
        if gateway_api is False or key[0] != "gateway.networking.k8s.io"
    }
    assert extra == allowed


def test_the_declarations_name_every_kind_the_operator_touches(docs: list[Doc]) -> None:
    """The check above is only as good as the declarations: each controller declares its
    primary's status, the company its children's writes and its Events."""
    rules = manager_rules(operator_manager(docs, gateway_api=True)).cluster
    needed = [
        ("crewlet.ai", "companies/status", "patch"),
        ("crewlet.ai", "engineclasses/status", "patch"),
        ("crewlet.ai", "companies/finalizers", "update"),
        ("apps", "statefulsets", "delete"),
        ("gateway.networking.k8s.io", "httproutes", "create"),
        ("", "persistentvolumeclaims", "patch"),
        ("", "namespaces", "watch"),
        ("events.k8s.io", "events", "create"),
        ("coordination.k8s.io", "leases", "list"),
        ("authorization.k8s.io", "subjectaccessreviews", "create"),
    ]
    assert [n for n in needed if not any(r.grants(*n) for r in rules)] == []


def company_controller_rules(docs: list[Doc]) -> list[PolicyRule]:
    """What the company controller declares on the manager the chart's arguments make, built
    by the library alone (the daemon's own controllers: the test above)."""
    (container,) = the_deployment(docs)["spec"]["template"]["spec"]["containers"]
    manager = Manager(offline_client(), manager_options(parse_args(container["args"])))

    async def reconcile(request: Request) -> None:
        return None

    manager.controller("company").for_(COMPANY).complete(reconcile)
    return list(manager_rules(manager).cluster)


def test_with_sharding_the_chart_grants_the_company_label_patches(
    docs: list[Doc], sharded_docs: list[Doc]
) -> None:
    """With manager.sharding.enabled the chart passes --sharding, and the manager's company
    controller is sharded: it declares the patch of Companies (their ring labels), which the
    chart grants then, and only then."""
    patch = ("crewlet.ai", "companies", "patch")
    sharded = company_controller_rules(sharded_docs)
    assert any(r.grants(*patch) for r in sharded), "the chart passes --sharding"
    assert ungranted(sharded, granted(sharded_docs, "ClusterRoleBinding", None)) == []
    assert not any(r.grants(*patch) for r in company_controller_rules(docs))
    assert not any(r.grants(*patch) for r in granted(docs, "ClusterRoleBinding", None))
