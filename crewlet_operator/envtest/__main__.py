"""``python -m crewlet_operator.envtest up --dir DIR [--workloads]``.

Starts a local control plane, writes ``DIR/kubeconfig``, prints where everything is, and runs
until SIGINT or SIGTERM, then stops every process it started.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from crewlet_operator.envtest import ControlPlane
from crewlet_operator.envtest.process import StopSignals


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code."""
    parser = argparse.ArgumentParser(prog="python -m crewlet_operator.envtest")
    commands = parser.add_subparsers(dest="command", required=True)
    up = commands.add_parser("up", help="run a local control plane until interrupted")
    up.add_argument("--dir", type=Path, required=True, help="where to keep its files")
    up.add_argument(
        "--workloads",
        action="store_true",
        help="also run kube-controller-manager, kube-scheduler and kwok with one fake node",
    )
    args = parser.parse_args(argv)

    stop = StopSignals()

    args.dir.mkdir(parents=True, exist_ok=True)
    with ControlPlane(args.dir.resolve(), workloads=args.workloads) as plane:
        info = {
            "kubeconfig": str(plane.kubeconfig),
            "server": plane.host,
            "pids": plane.pids(),
            "logs": str(plane.log_dir),
        }
        (args.dir / "envtest.json").write_text(json.dumps(info, indent=2))
        print(f"control plane up at {plane.host}", flush=True)
        print(f"export KUBECONFIG={plane.kubeconfig}", flush=True)
        print(json.dumps(info), flush=True)
        stop.wait()
        print("stopping control plane", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
