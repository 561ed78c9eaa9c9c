"""The Helm chart on the real API server, with the real helm and kubectl (issue: Helm chart,
RBAC, admission policies).

The install page is the contract: "The chart installs the CRDs and keeps them on uninstall
(crd.keep), since deleting a CRD deletes every company declared with it", and "Two ClusterRoles
are always installed and aggregated into Kubernetes' own roles, so that people work with
crewlet.ai objects with the roles they already have ... EngineClasses are not in either role".

Pods cannot start without a container runtime: kwok marks the manager's pods Ready, so what is
shown here is that every object is accepted, not that the image runs.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import yaml
from operator_helpers import own_control_plane

from crewlet_operator.envtest import USER_FIELD_MANAGER, ControlPlane, binaries, install_crds, pki
from crewlet_operator.envtest.wait import eventually
from crewlet_operator.errors import ForbiddenError, InvalidError, NotFoundError
from crewlet_operator.kube import resources as r
from crewlet_operator.kube.client import Client, Scope
from crewlet_operator.kube.config import RestConfig
from crewlet_operator.serving import DelegatingAuth, UserInfo
from crewlet_operator_daemon import ClusterFacts, Observed, desired_children
from crewlet_operator_daemon.api.v1alpha1 import COMPANY, ENGINE_CLASS
from hack import chart_schema

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "charts" / "crewlet-operator"
RELEASE = "crewlet-operator"
RELEASE_NS = "crewlet-operator-system"
MANAGER = "crewlet-operator-controller-manager"
TENANT_LABEL = "crewlet.ai/tenant"

Doc = dict[str, Any]
ClientFor = Callable[[RestConfig], Client]

PROVISIONER_NS = "chart-platform"
SCRAPER = "crewlet-operator-metrics-scraper"
MONITOR = "crewlet-operator-controller-manager-metrics-monitor"
SERVICE_MONITOR = r.Resource("monitoring.coreos.com", "v1", "ServiceMonitor", "servicemonitors")
ALL_FEATURES: dict[str, Any] = {
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
            {"kind": "ServiceAccount", "name": "control-plane", "namespace": PROVISIONER_NS}
        ],
    },
}


@dataclass
class Tools:
    """helm and kubectl against the session's control plane, as its admin."""

    kubeconfig: Path
    home: Path

    async def run(self, *argv: str, stdin: str | None = None) -> tuple[int, str, str]:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.home),
            "KUBECONFIG": str(self.kubeconfig),
            "HELM_CACHE_HOME": str(self.home / "cache"),
            "HELM_CONFIG_HOME": str(self.home / "config"),
            "HELM_DATA_HOME": str(self.home / "data"),
        }
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
        )
        out, err = await asyncio.wait_for(
            proc.communicate(stdin.encode() if stdin is not None else None), 300
        )
        assert proc.returncode is not None
        return proc.returncode, out.decode(), err.decode()

    async def helm(self, *args: str, values: dict[str, Any] | None = None) -> str:
        argv = [str(binaries.find("helm")), *args]
        if values is not None:
            path = self.home / f"values-{abs(hash(json.dumps(values, sort_keys=True)))}.json"
            path.write_text(json.dumps(values))
            argv += ["--values", str(path)]
        code, out, err = await self.run(*argv)
        assert code == 0, f"helm {' '.join(args)} failed:\n{out}\n{err}"
        return out

    async def kubectl(self, *args: str, stdin: str | None = None) -> str:
        code, out, err = await self.run(str(binaries.find("kubectl")), *args, stdin=stdin)
        assert code == 0, f"kubectl {' '.join(args)} failed:\n{out}\n{err}"
        return out

    async def template(self, values: dict[str, Any] | None = None) -> list[Doc]:
        out = await self.helm(
            "template", RELEASE, str(CHART), "-n", RELEASE_NS, values=values or {}
        )
        return [d for d in yaml.safe_load_all(out) if d]


async def adopt_crds(client: Client, tools: Tools) -> None:
    """Apply the chart's CRDs for real, owned by the release as helm expects, so that the dry runs
    find the crewlet.ai kinds served and a later ``helm install`` adopts them."""
    crds = [d for d in await tools.template() if d["kind"] == "CustomResourceDefinition"]
    for crd in crds:
        crd["metadata"].setdefault("annotations", {}).update(
            {"meta.helm.sh/release-name": RELEASE, "meta.helm.sh/release-namespace": RELEASE_NS}
        )
    await install_crds(client, crds, field_manager="chart-test")


PROMETHEUS_OPERATOR_CRDS = (
    "servicemonitors.monitoring.coreos.com",
    "prometheusrules.monitoring.coreos.com",
)


def prometheus_operator_crds() -> list[Doc]:
    """prometheus-operator's own ServiceMonitor and PrometheusRule CRDs, which `make bins`
    fetches: the rendered ones are checked against their real schemas, not a stand-in that
    accepts anything."""
    crds = {
        d["metadata"]["name"]: d
        for d in yaml.safe_load_all(binaries.find("prometheus-operator-crds.yaml").read_text())
        if d
    }
    missing = set(PROMETHEUS_OPERATOR_CRDS) - set(crds)
    assert not missing, f"{missing} not in prometheus-operator-crds.yaml: run `make bins`"
    return [crds[name] for name in PROMETHEUS_OPERATOR_CRDS]


@pytest.fixture(scope="module")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A cluster of the module's own, as a fresh install finds one: on the session's plane,
    a module before this one leaves the chart's ServiceAccount and roles in crewlet-operator-system
    (applied as a manager's token needs them), which ``helm install`` refuses to adopt."""
    with own_control_plane(tmp_path_factory.mktemp("chart")) as plane:
        yield plane


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def kube_client(control_plane: ControlPlane) -> AsyncIterator[Client]:
    async with Client(control_plane.admin_config(), field_manager=USER_FIELD_MANAGER) as client:
        yield client


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def tools(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Tools]:
    yield Tools(control_plane.kubeconfig, tmp_path_factory.mktemp("helm-home"))


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def cluster(kube_client: Client, tools: Tools) -> AsyncIterator[Client]:
    """The release's namespace, the chart's CRDs and prometheus-operator's ServiceMonitor and
    PrometheusRule CRDs (the operator itself is not installed), removed afterwards."""
    with contextlib.suppress(Exception):
        await kube_client.create(r.NAMESPACE, {"metadata": {"name": RELEASE_NS}})
    with contextlib.suppress(Exception):
        await kube_client.create(r.NAMESPACE, {"metadata": {"name": PROVISIONER_NS}})
    await adopt_crds(kube_client, tools)
    created = [
        name
        for name in PROMETHEUS_OPERATOR_CRDS
        if await kube_client.get_or_none(r.CUSTOM_RESOURCE_DEFINITION, name) is None
    ]
    await install_crds(kube_client, prometheus_operator_crds())
    yield kube_client
    for name in created:
        with contextlib.suppress(NotFoundError):
            await kube_client.delete(r.CUSTOM_RESOURCE_DEFINITION, name)
    for ns in (RELEASE_NS, PROVISIONER_NS):
        with contextlib.suppress(NotFoundError):
            await kube_client.delete(r.NAMESPACE, ns)


DRY_RUN = (
    "apply",
    "--server-side",
    "--force-conflicts",
    "--dry-run=server",
    "--validate=strict",
    "--field-manager=chart-dry-run",
    "-f",
    "-",
)


@pytest.mark.parametrize("values", [{}, ALL_FEATURES], ids=["default", "all-features"])
async def test_render_is_accepted_by_a_server_side_dry_run(
    cluster: Client, tools: Tools, values: dict[str, Any]
) -> None:
    """Strict field validation: a field the API server (or a CRD's schema) does not know fails
    the apply instead of being dropped."""
    docs = await tools.template(values)
    out = await tools.kubectl(*DRY_RUN, stdin=yaml.safe_dump_all(docs))
    applied = [line for line in out.splitlines() if line.endswith("(server dry run)")]
    assert len(applied) == len(docs), out
    kinds = {d["kind"] for d in docs}
    assert {"Deployment", "ValidatingAdmissionPolicy", "CustomResourceDefinition"} <= kinds
    if values:
        assert {
            "ServiceMonitor",
            "PrometheusRule",
            "ConfigMap",
            "ValidatingAdmissionPolicyBinding",
            "NetworkPolicy",
        } <= kinds


async def test_the_service_monitor_holds_to_prometheus_operators_crd(
    cluster: Client, tools: Tools
) -> None:
    crd = await cluster.get(r.CUSTOM_RESOURCE_DEFINITION, "servicemonitors.monitoring.coreos.com")
    assert crd["metadata"]["annotations"]["operator.prometheus.io/version"] == "0.94.0"
    docs = await tools.template(ALL_FEATURES)
    [monitor] = [d for d in docs if d["kind"] == "ServiceMonitor"]
    out = await tools.kubectl(*DRY_RUN, stdin=yaml.safe_dump(monitor))
    assert f"servicemonitor.monitoring.coreos.com/{MONITOR} serverside-applied" in out, out
    # The CRD's schema is checked: a misspelt endpoint field is refused, not dropped.
    monitor["spec"]["endpoints"][0]["bearerTokenFil"] = "/var/run/secrets/token"
    code, out, err = await tools.run(
        str(binaries.find("kubectl")), *DRY_RUN, stdin=yaml.safe_dump(monitor)
    )
    assert code != 0, out
    assert ".spec.endpoints[0].bearerTokenFil: field not declared in schema" in err, err


async def test_values_schema_defs_are_the_api_servers_own(kube_client: Client) -> None:
    """The Kubernetes-typed part of values.schema.json (hack/chart_schema.py) is what the API
    server we test on serves, converted by the same function: it cannot drift from it."""
    documents = {
        path: await kube_client.request("GET", f"/openapi/v3/{path}")
        for path in chart_schema.DOCUMENTS
    }
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema["$defs"] == chart_schema.definitions(documents), (
        "values.schema.json's $defs are stale: run `python hack/chart_schema.py`"
    )


async def helm_install(tools: Tools, values: dict[str, Any]) -> str:
    return await tools.helm(
        "install",
        RELEASE,
        str(CHART),
        "-n",
        RELEASE_NS,
        "--create-namespace",
        "--wait",
        "--timeout",
        "2m",
        values=values,
    )


async def helm_uninstall(tools: Tools) -> str:
    return await tools.helm("uninstall", RELEASE, "-n", RELEASE_NS, "--wait", "--timeout", "2m")


async def test_helm_install_then_uninstall_keeps_the_crds_and_the_companies(
    cluster: Client, tools: Tools, namespace: str
) -> None:
    await adopt_crds(cluster, tools)
    try:
        await helm_install(tools, {})
        deployment = await cluster.get(r.DEPLOYMENT, MANAGER, RELEASE_NS)
        assert deployment["status"].get("readyReplicas") == 2  # kwok's Ready pods

        # The disruption controller counts exactly the manager's two pods under the budget.
        async def budget_counts_the_replicas() -> bool:
            budget = await cluster.get(r.POD_DISRUPTION_BUDGET, MANAGER, RELEASE_NS)
            status = budget.get("status") or {}
            return (status.get("expectedPods"), status.get("currentHealthy")) == (2, 2)

        await eventually(budget_counts_the_replicas, message="the PodDisruptionBudget counts 2")
        assert await cluster.get(r.SERVICE_ACCOUNT, MANAGER, RELEASE_NS)
        assert await cluster.get(r.VALIDATING_ADMISSION_POLICY, "crewlet-operator-manager-writes")
        assert await cluster.get(r.CLUSTER_ROLE, "crewlet-operator-crewlet-edit")
        await cluster.create(
            COMPANY,
            {"metadata": {"name": "kept", "namespace": namespace}, "spec": {"className": "std"}},
        )
    finally:
        out = await helm_uninstall(tools)
    # "The chart installs the CRDs and keeps them on uninstall (crd.keep)"
    assert "companies.crewlet.ai" in out and "kept due to the resource policy" in out
    for name in ("companies.crewlet.ai", "engineclasses.crewlet.ai"):
        crd = await cluster.get(r.CUSTOM_RESOURCE_DEFINITION, name)
        assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
        assert crd["metadata"].get("deletionTimestamp") is None
    assert await cluster.get(COMPANY, "kept", namespace)
    for resource, name, ns in (
        (r.DEPLOYMENT, MANAGER, RELEASE_NS),
        (r.CLUSTER_ROLE, "crewlet-operator-crewlet-edit", None),
        (r.VALIDATING_ADMISSION_POLICY, "crewlet-operator-manager-writes", None),
    ):

        async def gone(resource: r.Resource = resource, name: str = name, ns: Any = ns) -> bool:
            return await cluster.get_or_none(resource, name, ns) is None

        await eventually(gone, timeout=60, message=f"{resource.kind} {name} removed")


# -- everything on, installed with helm ----------------------------------------------------------


def metrics_cert_secret() -> Doc:
    """The Secret certManager.enabled expects you to issue (as cert-manager would)."""
    ca = pki.CertificateAuthority("metrics-ca")
    service = f"crewlet-operator-controller-manager-metrics-service.{RELEASE_NS}.svc"
    pair = ca.issue(service, dns_names=(service,), server=True)
    return {
        "metadata": {"name": "crewlet-operator-metrics-server-cert", "namespace": RELEASE_NS},
        "type": "kubernetes.io/tls",
        "stringData": {
            "tls.crt": pair.cert_pem.decode(),
            "tls.key": pair.key_pem.decode(),
            "ca.crt": ca.pair.cert_pem.decode(),
        },
    }


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def installed(cluster: Client, tools: Tools) -> AsyncIterator[Client]:
    """The chart with every optional feature, installed with helm; uninstalled afterwards."""
    await adopt_crds(cluster, tools)
    with contextlib.suppress(Exception):
        await cluster.create(r.SECRET, metrics_cert_secret())
    await helm_install(tools, ALL_FEATURES)
    try:
        yield cluster
    finally:
        await helm_uninstall(tools)


async def test_all_features_install(installed: Client) -> None:
    names = {
        (r.CLUSTER_ROLE, "crewlet-operator-company-admin-role"),
        (r.CLUSTER_ROLE, "crewlet-operator-engineclass-editor-role"),
        (r.CLUSTER_ROLE, "crewlet-operator-tenant-provisioner"),
        (r.CLUSTER_ROLE, "crewlet-operator-tenant-access"),
        (r.CLUSTER_ROLE_BINDING, "crewlet-operator-tenant-provisioner"),
        (r.VALIDATING_ADMISSION_POLICY, "crewlet-operator-tenant-provisioner"),
        (r.VALIDATING_ADMISSION_POLICY_BINDING, "crewlet-operator-tenant-provisioner"),
    }
    for resource, name in names:
        assert await installed.get(resource, name)
    got = await installed.get(SERVICE_MONITOR, MONITOR, RELEASE_NS)
    endpoint = got["spec"]["endpoints"][0]
    assert endpoint["tlsConfig"]["ca"]["secret"]["name"] == "crewlet-operator-metrics-server-cert"
    assert endpoint["authorization"]["credentials"] == {"name": f"{SCRAPER}-token", "key": "token"}
    assert got["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    deployment = await installed.get(r.DEPLOYMENT, MANAGER, RELEASE_NS)
    assert deployment["status"].get("readyReplicas") == 2


async def test_the_scraper_token_may_get_metrics(installed: Client) -> None:
    """Kubernetes fills the scraper's Secret with a token that authenticates as the scraper and
    may get /metrics: the TokenReview and SubjectAccessReview the manager's metrics endpoint
    makes, with the manager's own code."""

    async def token() -> str:
        secret = await installed.get(r.SECRET, f"{SCRAPER}-token", RELEASE_NS)
        return base64.b64decode((secret.get("data") or {}).get("token", "")).decode()

    scraper_token = await eventually(token, message="the token controller fills the Secret")
    auth = DelegatingAuth(installed)
    user = await auth.authenticate(scraper_token)
    assert user is not None
    assert user.username == f"system:serviceaccount:{RELEASE_NS}:{SCRAPER}"
    assert await auth.authorize(user, "get", "/metrics")
    # The binding grants it, not something every ServiceAccount has: the manager may not.
    manager = UserInfo(
        username=f"system:serviceaccount:{RELEASE_NS}:{MANAGER}",
        uid="",
        groups=("system:serviceaccounts", f"system:serviceaccounts:{RELEASE_NS}"),
        extra={},
    )
    assert not await auth.authorize(manager, "get", "/metrics")
    assert await auth.authenticate(scraper_token[:-4] + "AAAA") is None


def operator_secret(namespace: str) -> Doc:
    """A company's API token Secret as the operator renders it: the only shape the chart's
    policy admits from the manager (a dry run: the Company it names as owner need not exist)."""
    company = {
        "apiVersion": COMPANY.api_version,
        "kind": COMPANY.kind,
        "metadata": {
            "name": "acme",
            "namespace": namespace,
            "uid": "6f1d2c3b-0000-4000-8000-000000000001",
        },
        "spec": {"className": "standard"},
    }
    engine_class = {
        "apiVersion": ENGINE_CLASS.api_version,
        "kind": ENGINE_CLASS.kind,
        "metadata": {"name": "standard"},
        "spec": {"engine": {"image": "ghcr.io/crewlet/crewlet-operator/engine:v0.2.0"}},
    }
    facts = ClusterFacts(gateway_api=False, operator_namespace=RELEASE_NS)
    children = desired_children(company, engine_class, Observed(), facts)
    return next(a.object for a in children if a.object["metadata"]["name"] == "acme-api-token")


async def test_the_manager_may_do_what_the_operator_does_and_nothing_more(
    installed: Client, control_plane: ControlPlane, client_for: ClientFor, namespace: str
) -> None:
    """The chart's ClusterRole and Role, bound to the manager's ServiceAccount (a real token)."""
    await installed.create(r.NAMESPACE, {"metadata": {"name": f"{namespace}-x"}})
    try:
        manager = client_for(
            control_plane.token_config(control_plane.request_token(RELEASE_NS, MANAGER))
        )
        # Read every Secret; write the kinds it runs a company with, in any namespace.
        await manager.list(r.SECRET)
        for ns in (namespace, f"{namespace}-x"):
            await manager.create(r.SECRET, operator_secret(ns), dry_run=True)
        await manager.list(COMPANY)
        await manager.list(ENGINE_CLASS)
        await manager.list(r.NAMESPACE)
        await manager.list(r.LEASE)  # every install's Lease: one operator per cluster
        await manager.create(
            r.LEASE,
            {"metadata": {"name": "probe", "namespace": RELEASE_NS}, "spec": {}},
            dry_run=True,
        )

        # The chart's policy holds it: an unlabelled Secret is refused (422, not 403), once the
        # API server has compiled the policy helm installed.
        async def refused() -> str:
            try:
                await manager.create(
                    r.SECRET, {"metadata": {"name": "u", "namespace": namespace}}, dry_run=True
                )
            except InvalidError as exc:
                return exc.message
            return ""

        message = await eventually(refused, message="crewlet-operator-manager-writes enforced")
        assert "ValidatingAdmissionPolicy 'crewlet-operator-manager-writes'" in message
        assert "app.kubernetes.io/managed-by: crewlet-operator" in message
        forbidden: list[tuple[r.Resource, Doc]] = [
            (
                r.POD,
                {
                    "metadata": {"name": "p", "namespace": namespace},
                    "spec": {"containers": [{"name": "c", "image": "x"}]},
                },
            ),
            (r.DEPLOYMENT, {"metadata": {"name": "d", "namespace": namespace}, "spec": {}}),
            (r.CONFIG_MAP, {"metadata": {"name": "c", "namespace": namespace}}),
            (r.LEASE, {"metadata": {"name": "l", "namespace": namespace}, "spec": {}}),
            (r.CLUSTER_ROLE, {"metadata": {"name": f"{namespace}-escalate"}, "rules": []}),
            (ENGINE_CLASS, {"metadata": {"name": f"{namespace}-class"}, "spec": {}}),
            (COMPANY, {"metadata": {"name": "c", "namespace": namespace}, "spec": {}}),
            (r.CUSTOM_RESOURCE_DEFINITION, {"metadata": {"name": "x.example.com"}, "spec": {}}),
        ]
        for resource, obj in forbidden:
            with pytest.raises(ForbiddenError):
                await manager.create(resource, obj, dry_run=True)
    finally:
        await installed.delete(r.NAMESPACE, f"{namespace}-x")


async def test_tenant_provisioner_with_the_charts_roles(
    installed: Client, control_plane: ControlPlane, client_for: ClientFor, namespace: str
) -> None:
    """ "It holds no Secret access of its own: the tenant-access role, once bound in a tenant's
    namespace, grants Secrets and the crewlet.ai kinds there." Only RBAC here (the chart's
    roles); e2e/test_policies.py holds the subjects to the policy."""
    provisioner = client_for(control_plane.service_account_config(PROVISIONER_NS, "control-plane"))
    tenant = f"{namespace}-tenant"
    await provisioner.create(
        r.NAMESPACE,
        {
            "metadata": {
                "name": tenant,
                "labels": {
                    TENANT_LABEL: "acme",
                    "pod-security.kubernetes.io/enforce": "restricted",
                },
            }
        },
    )
    try:
        with pytest.raises(ForbiddenError):  # no Secret access of its own
            await provisioner.list(r.SECRET, Scope(tenant))
        with pytest.raises(ForbiddenError):  # binding a role it lacks needs `bind` on it
            await provisioner.create(
                r.ROLE_BINDING,
                {
                    "metadata": {"name": "admin", "namespace": tenant},
                    "roleRef": {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "ClusterRole",
                        "name": "admin",
                    },
                    "subjects": [
                        {
                            "kind": "ServiceAccount",
                            "name": "control-plane",
                            "namespace": PROVISIONER_NS,
                        }
                    ],
                },
            )
        await provisioner.create(
            r.ROLE_BINDING,
            {
                "metadata": {"name": "tenant-access", "namespace": tenant},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "crewlet-operator-tenant-access",
                },
                "subjects": [
                    {"kind": "ServiceAccount", "name": "control-plane", "namespace": PROVISIONER_NS}
                ],
            },
        )

        async def secret_written() -> Doc:
            return await provisioner.create(
                r.SECRET,
                {"metadata": {"name": "model-key", "namespace": tenant}, "stringData": {"k": "v"}},
                dry_run=True,
            )

        await eventually(
            secret_written,
            message="tenant-access grants Secrets in the tenant",
            retry_on=(ForbiddenError,),
        )
        await provisioner.create(
            COMPANY,
            {"metadata": {"name": "acme", "namespace": tenant}, "spec": {"className": "std"}},
            dry_run=True,
        )
        await provisioner.list(ENGINE_CLASS)
        with pytest.raises(ForbiddenError):  # only where tenant-access is bound
            await provisioner.list(r.SECRET, Scope(namespace))
        with pytest.raises(ForbiddenError):
            await provisioner.create(
                ENGINE_CLASS, {"metadata": {"name": f"{namespace}-c"}, "spec": {}}, dry_run=True
            )
    finally:
        await installed.delete(r.NAMESPACE, tenant)


def company(namespace: str, name: str) -> Doc:
    return {"metadata": {"name": name, "namespace": namespace}, "spec": {"className": "standard"}}


async def bind(client: Client, namespace: str, user: str, cluster_role: str) -> None:
    await client.create(
        r.ROLE_BINDING,
        {
            "metadata": {"name": f"{user}-{cluster_role}", "namespace": namespace},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": cluster_role,
            },
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        },
    )


async def aggregated(client: Client, cluster_role: str, verb: str) -> bool:
    """Whether kube-controller-manager has aggregated the chart's rules into ``cluster_role``."""
    role = await client.get(r.CLUSTER_ROLE, cluster_role)
    return any(
        "crewlet.ai" in rule.get("apiGroups", [])
        and "companies" in rule.get("resources", [])
        and verb in rule.get("verbs", [])
        for rule in role.get("rules") or []
    )


async def test_edit_user_may_run_a_company_but_not_write_an_engine_class(
    installed: Client, control_plane: ControlPlane, client_for: ClientFor, namespace: str
) -> None:
    """ "whoever may edit a namespace may run a company in it ... EngineClasses are not in either
    role: they are the platform's"."""
    await eventually(lambda: aggregated(installed, "edit", "create"), message="edit aggregated")
    await eventually(lambda: aggregated(installed, "admin", "delete"), message="admin aggregated")
    await bind(installed, namespace, "chart-editor", "edit")
    editor = client_for(control_plane.user_config("chart-editor", ()))
    created = await eventually(
        lambda: editor.create(COMPANY, company(namespace, "acme")),
        message="editor creates",
        retry_on=(ForbiddenError,),
    )
    assert created["metadata"]["name"] == "acme"
    await editor.patch(COMPANY, "acme", {"spec": {"suspend": True}}, namespace)
    assert (await editor.list(COMPANY, Scope(namespace))).items
    await editor.get(COMPANY, "acme", namespace, subresource="status")
    with pytest.raises(ForbiddenError):
        await editor.create(ENGINE_CLASS, {"metadata": {"name": f"{namespace}-c"}, "spec": {}})
    with pytest.raises(ForbiddenError):  # only in the namespace it edits
        await editor.create(COMPANY, company("default", f"{namespace}-x"), dry_run=True)
    await editor.delete(COMPANY, "acme", namespace)

    # Not only the RoleBinding's namespace: the edit ClusterRole itself holds no EngineClass.
    user = f"chart-cluster-editor-{namespace}"[:60]
    binding = f"{namespace}-edit"
    await installed.create(
        r.CLUSTER_ROLE_BINDING,
        {
            "metadata": {"name": binding},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "edit",
            },
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        },
    )
    try:
        cluster_editor = client_for(control_plane.user_config(user, ()))
        await eventually(
            lambda: cluster_editor.create(COMPANY, company(namespace, "b"), dry_run=True),
            message="cluster-wide edit",
            retry_on=(ForbiddenError,),
        )
        with pytest.raises(ForbiddenError):
            await cluster_editor.create(
                ENGINE_CLASS, {"metadata": {"name": f"{namespace}-c"}, "spec": {}}, dry_run=True
            )
        with pytest.raises(ForbiddenError):
            await cluster_editor.patch(ENGINE_CLASS, "anything", {"spec": {}})
    finally:
        await installed.delete(r.CLUSTER_ROLE_BINDING, binding)


async def test_view_user_may_read_companies_but_not_write_them(
    installed: Client, control_plane: ControlPlane, client_for: ClientFor, namespace: str
) -> None:
    await eventually(lambda: aggregated(installed, "view", "list"), message="view aggregated")
    await installed.create(COMPANY, company(namespace, "acme"))
    await bind(installed, namespace, "chart-viewer", "view")
    viewer = client_for(control_plane.user_config("chart-viewer", ()))
    got = await eventually(
        lambda: viewer.get(COMPANY, "acme", namespace),
        message="viewer reads",
        retry_on=(ForbiddenError,),
    )
    assert got["spec"]["className"] == "standard"
    assert [
        c["metadata"]["name"] for c in (await viewer.list(COMPANY, Scope(namespace))).items
    ] == ["acme"]
    await viewer.get(COMPANY, "acme", namespace, subresource="status")
    with pytest.raises(ForbiddenError):
        await viewer.create(COMPANY, company(namespace, "other"), dry_run=True)
    with pytest.raises(ForbiddenError):
        await viewer.patch(COMPANY, "acme", {"spec": {"suspend": True}}, namespace)
    with pytest.raises(ForbiddenError):
        await viewer.delete(COMPANY, "acme", namespace)
    with pytest.raises(ForbiddenError):
        await viewer.list(ENGINE_CLASS)
