"""Upgrades, uninstalls and reinstalls of the chart leave every company alone (issue 13, item 5).

On a control plane of the module's own (audit on, so that helm releases and the removal of the
installer's objects disturb no other module), in file order:

1. ``helm install`` of the chart, the daemon run as its manager runs (a real token of the chart's
   manager ServiceAccount, under the RBAC and admission policy helm installed, its Lease in the
   chart's namespace) and three companies in two namespaces brought to Ready;
2. ``helm upgrade`` with changed values rolls the manager's Deployment, and the daemon restarts
   as the new pod would: the API server's audit log shows no write by the manager to any
   company's children or status, from before the upgrade to the end of the new daemon's first
   pass;
3. ``helm uninstall`` keeps the CRDs, the companies and their data claims;
4. ``helm install`` again: the daemon picks the companies up, again without a write;
5. the removal of a ``dist/install.yaml`` install that docs/install.md shows, run as it is
   written there, keeps the CRDs and the companies.

Each test starts from where the one before left the plane.
"""

from __future__ import annotations

import asyncio
import datetime
import re
import shlex
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import pytest_asyncio
import yaml
from operator_helpers import (
    ROOT,
    TEST_FIELD_MANAGER,
    AuditedWrite,
    Daemon,
    Key,
    audited_writes,
    company,
    condition_of,
    engine_class,
    installer_documents,
    manager_user,
    own_control_plane,
    say,
)
from test_chart import CHART, MANAGER, RELEASE, RELEASE_NS, Tools, helm_install, helm_uninstall
from test_data_safety import NO_SEATS, claim_name, running_company

from crewlet_operator import (
    CUSTOM_RESOURCE_DEFINITION,
    DEPLOYMENT,
    NAMESPACE,
    PERSISTENT_VOLUME_CLAIM,
    POD,
    Client,
    Resource,
    Scope,
)
from crewlet_operator.envtest import ControlPlane, binaries
from crewlet_operator.envtest.wait import eventually
from crewlet_operator.metrics import RECONCILE_RESULTS
from crewlet_operator_daemon.api.v1alpha1 import COMPANY, ENGINE_CLASS

pytestmark = pytest.mark.release
"""Release-grade: ``make test-release`` runs it, ``make test`` leaves it out."""

REPLICA_SET = Resource("apps", "v1", "ReplicaSet", "replicasets")
CLASS = "upgrade"
COMPANIES = (("upgrade-a", "acme"), ("upgrade-a", "globex"), ("upgrade-b", "initech"))
IMAGE_REPOSITORY = "ghcr.io/crewlet/crewlet-operator"
INSTALLED: dict[str, Any] = {"image": {"tag": "v0.1.0"}}
UPGRADED: dict[str, Any] = {
    "image": {"tag": "v0.1.1"},
    "manager": {
        "replicas": 3,
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
    },
}
MANAGER_PODS = (
    "app.kubernetes.io/instance=crewlet-operator,app.kubernetes.io/component=controller-manager"
)
COMPANY_RESOURCES = frozenset(
    {
        "secrets",
        "serviceaccounts",
        "services",
        "statefulsets",
        "poddisruptionbudgets",
        "networkpolicies",
        "ingresses",
        "httproutes",
        "persistentvolumeclaims",
        "companies",
    }
)
"""What a write to a company is: to one of its children's kinds, or to the Company itself (its
status above all)."""
FIRST_PASS = {"company": len(COMPANIES), "engineclass": 1}
"""Each controller's reconciles in a daemon's first pass: every company, the one class."""

Object = dict[str, Any]


# -- the module's control plane, helm and daemon -----------------------------------------------


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    with own_control_plane(tmp_path_factory.mktemp("upgrade")) as plane:
        yield plane


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def client(plane: ControlPlane) -> AsyncIterator[Client]:
    """The admin, without the CRDs: helm installs them, as the chart's templates."""
    async with Client(plane.admin_config(), field_manager=TEST_FIELD_MANAGER) as admin:
        yield admin


@pytest.fixture(scope="module")
def tools(plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Tools:
    return Tools(plane.kubeconfig, tmp_path_factory.mktemp("helm-home"))


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """The daemon as the chart's manager: its kubeconfig is set once the release exists."""
    tmp = tmp_path_factory.mktemp("daemon")
    holder = Daemon(tmp / "unset.kubeconfig", tmp)
    yield holder
    holder.stop()


async def start_as_manager(plane: ControlPlane, daemon: Daemon) -> None:
    """Start the daemon with a fresh token of the release's manager ServiceAccount (a token is
    bound to the account's uid, so a reinstalled release needs a new one)."""
    token = plane.request_token(RELEASE_NS, MANAGER)
    daemon.kubeconfig = plane.token_config(token).write_kubeconfig(
        daemon.log_dir / f"manager-{daemon.starts + 1}.kubeconfig"
    )
    await daemon.start()


async def helm_upgrade(tools: Tools, values: dict[str, Any]) -> str:
    return await tools.helm(
        "upgrade", RELEASE, str(CHART), "-n", RELEASE_NS, "--wait", "--timeout", "2m", values=values
    )


# -- what the daemon did ---------------------------------------------------------------------------


def now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def writes_since(plane: ControlPlane, since: datetime.datetime) -> list[AuditedWrite]:
    """The manager's writes the API server received since ``since``."""
    return [w for w in audited_writes(plane, {manager_user()}) if w.received >= since]


def to_companies(writes: list[AuditedWrite]) -> list[AuditedWrite]:
    return [w for w in writes if w.resource in COMPANY_RESOURCES]


def beyond_the_lease(writes: list[AuditedWrite]) -> list[AuditedWrite]:
    """Writes to anything but the daemon's Lease (the class's status, events, ...)."""
    return [w for w in writes if w.resource != "leases"]


async def counted(client: Client) -> bool:
    engine = await client.get(ENGINE_CLASS, CLASS)
    return bool((engine.get("status") or {}).get("companies") == len(COMPANIES))


def by_resource(writes: list[AuditedWrite]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for write in writes:
        key = f"{write.verb} {write.resource}" + (
            f"/{write.subresource}" if write.subresource else ""
        )
        counts[key] = counts.get(key, 0) + 1
    return counts


def first_pass_done(daemon: Daemon) -> bool:
    """Every controller reconciled at least its first pass, and nothing is queued or running."""
    current = daemon.current
    assert current is not None
    for controller, wanted in FIRST_PASS.items():
        reconciled = sum(
            current.metric(
                f'controller_runtime_reconcile_total{{controller="{controller}",result="{result}"}}'
            )
            for result in RECONCILE_RESULTS
        )
        depth = current.metric(f'workqueue_depth{{name="{controller}",controller="{controller}"}}')
        active = current.metric(f'controller_runtime_active_workers{{controller="{controller}"}}')
        if reconciled < wanted or depth or active:
            return False
    return True


async def settled(daemon: Daemon) -> None:
    """Wait until the daemon has made its first pass and is idle; assert no reconcile failed."""
    await eventually(lambda: first_pass_done(daemon), timeout=90, message="first pass done")
    current = daemon.current
    assert current is not None
    for controller in FIRST_PASS:
        errors = current.metric(
            f'controller_runtime_reconcile_total{{controller="{controller}",result="error"}}'
        )
        assert errors == 0, (
            f"{controller}: {errors} failed reconciles; {current.process.log_tail(40)}"
        )


async def ready_conditions(client: Client) -> dict[Key, Object]:
    """Every company's Ready condition, each asserted True."""
    found = {}
    for ns, name in COMPANIES:
        cond = await condition_of(client, ns, name, "Ready")
        assert cond is not None and cond["status"] == "True", (ns, name, cond)
        found[(ns, name)] = cond
    return found


async def claim_uids(client: Client) -> dict[Key, str]:
    uids = {}
    for ns, name in COMPANIES:
        claim = await client.get(PERSISTENT_VOLUME_CLAIM, claim_name(name), ns)
        assert claim["metadata"].get("deletionTimestamp") is None
        uids[(ns, name)] = claim["metadata"]["uid"]
    return uids


async def uids(client: Client, resource: Resource) -> dict[Key, str]:
    """Every object of ``resource`` in the cluster not being deleted, by namespace and name."""
    return {
        (o["metadata"]["namespace"], o["metadata"]["name"]): o["metadata"]["uid"]
        for o in (await client.list(resource)).items
        if not o["metadata"].get("deletionTimestamp")
    }


async def existing(tools: Tools, docs: list[Object]) -> list[str]:
    """Which of ``docs`` exist, as kubectl names them."""
    out = await tools.kubectl(
        "get", "-f", "-", "-o", "name", "--ignore-not-found", stdin=yaml.safe_dump_all(docs)
    )
    return out.split()


async def crds_kept(client: Client, docs: list[Object]) -> None:
    names = [d["metadata"]["name"] for d in docs if d["kind"] == "CustomResourceDefinition"]
    assert sorted(names) == ["companies.crewlet.ai", "engineclasses.crewlet.ai"]
    for name in names:
        crd = await client.get(CUSTOM_RESOURCE_DEFINITION, name)
        assert crd["metadata"].get("deletionTimestamp") is None, name


def not_crds(docs: list[Object]) -> list[Object]:
    return [d for d in docs if d["kind"] != "CustomResourceDefinition"]


# -- the manager's Deployment ----------------------------------------------------------------------


def image_of(template: Object) -> str:
    return str(template["spec"]["containers"][0]["image"])


async def rolled_out(client: Client) -> Object | None:
    """The Deployment, once its rollout to the upgraded values is complete."""
    deployment = await client.get(DEPLOYMENT, MANAGER, RELEASE_NS)
    status = deployment.get("status") or {}
    replicas = UPGRADED["manager"]["replicas"]
    complete = (
        status.get("observedGeneration") == deployment["metadata"]["generation"]
        and status.get("replicas") == replicas
        and status.get("updatedReplicas") == replicas
        and status.get("readyReplicas") == replicas
        and status.get("availableReplicas") == replicas
    )
    return deployment if complete else None


async def manager_pods(client: Client) -> list[Object]:
    listed = await client.list(POD, Scope(RELEASE_NS, label_selector=MANAGER_PODS))
    return [p for p in listed.items if not p["metadata"].get("deletionTimestamp")]


def pod_ready(pod: Object) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


async def check_the_rollout(client: Client) -> None:
    new_image = f"{IMAGE_REPOSITORY}:{UPGRADED['image']['tag']}"
    old_image = f"{IMAGE_REPOSITORY}:{INSTALLED['image']['tag']}"
    deployment = await eventually(lambda: rolled_out(client), timeout=120, message="rolled out")
    assert deployment is not None
    template = deployment["spec"]["template"]
    assert deployment["spec"]["replicas"] == 3
    assert image_of(template) == new_image
    assert template["spec"]["containers"][0]["resources"] == UPGRADED["manager"]["resources"]
    progressing = next(c for c in deployment["status"]["conditions"] if c["type"] == "Progressing")
    assert progressing["reason"] == "NewReplicaSetAvailable", progressing

    # A new ReplicaSet runs the new template; the old one is scaled to nothing.
    sets = (await client.list(REPLICA_SET, Scope(RELEASE_NS, label_selector=MANAGER_PODS))).items
    by_image = {image_of(s["spec"]["template"]): s for s in sets}
    assert set(by_image) == {old_image, new_image}, sorted(by_image)
    assert by_image[old_image]["spec"]["replicas"] == 0
    assert by_image[new_image]["spec"]["replicas"] == 3
    assert by_image[new_image]["status"].get("readyReplicas") == 3

    async def new_pods_ready() -> bool:
        pods = await manager_pods(client)
        return len(pods) == 3 and all(image_of(p) == new_image and pod_ready(p) for p in pods)

    await eventually(new_pods_ready, timeout=60, message="three new manager pods Ready")


# -- the tests -------------------------------------------------------------------------------------


async def test_an_upgrade_rolls_the_manager_and_writes_nothing_to_the_companies(
    plane: ControlPlane,
    client: Client,
    tools: Tools,
    daemon: Daemon,
    capsys: pytest.CaptureFixture[str],
) -> None:
    started = now()
    await helm_install(tools, INSTALLED)
    deployment = await client.get(DEPLOYMENT, MANAGER, RELEASE_NS)
    assert deployment["status"].get("readyReplicas") == 2
    assert image_of(deployment["spec"]["template"]) == f"{IMAGE_REPOSITORY}:v0.1.0"
    for ns in {ns for ns, _ in COMPANIES}:
        await client.create(NAMESPACE, {"metadata": {"name": ns}})
    await client.create(ENGINE_CLASS, engine_class(CLASS, **NO_SEATS))
    await start_as_manager(plane, daemon)
    await asyncio.gather(*(running_company(client, ns, name, CLASS) for ns, name in COMPANIES))
    # Not vacuous: the manager's writes are in the log, under its name, and none was refused.
    installing = writes_since(plane, started)
    assert to_companies(installing), by_resource(installing)
    refused = [str(w) for w in installing if w.code in (403, 422)]
    assert not refused, refused

    # What the companies' creation still owes (the class's count, written at most once a second;
    # a status echo) is not the upgrade's.
    await eventually(lambda: counted(client), timeout=30, message="the class's companies counted")
    await settled(daemon)
    before = await ready_conditions(client)
    upgrade = now()
    await helm_upgrade(tools, UPGRADED)
    await check_the_rollout(client)
    assert await ready_conditions(client) == before

    # The new pod's process: SIGTERM the old one (it releases the Lease), start another.
    daemon.stop()
    await start_as_manager(plane, daemon)
    await settled(daemon)

    writes = writes_since(plane, upgrade)
    to_them = to_companies(writes)
    say(
        capsys,
        f"\nupgrade: {len(to_them)} writes by {manager_user()} to the companies' children and "
        f"status {by_resource(to_them)}; all its writes: {by_resource(writes)} (while installing "
        f"and creating the companies: {len(to_companies(installing))} to them)",
    )
    assert not to_them, [str(w) for w in to_them]
    assert not beyond_the_lease(writes), [str(w) for w in beyond_the_lease(writes)]
    assert await ready_conditions(client) == before


async def test_an_uninstall_keeps_the_crds_the_companies_and_their_claims(
    client: Client, tools: Tools, daemon: Daemon
) -> None:
    claims = await claim_uids(client)
    before = await ready_conditions(client)
    release = await tools.template(UPGRADED)
    daemon.stop()  # as the Deployment's deletion stops its pods
    out = await helm_uninstall(tools)
    assert "kept due to the resource policy" in out, out

    await crds_kept(client, release)
    assert await claim_uids(client) == claims
    assert await ready_conditions(client) == before

    async def removed() -> bool:
        return not await existing(tools, not_crds(release))

    await eventually(removed, timeout=60, message="the release's objects removed")


async def test_a_reinstall_picks_the_companies_up_without_a_write(
    plane: ControlPlane,
    client: Client,
    tools: Tools,
    daemon: Daemon,
    capsys: pytest.CaptureFixture[str],
) -> None:
    claims = await claim_uids(client)
    before = await ready_conditions(client)
    reinstall = now()
    await helm_install(tools, UPGRADED)
    try:
        await start_as_manager(plane, daemon)
        await settled(daemon)
        writes = writes_since(plane, reinstall)
        to_them = to_companies(writes)
        say(
            capsys,
            f"\nreinstall: {len(to_them)} writes by {manager_user()} to the companies' children "
            f"and status {by_resource(to_them)}; all its writes: {by_resource(writes)}",
        )
        assert not to_them, [str(w) for w in to_them]
        assert not beyond_the_lease(writes), [str(w) for w in beyond_the_lease(writes)]
        assert await ready_conditions(client) == before
        assert await claim_uids(client) == claims
    finally:
        daemon.stop()
        await helm_uninstall(tools)


def documented_removal() -> str:
    """The one shell block of docs/install.md's "### Uninstalling" section."""
    page = (ROOT / "docs" / "install.md").read_text()
    section = re.split(r"\n#{1,3} ", page.split("\n### Uninstalling\n", 1)[1], maxsplit=1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.DOTALL)
    assert len(blocks) == 1, blocks
    return str(blocks[0])


async def test_the_documented_removal_of_dist_install_yaml_keeps_the_crds_and_the_companies(
    client: Client, tools: Tools
) -> None:
    installer = installer_documents()
    await tools.kubectl("apply", "--server-side", "-f", str(ROOT / "dist" / "install.yaml"))

    async def manager_ready() -> bool:
        deployment = await client.get(DEPLOYMENT, MANAGER, RELEASE_NS)
        return bool((deployment.get("status") or {}).get("readyReplicas") == 2)

    await eventually(manager_ready, timeout=120, message="the installer's manager Ready")
    await tools.kubectl(
        "wait", "--for=condition=Established", "--timeout=60s",
        "crd/companies.crewlet.ai", "crd/engineclasses.crewlet.ai",
    )  # fmt: skip
    await client.create(NAMESPACE, {"metadata": {"name": "removal"}})
    await client.create(COMPANY, company("removal", "kept", CLASS))
    companies = await uids(client, COMPANY)
    claims = await uids(client, PERSISTENT_VOLUME_CLAIM)
    assert ("removal", "kept") in companies
    assert len(await existing(tools, not_crds(installer))) == len(not_crds(installer))

    command = documented_removal()
    kubectl = binaries.find("kubectl")
    script = (
        "set -euo pipefail\n"
        f"cd {shlex.quote(str(ROOT))}\n"
        f"PATH={shlex.quote(str(kubectl.parent))}:$PATH\n"
        f"{command}"
    )
    code, out, err = await tools.run("bash", "-c", script)
    assert code == 0, f"{command}\n{out}\n{err}"

    await crds_kept(client, installer)
    assert await uids(client, COMPANY) == companies
    assert await uids(client, PERSISTENT_VOLUME_CLAIM) == claims
    left = await existing(tools, not_crds(installer))
    assert not left, left
