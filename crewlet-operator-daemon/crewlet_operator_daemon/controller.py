"""The thin controllers around the pure Crewlet reconcile: gather the inputs from the caches,
call :func:`crewlet_operator_daemon.company.reconcile`, and execute its plan.

What is cached, and why it stays small: Companies and EngineClasses (all of them: they are the
operator's own kinds), Namespaces (for ``allowedNamespaces``), and children only when they carry
``app.kubernetes.io/managed-by: crewlet-operator``, trimmed to the fields the operator applied.
Companies and children are kept compressed (a few hundred bytes each) and indexed by class and
by company, so a reconcile decodes only its own. Referenced Secrets are watched one by one
(:class:`~crewlet_operator.cache.named.NamedObjects`), never the cluster's Secrets wholesale.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import structlog

from crewlet_operator import (
    HTTP_ROUTE,
    INGRESS,
    LOW_PRIORITY,
    NAMESPACE,
    PERSISTENT_VOLUME_CLAIM,
    SECRET,
    Cache,
    CheckpointReads,
    Compact,
    EventRecorder,
    GenerationChanged,
    InformerOptions,
    InvalidError,
    LabelChanged,
    Manager,
    MetadataOnly,
    NamedObjects,
    NotFoundError,
    OwnStatusWrites,
    OwnWrites,
    Pages,
    PolicyRule,
    Request,
    Resource,
    RestartCheckpoint,
    Result,
    Scope,
    Stream,
    generation,
    is_being_deleted,
    is_controlled_by,
    keep_owned_fields_of,
    labels,
    name,
    namespace,
    namespaced_key,
    new_predicate_funcs,
    uid,
)
from crewlet_operator_daemon import hostnames, naming
from crewlet_operator_daemon.admission import Admissions
from crewlet_operator_daemon.api.v1alpha1 import COMPANY, ENGINE_CLASS
from crewlet_operator_daemon.checkpoint import ANNOTATION, LINES, code_version
from crewlet_operator_daemon.class_controller import (
    CLASS_INDEX,
    DIRECTORY_SYNC_TIMEOUT,
    SECRET_ANSWER_TIMEOUT,
    EngineClassController,
    class_name,
    class_of,
    read_references,
    write_status,
)
from crewlet_operator_daemon.company import reconcile
from crewlet_operator_daemon.hostnames import hostname
from crewlet_operator_daemon.indexes import (
    COMPANY_INDEX,
    HOSTNAME_INDEX,
    company_of_child,
    directory_entry,
    hostname_changed,
    hostname_of,
    namesake_identity,
    refused_for_others,
)
from crewlet_operator_daemon.plan import (
    CHILD_RESOURCES,
    Apply,
    ClusterFacts,
    Observed,
    Plan,
    child_resources,
)
from crewlet_operator_daemon.references import referenced_secrets
from crewlet_operator_daemon.slots import ApplySlots
from crewlet_operator_daemon.status import current_verdict, verdict
from crewlet_operator_daemon.steps import (
    Order,
    Steps,
    labelled_namesake,
    render_files,
    steps,
    waves,
)

log = structlog.get_logger("crewlet_operator.company")

LABELLED_NAMESAKE_RECHECK = 30.0
"""Seconds after which a company is reconciled again while an object labelled as the
operator's, but another company's, holds one of its names (labels copied by hand): no event
about that object reaches this company, and mapping every child's events by name as well
cost a sync 3 us a child."""
NAMESAKES_SYNC_TIMEOUT = 60.0
"""Seconds a reconcile waits for the first list of the objects that may hold its children's
names (they are listed beside the caches, at start)."""
COMPACT_PAGE = 100
LISTED_CHILDREN_PAGE = 500
"""Children listed at once, each as its JSON until read (a lazy list): a page of StatefulSets
is ~7 MiB of bytes at 10,000 companies, not dicts; client-go's page size."""
CHILDREN_PRIORITY = 2 * LOW_PRIORITY
"""The priority at which a company's children are applied once its verdict has been written
on its own. Verdicts come from creates and changes (normal priority), so a burst of new tenants
hears Accepted (or why not) first, at the pace the API server takes status writes; the queue's
aging still serves every company's children within 50 s of service behind later verdicts."""
VERDICT_WORKERS = 16
"""Company workers reserved for creates and changes (the queue's normal priority and above),
beside ``--max-concurrent-reconciles``, while the backlog's children hold every other worker.
The verdicts of 100 creates a second keep ``100 x`` a status write's seconds of them busy: 16
keep up with writes of up to 160 ms (bench/NOTES.md, "Workers reserved for verdicts")."""
REPORTING_CONTROLLER = "crewlet-operator"
"""The Events' ``reportingController``."""
Object = dict[str, Any]

WRITTEN_RESOURCES = frozenset(
    r.plural for r in (COMPANY, ENGINE_CLASS, *CHILD_RESOURCES, PERSISTENT_VOLUME_CLAIM)
)
"""Plurals of the kinds the operator writes without the Gateway API (its Lease aside): what a
resync must not touch."""


class CrewletControllers:
    """The Company and EngineClass controllers of one manager."""

    def __init__(self, manager: Manager, facts: ClusterFacts) -> None:
        self.manager = manager
        self.client = manager.client
        self.cache = manager.cache
        self.facts = facts
        self.children = child_resources(facts)
        self.secrets = NamedObjects(manager.client, SECRET)
        manager.add(self.secrets)  # the manager stops its watches
        self._apply_slots = ApplySlots()
        # The Events share the children's apply slots: they narrow with them while verdicts
        # wait (a verdict's Event can come a few seconds after its status).
        self.recorder = EventRecorder(
            manager.client, REPORTING_CONTROLLER, write_slots=self._apply_slots
        )
        manager.add(self.recorder)  # the manager waits for its Events on the way out
        self._announced: dict[str, Object] = {}
        """Company key to the verdict its children wait behind at :data:`CHILDREN_PRIORITY`
        (written ahead of them, or found written), until they are applied: its next reconcile
        applies them, whatever its priority, and the status echo may not have reached the cache
        when their turn comes."""
        self._admissions = Admissions()
        """The class generations whose children the API server has admitted by a dry run."""
        self.checkpoint = RestartCheckpoint(
            code_version(facts),
            annotation=ANNOTATION,
            named=[self.secrets],
            read_timeout=SECRET_ANSWER_TIMEOUT,
            lines=LINES,
        )
        """The restart checkpoint (crewlet_operator_daemon.checkpoint); :meth:`_reads` declares what
        it judges."""
        # Companies and children are held by the thousand and read a few at a time: compact,
        # and listed in small pages (a page of whole StatefulSets is ~4 MiB of dicts at 100, the
        # transient peak of a relist; memory freed after it is not all given back).
        company_options = InformerOptions(
            indexers={CLASS_INDEX: class_of, HOSTNAME_INDEX: hostname_of},
            lists=Stream(page_size=COMPACT_PAGE),
            storage=Compact(),
        )
        labelled = InformerOptions(
            scope=Scope(label_selector=naming.MANAGED_BY_SELECTOR),
            lists=Stream(page_size=COMPACT_PAGE),
            storage=Compact(),
        )
        # Children are cached as far as the operator applied them (and their status): what a
        # reconcile compares them with, pruned only when read (a restart's first pass reads
        # few). A start lists them in pages (half the API server's CPU of a stream), decodes
        # each only as far as its metadata, and lists their metadata first, which is all a
        # first pass over a checkpoint reads: the whole children follow it, or come when a
        # reconcile needs them (_whole_children). bench/NOTES.md, "Informer lists".
        owned = InformerOptions(
            scope=Scope(label_selector=naming.MANAGED_BY_SELECTOR),
            deferred_transform=keep_owned_fields_of(manager.field_manager),
            indexers={COMPANY_INDEX: company_of_child},
            lists=Pages(LISTED_CHILDREN_PAGE),
            storage=Compact(lazy_lists=True, metadata_first=True),
        )

        # Every other object of the children's kinds, by its metadata alone: a name a child
        # would take may be held by a tenant's own object, which the label-scoped caches never
        # see. The company then waits (crewlet_operator_daemon.inputs.refuse_taken_names), and hears
        # when the name is free.
        self.namesakes = Cache(manager.client)
        # Listed whole, not in pages: few objects match, and the API server answers a list
        # without a limit from its watch cache, where a paged one may read every object of
        # the kind from etcd to find them.
        unlabelled = InformerOptions(
            scope=Scope(label_selector=naming.NOT_MANAGED_SELECTOR),
            transform=namesake_identity,
            lists=Pages(0),
            storage=MetadataOnly(),
        )
        for resource in self.children:
            self.namesakes.informer(resource, unlabelled)
        manager.add(self.namesakes)
        self.route = HTTP_ROUTE if facts.gateway_api else INGRESS
        """The kind of a company's webhook route."""
        self.directory = self._directory(manager) if manager.member is not None else None
        """With sharding, every company and webhook route of the cluster, by what ranks a
        hostname's claimants and counts a class's companies: the caches hold this replica's
        share alone. None without: the caches hold every company."""
        self._keep_owned = keep_owned_fields_of(manager.field_manager)

        self.status_echoes = OwnStatusWrites()
        # The children's echoes of the operator's own applies would reconcile each company once
        # more to find what it just wrote (2.3 reconciles a company in a burst of 1,000 without
        # this, 1.5 with it).
        self.child_echoes = OwnWrites()
        builder = manager.controller("company").for_(
            COMPANY, predicates=[self.status_echoes], options=company_options
        )
        for resource in self.children:
            builder.owns(resource, predicates=[self.child_echoes], options=owned)
        # A class's status (its companies count) changes with every company: only its spec
        # concerns them, else one new company would reconcile every other of its class.
        builder.watches(ENGINE_CLASS, self._companies_of_class, predicates=[GenerationChanged()])
        builder.watches(NAMESPACE, self._companies_in_namespace, predicates=[LabelChanged()])
        builder.watches(PERSISTENT_VOLUME_CLAIM, self._company_of_labels, options=labelled)
        # A hostname freed (its holder deleted, or given another) goes to the next in line.
        hostname_peers = new_predicate_funcs(create=lambda _: False, update=hostname_changed)
        if self.directory is None:
            builder.watches(
                COMPANY, self._hostname_peers, predicates=[hostname_peers], options=company_options
            )
        # What it writes beyond its children, and the Secrets its classes name (watched one
        # by one): declared for the RBAC the chart is checked against (unit/test_chart_rbac.py).
        builder.with_rbac(
            PolicyRule.on(PERSISTENT_VOLUME_CLAIM, "patch"),
            PolicyRule.on(SECRET, "get", "list", "watch"),
            status=True,
            events=True,
        )
        # Namespaces take turns in the queue (the library's default fairness key): one tenant's
        # burst of new companies delays another tenant's verdict by one of its own.
        self.company_controller = (
            builder.with_options(reserved_workers=VERDICT_WORKERS)
            .with_checkpoint(self.checkpoint)
            .complete(self.reconcile_company)
        )
        self.secrets.add_handler(self.company_controller.enqueue_handler(self._companies_of_secret))
        if self.directory is not None:
            self.directory.informer(COMPANY).add_handler(
                self.company_controller.enqueue_handler(self._hostname_peers, [hostname_peers])
            )
        for resource in self.children:
            self.namesakes.informer(resource).add_handler(
                self.company_controller.enqueue_handler(self._companies_named_by)
            )
        self.class_controller = EngineClassController(
            manager, self.secrets, company_options, directory=self.directory
        )

    @property
    def companies(self) -> Cache:
        """Where every company of the cluster is found: the directory with sharding, else
        the caches."""
        return self.directory or self.cache

    def _directory(self, manager: Manager) -> Cache:
        """Every company and webhook route, trimmed (:func:`directory_entry`), for a sharded
        replica: a hostname is the cluster's, whichever replica its claimants are on."""
        directory = Cache(manager.client)
        directory.informer(
            COMPANY,
            InformerOptions(
                transform=directory_entry,
                indexers={CLASS_INDEX: class_of, HOSTNAME_INDEX: hostname_of},
                lists=Stream(page_size=COMPACT_PAGE),
                storage=Compact(),
            ),
        )
        directory.informer(
            self.route,
            InformerOptions(
                scope=Scope(label_selector=naming.MANAGED_BY_SELECTOR),
                transform=directory_entry,
                lists=Stream(page_size=COMPACT_PAGE),
                storage=Compact(),
            ),
        )
        manager.add(directory)
        return directory

    # -- mapping events to requests -----------------------------------------------------------
    def _companies_of_class(self, engine_class: Object) -> list[Request]:
        return [
            Request(*key.split("/", 1))
            for key in self.cache.keys(COMPANY, (CLASS_INDEX, name(engine_class)))
        ]

    def _companies_in_namespace(self, ns: Object) -> list[Request]:
        return [Request(namespace(c), name(c)) for c in self.cache.list(COMPANY, name(ns))]

    def _company_of_labels(self, obj: Object) -> list[Request]:
        company = labels(obj).get(naming.COMPANY_LABEL)
        return [Request(namespace(obj), company)] if company else []

    def _companies_named_by(self, obj: Object) -> list[Request]:
        """The companies one of whose children would take the name of ``obj``, an object not
        labelled as the operator's."""
        ns, store = namespace(obj), self.cache.informers[COMPANY].store
        return [
            Request(ns, company)
            for company in naming.companies_named_by(str(obj.get("kind")), name(obj))
            if namespaced_key(ns, company) in store
        ]

    def _hostname_peers(self, company: Object) -> list[Request]:
        """The other companies that ask for ``company``'s webhook hostname."""
        wanted, key = hostname(company), namespaced_key(namespace(company), name(company))
        if not wanted:
            return []
        return [
            Request(*peer.split("/", 1))
            for peer in self.companies.keys(COMPANY, (HOSTNAME_INDEX, wanted))
            if peer != key
        ]

    def _companies_of_secret(self, secret: Object) -> list[Request]:
        key = (namespace(secret) or "", name(secret))
        requests: list[Request] = []
        for engine_class in self.cache.list(ENGINE_CLASS):
            if key in referenced_secrets(engine_class):
                requests += self._companies_of_class(engine_class)
        return requests

    # -- the Company ----------------------------------------------------------------------------
    async def observe(self, company: Object, engine_class: Object | None) -> Observed:
        """Read everything the reconcile needs from the caches."""
        ns, company_name = namespace(company) or "", name(company)
        children: dict[tuple[str, str], Object] = {}
        for resource in self.children:
            key = f"{ns}/{company_name}"
            await self._whole_children(resource, key)
            cached = self.cache.list(resource, index=(COMPANY_INDEX, key))
            # The children this process applied last may not have reached the cache yet.
            for child in self.child_echoes.newest(resource.kind, cached, ns):
                if company_of_child(child) == [key]:
                    children[(resource.kind, name(child))] = child
        namesakes = await self._namesakes(company, children)
        secrets: dict[tuple[str, str], Object | None] = {}
        unreadable: dict[tuple[str, str], str] = {}
        if engine_class is not None:
            secrets, unreadable = await read_references(self.secrets, engine_class)
        claim = self.cache.get(PERSISTENT_VOLUME_CLAIM, naming.data_claim(company_name), ns)
        return Observed(
            children=children,
            namesakes=namesakes,
            secrets=secrets,
            unreadable_secrets=unreadable,
            data_claim=claim,
            hostname_holder=await self._hostname_holder(company),
        )

    async def _namesakes(
        self, company: Object, children: dict[tuple[str, str], Object]
    ) -> dict[tuple[str, str], Object]:
        """The objects that hold the names of ``company``'s children without being labelled as
        its children: another's (by their metadata), or its own whose labels were taken off,
        which go to ``children`` whole (read now: they are few) so that an apply puts the
        labels back."""
        ns, company_name = namespace(company) or "", name(company)
        await self.namesakes.wait_for_sync(NAMESAKES_SYNC_TIMEOUT)
        found: dict[tuple[str, str], Object] = {}
        for resource in self.children:
            labelled = self.cache.informers[resource].store
            unlabelled = self.namesakes.informers[resource].store
            for child_name in naming.child_names(company_name, resource.kind):
                key, stored = (resource.kind, child_name), namespaced_key(ns, child_name)
                if key in children:
                    continue
                if stored in labelled:
                    holder = labelled.known(stored)
                elif (held := unlabelled.get(stored)) is not None:
                    holder = held
                else:
                    continue
                if not is_controlled_by(holder, company):
                    found[key] = holder
                    continue
                whole = await self.client.get_or_none(resource, child_name, ns)
                if whole is not None and is_controlled_by(whole, company):
                    children[key] = self._keep_owned(whole)
        return found

    async def _hostname_holder(self, company: Object) -> str | None:
        """The Company that holds ``company``'s webhook hostname, when another one does
        (:func:`crewlet_operator_daemon.hostnames.holder`, from the claimants and their routes)."""
        wanted = hostname(company)
        if not wanted:
            return None
        if self.directory is not None:
            await self.directory.wait_for_sync(DIRECTORY_SYNC_TIMEOUT)
        claimants = self.companies.list(COMPANY, index=(HOSTNAME_INDEX, wanted))
        if len(claimants) < 2:
            return None
        routes: dict[str, Object | None] = {}
        for claimant in claimants:
            key = namespaced_key(namespace(claimant), name(claimant))
            if self.directory is None:
                await self._whole_children(self.route, key)
            routes[key] = self.companies.get(
                self.route, naming.webhook_route(name(claimant)), namespace(claimant)
            )
        return hostnames.holder(company, claimants, routes)

    async def _whole_children(self, resource: Resource, company: str) -> None:
        """Wait, if need be, until the cache holds ``company``'s children of ``resource`` whole:
        a start lists them by their metadata first (the whole ones follow its first pass, or
        come now that a reconcile asks). A company with no children yet (a new one) waits for
        nothing."""
        informer = self.cache.informers[resource]
        if informer.has_whole:
            return
        keys = informer.store.keys_by_index(COMPANY_INDEX, company)
        if any(informer.store.metadata_only(k) for k in keys):
            await informer.wait_for_whole()

    async def reconcile_company(self, request: Request) -> Result | None:
        """Converge one Company."""
        company = self.cache.get(COMPANY, request.name, request.namespace)
        if company is None:
            self._announced.pop(str(request), None)
            return None  # deleted: owner references garbage-collect the children; claims stay
        engine_class = self.cache.get(ENGINE_CLASS, class_name(company))
        ns = self.cache.get(NAMESPACE, request.namespace or "") or {}
        if is_being_deleted(ns):
            return None  # the namespace controller is deleting everything in it: do not fight it
        if await self.checkpoint.unchanged(
            request, lambda: self._reads(request, company, engine_class)
        ):
            return None
        observed = await self.observe(company, engine_class)
        decide = functools.partial(reconcile, company, engine_class, labels(ns), facts=self.facts)
        result = await self.execute(company, engine_class, observed, decide)
        if result is None and labelled_namesake(company, observed):
            return Result(requeue_after=LABELLED_NAMESAKE_RECHECK)
        return result

    # -- the restart checkpoint (crewlet_operator_daemon.checkpoint) ----------------------------
    def _reads(
        self, request: Request, company: Object, engine_class: Object | None
    ) -> CheckpointReads:
        """What a Company's reconcile reads, for the restart checkpoint to judge: the Company,
        its class and namespace, what a checkpoint cannot cover (:meth:`_contested`), its data
        claim, its children and the Secrets its class references."""
        key = str(request)
        claim = namespaced_key(request.namespace, naming.data_claim(request.name))
        return CheckpointReads(
            objects=[
                (COMPANY, key),
                (ENGINE_CLASS, class_name(company)),
                (NAMESPACE, request.namespace or ""),
            ],
            uncovered="contested" if self._contested(company) else None,
            optional=[(PERSISTENT_VOLUME_CLAIM, claim)],
            indexed=[(resource, COMPANY_INDEX, key) for resource in self.children],
            named=[
                (self.secrets, *ref)
                for ref in sorted(
                    referenced_secrets(engine_class) if engine_class is not None else ()
                )
            ],
        )

    def _contested(self, company: Object) -> bool:
        """Whether what the company may do hangs on objects not its own, which a checkpoint
        does not cover: it was refused for one, another company asks for its hostname, or an
        object not labelled as its child holds one of its children's names."""
        if refused_for_others(company):
            return True
        wanted = hostname(company)
        if wanted and len(self.companies.keys(COMPANY, (HOSTNAME_INDEX, wanted))) > 1:
            return True
        ns, company_name = namespace(company) or "", name(company)
        return any(
            self.namesakes.get(resource, child_name, ns) is not None
            for resource in self.children
            for child_name in naming.child_names(company_name, resource.kind)
        )

    async def execute(
        self,
        company: Object,
        engine_class: Object | None,
        observed: Observed,
        decide: Callable[..., Plan],
    ) -> Result | None:
        """Decide the company's plan and write what :func:`crewlet_operator_daemon.steps.steps` says
        to write of it now, and nothing else; ``decide(observed, render_files=...)`` is the pure
        reconcile over everything but what was observed.

        Each change of verdict is an Event on the Company, so ``kubectl describe company`` says
        why. While many verdicts are on their way, the children's applies narrow
        (:class:`~crewlet_operator_daemon.slots.ApplySlots`): the verdicts wait on the same API
        server.

        A child the API server refuses (a class field only it can judge, such as a toleration
        or a storage class name) is an input of the reconcile like any other refusal
        (:attr:`~crewlet_operator_daemon.plan.Observed.rejection`), and leaves nothing half-written:
        until one company of a class's generation has been admitted (by a dry run or by being
        written), its children are first applied as a dry run, before any verdict. The
        company is tried again after a growing backoff: some refusals pass by themselves (a
        Service's "failed to allocate IP" while etcd is away is a 422 too), and no event would
        announce it.
        """
        key = f"{namespace(company)}/{name(company)}"
        request = Request(namespace(company), name(company))
        stored, current = verdict(company.get("status")), current_verdict(company)
        announced = self._announced.get(key)
        plan = decide(observed, render_files=render_files(announced))
        step = steps(
            plan,
            stored=stored,
            current=current,
            announced=announced,
            admitted=self._admitted(engine_class),
        )
        if step.order is Order.LATER:
            self._remember(key, step)
            self.company_controller.queue.add(request, CHILDREN_PRIORITY)
            return None
        if step.needs_files:
            plan = decide(observed)
        with self._apply_slots.verdict() if step.news else contextlib.nullcontext():
            retry: Result | None = None
            try:
                await self._admit(plan, engine_class)
                if step.order is Order.ALL and await self._write_children(plan):
                    # A child changed while it was written: look again, as its event would have.
                    self.company_controller.queue.add(request)
            except InvalidError as refused:
                retry = Result(requeue=True)
                # The refusal supersedes the verdict the children waited behind.
                plan = decide(dataclasses.replace(observed, rejection=refused.message))
                step = steps(plan, stored=stored, current=current, announced=None, admitted=False)
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
            await write_status(self.client, COMPANY, meta, plan.status)
            if step.news and decided is not None:
                self._announce(company, decided)
        if step.order is Order.VERDICT_FIRST:
            self._remember(key, step)
            self.company_controller.queue.add(
                Request(namespace(company), name(company)), CHILDREN_PRIORITY
            )

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
