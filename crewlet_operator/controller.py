"""Controllers: a queue of requests, workers that reconcile them, and the watches that feed it.

Build one with :class:`Builder` (``manager.controller("name").for_(...).owns(...).complete(r)``),
which wires the watches as controller-runtime's builder does; or construct :class:`Controller`
directly and call :meth:`Controller.watch`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

import structlog

from crewlet_operator import metrics
from crewlet_operator._tasks import cancel_and_wait
from crewlet_operator.cache import Cache, Informer, InformerOptions
from crewlet_operator.checkpoint import RestartCheckpoint
from crewlet_operator.errors import CrewletError, TerminalError
from crewlet_operator.handler import (
    EnqueueHandler,
    MapFunc,
    Priority,
    request_for_object,
    requests_for_owner,
)
from crewlet_operator.kube.client import Scope
from crewlet_operator.kube.resources import Resource
from crewlet_operator.predicate import Predicate
from crewlet_operator.ratelimit import RateLimiter
from crewlet_operator.rbac import EVENT_RULE, READ_VERBS, WRITE_VERBS, PolicyRule
from crewlet_operator.reconcile import (
    ReconcileFunc,
    Reconciler,
    Request,
    Result,
    TypedReconcileFunc,
    as_reconcile_func,
    declared_model,
)
from crewlet_operator.tracing import (
    Trigger,
    Triggers,
    enabled,
    reconcile_failed,
    reconcile_span,
)
from crewlet_operator.workqueue import NORMAL_PRIORITY, FairQueue, QueueShutDown

__all__ = [
    "Builder",
    "Controller",
    "FairnessKey",
    "by_namespace",
]

log = structlog.get_logger("crewlet_operator.controller")

FairnessKey = Callable[[Request], Hashable]
"""Which tenant a request belongs to, for the queue's fairness: see :class:`Controller`. It
must give a request the same key every time (a function of the request alone)."""


def by_namespace(request: Request) -> str | None:
    """A controller's default fairness key: the request's namespace, or its name for a
    cluster-scoped kind, whose objects would otherwise all wait in one line. The same rule as
    sharding's default key (:func:`crewlet_operator.sharding.by_namespace`), which spreads a
    cluster-scoped kind's objects by name."""
    return request.namespace or request.name


class Controller:
    """Runs ``max_concurrent_reconciles`` workers over one deduplicating queue, and
    ``reserved_workers`` more that take only the requests somebody is waiting for.

    The queue guarantees that no two workers reconcile the same request at once, and that a
    request added while it is being reconciled runs again afterwards. A reconcile that raises
    never kills its worker: the request is retried with backoff (see :mod:`.reconcile`).

    Reserved workers take only requests queued at
    :data:`~crewlet_operator.workqueue.NORMAL_PRIORITY` or higher (creates, changes, a
    controller's own urgent requeues): a backlog at low priority (an initial list, work a
    reconcile deferred) can hold every other worker for minutes, and the queue's order alone
    only decides what a worker takes next, not when one is free. None by default, as in
    controller-runtime.

    The queue is fair between tenants: requests of each ``fairness_key`` (by default
    :func:`by_namespace`) wait in a line of their own and the lines take turns within a
    priority, so one namespace's burst does not delay another namespace's request by more than
    one of its own (:mod:`.workqueue`). A function returning a constant puts every request in
    one line, in the queue's order alone. ``max_concurrent_reconciles_per_key`` caps the
    reconciles of one fairness key at once (reserved workers included): a namespace's backlog
    then holds at most that many workers, whatever its size (controller-runtime#3257 asks for
    this per namespace). None by default: taking turns decides what comes next, not how many
    workers one tenant holds while it has work.

    Each reconcile is a span while a tracer provider records (:mod:`crewlet_operator.tracing`),
    from the event that queued it. ``trace_annotation`` names the annotation a user's change
    may carry a W3C ``traceparent`` in, to make the reconcile's span a child of the user's
    trace; None (the default) reads none: the library has no domain of its own to name one in.
    """

    def __init__(
        self,
        name: str,
        reconciler: Reconciler | ReconcileFunc,
        cache: Cache,
        *,
        max_concurrent_reconciles: int = 1,
        reserved_workers: int = 0,
        rate_limiter: RateLimiter[Request] | None = None,
        need_leader_election: bool = True,
        fairness_key: FairnessKey = by_namespace,
        max_concurrent_reconciles_per_key: int | None = None,
        trace_annotation: str | None = None,
    ) -> None:
        if max_concurrent_reconciles < 1:
            raise ValueError("max_concurrent_reconciles must be at least 1")
        if max_concurrent_reconciles_per_key is not None and max_concurrent_reconciles_per_key < 1:
            raise ValueError("max_concurrent_reconciles_per_key must be at least 1")
        if reserved_workers < 0:
            raise ValueError("reserved_workers cannot be negative")
        self.name = name
        self.cache = cache
        self.max_concurrent_reconciles = max_concurrent_reconciles
        self.reserved_workers = reserved_workers
        self.need_leader_election = need_leader_election
        self._reconcile = as_reconcile_func(reconciler)
        self._fairness_key = fairness_key
        self.triggers: Triggers[Request] = Triggers(trace_annotation)
        """The event that queued each request waiting, while a tracer records."""
        # Paused until the workers start: on a standby replica the informers fill the queue
        # long before anything is served, and waiting then must not age the keys (an initial
        # list's would otherwise outrank what is created after the takeover).
        self.queue: FairQueue[Request] = FairQueue(
            name,
            rate_limiter,
            metrics.WorkqueueMetrics(name, name),
            paused=True,
            fairness_key=fairness_key,
            max_in_flight_per_key=max_concurrent_reconciles_per_key,
        )
        self._first_pass: set[Request] = set()
        self._first_pass_started = 0.0
        self.touched: set[Request] = set()
        """Requests an event has come for since the process started (a create, a change, a
        delete: not the initial list), until the first pass has ended: see :meth:`touch`."""
        self._touching = True
        self._failed: set[Request] = set()
        self._informers: list[Informer] = []
        self.rbac_rules: list[PolicyRule] = []
        """The RBAC rules this controller needs: ``get``, ``list`` and ``watch`` on each kind
        it watches, and what :meth:`add_rbac_rules` adds (see :mod:`crewlet_operator.rbac`)."""
        self._workers: list[asyncio.Task[None]] = []
        self._sampler: asyncio.Task[None] | None = None
        self._stopping = False
        metrics.init_controller_metrics(name, max_concurrent_reconciles + reserved_workers)

    def watch(
        self,
        resource: Resource,
        mapper: MapFunc,
        predicates: Sequence[Predicate] = (),
        options: InformerOptions | None = None,
        *,
        initial: bool = True,
        priority: Priority = NORMAL_PRIORITY,
    ) -> None:
        """Enqueue ``mapper(obj)`` at ``priority`` for each event on ``resource`` that passes
        ``predicates`` (and for the objects of the initial list, at low priority, unless
        ``initial`` is false: see :class:`~crewlet_operator.handler.EnqueueHandler`)."""
        informer = self.cache.informer(resource, options)
        handler = self.enqueue_handler(
            mapper,
            predicates,
            initial=initial,
            priority=priority,
            watch=resource.group_resource,
        )
        informer.add_handler(handler)
        self._informers.append(informer)
        self.rbac_rules.append(PolicyRule.on(resource, *READ_VERBS))

    def add_rbac_rules(self, *rules: PolicyRule) -> None:
        """Declare rules this controller needs beyond its watches (the writes it makes, the
        informers it reads through :meth:`enqueue_handler`): see :mod:`crewlet_operator.rbac`."""
        self.rbac_rules.extend(rules)

    def enqueue_handler(
        self,
        mapper: MapFunc,
        predicates: Sequence[Predicate] = (),
        *,
        initial: bool = True,
        priority: Priority = NORMAL_PRIORITY,
        watch: str = "",
    ) -> EnqueueHandler:
        """A handler that maps events to this controller's requests and queues them at
        ``priority`` (and tells :meth:`touch`, and a trace the ``watch`` they came from): for
        informers the controller does not declare itself, such as
        :class:`~crewlet_operator.cache.named.NamedObjects`."""
        return EnqueueHandler(
            self.queue,
            mapper,
            predicates,
            initial=initial,
            touched=self.touch,
            priority=priority,
            triggers=self.triggers,
            watch=watch,
        )

    def touch(self, requests: Iterable[Request]) -> None:
        """Note that something a request reads changed after the process started.

        Until the first pass has ended, :attr:`touched` holds these requests. A reconciler
        that recognises work it need not redo on a start (an object no newer than when a
        previous process left everything done, say) must not apply that to them: a delete
        leaves nothing newer behind, and a change seen after the start has not been worked on
        by anyone. The handlers of the controller's watches call this; then it stops
        collecting, and empties the set.
        """
        if self._touching:
            self.touched.update(requests)

    @property
    def first_pass_done(self) -> bool:
        """Whether the controller has started and reconciled every request that was waiting
        when it did (its first pass)."""
        return not self._touching

    def unsettled(self) -> set[Request]:
        """The requests this controller has work left for: queued, being reconciled, waiting
        for a delay or a backoff, or whose last reconcile failed (a terminal error too)."""
        return self.queue.unsettled() | self._failed

    async def start(self, resync_before: float | None = None) -> None:
        """Start the workers (the cache must be running: they read from it).

        ``resync_before`` (monotonic seconds), given by a manager that just took over the
        lease: requests queued before it were seen while the previous leader was alive, so
        they wait at low priority behind what came after (what that leader may have missed).
        The requests waiting at this moment (the initial list, on a replica that just started
        or just took over) are its first pass: once each has been reconciled, the pass's
        duration is logged and set as ``crewlet_operator_first_pass_seconds``.
        """
        self._stopping = False
        if resync_before is not None:
            self.queue.demote_added_before(resync_before)
        self._first_pass = self.queue.pending()
        self._first_pass_started = time.monotonic()
        if not self._first_pass:
            self._first_pass_done()
        self.queue.resume()
        self._workers = [
            asyncio.create_task(self._worker(), name=f"{self.name} worker {i}")
            for i in range(self.max_concurrent_reconciles)
        ] + [
            asyncio.create_task(self._worker(urgent_only=True), name=f"{self.name} reserved {i}")
            for i in range(self.reserved_workers)
        ]
        self._sampler = asyncio.create_task(
            self.queue.unfinished_work_loop(), name=f"{self.name} unfinished work"
        )

    async def stop(self, timeout: float | None = None) -> None:
        """Stop taking work, let in-flight reconciles finish (up to ``timeout``), then return.

        Reconciles still running after ``timeout`` are cancelled.
        """
        self._stopping = True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.queue.shut_down_with_drain(), timeout)
        self.queue.shut_down()
        await self.abort()

    async def abort(self) -> None:
        """Cancel every worker at once (leadership lost: stop writing now)."""
        self._stopping = True
        self.queue.shut_down()
        tasks = [*self._workers, *([self._sampler] if self._sampler else [])]
        self._workers, self._sampler = [], None
        await cancel_and_wait(*tasks)

    async def _worker(self, urgent_only: bool = False) -> None:
        while not self._stopping:
            try:
                request = await self.queue.get(urgent_only=urgent_only)
            except QueueShutDown:
                return
            trigger = self.triggers.take(request)
            if self._stopping:  # shut down while waiting: leave the rest to the next leader
                self.queue.done(request)
                return
            try:
                await self.reconcile_once(request, trigger)
            finally:
                self.queue.done(request)
            # A reconcile that finds nothing to do may never suspend, and a queued request is
            # handed out without suspending either: without this a worker would run a whole
            # first pass in one go, and the lease renewal, the probes and the watches would
            # starve (a leader lost its lease so, at the end of a pass over 10,000).
            await asyncio.sleep(0)

    async def reconcile_once(self, request: Request, trigger: Trigger | None = None) -> None:
        """Reconcile one request and act on the outcome (requeue, backoff or forget);
        ``trigger``, the event that queued it, for its span."""
        active = metrics.ACTIVE_WORKERS.labels(controller=self.name)
        active.inc()
        started = time.monotonic()
        result_label = "success"
        reconcile_id = str(uuid.uuid4())
        with (
            structlog.contextvars.bound_contextvars(
                controller=self.name,
                namespace=request.namespace,
                name=request.name,
                reconcileID=reconcile_id,
            ),
            reconcile_span(
                self.name,
                request,
                reconcile_id=reconcile_id,
                trigger=trigger,
                fairness_key=self._fairness_key(request),
            ) as span,
        ):
            try:
                result = await self._reconcile(request)
            except TerminalError as exc:
                reconcile_failed(span, exc, terminal=True)
                result_label = "error"
                self._failed.add(request)
                metrics.TERMINAL_RECONCILE_ERRORS.labels(controller=self.name).inc()
                metrics.RECONCILE_ERRORS.labels(controller=self.name).inc()
                self.queue.forget(request)
                log.error("reconcile failed; not retrying (terminal error)", error=str(exc))
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                reconcile_failed(span, exc, terminal=False)
                result_label = "error"
                self._failed.add(request)
                metrics.RECONCILE_ERRORS.labels(controller=self.name).inc()
                if not isinstance(exc, CrewletError):
                    # An unexpected exception is a bug (Go would have panicked): count it as
                    # controller-runtime counts recovered panics, and keep the worker alive.
                    metrics.RECONCILE_PANICS.labels(controller=self.name).inc()
                self._requeued(request, self.queue.add_rate_limited(request), None)
                log.warning(
                    "reconcile failed; retrying with backoff",
                    error=str(exc),
                    error_type=type(exc).__name__,
                    retries=self.queue.num_requeues(request),
                    exc_info=not isinstance(exc, CrewletError),
                )
            else:
                self._failed.discard(request)
                if isinstance(result, Result) and result.requeue_after:
                    self.queue.forget(request)
                    result_label = "requeue_after"
                    self.queue.add_after(request, result.requeue_after, result.priority)
                    self._requeued(request, result.requeue_after, result.priority)
                elif isinstance(result, Result) and result.requeue:
                    result_label = "requeue"
                    # The backoff is kept, and grows.
                    delay = self.queue.add_rate_limited(request, result.priority)
                    self._requeued(request, delay, result.priority)
                else:
                    self.queue.forget(request)
            finally:
                active.dec()
                metrics.RECONCILE_TIME.labels(controller=self.name).observe(
                    time.monotonic() - started
                )
                metrics.RECONCILE_TOTAL.labels(controller=self.name, result=result_label).inc()
                span.set_attribute("crewlet.result", result_label)
                log.debug("reconciled", result=result_label)
                if request in self._first_pass:
                    self._first_pass.discard(request)
                    if not self._first_pass:
                        self._first_pass_done()

    def requeue(self, request: Request, priority: int = NORMAL_PRIORITY) -> None:
        """Queue ``request`` at ``priority`` from inside a reconcile of it, for work it leaves
        to the next one (it runs again after this one: the queue never hands one request to two
        workers), or once what a reconcile of it was put off for has come (a sharded member's
        slots). Its next reconcile's span says ``requeued``, waiting from now."""
        self.queue.add(request, priority)
        self._requeued(request, 0.0, priority)

    def _requeued(self, request: Request, delay: float, priority: int | None) -> None:
        """Tell a trace that this controller queued ``request`` again itself (at ``priority``,
        by default the queue's for a requeue)."""
        if enabled():
            held = priority if priority is not None else self.queue.priority_of(request)
            self.triggers.requeued(request, delay, NORMAL_PRIORITY if held is None else held)

    def _first_pass_done(self) -> None:
        self._touching = False
        self.touched.clear()
        # Its metadata-first informers waited so as not to share the first pass's CPU.
        for informer in self._informers:
            informer.request_whole()
        seconds = time.monotonic() - self._first_pass_started
        metrics.FIRST_PASS_SECONDS.labels(controller=self.name).set(seconds)
        log.info("first pass done", controller=self.name, seconds=round(seconds, 3))


class ControllerDefaults(Protocol):
    """The settings a :class:`Builder` takes from its manager (:class:`ManagerOptions
    <crewlet_operator.manager.ManagerOptions>` is one)."""

    @property
    def max_concurrent_reconciles(self) -> int:
        """Workers per controller unless its builder says otherwise."""


class Narrowing(Protocol):
    """What a manager's feature makes of a controller whose primary kind it narrows: the
    informers hold a share of the objects, and the reconciler runs behind a wrapper. Sharding
    is one (:class:`~crewlet_operator.sharding.member.RingMember`): the builder asks the manager
    for it (:meth:`ControllerHost.narrowing`), and needs no subclass."""

    def primary(self, options: InformerOptions) -> InformerOptions:
        """The primary kind's informer options, narrowed."""

    def owned(self, options: InformerOptions) -> InformerOptions:
        """A child kind's informer options, narrowed."""

    def wrap(self, reconcile: ReconcileFunc) -> ReconcileFunc:
        """The reconciler, wrapped."""

    def predicates(self) -> Sequence[Predicate]:
        """What the primary kind's events must pass besides the controller's own predicates."""

    def owned_predicates(self) -> Sequence[Predicate]:
        """What a child kind's events must pass besides the controller's own predicates."""

    def built(
        self, controller: Controller, primary: Scope, owned: Sequence[tuple[Resource, Scope]]
    ) -> None:
        """The controller was built, its primary's informer in ``primary`` and each child
        kind's in its scope, before they were narrowed."""


class ControllerHost(Protocol):
    """What a :class:`Builder` needs of the manager it adds a controller to (:class:`Manager
    <crewlet_operator.manager.Manager>` is one). A protocol, not the manager itself: the
    manager imports this module, and this module imports nothing above it."""

    @property
    def options(self) -> ControllerDefaults:
        """Its settings."""

    @property
    def cache(self) -> Cache:
        """The cache the controller's watches read."""

    def add_controller(self, controller: Controller) -> None:
        """Run ``controller`` with the others."""

    @property
    def lease_annotations_found(self) -> dict[str, str]:
        """The annotations of the Lease this process took over (a checkpoint judges them)."""

    def add_lease_annotations(self, provider: Callable[[], Mapping[str, str]]) -> None:
        """Write ``provider``'s annotations into the Lease at each renewal (a checkpoint)."""

    def narrowing(self, primary: Resource) -> Narrowing | None:
        """What the manager makes of a controller of ``primary``; None: nothing."""


@dataclass(frozen=True)
class _Watch:
    """One kind a builder watches: its events mapped by ``mapper`` (None: to the controlling
    owner of the primary kind, for ``owns``), filtered by ``predicates``, at ``priority``."""

    resource: Resource
    mapper: MapFunc | None
    predicates: Sequence[Predicate]
    options: InformerOptions | None
    priority: Priority


class Builder:
    """Wires a controller into a manager, the way controller-runtime's builder does::

        manager.controller("widget") \\
            .for_(WIDGET) \\
            .owns(CONFIG_MAP) \\
            .watches(SECRET, lambda s: [Request("ns", "w")]) \\
            .with_options(max_concurrent_reconciles=4, reserved_workers=2) \\
            .with_checkpoint(RestartCheckpoint(version, annotation="example.com/checkpoint")) \\
            .with_rbac(status=True, events=True) \\
            .complete(reconcile)
    """

    def __init__(self, manager: ControllerHost, name: str) -> None:
        self._manager = manager
        self._name = name
        self._for: _Watch | None = None
        self._owns: list[_Watch] = []
        self._watches: list[_Watch] = []
        self._options: dict[str, Any] = {}
        self._checkpoint: RestartCheckpoint | None = None
        self._rbac: list[PolicyRule] = []
        self._status = self._finalizer = self._events = False

    def for_(
        self,
        resource: Resource,
        *,
        predicates: Sequence[Predicate] = (),
        options: InformerOptions | None = None,
        priority: Priority = NORMAL_PRIORITY,
    ) -> Builder:
        """The primary kind: each of its events reconciles that object, at ``priority`` (a
        number, or a function of the object; the initial list's at low priority)."""
        if self._for is not None:
            raise ValueError("for_ may be called once")
        self._for = _Watch(resource, request_for_object, predicates, options, priority)
        return self

    def owns(
        self,
        resource: Resource,
        *,
        predicates: Sequence[Predicate] = (),
        options: InformerOptions | None = None,
        priority: Priority = NORMAL_PRIORITY,
    ) -> Builder:
        """A child kind: its events reconcile its controlling owner of the primary kind, at
        ``priority`` (not its initial list's: the primary's initial list already requests
        every owner)."""
        self._owns.append(_Watch(resource, None, predicates, options, priority))
        return self

    def watches(
        self,
        resource: Resource,
        mapper: MapFunc,
        *,
        predicates: Sequence[Predicate] = (),
        options: InformerOptions | None = None,
        priority: Priority = NORMAL_PRIORITY,
    ) -> Builder:
        """Any kind, mapped to requests by ``mapper``, queued at ``priority`` (a number, or a
        function of the watched object)."""
        self._watches.append(_Watch(resource, mapper, predicates, options, priority))
        return self

    def with_options(
        self,
        *,
        max_concurrent_reconciles: int | None = None,
        reserved_workers: int | None = None,
        rate_limiter: RateLimiter[Request] | None = None,
        need_leader_election: bool | None = None,
        fairness_key: FairnessKey | None = None,
        max_concurrent_reconciles_per_key: int | None = None,
        trace_annotation: str | None = None,
    ) -> Builder:
        """Controller options (workers, workers reserved for requests somebody waits for, rate
        limiter, whether it runs only on the leader, the tenant of a request for the queue's
        fairness, the most reconciles of one tenant at once, the annotation a change's
        ``traceparent`` is read from): see :class:`Controller`."""
        given = {
            "max_concurrent_reconciles": max_concurrent_reconciles,
            "reserved_workers": reserved_workers,
            "rate_limiter": rate_limiter,
            "need_leader_election": need_leader_election,
            "fairness_key": fairness_key,
            "max_concurrent_reconciles_per_key": max_concurrent_reconciles_per_key,
            "trace_annotation": trace_annotation,
        }
        self._options.update({k: v for k, v in given.items() if v is not None})
        return self

    def with_checkpoint(self, checkpoint: RestartCheckpoint) -> Builder:
        """Leave ``checkpoint`` in the manager's Lease for the next leader, and judge the
        previous leader's against the kinds this controller :meth:`owns` (see
        :class:`~crewlet_operator.checkpoint.RestartCheckpoint`)."""
        self._checkpoint = checkpoint
        return self

    def with_rbac(
        self,
        *rules: PolicyRule,
        status: bool = False,
        finalizer: bool = False,
        events: bool = False,
    ) -> Builder:
        """Declare what the controller writes beyond its owned kinds, for the RBAC generated
        from the controllers (:mod:`crewlet_operator.rbac`); each call adds to the last.

        :param rules: Rules of your own (``PolicyRule.on(SECRET, "get")``).
        :param status: It writes the primary's status: ``get``, ``update`` and ``patch`` on
            ``<primary>/status`` (``apply_status`` patches it).
        :param finalizer: It puts a :class:`~crewlet_operator.finalizer.Finalizer` on the
            primary: ``patch`` on it.
        :param events: It records Events (:class:`~crewlet_operator.events.EventRecorder`):
            ``create`` and ``patch`` on events.k8s.io's.
        """
        self._rbac.extend(rules)
        self._status |= status
        self._finalizer |= finalizer
        self._events |= events
        return self

    def _write_rules(self, primary: Resource) -> list[PolicyRule]:
        """The rules of :meth:`owns` and :meth:`with_rbac` (the watches add their own)."""
        rules = [PolicyRule.on(owned.resource, *WRITE_VERBS) for owned in self._owns]
        if self._owns:
            # The library's controller references block their owner's deletion, which the
            # OwnerReferencesPermissionEnforcement admission plugin allows only to whoever may
            # update the owner's finalizers.
            rules.append(PolicyRule.on(primary, "update", subresource="finalizers"))
        if self._status:
            rules.append(PolicyRule.on(primary, "get", "update", "patch", subresource="status"))
        if self._finalizer:
            rules.append(PolicyRule.on(primary, "patch"))
        if self._events:
            rules.append(EVENT_RULE)
        return [*rules, *self._rbac]

    def complete(self, reconciler: Reconciler | ReconcileFunc | TypedReconcileFunc) -> Controller:
        """Create the controller, register its watches and add it to the manager.

        ``reconciler`` takes the request alone, or the request and the primary object parsed
        into the model its second parameter declares (:data:`TypedReconcileFunc`)."""
        if self._for is None:
            raise ValueError("a controller needs a primary kind: call for_ first")
        settings = {
            "max_concurrent_reconciles": self._manager.options.max_concurrent_reconciles,
            **self._options,
        }
        primary = self._for.resource
        narrowing = self._manager.narrowing(primary)
        reconcile = self._reconcile_func(reconciler)
        if narrowing is not None:
            reconcile = narrowing.wrap(reconcile)
        controller = Controller(self._name, reconcile, self._manager.cache, **settings)
        owners = requests_for_owner(primary.group, primary.kind, primary.namespaced)
        for watch in (self._for, *self._owns, *self._watches):
            options, predicates = watch.options, watch.predicates
            if narrowing is not None and watch is self._for:
                options = narrowing.primary(self._options_of(watch))
                predicates = [*predicates, *narrowing.predicates()]
            elif narrowing is not None and any(watch is owned for owned in self._owns):
                options = narrowing.owned(self._options_of(watch))
                predicates = [*predicates, *narrowing.owned_predicates()]
            controller.watch(
                watch.resource,
                watch.mapper or owners,
                predicates,
                options,
                # The primary's initial list requests every owner already.
                initial=watch.mapper is not None,
                priority=watch.priority,
            )
        if self._checkpoint is not None:
            self._attach_checkpoint(self._checkpoint, controller, narrowed=narrowing is not None)
        controller.add_rbac_rules(*self._write_rules(primary))
        if narrowing is not None:
            narrowing.built(
                controller,
                self._options_of(self._for).scope,
                [(owned.resource, self._options_of(owned).scope) for owned in self._owns],
            )
        self._manager.add_controller(controller)
        return controller

    def _options_of(self, watch: _Watch) -> InformerOptions:
        """The informer options ``watch`` asked for, else the cache's defaults."""
        return watch.options or self._manager.cache.default_options or InformerOptions()

    def _reconcile_func(
        self, reconciler: Reconciler | ReconcileFunc | TypedReconcileFunc
    ) -> ReconcileFunc:
        """``reconciler`` as a function of the request: one that declares its object's model is
        handed the cached primary object parsed into it (a deleted one: None if the model is
        optional, else not called); an object that does not fit the model is a terminal error,
        which says why, since no retry makes it fit."""
        func = reconciler.reconcile if isinstance(reconciler, Reconciler) else reconciler
        declared = declared_model(func)
        if declared is None:
            return cast(ReconcileFunc, func)
        model, optional = declared
        typed = cast(TypedReconcileFunc, func)
        assert self._for is not None
        resource, cache = self._for.resource, self._manager.cache

        async def reconcile(request: Request) -> Result | None:
            found = cache.get(resource, request.name, request.namespace)
            if found is None:
                return await typed(request, None) if optional else None
            try:
                parsed = model.model_validate(found)
            except ValueError as invalid:  # pydantic's ValidationError is one
                raise TerminalError(
                    f"{resource.kind} {request} does not fit {model.__name__}: {invalid}"
                ) from invalid
            return await typed(request, parsed)

        return reconcile

    def _attach_checkpoint(
        self, checkpoint: RestartCheckpoint, controller: Controller, *, narrowed: bool
    ) -> None:
        """Judge the checkpoint the previous leader left in the Lease, and leave one there.
        A narrowed controller keeps none: the Lease would speak for one replica's share alone,
        and with sharding the share moves with the ring. It reconciles its share in full at
        start, as controller-runtime does."""
        if narrowed:
            log.info("a narrowed controller reconciles its share in full at start", name=self._name)
            checkpoint.attach(controller, owned=[], found=dict)
            return
        manager = self._manager
        checkpoint.attach(
            controller,
            owned=[owned.resource for owned in self._owns],
            found=lambda: manager.lease_annotations_found,
        )
        manager.add_lease_annotations(checkpoint.annotations)
