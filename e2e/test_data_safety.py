"""Data safety: the data claim survives everything the operator does (issue: Resilience).

A Company's data lives on the claim ``data-<company>-data-0``: the operator must never delete it,
nor change it beyond raising its engine-version high-water mark. This module runs the daemon as
the chart runs it (the manager's token, under dist/install.yaml's RBAC and admission policy, with
leader election in the chart's namespace) on a control plane of its own, whose audit log records
every write; the last test reads it: across the whole module, the operator's user never deleted
a PersistentVolumeClaim. (That is the unit-free check that no code path in
reconcilers/crewlet_operator_daemon/ or crewlet_operator/ deletes one: whatever the
code, the API server saw no such request.)
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import pytest_asyncio
from operator_helpers import (
    PLATFORM,
    ROOT,
    Daemon,
    admin_client,
    audited_writes,
    company,
    engine_class,
    fresh_namespace,
    manager_daemon,
    manager_user,
    own_control_plane,
    remove_crds,
    say,
    wait_condition,
    wait_converged,
)

from crewlet_operator import (
    PERSISTENT_VOLUME_CLAIM,
    STATEFUL_SET,
    Client,
    NotFoundError,
)
from crewlet_operator.envtest import ControlPlane
from crewlet_operator.envtest.crds import install_crds, load_crds
from crewlet_operator.envtest.wait import eventually
from crewlet_operator_daemon.api.v1alpha1 import COMPANY, ENGINE_CLASS
from crewlet_operator_daemon.versions import CLAIM_ANNOTATION

V2 = "ghcr.io/crewlet/crewlet-operator/engine:v0.2.0"
V3 = "ghcr.io/crewlet/crewlet-operator/engine:v0.3.0"
NO_SEATS = {"seats": {"replicas": 0}}
STEPS = ("Company", "EngineClass", "CRDs")

Object = dict[str, Any]


def claim_name(company_name: str) -> str:
    return f"data-{company_name}-data-0"


# -- the module's control plane and daemon ---------------------------------------------------------


# A plane of its own: its audit log shows that no claim is deleted, whatever the order.
@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    with own_control_plane(tmp_path_factory.mktemp("data-safety")) as plane:
        yield plane


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def client(plane: ControlPlane) -> AsyncIterator[Client]:
    async with admin_client(plane, PLATFORM) as admin:
        yield admin


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def daemon(
    plane: ControlPlane, client: Client, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Daemon]:
    async with manager_daemon(plane, client, tmp_path_factory.mktemp("daemon")) as holder:
        yield holder


async def running_company(client: Client, ns: str, name: str, class_name: str) -> Object:
    """Create the Company, wait until it is Ready, and return its bound, marked data claim."""
    await client.create(COMPANY, company(ns, name, class_name))
    await wait_condition(client, ns, name, "Ready", "True", timeout=120)

    async def marked() -> Object | None:
        claim = await client.get_or_none(PERSISTENT_VOLUME_CLAIM, claim_name(name), ns)
        annotations = ((claim or {}).get("metadata") or {}).get("annotations") or {}
        phase = ((claim or {}).get("status") or {}).get("phase")
        return claim if CLAIM_ANNOTATION in annotations and phase == "Bound" else None

    claim = await eventually(marked, timeout=60, message="data claim bound and marked")
    assert claim is not None
    return claim


def unchanged_part(claim: Object) -> Object:
    """What no suspension, resume or refusal may change: identity, spec, labels, annotations
    other than the high-water mark, and no deletion."""
    meta = claim["metadata"]
    annotations = {
        k: v for k, v in (meta.get("annotations") or {}).items() if k != CLAIM_ANNOTATION
    }
    return {
        "uid": meta["uid"],
        "spec": claim["spec"],
        "labels": meta.get("labels"),
        "annotations": annotations,
        "ownerReferences": meta.get("ownerReferences"),
        "deletionTimestamp": meta.get("deletionTimestamp"),
    }


async def statefulset_gone(client: Client, ns: str, name: str) -> None:
    async def gone() -> bool:
        return await client.get_or_none(STATEFUL_SET, f"{name}-data", ns) is None

    await eventually(gone, timeout=60, message=f"{ns}/{name}'s StatefulSet collected")


# -- suspension ------------------------------------------------------------------------------------


async def test_suspend_and_resume_never_change_the_claim(client: Client, daemon: Daemon) -> None:
    ns = await fresh_namespace(client, "ds-suspend")
    await client.create(ENGINE_CLASS, engine_class("ds-suspend", **NO_SEATS))
    claim = await running_company(client, ns, "acme", "ds-suspend")
    before = unchanged_part(claim)
    mark = claim["metadata"]["annotations"][CLAIM_ANNOTATION]
    for cycle in range(2):
        await client.patch(COMPANY, "acme", {"spec": {"suspend": True}}, ns)
        await wait_condition(client, ns, "acme", "Suspended", "True")

        async def scaled_down() -> bool:
            sts = await client.get(STATEFUL_SET, "acme-data", ns)
            return sts["spec"]["replicas"] == 0 and not (sts.get("status") or {}).get("replicas")

        await eventually(scaled_down, timeout=60, message="data pod gone")
        suspended = await client.get(PERSISTENT_VOLUME_CLAIM, claim_name("acme"), ns)
        assert unchanged_part(suspended) == before, cycle
        assert suspended["metadata"]["annotations"][CLAIM_ANNOTATION] == mark

        await client.patch(COMPANY, "acme", {"spec": {"suspend": False}}, ns)
        await wait_condition(client, ns, "acme", "Ready", "True", timeout=120)
        resumed = await client.get(PERSISTENT_VOLUME_CLAIM, claim_name("acme"), ns)
        assert unchanged_part(resumed) == before, cycle
        assert resumed["metadata"]["annotations"][CLAIM_ANNOTATION] == mark


# -- the version high-water mark -------------------------------------------------------------------


async def test_downgrade_refused_across_a_restart_and_a_recreated_company(
    client: Client, daemon: Daemon
) -> None:
    ns = await fresh_namespace(client, "ds-downgrade")
    await client.create(ENGINE_CLASS, engine_class("ds-ver", **NO_SEATS))
    await client.patch(ENGINE_CLASS, "ds-ver", {"spec": {"engine": {"image": V3}}})
    claim = await running_company(client, ns, "acme", "ds-ver")
    assert claim["metadata"]["annotations"][CLAIM_ANNOTATION] == "0.3.0"

    async def data_image() -> str | None:
        sts = await client.get_or_none(STATEFUL_SET, "acme-data", ns)
        if sts is None:
            return None
        return str(sts["spec"]["template"]["spec"]["containers"][0]["image"])

    await client.patch(ENGINE_CLASS, "ds-ver", {"spec": {"engine": {"image": V2}}})
    refused = await wait_condition(
        client, ns, "acme", "Accepted", "False", reason="DowngradeRefused"
    )
    assert "0.3.0" in refused["message"]
    assert await data_image() == V3

    # 1. Across a restart of the operator: the new process refuses again, and writes nothing.
    daemon.stop()
    again = await daemon.start()

    def resynced() -> bool:
        sample = 'controller_runtime_reconcile_total{controller="company",result="success"}'
        return again.metric(sample) >= 1

    await eventually(resynced, timeout=60, message="the new process reconciled")
    await wait_condition(client, ns, "acme", "Accepted", "False", reason="DowngradeRefused")
    assert await data_image() == V3

    # 2. Across a delete and a recreate of the Company: no status, no StatefulSet left, only the
    # claim remembers.
    await client.delete(COMPANY, "acme", ns)
    await statefulset_gone(client, ns, "acme")
    kept = await client.get(PERSISTENT_VOLUME_CLAIM, claim_name("acme"), ns)
    assert unchanged_part(kept) == unchanged_part(claim)
    assert kept["metadata"]["annotations"][CLAIM_ANNOTATION] == "0.3.0"
    await client.create(COMPANY, company(ns, "acme", "ds-ver"))
    refused = await wait_condition(
        client, ns, "acme", "Accepted", "False", reason="DowngradeRefused"
    )
    assert "0.3.0" in refused["message"]
    await asyncio.sleep(2)  # a refused company's children are never created
    assert await data_image() is None

    # Forward again: the same claim carries the company's data.
    await client.patch(ENGINE_CLASS, "ds-ver", {"spec": {"engine": {"image": V3}}})
    await wait_condition(client, ns, "acme", "Ready", "True", timeout=120)
    assert await data_image() == V3
    back = await client.get(PERSISTENT_VOLUME_CLAIM, claim_name("acme"), ns)
    assert unchanged_part(back) == unchanged_part(claim)


# -- deletes in every order ------------------------------------------------------------------------


async def test_no_order_of_deletes_loses_a_data_claim(
    client: Client, daemon: Daemon, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every order of: delete the Company, delete its EngineClass, delete both CRDs (then
    reinstall them). Deleting the CRDs deletes every Company and EngineClass at once, so the
    six orders run side by side, each on its own Company and class, around one CRD deletion:
    what an order does before it happens first, what it does after, after."""
    orders = list(itertools.permutations(STEPS))
    claims: dict[int, Object] = {}

    async def set_up(i: int) -> None:
        ns = await fresh_namespace(client, f"ds-order-{i}")
        await client.create(ENGINE_CLASS, engine_class(f"ds-order-{i}", **NO_SEATS))
        claims[i] = await running_company(client, ns, "acme", f"ds-order-{i}")

    await asyncio.gather(*(set_up(i) for i in range(len(orders))))
    answers: dict[int, list[str]] = {i: [] for i in range(len(orders))}

    async def step(i: int, what: str) -> None:
        ns = f"ds-order-{i}"
        try:
            if what == "Company":
                await client.delete(COMPANY, "acme", ns)
                await statefulset_gone(client, ns, "acme")
            else:
                await client.delete(ENGINE_CLASS, f"ds-order-{i}")
                if await client.get_or_none(COMPANY, "acme", ns) is not None:
                    await wait_condition(
                        client, ns, "acme", "Accepted", "False", reason="ClassNotFound"
                    )
            answers[i].append(f"{what} deleted")
        except NotFoundError:
            answers[i].append(f"{what} already gone with the CRDs")

    async def before_crds(i: int, order: tuple[str, ...]) -> None:
        for what in order[: order.index("CRDs")]:
            await step(i, what)

    async def after_crds(i: int, order: tuple[str, ...]) -> None:
        for what in order[order.index("CRDs") + 1 :]:
            await step(i, what)

    await asyncio.gather(*(before_crds(i, order) for i, order in enumerate(orders)))
    crds = load_crds(ROOT / "manifests/crds")
    await remove_crds(client, crds)
    for i in range(len(orders)):
        answers[i].append("CRDs deleted")
        await statefulset_gone(client, f"ds-order-{i}", "acme")
    await install_crds(client, crds)
    await asyncio.gather(*(after_crds(i, order) for i, order in enumerate(orders)))

    for i, order in enumerate(orders):
        kept = await client.get_or_none(
            PERSISTENT_VOLUME_CLAIM, claim_name("acme"), f"ds-order-{i}"
        )
        assert kept is not None, order
        assert unchanged_part(kept) == unchanged_part(claims[i]), order
    say(
        capsys,
        "\n"
        + "\n".join(
            f"{' -> '.join(o)}: {'; '.join(answers[i])}; claim kept" for i, o in enumerate(orders)
        ),
    )

    # The operator got its kinds back: a new company converges.
    ns = await fresh_namespace(client, "ds-after-crds")
    await client.create(ENGINE_CLASS, engine_class("ds-after", **NO_SEATS))
    await client.create(COMPANY, company(ns, "acme", "ds-after", suspend=True))
    await wait_converged(client, [(ns, "acme")], timeout=120, namespace=ns)
    assert daemon.current is not None and daemon.current.alive()


# -- the audit log ---------------------------------------------------------------------------------


async def test_the_operator_never_deleted_a_claim(
    plane: ControlPlane, daemon: Daemon, capsys: pytest.CaptureFixture[str]
) -> None:
    """Across the whole module, as the API server recorded it."""
    writes = audited_writes(plane, {manager_user()})
    claim_writes = [w for w in writes if w.resource == "persistentvolumeclaims"]
    deletes = [str(w) for w in claim_writes if w.verb in ("delete", "deletecollection")]
    assert not deletes, deletes
    # Not vacuous: the operator did write, to claims too (the high-water mark).
    assert any(w.verb == "patch" and w.ok for w in claim_writes)
    by_verb: dict[str, int] = {}
    for write in writes:
        by_verb[write.verb] = by_verb.get(write.verb, 0) + 1
    say(
        capsys,
        f"\naudited {len(writes)} writes by {manager_user()} ({by_verb}); "
        f"{len(claim_writes)} to claims, none a delete",
    )
