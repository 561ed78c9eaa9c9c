"""The client's retry policy on the real API server: requests that API Priority and Fairness
turns away with a 429 are sent again after its ``Retry-After`` and succeed; with retries off,
the 429 reaches the caller (the policy itself, without a server: unit/test_retry_policies.py).

A 429 is made certain, not likely: a priority level of its own, with the smallest concurrency
limit and ``limitResponse: Reject`` (no queue, nothing borrowed), serves one ServiceAccount, and
creates of that ServiceAccount are held in an admission webhook that answers only when the test
says. A request occupies its seat until it is answered, admission included, so once the held
creates fill the level's seats, every other request of the ServiceAccount is refused at once;
when the webhook lets them go, the seats are free again before the first ``Retry-After`` is over.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import pytest
import pytest_asyncio
from aiohttp import web

from crewlet_operator import Client, Resource
from crewlet_operator.envtest import ControlPlane
from crewlet_operator.envtest.pki import CertificateAuthority
from crewlet_operator.envtest.process import free_port
from crewlet_operator.envtest.wait import eventually
from crewlet_operator.errors import NotFoundError, TooManyRequestsError
from crewlet_operator.kube import RetryPolicy
from crewlet_operator.kube.resources import (
    CONFIG_MAP,
    FLOW_SCHEMA,
    PRIORITY_LEVEL_CONFIGURATION,
    ROLE,
    ROLE_BINDING,
)
from crewlet_operator.metrics import REGISTRY

WEBHOOK = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "ValidatingWebhookConfiguration",
    "validatingwebhookconfigurations",
    namespaced=False,
)
ACCOUNT = "throttled"
HOLD = {"retries.crewlet.test/hold": "true"}
MOST_SEATS = 50
"""More seats than the level can have (one share of the server's 600 is a few)."""


@dataclass
class Gate:
    """An admission webhook that holds every request it is sent until :meth:`open`."""

    url: str
    ca_bundle: bytes
    held: int = 0
    opened: asyncio.Event = field(default_factory=asyncio.Event)

    async def review(self, request: web.Request) -> web.Response:
        review = await request.json()
        self.held += 1
        await self.opened.wait()
        return web.json_response(
            {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "response": {"uid": review["request"]["uid"], "allowed": True},
            }
        )

    def open(self) -> None:
        self.opened.set()


@pytest.fixture
def webhook_tls(tmp_path: Path) -> tuple[ssl.SSLContext, bytes]:
    """The webhook's serving TLS, and the CA that the API server is to trust for it."""
    authority = CertificateAuthority("retries-webhook-ca")
    serving = authority.issue("127.0.0.1", ip_addresses=("127.0.0.1",), server=True)
    (tmp_path / "tls.crt").write_bytes(serving.cert_pem)
    (tmp_path / "tls.key").write_bytes(serving.key_pem)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    return context, authority.pair.cert_pem


@pytest_asyncio.fixture(loop_scope="session")
async def gate(webhook_tls: tuple[ssl.SSLContext, bytes]) -> AsyncIterator[Gate]:
    context, ca = webhook_tls
    port = free_port()
    gate = Gate(f"https://127.0.0.1:{port}/hold", ca)
    app = web.Application()
    app.router.add_post("/hold", gate.review)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port, ssl_context=context).start()
    try:
        yield gate
    finally:
        gate.open()
        await runner.cleanup()


@pytest_asyncio.fixture(loop_scope="session")
async def throttled(
    kube_client: Client, control_plane: ControlPlane, namespace: str, gate: Gate
) -> AsyncIterator[str]:
    """ServiceAccount ``throttled`` of ``namespace``, alone in a priority level of the fewest
    seats that rejects what it cannot seat, and whose creates of ConfigMaps labelled
    :data:`HOLD` wait at ``gate``; the FlowSchema's uid."""
    name = f"retries-{namespace}"
    await kube_client.create(
        ROLE,
        {
            "metadata": {"name": ACCOUNT, "namespace": namespace},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["*"]}],
        },
    )
    await kube_client.create(
        ROLE_BINDING,
        {
            "metadata": {"name": ACCOUNT, "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": ACCOUNT},
            "subjects": [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": namespace}],
        },
    )
    await kube_client.create(
        PRIORITY_LEVEL_CONFIGURATION,
        {
            "metadata": {"name": name},
            "spec": {
                "type": "Limited",
                "limited": {
                    "nominalConcurrencyShares": 1,
                    "lendablePercent": 0,
                    "borrowingLimitPercent": 0,
                    "limitResponse": {"type": "Reject"},
                },
            },
        },
    )
    schema = await kube_client.create(
        FLOW_SCHEMA,
        {
            "metadata": {"name": name},
            "spec": {
                "priorityLevelConfiguration": {"name": name},
                "matchingPrecedence": 500,
                "rules": [
                    {
                        "subjects": [
                            {
                                "kind": "ServiceAccount",
                                "serviceAccount": {"name": ACCOUNT, "namespace": namespace},
                            }
                        ],
                        "resourceRules": [
                            {
                                "verbs": ["*"],
                                "apiGroups": ["*"],
                                "resources": ["*"],
                                "namespaces": ["*"],
                                "clusterScope": True,
                            }
                        ],
                    }
                ],
            },
        },
    )
    await kube_client.create(
        WEBHOOK,
        {
            "metadata": {"name": name},
            "webhooks": [
                {
                    "name": "hold.retries.crewlet.test",
                    "clientConfig": {
                        "url": gate.url,
                        "caBundle": base64.b64encode(gate.ca_bundle).decode(),
                    },
                    "rules": [
                        {
                            "operations": ["CREATE"],
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "resources": ["configmaps"],
                        }
                    ],
                    "namespaceSelector": {
                        "matchLabels": {"kubernetes.io/metadata.name": namespace}
                    },
                    "objectSelector": {"matchLabels": HOLD},
                    "failurePolicy": "Fail",
                    "sideEffects": "None",
                    "admissionReviewVersions": ["v1"],
                    "timeoutSeconds": 30,
                }
            ],
        },
    )
    try:
        yield schema["metadata"]["uid"]
    finally:
        gate.open()
        for resource in (WEBHOOK, FLOW_SCHEMA, PRIORITY_LEVEL_CONFIGURATION):
            with contextlib.suppress(NotFoundError):
                await kube_client.delete(resource, name)


def config_map(name: str, namespace: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace, "labels": labels or {}}}


def counted(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def in_effect(control_plane: ControlPlane, namespace: str, schema_uid: str) -> bool:
    """Whether the API server classifies the ServiceAccount's requests by our FlowSchema (it
    says which in a header of every answer)."""
    headers = {"Impersonate-User": f"system:serviceaccount:{namespace}:{ACCOUNT}"}
    async with (
        aiohttp.ClientSession() as session,
        session.get(
            f"{control_plane.host}/api/v1/namespaces/{namespace}/configmaps",
            ssl=control_plane.admin_ssl_context(),
            headers=headers,
        ) as answer,
    ):
        return answer.headers.get("X-Kubernetes-PF-FlowSchema-UID") == schema_uid


async def test_throttled_requests_are_retried_after_retry_after_until_they_succeed(
    kube_client: Client, control_plane: ControlPlane, namespace: str, gate: Gate, throttled: str
) -> None:
    await eventually(
        lambda: in_effect(control_plane, namespace, throttled), message="FlowSchema in effect"
    )
    # The webhook in effect too: the admin's create (exempt from the level) reaches it.
    gate.open()

    probes = itertools.count()

    async def reaches_the_gate() -> bool:
        name = f"probe-{next(probes)}"
        await kube_client.create(CONFIG_MAP, config_map(name, namespace, HOLD))
        return gate.held > 0

    await eventually(reaches_the_gate, message="webhook in effect")
    gate.opened.clear()
    config = control_plane.service_account_config(namespace, ACCOUNT)
    async with (
        Client(config, retries=RetryPolicy(max_retries=0)) as unretried,
        Client(config) as retried,
    ):
        # Fill the level's seats with held creates, one at a time, until one is refused.
        holding: list[asyncio.Task[dict[str, Any]]] = []
        held_before = gate.held
        for seat in range(MOST_SEATS):
            create = asyncio.create_task(
                unretried.create(CONFIG_MAP, config_map(f"held-{seat}", namespace, HOLD))
            )

            def held_or_refused(create: asyncio.Task[dict[str, Any]] = create) -> bool:
                return create.done() or gate.held == held_before + len(holding) + 1

            await eventually(held_or_refused, message=f"create {seat} held or refused")
            if create.done():
                break
            holding.append(create)
        # Without retries, the 429 reaches the caller, with the wait it asked for.
        with pytest.raises(TooManyRequestsError) as refused:
            create.result()
        assert holding, "the level had no seat at all"
        assert refused.value.retry_after is not None and refused.value.retry_after >= 1

        # With client-go's policy, each request refused now is sent again after that wait.
        host = urlsplit(control_plane.host).netloc
        refusals = {
            verb: counted("rest_client_requests_total", code="429", method=verb, host=host)
            for verb in ("GET", "POST")
        }
        retried_gets = counted(
            "rest_client_request_retries_total", code="429", verb="GET", host=host
        )
        retried_posts = counted(
            "rest_client_request_retries_total", code="429", verb="POST", host=host
        )
        reads = [asyncio.create_task(retried.list(CONFIG_MAP, namespace)) for _ in range(6)]
        writes = [
            asyncio.create_task(retried.create(CONFIG_MAP, config_map(f"w-{i}", namespace)))
            for i in range(2)
        ]
        expected = {"GET": len(reads), "POST": len(writes)}
        await eventually(
            lambda: all(
                counted("rest_client_requests_total", code="429", method=verb, host=host)
                >= refusals[verb] + expected[verb]
                for verb in expected
            ),
            message="every request refused once",
        )
        assert not any(task.done() for task in reads + writes)
        gate.open()
        listed = await asyncio.gather(*reads)
        written = await asyncio.gather(*writes)
        await asyncio.gather(*holding)
    assert all(page.resource_version for page in listed)
    assert [w["metadata"]["name"] for w in written] == ["w-0", "w-1"]
    assert counted(
        "rest_client_request_retries_total", code="429", verb="GET", host=host
    ) >= retried_gets + len(reads)
    assert counted(
        "rest_client_request_retries_total", code="429", verb="POST", host=host
    ) >= retried_posts + len(writes)
