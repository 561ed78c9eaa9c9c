"""Run the widget example as a process: ``python examples/run_widgets.py --kubeconfig K ...``.

Exit codes: 0 after SIGTERM/SIGINT, 1 when the lease was lost.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from widgets import setup

from crewlet_operator import (
    Client,
    LeadershipLostError,
    Manager,
    ManagerOptions,
    configure_logging,
)


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--lease-namespace", default="default")
    parser.add_argument("--identity", required=True)
    parser.add_argument("--metrics-bind-address", default="127.0.0.1:0")
    parser.add_argument("--health-probe-bind-address", default="127.0.0.1:0")
    parser.add_argument("--log-level", default="info", help="debug logs every reconcile")
    args = parser.parse_args()
    configure_logging(args.log_level, "json")
    client = await Client.from_kubeconfig(args.kubeconfig)
    manager = Manager(
        client,
        ManagerOptions(
            name="widgets",
            leader_election_namespace=args.lease_namespace,
            identity=args.identity,
            metrics_bind_address=args.metrics_bind_address,
            metrics_secure=False,
            health_probe_bind_address=args.health_probe_bind_address,
        ),
    )
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
