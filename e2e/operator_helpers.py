"""Helpers shared by the e2e modules that run the operator daemon as a process.

The daemon runs as users run it: ``python -m crewlet_operator_daemon.cli`` with its own flags, in a
:class:`~crewlet_operator.envtest.process.ManagerProcess` that dies with the test run. The fault,
bad-input and data-safety modules each run their own control plane (:func:`own_control_plane`)
so that killing etcd or the API server, or deleting the CRDs, disturbs no other module.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from crewlet_operator import (
    CLUSTER_ROLE,
    CLUSTER_ROLE_BINDING,
    CUSTOM_RESOURCE_DEFINITION,
    NAMESPACE,
    NETWORK_POLICY,
    POD_DISRUPTION_BUDGET,
    ROLE,
    ROLE_BINDING,
    SECRET,
    SERVICE,
    SERVICE_ACCOUNT,
    STATEFUL_SET,
    AlreadyExistsError,
    Client,
    CrewletError,
    NotFoundError,
    Resource,
    Scope,
    find_condition,
)
from crewlet_operator.envtest import ControlPlane, ProcessFailedError, binaries
from crewlet_operator.envtest.crds import install_crds, load_crds
from crewlet_operator.envtest.process import ManagerProcess
from crewlet_operator.envtest.wait import eventually
from crewlet_operator.incarnation import PodRef, downward_environment
from crewlet_operator.kube.resources import (
    VALIDATING_ADMISSION_POLICY,
    VALIDATING_ADMISSION_POLICY_BINDING,
)
from crewlet_operator_daemon import naming
from crewlet_operator_daemon.api.v1alpha1 import COMPANY
from crewlet_operator_daemon.naming import DATA, SEATS

ROOT = Path(__file__).parent.parent
IMAGE = "ghcr.io/crewlet/crewlet-operator/engine:v0.2.0"
PLATFORM = "crewlet-platform"
MANAGED = {naming.MANAGED_BY_LABEL: naming.MANAGED_BY, naming.NAME_LABEL: naming.NAME}
LEASE_NAME = "crewlet-operator-leader"
"""The daemon's default ``--leader-election-id``."""
RENEW_DEADLINE = 10.0
"""The daemon's renew deadline (seconds): a leader that has not renewed for this long stops."""
MANAGER_NAMESPACE = "crewlet-operator-system"
MANAGER_BINDING = "crewlet-operator-manager-rolebinding"
MANAGER_ROLE = "crewlet-operator-manager-role"
TEST_FIELD_MANAGER = "e2e-someone-else"
"""The tests' own field manager: never the operator's, so that an edit by a test is an edit by
someone else, as server-side apply sees it."""


class Operator(ManagerProcess):
    """The daemon as a subprocess (dying with the test run), plain-HTTP metrics on a free port."""

    def __init__(
        self,
        kubeconfig: Path,
        log_dir: Path,
        *,
        name: str = "operator",
        leader_elect: bool = False,
        lease_namespace: str = PLATFORM,
        args: Sequence[str] = (),
        pod: PodRef | None = None,
        environment: Mapping[str, str] | None = None,
    ) -> None:
        """``pod``: the Pod it runs in, as the chart's downward API says (none by default, even
        when the tests themselves run in a Pod: a standby would take over on its evidence);
        ``environment``: variables set for it besides."""
        log_dir.mkdir(parents=True, exist_ok=True)
        command = [
            sys.executable,
            "-m",
            "crewlet_operator_daemon.cli",
            "--kubeconfig",
            str(kubeconfig),
            f"--leader-elect={'true' if leader_elect else 'false'}",
            "--leader-election-namespace",
            lease_namespace,
        ]
        # Two ports free now: ready() starts it again on fresh ones if another process took one.
        super().__init__(
            name,
            [*command, "--metrics-secure=false", *args],
            log_dir,
            {**downward_environment(pod), **(environment or {})},
        )
        self.start()
        self.pid = self.process.pid

    def ready(self) -> bool:
        try:
            if not self.check():
                self.pid = self.process.pid  # started again on fresh ports
                return False
        except ProcessFailedError as error:
            raise AssertionError(str(error)) from None
        with contextlib.suppress(OSError):
            url = f"http://127.0.0.1:{self.health_port}/readyz"
            with urllib.request.urlopen(url, timeout=2) as response:
                return bool(response.status == 200)
        return False

    def alive(self) -> bool:
        """The same process is still running (never restarted: the pid is the first one)."""
        return self.process.running() and self.process.pid == self.pid

    def healthz(self) -> int:
        """The status code of ``/healthz`` (0 when nothing answers)."""
        with contextlib.suppress(OSError):
            url = f"http://127.0.0.1:{self.health_port}/healthz"
            with urllib.request.urlopen(url, timeout=2) as response:
                return int(response.status)
        return 0

    def metric(self, sample: str) -> float:
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            for line in response.read().decode().splitlines():
                if line.startswith(sample + " "):
                    return float(line.rsplit(" ", 1)[1])
        return 0.0

    def metric_names(self) -> set[str]:
        """The name of every metric it exports now: each sample's (histograms' ``_bucket`` and
        the like), and each family's its ``# TYPE`` line declares (one whose series are not
        labelled yet, as the leader's gauge without leader election)."""
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            lines = response.read().decode().splitlines()
        samples = {re.split(r"[{ ]", ln, maxsplit=1)[0] for ln in lines if ln[:1] not in ("", "#")}
        return samples | {ln.split()[2] for ln in lines if ln.startswith("# TYPE ")}

    def leading(self) -> bool:
        """Whether it says it leads (``leader_election_master_status``)."""
        if not self.process.running():
            return False
        with contextlib.suppress(OSError):
            return self.metric(f'leader_election_master_status{{name="{LEASE_NAME}"}}') == 1.0
        return False

    def log_events(self) -> list[dict[str, Any]]:
        """The JSON lines of its log so far."""
        events = []
        with contextlib.suppress(OSError):
            for line in self.process.log_path.read_text(errors="replace").splitlines():
                with contextlib.suppress(ValueError):
                    event = json.loads(line)
                    if isinstance(event, dict):
                        events.append(event)
        return events

    def count_log(self, event: str) -> int:
        return sum(1 for e in self.log_events() if e.get("event") == event)

    def pause(self) -> None:
        self.process.signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.process.signal(signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL: a crash, no lease release."""
        self.process.kill()

    def stop(self) -> None:
        self.process.stop(timeout=30)


@contextlib.asynccontextmanager
async def operator(kubeconfig: Path, tmp: Path, **kwargs: Any) -> AsyncIterator[Operator]:
    daemon = Operator(kubeconfig, tmp, **kwargs)
    try:
        await eventually(daemon.ready, timeout=60, message="operator ready")
        yield daemon
    finally:
        daemon.stop()


class Daemon:
    """A module's one daemon, electing a leader in the chart's namespace, which a test may
    restart."""

    def __init__(self, kubeconfig: Path, log_dir: Path) -> None:
        self.kubeconfig = kubeconfig
        self.log_dir = log_dir
        self.starts = 0
        self.current: Operator | None = None

    async def start(self) -> Operator:
        self.starts += 1
        self.current = Operator(
            self.kubeconfig,
            self.log_dir,
            name=f"operator-{self.starts}",
            leader_elect=True,
            lease_namespace=MANAGER_NAMESPACE,
        )
        await eventually(self.current.ready, timeout=60, message="operator ready")
        return self.current

    def stop(self) -> None:
        if self.current is not None:
            self.current.stop()
            self.current = None


@contextlib.asynccontextmanager
async def manager_daemon(plane: ControlPlane, client: Client, tmp: Path) -> AsyncIterator[Daemon]:
    """A module's daemon, as the chart's manager (its token, RBAC and policy), leading."""
    holder = Daemon(await manager_kubeconfig(client, plane, tmp, leader_election=True), tmp)
    await holder.start()
    try:
        yield holder
    finally:
        holder.stop()


async def fresh_namespace(client: Client, name: str) -> str:
    """Create the namespace ``name`` and return it."""
    await client.create(NAMESPACE, {"metadata": {"name": name}})
    return name


@contextlib.contextmanager
def own_control_plane(directory: Path) -> Iterator[ControlPlane]:
    """A control plane of the module's own (workloads and audit on), stopped in dependency
    order: the workload binaries first, while the API server they talk to is still up (after
    :meth:`ControlPlane.kill_apiserver` it is the newest process, and stopping newest first
    would leave them waiting on it)."""
    plane = ControlPlane(directory, workloads=True, audit=True)
    with plane:
        try:
            yield plane
        finally:
            for name in ("kwok", "kube-scheduler", "kube-controller-manager", "kube-apiserver"):
                process = plane.processes.pop(name, None)
                if process is not None:
                    process.stop(timeout=5)


@contextlib.asynccontextmanager
async def admin_client(plane: ControlPlane, *namespaces: str) -> AsyncIterator[Client]:
    """A module's admin client (as someone else: the tests' own field manager), with the
    operator's CRDs installed and ``namespaces`` created (kept when a module before it on the
    session's plane made them)."""
    async with Client(plane.admin_config(), field_manager=TEST_FIELD_MANAGER) as admin:
        await install_crds(admin, load_crds(ROOT / "manifests/crds"))
        for ns in namespaces:
            if await admin.get_or_none(NAMESPACE, ns) is None:
                await admin.create(NAMESPACE, {"metadata": {"name": ns}})
        yield admin


def installer_documents() -> list[dict[str, Any]]:
    """The documents of dist/install.yaml (the chart's default render)."""
    return [d for d in yaml.safe_load_all((ROOT / "dist/install.yaml").read_text()) if d]


def chart_documents(
    values: dict[str, Any] | None = None,
    *,
    release: str = "crewlet-operator",
    namespace: str = MANAGER_NAMESPACE,
) -> list[dict[str, Any]]:
    """The chart rendered by the real helm (``helm template``) as ``release`` would install it
    in ``namespace`` with ``values``, behind its Namespace as dist/install.yaml is: other values
    than the defaults, or a second install beside dist/install.yaml."""
    rendered = subprocess.run(
        [
            str(binaries.find("helm")),
            "template",
            release,
            str(ROOT / "charts" / "crewlet-operator"),
            "--namespace",
            namespace,
            "--kube-version",
            binaries.KUBERNETES_VERSION,
            "--values",
            "-",
        ],
        input=json.dumps(values or {}),
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": os.environ.get("PATH", ""), "HOME": "/nonexistent"},
    ).stdout
    namespace_doc = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    return [namespace_doc, *(d for d in yaml.safe_load_all(rendered) if d)]


async def manager_kubeconfig(
    kube_client: Client,
    control_plane: ControlPlane,
    tmp: Path,
    *,
    leader_election: bool = False,
    documents: list[dict[str, Any]] | None = None,
) -> Path:
    """A kubeconfig with a real token of the chart's manager ServiceAccount, holding only the
    RBAC and under the admission policy of dist/install.yaml (the chart's default render), or
    of ``documents`` (another render: :func:`chart_documents`).

    With ``leader_election`` the chart's Role for the Lease in its namespace is installed too,
    so the daemon can run as the chart runs it (``--leader-election-namespace`` the chart's)."""
    installer = installer_documents() if documents is None else documents
    kinds = {
        "Namespace": NAMESPACE,
        "ServiceAccount": SERVICE_ACCOUNT,
        "ClusterRole": CLUSTER_ROLE,
        "ClusterRoleBinding": CLUSTER_ROLE_BINDING,
        "ValidatingAdmissionPolicy": VALIDATING_ADMISSION_POLICY,
        "ValidatingAdmissionPolicyBinding": VALIDATING_ADMISSION_POLICY_BINDING,
    }
    if leader_election:
        kinds |= {"Role": ROLE, "RoleBinding": ROLE_BINDING}
    for doc in installer:
        if doc["kind"] in kinds:
            await kube_client.apply(kinds[doc["kind"]], doc)
    account = next(d for d in installer if d["kind"] == "ServiceAccount")["metadata"]
    token = control_plane.request_token(account["namespace"], account["name"])
    kubeconfig = tmp / f"{account['namespace']}.{account['name']}.kubeconfig"
    return control_plane.token_config(token).write_kubeconfig(kubeconfig)


def manager_user(documents: list[dict[str, Any]] | None = None) -> str:
    """The user name of the manager's ServiceAccount (dist/install.yaml's, or ``documents``')."""
    installer = installer_documents() if documents is None else documents
    account = next(d for d in installer if d["kind"] == "ServiceAccount")["metadata"]
    return f"system:serviceaccount:{account['namespace']}:{account['name']}"


def secret(ns: str, name: str, **data: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": ns},
        "type": "Opaque",
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()},
    }


def engine_class(name: str, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"engine": {"image": IMAGE}, **spec}}


def company(ns: str, name: str, class_name: str, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": ns}, "spec": {"className": class_name, **spec}}


async def condition_of(client: Client, ns: str, name: str, kind: str) -> dict[str, Any] | None:
    got = await client.get(COMPANY, name, ns)
    return find_condition(got.get("status", {}).get("conditions"), kind)


async def wait_condition(
    client: Client,
    ns: str,
    name: str,
    kind: str,
    status: str,
    *,
    reason: str | None = None,
    timeout: float = 90,
) -> dict[str, Any]:
    async def matches() -> dict[str, Any] | None:
        cond = await condition_of(client, ns, name, kind)
        if cond and cond["status"] == status and (reason is None or cond["reason"] == reason):
            return cond
        return None

    found: dict[str, Any] | None = await eventually(
        matches, timeout=timeout, message=f"{kind}={status} {reason or ''}"
    )
    assert found is not None
    return found


async def remove_crds(client: Client, crds: list[dict[str, Any]]) -> None:
    for crd in crds:
        with contextlib.suppress(NotFoundError):
            await client.delete(CUSTOM_RESOURCE_DEFINITION, crd["metadata"]["name"])

    async def gone() -> bool:
        for crd in crds:
            if await client.get_or_none(CUSTOM_RESOURCE_DEFINITION, crd["metadata"]["name"]):
                return False
        return True

    await eventually(gone, timeout=60, message="CRDs removed")
    client.forget_discovery()


async def _none(awaitable: Any) -> bool:
    return await awaitable is None


def say(capsys: pytest.CaptureFixture[str], text: str) -> None:
    """Print past pytest's capture: the figures a resilience test reports belong in every run's
    output, not only in a failing one's."""
    with capsys.disabled():
        print(text)


# -- what a converged Company looks like ---------------------------------------------------------

CHILD_KINDS = (
    SERVICE_ACCOUNT,
    SECRET,
    STATEFUL_SET,
    SERVICE,
    POD_DISRUPTION_BUDGET,
    NETWORK_POLICY,
)
"""What the operator writes for a Company without a webhook hostname."""

Key = tuple[str, str]


def expected_children(company_name: str) -> dict[str, set[str]]:
    """Kind → names of every child of a Company without a webhook hostname."""
    c = company_name
    components = (DATA, SEATS)
    return {
        SERVICE_ACCOUNT.kind: {naming.service_account(c)},
        SECRET.kind: {naming.api_token_secret(c), naming.env_secret(c), naming.config_secret(c)},
        STATEFUL_SET.kind: {naming.statefulset(c, x) for x in components},
        SERVICE.kind: {naming.headless_service(c, x) for x in components} | {naming.api_service(c)},
        POD_DISRUPTION_BUDGET.kind: {naming.disruption_budget(c, x) for x in components},
        NETWORK_POLICY.kind: {naming.network_policy(c, x) for x in components},
    }


async def children_by_company(
    client: Client, namespace: str | None = None
) -> dict[Key, dict[str, set[str]]]:
    """Every managed child, grouped by the company it is labelled with."""
    found: dict[Key, dict[str, set[str]]] = {}
    for resource in CHILD_KINDS:
        listed = await client.list(
            resource, Scope(namespace, label_selector=naming.MANAGED_BY_SELECTOR)
        )
        for obj in listed.items:
            meta = obj["metadata"]
            owner = (meta.get("labels") or {}).get(naming.COMPANY_LABEL)
            if owner:
                kinds = found.setdefault((meta["namespace"], owner), {})
                kinds.setdefault(resource.kind, set()).add(meta["name"])
    return found


def accepted(obj: dict[str, Any]) -> bool:
    """Accepted=True for the Company's current generation."""
    cond = find_condition((obj.get("status") or {}).get("conditions"), "Accepted")
    return bool(
        cond
        and cond["status"] == "True"
        and cond.get("observedGeneration") == obj["metadata"].get("generation")
    )


async def unconverged(
    client: Client, keys: Iterable[Key], namespace: str | None = None
) -> set[Key]:
    """The Companies among ``keys`` not yet Accepted with every child present."""
    wanted = set(keys)
    companies = {
        (o["metadata"]["namespace"], o["metadata"]["name"]): o
        for o in (await client.list(COMPANY, Scope(namespace))).items
    }
    not_accepted = {k for k in wanted if k not in companies or not accepted(companies[k])}
    if not_accepted:
        return not_accepted  # the children are listed (many, and large) only once it is worth it
    children = await children_by_company(client, namespace)
    left = set()
    for key in wanted:
        obj = companies.get(key)
        have = children.get(key, {})
        complete = all(
            names <= have.get(kind, set()) for kind, names in expected_children(key[1]).items()
        )
        if obj is None or not accepted(obj) or not complete:
            left.add(key)
    return left


async def _verdict(client: Client, key: Key) -> str:
    """A Company's Accepted condition, for a failure's message (why it did not converge)."""
    obj = await client.get_or_none(COMPANY, key[1], key[0])
    if obj is None:
        return "gone"
    cond = find_condition((obj.get("status") or {}).get("conditions"), "Accepted")
    if cond is None:
        return "none"
    return f"{cond['status']} {cond.get('reason')}: {cond.get('message', '')[:200]}"


async def wait_converged(
    client: Client, keys: Iterable[Key], *, timeout: float, namespace: str | None = None
) -> float:
    """Wait until every Company in ``keys`` converged; the seconds it took."""
    wanted = set(keys)
    started = asyncio.get_running_loop().time()
    last: set[Key] = set()

    async def done() -> bool:
        nonlocal last
        last = await unconverged(client, wanted, namespace)
        return not last

    try:
        await eventually(done, timeout=timeout, interval=2.0, message="companies converged")
    except TimeoutError as exc:
        sample = sorted(last)[:5]
        verdicts = [await _verdict(client, key) for key in sample]
        raise AssertionError(
            f"{len(last)} of {len(wanted)} not converged, e.g. {sample}; Accepted: {verdicts}"
        ) from exc
    return asyncio.get_running_loop().time() - started


async def create_retrying(client: Client, resource: Resource, obj: dict[str, Any]) -> None:
    """Create ``obj``, retrying through an API server or etcd outage; a create whose answer was
    lost (AlreadyExists on the retry) counts as done."""
    for attempt in range(120):
        try:
            await client.create(resource, obj)
            return
        except AlreadyExistsError:
            return
        except CrewletError:
            if attempt == 119:
                raise
            await asyncio.sleep(0.5)


# -- the API server's audit log -------------------------------------------------------------------


def _time(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


@dataclass(frozen=True)
class AuditedWrite:
    """One write the API server audited (Metadata level: who, what, when, the answer)."""

    user: str
    verb: str
    resource: str
    subresource: str
    namespace: str
    name: str
    code: int
    received: datetime.datetime
    completed: datetime.datetime

    @property
    def ok(self) -> bool:
        return 200 <= self.code < 300

    def __str__(self) -> str:
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        sub = f"/{self.subresource}" if self.subresource else ""
        return (
            f"{self.received.time()} {self.user} {self.verb} {self.resource}{sub} {where} "
            f"-> {self.code}"
        )


def audited_writes(plane: ControlPlane, users: Iterable[str] | None = None) -> list[AuditedWrite]:
    """The writes in ``plane``'s audit log (by ``users``, when given), oldest first."""
    wanted = set(users) if users is not None else None
    writes = []
    for event in plane.audit_events():
        if event.get("stage") != "ResponseComplete":
            continue
        user = (event.get("user") or {}).get("username", "")
        if wanted is not None and user not in wanted:
            continue
        ref = event.get("objectRef") or {}
        writes.append(
            AuditedWrite(
                user=user,
                verb=event.get("verb", ""),
                resource=ref.get("resource", ""),
                subresource=ref.get("subresource", ""),
                namespace=ref.get("namespace", ""),
                name=ref.get("name", ""),
                code=int((event.get("responseStatus") or {}).get("code") or 0),
                received=_time(event["requestReceivedTimestamp"]),
                completed=_time(event["stageTimestamp"]),
            )
        )
    writes.sort(key=lambda w: w.received)
    return writes
