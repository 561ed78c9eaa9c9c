"""A small sharded library controller, run as a process by e2e/test_shard_handoff.py: each Widget
(the example's CRD) gets a ConfigMap ``<name>-rendered`` holding its ``spec.data``, and a Ready
condition with the generation it rendered. Its requests go out with the user agent given, so
that the API server's audit log tells the replicas apart.

``python e2e/shardlet.py --kubeconfig K --identity I --lease-namespace NS``; exit 1 when a
Lease was lost, 0 after SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

from widgets import WIDGET

from crewlet_operator import (
    CONFIG_MAP,
    Client,
    LeadershipLostError,
    Manager,
    ManagerOptions,
    Request,
    Sharding,
    condition,
    configure_logging,
    controller_reference,
    set_condition,
)

NAME = "shardlet"
DOMAIN = "example.crewlet.ai"
LEASE_SECONDS = 4.0


def setup(manager: Manager) -> None:
    """The controller: a Widget's ConfigMap (with the widget's slot label) and its status."""
    client, cache = manager.client, manager.cache

    async def reconcile(request: Request) -> None:
        widget = cache.get(WIDGET, request.name, request.namespace)
        if widget is None:
            return
        desired = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": f"{request.name}-rendered",
                "namespace": request.namespace,
                "labels": manager.shard_labels_for(widget),
                "ownerReferences": [controller_reference(widget)],
            },
            "data": dict(widget.get("spec", {}).get("data") or {}),
        }
        observed = cache.get(CONFIG_MAP, f"{request.name}-rendered", request.namespace)
        await client.apply_if_changed(CONFIG_MAP, desired, observed)
        status = widget.get("status") or {}
        generation = widget["metadata"]["generation"]
        ready = condition("Ready", True, "Rendered", "rendered", observed_generation=generation)
        conditions = set_condition(status.get("conditions") or [], ready)
        if conditions != status.get("conditions"):
            await client.apply_status(
                WIDGET,
                {
                    "apiVersion": WIDGET.api_version,
                    "kind": WIDGET.kind,
                    "metadata": {"name": request.name, "namespace": request.namespace},
                    "status": {"conditions": conditions},
                },
            )

    manager.controller(NAME).for_(WIDGET).owns(CONFIG_MAP).with_rbac(status=True).complete(
        reconcile
    )


def options(lease_namespace: str, identity: str) -> ManagerOptions:
    """A replica's options: sharded, electing in ``lease_namespace``, with short Leases."""
    return ManagerOptions(
        name=NAME,
        leader_election_namespace=lease_namespace,
        identity=identity,
        lease_duration=LEASE_SECONDS,
        renew_deadline=3.0,
        retry_period=1.0,
        metrics_bind_address="0",
        health_probe_bind_address="0",
        sharding=Sharding(resource=WIDGET, domain=DOMAIN),
    )


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--lease-namespace", required=True)
    parser.add_argument("--identity", required=True)
    args = parser.parse_args()
    configure_logging("info", "json")
    client = await Client.from_kubeconfig(args.kubeconfig, user_agent=args.identity)
    manager = Manager(client, options(args.lease_namespace, args.identity))
    setup(manager)
    try:
        await manager.run(handle_signals=True)
    except LeadershipLostError:
        return 1
    finally:
        await client.close()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
