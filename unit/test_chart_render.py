"""The Helm chart, rendered and linted by the real helm binary (issue: Helm chart, RBAC,
admission policies).

The install page (docs: Installing the Operator) is the contract: "Object names below are those
of a release named crewlet-operator; the chart prefixes them with the release's name otherwise."
Every value it names exists with its default, every object it names exists with its name, and
every refusal happens at render time with a message that says why.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from crewlet_operator.envtest import binaries
from crewlet_operator.sharding.ring import RingLabels, member_name
from crewlet_operator_daemon.cli import LEASE_LABELS, SHARDING_DOMAIN
from crewlet_operator_daemon.plan import CHILD_RESOURCES, GATEWAY_CHILD_RESOURCES, MANAGER_NAME
from hack import chart_crds, chart_schema

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "charts" / "crewlet-operator"
CRDS = ROOT / "manifests" / "crds"
RELEASE = "crewlet-operator"
NAMESPACE = "crewlet-operator-system"

Doc = dict[str, Any]
Values = dict[str, Any]

ALL_FEATURES: Values = {
    "prometheus": {
        "enabled": True,
        "serviceMonitor": {
            "labels": {"release": "kube-prometheus-stack"},
            "interval": "30s",
            "scrapeTimeout": "10s",
        },
    },
    "prometheusRule": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
    "grafanaDashboard": {"enabled": True},
    "networkPolicy": {"enabled": True},
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

    def run(
        values: Values | None = None, release: str = RELEASE, sets: tuple[str, ...] = ()
    ) -> list[Doc]:
        result = helm(
            "template",
            release,
            str(CHART),
            "--namespace",
            NAMESPACE,
            "--values",
            str(values_file(values or {})),
            *(arg for value in sets for arg in ("--set", value)),
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
    # Two replicas by default: a node drain evicts one at a time.
    ("PodDisruptionBudget", "crewlet-operator-controller-manager"),
    # "the chart ... also install[s] a ValidatingAdmissionPolicy, crewlet-operator-manager-writes"
    ("ValidatingAdmissionPolicy", "crewlet-operator-manager-writes"),
    ("ValidatingAdmissionPolicyBinding", "crewlet-operator-manager-writes"),
    # Issue 47: no tenant writes a Lease that passes for an install's, or a will.
    ("ValidatingAdmissionPolicy", "crewlet-operator-leases"),
    ("ValidatingAdmissionPolicyBinding", "crewlet-operator-leases"),
    # Issue 50: the renewals at the leader-election priority level, apart from the reconciles.
    ("FlowSchema", "crewlet-operator-lease-renewals"),
}

FEATURE_OBJECTS = {
    ("ServiceMonitor", "crewlet-operator-controller-manager-metrics-monitor"),
    # The ServiceMonitor's scraper: its token, and the metrics-reader role.
    ("ServiceAccount", "crewlet-operator-metrics-scraper"),
    ("Secret", "crewlet-operator-metrics-scraper-token"),
    ("ClusterRoleBinding", "crewlet-operator-metrics-scraper"),
    ("NetworkPolicy", "crewlet-operator-controller-manager"),
    # Alerts and a dashboard (docs/metrics.md).
    ("PrometheusRule", "crewlet-operator-alerts"),
    ("ConfigMap", "crewlet-operator-dashboard"),
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


NAMESPACED_KINDS = {
    "ServiceAccount",
    "Secret",
    "Role",
    "RoleBinding",
    "Service",
    "Deployment",
    "PodDisruptionBudget",
    "NetworkPolicy",
    "ServiceMonitor",
    "PrometheusRule",
    "ConfigMap",
}


def test_default_render_has_exactly_the_pages_objects(render: Callable[..., list[Doc]]) -> None:
    docs = render()
    assert names(docs) == DEFAULT_OBJECTS
    for doc in docs:
        if doc["kind"] in NAMESPACED_KINDS:
            assert doc["metadata"]["namespace"] == NAMESPACE, doc["metadata"]


def test_every_optional_feature_adds_its_objects(render: Callable[..., list[Doc]]) -> None:
    docs = render(ALL_FEATURES)
    assert names(docs) == DEFAULT_OBJECTS | FEATURE_OBJECTS
    for doc in docs:
        if doc["kind"] in NAMESPACED_KINDS:
            assert doc["metadata"]["namespace"] == NAMESPACE, doc["metadata"]


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


# Release names that Helm's usual helper would have shortened (a name that contains the chart's
# name was used as it is, unhooking the manager's policy), and the longest name Helm accepts.
RELEASE_NAMES = ["prod", "crewlet-operator-prod", "team-crewlet-operator", "x" * 53]


@pytest.mark.parametrize("release", RELEASE_NAMES, ids=lambda n: n if len(n) < 30 else "53-chars")
def test_another_release_name_prefixes_every_name(
    render: Callable[..., list[Doc]], release: str
) -> None:
    """The page: "the chart prefixes them with the release's name otherwise", so the manager's
    ServiceAccount always ends with crewlet-operator-controller-manager, which the policy
    matches."""
    docs = render(ALL_FEATURES, release=release)
    prefix = f"{release[: 62 - len(RELEASE)]}-"

    def prefixed(kind: str, name: str) -> str:
        if kind == "CustomResourceDefinition":
            return name
        # A Service's name is a DNS label: at most 63 characters.
        return f"{prefix}{name}"[:63].rstrip("-") if kind == "Service" else f"{prefix}{name}"

    expected = {(kind, prefixed(kind, name)) for kind, name in DEFAULT_OBJECTS | FEATURE_OBJECTS}
    assert names(docs) == expected
    account = one(docs, "ServiceAccount", f"{prefix}crewlet-operator-controller-manager")
    assert account["metadata"]["name"].endswith("crewlet-operator-controller-manager")


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


def notes_of(values_file: Callable[[Values], Path], values: Values, release: str = RELEASE) -> str:
    """The chart's NOTES as ``helm install --dry-run`` prints them, whitespace folded."""
    result = helm(
        "install",
        release,
        str(CHART),
        "--dry-run=client",
        "--namespace",
        NAMESPACE,
        "--values",
        str(values_file(values)),
    )
    assert result.returncode == 0, result.stderr
    return " ".join(result.stdout.split("NOTES:", 1)[1].split())


def test_with_sharding_a_rollout_starts_a_replica_before_it_stops_one(
    render: Callable[..., list[Doc]],
) -> None:
    """docs/scaling.md: "The Deployment starts a new replica before it stops an old one", for
    any replica count (Kubernetes' default of 25 % each stops one first from four replicas)."""

    def deployment(values: Values) -> Doc:
        (found,) = [d for d in render(values) if d["kind"] == "Deployment"]
        return found

    assert "strategy" not in deployment({})["spec"]
    sharded = deployment({"manager": {"sharding": {"enabled": True}, "replicas": 5}})
    assert sharded["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    (manager,) = sharded["spec"]["template"]["spec"]["containers"]
    assert "--shard-members=5" in manager["args"]


def test_notes_say_what_the_replicas_do_with_sharding_on_and_off(
    values_file: Callable[[Values], Path],
) -> None:
    """Issue 48: the NOTES said one replica reconciles with manager.sharding.enabled too. The
    log lines they quote are the daemon's (unit/test_docs.py checks every quoted one)."""
    plain = notes_of(values_file, {})
    assert (
        "(2 replicas; the one holding the Lease crewlet-operator-leader reconciles every "
        'company, and logs "acquired the lease; leading"; the others are warm standbys)' in plain
    )
    sharded = notes_of(values_file, {"manager": {"sharding": {"enabled": True}, "replicas": 3}})
    assert (
        "(3 replicas, sharded: every replica reconciles its share of the namespaces' companies, "
        "and the one holding the Lease crewlet-operator-leader assigns them; each replica logs "
        '"member of the ring" once it holds its own)' in sharded
    )
    assert "the others are warm standbys" not in sharded


def test_notes_say_which_gateways_and_warn_when_the_manager_is_unchecked(
    values_file: Callable[[Values], Path],
) -> None:
    def notes(values: Values, release: str = RELEASE) -> str:
        return notes_of(values_file, values, release)

    assert "WARNING" not in notes({})
    assert (
        "Webhook routes: an HTTPRoute attaches only to a Gateway managerWrites.gateways lists: "
        "none yet, so every HTTPRoute the operator writes is refused" in notes({})
    )
    listed = {"managerWrites": {"gateways": [{"namespace": "gw", "name": "public"}]}}
    assert "managerWrites.gateways lists (gw/public)." in notes(listed)
    for release in RELEASE_NAMES:
        assert "WARNING" not in notes({}, release)
    # An override that keeps the ending keeps the manager checked.
    assert "WARNING" not in notes({"nameOverride": "crewlet-operator", "fullnameOverride": ""})
    assert "WARNING" not in notes({"fullnameOverride": "team-a-crewlet-operator"})
    warned = notes({"fullnameOverride": "platform-ops"})
    assert (
        "WARNING: fullnameOverride (platform-ops) names the manager's ServiceAccount "
        "platform-ops-controller-manager, which does not end with "
        "crewlet-operator-controller-manager" in warned
    )
    warned = notes({"nameOverride": "crew"})
    assert (
        "WARNING: nameOverride (crew) names the manager's ServiceAccount "
        "crewlet-operator-crew-controller-manager, which does not end with "
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
    # One active replica and a warm standby, unless sharding is turned on.
    assert manager["sharding"] == {"enabled": False}
    anti = manager["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert (values["metrics"]["enabled"], values["metrics"]["secure"]) == (True, True)
    assert manager["podSecurityContext"]["runAsUser"] == 65532  # the image's USER
    assert manager["podSecurityContext"]["runAsGroup"] == 65532
    assert manager["tmpSizeLimit"] == "64Mi"
    assert manager["podDisruptionBudget"] == {"enabled": True, "maxUnavailable": 1}
    [spread] = manager["topologySpreadConstraints"]
    assert (spread["maxSkew"], spread["topologyKey"], spread["whenUnsatisfiable"]) == (
        1,
        "kubernetes.io/hostname",
        "ScheduleAnyway",
    )
    assert values["prometheus"]["enabled"] is False
    assert values["prometheus"]["serviceMonitor"] == {
        "labels": {},
        "interval": "",
        "scrapeTimeout": "",
    }
    assert values["networkPolicy"]["enabled"] is False
    assert values["networkPolicy"]["metricsFrom"] == [
        {"namespaceSelector": {"matchLabels": {"metrics": "enabled"}}}
    ]
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
        "runAsUser": 65532,
        "runAsGroup": 65532,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    # The read-only root filesystem needs a writable /tmp for the self-signed metrics cert.
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]
    assert {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}} in spec["volumes"]
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
    from crewlet_operator_daemon.cli import parse_args  # noqa: PLC0415 (the daemon's own parser)

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


def test_sharding_passes_the_flag_only_when_enabled(render: Callable[..., list[Doc]]) -> None:
    """manager.sharding.enabled: every replica active (--sharding); off by default, one active
    replica and a warm standby as before."""
    from crewlet_operator_daemon.cli import parse_args  # noqa: PLC0415 (the daemon's own parser)

    for values in ({}, ALL_FEATURES, {"manager": {"sharding": {"enabled": False}}}):
        args = manager_container(render(values))["args"]
        assert not any(a.startswith("--sharding") for a in args), values
        assert parse_args(args).sharding is False
    sharded = manager_container(render({"manager": {"sharding": {"enabled": True}}}))["args"]
    assert sharded.count("--sharding") == 1
    parsed = parse_args(sharded)
    assert parsed.sharding is True and parsed.leader_elect is True
    deployment = one(
        render({"manager": {"sharding": {"enabled": True}}}),
        "Deployment",
        "crewlet-operator-controller-manager",
    )
    assert deployment["spec"]["replicas"] == 2


def test_manager_env_adds_the_tracing_variables_after_the_pods_own(
    render: Callable[..., list[Doc]], refused: Callable[[Values], str]
) -> None:
    """manager.env: OpenTelemetry's variables reach the daemon (crewlet_operator.tracing reads
    them); none by default, and an entry that is no EnvVar is refused at render time."""
    downward = ["POD_NAMESPACE", "POD_NAME", "POD_UID", "CONTAINER_NAME"]
    assert [e["name"] for e in manager_container(render())["env"]] == downward
    tracing: list[dict[str, Any]] = [
        {"name": "OTEL_EXPORTER_OTLP_ENDPOINT", "value": "http://collector.tracing:4318"},
        {"name": "OTEL_SERVICE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
    ]
    env = manager_container(render({"manager": {"env": tracing}}))["env"]
    assert [e["name"] for e in env] == [*downward, *(e["name"] for e in tracing)]
    assert env[len(downward) :] == tracing
    assert "nmae" in refused({"manager": {"env": [{"nmae": "OTEL_SERVICE_NAME"}]}})


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
    # The scraper's token, not Prometheus' own (bearerTokenFile is deprecated).
    assert endpoint["authorization"] == {
        "type": "Bearer",
        "credentials": {"name": "crewlet-operator-metrics-scraper-token", "key": "token"},
    }
    assert "bearerTokenFile" not in endpoint
    # Empty interval and scrapeTimeout: Prometheus' own defaults.
    assert "interval" not in endpoint and "scrapeTimeout" not in endpoint

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


def test_service_monitor_labels_interval_and_timeout(render: Callable[..., list[Doc]]) -> None:
    docs = render(ALL_FEATURES)
    monitor = one(docs, "ServiceMonitor", "crewlet-operator-controller-manager-metrics-monitor")
    labels = monitor["metadata"]["labels"]
    assert labels["release"] == "kube-prometheus-stack"
    assert labels["app.kubernetes.io/name"] == "crewlet-operator"  # the chart's labels stay
    endpoint = monitor["spec"]["endpoints"][0]
    assert (endpoint["interval"], endpoint["scrapeTimeout"]) == ("30s", "10s")
    # The chart's labels win: a label of the same key does not make a second key.
    clash = render(
        {
            "prometheus": {
                "enabled": True,
                "serviceMonitor": {"labels": {"app.kubernetes.io/name": "x"}},
            }
        }
    )
    monitor = one(clash, "ServiceMonitor", "crewlet-operator-controller-manager-metrics-monitor")
    assert monitor["metadata"]["labels"]["app.kubernetes.io/name"] == "crewlet-operator"


def test_metrics_scraper_holds_a_token_bound_to_the_metrics_reader(
    render: Callable[..., list[Doc]],
) -> None:
    docs = render({"prometheus": {"enabled": True}})
    account = one(docs, "ServiceAccount", "crewlet-operator-metrics-scraper")
    assert account["automountServiceAccountToken"] is False  # no pod runs as it
    secret = one(docs, "Secret", "crewlet-operator-metrics-scraper-token")
    assert secret["type"] == "kubernetes.io/service-account-token"
    assert secret["metadata"]["annotations"] == {
        "kubernetes.io/service-account.name": "crewlet-operator-metrics-scraper"
    }
    assert "data" not in secret and "stringData" not in secret  # the token controller fills it
    binding = one(docs, "ClusterRoleBinding", "crewlet-operator-metrics-scraper")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "crewlet-operator-metrics-reader",
    }
    assert binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": "crewlet-operator-metrics-scraper",
            "namespace": NAMESPACE,
        }
    ]
    assert rules_of(one(docs, "ClusterRole", "crewlet-operator-metrics-reader")) == {
        ("", "/metrics", "get")
    }

    # Plain HTTP asks for no token: no scraper, no authorization.
    plain = render({"prometheus": {"enabled": True}, "metrics": {"secure": False}})
    assert not {n for _, n in names(plain)} & {
        "crewlet-operator-metrics-scraper",
        "crewlet-operator-metrics-scraper-token",
    }
    endpoint = one(plain, "ServiceMonitor", "crewlet-operator-controller-manager-metrics-monitor")[
        "spec"
    ]["endpoints"][0]
    assert endpoint["scheme"] == "http"
    assert "authorization" not in endpoint and "tlsConfig" not in endpoint
    assert ("ServiceAccount", "crewlet-operator-metrics-scraper") not in names(render())


def deployment_selector(docs: list[Doc]) -> dict[str, str]:
    deployment = one(docs, "Deployment", "crewlet-operator-controller-manager")
    selector: dict[str, str] = deployment["spec"]["selector"]["matchLabels"]
    return selector


def test_pod_disruption_budget_selects_exactly_the_managers_pods(
    render: Callable[..., list[Doc]],
) -> None:
    docs = render()
    budget = one(docs, "PodDisruptionBudget", "crewlet-operator-controller-manager")
    assert budget["apiVersion"] == "policy/v1"
    assert budget["spec"] == {
        "maxUnavailable": 1,
        "selector": {"matchLabels": deployment_selector(docs)},
    }
    assert deployment_selector(docs) == {
        "app.kubernetes.io/name": "crewlet-operator",
        "app.kubernetes.io/instance": RELEASE,
        "app.kubernetes.io/component": "controller-manager",
    }

    percent = render({"manager": {"podDisruptionBudget": {"maxUnavailable": "50%"}}})
    spec = one(percent, "PodDisruptionBudget", "crewlet-operator-controller-manager")["spec"]
    assert spec["maxUnavailable"] == "50%"
    minimum = render(
        {"manager": {"replicas": 3}},
        sets=(
            "manager.podDisruptionBudget.maxUnavailable=null",
            "manager.podDisruptionBudget.minAvailable=2",
        ),
    )
    spec = one(minimum, "PodDisruptionBudget", "crewlet-operator-controller-manager")["spec"]
    assert spec["minAvailable"] == 2 and "maxUnavailable" not in spec


@pytest.mark.parametrize(
    "values",
    [{"manager": {"replicas": 1}}, {"manager": {"podDisruptionBudget": {"enabled": False}}}],
    ids=["one-replica", "disabled"],
)
def test_no_pod_disruption_budget(render: Callable[..., list[Doc]], values: Values) -> None:
    """One replica has nothing to keep up: a budget would only block a node's drain."""
    assert "PodDisruptionBudget" not in {kind for kind, _ in names(render(values))}


@pytest.mark.parametrize(
    "sets",
    [
        ("manager.affinity=null",),
        (
            "manager.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
            ".nodeSelectorTerms[0].matchExpressions[0].key=pool",
            "manager.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
            ".nodeSelectorTerms[0].matchExpressions[0].operator=Exists",
            "manager.affinity.podAntiAffinity=null",
        ),
    ],
    ids=["affinity-null", "other-affinity"],
)
def test_topology_spread_survives_an_affinity_override(
    render: Callable[..., list[Doc]], sets: tuple[str, ...]
) -> None:
    docs = render(sets=sets)
    deployment = one(docs, "Deployment", "crewlet-operator-controller-manager")
    pod = deployment["spec"]["template"]
    assert "podAntiAffinity" not in pod["spec"].get("affinity", {})
    [spread] = pod["spec"]["topologySpreadConstraints"]
    assert spread == {
        "maxSkew": 1,
        "topologyKey": "kubernetes.io/hostname",
        "whenUnsatisfiable": "ScheduleAnyway",
        "labelSelector": {"matchLabels": deployment_selector(docs)},
    }
    assert spread["labelSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()


def test_topology_spread_follows_the_release_name(render: Callable[..., list[Doc]]) -> None:
    docs = render(release="prod", sets=("nameOverride=crew",))
    deployment = one(docs, "Deployment", "prod-crew-controller-manager")
    [spread] = deployment["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert spread["labelSelector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    assert spread["labelSelector"]["matchLabels"]["app.kubernetes.io/instance"] == "prod"


def test_tmp_size_limit(render: Callable[..., list[Doc]]) -> None:
    docs = render({"manager": {"tmpSizeLimit": "16Mi"}})
    spec = one(docs, "Deployment", "crewlet-operator-controller-manager")["spec"]["template"][
        "spec"
    ]
    assert {"name": "tmp", "emptyDir": {"sizeLimit": "16Mi"}} in spec["volumes"]
    docs = render({"manager": {"tmpSizeLimit": ""}})
    spec = one(docs, "Deployment", "crewlet-operator-controller-manager")["spec"]["template"][
        "spec"
    ]
    assert {"name": "tmp", "emptyDir": {}} in spec["volumes"]


def test_network_policy_lets_in_only_metrics_and_probes(render: Callable[..., list[Doc]]) -> None:
    assert "NetworkPolicy" not in {kind for kind, _ in names(render())}  # off by default
    docs = render({"networkPolicy": {"enabled": True}})
    policy = one(docs, "NetworkPolicy", "crewlet-operator-controller-manager")
    spec = policy["spec"]
    assert spec["podSelector"] == {"matchLabels": deployment_selector(docs)}
    # Never egress: the manager must reach the API server.
    assert spec["policyTypes"] == ["Ingress"] and "egress" not in spec
    assert spec["ingress"] == [
        {
            "ports": [{"port": 8443, "protocol": "TCP"}],
            # kubebuilder's default: namespaces labelled metrics: enabled.
            "from": [{"namespaceSelector": {"matchLabels": {"metrics": "enabled"}}}],
        },
        # The kubelet's probes come from the node's address: from anywhere.
        {"ports": [{"port": 8081, "protocol": "TCP"}]},
    ]
    ports = {p["name"]: p["containerPort"] for p in manager_container(docs)["ports"]}
    assert ports == {"metrics": 8443, "health": 8081}

    peers = [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}},
        {"ipBlock": {"cidr": "10.0.0.0/8"}},
    ]
    custom = render(
        {"networkPolicy": {"enabled": True, "metricsFrom": peers}, "metrics": {"port": 9443}}
    )
    ingress = one(custom, "NetworkPolicy", "crewlet-operator-controller-manager")["spec"]["ingress"]
    assert ingress[0] == {"ports": [{"port": 9443, "protocol": "TCP"}], "from": peers}
    anyone = render({"networkPolicy": {"enabled": True, "metricsFrom": []}})
    ingress = one(anyone, "NetworkPolicy", "crewlet-operator-controller-manager")["spec"]["ingress"]
    assert ingress[0] == {"ports": [{"port": 8443, "protocol": "TCP"}]}
    no_metrics = render({"networkPolicy": {"enabled": True}, "metrics": {"enabled": False}})
    ingress = one(no_metrics, "NetworkPolicy", "crewlet-operator-controller-manager")["spec"][
        "ingress"
    ]
    assert ingress == [{"ports": [{"port": 8081, "protocol": "TCP"}]}]


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
            {
                "manager": {
                    "args": ["--leader-elect=false"],
                    "replicas": 1,
                    "sharding": {"enabled": True},
                }
            },
            "manager.sharding.enabled needs leader election, which manager.args turns off",
            id="sharding-without-leader-election",
        ),
        pytest.param(
            {"prometheus": {"enabled": True}, "metrics": {"enabled": False}},
            "prometheus.enabled needs metrics.enabled",
            id="prometheus-without-metrics",
        ),
        pytest.param(
            {"manager": {"podDisruptionBudget": {"minAvailable": 1}}},
            "manager.podDisruptionBudget sets both maxUnavailable (1) and minAvailable (1), and a "
            "PodDisruptionBudget takes only one of them. Set the other to null",
            id="pdb-both",
        ),
        pytest.param(
            {"manager": {"podDisruptionBudget": {"maxUnavailable": None}}},
            "manager.podDisruptionBudget.enabled needs maxUnavailable or minAvailable",
            id="pdb-neither",
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
        (
            {"manager": {"sharding": {"enabled": "yes"}}},
            "at '/manager/sharding/enabled': got string, want boolean",
        ),
        ({"manager": {"sharding": True}}, "at '/manager/sharding': got boolean, want object"),
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
    ids=[
        "wrong-type",
        "wrong-bool",
        "sharding-bool",
        "sharding-not-an-object",
        "unknown-top-level-key",
        "subject-kind",
        "sa-namespace",
    ],
)
def test_values_schema_rejects(
    refused: Callable[[Values], str], values: Values, message: str
) -> None:
    assert message in refused(values)


AFFINITY_TYPO = {
    "podAntiAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "podAffinityTerm": {"topologyKeyy": "kubernetes.io/hostname"}}
        ]
    }
}


@pytest.mark.parametrize(
    ("values", "message"),
    [
        pytest.param(
            {"networkPolicyy": {"enabled": True}},
            "at '': additional properties 'networkPolicyy' not allowed",
            id="top-level",
        ),
        pytest.param(
            {"manager": {"replica": 3}},
            "at '/manager': additional properties 'replica' not allowed",
            id="manager.replica",
        ),
        pytest.param(
            {"prometheus": {"serviceMontor": {"interval": "30s"}}},
            "at '/prometheus': additional properties 'serviceMontor' not allowed",
            id="prometheus.serviceMontor",
        ),
        pytest.param(
            {"manager": {"affinity": AFFINITY_TYPO}},
            "at '/manager/affinity/podAntiAffinity/preferredDuringSchedulingIgnoredDuringExecution"
            "/0/podAffinityTerm': additional properties 'topologyKeyy' not allowed",
            id="deep-in-affinity",
        ),
        pytest.param(
            {"manager": {"tolerations": [{"key": "pool", "operater": "Exists"}]}},
            "at '/manager/tolerations/0': additional properties 'operater' not allowed",
            id="toleration",
        ),
        pytest.param(
            {"manager": {"readinessProbe": {"periodSecond": 5}}},
            "at '/manager/readinessProbe': additional properties 'periodSecond' not allowed",
            id="probe",
        ),
        pytest.param(
            {"manager": {"livenessProbe": {"httpGet": {"paht": "/healthz"}}}},
            "at '/manager/livenessProbe/httpGet': additional properties 'paht' not allowed",
            id="probe-httpGet",
        ),
        pytest.param(
            {"manager": {"securityContext": {"readOnlyRootFileSystem": True}}},
            "at '/manager/securityContext': additional properties 'readOnlyRootFileSystem' not "
            "allowed",
            id="securityContext",
        ),
        pytest.param(
            {"manager": {"podSecurityContext": {"runAsUser": "nobody"}}},
            "at '/manager/podSecurityContext/runAsUser': got string, want integer",
            id="podSecurityContext",
        ),
        pytest.param(
            {"manager": {"resources": {"limit": {"memory": "1Gi"}}}},
            "at '/manager/resources': additional properties 'limit' not allowed",
            id="resources",
        ),
        pytest.param(
            {"manager": {"resources": {"limits": {"memory": True}}}},
            "at '/manager/resources/limits/memory': got boolean, want number or string",
            id="quantity",
        ),
        pytest.param(
            {"manager": {"podDisruptionBudget": {"maxUnavailable": True}}},
            "at '/manager/podDisruptionBudget/maxUnavailable': got boolean, want integer or string",
            id="int-or-string",
        ),
        pytest.param(
            {"manager": {"topologySpreadConstraints": [{"maxSkew": 1, "whenUnsatisfiabel": "x"}]}},
            "at '/manager/topologySpreadConstraints/0': additional properties 'whenUnsatisfiabel' "
            "not allowed",
            id="topologySpreadConstraints",
        ),
        pytest.param(
            {"manager": {"nodeSelector": {"pool": 1}}},
            "at '/manager/nodeSelector/pool': got number, want string",
            id="nodeSelector",
        ),
        pytest.param(
            {"imagePullSecrets": [{"nmae": "registry"}]},
            "at '/imagePullSecrets/0': additional properties 'nmae' not allowed",
            id="imagePullSecrets",
        ),
        pytest.param(
            {"networkPolicy": {"metricsFrom": [{"namespaceSelecter": {}}]}},
            "at '/networkPolicy/metricsFrom/0': additional properties 'namespaceSelecter' not "
            "allowed",
            id="networkPolicy-peer",
        ),
        pytest.param(
            {"prometheus": {"serviceMonitor": {"interval": "30sec"}}},
            "at '/prometheus/serviceMonitor/interval': '30sec' does not match pattern",
            id="prometheus-duration",
        ),
    ],
)
def test_values_schema_names_the_path_of_a_typo(
    refused: Callable[[Values], str], values: Values, message: str
) -> None:
    """Every object is closed, the Kubernetes-typed ones with Kubernetes' own schemas: a typo
    fails the render and names its path, rather than being dropped silently."""
    assert message in refused(values)


SCHEMA_REFS = {
    "imagePullSecrets": "io.k8s.api.core.v1.LocalObjectReference",
    "manager.resources": "io.k8s.api.core.v1.ResourceRequirements",
    "manager.affinity": "io.k8s.api.core.v1.Affinity",
    "manager.topologySpreadConstraints": "io.k8s.api.core.v1.TopologySpreadConstraint",
    "manager.nodeSelector": "io.k8s.api.core.v1.PodSpec.nodeSelector",
    "manager.tolerations": "io.k8s.api.core.v1.Toleration",
    "manager.podSecurityContext": "io.k8s.api.core.v1.PodSecurityContext",
    "manager.securityContext": "io.k8s.api.core.v1.SecurityContext",
    "manager.tmpSizeLimit": "io.k8s.apimachinery.pkg.api.resource.Quantity",
    "manager.livenessProbe": "io.k8s.api.core.v1.Probe",
    "manager.readinessProbe": "io.k8s.api.core.v1.Probe",
    "manager.podDisruptionBudget.maxUnavailable": "io.k8s.apimachinery.pkg.util.intstr.IntOrString",
    "manager.podDisruptionBudget.minAvailable": "io.k8s.apimachinery.pkg.util.intstr.IntOrString",
    "networkPolicy.metricsFrom": "io.k8s.api.networking.v1.NetworkPolicyPeer",
}


def test_values_schema_types_kubernetes_values_with_kubernetes_schemas() -> None:
    """The generated $defs (hack/chart_schema.py; e2e/test_chart.py checks them against the API
    server) type every value that becomes a Kubernetes field."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    for dotted, definition in SCHEMA_REFS.items():
        node = schema
        for part in dotted.split("."):
            node = node["properties"][part]
        node = node.get("items", node)
        assert node["$ref"] == f"#/$defs/{definition}", dotted
    defs = schema["$defs"]
    assert defs["io.k8s.apimachinery.pkg.util.intstr.IntOrString"]["type"] == ["integer", "string"]
    assert defs["io.k8s.apimachinery.pkg.api.resource.Quantity"]["type"] == ["string", "number"]

    def refs(node: Any) -> set[str]:
        if isinstance(node, dict):
            own = {node["$ref"]} if "$ref" in node else set()
            return own.union(*(refs(v) for v in node.values()))
        if isinstance(node, list):
            return set().union(*(refs(v) for v in node))
        return set()

    # Every definition is used, every reference resolves.
    assert refs(schema) == {f"#/$defs/{name}" for name in defs}


def test_chart_schema_converts_kubernetes_openapi_for_helm() -> None:
    """hack/chart_schema.py's conversion; e2e/test_chart.py applies it to the API server's own
    OpenAPI and compares with values.schema.json."""
    int_or_string = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"
    openapi = {
        "description": "A thing.",
        "type": "object",
        "required": ["port"],
        "x-kubernetes-map-type": "atomic",
        "properties": {
            "port": {
                "allOf": [{"$ref": f"#/components/schemas/{int_or_string}"}],
                "description": "The port.",
            },
            "mode": {
                "type": "string",
                "enum": ["A", "B"],
                "description": 'The mode.\n\nPossible enum values:\n - `"A"` is a.',
            },
            "enum": {"type": "string"},  # a field named as a keyword is a field
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "items": {"type": "array", "items": {"$ref": "#/components/schemas/X"}},
        },
    }
    assert chart_schema.convert(openapi) == {
        "additionalProperties": False,
        "description": "A thing.",
        "properties": {
            "enum": {"type": "string"},
            "items": {"items": {"$ref": "#/$defs/X"}, "type": "array"},
            "labels": {"additionalProperties": {"type": "string"}, "type": "object"},
            "mode": {"description": "The mode.", "type": "string"},
            "port": {"$ref": f"#/$defs/{int_or_string}", "description": "The port."},
        },
        "required": ["port"],
        "type": "object",
    }
    assert chart_schema.convert(
        {"format": "int-or-string", "oneOf": [{"type": "integer"}, {"type": "string"}]}
    ) == {"type": ["integer", "string"]}


def test_every_object_of_the_values_schema_is_closed() -> None:
    """additionalProperties: false on every object with properties, a schema on every map; only
    Helm's global is open, since parent charts fill it."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    open_objects: list[str] = []

    def walk(node: Any, path: str) -> None:
        if isinstance(node, list):
            for i, item in enumerate(node):
                walk(item, f"{path}/{i}")
            return
        if not isinstance(node, dict):
            return
        if "properties" in node:
            if node.get("additionalProperties") is not False:
                open_objects.append(path)
        elif node.get("type") == "object" and "additionalProperties" not in node:
            open_objects.append(path)
        for key, child in node.items():
            if key == "properties":
                for name, sub in child.items():
                    walk(sub, f"{path}/properties/{name}")
            # if/then add conditions to an object already closed; the rest are values.
            elif key not in ("if", "then", "enum", "required", "default", "const"):
                walk(child, f"{path}/{key}")

    walk(schema, "")
    assert open_objects == ["/properties/global"]


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
        # One operator per cluster: it watches every install's Lease, and reads and writes
        # only its own (the Role below, in its namespace).
        | {("coordination.k8s.io", "leases", v) for v in ("list", "watch")}
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
    } | {("", "pods", v) for v in ("get", "list", "watch")}
    auth = one(docs, "ClusterRole", "crewlet-operator-metrics-auth-role")
    assert rules_of(auth) == {
        ("authentication.k8s.io", "tokenreviews", "create"),
        ("authorization.k8s.io", "subjectaccessreviews", "create"),
    }
    auth_binding = one(docs, "ClusterRoleBinding", "crewlet-operator-metrics-auth-rolebinding")
    assert auth_binding["subjects"][0]["name"] == "crewlet-operator-controller-manager"
    reader = one(docs, "ClusterRole", "crewlet-operator-metrics-reader")
    assert rules_of(reader) == {("", "/metrics", "get")}


def test_with_sharding_the_manager_patches_companies(render: Callable[..., list[Doc]]) -> None:
    """manager.sharding.enabled: the leader assigns each Company to a replica, and a replica
    lets one go, by patching the Company's labels; the ClusterRole grants patch on companies
    then, and only then. The member Leases (one per replica, created, listed by their label,
    renewed) are in the leader-election Role's namespace, which already grants every verb on
    Leases."""
    default = rules_of(one(render(), "ClusterRole", "crewlet-operator-manager-role"))
    docs = render({"manager": {"sharding": {"enabled": True}}})
    sharded = rules_of(one(docs, "ClusterRole", "crewlet-operator-manager-role"))
    assert sharded - default == {("crewlet.ai", "companies", "patch")}
    assert default <= sharded
    leader = one(docs, "Role", "crewlet-operator-leader-election-role")
    assert crud("coordination.k8s.io", "leases") <= rules_of(leader)
    assert leader["metadata"]["namespace"] == NAMESPACE


def test_with_sharding_only_the_manager_writes_the_ring_labels(
    render: Callable[..., list[Doc]],
) -> None:
    """Issue 47: "with sharding on, the chart's policy refuses every user but the manager a
    Company create that sets the shard or drain label and an update that sets, changes or
    removes them"; the manager matched by namespace and name. Without sharding, no such
    policy."""
    assert not [d for d in render() if d["metadata"]["name"] == "crewlet-operator-ring-labels"]
    docs = render({"manager": {"sharding": {"enabled": True}}})
    policy = one(docs, "ValidatingAdmissionPolicy", "crewlet-operator-ring-labels")
    one(docs, "ValidatingAdmissionPolicyBinding", "crewlet-operator-ring-labels")
    assert covered(policy) == {("crewlet.ai", "companies"): frozenset({"CREATE", "UPDATE"})}
    [condition] = policy["spec"]["matchConditions"]
    assert condition["expression"] == (
        'request.userInfo.username != "system:serviceaccount:crewlet-operator-system:'
        'crewlet-operator-controller-manager"'
    )
    variables = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
    ring = RingLabels(SHARDING_DOMAIN, MANAGER_NAME)
    assert json.loads(variables["ringLabels"].replace("'", '"')) == [ring.shard, ring.drain]


def test_with_sharding_a_willed_members_pod_writes_no_child(
    render: Callable[..., list[Doc]],
) -> None:
    """Issue 50: "a policy that refuses a company's status and children from any member but its
    own". The children's policy matches every kind a Company owns (the daemon's own list),
    by the ring's slot label, for the manager in a Pod, and judges it by the ring's member
    Leases and their wills. Without sharding, no such policy."""
    name = "crewlet-operator-member-children"
    assert not [d for d in render() if d["metadata"]["name"] == name]
    docs = render({"manager": {"sharding": {"enabled": True}}})
    policy = one(docs, "ValidatingAdmissionPolicy", name)
    binding = one(docs, "ValidatingAdmissionPolicyBinding", name)
    owned = {(r.group, r.plural) for r in (*CHILD_RESOURCES, *GATEWAY_CHILD_RESOURCES)}
    writes = frozenset({"CREATE", "UPDATE", "DELETE"})
    assert covered(policy) == dict.fromkeys(owned, writes)
    ring = RingLabels(SHARDING_DOMAIN, MANAGER_NAME)
    assert policy["spec"]["matchConstraints"]["objectSelector"] == {
        "matchExpressions": [{"key": ring.slot, "operator": "Exists"}]
    }
    assert ring.heirs in json.dumps(policy["spec"]["variables"])
    assert binding["spec"]["paramRef"]["selector"] == {"matchLabels": {ring.member: ring.ring}}


def test_the_leases_policy_names_the_operators_labels(render: Callable[..., list[Doc]]) -> None:
    """The leases policy holds the labels the daemon puts on its Lease (cli.LEASE_LABELS) and
    the ring's will (RingLabels.heirs) on the ring's member Leases (ring.member_name): one
    source for each, checked here."""
    policy = one(render(), "ValidatingAdmissionPolicy", "crewlet-operator-leases")
    text = json.dumps(policy["spec"])
    variables = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
    assert json.loads(variables["installLabels"]) == LEASE_LABELS
    ring = RingLabels(SHARDING_DOMAIN, MANAGER_NAME)
    assert ring.heirs in text and f"{ring.member}" in text
    member = json.loads(variables["member"])
    assert re.fullmatch(member, member_name(MANAGER_NAME, "any-identity"))
    assert not re.fullmatch(member, "crewlet-operator-leader")


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

WRITES = frozenset({"CREATE", "UPDATE", "DELETE"})
MANAGER_RESOURCES = {
    ("", "secrets"): WRITES,
    ("", "serviceaccounts"): WRITES,
    ("", "services"): WRITES,
    ("", "persistentvolumeclaims"): WRITES,
    ("apps", "statefulsets"): WRITES,
    ("policy", "poddisruptionbudgets"): WRITES,
    ("networking.k8s.io", "networkpolicies"): WRITES,
    ("networking.k8s.io", "ingresses"): WRITES,
    ("gateway.networking.k8s.io", "httproutes"): WRITES,
    # The high-water engine version the manager keeps in a Company's status.
    ("crewlet.ai", "companies/status"): frozenset({"UPDATE"}),
    # A Company's ring labels, with sharding (held to those labels alone, sharding or not).
    ("crewlet.ai", "companies"): frozenset({"UPDATE"}),
}


def covered(policy: Doc) -> dict[tuple[str, str], frozenset[str]]:
    """(apiGroup, resource) -> the operations the policy matches."""
    out = {}
    for rule in policy["spec"]["matchConstraints"]["resourceRules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                out[(group, resource)] = frozenset(rule["operations"])
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
    # Issue 47: the manager exactly (a tenant's own ServiceAccount of the same name is not it),
    # and, as the install page says, only while its name ends with the fixed suffix.
    assert condition["expression"] == (
        'request.userInfo.username == "system:serviceaccount:crewlet-operator-system:'
        'crewlet-operator-controller-manager" && "crewlet-operator-controller-manager"'
        '.endsWith("crewlet-operator-controller-manager")'
    )
    assert policy["spec"]["variables"], "variables keep the validations readable"
    for validation in policy["spec"]["validations"]:
        assert validation["message"] and validation["messageExpression"], validation
    assert len(policy["spec"]["validations"]) == 49
    assert "matchResources" not in binding["spec"], "every namespace"
    variables = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
    assert (json.loads(variables["gateways"]), json.loads(variables["imagePrefixes"])) == ([], [])


def test_manager_writes_values_are_rendered_into_the_policy(
    render: Callable[..., list[Doc]],
) -> None:
    """managerWrites.gateways and managerWrites.engineImagePrefixes become CEL lists (JSON is
    CEL's literal syntax), quoted whatever they hold."""
    gateways = [
        {"namespace": "gateways", "name": "public"},
        {"namespace": "edge", "name": "hooks.internal"},
    ]
    prefixes = ["ghcr.io/crewlet/", 'registry.example.com/o"neil/', "docker.io/crewlet/engine:"]
    docs = render({"managerWrites": {"gateways": gateways, "engineImagePrefixes": prefixes}})
    policy = one(docs, "ValidatingAdmissionPolicy", "crewlet-operator-manager-writes")
    variables = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
    assert json.loads(variables["gateways"]) == gateways
    assert json.loads(variables["imagePrefixes"]) == prefixes


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"gateways": [{"name": "public"}]}, "missing property 'namespace'"),
        ({"gateways": [{"namespace": "gateways"}]}, "missing property 'name'"),
        (
            {"gateways": [{"namespace": "gateways", "name": "public", "kind": "Gateway"}]},
            "additional properties 'kind' not allowed",
        ),
        ({"gateways": [{"namespace": "Gateways", "name": "public"}]}, "/gateways/0/namespace"),
        ({"gateways": "gateways/public"}, "at '/managerWrites/gateways': got string, want array"),
        ({"engineImagePrefixes": ["ghcr.io/crewlet"]}, "/engineImagePrefixes/0"),
        ({"engineImagePrefixes": ["ghcr.io/crewlet/", "ghcr.io/crewlet/"]}, "are equal"),
        ({"engineImages": ["ghcr.io/crewlet/"]}, "additional properties 'engineImages'"),
    ],
    ids=[
        "gateway-namespace",
        "gateway-name",
        "gateway-extra",
        "gateway-namespace-case",
        "gateways-string",
        "prefix-unterminated",
        "prefix-twice",
        "misspelt",
    ],
)
def test_values_schema_refuses_bad_manager_writes(
    refused: Callable[[Values], str], values: Values, message: str
) -> None:
    """A prefix that ends mid-name (ghcr.io/crewlet would let ghcr.io/crewlet-evil in) and a
    Gateway without its namespace are refused at render time."""
    assert message in refused({"managerWrites": values})


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
        ("", "namespaces"): WRITES,
        ("", "secrets"): WRITES,
        ("rbac.authorization.k8s.io", "rolebindings"): WRITES,
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
