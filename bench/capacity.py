"""The ``capacity`` figure: the highest rate of changes a contender keeps within an SLO (p99
queue wait < 1 s, p99 change -> converged < 5 s), for this operator and for the controller-runtime
peer (bench/peers/), one after the other on the same API server, and the number of Companies
at that rate.

The contenders: ours, the controller-runtime peer, and ours again as a ring of :data:`RING`
replicas with ``--sharding`` (every replica active, each writing its share). Each contender,
started alone (the others stopped, the world empty, namespaces of its own):

1. converges a seed of Companies (500; small: 50) created in one burst;
2. takes steps of a steady stream of changes, :attr:`Scale.capacity_step_seconds` each, at the
   rates of :attr:`Scale.capacity_rates` (changes a second), one change every ``1/rate``
   seconds, at most :data:`IN_FLIGHT` requests in flight: creates of new Companies and updates
   of existing ones in turn; an update sets ``spec.seats.replicas`` of a converged Company with
   no change pending to a new number (a merge patch), which its seats StatefulSet must take
   (ours renders it; the peer puts it where the template's ``seatsReplicas`` says);
3. after each step, waits until each of the step's changes has converged, or
   :data:`PATIENCE` seconds after the step's last change; judges the step
   (:func:`evaluate`; beside its own p99s, those of every change so far, :func:`cumulative`,
   as the controller-sharding thesis reports them), and stops at the first step that broke the
   SLO, or that the generator could not send on schedule (:data:`LATE`), which is then no
   measure of the contender.

Per change, through the API server's watches (Companies, and the children labelled as a
Company's), from when its request was sent:

- *queue wait*: until the contender's first visible reaction: for a create, the first of its
  children or its ``Accepted=True``; for an update, ``Accepted=True`` at the new generation (its
  ``observedGeneration``) or a child written after the update (a resourceVersion beyond the one
  the update was answered with), whichever comes first;
- *converged*: for a create, ``Accepted=True`` and its 13 children; for an update,
  ``Accepted=True`` at the new generation and the seats StatefulSet with the new replicas.

The contenders' ready signal is ``Accepted=True`` at the Company's generation: no pods run on this
control plane, so our ``Ready`` stays False, and the peer writes no other condition.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal, Self

from bench import tracing
from bench.cluster import Cluster, CompanyRef
from bench.latency import percentile
from bench.peers import template, toolchain
from bench.peers.contenders import Contender, ControllerRuntime, Crewlet
from bench.peers.figure import CLASS, CORE_EVENT, QUIET, quiet, while_alive
from bench.progress import CHILDREN, Key, Progress, current_version
from bench.report import Figure
from bench.session import WRITTEN, Session, writes_between
from crewlet_operator import (
    STATEFUL_SET,
    ApiError,
    Client,
    Resource,
    Scope,
    TransportError,
    find_condition,
)
from crewlet_operator._tasks import cancel_and_wait
from crewlet_operator.kube import WatchParams
from crewlet_operator.objects import labels, name, namespace, resource_version
from crewlet_operator_daemon import naming
from crewlet_operator_daemon.api.v1alpha1 import COMPANY

QUEUE_WAIT_SLO = 1.0
CONVERGED_SLO = 5.0
TARGET = "the highest rate held at least the controller-runtime peer's"
SLO = f"p99 queue wait < {QUEUE_WAIT_SLO:.0f} s, p99 change -> converged < {CONVERGED_SLO:.0f} s"
PATIENCE = 30.0
"""Seconds after a step's last change that its changes are waited for; one not converged by
then counts as later than any."""
RING = 3
"""Replicas of the ring measured beside the one: with ``--sharding``, every one active, on the
same two cores as the API server."""
IN_FLIGHT = 64
"""Change requests the generator keeps in flight at most (more means the server is behind)."""
LATE = 1.0
"""Seconds after its time that a change may be sent; more than :data:`LATE_SHARE` of a step's
changes later than that, and the generator did not keep the step's rate."""
LATE_SHARE = 0.01
DEFAULT_REPLICAS = 1
"""The bench's classes' seats replicas (the class default), which a Company starts with."""

BENCH_WRITES = frozenset({"POST companies", "PATCH companies"})
"""The bench's own requests: its creates and updates (neither contender makes them)."""

Kind = Literal["create", "update"]
Object = dict[str, Any]


@dataclass
class Change:
    """One change of a step: when it was due and sent, what the API server answered, and what
    the watches saw of its Company meanwhile (times are monotonic seconds)."""

    key: Key
    kind: Kind
    due: float
    replicas: int | None = None
    """An update's new ``spec.seats.replicas``."""
    sent: float = math.inf
    generation: int | None = None
    """The Company's generation, once the request was answered."""
    version: int = 0
    """The resourceVersion the request was answered with."""
    failed: str | None = None
    accepted: list[tuple[int, float]] = field(default_factory=list)
    """Each ``Accepted=True`` seen: its observedGeneration, and when."""
    children: list[tuple[int, float]] = field(default_factory=list)
    """Each child event: the child's resourceVersion, and when."""
    seats: list[tuple[int, float]] = field(default_factory=list)
    """Each event of the seats StatefulSet: its replicas, and when."""
    complete_at: float | None = None
    """A create's: when the last of its children was seen."""

    def reacted(self) -> float:
        """When the contender's first reaction was seen (infinite: not yet)."""
        if self.generation is None:
            return math.inf
        seen = [at for generation, at in self.accepted if generation >= self.generation]
        seen += [
            at for version, at in self.children if self.kind == "create" or version > self.version
        ]
        return min(seen, default=math.inf)

    def converged(self) -> float:
        """When the change was seen converged (infinite: not yet)."""
        if self.generation is None:
            return math.inf
        accepted = min(
            (at for generation, at in self.accepted if generation >= self.generation),
            default=math.inf,
        )
        if self.kind == "create":
            children = math.inf if self.complete_at is None else self.complete_at
        else:
            children = min((at for n, at in self.seats if n == self.replicas), default=math.inf)
        return max(accepted, children)

    @property
    def queue_wait(self) -> float:
        return self.reacted() - self.sent

    @property
    def to_converged(self) -> float:
        return self.converged() - self.sent


def schedule(rate: float, seconds: float) -> list[tuple[float, Kind]]:
    """A step's changes: when each is due (seconds from the step's start) and what it is, one
    every ``1/rate`` seconds, a create first and then an update, in turn."""
    return [(i / rate, "create" if i % 2 == 0 else "update") for i in range(round(rate * seconds))]


def next_replicas(current: int) -> int:
    """The seats replicas an update sets after ``current``: 2 to 10 in turn (the class's bounds
    are 0 to 10, its default 1), never the current one."""
    return 2 + (current - 1) % 9


@dataclass(frozen=True)
class Step:
    """A step, judged."""

    rate: float
    changes: int
    creates: int
    updates: int
    skipped: int
    """Updates due when no Company was converged and free of changes (none was sent)."""
    failed: int
    """Change requests the API server refused or never answered."""
    late: int
    """Changes sent more than :data:`LATE` seconds after their time."""
    sent_per_s: float
    queue_wait: dict[str, float]
    converged: dict[str, float]
    unconverged: int
    companies: int
    """The contender's Companies at the step's end."""
    broke: tuple[str, ...]
    """What the step broke: ``queue wait``, ``converged``, ``generator`` (empty: it held)."""
    writes: dict[str, int] = field(default_factory=dict)
    """The contender's mutating requests from the step's start until its changes converged
    (or :data:`PATIENCE` ran out), by ``VERB resource[/subresource]``: the bench's aside."""
    reconciles: float = 0.0
    """The contender's Company reconciles over the same time."""
    window: tuple[float, float] = (0.0, 0.0)
    """Wall-clock seconds (``time.time()``) from the step's first change to the end of its
    wait: where its traces are (bench/tracing.py)."""
    aside: Object = field(default_factory=dict)
    """What a caller of :func:`measure` added to the step (the tracing figure: its stages)."""
    cumulative: dict[str, float] = field(default_factory=dict)
    """The p99 queue wait and change -> converged of every change from the first step through
    this one, as the controller-sharding thesis reports them (:func:`cumulative`)."""

    @property
    def held(self) -> bool:
        return not self.broke

    def as_json(self) -> Object:
        return {
            "changes_per_s": self.rate,
            "changes": self.changes,
            "creates": self.creates,
            "updates": self.updates,
            "updates_skipped": self.skipped,
            "requests_failed": self.failed,
            "sent_late": self.late,
            "sent_per_s": round(self.sent_per_s, 1),
            "queue_wait_s": {k: _seconds(v) for k, v in self.queue_wait.items()},
            "converged_s": {k: _seconds(v) for k, v in self.converged.items()},
            "unconverged": self.unconverged,
            "companies": self.companies,
            "held": self.held,
            "broke": list(self.broke),
            "writes": self.writes,
            "writes_per_change": round(sum(self.writes.values()) / max(1, self.changes), 1),
            "reconciles_per_change": round(self.reconciles / max(1, self.changes), 2),
            "cumulative_p99_s": {k: _seconds(v) for k, v in self.cumulative.items()},
            **self.aside,
        }


def _quantiles(values: list[float], changes: Sequence[Change]) -> dict[str, float]:
    """p50 and p99 of ``values`` (one per change), and the p99 of the creates' and of the
    updates' alone."""
    found = {"p50": percentile(sorted(values), 0.5), "p99": percentile(sorted(values), 0.99)}
    for kind in ("create", "update"):
        of_kind = sorted(v for v, c in zip(values, changes, strict=True) if c.kind == kind)
        if of_kind:
            found[f"{kind}_p99"] = percentile(of_kind, 0.99)
    return found


def evaluate(rate: float, changes: Sequence[Change], skipped: int, companies: int) -> Step:
    """Judge a step: its p99s against the SLO, and whether the generator kept its rate (each
    change sent on time, but for :data:`LATE_SHARE` of them, and no update skipped). A change
    never reacted to, or never converged, is later than any."""
    waits = [c.queue_wait for c in changes]
    converged = [c.to_converged for c in changes]
    sent = sorted(c.sent for c in changes if not math.isinf(c.sent))
    late = sum(1 for c in changes if c.sent - c.due > LATE)
    span = sent[-1] - sent[0] if len(sent) > 1 else 0.0
    step = Step(
        rate=rate,
        changes=len(changes),
        creates=sum(1 for c in changes if c.kind == "create"),
        updates=sum(1 for c in changes if c.kind == "update"),
        skipped=skipped,
        failed=sum(1 for c in changes if c.failed is not None),
        late=late,
        sent_per_s=(len(sent) - 1) / span if span > 0 else 0.0,
        queue_wait=_quantiles(waits, changes),
        converged=_quantiles(converged, changes),
        unconverged=sum(1 for x in converged if math.isinf(x)),
        companies=companies,
        broke=(),
    )
    broke = []
    if step.queue_wait["p99"] >= QUEUE_WAIT_SLO:
        broke.append("queue wait")
    if step.converged["p99"] >= CONVERGED_SLO:
        broke.append("converged")
    if late > LATE_SHARE * len(changes) or skipped:
        broke.append("generator")
    return dataclasses.replace(step, broke=tuple(broke))


def cumulative(changes: Sequence[Change]) -> dict[str, float]:
    """The p99 queue wait and change -> converged of ``changes``: every change of the steps so
    far, where a step's own p99 counts its own changes alone."""
    return {
        "queue_wait": percentile(sorted(c.queue_wait for c in changes), 0.99),
        "converged": percentile(sorted(c.to_converged for c in changes), 0.99),
    }


def highest_held(steps: Sequence[Step]) -> Step | None:
    """The fastest step that held before the first one that did not (the steps are raised in
    order, and the first that breaks ends them)."""
    held = None
    for step in steps:
        if not step.held:
            break
        held = step
    return held


class Observer:
    """Watches Companies and their children from now on, and records on each change it follows
    what concerns its Company; use as ``async with Observer(client) as observer``."""

    def __init__(self, client: Client) -> None:
        self._client = client
        self._following: dict[Key, Change] = {}
        self._children: dict[Key, dict[str, set[str]]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self.failure: BaseException | None = None

    async def __aenter__(self) -> Self:
        kinds = [COMPANY, *CHILDREN]
        versions = await asyncio.gather(*(current_version(self._client, r) for r in kinds))
        self._tasks = [
            asyncio.create_task(
                self._watch(r, v, None if r is COMPANY else naming.MANAGED_BY_SELECTOR)
            )
            for r, v in zip(kinds, versions, strict=True)
        ]
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await cancel_and_wait(*self._tasks)

    def follow(self, change: Change) -> None:
        """Record what the watches see of ``change``'s Company from now until :meth:`forget`."""
        self._following[change.key] = change
        if change.kind == "create":
            self._children[change.key] = {}

    def forget(self, change: Change) -> None:
        self._following.pop(change.key, None)
        self._children.pop(change.key, None)

    async def _watch(self, resource: Resource, version: str, selector: str | None) -> None:
        try:
            while True:
                with contextlib.suppress(TransportError):
                    watching = WatchParams(Scope(label_selector=selector), resource_version=version)
                    async for event in self._client.watch(resource, watching):
                        version = resource_version(event.object) or version
                        if event.type in ("ADDED", "MODIFIED"):
                            self._observe(resource, event.object)
                await asyncio.sleep(0.1)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a 410 or a bug: fail the figure rather than hang it
            self.failure = exc

    def _observe(self, resource: Resource, obj: Object) -> None:
        now = time.monotonic()
        if resource is COMPANY:
            change = self._following.get((namespace(obj) or "", name(obj)))
            accepted = find_condition((obj.get("status") or {}).get("conditions"), "Accepted")
            if change is None or accepted is None or accepted.get("status") != "True":
                return
            generation = int(accepted.get("observedGeneration") or 0)
            if not change.accepted or change.accepted[-1][0] != generation:
                change.accepted.append((generation, now))
            return
        company = labels(obj).get(naming.COMPANY_LABEL, "")
        key = (namespace(obj) or "", company)
        change = self._following.get(key)
        if change is None:
            return
        change.children.append((int(resource_version(obj) or 0), now))
        if resource is STATEFUL_SET and name(obj) == naming.statefulset(company, naming.SEATS):
            change.seats.append((int((obj.get("spec") or {}).get("replicas", 0)), now))
        seen = self._children.get(key)
        if seen is not None and change.complete_at is None:
            seen.setdefault(resource.kind, set()).add(name(obj))
            if all(len(seen.get(r.kind, ())) >= n for r, n in CHILDREN.items()):
                change.complete_at = now


@dataclass
class World:
    """A contender's Companies: every one created, those converged with no change pending
    (which the next updates take, oldest first), and the seats replicas each was last set to."""

    refs: list[CompanyRef] = field(default_factory=list)
    idle: deque[Key] = field(default_factory=deque)
    replicas: dict[Key, int] = field(default_factory=dict)


async def send_change(
    cluster: Cluster, observer: Observer, change: Change, ref: CompanyRef | None = None
) -> None:
    """Send ``change``, followed by ``observer`` from just before: the create of ``ref``, or
    (without one) the update of ``change.key`` to ``change.replicas`` seats (a merge patch);
    record when it was sent and the generation and resourceVersion it was answered with, or
    why it failed."""
    observer.follow(change)
    change.sent = time.monotonic()
    try:
        if ref is not None:
            answer = await cluster.create_company(ref)
        else:
            answer = await cluster.api.patch(
                COMPANY,
                change.key[1],
                {"spec": {"seats": {"replicas": change.replicas}}},
                change.key[0],
            )
    except (ApiError, TransportError) as error:
        change.failed = f"{type(error).__name__}: {error}"
        return
    change.version = int(resource_version(answer) or 0)
    change.generation = int(answer["metadata"]["generation"])


async def _seed(session: Session, contender: Contender, world: World) -> None:
    """Create the seed in one burst and wait until it has converged."""
    cluster = session.cluster
    refs = _of_class(
        cluster.allocate(f"capacity-{contender.name}-seed", session.scale.capacity_seed)
    )
    await cluster.create_namespaces(refs)
    world.refs += refs
    keys = [r.key for r in refs]
    async with Progress(cluster.api, keys) as progress:
        await cluster.create_companies(refs)
        await while_alive(contender, progress.wait(session.scale.timeout))
    world.idle.extend(keys)


async def _step(
    session: Session, contender: Contender, observer: Observer, world: World, rate: float
) -> tuple[Step, list[Change]]:
    """Send the step's changes on schedule, wait for them to converge, and judge the step:
    the step, and its changes."""
    cluster = session.cluster
    plan = schedule(rate, session.scale.capacity_step_seconds)
    fresh = _of_class(
        cluster.allocate(f"capacity-{contender.name}", sum(1 for _, k in plan if k == "create"))
    )
    await cluster.create_namespaces(fresh)
    world.refs += fresh
    creates = iter(fresh)
    slots = asyncio.Semaphore(IN_FLIGHT)

    async def send(change: Change, ref: CompanyRef | None) -> None:
        async with slots:
            await send_change(cluster, observer, change, ref)

    plane = cluster.plane
    writes_before = await asyncio.to_thread(plane.mutating_requests, WRITTEN)
    reconciles_before = await contender.handled()
    changes: list[Change] = []
    tasks = []
    skipped = 0
    wall_started = time.time()
    started = time.monotonic()
    for offset, kind in plan:
        await asyncio.sleep(max(0.0, started + offset - time.monotonic()))
        if kind == "create":
            ref = next(creates)
            change = Change(ref.key, kind, started + offset)
        elif world.idle:
            ref = None
            key = world.idle.popleft()
            replicas = world.replicas[key] = next_replicas(
                world.replicas.get(key, DEFAULT_REPLICAS)
            )
            change = Change(key, kind, started + offset, replicas=replicas)
        else:
            skipped += 1
            continue
        changes.append(change)
        tasks.append(asyncio.create_task(send(change, ref)))
    await asyncio.gather(*tasks)

    deadline = time.monotonic() + PATIENCE
    while time.monotonic() < deadline and any(
        c.failed is None and math.isinf(c.converged()) for c in changes
    ):
        if observer.failure is not None:
            raise observer.failure
        contender.check_alive()
        await asyncio.sleep(0.2)
    writes = writes_between(
        await asyncio.to_thread(plane.mutating_requests, WRITTEN), writes_before
    )
    reconciles = await contender.handled() - reconciles_before
    for change in changes:
        observer.forget(change)
        if not math.isinf(change.converged()):
            world.idle.append(change.key)
    step = dataclasses.replace(
        evaluate(rate, changes, skipped, len(world.refs)),
        writes={k: v for k, v in writes.items() if k not in BENCH_WRITES},
        reconciles=reconciles,
        window=(wall_started, time.time()),
    )
    return step, changes


def _of_class(refs: list[CompanyRef]) -> list[CompanyRef]:
    """The peer's template is one class's: every Company is of it."""
    return [dataclasses.replace(ref, class_name=CLASS) for ref in refs]


StepAside = Callable[[Step], Awaitable[Object]]
"""What a caller adds to each step, once it is judged."""


async def measure(session: Session, contender: Contender, aside: StepAside | None = None) -> Object:
    """The contender's row: its steps (each with what ``aside`` adds), the highest rate it
    held, and the error that ended it early, if one did."""
    cluster = session.cluster
    world = World()
    row: Object = {"contender": contender.name, **contender.settings()}
    steps: list[Step] = []
    every_change: list[Change] = []
    started = time.monotonic()
    contender.start()
    try:
        async with Observer(cluster.api) as observer:
            await _seed(session, contender, world)
            await quiet(session, QUIET)
            for rate in session.scale.capacity_rates:
                step, changes = await _step(session, contender, observer, world, rate)
                every_change += changes
                step = dataclasses.replace(step, cumulative=cumulative(every_change))
                if aside is not None:
                    step = dataclasses.replace(step, aside=await aside(step))
                steps.append(step)
                print(f"bench: capacity: {contender.name}: {_step_text(step)}", flush=True)
                if not step.held:
                    break
    except Exception as error:  # one contender failing must not hide the other
        row["error"] = f"{type(error).__name__}: {error}"
    finally:
        await contender.stop()
        await cluster.remove(world.refs, [*CHILDREN, CORE_EVENT, COMPANY])
    best = highest_held(steps)
    row |= {
        "seed": session.scale.capacity_seed,
        "held_changes_per_s": None if best is None else best.rate,
        "companies_at_held": None if best is None else best.companies,
        "steps": [s.as_json() for s in steps],
        "seconds": round(time.monotonic() - started, 1),
    }
    return row


async def capacity(session: Session) -> Figure:
    """The figure (see the module's docstring)."""
    cluster = session.cluster
    if (await cluster.api.request("GET", COMPANY.path(), query={"limit": 1}))["items"]:
        raise RuntimeError("the capacity figure needs a world without Companies")
    path = session.run_dir / "capacity-template.json"
    template.write(template.renderer(cluster.classes[CLASS], cluster.model_keys), CLASS, path)
    binary = await asyncio.to_thread(toolchain.controller_runtime_binary)
    contenders: list[Contender] = [
        Crewlet(session.run_dir, session.new_daemon),
        ControllerRuntime(session.run_dir, cluster.plane.kubeconfig, path, binary),
        Crewlet(session.run_dir, session.new_daemon, replicas=RING),
    ]
    rows = []
    for contender in contenders:
        print(f"bench: capacity: {contender.name}", flush=True)
        rows.append(await measure(session, contender))
    ours, peer, _ = (row["held_changes_per_s"] or 0.0 for row in rows)
    met = None if any("error" in row for row in rows) else ours >= peer
    # Ours again, every reconcile traced, each step's reconciles cut into stages from their
    # spans: where a change's time goes at the step that breaks. Tracing costs it CPU, so it
    # is an aside, not the figure.
    async with tracing.jaeger_for(session) as jaeger:
        session.environment = tracing.traced(jaeger)
        print("bench: capacity: crewlet-operator, traced", flush=True)
        staged = await measure(
            session,
            Crewlet(session.run_dir, session.new_daemon),
            lambda step: tracing.reconcile_stages(jaeger, step.window),
        )
    return Figure(
        "capacity",
        f"at {SLO}: "
        + " | ".join(_readable(row) for row in rows)
        + f" | traced: {_readable(staged)}; at its last step: {_stages_text(staged)}",
        TARGET,
        met,
        {"class": CLASS, "slo": SLO, "contenders": rows, "traced": staged},
    )


def _stages_text(row: Object) -> str:
    """The stages of the traced row's last step (the one that broke), p50/p99 in seconds."""
    if not row["steps"]:
        return "no step"
    last = row["steps"][-1]

    def shown(stages: Object) -> str:
        return ", ".join(f"{stage} {v['p50']:.2f}/{v['p99']:.2f}" for stage, v in stages.items())

    return (
        shown(last.get("traced_stages_s", {}))
        + "; a create: "
        + shown(last.get("traced_create_stages_s", {}))
    )


def _step_text(step: Step) -> str:
    verdict = "held" if step.held else "broke " + ", ".join(step.broke)
    shown = step.as_json()
    return (
        f"{step.rate:g} changes/s ({step.sent_per_s:.1f} sent/s, {step.companies} companies): "
        f"p99 queue wait {_text(step.queue_wait['p99'])}, converged "
        f"{_text(step.converged['p99'])}; a change {shown['writes_per_change']} writes, "
        f"{shown['reconciles_per_change']} reconciles: {verdict}"
    )


def _readable(row: Object) -> str:
    held = row["held_changes_per_s"]
    text = (
        f"{row['contender']}: no step held"
        if held is None
        else f"{row['contender']}: {held:g} changes/s held at {row['companies_at_held']} companies"
    )
    held_steps = [step for step in row["steps"] if step["held"]]
    if held_steps:
        so_far = held_steps[-1]["cumulative_p99_s"]
        text += f" (cumulative p99 converged {_shown(so_far['converged'])})"
    steps = row["steps"]
    if steps and not steps[-1]["held"]:
        last = steps[-1]
        waited, converged = last["queue_wait_s"]["p99"], last["converged_s"]["p99"]
        text += (
            f" ({last['changes_per_s']:g}/s broke {', '.join(last['broke'])}: p99 queue wait "
            f"{_shown(waited)}, converged {_shown(converged)})"
        )
    if "error" in row:
        text += f"; FAILED: {row['error'].splitlines()[0]}"
    return text


def _seconds(value: float) -> float | None:
    """JSON has no infinity: a change never seen converged is null."""
    return None if math.isinf(value) else round(value, 3)


def _shown(value: float | None) -> str:
    return f"> {PATIENCE:.0f} s" if value is None else f"{value:.2f} s"


def _text(value: float) -> str:
    return _shown(_seconds(value))
