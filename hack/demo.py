"""``make run``: a local control plane with workloads, the CRDs, the operator and a sample
company, until Ctrl-C.

The engine image cannot run here (no container runtime): kwok plays the kubelet, so the pods
become Ready without running, which is enough to watch the operator converge a company.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import yaml

from crewlet_operator import Client, find_condition
from crewlet_operator.envtest import USER_FIELD_MANAGER, ControlPlane, binaries
from crewlet_operator.envtest.crds import install_crds, load_crds
from crewlet_operator.envtest.process import StopSignals
from crewlet_operator.envtest.wait import eventually
from crewlet_operator_daemon.api.v1alpha1 import COMPANY, ENGINE_CLASS

ROOT = Path(__file__).resolve().parent.parent


def documents(path: Path) -> list[dict[str, object]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


async def install_crewlet_crds(plane: ControlPlane) -> None:
    async with Client(plane.admin_config(), field_manager=USER_FIELD_MANAGER) as client:
        await install_crds(client, load_crds(ROOT / "manifests/crds"))


async def apply_samples(plane: ControlPlane) -> None:
    async with Client(plane.admin_config(), field_manager=USER_FIELD_MANAGER) as client:
        await client.apply(ENGINE_CLASS, documents(ROOT / "manifests/samples/engineclass.yaml")[0])
        await client.apply(COMPANY, documents(ROOT / "manifests/samples/company.yaml")[0])

        async def ready() -> bool:
            company = await client.get(COMPANY, "acme", "default")
            cond = find_condition(company.get("status", {}).get("conditions"), "Ready")
            return bool(cond and cond["status"] == "True")

        await eventually(ready, timeout=180, message="company acme Ready")


def operator_argv(plane: ControlPlane, *, metrics: int, health: int) -> list[str]:
    """The operator against ``plane``, its metrics and health served on loopback (the metrics
    over HTTPS with delegated auth and a self-signed certificate: the chart's default)."""
    return [
        sys.executable, "-m", "crewlet_operator_daemon.cli", "--kubeconfig", str(plane.kubeconfig),
        "--leader-election-namespace", "default",
        "--metrics-bind-address", f"127.0.0.1:{metrics}",
        "--health-probe-bind-address", f"127.0.0.1:{health}", "--log-format", "json",
    ]  # fmt: skip


def main() -> int:
    run_dir = Path(os.environ.get("RUN_DIR", ROOT / ".run")).resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    stop = StopSignals()
    with ControlPlane(run_dir / "envtest", workloads=True) as plane:
        print(f"control plane up at {plane.host}; export KUBECONFIG={plane.kubeconfig}", flush=True)
        asyncio.run(install_crewlet_crds(plane))
        with open(run_dir / "operator.log", "ab") as log:
            operator = subprocess.Popen(
                operator_argv(plane, metrics=8443, health=8081),
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            print(
                f"operator running (pid {operator.pid}); its log: {run_dir / 'operator.log'}",
                flush=True,
            )
            asyncio.run(apply_samples(plane))
            subprocess.run(
                [
                    str(binaries.find("kubectl")),
                    "--kubeconfig",
                    str(plane.kubeconfig),
                    "get",
                    "engineclasses,companies",
                    "-A",
                ],
                check=True,
            )
            print("Ready. Ctrl-C stops the operator and the control plane.", flush=True)
            stop.wait()
        finally:
            operator.send_signal(signal.SIGTERM)
            operator.wait(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
