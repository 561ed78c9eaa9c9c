"""The bench's kopf contender: the Crewlet Company reconcile written as kopf users write an
operator, with kopf's default settings.

One handler for creation, update and resumption of a Company fills in the template
(``CREWLET_PEER_TEMPLATE``, written by :mod:`bench.peers.template`; the rules are in
:mod:`bench.peers.placeholders`) and server-side applies the children, forcing conflicts, under
its own field manager, through kubernetes_asyncio's dynamic client (kopf has no client for
arbitrary resources of its own; kubernetes_asyncio is the async client it logs in with when it
is installed). Accepted=True goes into kopf's ``patch``, which kopf sends to the status
subresource after the handler, when the condition is not already there for this generation.

It runs in a virtualenv of its own (:mod:`bench.peers.toolchain`), as
``kopf run --standalone --all-namespaces bench/peers/kopf_operator.py`` with the repository on
``PYTHONPATH``.
"""

# kopf is installed in the peer's own virtualenv, not in the one the repository is checked with.
# mypy: disable-error-code="import-not-found,untyped-decorator,misc"

from __future__ import annotations

import datetime
import json
import os
from pathlib import Path
from typing import Any

import kopf
from kubernetes_asyncio import client, config, dynamic

from bench.peers.placeholders import instantiate

FIELD_MANAGER = "crewlet-peer-kopf"
TEMPLATE: dict[str, Any] = json.loads(Path(os.environ["CREWLET_PEER_TEMPLATE"]).read_text())
COMPANIES = ("crewlet.ai", "v1alpha1", "companies")


@kopf.on.startup()
async def connect(memo: Any, **_: Any) -> None:
    """One API client for the process (startup handlers run before kopf logs in, so it loads
    the kubeconfig itself); the children's kinds resolved once."""
    await config.load_kube_config()
    memo.api = client.ApiClient()
    memo.dynamic = await dynamic.DynamicClient(memo.api)
    memo.resources = {
        (child["apiVersion"], child["kind"]): await memo.dynamic.resources.get(
            api_version=child["apiVersion"], kind=child["kind"]
        )
        for child in TEMPLATE["children"]
    }


@kopf.on.cleanup()
async def disconnect(memo: Any, **_: Any) -> None:
    """Close the API client on the way out."""
    await memo.api.close()


@kopf.on.resume(*COMPANIES)
@kopf.on.create(*COMPANIES)
@kopf.on.update(*COMPANIES)
async def reconcile(meta: Any, spec: Any, status: Any, patch: Any, memo: Any, **_: Any) -> None:
    """Apply every child, then accept the Company if it is not accepted at this generation."""
    replicas = (spec.get("seats") or {}).get("replicas")
    for child in instantiate(TEMPLATE, meta["namespace"], meta["name"], meta["uid"], replicas):
        await memo.dynamic.server_side_apply(
            memo.resources[(child["apiVersion"], child["kind"])],
            body=child,
            field_manager=FIELD_MANAGER,
            force_conflicts=True,
        )
    generation = meta.get("generation")
    conditions = list(status.get("conditions") or [])
    previous: dict[str, Any] = next((c for c in conditions if c.get("type") == "Accepted"), {})
    if previous.get("status") == "True" and previous.get("observedGeneration") == generation:
        return
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    accepted = {
        "type": "Accepted",
        "status": "True",
        "reason": "ChildrenApplied",
        "message": "every child is applied",
        "observedGeneration": generation,
        "lastTransitionTime": now
        if previous.get("status") != "True"
        else previous["lastTransitionTime"],
    }
    patch.status["conditions"] = [c for c in conditions if c is not previous] + [accepted]
