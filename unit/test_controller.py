"""What a controller does with each reconcile outcome (no API server: the queue is observed)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from fakes import MetadataThenWhole, offline_client

from crewlet_operator import metrics
from crewlet_operator.cache import Cache, Compact, InformerOptions, Pages
from crewlet_operator.controller import Controller, by_namespace
from crewlet_operator.errors import NotFoundError, TerminalError
from crewlet_operator.handler import EnqueueHandler, request_for_object, requests_for_owner
from crewlet_operator.kube.resources import CONFIG_MAP, SECRET
from crewlet_operator.leader import LeaderElectionConfig
from crewlet_operator.manager import Manager, ManagerOptions
from crewlet_operator.predicate import GenerationChanged
from crewlet_operator.reconcile import Request, Result, declared_model
from crewlet_operator.sharding import by_namespace as sharding_key
from crewlet_operator.workqueue import (
    HIGH_PRIORITY,
    LOW_PRIORITY,
    NORMAL_PRIORITY,
    FairQueue,
)

REQ = Request("ns", "obj")


def make(outcome: Any, name: str) -> Controller:
    async def reconcile(request: Request) -> Result | None:
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome  # type: ignore[no-any-return]

    return Controller(name, reconcile, Cache(client=None))  # type: ignore[arg-type]


def total(controller: str, result: str) -> float:
    value = metrics.REGISTRY.get_sample_value(
        "controller_runtime_reconcile_total", {"controller": controller, "result": result}
    )
    return value or 0.0


async def test_success_forgets_backoff() -> None:
    c = make(None, "unit-success")
    c.queue.add_rate_limited(REQ)
    assert c.queue.num_requeues(REQ) == 1
    await c.reconcile_once(REQ)
    assert c.queue.num_requeues(REQ) == 0
    assert total("unit-success", "success") == 1


async def test_error_requeues_with_backoff_and_counts() -> None:
    c = make(NotFoundError(404), "unit-error")
    await c.reconcile_once(REQ)
    await c.reconcile_once(REQ)
    assert c.queue.num_requeues(REQ) == 2
    assert total("unit-error", "error") == 2
    panics = metrics.REGISTRY.get_sample_value(
        "controller_runtime_reconcile_panics_total", {"controller": "unit-error"}
    )
    assert panics == 0  # an API error is an ordinary failure, not a bug


async def test_unexpected_exception_counts_as_a_panic_and_is_retried() -> None:
    c = make(KeyError("bug"), "unit-panic")
    await c.reconcile_once(REQ)
    assert c.queue.num_requeues(REQ) == 1
    panics = metrics.REGISTRY.get_sample_value(
        "controller_runtime_reconcile_panics_total", {"controller": "unit-panic"}
    )
    assert panics == 1


async def test_terminal_error_is_not_retried() -> None:
    c = make(TerminalError("hopeless"), "unit-terminal")
    c.queue.add_rate_limited(REQ)
    await c.reconcile_once(REQ)
    assert c.queue.num_requeues(REQ) == 0
    terminal = metrics.REGISTRY.get_sample_value(
        "controller_runtime_terminal_reconcile_errors_total", {"controller": "unit-terminal"}
    )
    assert terminal == 1


async def test_requeue_after_schedules_a_delayed_add() -> None:
    c = make(Result(requeue_after=0.01), "unit-requeue")
    await c.reconcile_once(REQ)
    assert total("unit-requeue", "requeue_after") == 1
    assert len(c.queue) == 0
    assert await c.queue.get() == REQ  # arrives after the delay


async def test_requeue_adds_again_after_a_backoff_that_grows() -> None:
    c = make(Result(requeue=True), "unit-requeue-backoff")
    await c.reconcile_once(REQ)
    await c.reconcile_once(REQ)
    assert total("unit-requeue-backoff", "requeue") == 2
    assert c.queue.num_requeues(REQ) == 2  # kept, unlike after a success
    assert await c.queue.get() == REQ
    errors = metrics.REGISTRY.get_sample_value(
        "controller_runtime_reconcile_errors_total", {"controller": "unit-requeue-backoff"}
    )
    assert not errors


def test_handlers_map_objects_and_owners_and_respect_predicates() -> None:
    queue: FairQueue[Request] = FairQueue("unit-handlers")
    child = {
        "metadata": {
            "name": "c",
            "namespace": "ns",
            "ownerReferences": [
                {
                    "apiVersion": "example.crewlet.ai/v1",
                    "kind": "Widget",
                    "name": "w",
                    "controller": True,
                },
                {"apiVersion": "v1", "kind": "ConfigMap", "name": "not-controller"},
            ],
        }
    }
    assert request_for_object(child) == [Request("ns", "c")]
    assert requests_for_owner("example.crewlet.ai", "Widget")(child) == [Request("ns", "w")]
    assert requests_for_owner("", "ConfigMap")(child) == []  # not the controller reference
    handler = EnqueueHandler(queue, request_for_object, [GenerationChanged()])
    old = {"metadata": {"name": "c", "namespace": "ns", "generation": 1}}
    handler.on_update(old, {"metadata": {**old["metadata"], "labels": {"a": "b"}}})
    assert len(queue) == 0  # filtered: generation did not change
    handler.on_update(old, {"metadata": {**old["metadata"], "generation": 2}})
    assert len(queue) == 1  # old and new map to the same request: deduplicated


async def test_a_requeue_keeps_the_priority_of_the_request_unless_the_result_says() -> None:
    kept = make(Result(requeue_after=0.01), "unit-priority-kept")
    kept.queue.add(REQ, LOW_PRIORITY)
    assert await kept.queue.get() == REQ
    await kept.reconcile_once(REQ)
    kept.queue.done(REQ)
    assert await kept.queue.get() == REQ
    assert kept.queue.priority_of(REQ) == LOW_PRIORITY

    told = make(Result(requeue=True, priority=HIGH_PRIORITY), "unit-priority-told")
    told.queue.add(REQ, LOW_PRIORITY)
    assert await told.queue.get() == REQ
    await told.reconcile_once(REQ)
    told.queue.done(REQ)
    assert await told.queue.get() == REQ
    assert told.queue.priority_of(REQ) == HIGH_PRIORITY


def test_an_initial_list_is_queued_low_and_events_normal() -> None:
    queue: FairQueue[Request] = FairQueue("unit-handler-priority")
    handler = EnqueueHandler(queue, request_for_object)
    handler.on_add({"metadata": {"name": "listed", "namespace": "ns"}}, initial=True)
    handler.on_add({"metadata": {"name": "created", "namespace": "ns"}})
    old = {"metadata": {"name": "changed", "namespace": "ns", "resourceVersion": "1"}}
    handler.on_update(old, {"metadata": {**old["metadata"], "resourceVersion": "2"}})
    assert queue.priority_of(Request("ns", "listed")) == LOW_PRIORITY
    assert queue.priority_of(Request("ns", "created")) == NORMAL_PRIORITY
    assert queue.priority_of(Request("ns", "changed")) == NORMAL_PRIORITY


def test_an_owned_kinds_initial_list_is_left_to_the_primarys() -> None:
    """initial=False (what Builder.owns uses): a child of the initial list requests nothing, a
    child created or changed later requests its owner as before."""
    queue: FairQueue[Request] = FairQueue("unit-handler-owned-initial")
    handler = EnqueueHandler(
        queue, lambda child: [Request("ns", child["metadata"]["labels"]["owner"])], initial=False
    )
    handler.on_add(
        {"metadata": {"name": "a", "namespace": "ns", "labels": {"owner": "listed"}}}, initial=True
    )
    assert len(queue) == 0
    handler.on_add({"metadata": {"name": "b", "namespace": "ns", "labels": {"owner": "created"}}})
    assert queue.priority_of(Request("ns", "created")) == NORMAL_PRIORITY
    assert len(queue) == 1


async def test_the_first_pass_is_every_request_waiting_at_start() -> None:
    """Measured from start() until each request waiting then has been reconciled once; what
    arrives meanwhile is not part of it."""
    c = make(None, "unit-first-pass")
    for name in ("a", "b"):
        c.queue.add(Request("ns", name), LOW_PRIORITY)
    await c.start()
    try:
        c.queue.add(Request("ns", "new"))

        def first_pass() -> float | None:
            return metrics.REGISTRY.get_sample_value(
                "crewlet_operator_first_pass_seconds", {"controller": "unit-first-pass"}
            )

        for _ in range(200):
            if first_pass() is not None:
                break
            await asyncio.sleep(0.005)
        assert first_pass() is not None
        assert not c._first_pass
    finally:
        await c.stop(1.0)


@dataclass
class Holding:
    """A controller whose reconciles of the requests ``held`` picks wait for :attr:`release`,
    and what it reconciled, in order."""

    controller: Controller
    release: asyncio.Event
    reconciled: list[Request]

    async def until(self, done: Callable[[], bool]) -> None:
        """Up to a second for ``done``."""
        for _ in range(200):
            if done():
                return
            await asyncio.sleep(0.005)


def holding(name: str, held: Callable[[Request], bool], **options: Any) -> Holding:
    release = asyncio.Event()
    reconciled: list[Request] = []

    async def reconcile(request: Request) -> None:
        reconciled.append(request)
        if held(request):
            await release.wait()

    controller = Controller(name, reconcile, Cache(client=None), **options)  # type: ignore[arg-type]
    return Holding(controller, release, reconciled)


async def test_a_reserved_worker_serves_a_create_while_the_backlog_holds_every_other() -> None:
    """Two low-priority reconciles hold both ordinary workers; the create is reconciled by
    the reserved worker meanwhile, and the reserved worker never takes the third backlog
    request (it stays queued until an ordinary worker is free)."""
    h = holding(
        "unit-reserved",
        lambda request: request.name.startswith("backlog"),
        max_concurrent_reconciles=2,
        reserved_workers=1,
    )
    c = h.controller
    for name in ("backlog-1", "backlog-2", "backlog-3"):
        c.queue.add(Request("ns", name), LOW_PRIORITY)
    await c.start()
    try:
        c.queue.add(Request("ns", "create"))
        await h.until(lambda: Request("ns", "create") in h.reconciled)
        assert sorted(r.name for r in h.reconciled) == ["backlog-1", "backlog-2", "create"]
        assert len(c.queue) == 1  # backlog-3: not for the reserved worker
        h.release.set()
        await h.until(lambda: Request("ns", "backlog-3") in h.reconciled)
        assert Request("ns", "backlog-3") in h.reconciled
        workers = metrics.REGISTRY.get_sample_value(
            "controller_runtime_max_concurrent_reconciles", {"controller": "unit-reserved"}
        )
        assert workers == 3
    finally:
        await c.stop(1.0)


async def test_a_namespace_holds_at_most_its_limit_of_workers() -> None:
    """``max_concurrent_reconciles_per_key``: one namespace's backlog holds one worker at a time,
    reserved ones included, and another namespace's create is reconciled meanwhile."""
    h = holding(
        "unit-per-key",
        lambda request: request.namespace == "busy",
        max_concurrent_reconciles=3,
        reserved_workers=1,
        max_concurrent_reconciles_per_key=1,
    )
    c = h.controller
    for name in ("a", "b", "c"):
        c.queue.add(Request("busy", name))
    await c.start()
    try:
        c.queue.add(Request("quiet", "create"))
        await h.until(lambda: Request("quiet", "create") in h.reconciled)
        await asyncio.sleep(0.02)
        assert h.reconciled == [Request("busy", "a"), Request("quiet", "create")]
        h.release.set()
        await h.until(lambda: len(h.reconciled) == 4)
        assert [r.name for r in h.reconciled if r.namespace == "busy"] == ["a", "b", "c"]
    finally:
        await c.stop(1.0)


def test_reserved_workers_cannot_be_negative() -> None:
    with pytest.raises(ValueError, match="reserved_workers"):
        Controller(
            "unit-reserved-bad",
            make(None, "unit-reserved-ok")._reconcile,
            Cache(client=None),  # type: ignore[arg-type]
            reserved_workers=-1,
        )
    with pytest.raises(ValueError, match="max_concurrent_reconciles_per_key"):
        Controller(
            "unit-per-key-bad",
            make(None, "unit-per-key-ok")._reconcile,
            Cache(client=None),  # type: ignore[arg-type]
            max_concurrent_reconciles_per_key=0,
        )


@pytest.mark.parametrize(("lease", "renew", "retry"), [(15, 15, 2), (15, 10, 9), (10, 15, 2)])
def test_leader_election_timings_are_validated(lease: float, renew: float, retry: float) -> None:
    with pytest.raises(ValueError, match="lease_duration > renew_deadline"):
        LeaderElectionConfig("l", "ns", "me", lease, renew, retry)


async def first_pass_ended(c: Controller) -> None:
    """Wait (up to a second) for a started controller's first pass to end."""
    for _ in range(200):
        if c.first_pass_done:
            return
        await asyncio.sleep(0.005)
    raise AssertionError("the first pass did not end within a second")


async def test_a_controller_notes_what_events_touched_until_its_first_pass_ends() -> None:
    """Creates, changes and deletes touch their requests, whatever the predicates let through;
    the initial list does not. Once the first pass is over, nothing is collected."""
    c = make(None, "unit-touched")
    handler = c.enqueue_handler(request_for_object, [GenerationChanged()])
    listed = {"metadata": {"name": "listed", "namespace": "ns", "generation": 1}}
    handler.on_add(listed, initial=True)
    handler.on_update(listed, {"metadata": {**listed["metadata"], "labels": {"a": "b"}}})
    handler.on_delete({"metadata": {"name": "gone", "namespace": "ns"}})
    handler.on_add({"metadata": {"name": "new", "namespace": "ns"}})
    assert c.touched == {Request("ns", n) for n in ("listed", "gone", "new")}
    assert c.queue.pending() == {Request("ns", n) for n in ("listed", "gone", "new")}
    assert not c.first_pass_done
    await c.start()
    try:
        await first_pass_ended(c)
        assert c.touched == set()
        handler.on_add({"metadata": {"name": "later", "namespace": "ns"}})
        assert c.touched == set()
    finally:
        await c.stop(1.0)


async def test_after_the_first_pass_an_event_its_predicates_drop_is_not_mapped() -> None:
    """Touching stops with the first pass, and so does mapping for it: a class's status write
    mapped to every company of the class (twice) only for the touched set."""
    c = make(None, "unit-touch-mapping")
    mapped: list[str] = []

    def mapper(obj: dict[str, Any]) -> list[Request]:
        mapped.append(obj["metadata"]["name"])
        return request_for_object(obj)

    handler = c.enqueue_handler(mapper, [GenerationChanged()])
    old = {"metadata": {"name": "a", "namespace": "ns", "generation": 1}}
    status_only = {"metadata": {**old["metadata"], "resourceVersion": "2"}}
    handler.on_update(old, status_only)
    assert mapped == ["a", "a"]  # before the first pass: touched
    await c.start()
    try:
        await first_pass_ended(c)
        mapped.clear()
        handler.on_update(old, status_only)
        assert mapped == []
        handler.on_update(old, {"metadata": {**old["metadata"], "generation": 2}})
        assert mapped == ["a", "a"]  # let through: queued, old and new
    finally:
        await c.stop(1.0)


async def test_unsettled_is_what_is_queued_waiting_or_failed_until_it_succeeds() -> None:
    """A request whose reconcile failed for good (not requeued) still has work left: it is
    unsettled until a reconcile of it succeeds."""
    outcome: list[BaseException | None] = [TerminalError("no")]

    async def reconcile(request: Request) -> Result | None:
        if outcome[0] is not None:
            raise outcome[0]
        return None

    c = Controller("unit-unsettled", reconcile, Cache(client=None))  # type: ignore[arg-type]
    queued, waiting, failed = Request("ns", "q"), Request("ns", "w"), Request("ns", "f")
    c.queue.add(queued)
    c.queue.add_after(waiting, 60)
    await c.reconcile_once(failed)
    assert failed not in c.queue.unsettled()
    assert c.unsettled() == {queued, waiting, failed}
    outcome[0] = None
    await c.reconcile_once(failed)
    assert c.unsettled() == {queued, waiting}


async def test_workers_let_other_tasks_run_between_reconciles_that_never_suspend() -> None:
    """A reconcile that finds nothing to do may not await anything; the lease renewal, the
    probes and the watches still run while a pass over thousands of such requests does."""
    done: list[Request] = []

    async def reconcile(request: Request) -> None:
        done.append(request)

    c = Controller("unit-yield", reconcile, Cache(client=None))  # type: ignore[arg-type]
    for i in range(1000):
        c.queue.add(Request("ns", f"r{i}"), LOW_PRIORITY)
    seen_during_pass: list[int] = []

    async def renewal() -> None:
        for _ in range(5):
            seen_during_pass.append(len(done))
            await asyncio.sleep(0)

    await c.start()
    try:
        await renewal()
        for _ in range(500):
            if c.first_pass_done:
                break
            await asyncio.sleep(0.001)
        assert c.first_pass_done
    finally:
        await c.stop(1.0)
    assert seen_during_pass[-1] < 1000, "the other task ran only after the whole pass"


async def test_a_metadata_first_informer_is_listed_whole_once_the_first_pass_is_done() -> None:
    """The first pass does not share its CPU with the whole objects' list: the controller asks
    for it once every request waiting at its start has been reconciled."""
    listed = [
        {"metadata": {"name": name, "namespace": "ns", "resourceVersion": "5"}, "data": {}}
        for name in ("a", "b")
    ]
    client = MetadataThenWhole(listed, listed)
    client.release.set()
    passing = asyncio.Event()

    async def reconcile(request: Request) -> None:
        await passing.wait()

    c = Controller("unit-metadata-first", reconcile, Cache(client))  # type: ignore[arg-type]
    options = InformerOptions(lists=Pages(), storage=Compact(metadata_first=True))
    c.watch(SECRET, request_for_object, options=options)
    informer = c.cache.informers[SECRET]
    task = asyncio.create_task(informer.run())
    try:
        await informer.wait_for_sync(timeout=5)
        await c.start()
        await asyncio.sleep(0.05)
        assert client.lists == [True] and not informer.has_whole  # the first pass runs
        passing.set()
        await first_pass_ended(c)
        for _ in range(200):
            if informer.has_whole:
                break
            await asyncio.sleep(0.005)
        assert client.lists == [True, False] and informer.has_whole
    finally:
        task.cancel()
        await c.stop(1.0)


async def test_a_controllers_queue_takes_namespaces_in_turn() -> None:
    """By default a request's namespace is its fairness key: a namespace's burst delays
    another namespace's request by one of its own at most."""
    c = make(None, "unit-fair")
    for i in range(5):
        c.queue.add(Request("busy", f"c{i}"))
    first = await asyncio.wait_for(c.queue.get(), 1.0)
    c.queue.add(Request("quiet", "newcomer"))
    out = [await asyncio.wait_for(c.queue.get(), 1.0) for _ in range(5)]
    assert first == Request("busy", "c0")
    assert Request("quiet", "newcomer") in out[:2]


async def test_a_cluster_scoped_kinds_objects_take_turns_by_name() -> None:
    """Issue 48, a newcomer's finding: for a cluster-scoped kind every request's namespace is
    None, so the default key put them all in one line, where sharding spreads them by name.
    Each object is now a line of its own, as sharding's key says."""
    assert by_namespace(Request(None, "tenant-1")) == "tenant-1"
    assert by_namespace(Request("team-a", "acme")) == "team-a"
    assert sharding_key({"metadata": {"name": "tenant-1"}}) == "tenant-1"
    assert sharding_key({"metadata": {"name": "acme", "namespace": "team-a"}}) == "team-a"
    c = make(None, "unit-fair-cluster")
    for i in range(5):
        c.queue.add(Request(None, f"tenant-{i}"))
    waiting = metrics.REGISTRY.get_sample_value(
        "crewlet_operator_workqueue_fairness_keys",
        {"name": "unit-fair-cluster", "controller": "unit-fair-cluster"},
    )
    assert waiting == 5, "a line each, not one for the kind"


async def test_the_builder_takes_a_fairness_key() -> None:
    """A constant fairness key puts every request in one line: the queue's order alone."""
    manager = Manager(client=offline_client(), options=ManagerOptions(name="unit-fair-builder"))
    one_line = (
        manager.controller("unit-one-line")
        .for_(SECRET)
        .with_options(fairness_key=lambda _: None)
        .complete(make(None, "unit-one-line-reconciler")._reconcile)
    )
    for i in range(3):
        one_line.queue.add(Request("busy", f"c{i}"))
    one_line.queue.add(Request("quiet", "newcomer"))
    one_line.queue.resume()
    out = [await asyncio.wait_for(one_line.queue.get(), 1.0) for _ in range(4)]
    assert out[-1] == Request("quiet", "newcomer")


async def test_a_watch_event_and_a_mapped_request_take_the_priority_given() -> None:
    """Issue 48, a newcomer's finding: a priority could be set on a requeue only. ``for_``,
    ``owns`` and ``watches`` take one for their events, a number or a function of the object:
    an urgent tenant's change goes before the backlog, the initial list stays low."""
    manager = Manager(client=offline_client(), options=ManagerOptions(name="unit-priorities"))
    tiers = {"gold": HIGH_PRIORITY, "bronze": NORMAL_PRIORITY - 10}

    def tier(obj: dict[str, Any]) -> int:
        return tiers.get(obj["metadata"].get("labels", {}).get("tier", ""), NORMAL_PRIORITY)

    controller = (
        manager.controller("unit-priorities")
        .for_(SECRET, priority=tier)
        .watches(CONFIG_MAP, lambda obj: [Request("team", "mapped")], priority=HIGH_PRIORITY)
        .complete(make(None, "unit-priorities-reconciler")._reconcile)
    )
    secrets = manager.cache.informer(SECRET)
    config_maps = manager.cache.informer(CONFIG_MAP)

    def secret(name: str, tier_label: str) -> dict[str, Any]:
        return {"metadata": {"name": name, "namespace": "team", "labels": {"tier": tier_label}}}

    for handler in secrets._handlers:  # what the informer tells its handlers of its events
        handler.on_add(secret("listed-gold", "gold"), initial=True)
        handler.on_add(secret("bronze", "bronze"))
        handler.on_add(secret("plain", ""))
        handler.on_add(secret("gold", "gold"))
    for handler in config_maps._handlers:
        handler.on_add({"metadata": {"name": "cm", "namespace": "team"}})
    controller.queue.resume()
    order = [(await asyncio.wait_for(controller.queue.get(), 1.0)).name for _ in range(5)]
    assert order[:2] in (["gold", "mapped"], ["mapped", "gold"])
    assert order[2:] == ["plain", "bronze", "listed-gold"]


class Tenant:
    """A stand-in for a pydantic model: a class with model_validate."""

    @classmethod
    def model_validate(cls, obj: object) -> Tenant:
        return cls()


def test_a_reconcile_declares_its_model_by_its_second_parameter() -> None:
    """Issue 48: a reconcile that declares its kind's model is handed typed objects; one that
    takes the request alone is called as before; a second parameter that is no model says so
    at build time, not at the first reconcile."""

    async def plain(request: Request) -> None: ...

    async def optional(request: Request, tenant: Tenant | None) -> None: ...

    async def required(request: Request, tenant: Tenant) -> None: ...

    async def with_default(request: Request, attempt: int = 0) -> None: ...

    async def untyped(request: Request, tenant: dict[str, Any]) -> None: ...

    assert declared_model(plain) is None
    assert declared_model(with_default) is None
    assert declared_model(optional) == (Tenant, True)
    assert declared_model(required) == (Tenant, False)
    with pytest.raises(TypeError, match="whose annotation is no model of its kind"):
        declared_model(untyped)
