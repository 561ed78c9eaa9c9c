"""The local control plane is a real Kubernetes 1.37 control plane (issue: Foundation)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
import warnings
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from crewlet_operator.envtest import (
    KUBERNETES_VERSION,
    KWOK_NODE,
    ControlPlane,
    EmptyAggregatedRolesWarning,
    controlplane,
)
from crewlet_operator.envtest.controlplane import KWOK_STORAGE_CLASS
from crewlet_operator.envtest.process import alive, free_port
from crewlet_operator.envtest.wait import eventually
from crewlet_operator.errors import ForbiddenError, InvalidError, NotFoundError
from crewlet_operator.kube import resources as r
from crewlet_operator.kube.client import Client, Scope, WatchParams
from crewlet_operator.kube.resources import Resource

ALL_BINARIES = {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"}
WIDGET = Resource("example.crewlet.ai", "v1", "Widget", "widgets")


def may_list(client: Client, resource: Resource, namespace: str) -> Callable[[], Awaitable[bool]]:
    """A probe for :func:`eventually`: whether ``client`` may list the kind in ``namespace``
    (an empty list is an answer too: a list is falsy when it holds nothing)."""

    async def probe() -> bool:
        await client.list(resource, namespace)
        return True

    return probe


def widget_crd() -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.crewlet.ai"},
        "spec": {
            "group": "example.crewlet.ai",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "properties": {"size": {"type": "integer", "minimum": 1}},
                                }
                            },
                        }
                    },
                }
            ],
        },
    }


async def test_api_server_reports_v1_37_2(kube_client: Client) -> None:
    version = await kube_client.server_version()
    assert version["gitVersion"] == KUBERNETES_VERSION == "v1.37.2"
    assert (version["major"], version["minor"]) == ("1", "37")


async def test_crd_established_and_objects_created_listed_watched_deleted(
    kube_client: Client, namespace: str
) -> None:
    await kube_client.apply(r.CUSTOM_RESOURCE_DEFINITION, widget_crd())

    async def established() -> bool:
        crd = await kube_client.get(r.CUSTOM_RESOURCE_DEFINITION, "widgets.example.crewlet.ai")
        conditions = (crd.get("status") or {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    await eventually(established, message="CRD Established")
    kube_client.forget_discovery()
    assert await kube_client.is_served("example.crewlet.ai/v1", "Widget")

    listed = await kube_client.list(WIDGET, Scope(namespace))
    events: list[tuple[str, str]] = []

    async def watch() -> None:
        watching = WatchParams(
            Scope(namespace), resource_version=listed.resource_version, timeout_seconds=30
        )
        async for event in kube_client.watch(WIDGET, watching):
            if event.type != "BOOKMARK":
                events.append((event.type, event.object["metadata"]["name"]))
            if event.type == "DELETED":
                return

    watcher = asyncio.create_task(watch())
    created = await kube_client.create(
        WIDGET, {"metadata": {"name": "w1", "namespace": namespace}, "spec": {"size": 3}}
    )
    assert created["spec"]["size"] == 3
    with pytest.raises(InvalidError, match="size"):
        await kube_client.create(
            WIDGET, {"metadata": {"name": "w2", "namespace": namespace}, "spec": {"size": 0}}
        )
    names = [
        o["metadata"]["name"] for o in (await kube_client.list(WIDGET, Scope(namespace))).items
    ]
    assert names == ["w1"]
    await kube_client.delete(WIDGET, "w1", namespace)
    await asyncio.wait_for(watcher, 30)
    assert events == [("ADDED", "w1"), ("DELETED", "w1")]
    with pytest.raises(NotFoundError):
        await kube_client.get(WIDGET, "w1", namespace)


async def test_validating_admission_policy_denies_one_service_account_admits_another(
    kube_client: Client, namespace: str, control_plane: ControlPlane, client_for: Any
) -> None:
    policy_name = f"deny-{namespace}"
    await kube_client.apply(
        r.VALIDATING_ADMISSION_POLICY,
        {
            "metadata": {"name": policy_name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE", "UPDATE"],
                            "resources": ["configmaps"],
                        }
                    ]
                },
                "validations": [
                    {
                        "expression": "!request.userInfo.username.endsWith(':blocked')",
                        "message": "the blocked ServiceAccount may not write ConfigMaps",
                    }
                ],
            },
        },
    )
    await kube_client.apply(
        r.VALIDATING_ADMISSION_POLICY_BINDING,
        {
            "metadata": {"name": policy_name},
            "spec": {
                "policyName": policy_name,
                "validationActions": ["Deny"],
                "matchResources": {
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
                },
            },
        },
    )
    await kube_client.apply(
        r.ROLE_BINDING,
        {
            "metadata": {"name": "edit", "namespace": namespace},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "cluster-admin",
            },
            "subjects": [{"kind": "Group", "name": f"system:serviceaccounts:{namespace}"}],
        },
    )
    blocked = client_for(control_plane.service_account_config(namespace, "blocked"))
    allowed = client_for(control_plane.service_account_config(namespace, "allowed"))

    def config_map(name: str) -> dict[str, Any]:
        return {"metadata": {"name": name, "namespace": namespace}, "data": {"k": "v"}}

    # Policies compile asynchronously: wait until a dry run is denied before asserting.
    async def denied() -> bool:
        try:
            await blocked.create(r.CONFIG_MAP, config_map("probe"), dry_run=True)
        except InvalidError:
            return True
        return False

    await eventually(denied, message="policy enforced")
    with pytest.raises(InvalidError, match="blocked ServiceAccount may not write"):
        await blocked.create(r.CONFIG_MAP, config_map("a"))
    created = await allowed.create(r.CONFIG_MAP, config_map("a"))
    assert created["metadata"]["name"] == "a"
    await kube_client.delete(r.VALIDATING_ADMISSION_POLICY_BINDING, policy_name)
    await kube_client.delete(r.VALIDATING_ADMISSION_POLICY, policy_name)


async def test_token_request_authenticates_as_its_service_account_under_rbac(
    kube_client: Client, namespace: str, control_plane: ControlPlane, client_for: Any
) -> None:
    await kube_client.create(
        r.SERVICE_ACCOUNT, {"metadata": {"name": "reader", "namespace": namespace}}
    )
    token = control_plane.request_token(namespace, "reader")
    reader = client_for(control_plane.token_config(token))

    review = await reader.request(
        "POST",
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
    )
    assert review["status"]["userInfo"]["username"] == f"system:serviceaccount:{namespace}:reader"

    with pytest.raises(ForbiddenError):
        await reader.list(r.CONFIG_MAP, namespace)
    await kube_client.apply(
        r.ROLE,
        {
            "metadata": {"name": "cm-reader", "namespace": namespace},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}],
        },
    )
    await kube_client.apply(
        r.ROLE_BINDING,
        {
            "metadata": {"name": "cm-reader", "namespace": namespace},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "cm-reader",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}],
        },
    )
    await eventually(
        may_list(reader, r.CONFIG_MAP, namespace),
        message="RBAC grant",
        retry_on=(ForbiddenError,),  # until the authorizer has seen the binding
    )
    with pytest.raises(ForbiddenError):  # the Role grants reads only
        await reader.create(r.CONFIG_MAP, {"metadata": {"name": "x", "namespace": namespace}})
    with pytest.raises(ForbiddenError):  # and only in its namespace
        await reader.list(r.CONFIG_MAP, "default")


async def test_client_certificate_user_is_subject_to_rbac(
    kube_client: Client, namespace: str, control_plane: ControlPlane, client_for: Any
) -> None:
    alice = client_for(control_plane.user_config("alice", ("team-a",)))
    with pytest.raises(ForbiddenError):
        await alice.list(r.SECRET, namespace)
    await kube_client.apply(
        r.ROLE,
        {
            "metadata": {"name": "secret-reader", "namespace": namespace},
            "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]}],
        },
    )
    await kube_client.apply(
        r.ROLE_BINDING,
        {
            "metadata": {"name": "team-a-secrets", "namespace": namespace},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "secret-reader",
            },
            "subjects": [
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "team-a"}
            ],
        },
    )
    # The certificate's organisation is the user's group: the group's grant applies to alice.
    await eventually(
        may_list(alice, r.SECRET, namespace), message="group grant", retry_on=(ForbiddenError,)
    )


async def test_statefulset_pod_with_a_volume_claim_runs_ready_on_the_kwok_node(
    kube_client: Client, namespace: str
) -> None:
    labels = {"app": "web"}
    await kube_client.apply(
        r.STATEFUL_SET,
        {
            "metadata": {"name": "web", "namespace": namespace},
            "spec": {
                "replicas": 1,
                "serviceName": "web",
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "web", "image": "registry.example/web:1"}]},
                },
                "volumeClaimTemplates": [
                    {
                        "metadata": {"name": "data"},
                        "spec": {
                            "accessModes": ["ReadWriteOnce"],
                            "resources": {"requests": {"storage": "1Gi"}},
                        },
                    }
                ],
            },
        },
    )

    async def pod_ready() -> dict[str, Any] | None:
        pod = await kube_client.get_or_none(r.POD, "web-0", namespace)
        conditions = ((pod or {}).get("status") or {}).get("conditions") or []
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
        return pod if ready else None

    pod = await eventually(pod_ready, timeout=60, message="web-0 Ready")
    assert pod["spec"]["nodeName"] == KWOK_NODE
    assert pod["status"]["phase"] == "Running"

    async def sts_ready() -> bool:
        sts = await kube_client.get(r.STATEFUL_SET, "web", namespace)
        return bool(sts.get("status", {}).get("readyReplicas") == 1)

    await eventually(sts_ready, timeout=60, message="StatefulSet readyReplicas=1")
    # The default StorageClass (kwok's) provisioned and bound the claim.
    claim = await kube_client.get(r.PERSISTENT_VOLUME_CLAIM, "data-web-0", namespace)
    assert claim["spec"]["storageClassName"] == KWOK_STORAGE_CLASS
    assert claim["status"]["phase"] == "Bound"


async def test_deleting_an_owner_garbage_collects_its_dependent(
    kube_client: Client, namespace: str
) -> None:
    owner = await kube_client.create(
        r.CONFIG_MAP, {"metadata": {"name": "owner", "namespace": namespace}}
    )
    await kube_client.create(
        r.CONFIG_MAP,
        {
            "metadata": {
                "name": "dependent",
                "namespace": namespace,
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "ConfigMap",
                        "name": "owner",
                        "uid": owner["metadata"]["uid"],
                    }
                ],
            }
        },
    )
    await kube_client.delete(r.CONFIG_MAP, "owner", namespace)

    async def collected() -> bool:
        return await kube_client.get_or_none(r.CONFIG_MAP, "dependent", namespace) is None

    await eventually(collected, timeout=60, message="dependent garbage-collected")


def _established_at(crd: dict[str, Any]) -> float:
    established = next(c for c in crd["status"]["conditions"] if c["type"] == "Established")
    assert established["status"] == "True"
    return datetime.fromisoformat(established["lastTransitionTime"]).timestamp()


async def test_the_session_plane_served_the_operators_crds_before_its_controller_manager(
    control_plane: ControlPlane, kube_client: Client
) -> None:
    """e2e/conftest.py gives the session plane manifests/crds through the plugin."""
    names = {crd["metadata"]["name"] for crd in control_plane.crds}
    assert names == {"companies.crewlet.ai", "engineclasses.crewlet.ai"}
    assert control_plane.crds_established_at is not None
    assert control_plane.crds_established_at < control_plane.start_times["kube-controller-manager"]
    for name in names:
        crd = await kube_client.get(r.CUSTOM_RESOURCE_DEFINITION, name)
        assert _established_at(crd) <= control_plane.start_times["kube-controller-manager"]


async def test_crds_given_to_a_plane_are_served_before_its_workloads_start_and_collected(
    tmp_path: Path,
) -> None:
    """The garbage collector knows a kind given to the plane from its first discovery, so a
    custom resource owned by another is collected once its owner is deleted."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plane = ControlPlane(tmp_path / "cp", workloads=True, crds=[widget_crd()]).start()
    try:
        assert not [w for w in caught if issubclass(w.category, EmptyAggregatedRolesWarning)]
        assert plane.crds_established_at is not None
        started = plane.start_times
        assert started["kube-apiserver"] < plane.crds_established_at
        for workload in ("kube-controller-manager", "kube-scheduler", "kwok"):
            assert plane.crds_established_at < started[workload]
        async with Client(plane.admin_config()) as client:
            crd = await client.get(r.CUSTOM_RESOURCE_DEFINITION, "widgets.example.crewlet.ai")
            assert _established_at(crd) <= started["kube-controller-manager"]

            # With workloads the clusterrole-aggregation controller fills in `view`.
            async def view_has_rules() -> bool:
                return bool((await client.get(r.CLUSTER_ROLE, "view")).get("rules"))

            await eventually(view_has_rules, message="view aggregated")

            owner = await client.create(
                WIDGET, {"metadata": {"name": "owner", "namespace": "default"}}
            )
            reference = {
                "apiVersion": "example.crewlet.ai/v1",
                "kind": "Widget",
                "name": "owner",
                "uid": owner["metadata"]["uid"],
            }
            await client.create(
                WIDGET,
                {
                    "metadata": {
                        "name": "dependent",
                        "namespace": "default",
                        "ownerReferences": [reference],
                    }
                },
            )
            await client.delete(WIDGET, "owner", "default")

            async def collected() -> bool:
                return await client.get_or_none(WIDGET, "dependent", "default") is None

            await eventually(collected, message="dependent Widget garbage-collected")
    finally:
        plane.stop()


def test_a_workload_whose_port_another_process_took_starts_again_on_a_fresh_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A port is free when it is picked, and the suite's other planes can bind it before the
    binary does: CI once saw kube-scheduler exit with "bind: address already in use"."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        picks: list[int] = []

        def pick() -> int:
            # etcd's two ports and the API server's come first; kube-controller-manager's next.
            picks.append(port if len(picks) == 3 else free_port())
            return picks[-1]

        monkeypatch.setattr(controlplane, "free_port", pick)
        plane = ControlPlane(tmp_path / "cp", workloads=True).start()
        try:
            log = (plane.log_dir / "kube-controller-manager.log").read_text()
            assert f"127.0.0.1:{port}: bind: address already in use" in log
            serving = plane.workload_ports["kube-controller-manager"]
            assert serving not in (port, *picks[:3])
            healthz = f"https://127.0.0.1:{serving}/healthz"
            assert urllib.request.urlopen(healthz, context=_unverified()).read() == b"ok"
            assert plane.processes["kube-controller-manager"].running()
        finally:
            plane.stop()


def _unverified() -> ssl.SSLContext:
    # The workloads serve /healthz on a certificate of their own, signed by nobody the plane knows.
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


async def test_a_plane_without_workloads_warns_that_the_aggregated_roles_are_empty(
    tmp_path: Path,
) -> None:
    with pytest.warns(EmptyAggregatedRolesWarning, match=r"workloads=True"):
        plane = ControlPlane(tmp_path / "cp").start()
    try:
        # The caveat the warning names: `view` exists but grants nothing.
        view = plane.admin_request("GET", "/apis/rbac.authorization.k8s.io/v1/clusterroles/view")
        assert view["aggregationRule"]
        assert not view.get("rules")
    finally:
        plane.stop()


def _all_gone(pids: list[int], timeout: float = 30) -> list[int]:
    deadline = time.monotonic() + timeout
    while (running := [p for p in pids if alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.2)
    return running


def _environment(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if b"=" in item)


def test_a_plane_takes_its_settings_and_stopping_it_leaves_no_process(tmp_path: Path) -> None:
    plane = ControlPlane(tmp_path / "cp", workloads=True, go_gc_percent=250, node_pods=300)
    plane.start()
    pids = plane.pids()
    assert set(pids) == ALL_BINARIES
    # Every binary gets the collector setting (the default trades memory for CPU).
    assert {name: _environment(pid).get("GOGC") for name, pid in pids.items()} == dict.fromkeys(
        ALL_BINARIES, "250"
    )
    # The node takes as many pods as it was told (a kubelet's 110 unless told).
    node = plane.admin_request("GET", f"/api/v1/nodes/{KWOK_NODE}")
    assert node["status"]["allocatable"]["pods"] == "300"
    plane.stop()
    assert _all_gone(list(pids.values())) == []


def _start_up(directory: Path) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "crewlet_operator.envtest",
            "up",
            "--dir",
            str(directory),
            "--workloads",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("{"):
            return proc, json.loads(line)
    raise AssertionError(f"`envtest up` exited with {proc.wait()} before it was up")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
def test_envtest_up_leaves_no_process_when_interrupted(tmp_path: Path, sig: signal.Signals) -> None:
    proc, info = _start_up(tmp_path / "up")
    assert Path(info["kubeconfig"]).is_file()
    pids = list(info["pids"].values())
    assert len(pids) == 5 and all(alive(p) for p in pids)
    proc.send_signal(sig)
    proc.wait(60)
    # Even SIGKILL of the parent takes its children down (the parent-death signal).
    assert _all_gone(pids) == []


def test_session_fixture_stops_every_process_it_started(tmp_path: Path) -> None:
    """A platform team's own suite, using the plugin, leaves nothing running when it ends; it
    sets no loop scope (issue 48: the docs said both "session" and "nothing"), and async
    fixtures of its own that use the plugin's, module- and function-scoped, set up and tear
    down on the session's loop with them."""
    pid_file = tmp_path / "pids.json"
    (tmp_path / "crds").mkdir()
    (tmp_path / "crds" / "widget.yaml").write_text(yaml.safe_dump(widget_crd()))
    (tmp_path / "test_inner.py").write_text(
        "import json\n"
        "import pytest\n"
        "from crewlet_operator.kube.resources import CONFIG_MAP, NAMESPACE\n\n"
        "@pytest.fixture(scope='module')\n"
        "async def shared(kube_client):\n"
        "    named = {'metadata': {'generateName': 'shared-'}}\n"
        "    made = await kube_client.create(NAMESPACE, named)\n"
        "    yield made['metadata']['name']\n"
        "    await kube_client.delete(NAMESPACE, made['metadata']['name'])\n\n"
        "@pytest.fixture\n"
        "async def note(kube_client, namespace):\n"
        "    body = {'metadata': {'name': 'note', 'namespace': namespace}}\n"
        "    yield await kube_client.create(CONFIG_MAP, body)\n"
        "    await kube_client.delete(CONFIG_MAP, 'note', namespace)\n\n"
        "async def test_inner(control_plane, kube_client, namespace, shared, note):\n"
        "    assert note['metadata']['namespace'] == namespace\n"
        "    got = await kube_client.get(NAMESPACE, namespace)\n"
        "    assert got['metadata']['name'] == namespace\n"
        "    # --envtest-crds: served before the controller-manager started\n"
        "    assert await kube_client.is_served('example.crewlet.ai/v1', 'Widget')\n"
        "    started = control_plane.start_times['kube-controller-manager']\n"
        "    assert control_plane.crds_established_at < started\n"
        f"    open({str(pid_file)!r}, 'w').write(json.dumps(control_plane.pids()))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "CREWLET_ENVTEST_WORKLOADS"}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "crewlet_operator.envtest.pytest_plugin",
            "--envtest-workloads",
            "--envtest-crds",
            "crds",
            "-o",
            "asyncio_mode=auto",
            "--rootdir",
            str(tmp_path),
            "-c",
            os.devnull,
            str(tmp_path / "test_inner.py"),
        ],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    pids = json.loads(pid_file.read_text())
    assert set(pids) == ALL_BINARIES
    assert _all_gone(list(pids.values())) == []


def test_audit_log_records_every_write_with_its_user(tmp_path: Path) -> None:
    with ControlPlane(tmp_path / "audited", audit=True) as plane:
        plane.admin_request("POST", "/api/v1/namespaces", {"metadata": {"name": "audited"}})
        plane.admin_request("GET", "/api/v1/namespaces/audited")
        events = plane.audit_events()
    # The API server's own bootstrap writes are there too; ours is one create by "admin".
    writes = [e for e in events if e["objectRef"].get("name") == "audited"]
    assert [(e["verb"], e["objectRef"]["resource"]) for e in writes] == [("create", "namespaces")]
    assert all(e["verb"] != "get" for e in events)
    assert writes[0]["user"]["username"] == "admin"
    assert writes[0]["responseStatus"]["code"] == 201
