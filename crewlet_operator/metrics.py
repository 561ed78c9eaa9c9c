"""Prometheus metrics, with controller-runtime's and client-go's names and labels.

Dashboards and alerts written for Go operators (``controller_runtime_reconcile_total``,
``workqueue_depth`` and friends) work unchanged against an operator built on this library.

All metrics live in :data:`REGISTRY`, a registry of our own rather than prometheus_client's
global default, so the process that embeds the operator decides whether to expose them
alongside its own::

    from prometheus_client import generate_latest
    from crewlet_operator.metrics import REGISTRY

    body = generate_latest(REGISTRY)

prometheus_client appends ``_total`` to counter names by itself, so the counters below are
declared without it; the exposed names are exactly the ones in the comments.
"""

from __future__ import annotations

import asyncio
import functools
import time
import weakref
from typing import TYPE_CHECKING, Final, Literal, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from crewlet_operator._tasks import cancel_and_wait

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

__all__ = [
    "ACTIVE_WORKERS",
    "CACHED_OBJECT_COUNTS",
    "CACHE_METADATA_ONLY_OBJECTS",
    "CACHE_OBJECTS",
    "CACHE_SILENCE",
    "EVENTS_DROPPED",
    "EVENT_LOOP_LAG",
    "EVENT_LOOP_LAG_BUCKETS",
    "EVENT_LOOP_LAG_INTERVAL",
    "FIRST_PASS_SECONDS",
    "LEADER_ELECTION_MASTER_STATUS",
    "MAX_CONCURRENT_RECONCILES",
    "METRICS_CERTIFICATE_EXPIRY",
    "RECONCILE_ERRORS",
    "RECONCILE_PANICS",
    "RECONCILE_RESULTS",
    "RECONCILE_TIME",
    "RECONCILE_TIME_BUCKETS",
    "RECONCILE_TOTAL",
    "REGISTRY",
    "REST_CLIENT_REQUESTS",
    "REST_CLIENT_REQUEST_DURATION",
    "REST_CLIENT_REQUEST_DURATION_BUCKETS",
    "REST_CLIENT_REQUEST_RETRIES",
    "SHARD_GATE",
    "SHARD_GATE_OUTCOMES",
    "SHARD_MEMBER_STATUS",
    "TERMINAL_RECONCILE_ERRORS",
    "WORKQUEUE_ADDS",
    "WORKQUEUE_DEPTH",
    "WORKQUEUE_DURATION_BUCKETS",
    "WORKQUEUE_FAIRNESS_KEYS",
    "WORKQUEUE_LONGEST_RUNNING_PROCESSOR",
    "WORKQUEUE_QUEUE_DURATION",
    "WORKQUEUE_RETRIES",
    "WORKQUEUE_UNFINISHED_WORK",
    "WORKQUEUE_WORK_DURATION",
    "CachedObjectCounts",
    "EventLoopLag",
    "ObjectCounts",
    "ReconcileResult",
    "ShardGateOutcome",
    "WorkqueueMetrics",
    "init_controller_metrics",
]

REGISTRY: Final = CollectorRegistry()
"""The registry of every metric the library exports (what the manager serves on ``/metrics``):
register a controller's own collectors here to serve them beside it, as controller-runtime's
``metrics.Registry``."""

# --- controller-runtime: pkg/internal/controller/metrics -----------------------------------

ReconcileResult = Literal["success", "error", "requeue", "requeue_after"]
"""Values of the ``result`` label of ``controller_runtime_reconcile_total``."""

RECONCILE_RESULTS: Final[tuple[ReconcileResult, ...]] = (
    "success",
    "error",
    "requeue",
    "requeue_after",
)
"""Every value of the ``result`` label, each series created at zero when a controller starts
(:func:`init_controller_metrics`)."""

RECONCILE_TIME_BUCKETS: Final[tuple[float, ...]] = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7,
    0.8, 0.9, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9, 10, 15, 20,
    25, 30, 40, 50, 60,
)  # fmt: skip
"""controller-runtime's buckets: fine-grained below 1 s where most reconciles land, coarse up to
a minute for the slow ones."""

RECONCILE_TOTAL: Final = Counter(
    "controller_runtime_reconcile",
    "Total number of reconciliations per controller.",
    ["controller", "result"],
    registry=REGISTRY,
)
"""``controller_runtime_reconcile_total{controller,result}``: Total number of reconciliations
per controller."""
RECONCILE_ERRORS: Final = Counter(
    "controller_runtime_reconcile_errors",
    "Total number of reconciliation errors per controller.",
    ["controller"],
    registry=REGISTRY,
)
"""``controller_runtime_reconcile_errors_total{controller}``: Total number of reconciliation
errors per controller."""
TERMINAL_RECONCILE_ERRORS: Final = Counter(
    "controller_runtime_terminal_reconcile_errors",
    "Total number of terminal reconciliation errors per controller.",
    ["controller"],
    registry=REGISTRY,
)
"""``controller_runtime_terminal_reconcile_errors_total{controller}``: Total number of terminal
reconciliation errors per controller."""
RECONCILE_PANICS: Final = Counter(
    "controller_runtime_reconcile_panics",
    "Total number of reconciliation panics per controller.",
    ["controller"],
    registry=REGISTRY,
)
"""``controller_runtime_reconcile_panics_total{controller}``: Total number of reconciliation
panics per controller. A reconciler raising something other than an ordinary error is our
equivalent of a Go panic."""
RECONCILE_TIME: Final = Histogram(
    "controller_runtime_reconcile_time_seconds",
    "Length of time per reconciliation per controller.",
    ["controller"],
    buckets=RECONCILE_TIME_BUCKETS,
    registry=REGISTRY,
)
"""``controller_runtime_reconcile_time_seconds{controller}``: Length of time per reconciliation
per controller."""
MAX_CONCURRENT_RECONCILES: Final = Gauge(
    "controller_runtime_max_concurrent_reconciles",
    "Maximum number of concurrent reconciles per controller.",
    ["controller"],
    registry=REGISTRY,
)
"""``controller_runtime_max_concurrent_reconciles{controller}``: Maximum number of concurrent
reconciles per controller."""
ACTIVE_WORKERS: Final = Gauge(
    "controller_runtime_active_workers",
    "Number of currently used workers per controller.",
    ["controller"],
    registry=REGISTRY,
)
"""``controller_runtime_active_workers{controller}``: Number of currently used workers per
controller."""

# --- client-go workqueue, as registered by controller-runtime ------------------------------

WORKQUEUE_DURATION_BUCKETS: Final[tuple[float, ...]] = tuple(
    float(f"1e{exp}") for exp in range(-8, 2)
)
"""client-go's ExponentialBuckets(10e-9, 10, 10): 10 ns .. 10 s, one bucket per decade, because
queue and work durations span many orders of magnitude. Written as literals so the ``le`` labels
are clean (1e-07, not 1.0000000000000001e-07)."""

_WQ_LABELS: Final = ["name", "controller"]

WORKQUEUE_DEPTH: Final = Gauge(
    "workqueue_depth",
    "Current depth of workqueue.",
    [*_WQ_LABELS, "priority"],
    registry=REGISTRY,
)
"""``workqueue_depth{name,controller,priority}``: Current depth of workqueue. By priority, as
controller-runtime's priority queue reports it (a dashboard that sums by name sees the
total)."""
WORKQUEUE_ADDS: Final = Counter(
    "workqueue_adds",
    "Total number of adds handled by workqueue.",
    _WQ_LABELS,
    registry=REGISTRY,
)
"""``workqueue_adds_total{name,controller}``: Total number of adds handled by workqueue."""
WORKQUEUE_QUEUE_DURATION: Final = Histogram(
    "workqueue_queue_duration_seconds",
    "How long in seconds an item stays in workqueue before being requested.",
    _WQ_LABELS,
    buckets=WORKQUEUE_DURATION_BUCKETS,
    registry=REGISTRY,
)
"""``workqueue_queue_duration_seconds{name,controller}``: How long in seconds an item stays in
workqueue before being requested."""
WORKQUEUE_WORK_DURATION: Final = Histogram(
    "workqueue_work_duration_seconds",
    "How long in seconds processing an item from workqueue takes.",
    _WQ_LABELS,
    buckets=WORKQUEUE_DURATION_BUCKETS,
    registry=REGISTRY,
)
"""``workqueue_work_duration_seconds{name,controller}``: How long in seconds processing an item
from workqueue takes."""
WORKQUEUE_UNFINISHED_WORK: Final = Gauge(
    "workqueue_unfinished_work_seconds",
    "How many seconds of work has been done that is in progress and hasn't been observed by "
    "work_duration. Large values indicate stuck threads. One can deduce the number of stuck "
    "threads by observing the rate at which this increases.",
    _WQ_LABELS,
    registry=REGISTRY,
)
"""``workqueue_unfinished_work_seconds{name,controller}``: How many seconds of work has been
done that is in progress and hasn't been observed by work_duration. Large values indicate stuck
threads. One can deduce the number of stuck threads by observing the rate at which this
increases."""
WORKQUEUE_LONGEST_RUNNING_PROCESSOR: Final = Gauge(
    "workqueue_longest_running_processor_seconds",
    "How many seconds has the longest running processor for workqueue been running.",
    _WQ_LABELS,
    registry=REGISTRY,
)
"""``workqueue_longest_running_processor_seconds{name,controller}``: How many seconds has the
longest running processor for workqueue been running."""
WORKQUEUE_RETRIES: Final = Counter(
    "workqueue_retries",
    "Total number of retries handled by workqueue.",
    _WQ_LABELS,
    registry=REGISTRY,
)
"""``workqueue_retries_total{name,controller}``: Total number of retries handled by
workqueue."""

# --- the library's own ----------------------------------------------------------------------

FIRST_PASS_SECONDS: Final = Gauge(
    "crewlet_operator_first_pass_seconds",
    "Seconds the controller took, after it last started (a start or a takeover), to reconcile "
    "every request that was waiting when it started.",
    ["controller"],
    registry=REGISTRY,
)
"""``crewlet_operator_first_pass_seconds{controller}``: Seconds the controller took, after it
last started (a start or a takeover), to reconcile every request that was waiting when it
started."""

EVENTS_DROPPED: Final = Counter(
    "crewlet_operator_events_dropped",
    "Events an EventRecorder dropped because too many were waiting to be written (the API "
    "server was slower than they came), by the recorder's reportingController.",
    ["controller"],
    registry=REGISTRY,
)
"""``crewlet_operator_events_dropped_total{controller}``: Events an EventRecorder dropped
because too many were waiting to be written (the API server was slower than they came), by the
recorder's reportingController."""

WORKQUEUE_FAIRNESS_KEYS: Final = Gauge(
    "crewlet_operator_workqueue_fairness_keys",
    "Fairness keys (by default namespaces) with requests waiting in the workqueue, which take "
    "turns.",
    _WQ_LABELS,
    registry=REGISTRY,
)
"""``crewlet_operator_workqueue_fairness_keys{name,controller}``: Fairness keys (by default
namespaces) with requests waiting in the workqueue, which take turns. One series a queue,
however many tenants: a label per fairness key (a namespace) would make a series per tenant."""

# --- the library's own: the event loop -------------------------------------------------------

EVENT_LOOP_LAG_INTERVAL: Final = 0.1
"""Seconds between two samples of :data:`EVENT_LOOP_LAG`: ten wake-ups a second cost nothing
measurable, and a stall of a tenth of a second is seen."""
EVENT_LOOP_LAG_BUCKETS: Final[tuple[float, ...]] = (
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
)  # fmt: skip
"""From a millisecond (a timer's own jitter) to seconds (a loop starved of CPU, or a callback
that blocks it)."""

EVENT_LOOP_LAG: Final = Histogram(
    "crewlet_operator_event_loop_lag_seconds",
    "How late the event loop woke a task whose sleep had ended, sampled every 0.1 s: time the "
    "loop spent on other callbacks, or waiting for a CPU.",
    buckets=EVENT_LOOP_LAG_BUCKETS,
    registry=REGISTRY,
)
"""``crewlet_operator_event_loop_lag_seconds``: How late the event loop woke a task whose sleep
had ended, sampled every 0.1 s: time the loop spent on other callbacks, or waiting for a CPU."""


class EventLoopLag:
    """Keeps ``crewlet_operator_event_loop_lag_seconds``: every :data:`EVENT_LOOP_LAG_INTERVAL`
    a task sleeps, and the histogram records how much later than due the loop woke it.

    Everything a Python operator does waits its turn on one event loop, so when its requests
    are slow this tells whether the process waited (a high lag: it was short of CPU, or a
    callback blocked the loop) or took each answer up promptly (a low lag; a loop busy all the
    time still does, and its work waits in the workqueue instead). Node.js's prom-client keeps
    the same figure (``nodejs_eventloop_lag_seconds``); Go has no counterpart to need one.
    The :class:`~crewlet_operator.Manager` runs one on every replica.

    :param histogram: Where the samples go (:data:`EVENT_LOOP_LAG`).
    :param interval: Seconds between samples.
    """

    def __init__(
        self, histogram: Histogram = EVENT_LOOP_LAG, interval: float = EVENT_LOOP_LAG_INTERVAL
    ) -> None:
        self._histogram = histogram
        self._interval = interval
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Sample from now on, on the running loop."""
        if self._task is None:
            self._task = asyncio.create_task(self._sample(), name="event loop lag")

    async def stop(self) -> None:
        """Stop sampling."""
        task, self._task = self._task, None
        if task is not None:
            await cancel_and_wait(task)

    async def _sample(self) -> None:
        while True:
            due = time.monotonic() + self._interval
            await asyncio.sleep(self._interval)
            self._histogram.observe(max(0.0, time.monotonic() - due))


# --- client-go leader election -------------------------------------------------------------

LEADER_ELECTION_MASTER_STATUS: Final = Gauge(
    "leader_election_master_status",
    "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, "
    "1 indicates master. 'name' is the string used to identify the lease. Please make sure "
    "to group by name.",
    ["name"],
    registry=REGISTRY,
)
"""``leader_election_master_status{name}``: Gauge of if the reporting system is master of the
relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify
the lease. Please make sure to group by name."""

# --- client-go REST client -----------------------------------------------------------------

REST_CLIENT_REQUEST_DURATION_BUCKETS: Final[tuple[float, ...]] = (
    0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0,
)  # fmt: skip
"""controller-runtime's buckets for API latency: most requests take milliseconds, but watches
re-established under load and large lists can take tens of seconds."""

REST_CLIENT_REQUESTS: Final = Counter(
    "rest_client_requests",
    "Number of HTTP requests, partitioned by status code, method, and host.",
    ["code", "method", "host"],
    registry=REGISTRY,
)
"""``rest_client_requests_total{code,method,host}``: Number of HTTP requests, partitioned by
status code, method, and host."""
REST_CLIENT_REQUEST_DURATION: Final = Histogram(
    "rest_client_request_duration_seconds",
    "Request latency in seconds. Broken down by verb, and host.",
    ["verb", "host"],
    buckets=REST_CLIENT_REQUEST_DURATION_BUCKETS,
    registry=REGISTRY,
)
"""``rest_client_request_duration_seconds{verb,host}``: Request latency in seconds. Broken down
by verb, and host."""
REST_CLIENT_REQUEST_RETRIES: Final = Counter(
    "rest_client_request_retries",
    "Number of request retries, partitioned by status code, verb, and host.",
    ["code", "verb", "host"],
    registry=REGISTRY,
)
"""``rest_client_request_retries_total{code,verb,host}``: Number of request retries, partitioned
by status code, verb, and host. client-go's name, help and labels. The ``code`` is the answer
that was retried (``<error>`` for a lost connection), where client-go labels each retry with its
own answer: the count is the same, and says what caused it."""


def init_controller_metrics(controller: str, max_concurrent_reconciles: int) -> None:
    """Create the per-controller series at zero, as controller-runtime does on start.

    Without this a counter only appears after its first increment, and ``rate()`` or
    ``absent()`` queries misbehave for a controller that has never failed.

    :param controller: The controller's name (the ``controller`` label).
    :param max_concurrent_reconciles: The number of workers the controller runs.
    """
    ACTIVE_WORKERS.labels(controller=controller).set(0)
    MAX_CONCURRENT_RECONCILES.labels(controller=controller).set(max_concurrent_reconciles)
    for result in RECONCILE_RESULTS:
        RECONCILE_TOTAL.labels(controller=controller, result=result)
    RECONCILE_ERRORS.labels(controller=controller)
    TERMINAL_RECONCILE_ERRORS.labels(controller=controller)
    RECONCILE_PANICS.labels(controller=controller)
    RECONCILE_TIME.labels(controller=controller)


class WorkqueueMetrics:
    """The workqueue metrics of one queue, with its ``name`` and ``controller`` labels bound.

    A :class:`~crewlet_operator.workqueue.FairQueue` given an instance reports to it;
    the queue keeps the timestamps, this class only records numbers. Creating an instance
    creates the series (at zero), so a queue shows up in ``/metrics`` before its first add.

    :param name: The queue's name (the ``name`` label).
    :param controller: The owning controller (the ``controller`` label); defaults to
        ``name``, since controller-runtime names a controller's queue after the controller.
    """

    def __init__(self, name: str, controller: str | None = None) -> None:
        self.name = name
        self.controller = name if controller is None else controller
        labels = {"name": self.name, "controller": self.controller}
        self._labels = labels
        # A series per priority, looked up once (every add and get sets one: a start adds
        # thousands). The depth at normal priority exists from the start, as the others did.
        self._depths: dict[str, Gauge] = {}
        self.depth("0", 0)
        self._adds = WORKQUEUE_ADDS.labels(**labels)
        self._queue_duration = WORKQUEUE_QUEUE_DURATION.labels(**labels)
        self._work_duration = WORKQUEUE_WORK_DURATION.labels(**labels)
        self._unfinished = WORKQUEUE_UNFINISHED_WORK.labels(**labels)
        self._longest = WORKQUEUE_LONGEST_RUNNING_PROCESSOR.labels(**labels)
        self._retries = WORKQUEUE_RETRIES.labels(**labels)
        self._fairness_keys = WORKQUEUE_FAIRNESS_KEYS.labels(**labels)

    def add(self) -> None:
        """Count one item accepted by the queue (``workqueue_adds_total``)."""
        self._adds.inc()

    def depth(self, priority: str, n: int) -> None:
        """Set ``workqueue_depth`` of the items waiting at ``priority`` (a label value)."""
        gauge = self._depths.get(priority)
        if gauge is None:
            gauge = self._depths[priority] = WORKQUEUE_DEPTH.labels(
                **self._labels, priority=priority
            )
        gauge.set(n)

    def fairness_keys(self, n: int) -> None:
        """Set ``crewlet_operator_workqueue_fairness_keys``: the keys with requests waiting."""
        self._fairness_keys.set(n)

    def queue_duration(self, seconds: float) -> None:
        """Observe how long an item waited between being added and handed to a worker."""
        self._queue_duration.observe(seconds)

    def work_duration(self, seconds: float) -> None:
        """Observe how long a worker held an item, from ``get()`` to ``done()``."""
        self._work_duration.observe(seconds)

    def retry(self) -> None:
        """Count one delayed re-add (``workqueue_retries_total``)."""
        self._retries.inc()

    def update_unfinished_work(self, start_times: Iterable[float], now: float) -> None:
        """Set the two in-flight gauges from the start times of the items being processed.

        ``workqueue_unfinished_work_seconds`` is the sum of how long each in-flight item has
        been running and ``workqueue_longest_running_processor_seconds`` the largest of those;
        both are 0 when nothing is in flight. Like client-go, these are sampled (the queue's
        owner calls this periodically) rather than updated on every get/done.

        :param start_times: When each in-flight item was handed out, on the clock of ``now``.
        :param now: The current time on the same clock.
        """
        total = 0.0
        longest = 0.0
        for start in start_times:
            running = max(0.0, now - start)
            total += running
            longest = max(longest, running)
        self._unfinished.set(total)
        self._longest.set(longest)


# --- the library's own: the informer caches ---------------------------------------------

CACHE_OBJECTS: Final = Gauge(
    "crewlet_operator_cache_objects",
    "Number of objects in the running informer caches, by kind.",
    ["kind"],
    registry=REGISTRY,
)
"""``crewlet_operator_cache_objects{kind}``: Number of objects in the running informer caches,
by kind. Kept by :data:`CACHED_OBJECT_COUNTS`, read at scrape time."""


CACHE_METADATA_ONLY_OBJECTS: Final = Gauge(
    "crewlet_operator_cache_metadata_only_objects",
    "Number of objects the running informer caches hold by their metadata alone, by kind: a "
    "metadata-first informer's, until its list of whole objects has ended.",
    ["kind"],
    registry=REGISTRY,
)
"""``crewlet_operator_cache_metadata_only_objects{kind}``: Number of objects the running
informer caches hold by their metadata alone, by kind: a metadata-first informer's, until its
list of whole objects has ended."""

CACHE_SILENCE: Final = Gauge(
    "crewlet_operator_cache_silence_seconds",
    "Seconds since the running informer caches last heard the API server about a kind (a list, "
    "an event or a bookmark), the longest over the caches.",
    ["kind"],
    registry=REGISTRY,
)
"""``crewlet_operator_cache_silence_seconds{kind}``: Seconds since the running informer caches
last heard the API server about a kind (a list, an event or a bookmark), the longest over the
caches. Past an informer's watchdog the manager's ``/healthz`` fails (``Cache.stale``), and
alerts can say so."""

SHARD_MEMBER_STATUS: Final = Gauge(
    "crewlet_operator_shard_member_status",
    "1 while this replica is a member of the ring and may write its share of the objects: it "
    "holds its member Lease, has listed the ring's Leases within a lease duration, and its Lease "
    "carries no will; 0 while it may write none of them.",
    ["ring"],
    registry=REGISTRY,
)
"""``crewlet_operator_shard_member_status{ring}``: 1 while this replica is a member of the ring
and may write its share of the objects: it holds its member Lease, has listed the ring's Leases
within a lease duration, and its Lease carries no will; 0 while it may write none of them. Read
at scrape time from the manager, so that a member that may write nothing (it cannot list the
ring, or its Lease carries a will) says so where an alert sees it, beside /readyz."""

ShardGateOutcome = Literal["reconciled", "drained", "not_ours", "awaiting_will", "awaiting_slot"]
"""Values of the ``outcome`` label of ``crewlet_operator_shard_gate_total``."""

SHARD_GATE_OUTCOMES: Final[tuple[ShardGateOutcome, ...]] = (
    "reconciled",
    "drained",
    "not_ours",
    "awaiting_will",
    "awaiting_slot",
)
"""Every value of the ``outcome`` label, each series created at zero with the gate."""

SHARD_GATE: Final = Counter(
    "crewlet_operator_shard_gate",
    "Requests of the sharded kind that a member's gate let through to the reconciler "
    "(reconciled), acknowledged as a drain (drained), turned away as another member's or gone "
    "(not_ours), or put off until a dead member's will (awaiting_will) or the children of its "
    "slot are cached (awaiting_slot).",
    ["ring", "outcome"],
    registry=REGISTRY,
)
"""``crewlet_operator_shard_gate_total{ring,outcome}``: Requests of the sharded kind that a
member's gate let through to the reconciler (``reconciled``), acknowledged as a drain
(``drained``), turned away as another member's or gone (``not_ours``), or put off until a dead
member's will (``awaiting_will``) or the children of its slot are cached (``awaiting_slot``).
``controller_runtime_reconcile_total`` counts every one of them (a turned-away request returns
with nothing to do, a put-off one with ``requeue_after``); this tells the reconciles that ran."""

METRICS_CERTIFICATE_EXPIRY: Final = Gauge(
    "crewlet_operator_metrics_certificate_expiry_timestamp_seconds",
    "When the certificate the metrics endpoint serves expires, in Unix seconds; 0 while it "
    "serves none (plain HTTP, or not started).",
    registry=REGISTRY,
)
"""``crewlet_operator_metrics_certificate_expiry_timestamp_seconds``: When the certificate the
metrics endpoint serves expires, in Unix seconds; 0 while it serves none (plain HTTP, or not
started). Prometheus cannot see the certificate of a target it scrapes, so the endpoint says
when its own expires."""


class ObjectCounts(Protocol):
    """Something holding cached objects: a :class:`~crewlet_operator.cache.Cache`."""

    def object_counts(self, metadata_only: bool = False) -> Mapping[str, int]:
        """How many objects it holds now, by kind (``Kind.group``); with ``metadata_only``,
        how many of them by their metadata alone."""
        ...

    def silences(self) -> Mapping[str, float]:
        """Seconds since each kind's informer last heard the API server, by kind."""
        ...


class CachedObjectCounts:
    """Keeps ``crewlet_operator_cache_objects{kind}``: the objects held by the running informer
    caches of this process, by kind (``Kind.group``, e.g. ``StatefulSet.apps``), summed over
    the caches. The memory an operator needs follows it; on a warm standby it is the price of
    an instant takeover.

    Each sample is a function of the stores' sizes, read when scraped, so the gauge costs
    nothing per event. A cache reports from :meth:`track` (its start) to :meth:`untrack` (its
    stop); it is held weakly, so a cache dropped without a stop counts nothing.

    :param gauge: The gauge to keep (:data:`CACHE_OBJECTS`), with a ``kind`` label.
    :param metadata_only: The gauge of the objects held by their metadata alone
        (:data:`CACHE_METADATA_ONLY_OBJECTS`), kept the same way, if any.
    :param silence: The gauge of the seconds since each kind was last heard of
        (:data:`CACHE_SILENCE`), the longest over the caches, if any.
    """

    def __init__(
        self, gauge: Gauge, metadata_only: Gauge | None = None, silence: Gauge | None = None
    ) -> None:
        self._gauge = gauge
        self._metadata_only = metadata_only
        self._silence = silence
        self._caches: weakref.WeakSet[ObjectCounts] = weakref.WeakSet()
        self._kinds: set[str] = set()

    def track(self, cache: ObjectCounts) -> None:
        """Report ``cache``'s objects from now on; call again when it declares a new kind."""
        self._caches.add(cache)
        self._label_kinds()

    def untrack(self, cache: ObjectCounts) -> None:
        """Stop reporting ``cache``'s objects (a kind no other cache holds loses its sample)."""
        self._caches.discard(cache)
        self._label_kinds()

    def count(self, kind: str, metadata_only: bool = False) -> int:
        """The objects of ``kind`` held by the tracked caches now (by their metadata alone,
        with ``metadata_only``)."""
        return sum(cache.object_counts(metadata_only).get(kind, 0) for cache in list(self._caches))

    def silence(self, kind: str) -> float:
        """The longest time any tracked cache has not heard of ``kind``, in seconds."""
        return max((cache.silences().get(kind, 0.0) for cache in list(self._caches)), default=0.0)

    def _label_kinds(self) -> None:
        """One sample for each kind some tracked cache holds, computed when scraped."""
        kinds = {kind for cache in list(self._caches) for kind in cache.object_counts()}
        gauges = [(self._gauge, False)]
        if self._metadata_only is not None:
            gauges.append((self._metadata_only, True))
        for gauge, metadata_only in gauges:
            for kind in kinds - self._kinds:
                count = functools.partial(self.count, kind, metadata_only)
                gauge.labels(kind=kind).set_function(count)
            for kind in self._kinds - kinds:
                gauge.remove(kind)
        if self._silence is not None:
            for kind in kinds - self._kinds:
                self._silence.labels(kind=kind).set_function(functools.partial(self.silence, kind))
            for kind in self._kinds - kinds:
                self._silence.remove(kind)
        self._kinds = kinds


CACHED_OBJECT_COUNTS: Final = CachedObjectCounts(
    CACHE_OBJECTS, CACHE_METADATA_ONLY_OBJECTS, CACHE_SILENCE
)
"""What the caches report ``crewlet_operator_cache_objects`` through."""
