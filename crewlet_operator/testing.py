"""The test harness: a manager run in-process, and waiting for what the API makes eventual.

Every controller's test does the same: start the manager beside the test, wait until it runs,
change something, wait until the controller has caught up, check, stop the manager. ::

    from crewlet_operator.testing import (
        consistently, eventually, manager_options_for_tests, run_manager)

    async def test_a_tenant_gets_its_namespace(kube_client):
        manager = Manager(kube_client, manager_options_for_tests("tenants"))
        await setup(manager)
        async with run_manager(manager) as running:
            await kube_client.create(TENANT, {"metadata": {"name": "acme"}})
            namespace = await eventually(lambda: kube_client.get_or_none(NAMESPACE, "acme"))
            await running.idle()
            assert await consistently(lambda: only_one_quota("acme"), duration=1)

- :func:`manager_options_for_tests`: no leader election, no probe or metrics port, so that
  tests run side by side.
- :func:`run_manager`: starts the manager in the test's event loop, returns once its caches
  have synced and its controllers run (a manager that fails to start raises here), and stops
  it gracefully when the block ends.
- :meth:`RunningManager.idle`: until every controller's queue has stayed empty, with nothing
  being reconciled, for a moment.
- :func:`eventually` waits for what must *become* true, :func:`consistently` checks what must
  *stay* true. Both take a probe, plain or async, and return what it returned, typed: mypy
  infers the result from the probe.
- :func:`replica_pod` and :func:`report_container`: a Pod for a replica that runs as a process
  of the test (told of its Pod by :func:`~crewlet_operator.incarnation.downward_environment`),
  and its container's state written as its kubelet would: to test a takeover on evidence
  (:mod:`crewlet_operator.incarnation`) where no kubelet runs.
- :class:`StaticRing`: a sharding ring's members as the test sets them, for a sharder or a
  member's caches run without member Leases.

The API server the manager talks to comes from envtest: the pytest plugin
:mod:`crewlet_operator.envtest.pytest_plugin` starts one local control plane for the session
and gives the ``kube_client``, ``namespace`` and ``client_for`` fixtures. A suite enables it in
its ``conftest.py`` (pytest-asyncio, in the library's ``test`` extra: ``pip install
'crewlet-operator[test]'``); every test and async fixture that uses those fixtures runs on the
session's event loop, where they live, with no loop-scope setting::

    # conftest.py
    pytest_plugins = ["crewlet_operator.envtest.pytest_plugin"]

    # pytest.ini
    [pytest]
    asyncio_mode = auto
    envtest_crd_paths = config/crd

The control plane's binaries come from ``python -m crewlet_operator.envtest bins``, once per
machine (:mod:`crewlet_operator.envtest` says where they are looked up).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import inspect
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, TypeVar, overload

from crewlet_operator.envtest.wait import eventually
from crewlet_operator.incarnation import Evidence, PodRef
from crewlet_operator.kube.client import Client
from crewlet_operator.kube.resources import POD
from crewlet_operator.manager import Manager, ManagerOptions
from crewlet_operator.sharding.membership import Signal
from crewlet_operator.sharding.ring import RingView

T = TypeVar("T")

__all__ = [
    "RUNNING_SINCE",
    "RunningManager",
    "StaticRing",
    "consistently",
    "eventually",
    "kubelet_time",
    "manager_options_for_tests",
    "replica_pod",
    "report_container",
    "run_manager",
]


def manager_options_for_tests(name: str, **overrides: Any) -> ManagerOptions:
    """Options for a manager run by a test: named ``name`` (the controller's, so that the test
    exercises the field manager it writes as in production), no leader election (one process),
    and no probe or metrics port (``"0"``), so that tests run side by side; ``overrides`` set
    any other field."""
    options = ManagerOptions(
        name=name, leader_election=False, health_probe_bind_address="0", metrics_bind_address="0"
    )
    # replace() goes through __init__: a name that is no field (a property such as
    # ``lease_name`` included) is a TypeError, and __post_init__ checks the options again.
    return replace(options, **overrides)


@dataclass
class RunningManager:
    """A manager running in the test's event loop (see :func:`run_manager`)."""

    manager: Manager
    task: asyncio.Task[None]

    async def idle(self, *, settle: float = 0.3, timeout: float = 30.0) -> None:
        """Wait until every controller's queue has stayed idle (nothing queued, nothing being
        reconciled) for ``settle`` seconds: long enough for the watch events of the writes just
        made to arrive. Requeues waiting for a timer do not count.

        Raises:
            TimeoutError: still busy after ``timeout`` seconds.
            Exception: whatever made the manager stop, if it did.
        """

        def quiet() -> bool:
            self._raise_if_stopped()
            return all(c.queue.idle for c in self.manager.controllers)

        deadline = time.monotonic() + timeout
        calm_since: float | None = None
        while True:
            now = time.monotonic()
            if quiet():
                calm_since = now if calm_since is None else calm_since
                if now - calm_since >= settle:
                    return
            else:
                calm_since = None
            if now > deadline:
                busy = [c.name for c in self.manager.controllers if not c.queue.idle]
                raise TimeoutError(f"controllers still busy after {timeout}s: {busy}")
            await asyncio.sleep(0.02)

    def _raise_if_stopped(self) -> None:
        if self.task.done():
            self.task.result()  # re-raise what stopped it
            raise RuntimeError("the manager stopped")


@contextlib.asynccontextmanager
async def run_manager(
    manager: Manager, *, timeout: float = 60.0, lead: bool = True
) -> AsyncIterator[RunningManager]:
    """Run ``manager`` in the background until the block ends, then stop it gracefully.

    Entering waits until its caches have synced and its controllers run; a manager that fails
    to start raises here, not later. With leader election on, that is until it leads: a standby
    blocks here while another replica holds the Lease. Pass ``lead=False`` to enter as soon as
    it runs as a standby, ready to lead (what ``/readyz`` says): a warm standby once its caches
    have synced, a cold one (``warm_standby=False``) once it campaigns.

    Raises:
        TimeoutError: not started within ``timeout`` seconds; the message names each kind
            whose cache has not synced and why (a kind the API server does not serve: install
            its CRD).
        Exception: whatever made the manager stop while it started.
    """
    task = asyncio.create_task(manager.run(), name="manager under test")

    def standing_by() -> bool:
        return manager.started.is_set() or manager.ready_to_lead()

    started: asyncio.Task[bool] = asyncio.create_task(
        manager.started.wait()
        if lead or manager.elector is None
        else eventually(standing_by, timeout=math.inf, interval=0.02)
    )
    try:
        done, _ = await asyncio.wait(
            {task, started}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
        )
        if task in done:
            task.result()
            raise RuntimeError("the manager returned before it started")
        if started not in done:
            waiting = manager.cache.not_synced()
            if not waiting and not manager.is_leader:
                waiting = ["it does not lead (pass lead=False to enter as a standby)"]
            why = f": {'; '.join(waiting)}" if waiting else ""
            raise TimeoutError(f"the manager did not start within {timeout}s{why}")
        yield RunningManager(manager, task)
    finally:
        started.cancel()
        manager.stop()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@overload
async def consistently(
    probe: Callable[[], Awaitable[T]], duration: float = ..., interval: float = ...
) -> T: ...


@overload
async def consistently(
    probe: Callable[[], T], duration: float = ..., interval: float = ...
) -> T: ...


async def consistently(
    probe: Callable[[], T | Awaitable[T]], duration: float = 2.0, interval: float = 0.1
) -> T:
    """Call ``probe`` for ``duration`` seconds and return its last result; fail as soon as it
    returns something falsy or raises: what must *stay* true (nothing else gets written, a
    refused object stays refused), where :func:`eventually` waits for what must *become* true.

    Raises:
        AssertionError: the probe returned a falsy value (it is shown).
        Exception: whatever the probe raised.
    """
    deadline = time.monotonic() + duration
    while True:
        result = probe()
        if inspect.isawaitable(result):
            result = await result
        if not result:
            what = getattr(probe, "__name__", "condition")
            raise AssertionError(f"{what} stopped holding: {result!r}")
        if time.monotonic() >= deadline:
            return result
        await asyncio.sleep(interval)


RUNNING_SINCE = "2026-01-01T00:00:00Z"
"""When :func:`replica_pod`'s container started: before any replica acquired a Lease."""


async def replica_pod(
    client: Client,
    namespace: str,
    name: str,
    *,
    container: str = "manager",
    service_account: str | None = None,
) -> PodRef:
    """Create a Pod ``name`` for a replica that the test runs as a process, its container
    reported running since :data:`RUNNING_SINCE`, and return what the downward API would tell
    that replica. No scheduler places it (its ``schedulerName`` names none) and no kubelet runs
    it: the test writes its status (:func:`report_container`) or deletes it. With
    ``service_account``, the Pod runs as it, so a token of it may be bound to the Pod
    (:meth:`ControlPlane.request_token <crewlet_operator.envtest.ControlPlane.request_token>`)."""
    spec: dict[str, Any] = {
        "schedulerName": "no-scheduler",
        "containers": [{"name": container, "image": "example.com/replica:1"}],
    }
    if service_account is not None:
        spec["serviceAccountName"] = service_account
    created = await client.create(
        POD, {"metadata": {"name": name, "namespace": namespace}, "spec": spec}
    )
    pod = PodRef(namespace, name, created["metadata"]["uid"], container)
    await report_container(client, pod, {"running": {"startedAt": RUNNING_SINCE}})
    return pod


async def report_container(
    client: Client,
    pod: PodRef,
    state: dict[str, Any],
    last: dict[str, Any] | None = None,
    *,
    restarts: int = 0,
) -> None:
    """Write the state (and ``last`` state) of ``pod``'s container as its kubelet would, such
    as ``{"terminated": {"exitCode": 137, "finishedAt": kubelet_time()}}``."""
    status = {
        "name": pod.container,
        "image": "example.com/replica:1",
        "imageID": "",
        "ready": "running" in state,
        "restartCount": restarts,
        "state": state,
        "lastState": last or {},
    }
    patch = {"status": {"phase": "Running", "containerStatuses": [status]}}
    await client.patch(POD, pod.name, patch, pod.namespace, subresource="status")


def kubelet_time(moment: datetime.datetime | None = None) -> str:
    """``moment`` (now by default) as a kubelet stamps a container's state: whole seconds."""
    moment = moment or datetime.datetime.now(datetime.UTC)
    return moment.replace(microsecond=0).isoformat().replace("+00:00", "Z")


class StaticRing:
    """The ring's members as a test sets them, for a sharded part run without member Leases
    (a :class:`~crewlet_operator.sharding.sharder.Sharder`, a member's
    :class:`~crewlet_operator.sharding.slots.MemberSlots`): what they read of the ring
    (:class:`~crewlet_operator.sharding.membership.RingMembers`), held to it by mypy. ::

        ring = StaticRing("a")
        sharder = Sharder(client, WIDGET, view, Scope(), labels=labels, membership=ring, ...)
        ring.become("a", "b")           # b joins: the sharder's next pass drains what b takes

    ``wills`` maps a dead member to its heirs; ``dead`` are members found dead with no will
    yet. With no Lease behind it, a will the sharder writes is refused as not found, and no
    process is ever shown gone.
    """

    def __init__(
        self,
        *live: str,
        wills: Mapping[str, frozenset[str]] | None = None,
        dead: Iterable[str] = (),
        namespace: str = "default",
    ) -> None:
        self.live = frozenset(live)
        """The members live at the last list."""
        self.wills = dict(wills or {})
        """Each dead member's heirs, as its will names them."""
        self.dead = frozenset(dead)
        """Members found dead that have no will yet."""
        self.listed = Signal()
        self.listed_at: float | None = time.monotonic()
        self.versions: dict[str, str] = {}
        self.last_join: float | None = None
        self._namespace = namespace

    @property
    def namespace(self) -> str:
        """Where the member Leases would be."""
        return self._namespace

    def view(self) -> RingView:
        """The ring as set: a Lease for every member live, willed or dead."""
        leases = self.live | self.wills.keys() | self.dead
        return RingView(live=self.live, leases=leases, wills=self.wills)

    def become(self, *live: str) -> None:
        """Members ``live`` from now on, as a list of the ring would find them (a member that
        joins sets :attr:`last_join`)."""
        if set(live) - self.live:
            self.last_join = time.monotonic()
        self.live = frozenset(live)
        self._list()

    async def observe(self) -> bool:
        """A list of the ring, which finds it as set."""
        self._list()
        return True

    def _list(self) -> None:
        self.listed_at = time.monotonic()
        self.listed.emit()

    async def gone(self) -> dict[str, Evidence]:
        """No process is shown gone: a test ends a member by :meth:`become` or a will."""
        return {}
