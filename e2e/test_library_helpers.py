"""The helpers a platform team would otherwise hand-write, on the real API server: the finalizer
flow, adoption made explicit, status written only when it changed, kinds by discovery, the
manager's runnables, and the leader elector's word when it may not watch its Lease."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import pytest
import pytest_asyncio
from pydantic import BaseModel, Field
from structlog.testing import capture_logs

from crewlet_operator import (
    CONFIG_MAP,
    LEASE,
    ROLE,
    ROLE_BINDING,
    Client,
    ConflictError,
    Finalizer,
    ForbiddenError,
    InvalidError,
    Manager,
    NamedObjects,
    NotOwnedError,
    Resource,
    condition,
    controller_reference,
    set_condition,
)
from crewlet_operator._tasks import cancel_and_wait
from crewlet_operator.cache import Cache, Informer, InformerOptions, MetadataOnly, Stream
from crewlet_operator.crd import ConditionDict, crd_for, list_map
from crewlet_operator.envtest import ControlPlane, install_crds
from crewlet_operator.envtest.wait import eventually
from crewlet_operator.errors import NotServedError
from crewlet_operator.kube import Scope, resources
from crewlet_operator.kube.config import RestConfig
from crewlet_operator.kube.mapper import RESTMapper
from crewlet_operator.leader import LeaderElectionConfig, LeaderElector
from crewlet_operator.testing import manager_options_for_tests, run_manager

Object = dict[str, Any]


def config_map(namespace: str, name: str, **data: str) -> Object:
    return {"metadata": {"name": name, "namespace": namespace}, "data": data}


# -- the finalizer flow ----------------------------------------------------------------------


async def test_the_finalizer_is_added_before_anything_and_removed_after_the_cleanup(
    kube_client: Client, namespace: str
) -> None:
    cleaned: list[str] = []

    async def cleanup(obj: Object) -> None:
        cleaned.append(obj["metadata"]["name"])

    finalizer = Finalizer(kube_client, CONFIG_MAP, "example.com/cleanup", cleanup)
    created = await kube_client.create(CONFIG_MAP, config_map(namespace, "guarded"))
    held = await finalizer.handle(created)
    assert held is not None and held["metadata"]["finalizers"] == ["example.com/cleanup"]
    assert await finalizer.handle(held) is held  # already there: no write
    await kube_client.delete(CONFIG_MAP, "guarded", namespace)
    deleting = await kube_client.get(CONFIG_MAP, "guarded", namespace)
    assert deleting["metadata"]["deletionTimestamp"] and cleaned == []
    assert await finalizer.handle(deleting) is None
    assert cleaned == ["guarded"]
    assert await kube_client.get_or_none(CONFIG_MAP, "guarded", namespace) is None


async def test_a_failing_cleanup_keeps_the_finalizer(kube_client: Client, namespace: str) -> None:
    async def cleanup(obj: Object) -> None:
        raise RuntimeError("the bucket is not empty yet")

    finalizer = Finalizer(kube_client, CONFIG_MAP, "example.com/cleanup", cleanup)
    held = await finalizer.handle(await kube_client.create(CONFIG_MAP, config_map(namespace, "x")))
    assert held is not None
    await kube_client.delete(CONFIG_MAP, "x", namespace)
    with pytest.raises(RuntimeError, match="not empty yet"):
        await finalizer.handle(await kube_client.get(CONFIG_MAP, "x", namespace))
    still = await kube_client.get(CONFIG_MAP, "x", namespace)
    assert still["metadata"]["finalizers"] == ["example.com/cleanup"]
    await kube_client.patch(CONFIG_MAP, "x", {"metadata": {"finalizers": None}}, namespace)


async def test_finalizers_of_others_written_meanwhile_are_kept(
    kube_client: Client, namespace: str
) -> None:
    """A stale copy (another controller added its finalizer since) conflicts on the
    resourceVersion; the helper reads the object again and keeps both."""
    finalizer = Finalizer(kube_client, CONFIG_MAP, "example.com/mine", cleanup=_no_cleanup)
    stale = await kube_client.create(CONFIG_MAP, config_map(namespace, "shared"))
    await kube_client.patch(
        CONFIG_MAP, "shared", {"metadata": {"finalizers": ["other.example/theirs"]}}, namespace
    )
    held = await finalizer.handle(stale)
    assert held is not None
    assert held["metadata"]["finalizers"] == ["other.example/theirs", "example.com/mine"]
    # Deleting: the other controller lets go of its finalizer after our copy was read. Writing
    # the stale list without ours would put theirs back; the conflict makes us read again.
    await kube_client.delete(CONFIG_MAP, "shared", namespace)
    stale_deleting = await kube_client.get(CONFIG_MAP, "shared", namespace)
    await kube_client.patch(
        CONFIG_MAP, "shared", {"metadata": {"finalizers": ["example.com/mine"]}}, namespace
    )
    assert await finalizer.handle(stale_deleting) is None
    assert await kube_client.get_or_none(CONFIG_MAP, "shared", namespace) is None


async def _no_cleanup(obj: Object) -> None:
    """Nothing outside the object to clean up."""


def test_a_finalizer_name_must_be_qualified(kube_client: Client) -> None:
    with pytest.raises(ValueError, match="qualified"):
        Finalizer(kube_client, CONFIG_MAP, "cleanup", _no_cleanup)


# -- adoption is explicit --------------------------------------------------------------------


async def test_an_object_someone_else_made_is_not_taken_over(
    kube_client: Client, namespace: str
) -> None:
    theirs = await kube_client.create(CONFIG_MAP, config_map(namespace, "settings", mode="theirs"))
    desired = config_map(namespace, "settings", mode="mine")
    with pytest.raises(NotOwnedError, match="never applied by field manager"):
        await kube_client.apply_if_changed(CONFIG_MAP, desired, theirs)
    assert (await kube_client.get(CONFIG_MAP, "settings", namespace))["data"] == {"mode": "theirs"}
    adopted = await kube_client.apply_if_changed(CONFIG_MAP, desired, theirs, adopt=True)
    assert adopted is not None and adopted["data"] == {"mode": "mine"}
    # Applied once by us, it is ours: no adoption needed, and no write when nothing changed.
    assert await kube_client.apply_if_changed(CONFIG_MAP, desired, adopted) is None


async def test_an_object_controlled_by_another_owner_is_not_taken_over(
    kube_client: Client, namespace: str
) -> None:
    owner = await kube_client.create(CONFIG_MAP, config_map(namespace, "owner"))
    other = await kube_client.create(CONFIG_MAP, config_map(namespace, "other-owner"))
    child = config_map(namespace, "child", k="v")
    child["metadata"]["ownerReferences"] = [controller_reference(other)]
    existing = await kube_client.create(CONFIG_MAP, child)
    desired = config_map(namespace, "child", k="v")
    desired["metadata"]["ownerReferences"] = [controller_reference(owner)]
    with pytest.raises(NotOwnedError, match="controlled by ConfigMap other-owner"):
        await kube_client.apply_if_changed(CONFIG_MAP, desired, existing)
    desired_mine = {**desired, "metadata": {**desired["metadata"], "name": "mine"}}
    mine = await kube_client.create(CONFIG_MAP, desired_mine)
    # Controlled by the same owner (even if made by another field manager): ours, and equal.
    assert await kube_client.apply_if_changed(CONFIG_MAP, desired_mine, mine) is None
    changed = {**desired_mine, "data": {"k": "w"}}
    written = await kube_client.apply_if_changed(CONFIG_MAP, changed, mine)
    assert written is not None and written["data"] == {"k": "w"}


async def test_an_object_no_cache_holds_is_never_written_over(
    kube_client: Client, namespace: str
) -> None:
    """With nothing observed, the write only creates: a name someone else took (an object a
    label-scoped cache never sees) is found by the API server, and left exactly as it was."""
    theirs = await kube_client.create(CONFIG_MAP, config_map(namespace, "settings", mode="theirs"))
    owner = await kube_client.create(CONFIG_MAP, config_map(namespace, "owner"))
    desired = config_map(namespace, "settings", mode="mine")
    desired["metadata"]["ownerReferences"] = [controller_reference(owner)]
    for write in (
        kube_client.apply_if_changed(CONFIG_MAP, desired, None),
        kube_client.apply_owned(CONFIG_MAP, desired, None, dry_run=True),
    ):
        with pytest.raises(NotOwnedError, match="controlled by no one") as taken:
            await write
        assert taken.value.existing is not None
        assert taken.value.existing["metadata"]["uid"] == theirs["metadata"]["uid"]
    after = await kube_client.get(CONFIG_MAP, "settings", namespace)
    assert after["metadata"]["resourceVersion"] == theirs["metadata"]["resourceVersion"]
    assert "ownerReferences" not in after["metadata"] and after["data"] == {"mode": "theirs"}
    # A free name is created by an apply: its fields are owned as a later apply's are.
    free = {**desired, "metadata": {**desired["metadata"], "name": "free"}}
    made = await kube_client.apply_owned(CONFIG_MAP, free, None)
    entries = [(m["manager"], m["operation"]) for m in made["metadata"]["managedFields"]]
    assert entries == [(kube_client.field_manager, "Apply")]
    # Ours, though the caller had not seen it yet (a cache behind its own create): applied onto.
    again = await kube_client.apply_owned(CONFIG_MAP, {**free, "data": {"mode": "again"}}, None)
    assert again["metadata"]["uid"] == made["metadata"]["uid"]
    assert again["data"] == {"mode": "again"}


async def test_an_apply_lands_on_the_object_it_was_compared_with_or_on_none(
    kube_client: Client, namespace: str
) -> None:
    """The apply carries the observed object's uid: after a delete it creates nothing, and
    after a delete and a create by someone else it writes nothing over theirs."""
    owner = await kube_client.create(CONFIG_MAP, config_map(namespace, "owner"))
    desired = config_map(namespace, "child", k="v")
    desired["metadata"]["ownerReferences"] = [controller_reference(owner)]
    made = await kube_client.apply_owned(CONFIG_MAP, desired, None)
    await kube_client.delete(CONFIG_MAP, "child", namespace)
    changed = {**desired, "data": {"k": "w"}}
    with pytest.raises(ConflictError, match="no existing object was found"):
        await kube_client.apply_owned(CONFIG_MAP, changed, made)
    assert await kube_client.get_or_none(CONFIG_MAP, "child", namespace) is None
    theirs = await kube_client.create(CONFIG_MAP, config_map(namespace, "child", k="theirs"))
    with pytest.raises(
        ConflictError, match=f"no longer the object of uid {made['metadata']['uid']}"
    ):
        await kube_client.apply_owned(CONFIG_MAP, changed, made)
    after = await kube_client.get(CONFIG_MAP, "child", namespace)
    assert after["metadata"]["resourceVersion"] == theirs["metadata"]["resourceVersion"]


async def test_a_metadata_only_informer_holds_who_each_object_is_not_what_it_holds(
    kube_client: Client, namespace: str
) -> None:
    """``InformerOptions(storage=MetadataOnly())``: listed and watched as PartialObjectMetadata,
    stored and told under the kind's own apiVersion and kind, without the object's data."""
    await kube_client.create(CONFIG_MAP, config_map(namespace, "listed", secret="payload"))
    informer = Informer(
        kube_client, CONFIG_MAP, InformerOptions(scope=Scope(namespace), storage=MetadataOnly())
    )
    task = asyncio.create_task(informer.run())
    try:
        await informer.wait_for_sync(30)
        listed = informer.store.get(f"{namespace}/listed")
        assert listed is not None
        assert (listed["apiVersion"], listed["kind"]) == ("v1", "ConfigMap")
        assert set(listed) == {"apiVersion", "kind", "metadata"}
        assert "managedFields" not in listed["metadata"] and listed["metadata"]["uid"]
        await kube_client.create(CONFIG_MAP, config_map(namespace, "watched", secret="payload"))

        def watched() -> Object | None:
            return informer.store.get(f"{namespace}/watched")

        seen = await eventually(watched, timeout=30, message="the watch's metadata stored")
        assert seen is not None and set(seen) == {"apiVersion", "kind", "metadata"}
        assert seen["kind"] == "ConfigMap" and "managedFields" not in seen["metadata"]
        await kube_client.delete(CONFIG_MAP, "watched", namespace)
        await eventually(lambda: watched() is None, timeout=30, message="the delete told")
    finally:
        await cancel_and_wait(task)


# -- status written only when it changed -----------------------------------------------------


class _GadgetSpec(BaseModel):
    size: int = 1


class _GadgetStatus(BaseModel):
    phase: str | None = None
    conditions: list[ConditionDict] = Field(
        default_factory=list, json_schema_extra=list_map("type")
    )


class _Gadget(BaseModel):
    """A test kind with a status subresource."""

    spec: _GadgetSpec = Field(default_factory=_GadgetSpec)
    status: _GadgetStatus | None = None


GADGET_CRD = crd_for(
    _Gadget,
    group="helpers.example.com",
    version="v1",
    kind="Gadget",
    plural="gadgets",
    scope="Namespaced",
)


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def gadgets(kube_client: Client) -> Resource:
    await install_crds(kube_client, [GADGET_CRD])
    return await RESTMapper(kube_client).resource_for("helpers.example.com", "Gadget")


async def test_status_is_written_once_and_only_when_it_changed(
    kube_client: Client, namespace: str, gadgets: Resource
) -> None:
    gadget = await kube_client.create(gadgets, {"metadata": {"name": "g", "namespace": namespace}})
    now = datetime(2026, 1, 1, tzinfo=UTC)
    ready = condition("Ready", True, "Built", observed_generation=1)
    status = {"phase": "Built", "conditions": set_condition([], ready, now)}
    written = await kube_client.apply_status_if_changed(gadgets, status, gadget)
    assert written is not None and written["status"] == status
    version = written["metadata"]["resourceVersion"]
    assert await kube_client.apply_status_if_changed(gadgets, status, written) is None
    assert (await kube_client.get(gadgets, "g", namespace))["metadata"][
        "resourceVersion"
    ] == version
    # A field written before and left out now is a change (the apply removes it).
    fewer = {"conditions": status["conditions"]}
    trimmed = await kube_client.apply_status_if_changed(gadgets, fewer, written)
    assert trimmed is not None and trimmed["status"] == fewer


class _DialSpec(BaseModel):
    turn: float = Field(gt=0, lt=10)


class _Dial(BaseModel):
    """A test kind with exclusive bounds."""

    spec: _DialSpec


async def test_a_models_exclusive_bounds_are_enforced_by_the_api_server(
    kube_client: Client, namespace: str
) -> None:
    """``Field(gt=, lt=)`` makes a CRD the API server accepts, and it refuses the bounds."""
    dial_crd = crd_for(
        _Dial,
        group="helpers.example.com",
        version="v1",
        kind="Dial",
        plural="dials",
        scope="Namespaced",
    )
    await install_crds(kube_client, [dial_crd])
    dials = await RESTMapper(kube_client).resource_for("helpers.example.com", "Dial")

    def dial(turn: float) -> dict[str, Any]:
        return {"metadata": {"name": "d", "namespace": namespace}, "spec": {"turn": turn}}

    await kube_client.create(dials, dial(9.5), dry_run=True)
    for bound in (0, 10):
        with pytest.raises(InvalidError, match=r"spec\.turn"):
            await kube_client.create(dials, dial(bound), dry_run=True)


# -- kinds by discovery ----------------------------------------------------------------------


async def test_every_built_in_constant_is_what_the_api_server_serves(kube_client: Client) -> None:
    """The library's Resource constants against discovery: plural, scope and version."""
    mapper = RESTMapper(kube_client)
    constants = [v for v in vars(resources).values() if isinstance(v, Resource)]
    assert len(constants) > 25
    for constant in constants:
        if constant.group == "gateway.networking.k8s.io":
            continue  # the Gateway API is not built in
        served = await mapper.resource_for(constant.group, constant.kind, constant.version)
        assert served == constant, constant


async def test_the_mapper_prefers_the_servers_version_and_finds_a_late_crd(
    kube_client: Client,
) -> None:
    mapper = RESTMapper(kube_client)
    quota = await mapper.resource_for("", "ResourceQuota")
    assert (quota.version, quota.plural, quota.namespaced) == ("v1", "resourcequotas", True)
    with pytest.raises(NotServedError):
        await mapper.resource_for("late.example.com", "Thing")
    late = crd_for(
        _Gadget,
        group="late.example.com",
        version="v1",
        kind="Thing",
        plural="things",
        scope="Cluster",
    )
    await install_crds(kube_client, [late])
    thing = await mapper.resource_for("late.example.com", "Thing")
    assert thing == Resource("late.example.com", "v1", "Thing", "things", namespaced=False)


# -- the manager's runnables -----------------------------------------------------------------


class _Recorder:
    def __init__(self, name: str, journal: list[str]) -> None:
        self.name, self.journal = name, journal

    async def start(self) -> None:
        self.journal.append(f"start {self.name}")

    async def stop(self) -> None:
        self.journal.append(f"stop {self.name}")


async def test_the_manager_starts_its_runnables_and_stops_them_in_reverse(
    kube_client: Client,
) -> None:
    journal: list[str] = []
    manager = Manager(kube_client, manager_options_for_tests("runnables"))
    manager.add(_Recorder("a", journal))
    manager.add(_Recorder("b", journal))
    async with run_manager(manager):
        assert journal == ["start a", "start b"]
    assert journal == ["start a", "start b", "stop b", "stop a"]


async def grant(client: Client, namespace: str, account: str, role: str, rule: Object) -> None:
    """Grant the ServiceAccount ``account`` of ``namespace`` one rule there, by a Role and a
    RoleBinding both named ``role``."""
    meta = {"name": role, "namespace": namespace}
    await client.create(ROLE, {"metadata": meta, "rules": [rule]})
    await client.create(
        ROLE_BINDING,
        {
            "metadata": meta,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
        },
    )


# -- the leader elector when it may not watch its Lease -----------------------------------------


@pytest_asyncio.fixture(loop_scope="session")
async def lease_without_watch(
    kube_client: Client, control_plane: ControlPlane, namespace: str
) -> RestConfig:
    """A ServiceAccount that may get, create and update Leases in ``namespace``, not watch them."""
    rule = {
        "apiGroups": ["coordination.k8s.io"],
        "resources": ["leases"],
        "verbs": ["get", "create", "update"],
    }
    await grant(kube_client, namespace, "elector", "lease-no-watch", rule)
    return control_plane.service_account_config(namespace, "elector")


async def test_a_forbidden_lease_watch_is_said_once_and_polling_still_acquires(
    kube_client: Client, client_for: Any, lease_without_watch: RestConfig, namespace: str
) -> None:
    held_until = datetime.now(UTC)
    await kube_client.create(
        LEASE,
        {
            "metadata": {"name": "demo", "namespace": namespace},
            "spec": {
                "holderIdentity": "someone-else",
                "leaseDurationSeconds": 3,
                "renewTime": held_until.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                "acquireTime": held_until.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            },
        },
    )
    elector = LeaderElector(
        client_for(lease_without_watch),
        LeaderElectionConfig(
            name="demo",
            namespace=namespace,
            identity="me",
            lease_duration=3.0,
            renew_deadline=2.0,
            retry_period=0.5,
        ),
    )
    with capture_logs() as logs:
        await asyncio.wait_for(elector.acquire(), 30)
    warnings = [e for e in logs if e["event"].startswith("may not watch the lease")]
    assert len(warnings) == 1, logs
    assert warnings[0]["log_level"] == "warning"
    assert "grant list and watch on leases" in warnings[0]["event"]
    lease = await kube_client.get(LEASE, "demo", namespace)
    assert lease["spec"]["holderIdentity"] == "me"
    with contextlib.suppress(ConflictError):
        await elector.release()


# -- streamed lists --------------------------------------------------------------------------


async def _informer_syncs_and_watches(client: Client, namespace: str) -> Informer:
    for i in range(30):
        await client.create(CONFIG_MAP, config_map(namespace, f"listed-{i}"))
    informer = Informer(
        client, CONFIG_MAP, InformerOptions(scope=Scope(namespace), lists=Stream(page_size=7))
    )
    task = asyncio.create_task(informer.run())
    try:
        await informer.wait_for_sync(30)
        stored = informer.store.keys()
        assert len([k for k in stored if "/listed-" in k]) == 30
        await client.create(CONFIG_MAP, config_map(namespace, "after"))
        await eventually(lambda: informer.store.get(f"{namespace}/after"), message="watched")
        await client.delete(CONFIG_MAP, "listed-0", namespace)
        await eventually(lambda: informer.store.get(f"{namespace}/listed-0") is None)
    finally:
        await cancel_and_wait(task)
    return informer


async def test_an_informer_streams_its_list(kube_client: Client, namespace: str) -> None:
    """Kubernetes 1.37 streams a list as a watch's first events (WatchList)."""
    informer = await _informer_syncs_and_watches(kube_client, namespace)
    assert informer.streams_lists


async def test_an_api_server_that_refuses_streamed_lists_is_listed_in_pages(
    tmp_path: Path,
) -> None:
    with ControlPlane(tmp_path, apiserver_args=("--feature-gates=WatchList=false",)) as plane:
        async with Client(plane.admin_config()) as client:
            informer = await _informer_syncs_and_watches(client, "default")
    assert not informer.streams_lists


class _PlateSpec(BaseModel):
    owner: str = ""


class _Plate(BaseModel):
    """A test kind whose owner a CRD's next version makes selectable."""

    spec: _PlateSpec = Field(default_factory=_PlateSpec)


def _plate_crd(*, selectable: bool) -> dict[str, Any]:
    return crd_for(
        _Plate,
        group="helpers.example.com",
        version="v1",
        kind="Plate",
        plural="plates",
        scope="Namespaced",
        selectable_fields=[".spec.owner"] if selectable else [],
    )


async def test_a_list_refused_for_a_field_not_selectable_yet_is_retried_until_it_is(
    kube_client: Client, namespace: str
) -> None:
    """A list the API server refuses is retried, as client-go's reflector retries it, the
    refusal told: an informer selecting by a field its CRD makes selectable only in a later
    version (an operator upgraded before its CRD) lists once that version is installed."""
    await install_crds(kube_client, [_plate_crd(selectable=False)])
    plates = await RESTMapper(kube_client).resource_for("helpers.example.com", "Plate")
    for owner in ("a", "b"):
        plate = {"metadata": {"name": owner, "namespace": namespace}, "spec": {"owner": owner}}
        await kube_client.create(plates, plate)
    cache = Cache(kube_client)
    scope = Scope(namespace, field_selector="spec.owner=a")
    informer = cache.informer(plates, InformerOptions(scope=scope, max_backoff=1.0))
    await cache.start()
    try:
        await eventually(
            lambda: informer.watch_failures >= 2, timeout=30, message="refused, then retried"
        )
        (why,) = cache.not_synced()
        assert "not listed" in why and "spec.owner" in why, why
        await install_crds(kube_client, [_plate_crd(selectable=True)])
        await informer.wait_for_sync(60)
        assert informer.store.keys() == [f"{namespace}/a"]
    finally:
        await cache.stop()


# -- individually named objects ----------------------------------------------------------------


def answered_at_once(read: Coroutine[Any, Any, Object | None]) -> Object | None:
    """The answer of a read that must not wait: its value, or what it raised."""
    try:
        read.send(None)
    except StopIteration as done:
        return cast("Object | None", done.value)
    read.close()
    raise AssertionError("the read waited")


async def test_a_named_object_refused_then_granted_reads_as_soon_as_its_handlers_are_told(
    kube_client: Client, client_for: Any, control_plane: ControlPlane, namespace: str
) -> None:
    """A reader that may not read a named object is told so at once. Once granted, a handler
    told of the object by the informer's next list reads it then (the list not ended yet), not
    the refusal before: a reconcile that event started would report the object unreadable and
    not run again (a Company stayed ``SecretUnreadable``)."""
    await kube_client.create(CONFIG_MAP, config_map(namespace, "named", k="v"))
    reader = client_for(control_plane.service_account_config(namespace, "named-reader"))
    named = NamedObjects(reader, CONFIG_MAP)
    read_when_told: list[Object | Exception | None] = []

    class ReadWhenTold:
        def on_add(self, obj: Object, initial: bool = False) -> None:
            try:
                read_when_told.append(answered_at_once(named.read(namespace, "named", 10)))
            except Exception as exc:  # recorded for the assertion (a handler's raise is logged)
                read_when_told.append(exc)

        def on_update(self, old: Object, new: Object) -> None: ...

        def on_delete(self, obj: Object) -> None: ...

    named.add_handler(ReadWhenTold())
    try:
        with pytest.raises(ForbiddenError):
            await named.read(namespace, "named", timeout=10)
        rule = {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]}
        await grant(kube_client, namespace, "named-reader", "named-reader", rule)
        await eventually(lambda: read_when_told, timeout=30, message="the handler was told")
        (answer,) = read_when_told
        assert isinstance(answer, dict), answer
        assert answer["data"] == {"k": "v"}
    finally:
        await named.stop()
