"""The secure metrics endpoint and the event recorder against a real API server.

Authentication is the API server's TokenReview of real ServiceAccount tokens, authorisation its
RBAC answering SubjectAccessReviews for the non-resource URL ``/metrics``.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from crewlet_operator import metrics
from crewlet_operator.envtest import ControlPlane
from crewlet_operator.errors import NotFoundError
from crewlet_operator.events import EventRecorder
from crewlet_operator.kube import resources as r
from crewlet_operator.kube.client import Client, Scope
from crewlet_operator.serving import MetricsServer

# Signed by nobody the API server trusts.
FORGED_JWT = (
    "eyJhbGciOiJSUzI1NiIsImtpZCI6IngifQ."
    "eyJpc3MiOiJodHRwczovL2V2aWwiLCJzdWIiOiJzeXN0ZW06YWRtaW4ifQ."
    "c2lnbmF0dXJl"
)


@contextlib.asynccontextmanager
async def serving(client: Client, **kwargs: Any) -> AsyncIterator[MetricsServer]:
    server = MetricsServer(client, bind_address="127.0.0.1:0", secure=True, **kwargs)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


async def scrape(server: MetricsServer, token: str | None = None) -> tuple[int, str]:
    """GET /metrics over HTTPS, verifying the server's generated certificate for 127.0.0.1."""
    assert server.certificate_pem is not None
    context = ssl.create_default_context(cadata=server.certificate_pem.decode())
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        aiohttp.ClientSession() as session,
        session.get(
            f"https://127.0.0.1:{server.port}/metrics", headers=headers, ssl=context
        ) as response,
    ):
        return response.status, await response.text()


async def service_account_token(
    kube_client: Client, control_plane: ControlPlane, namespace: str, name: str
) -> str:
    await kube_client.create(
        r.SERVICE_ACCOUNT, {"metadata": {"name": name, "namespace": namespace}}
    )
    return control_plane.request_token(namespace, name)


@contextlib.asynccontextmanager
async def metrics_reader(kube_client: Client, namespace: str, account: str) -> AsyncIterator[None]:
    """A ClusterRole allowing ``get`` on ``/metrics``, bound to ServiceAccount ``account``."""
    name = f"{namespace}-metrics-reader"
    await kube_client.create(
        r.CLUSTER_ROLE,
        {
            "metadata": {"name": name},
            "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}],
        },
    )
    await kube_client.create(
        r.CLUSTER_ROLE_BINDING,
        {
            "metadata": {"name": name},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": name,
            },
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
        },
    )
    try:
        yield
    finally:
        for resource in (r.CLUSTER_ROLE_BINDING, r.CLUSTER_ROLE):
            with contextlib.suppress(NotFoundError):
                await kube_client.delete(resource, name)


async def rbac_allows(kube_client: Client, namespace: str, account: str) -> bool:
    """Ask the API server directly (no cache of ours) whether the account may get /metrics."""
    review = await kube_client.create(
        r.SUBJECT_ACCESS_REVIEW,
        {
            "metadata": {},
            "spec": {
                "user": f"system:serviceaccount:{namespace}:{account}",
                "groups": ["system:serviceaccounts", f"system:serviceaccounts:{namespace}"],
                "nonResourceAttributes": {"path": "/metrics", "verb": "get"},
            },
        },
    )
    return bool(review["status"].get("allowed"))


async def eventually_allowed(kube_client: Client, namespace: str, account: str) -> None:
    for _ in range(100):
        if await rbac_allows(kube_client, namespace, account):
            return
        await asyncio.sleep(0.1)
    pytest.fail(f"RBAC never allowed {account} to get /metrics")


async def test_anonymous_and_invalid_tokens_are_401(kube_client: Client) -> None:
    async with serving(kube_client) as server:
        assert await scrape(server) == (401, "Unauthorized")
        assert await scrape(server, "not-a-token") == (401, "Unauthorized")
        assert await scrape(server, FORGED_JWT) == (401, "Unauthorized")


async def test_service_account_without_a_role_is_403(
    kube_client: Client, namespace: str, control_plane: ControlPlane
) -> None:
    token = await service_account_token(kube_client, control_plane, namespace, "no-role")
    async with serving(kube_client) as server:
        status, text = await scrape(server, token)
    assert status == 403
    assert text == f"Authorization denied for user system:serviceaccount:{namespace}:no-role"


async def test_service_account_granted_get_on_metrics_reads_them(
    kube_client: Client, namespace: str, control_plane: ControlPlane
) -> None:
    metrics.init_controller_metrics("test", 1)
    token = await service_account_token(kube_client, control_plane, namespace, "scraper")
    async with metrics_reader(kube_client, namespace, "scraper"):
        await eventually_allowed(kube_client, namespace, "scraper")
        async with serving(kube_client) as server:
            status, text = await scrape(server, token)
    assert status == 200
    assert 'controller_runtime_reconcile_total{controller="test",result="success"}' in text


async def test_a_denial_is_cached_until_its_ttl_expires(
    kube_client: Client, namespace: str, control_plane: ControlPlane
) -> None:
    token = await service_account_token(kube_client, control_plane, namespace, "late")
    # controller-runtime's 30 s deny TTL here, and a short one: the same grant, seen apart.
    async with serving(kube_client) as default_ttls, serving(kube_client, deny_ttl=1) as short:
        assert (await scrape(default_ttls, token))[0] == 403
        assert (await scrape(short, token))[0] == 403
        async with metrics_reader(kube_client, namespace, "late"):
            await eventually_allowed(kube_client, namespace, "late")
            assert (await scrape(default_ttls, token))[0] == 403  # still the cached denial
            await asyncio.sleep(1)
            assert (await scrape(short, token))[0] == 200


async def test_recorded_events_are_written_and_repeats_form_a_series(
    kube_client: Client, namespace: str
) -> None:
    config_map = await kube_client.create(
        r.CONFIG_MAP, {"metadata": {"name": "settings", "namespace": namespace}}
    )
    recorder = EventRecorder(kube_client, "crewlet-operator")
    recorder.record(config_map, "Warning", "InvalidSettings", "Validate", "key k is not allowed")
    recorder.record(config_map, "Warning", "InvalidSettings", "Validate", "key k is not allowed")
    recorder.record(config_map, "Normal", "Synced", "Reconcile", "x" * 3000)
    await recorder.flush()

    listed = await kube_client.list(r.EVENT, Scope(namespace))
    ours = {e["reason"]: e for e in listed.items if e["reportingController"] == "crewlet-operator"}
    assert set(ours) == {"InvalidSettings", "Synced"}
    invalid, synced = ours["InvalidSettings"], ours["Synced"]
    assert invalid["type"] == "Warning"
    assert invalid["series"]["count"] == 2
    assert invalid["regarding"]["uid"] == config_map["metadata"]["uid"]
    assert invalid["regarding"]["kind"] == "ConfigMap"
    assert invalid["metadata"]["name"].startswith("settings.")
    assert "series" not in synced
    assert len(synced["note"]) == 1024


async def test_events_about_cluster_scoped_objects_go_to_default(
    kube_client: Client, namespace: str
) -> None:
    namespace_object = await kube_client.get(r.NAMESPACE, namespace)
    recorder = EventRecorder(kube_client, "crewlet-operator")
    recorder.record(namespace_object, "Normal", "Labelled", "Reconcile", "labels applied")
    await recorder.flush()
    uid = namespace_object["metadata"]["uid"]
    ours = [
        e
        for e in (await kube_client.list(r.EVENT, Scope("default"))).items
        if e.get("regarding", {}).get("uid") == uid
    ]
    assert [e["reason"] for e in ours] == ["Labelled"]
    assert "namespace" not in ours[0]["regarding"]
    await kube_client.delete(r.EVENT, ours[0]["metadata"]["name"], "default")
