"""The thin controllers around the pure Crewlet reconcile: gather the inputs from the caches,
call :func:`reconcilers.company.reconcile`, and execute its plan.

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
import time
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
    STATEFUL_SET,
    Cache,
    Compact,
    EventRecorder,
    ForbiddenError,
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
    Request,
    Resource,
    Result,
    Scope,
    Stream,
    UnauthorizedError,
    find_condition,
    generation,
    is_being_deleted,
    is_controlled_by,
    keep_owned_fields_of,
    labels,
    name,
    namespace,
    namespaced_key,
    new_predicate_funcs,
    resource_version,
    uid,
)
from reconcilers import hostnames, naming
from reconcilers.admission import Admissions
from reconcilers.api.v1alpha1 import COMPANY, ENGINE_CLASS
from reconcilers.checkpoint import MAX_UNSETTLED, Checkpoint, code_version
from reconcilers.company import reconcile, refusal_plan
from reconcilers.engineclass import class_status
from reconcilers.hostnames import hostname
from reconcilers.inputs import HOSTNAME_TAKEN, INVALID_CLASS, NAME_TAKEN
from reconcilers.plan import (
    CHILD_RESOURCES,
    Apply,
    ClusterFacts,
    Observed,
    Plan,
    child_resources,
)
from reconcilers.references import referenced_secrets
from reconcilers.slots import ApplySlots
from reconcilers.status import current_verdict, verdict

log = structlog.get_logger("crewlet_operator.company")

CLASS_INDEX = "class"
COMPANY_INDEX = "company"
HOSTNAME_INDEX = "hostname"
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
SECRET_ANSWER_TIMEOUT = 10.0
"""Seconds a reconcile waits for a newly watched Secret's first answer before it retries."""
CHILDREN_PRIORITY = 2 * LOW_PRIORITY
"""The priority at which a company's children are applied once its verdict has been written
on its own. Verdicts come from creates and changes (normal priority), so a burst of new tenants
hears Accepted (or why not) first, at the pace the API server takes status writes; the queue's
aging still serves every company's children within 50 s of service behind later verdicts."""
VERDICT_WORKERS = 16
"""Company workers reserved for creates and changes (the queue's normal priority and above),
beside ``--max-concurrent-reconciles``, while the backlog's children hold every other worker.
The verdicts of 100 creates a second keep ``100 x`` a status write's seconds of them busy: 5
at the ~50 ms a write takes under a backlog's load; 16 keep up with writes of up to 160 ms.
Measured with 8 and then 16 (the bench's latency figure, one full run each): a pile-up of
verdicts late by up to 2.2 s and 1.8 s, about 20 s into the load, while the creates themselves
were answered within 0.25 and 0.37 s; so what the verdicts wait on then is not a free worker,
but the API server's garbage collection, which slows its status writes tenfold for about 3 s
(docs/scaling.md). 64 drained such a pile-up three times faster but wrote its latest verdict no
sooner; measured again with the Events and the applies bounded (reconcilers.slots), 64 took the
verdicts of a collection at once where 16 queued them for up to 0.44 s, but each of their
writes then took twice as long (0.5 s against 0.25 s): the same time from create to verdict."""
REPORTING_CONTROLLER = "crewlet-operator"
"""The Events' ``reportingController``."""
Object = dict[str, Any]

WRITTEN_RESOURCES = frozenset(
    r.plural for r in (COMPANY, ENGINE_CLASS, *CHILD_RESOURCES, PERSISTENT_VOLUME_CLAIM)
)
"""Plurals of the kinds the operator writes without the Gateway API (its Lease aside): what a
resync must not touch."""


def _company_of_child(child: Object) -> list[str]:
    # Read in place (labels() copies): an index function runs for each of a sync's children.
    company = ((child.get("metadata") or {}).get("labels") or {}).get(naming.COMPANY_LABEL)
    return [f"{namespace(child)}/{company}"] if company else []


def _waves(applies: list[Apply]) -> list[list[Apply]]:
    """The plan's applies in two waves: every child, then the StatefulSets, which start the
    engine and mount the others (a refused child is met before anything runs)."""
    workloads = [a for a in applies if a.resource == STATEFUL_SET]
    return [w for w in ([a for a in applies if a.resource != STATEFUL_SET], workloads) if w]


def _class_name(company: Object) -> str:
    """The EngineClass a Company names, as stored ("" when it names none)."""
    return str((company.get("spec") or {}).get("className") or "")


def _class_changed(old: Object, new: Object) -> bool:
    return _class_name(old) != _class_name(new)


def _class_of(company: Object) -> list[str]:
    class_name = _class_name(company)
    return [class_name] if class_name else []


def _hostname_of(company: Object) -> list[str]:
    name = hostname(company)
    return [name] if name else []


def _hostname_changed(old: Object, new: Object) -> bool:
    return hostname(old) != hostname(new)


def _identity(obj: Object) -> Object:
    """What a namesake is kept as: who it is and who controls it."""
    meta = obj.get("metadata") or {}
    return {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "metadata": {k: meta[k] for k in _NAMESAKE_METADATA if k in meta},
    }


_NAMESAKE_METADATA = ("name", "namespace", "uid", "resourceVersion", "ownerReferences")
_CONTESTED = frozenset({NAME_TAKEN, HOSTNAME_TAKEN})
"""Refusals that hang on other objects than the company's own (a restart judges them again)."""


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
        self._counted: dict[str, float] = {}
        """EngineClass name to when its status was last written (monotonic seconds)."""
        self.version = code_version(facts)
        """What a restart checkpoint must have been written by (reconcilers.checkpoint)."""
        self._resumed: Checkpoint | None = None
        self._resume_judged = False
        manager.options.lease_annotations = self.checkpoint_annotations
        # Companies and children are held by the thousand and read a few at a time: compact,
        # and listed in small pages (a page of whole StatefulSets is ~4 MiB of dicts at 100, the
        # transient peak of a relist; memory freed after it is not all given back).
        company_options = InformerOptions(
            indexers={CLASS_INDEX: _class_of, HOSTNAME_INDEX: _hostname_of},
            lists=Stream(page_size=COMPACT_PAGE),
            storage=Compact(),
        )
        labelled = InformerOptions(
            scope=Scope(label_selector=naming.MANAGED_BY_SELECTOR),
            lists=Stream(page_size=COMPACT_PAGE),
            storage=Compact(),
        )
        # Children are cached as far as the operator applied them (and their status): what a
        # reconcile compares them with. Pruning was the dearest step of a sync (a sixth of its
        # CPU over 130,000 children), and a restart's first pass reads few of them: deferred.
        # For the same reason a start decodes a listed child only as far as its metadata, and
        # lists them in pages, which cost the API server half the CPU of a stream (see
        # crewlet_operator.cache.Stream): a restart over 3,000 companies synced in 4.2 s against
        # 4.9 (four alternated pairs), with 0.5 s less of the operator's CPU. And a start lists
        # their metadata first, which is all a first pass over a checkpoint reads: the whole
        # children are listed after it, or when a reconcile needs them (_whole_children).
        owned = InformerOptions(
            scope=Scope(label_selector=naming.MANAGED_BY_SELECTOR),
            deferred_transform=keep_owned_fields_of(manager.client.field_manager),
            indexers={COMPANY_INDEX: _company_of_child},
            lists=Pages(LISTED_CHILDREN_PAGE),
            storage=Compact(lazy_lists=True, metadata_first=True),
        )

        # Every other object of the children's kinds, by its metadata alone: a name a child
        # would take may be held by a tenant's own object, which the label-scoped caches never
        # see. The company then waits (reconcilers.inputs.refuse_taken_names), and hears when
        # the name is free.
        self.namesakes = Cache(manager.client)
        # Listed whole, not in pages: few objects match, and the API server answers a list
        # without a limit from its watch cache, where a paged one may read every object of
        # the kind from etcd to find them.
        unlabelled = InformerOptions(
            scope=Scope(label_selector=naming.NOT_MANAGED_SELECTOR),
            transform=_identity,
            lists=Pages(0),
            storage=MetadataOnly(),
        )
        for resource in self.children:
            self.namesakes.informer(resource, unlabelled)
        manager.add(self.namesakes)
        self._keep_owned = keep_owned_fields_of(manager.client.field_manager)

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
        builder.watches(
            COMPANY,
            self._hostname_peers,
            predicates=[new_predicate_funcs(create=lambda _: False, update=_hostname_changed)],
            options=company_options,
        )
        self.company_controller = builder.with_options(reserved_workers=VERDICT_WORKERS).complete(
            self.reconcile_company
        )
        self.secrets.add_handler(self.company_controller.enqueue_handler(self._companies_of_secret))
        for resource in self.children:
            self.namesakes.informer(resource).add_handler(
                self.company_controller.enqueue_handler(self._companies_named_by)
            )
        self.class_controller = (
            manager.controller("engineclass")
            .for_(ENGINE_CLASS)
            .watches(
                COMPANY,
                lambda c: [Request(None, n) for n in _class_of(c)],
                # A class counts the companies that name it: a company's status write, one or
                # more for each, changes no count.
                predicates=[new_predicate_funcs(update=_class_changed)],
                options=company_options,
            )
            .complete(self.reconcile_class)
        )

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
            for peer in self.cache.keys(COMPANY, (HOSTNAME_INDEX, wanted))
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
    async def read_references(
        self, engine_class: Object
    ) -> tuple[dict[tuple[str, str], Object | None], dict[tuple[str, str], str]]:
        """Every Secret the class references, by ``(namespace, name)`` (None when it does not
        exist), and those the operator may not read, with the API server's reason."""
        secrets: dict[tuple[str, str], Object | None] = {}
        unreadable: dict[tuple[str, str], str] = {}
        for ref in sorted(referenced_secrets(engine_class)):
            try:
                secrets[ref] = await self.secrets.read(*ref, timeout=SECRET_ANSWER_TIMEOUT)
            except (ForbiddenError, UnauthorizedError) as denied:
                unreadable[ref] = denied.message or denied.reason
        return secrets, unreadable

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
                if _company_of_child(child) == [key]:
                    children[(resource.kind, name(child))] = child
        namesakes = await self._namesakes(company, children)
        secrets: dict[tuple[str, str], Object | None] = {}
        unreadable: dict[tuple[str, str], str] = {}
        if engine_class is not None:
            secrets, unreadable = await self.read_references(engine_class)
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
        (:func:`reconcilers.hostnames.holder`, from the claimants and their routes)."""
        wanted = hostname(company)
        if not wanted:
            return None
        claimants = self.cache.list(COMPANY, index=(HOSTNAME_INDEX, wanted))
        if len(claimants) < 2:
            return None
        route = HTTP_ROUTE if self.facts.gateway_api else INGRESS
        routes: dict[str, Object | None] = {}
        for claimant in claimants:
            key = namespaced_key(namespace(claimant), name(claimant))
            await self._whole_children(route, key)
            routes[key] = self.cache.get(
                route, naming.webhook_route(name(claimant)), namespace(claimant)
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
        engine_class = self.cache.get(ENGINE_CLASS, _class_name(company))
        ns = self.cache.get(NAMESPACE, request.namespace or "") or {}
        if is_being_deleted(ns):
            return None  # the namespace controller is deleting everything in it: do not fight it
        if await self._unchanged_since_checkpoint(request, company, engine_class, ns):
            log.debug("unchanged since the checkpoint")
            return None
        ns_labels = labels(ns)
        observed = await self.observe(company, engine_class)
        # A new company's verdict is written ahead of its children: its files are written out
        # when they are applied (execute completes the plan), not for the verdict. A company
        # whose children come next (its verdict told) is decided whole at once.
        plan = reconcile(
            company,
            engine_class,
            ns_labels,
            observed,
            self.facts,
            render_files=str(request) in self._announced,
        )
        result = await self.execute(
            company,
            engine_class,
            plan,
            observed,
            lambda: reconcile(company, engine_class, ns_labels, observed, self.facts),
        )
        if result is None and any(
            labels(holder).get(naming.MANAGED_BY_LABEL) == naming.MANAGED_BY
            and not is_controlled_by(holder, company)
            for holder in observed.namesakes.values()
        ):
            return Result(requeue_after=LABELLED_NAMESAKE_RECHECK)
        return result

    # -- the restart checkpoint (reconcilers.checkpoint) ------------------------------------------
    def checkpoint_annotations(self) -> dict[str, str]:
        """The checkpoint for the Lease (each renewal and the release), or nothing while the
        first pass runs, a cache relists, or more than :data:`MAX_UNSETTLED` companies have
        work left."""
        if not self.company_controller.first_pass_done:
            return {}
        kinds: dict[str, tuple[str, int]] = {}
        for resource, informer in self.cache.informers.items():
            if informer.resource_version is None:
                return {}
            kinds[resource.group_kind] = (informer.resource_version, informer.store.uid_digest)
        secrets: dict[str, str | None] = {}
        for (ns, secret_name), informer in self.secrets.informers.items():
            if informer.resource_version is None:
                return {}
            key = namespaced_key(ns, secret_name)
            found = informer.store.get(key)
            secrets[key] = None if found is None else resource_version(found)
        unsettled = self.company_controller.unsettled()
        if len(unsettled) > MAX_UNSETTLED:
            return {}
        return Checkpoint(
            self.version, kinds, secrets, frozenset(str(r) for r in unsettled)
        ).annotation()

    def _checkpoint(self) -> Checkpoint | None:
        """The previous leader's checkpoint, judged once, at this process's first reconcile
        (before it writes anything): None when there is none of this version, or when a kind of
        child has gained or lost an object since (a deleted child leaves nothing newer)."""
        if self._resume_judged:
            return self._resumed
        self._resume_judged = True
        found = Checkpoint.found(self.manager.lease_annotations_found, self.version)
        informers = self.cache.informers
        moved = (
            []
            if found is None
            else [
                r.kind
                for r in self.children
                if found.kinds.get(r.group_kind, ("", None))[1] != informers[r].store.uid_digest
            ]
        )
        if found is None:
            log.info("no restart checkpoint of this version: every company is reconciled in full")
        elif moved:
            log.info(
                "children were created or deleted since the restart checkpoint: every company "
                "is reconciled in full",
                kinds=moved,
            )
        else:
            self._resumed = found
            log.info(
                "resuming from the restart checkpoint: companies unchanged since are not "
                "rendered again",
                unsettled=len(found.unsettled),
            )
        return self._resumed

    async def _unchanged_since_checkpoint(
        self, request: Request, company: Object, engine_class: Object | None, ns: Object
    ) -> bool:
        """Whether this first-pass reconcile would find what the previous leader's last one
        did, and so nothing to do (see :mod:`reconcilers.checkpoint`). The children's
        resourceVersions are read from the stores' keys, not from unpacked children."""
        checkpoint = self._checkpoint()
        if (
            checkpoint is None
            or self.company_controller.first_pass_done
            or request in self.company_controller.touched
            or str(request) in checkpoint.unsettled
            or engine_class is None
            or not ns
        ):
            return False
        changed = await self._changed_since(checkpoint, request, company, engine_class, ns)
        if changed:
            # Why a restart renders a company again: something of its changed meanwhile.
            log.debug("changed since the checkpoint", kind=changed)
        return changed is None

    async def _changed_since(
        self,
        checkpoint: Checkpoint,
        request: Request,
        company: Object,
        engine_class: Object,
        ns: Object,
    ) -> str | None:
        """The first kind of which an object the company's reconcile reads is newer than the
        checkpoint (or a referenced Secret unreadable), or None."""
        for resource, obj in ((COMPANY, company), (ENGINE_CLASS, engine_class), (NAMESPACE, ns)):
            if not checkpoint.unchanged(resource.group_kind, [resource_version(obj)]):
                return resource.kind
        if self._contested(company):
            return "contested"
        informers = self.cache.informers
        claims = informers[PERSISTENT_VOLUME_CLAIM].store
        claim = namespaced_key(request.namespace, naming.data_claim(request.name))
        if claim in claims and not checkpoint.unchanged(
            PERSISTENT_VOLUME_CLAIM.group_kind, [claims.resource_version(claim)]
        ):
            return PERSISTENT_VOLUME_CLAIM.kind
        for resource in self.children:
            store = informers[resource].store
            keys = store.keys_by_index(COMPANY_INDEX, str(request))
            if not checkpoint.unchanged(resource.group_kind, map(store.resource_version, keys)):
                return resource.kind
        secrets, unreadable = await self.read_references(engine_class)
        if unreadable or not all(
            checkpoint.secret_unchanged(namespaced_key(*key), secret)
            for key, secret in secrets.items()
        ):
            return SECRET.kind
        return None

    def _contested(self, company: Object) -> bool:
        """Whether what the company may do hangs on objects not its own, which a checkpoint
        does not cover: it was refused for one, another company asks for its hostname, or an
        object not labelled as its child holds one of its children's names."""
        accepted = find_condition((company.get("status") or {}).get("conditions"), "Accepted")
        if accepted is not None and accepted.get("reason") in _CONTESTED:
            return True
        wanted = hostname(company)
        if wanted and len(self.cache.keys(COMPANY, (HOSTNAME_INDEX, wanted))) > 1:
            return True
        ns, company_name = namespace(company) or "", name(company)
        return any(
            namespaced_key(ns, child_name) in informer.store
            for resource, informer in self.namesakes.informers.items()
            for child_name in naming.child_names(company_name, resource.kind)
        )

    async def execute(
        self,
        company: Object,
        engine_class: Object | None,
        plan: Plan,
        observed: Observed,
        complete: Callable[[], Plan],
    ) -> Result | None:
        """Write what the plan says, and nothing else; ``complete`` decides the whole plan when
        ``plan`` is not :attr:`~reconcilers.plan.Plan.complete` and its children are to be
        applied or dry-run.

        A company whose verdict changes (a new one, or one whose class or spec changed what it
        is told: accepted or why not, and the message) hears it first: its status is written
        on its own, and its children are applied when the queue comes back to it at
        :data:`CHILDREN_PRIORITY`, by a reconcile that decides the same status and writes only
        the children. A change that leaves the verdict as it was (suspending a company, say)
        is applied at once, so the conditions never run ahead of what they describe. Each
        change of verdict is also an Event on the Company, so ``kubectl describe company``
        says why. While many verdicts are on their way, the children's applies narrow
        (:class:`~reconcilers.slots.ApplySlots`): the verdicts wait on the same API server.

        Children left to apply for a company already told its verdict for its generation (what a
        leader that stopped between a verdict and its children left, a class's rollout, a child
        changed by hand) are backlog: they go back to the queue at :data:`CHILDREN_PRIORITY`, so
        a takeover or a class change tells new companies their verdicts before it applies them.

        A child the API server refuses (a class field only it can judge, such as a toleration
        or a storage class name) refuses the company with ``InvalidClass`` and its message,
        and leaves nothing half-written: until one company of a class's generation has been
        admitted (by a dry run or by being written), its children are first applied as a dry
        run, before any verdict. The
        company is tried again after a growing backoff: some refusals pass by themselves (a
        Service's "failed to allocate IP" while etcd is away is a 422 too), and no event would
        announce it.
        """
        key = f"{namespace(company)}/{name(company)}"
        decided = verdict(plan.status)
        news = decided is not None and decided not in (
            verdict(company.get("status")),
            self._announced.get(key),
        )
        children = bool(plan.applies or plan.deletes)
        first = news and children
        # Children of a company already told its verdict for this generation are backlog.
        backlog = children and not news and key not in self._announced
        told = current_verdict(company) if backlog else None
        if told is not None:
            self._announced[key] = told
            self.company_controller.queue.add(
                Request(namespace(company), name(company)), CHILDREN_PRIORITY
            )
            return None
        if not plan.complete and not (first and self._admitted(engine_class)):
            plan = complete()
        with self._apply_slots.verdict() if news else contextlib.nullcontext():
            retry: Result | None = None
            try:
                await self._admit(plan, engine_class)
                if not first and await self._write_children(plan):
                    # A child changed while it was written: look again, as its event would have.
                    self.company_controller.queue.add(Request(namespace(company), name(company)))
            except InvalidError as refused:
                retry, first = Result(requeue=True), False
                plan = refusal_plan(
                    company,
                    observed,
                    INVALID_CLASS,
                    f"the API server refused a child of the company: {refused.message}; ask the "
                    f"platform's administrators to fix EngineClass {_class_name(company)}"
                    + (
                        " or the values of the operator's admission policy"
                        if "ValidatingAdmissionPolicy" in refused.message
                        else ""
                    ),
                )
                decided = verdict(plan.status)
                news = decided != verdict(company.get("status"))
            if not first:
                self._announced.pop(key, None)
                if plan.claim_annotations and observed.data_claim is not None:
                    await self.client.patch(
                        PERSISTENT_VOLUME_CLAIM,
                        name(observed.data_claim),
                        {"metadata": {"annotations": plan.claim_annotations}},
                        namespace(observed.data_claim),
                    )
            if plan.status is not None:
                meta = {"name": name(company), "namespace": namespace(company)}
                # Told first: the echo can beat the write's answer to this process.
                self.status_echoes.wrote(key, plan.status)
                await self._write_status(COMPANY, meta, plan.status)
                if news and decided is not None:
                    self._announce(company, decided)
            if first and decided is not None:
                self._announced[key] = decided
                self.company_controller.queue.add(
                    Request(namespace(company), name(company)), CHILDREN_PRIORITY
                )
            return retry

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
        that need it at once wait for the first one's (:class:`~reconcilers.admission.Admissions`).

        Raises:
            InvalidError: the API server refused a child; nothing was written.
        """
        if not plan.applies:
            return

        async def dry_run() -> None:
            assert plan.complete, "children dry-run from a plan whose files were left out"
            for wave in _waves(plan.applies):
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
        for wave in _waves(plan.applies):
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
        """Apply one child when a slot is free (:class:`~reconcilers.slots.ApplySlots`: fewer
        while verdicts wait). Status writes and the admission's dry runs take none: they are on
        the verdict's path, which never queues behind a backlog's children."""
        if dry_run:
            return await self.client.apply_owned(
                apply.resource, apply.object, apply.existing, dry_run=True
            )
        async with self._apply_slots:
            return await self.client.apply_owned(apply.resource, apply.object, apply.existing)

    async def _write_status(self, resource: Resource, meta: Object, status: Object) -> None:
        """Apply an object's status (the client falls back to a merge patch where apply cannot
        type the stored object)."""
        await self.client.apply_status(
            resource,
            {
                "apiVersion": resource.api_version,
                "kind": resource.kind,
                "metadata": meta,
                "status": status,
            },
        )

    # -- the EngineClass ------------------------------------------------------------------------
    async def reconcile_class(self, request: Request) -> Result | None:
        """Count the class's companies and check that its references resolve."""
        engine_class = self.cache.get(ENGINE_CLASS, request.name)
        if engine_class is None:
            self._counted.pop(request.name, None)
            return None
        self.secrets.forget(self._every_reference())
        secrets, unreadable = await self.read_references(engine_class)
        decision = class_status(
            engine_class,
            secrets,
            unreadable,
            companies=len(self.cache.keys(COMPANY, (CLASS_INDEX, request.name))),
            last_written=self._counted.get(request.name),
            monotonic_now=time.monotonic(),
        )
        if decision.status is None:
            if decision.requeue_after is None:
                return None
            return Result(requeue_after=decision.requeue_after)  # the count alone, held back
        await self._write_status(ENGINE_CLASS, {"name": request.name}, decision.status)
        self._counted[request.name] = time.monotonic()
        return None

    def _every_reference(self) -> set[tuple[str | None, str]]:
        refs: set[tuple[str | None, str]] = set()
        for engine_class in self.cache.list(ENGINE_CLASS):
            refs |= set(referenced_secrets(engine_class))
        return refs
