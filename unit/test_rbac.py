"""RBAC generated from the controllers' declarations (crewlet_operator.rbac): pure, no server."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
import yaml
from fakes import offline_client

from crewlet_operator import (
    CONFIG_MAP,
    DEPLOYMENT,
    NAMESPACE,
    SECRET,
    Cache,
    Controller,
    Manager,
    ManagerOptions,
    PolicyRule,
    Request,
    Sharding,
)
from crewlet_operator.rbac import cluster_role, manager_rules, manifests, merge, ungranted
from crewlet_operator.rbac.__main__ import main

OFFLINE = offline_client()
"""A client nothing here calls: building a manager and its controllers reads no server."""


async def reconcile(_: Request) -> None:
    """Never called: the tests build controllers, and run none."""


def new_manager(**options: Any) -> Manager:
    settings = {
        "name": "rbac-test",
        "leader_election": False,
        "metrics_bind_address": "0",
        "health_probe_bind_address": "0",
        **options,
    }
    return Manager(OFFLINE, ManagerOptions(**settings))


def rules_of(manager: Manager) -> list[dict[str, list[str]]]:
    return [rule.to_dict() for rule in manager_rules(manager).cluster]


def rule(group: str, resources: list[str], verbs: list[str]) -> dict[str, list[str]]:
    return {"apiGroups": [group], "resources": resources, "verbs": verbs}


READ = ["get", "list", "watch"]
ALL = ["create", "delete", "get", "list", "patch", "update", "watch"]


def test_watches_read_owned_kinds_are_written_and_block_their_owners_deletion() -> None:
    manager = new_manager()
    manager.controller("widget").for_(DEPLOYMENT).owns(CONFIG_MAP).owns(SECRET).watches(
        NAMESPACE, lambda _: []
    ).complete(reconcile)
    assert rules_of(manager) == [
        rule("", ["configmaps", "secrets"], ALL),
        rule("", ["namespaces"], READ),
        rule("apps", ["deployments"], READ),
        rule("apps", ["deployments/finalizers"], ["update"]),
    ]


def test_with_rbac_adds_status_finalizer_events_and_rules_of_ones_own() -> None:
    manager = new_manager()
    manager.controller("widget").for_(DEPLOYMENT).with_rbac(status=True).with_rbac(
        PolicyRule.on(SECRET, "get", names=["token"]), finalizer=True, events=True
    ).complete(reconcile)
    assert rules_of(manager) == [
        {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["token"], "verbs": ["get"]},
        rule("apps", ["deployments"], ["get", "list", "patch", "watch"]),
        rule("apps", ["deployments/status"], ["get", "patch", "update"]),
        rule("events.k8s.io", ["events"], ["create", "patch"]),
    ]


def test_a_controller_built_by_hand_declares_its_watches_and_added_rules() -> None:
    controller = Controller("by-hand", reconcile, Cache(OFFLINE))
    controller.watch(CONFIG_MAP, lambda _: [])
    controller.add_rbac_rules(PolicyRule.on(CONFIG_MAP, "patch"))
    manager = new_manager()
    manager.add_controller(controller)
    manager.add_rbac_rules(PolicyRule(verbs=("get",), non_resource_urls=("/healthz",)))
    assert rules_of(manager) == [
        rule("", ["configmaps"], ["get", "list", "patch", "watch"]),
        {"nonResourceURLs": ["/healthz"], "verbs": ["get"]},
    ]


def test_the_lease_is_written_in_its_namespace_and_read_everywhere_when_exclusive() -> None:
    manager = new_manager(
        leader_election=True,
        leader_election_namespace="ops",
        exclusive_lease_labels={"app": "widget"},
    )
    rules = manager_rules(manager)
    assert rules.lease_namespace == "ops"
    assert [r.to_dict() for r in rules.lease] == [
        rule("", ["pods"], ["get", "list", "watch"]),  # the holders' Pods: takeover_on_evidence
        rule("coordination.k8s.io", ["leases"], ["create", "get", "list", "update", "watch"]),
    ]
    assert [r.to_dict() for r in rules.cluster] == [
        rule("coordination.k8s.io", ["leases"], ["list", "watch"])
    ]

    role, lease_role = manifests(manager, "widget")
    assert role["kind"] == "ClusterRole" and role["metadata"] == {"name": "widget"}
    assert lease_role["kind"] == "Role"
    assert lease_role["metadata"] == {"name": "widget-leader-election", "namespace": "ops"}


def test_without_takeover_on_evidence_no_pod_is_read() -> None:
    manager = new_manager(leader_election=True, takeover_on_evidence=False)
    assert [r.to_dict() for r in manager_rules(manager).lease] == [
        rule("coordination.k8s.io", ["leases"], ["create", "get", "list", "update", "watch"])
    ]


def test_a_sharded_manager_patches_and_deletes_its_rings_member_leases() -> None:
    """Issue 48: the sharder writes a dead member's will (a patch) and deletes its Lease once
    nothing leads to it; the generated Role missed both, so that two replicas on exactly the
    generated roles stopped with a 403 when one left."""
    manager = new_manager(
        leader_election=True,
        leader_election_namespace="ops",
        sharding=Sharding(resource=CONFIG_MAP, domain="example.com"),
    )
    assert [r.to_dict() for r in manager_rules(manager).lease] == [
        rule("", ["pods"], ["get", "list", "watch"]),
        rule(
            "coordination.k8s.io",
            ["leases"],
            ["create", "delete", "get", "list", "patch", "update", "watch"],
        ),
    ]


def test_without_leader_election_there_is_no_role_and_a_secure_endpoint_reviews() -> None:
    manager = new_manager(metrics_bind_address=":8443", metrics_secure=True)
    (role,) = manifests(manager, "widget")
    assert role["rules"] == [
        rule("authentication.k8s.io", ["tokenreviews"], ["create"]),
        rule("authorization.k8s.io", ["subjectaccessreviews"], ["create"]),
    ]
    assert cluster_role(new_manager(metrics_secure=False), "w")["rules"] == []


def test_merge_is_deterministic_and_exact() -> None:
    rules = [
        PolicyRule(("",), ("services", "secrets"), ("watch", "get")),
        PolicyRule.on(SECRET, "list"),
        PolicyRule(("",), ("pods",), ("*", "get")),
        PolicyRule(("",), ("services",), ("list",)),
        PolicyRule(("apps", ""), ("statefulsets",), ("list",)),  # each group: a rule each
        PolicyRule(("apps",), ("statefulsets",), ("get", "watch")),
    ]
    expected = [
        PolicyRule(("",), ("pods",), ("*",)),
        PolicyRule(("",), ("secrets", "services"), ("get", "list", "watch")),
        PolicyRule(("",), ("statefulsets",), ("list",)),
        PolicyRule(("apps",), ("statefulsets",), ("get", "list", "watch")),
    ]
    assert merge(rules) == expected
    for seed in range(5):
        random.Random(seed).shuffle(rules)
        assert merge(rules) == expected


@pytest.mark.parametrize(
    ("granted", "missing"),
    [
        ({"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get"]}, []),
        ({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}, []),
        ({"apiGroups": ["apps"], "resources": ["*/status"], "verbs": ["get"]}, ["deployments"]),
        ({"apiGroups": [""], "resources": ["deployments"], "verbs": ["get"]}, ["deployments"]),
        ({"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["list"]}, ["deployments"]),
        (
            {
                "apiGroups": ["apps"],
                "resources": ["deployments"],
                "resourceNames": ["web"],
                "verbs": ["get"],
            },
            ["deployments"],
        ),
    ],
)
def test_ungranted_matches_as_the_authoriser(granted: dict[str, Any], missing: list[str]) -> None:
    required = [PolicyRule.on(DEPLOYMENT, "get")]
    left = ungranted(required, [PolicyRule.from_dict(granted)])
    assert [r for rule in left for r in rule.resources] == missing


def test_ungranted_names_each_missing_verb_and_knows_subresources_and_urls() -> None:
    required = [
        PolicyRule.on(DEPLOYMENT, "get", "update", "patch", subresource="status"),
        PolicyRule.on(SECRET, "get", names=["token"]),
        PolicyRule(verbs=("get",), non_resource_urls=("/metrics",)),
    ]
    granted = [
        PolicyRule(("apps",), ("*/status",), ("get", "update")),
        PolicyRule.on(SECRET, "get"),  # no names: every Secret, the named one too
        PolicyRule(verbs=("get",), non_resource_urls=("/met*",)),
    ]
    assert ungranted(required, granted) == [
        PolicyRule(("apps",), ("deployments/status",), ("patch",))
    ]


def test_a_rule_names_resources_or_urls_and_has_verbs() -> None:
    with pytest.raises(ValueError, match="verbs"):
        PolicyRule(("",), ("pods",), ())
    with pytest.raises(ValueError, match="not both"):
        PolicyRule(("",), ("pods",), ("get",), non_resource_urls=("/metrics",))
    with pytest.raises(ValueError, match="not both"):
        PolicyRule(verbs=("get",))
    with pytest.raises(ValueError, match="core group"):
        PolicyRule(resources=("pods",), verbs=("get",))


def widget_manager() -> Manager:
    """What a user's module hands the command: the manager, its controllers added."""
    manager = new_manager(leader_election=True)
    manager.controller("widget").for_(DEPLOYMENT).owns(CONFIG_MAP).complete(reconcile)
    return manager


async def async_widget_manager() -> Manager:
    return widget_manager()


@pytest.mark.parametrize("function", ["widget_manager", "async_widget_manager"])
def test_the_command_writes_the_roles(tmp_path: Path, function: str) -> None:
    out = tmp_path / "rbac.yaml"
    # The command imports this module by the name pytest gave it.
    assert main([f"{__name__}:{function}", str(out), "--name", "widget"]) == 0
    role, lease_role = yaml.safe_load_all(out.read_text())
    assert role == cluster_role(widget_manager(), "widget")
    assert lease_role["metadata"] == {"name": "widget-leader-election"}


def test_the_command_writes_to_stdout_and_refuses_a_bad_target(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main([f"{__name__}:widget_manager"]) == 0
    kinds = [doc["kind"] for doc in yaml.safe_load_all(capsys.readouterr().out)]
    assert kinds == ["ClusterRole", "Role"]
    with pytest.raises(ValueError, match="MODULE:FUNCTION"):
        main([__name__])
