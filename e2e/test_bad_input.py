"""Bad input: every invalid EngineClass and Company is answered, never a crash (issue:
Resilience).

An answer is either the API server's refusal (422 Invalid, or 400 BadRequest for an unknown
field under strict field validation) with a message that says what is wrong, or the object is
stored and the Company's ``Accepted`` condition says why it does not run, with a reason. A
refused Company is never half-written: it has no StatefulSet (nor any other child). The daemon
answers everything as one process, which stays up and healthy, and counts no reconcile panic.

The schema-level refusals already proven by ``e2e/test_crds.py`` (ENGINE_CLASS_TABLE and
COMPANY_TABLE: sizes below the minimum, missing or empty or whitespace images, seats out of
bounds, both or neither of value and secretRef, an env variable twice, a bad pull policy, an
In selector without values, a gateway without parentRefs, bad Company names and hostnames, an
empty className, an unknown field under strict validation) are not repeated here; the table
printed at the end counts them.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
import pytest_asyncio
from operator_helpers import (
    IMAGE,
    PLATFORM,
    Operator,
    admin_client,
    children_by_company,
    company,
    engine_class,
    operator,
    say,
    secret,
    wait_condition,
    wait_converged,
)
from test_crds import COMPANY_TABLE, ENGINE_CLASS_TABLE

from crewlet_operator import POD, SECRET, STATEFUL_SET, ApiError, Client, InvalidError
from crewlet_operator.envtest import ControlPlane
from crewlet_operator.envtest.crds import install_crds
from crewlet_operator.envtest.wait import eventually
from crewlet_operator.errors import BadRequestError
from crewlet_operator_daemon.api.crds import all_crds
from crewlet_operator_daemon.api.v1alpha1 import COMPANY, ENGINE_CLASS, MAX_COMPANY_NAME_LENGTH

TENANT = "tenant"
GOOD = "good"
KEYS = "bad-input-keys"
REF = {"namespace": PLATFORM, "name": KEYS, "key": "anthropic"}
SCHEMA_LEVEL_IN_TEST_CRDS = (
    sum(1 for *_, refusal in ENGINE_CLASS_TABLE if refusal is not None)
    + sum(1 for *_, refusal in COMPANY_TABLE if refusal is not None)
    + 2  # test_generated_company_names_are_bounded_too, test_unknown_fields_are_pruned_...
)
"""The refusals e2e/test_crds.py proves already (its two tables, the generated-name rule and the
strict unknown field), counted into the catalogue, not repeated."""

TABLE: list[tuple[str, str, str]] = []
"""(input, answered by, how): printed at the end of the module."""


def with_image(**spec: Any) -> dict[str, Any]:
    return {"engine": {"image": IMAGE}, **spec}


def key_ref(**overrides: Any) -> dict[str, Any]:
    return {**REF, **overrides}


# -- the module's daemon, on the session's control plane ------------------------------------------
# (It kills, audits and reconfigures nothing: no plane of its own.)


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def client(control_plane: ControlPlane) -> AsyncIterator[Client]:
    async with admin_client(control_plane, PLATFORM, TENANT) as admin:
        await admin.create(SECRET, secret(PLATFORM, KEYS, anthropic="sk-test"))
        await admin.create(
            ENGINE_CLASS, engine_class(GOOD, seats={"replicas": 1, "minReplicas": 1})
        )
        yield admin


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def daemon(
    control_plane: ControlPlane, client: Client, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Operator]:
    async with operator(control_plane.kubeconfig, tmp_path_factory.mktemp("daemon")) as running:
        yield running


async def assert_not_written(client: Client, name: str) -> None:
    """No child at all for a refused Company (so no StatefulSet)."""
    assert await client.get_or_none(STATEFUL_SET, f"{name}-data", TENANT) is None
    children = await children_by_company(client, TENANT)
    assert children.get((TENANT, name)) is None, children.get((TENANT, name))


async def assert_daemon_sound(daemon: Operator) -> None:
    assert daemon.alive(), daemon.process.log_tail(40)
    assert daemon.healthz() == 200
    for controller in ("company", "engineclass"):
        sample = f'controller_runtime_reconcile_panics_total{{controller="{controller}"}}'
        assert daemon.metric(sample) == 0.0, (controller, daemon.process.log_tail(40))


# -- refused by the API server ---------------------------------------------------------------------


@dataclass(frozen=True)
class Refusal:
    input: str
    obj: dict[str, Any]
    says: str
    strict: bool = False

    @property
    def resource_kind(self) -> str:
        return "Company" if self.obj["metadata"].get("namespace") else "EngineClass"


def ec(spec: dict[str, Any] | None) -> dict[str, Any]:
    obj: dict[str, Any] = {"metadata": {"name": "refused"}}
    if spec is not None:
        obj["spec"] = spec
    return obj


def co(name: str = "refused", **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": TENANT}, "spec": {"className": GOOD, **spec}}


def selector(**expression: Any) -> dict[str, Any]:
    return with_image(allowedNamespaces={"matchExpressions": [expression]})


API_REFUSALS = [
    Refusal(
        "EngineClass image Ghcr.io//X/Y:a:b",
        ec({"engine": {"image": "Ghcr.io//X/Y:a:b"}}),
        "must be an image reference",
    ),
    Refusal(
        "EngineClass selector: matchLabels key 'bad key!'",
        ec(with_image(allowedNamespaces={"matchLabels": {"bad key!": "x"}})),
        "a label key is [prefix/]name",
    ),
    Refusal(
        "EngineClass selector: matchLabels value 'bad value!'",
        ec(with_image(allowedNamespaces={"matchLabels": {"tier": "bad value!"}})),
        "should match",
    ),
    Refusal(
        "EngineClass selector: expression key '-tier'",
        ec(selector(key="-tier", operator="Exists")),
        "should match",
    ),
    Refusal(
        "EngineClass selector: Exists with values",
        ec(selector(key="tier", operator="Exists", values=["a"])),
        "Exists or DoesNotExist takes none",
    ),
    Refusal(
        "EngineClass selector: operator Gt",
        ec(selector(key="tier", operator="Gt", values=["1"])),
        "Unsupported value",
    ),
    Refusal(
        "EngineClass selector: matchLabels value a number",
        ec(with_image(allowedNamespaces={"matchLabels": {"tier": 1}})),
        "must be of type string",
    ),
    Refusal(
        "EngineClass env name 1BAD",
        ec(with_image(env=[{"name": "1BAD", "value": "x"}])),
        "should match",
    ),
    Refusal(
        "EngineClass modelKeys name with a dash",
        ec(with_image(modelKeys=[{"name": "ANTHROPIC-KEY", "secretRef": REF}])),
        "should match",
    ),
    Refusal(
        "EngineClass modelKeys name twice",
        ec(with_image(modelKeys=[{"name": "K", "secretRef": REF}] * 2)),
        "Duplicate value",
    ),
    Refusal(
        "EngineClass secretRef without key",
        ec(with_image(modelKeys=[{"name": "K", "secretRef": {"namespace": "p", "name": "s"}}])),
        "key: Required value",
    ),
    Refusal(
        "EngineClass secretRef namespace of 64 characters",
        ec(with_image(modelKeys=[{"name": "K", "secretRef": key_ref(namespace="n" * 64)}])),
        "63",
    ),
    Refusal(
        "EngineClass S3 without a bucket",
        ec(with_image(storage={"size": "9Gi"}, files={"s3": {"region": "auto"}})),
        "bucket: Required value",
    ),
    Refusal(
        "EngineClass telemetry protocol udp",
        ec(with_image(telemetry={"protocol": "udp"})),
        "Unsupported value",
    ),
    Refusal(
        "EngineClass imagePullSecrets entry without a name",
        ec({"engine": {"image": IMAGE, "imagePullSecrets": [{}]}}),
        "name: Required value",
    ),
    Refusal(
        "EngineClass storage -12Gi",
        ec(with_image(storage={"size": "-12Gi"})),
        "at least 12Gi",
    ),
    Refusal(
        "EngineClass seats minReplicas above maxReplicas",
        ec(with_image(seats={"replicas": 3, "minReplicas": 5, "maxReplicas": 2})),
        "minReplicas <= replicas <= maxReplicas",
    ),
    Refusal(
        "EngineClass seats replicas -1",
        ec(with_image(seats={"replicas": -1})),
        "greater than or equal to 0",
    ),
    Refusal("EngineClass without spec", ec(None), "spec: Required value"),
    Refusal(
        "EngineClass image a number",
        ec({"engine": {"image": 42}}),
        "must be of type string",
    ),
    Refusal(
        "EngineClass unknown nested field (strict)",
        ec({"engine": {"image": IMAGE, "tag": "v1"}}),
        'unknown field "spec.engine.tag"',
        strict=True,
    ),
    Refusal(
        "Company without className",
        {"metadata": {"name": "refused", "namespace": TENANT}, "spec": {}},
        "className: Required value",
    ),
    Refusal("Company seats 101", co(seats={"replicas": 101}), "less than or equal to 100"),
    Refusal("Company seats -1", co(seats={"replicas": -1}), "greater than or equal to 0"),
    Refusal("Company suspend 'yes'", co(suspend="yes"), "must be of type boolean"),
    Refusal(
        "Company webhookHostname with capitals",
        co(webhookHostname="Hooks.Example.com"),
        "lowercase DNS name",
    ),
    Refusal(
        "Company webhookHostname of 254 characters",
        co(webhookHostname="a." * 126 + "ab"),
        "253",
    ),
    Refusal(
        "Company unknown field spec.replicas (strict)",
        co(replicas=3),
        'unknown field "spec.replicas"',
        strict=True,
    ),
    Refusal("Company named with capitals", co("Acme"), "RFC 1123"),
    Refusal(
        "Company without spec",
        {"metadata": {"name": "refused", "namespace": TENANT}},
        "spec: Required value",
    ),
]


async def test_the_api_server_refuses_with_a_message_that_says_what_is_wrong(
    client: Client, daemon: Operator
) -> None:
    for case in API_REFUSALS:
        resource = ENGINE_CLASS if case.resource_kind == "EngineClass" else COMPANY
        namespace = (case.obj.get("metadata") or {}).get("namespace")
        body = {"apiVersion": resource.api_version, "kind": resource.kind, **case.obj}
        query = {"fieldValidation": "Strict"} if case.strict else None
        with pytest.raises(ApiError) as refused:
            await client.request("POST", resource.path(namespace), body=body, query=query)
        error = refused.value
        assert isinstance(error, BadRequestError if case.strict else InvalidError), (
            case.input,
            error,
        )
        assert case.says in error.message, (case.input, error.message)
        said = error.message.split(" is invalid: ", 1)[-1]
        said = said if len(said) <= 120 else said[:117] + "..."
        TABLE.append((case.input, "API server", f"{error.status} {error.reason}: {said}"))
    assert await client.get_or_none(ENGINE_CLASS, "refused") is None
    assert await client.get_or_none(COMPANY, "refused", TENANT) is None
    await assert_daemon_sound(daemon)


# -- stored, and reported by the operator ----------------------------------------------------------


@dataclass(frozen=True)
class Reported:
    input: str
    class_spec: dict[str, Any] | None  # None: the Company names a class that does not exist
    reason: str
    says: str
    company_spec: dict[str, Any] | None = None
    accepted: bool = False


OPERATOR_REPORTS = [
    Reported("Company naming a class that does not exist", None, "ClassNotFound", "does not exist"),
    Reported(
        "EngineClass model key in a missing Secret",
        with_image(modelKeys=[{"name": "K", "secretRef": key_ref(name="absent")}]),
        "SecretNotFound",
        f"Secret {PLATFORM}/absent (spec.modelKeys) does not exist",
    ),
    Reported(
        "EngineClass model key missing from its Secret",
        with_image(modelKeys=[{"name": "K", "secretRef": key_ref(key="openai")}]),
        "SecretNotFound",
        f"Secret {PLATFORM}/{KEYS} has no key openai",
    ),
    Reported(
        "EngineClass telemetry headers in a missing Secret",
        with_image(telemetry={"headers": key_ref(name="otel-absent")}),
        "SecretNotFound",
        "otel-absent (spec.telemetry.headers) does not exist",
    ),
    Reported(
        "EngineClass S3 credentials in a missing Secret",
        with_image(
            storage={"size": "9Gi"},
            files={
                "s3": {
                    "bucket": "b",
                    "region": "auto",
                    "credentials": {
                        "accessKeyId": key_ref(name="s3-absent", key="id"),
                        "secretAccessKey": key_ref(name="s3-absent", key="secret"),
                    },
                }
            },
        ),
        "SecretNotFound",
        "s3-absent (spec.files.s3.credentials.accessKeyId) does not exist",
    ),
    Reported(
        "EngineClass env variable the engine reserves",
        with_image(env=[{"name": "CREWLET_API_TOKEN_OPERATOR", "value": "mine"}]),
        "InvalidClass",
        "CREWLET_API_TOKEN_OPERATOR is set by the operator",
    ),
    Reported(
        "EngineClass model key named as a reserved variable",
        with_image(modelKeys=[{"name": "OTEL_EXPORTER_OTLP_HEADERS", "secretRef": REF}]),
        "InvalidClass",
        "OTEL_EXPORTER_OTLP_HEADERS is set by the operator",
    ),
    Reported(
        "EngineClass variable in both modelKeys and env",
        with_image(
            modelKeys=[{"name": "SHARED", "secretRef": REF}], env=[{"name": "SHARED", "value": "x"}]
        ),
        "InvalidClass",
        "SHARED is set twice",
    ),
    Reported(
        "Company seats 50 above the class's maximum 2",
        with_image(seats={"replicas": 1, "maxReplicas": 2}),
        "Accepted",
        "spec.seats.replicas 50 is outside",
        company_spec={"seats": {"replicas": 50}},
        accepted=True,
    ),
    Reported(
        "Company seats 0 below the class's minimum 1",
        with_image(seats={"replicas": 1, "minReplicas": 1}),
        "Accepted",
        "running 1 seats pods",
        company_spec={"seats": {"replicas": 0}},
        accepted=True,
    ),
]


async def test_the_operator_reports_what_it_cannot_run(client: Client, daemon: Operator) -> None:
    async def one(i: int, case: Reported) -> None:
        name, class_name = f"r{i}", f"reported-{i}"
        if case.class_spec is not None:
            await client.create(ENGINE_CLASS, {"metadata": {"name": class_name}, **_spec(case)})
        await client.create(COMPANY, company(TENANT, name, class_name, **(case.company_spec or {})))
        cond = await wait_condition(
            client,
            TENANT,
            name,
            "Accepted",
            "True" if case.accepted else "False",
            reason=case.reason,
            timeout=60,
        )
        assert case.says in cond["message"], (case.input, cond["message"])
        if case.accepted:
            await wait_converged(client, [(TENANT, name)], timeout=60, namespace=TENANT)
        else:
            await assert_not_written(client, name)
        how = f"Accepted={cond['status']} {cond['reason']}: {case.says!r}"
        TABLE.append((case.input, "operator", how))

    await asyncio.gather(*(one(i, case) for i, case in enumerate(OPERATOR_REPORTS)))
    await assert_daemon_sound(daemon)


def _spec(case: Reported) -> dict[str, Any]:
    return {"spec": copy.deepcopy(case.class_spec)}


async def test_a_class_change_to_one_that_does_not_exist_leaves_the_children_alone(
    client: Client, daemon: Operator
) -> None:
    await client.create(COMPANY, company(TENANT, "switcher", GOOD))
    await wait_converged(client, [(TENANT, "switcher")], timeout=90, namespace=TENANT)
    before = await client.get(STATEFUL_SET, "switcher-data", TENANT)
    await client.patch(COMPANY, "switcher", {"spec": {"className": "vanished"}}, TENANT)
    cond = await wait_condition(
        client, TENANT, "switcher", "Accepted", "False", reason="ClassNotFound"
    )
    assert "EngineClass vanished does not exist" in cond["message"]
    after = await client.get(STATEFUL_SET, "switcher-data", TENANT)
    assert after["metadata"]["uid"] == before["metadata"]["uid"]
    assert after["metadata"]["generation"] == before["metadata"]["generation"]
    assert after["spec"]["template"] == before["spec"]["template"]
    TABLE.append(
        (
            "Company class changed to one that does not exist",
            "operator",
            "Accepted=False ClassNotFound; children kept as they were",
        )
    )
    await assert_daemon_sound(daemon)


# -- objects that bypassed validation --------------------------------------------------------------


def loosened(crd: dict[str, Any]) -> dict[str, Any]:
    """The CRD as an older, looser release might have shipped it: any spec, no rules; its
    selectable fields (which the operator lists by) stay, as plain strings, since the API
    server refuses one its schema does not declare."""
    loose = copy.deepcopy(crd)
    version = loose["spec"]["versions"][0]
    schema = version["schema"]["openAPIV3Schema"]
    schema.pop("x-kubernetes-validations", None)
    selectable = [f["jsonPath"].removeprefix(".spec.") for f in version.get("selectableFields", [])]
    schema["properties"]["spec"] = {
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": True,
        "properties": {field: {"type": "string"} for field in selectable},
    }
    return loose


async def install_loosened(client: Client, real: list[dict[str, Any]], namespace: str) -> None:
    """Install the :func:`loosened` CRDs and wait until the API server validates by them: it
    builds a CRD's storage for a new schema after it reports the CRD established, so a write
    made at once may still be judged by the old one. Probed by a dry run of an empty spec,
    which each real CRD refuses (a class needs its engine, a company its class)."""
    await install_crds(client, [loosened(crd) for crd in real])
    probes = [
        (ENGINE_CLASS, {"metadata": {"name": "loosened-probe"}, "spec": {}}),
        (COMPANY, {"metadata": {"name": "loosened-probe", "namespace": namespace}, "spec": {}}),
    ]

    async def loose() -> bool:
        for resource, probe in probes:
            await client.create(resource, probe, dry_run=True)
        return True

    await eventually(loose, timeout=30, retry_on=(InvalidError,), message="loosened CRDs in effect")


BYPASSED_CLASSES: list[tuple[str, dict[str, Any], str]] = [
    ("stored EngineClass with a 1Gi volume", with_image(storage={"size": "1Gi"}), "at least 12Gi"),
    ("stored EngineClass with size 'big'", with_image(storage={"size": "big"}), "'big'"),
    (
        "stored EngineClass env with value and secretRef",
        with_image(env=[{"name": "BOTH", "value": "v", "secretRef": REF}]),
        "needs exactly one of value and secretRef",
    ),
    (
        "stored EngineClass selector operator Gt",
        with_image(allowedNamespaces={"matchExpressions": [{"key": "k", "operator": "Gt"}]}),
        "invalid spec.allowedNamespaces",
    ),
    (
        "stored EngineClass selector key 'bad key!'",
        with_image(allowedNamespaces={"matchLabels": {"bad key!": "x"}}),
        "is not a label key",
    ),
    (
        "stored EngineClass image Ghcr.io//X/Y:a:b",
        {"engine": {"image": "Ghcr.io//X/Y:a:b"}},
        "not an image reference",
    ),
]
"""Classes stored under a loosened CRD. (A class the model cannot parse at all, and Companies
whose stored name or field types the real CRD refuses, are in e2e/test_refusals.py.)"""


async def test_objects_that_bypassed_validation_are_reported_not_crashed_on(
    client: Client, daemon: Operator
) -> None:
    real = all_crds()
    await install_loosened(client, real, TENANT)
    try:
        for i, (_, spec, _) in enumerate(BYPASSED_CLASSES):
            await client.create(ENGINE_CLASS, {"metadata": {"name": f"bypassed-{i}"}, "spec": spec})
            await client.create(COMPANY, company(TENANT, f"b{i}", f"bypassed-{i}"))
        meta = {"name": "no-class", "namespace": TENANT}
        await client.create(COMPANY, {"metadata": meta, "spec": {"suspend": True}})
        meta = {"name": "unknown-field", "namespace": TENANT}
        spec = {"className": GOOD, "suspend": True, "bogus": 1}
        await client.create(COMPANY, {"metadata": meta, "spec": spec})
    finally:
        # The real CRDs come back over the stored objects, which they would refuse.
        await install_crds(client, real)

    expected = [
        (what, f"b{i}", "InvalidClass", says) for i, (what, _, says) in enumerate(BYPASSED_CLASSES)
    ]
    expected.append(("stored Company without className", "no-class", "InvalidSpec", "className"))

    async def one(what: str, name: str, reason: str, says: str) -> str | None:
        try:
            cond = await wait_condition(client, TENANT, name, "Accepted", "False", reason=reason)
        except TimeoutError:
            got = await client.get(COMPANY, name, TENANT)
            return f"{what}: not reported, status {got.get('status')}"
        if says not in cond["message"]:
            return f"{what}: {cond['message']!r} does not say {says!r}"
        await assert_not_written(client, name)
        TABLE.append((what, "operator", f"Accepted=False {reason}: {says!r}"))
        return None

    unanswered = [
        problem for problem in await asyncio.gather(*(one(*entry) for entry in expected)) if problem
    ]
    assert not unanswered, "\n".join(unanswered)

    # A field the real schema does not know is pruned when read back: the company runs.
    stored = await client.get(COMPANY, "unknown-field", TENANT)
    assert "bogus" not in stored["spec"]
    await wait_converged(client, [(TENANT, "unknown-field")], timeout=60, namespace=TENANT)
    TABLE.append(
        (
            "stored Company with an unknown field",
            "API server",
            "pruned on read under the real CRD; the company runs",
        )
    )

    # Status wiped (by hand, or lost): said again.
    for name in ("b0", "switcher"):
        await client.request(
            "PUT",
            COMPANY.path(TENANT, name, "status"),
            body={**(await client.get(COMPANY, name, TENANT)), "status": {}},
        )
    await wait_condition(client, TENANT, "b0", "Accepted", "False", reason="InvalidClass")
    await wait_condition(client, TENANT, "switcher", "Accepted", "False", reason="ClassNotFound")
    TABLE.append(("Company status wiped", "operator", "conditions written again, same reasons"))
    await assert_daemon_sound(daemon)


# -- names at the length limit ---------------------------------------------------------------------


async def test_names_at_the_limit_run_every_child_and_one_more_is_refused(
    client: Client, daemon: Operator
) -> None:
    longest = "n" * MAX_COMPANY_NAME_LENGTH
    await client.create(COMPANY, company(TENANT, longest, GOOD))
    await wait_converged(client, [(TENANT, longest)], timeout=90, namespace=TENANT)
    await wait_condition(client, TENANT, longest, "Ready", "True", timeout=120)
    children = (await children_by_company(client, TENANT))[(TENANT, longest)]
    for kind, names in children.items():
        limit = 52 if kind == "StatefulSet" else 63 if kind == "Service" else 253
        assert all(len(n) <= limit for n in names), (kind, names)
    # The pods exist, so their names and their controller-revision-hash labels fitted.
    for component in ("data", "seats"):
        pod_name = f"{longest}-{component}-0"

        async def pod(name: str = pod_name) -> dict[str, Any] | None:
            return await client.get_or_none(POD, name, TENANT)

        found = await eventually(pod, timeout=60, message=f"pod {pod_name}")
        assert found is not None
        revision = found["metadata"]["labels"]["controller-revision-hash"]
        assert len(revision) <= 63, revision
    too_long = "n" * (MAX_COMPANY_NAME_LENGTH + 1)
    with pytest.raises(InvalidError, match=f"at most {MAX_COMPANY_NAME_LENGTH} characters"):
        await client.create(COMPANY, company(TENANT, too_long, GOOD))
    assert await client.get_or_none(STATEFUL_SET, f"{too_long}-data", TENANT) is None
    TABLE.append(
        (
            f"Company name of {MAX_COMPANY_NAME_LENGTH + 1} characters",
            "API server",
            f"422 Invalid: 'at most {MAX_COMPANY_NAME_LENGTH} characters' "
            f"({MAX_COMPANY_NAME_LENGTH} runs every child and pod)",
        )
    )
    await assert_daemon_sound(daemon)


async def test_every_bad_input_was_answered(
    daemon: Operator, capsys: pytest.CaptureFixture[str]
) -> None:
    """The catalogue, printed: at least 25 inputs of its own, each answered."""
    width = max(len(row[0]) for row in TABLE)
    lines = [f"{'input':<{width}}  {'answered by':<11}  how"]
    lines += [f"{i:<{width}}  {by:<11}  {how}" for i, by, how in TABLE]
    refused = sum(1 for _, by, _ in TABLE if by == "API server")
    lines.append(
        f"{len(TABLE)} bad inputs here ({refused} refused by the API server, "
        f"{len(TABLE) - refused} reported by the operator), and {SCHEMA_LEVEL_IN_TEST_CRDS} "
        f"schema-level refusals in e2e/test_crds.py: {len(TABLE) + SCHEMA_LEVEL_IN_TEST_CRDS}"
    )
    say(capsys, "\n" + "\n".join(lines))
    assert len(TABLE) >= 25
    await assert_daemon_sound(daemon)
