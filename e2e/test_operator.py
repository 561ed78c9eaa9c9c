"""The operator daemon against the real control plane, with workloads (issue: The operator).

The daemon runs as users run it: the ``crewlet-operator`` process, with its own flags.
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from operator_helpers import (
    CHILD_KINDS,
    IMAGE,
    MANAGED,
    MANAGER_NAMESPACE,
    PLATFORM,
    ROOT,
    TEST_FIELD_MANAGER,
    Operator,
    _none,
    chart_documents,
    company,
    engine_class,
    manager_kubeconfig,
    operator,
    remove_crds,
    secret,
    wait_condition,
)

from crewlet_operator import (
    HTTP_ROUTE,
    INGRESS,
    LEASE,
    NAMESPACE,
    NETWORK_POLICY,
    PERSISTENT_VOLUME_CLAIM,
    POD,
    POD_DISRUPTION_BUDGET,
    SECRET,
    SERVICE,
    SERVICE_ACCOUNT,
    STATEFUL_SET,
    Client,
    Scope,
    find_condition,
)
from crewlet_operator.checkpoint import Checkpoint
from crewlet_operator.envtest import KWOK_NODE, ControlPlane, binaries
from crewlet_operator.envtest.crds import install_crds, load_crds
from crewlet_operator.envtest.wait import eventually, no_namespace_terminating
from crewlet_operator.objects import resource_version
from crewlet_operator_daemon.api.v1alpha1 import COMPANY, ENGINE_CLASS
from crewlet_operator_daemon.checkpoint import ANNOTATION
from crewlet_operator_daemon.class_controller import write_status
from crewlet_operator_daemon.controller import WRITTEN_RESOURCES
from crewlet_operator_daemon.naming import CONFIG_HASH_ANNOTATION as CONFIG_HASH
from crewlet_operator_daemon.naming import MANAGED_BY_SELECTOR
from crewlet_operator_daemon.versions import CLAIM_ANNOTATION

MANAGER_VALUES = {"managerWrites": {"gateways": [{"namespace": PLATFORM, "name": "public"}]}}
"""The chart's values the manager runs under: the webhook route test's class attaches its
HTTPRoute to the Gateway public in the platform's namespace, which the manager's admission policy
admits only when managerWrites.gateways lists it."""


def claims_settled(client: Client, namespace: str) -> Callable[[], Awaitable[bool]]:
    """A probe: every data claim in ``namespace`` is Bound and marked by the operator. Until
    then kube-controller-manager and the scheduler (binding it) or the operator (marking it)
    still write to it, and a restart rightly finishes the marking."""

    async def probe() -> bool:
        claims = (await client.list(PERSISTENT_VOLUME_CLAIM, Scope(namespace))).items
        return bool(claims) and all(
            (c.get("status") or {}).get("phase") == "Bound"
            and CLAIM_ANNOTATION in ((c.get("metadata") or {}).get("annotations") or {})
            for c in claims
        )

    return probe


def checkpoint_covers(client: Client, lease: str, namespace: str) -> Callable[[], Awaitable[bool]]:
    """A probe: the restart checkpoint in ``lease`` has every company in ``namespace`` settled
    and every object of theirs no newer than its kind's mark. kube-controller-manager writes
    StatefulSets' and PodDisruptionBudgets' status for a moment after a company is Ready; a
    restart before the checkpoint covers those writes rightly renders the company again."""

    async def probe() -> bool:
        annotations = (await client.get(LEASE, lease, MANAGER_NAMESPACE))["metadata"].get(
            "annotations", {}
        )
        if ANNOTATION not in annotations:
            return False
        # Whatever version wrote it: this process is the one that will read it.
        version = json.loads(annotations[ANNOTATION])["version"]
        checkpoint = Checkpoint.parse(annotations, ANNOTATION, version)
        assert checkpoint is not None, annotations[ANNOTATION]
        if any(u.startswith(f"{namespace}/") for u in checkpoint.unsettled):
            return False
        for resource in (COMPANY, PERSISTENT_VOLUME_CLAIM, *CHILD_KINDS):
            # What the operator watches: its caches' marks say nothing of other objects.
            selector = None if resource is COMPANY else MANAGED_BY_SELECTOR
            listed = await client.list(resource, Scope(namespace, label_selector=selector))
            if not checkpoint.unchanged(resource.group_kind, map(resource_version, listed.items)):
                return False
        return True

    return probe


def class_counts(client: Client, wanted: dict[str, int]) -> Callable[[], Awaitable[bool]]:
    """A probe: each class's ``status.companies`` is as ``wanted`` (by class name). The count
    is written at most once a second: converged means that write has landed too, else the
    next process rightly writes it."""

    async def probe() -> bool:
        for class_name, count in wanted.items():
            got = await client.get(ENGINE_CLASS, class_name)
            if (got.get("status") or {}).get("companies") != count:
                return False
        return True

    return probe


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def crds(kube_client: Client) -> None:
    await install_crds(kube_client, load_crds(ROOT / "manifests/crds"))
    with contextlib.suppress(Exception):
        await kube_client.create(NAMESPACE, {"metadata": {"name": PLATFORM}})


@pytest_asyncio.fixture(loop_scope="session", scope="module", params=["admin", "manager-token"])
async def daemon_kubeconfig(
    request: pytest.FixtureRequest,
    crds: None,
    kube_client: Client,
    control_plane: ControlPlane,
    tmp_path_factory: pytest.TempPathFactory,
) -> Path:
    """Every scenario runs twice: as cluster admin, and with the manager's own token under the
    chart's RBAC and policy (nothing the operator writes may be denied)."""
    if request.param == "admin":
        return control_plane.kubeconfig
    return await manager_kubeconfig(
        kube_client,
        control_plane,
        tmp_path_factory.mktemp("sa"),
        documents=chart_documents(MANAGER_VALUES),
    )


@pytest_asyncio.fixture(loop_scope="session")
async def running(
    daemon_kubeconfig: Path, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Operator]:
    """A fresh operator process for each test (some tests stop and restart it)."""
    async with operator(daemon_kubeconfig, tmp_path_factory.mktemp("operator")) as daemon:
        yield daemon


async def test_company_runs_every_child_and_becomes_ready(
    running: Operator, kube_client: Client, namespace: str
) -> None:
    await kube_client.create(SECRET, secret(PLATFORM, f"keys-{namespace}", anthropic="sk-test"))
    await kube_client.create(
        ENGINE_CLASS,
        engine_class(
            f"std-{namespace}",
            modelKeys=[
                {
                    "name": "ANTHROPIC_API_KEY",
                    "secretRef": {
                        "namespace": PLATFORM,
                        "name": f"keys-{namespace}",
                        "key": "anthropic",
                    },
                }
            ],
            serviceAccount={"annotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/x"}},
        ),
    )
    await kube_client.create(COMPANY, company(namespace, "acme", f"std-{namespace}"))
    ready = await wait_condition(kube_client, namespace, "acme", "Ready", "True", timeout=120)
    got = await kube_client.get(COMPANY, "acme", namespace)
    assert ready["observedGeneration"] == got["metadata"]["generation"]
    accepted = find_condition(got["status"]["conditions"], "Accepted")
    assert accepted is not None
    assert accepted["status"] == "True"
    assert got["status"]["engineImage"] == IMAGE
    assert got["status"]["highestEngineVersion"] in ("0.2.0", "v0.2.0")

    expected = {
        SERVICE_ACCOUNT: ["acme-engine"],
        STATEFUL_SET: ["acme-data", "acme-seats"],
        SERVICE: ["acme-api", "acme-data", "acme-seats"],
        POD_DISRUPTION_BUDGET: ["acme-data", "acme-seats"],
        NETWORK_POLICY: ["acme-data", "acme-seats"],
        INGRESS: [],
    }
    uid = got["metadata"]["uid"]
    for resource, names in expected.items():
        for child_name in names:
            child = await kube_client.get(resource, child_name, namespace)
            meta = child["metadata"]
            assert {**meta["labels"], **MANAGED} == meta["labels"], (resource.kind, child_name)
            assert meta["labels"]["crewlet.ai/company"] == "acme"
            owner = meta["ownerReferences"][0]
            assert (owner["kind"], owner["uid"], owner["controller"]) == ("Company", uid, True)
    sa = await kube_client.get(SERVICE_ACCOUNT, "acme-engine", namespace)
    assert sa["metadata"]["annotations"]["eks.amazonaws.com/role-arn"] == "arn:aws:iam::1:role/x"
    secrets = (
        await kube_client.list(SECRET, Scope(namespace, label_selector="crewlet.ai/company=acme"))
    ).items
    assert secrets and all(s["type"] == "Opaque" for s in secrets)
    copied = [s for s in secrets if "ANTHROPIC_API_KEY" in (s.get("data") or {})]
    assert base64.b64decode(copied[0]["data"]["ANTHROPIC_API_KEY"]).decode() == "sk-test"

    data = await kube_client.get(STATEFUL_SET, "acme-data", namespace)
    pod_spec = data["spec"]["template"]["spec"]
    assert pod_spec["serviceAccountName"] == "acme-engine"
    assert pod_spec["securityContext"]["runAsUser"] == 10001
    assert data["spec"]["template"]["spec"]["containers"][0]["image"] == IMAGE
    template = data["spec"]["volumeClaimTemplates"][0]
    assert template["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert template["spec"]["resources"]["requests"]["storage"] == "12Gi"
    pod = await kube_client.get(POD, "acme-data-0", namespace)
    assert pod["spec"]["nodeName"] == KWOK_NODE
    claim = await kube_client.get(PERSISTENT_VOLUME_CLAIM, "data-acme-data-0", namespace)
    assert claim["metadata"]["annotations"][CLAIM_ANNOTATION] in ("0.2.0", "v0.2.0")
    for pdb_name in ("acme-data", "acme-seats"):
        pdb = await kube_client.get(POD_DISRUPTION_BUDGET, pdb_name, namespace)
        assert pdb["spec"]["selector"]["matchLabels"] == {
            "app.kubernetes.io/name": "crewlet",
            "crewlet.ai/company": "acme",
            "app.kubernetes.io/component": pdb_name.removeprefix("acme-"),
        }

    # The class counts its company and finds its references.
    async def class_status() -> bool:
        ec = await kube_client.get(ENGINE_CLASS, f"std-{namespace}")
        status = ec.get("status") or {}
        resolved = find_condition(status.get("conditions"), "ReferencesResolved")
        return status.get("companies") == 1 and bool(resolved and resolved["status"] == "True")

    await eventually(class_status, timeout=30, message="EngineClass status")

    # Rotating the referenced Secret reaches the copy.
    await kube_client.replace(
        SECRET,
        {
            **(await kube_client.get(SECRET, f"keys-{namespace}", PLATFORM)),
            "data": {"anthropic": base64.b64encode(b"sk-rotated").decode()},
        },
    )

    async def rotated() -> bool:
        copy = await kube_client.get(SECRET, copied[0]["metadata"]["name"], namespace)
        return base64.b64decode(copy["data"]["ANTHROPIC_API_KEY"]) == b"sk-rotated"

    await eventually(rotated, timeout=30, message="Secret copy rotated")


async def test_class_not_allowed_in_an_unlabelled_namespace(
    running: Operator, kube_client: Client, namespace: str
) -> None:
    await kube_client.create(
        ENGINE_CLASS,
        engine_class(
            f"tenants-{namespace}", allowedNamespaces={"matchLabels": {"crewlet.ai/tenant": "yes"}}
        ),
    )
    await kube_client.create(COMPANY, company(namespace, "acme", f"tenants-{namespace}"))
    refused = await wait_condition(
        kube_client, namespace, "acme", "Accepted", "False", reason="ClassNotAllowed"
    )
    assert "allowedNamespaces" in refused["message"]
    assert await kube_client.get_or_none(STATEFUL_SET, "acme-data", namespace) is None
    # Labelling the namespace admits it.
    await kube_client.patch(
        NAMESPACE, namespace, {"metadata": {"labels": {"crewlet.ai/tenant": "yes"}}}
    )
    await wait_condition(kube_client, namespace, "acme", "Accepted", "True")


async def test_missing_class_and_missing_secret_are_reported(
    running: Operator, kube_client: Client, namespace: str
) -> None:
    await kube_client.create(COMPANY, company(namespace, "acme", f"nope-{namespace}"))
    await wait_condition(
        kube_client, namespace, "acme", "Accepted", "False", reason="ClassNotFound"
    )
    await kube_client.create(
        ENGINE_CLASS,
        engine_class(
            f"nope-{namespace}",
            modelKeys=[
                {
                    "name": "OPENAI_API_KEY",
                    "secretRef": {"namespace": PLATFORM, "name": f"absent-{namespace}", "key": "k"},
                }
            ],
        ),
    )
    await wait_condition(
        kube_client, namespace, "acme", "Accepted", "False", reason="SecretNotFound"
    )
    await kube_client.create(SECRET, secret(PLATFORM, f"absent-{namespace}", k="v"))
    await wait_condition(kube_client, namespace, "acme", "Accepted", "True")


async def test_downgrade_is_refused_and_the_statefulset_left_alone(
    running: Operator, kube_client: Client, namespace: str
) -> None:
    class_name = f"ver-{namespace}"
    await kube_client.create(ENGINE_CLASS, engine_class(class_name))
    await kube_client.create(COMPANY, company(namespace, "acme", class_name))
    await wait_condition(kube_client, namespace, "acme", "Ready", "True", timeout=120)
    await kube_client.patch(
        ENGINE_CLASS,
        class_name,
        {"spec": {"engine": {"image": "ghcr.io/crewlet/crewlet-operator/engine:v0.1.0"}}},
    )
    refused = await wait_condition(
        kube_client, namespace, "acme", "Accepted", "False", reason="DowngradeRefused"
    )
    assert "0.2.0" in refused["message"]
    data = await kube_client.get(STATEFUL_SET, "acme-data", namespace)
    assert data["spec"]["template"]["spec"]["containers"][0]["image"] == IMAGE
    # Moving forward is accepted again.
    newer = "ghcr.io/crewlet/crewlet-operator/engine:v0.3.0"
    await kube_client.patch(ENGINE_CLASS, class_name, {"spec": {"engine": {"image": newer}}})
    await wait_condition(kube_client, namespace, "acme", "Accepted", "True")

    async def rolled() -> bool:
        sts = await kube_client.get(STATEFUL_SET, "acme-data", namespace)
        return bool(sts["spec"]["template"]["spec"]["containers"][0]["image"] == newer)

    await eventually(rolled, message="StatefulSet on the newer engine")


async def test_a_tag_pinned_by_digest_is_ordered_and_a_bare_digest_is_not(
    running: Operator, kube_client: Client, namespace: str
) -> None:
    """ "Its tag is a semantic version, so the operator orders it": also when a digest pins it
    (v0.3.0@sha256:a... then v0.2.0@sha256:b... is refused); an image named by a bare digest is
    no semantic version and is accepted, unprotected."""
    engine = "ghcr.io/crewlet/crewlet-operator/engine"
    class_name = f"pin-{namespace}"
    await kube_client.create(
        ENGINE_CLASS,
        engine_class(class_name, engine={"image": f"{engine}:v0.3.0@sha256:" + "a" * 64}),
    )
    await kube_client.create(COMPANY, company(namespace, "acme", class_name))
    await wait_condition(kube_client, namespace, "acme", "Ready", "True", timeout=120)
    status = (await kube_client.get(COMPANY, "acme", namespace))["status"]
    assert (status["versionProtection"], status["highestEngineVersion"]) == ("Ordered", "0.3.0")

    older = f"{engine}:v0.2.0@sha256:" + "b" * 64
    await kube_client.patch(ENGINE_CLASS, class_name, {"spec": {"engine": {"image": older}}})
    refused = await wait_condition(
        kube_client, namespace, "acme", "Accepted", "False", reason="DowngradeRefused"
    )
    assert "0.3.0" in refused["message"]
    data = await kube_client.get(STATEFUL_SET, "acme-data", namespace)
    assert data["spec"]["template"]["spec"]["containers"][0]["image"].startswith(f"{engine}:v0.3.0")

    bare = f"{engine}@sha256:" + "c" * 64
    await kube_client.patch(ENGINE_CLASS, class_name, {"spec": {"engine": {"image": bare}}})
    accepted = await wait_condition(kube_client, namespace, "acme", "Accepted", "True")
    assert "DowngradeRefused does not protect this company" in accepted["message"]
    status = (await kube_client.get(COMPANY, "acme", namespace))["status"]
    assert status["versionProtection"] == "Unordered"


async def test_suspend_resume_and_delete_keep_the_claim(
    running: Operator, kube_client: Client, namespace: str
) -> None:
    class_name = f"susp-{namespace}"
    await kube_client.create(ENGINE_CLASS, engine_class(class_name))
    await kube_client.create(COMPANY, company(namespace, "acme", class_name))
    await wait_condition(kube_client, namespace, "acme", "Ready", "True", timeout=120)
    claim = await kube_client.get(PERSISTENT_VOLUME_CLAIM, "data-acme-data-0", namespace)

    await kube_client.patch(COMPANY, "acme", {"spec": {"suspend": True}}, namespace)
    await wait_condition(kube_client, namespace, "acme", "Suspended", "True")
    for sts_name in ("acme-data", "acme-seats"):
        sts = await kube_client.get(STATEFUL_SET, sts_name, namespace)
        assert sts["spec"]["replicas"] == 0
    await kube_client.patch(COMPANY, "acme", {"spec": {"suspend": False}}, namespace)
    await wait_condition(kube_client, namespace, "acme", "Ready", "True", timeout=120)
    same = await kube_client.get(PERSISTENT_VOLUME_CLAIM, "data-acme-data-0", namespace)
    assert same["metadata"]["uid"] == claim["metadata"]["uid"]

    await kube_client.delete(COMPANY, "acme", namespace)

    async def children_gone() -> bool:
        left = await kube_client.list(STATEFUL_SET, Scope(namespace))
        return not left.items

    await eventually(children_gone, timeout=60, message="children garbage-collected")
    kept = await kube_client.get(PERSISTENT_VOLUME_CLAIM, "data-acme-data-0", namespace)
    assert kept["metadata"]["uid"] == claim["metadata"]["uid"]
    assert kept["metadata"].get("deletionTimestamp") is None


async def test_a_class_counts_the_companies_that_name_it(
    running: Operator, kube_client: Client, namespace: str
) -> None:
    """``status.companies`` follows creates, a company moved to another class (both classes
    recount) and deletes; the companies' own status writes are not the class's business."""
    first, second = f"count-a-{namespace}", f"count-b-{namespace}"
    for class_name in (first, second):
        await kube_client.create(ENGINE_CLASS, engine_class(class_name))
    for company_name in ("stays", "moves"):
        await kube_client.create(COMPANY, company(namespace, company_name, first))

    counted = {first: 2, second: 0}
    await eventually(class_counts(kube_client, counted), message="both in the first class")
    await kube_client.patch(COMPANY, "moves", {"spec": {"className": second}}, namespace)
    counted = {first: 1, second: 1}
    await eventually(class_counts(kube_client, counted), message="the moved company recounted")
    await kube_client.delete(COMPANY, "stays", namespace)
    counted = {first: 0, second: 1}
    await eventually(class_counts(kube_client, counted), message="the deleted one uncounted")


async def test_resync_after_convergence_makes_zero_mutating_requests(
    running: Operator,
    daemon_kubeconfig: Path,
    kube_client: Client,
    namespace: str,
    control_plane: ControlPlane,
    tmp_path: Path,
) -> None:
    # Earlier tests' namespaces being torn down cause writes of their own: let them finish.
    await eventually(
        no_namespace_terminating(kube_client), timeout=120, message="namespaces deleted"
    )
    class_name = f"sync-{namespace}"
    await kube_client.create(ENGINE_CLASS, engine_class(class_name))
    for i in range(3):
        await kube_client.create(COMPANY, company(namespace, f"c{i}", class_name))
    for i in range(3):
        await wait_condition(kube_client, namespace, f"c{i}", "Ready", "True", timeout=120)

    await eventually(
        class_counts(kube_client, {class_name: 3}), message="the class counts its three companies"
    )
    await eventually(claims_settled(kube_client, namespace), timeout=60, message="claims settled")
    running.stop()  # a restart: the new process lists everything and reconciles it all again
    before = control_plane.mutating_requests(WRITTEN_RESOURCES)
    async with operator(daemon_kubeconfig, tmp_path) as again:

        def reconciled() -> float:
            return again.metric(
                'controller_runtime_reconcile_total{controller="company",result="success"}'
            )

        await eventually(lambda: reconciled() >= 3, timeout=60, message="resync")
    after = control_plane.mutating_requests(WRITTEN_RESOURCES)
    assert after == before, "a converged resync wrote to the API server"


async def test_webhook_route_is_an_ingress_without_the_gateway_api_and_an_httproute_with_it(
    crds: None,
    daemon_kubeconfig: Path,
    kube_client: Client,
    namespace: str,
    tmp_path: Path,
) -> None:
    gateway_crds = load_crds(binaries.find("gateway-api-crds.yaml"))
    # The Gateway API is detected at start-up: an earlier run of this test installed it.
    await remove_crds(kube_client, gateway_crds)
    class_name = f"route-{namespace}"
    await kube_client.create(
        ENGINE_CLASS,
        engine_class(
            class_name,
            exposure={
                "gateway": {"parentRefs": [{"name": "public", "namespace": PLATFORM}]},
                "ingress": {"className": "nginx"},
            },
        ),
    )
    await kube_client.create(
        COMPANY, company(namespace, "acme", class_name, webhookHostname="acme.example.com")
    )

    async def ingress() -> dict[str, Any] | None:
        return await kube_client.get_or_none(INGRESS, "acme-webhooks", namespace)

    async with operator(daemon_kubeconfig, tmp_path / "without") as unsharded:
        found = await eventually(ingress, timeout=60, message="Ingress written")

        # Unsharded, the cluster view reads the cache's informer of the companies: the
        # claimant of a hostname is held once, as every other company.
        async def held_once() -> bool:
            stored = len((await kube_client.list(COMPANY)).items)
            held = unsharded.metric('crewlet_operator_cache_objects{kind="Company.crewlet.ai"}')
            return held == stored

        await eventually(held_once, timeout=30, message="each company held once")
    rule = found["spec"]["rules"][0]
    assert rule["host"] == "acme.example.com"
    assert rule["http"]["paths"][0]["path"] == "/webhooks"

    # Install the Gateway API, then start the operator again.
    await install_crds(kube_client, gateway_crds)
    async with operator(daemon_kubeconfig, tmp_path / "with"):

        async def route() -> dict[str, Any] | None:
            return await kube_client.get_or_none(HTTP_ROUTE, "acme-webhooks", namespace)

        written = await eventually(route, timeout=60, message="HTTPRoute written")
        assert written["spec"]["hostnames"] == ["acme.example.com"]
        assert written["spec"]["parentRefs"][0]["name"] == "public"
        await eventually(lambda: _none(ingress()), timeout=30, message="Ingress removed")


async def test_a_restart_renders_again_only_what_changed_since_the_leaders_checkpoint(
    crds: None,
    kube_client: Client,
    namespace: str,
    control_plane: ControlPlane,
    tmp_path: Path,
) -> None:
    """The leader leaves a checkpoint in its Lease (crewlet_operator_daemon.checkpoint), and the
    next process renders only the companies something changed for since, as the manager, under the
    chart's RBAC and policy. A restart with nothing changed skips every company and writes
    nothing; a child edited by someone else, a referenced Secret's new data and a class's new
    spec, each made while no operator ran, are applied, while the company nothing changed for
    is skipped; a child deleted while none ran is made again (every company in full: a deleted
    child leaves nothing newer behind)."""
    kubeconfig = await manager_kubeconfig(
        kube_client,
        control_plane,
        tmp_path / "sa",
        leader_election=True,
        documents=chart_documents(MANAGER_VALUES),
    )
    lease = f"restart-{namespace}"
    # Earlier tests' namespaces being torn down delete children of their own: children created
    # or deleted after a checkpoint (rightly) make the next start reconcile everything.
    await eventually(no_namespace_terminating(kube_client), timeout=120, message="quiet")

    def start(name: str) -> contextlib.AbstractAsyncContextManager[Operator]:
        return operator(
            kubeconfig,
            tmp_path / name,
            leader_elect=True,
            lease_namespace=MANAGER_NAMESPACE,
            args=[f"--leader-election-id={lease}", "--log-level=debug"],
        )

    async def first_pass(daemon: Operator) -> None:
        def reconciled() -> float:
            return daemon.metric(
                'controller_runtime_reconcile_total{controller="company",result="success"}'
            )

        await eventually(lambda: reconciled() >= 4, timeout=60, message="first pass")

    keys, still, moved, grown = (f"{n}-{namespace}" for n in ("keys", "still", "moved", "grown"))
    key_ref = {"namespace": PLATFORM, "name": keys, "key": "anthropic"}
    await kube_client.create(SECRET, secret(PLATFORM, keys, anthropic="sk-before"))
    await kube_client.create(ENGINE_CLASS, engine_class(still))
    await kube_client.create(
        ENGINE_CLASS,
        engine_class(moved, modelKeys=[{"name": "ANTHROPIC_API_KEY", "secretRef": key_ref}]),
    )
    await kube_client.create(ENGINE_CLASS, engine_class(grown))
    names = {"steady": still, "edited": still, "rolled": moved, "regrown": grown}
    async with start("first"):
        for company_name, class_name in names.items():
            await kube_client.create(COMPANY, company(namespace, company_name, class_name))
        for company_name in names:
            await wait_condition(kube_client, namespace, company_name, "Ready", "True", timeout=120)

        await eventually(class_counts(kube_client, {still: 2}), message="the class counts them")
        await eventually(claims_settled(kube_client, namespace), timeout=60, message="claims")
        await eventually(
            checkpoint_covers(kube_client, lease, namespace), timeout=60, message="checkpoint"
        )
    lease_object = await kube_client.get(LEASE, lease, MANAGER_NAMESPACE)
    assert ANNOTATION in lease_object["metadata"]["annotations"]

    before = control_plane.mutating_requests(WRITTEN_RESOURCES)
    async with start("unchanged") as again:
        await first_pass(again)
        assert (
            again.count_log(
                "resuming from the restart checkpoint: companies unchanged since "
                "are not rendered again"
            )
            == 1
        )
        assert again.count_log("unchanged since the checkpoint") == 4
    assert control_plane.mutating_requests(WRITTEN_RESOURCES) == before, "a restart wrote"

    async with Client(control_plane.admin_config(), field_manager=TEST_FIELD_MANAGER) as someone:
        await someone.patch(
            STATEFUL_SET,
            "edited-data",
            {"spec": {"template": {"metadata": {"annotations": {CONFIG_HASH: "tampered"}}}}},
            namespace,
        )
        await someone.patch(
            SECRET, keys, {"data": {"anthropic": base64.b64encode(b"sk-after").decode()}}, PLATFORM
        )
        await someone.patch(
            ENGINE_CLASS, grown, {"spec": {"env": [{"name": "LOUD", "value": "1"}]}}
        )

    async def env_of(company_name: str) -> dict[str, str]:
        found = await kube_client.get(SECRET, f"{company_name}-env", namespace)
        return {k: base64.b64decode(v).decode() for k, v in (found.get("data") or {}).items()}

    async with start("changed") as changed:
        await first_pass(changed)

        async def tampering_undone() -> bool:
            sts = await kube_client.get(STATEFUL_SET, "edited-data", namespace)
            return bool(
                sts["spec"]["template"]["metadata"]["annotations"][CONFIG_HASH] != "tampered"
            )

        async def new_key_copied() -> bool:
            return (await env_of("rolled")).get("ANTHROPIC_API_KEY") == "sk-after"

        async def new_spec_applied() -> bool:
            sts = await kube_client.get(STATEFUL_SET, "regrown-data", namespace)
            env = sts["spec"]["template"]["spec"]["containers"][0].get("env") or []
            return {"name": "LOUD", "value": "1"} in env

        await eventually(tampering_undone, timeout=60, message="the edited child put back")
        await eventually(new_key_copied, timeout=60, message="the Secret's new data copied")
        await eventually(new_spec_applied, timeout=60, message="the class's new spec applied")
        assert changed.count_log("unchanged since the checkpoint") == 1  # steady alone

    async def api_service() -> dict[str, Any] | None:
        return await kube_client.get_or_none(SERVICE, "steady-api", namespace)

    await kube_client.delete(SERVICE, "steady-api", namespace)
    async with start("deleted") as after_delete:
        await eventually(api_service, timeout=60, message="the deleted child made again")
        await first_pass(after_delete)
        assert after_delete.count_log("unchanged since the checkpoint") == 0


# What PromQL names besides metrics: its functions, aggregations and keywords (the ones the
# chart's alerts and dashboard use; a name missing here fails the test below loudly).
PROMQL_WORDS = {
    "and", "by", "deriv", "histogram_quantile", "max", "min", "or", "rate", "sum", "time",
    "vector", "without",
}  # fmt: skip


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads: its identifiers, less label matchers and
    groupings, durations, numbers and PromQL's own words."""
    expr = re.sub(r'"[^"]*"', "", expr)  # string literals
    expr = re.sub(r"\{[^}]*\}", "", expr)  # label matchers
    expr = re.sub(r"\b(by|without)\s*\([^)]*\)", "", expr)  # groupings
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # ranges
    return set(re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", expr)) - PROMQL_WORDS


def test_metric_names_reads_only_the_metrics() -> None:
    expr = (
        "histogram_quantile(0.99, sum by (le, name) (rate(workqueue_queue_duration_seconds_bucket"
        '{namespace="$namespace", job="$job"}[5m]))) or vector(0) and time()'
    )
    assert metric_names(expr) == {"workqueue_queue_duration_seconds_bucket"}


async def test_the_alerts_and_the_dashboard_read_only_metrics_the_operator_exports(
    running: Operator, kube_client: Client, namespace: str
) -> None:
    """Every metric the chart's PrometheusRule and Grafana dashboard query is in a live scrape
    of the operator; the companies' gauge counts a refused company by its reason."""
    await kube_client.create(COMPANY, company(namespace, "acme", f"gone-{namespace}"))
    await wait_condition(
        kube_client, namespace, "acme", "Accepted", "False", reason="ClassNotFound"
    )
    refused = (
        'crewlet_operator_companies{condition="Accepted",reason="ClassNotFound",status="False"}'
    )
    await eventually(lambda: running.metric(refused) >= 1, message="the refused company counted")
    exported = running.metric_names()
    docs = chart_documents(
        {"prometheusRule": {"enabled": True}, "grafanaDashboard": {"enabled": True}}
    )
    (rule,) = (d for d in docs if d["kind"] == "PrometheusRule")
    (board,) = (
        d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("dashboard")
    )
    dashboard = json.loads(board["data"]["crewlet-operator.json"])
    queries = {
        **{r["alert"]: r["expr"] for group in rule["spec"]["groups"] for r in group["rules"]},
        **{
            f"{panel['title']} {target['refId']}": target["expr"]
            for panel in dashboard["panels"]
            for target in panel["targets"]
        },
    }
    assert len(queries) >= 6 + 14, sorted(queries)
    missing = {
        query: sorted(metric_names(expr) - exported)
        for query, expr in queries.items()
        if metric_names(expr) - exported
    }
    assert missing == {}, missing
    assert all(metric_names(expr) for expr in queries.values()), "each query reads a metric"


async def test_a_status_for_a_company_deleted_meanwhile_is_moot_not_an_error(
    kube_client: Client, namespace: str
) -> None:
    """A company deleted while its reconcile runs: the status write meets 404, which ends the
    reconcile (as controller-runtime's ``client.IgnoreNotFound``) instead of failing it and
    retrying with backoff, which counted a reconcile error for each deletion in flight."""
    status = {"observedGeneration": 1}
    here = {"name": "here", "namespace": namespace}
    await kube_client.create(COMPANY, company(namespace, "here", "standard"))
    assert await write_status(kube_client, COMPANY, here, status) is True
    assert (await kube_client.get(COMPANY, "here", namespace))["status"] == status
    await kube_client.delete(COMPANY, "here", namespace)
    await eventually(
        lambda: _none(kube_client.get_or_none(COMPANY, "here", namespace)),
        message="the company gone",
    )
    assert await write_status(kube_client, COMPANY, here, status) is False
