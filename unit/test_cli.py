"""The daemon's flags: controller-runtime's spelling and the install page's defaults."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from crewlet_operator.leader import LeaderElectionConfig
from crewlet_operator_daemon.api.v1alpha1 import COMPANY
from crewlet_operator_daemon.cli import (
    LEASE_LABELS,
    manager_options,
    parse_args,
    run_on,
    unsupported_kubernetes,
    user_agent,
)


def test_defaults_are_controller_runtimes() -> None:
    options = manager_options(parse_args([]))
    assert options.leader_election is True
    assert options.metrics_bind_address == ":8443"
    assert options.metrics_secure is True
    assert options.health_probe_bind_address == ":8081"
    assert options.leader_election_namespace is None  # the pod's own namespace
    assert options.max_concurrent_reconciles == 4


def test_flags_reach_the_manager() -> None:
    args = parse_args(
        [
            "--leader-elect=false",
            "--leader-election-namespace",
            "ops",
            "--metrics-bind-address",
            "127.0.0.1:9443",
            "--metrics-secure=false",
            "--metrics-cert-dir",
            "/certs",
            "--health-probe-bind-address",
            ":9081",
            "--max-concurrent-reconciles",
            "8",
            "--log-level",
            "debug",
            "--log-format",
            "console",
        ]
    )
    options = manager_options(args)
    assert options.leader_election is False
    assert options.leader_election_namespace == "ops"
    assert options.metrics_bind_address == "127.0.0.1:9443"
    assert options.metrics_secure is False
    assert options.metrics_cert_dir == Path("/certs")
    assert options.health_probe_bind_address == ":9081"
    assert options.max_concurrent_reconciles == 8
    assert (args.log_level, args.log_format) == ("debug", "console")


def test_every_install_labels_its_lease_so_that_one_leads_in_the_cluster() -> None:
    """A second install (another namespace, another Lease) finds the first's by these labels."""
    for argv in ([], ["--leader-election-namespace", "ops", "--leader-election-id", "other"]):
        assert manager_options(parse_args(argv)).exclusive_lease_labels == {
            "app.kubernetes.io/name": "crewlet-operator",
            "app.kubernetes.io/component": "leader-election",
        }
    LeaderElectionConfig("leader", "ops", exclusive_labels=LEASE_LABELS)  # valid labels


def test_bare_boolean_flags_mean_true() -> None:
    assert manager_options(parse_args(["--leader-elect"])).leader_election is True
    assert manager_options(parse_args(["--metrics-secure"])).metrics_secure is True


@pytest.mark.parametrize(
    "version",
    [
        {"major": "1", "minor": "37", "gitVersion": "v1.37.2"},
        {"major": "1", "minor": "37+", "gitVersion": "v1.37.2-gke.100"},
        # A newer binary emulating 1.37 serves 1.37's APIs.
        {"major": "1", "minor": "38", "emulationMajor": "1", "emulationMinor": "37"},
    ],
)
def test_the_supported_minor_is_1_37_as_the_server_serves_it(version: dict[str, Any]) -> None:
    assert unsupported_kubernetes(version) is None


@pytest.mark.parametrize(
    ("version", "served"),
    [
        ({"major": "1", "minor": "36", "gitVersion": "v1.36.4"}, "1.36;"),
        ({"major": "1", "minor": "38+"}, "1.38;"),
        ({"major": "1", "minor": "37", "emulationMajor": "1", "emulationMinor": "36"}, "1.36 "),
        ({}, "."),
    ],
)
def test_any_other_minor_is_unsupported(version: dict[str, Any], served: str) -> None:
    """ "A cluster on any other minor is not supported." """
    reason = unsupported_kubernetes(version)
    assert reason is not None
    assert f"serves Kubernetes {served}" in reason
    assert "supports 1.37 only" in reason


def test_sharding_is_off_unless_asked_and_spreads_companies_when_asked() -> None:
    assert manager_options(parse_args([])).sharding is None
    sharding = manager_options(parse_args(["--sharding"])).sharding
    assert sharding is not None
    assert sharding.resource == COMPANY
    assert sharding.domain == "crewlet.ai"


def test_the_user_agent_names_the_replica_and_keeps_the_managers_name_first() -> None:
    agent = user_agent("pod-7_1234")
    assert agent.startswith("crewlet-operator/")  # the API server's manager name for updates
    assert agent.endswith("(pod-7_1234)")
    assert manager_options(parse_args([]), "pod-7_1234").identity == "pod-7_1234"


def test_the_event_loop_is_asyncios_unless_uvloop_is_asked_for() -> None:
    assert parse_args([]).event_loop == "asyncio"
    assert parse_args(["--event-loop=uvloop"]).event_loop == "uvloop"
    with pytest.raises(SystemExit):
        parse_args(["--event-loop=trio"])


async def _loop_type() -> str:
    loop = type(asyncio.get_running_loop())
    return f"{loop.__module__}.{loop.__qualname__}"


@pytest.mark.parametrize(
    ("event_loop", "expected"), [("asyncio", "asyncio."), ("uvloop", "uvloop.")]
)
def test_the_daemon_runs_on_the_loop_asked_for(event_loop: str, expected: str) -> None:
    # In a thread of its own, as the daemon's main thread: the tests' loop is left alone.
    with ThreadPoolExecutor(1) as thread:
        assert thread.submit(run_on, event_loop, _loop_type()).result().startswith(expected)
