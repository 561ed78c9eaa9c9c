"""How a Company's plan is written: what :func:`crewlet_operator_daemon.steps.steps` says to
write now of it, in the order it says, through the API server's admission first when the
class's children have not been admitted yet, with an Event for each new verdict. The decisions
are the pure modules' (``company``, ``steps``, ``admission``); this is their I/O, through the
few writes it makes (:class:`CompanyWrites`, :class:`Announcer`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping
from typing import Any, Literal, Protocol

from crewlet_operator import (
    NORMAL_PRIORITY,
    PERSISTENT_VOLUME_CLAIM,
    InvalidError,
    NotFoundError,
    Request,
    Resource,
    Result,
)
from crewlet_operator import KubeObject as Object
from crewlet_operator.objects import generation, name, namespace, uid
from crewlet_operator.writes import OwnStatusWrites, OwnWrites
from crewlet_operator_daemon.admission import Admissions
from crewlet_operator_daemon.api.v1alpha1 import COMPANY
from crewlet_operator_daemon.class_controller import StatusWrites, write_status
from crewlet_operator_daemon.plan import Apply, Observed, Plan
from crewlet_operator_daemon.slots import ApplySlots
from crewlet_operator_daemon.status import current_verdict, verdict
from crewlet_operator_daemon.steps import (
    Order,
    Steps,
    after_rejection,
    render_files,
    steps,
    waves,
)

Requeue = Callable[[Request, int], None]
"""Send a request back to the Company controller's queue, at a priority."""


class Decide(Protocol):
    """The pure reconcile of one company over everything but what was observed
    (:func:`crewlet_operator_daemon.company.reconcile`, its other inputs bound)."""

    def __call__(self, observed: Observed, *, render_files: bool) -> Plan: ...


class CompanyWrites(StatusWrites, Protocol):
    """The writes a :class:`CompanyWriter` makes (a :class:`~crewlet_operator.Client`'s): its
    children's applies and their dry runs, their deletes, the data claim's annotations and the
    company's status."""

    async def apply_owned(
        self,
        resource: Resource,
        desired: Object,
        observed: Object | None,
        *,
        dry_run: bool = False,
    ) -> Object: ...

    async def delete(
        self, resource: Resource, name: str, namespace: str | None = None, *, uid: str | None = None
    ) -> Object | None: ...

    async def patch(
        self, resource: Resource, name: str, patch: Any, namespace: str | None = None
    ) -> Object: ...


class Announcer(Protocol):
    """Where a :class:`CompanyWriter` tells a new verdict (an
    :class:`~crewlet_operator.EventRecorder`)."""

    def record(
        self,
        regarding: Mapping[str, Any],
        type: Literal["Normal", "Warning"],
        reason: str,
        action: str,
        note: str,
    ) -> None: ...


class CompanyWriter:
    """Writes the Company controller's plans (:meth:`execute`), and keeps what a company's
    children wait behind between its reconciles."""

    def __init__(
        self,
        client: CompanyWrites,
        recorder: Announcer,
        apply_slots: ApplySlots,
        *,
        children_priority: int,
        requeue: Requeue,
    ) -> None:
        self.client = client
        self.recorder = recorder
        self._apply_slots = apply_slots
        self._children_priority = children_priority
        self._requeue = requeue
        self.status_echoes = OwnStatusWrites()
        # The children's echoes of the operator's own applies would reconcile each company once
        # more to find what it just wrote (2.3 reconciles a company in a burst of 1,000 without
        # this, 1.5 with it).
        self.child_echoes = OwnWrites()
        self._announced: dict[str, Object] = {}
        """Company key to the verdict its children wait behind at the children's priority
        (written ahead of them, or found written), until they are applied: its next reconcile
        applies them, whatever its priority, and the status echo may not have reached the cache
        when their turn comes."""
        self._admissions = Admissions()
        """The class generations whose children the API server has admitted by a dry run."""

    def forget(self, key: str) -> None:
        """The company ``namespace/name`` is gone: nothing waits for it any more."""
        self._announced.pop(key, None)

    def _queue(self, request: Request, priority: int = NORMAL_PRIORITY) -> None:
        self._requeue(request, priority)

    async def execute(
        self,
        company: Object,
        engine_class: Object | None,
        observed: Observed,
        decide: Decide,
    ) -> Result | None:
        """Decide the company's plan, once, and write what
        :func:`crewlet_operator_daemon.steps.steps` says to write of it now, and nothing else;
        ``decide(observed, render_files=...)`` is the pure reconcile over everything but what was
        observed, whose files are written out as
        :func:`crewlet_operator_daemon.steps.render_files` settles first.

        Each change of verdict is an Event on the Company, so ``kubectl describe company`` says
        why. While many verdicts are on their way, the children's applies narrow
        (:class:`~crewlet_operator_daemon.slots.ApplySlots`): the verdicts wait on the same API
        server.

        A child the API server refuses (a class field only it can judge, such as a toleration
        or a storage class name) refuses the company like any other refusal, as the plan says
        (:attr:`~crewlet_operator_daemon.plan.Plan.rejected`,
        :func:`~crewlet_operator_daemon.steps.after_rejection`), and leaves nothing
        half-written: until one company of a class's generation has been admitted (by a dry run
        or by being written), its children are first applied as a dry run, before any verdict.
        The company is tried again after a growing backoff: some refusals pass by themselves (a
        Service's "failed to allocate IP" while etcd is away is a 422 too), and no event would
        announce it.
        """
        key = f"{namespace(company)}/{name(company)}"
        request = Request(namespace(company), name(company))
        stored, current = verdict(company.get("status")), current_verdict(company)
        announced = self._announced.get(key)
        admitted = self._admitted(engine_class)
        files = render_files(stored=stored, current=current, announced=announced, admitted=admitted)
        plan = decide(observed, render_files=files)
        step = steps(plan, stored=stored, current=current, announced=announced, admitted=admitted)
        assert not step.needs_files, "a plan decided without the files its steps write"
        if step.order is Order.LATER:
            self._remember(key, step)
            self._queue(request, self._children_priority)
            return None
        with self._apply_slots.verdict() if step.news else contextlib.nullcontext():
            retry: Result | None = None
            try:
                await self._admit(plan, engine_class)
                if step.order is Order.ALL and await self._write_children(plan):
                    # A child changed while it was written: look again, as its event would have.
                    self._queue(request)
            except InvalidError as refused:
                retry = Result(requeue=True)
                plan, step = after_rejection(plan, refused.message, stored=stored)
            await self._write_step(company, observed, plan, step)
            return retry

    async def _write_step(
        self, company: Object, observed: Observed, plan: Plan, step: Steps
    ) -> None:
        """Write what is left of ``step`` once its children are written: the claim's
        annotations and the status (with an Event when it is news), and send the company back
        to the queue when its children come later."""
        key = f"{namespace(company)}/{name(company)}"
        if step.announced is None:
            self._remember(key, step)
        if step.order is Order.ALL and plan.claim_annotations and observed.data_claim is not None:
            await self.client.patch(
                PERSISTENT_VOLUME_CLAIM,
                name(observed.data_claim),
                {"metadata": {"annotations": plan.claim_annotations}},
                namespace(observed.data_claim),
            )
        decided = verdict(plan.status)
        if plan.status is not None:
            meta = {"name": name(company), "namespace": namespace(company)}
            # Told first: the echo can beat the write's answer to this process.
            self.status_echoes.wrote(key, plan.status)
            if not await write_status(self.client, COMPANY, meta, plan.status):
                return  # deleted meanwhile: nothing to announce, nothing to come back for
            if step.news and decided is not None:
                self._announce(company, decided)
        if step.order is Order.VERDICT_FIRST:
            self._remember(key, step)
            self._queue(Request(namespace(company), name(company)), self._children_priority)

    def _remember(self, key: str, step: Steps) -> None:
        """Keep the verdict the company's children wait behind, or forget it."""
        if step.announced is None:
            self._announced.pop(key, None)
        else:
            self._announced[key] = step.announced

    def _announce(self, company: Object, decided: Object) -> None:
        """An Event for a new verdict: Normal when accepted, a Warning with the reason when
        not. Its note is the condition's message, which never holds a Secret's value."""
        accepted = decided.get("status") == "True"
        self.recorder.record(
            company,
            "Normal" if accepted else "Warning",
            str(decided.get("reason")),
            "Accept" if accepted else "Refuse",
            str(decided.get("message") or ""),
        )

    def _admitted(self, engine_class: Object | None) -> bool:
        """Whether the children of a company of this class's generation passed a dry run."""
        return engine_class is not None and self._admissions.admitted(
            uid(engine_class) or "", generation(engine_class)
        )

    async def _admit(self, plan: Plan, engine_class: Object | None) -> None:
        """Dry-run the plan's applies unless the API server has already admitted the children
        of a company of the class's generation. Once is enough: what it can refuse comes from
        the class, and the verdicts of a burst come before any company's children are written
        (else each would be dry-run: 13 requests more a company); the companies of a burst
        that need it at once wait for the first one's
        (:class:`~crewlet_operator_daemon.admission.Admissions`).

        Raises:
            InvalidError: the API server refused a child; nothing was written.
        """
        if not plan.applies:
            return

        async def dry_run() -> None:
            assert plan.complete, "children dry-run from a plan whose files were left out"
            for wave in waves(plan.applies):
                await self._apply_all(wave, dry_run=True)

        if engine_class is None:
            await dry_run()
        else:
            await self._admissions.admit(uid(engine_class) or "", generation(engine_class), dry_run)

    async def _write_children(self, plan: Plan) -> bool:
        """Apply and delete the plan's children (admitted by :meth:`_admit`): whether one of
        them changed while it was written (see :meth:`_apply_all`)."""
        assert plan.complete, "children applied from a plan whose files were left out"
        missed = False
        for wave in waves(plan.applies):
            missed |= await self._apply_all(wave)
        for delete in plan.deletes:
            with contextlib.suppress(NotFoundError):
                await self.client.delete(
                    delete.resource, delete.name, delete.namespace, uid=delete.uid
                )
        return missed

    async def _apply_all(self, applies: list[Apply], dry_run: bool = False) -> bool:
        """Apply each at once: a company's children are independent of one another, and one
        at a time a burst is bound by the round trips, not by the API server. Whether a change
        to one of them came while it was written (the company needs another reconcile).

        Raises:
            APIError: the first refusal, once every apply has been answered.
        """
        with contextlib.ExitStack() as held:
            writes = (
                []
                if dry_run
                else [held.enter_context(self.child_echoes.writing(a.object)) for a in applies]
            )
            answers = await asyncio.gather(
                *(self._apply(a, dry_run) for a in applies), return_exceptions=True
            )
            for write, answer in zip(writes, answers, strict=False):  # no writes in a dry run
                if not isinstance(answer, BaseException):
                    write.done(answer)
        missed = any(write.reconcile_again for write in writes)
        for answer in answers:
            if isinstance(answer, BaseException):
                raise answer
        return missed

    async def _apply(self, apply: Apply, dry_run: bool) -> Object:
        """Apply one child when a slot is free (:class:`~crewlet_operator_daemon.slots.ApplySlots`:
        fewer while verdicts wait). Status writes and the admission's dry runs take none: they are
        on the verdict's path, which never queues behind a backlog's children."""
        if dry_run:
            return await self.client.apply_owned(
                apply.resource, apply.object, apply.existing, dry_run=True
            )
        async with self._apply_slots:
            return await self.client.apply_owned(apply.resource, apply.object, apply.existing)
