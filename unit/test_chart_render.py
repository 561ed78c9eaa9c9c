"""The Helm chart, rendered and linted by the real helm binary (issue: Helm chart, RBAC,
admission policies).

The install page (docs: Installing the Operator) is the contract: "Object names below are those
of a release named crewlet-operator; the chart prefixes them with the release's name otherwise."
Every value it names exists with its default, every object it names exists with its name, and
every refusal happens at render time with a message that says why.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from crewlet_operator.envtest import binaries

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "charts" / "crewlet-operator"
CRDS = ROOT / "manifests" / "crds"
RELEASE = "crewlet-operator"
NAMESPACE = "crewlet-operator-system"

Doc = dict[str, Any]
Values = dict[str, Any]

ALL_FEATURES: Values = {
    "prometheus": {"enabled": True},
    "certManager": {"enabled": True},
    "rbac": {"helpers": {"enabled": True}},
    "tenantProvisioner": {
        "enabled": True,
        "subjects": [
            {"kind": "ServiceAccount", "name": "control-plane", "namespace": "platform"},
            {"kind": "User", "name": "provisioner@example.com"},
            {"kind": "Group", "name": "tenant-provisioners"},
        ],
    },
}


def _load_hack(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "hack" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


chart_crds = _load_hack("chart_crds")


def helm(*args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(binaries.find("helm")), *args],
        capture_output=True,
        text=True,
        check=check,
        timeout=120,
        env={"HOME": "/nonexistent", "PATH": "/usr/bin:/bin", "KUBECONFIG": "/nonexistent"},
    )


@pytest.fixture
def values_file(tmp_path: Path) -> Callable[[Values], Path]:
    counter = iter(range(1000))

    def write(values: Values) -> Path:
        path = tmp_path / f"values-{next(counter)}.json"
        path.write_text(json.dumps(values))
        return path

    return write


@pytest.fixture
def render(values_file: Callable[[Values], Path]) -> Callable[..., list[Doc]]:
    """``helm template`` the chart; the documents it renders."""

    def run(values: Values | None = None, release: str = RELEASE) -> list[Doc]:
        result = helm(
            "template",
            release,
            str(CHART),
            "--namespace",
            NAMESPACE,
            "--values",
            str(values_file(values or {})),
        )
        assert result.returncode == 0, result.stderr
        return [d for d in yaml.safe_load_all(result.stdout) if d]

    return run


@pytest.fixture
def refused(values_file: Callable[[Values], Path]) -> Callable[[Values], str]:
    """``helm template`` that must fail; its error output."""

    def run(values: Values) -> str:
        result = helm(
            "template",
            RELEASE,
            str(CHART),
            "--namespace",
            NAMESPACE,
            "--values",
            str(values_file(values)),
        )
        assert result.returncode != 0, f"rendered although it should be refused:\n{result.stdout}"
        return " ".join(result.stderr.split())

    return run


def names(docs: list[Doc]) -> set[tuple[str, str]]:
    return {(d["kind"], d["metadata"]["name"]) for d in docs}


def one(docs: list[Doc], kind: str, name: str) -> Doc:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind} {name}: {len(found)} rendered; have {sorted(names(docs))}"
    return found[0]


def manager_container(docs: list[Doc]) -> Doc:
    deployment = one(docs, "Deployment", "crewlet-operator-controller-manager")
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["manager"]
    container: Doc = containers[0]
    return container


def rules_of(role: Doc) -> set[tuple[str, str, str]]:
    """(apiGroup, resource, verb) triples; resourceNames and nonResourceURLs as resources."""
    out: set[tuple[str, str, str]] = set()
    for rule in role["rules"]:
        for verb in rule["verbs"]:
            for url in rule.get("nonResourceURLs", []):
                out.add(("", url, verb))
            for group in rule.get("apiGroups", []):
                for resource in rule.get("resources", []):
                    suffix = "".join(f"#{n}" for n in rule.get("resourceNames", []))
                    out.add((group, resource + suffix, verb))
    return out


def crud(group: str, *resources: str) -> set[tuple[str, str, str]]:
    verbs = ("get", "list", "watch", "create", "update", "patch", "delete")
    return {(group, r, v) for r in resources for v in verbs}


def crd_kinds() -> dict[str, str]:
    """plural -> scope of every crewlet.ai CRD in manifests/crds."""
    out = {}
    for path in sorted(CRDS.glob("*.yaml")):
        for crd in yaml.safe_load_all(path.read_text()):
            if crd and crd["spec"]["group"] == "crewlet.ai":
                out[crd["spec"]["names"]["plural"]] = crd["spec"]["scope"]
    return out


# -- the default render ---------------------------------------------------------------------------

# "Object names below are those of a release named crewlet-operator."
DEFAULT_OBJECTS = {
    ("CustomResourceDefinition", "companies.crewlet.ai"),
    ("CustomResourceDefinition", "engineclasses.crewlet.ai"),
    ("ServiceAccount", "crewlet-operator-controller-manager"),
    ("ClusterRole", "crewlet-operator-manager-role"),
    ("ClusterRoleBinding", "crewlet-operator-manager-rolebinding"),
    ("Role", "crewlet-operator-leader-election-role"),
    ("RoleBinding", "crewlet-operator-leader-election-rolebinding"),
    ("ClusterRole", "crewlet-operator-metrics-auth-role"),
    ("ClusterRoleBinding", "crewlet-operator-metrics-auth-rolebinding"),
    # "A scraper needs the ClusterRole crewlet-operator-metrics-reader."
    ("ClusterRole", "crewlet-operator-metrics-reader"),
    # "Two ClusterRoles are always installed and aggregated into Kubernetes' own roles"
    ("ClusterRole", "crewlet-operator-crewlet-edit"),
    ("ClusterRole", "crewlet-operator-crewlet-view"),
    ("Service", "crewlet-operator-controller-manager-metrics-service"),
    ("Deployment", "crewlet-operator-controller-manager"),
    # "the chart ... also install[s] a ValidatingAdmissionPolicy, crewlet-operator-manager-writes"
    ("ValidatingAdmissionPolicy", "crewlet-operator-manager-writes"),
    ("ValidatingAdmissionPolicyBinding", "crewlet-operator-manager-writes"),
}

FEATURE_OBJECTS = {
    ("ServiceMonitor", "crewlet-operator-controller-manager-metrics-monitor"),
    # "rbac.helpers.enabled: Per-kind admin, editor and viewer ClusterRoles"
    ("ClusterRole", "crewlet-operator-company-admin-role"),
    ("ClusterRole", "crewlet-operator-company-editor-role"),
    ("ClusterRole", "crewlet-operator-company-viewer-role"),
    ("ClusterRole", "crewlet-operator-engineclass-admin-role"),
    ("ClusterRole", "crewlet-operator-engineclass-editor-role"),
    ("ClusterRole", "crewlet-operator-engineclass-viewer-role"),
    # "The crewlet-operator-tenant-provisioner ClusterRole, bound to subjects"
    ("ClusterRole", "crewlet-operator-tenant-provisioner"),
    ("ClusterRoleBinding", "crewlet-operator-tenant-provisioner"),
    ("ClusterRole", "crewlet-operator-tenant-access"),
    ("ValidatingAdmissionPolicy", "crewlet-operator-tenant-provisioner"),
    ("ValidatingAdmissionPolicyBinding", "crewlet-operator-tenant-provisioner"),
}


def test_default_render_has_exactly_the_pages_objects(render: Callable[..., list[Doc]]) -> None:
    docs = render()
    assert names(docs) == DEFAULT_OBJECTS
    for doc in docs:
        if doc["kind"] in ("ServiceAccount", "Role", "RoleBinding", "Service", "Deployment"):
            assert doc["metadata"]["namespace"] == NAMESPACE, doc["metadata"]


def test_every_optional_feature_adds_its_objects(render: Callable[..., list[Doc]]) -> None:
    docs = render(ALL_FEATURES)
    assert names(docs) == DEFAULT_OBJECTS | FEATURE_OBJECTS


@pytest.mark.parametrize("values", [{}, ALL_FEATURES], ids=["default", "all-features"])
def test_helm_lint_strict_passes(values: Values, values_file: Callable[[Values], Path]) -> None:
    result = helm(
        "lint",
        "--strict",
        str(CHART),
        "--namespace",
        NAMESPACE,
        "--values",
        str(values_file(values)),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 chart(s) failed" in result.stdout


def test_another_release_name_prefixes_every_name(render: Callable[..., list[Doc]]) -> None:
    """The page: "the chart prefixes them with the release's name otherwise" (standard fullname)."""
    docs = render(ALL_FEATURES, release="prod")
    expected = {
        (kind, name if kind == "CustomResourceDefinition" else f"prod-{name}")
        for kind, name in DEFAULT_OBJECTS | FEATURE_OBJECTS
    }
    assert names(docs) == expected


def test_fullname_override_renames_every_object_and_the_policy_keeps_its_match(
    render: Callable[..., list[Doc]],
) -> None:
    docs = render({**ALL_FEATURES, "fullnameOverride": "platform-ops"})
    assert ("ServiceAccount", "platform-ops-controller-manager") in names(docs)
    assert ("Deployment", "platform-ops-controller-manager") in names(docs)
    assert ("ClusterRole", "platform-ops-crewlet-edit") in names(docs)
    assert not any("crewlet-operator-" in n for _, n in names(docs) if ".crewlet.ai" not in n)
    # "The policy matches the manager's ServiceAccount by the end of its name,
    # crewlet-operator-controller-manager; a nameOverride or fullnameOverride that changes it
    # leaves the manager unchecked." (e2e/test_policies.py shows it on the API server.)
    policy = one(docs, "ValidatingAdmissionPolicy", "platform-ops-manager-writes")
    condition = policy["spec"]["matchConditions"][0]["expression"]
    assert 'endsWith("crewlet-operator-controller-manager")' in condition
    binding = one(docs, "ClusterRoleBinding", "platform-ops-manager-rolebinding")
    assert binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": "platform-ops-controller-manager",
            "namespace": NAMESPACE,
        }
    ]


def test_notes_warn_when_an_override_leaves_the_manager_unchecked(
    values_file: Callable[[Values], Path],
) -> None:
    def notes(values: Values) -> str:
        result = helm(
            "install",
            RELEASE,
            str(CHART),
            "--dry-run=client",
            "--namespace",
            NAMESPACE,
            "--values",
            str(values_file(values)),
        )
        assert result.returncode == 0, result.stderr
        return " ".join(result.stdout.split("NOTES:", 1)[1].split())

    assert "WARNING" not in notes({})
    warned = notes({"fullnameOverride": "platform-ops"})
    assert (
        "WARNING: the manager's ServiceAccount platform-ops-controller-manager does not end with "
        "crewlet-operator-controller-manager" in warned
    )


# -- values and their defaults ------------------------------------------------------------------


def test_values_yaml_has_the_pages_values_and_defaults() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    manager = values["manager"]
    assert manager["replicas"] == 2  # `manager.replicas` 2
    # "50m CPU and 128Mi requested, 512Mi memory limit"
    assert manager["resources"] == {
        "requests": {"cpu": "50m", "memory": "128Mi"},
        "limits": {"memory": "512Mi"},
    }
    assert "--leader-elect" in manager["args"]  # "The manager elects a leader by default"
    anti = manager["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert (values["metrics"]["enabled"], values["metrics"]["secure"]) == (True, True)
    assert values["prometheus"]["enabled"] is False
    assert values["certManager"]["enabled"] is False
    assert values["rbac"]["helpers"]["enabled"] is False
    assert "namespaced" not in values["rbac"]
    tenant = values["tenantProvisioner"]
    assert (tenant["enabled"], tenant["subjects"]) == (False, [])
    assert tenant["namespaceLabels"] == {
        "tenant": "crewlet.ai/tenant",
        "required": {"pod-security.kubernetes.io/enforce": "restricted"},
        "protectedPrefixes": ["pod-security.kubernetes.io/"],
    }
    assert values["crd"]["keep"] is True
    assert (values["nameOverride"], values["fullnameOverride"]) == ("", "")
    assert values["image"]["tag"] == ""  # the chart's appVersion
    assert chart["appVersion"]


def test_deployment_renders_the_defaults(render: Callable[..., list[Doc]]) -> None:
    docs = render()
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    deployment = one(docs, "Deployment", "crewlet-operator-controller-manager")
    pod = deployment["spec"]["template"]
    spec = pod["spec"]
    container = manager_container(docs)
    assert deployment["spec"]["replicas"] == 2
    assert spec["serviceAccountName"] == "crewlet-operator-controller-manager"
    assert container["image"] == f"ghcr.io/crewlet/crewlet-operator:{chart['appVersion']}"
    assert container["resources"] == {
        "requests": {"cpu": "50m", "memory": "128Mi"},
        "limits": {"memory": "512Mi"},
    }
    args = container["args"]
    assert f"--leader-election-namespace={NAMESPACE}" in args
    assert "--leader-elect" in args
    assert "--metrics-bind-address=:8443" in args
    assert "--metrics-secure=true" in args
    assert "--health-probe-bind-address=:8081" in args
    assert not any(a.startswith("--metrics-cert-dir") for a in args)
    assert {
        "name": "POD_NAMESPACE",
        "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}},
    } in (container["env"])
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"health": 8081, "metrics": 8443}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    # The restricted Pod Security Standard.
    assert spec["securityContext"] == {
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    # The read-only root filesystem needs a writable /tmp for the self-signed metrics cert.
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]
    # "graceful shutdown drains reconciles": longer than the manager's 30 s drain.
    assert spec["terminationGracePeriodSeconds"] > 30
    # "The replicas prefer separate nodes": the anti-affinity selects the replicas' own pods.
    anti = spec["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    term = anti[0]["podAffinityTerm"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    selector = term["labelSelector"]["matchLabels"]
    assert selector and selector.items() <= pod["metadata"]["labels"].items()
    assert (
        deployment["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    )


def test_the_daemon_accepts_every_flag_the_chart_passes(render: Callable[..., list[Doc]]) -> None:
    from crewlet_operator.cli import parse_args  # noqa: PLC0415 (the daemon's own parser)

    for values in ({}, ALL_FEATURES, {"metrics": {"enabled": False}}):
        args = parse_args(manager_container(render(values))["args"])
        assert args.leader_elect is True
        assert args.leader_election_namespace == NAMESPACE
        assert args.health_probe_bind_address == ":8081"
    args = parse_args(manager_container(render(ALL_FEATURES))["args"])
    assert (args.metrics_bind_address, args.metrics_secure) == (":8443", True)
    assert args.metrics_cert_dir == "/etc/crewlet-operator/metrics-certs"
    off = parse_args(manager_container(render({"metrics": {"enabled": False}}))["args"])
    assert off.metrics_bind_address == "0"


def test_image_tag_and_digest(render: Callable[..., list[Doc]]) -> None:
    tagged = manager_container(render({"image": {"repository": "r.example/op", "tag": "dev"}}))
    assert tagged["image"] == "r.example/op:dev"
    digest = "sha256:" + "a" * 64
    pinned = manager_container(render({"image": {"repository": "r.example/op", "digest": digest}}))
    assert pinned["image"] == f"r.example/op@{digest}"


def test_metrics_values(render: Callable[..., list[Doc]]) -> None:
    default = render()
    service = one(default, "Service", "crewlet-operator-controller-manager-metrics-service")
    assert service["spec"]["ports"] == [
        {"name": "https", "port": 8443, "protocol": "TCP", "targetPort": "metrics"}
    ]
    deployment = one(default, "Deployment", "crewlet-operator-controller-manager")
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]

    plain = render({"metrics": {"secure": False}})
    assert "--metrics-secure=false" in manager_container(plain)["args"]
    assert ("ClusterRole", "crewlet-operator-metrics-auth-role") not in names(plain)
    plain_service = one(plain, "Service", "crewlet-operator-controller-manager-metrics-service")
    assert plain_service["spec"]["ports"][0]["name"] == "http"

    off = render({"metrics": {"enabled": False}})
    assert "--metrics-bind-address=0" in manager_container(off)["args"]
    assert not {k for k, _ in names(off)} & {"Service"}
    assert ("ClusterRole", "crewlet-operator-metrics-reader") not in names(off)


def test_prometheus_and_cert_manager(render: Callable[..., list[Doc]]) -> None:
    monitor_name = "crewlet-operator-controller-manager-metrics-monitor"
    unverified = one(render({"prometheus": {"enabled": True}}), "ServiceMonitor", monitor_name)
    assert unverified["apiVersion"] == "monitoring.coreos.com/v1"
    endpoint = unverified["spec"]["endpoints"][0]
    assert (endpoint["port"], endpoint["scheme"], endpoint["path"]) == (
        "https",
        "https",
        "/metrics",
    )
    assert endpoint["tlsConfig"] == {"insecureSkipVerify": True}

    docs = render({"prometheus": {"enabled": True}, "certManager": {"enabled": True}})
    tls = one(docs, "ServiceMonitor", monitor_name)["spec"]["endpoints"][0]["tlsConfig"]
    assert tls == {
        "insecureSkipVerify": False,
        "serverName": f"crewlet-operator-controller-manager-metrics-service.{NAMESPACE}.svc",
        "ca": {"secret": {"name": "crewlet-operator-metrics-server-cert", "key": "ca.crt"}},
    }
    container = manager_container(docs)
    assert "--metrics-cert-dir=/etc/crewlet-operator/metrics-certs" in container["args"]
    mount = {
        "name": "metrics-certs",
        "mountPath": "/etc/crewlet-operator/metrics-certs",
        "readOnly": True,
    }
    assert mount in container["volumeMounts"]
    spec = one(docs, "Deployment", "crewlet-operator-controller-manager")["spec"]["template"][
        "spec"
    ]
    volume = next(v for v in spec["volumes"] if v["name"] == "metrics-certs")
    assert volume["secret"]["secretName"] == "crewlet-operator-metrics-server-cert"
    assert [i["key"] for i in volume["secret"]["items"]] == ["tls.crt", "tls.key"]

    named = render({"certManager": {"enabled": True, "secretName": "my-cert"}})
    spec = one(named, "Deployment", "crewlet-operator-controller-manager")["spec"]["template"][
        "spec"
    ]
    assert any(v.get("secret", {}).get("secretName") == "my-cert" for v in spec["volumes"])


# -- refusals -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "message"),
    [
        pytest.param(
            {"rbac": {"namespaced": True}},
            "rbac.namespaced is not supported: the operator is cluster-scoped: it reads the "
            "cluster-scoped EngineClasses and runs companies in every namespace, so it cannot run "
            "with a namespaced Role.",
            id="rbac.namespaced",
        ),
        pytest.param(
            {"tenantProvisioner": {"enabled": True}},
            "tenantProvisioner.enabled needs tenantProvisioner.subjects",
            id="tenantProvisioner-without-subjects",
        ),
        pytest.param(
            {"manager": {"args": ["--leader-elect=false"]}},
            "manager.args turns leader election off (--leader-elect=false) with manager.replicas 2",
            id="leader-elect=false",
        ),
        pytest.param(
            {"manager": {"args": ["--leader-elect=False"], "replicas": 3}},
            "manager.args turns leader election off (--leader-elect=false) with manager.replicas 3",
            id="leader-elect=False-3-replicas",
        ),
        pytest.param(
            {"manager": {"args": ["--leader-elect", "0"]}},
            "manager.args turns leader election off",
            id="leader-elect-0-separate",
        ),
        pytest.param(
            {"prometheus": {"enabled": True}, "metrics": {"enabled": False}},
            "prometheus.enabled needs metrics.enabled",
            id="prometheus-without-metrics",
        ),
    ],
)
def test_refusals_fail_the_render_with_their_message(
    refused: Callable[[Values], str], values: Values, message: str
) -> None:
    assert message in refused(values)


def test_leader_election_off_is_allowed_with_one_replica(render: Callable[..., list[Doc]]) -> None:
    docs = render({"manager": {"args": ["--leader-elect=false"], "replicas": 1}})
    assert "--leader-elect=false" in manager_container(docs)["args"]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"manager": {"replicas": "two"}}, "at '/manager/replicas': got string, want integer"),
        ({"metrics": {"secure": "yes"}}, "at '/metrics/secure': got string, want boolean"),
        ({"replicas": 3}, "additional properties 'replicas' not allowed"),
        (
            {"tenantProvisioner": {"enabled": True, "subjects": [{"kind": "Robot", "name": "r"}]}},
            "/tenantProvisioner/subjects/0/kind",
        ),
        (
            {"tenantProvisioner": {"subjects": [{"kind": "ServiceAccount", "name": "sa"}]}},
            "missing property 'namespace'",
        ),
    ],
    ids=["wrong-type", "wrong-bool", "unknown-top-level-key", "subject-kind", "sa-namespace"],
)
def test_values_schema_rejects(
    refused: Callable[[Values], str], values: Values, message: str
) -> None:
    assert message in refused(values)


def test_values_schema_describes_every_value() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert schema["additionalProperties"] is False

    def walk(node: Any, schema_node: dict[str, Any], path: str) -> None:
        if not isinstance(node, dict) or "properties" not in schema_node:
            return
        for key, child in node.items():
            assert key in schema_node["properties"], f"{path}{key} is not in values.schema.json"
            walk(child, schema_node["properties"][key], f"{path}{key}.")

    walk(values, schema, "")


# -- RBAC -----------------------------------------------------------------------------------------


def test_manager_cluster_role_is_what_the_operator_uses(render: Callable[..., list[Doc]]) -> None:
    """The page: "create, change and delete Secrets, ServiceAccounts, Services, StatefulSets,
    PodDisruptionBudgets, volume claims, NetworkPolicies and routes in every namespace, and read
    every Secret" - and nothing more."""
    docs = render()
    role = one(docs, "ClusterRole", "crewlet-operator-manager-role")
    expected = (
        crud("", "secrets", "serviceaccounts", "services", "persistentvolumeclaims")
        | crud("apps", "statefulsets")
        | crud("policy", "poddisruptionbudgets")
        | crud("networking.k8s.io", "networkpolicies", "ingresses")
        | crud("gateway.networking.k8s.io", "httproutes")
        | {("", "namespaces", v) for v in ("get", "list", "watch")}
        | {
            ("crewlet.ai", r, v)
            for r in ("companies", "engineclasses")
            for v in ("get", "list", "watch")
        }
        | {
            ("crewlet.ai", r, v)
            for r in ("companies/status", "engineclasses/status")
            for v in ("get", "update", "patch")
        }
        | {("crewlet.ai", "companies/finalizers", "update")}
        | {("events.k8s.io", "events", "create"), ("events.k8s.io", "events", "patch")}
    )
    assert rules_of(role) == expected
    binding = one(docs, "ClusterRoleBinding", "crewlet-operator-manager-rolebinding")
    assert binding["roleRef"]["name"] == "crewlet-operator-manager-role"
    assert binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": "crewlet-operator-controller-manager",
            "namespace": NAMESPACE,
        }
    ]

    leader = one(docs, "Role", "crewlet-operator-leader-election-role")
    assert rules_of(leader) == crud("coordination.k8s.io", "leases") | {
        (g, "events", v) for g in ("", "events.k8s.io") for v in ("create", "patch")
    }
    auth = one(docs, "ClusterRole", "crewlet-operator-metrics-auth-role")
    assert rules_of(auth) == {
        ("authentication.k8s.io", "tokenreviews", "create"),
        ("authorization.k8s.io", "subjectaccessreviews", "create"),
    }
    auth_binding = one(docs, "ClusterRoleBinding", "crewlet-operator-metrics-auth-rolebinding")
    assert auth_binding["subjects"][0]["name"] == "crewlet-operator-controller-manager"
    reader = one(docs, "ClusterRole", "crewlet-operator-metrics-reader")
    assert rules_of(reader) == {("", "/metrics", "get")}


def test_aggregated_roles_cover_every_namespaced_crewlet_kind_and_no_engineclass(
    render: Callable[..., list[Doc]],
) -> None:
    kinds = crd_kinds()
    namespaced = {plural for plural, scope in kinds.items() if scope == "Namespaced"}
    assert namespaced == {"companies"} and kinds["engineclasses"] == "Cluster"
    docs = render()
    edit = one(docs, "ClusterRole", "crewlet-operator-crewlet-edit")
    view = one(docs, "ClusterRole", "crewlet-operator-crewlet-view")
    aggregate = "rbac.authorization.k8s.io/aggregate-to-"
    assert {
        k for k, v in edit["metadata"]["labels"].items() if k.startswith(aggregate) and v == "true"
    } == {aggregate + "admin", aggregate + "edit"}
    assert {
        k for k, v in view["metadata"]["labels"].items() if k.startswith(aggregate) and v == "true"
    } == {aggregate + "admin", aggregate + "edit", aggregate + "view"}
    assert rules_of(edit) == {
        ("crewlet.ai", k, v) for k in namespaced for v in ("create", "update", "patch", "delete")
    }
    assert rules_of(view) == {
        ("crewlet.ai", r, v)
        for k in namespaced
        for r in (k, f"{k}/status")
        for v in ("get", "list", "watch")
    }


def test_helper_roles_are_kubebuilder_style(render: Callable[..., list[Doc]]) -> None:
    docs = render({"rbac": {"helpers": {"enabled": True}}})
    for kind, plural in (("company", "companies"), ("engineclass", "engineclasses")):
        admin = one(docs, "ClusterRole", f"crewlet-operator-{kind}-admin-role")
        editor = one(docs, "ClusterRole", f"crewlet-operator-{kind}-editor-role")
        viewer = one(docs, "ClusterRole", f"crewlet-operator-{kind}-viewer-role")
        status = {("crewlet.ai", f"{plural}/status", "get")}
        assert rules_of(admin) == {("crewlet.ai", plural, "*")} | status
        assert (
            rules_of(editor)
            == {
                ("crewlet.ai", plural, v)
                for v in ("create", "delete", "get", "list", "patch", "update", "watch")
            }
            | status
        )
        assert (
            rules_of(viewer)
            == {("crewlet.ai", plural, v) for v in ("get", "list", "watch")} | status
        )
        for role in (admin, editor, viewer):
            assert not any(
                k.startswith("rbac.authorization.k8s.io/aggregate-to")
                for k in role["metadata"]["labels"]
            )


def test_tenant_provisioner_roles(render: Callable[..., list[Doc]]) -> None:
    docs = render(ALL_FEATURES)
    provisioner = one(docs, "ClusterRole", "crewlet-operator-tenant-provisioner")
    verbs = ("create", "get", "list", "watch", "update", "patch", "delete")
    assert rules_of(provisioner) == (
        {("", "namespaces", v) for v in verbs}
        | {("rbac.authorization.k8s.io", "rolebindings", v) for v in verbs}
        | {("rbac.authorization.k8s.io", "clusterroles#crewlet-operator-tenant-access", "bind")}
        | {
            ("crewlet.ai", r, v)
            for r in ("companies", "engineclasses")
            for v in ("get", "list", "watch")
        }
    )
    # "It holds no Secret access of its own"
    assert not any(r.startswith("secrets") for _, r, _ in rules_of(provisioner))
    binding = one(docs, "ClusterRoleBinding", "crewlet-operator-tenant-provisioner")
    assert binding["roleRef"]["name"] == "crewlet-operator-tenant-provisioner"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "control-plane", "namespace": "platform"},
        {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "User",
            "name": "provisioner@example.com",
        },
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "tenant-provisioners"},
    ]
    access = one(docs, "ClusterRole", "crewlet-operator-tenant-access")
    full = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")
    assert rules_of(access) == (
        {("", "secrets", v) for v in full}
        | {("crewlet.ai", "companies", v) for v in full}
        | {("crewlet.ai", "companies/status", v) for v in ("get", "list", "watch")}
    )


# -- admission policies ---------------------------------------------------------------------------

MANAGER_RESOURCES = {
    ("", "secrets"),
    ("", "serviceaccounts"),
    ("", "services"),
    ("", "persistentvolumeclaims"),
    ("apps", "statefulsets"),
    ("policy", "poddisruptionbudgets"),
    ("networking.k8s.io", "networkpolicies"),
    ("networking.k8s.io", "ingresses"),
    ("gateway.networking.k8s.io", "httproutes"),
}


def covered(policy: Doc) -> set[tuple[str, str]]:
    out = set()
    for rule in policy["spec"]["matchConstraints"]["resourceRules"]:
        assert set(rule["operations"]) == {"CREATE", "UPDATE", "DELETE"}
        out |= {(g, r) for g in rule["apiGroups"] for r in rule["resources"]}
    return out


def test_manager_writes_policy_shape(render: Callable[..., list[Doc]]) -> None:
    docs = render()
    policy = one(docs, "ValidatingAdmissionPolicy", "crewlet-operator-manager-writes")
    binding = one(docs, "ValidatingAdmissionPolicyBinding", "crewlet-operator-manager-writes")
    assert binding["spec"] == {
        "policyName": "crewlet-operator-manager-writes",
        "validationActions": ["Deny"],
    }
    assert policy["spec"]["failurePolicy"] == "Fail"
    assert covered(policy) == MANAGER_RESOURCES
    [condition] = policy["spec"]["matchConditions"]
    assert 'endsWith("crewlet-operator-controller-manager")' in condition["expression"]
    assert policy["spec"]["variables"], "variables keep the validations readable"
    for validation in policy["spec"]["validations"]:
        assert validation["message"] and validation["messageExpression"], validation
    assert len(policy["spec"]["validations"]) == 8
    assert "matchResources" not in binding["spec"], "every namespace"


def test_tenant_provisioner_policy_matches_exactly_the_subjects(
    render: Callable[..., list[Doc]],
) -> None:
    assert ("ValidatingAdmissionPolicy", "crewlet-operator-tenant-provisioner") not in names(
        render()
    )
    docs = render(ALL_FEATURES)
    policy = one(docs, "ValidatingAdmissionPolicy", "crewlet-operator-tenant-provisioner")
    binding = one(docs, "ValidatingAdmissionPolicyBinding", "crewlet-operator-tenant-provisioner")
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert covered(policy) == {
        ("", "namespaces"),
        ("", "secrets"),
        ("rbac.authorization.k8s.io", "rolebindings"),
    }
    [condition] = policy["spec"]["matchConditions"]
    assert condition["expression"] == (
        'request.userInfo.username == "system:serviceaccount:platform:control-plane" || '
        'request.userInfo.username == "provisioner@example.com" || '
        '"tenant-provisioners" in request.userInfo.?groups.orValue([])'
    )
    variables = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
    assert variables["tenantLabel"] == '"crewlet.ai/tenant"'
    assert json.loads(variables["required"]) == {"pod-security.kubernetes.io/enforce": "restricted"}
    assert json.loads(variables["protectedPrefixes"]) == ["pod-security.kubernetes.io/"]
    assert len(policy["spec"]["validations"]) == 9
    for validation in policy["spec"]["validations"]:
        assert validation["message"] and validation["messageExpression"], validation


def test_subject_names_are_quoted_into_cel(render: Callable[..., list[Doc]]) -> None:
    tricky = 'o"neil\\ <x>'
    docs = render(
        {"tenantProvisioner": {"enabled": True, "subjects": [{"kind": "User", "name": tricky}]}}
    )
    policy = one(docs, "ValidatingAdmissionPolicy", "crewlet-operator-tenant-provisioner")
    expression = policy["spec"]["matchConditions"][0]["expression"]
    prefix = "request.userInfo.username == "
    assert expression.startswith(prefix)
    assert json.loads(expression[len(prefix) :]) == tricky


# -- the CRDs -------------------------------------------------------------------------------------


def test_chart_crds_match_manifests_crds() -> None:
    """Fails when the chart's CRDs drift from manifests/crds: run `python hack/chart_crds.py`."""
    assert chart_crds.drift() == []


def test_drift_is_detected(tmp_path: Path) -> None:
    source = tmp_path / "crds"
    shutil.copytree(CRDS, source)
    assert chart_crds.drift(source) == []
    first = sorted(source.glob("*.yaml"))[0]
    [crd] = [d for d in yaml.safe_load_all(first.read_text()) if d]
    crd["spec"]["names"]["shortNames"] = ["changed"]
    first.write_text(yaml.safe_dump(crd))
    assert chart_crds.drift(source) == [f"out of date: {chart_crds.TARGET / first.name}"]
    (source / "extra.yaml").write_text(first.read_text())
    assert f"missing: {chart_crds.TARGET / 'extra.yaml'}" in chart_crds.drift(source)


def test_rendered_crds_equal_manifests_and_are_kept(render: Callable[..., list[Doc]]) -> None:
    sources = {}
    for path in sorted(CRDS.glob("*.yaml")):
        for crd in yaml.safe_load_all(path.read_text()):
            if crd:
                sources[crd["metadata"]["name"]] = crd
    assert sources, "no CRDs in manifests/crds"
    rendered = {
        d["metadata"]["name"]: d for d in render() if d["kind"] == "CustomResourceDefinition"
    }
    assert set(rendered) == set(sources)
    for name, crd in rendered.items():
        assert {k: v for k, v in crd.items() if k != "metadata"} == {
            k: v for k, v in sources[name].items() if k != "metadata"
        }
        # "The chart installs the CRDs and keeps them on uninstall (crd.keep)"
        assert crd["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    unkept = [
        d for d in render({"crd": {"keep": False}}) if d["kind"] == "CustomResourceDefinition"
    ]
    assert len(unkept) == len(sources)
    assert all("annotations" not in d["metadata"] for d in unkept)
    assert not [
        d for d in render({"crd": {"enabled": False}}) if d["kind"] == "CustomResourceDefinition"
    ]


@pytest.mark.parametrize("version", ["1.36.4", "1.38.0"])
def test_the_chart_refuses_other_kubernetes_minors(version: str) -> None:
    """'A cluster on any other minor is not supported.'"""
    result = helm("template", RELEASE, str(CHART), "--kube-version", version)
    assert result.returncode != 0
    assert "kubeVersion" in result.stderr
    assert helm("template", RELEASE, str(CHART), "--kube-version", "1.37.2").returncode == 0
