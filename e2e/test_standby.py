"""Standby replicas on the real API server: two managers in one process, on one Lease. A warm
standby caches and queues while it waits, and is ready to lead once its caches have synced; a
cold one caches nothing until it leads, and is ready while it campaigns."""

from __future__ import annotations

import aiohttp
import pytest

from crewlet_operator import (
    CONFIG_MAP,
    Client,
    Compact,
    Decoded,
    InformerOptions,
    Manager,
    Request,
    Scope,
)
from crewlet_operator.testing import eventually, manager_options_for_tests, run_manager

COUNT = 5
LABEL = "standby.example.com/test"


class Replica:
    """A manager on the namespace's Lease whose controller records what it reconciled."""

    def __init__(
        self,
        client: Client,
        namespace: str,
        identity: str,
        *,
        warm: bool,
        metadata_first: bool = False,
    ) -> None:
        self.reconciled: set[str] = set()
        self.manager = Manager(
            client,
            manager_options_for_tests(
                "standby",
                leader_election=True,
                leader_election_namespace=namespace,
                identity=identity,
                lease_duration=6.0,
                renew_deadline=4.0,
                retry_period=1.0,
                warm_standby=warm,
                health_probe_bind_address="127.0.0.1:0",
                graceful_shutdown_timeout=5.0,
            ),
        )
        self.controller = (
            self.manager.controller(f"standby-{identity}")
            .for_(
                CONFIG_MAP,
                options=InformerOptions(
                    scope=Scope(namespace, label_selector=LABEL),
                    storage=Compact(metadata_first=True) if metadata_first else Decoded(),
                ),
            )
            .complete(self._reconcile)
        )

    async def _reconcile(self, request: Request) -> None:
        self.reconciled.add(request.name)

    async def ready(self) -> bool:
        """Whether ``/readyz`` answers 200."""
        url = f"http://127.0.0.1:{self.manager.health.port}/readyz"
        async with aiohttp.ClientSession() as session, session.get(url) as response:
            return response.status == 200


async def create_config_maps(client: Client, namespace: str) -> set[str]:
    names = {f"cm-{i}" for i in range(COUNT)}
    for name in names:
        await client.create(
            CONFIG_MAP,
            {"metadata": {"name": name, "namespace": namespace, "labels": {LABEL: "yes"}}},
        )
    return names


async def test_a_warm_standby_caches_and_queues_before_it_leads_and_takes_over_at_once(
    kube_client: Client, namespace: str
) -> None:
    names = await create_config_maps(kube_client, namespace)
    leader = Replica(kube_client, namespace, "leader", warm=True)
    standby = Replica(kube_client, namespace, "standby", warm=True)
    async with run_manager(leader.manager) as leading:
        await eventually(lambda: leader.reconciled == names, message="the leader's pass")
        async with run_manager(standby.manager, lead=False):
            await eventually(standby.ready, message="the standby ready: its caches synced")
            assert standby.manager.cache.synced
            assert not standby.manager.is_leader
            cached = standby.manager.cache.list(CONFIG_MAP, namespace)
            assert {c["metadata"]["name"] for c in cached} == names
            assert len(standby.controller.queue) == COUNT  # queued, not reconciled
            assert standby.reconciled == set()
            # A graceful stop releases the lease: the standby reconciles from its queue.
            leader.manager.stop()
            await leading.task
            await eventually(lambda: standby.manager.is_leader, message="the standby leads")
            await eventually(lambda: standby.reconciled == names, message="the standby's pass")


async def test_a_cold_standby_caches_nothing_until_it_leads(
    kube_client: Client, namespace: str
) -> None:
    names = await create_config_maps(kube_client, namespace)
    leader = Replica(kube_client, namespace, "leader", warm=True)
    standby = Replica(kube_client, namespace, "standby", warm=False)
    async with run_manager(leader.manager) as leading:
        await eventually(lambda: leader.reconciled == names, message="the leader's pass")
        async with run_manager(standby.manager, lead=False):
            # Ready while it campaigns, with nothing to sync: its informers have not started.
            await eventually(standby.ready, message="the standby ready: campaigning")
            assert not standby.manager.is_leader
            assert standby.manager.cache.object_counts() == {"ConfigMap": 0}
            assert not standby.manager.cache.synced
            assert len(standby.controller.queue) == 0
            leader.manager.stop()
            await leading.task
            await eventually(lambda: standby.manager.is_leader, message="the standby leads")
            # It lists once it leads, and reconciles what it found.
            await eventually(lambda: standby.reconciled == names, message="the standby's pass")
            assert standby.manager.cache.synced
            assert await standby.ready()


async def test_metadata_first_kinds_are_listed_whole_after_the_first_pass_or_on_a_standby(
    kube_client: Client, namespace: str
) -> None:
    """Compact(metadata_first=True): the leader's controller asks for the whole objects once
    its first pass is done; a warm standby, which has no first pass, as soon as it follows."""
    names = await create_config_maps(kube_client, namespace)
    leader = Replica(kube_client, namespace, "leader", warm=True, metadata_first=True)
    standby = Replica(kube_client, namespace, "standby", warm=True, metadata_first=True)
    async with run_manager(leader.manager):
        await eventually(lambda: leader.reconciled == names, message="the leader's pass")
        leaders = leader.manager.cache.informers[CONFIG_MAP]
        await eventually(lambda: leaders.has_whole, message="the leader's objects whole")
        async with run_manager(standby.manager, lead=False):
            await eventually(standby.ready, message="the standby ready: its caches synced")
            standbys = standby.manager.cache.informers[CONFIG_MAP]
            await eventually(lambda: standbys.has_whole, message="the standby's objects whole")
            assert not standby.manager.is_leader and standby.reconciled == set()
            cached = standby.manager.cache.list(CONFIG_MAP, namespace)
            assert {c["metadata"]["name"] for c in cached} == names


async def test_run_manager_waits_until_a_standby_leads_unless_told_not_to(
    kube_client: Client, namespace: str
) -> None:
    leader = Replica(kube_client, namespace, "leader", warm=True)
    standby = Replica(kube_client, namespace, "standby", warm=True)
    async with run_manager(leader.manager):
        with pytest.raises(TimeoutError, match=r"does not lead \(pass lead=False"):
            async with run_manager(standby.manager, timeout=3):
                pass
        standby = Replica(kube_client, namespace, "standby", warm=True)  # a manager runs once
        async with run_manager(standby.manager, lead=False):
            assert standby.manager.cache.synced
            assert not standby.manager.is_leader
