"""``crewlet-operator``: the daemon. Flags are spelt as controller-runtime/kubebuilder spell
them, so a manifest written for a Go operator's manager reads the same here."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Coroutine, Mapping, Sequence
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import structlog
import uvloop

from crewlet_operator import (
    HTTP_ROUTE,
    Client,
    LeadershipLostError,
    Manager,
    ManagerOptions,
    Sharding,
    configure_logging,
    default_identity,
)
from crewlet_operator.manager import default_namespace
from crewlet_operator.tracing import configure_from_environment
from crewlet_operator_daemon.api.v1alpha1 import COMPANY
from crewlet_operator_daemon.controller import CrewletControllers
from crewlet_operator_daemon.plan import MANAGER_NAME, ClusterFacts

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

SUPPORTED_MINOR = "37"
"""The Kubernetes minor the operator is tested against (the install page supports one)."""


MAX_CONCURRENT_RECONCILES = 4
"""Workers per controller. Four reconciles' waves of child applies keep the API server as busy
as it can be; more cost CPU for the same writes (16 converged a burst of 1,000 Companies 8%
slower). Measurements: bench/NOTES.md, "Workers per controller"."""


def served_minor(version: Mapping[str, Any]) -> str:
    """The Kubernetes minor the API server behaves as, from its ``/version``.

    An API server that emulates an older release (``--emulated-version``, KEP-4330) serves that
    release's APIs and features, so its emulated minor counts, not its binary's. Providers append
    ``+`` to the minor (``"37+"``), which says nothing about the API.
    """
    minor = version.get("emulationMinor") or version.get("minor") or ""
    return str(minor).rstrip("+")


def unsupported_kubernetes(version: Mapping[str, Any]) -> str | None:
    """Why the server's Kubernetes is not the one the operator supports, or None."""
    major = str(version.get("emulationMajor") or version.get("major") or "")
    minor = served_minor(version)
    if (major, minor) == ("1", SUPPORTED_MINOR):
        return None
    emulated = " (emulated)" if version.get("emulationMinor") else ""
    return (
        f"the API server serves Kubernetes {major}.{minor}{emulated}; the operator supports "
        f"1.{SUPPORTED_MINOR} only, the minor its tests ran on"
    )


LEASE_LABELS = {
    "app.kubernetes.io/name": "crewlet-operator",
    "app.kubernetes.io/component": "leader-election",
}
"""The labels of the operator's Lease, which make it one of a kind in the cluster
(``ManagerOptions.exclusive_lease_labels``): every install elects on a Lease of its own
namespace, so a second install (a second Helm release, ``dist/install.yaml`` beside the chart)
would otherwise lead too, and reconcile the same companies. With them, it waits while another
install's Lease is held and live, and writes nothing. With ``--leader-elect=false`` there is no
Lease, and no such check: the chart's default elects a leader."""

SHARDING_DOMAIN = "crewlet.ai"
"""The domain of the ring's labels with ``--sharding``: a company carries
``shard.crewlet.ai/crewlet-operator: <member>``, each replica's Lease
``sharding.crewlet.ai/ring: crewlet-operator``."""

EVENT_LOOPS = ("asyncio", "uvloop")
"""What ``--event-loop`` takes. asyncio's own loop is the default: uvloop took a fifth less CPU
in a burst, but a seventh more for a restart over 10,000 companies to sync (and a fifth longer),
and up to 11 MiB more.
Measurements: bench/NOTES.md, "asyncio's loop, not uvloop" and "uvloop, a flag"."""

T = TypeVar("T")

log = structlog.get_logger("crewlet_operator_daemon.cli")


def _bool(value: str) -> bool:
    lowered = value.lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {value!r}")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The daemon's flags, with their defaults."""
    p = argparse.ArgumentParser(prog="crewlet-operator", description=__doc__)
    p.add_argument("--kubeconfig", help="kubeconfig path; in-cluster config when unset")
    p.add_argument(
        "--leader-elect",
        type=_bool,
        nargs="?",
        const=True,
        default=True,
        help="elect a leader with a Lease so that one replica acts (default true)",
    )
    p.add_argument(
        "--leader-election-namespace",
        help="namespace of the Lease (default: the pod's own namespace)",
    )
    p.add_argument(
        "--leader-election-id", default="crewlet-operator-leader", help="name of the Lease"
    )
    p.add_argument(
        "--metrics-bind-address", default=":8443", help='metrics endpoint address; "0" turns it off'
    )
    p.add_argument(
        "--metrics-secure",
        type=_bool,
        nargs="?",
        const=True,
        default=True,
        help="serve metrics over HTTPS with authentication and authorisation",
    )
    p.add_argument("--metrics-cert-dir", help="directory with tls.crt and tls.key for metrics")
    p.add_argument(
        "--health-probe-bind-address", default=":8081", help="address of /healthz and /readyz"
    )
    p.add_argument(
        "--max-concurrent-reconciles",
        type=int,
        default=MAX_CONCURRENT_RECONCILES,
        help="workers per controller",
    )
    p.add_argument(
        "--sharding",
        type=_bool,
        nargs="?",
        const=True,
        default=False,
        help=(
            "spread the companies over every replica by their namespace, each replica active "
            "on its share (default false: one active replica, the others warm standbys)"
        ),
    )
    p.add_argument(
        "--shard-members",
        type=int,
        default=None,
        help=(
            "with --sharding, a fixed set of member names, one a replica (the replica count): "
            "a replica that finds them all held waits, and takes the one a stopping replica "
            "releases, so a rolling restart moves no company (default: a name per process)"
        ),
    )
    p.add_argument(
        "--event-loop",
        default="asyncio",
        choices=EVENT_LOOPS,
        help=(
            "the event loop to run on: asyncio's own (the default) or uvloop, which takes about "
            "a fifth less CPU for some more memory (docs/scaling.md)"
        ),
    )
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    p.add_argument("--log-format", default="json", choices=["json", "console", "auto"])
    return p.parse_args(argv)


def user_agent(identity: str) -> str:
    """What the daemon's requests say they come from: its name and version, as client-go's
    ``<binary>/<version>``, and which replica (its identity), so that an audit log tells the
    replicas apart. The API server records writes without a field manager under the part
    before the slash, ``crewlet-operator``."""
    return f"{MANAGER_NAME}/{version('crewlet-operator-daemon')} ({identity})"


def manager_options(args: argparse.Namespace, identity: str | None = None) -> ManagerOptions:
    """The manager's settings from the daemon's flags; ``identity`` names the replica (its
    Leases' holder), a new one when not given."""
    return ManagerOptions(
        name=MANAGER_NAME,
        identity=identity or default_identity(),
        leader_election=args.leader_elect,
        leader_election_id=args.leader_election_id,
        leader_election_namespace=args.leader_election_namespace,
        exclusive_lease_labels=LEASE_LABELS,
        metrics_bind_address=args.metrics_bind_address,
        metrics_secure=args.metrics_secure,
        metrics_cert_dir=Path(args.metrics_cert_dir) if args.metrics_cert_dir else None,
        health_probe_bind_address=args.health_probe_bind_address,
        max_concurrent_reconciles=args.max_concurrent_reconciles,
        sharding=(
            Sharding(resource=COMPANY, domain=SHARDING_DOMAIN, members=args.shard_members)
            if args.sharding
            else None
        ),
    )


async def gateway_api_served(client: Client) -> bool:
    """Whether HTTPRoutes are served, so that companies are routed by them (else by Ingresses):
    learnt once, at start-up, as the install page says."""
    return await client.is_served(HTTP_ROUTE.api_version, HTTP_ROUTE.kind)


async def run(args: argparse.Namespace) -> int:
    """Connect, check the server, run the manager until SIGTERM; return the exit code."""
    loop = type(asyncio.get_running_loop())
    log.info("event loop", loop=f"{loop.__module__}.{loop.__qualname__}")
    # Uncompressed: the operator runs beside the API server and lists and watches every
    # company's children; gzip cost both sides CPU on each of them (a start over 3,000
    # companies synced in 5.9 s instead of 7.3).
    identity = default_identity()
    client = await Client.from_environment(
        args.kubeconfig, compression=False, user_agent=user_agent(identity)
    )
    try:
        version = await client.server_version()
        log.info("connected", server=client.host, kubernetes=version.get("gitVersion"))
        unsupported = unsupported_kubernetes(version)
        if unsupported is not None:
            # A warning, not a refusal: the install page says such a cluster is unsupported,
            # and an operator that stops on it would leave every company unmanaged.
            log.warning(
                "unsupported Kubernetes minor",
                reason=unsupported,
                kubernetes=version.get("gitVersion"),
            )
        manager = Manager(
            client,
            manager_options(args, identity),
        )
        gateway_api = await gateway_api_served(client)
        log.info("webhook routes", kind="HTTPRoute" if gateway_api else "Ingress")
        facts = ClusterFacts(
            gateway_api=gateway_api,
            operator_namespace=args.leader_election_namespace or default_namespace(),
            field_manager=manager.field_manager,
        )
        CrewletControllers(manager, facts)
        await manager.run(handle_signals=True)
    except LeadershipLostError:
        log.error("leader election lost; exiting")
        return 1
    finally:
        await client.close()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Console-script entry point."""
    args = parse_args(argv)
    configure_logging(args.log_level, args.log_format)
    tracing = start_tracing()
    try:
        return run_on(args.event_loop, run(args))
    finally:
        if tracing is not None:
            tracing.shutdown()  # sends the spans still batched


def run_on(event_loop: str, main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` to its end on a new loop of ``event_loop`` (one of :data:`EVENT_LOOPS`)."""
    if event_loop == "uvloop":
        return uvloop.run(main)
    return asyncio.run(main)


def start_tracing() -> TracerProvider | None:
    """Trace each reconcile as OpenTelemetry's environment variables ask (off when they are
    unset: :func:`crewlet_operator.tracing.configure_from_environment`). Variables it cannot
    follow are logged and leave tracing off: traces are for looking, and an operator that stops
    on them would leave every company unmanaged."""
    try:
        provider = configure_from_environment("crewlet-operator")
    except ValueError as error:
        log.error("tracing is off: its environment asks what is not supported", error=str(error))
        return None
    if provider is not None:
        log.info("tracing reconciles", exporter=os.environ.get("OTEL_TRACES_EXPORTER", "otlp"))
    return provider


if __name__ == "__main__":
    sys.exit(main())
