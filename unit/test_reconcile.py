"""The Crewlet reconcile: goldens of what it writes, idempotence, refusals, suspension, versions.

Goldens live in ``unit/golden/<case>.yaml``; after a deliberate change, regenerate them with
``UPDATE_GOLDEN=1 .venv/bin/python -m pytest unit/test_reconcile.py`` and review the diff.
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import functools
import json
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from crewlet_operator import (
    HTTP_ROUTE,
    INGRESS,
    NETWORK_POLICY,
    PERSISTENT_VOLUME_CLAIM,
    POD_DISRUPTION_BUDGET,
    SECRET,
    STATEFUL_SET,
    find_condition,
)
from crewlet_operator.diff import hash_of
from crewlet_operator.objects import name as object_name
from crewlet_operator_daemon import (
    ClusterFacts,
    Observed,
    Plan,
    desired_children,
    engine,
    inputs,
    naming,
    reconcile,
    versions,
)
from crewlet_operator_daemon.references import referenced_secrets, secret_refs
from crewlet_operator_daemon.status import verdict

Object = dict[str, Any]

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
LATER = NOW + timedelta(hours=1)
NAMESPACE = "tenant-a"
COMPANY_UID = "6f1d2c3b-0000-4000-8000-000000000001"
TOKEN = "operator-token-for-tests"
IMAGE = "ghcr.io/crewlet/crewlet-operator/engine:v0.2.0"
DIGEST_IMAGE = "registry.example.com/crewlet@sha256:" + "a" * 64

# Plain secret values: none may ever show up in a status, a condition or a config file.
PLAIN = {
    "anthropic": "sk-ant-PLAINTEXT-ANTHROPIC",
    "openai": "sk-PLAINTEXT-OPENAI",
    "headers": "x-honeycomb-team=PLAINTEXT-HONEYCOMB",
    "slack": "xoxb-PLAINTEXT-SLACK",
    "id": "AKIAPLAINTEXTKEYID",
    "secret": "PLAINTEXT/secret+access+key",
}


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


SOURCES: dict[tuple[str, str], Object | None] = {
    ("platform", "model-keys"): {
        "metadata": {"name": "model-keys", "namespace": "platform"},
        "data": {"anthropic": b64(PLAIN["anthropic"]), "openai": b64(PLAIN["openai"])},
    },
    ("platform", "telemetry"): {
        "metadata": {"name": "telemetry", "namespace": "platform"},
        "data": {"headers": b64(PLAIN["headers"])},
    },
    ("platform", "integrations"): {
        "metadata": {"name": "integrations", "namespace": "platform"},
        "data": {"slack": b64(PLAIN["slack"])},
    },
    ("platform", "s3"): {
        "metadata": {"name": "s3", "namespace": "platform"},
        "data": {"id": b64(PLAIN["id"]), "secret": b64(PLAIN["secret"])},
    },
}


def ref(name: str, key: str) -> Object:
    return {"namespace": "platform", "name": name, "key": key}


def make_company(name: str = "acme", **spec: Any) -> Object:
    return {
        "apiVersion": "crewlet.ai/v1alpha1",
        "kind": "Company",
        "metadata": {"name": name, "namespace": NAMESPACE, "uid": COMPANY_UID, "generation": 3},
        "spec": {"className": "standard", **spec},
    }


def make_class(image: str = IMAGE, **spec: Any) -> Object:
    return {
        "apiVersion": "crewlet.ai/v1alpha1",
        "kind": "EngineClass",
        "metadata": {"name": "standard", "generation": 1},
        "spec": {"engine": {"image": image}, **spec},
    }


S3_STATIC = {
    "s3": {
        "bucket": "crewlet-files",
        "region": "eu-west-1",
        "prefix": "prod",
        "credentials": {
            "accessKeyId": ref("s3", "id"),
            "secretAccessKey": ref("s3", "secret"),
        },
    }
}
S3_WORKLOAD_IDENTITY = {
    "s3": {
        "bucket": "crewlet-files",
        "region": "us-east-1",
        "endpoint": "https://minio.storage.svc:9000",
        "pathStyle": True,
    }
}
GATEWAY = {
    "gateway": {"parentRefs": [{"name": "public", "namespace": "gateways", "sectionName": "https"}]}
}
INGRESS_EXPOSURE = {"ingress": {"className": "nginx", "tlsSecretName": "webhooks-tls"}}


@dataclass(frozen=True)
class Case:
    """One entry of the matrix: a class, the cluster's facts and a company."""

    name: str
    engine_class: Object
    gateway_api: bool
    company: Object = field(default_factory=lambda: make_company(webhookHostname="acme.example"))


CASES: dict[str, Case] = {
    "plain-ingress": Case(
        "plain-ingress", make_class(exposure=INGRESS_EXPOSURE), gateway_api=False
    ),
    "s3-static-gateway": Case(
        "s3-static-gateway",
        make_class(
            files=S3_STATIC,
            storage={"size": "9Gi"},
            exposure=GATEWAY,
            modelKeys=[
                {"name": "ANTHROPIC_API_KEY", "secretRef": ref("model-keys", "anthropic")},
                {"name": "OPENAI_API_KEY", "secretRef": ref("model-keys", "openai")},
            ],
            telemetry={
                "endpoint": "http://otel-collector.observability:4318",
                "protocol": "http/protobuf",
                "headers": ref("telemetry", "headers"),
            },
            env=[
                {"name": "SLACK_BOT_TOKEN", "secretRef": ref("integrations", "slack")},
                {"name": "CREWLET_LOG_LEVEL", "value": "info"},
            ],
            networkPolicy={
                "apiPeers": [
                    {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "gw"}}}
                ]
            },
        ),
        gateway_api=True,
    ),
    "s3-workload-identity-gateway": Case(
        "s3-workload-identity-gateway",
        make_class(
            files=S3_WORKLOAD_IDENTITY,
            exposure=GATEWAY,
            serviceAccount={
                "annotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/crewlet"}
            },
        ),
        gateway_api=True,
    ),
    "scheduling-digest-ingress": Case(
        "scheduling-digest-ingress",
        make_class(
            image=DIGEST_IMAGE,
            engine={
                "image": DIGEST_IMAGE,
                "imagePullPolicy": "IfNotPresent",
                "imagePullSecrets": [{"name": "registry-creds"}],
            },
            storage={"storageClassName": "fast-expandable", "size": "50Gi"},
            scheduling={
                "nodeSelector": {"node-role.example.com/crewlet": "true"},
                "tolerations": [
                    {
                        "key": "dedicated",
                        "operator": "Equal",
                        "value": "crewlet",
                        "effect": "NoSchedule",
                    }
                ],
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {
                                            "key": "kubernetes.io/arch",
                                            "operator": "In",
                                            "values": ["amd64", "arm64"],
                                        }
                                    ]
                                }
                            ]
                        }
                    }
                },
                "priorityClassName": "crewlet-engines",
                "topologySpreadConstraints": [
                    {
                        "maxSkew": 1,
                        "topologyKey": "topology.kubernetes.io/zone",
                        "whenUnsatisfiable": "ScheduleAnyway",
                    }
                ],
            },
            resources={
                "data": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "2Gi"}},
                "seats": {"requests": {"cpu": "250m", "memory": "512Mi"}},
            },
            seats={"replicas": 2, "minReplicas": 1, "maxReplicas": 4},
        ),
        gateway_api=False,
        company=make_company(seats={"replicas": 3}),
    ),
}


def facts(gateway_api: bool) -> ClusterFacts:
    return ClusterFacts(gateway_api=gateway_api, operator_namespace="crewlet-operator-system")


def fixed_token() -> str:
    return TOKEN


def never_token() -> str:
    raise AssertionError("a token was generated although one exists")


# --- A small API server: feed what was applied back as observed ------------------------------


@dataclass
class World:
    """The objects a plan wrote, as the API server would hold them."""

    children: dict[tuple[str, str], Object] = field(default_factory=dict)
    claim: Object | None = None
    status: Object | None = None
    plans: list[Plan] = field(default_factory=list)
    uids: int = 0

    def observed(self, secrets: dict[tuple[str, str], Object | None] | None = None) -> Observed:
        return Observed(
            children=copy.deepcopy(self.children),
            secrets=dict(SOURCES if secrets is None else secrets),
            data_claim=copy.deepcopy(self.claim),
        )

    def with_status(self, company: Object) -> Object:
        result = copy.deepcopy(company)
        if self.status is not None:
            result["status"] = copy.deepcopy(self.status)
        return result

    def execute(self, plan: Plan) -> None:
        self.plans.append(plan)
        for delete in plan.deletes:
            assert delete.resource != PERSISTENT_VOLUME_CLAIM
            self.children.pop((delete.resource.kind, delete.name))
        for apply in plan.applies:
            self._apply(apply.resource.kind, copy.deepcopy(apply.object))
        if plan.status is not None:
            self.status = copy.deepcopy(plan.status)
        if plan.claim_annotations:
            assert self.claim is not None
            self.claim["metadata"].setdefault("annotations", {}).update(plan.claim_annotations)
        data = self.children.get(("StatefulSet", "acme-data"))
        if data is not None and self.claim is None:
            self.claim = {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {
                    "name": "data-acme-data-0",
                    "namespace": NAMESPACE,
                    "labels": naming.labels("acme", "data"),
                },
            }

    def _apply(self, kind: str, obj: Object) -> None:
        key = (kind, obj["metadata"]["name"])
        old = self.children.get(key)
        self.uids += 1
        meta = obj["metadata"]
        meta["uid"] = old["metadata"]["uid"] if old else f"uid-{self.uids}"
        if kind == "StatefulSet":
            generation = (old["metadata"]["generation"] + 1) if old else 1
            meta["generation"] = generation
            # The rollout completes at once, and the data pod turns ready.
            obj["status"] = {
                "observedGeneration": generation,
                "replicas": obj["spec"]["replicas"],
                "readyReplicas": obj["spec"]["replicas"],
            }
        self.children[key] = obj


def converge(
    company: Object,
    engine_class: Object | None,
    gateway_api: bool,
    world: World | None = None,
    *,
    namespace_labels: dict[str, str] | None = None,
    now: datetime = NOW,
    max_rounds: int = 4,
) -> World:
    """Reconcile and execute until the plan is empty; fail if it never settles."""
    world = world or World()
    for _ in range(max_rounds):
        plan = reconcile(
            world.with_status(company),
            engine_class,
            namespace_labels or {},
            world.observed(),
            facts(gateway_api),
            now=now,
            token_factory=fixed_token,
        )
        if plan.empty:
            return world
        world.execute(plan)
    raise AssertionError(f"no empty plan after {max_rounds} rounds: {world.plans[-1]}")


def plan_for(
    world: World,
    company: Object,
    engine_class: Object | None,
    gateway_api: bool = False,
    *,
    namespace_labels: dict[str, str] | None = None,
    secrets: dict[tuple[str, str], Object | None] | None = None,
    now: datetime = LATER,
) -> Plan:
    return reconcile(
        world.with_status(company),
        engine_class,
        namespace_labels or {},
        world.observed(secrets),
        facts(gateway_api),
        now=now,
        token_factory=never_token
        if ("Secret", "acme-api-token") in world.children
        else fixed_token,
    )


def accepted(plan_or_status: Plan | Object | None) -> Object:
    status = plan_or_status.status if isinstance(plan_or_status, Plan) else plan_or_status
    assert status is not None
    found = find_condition(status["conditions"], "Accepted")
    assert found is not None
    return found


def cond(status: Object | None, type_: str) -> Object:
    assert status is not None
    found = find_condition(status["conditions"], type_)
    assert found is not None
    return found


def applied(plan: Plan, kind: str, name: str) -> Object | None:
    for apply in plan.applies:
        if apply.resource.kind == kind and apply.object["metadata"]["name"] == name:
            return apply.object
    return None


# --- Goldens ------------------------------------------------------------------------------


def render(case: Case) -> dict[Path, str]:
    """The case's children, and (readable, beside them) the crewlet.yaml files they carry."""
    children = desired_children(
        case.company,
        case.engine_class,
        Observed(secrets=dict(SOURCES)),
        facts(case.gateway_api),
        token_factory=fixed_token,
    )
    objects = [child.object for child in children]
    files = {Path(f"{case.name}.yaml"): yaml.safe_dump_all(objects, sort_keys=False)}
    (config,) = [o for o in objects if o["metadata"]["name"] == "acme-config"]
    for key, encoded in config["data"].items():
        files[Path("engine") / f"{case.name}.{key}"] = base64.b64decode(encoded).decode()
    return files


def check_golden(relative: Path, text: str) -> None:
    path = GOLDEN / relative
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"{path} is missing: run with UPDATE_GOLDEN=1 to create it"
    assert text == path.read_text(), f"{path} differs: review, then rerun with UPDATE_GOLDEN=1"


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden(name: str) -> None:
    for relative, text in render(CASES[name]).items():
        check_golden(relative, text)


def test_no_golden_is_stale() -> None:
    expected = {relative for case in CASES.values() for relative in render(case)}
    assert {p.relative_to(GOLDEN) for p in GOLDEN.rglob("*.yaml")} == expected


# --- Idempotence --------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(CASES))
def test_reconcile_over_its_own_desired_state_is_empty(name: str) -> None:
    case = CASES[name]
    world = converge(case.company, case.engine_class, case.gateway_api)
    assert len(world.plans) <= 3
    # And stays empty later on: no condition time moves without a flip.
    plan = plan_for(world, case.company, case.engine_class, case.gateway_api, now=LATER)
    assert plan.empty, plan
    assert cond(world.status, "Ready")["status"] == "True"
    assert accepted(world.status)["status"] == "True"


@pytest.mark.parametrize("name", sorted(CASES))
def test_first_plan_creates_every_child_and_nothing_else(name: str) -> None:
    case = CASES[name]
    plan = reconcile(
        case.company,
        case.engine_class,
        {},
        Observed(secrets=dict(SOURCES)),
        facts(case.gateway_api),
        now=NOW,
        token_factory=fixed_token,
    )
    kinds = sorted(a.resource.kind for a in plan.applies)
    route = ["HTTPRoute"] if case.gateway_api else ["Ingress"]
    if not case.company["spec"].get("webhookHostname"):
        route = []
    assert kinds == sorted(
        [
            "ServiceAccount",
            "Secret",
            "Secret",
            "Secret",
            "NetworkPolicy",
            "NetworkPolicy",
            "Service",
            "Service",
            "Service",
            "PodDisruptionBudget",
            "PodDisruptionBudget",
            "StatefulSet",
            "StatefulSet",
            *route,
        ]
    )
    assert plan.deletes == []
    assert cond(plan.status, "Ready")["reason"] == "Progressing"


def test_only_changed_children_are_applied() -> None:
    case = CASES["plain-ingress"]
    world = converge(case.company, case.engine_class, False)
    changed = make_class(exposure={"ingress": {"className": "traefik"}})
    plan = plan_for(world, case.company, changed)
    assert [(a.resource.kind, a.object["metadata"]["name"]) for a in plan.applies] == [
        ("Ingress", "acme-webhooks")
    ]


# --- Every child ----------------------------------------------------------------------------


def all_children() -> list[Object]:
    objects = []
    for case in CASES.values():
        objects += [
            c.object
            for c in desired_children(
                case.company,
                case.engine_class,
                Observed(secrets=dict(SOURCES)),
                facts(case.gateway_api),
                token_factory=fixed_token,
            )
        ]
    return objects


def test_every_child_is_labelled_and_owned_by_the_company() -> None:
    for obj in all_children():
        meta = obj["metadata"]
        assert meta["namespace"] == NAMESPACE
        assert meta["labels"][naming.MANAGED_BY_LABEL] == "crewlet-operator"
        assert meta["labels"][naming.NAME_LABEL] == "crewlet"
        assert meta["labels"][naming.COMPANY_LABEL] == "acme"
        assert meta["ownerReferences"] == [
            {
                "apiVersion": "crewlet.ai/v1alpha1",
                "kind": "Company",
                "name": "acme",
                "uid": COMPANY_UID,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]


def test_every_budget_and_policy_selects_exactly_one_companys_component() -> None:
    selecting = [o for o in all_children() if o["kind"] in ("PodDisruptionBudget", "NetworkPolicy")]
    assert len(selecting) == 4 * len(CASES)
    for obj in selecting:
        spec = obj["spec"]
        selector = spec["selector"] if obj["kind"] == "PodDisruptionBudget" else spec["podSelector"]
        assert set(selector) == {"matchLabels"}
        labels = selector["matchLabels"]
        assert set(labels) == {naming.NAME_LABEL, naming.COMPONENT_LABEL, naming.COMPANY_LABEL}
        assert labels[naming.NAME_LABEL] == "crewlet"
        assert labels[naming.COMPANY_LABEL] == "acme"
        assert labels[naming.COMPONENT_LABEL] in ("data", "seats")
        assert labels[naming.COMPONENT_LABEL] == obj["metadata"]["labels"][naming.COMPONENT_LABEL]


def test_pods_run_restricted_as_the_engine_account() -> None:
    for sts in (o for o in all_children() if o["kind"] == "StatefulSet"):
        pod = sts["spec"]["template"]["spec"]
        assert pod["serviceAccountName"] == "acme-engine"
        for forbidden in ("hostNetwork", "hostPID", "hostIPC"):
            assert forbidden not in pod
        assert all("hostPath" not in v for v in pod["volumes"])
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        (container,) = pod["containers"]
        assert container["args"] == ["run", "-config", "/etc/crewlet/crewlet.yaml"]
        assert "command" not in container  # the image's tini entrypoint is kept
        sc = container["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["capabilities"] == {"drop": ["ALL"]}
        assert sc["readOnlyRootFilesystem"] is True
        assert "privileged" not in sc
        startup = container["startupProbe"]
        assert startup["periodSeconds"] * startup["failureThreshold"] >= 300
        labels = sts["spec"]["template"]["metadata"]["labels"]
        assert labels[naming.COMPONENT_LABEL] in ("data", "seats")


def test_every_secret_is_opaque() -> None:
    secrets = [o for o in all_children() if o["kind"] == "Secret"]
    assert secrets
    assert all(s["type"] == "Opaque" for s in secrets)


def test_workload_identity_mounts_the_account_token_and_static_keys_do_not() -> None:
    def automount(name: str) -> set[bool]:
        case = CASES[name]
        children = desired_children(
            case.company,
            case.engine_class,
            Observed(secrets=dict(SOURCES)),
            facts(case.gateway_api),
            token_factory=fixed_token,
        )
        return {
            c.object["spec"]["template"]["spec"]["automountServiceAccountToken"]
            for c in children
            if c.resource == STATEFUL_SET
        }

    assert automount("s3-workload-identity-gateway") == {True}
    assert automount("s3-static-gateway") == {False}
    assert automount("plain-ingress") == {False}


def test_env_secret_copies_each_key_under_its_variable() -> None:
    case = CASES["s3-static-gateway"]
    plan = reconcile(
        case.company,
        case.engine_class,
        {},
        Observed(secrets=dict(SOURCES)),
        facts(True),
        now=NOW,
        token_factory=fixed_token,
    )
    env_secret = applied(plan, "Secret", "acme-env")
    assert env_secret is not None
    assert env_secret["data"] == {
        "ANTHROPIC_API_KEY": b64(PLAIN["anthropic"]),
        "OPENAI_API_KEY": b64(PLAIN["openai"]),
        "OTEL_EXPORTER_OTLP_HEADERS": b64(PLAIN["headers"]),
        "CREWLET_S3_ACCESS_KEY_ID": b64(PLAIN["id"]),
        "CREWLET_S3_SECRET_ACCESS_KEY": b64(PLAIN["secret"]),
        "SLACK_BOT_TOKEN": b64(PLAIN["slack"]),
    }
    token = applied(plan, "Secret", "acme-api-token")
    assert token is not None and token["data"] == {"token": b64(TOKEN)}


def test_config_files_hold_references_never_values() -> None:
    case = CASES["s3-static-gateway"]
    plan = reconcile(
        case.company,
        case.engine_class,
        {},
        Observed(secrets=dict(SOURCES)),
        facts(True),
        now=NOW,
        token_factory=fixed_token,
    )
    config = applied(plan, "Secret", "acme-config")
    assert config is not None
    assert set(config["data"]) == {"crewlet-data.yaml", "crewlet-seats.yaml"}
    for encoded in config["data"].values():
        text = base64.b64decode(encoded).decode()
        assert "${CREWLET_S3_SECRET_ACCESS_KEY}" in text
        for value in [*PLAIN.values(), TOKEN]:
            assert value not in text
            assert b64(value) not in text
        parsed = yaml.safe_load(text)
        assert engine.config_errors(parsed) == []


def test_existing_token_is_kept_and_a_new_one_is_random() -> None:
    case = CASES["plain-ingress"]
    world = converge(case.company, case.engine_class, False)
    world.children[("Secret", "acme-api-token")]["data"]["token"] = b64("rotated-by-hand")
    plan = plan_for(world, case.company, case.engine_class)  # never_token: no generation
    assert applied(plan, "Secret", "acme-api-token") is None
    first = reconcile(case.company, case.engine_class, {}, Observed(), facts(False), now=NOW)
    second = reconcile(case.company, case.engine_class, {}, Observed(), facts(False), now=NOW)
    tokens = [applied(p, "Secret", "acme-api-token") for p in (first, second)]
    assert tokens[0] is not None and tokens[1] is not None
    assert tokens[0]["data"]["token"] != tokens[1]["data"]["token"]
    assert len(base64.b64decode(tokens[0]["data"]["token"])) >= 43


def test_a_rotated_secret_restarts_the_pods_through_the_secrets_hash() -> None:
    case = CASES["s3-static-gateway"]
    world = converge(case.company, case.engine_class, True)
    rotated = copy.deepcopy(SOURCES)
    source = rotated[("platform", "model-keys")]
    assert source is not None
    source["data"]["anthropic"] = b64("sk-ant-ROTATED")
    plan = plan_for(world, case.company, case.engine_class, True, secrets=rotated)
    env = applied(plan, "Secret", "acme-env")
    assert env is not None and env["data"]["ANTHROPIC_API_KEY"] == b64("sk-ant-ROTATED")
    for name in ("acme-data", "acme-seats"):
        sts = applied(plan, "StatefulSet", name)
        assert sts is not None
        old = world.children[("StatefulSet", name)]["spec"]["template"]["metadata"]
        new = sts["spec"]["template"]["metadata"]
        key = naming.SECRETS_HASH_ANNOTATION
        assert new["annotations"][key] != old["annotations"][key]
        assert "sk-ant-ROTATED" not in json.dumps(sts)


# --- Config changes -------------------------------------------------------------------------


def config_hash(plan_or_world: Plan | World, component: str) -> str:
    name = f"acme-{component}"
    if isinstance(plan_or_world, Plan):
        sts = applied(plan_or_world, "StatefulSet", name)
    else:
        sts = plan_or_world.children[("StatefulSet", name)]
    assert sts is not None
    return str(sts["spec"]["template"]["metadata"]["annotations"][naming.CONFIG_HASH_ANNOTATION])


def test_a_config_change_changes_the_config_hash() -> None:
    case = CASES["s3-workload-identity-gateway"]
    world = converge(case.company, case.engine_class, True)
    changed = copy.deepcopy(case.engine_class)
    changed["spec"]["files"]["s3"]["bucket"] = "another-bucket"
    plan = plan_for(world, case.company, changed, True)
    assert applied(plan, "Secret", "acme-config") is not None
    for component in ("data", "seats"):
        assert config_hash(plan, component) != config_hash(world, component)
    assert cond(plan.status, "Ready")["reason"] == "Progressing"


def test_config_hash_is_the_hash_of_the_rendered_file() -> None:
    case = CASES["plain-ingress"]
    plan = reconcile(
        case.company,
        case.engine_class,
        {},
        Observed(),
        facts(False),
        now=NOW,
        token_factory=fixed_token,
    )
    config = applied(plan, "Secret", "acme-config")
    assert config is not None
    for component in ("data", "seats"):
        text = base64.b64decode(config["data"][f"crewlet-{component}.yaml"]).decode()
        assert config_hash(plan, component) == hash_of(yaml.safe_load(text))


def test_a_larger_volume_keeps_the_existing_claim_template_and_says_how_to_grow() -> None:
    case = CASES["plain-ingress"]
    world = converge(case.company, case.engine_class, False)
    bigger = copy.deepcopy(case.engine_class)
    bigger["spec"]["storage"] = {"size": "100Gi"}
    plan = plan_for(world, case.company, bigger)
    data = applied(plan, "StatefulSet", "acme-data")
    # The data file's broker share follows the class, so the StatefulSet is applied, but its
    # claim template stays what the StatefulSet was created with.
    assert data is not None
    template = data["spec"]["volumeClaimTemplates"][0]
    assert template["spec"]["resources"]["requests"]["storage"] == "12Gi"
    assert "expand the claim data-acme-data-0" in accepted(plan)["message"]


# --- Webhook routes ---------------------------------------------------------------------------


def test_gateway_api_gets_an_http_route_and_drops_an_old_ingress() -> None:
    company = make_company(webhookHostname="acme.example")
    cls = make_class(exposure={**GATEWAY, **INGRESS_EXPOSURE})
    world = converge(company, cls, gateway_api=False)
    assert ("Ingress", "acme-webhooks") in world.children
    plan = plan_for(world, company, cls, gateway_api=True)
    route = applied(plan, "HTTPRoute", "acme-webhooks")
    assert route is not None
    assert route["spec"]["hostnames"] == ["acme.example"]
    assert route["spec"]["rules"][0]["backendRefs"] == [{"name": "acme-api", "port": 8080}]
    assert [(d.resource, d.name) for d in plan.deletes] == [(INGRESS, "acme-webhooks")]
    assert plan.deletes[0].uid == world.children[("Ingress", "acme-webhooks")]["metadata"]["uid"]


def test_ingress_replaces_an_old_http_route() -> None:
    company = make_company(webhookHostname="acme.example")
    cls = make_class(exposure={**GATEWAY, **INGRESS_EXPOSURE})
    world = converge(company, cls, gateway_api=True)
    plan = plan_for(world, company, cls, gateway_api=False)
    ingress = applied(plan, "Ingress", "acme-webhooks")
    assert ingress is not None
    assert ingress["spec"]["ingressClassName"] == "nginx"
    assert ingress["spec"]["tls"] == [{"hosts": ["acme.example"], "secretName": "webhooks-tls"}]
    assert [(d.resource, d.name) for d in plan.deletes] == [(HTTP_ROUTE, "acme-webhooks")]


def test_no_hostname_no_route_and_an_old_one_is_deleted() -> None:
    with_host = make_company(webhookHostname="acme.example")
    cls = make_class(exposure=GATEWAY)
    world = converge(with_host, cls, gateway_api=True)
    plan = plan_for(world, make_company(), cls, gateway_api=True)
    assert [(d.resource, d.name) for d in plan.deletes] == [(HTTP_ROUTE, "acme-webhooks")]
    assert plan.applies == []


def test_gateway_without_parent_refs_says_so() -> None:
    company = make_company(webhookHostname="acme.example")
    plan = reconcile(
        company, make_class(), {}, Observed(), facts(True), now=NOW, token_factory=fixed_token
    )
    assert applied(plan, "HTTPRoute", "acme-webhooks") is None
    assert "sets no spec.exposure.gateway.parentRefs" in accepted(plan)["message"]


# --- Network policy -------------------------------------------------------------------------


def test_data_policy_admits_the_leaf_port_only_to_the_companys_pods() -> None:
    case = CASES["s3-static-gateway"]
    children = {
        (c.resource.kind, c.object["metadata"]["name"]): c.object
        for c in desired_children(
            case.company,
            case.engine_class,
            Observed(secrets=dict(SOURCES)),
            facts(True),
            token_factory=fixed_token,
        )
    }
    data = children[("NetworkPolicy", "acme-data")]["spec"]
    assert data["policyTypes"] == ["Ingress"]
    leaf, api = data["ingress"]
    own = {
        "podSelector": {"matchLabels": {naming.NAME_LABEL: "crewlet", naming.COMPANY_LABEL: "acme"}}
    }
    operator = {
        "namespaceSelector": {
            "matchLabels": {"kubernetes.io/metadata.name": "crewlet-operator-system"}
        }
    }
    assert leaf == {"from": [own], "ports": [{"protocol": "TCP", "port": 7422}]}
    assert api["ports"] == [{"protocol": "TCP", "port": 8080}]
    assert api["from"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "gw"}}},
        operator,
        own,
    ]
    seats = children[("NetworkPolicy", "acme-seats")]["spec"]
    assert seats["ingress"] == [{"from": [operator], "ports": [{"protocol": "TCP", "port": 8080}]}]


# --- Refusals -----------------------------------------------------------------------------


def assert_touches_nothing(plan: Plan) -> None:
    assert plan.applies == []
    assert plan.deletes == []


def test_class_not_found() -> None:
    plan = reconcile(make_company(), None, {}, Observed(), facts(False), now=NOW)
    assert_touches_nothing(plan)
    found = accepted(plan)
    assert (found["status"], found["reason"]) == ("False", "ClassNotFound")
    assert "EngineClass standard does not exist" in found["message"]
    assert found["observedGeneration"] == 3


def test_class_not_found_keeps_a_running_company_as_it_is() -> None:
    case = CASES["plain-ingress"]
    world = converge(case.company, case.engine_class, False)
    # Even with the hostname gone, a refused company keeps its route: nothing is deleted.
    plan = plan_for(world, make_company(), None)
    assert_touches_nothing(plan)
    assert accepted(plan)["reason"] == "ClassNotFound"
    assert cond(plan.status, "Ready")["status"] == "True"  # the engine still serves
    assert plan.status is not None and plan.status["engineImage"] == IMAGE


def test_class_not_allowed() -> None:
    cls = make_class(allowedNamespaces={"matchLabels": {"crewlet.ai/tenant": "true"}})
    plan = reconcile(make_company(), cls, {"team": "x"}, Observed(), facts(False), now=NOW)
    assert_touches_nothing(plan)
    found = accepted(plan)
    assert found["reason"] == "ClassNotAllowed"
    assert found["message"] == (
        "EngineClass standard does not admit namespace tenant-a: label the namespace to match "
        "spec.allowedNamespaces or use another class"
    )
    admitted = reconcile(
        make_company(),
        cls,
        {"crewlet.ai/tenant": "true"},
        Observed(),
        facts(False),
        now=NOW,
        token_factory=fixed_token,
    )
    assert accepted(admitted)["status"] == "True"
    assert admitted.applies


def test_class_not_allowed_is_judged_before_secrets_are_named() -> None:
    cls = copy.deepcopy(CASES["s3-static-gateway"].engine_class)
    cls["spec"]["allowedNamespaces"] = {"matchLabels": {"crewlet.ai/tenant": "true"}}
    plan = reconcile(make_company(), cls, {}, Observed(), facts(True), now=NOW)
    assert accepted(plan)["reason"] == "ClassNotAllowed"
    assert "platform" not in accepted(plan)["message"]


@pytest.mark.parametrize(
    "secrets",
    [
        pytest.param({}, id="secret-missing"),
        pytest.param({**SOURCES, ("platform", "s3"): None}, id="secret-none"),
        pytest.param(
            {**SOURCES, ("platform", "s3"): {"data": {"id": b64(PLAIN["id"])}}},
            id="key-missing",
        ),
    ],
)
def test_secret_not_found(secrets: dict[tuple[str, str], Object | None]) -> None:
    case = CASES["s3-static-gateway"]
    plan = reconcile(
        case.company, case.engine_class, {}, Observed(secrets=secrets), facts(True), now=NOW
    )
    assert_touches_nothing(plan)
    found = accepted(plan)
    assert found["reason"] == "SecretNotFound"
    assert "platform/s3" in found["message"]
    assert_no_secret_values(plan)


def test_a_secret_the_operator_may_not_read_is_reported_as_unreadable() -> None:
    case = CASES["s3-static-gateway"]
    denied = 'secrets "s3" is forbidden: cannot list resource "secrets"'
    observed = Observed(
        secrets={k: v for k, v in SOURCES.items() if k != ("platform", "s3")},
        unreadable_secrets={("platform", "s3"): denied},
    )
    plan = reconcile(case.company, case.engine_class, {}, observed, facts(True), now=NOW)
    assert_touches_nothing(plan)
    found = accepted(plan)
    assert found["reason"] == "SecretUnreadable"
    assert "platform/s3" in found["message"] and denied in found["message"]
    assert "does not exist" not in found["message"]
    assert_no_secret_values(plan)


@pytest.mark.parametrize(
    ("rejection", "policy_named"),
    [
        ('StatefulSet "acme-data" is invalid: spec.template.spec.tolerations[0]', False),
        ("ValidatingAdmissionPolicy 'crewlet-operator-manager-writes' denied request", True),
    ],
)
def test_a_child_the_api_server_rejected_refuses_the_company_and_touches_nothing(
    rejection: str, policy_named: bool
) -> None:
    case = CASES["s3-static-gateway"]
    world = converge(case.company, case.engine_class, True)
    observed = dataclasses.replace(world.observed(), rejection=rejection)
    plan = reconcile(
        world.with_status(case.company), case.engine_class, {}, observed, facts(True), now=NOW
    )
    assert_touches_nothing(plan)
    found = accepted(plan)
    assert (found["status"], found["reason"]) == ("False", "InvalidClass")
    assert found["message"].startswith(
        f"the API server refused a child of the company: {rejection}"
    )
    assert "ask the platform's administrators to fix EngineClass" in found["message"]
    assert ("the values of the operator's admission policy" in found["message"]) == policy_named


REJECTION = 'StatefulSet "acme-data" is invalid: spec.template.spec.tolerations[0]'


def upgraded_world() -> tuple[Object, Object, World]:
    """A running company (its status, children and data claim) whose class now asks for a
    newer engine."""
    company = make_company()
    world = converge(company, make_class(), False)
    newer = make_class(image="ghcr.io/crewlet/crewlet-operator/engine:v0.3.0")
    return world.with_status(company), newer, world


@pytest.mark.parametrize("render_files", [True, False])
@pytest.mark.parametrize("running", [False, True], ids=["new", "running"])
def test_a_plans_refusal_by_the_api_server_is_the_reconcile_of_that_rejection(
    running: bool, render_files: bool
) -> None:
    """What the writer writes when the API server refuses one of a plan's children is what the
    reconcile decides with that answer observed: the plan carries it, and nothing is decided
    again."""
    if running:
        company, engine_class, world = upgraded_world()
    else:
        company, engine_class, world = make_company(), make_class(), World()
    decide = functools.partial(
        reconcile, company, engine_class, {}, facts=facts(False), now=NOW, token_factory=fixed_token
    )
    plan = decide(world.observed(), render_files=render_files)
    assert plan.applies and plan.rejected is not None
    refused = plan.rejected(REJECTION)
    assert refused == decide(dataclasses.replace(world.observed(), rejection=REJECTION))
    assert accepted(refused)["reason"] == "InvalidClass"
    assert refused.rejected is None  # it applies nothing


def test_a_plan_that_applies_nothing_has_nothing_for_the_api_server_to_refuse() -> None:
    world = converge(make_company(), make_class(), False)
    converged = plan_for(world, make_company(), make_class())
    refused = reconcile(make_company(), None, {}, Observed(), facts(False), now=NOW)
    assert converged.empty and converged.rejected is None
    assert refused.rejected is None


def test_a_refusal_before_the_api_servers_comes_first() -> None:
    case = CASES["s3-static-gateway"]
    observed = Observed(rejection="refused")  # and no Secrets: SecretNotFound would come later
    plan = reconcile(case.company, None, {}, observed, facts(True), now=NOW)
    assert accepted(plan)["reason"] == "ClassNotFound"


@pytest.mark.parametrize(
    ("resources", "named"),
    [
        ({"data": {"requests": {"cpu": "lots"}}}, "spec.resources.data.requests.cpu is 'lots'"),
        ({"seats": {"limits": {"memory": "1 Gi"}}}, "spec.resources.seats.limits.memory"),
        ({"seats": {"limits": {"memory": None}}}, "spec.resources.seats.limits.memory"),
    ],
)
def test_a_request_or_limit_that_is_no_quantity_is_an_invalid_class(
    resources: Object, named: str
) -> None:
    plan = reconcile(
        make_company(), make_class(resources=resources), {}, Observed(), facts(False), now=NOW
    )
    assert_touches_nothing(plan)
    assert accepted(plan)["reason"] == "InvalidClass"
    assert named in accepted(plan)["message"]


def test_quantities_in_every_spelling_are_accepted() -> None:
    resources = {
        "data": {"requests": {"cpu": "500m", "memory": 1073741824}, "limits": {"x": "1e3"}}
    }
    plan = reconcile(
        make_company(), make_class(resources=resources), {}, Observed(), facts(False), now=NOW
    )
    assert accepted(plan)["status"] == "True"


def test_an_unparseable_class_references_no_secret() -> None:
    assert secret_refs({"spec": {"storage": {"size": "12Gi"}}}) == []
    assert referenced_secrets({"spec": {"engine": {"image": "Ghcr.io//X"}}}) == set()


def test_a_class_s_references_are_read_again_when_its_resource_version_changes() -> None:
    engine_class = make_class(modelKeys=[{"name": "K", "secretRef": ref("keys", "k")}])
    engine_class["metadata"].update(uid="u-refs", resourceVersion="1")
    first = referenced_secrets(engine_class)
    assert first == {("platform", "keys")}
    engine_class["spec"]["modelKeys"] = []  # what an update would bring ...
    assert referenced_secrets(engine_class) == first  # ... is only read with its version
    engine_class["metadata"]["resourceVersion"] = "2"
    assert referenced_secrets(engine_class) == frozenset()


def test_secret_not_found_leaves_a_running_company_untouched() -> None:
    case = CASES["s3-static-gateway"]
    world = converge(case.company, case.engine_class, True)
    plan = plan_for(world, case.company, case.engine_class, True, secrets={})
    assert_touches_nothing(plan)
    assert accepted(plan)["reason"] == "SecretNotFound"


def test_downgrade_refused_leaves_the_statefulsets_untouched() -> None:
    company = make_company(webhookHostname="acme.example")
    newer = make_class(image="ghcr.io/crewlet/crewlet-operator/engine:v0.3.0")
    world = converge(company, newer, False)
    assert world.status is not None and world.status["highestEngineVersion"] == "0.3.0"
    plan = plan_for(world, company, make_class(image=IMAGE))
    assert_touches_nothing(plan)
    assert applied(plan, "StatefulSet", "acme-data") is None
    found = accepted(plan)
    assert found["reason"] == "DowngradeRefused"
    assert "older than 0.3.0" in found["message"]
    assert "restore the data volume from a backup" in found["message"]
    assert plan.status is not None
    assert plan.status["engineImage"] == "ghcr.io/crewlet/crewlet-operator/engine:v0.3.0"
    assert plan.status["highestEngineVersion"] == "0.3.0"


def test_downgrade_is_refused_from_the_claim_alone() -> None:
    """A Company recreated over a retained claim has no status, but the claim remembers."""
    claim = {
        "metadata": {
            "name": "data-acme-data-0",
            "annotations": {versions.CLAIM_ANNOTATION: "0.10.0"},
        }
    }
    plan = reconcile(
        make_company(),
        make_class(image=IMAGE),
        {},
        Observed(data_claim=claim),
        facts(False),
        now=NOW,
    )
    assert_touches_nothing(plan)
    assert accepted(plan)["reason"] == "DowngradeRefused"
    assert plan.claim_annotations == {}


def test_upgrade_is_accepted_and_raises_the_high_water_mark() -> None:
    company = make_company()
    world = converge(company, make_class(image=IMAGE), False)
    assert world.claim is not None
    assert world.claim["metadata"]["annotations"] == {versions.CLAIM_ANNOTATION: "0.2.0"}
    newer = make_class(image="ghcr.io/crewlet/crewlet-operator/engine:v0.10.0")
    plan = plan_for(world, company, newer)
    assert accepted(plan)["status"] == "True"
    assert plan.claim_annotations == {versions.CLAIM_ANNOTATION: "0.10.0"}
    assert plan.status is not None
    assert plan.status["highestEngineVersion"] == "0.10.0"
    assert plan.status["engineVersion"] == "0.10.0"
    assert plan.status["versionProtection"] == "Ordered"


def test_a_lower_claim_annotation_is_raised_to_the_status_mark() -> None:
    company = make_company()
    world = converge(company, make_class(image=IMAGE), False)
    assert world.claim is not None
    world.claim["metadata"]["annotations"] = {versions.CLAIM_ANNOTATION: "0.1.0"}
    plan = plan_for(world, company, make_class(image=IMAGE))
    assert plan.claim_annotations == {versions.CLAIM_ANNOTATION: "0.2.0"}
    assert plan.applies == []


def test_a_tag_pinned_by_digest_is_still_ordered() -> None:
    """``engine:v0.3.0@sha256:a...`` then ``engine:v0.2.0@sha256:b...`` is DowngradeRefused: the
    tag orders the image whether or not a digest follows it (RELEASING.md pins releases so)."""
    company = make_company()
    engine = "ghcr.io/crewlet/crewlet-operator/engine"
    newer = make_class(image=f"{engine}:v0.3.0@sha256:" + "a" * 64)
    world = converge(company, newer, False)
    assert world.status is not None
    assert world.status["versionProtection"] == "Ordered"
    assert world.status["highestEngineVersion"] == "0.3.0"
    plan = plan_for(world, company, make_class(image=f"{engine}:v0.2.0@sha256:" + "b" * 64))
    assert_touches_nothing(plan)
    found = accepted(plan)
    assert found["reason"] == "DowngradeRefused"
    assert "older than 0.3.0" in found["message"]


def test_digest_images_are_unordered_and_not_protected() -> None:
    company = make_company()
    world = converge(
        company, make_class(image="ghcr.io/crewlet/crewlet-operator/engine:v0.3.0"), False
    )
    plan = plan_for(world, company, make_class(image=DIGEST_IMAGE))
    found = accepted(plan)
    assert found["status"] == "True"
    assert "DowngradeRefused does not protect this company" in found["message"]
    assert plan.status is not None
    assert plan.status["versionProtection"] == "Unordered"
    assert "engineVersion" not in plan.status
    assert plan.status["highestEngineVersion"] == "0.3.0"


def test_invalid_classes_are_refused_with_what_to_fix() -> None:
    small = make_class(storage={"size": "5Gi"})
    reserved = make_class(env=[{"name": "CREWLET_NODE_ID", "value": "x"}])
    twice = make_class(env=[{"name": "A", "value": "1"}, {"name": "A", "value": "2"}])
    unknown = make_class(colour="blue")
    for cls, words in [
        (small, "at least 12Gi"),
        (reserved, "CREWLET_NODE_ID is set by the operator"),
        (twice, "A is set twice"),
        (unknown, "spec.colour"),
    ]:
        plan = reconcile(make_company(), cls, {}, Observed(), facts(False), now=NOW)
        assert_touches_nothing(plan)
        assert accepted(plan)["reason"] == "InvalidClass"
        assert words in accepted(plan)["message"]


def test_a_name_too_long_for_its_children_is_refused() -> None:
    plan = reconcile(make_company("a" * 47), make_class(), {}, Observed(), facts(False), now=NOW)
    assert_touches_nothing(plan)
    assert accepted(plan)["reason"] == "InvalidName"


def test_a_deleted_company_is_left_to_the_garbage_collector() -> None:
    company = make_company()
    company["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert reconcile(company, make_class(), {}, Observed(), facts(False), now=NOW).empty


# --- Suspension and seats -----------------------------------------------------------------


def test_suspension_scales_to_zero_and_keeps_the_claims() -> None:
    case = CASES["scheduling-digest-ingress"]
    world = converge(case.company, case.engine_class, False)
    suspended = copy.deepcopy(case.company)
    suspended["spec"]["suspend"] = True
    world = converge(suspended, case.engine_class, False, world, now=LATER)
    for name in ("acme-data", "acme-seats"):
        assert world.children[("StatefulSet", name)]["spec"]["replicas"] == 0
    data = world.children[("StatefulSet", "acme-data")]["spec"]
    assert data["persistentVolumeClaimRetentionPolicy"] == {
        "whenDeleted": "Retain",
        "whenScaled": "Retain",
    }
    assert world.claim is not None
    assert cond(world.status, "Suspended")["status"] == "True"
    ready = cond(world.status, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "Suspended")
    assert all(not plan.deletes for plan in world.plans)
    resumed = converge(case.company, case.engine_class, False, world, now=LATER)
    assert resumed.children[("StatefulSet", "acme-data")]["spec"]["replicas"] == 1


def test_no_plan_ever_deletes_a_claim() -> None:
    plans: list[Plan] = []
    for case in CASES.values():
        world = converge(case.company, case.engine_class, case.gateway_api)
        plans += world.plans
        plans.append(plan_for(world, make_company(suspend=True), None))
        plans.append(
            plan_for(world, make_company(suspend=True), case.engine_class, case.gateway_api)
        )
    assert all(d.resource != PERSISTENT_VOLUME_CLAIM for p in plans for d in p.deletes)


@pytest.mark.parametrize(
    ("wanted", "running", "clamped"),
    [(None, 2, False), (3, 3, False), (0, 1, True), (9, 4, True)],
)
def test_seats_replicas_are_clamped_to_the_class_bounds(
    wanted: int | None, running: int, clamped: bool
) -> None:
    cls = CASES["scheduling-digest-ingress"].engine_class
    company = make_company(seats={} if wanted is None else {"replicas": wanted})
    plan = reconcile(company, cls, {}, Observed(), facts(False), now=NOW, token_factory=fixed_token)
    seats = applied(plan, "StatefulSet", "acme-seats")
    assert seats is not None and seats["spec"]["replicas"] == running
    message = accepted(plan)["message"]
    assert ("outside EngineClass standard's bounds 1..4" in message) is clamped


# --- Status -------------------------------------------------------------------------------


def test_ready_waits_for_a_ready_data_pod_at_the_current_generation() -> None:
    case = CASES["plain-ingress"]
    world = converge(case.company, case.engine_class, False)
    data = world.children[("StatefulSet", "acme-data")]
    data["status"]["readyReplicas"] = 0
    plan = plan_for(world, case.company, case.engine_class)
    assert cond(plan.status, "Ready")["reason"] == "DataNotReady"
    data["status"] = {"observedGeneration": data["metadata"]["generation"] - 1, "readyReplicas": 1}
    plan = plan_for(world, case.company, case.engine_class)
    assert cond(plan.status, "Ready")["reason"] == "Progressing"


def test_transition_time_moves_only_on_a_flip() -> None:
    case = CASES["plain-ingress"]
    world = converge(case.company, case.engine_class, False)
    before = cond(world.status, "Accepted")["lastTransitionTime"]
    world.children[("StatefulSet", "acme-data")]["status"]["readyReplicas"] = 0
    plan = plan_for(world, case.company, case.engine_class, now=LATER)
    assert cond(plan.status, "Accepted")["lastTransitionTime"] == before
    assert cond(plan.status, "Ready")["lastTransitionTime"] == "2026-01-01T13:00:00Z"


def test_status_is_none_when_unchanged() -> None:
    case = CASES["plain-ingress"]
    world = converge(case.company, case.engine_class, False)
    plan = plan_for(world, case.company, case.engine_class)
    assert plan.status is None
    assert world.status is not None
    assert world.status["observedGeneration"] == 3
    assert world.status["engineImage"] == IMAGE
    assert world.status["engineVersion"] == "0.2.0"


def assert_no_secret_values(plan: Plan) -> None:
    text = json.dumps(plan.status) + json.dumps(plan.claim_annotations)
    for value in [*PLAIN.values(), TOKEN]:
        assert value not in text
        assert b64(value) not in text


def test_secret_values_never_reach_status_or_conditions() -> None:
    checked = 0
    for case in CASES.values():
        world = converge(case.company, case.engine_class, case.gateway_api)
        for plan in world.plans:
            assert_no_secret_values(plan)
            checked += 1
        missing: dict[tuple[str, str], Object | None] = dict.fromkeys(SOURCES)
        for secrets in ({}, missing):
            assert_no_secret_values(
                plan_for(world, case.company, case.engine_class, case.gateway_api, secrets=secrets)
            )
    assert checked >= len(CASES)


def stray(kind: str, owner_uid: str) -> Object:
    return {
        "kind": kind,
        "metadata": {
            "name": f"stray-{kind.lower()}",
            "uid": "x",
            "ownerReferences": [{"uid": owner_uid, "controller": True}],
        },
    }


def test_children_of_other_kinds_or_owners_are_never_deleted() -> None:
    case = CASES["plain-ingress"]
    world = converge(case.company, case.engine_class, False)
    for kind, owner in [
        ("PersistentVolumeClaim", COMPANY_UID),
        ("Secret", "someone-else"),
        ("ConfigMap", COMPANY_UID),
        ("Service", COMPANY_UID),
    ]:
        world.children[(kind, f"stray-{kind.lower()}")] = stray(kind, owner)
    plan = plan_for(world, case.company, case.engine_class)
    assert [(d.resource.kind, d.name) for d in plan.deletes] == [("Service", "stray-service")]


def test_kinds_written_are_the_library_resources() -> None:
    kinds = {
        c.resource
        for case in CASES.values()
        for c in desired_children(
            case.company,
            case.engine_class,
            Observed(secrets=dict(SOURCES)),
            facts(case.gateway_api),
            token_factory=fixed_token,
        )
    }
    assert {
        SECRET,
        STATEFUL_SET,
        NETWORK_POLICY,
        POD_DISRUPTION_BUDGET,
        INGRESS,
        HTTP_ROUTE,
    } <= kinds


def test_a_field_the_operator_applied_and_no_longer_wants_is_applied_away() -> None:
    """A subset check cannot see a removed copy; the operator's managedFields entry can."""
    case = CASES["s3-static-gateway"]
    world = converge(case.company, case.engine_class, True)
    env = world.children[("Secret", "acme-env")]
    env["data"]["RETIRED_KEY"] = b64("old")
    assert plan_for(world, case.company, case.engine_class, True).empty
    owned: Object = {f"f:{key}": {} for key in env["data"]}
    env["metadata"]["managedFields"] = [
        {
            "manager": "crewlet-operator",
            "operation": "Apply",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:data": owned},
        },
    ]
    plan = plan_for(world, case.company, case.engine_class, True)
    assert [(a.resource.kind, a.object["metadata"]["name"]) for a in plan.applies] == [
        ("Secret", "acme-env")
    ]
    assert "RETIRED_KEY" not in plan.applies[0].object["data"]


def test_the_fields_compared_are_those_of_the_operator_s_own_field_manager() -> None:
    """``ClusterFacts.field_manager``: what another manager applied is not the operator's to
    take away."""
    case = CASES["s3-static-gateway"]
    world = converge(case.company, case.engine_class, True)
    env = world.children[("Secret", "acme-env")]
    env["data"]["RETIRED_KEY"] = b64("old")
    env["metadata"]["managedFields"] = [
        {
            "manager": "crewlet-operator",
            "operation": "Apply",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:data": {f"f:{key}": {} for key in env["data"]}},
        },
    ]
    renamed = ClusterFacts(
        gateway_api=True, operator_namespace="crewlet-operator-system", field_manager="renamed"
    )
    plan = reconcile(
        world.with_status(case.company),
        case.engine_class,
        {},
        world.observed(),
        renamed,
        now=LATER,
        token_factory=never_token,
    )
    assert plan.empty


def test_a_class_parsed_once_per_resource_version_still_sees_every_edit() -> None:
    company = make_company()
    first = make_class(image="ghcr.io/crewlet/crewlet-operator/engine:v0.2.0")
    first["metadata"] |= {"uid": "class-uid", "resourceVersion": "1"}
    edited = make_class(image="ghcr.io/crewlet/crewlet-operator/engine:v0.3.0")
    edited["metadata"] |= {"uid": "class-uid", "resourceVersion": "2"}
    images = []
    for engine_class in (first, edited, first):
        plan = reconcile(company, engine_class, {}, Observed(), facts(False), now=NOW)
        assert plan.status is not None
        images.append(plan.status["engineImage"])
    assert [i.rsplit(":", 1)[1] for i in images] == ["v0.2.0", "v0.3.0", "v0.2.0"]


def test_a_class_content_is_judged_once_and_its_secrets_read_into_the_same_memo() -> None:
    small = make_class(
        storage={"size": "5Gi"}, modelKeys=[{"name": "K", "secretRef": ref("keys", "k")}]
    )
    small["metadata"] |= {"uid": "class-memo", "resourceVersion": "1"}
    plan = reconcile(make_company(), small, {}, Observed(), facts(False), now=NOW)
    assert accepted(plan)["reason"] == "InvalidClass"
    assert referenced_secrets(small) == {("platform", "keys")}
    content = inputs.class_content(small)
    assert content.read is not None and content.referenced == frozenset({("platform", "keys")})
    small["spec"]["storage"]["size"] = "50Gi"  # what an update would bring ...
    plan = reconcile(make_company(), small, {}, Observed(), facts(False), now=NOW)
    assert accepted(plan)["reason"] == "InvalidClass"  # ... is only read with its version
    small["metadata"]["resourceVersion"] = "2"
    plan = reconcile(make_company(), small, {}, Observed(), facts(False), now=NOW)
    assert accepted(plan)["reason"] == "SecretNotFound"  # past the class, at its Secret


# --- The verdict written ahead of the children --------------------------------------------------

# Every way a new company is judged: the goldens' classes (accepted) and each refusal.
VERDICT_CASES: dict[str, tuple[Object, Object | None, bool, dict[str, str]]] = {
    **{
        name: (make_company(), case.engine_class, case.gateway_api, {})
        for name, case in CASES.items()
    },
    "class-not-found": (make_company(), None, False, {}),
    "downgrade-refused": (
        {**make_company(), "status": {"highestEngineVersion": "0.3.0"}},
        make_class(),
        False,
        {},
    ),
    "class-not-allowed": (
        make_company(),
        make_class(allowedNamespaces={"matchLabels": {"crewlet.ai/tenant": "true"}}),
        False,
        {"crewlet.ai/tenant": "false"},
    ),
    "invalid-class": (make_company(), make_class(storage={"size": "5Gi"}), False, {}),
    "invalid-name": (make_company("a" * 47), make_class(), False, {}),
    "secret-not-found": (
        make_company(),
        make_class(modelKeys=[{"name": "K", "secretRef": ref("absent", "k")}]),
        False,
        {},
    ),
}


@pytest.mark.parametrize("case", sorted(VERDICT_CASES))
def test_the_verdict_written_first_is_the_one_every_later_reconcile_keeps(case: str) -> None:
    """The operator writes a new company's status (its verdict) before its children, and the
    children later, by a reconcile that must decide the same verdict: no Accepted that turns
    into a refusal once the children exist, no refusal that turns into Accepted."""
    company, engine_class, gateway_api, namespace_labels = VERDICT_CASES[case]
    world = World()
    first = reconcile(
        company,
        engine_class,
        namespace_labels,
        world.observed(),
        facts(gateway_api),
        now=NOW,
        token_factory=fixed_token,
    )
    written_first = verdict(first.status)
    assert written_first is not None
    world.status = copy.deepcopy(first.status)  # the status on its own, no child yet
    for _ in range(4):
        plan = reconcile(
            world.with_status(company),
            engine_class,
            namespace_labels,
            world.observed(),
            facts(gateway_api),
            now=LATER,
            token_factory=fixed_token,
        )
        if plan.status is not None:
            assert verdict(plan.status) == written_first
        if plan.empty:
            break
        world.execute(plan)
    assert plan.empty
    assert verdict(world.status) == written_first


@pytest.mark.parametrize("case", sorted(VERDICT_CASES))
def test_a_verdict_decided_without_writing_out_the_files_is_the_whole_reconciles(
    case: str,
) -> None:
    """The operator decides a new company's verdict with ``render_files=False`` (its
    crewlet.yaml files checked, not written out): the status is the whole reconcile's, and
    only the config Secret's files (and their hash) differ; such a plan says it is not
    complete, so that its children are never applied from it."""
    company, engine_class, gateway_api, namespace_labels = VERDICT_CASES[case]
    decide = functools.partial(
        reconcile,
        company,
        engine_class,
        namespace_labels,
        World().observed(),
        facts(gateway_api),
        now=NOW,
        token_factory=fixed_token,
    )
    whole, verdict_only = decide(), decide(render_files=False)
    assert whole.complete
    assert verdict_only.status == whole.status
    assert verdict_only.deletes == whole.deletes
    assert verdict_only.complete is not bool(whole.applies), "new children: files left out"
    config = naming.config_secret(object_name(company))
    assert [(a.resource, object_name(a.object)) for a in verdict_only.applies] == [
        (a.resource, object_name(a.object)) for a in whole.applies
    ]
    for left, right in zip(verdict_only.applies, whole.applies, strict=True):
        if object_name(left.object) != config:
            assert left.object == right.object
            continue
        annotations = right.object["metadata"]["annotations"]
        assert not left.object.get("data")
        assert right.object["data"]
        assert left.object["metadata"]["annotations"] == {
            naming.CONFIG_HASH_ANNOTATION: annotations[naming.CONFIG_HASH_ANNOTATION]
        }
        assert {k: v for k, v in left.object.items() if k not in ("data", "metadata")} == {
            k: v for k, v in right.object.items() if k not in ("data", "metadata")
        }


def test_a_config_secret_whose_files_are_left_out_is_applied_all_the_same() -> None:
    """A plan decided without writing out the files applies the children the whole one
    applies: a config Secret that holds no files is written even where the data-less Secret
    left in the plan would change nothing (someone emptied it)."""
    company, engine_class = make_company(), make_class()
    world = converge(company, engine_class, False)
    config = naming.config_secret(object_name(company))
    emptied = world.children[("Secret", config)]
    del emptied["data"]
    del emptied["metadata"]["annotations"][naming.FILES_HASH_ANNOTATION]
    decide = functools.partial(
        reconcile,
        world.with_status(company),
        engine_class,
        {},
        world.observed(),
        facts(False),
        now=LATER,
        token_factory=never_token,
    )
    whole, verdict_only = decide(), decide(render_files=False)
    assert not verdict_only.complete
    assert [object_name(a.object) for a in whole.applies] == [config]
    assert [object_name(a.object) for a in verdict_only.applies] == [config]


def test_a_company_whose_files_exist_is_reconciled_whole_even_for_a_verdict() -> None:
    """Files left out are a new company's only: once its config Secret exists, a changed
    file is compared with what it holds (and checked only when it differs), as ever."""
    company, engine_class = make_company(), make_class()
    world = World()
    plan = reconcile(company, engine_class, {}, world.observed(), facts(False), now=NOW)
    world.execute(plan)
    world.status = copy.deepcopy(plan.status)
    larger = make_class(storage={"size": "200Gi"})
    decide = functools.partial(
        reconcile, world.with_status(company), larger, {}, world.observed(), facts(False), now=LATER
    )
    whole, verdict_only = decide(), decide(render_files=False)
    assert verdict_only.complete
    assert [a.object for a in verdict_only.applies] == [a.object for a in whole.applies]
    assert naming.config_secret(object_name(company)) in {
        object_name(a.object) for a in whole.applies
    }, "the larger volume changes the data file"
