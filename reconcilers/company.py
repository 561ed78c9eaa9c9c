"""The Crewlet reconcile: from a Company, its EngineClass and what exists, to a :class:`Plan`.

A pure function: the controller gathers the inputs from its caches and executes the plan. Every
decision is made here, in the order the install page promises:

1. Refusals first (``Accepted=False`` with a reason and a message that says what to do). A refused
   company's children are left exactly as they are: nothing is applied, nothing deleted, so a
   running engine keeps running on what it was given last.
2. Otherwise the complete desired set of children is built, and only the children that differ
   from what exists are applied; owned children that are no longer wanted (a webhook route of the
   other kind) are deleted. A volume claim is never deleted.
3. The status (conditions, engine image and versions) and the high-water mark on the data claim.

So ``reconcile`` over what it desired itself returns an empty plan: nothing is written when
nothing changed.
"""

from __future__ import annotations

import base64
import copy
import secrets as token_source
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import semver
from pydantic import ValidationError

from crewlet_operator import (
    DEFAULT_FIELD_MANAGER,
    HTTP_ROUTE,
    INGRESS,
    NETWORK_POLICY,
    POD_DISRUPTION_BUDGET,
    SECRET,
    SERVICE,
    SERVICE_ACCOUNT,
    STATEFUL_SET,
    Resource,
    apply_would_change,
    condition,
    controller_reference,
    hash_of,
    is_controlled_by,
    label_selector_matches,
    parse_quantity,
    semantic_subset,
    set_condition,
)
from crewlet_operator import generation as object_generation
from crewlet_operator import name as object_name
from reconcilers import engine, naming, versions
from reconcilers.api.v1alpha1 import (
    MIN_STORAGE,
    MIN_STORAGE_WITH_S3,
    Company,
    EngineClass,
    SecretKeyRef,
)
from reconcilers.naming import DATA, SEATS, Component
from reconcilers.plan import Apply, ClusterFacts, Delete, Object, Observed, Plan

TokenFactory = Callable[[], str]

ACCEPTED = "Accepted"
READY = "Ready"
SUSPENDED = "Suspended"

_STATUS_FIELDS = (
    "observedGeneration",
    "conditions",
    "engineImage",
    "engineVersion",
    "highestEngineVersion",
    "versionProtection",
)

_PRUNABLE: dict[str, Resource] = {
    r.kind: r
    for r in (
        SERVICE_ACCOUNT,
        SECRET,
        SERVICE,
        STATEFUL_SET,
        POD_DISRUPTION_BUDGET,
        NETWORK_POLICY,
        INGRESS,
        HTTP_ROUTE,
    )
}
"""Kinds an unwanted child may be deleted of. PersistentVolumeClaim is deliberately absent."""


def new_token() -> str:
    """A fresh operator API token (256 bits, URL-safe: it is expanded into YAML unquoted).

    The only non-deterministic input of :func:`reconcile`, used once per company: an existing
    token Secret is always kept, so later reconciles are pure.
    """
    return token_source.token_urlsafe(32)


class Refused(Exception):
    """The company cannot be run as asked; ``reason`` and ``message`` go on ``Accepted``."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class _Context:
    """The parsed inputs every builder reads."""

    raw: Object
    company: Company
    engine_class: EngineClass
    observed: Observed
    facts: ClusterFacts
    new_token: TokenFactory

    @property
    def name(self) -> str:
        return str(self.raw["metadata"]["name"])

    @property
    def namespace(self) -> str:
        return str(self.raw["metadata"]["namespace"])

    @property
    def class_name(self) -> str:
        return self.company.spec.class_name

    def child(self, resource: Resource, name: str) -> Object | None:
        return self.observed.children.get((resource.kind, name))


@dataclass
class _Desired:
    """The complete desired children, and what the Accepted message should add."""

    children: list[Apply] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    image: str = ""


@dataclass(frozen=True)
class _SecretCopy:
    """One Secret key the class references, copied into ``<company>-env`` under ``env``."""

    env: str
    ref: SecretKeyRef
    where: str


# --- Entry points --------------------------------------------------------------------------


def reconcile(
    company: Object,
    engine_class: Object | None,
    namespace_labels: dict[str, str],
    observed: Observed,
    facts: ClusterFacts,
    *,
    now: datetime | None = None,
    token_factory: TokenFactory = new_token,
) -> Plan:
    """Decide what to write for ``company``; pure, no I/O.

    ``engine_class`` is the class the company names, None when it does not exist.
    ``namespace_labels`` are the labels of the company's namespace (for ``allowedNamespaces``).
    ``now`` stamps conditions that flip (default: the current time). ``token_factory`` makes
    the operator's API token, only when no ``<company>-api-token`` Secret exists yet.
    """
    if company.get("metadata", {}).get("deletionTimestamp"):
        return Plan()  # The garbage collector removes the children; nothing to decide.
    try:
        ctx = _context(
            company, engine_class, namespace_labels, observed, facts, token_factory=token_factory
        )
        _refuse_downgrade(ctx)
        desired = _desired(ctx)
    except Refused as refusal:
        return _refused_plan(company, observed, refusal, now)
    plan = Plan(applies=_changed(desired.children, observed), deletes=_unwanted(ctx, desired))
    running = versions.image_version(desired.image)
    high = versions.highest(_high_water(company, observed), running)
    conditions = _accepted_conditions(ctx, desired, plan, now)
    plan.status = _status_change(company, conditions, desired.image, high)
    plan.claim_annotations = _claim_annotations(observed, high)
    return plan


def desired_children(
    company: Object,
    engine_class: Object,
    observed: Observed,
    facts: ClusterFacts,
    *,
    token_factory: TokenFactory = new_token,
) -> list[Apply]:
    """Every child the company should have, in apply order (whatever exists).

    Raises:
        Refused: the inputs cannot be rendered (an invalid class, a missing Secret, ...).
            Namespace admission and downgrades are :func:`reconcile`'s to judge.
    """
    ctx = _context(company, engine_class, None, observed, facts, token_factory=token_factory)
    return _desired(ctx).children


# --- Refusals ------------------------------------------------------------------------------


def _context(
    raw: Object,
    engine_class: Object | None,
    namespace_labels: dict[str, str] | None,
    observed: Observed,
    facts: ClusterFacts,
    *,
    token_factory: TokenFactory,
) -> _Context:
    """Parse the inputs, refusing in the order a person would fix them."""
    parsed_company = _parse_company(raw)
    problem = naming.name_problem(str(raw["metadata"]["name"]))
    if problem:
        raise Refused("InvalidName", problem)
    class_name = parsed_company.spec.class_name
    if engine_class is None:
        raise Refused(
            "ClassNotFound",
            f"EngineClass {class_name} does not exist: create it, or set spec.className to an "
            f"existing class",
        )
    parsed_class = _parse_class(class_name, engine_class)
    if namespace_labels is not None:
        _check_namespace_allowed(parsed_class, class_name, raw, namespace_labels)
    return _Context(raw, parsed_company, parsed_class, observed, facts, token_factory)


def _parse_company(raw: Object) -> Company:
    try:
        return Company.model_validate(raw)
    except ValidationError as error:
        raise Refused("InvalidSpec", f"the Company is invalid: {_errors(error)}") from None


_PARSED_CLASSES: dict[tuple[str, str], EngineClass] = {}
"""Parsed EngineClasses by (uid, resourceVersion): a class is read by every reconcile of its
companies, and one resourceVersion is one content. Bounded by the classes in use."""


def _parse_class(class_name: str, raw: Object) -> EngineClass:
    meta = raw.get("metadata") or {}
    uid, version = meta.get("uid"), meta.get("resourceVersion")
    if not (isinstance(uid, str) and isinstance(version, str)):
        return _validate_class(class_name, raw)
    parsed = _PARSED_CLASSES.get((uid, version))
    if parsed is None:
        parsed = _validate_class(class_name, raw)
        if len(_PARSED_CLASSES) >= 256:
            _PARSED_CLASSES.clear()
        _PARSED_CLASSES[(uid, version)] = parsed
    return parsed


def _validate_class(class_name: str, raw: Object) -> EngineClass:
    try:
        return EngineClass.model_validate(raw)
    except ValidationError as error:
        raise Refused(
            "InvalidClass",
            f"EngineClass {class_name} is invalid: {_errors(error)}; ask the platform's "
            f"administrators to fix it, or use another class",
        ) from None


def _errors(error: ValidationError) -> str:
    """Where and what, without the input values."""
    return "; ".join(
        f"{'.'.join(str(part) for part in e['loc']) or '<root>'}: {e['msg']}"
        for e in error.errors()[:5]
    )


def _check_namespace_allowed(
    engine_class: EngineClass, class_name: str, raw: Object, namespace_labels: dict[str, str]
) -> None:
    """``spec.allowedNamespaces`` admits the company's namespace (absent: every namespace)."""
    selector = engine_class.spec.allowed_namespaces
    if selector is None:
        return
    namespace = raw["metadata"]["namespace"]
    try:
        allowed = label_selector_matches(selector, namespace_labels)
    except ValueError as error:
        raise Refused(
            "InvalidClass",
            f"EngineClass {class_name} has an invalid spec.allowedNamespaces ({error}); ask the "
            f"platform's administrators to fix it",
        ) from None
    if not allowed:
        raise Refused(
            "ClassNotAllowed",
            f"EngineClass {class_name} does not admit namespace {namespace}: label the "
            f"namespace to match spec.allowedNamespaces or use another class",
        )


def _high_water(company: Object, observed: Observed) -> semver.Version | None:
    """The highest version this company's data has run: status, claim, data StatefulSet.

    The claim outlives the Company, and the StatefulSet is what was last applied, so either still
    protects a company whose status was lost.
    """
    status = company.get("status") or {}
    claim = observed.data_claim or {}
    annotations = (claim.get("metadata") or {}).get("annotations") or {}
    annotation = annotations.get(versions.CLAIM_ANNOTATION)
    sts = observed.children.get((STATEFUL_SET.kind, naming.statefulset(object_name(company), DATA)))
    return versions.highest(
        versions.parse_version(status.get("highestEngineVersion")),
        versions.parse_version(annotation),
        versions.image_version(_image_of(sts) or ""),
    )


def _refuse_downgrade(ctx: _Context) -> None:
    """An ordered image below the high-water mark would open migrated data with an older engine."""
    image = ctx.engine_class.spec.engine.image
    candidate = versions.image_version(image)
    high = _high_water(ctx.raw, ctx.observed)
    if not versions.is_downgrade(candidate, high):
        return
    raise Refused(
        "DowngradeRefused",
        f"EngineClass {ctx.class_name} runs {image} (version {candidate}), older than {high}, "
        f"the highest engine version this company's data has run, and the engine migrates its "
        f"data forward only: point the class at {high} or newer, or use a class that does; to "
        f"go back, restore the data volume from a backup taken before {high} first ran on it",
    )


def _refused_plan(
    company: Object, observed: Observed, refusal: Refused, now: datetime | None
) -> Plan:
    """Report the refusal and touch nothing; the status still tells what is running."""
    sts = observed.children.get((STATEFUL_SET.kind, naming.statefulset(object_name(company), DATA)))
    image = _image_of(sts)
    high = versions.highest(_high_water(company, observed), versions.image_version(image or ""))
    generation = object_generation(company)
    old = (company.get("status") or {}).get("conditions")
    suspend = bool((company.get("spec") or {}).get("suspend"))
    conditions = _set_all(
        old,
        [
            condition(
                ACCEPTED, False, refusal.reason, refusal.message, observed_generation=generation
            ),
            _ready(sts, applying=False, suspended=False, refused=True, generation=generation),
            _suspended_refused(suspend, generation),
        ],
        now,
    )
    return Plan(
        status=_status_change(company, conditions, image, high),
        claim_annotations=_claim_annotations(observed, high),
    )


def refusal_plan(company: Object, observed: Observed, reason: str, message: str) -> Plan:
    """Report a refusal found outside :func:`reconcile` (the API server refused a child) and
    touch nothing else, exactly as a refusal found inside it."""
    return _refused_plan(company, observed, Refused(reason, message), None)


def _suspended_refused(suspend: bool, generation: int | None) -> dict[str, Any]:
    if suspend:
        return dict(
            condition(
                SUSPENDED,
                False,
                "NotAccepted",
                "spec.suspend is set, but nothing is scaled while the company is not accepted "
                "(see the Accepted condition)",
                observed_generation=generation,
            )
        )
    return dict(condition(SUSPENDED, False, "NotSuspended", "", observed_generation=generation))


# --- The desired set -----------------------------------------------------------------------


def _desired(ctx: _Context) -> _Desired:
    """Build every child; refuses when the class cannot be rendered or a Secret is missing."""
    _check_storage(ctx)
    _check_resources(ctx)
    copies = _secret_copies(ctx)
    env_data = _copied_values(ctx, copies)
    token = _token(ctx)
    configs, config_files = _configs(ctx)
    secrets_hash = hash_of({"env": env_data, "token": token})
    desired = _Desired(image=ctx.engine_class.spec.engine.image)
    add = desired.children.append
    add(Apply(SERVICE_ACCOUNT, _service_account(ctx)))
    add(
        Apply(
            SECRET,
            _opaque_secret(ctx, naming.api_token_secret(ctx.name), {naming.API_TOKEN_KEY: token}),
        )
    )
    add(Apply(SECRET, _opaque_secret(ctx, naming.env_secret(ctx.name), env_data)))
    add(Apply(SECRET, _opaque_secret(ctx, naming.config_secret(ctx.name), config_files)))
    for component in (DATA, SEATS):
        add(Apply(NETWORK_POLICY, _network_policy(ctx, component)))
    add(Apply(SERVICE, _headless_service(ctx, DATA)))
    add(Apply(SERVICE, _headless_service(ctx, SEATS)))
    add(Apply(SERVICE, _api_service(ctx)))
    for component in (DATA, SEATS):
        add(Apply(POD_DISRUPTION_BUDGET, _disruption_budget(ctx, component)))
    route = _webhook_route(ctx, desired.notes)
    if route is not None:
        add(route)
    # The StatefulSets last: they start the engine, so a child the API server refuses is met
    # before anything runs.
    for component in (DATA, SEATS):
        annotations = {
            naming.CONFIG_HASH_ANNOTATION: hash_of(configs[component]),
            naming.SECRETS_HASH_ANNOTATION: secrets_hash,
        }
        add(Apply(STATEFUL_SET, _statefulset(ctx, component, copies, annotations, desired)))
    return desired


def _check_resources(ctx: _Context) -> None:
    """Every request and limit is a quantity: the API server cannot even decode a StatefulSet
    holding another (a 500, not a 422 naming the field), so the reconcile names it."""
    resources = ctx.engine_class.spec.resources
    for component, requirements in (("data", resources.data), ("seats", resources.seats)):
        for section in ("requests", "limits"):
            for resource, amount in ((requirements or {}).get(section) or {}).items():
                try:
                    parse_quantity(amount)
                except (TypeError, ValueError):
                    raise Refused(
                        "InvalidClass",
                        f"EngineClass {ctx.class_name}: spec.resources.{component}.{section}."
                        f"{resource} is {amount!r}, not a Kubernetes quantity (e.g. 500m, 2Gi); "
                        f"ask the platform's administrators to fix the class",
                    ) from None


def _check_storage(ctx: _Context) -> None:
    """The data volume's size parses and is at least the floor (12Gi, or 9Gi with S3)."""
    spec = ctx.engine_class.spec
    floor = MIN_STORAGE_WITH_S3 if spec.files.s3 is not None else MIN_STORAGE
    try:
        size = parse_quantity(spec.storage.size)
    except ValueError:
        size = None
    if size is None or size < parse_quantity(floor):
        raise Refused(
            "InvalidClass",
            f"EngineClass {ctx.class_name} asks for a data volume of {spec.storage.size!r}; "
            f"the engine needs at least {floor}{' (files in S3)' if floor != MIN_STORAGE else ''}"
            f": ask the platform's administrators to fix spec.storage.size",
        )


def _volume_bytes(ctx: _Context) -> int:
    return int(parse_quantity(ctx.engine_class.spec.storage.size))


def _configs(ctx: _Context) -> tuple[dict[Component, engine.Config], dict[str, str]]:
    """Both components' crewlet.yaml, and the config Secret's data (base64 files), each checked
    against the engine's schema unless the Secret already holds exactly that file."""
    s3 = ctx.engine_class.spec.files.s3
    prefix = engine.s3_prefix(s3.prefix if s3 else None, ctx.namespace, ctx.name)
    data = engine.render_data_config(s3=s3, s3_key_prefix=prefix, volume_bytes=_volume_bytes(ctx))
    seats = engine.render_seats_config(
        s3=s3,
        s3_key_prefix=prefix,
        data_hosts=[naming.data_pod_host(ctx.name, ctx.namespace)],
    )
    configs: dict[Component, engine.Config] = {DATA: data, SEATS: seats}
    existing = (ctx.child(SECRET, naming.config_secret(ctx.name)) or {}).get("data") or {}
    files: dict[str, str] = {}
    try:
        for component, config in configs.items():
            key = engine.config_file_key(component)
            files[key] = _b64(engine.to_yaml(config))
            if existing.get(key) != files[key]:  # what was written passed this check then
                engine.validate(component, config)
    except engine.EngineConfigError as error:
        raise Refused("EngineConfigInvalid", f"{error}; this is a bug of the operator") from None
    return configs, files


def _secret_copies(ctx: _Context) -> list[_SecretCopy]:
    """Every Secret key the class references, keyed by the variable it feeds, in env order.

    A variable the operator sets itself, or one set twice, is refused: the last one would
    silently win inside the pod.
    """
    spec = ctx.engine_class.spec
    copies = [_SecretCopy(k.name, k.secret_ref, "spec.modelKeys") for k in spec.model_keys]
    if spec.telemetry.headers is not None:
        copies.append(
            _SecretCopy(engine.OTEL_HEADERS_ENV, spec.telemetry.headers, "spec.telemetry.headers")
        )
    s3 = spec.files.s3
    if s3 is not None and s3.credentials is not None:
        copies.append(
            _SecretCopy(
                engine.S3_ACCESS_KEY_ENV,
                s3.credentials.access_key_id,
                "spec.files.s3.credentials.accessKeyId",
            )
        )
        copies.append(
            _SecretCopy(
                engine.S3_SECRET_KEY_ENV,
                s3.credentials.secret_access_key,
                "spec.files.s3.credentials.secretAccessKey",
            )
        )
    copies.extend(_SecretCopy(e.name, e.secret_ref, "spec.env") for e in spec.env if e.secret_ref)
    _check_env_names(ctx)
    return copies


def _check_env_names(ctx: _Context) -> None:
    spec = ctx.engine_class.spec
    names = [k.name for k in spec.model_keys] + [e.name for e in spec.env]
    seen: set[str] = set()
    for name in names:
        if name in engine.RESERVED_ENV or name in seen:
            why = "is set by the operator" if name in engine.RESERVED_ENV else "is set twice"
            raise Refused(
                "InvalidClass",
                f"EngineClass {ctx.class_name}: environment variable {name} {why} (spec.env, "
                f"spec.modelKeys); ask the platform's administrators to fix the class",
            )
        seen.add(name)
    for entry in spec.env:
        if (entry.value is None) == (entry.secret_ref is None):
            raise Refused(
                "InvalidClass",
                f"EngineClass {ctx.class_name}: spec.env {entry.name} needs exactly one of "
                f"value and secretRef; ask the platform's administrators to fix the class",
            )


def _copied_values(ctx: _Context, copies: list[_SecretCopy]) -> dict[str, str]:
    """The base64 values of every referenced key, as the source Secrets hold them.

    Refuses with every missing Secret or key named (names only: a value never reaches a
    message).
    """
    unreadable = sorted(
        {
            f"Secret {c.ref.namespace}/{c.ref.name} ({reason})"
            for c in copies
            if (reason := ctx.observed.unreadable_secrets.get((c.ref.namespace, c.ref.name)))
        }
    )
    if unreadable:
        raise Refused(
            "SecretUnreadable",
            f"EngineClass {ctx.class_name} references what the operator may not read: "
            f"{'; '.join(unreadable)}. Grant the operator's ServiceAccount get, list and watch "
            f"on Secrets, as the chart's ClusterRole does",
        )
    values: dict[str, str] = {}
    missing: list[str] = []
    for copy_ in copies:
        ref = copy_.ref
        source = ctx.observed.secrets.get((ref.namespace, ref.name))
        value = ((source or {}).get("data") or {}).get(ref.key)
        if source is None:
            missing.append(f"Secret {ref.namespace}/{ref.name} ({copy_.where}) does not exist")
        elif not isinstance(value, str):
            missing.append(
                f"Secret {ref.namespace}/{ref.name} has no key {ref.key} ({copy_.where})"
            )
        else:
            values[copy_.env] = value
    if missing:
        raise Refused(
            "SecretNotFound",
            f"EngineClass {ctx.class_name} references what is not there: {'; '.join(missing)}. "
            f"Ask the platform's administrators to create it or fix the class",
        )
    return values


def _token(ctx: _Context) -> str:
    """The operator's API token (base64): the existing Secret's, else a new one.

    A token must be secret, so it is random, not derived; keeping the existing one is what makes
    every later reconcile pure.
    """
    existing = ctx.child(SECRET, naming.api_token_secret(ctx.name))
    value = ((existing or {}).get("data") or {}).get(naming.API_TOKEN_KEY)
    if isinstance(value, str) and value:
        return value
    return _b64(ctx.new_token())


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


# --- Builders ------------------------------------------------------------------------------


def _metadata(
    ctx: _Context,
    name: str,
    component: Component | None = None,
    annotations: dict[str, str] | None = None,
) -> Object:
    meta: Object = {
        "name": name,
        "namespace": ctx.namespace,
        "labels": naming.labels(ctx.name, component),
    }
    if annotations:
        meta["annotations"] = dict(annotations)
    meta["ownerReferences"] = [controller_reference(ctx.raw)]
    return meta


def _service_account(ctx: _Context) -> Object:
    """``<company>-engine``, with the class's annotations (workload identity)."""
    annotations = ctx.engine_class.spec.service_account.annotations
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": _metadata(ctx, naming.service_account(ctx.name), annotations=annotations),
    }


def _opaque_secret(ctx: _Context, name: str, data: dict[str, str]) -> Object:
    """An Opaque Secret; ``data`` is left out when empty (the API server drops an empty map)."""
    secret: Object = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _metadata(ctx, name),
        "type": "Opaque",
    }
    if data:
        secret["data"] = dict(data)
    return secret


def _seats_replicas(ctx: _Context, notes: list[str]) -> int:
    """The company's seats replicas clamped to the class's bounds, else the class default.

    Clamping (and saying so) keeps the company running; refusing would stop every pod over a
    number the class's administrators bound anyway.
    """
    bounds = ctx.engine_class.spec.seats
    wanted = ctx.company.spec.seats.replicas
    if wanted is None:
        return bounds.replicas
    clamped = min(max(wanted, bounds.min_replicas), bounds.max_replicas)
    if clamped != wanted:
        notes.append(
            f"spec.seats.replicas {wanted} is outside EngineClass {ctx.class_name}'s bounds "
            f"{bounds.min_replicas}..{bounds.max_replicas}: running {clamped} seats pods"
        )
    return clamped


def _statefulset(
    ctx: _Context,
    component: Component,
    copies: list[_SecretCopy],
    annotations: dict[str, str],
    desired: _Desired,
) -> Object:
    """A component's StatefulSet; both scale to zero when the company is suspended."""
    name = naming.statefulset(ctx.name, component)
    if ctx.company.spec.suspend:
        replicas = 0
    elif component == DATA:
        replicas = 1  # 1 or 3..5 members, never 2; a fleet grows by seats pods (leaves).
    else:
        replicas = _seats_replicas(ctx, desired.notes)
    spec: Object = {
        "replicas": replicas,
        "serviceName": naming.headless_service(ctx.name, component),
        "selector": {"matchLabels": naming.selector(ctx.name, component)},
        # Claims outlive their pods and the StatefulSet. Written on both components, though the
        # seats have no claim: the manager's admission policy admits no StatefulSet without it.
        "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Retain", "whenScaled": "Retain"},
    }
    if component == SEATS:
        spec["podManagementPolicy"] = "Parallel"  # Disposable pods: start and stop together.
    else:
        spec["volumeClaimTemplates"] = [_data_claim_template(ctx, desired.notes)]
    spec["template"] = {
        "metadata": {"labels": naming.labels(ctx.name, component), "annotations": annotations},
        "spec": _pod_spec(ctx, component, copies),
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": _metadata(ctx, name, component),
        "spec": spec,
    }


def _data_claim_template(ctx: _Context, notes: list[str]) -> Object:
    """The data volume: ReadWriteOnce, the class's size and StorageClass.

    A StatefulSet's claim templates cannot change once it exists, so when the class changed the
    size or class later, the existing template is kept (an apply would be refused forever) and
    the message says how to grow the volume instead.
    """
    storage = ctx.engine_class.spec.storage
    claim_spec: Object = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": storage.size}},
    }
    if storage.storage_class_name:
        claim_spec["storageClassName"] = storage.storage_class_name
    template: Object = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": naming.DATA_VOLUME, "labels": naming.labels(ctx.name, DATA)},
        "spec": claim_spec,
    }
    existing = _existing_claim_template(ctx)
    if existing is None or semantic_subset(template, existing):
        return template
    notes.append(
        f"the data volume keeps the size and StorageClass it was created with (a StatefulSet's "
        f"claim template cannot change): to grow it, expand the claim "
        f"{naming.data_claim(ctx.name)} itself, on a StorageClass that allows expansion"
    )
    return existing


def _existing_claim_template(ctx: _Context) -> Object | None:
    sts = ctx.child(STATEFUL_SET, naming.statefulset(ctx.name, DATA))
    for template in ((sts or {}).get("spec") or {}).get("volumeClaimTemplates") or ():
        if (template.get("metadata") or {}).get("name") == naming.DATA_VOLUME:
            return copy.deepcopy(dict(template))
    return None


def _workload_identity(ctx: _Context) -> bool:
    """S3 without static keys: the SDK needs the ServiceAccount's token."""
    s3 = ctx.engine_class.spec.files.s3
    return s3 is not None and s3.credentials is None


def _pod_spec(ctx: _Context, component: Component, copies: list[_SecretCopy]) -> Object:
    """Restricted-profile pod: non-root, no privilege, read-only root, the engine's account.

    Never host namespaces, host paths or privileged containers (the chart's policy refuses
    them); those fields are simply never written.
    """
    spec: Object = {
        "serviceAccountName": naming.service_account(ctx.name),
        "automountServiceAccountToken": _workload_identity(ctx),
        "enableServiceLinks": False,
        "securityContext": {
            "runAsUser": engine.USER_ID,
            "runAsGroup": engine.USER_ID,
            "runAsNonRoot": True,
            "fsGroup": engine.USER_ID,
            # Recursively re-owning a large data volume at every start would slow each boot.
            "fsGroupChangePolicy": "OnRootMismatch",
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "terminationGracePeriodSeconds": engine.TERMINATION_GRACE_SECONDS,
    }
    pull_secrets = ctx.engine_class.spec.engine.image_pull_secrets
    if pull_secrets:
        spec["imagePullSecrets"] = [{"name": s.name} for s in pull_secrets]
    spec["containers"] = [_container(ctx, component, copies)]
    spec["volumes"] = _volumes(ctx, component)
    spec.update(_scheduling(ctx, component))
    return spec


def _container(ctx: _Context, component: Component, copies: list[_SecretCopy]) -> Object:
    spec = ctx.engine_class.spec
    container: Object = {"name": engine.CONTAINER, "image": spec.engine.image}
    if spec.engine.image_pull_policy:
        container["imagePullPolicy"] = spec.engine.image_pull_policy
    container["args"] = list(engine.ARGS)
    container["env"] = _env(ctx, copies)
    container["ports"] = _container_ports(component)
    container.update(engine.probes())
    if component == DATA:
        container["lifecycle"] = {"preStop": {"sleep": {"seconds": engine.PRE_STOP_SLEEP_SECONDS}}}
    resources = spec.resources.data if component == DATA else spec.resources.seats
    if resources:
        container["resources"] = copy.deepcopy(resources)
    container["securityContext"] = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": True,
    }
    container["volumeMounts"] = _mounts(component)
    return container


def _container_ports(component: Component) -> list[Object]:
    ports = [{"name": engine.API_PORT_NAME, "containerPort": engine.API_PORT, "protocol": "TCP"}]
    if component == DATA:
        ports.append(
            {"name": engine.LEAF_PORT_NAME, "containerPort": engine.LEAF_PORT, "protocol": "TCP"}
        )
    return ports


def _env(ctx: _Context, copies: list[_SecretCopy]) -> list[Object]:
    """The operator's variables, then the copied Secrets, then the class's literal values last."""
    telemetry = ctx.engine_class.spec.telemetry
    env: list[Object] = [
        {"name": engine.NODE_ID_ENV, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": engine.TURSO_CACHE_ENV, "value": engine.TURSO_CACHE_DIR},
        {"name": engine.OTEL_SERVICE_NAME_ENV, "value": ctx.name},
    ]
    if telemetry.endpoint:
        env.append({"name": engine.OTEL_ENDPOINT_ENV, "value": telemetry.endpoint})
    if telemetry.protocol:
        env.append({"name": engine.OTEL_PROTOCOL_ENV, "value": telemetry.protocol})
    env.append(
        _secret_env(
            engine.OPERATOR_TOKEN_ENV, naming.api_token_secret(ctx.name), naming.API_TOKEN_KEY
        )
    )
    env_secret = naming.env_secret(ctx.name)
    env.extend(_secret_env(c.env, env_secret, c.env) for c in copies)
    env.extend(
        {"name": e.name, "value": e.value} for e in ctx.engine_class.spec.env if e.value is not None
    )
    return env


def _secret_env(name: str, secret: str, key: str) -> Object:
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}


def _volumes(ctx: _Context, component: Component) -> list[Object]:
    volumes: list[Object] = [
        {
            "name": "config",
            "secret": {
                "secretName": naming.config_secret(ctx.name),
                "items": [{"key": engine.config_file_key(component), "path": engine.CONFIG_FILE}],
            },
        },
        {"name": "home", "emptyDir": {}},
        {"name": "tmp", "emptyDir": {}},
    ]
    if component == SEATS:
        volumes.append({"name": "scratch", "emptyDir": {}})
    return volumes


def _mounts(component: Component) -> list[Object]:
    mounts: list[Object] = [
        {"name": "config", "mountPath": engine.CONFIG_DIR, "readOnly": True},
        {"name": "home", "mountPath": engine.HOME_DIR},
        {"name": "tmp", "mountPath": engine.TMP_DIR},
    ]
    if component == DATA:
        mounts.append({"name": naming.DATA_VOLUME, "mountPath": engine.DATA_DIR})
    else:
        mounts.append({"name": "scratch", "mountPath": engine.SCRATCH_DIR})
    return mounts


def _scheduling(ctx: _Context, component: Component) -> Object:
    """The class's placement. A spread constraint without a selector spreads this component.

    The class's author cannot know each company's labels; a constraint with no labelSelector
    would count no pods at all.
    """
    scheduling = ctx.engine_class.spec.scheduling
    result: Object = {}
    if scheduling.node_selector:
        result["nodeSelector"] = dict(scheduling.node_selector)
    if scheduling.tolerations:
        result["tolerations"] = copy.deepcopy(scheduling.tolerations)
    if scheduling.affinity:
        result["affinity"] = copy.deepcopy(scheduling.affinity)
    if scheduling.priority_class_name:
        result["priorityClassName"] = scheduling.priority_class_name
    if scheduling.topology_spread_constraints:
        constraints = copy.deepcopy(scheduling.topology_spread_constraints)
        for constraint in constraints:
            constraint.setdefault(
                "labelSelector", {"matchLabels": naming.selector(ctx.name, component)}
            )
        result["topologySpreadConstraints"] = constraints
    return result


def _service_port(name: str, port: int) -> Object:
    return {"name": name, "port": port, "targetPort": name, "protocol": "TCP"}


def _headless_service(ctx: _Context, component: Component) -> Object:
    """The governing Service: stable pod DNS (``<company>-data-0.<company>-data``).

    The data pod's name is published before it is ready, so seats pods can find the leaf port
    while the data pod is still starting.
    """
    ports = [_service_port(engine.API_PORT_NAME, engine.API_PORT)]
    if component == DATA:
        ports.append(_service_port(engine.LEAF_PORT_NAME, engine.LEAF_PORT))
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(ctx, naming.headless_service(ctx.name, component), component),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": component == DATA,
            "selector": naming.selector(ctx.name, component),
            "ports": ports,
        },
    }


def _api_service(ctx: _Context) -> Object:
    """``<company>-api``: the data pods' API and webhooks, for routes and the operator."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(ctx, naming.api_service(ctx.name), DATA),
        "spec": {
            "type": "ClusterIP",
            "selector": naming.selector(ctx.name, DATA),
            "ports": [_service_port(engine.API_PORT_NAME, engine.API_PORT)],
        },
    }


def _disruption_budget(ctx: _Context, component: Component) -> Object:
    """At most one pod of a component evicted at a time, and never a drain held up.

    ``maxUnavailable: 1``: a budget that allows no disruption (``maxUnavailable: 0``, or
    ``minAvailable: 1`` over one data pod) would block every drain of the node forever, which
    the install page promises the operator never does. The single data pod cannot stay
    available through its node's drain anyway (its volume is ReadWriteOnce); it drains
    gracefully on SIGTERM. With three data members the same budget keeps a quorum, and it
    moves seats pods one at a time. ``AlwaysAllow`` lets a drain evict pods that are not ready
    (seats pods are all unready while the data pod is away), so they never pin a node either.
    """
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _metadata(ctx, naming.disruption_budget(ctx.name, component), component),
        "spec": {
            "maxUnavailable": 1,
            "selector": {"matchLabels": naming.selector(ctx.name, component)},
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    }


def _tcp(port: int) -> Object:
    return {"protocol": "TCP", "port": port}


def _operator_peer(ctx: _Context) -> Object:
    return {
        "namespaceSelector": {
            "matchLabels": {"kubernetes.io/metadata.name": ctx.facts.operator_namespace}
        }
    }


def _network_policy(ctx: _Context, component: Component) -> Object:
    """Ingress to one company's pods of one component; everything not listed is denied.

    The broker's leaf port has no authentication, so only this company's own pods reach it.
    The API port admits the class's peers (the gateway), the operator and the company's pods
    on the data pod, and only the operator on seats pods (probes come from the kubelet, which
    NetworkPolicy does not filter).
    """
    own_pods = {"podSelector": {"matchLabels": naming.company_pods(ctx.name)}}
    if component == DATA:
        api_from = [
            *copy.deepcopy(ctx.engine_class.spec.network_policy.api_peers),
            _operator_peer(ctx),
            own_pods,
        ]
        rules = [
            {"from": [copy.deepcopy(own_pods)], "ports": [_tcp(engine.LEAF_PORT)]},
            {"from": api_from, "ports": [_tcp(engine.API_PORT)]},
        ]
    else:
        rules = [{"from": [_operator_peer(ctx)], "ports": [_tcp(engine.API_PORT)]}]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _metadata(ctx, naming.network_policy(ctx.name, component), component),
        "spec": {
            "podSelector": {"matchLabels": naming.selector(ctx.name, component)},
            "policyTypes": ["Ingress"],
            "ingress": rules,
        },
    }


def _webhook_route(ctx: _Context, notes: list[str]) -> Apply | None:
    """``/webhooks`` on the company's hostname: an HTTPRoute when the Gateway API was served at
    start, else an Ingress; none without a hostname."""
    hostname = ctx.company.spec.webhook_hostname
    if not hostname:
        return None
    if not ctx.facts.gateway_api:
        return Apply(INGRESS, _ingress(ctx, hostname))
    gateway = ctx.engine_class.spec.exposure.gateway
    if gateway is None:
        notes.append(
            f"no webhook route for {hostname}: EngineClass {ctx.class_name} sets no "
            f"spec.exposure.gateway.parentRefs to attach an HTTPRoute to"
        )
        return None
    return Apply(HTTP_ROUTE, _http_route(ctx, hostname, gateway.parent_refs))


def _http_route(ctx: _Context, hostname: str, parent_refs: list[dict[str, Any]]) -> Object:
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": _metadata(ctx, naming.webhook_route(ctx.name)),
        "spec": {
            "parentRefs": copy.deepcopy(parent_refs),
            "hostnames": [hostname],
            "rules": [
                {
                    "matches": [{"path": {"type": "PathPrefix", "value": "/webhooks"}}],
                    "backendRefs": [
                        {"name": naming.api_service(ctx.name), "port": engine.API_PORT}
                    ],
                }
            ],
        },
    }


def _ingress(ctx: _Context, hostname: str) -> Object:
    settings = ctx.engine_class.spec.exposure.ingress
    spec: Object = {}
    if settings is not None and settings.class_name:
        spec["ingressClassName"] = settings.class_name
    if settings is not None and settings.tls_secret_name:
        spec["tls"] = [{"hosts": [hostname], "secretName": settings.tls_secret_name}]
    backend = {
        "service": {"name": naming.api_service(ctx.name), "port": {"number": engine.API_PORT}}
    }
    spec["rules"] = [
        {
            "host": hostname,
            "http": {"paths": [{"path": "/webhooks", "pathType": "Prefix", "backend": backend}]},
        }
    ]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": _metadata(ctx, naming.webhook_route(ctx.name)),
        "spec": spec,
    }


# --- The plan ------------------------------------------------------------------------------


def _changed(children: list[Apply], observed: Observed) -> list[Apply]:
    """Only the children whose apply would change what exists."""
    return [
        child
        for child in children
        if apply_would_change(
            child.object,
            observed.children.get((child.resource.kind, object_name(child.object))),
            DEFAULT_FIELD_MANAGER,
        )
    ]


def _unwanted(ctx: _Context, desired: _Desired) -> list[Delete]:
    """Owned children of a managed kind that the desired set no longer holds (never a claim)."""
    wanted = {(a.resource.kind, object_name(a.object)) for a in desired.children}
    deletes = []
    for (kind, name), obj in sorted(ctx.observed.children.items()):
        resource = _PRUNABLE.get(kind)
        if resource is None or (kind, name) in wanted or not is_controlled_by(obj, ctx.raw):
            continue
        uid = (obj.get("metadata") or {}).get("uid")
        deletes.append(Delete(resource, ctx.namespace, name, uid))
    return deletes


def _accepted_conditions(
    ctx: _Context, desired: _Desired, plan: Plan, now: datetime | None
) -> list[dict[str, Any]]:
    generation = object_generation(ctx.raw)
    suspended = ctx.company.spec.suspend
    data_name = naming.statefulset(ctx.name, DATA)
    sts = ctx.child(STATEFUL_SET, data_name)
    applying = any(
        a.resource == STATEFUL_SET and object_name(a.object) == data_name for a in plan.applies
    )
    notes = [f"EngineClass {ctx.class_name} runs {desired.image}", *desired.notes]
    if versions.protection(desired.image) == versions.UNORDERED:
        notes.append(
            "the image is named by a digest, main or a commit, not a semantic version, so the "
            "operator cannot order it and DowngradeRefused does not protect this company: never "
            "point its class at an older engine than it has run"
        )
    suspended_condition = (
        condition(
            SUSPENDED,
            True,
            "Suspended",
            "spec.suspend is set: every engine pod is scaled to zero; the data volume is kept",
            observed_generation=generation,
        )
        if suspended
        else condition(SUSPENDED, False, "NotSuspended", "", observed_generation=generation)
    )
    return _set_all(
        (ctx.raw.get("status") or {}).get("conditions"),
        [
            condition(ACCEPTED, True, "Accepted", "; ".join(notes), observed_generation=generation),
            _ready(
                sts, applying=applying, suspended=suspended, refused=False, generation=generation
            ),
            suspended_condition,
        ],
        now,
    )


def _ready(
    sts: Object | None,
    *,
    applying: bool,
    suspended: bool,
    refused: bool,
    generation: int | None,
) -> dict[str, Any]:
    """Ready when the data StatefulSet, as last applied, has a ready pod."""
    if suspended:
        return dict(
            condition(
                READY,
                False,
                "Suspended",
                "the company is suspended",
                observed_generation=generation,
            )
        )
    if sts is None and refused:
        return dict(
            condition(
                READY,
                False,
                "NotAccepted",
                "the company is not accepted (see the Accepted condition)",
                observed_generation=generation,
            )
        )
    status = (sts or {}).get("status") or {}
    current = sts is not None and (status.get("observedGeneration") or 0) >= (
        object_generation(sts) or 0
    )
    if applying or not current:
        # One message whether the StatefulSet is being created or changed: the reconcile that
        # applies it and the one that next finds it, not yet rolled out, decide the same status.
        return dict(
            condition(
                READY,
                False,
                "Progressing",
                "the data StatefulSet is rolling out",
                observed_generation=generation,
            )
        )
    if (status.get("readyReplicas") or 0) < 1:
        return dict(
            condition(
                READY,
                False,
                "DataNotReady",
                "the data pod is not ready yet (it answers /ready 503 while it "
                "starts, and until the company's first revision is applied)",
                observed_generation=generation,
            )
        )
    return dict(
        condition(READY, True, "DataReady", "the data pod is ready", observed_generation=generation)
    )


def _set_all(
    old: list[dict[str, Any]] | None, new: list[Any], now: datetime | None
) -> list[dict[str, Any]]:
    conditions = list(old or [])
    for entry in new:
        conditions = set_condition(conditions, entry, now)
    return conditions


def _status_change(
    company: Object,
    conditions: list[dict[str, Any]],
    image: str | None,
    high: semver.Version | None,
) -> Object | None:
    """The desired status, or None when the observed one already says the same.

    Unknown fields are left out, which a server-side apply of the status takes as "no longer
    set" for a field this manager set before.
    """
    status: Object = {
        "observedGeneration": object_generation(company),
        "conditions": conditions,
        "engineImage": image,
        "engineVersion": versions.format_version(versions.image_version(image or "")),
        "highestEngineVersion": versions.format_version(high),
        "versionProtection": versions.protection(image) if image else None,
    }
    known_new = {k: v for k, v in status.items() if v is not None}
    old = company.get("status") or {}
    known_old = {k: old[k] for k in _STATUS_FIELDS if old.get(k) is not None}
    return None if known_old == known_new else known_new


def _claim_annotations(observed: Observed, high: semver.Version | None) -> dict[str, str]:
    """Raise the data claim's high-water annotation to ``high`` when it is lower or missing."""
    if observed.data_claim is None or high is None:
        return {}
    annotations = (observed.data_claim.get("metadata") or {}).get("annotations") or {}
    current = versions.parse_version(annotations.get(versions.CLAIM_ANNOTATION))
    if current is not None and current >= high:
        return {}
    return {versions.CLAIM_ANNOTATION: str(high)}


def _image_of(sts: Object | None) -> str | None:
    """The engine container's image in an observed StatefulSet."""
    containers = (((sts or {}).get("spec") or {}).get("template") or {}).get("spec") or {}
    for container in containers.get("containers") or ():
        if container.get("name") == engine.CONTAINER:
            image = container.get("image")
            return image if isinstance(image, str) else None
    return None
