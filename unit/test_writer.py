"""The Company writer's sequencing (crewlet_operator_daemon.writer): which writes a reconcile
makes of its plan, in which order, with which Events and requeues, and that it decides the plan
once. Each test drives :meth:`CompanyWriter.execute` with recorded plans (the pure reconcile's,
or built by hand) and records what it asks of its writes (:class:`CompanyWrites`), of its
Events (:class:`Announcer`) and of the queue: no API server, fake or real."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from crewlet_operator import (
    NORMAL_PRIORITY,
    PERSISTENT_VOLUME_CLAIM,
    SECRET,
    SERVICE,
    STATEFUL_SET,
    InvalidError,
    NotFoundError,
    Request,
    Resource,
    Result,
)
from crewlet_operator import KubeObject as Object
from crewlet_operator.objects import name
from crewlet_operator_daemon import ClusterFacts, Observed, Plan, reconcile
from crewlet_operator_daemon.plan import Apply, Delete
from crewlet_operator_daemon.slots import ApplySlots
from crewlet_operator_daemon.writer import Announcer, CompanyWriter, CompanyWrites, Decide

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
NAMESPACE = "tenant-a"
CHILDREN = -200
"""The children's priority the writer is given (the controller's ``CHILDREN_PRIORITY``)."""
FACTS = ClusterFacts(gateway_api=False, operator_namespace="crewlet-operator-system")
REJECTION = 'StatefulSet "acme-data" is invalid: spec.template.spec.tolerations[0]'

Entry = tuple[Any, ...]


def make_company(company: str = "acme", generation: int = 1) -> Object:
    return {
        "apiVersion": "crewlet.ai/v1alpha1",
        "kind": "Company",
        "metadata": {
            "name": company,
            "namespace": NAMESPACE,
            "uid": f"uid-{company}",
            "generation": generation,
        },
        "spec": {"className": "standard"},
    }


def make_class() -> Object:
    return {
        "apiVersion": "crewlet.ai/v1alpha1",
        "kind": "EngineClass",
        "metadata": {"name": "standard", "uid": "class-uid", "generation": 1},
        "spec": {"engine": {"image": "ghcr.io/crewlet/crewlet-operator/engine:v0.2.0"}},
    }


# -- what the writer asks for, recorded --------------------------------------------------------


@dataclass
class Recording:
    """The writer's writes, Events and requeues, in the order it asks for them. It answers as
    the API server would, but for what it is told to refuse (a 422, by ``(verb, kind, name)``)
    and a company deleted meanwhile (``gone``: its status write finds nothing)."""

    log: list[Entry] = field(default_factory=list)
    refuse: dict[tuple[str, str, str], str] = field(default_factory=dict)
    gone: bool = False
    statuses: dict[str, Object] = field(default_factory=dict)
    """The last status written, by company name."""
    while_applied: dict[str, Callable[[], object]] = field(default_factory=dict)
    """What happens while a child (by name) is applied: someone else's change, say."""
    versions: int = 0

    async def apply_owned(
        self,
        resource: Resource,
        desired: Object,
        observed: Object | None,
        *,
        dry_run: bool = False,
    ) -> Object:
        verb = "dry-run" if dry_run else "apply"
        self.log.append((verb, resource.kind, name(desired)))
        refused = self.refuse.get((verb, resource.kind, name(desired)))
        if refused is not None:
            raise InvalidError(422, {"reason": "Invalid", "message": refused})
        if not dry_run and name(desired) in self.while_applied:
            self.while_applied[name(desired)]()
        self.versions += 1
        meta = {**desired["metadata"], "uid": f"uid-{name(desired)}"}
        return {**desired, "metadata": {**meta, "resourceVersion": str(self.versions)}}

    async def apply_status(self, resource: Resource, obj: Object) -> Object:
        accepted = next(c for c in obj["status"]["conditions"] if c["type"] == "Accepted")
        self.log.append(("status", obj["metadata"]["name"], accepted["reason"]))
        if self.gone:
            raise NotFoundError(404)
        self.statuses[obj["metadata"]["name"]] = copy.deepcopy(obj["status"])
        return obj

    async def patch(
        self, resource: Resource, name: str, patch: Any, namespace: str | None = None
    ) -> Object:
        self.log.append(("patch", resource.kind, name, patch))
        return {"metadata": {"name": name, "namespace": namespace}}

    async def delete(
        self, resource: Resource, name: str, namespace: str | None = None, *, uid: str | None = None
    ) -> Object | None:
        self.log.append(("delete", resource.kind, name, uid))
        return None

    def record(
        self,
        regarding: Mapping[str, Any],
        type: Literal["Normal", "Warning"],
        reason: str,
        action: str,
        note: str,
    ) -> None:
        self.log.append(("event", name(regarding), type, reason, action))

    def requeue(self, request: Request, priority: int) -> None:
        self.log.append(("requeue", request.name, priority))

    def taken(self) -> list[Entry]:
        """The log so far, emptied."""
        taken, self.log = self.log, []
        return taken


@dataclass
class Decisions:
    """A recorded ``decide``: each call's ``render_files``, and the plan it returns."""

    plan: Callable[[bool], Plan]
    calls: list[bool] = field(default_factory=list)

    def __call__(self, observed: Observed, *, render_files: bool) -> Plan:
        self.calls.append(render_files)
        return self.plan(render_files)


def reconciled(company: Object, engine_class: Object | None, observed: Observed) -> Decisions:
    """The pure reconcile's plans for ``company`` (the controller's ``decide``)."""
    return Decisions(
        lambda files: reconcile(
            company,
            engine_class,
            {},
            observed,
            FACTS,
            now=NOW,
            token_factory=lambda: "token",
            render_files=files,
        )
    )


def recorded(plan: Plan) -> Decisions:
    return Decisions(lambda _: plan)


def make_writer(recording: Recording) -> CompanyWriter:
    writes: CompanyWrites = recording
    events: Announcer = recording
    return CompanyWriter(
        writes, events, ApplySlots(), children_priority=CHILDREN, requeue=recording.requeue
    )


async def admitted_writer(recording: Recording) -> CompanyWriter:
    """A writer for which the API server has admitted the class's children (another company's
    dry run passed), its log emptied."""
    writer, other = make_writer(recording), make_company("initech")
    await execute(writer, other, reconciled(other, make_class(), Observed()))
    assert ("dry-run", "StatefulSet", "initech-data") in recording.taken()
    return writer


async def execute(
    writer: CompanyWriter, company: Object, decide: Decide, observed: Observed | None = None
) -> Result | None:
    """One reconcile of ``company``, of the class :func:`make_class`."""
    return await writer.execute(company, make_class(), observed or Observed(), decide)


def with_status(company: Object, recording: Recording) -> Object:
    """The company as its next reconcile reads it: with the status last written."""
    return {**company, "status": copy.deepcopy(recording.statuses[name(company)])}


def children_of(plan: Plan, verb: str) -> list[Entry]:
    """The plan's applies as the writer makes them: every child, then the StatefulSets."""
    first = [a for a in plan.applies if a.resource != STATEFUL_SET]
    last = [a for a in plan.applies if a.resource == STATEFUL_SET]
    return [(verb, a.resource.kind, name(a.object)) for a in first + last]


# -- a new company: its verdict first, its children after ----------------------------------------


async def test_a_new_company_of_a_class_not_yet_admitted_dry_runs_its_children_then_hears() -> None:
    recording = Recording()
    writer, company = make_writer(recording), make_company()
    decide = reconciled(company, make_class(), Observed())
    assert await execute(writer, company, decide) is None
    assert decide.calls == [True], "decided once, its files written out for the dry run"
    plan = decide.plan(True)
    log = recording.taken()
    assert log[:-3] == children_of(plan, "dry-run")
    assert [entry[1] for entry in log[-5:-3]] == ["StatefulSet", "StatefulSet"]
    assert log[-3:] == [
        ("status", "acme", "Accepted"),
        ("event", "acme", "Normal", "Accepted", "Accept"),
        ("requeue", "acme", CHILDREN),
    ]


async def test_the_next_new_company_of_an_admitted_class_hears_its_verdict_alone() -> None:
    recording = Recording()
    writer = make_writer(recording)
    await execute(writer, make_company(), reconciled(make_company(), make_class(), Observed()))
    recording.taken()
    other = make_company("globex")
    decide = reconciled(other, make_class(), Observed())
    assert await execute(writer, other, decide) is None
    assert decide.calls == [False], "a verdict is decided without writing the files out"
    assert recording.taken() == [
        ("status", "globex", "Accepted"),
        ("event", "globex", "Normal", "Accepted", "Accept"),
        ("requeue", "globex", CHILDREN),
    ]


async def test_the_children_follow_their_announced_verdict_without_another_event() -> None:
    recording = Recording()
    writer, company = make_writer(recording), make_company()
    await execute(writer, company, reconciled(company, make_class(), Observed()))
    recording.taken()
    decide = reconciled(with_status(company, recording), make_class(), Observed())
    assert await execute(writer, with_status(company, recording), decide) is None
    assert decide.calls == [True], "the children's turn writes the files out"
    assert recording.taken() == children_of(decide.plan(True), "apply")


async def test_a_verdict_announced_but_not_yet_cached_is_written_again_but_not_announced() -> None:
    # The status echo has not reached the cache when the children's turn comes: the company
    # reads as new, its verdict is no news (it was announced), its children are written.
    recording = Recording()
    writer, company = make_writer(recording), make_company()
    await execute(writer, company, reconciled(company, make_class(), Observed()))
    recording.taken()
    decide = reconciled(company, make_class(), Observed())
    assert await execute(writer, company, decide) is None
    assert decide.calls == [True]
    assert recording.taken() == [
        *children_of(decide.plan(True), "apply"),
        ("status", "acme", "Accepted"),
    ]


async def test_once_the_children_are_written_nothing_waits_for_the_company() -> None:
    recording = Recording()
    writer, company = make_writer(recording), make_company()
    await execute(writer, company, reconciled(company, make_class(), Observed()))
    stored = with_status(company, recording)
    await execute(writer, stored, reconciled(stored, make_class(), Observed()))
    recording.taken()
    # Its children again (their echoes aside): backlog, no longer the children's turn.
    decide = reconciled(stored, make_class(), Observed())
    assert await execute(writer, stored, decide) is None
    assert decide.calls == [False]
    assert recording.taken() == [("requeue", "acme", CHILDREN)]


# -- the API server refuses a child --------------------------------------------------------------


async def test_a_dry_run_the_api_server_refuses_writes_the_refusal_and_no_child() -> None:
    recording = Recording(refuse={("dry-run", "StatefulSet", "acme-data"): REJECTION})
    writer, company = make_writer(recording), make_company()
    decide = reconciled(company, make_class(), Observed())
    assert await execute(writer, company, decide) == Result(requeue=True)
    assert decide.calls == [True], "the refusal is the plan's: nothing is decided again"
    log = recording.taken()
    assert log[:-2] == children_of(decide.plan(True), "dry-run")
    assert log[-2:] == [
        ("status", "acme", "InvalidClass"),
        ("event", "acme", "Warning", "InvalidClass", "Refuse"),
    ]
    accepted = recording.statuses["acme"]["conditions"][0]
    assert (accepted["type"], accepted["status"]) == ("Accepted", "False")
    assert accepted["message"].startswith(
        f"the API server refused a child of the company: {REJECTION}"
    )


async def test_a_child_refused_as_it_is_written_ends_the_wait_and_writes_the_refusal() -> None:
    recording = Recording()
    writer, company = make_writer(recording), make_company()
    await execute(writer, company, reconciled(company, make_class(), Observed()))
    recording.taken()
    recording.refuse[("apply", "Service", "acme-api")] = "Service is invalid: spec.ports"
    stored = with_status(company, recording)
    decide = reconciled(stored, make_class(), Observed())
    assert await execute(writer, stored, decide) == Result(requeue=True)
    assert decide.calls == [True]
    log = recording.taken()
    # The first wave is written whole, the StatefulSets never.
    assert log[:-2] == children_of(decide.plan(True), "apply")[:-2]
    assert log[-2:] == [
        ("status", "acme", "InvalidClass"),
        ("event", "acme", "Warning", "InvalidClass", "Refuse"),
    ]
    # The refusal superseded the verdict the children waited behind: nothing waits now (it
    # was their turn, their files would be written out).
    refused = with_status(company, recording)
    decide = recorded(Plan())
    assert await execute(writer, refused, decide) is None
    assert decide.calls == [False]
    assert recording.taken() == []


# -- plans built by hand -----------------------------------------------------------------------

ENV = Apply(SECRET, {"kind": "Secret", "metadata": {"name": "acme-env", "namespace": NAMESPACE}})
DATA = Apply(
    STATEFUL_SET,
    {"kind": "StatefulSet", "metadata": {"name": "acme-data", "namespace": NAMESPACE}},
)
CLAIM: Object = {
    "kind": "PersistentVolumeClaim",
    "metadata": {"name": "data-acme-data-0", "namespace": NAMESPACE},
}


def status(reason: str, generation: int, message: str | None = None) -> Object:
    accepted = "True" if reason == "Accepted" else "False"
    message = message or ("runs as asked" if accepted == "True" else "no")
    return {
        "observedGeneration": generation,
        "conditions": [
            {
                "type": "Accepted",
                "status": accepted,
                "reason": reason,
                "message": message,
                "observedGeneration": generation,
                "lastTransitionTime": "2026-01-01T12:00:00Z",
            }
        ],
    }


def accepted_company(generation: int, decided_for: int) -> Object:
    """A company of ``generation`` whose stored verdict, Accepted, was decided for
    ``decided_for``."""
    return {**make_company(generation=generation), "status": status("Accepted", decided_for)}


async def test_a_plan_with_nothing_to_write_writes_nothing() -> None:
    recording = Recording()
    writer = await admitted_writer(recording)
    decide = recorded(Plan())
    assert await execute(writer, accepted_company(1, 1), decide) is None
    assert decide.calls == [False]
    assert recording.log == []


async def test_a_change_that_keeps_the_verdict_is_written_whole_in_order() -> None:
    """A new generation (a suspended company, say) with the same verdict: its children, its
    deletes, the claim's annotations, then its status, and no Event."""
    recording = Recording()
    old_route = Delete(SERVICE, NAMESPACE, "acme-webhooks", "uid-route")
    plan = Plan(
        applies=[DATA, ENV],
        deletes=[old_route],
        status=status("Accepted", 2),
        claim_annotations={"crewlet.ai/highest-engine-version": "0.2.0"},
    )
    decide = recorded(plan)
    observed = Observed(data_claim=CLAIM)
    writer = await admitted_writer(recording)
    assert await execute(writer, accepted_company(2, 1), decide, observed) is None
    assert decide.calls == [True], "children written at once need their files"
    assert recording.log == [
        ("apply", "Secret", "acme-env"),
        ("apply", "StatefulSet", "acme-data"),
        ("delete", "Service", "acme-webhooks", "uid-route"),
        (
            "patch",
            PERSISTENT_VOLUME_CLAIM.kind,
            "data-acme-data-0",
            {"metadata": {"annotations": {"crewlet.ai/highest-engine-version": "0.2.0"}}},
        ),
        ("status", "acme", "Accepted"),
    ]


async def test_children_behind_a_current_verdict_are_backlog_until_their_turn() -> None:
    recording = Recording()
    writer, company = await admitted_writer(recording), accepted_company(1, 1)
    decide = recorded(Plan(applies=[ENV, DATA]))
    assert await execute(writer, company, decide) is None
    assert decide.calls == [False], "backlog is decided for less"
    assert recording.taken() == [("requeue", "acme", CHILDREN)]
    # Their turn: written, at whatever priority the company comes back.
    decide = recorded(Plan(applies=[ENV, DATA]))
    assert await execute(writer, company, decide) is None
    assert decide.calls == [True]
    assert recording.taken() == [
        ("apply", "Secret", "acme-env"),
        ("apply", "StatefulSet", "acme-data"),
    ]


async def test_a_changed_verdict_of_a_running_company_goes_first_with_its_event() -> None:
    recording = Recording()
    writer, company = make_writer(recording), accepted_company(2, 1)
    plan = Plan(applies=[DATA], status=status("Accepted", 2, "runs v0.3.0 as asked"))
    decide = recorded(plan)
    assert await execute(writer, company, decide) is None
    assert decide.calls == [True], "a class not admitted yet: its children are dry-run"
    assert recording.taken() == [
        ("dry-run", "StatefulSet", "acme-data"),
        ("status", "acme", "Accepted"),
        ("event", "acme", "Normal", "Accepted", "Accept"),
        ("requeue", "acme", CHILDREN),
    ]


async def test_a_refusal_without_children_is_written_with_its_event() -> None:
    recording = Recording()
    decide = recorded(Plan(status=status("ClassNotFound", 2)))
    assert await execute(make_writer(recording), accepted_company(2, 1), decide) is None
    assert recording.log == [
        ("status", "acme", "ClassNotFound"),
        ("event", "acme", "Warning", "ClassNotFound", "Refuse"),
    ]


async def test_a_company_deleted_meanwhile_hears_nothing_and_does_not_come_back() -> None:
    recording = Recording(gone=True)
    writer = make_writer(recording)
    decide = recorded(Plan(applies=[ENV], status=status("Accepted", 1)))
    assert await execute(writer, make_company(), decide) is None
    assert recording.log == [("dry-run", "Secret", "acme-env"), ("status", "acme", "Accepted")]


async def test_a_child_changed_while_it_was_written_brings_the_company_back() -> None:
    recording = Recording()
    writer, company = await admitted_writer(recording), accepted_company(2, 1)
    before = {**ENV.object, "metadata": {**ENV.object["metadata"], "resourceVersion": "90"}}
    after = {**ENV.object, "metadata": {**ENV.object["metadata"], "resourceVersion": "99"}}
    # Someone else's change comes while the write is on its way, and after it.
    recording.while_applied["acme-env"] = lambda: writer.child_echoes.update(before, after)
    plan = Plan(applies=[ENV], status=status("Accepted", 2))
    assert await execute(writer, company, recorded(plan)) is None
    assert recording.log == [
        ("apply", "Secret", "acme-env"),
        ("requeue", "acme", NORMAL_PRIORITY),
        ("status", "acme", "Accepted"),
    ]
