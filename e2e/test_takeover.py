"""A warm standby takes over a crashed leader at the lease's expiry and serves what is new first
(issue 15): two managers of the widget example over a few hundred Widgets, the leader killed.

Asserted from the API server's records and the standby's own reconcile log, never from
wall-clock budgets:

- the standby acquires the Lease within its lease duration of the last renewal it saw (the
  Lease's own ``renewTime`` and ``acquireTime``, plus a second for the watch and the write);
- a Widget created just after the kill is the standby's first reconcile after it takes over,
  ahead of its pass over the rest: what its informers saw while the old leader lived waits at
  low priority, behind what that leader may have missed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import urllib.request
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from crewlet_operator import LEASE, Client, Scope, find_condition
from crewlet_operator._tasks import cancel_and_wait
from crewlet_operator.envtest import ControlPlane, install_crds, load_crds
from crewlet_operator.envtest.process import ManagerProcess
from crewlet_operator.envtest.wait import eventually
from crewlet_operator.kube import WatchParams
from crewlet_operator.objects import resource_version

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
sys.path.insert(0, str(EXAMPLES))

from widgets import WIDGET  # noqa: E402

WIDGETS = 300
LEASE_NAME = "widgets-leader"
SLACK = 1.0
"""Seconds beyond the lease duration the takeover may take: the watch that carries the last
renewal to the standby, and the standby's write of the Lease."""

Object = dict[str, Any]


class Replica:
    """``examples/run_widgets.py`` as a process on fresh ports, logging every reconcile (JSON
    lines)."""

    def __init__(self, kubeconfig: Path, identity: str, namespace: str, log_dir: Path) -> None:
        self.identity = identity
        command = [sys.executable, str(EXAMPLES / "run_widgets.py"), "--kubeconfig"]
        command += [str(kubeconfig), "--identity", identity, "--lease-namespace", namespace]
        self.daemon = ManagerProcess(identity, [*command, "--log-level", "debug"], log_dir)
        self.daemon.start()

    def up(self) -> bool:
        """Whether it answers its health probe (started again on fresh ports if need be)."""
        if not self.daemon.check():
            return False
        address = f"http://127.0.0.1:{self.daemon.health_port}/healthz"
        with contextlib.suppress(OSError), urllib.request.urlopen(address, timeout=5):
            return True
        return False

    def events(self) -> list[Object]:
        lines = self.daemon.process.log_path.read_text(errors="replace").splitlines()
        parsed = []
        for line in lines:
            with contextlib.suppress(ValueError):
                event = json.loads(line)
                if isinstance(event, dict):
                    parsed.append(event)
        return parsed


@pytest.fixture
def replicas(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> Iterator[list[Replica]]:
    started = [
        Replica(control_plane.kubeconfig, f"replica-{i}", namespace, tmp_path) for i in range(2)
    ]
    try:
        yield started
    finally:
        for replica in started:
            replica.daemon.process.stop(30)


def widget(namespace: str, name: str) -> Object:
    return {"metadata": {"name": name, "namespace": namespace}, "spec": {"data": {"k": name}}}


def moment(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


async def record_lease(client: Client, namespace: str, seen: list[Object]) -> None:
    """Every version of the Lease, as the API server stored it, in order."""
    listed = await client.list(
        LEASE, Scope(namespace, field_selector=f"metadata.name={LEASE_NAME}")
    )
    seen.extend(listed.items)
    watching = WatchParams(
        Scope(namespace, field_selector=f"metadata.name={LEASE_NAME}"),
        resource_version=listed.resource_version,
        timeout_seconds=300,
    )
    async for event in client.watch(LEASE, watching):
        if event.type in ("ADDED", "MODIFIED"):
            seen.append(event.object)


async def test_the_standby_takes_over_at_expiry_and_serves_the_new_object_first(
    kube_client: Client, namespace: str, replicas: list[Replica]
) -> None:
    await install_crds(kube_client, load_crds(EXAMPLES / "example.crewlet.ai_widgets.yaml"))
    await eventually(lambda: all(r.up() for r in replicas), timeout=30, message="replicas up")
    for i in range(WIDGETS):
        await kube_client.create(WIDGET, widget(namespace, f"w{i:03d}"))
    lease_versions: list[Object] = []
    recorder = asyncio.create_task(record_lease(kube_client, namespace, lease_versions))
    try:

        async def converged() -> bool:
            items = (await kube_client.list(WIDGET, Scope(namespace))).items
            return len(items) == WIDGETS and all(
                find_condition((w.get("status") or {}).get("conditions"), "Ready") for w in items
            )

        await eventually(converged, timeout=180, interval=1.0, message="every Widget Ready")

        async def holder() -> str:
            lease = await kube_client.get_or_none(LEASE, LEASE_NAME, namespace)
            return str(((lease or {}).get("spec") or {}).get("holderIdentity") or "")

        old = await eventually(holder, message="a leader")
        leader = next(r for r in replicas if r.identity == old)
        standby = next(r for r in replicas if r.identity != old)

        leader.daemon.process.kill()  # SIGKILL: no release, the lease must expire
        await kube_client.create(WIDGET, widget(namespace, "fresh"))

        async def taken_over() -> str | None:
            current = await holder()
            return current if current not in ("", old) else None

        assert await eventually(taken_over, timeout=60, message="the standby leads") == (
            standby.identity
        )
        await asyncio.sleep(0.5)  # the recorder's watch delivers the takeover's version too
    finally:
        await cancel_and_wait(recorder)

    # The Lease's own record: the dead leader's last renewal, then the standby's acquisition.
    ordered = sorted(lease_versions, key=lambda lease: int(resource_version(lease) or 0))
    old_versions = [v["spec"] for v in ordered if v["spec"].get("holderIdentity") == old]
    new_versions = [
        v["spec"] for v in ordered if v["spec"].get("holderIdentity") == standby.identity
    ]
    last_renewal = moment(old_versions[-1]["renewTime"])
    acquired = moment(new_versions[0]["acquireTime"])
    duration = float(old_versions[-1]["leaseDurationSeconds"])
    waited = (acquired - last_renewal).total_seconds()
    print(f"\ntakeover: {waited:.2f} s after the last renewal (lease {duration:g} s)")
    assert duration <= waited <= duration + SLACK, waited

    # The standby's reconcile log after it took over: the new Widget first, then the rest.
    async def reconciled_after_takeover() -> list[str]:
        events = standby.events()
        acquired_at = next(
            (i for i, e in enumerate(events) if str(e.get("event", "")).startswith("acquired")),
            None,
        )
        if acquired_at is None:  # its log has not said so yet
            return []
        names = [
            str(e.get("name"))
            for e in events[acquired_at:]
            if e.get("event") == "reconciled" and e.get("namespace") == namespace
        ]
        return names if len(set(names)) > WIDGETS else []

    names = await eventually(reconciled_after_takeover, timeout=120, message="the resync")
    assert names[0] == "fresh", names[:10]
    assert set(names) == {"fresh", *(f"w{i:03d}" for i in range(WIDGETS))}
