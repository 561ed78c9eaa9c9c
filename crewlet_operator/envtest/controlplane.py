"""A real Kubernetes control plane on loopback: etcd and kube-apiserver, and optionally
kube-controller-manager, kube-scheduler and kwok with one fake node, for envtest-style suites.

It runs the binaries the way controller-runtime's envtest does (generated PKI, RBAC
authorisation, the ServiceAccount admission plugin off, random free ports) so that what a test
proves against it holds on a real cluster: CRDs, RBAC, ValidatingAdmissionPolicies and
ServiceAccount tokens are the API server's own. With ``workloads=True`` garbage collection,
StatefulSets and Ready pods work too: kwok plays the kubelet for a node that is not there.

CRDs given to the plane (``crds=``, ``crd_paths=``, as controller-runtime's
``CRDDirectoryPaths``) are Established and served before kube-controller-manager starts: its
garbage collector finds resources that appear later only on its periodic rediscovery, so a
custom resource owned by another would wait half a minute or more to be collected.

Without workloads the aggregated ClusterRoles ``admin``, ``edit`` and ``view`` have no rules:
kube-controller-manager's clusterrole-aggregation controller fills them in. A test that expects
``view`` to deny something then passes for the wrong reason, and one that expects ``edit`` to
grant a custom kind fails; :meth:`ControlPlane.start` warns with
:class:`EmptyAggregatedRolesWarning`. Use ``workloads=True`` to test against those roles.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import ssl
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import warnings
from collections.abc import Callable, Iterable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Self

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    retry_if_exception_type,
    stop_after_attempt,
)

from crewlet_operator.envtest import binaries, pki
from crewlet_operator.envtest.crds import load_crds
from crewlet_operator.envtest.process import START_ATTEMPTS, ManagedProcess, alive, free_port
from crewlet_operator.errors import ProcessFailedError
from crewlet_operator.kube.config import RestConfig

SERVICE_CLUSTER_IP_RANGE = "10.96.0.0/12"
"""kubeadm's: room for a million Services (a /24 ran out at ~250 Companies of one Service each)."""
POD_CIDR = "10.244.0.0/16"
"""Apart from the Service range (kwok's default pod CIDR, 10.0.0.0/24, is not)."""
GO_GC_PERCENT = 400
"""GOGC for every binary: Go's default (100) spends ~a quarter of a busy API server's CPU on
garbage collection; 400 gives that back for memory, which a test machine has more of (a
fill of 500 Companies went from ~30 s to ~24 s on 2 cores)."""
ETCD_DATA_PREFIX = "crewlet-etcd-"
"""etcd's data directory is ``<prefix><pid of the process that started it>-<random>``, on
/dev/shm when there is one."""
KWOK_NODE = "kwok-node-0"
"""The one fake node kwok runs with workloads, on which pods are scheduled and run Ready."""
NODE_PODS = 110
"""Pods the fake node takes unless told (``ControlPlane(node_pods=)``): a kubelet's default
``maxPods``, so that a suite meets the limit a real node has. A bench that runs thousands of
pods asks for more."""
USER_FIELD_MANAGER = "envtest-user"
"""The field manager of what a test writes as the cluster's user: the ``kube_client`` and
``client_for`` fixtures' clients, and the CRDs the control plane installs. No controller's name,
so that what a test makes is not a controller's own unless the controller applied it."""
KWOK_STORAGE_CLASS = "kwok-volume"
MUTATING_VERBS = {"POST", "PUT", "PATCH", "DELETE", "APPLY"}
AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
    verbs: [create, update, patch, delete, deletecollection]
  - level: None
"""


_CRD_API = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


class EmptyAggregatedRolesWarning(UserWarning):
    """A control plane started without workloads: the aggregated ClusterRoles ``admin``,
    ``edit`` and ``view`` have no rules (kube-controller-manager's clusterrole-aggregation
    controller fills them in), so RBAC tests that rely on them prove nothing. Start it with
    ``workloads=True`` (the pytest plugin: ``envtest_workloads = true``)."""


_AGGREGATED_ROLES_MESSAGE = (
    "envtest control plane without workloads: kube-controller-manager does not run, so the "
    "aggregated ClusterRoles admin, edit and view have no rules (a test that expects `view` to "
    "deny passes for the wrong reason; one that expects `edit` to grant a custom kind fails). "
    "Use ControlPlane(workloads=True), or with the pytest plugin `envtest_workloads = true`, "
    "--envtest-workloads or CREWLET_ENVTEST_WORKLOADS=1, to test RBAC against those roles."
)


@dataclass(frozen=True)
class _Ports:
    etcd_client: int
    etcd_peer: int
    apiserver: int

    @classmethod
    def pick(cls) -> _Ports:
        return cls(free_port(), free_port(), free_port())


class ControlPlane:
    """etcd + kube-apiserver (+ controller-manager, scheduler and kwok with ``workloads``).

    Use as a context manager or call :meth:`start` and :meth:`stop`::

        with ControlPlane(workloads=True, crd_paths=[Path("config/crd")]) as cp:
            cfg = cp.admin_config()          # a RestConfig as system:masters
            cp.kubeconfig                    # the same, as a kubeconfig file for kubectl/helm

    ``crds`` (CRD documents) and ``crd_paths`` (YAML files or directories of them, read by
    :func:`~crewlet_operator.envtest.load_crds`) are applied, with the :class:`Client`'s default
    field manager, and Established and served once kube-apiserver is up and before
    kube-controller-manager, kube-scheduler and kwok start.

    Processes are started from the calling thread and die with it (see ``process.py``).
    """

    def __init__(
        self,
        directory: Path | None = None,
        *,
        workloads: bool = False,
        apiserver_args: tuple[str, ...] = (),
        audit: bool = False,
        start_timeout: float = 90.0,
        go_gc_percent: int = GO_GC_PERCENT,
        crds: Iterable[dict[str, Any]] = (),
        crd_paths: Iterable[Path] = (),
        node_pods: int = NODE_PODS,
    ) -> None:
        self._owns_dir = directory is None
        self.dir = (
            Path(tempfile.mkdtemp(prefix="crewlet-envtest-")) if directory is None else directory
        )
        self.workloads = workloads
        self.apiserver_args = apiserver_args
        self.audit = audit
        self.start_timeout = start_timeout
        self.go_gc_percent = go_gc_percent
        self.crds = list(crds)
        """CRD documents installed at start, before the workloads."""
        self.crd_paths = list(crd_paths)
        """Files and directories of CRDs installed at start, after :attr:`crds`."""
        self.node_pods = node_pods
        """Pods the fake node takes, with ``workloads``; the rest stay Pending."""
        self.processes: dict[str, ManagedProcess] = {}
        self.start_times: dict[str, float] = {}
        """When each process was last started (``time.time()``, taken just before it is)."""
        self.crds_established_at: float | None = None
        """When the CRDs given to the plane were all Established and served (``time.time()``)."""
        self._ports: _Ports | None = None
        self.workload_ports: dict[str, int] = {}
        """The secure port each of kube-controller-manager and kube-scheduler serves on."""
        self._etcd_data: Path | None = None

    # -- paths ---------------------------------------------------------------------------------
    @property
    def pki_dir(self) -> Path:
        """Certificates and keys (serving, client CA, ServiceAccount signer, users)."""
        return self.dir / "pki"

    @property
    def log_dir(self) -> Path:
        """One log file per binary."""
        return self.dir / "logs"

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig (``system:masters``) for kubectl, helm and clients."""
        return self.dir / "kubeconfig"

    @property
    def audit_log(self) -> Path:
        """The API server's audit log (JSON lines), with ``audit=True``: every write, at the
        Metadata level (who, what, when, the answer's code)."""
        return self.dir / "audit.log"

    def audit_events(self) -> list[dict[str, Any]]:
        """The audit log's events so far."""
        if not self.audit_log.exists():
            return []
        lines = self.audit_log.read_text().splitlines()
        return [json.loads(line) for line in lines if line.strip()]

    @property
    def host(self) -> str:
        """The API server's URL."""
        assert self._ports is not None, "control plane not started"
        return f"https://127.0.0.1:{self._ports.apiserver}"

    # -- lifecycle -----------------------------------------------------------------------------
    def __enter__(self) -> Self:
        return self._start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> Self:
        """Start etcd and kube-apiserver, install the CRDs given to the plane, then start the
        workloads (with ``workloads``); return once all are ready (and the node too).

        Without workloads, warns with :class:`EmptyAggregatedRolesWarning`."""
        return self._start()

    def _start(self) -> Self:
        # Called from start() and __enter__ alike, so the warning names the caller's line.
        crds = [*self.crds, *load_crds(*self.crd_paths)]
        for name in binaries.CONTROL_PLANE_BINARIES:
            binaries.find(name)
        if self.workloads:
            for name in (*binaries.WORKLOAD_BINARIES, binaries.KWOK_STAGES):
                binaries.find(name)
        for sub in (self.pki_dir, self.log_dir):
            sub.mkdir(parents=True, exist_ok=True)
        self._write_pki()
        try:
            # A failed start, most often a port taken between picking and binding, is tried
            # again at once on fresh ports, START_ATTEMPTS starts in all; the last one's
            # failure is raised as it is.
            starts = Retrying(
                retry=retry_if_exception_type(ProcessFailedError),
                stop=stop_after_attempt(START_ATTEMPTS),
                reraise=True,
            )
            starts(self._start_serving)
            self.admin_config().write_kubeconfig(self.kubeconfig)
            self._install_crds(crds)
            if self.workloads:
                self._start_workloads()
            else:
                warnings.warn(_AGGREGATED_ROLES_MESSAGE, EmptyAggregatedRolesWarning, stacklevel=3)
        except BaseException:
            self.stop()
            raise
        return self

    def _start_serving(self) -> None:
        """etcd and the API server on fresh ports; stopped again when either fails."""
        self._ports = _Ports.pick()
        try:
            self._start_etcd()
            self.start_apiserver()
        except ProcessFailedError:
            self._stop_processes()
            raise

    def stop(self) -> None:
        """Stop everything this control plane started, newest first; remove its temp files."""
        self._stop_processes()
        if self._etcd_data is not None:
            shutil.rmtree(self._etcd_data, ignore_errors=True)
            self._etcd_data = None
        if self._owns_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def _stop_processes(self) -> None:
        for name in reversed(list(self.processes)):
            self.processes.pop(name).stop()

    def pids(self) -> dict[str, int]:
        """Process ids of the running binaries, by name."""
        return {n: p.pid for n, p in self.processes.items() if p.pid is not None}

    # -- identities ----------------------------------------------------------------------------
    def admin_config(self) -> RestConfig:
        """A cluster admin (CN=admin, O=system:masters), which bypasses RBAC."""
        return self._client_cert_config("admin", ("system:masters",), stem="admin")

    def user_config(self, user: str, groups: tuple[str, ...] = ()) -> RestConfig:
        """A user authenticated by a client certificate (CN=user, O=groups); subject to RBAC."""
        return self._client_cert_config(user, groups, stem=f"user-{abs(hash((user, groups)))}")

    def impersonation_config(self, user: str, groups: tuple[str, ...] = ()) -> RestConfig:
        """The admin impersonating ``user``: RBAC and admission see ``user``, not the admin.

        For ``system:serviceaccount:<ns>:<name>`` with no groups the API server adds the
        ServiceAccount groups itself.
        """
        return self.admin_config().impersonating(user, groups)

    def service_account_config(self, namespace: str, name: str) -> RestConfig:
        """The admin impersonating ServiceAccount ``namespace/name`` (it need not exist)."""
        return self.impersonation_config(f"system:serviceaccount:{namespace}:{name}")

    def request_token(
        self,
        namespace: str,
        name: str,
        expiration_seconds: int = 3600,
        *,
        pod: tuple[str, str] | None = None,
    ) -> str:
        """A real token for ServiceAccount ``namespace/name`` from the TokenRequest API.

        With ``pod`` (the name and uid of a Pod of that ServiceAccount in ``namespace``), the
        token is bound to that Pod, as the one a kubelet projects into it: the API server then
        tells who writes by its Pod (``authentication.kubernetes.io/pod-name`` and ``pod-uid``
        in the user's extra), and refuses the token once the Pod is gone."""
        spec: dict[str, Any] = {"expirationSeconds": expiration_seconds}
        if pod is not None:
            spec["boundObjectRef"] = {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": pod[0],
                "uid": pod[1],
            }
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
        path = f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token"
        answer = self.admin_request("POST", path, body)
        token: str = answer["status"]["token"]
        return token

    def token_config(self, token: str) -> RestConfig:
        """A client that authenticates with ``token`` only (no client certificate)."""
        return self.admin_config().with_token(token)

    def mutating_requests(
        self, resources: AbstractSet[str], *, dry_run: bool | None = None
    ) -> dict[str, int]:
        """Create/update/patch/delete requests the API server itself has counted
        (``apiserver_request_total``) for the named resources (plurals, e.g. ``secrets``), by
        ``"VERB resource[/subresource]"``; compare two readings to count the writes between.
        ``dry_run``: only the dry runs (True), only the others (False), or both (None).

        The count is the whole cluster's: kube-controller-manager deleting an earlier test's
        namespace writes too (wait for
        :func:`~crewlet_operator.envtest.wait.no_namespace_terminating`
        before the first reading)."""
        counts: dict[str, int] = {}
        for line in self.admin_request("GET", "/metrics", raw=True).splitlines():
            if not line.startswith("apiserver_request_total{"):
                continue
            labels = dict(
                pair.split("=", 1)
                for pair in line[line.index("{") + 1 : line.rindex("}")].split(",")
            )
            verb = labels.get("verb", "").strip('"')
            resource = labels.get("resource", "").strip('"')
            dry = bool(labels.get("dry_run", "").strip('"'))
            if verb in MUTATING_VERBS and resource in resources and dry_run in (None, dry):
                sub = labels.get("subresource", "").strip('"')
                key = f"{verb} {resource}" + (f"/{sub}" if sub else "")
                counts[key] = counts.get(key, 0) + int(float(line.rsplit(" ", 1)[1]))
        return counts

    def admin_ssl_context(self) -> ssl.SSLContext:
        """TLS that trusts the API server and presents the admin's client certificate (see
        :meth:`admin_config`): for set-up code that talks HTTPS without a client."""
        cfg = self.admin_config()
        context = ssl.create_default_context(cafile=str(cfg.ca_file))
        assert cfg.cert_file is not None and cfg.key_file is not None
        context.load_cert_chain(str(cfg.cert_file), str(cfg.key_file))
        return context

    def admin_request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        raw: bool = False,
        content_type: str = "application/json",
    ) -> Any:
        """A synchronous admin request (for set-up code that has no event loop); the decoded
        JSON answer, or the text with ``raw``. ``body`` is sent as JSON, labelled
        ``content_type`` (``application/apply-patch+yaml`` for a server-side apply)."""
        context = self.admin_ssl_context()
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            self.host + path,
            data=data,
            method=method,
            headers={"Content-Type": content_type, "Accept": "application/json"},
        )
        with urllib.request.urlopen(request, context=context, timeout=10) as response:
            payload = response.read()
        return payload.decode() if raw else json.loads(payload or b"null")

    def _client_cert_config(self, user: str, groups: tuple[str, ...], stem: str) -> RestConfig:
        cert, key = self.pki_dir / f"{stem}.crt", self.pki_dir / f"{stem}.key"
        if not cert.exists():
            pair = self._client_ca.issue(user, organizations=groups)
            key.write_bytes(pair.key_pem)
            key.chmod(0o600)
            cert.write_bytes(pair.cert_pem)
        return RestConfig(
            host=self.host, ca_file=self.pki_dir / "serving-ca.crt", cert_file=cert, key_file=key
        )

    # -- the processes -------------------------------------------------------------------------
    def _write_pki(self) -> None:
        serving_ca = pki.CertificateAuthority("envtest-serving-ca")
        serving = serving_ca.issue(
            "localhost", dns_names=("localhost",), ip_addresses=("127.0.0.1",), server=True
        )
        self._client_ca = pki.CertificateAuthority("envtest-client-ca")
        signer = pki.service_account_signer()
        files = {
            "serving-ca.crt": serving_ca.pair.cert_pem,
            "apiserver.crt": serving.cert_pem,
            "apiserver.key": serving.key_pem,
            "client-ca.crt": self._client_ca.pair.cert_pem,
            "sa-signer.pub": signer.cert_pem,
            "sa-signer.key": signer.key_pem,
        }
        for name, content in files.items():
            (self.pki_dir / name).write_bytes(content)
            if name.endswith(".key"):
                (self.pki_dir / name).chmod(0o600)

    def _add(self, name: str, args: list[str]) -> ManagedProcess:
        process = ManagedProcess(
            name, args, self.log_dir, environment={"GOGC": str(self.go_gc_percent)}
        )
        self.processes[name] = process
        self.start_times[name] = time.time()
        process.start()
        return process

    def _start_etcd(self) -> None:
        assert self._ports is not None
        # etcd on tmpfs when there is one: fsync-free and fast, like envtest's --unsafe-no-fsync.
        shm = Path("/dev/shm")
        base = shm if shm.is_dir() and shm.stat().st_mode & 0o002 else self.dir
        sweep_orphaned_etcd_data(base)
        self._etcd_data = Path(
            tempfile.mkdtemp(prefix=f"{ETCD_DATA_PREFIX}{os.getpid()}-", dir=base)
        )
        client = f"http://127.0.0.1:{self._ports.etcd_client}"
        peer = f"http://127.0.0.1:{self._ports.etcd_peer}"
        etcd = self._add(
            "etcd",
            [
                str(binaries.find("etcd")),
                f"--data-dir={self._etcd_data}",
                "--name=etcd0",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=etcd0={peer}",
                "--unsafe-no-fsync=true",
                "--quota-backend-bytes=8589934592",
            ],
        )
        etcd.wait_ready(lambda: _http_ok(f"{client}/health"), self.start_timeout)

    def start_apiserver(self) -> None:
        """Start (or restart, after :meth:`kill_apiserver`) kube-apiserver and wait for /readyz."""
        assert self._ports is not None
        p = self.pki_dir
        apiserver = self._add(
            "kube-apiserver",
            [
                str(binaries.find("kube-apiserver")),
                f"--etcd-servers=http://127.0.0.1:{self._ports.etcd_client}",
                f"--cert-dir={p}",
                f"--tls-cert-file={p / 'apiserver.crt'}",
                f"--tls-private-key-file={p / 'apiserver.key'}",
                f"--secure-port={self._ports.apiserver}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
                "--allow-privileged=true",
                "--authorization-mode=RBAC",
                # As envtest: without a controller-manager no "default" ServiceAccount would appear
                # and every pod would be refused.
                "--disable-admission-plugins=ServiceAccount",
                f"--service-account-issuer=https://127.0.0.1:{self._ports.apiserver}/",
                f"--service-account-key-file={p / 'sa-signer.pub'}",
                f"--service-account-signing-key-file={p / 'sa-signer.key'}",
                f"--client-ca-file={p / 'client-ca.crt'}",
                # No endpoint for the `kubernetes` Service that points at loopback.
                "--endpoint-reconciler-type=none",
                *self._audit_args(),
                *self.apiserver_args,
            ],
        )
        context = ssl.create_default_context(cafile=str(p / "serving-ca.crt"))
        apiserver.wait_ready(
            lambda: _http_ok(f"{self.host}/readyz", context) and self._default_namespace_exists(),
            self.start_timeout,
        )

    def _audit_args(self) -> list[str]:
        if not self.audit:
            return []
        policy = self.dir / "audit-policy.yaml"
        policy.write_text(AUDIT_POLICY)
        return [
            f"--audit-policy-file={policy}",
            f"--audit-log-path={self.audit_log}",
            "--audit-log-format=json",
            "--audit-log-mode=blocking",  # written before the answer: the log misses nothing
        ]

    def kill_apiserver(self) -> None:
        """SIGKILL kube-apiserver (etcd keeps the data); :meth:`start_apiserver` brings it back."""
        self.processes.pop("kube-apiserver").kill()

    def pause_apiserver(self) -> None:
        """SIGSTOP kube-apiserver: connections stay open but go silent."""
        self.processes["kube-apiserver"].signal(signal.SIGSTOP)

    def resume_apiserver(self) -> None:
        """SIGCONT kube-apiserver after :meth:`pause_apiserver`."""
        self.processes["kube-apiserver"].signal(signal.SIGCONT)

    def kill_etcd(self) -> None:
        """SIGKILL etcd (a crash); its data directory and ports are kept, so :meth:`start_etcd`
        brings the same store back. The API server keeps running and reconnects by itself."""
        self.processes["etcd"].kill()

    def start_etcd(self) -> None:
        """Restart etcd after :meth:`kill_etcd`: the same command line (same data directory,
        same ports), and wait until it answers /health."""
        assert self._ports is not None, "control plane not started"
        etcd = self.processes["etcd"]
        etcd.start()
        client = f"http://127.0.0.1:{self._ports.etcd_client}"
        etcd.wait_ready(lambda: _http_ok(f"{client}/health"), self.start_timeout)

    def etcd_compact(self) -> int:
        """Compact etcd's history up to now (watches from older resourceVersions get 410
        Gone); returns the revision compacted to."""
        assert self._ports is not None
        base = f"http://127.0.0.1:{self._ports.etcd_client}/v3/kv"

        def post(path: str, body: dict[str, Any]) -> Any:
            request = urllib.request.Request(
                base + path,
                data=json.dumps(body).encode(),
                method="POST",
                headers={"Content-Type": "application/json"},
            )
            with urllib.request.urlopen(request, timeout=10) as response:
                return json.loads(response.read())

        revision = int(post("/range", {"key": "AA==", "limit": 1})["header"]["revision"])
        post("/compaction", {"revision": revision, "physical": True})
        return revision

    def _install_crds(self, crds: list[dict[str, Any]]) -> None:
        """Apply ``crds`` and wait until each is Established and served: the workloads, started
        next, must find them in their first discovery."""
        if not crds:
            return
        for crd in crds:
            name = crd.get("metadata", {}).get("name")
            if crd.get("kind") != "CustomResourceDefinition" or not name:
                raise ValueError(
                    f"not a named CustomResourceDefinition: {crd.get('kind')} {name!r}"
                )
            query = urllib.parse.urlencode({"fieldManager": USER_FIELD_MANAGER, "force": "true"})
            try:
                self.admin_request(
                    "PATCH",
                    f"{_CRD_API}/{name}?{query}",
                    crd,
                    content_type="application/apply-patch+yaml",
                )
            except urllib.error.HTTPError as error:
                answer = error.read().decode(errors="replace")
                raise ValueError(f"the API server refused CRD {name}: {answer}") from error
        self.processes["kube-apiserver"].wait_ready(
            lambda: all(self._crd_served(crd) for crd in crds), self.start_timeout
        )
        self.crds_established_at = time.time()

    def _crd_served(self, crd: dict[str, Any]) -> bool:
        got = self.admin_request("GET", f"{_CRD_API}/{crd['metadata']['name']}")
        conditions = got.get("status", {}).get("conditions", [])
        if not any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
            return False
        spec = crd["spec"]
        for version in spec["versions"]:
            if not version.get("served", True):
                continue
            served = self.admin_request("GET", f"/apis/{spec['group']}/{version['name']}")
            if spec["names"]["plural"] not in {r["name"] for r in served["resources"]}:
                return False
        return True

    def _default_namespace_exists(self) -> bool:
        try:
            self.admin_request("GET", "/api/v1/namespaces/default")
        except urllib.error.HTTPError:
            return False
        return True

    def _start_workloads(self) -> None:
        assert self._ports is not None
        kubeconfig = str(self.kubeconfig)
        common = [
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            "--authorization-always-allow-paths=/healthz,/readyz,/livez",
        ]
        # Their ports are picked as each starts, seconds after etcd's and the API server's (the
        # CRDs come first), and picked again if another process took one meanwhile.
        controller_manager = _SecureProcess(
            self,
            "kube-controller-manager",
            lambda port: [
                str(binaries.find("kube-controller-manager")),
                *common,
                f"--secure-port={port}",
                f"--cert-dir={self.dir / 'kcm-certs'}",
                f"--root-ca-file={self.pki_dir / 'serving-ca.crt'}",
                f"--service-account-private-key-file={self.pki_dir / 'sa-signer.key'}",
                "--use-service-account-credentials=false",
                # Shorter than the 40 s default, so a node that stops reporting is noticed sooner.
                "--node-monitor-grace-period=20s",
            ],
        )
        scheduler = _SecureProcess(
            self,
            "kube-scheduler",
            lambda port: [
                str(binaries.find("kube-scheduler")),
                *common,
                f"--secure-port={port}",
                f"--cert-dir={self.dir / 'scheduler-certs'}",
            ],
        )
        kwok = self._add(
            "kwok",
            [
                str(binaries.find("kwok")),
                f"--kubeconfig={kubeconfig}",
                f"--config={binaries.find(binaries.KWOK_STAGES)}",
                "--manage-all-nodes=true",
                f"--cidr={POD_CIDR}",
                "--node-ip=127.0.0.1",
                "--node-lease-duration-seconds=40",
            ],
        )
        controller_manager.wait_ready()
        scheduler.wait_ready()
        self._create_node()
        self._create_storage_class()
        kwok.wait_ready(self._node_ready, self.start_timeout)
        # The ServiceAccount controller creates `default` in each namespace; waiting for the first
        # one means the controller-manager's informers are synced.
        self.processes["kube-controller-manager"].wait_ready(
            lambda: (
                self.admin_request("GET", "/api/v1/namespaces/default/serviceaccounts/default")
                is not None
            ),
            self.start_timeout,
        )

    def _create_node(self) -> None:
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": KWOK_NODE,
                "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
                "labels": {
                    "type": "kwok",
                    "kubernetes.io/hostname": KWOK_NODE,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                },
            },
            "status": {
                "allocatable": {"cpu": "32", "memory": "256Gi", "pods": str(self.node_pods)},
                "capacity": {"cpu": "32", "memory": "256Gi", "pods": str(self.node_pods)},
            },
        }
        with contextlib.suppress(urllib.error.HTTPError):  # already there after a restart
            self.admin_request("POST", "/api/v1/nodes", node)

    def _create_storage_class(self) -> None:
        # The default class; kwok's volume stages provision and bind its claims.
        storage_class = {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {
                "name": KWOK_STORAGE_CLASS,
                "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
            },
            "provisioner": "kwok.x-k8s.io/volume",
            "reclaimPolicy": "Delete",
            "volumeBindingMode": "Immediate",
        }
        with contextlib.suppress(urllib.error.HTTPError):  # already there after a restart
            self.admin_request("POST", "/apis/storage.k8s.io/v1/storageclasses", storage_class)

    def _node_ready(self) -> bool:
        node = self.admin_request("GET", f"/api/v1/nodes/{KWOK_NODE}")
        conditions = node.get("status", {}).get("conditions", [])
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
        taints = node.get("spec", {}).get("taints", [])
        # The node lifecycle controller lifts the not-ready taint once kwok reports Ready.
        return ready and not any(t["key"] == "node.kubernetes.io/not-ready" for t in taints)


class _SecureProcess:
    """A workload binary serving /healthz on a port of its own: started at once on a free port,
    and started again on another when it exits before it is ready (most often because another
    process bound the port first: "bind: address already in use")."""

    def __init__(self, plane: ControlPlane, name: str, args: Callable[[int], list[str]]) -> None:
        self.plane = plane
        self.name = name
        self.args = args
        self.attempt = 0
        self._start()

    def _start(self) -> None:
        self.attempt += 1
        port = free_port()
        self.plane.workload_ports[self.name] = port
        self.process = self.plane._add(self.name, self.args(port))

    def wait_ready(self) -> None:
        """Wait for /healthz, starting the binary again on a fresh port when it exited early."""

        def ready() -> None:
            url = f"https://127.0.0.1:{self.plane.workload_ports[self.name]}/healthz"
            self.process.wait_ready(partial(_http_ok, url), self.plane.start_timeout)

        def again(state: RetryCallState) -> None:
            self.process.stop()
            self._start()

        # Retried at once, on a fresh port, only when the process exited early (one still
        # running was not ready in time), up to START_ATTEMPTS starts in all.
        starts = Retrying(
            retry=retry_if_exception(
                lambda exc: isinstance(exc, ProcessFailedError) and not self.process.running()
            ),
            stop=lambda state: self.attempt >= START_ATTEMPTS,
            before_sleep=again,
            reraise=True,
        )
        starts(ready)


def _http_ok(url: str, context: ssl.SSLContext | None = None) -> bool:
    if context is None and url.startswith("https"):
        context = ssl._create_unverified_context()
    try:
        with urllib.request.urlopen(url, context=context, timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        time.sleep(0)
        return False


def sweep_orphaned_etcd_data(base: Path) -> list[Path]:
    """Remove the etcd data directories under ``base`` of control planes whose process is
    gone, and return them: one killed never ran :meth:`ControlPlane.stop`, and on /dev/shm its
    data holds memory until the machine restarts (its etcd died with it: the death signal)."""
    swept = []
    for path in base.glob(f"{ETCD_DATA_PREFIX}*-*"):
        owner = path.name.removeprefix(ETCD_DATA_PREFIX).split("-", 1)[0]
        if owner.isdigit() and not alive(int(owner)):
            shutil.rmtree(path, ignore_errors=True)
            swept.append(path)
    return swept
