"""The thin controllers around the pure Crewlet reconcile: gather the inputs from the caches,
call :func:`crewlet_operator_daemon.company.reconcile`, and have
:class:`~crewlet_operator_daemon.writer.CompanyWriter` write its plan.

What is cached, and why it stays small: Companies and EngineClasses (all of them: they are the
operator's own kinds; with ``--sharding``, this replica's share of the Companies), every
company's class and hostname and every webhook route's hosts in the manager's cluster view
(trimmed, whatever share this replica reconciles), Namespaces (for
``allowedNamespaces``), and children only when they carry
``app.kubernetes.io/managed-by: crewlet-operator``, trimmed to the fields the operator applied.
Companies and children are kept compressed (a few hundred bytes each) and indexed by class and
by company, so a reconcile decodes only its own. Referenced Secrets are watched one by one
(:class:`~crewlet_operator.cache.named.NamedObjects`), never the cluster's Secrets wholesale.
"""

from __future__ import annotations

import functools
from dataclasses import replace

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
    Controller,
    Decoded,
    EventRecorder,
    GenerationChanged,
    InformerOptions,
    LabelChanged,
    Manager,
    MetadataOnly,
    NamedObjects,
    Pages,
    PolicyRule,
    Request,
    Resource,
    RestartCheckpoint,
    Result,
    Scope,
    Stream,
    is_controlled_by,
    new_predicate_funcs,
)
from crewlet_operator import KubeObject as Object
from crewlet_operator.fieldset import keep_owned_fields_of
from crewlet_operator.objects import is_being_deleted, labels, name, namespace, namespaced_key
from crewlet_operator_daemon import hostnames, naming
from crewlet_operator_daemon.api.crds import WEBHOOK_HOSTNAME_FIELD
from crewlet_operator_daemon.api.v1alpha1 import COMPANY, ENGINE_CLASS
from crewlet_operator_daemon.census import COMPANIES, CompanyCensus
from crewlet_operator_daemon.checkpoint import ANNOTATION, LINES, code_version
from crewlet_operator_daemon.class_controller import (
    CLASS_INDEX,
    SECRET_ANSWER_TIMEOUT,
    VIEW_SYNC_TIMEOUT,
    EngineClassController,
    class_name,
    class_of,
    read_references,
)
from crewlet_operator_daemon.company import reconcile
from crewlet_operator_daemon.hostnames import hostname
from crewlet_operator_daemon.indexes import (
    COMPANY_INDEX,
    HOSTNAME_INDEX,
    ROUTE_HOST_INDEX,
    company_of_child,
    hostname_changed,
    hostname_of,
    namesake_identity,
    refused_for_others,
    view_entry,
)
from crewlet_operator_daemon.plan import (
    CHILD_RESOURCES,
    ClusterFacts,
    Observed,
    child_resources,
)
from crewlet_operator_daemon.references import referenced_secrets
from crewlet_operator_daemon.slots import ApplySlots
from crewlet_operator_daemon.steps import (
    labelled_namesake,
)
from crewlet_operator_daemon.writer import CompanyWriter

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

WRITTEN_RESOURCES = frozenset(
    r.plural for r in (COMPANY, ENGINE_CLASS, *CHILD_RESOURCES, PERSISTENT_VOLUME_CLAIM)
)
"""Plurals of the kinds the operator writes without the Gateway API (its Lease aside): what a
resync must not touch."""


# Companies and children are held by the thousand and read a few at a time: compact, and listed
# in small pages (a page of whole StatefulSets is ~4 MiB of dicts at 100, the transient peak of a
# relist; memory freed after it is not all given back).
COMPANY_OPTIONS = InformerOptions(
    indexers={CLASS_INDEX: class_of, HOSTNAME_INDEX: hostname_of},
    lists=Stream(page_size=COMPACT_PAGE),
    storage=Compact(),
)
CLAIMANTS_OPTIONS = InformerOptions(
    scope=Scope(field_selector=f"{WEBHOOK_HOSTNAME_FIELD.removeprefix('.')}!="),
    transform=view_entry,
    indexers={HOSTNAME_INDEX: hostname_of},
    lists=Stream(page_size=COMPACT_PAGE),
    storage=Compact(),
)
"""A sharded replica's cluster view of the companies: those that ask for a webhook hostname (a
selectable field of the CRD), trimmed. A hostname is the cluster's, whichever replica its
claimants are on, but the replica then holds the claimants alone, not every company."""
LABELLED_OPTIONS = InformerOptions(
    scope=Scope(label_selector=naming.MANAGED_BY_SELECTOR),
    lists=Stream(page_size=COMPACT_PAGE),
    storage=Compact(),
)
# The namesakes are listed whole, not in pages: few objects match, and the API server answers a
# list without a limit from its watch cache, where a paged one may read every object of the
# kind from etcd to find them.
UNLABELLED_OPTIONS = InformerOptions(
    scope=Scope(label_selector=naming.NOT_MANAGED_SELECTOR),
    transform=namesake_identity,
    lists=Pages(0),
    storage=MetadataOnly(),
)


def owned_options(field_manager: str) -> InformerOptions:
    """The children's informers: cached as far as ``field_manager`` applied them (and their
    status), what a reconcile compares them with, pruned only when read (a restart's first
    pass reads few). A start lists them in pages (half the API server's CPU of a stream),
    decodes each only as far as its metadata, and lists their metadata first, which is all a
    first pass over a checkpoint reads: the whole children follow it, or come when a reconcile
    needs them (_whole_children). bench/NOTES.md, "Informer lists"."""
    return InformerOptions(
        scope=Scope(label_selector=naming.MANAGED_BY_SELECTOR),
        deferred_transform=keep_owned_fields_of(field_manager),
        indexers={COMPANY_INDEX: company_of_child},
        lists=Pages(LISTED_CHILDREN_PAGE),
        storage=Compact(lazy_lists=True, metadata_first=True),
    )


class CrewletControllers:
    """The Company and EngineClass controllers of one manager."""

    def __init__(self, manager: Manager, facts: ClusterFacts) -> None:
        self.manager = manager
        self.client = manager.client
        self.cache = manager.cache
        self.facts = facts
        self.children = child_resources(facts)
        self.route = HTTP_ROUTE if facts.gateway_api else INGRESS
        """The kind of a company's webhook route."""
        self.secrets = NamedObjects(manager.client, SECRET)
        manager.add(self.secrets)  # the manager stops its watches
        self._apply_slots = ApplySlots()
        # The Events share the children's apply slots: they narrow with them while verdicts
        # wait (a verdict's Event can come a few seconds after its status).
        self.recorder = EventRecorder(
            manager.client, REPORTING_CONTROLLER, write_slots=self._apply_slots
        )
        manager.add(self.recorder)  # the manager waits for its Events on the way out
        self.writer = CompanyWriter(
            manager.client,
            self.recorder,
            self._apply_slots,
            children_priority=CHILDREN_PRIORITY,
            requeue=self._requeue,
        )
        self.checkpoint = RestartCheckpoint(
            code_version(facts),
            annotation=ANNOTATION,
            named=[self.secrets],
            read_timeout=SECRET_ANSWER_TIMEOUT,
            lines=LINES,
        )
        """The restart checkpoint (crewlet_operator_daemon.checkpoint); :meth:`_reads` declares what
        it judges."""
        self.namesakes = self._namesakes_cache()
        manager.add(self.namesakes)
        self.view = manager.cluster_view
        """The companies of the cluster that ask for a webhook hostname and the webhook routes,
        by what ranks a hostname's claimants, whatever share of them the caches hold."""
        self._declare_view()
        self._keep_owned = keep_owned_fields_of(manager.field_manager)
        self.company_controller = self._company_controller()
        # crewlet_operator_companies: the companies this replica reconciles, by status; the
        # manager has started its controllers once it leads (or, sharded, holds its share).
        self.census = CompanyCensus(manager.started.is_set)
        self.cache.informer(COMPANY).add_handler(self.census)
        COMPANIES.track(self.census)
        self._map_other_events()
        self.class_controller = EngineClassController(manager, self.secrets)

    def _company_controller(self) -> Controller:
        """The Company controller: its cache of companies and of their children, what else
        reconciles a company, and what it writes."""
        builder = self.manager.controller("company").for_(
            COMPANY, predicates=[self.writer.status_echoes], options=COMPANY_OPTIONS
        )
        owned = owned_options(self.manager.field_manager)
        for resource in self.children:
            builder.owns(resource, predicates=[self.writer.child_echoes], options=owned)
        # A class's status (its companies count) changes with every company: only its spec
        # concerns them, else one new company would reconcile every other of its class.
        builder.watches(ENGINE_CLASS, self._companies_of_class, predicates=[GenerationChanged()])
        builder.watches(NAMESPACE, self._companies_in_namespace, predicates=[LabelChanged()])
        builder.watches(PERSISTENT_VOLUME_CLAIM, self._company_of_labels, options=LABELLED_OPTIONS)
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
        # A user's change may carry its trace into the company's reconcile.
        return (
            builder.with_options(
                reserved_workers=VERDICT_WORKERS, trace_annotation=naming.TRACE_ANNOTATION
            )
            .with_checkpoint(self.checkpoint)
            .complete(self.reconcile_company)
        )

    def _namesakes_cache(self) -> Cache:
        """Every other object of the children's kinds, by its metadata alone: a name a child
        would take may be held by a tenant's own object, which the label-scoped caches never
        see. The company then waits (crewlet_operator_daemon.inputs.refuse_taken_names), and
        hears when the name is free. Of the routes, their hosts and where they attach too: a
        hostname another workload serves is not a company's to take
        (hostnames.foreign_holder)."""
        namesakes = Cache(self.manager.client)
        for resource in self.children:
            namesakes.informer(
                resource,
                UNLABELLED_OPTIONS
                if resource is not self.route
                else replace(
                    UNLABELLED_OPTIONS,
                    transform=hostnames.route_identity,
                    indexers={ROUTE_HOST_INDEX: hostnames.route_hosts},
                    storage=Decoded(),
                ),
            )
        return namesakes

    def _map_other_events(self) -> None:
        """Reconcile the companies that events outside the controller's own watches concern:
        a referenced Secret's, a claimant's of a hostname freed (its holder deleted, or given
        another) or asked for by one more company, a namesake's, another workload's route's."""
        controller = self.company_controller
        self.secrets.add_handler(controller.enqueue_handler(self._companies_of_secret))
        # Sharded, the view holds the claimants alone: a company that asks for a hostname joins
        # it (an add), one that asks for none any more leaves it (a delete); unsharded, either
        # is an update that changes the hostname.
        hostname_peers = new_predicate_funcs(update=hostname_changed)
        self.view.add_handler(
            COMPANY, controller.enqueue_handler(self._hostname_peers, [hostname_peers])
        )
        for resource in self.children:
            self.namesakes.informer(resource).add_handler(
                controller.enqueue_handler(self._companies_named_by)
            )
        self.namesakes.informer(self.route).add_handler(
            controller.enqueue_handler(self._companies_served_by)
        )

    def _requeue(self, request: Request, priority: int) -> None:
        self.company_controller.requeue(request, priority)

    def _declare_view(self) -> None:
        """The companies that ask for a webhook hostname and the managed webhook routes,
        trimmed (:func:`view_entry`), in the cluster view; every company, trimmed, in the
        leader's view, where the class controller counts them. Without sharding the cache holds
        every company and both views read its informer, nothing listed twice (the hostname
        index leaves the others out); a sharded replica lists the claimants alone
        (:data:`CLAIMANTS_OPTIONS`)."""
        every_company = replace(COMPANY_OPTIONS, transform=view_entry)
        sharded = self.manager.ring is not None
        self.view.declare(COMPANY, CLAIMANTS_OPTIONS if sharded else every_company)
        self.manager.leader_view.declare(COMPANY, every_company)
        self.view.declare(
            self.route,
            InformerOptions(
                scope=Scope(label_selector=naming.MANAGED_BY_SELECTOR),
                transform=view_entry,
                lists=Stream(page_size=COMPACT_PAGE),
                storage=Compact(),
            ),
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
        ns = namespace(obj)
        return [
            Request(ns, company)
            for company in naming.companies_named_by(str(obj.get("kind")), name(obj))
            if self.cache.known(COMPANY, company, ns) is not None
        ]

    def _hostname_peers(self, company: Object) -> list[Request]:
        """The other companies that ask for ``company``'s webhook hostname."""
        wanted, key = hostname(company), namespaced_key(namespace(company), name(company))
        if not wanted:
            return []
        return [
            Request(*peer.split("/", 1))
            for peer in self.view.keys(COMPANY, (HOSTNAME_INDEX, wanted))
            if peer != key
        ]

    def _companies_served_by(self, route: Object) -> list[Request]:
        """The companies whose webhook hostname ``route``, another workload's, serves."""
        return [
            Request(*key.split("/", 1))
            for host in hostnames.route_hosts(route)
            for key in self.view.keys(COMPANY, (HOSTNAME_INDEX, host))
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
            for child in self.writer.child_echoes.newest(resource.kind, cached, ns):
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
            hostname_route=self._hostname_route(company, engine_class),
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
            for child_name in naming.child_names(company_name, resource.kind):
                key = (resource.kind, child_name)
                if key in children:
                    continue
                holder = self.cache.known(resource, child_name, ns) or self.namesakes.get(
                    resource, child_name, ns
                )
                if holder is None:
                    continue
                if not is_controlled_by(holder, company):
                    found[key] = holder
                    continue
                whole = await self.client.get_or_none(resource, child_name, ns)
                if whole is not None and is_controlled_by(whole, company):
                    children[key] = self._keep_owned(whole)
        return found

    def _may_claim(self, company: Object) -> bool:
        """Whether ``company`` asks for a webhook hostname its class gives it
        (``spec.exposure.allowedHostnames``): one that does not claims nothing, and hears
        ``HostnameNotAllowed`` from its own reconcile."""
        engine_class = self.cache.get(ENGINE_CLASS, class_name(company)) or {}
        exposure = (engine_class.get("spec") or {}).get("exposure") or {}
        return hostnames.allowed(
            hostname(company), exposure.get("allowedHostnames"), namespace(company) or ""
        )

    def _hostname_route(self, company: Object, engine_class: Object | None) -> str | None:
        """The route of another workload that holds ``company``'s webhook hostname, when one
        does and the company does not route it already
        (:func:`crewlet_operator_daemon.hostnames.foreign_holder`)."""
        wanted = hostname(company)
        if not wanted or engine_class is None or not self._may_claim(company):
            return None
        own = self.cache.get(self.route, naming.webhook_route(name(company)), namespace(company))
        if hostnames.routes_itself(company, own):
            return None
        routes = [
            route
            for key in hostnames.serving_keys(wanted)
            for route in self.namesakes.list(self.route, index=(ROUTE_HOST_INDEX, key))
        ]
        if not routes:
            return None
        exposure = (engine_class.get("spec") or {}).get("exposure") or {}
        return hostnames.foreign_holder(
            company,
            routes,
            (exposure.get("gateway") or {}).get("parentRefs") or [],
            (exposure.get("ingress") or {}).get("className"),
        )

    async def _hostname_holder(self, company: Object) -> str | None:
        """The Company that holds ``company``'s webhook hostname, when another one does
        (:func:`crewlet_operator_daemon.hostnames.holder`, from the claimants whose classes
        give them the hostname, and their routes)."""
        wanted = hostname(company)
        if not wanted or not self._may_claim(company):
            return None
        await self.view.wait_for_sync(VIEW_SYNC_TIMEOUT)
        claimants = [
            claimant
            for claimant in self.view.list(COMPANY, index=(HOSTNAME_INDEX, wanted))
            if self._may_claim(claimant)
        ]
        if len(claimants) < 2:
            return None
        routes: dict[str, Object | None] = {}
        for claimant in claimants:
            key = namespaced_key(namespace(claimant), name(claimant))
            routes[key] = self.view.get(
                self.route, naming.webhook_route(name(claimant)), namespace(claimant)
            )
        return hostnames.holder(company, claimants, routes)

    async def _whole_children(self, resource: Resource, company: str) -> None:
        """Wait, if need be, until the cache holds ``company``'s children of ``resource`` whole:
        a start lists them by their metadata first (the whole ones follow its first pass, or
        come now that a reconcile asks). A company with no children yet (a new one) waits for
        nothing."""
        await self.cache.wait_for_whole(resource, (COMPANY_INDEX, company))

    async def reconcile_company(self, request: Request) -> Result | None:
        """Converge one Company."""
        company = self.cache.get(COMPANY, request.name, request.namespace)
        if company is None:
            self.writer.forget(str(request))
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
        decide = functools.partial(
            reconcile, company, engine_class, labels(ns), facts=self._facts(company)
        )
        result = await self.writer.execute(company, engine_class, observed, decide)
        if result is None and labelled_namesake(company, observed):
            return Result(requeue_after=LABELLED_NAMESAKE_RECHECK)
        return result

    def _facts(self, company: Object) -> ClusterFacts:
        """The cluster facts, with the company's shard labels when sharded (its slot, the same
        on every member: a move rewrites no child)."""
        shard = self.manager.shard_labels_for(company)
        return replace(self.facts, shard_labels=tuple(shard.items())) if shard else self.facts

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
        if wanted and len(self.view.keys(COMPANY, (HOSTNAME_INDEX, wanted))) > 1:
            return True
        if any(
            self.namesakes.keys(self.route, (ROUTE_HOST_INDEX, key))
            for key in hostnames.serving_keys(wanted)
        ):
            return True
        ns, company_name = namespace(company) or "", name(company)
        return any(
            self.namesakes.get(resource, child_name, ns) is not None
            for resource in self.children
            for child_name in naming.child_names(company_name, resource.kind)
        )
