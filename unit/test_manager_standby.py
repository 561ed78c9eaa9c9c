"""What a manager sorts before it starts anything: what a cold standby refuses, where the
leader's view starts (no API server: nothing is started)."""

from __future__ import annotations

import pytest
from fakes import offline_client

from crewlet_operator.cache import InformerOptions
from crewlet_operator.kube.resources import CONFIG_MAP
from crewlet_operator.manager import Manager, ManagerOptions
from crewlet_operator.objects import KubeObject
from crewlet_operator.reconcile import Request


async def reconcile(request: Request) -> None: ...


def untouched(obj: KubeObject) -> KubeObject:
    return obj


def cold_manager() -> Manager:
    options = ManagerOptions(
        name="cold",
        warm_standby=False,
        health_probe_bind_address="127.0.0.1:0",
        metrics_bind_address="0",
        metrics_secure=False,
        cache_options=InformerOptions(transform=untouched),  # no client to trim for
    )
    return Manager(client=offline_client(), options=options)


async def test_a_cold_standby_refuses_a_controller_that_runs_on_every_replica() -> None:
    cold = cold_manager()
    cold.controller("everywhere").for_(CONFIG_MAP).with_options(
        need_leader_election=False
    ).complete(reconcile)
    cold.controller("leader-only").for_(CONFIG_MAP).complete(reconcile)
    with pytest.raises(ValueError, match=r"\['everywhere'\] run without leader election"):
        await cold.run()
    assert cold.health.port is None  # refused before serving anything


@pytest.mark.parametrize("leader_election", [True, False])
def test_the_leaders_view_starts_with_the_leaders_lease_or_with_the_caches(
    leader_election: bool,
) -> None:
    """The leader's view lists once the replica leads, before the leader's controllers; with
    no election, everything runs here from the start, the leader's view with the caches."""
    manager = Manager(
        client=offline_client(),
        options=ManagerOptions(
            name="views",
            leader_election=leader_election,
            leader_election_namespace="platform",
            health_probe_bind_address="127.0.0.1:0",
            metrics_bind_address="0",
        ),
    )
    manager.controller("leader-only").for_(CONFIG_MAP).complete(reconcile)
    groups = manager.groups()
    if leader_election:
        assert groups.views == [manager.cluster_view]
        (leader,) = groups.elections
        assert leader.views == [manager.leader_view]
        assert [c.name for c in leader.controllers] == ["leader-only"]
    else:
        assert groups.views == [manager.cluster_view, manager.leader_view]
        assert groups.elections == []
