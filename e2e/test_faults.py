"""Faults, with two replicas of the daemon as separate processes (issue: Resilience).

Everything here runs on a control plane of the module's own (workloads and audit on, a Service
range wide enough for 300 companies), so that killing etcd, the API server and the daemon
disturbs no other module. In file order:

1. the operator's own RBAC removed, then restored (one daemon, with the chart's identity, before
   the replicas start);
2. SIGKILL of the leader in a burst of 300 Companies; kube-apiserver, then etcd, killed and
   restarted mid-burst; a watch behind an etcd compaction (410 Gone); someone else's edits and
   deletes of children, all with two replicas;
3. the audit check: each replica connects as a user of its own (a client certificate,
   ``crewlet-replica-<n>``), so the API server's audit log tells them apart; from it alone the
   last test derives when each replica held the Lease, and checks that no replica wrote
   anything while it did not.

The daemon's informers keep the default 90 s read-inactivity watchdog (there is no flag for it,
by design), so a *silent* watch is not provoked here: the library's mechanism is proven in
``e2e/test_library.py::test_silent_watch_is_detected_and_replaced``. Broken and expired watches
are: the API server restart and the watch that falls behind an etcd compaction (410 Gone).
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from operator_helpers import (
    IMAGE,
    MANAGER_BINDING,
    MANAGER_NAMESPACE,
    MANAGER_ROLE,
    PLATFORM,
    RENEW_DEADLINE,
    AuditedWrite,
    Key,
    Operator,
    accepted,
    admin_client,
    audited_writes,
    company,
    create_retrying,
    engine_class,
    manager_kubeconfig,
    operator,
    own_control_plane,
    say,
    secret,
    wait_converged,
)

from crewlet_operator import (
    CLUSTER_ROLE,
    CLUSTER_ROLE_BINDING,
    CONFIG_MAP,
    NAMESPACE,
    NETWORK_POLICY,
    SECRET,
    STATEFUL_SET,
    Client,
    find_condition,
)
from crewlet_operator.envtest import ControlPlane
from crewlet_operator.envtest.wait import eventually
from crewlet_operator_daemon.api.v1alpha1 import COMPANY, ENGINE_CLASS

BURST = 300
NAMESPACES = ("burst-a", "burst-b", "burst-c")
MODEL_KEYS = "model-keys"
KEY_REF = {"namespace": PLATFORM, "name": MODEL_KEYS, "key": "anthropic"}
CLASSES: dict[str, dict[str, Any]] = {
    # Seats pods are not what these faults are about: none, to spare the two cores.
    "f-plain": {"seats": {"replicas": 0}},
    "f-keys": {
        "seats": {"replicas": 0},
        "modelKeys": [{"name": "ANTHROPIC_API_KEY", "secretRef": KEY_REF}],
    },
    "f-s3": {
        "seats": {"replicas": 0},
        "storage": {"size": "9Gi"},
        "files": {"s3": {"bucket": "companies", "region": "auto"}},
    },
}
RELISTED = "watch resourceVersion expired; relisting"
LEADERSHIP_LOST = "leader election lost; exiting"
IN_FLIGHT_SLACK = 2.0
"""Seconds a replica's last request may still arrive after it stopped (the in-flight request)."""


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


# -- the control plane and the replicas ------------------------------------------------------------


# A plane of its own: the module kills the API server and etcd, cuts the manager's RBAC and
# reads the audit log.
@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    with own_control_plane(tmp_path_factory.mktemp("faults")) as plane:
        yield plane


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def client(plane: ControlPlane) -> AsyncIterator[Client]:
    """An admin client (as someone else: its own field manager), with the CRDs, the platform
    namespace and its Secret, the burst's namespaces and three classes."""
    async with admin_client(plane, PLATFORM, *NAMESPACES) as admin:
        await admin.create(SECRET, secret(PLATFORM, MODEL_KEYS, anthropic="sk-one"))
        for name, spec in CLASSES.items():
            await admin.create(ENGINE_CLASS, engine_class(name, **spec))
        yield admin


class Replicas:
    """The daemon's replicas, each a process with a user of its own and leader election on."""

    def __init__(self, plane: ControlPlane, log_dir: Path) -> None:
        self.plane = plane
        self.log_dir = log_dir
        self.started: list[Operator] = []

    @property
    def running(self) -> list[Operator]:
        return [r for r in self.started if r.alive()]

    @property
    def users(self) -> set[str]:
        return {r.name for r in self.started}

    async def ensure(self, count: int = 2) -> list[Operator]:
        """Start new replicas (new users) until ``count`` run, and wait until they are ready."""
        while len(self.running) < count:
            user = f"crewlet-replica-{len(self.started)}"
            config = self.plane.user_config(user, ("system:masters",))
            kubeconfig = config.write_kubeconfig(self.log_dir / f"{user}.kubeconfig")
            self.started.append(Operator(kubeconfig, self.log_dir, name=user, leader_elect=True))
        for replica in self.running:
            await eventually(replica.ready, timeout=60, message=f"{replica.name} ready")
        return self.running

    async def leader(self, timeout: float = 60) -> Operator:
        """The one running replica that leads (waits until exactly one does)."""

        def one() -> Operator | None:
            leading = [r for r in self.running if r.leading()]
            return leading[0] if len(leading) == 1 else None

        found = await eventually(one, timeout=timeout, interval=0.1, message="exactly one leader")
        assert found is not None
        return found

    def stop_all(self) -> None:
        for replica in self.running:
            replica.stop()


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def replicas(
    plane: ControlPlane, client: Client, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Replicas]:
    group = Replicas(plane, tmp_path_factory.mktemp("replicas"))
    await group.ensure(2)
    yield group
    group.stop_all()


# -- bursts ----------------------------------------------------------------------------------------


def burst_keys(prefix: str, count: int) -> list[tuple[Key, str, bool]]:
    """``count`` Companies over the namespaces and classes; one in ten runs its engine, the
    rest are suspended (every child is still written, the StatefulSets at zero replicas)."""
    classes = list(CLASSES)
    return [
        ((NAMESPACES[i % 3], f"{prefix}{i}"), classes[(i // 3) % 3], i % 10 != 0)
        for i in range(count)
    ]


async def create_burst(client: Client, burst: list[tuple[Key, str, bool]]) -> None:
    """Create every Company, 16 requests in flight, retrying through outages."""
    gate = asyncio.Semaphore(16)

    async def one(key: Key, class_name: str, suspend: bool) -> None:
        async with gate:
            obj = company(key[0], key[1], class_name, suspend=suspend)
            await create_retrying(client, COMPANY, obj)

    await asyncio.gather(*(one(*entry) for entry in burst))


async def count_accepted(client: Client, keys: set[Key]) -> int:
    listed = await client.list(COMPANY)
    return sum(
        1
        for o in listed.items
        if (o["metadata"]["namespace"], o["metadata"]["name"]) in keys and accepted(o)
    )


async def burst_with_fault(
    client: Client,
    prefix: str,
    count: int,
    fault_after: int,
    fault: Callable[[], object],
    timeout: float,
) -> tuple[float, int]:
    """Create a burst, run ``fault()`` once ``fault_after`` Companies are Accepted, and wait
    until all converge; (seconds from the fault to convergence, Companies Accepted at the
    fault)."""
    burst = burst_keys(prefix, count)
    keys = {key for key, _, _ in burst}
    creating = asyncio.create_task(create_burst(client, burst))
    try:
        await eventually(
            lambda: _at_least(count_accepted(client, keys), fault_after),
            timeout=timeout,
            interval=1.0,
            message=f"{fault_after} Companies Accepted",
        )
        before = await count_accepted(client, keys)
        faulted = time.monotonic()
        fault()
    finally:
        await creating
    await wait_converged(client, keys, timeout=timeout)
    return time.monotonic() - faulted, before


async def _at_least(counting: Any, wanted: int) -> bool:
    return bool(await counting >= wanted)


# -- the operator's own Secret read, denied for a moment -------------------------------------------


async def test_rbac_removed_then_restored(
    plane: ControlPlane, client: Client, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The daemon under the chart's RBAC (the manager's token): its ClusterRoleBinding removed,
    then restored; later only its Secret reads denied, then restored. It runs first, before
    the replicas start (this scenario has one daemon, with the chart's identity)."""
    ns = "rbac"
    await client.create(NAMESPACE, {"metadata": {"name": ns}})
    kubeconfig = await manager_kubeconfig(client, plane, tmp_path, leader_election=True)
    await client.create(SECRET, secret(PLATFORM, "rbac-keys", k="v1"))
    await client.create(SECRET, secret(PLATFORM, "rbac-later", k="w1"))
    await client.create(SECRET, secret(PLATFORM, "rbac-read", k="z1"))

    def keys_of(name: str) -> list[dict[str, Any]]:
        ref = {"namespace": PLATFORM, "name": name, "key": "k"}
        return [{"name": "ANTHROPIC_API_KEY", "secretRef": ref}]

    async def copied(company_name: str) -> bytes:
        env = await client.get(SECRET, f"{company_name}-env", ns)
        return base64.b64decode(env["data"]["ANTHROPIC_API_KEY"])

    async with operator(
        kubeconfig, tmp_path, leader_elect=True, lease_namespace=MANAGER_NAMESPACE
    ) as daemon:
        await client.create(ENGINE_CLASS, engine_class("rbac-one", modelKeys=keys_of("rbac-keys")))
        await client.create(COMPANY, company(ns, "before", "rbac-one"))
        await wait_converged(client, [(ns, "before")], timeout=90, namespace=ns)

        # 1. The manager's ClusterRoleBinding goes: no read, no write, not even its status.
        binding = await client.get(CLUSTER_ROLE_BINDING, MANAGER_BINDING)
        await client.delete(CLUSTER_ROLE_BINDING, MANAGER_BINDING)
        await client.patch(SECRET, "rbac-keys", {"data": {"k": b64("v2")}}, PLATFORM)
        await client.create(ENGINE_CLASS, engine_class("rbac-two", modelKeys=keys_of("rbac-later")))
        await client.create(COMPANY, company(ns, "during", "rbac-two"))

        def tried(name: str) -> bool:
            failed = "reconcile failed; retrying with backoff"
            return any(
                e.get("event") == failed and e.get("name") == name for e in daemon.log_events()
            )

        # The Secret's first list is refused at once; then so is the status write.
        await eventually(lambda: tried("during"), timeout=60, message="the operator tried")
        during = await client.get(COMPANY, "during", ns)
        assert await client.get_or_none(STATEFUL_SET, "during-data", ns) is None
        assert await copied("before") == b"v1"  # the rotation waits, the old copy stays
        assert daemon.alive() and daemon.healthz() == 200
        say(
            capsys,
            "\nbinding removed: the new Company's status is "
            f"{(during.get('status') or {}).get('conditions')!r} (the binding also grants "
            "companies/status: nothing can be reported)",
        )
        restored_at = time.monotonic()
        await client.apply(
            CLUSTER_ROLE_BINDING,
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": MANAGER_BINDING},
                "roleRef": binding["roleRef"],
                "subjects": binding["subjects"],
            },
        )
        await eventually(lambda: _equals(copied("before"), b"v2"), timeout=90, message="rotated")
        await wait_converged(client, [(ns, "during")], timeout=90, namespace=ns)
        say(capsys, f"binding restored: recovered in {time.monotonic() - restored_at:.1f}s")

        # 2. Only its Secret reads are denied (it may still write them, and its status).
        role = await client.get(CLUSTER_ROLE, MANAGER_ROLE)
        rules = role["rules"]
        narrowed: list[dict[str, Any]] = []
        for rule in rules:
            if rule.get("apiGroups") == [""] and "secrets" in rule.get("resources", []):
                rest = [r for r in rule["resources"] if r != "secrets"]
                narrowed.append({**rule, "resources": rest})
                writes = ["create", "update", "patch", "delete"]
                narrowed.append({"apiGroups": [""], "resources": ["secrets"], "verbs": writes})
            else:
                narrowed.append(rule)
        await client.patch(CLUSTER_ROLE, MANAGER_ROLE, {"rules": narrowed})
        try:
            await client.create(
                ENGINE_CLASS, engine_class("rbac-three", modelKeys=keys_of("rbac-read"))
            )
            await client.create(COMPANY, company(ns, "unread", "rbac-three"))
            refused = await _wait_refused(client, ns, "unread")
            assert refused["reason"] == "SecretUnreadable", refused
            assert f"{PLATFORM}/rbac-read" in refused["message"], refused
            assert await client.get_or_none(STATEFUL_SET, "unread-data", ns) is None
            assert daemon.alive() and daemon.healthz() == 200
            say(
                capsys,
                f"Secret reads denied: Accepted=False {refused['reason']}: {refused['message']}",
            )
        finally:
            await client.patch(CLUSTER_ROLE, MANAGER_ROLE, {"rules": rules})
        restored_at = time.monotonic()
        await wait_converged(client, [(ns, "unread")], timeout=90, namespace=ns)
        say(capsys, f"Secret reads restored: recovered in {time.monotonic() - restored_at:.1f}s")
        assert daemon.alive()


# -- faults under two replicas ---------------------------------------------------------------------


@pytest.mark.timeout(420)
async def test_sigkill_of_the_leader_in_a_burst_of_300(
    client: Client, replicas: Replicas, capsys: pytest.CaptureFixture[str]
) -> None:
    leader = await replicas.leader()
    took, before = await burst_with_fault(
        client, "k", BURST, fault_after=BURST // 4, fault=leader.kill, timeout=300
    )
    successor = await replicas.leader(timeout=30)
    assert successor is not leader
    assert not leader.alive()
    say(
        capsys,
        f"\nSIGKILL of {leader.name} with {before}/{BURST} Companies Accepted: all {BURST} "
        f"converged {took:.0f}s later under {successor.name}",
    )


async def restart_mid_burst(
    client: Client,
    replicas: Replicas,
    prefix: str,
    kill: Callable[[], None],
    start: Callable[[], None],
) -> str:
    """A burst of 40 with one part of the control plane killed and started again a quarter
    of the way in; nobody restarts a replica. A replica may only have gone by design: a leader
    that could not renew its Lease within the renew deadline stops acting and exits 1 (as
    controller-runtime's managers do), and only when the outage was that long."""
    running = await replicas.ensure(2)
    leader = await replicas.leader()
    outage: list[float] = []

    def restart() -> None:
        began = time.monotonic()
        kill()
        start()
        outage.append(time.monotonic() - began)

    took, before = await burst_with_fault(
        client, prefix, 40, fault_after=10, fault=restart, timeout=180
    )
    said = await no_replica_lost_but_by_design(replicas, running, leader, outage[0])
    return f"{outage[0]:.1f}s outage at {before}/40 Accepted: converged {took:.0f}s later{said}"


async def no_replica_lost_but_by_design(
    replicas: Replicas, running: list[Operator], leader: Operator, outage: float
) -> str:
    """Every replica still runs, except a leader that could not renew its Lease within the
    renew deadline (an outage that long): it stops acting and exits 1, by design. One of the
    replicas that were there leads."""
    exited = [r for r in running if not r.alive()]
    for replica in exited:
        lost = replica.count_log(LEADERSHIP_LOST) == 1
        assert replica is leader and lost, replica.process.log_tail(20)
    if outage < RENEW_DEADLINE - 3.0:
        assert not exited, f"{outage:.1f}s of outage cost a replica"
    now_leading = await replicas.leader(timeout=30)
    assert now_leading in running  # converged by the replicas that were there, none restarted
    gone = f"; {leader.name} exited (Lease not renewed within 10s)" if exited else ""
    return f" under {now_leading.name}{gone}"


async def test_api_server_killed_and_restarted_mid_burst(
    plane: ControlPlane, client: Client, replicas: Replicas, capsys: pytest.CaptureFixture[str]
) -> None:
    said = await restart_mid_burst(
        client, replicas, "a", plane.kill_apiserver, plane.start_apiserver
    )
    say(capsys, f"\nkube-apiserver SIGKILL and restart: {said}")


async def test_etcd_killed_and_restarted_mid_burst(
    plane: ControlPlane, client: Client, replicas: Replicas, capsys: pytest.CaptureFixture[str]
) -> None:
    said = await restart_mid_burst(client, replicas, "e", plane.kill_etcd, plane.start_etcd)
    say(capsys, f"\netcd SIGKILL and restart: {said}")


async def test_a_watch_behind_a_compaction_relists_and_converges(
    plane: ControlPlane, client: Client, replicas: Replicas, capsys: pytest.CaptureFixture[str]
) -> None:
    running = await replicas.ensure(2)
    leader = await replicas.leader()
    ns = "gone"
    await client.create(NAMESPACE, {"metadata": {"name": ns}})
    keys = [(ns, f"w{i}") for i in range(3)]
    for key in keys:
        await client.create(COMPANY, company(*key, "f-plain"))
    await wait_converged(client, keys, timeout=90, namespace=ns)
    relisted = {r.name: r.count_log(RELISTED) for r in running}

    # The replicas miss what happens next: frozen, then cut off by an API server restart.
    for replica in running:
        replica.pause()
    try:
        await client.delete(NETWORK_POLICY, "w0-data", ns)
        await client.patch(COMPANY, "w1", {"spec": {"suspend": True}}, ns)
        await client.create(COMPANY, company(ns, "w3", "f-plain"))
        # A write of another kind, so every informer's resourceVersion is behind the revision
        # compacted to, then the compaction itself.
        await client.create(CONFIG_MAP, {"metadata": {"name": "after", "namespace": ns}})
        assert plane.etcd_compact() > 0
        cut = time.monotonic()
        plane.kill_apiserver()
    finally:
        for replica in running:
            replica.resume()
    plane.start_apiserver()
    outage = time.monotonic() - cut

    await wait_converged(client, [*keys, (ns, "w3")], timeout=90, namespace=ns)

    async def put_right() -> bool:
        policy = await client.get_or_none(NETWORK_POLICY, "w0-data", ns)
        sts = await client.get(STATEFUL_SET, "w1-data", ns)
        return policy is not None and sts["spec"]["replicas"] == 0

    await eventually(put_right, timeout=60, message="missed delete and change caught up")
    said = await no_replica_lost_but_by_design(replicas, running, leader, outage)
    after = {r.name: r.count_log(RELISTED) for r in running if r.alive()}
    assert all(after[name] > relisted[name] for name in after), (relisted, after)
    say(capsys, f"\n410 Gone after a {outage:.1f}s cut: relists {after} (before: {relisted}){said}")


async def test_someone_elses_edits_are_undone_and_their_own_fields_kept(
    client: Client, replicas: Replicas
) -> None:
    await replicas.ensure(2)
    await replicas.leader()
    ns = "edits"
    await client.create(NAMESPACE, {"metadata": {"name": ns}})
    await client.create(COMPANY, company(ns, "edited", "f-keys"))
    await wait_converged(client, [(ns, "edited")], timeout=90, namespace=ns)
    env_before = await client.get(SECRET, "edited-env", ns)
    policy_before = await client.get(NETWORK_POLICY, "edited-data", ns)
    seats_selector = (await client.get(NETWORK_POLICY, "edited-seats", ns))["spec"]["podSelector"]

    # Someone else (another field manager) edits and deletes children.
    await client.patch(
        STATEFUL_SET,
        "edited-data",
        {
            "metadata": {
                "annotations": {"someone.example/note": "keep me"},
                "labels": {"someone.example/team": "blue"},
            },
            "spec": {"template": {"spec": {"containers": [{"name": "engine", "image": "evil"}]}}},
        },
        ns,
        patch_type="strategic",
    )
    await client.patch(NETWORK_POLICY, "edited-seats", {"spec": {"podSelector": {}}}, ns)
    await client.delete(NETWORK_POLICY, "edited-data", ns)
    await client.patch(SECRET, "edited-env", {"data": {"ANTHROPIC_API_KEY": b64("stolen")}}, ns)
    await client.delete(SECRET, "edited-config", ns)

    async def restored() -> bool:
        sts = await client.get(STATEFUL_SET, "edited-data", ns)
        image = sts["spec"]["template"]["spec"]["containers"][0]["image"]
        policy = await client.get_or_none(NETWORK_POLICY, "edited-data", ns)
        seats = await client.get(NETWORK_POLICY, "edited-seats", ns)
        env = await client.get(SECRET, "edited-env", ns)
        config = await client.get_or_none(SECRET, "edited-config", ns)
        return (
            image == IMAGE
            and policy is not None
            and seats["spec"]["podSelector"] == seats_selector
            and env["data"] == env_before["data"]
            and config is not None
        )

    await eventually(restored, timeout=60, message="the operator's children restored")
    policy = await client.get(NETWORK_POLICY, "edited-data", ns)
    assert policy["metadata"]["uid"] != policy_before["metadata"]["uid"]  # recreated
    assert policy["spec"] == policy_before["spec"]
    # What it does not own stays, though it re-applied that very StatefulSet.
    sts = await client.get(STATEFUL_SET, "edited-data", ns)
    assert sts["metadata"]["annotations"]["someone.example/note"] == "keep me"
    assert sts["metadata"]["labels"]["someone.example/team"] == "blue"
    # And it does not fight over them: the StatefulSet's spec settles (its status moves on as
    # the pod rolls back to the engine's image).
    settled = sts["metadata"]["generation"]
    await asyncio.sleep(3)
    again = await client.get(STATEFUL_SET, "edited-data", ns)
    assert again["metadata"]["generation"] == settled


def lease_holds(
    writes: list[AuditedWrite], users: set[str]
) -> list[tuple[str, datetime.datetime, datetime.datetime]]:
    """When each replica held the Lease, from the audit log alone.

    A hold starts when the API server received a replica's successful write of the Lease that
    follows another holder's (its acquisition), and lasts through its successful renewals; it
    ends at the renew deadline after its last renewal (a leader that cannot renew stops by then)
    plus the in-flight allowance, or when another replica's acquisition arrived, if sooner."""
    lease_writes = [
        w
        for w in writes
        if w.resource == "leases" and w.namespace == PLATFORM and w.user in users and w.ok
    ]
    streaks: list[list[Any]] = []
    for write in sorted(lease_writes, key=lambda w: w.completed):
        if streaks and streaks[-1][0] == write.user:
            streaks[-1][2] = write.completed
        else:
            streaks.append([write.user, write.received, write.completed])
    holds = []
    for i, (user, start, last) in enumerate(streaks):
        end = last + datetime.timedelta(seconds=RENEW_DEADLINE + IN_FLIGHT_SLACK)
        if i + 1 < len(streaks):
            end = min(end, streaks[i + 1][1])
        holds.append((user, start, end))
    return holds


async def test_no_replica_wrote_while_it_did_not_hold_the_lease(
    plane: ControlPlane, replicas: Replicas, capsys: pytest.CaptureFixture[str]
) -> None:
    users = replicas.users
    writes = audited_writes(plane, users)
    holds = lease_holds(writes, users)
    assert len({user for user, _, _ in holds}) >= 2, holds  # the SIGKILL handed it over
    others = [w for w in writes if w.resource != "leases"]
    outside = [
        str(w)
        for w in others
        if not any(u == w.user and start <= w.received <= end for u, start, end in holds)
    ]
    assert not outside, outside[:20]
    by_user = {u: sum(1 for w in others if w.user == u) for u in sorted(users)}
    say(
        capsys,
        f"\naudited: {len(others)} writes by the replicas outside the Lease ({by_user}), "
        f"{len(writes) - len(others)} Lease writes; {len(holds)} holds "
        f"({', '.join(f'{u} from {s.time()}' for u, s, _ in holds)}); none outside a hold",
    )


async def _wait_refused(client: Client, ns: str, name: str) -> dict[str, Any]:
    async def refused() -> dict[str, Any] | None:
        got = await client.get(COMPANY, name, ns)
        cond = find_condition((got.get("status") or {}).get("conditions"), "Accepted")
        return cond if cond and cond["status"] == "False" else None

    found: dict[str, Any] | None = await eventually(refused, timeout=60, message=f"{name} refused")
    assert found is not None
    return found


async def _equals(awaitable: Any, expected: object) -> bool:
    return bool(await awaitable == expected)
