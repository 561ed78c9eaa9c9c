"""The generated crewlet.ai CRDs on a real Kubernetes 1.37 API server.

Every object is created with ``dryRun=All`` unless the test needs it stored: the API server runs
the whole validation (schema, defaults, CEL rules) and persists nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from crewlet_operator.conditions import condition, set_condition
from crewlet_operator.crd import apply_defaults
from crewlet_operator.envtest import ControlPlane
from crewlet_operator.envtest.binaries import find
from crewlet_operator.envtest.wait import eventually
from crewlet_operator.errors import BadRequestError, InvalidError, NotFoundError
from crewlet_operator.kube import resources as r
from crewlet_operator.kube.client import Client
from crewlet_operator_daemon.api.crds import all_crds, engine_class_crd
from crewlet_operator_daemon.api.v1alpha1 import (
    COMPANY,
    ENGINE_CLASS,
    MAX_COMPANY_NAME_LENGTH,
    Company,
    EngineClass,
)

# Every test runs with both CRDs installed.
pytestmark = pytest.mark.usefixtures("crds")

IMAGE = "ghcr.io/crewlet/crewlet-operator/engine:v0.2.0"
S3 = {"s3": {"bucket": "companies", "region": "auto"}}
SECRET_REF = {"namespace": "platform", "name": "env", "key": "token"}

FULL_SPEC: dict[str, Any] = {
    "engine": {
        "image": IMAGE,
        "imagePullPolicy": "IfNotPresent",
        "imagePullSecrets": [{"name": "g"}],
    },
    "allowedNamespaces": {
        "matchLabels": {"crewlet.ai/tenant": "true"},
        "matchExpressions": [{"key": "tier", "operator": "Exists"}],
    },
    "storage": {"storageClassName": "fast", "size": "20Gi"},
    "modelKeys": [{"name": "ANTHROPIC_API_KEY", "secretRef": SECRET_REF}],
    "telemetry": {
        "endpoint": "https://otel.example.com",
        "protocol": "grpc",
        "headers": SECRET_REF,
    },
    "env": [{"name": "LOG_LEVEL", "value": "info"}, {"name": "TOKEN", "secretRef": SECRET_REF}],
    "serviceAccount": {"annotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/x"}},
    "scheduling": {
        "nodeSelector": {"pool": "engines"},
        "tolerations": [{"key": "engines", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}},
        "priorityClassName": "engines",
        "topologySpreadConstraints": [
            {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway"}
        ],
    },
    "resources": {"data": {"requests": {"cpu": "500m"}}, "seats": {"limits": {"memory": "2Gi"}}},
    "seats": {"replicas": 2, "minReplicas": 1, "maxReplicas": 5},
    "networkPolicy": {"apiPeers": [{"namespaceSelector": {"matchLabels": {"gw": "true"}}}]},
    # Gateway or Ingress is the operator's choice at start-up, so a class may carry both.
    "exposure": {
        "gateway": {"parentRefs": [{"name": "public", "namespace": "gateways"}]},
        "ingress": {"className": "nginx"},
    },
}


def engine_class(spec: dict[str, Any], name: str = "table") -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": spec}


def with_image(**spec: Any) -> dict[str, Any]:
    return {"engine": {"image": IMAGE}, **spec}


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def crds(kube_client: Client) -> AsyncIterator[None]:
    """Both CRDs installed, Established and enforcing their rules."""
    for crd in all_crds():
        await kube_client.apply(r.CUSTOM_RESOURCE_DEFINITION, crd)

    async def established() -> bool:
        for crd in all_crds():
            got = await kube_client.get(r.CUSTOM_RESOURCE_DEFINITION, crd["metadata"]["name"])
            conditions = (got.get("status") or {}).get("conditions") or []
            if not any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                return False
        return True

    await eventually(established, message="crewlet.ai CRDs Established")
    kube_client.forget_discovery()

    async def enforced() -> bool:
        small = engine_class(with_image(storage={"size": "1Gi"}))
        try:
            await kube_client.create(ENGINE_CLASS, small, dry_run=True)
        except InvalidError:
            return True
        return False

    await eventually(enforced, message="CEL rules enforced")
    yield


async def kubectl(control_plane: ControlPlane, *args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        str(find("kubectl")),
        f"--kubeconfig={control_plane.kubeconfig}",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), 60)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    return proc.returncode or 0, out.decode(), err.decode()


# -- EngineClass --------------------------------------------------------------------------------

ENGINE_CLASS_TABLE: list[tuple[str, dict[str, Any], str | None]] = [
    ("minimal", with_image(), None),
    ("full", FULL_SPEC, None),
    ("storage 11Gi", with_image(storage={"size": "11Gi"}), "must be at least 12Gi"),
    ("storage 12Gi", with_image(storage={"size": "12Gi"}), None),
    ("storage 12G is less than 12Gi", with_image(storage={"size": "12G"}), "at least 12Gi"),
    ("storage 1Ti", with_image(storage={"size": "1Ti"}), None),
    ("storage 9Gi with S3", with_image(storage={"size": "9Gi"}, files=S3), None),
    ("storage 8Gi with S3", with_image(storage={"size": "8Gi"}, files=S3), "still be at least 9Gi"),
    ("storage not a quantity", with_image(storage={"size": "big"}), "a Kubernetes quantity"),
    ("missing image", {"engine": {}}, "spec.engine.image: Required value"),
    ("empty image", {"engine": {"image": ""}}, "must be an image reference"),
    ("image with whitespace", {"engine": {"image": "crewlet :main"}}, "must be an image reference"),
    ("image with a newline", {"engine": {"image": "crewlet:main\n"}}, "must be an image reference"),
    ("image with an uppercase path", {"engine": {"image": "ghcr.io/Crewlet/x"}}, "lowercase path"),
    ("seats above max", with_image(seats={"replicas": 6, "maxReplicas": 5}), "<= maxReplicas"),
    ("seats above default max", with_image(seats={"replicas": 11}), "<= maxReplicas"),
    ("seats below min", with_image(seats={"replicas": 1, "minReplicas": 2}), "minReplicas <="),
    ("seats over 100", with_image(seats={"maxReplicas": 101}), "less than or equal to 100"),
    (
        "env with value and secretRef",
        with_image(env=[{"name": "A", "value": "v", "secretRef": SECRET_REF}]),
        "exactly one of value and secretRef",
    ),
    ("env with neither", with_image(env=[{"name": "A"}]), "exactly one of value and secretRef"),
    (
        "env twice",
        with_image(env=[{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]),
        "Duplicate value",
    ),
    (
        "bad pull policy",
        {"engine": {"image": IMAGE, "imagePullPolicy": "Sometimes"}},
        "Unsupported",
    ),
    (
        "selector In without values",
        with_image(allowedNamespaces={"matchExpressions": [{"key": "k", "operator": "In"}]}),
        "In or NotIn needs values",
    ),
    ("gateway without parentRefs", with_image(exposure={"gateway": {"parentRefs": []}}), "1 items"),
    (
        "allowed hostnames",
        with_image(
            exposure={"allowedHostnames": ["hooks.example.com", "*.{namespace}.hooks.example.com"]}
        ),
        None,
    ),
    (
        "allowed hostname with a path",
        with_image(exposure={"allowedHostnames": ["hooks.example.com/x"]}),
        "allowedHostnames entry is a lowercase DNS name",
    ),
    (
        "allowed hostname with a wildcard inside",
        with_image(exposure={"allowedHostnames": ["hooks.*.example.com"]}),
        "allowedHostnames entry is a lowercase DNS name",
    ),
]


@pytest.mark.parametrize(
    ("spec", "refusal"),
    [pytest.param(spec, refusal, id=case) for case, spec, refusal in ENGINE_CLASS_TABLE],
)
async def test_engine_class_table(
    kube_client: Client, spec: dict[str, Any], refusal: str | None
) -> None:
    obj = engine_class(copy.deepcopy(spec))
    if refusal is None:
        created = await kube_client.create(ENGINE_CLASS, obj, dry_run=True)
        # Stored as sent, plus the defaults the schema predicts: nothing pruned, nothing else.
        schema = engine_class_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        assert created["spec"] == apply_defaults(schema, obj)["spec"]
        EngineClass.model_validate(created)  # what the API server stores, the operator reads
    else:
        with pytest.raises(InvalidError) as refused:
            await kube_client.create(ENGINE_CLASS, obj, dry_run=True)
        assert refusal in refused.value.message


async def test_api_server_fills_in_the_models_defaults(kube_client: Client) -> None:
    created = await kube_client.create(ENGINE_CLASS, engine_class(with_image()), dry_run=True)
    assert created["spec"]["storage"] == {"size": "12Gi"}
    assert created["spec"]["seats"] == {"replicas": 1, "minReplicas": 0, "maxReplicas": 10}
    assert "status" not in created  # the operator writes status; the API server invents none
    parsed = EngineClass.model_validate(created)
    assert parsed.spec == EngineClass.model_validate(engine_class(with_image())).spec

    seats = await kube_client.create(
        ENGINE_CLASS, engine_class(with_image(seats={"maxReplicas": 3})), dry_run=True
    )
    assert seats["spec"]["seats"] == {"replicas": 1, "minReplicas": 0, "maxReplicas": 3}


async def test_unknown_fields_are_pruned_unless_the_request_is_strict(kube_client: Client) -> None:
    # Client.create sends no fieldValidation, so the server's default (Warn) applies: the
    # unknown field is dropped with a warning header, and the object is stored without it.
    obj = engine_class(with_image(bogus=1, storage={"size": "12Gi", "sizee": "9Gi"}))
    created = await kube_client.create(ENGINE_CLASS, obj, dry_run=True)
    assert "bogus" not in created["spec"]
    assert created["spec"]["storage"] == {"size": "12Gi"}
    # kubectl's default (--validate=strict), and any client asking for it, is refused instead.
    with pytest.raises(BadRequestError, match=r'unknown field "spec.bogus"'):
        await kube_client.request(
            "POST",
            ENGINE_CLASS.path(),
            body={"apiVersion": ENGINE_CLASS.api_version, "kind": ENGINE_CLASS.kind, **obj},
            query={"fieldValidation": "Strict", "dryRun": "All"},
        )


# -- Company ------------------------------------------------------------------------------------


def company(name: str, namespace: str, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"className": "standard", **spec},
    }


COMPANY_TABLE: list[tuple[str, str, dict[str, Any], str | None]] = [
    ("longest name", "a" * MAX_COMPANY_NAME_LENGTH, {}, None),
    ("name one too long", "a" * (MAX_COMPANY_NAME_LENGTH + 1), {}, "at most 46 characters"),
    ("name with a leading digit", "1acme", {}, "DNS-1035 label"),
    ("name with a dot", "acme.corp", {}, "DNS-1035 label"),
    ("name ending in a dash", "acme-", {}, "DNS-1035 label"),
    ("webhook hostname", "acme", {"webhookHostname": "hooks.acme.example.com"}, None),
    ("webhook URL", "acme", {"webhookHostname": "https://acme.example.com"}, "lowercase DNS"),
    # Issue 47: a route for a DNS label past 63 characters could never match a request.
    ("hostname label of 63", "acme", {"webhookHostname": f"{'a' * 63}.example.com"}, None),
    (
        "hostname label of 64",
        "acme",
        {"webhookHostname": f"{'a' * 64}.example.com"},
        "lowercase DNS",
    ),
    ("seats", "acme", {"seats": {"replicas": 0}}, None),
    ("suspended", "acme", {"suspend": True}, None),
    ("empty class", "acme", {"className": ""}, "at least 1 chars long"),
]


@pytest.mark.parametrize(
    ("name", "spec", "refusal"),
    [pytest.param(n, spec, refusal, id=case) for case, n, spec, refusal in COMPANY_TABLE],
)
async def test_company_table(
    kube_client: Client,
    namespace: str,
    name: str,
    spec: dict[str, Any],
    refusal: str | None,
) -> None:
    obj = company(name, namespace, **spec)
    if refusal is None:
        created = await kube_client.create(COMPANY, obj, dry_run=True)
        assert Company.model_validate(created).spec.suspend is bool(spec.get("suspend"))
    else:
        with pytest.raises(InvalidError) as refused:
            await kube_client.create(COMPANY, obj, dry_run=True)
        assert refusal in refused.value.message


async def test_generated_company_names_are_bounded_too(kube_client: Client, namespace: str) -> None:
    # generateName appends 5 characters, after which the rule applies to the full name.
    prefix = "a" * (MAX_COMPANY_NAME_LENGTH - 5)
    obj = {"metadata": {"generateName": prefix, "namespace": namespace}, "spec": {"className": "s"}}
    created = await kube_client.create(COMPANY, obj, dry_run=True)
    assert len(created["metadata"]["name"]) == MAX_COMPANY_NAME_LENGTH
    obj["metadata"]["generateName"] = prefix + "a"
    with pytest.raises(InvalidError, match="at most 46 characters"):
        await kube_client.create(COMPANY, obj, dry_run=True)


async def test_a_company_may_change_its_class(kube_client: Client, namespace: str) -> None:
    await kube_client.create(COMPANY, company("acme", namespace))
    patched = await kube_client.patch(COMPANY, "acme", {"spec": {"className": "bigger"}}, namespace)
    assert patched["spec"]["className"] == "bigger"


# -- kubectl ------------------------------------------------------------------------------------


async def test_kubectl_explain_reads_the_descriptions(control_plane: ControlPlane) -> None:
    # The OpenAPI document is published a moment after the CRD is Established.
    async def explain(resource: str) -> str:
        code, out, _ = await kubectl(control_plane, "explain", resource)
        return " ".join(out.split()) if code == 0 else ""  # kubectl wraps long lines

    spec = await eventually(lambda: explain("companies.spec"), message="explain companies.spec")
    assert "A company: an engine of the named class in this namespace." in spec
    assert "The EngineClass to run." in spec
    assert "Scale every engine pod to zero; the data volume is kept." in spec
    size = await eventually(
        lambda: explain("engineclasses.spec.storage.size"), message="explain storage.size"
    )
    assert "at least 12Gi, or 9Gi when files live in S3" in size
    image = await eventually(lambda: explain("ec.spec.engine.image"), message="explain image")
    assert "A semantic version tag is ordered and protected against downgrades" in image


async def test_kubectl_gets_both_kinds_by_category_and_short_name(
    kube_client: Client, control_plane: ControlPlane, namespace: str
) -> None:
    class_name = f"{namespace}-class"[:63]
    await kube_client.create(ENGINE_CLASS, engine_class(with_image(), name=class_name))
    try:
        await kube_client.create(COMPANY, company("acme", namespace, className=class_name))
        ready = condition("Ready", False, "Provisioning", "waiting for the data pod")
        await kube_client.apply_status(
            COMPANY,
            {
                "metadata": {"name": "acme", "namespace": namespace},
                "status": {"conditions": set_condition([], ready), "engineVersion": "0.2.0"},
            },
        )
        await kube_client.apply_status(
            ENGINE_CLASS, {"metadata": {"name": class_name}, "status": {"companies": 1}}
        )

        code, out, err = await kubectl(control_plane, "get", "crewlet", "-A")
        assert code == 0, err
        rows = [line.split() for line in out.splitlines()]
        assert ["NAMESPACE", "NAME", "CLASS", "ENGINE", "READY", "REASON", "AGE"] in rows
        assert ["NAMESPACE", "NAME", "IMAGE", "COMPANIES", "AGE"] in rows
        (company_row,) = [row for row in rows if row[:2] == [namespace, "company.crewlet.ai/acme"]]
        assert company_row[:6] == [
            namespace,
            "company.crewlet.ai/acme",
            class_name,
            "0.2.0",
            "False",
            "Provisioning",
        ]
        (class_row,) = [row for row in rows if f"engineclass.crewlet.ai/{class_name}" in row]
        assert class_row[:3] == [f"engineclass.crewlet.ai/{class_name}", IMAGE, "1"]

        code, out, err = await kubectl(control_plane, "get", "cco", "-n", namespace)
        assert code == 0, err
        assert out.splitlines()[1].split()[:5] == [
            "acme",
            class_name,
            "0.2.0",
            "False",
            "Provisioning",
        ]
        code, out, err = await kubectl(control_plane, "get", "ec", class_name)
        assert code == 0, err
        assert out.split()[:7] == ["NAME", "IMAGE", "COMPANIES", "AGE", class_name, IMAGE, "1"]
    finally:
        with contextlib.suppress(NotFoundError):
            await kube_client.delete(ENGINE_CLASS, class_name)


async def test_short_names_and_category_are_not_taken_by_built_in_kinds(
    kube_client: Client,
) -> None:
    taken: dict[str, str] = {}
    listings = [await kube_client.request("GET", "/api/v1")]
    for group in (await kube_client.request("GET", "/apis"))["groups"]:
        if group["name"] != "crewlet.ai":
            version = group["preferredVersion"]["groupVersion"]
            listings.append(await kube_client.request("GET", f"/apis/{version}"))
    for listing in listings:
        for resource in listing["resources"]:
            for alias in [*resource.get("shortNames", []), *resource.get("categories", [])]:
                taken[alias] = f"{resource['name']} ({listing['groupVersion']})"
    ours = {"cco", "ec", "crewlet", "company", "companies", "engineclass", "engineclasses"}
    assert {alias: taken[alias] for alias in ours & set(taken)} == {}
    assert "cs" in taken  # componentstatuses: why Company is not cs
