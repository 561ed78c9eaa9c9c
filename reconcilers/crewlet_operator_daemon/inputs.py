"""A Company's inputs, read and judged: the company, its EngineClass, its namespace, its Secrets.

Everything that can refuse a company is here, with messages that say what to do; the reasons
``Accepted=False`` carries are API, in :mod:`crewlet_operator_daemon.api.conditions`. Refusals come
in the order a person would fix them: the company itself (``InvalidSpec``, ``InvalidName``,
``HostnameTaken``), then its class (``ClassNotFound``, ``InvalidClass``, ``ClassNotAllowed``,
``HostnameNotAllowed``),
the engine version (``DowngradeRefused``), what the class asks for (``InvalidClass`` again, for
what the CRD's schema cannot judge, and for what the API server refused of a child rendered
from it), the Secrets it references (``SecretUnreadable``, ``SecretNotFound``) and last the
names of its objects, when someone else's objects hold them (``NameTaken``).
"""

from __future__ import annotations

import secrets as token_source
from collections.abc import Callable
from dataclasses import dataclass

import semver
from pydantic import ValidationError

from crewlet_operator import KubeObject as Object
from crewlet_operator import Resource, get_controller_of, is_controlled_by
from crewlet_operator.diff import parse_quantity
from crewlet_operator.objects import name as object_name
from crewlet_operator.predicate import label_selector_matches
from crewlet_operator_daemon import engine, hostnames, naming, versions
from crewlet_operator_daemon.api.conditions import (
    CLASS_NOT_ALLOWED,
    CLASS_NOT_FOUND,
    DOWNGRADE_REFUSED,
    HOSTNAME_NOT_ALLOWED,
    HOSTNAME_TAKEN,
    INVALID_CLASS,
    INVALID_NAME,
    INVALID_SPEC,
    NAME_TAKEN,
    SECRET_NOT_FOUND,
    SECRET_UNREADABLE,
)
from crewlet_operator_daemon.api.v1alpha1 import (
    MIN_STORAGE,
    MIN_STORAGE_WITH_S3,
    Company,
    EngineClass,
    SecretKeyRef,
)
from crewlet_operator_daemon.naming import DATA, SEATS
from crewlet_operator_daemon.plan import Apply, ClusterFacts, Observed

TokenFactory = Callable[[], str]
"""Makes the operator's API token for a company that has none yet."""


def new_token() -> str:
    """A fresh operator API token (256 bits, URL-safe: it is expanded into YAML unquoted).

    The only non-deterministic input of the reconcile, used once per company: an existing
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
class Inputs:
    """The parsed inputs of one reconcile, which every builder reads."""

    raw: Object
    """The Company as stored."""
    company: Company
    """The Company, parsed."""
    engine_class: EngineClass
    """The EngineClass it names, parsed."""
    class_unfit: Refused | None
    """Why the class cannot be run as it asks, found as it was read (:class:`ClassContent`)
    and refused in its turn (:func:`check_class`), or None."""
    observed: Observed
    """What exists, from the caches."""
    facts: ClusterFacts
    """What the operator learnt about the cluster at start-up."""
    new_token: TokenFactory
    """Makes the API token, when the company has none yet."""

    @property
    def name(self) -> str:
        """The Company's name, which names its children."""
        return str(self.raw["metadata"]["name"])

    @property
    def namespace(self) -> str:
        """The Company's namespace, where its children live."""
        return str(self.raw["metadata"]["namespace"])

    @property
    def class_name(self) -> str:
        """The EngineClass the Company names."""
        return self.company.spec.class_name

    def child(self, resource: Resource, name: str) -> Object | None:
        """The observed child of ``resource``'s kind named ``name``, if it exists."""
        return self.observed.children.get((resource.kind, name))


@dataclass(frozen=True)
class SecretCopy:
    """One Secret key the class references, copied into ``<company>-env`` under ``env``."""

    env: str
    """The environment variable it feeds, and its key in the copy."""
    ref: SecretKeyRef
    """The Secret's key the class references."""
    where: str
    """The class field that references it, for messages."""


# -- the company, its class and its namespace --------------------------------------------------


def read_inputs(
    raw: Object,
    engine_class: Object | None,
    namespace_labels: dict[str, str] | None,
    observed: Observed,
    facts: ClusterFacts,
    *,
    token_factory: TokenFactory,
) -> Inputs:
    """Parse the inputs, refusing in the order a person would fix them.

    ``namespace_labels`` None skips the namespace's admission.

    Raises:
        Refused: the company, its name or its class cannot be run, or the class does not
            admit the namespace.
    """
    parsed_company = _parse_company(raw)
    problem = naming.name_problem(str(raw["metadata"]["name"]))
    if problem:
        raise Refused(INVALID_NAME, problem)
    wanted = parsed_company.spec.webhook_hostname
    if observed.hostname_route is not None:
        entrance = (
            "through the same Gateway"
            if observed.hostname_route.startswith("HTTPRoute ")
            else "on the same IngressClass"
        )
        raise Refused(
            HOSTNAME_TAKEN,
            f"{observed.hostname_route}, a route the operator did not write, serves the webhook "
            f"hostname {wanted} {entrance}, and a hostname routes to one workload: set another "
            f"spec.webhookHostname, or have that route give the hostname up first",
        )
    if observed.hostname_holder is not None:
        raise Refused(
            HOSTNAME_TAKEN,
            f"Company {observed.hostname_holder} holds the webhook hostname {wanted}, and a "
            f"hostname routes to one workload: set another spec.webhookHostname, or remove it "
            f"from that company first",
        )
    class_name = parsed_company.spec.class_name
    if engine_class is None:
        raise Refused(
            CLASS_NOT_FOUND,
            f"EngineClass {class_name} does not exist: create it, or set spec.className to an "
            f"existing class",
        )
    parsed_class, unfit = _read_class(class_name, engine_class)
    if namespace_labels is not None:
        _check_namespace_allowed(parsed_class, class_name, raw, namespace_labels)
    _check_hostname_allowed(parsed_class, class_name, raw, wanted)
    return Inputs(raw, parsed_company, parsed_class, unfit, observed, facts, token_factory)


def _parse_company(raw: Object) -> Company:
    try:
        return Company.model_validate(raw)
    except ValidationError as error:
        raise Refused(INVALID_SPEC, f"the Company is invalid: {_errors(error)}") from None


@dataclass
class ClassContent:
    """What is read of one content of an EngineClass, each part once, when first asked for."""

    read: tuple[EngineClass, Refused | None] | Refused | None = None
    """The class parsed with what :func:`check_class` finds in it, or why it does not fit its
    model (both ``InvalidClass``)."""
    referenced: frozenset[tuple[str, str]] | None = None
    """``(namespace, name)`` of every Secret it references
    (:func:`crewlet_operator_daemon.references.referenced_secrets`)."""


_CLASS_CONTENTS: dict[tuple[str, str], ClassContent] = {}
"""The one memo of what is read of a class, by its (uid, resourceVersion), one resourceVersion
being one content: every reconcile of a company reads its class (a start, 10,000 times of a few
classes). Bounded by the classes in use."""


def class_content(engine_class: Object) -> ClassContent:
    """The memo's entry for the class's content; a fresh one, kept nowhere, for a class without
    a uid and a resourceVersion (never stored, as in a unit test)."""
    meta = engine_class.get("metadata") or {}
    uid, version = meta.get("uid"), meta.get("resourceVersion")
    if not (isinstance(uid, str) and isinstance(version, str)):
        return ClassContent()
    content = _CLASS_CONTENTS.get((uid, version))
    if content is None:
        if len(_CLASS_CONTENTS) >= 256:
            _CLASS_CONTENTS.clear()
        content = _CLASS_CONTENTS[(uid, version)] = ClassContent()
    return content


def _read_class(class_name: str, raw: Object) -> tuple[EngineClass, Refused | None]:
    """The class parsed, and why it cannot be run as it asks (None: it can).

    Raises:
        Refused: ``InvalidClass``, the class does not fit its model.
    """
    content = class_content(raw)
    if content.read is None:
        content.read = _parse_and_check_class(class_name, raw)
    if isinstance(content.read, Refused):
        raise Refused(content.read.reason, content.read.message)
    return content.read


def _parse_and_check_class(
    class_name: str, raw: Object
) -> tuple[EngineClass, Refused | None] | Refused:
    """Refusals are returned, not raised, to be kept with the content as a parse is."""
    try:
        parsed = EngineClass.model_validate(raw)
    except ValidationError as error:
        return Refused(
            INVALID_CLASS,
            f"EngineClass {class_name} is invalid: {_errors(error)}; ask the platform's "
            f"administrators to fix it, or use another class",
        )
    try:
        _check_storage(parsed, class_name)
        _check_resources(parsed, class_name)
        _check_env_names(parsed, class_name)
    except Refused as unfit:
        return parsed, unfit
    return parsed, None


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
            INVALID_CLASS,
            f"EngineClass {class_name} has an invalid spec.allowedNamespaces ({error}); ask the "
            f"platform's administrators to fix it",
        ) from None
    if not allowed:
        raise Refused(
            CLASS_NOT_ALLOWED,
            f"EngineClass {class_name} does not admit namespace {namespace}: label the "
            f"namespace to match spec.allowedNamespaces or use another class",
        )


def _check_hostname_allowed(
    engine_class: EngineClass, class_name: str, raw: Object, wanted: str | None
) -> None:
    """``spec.exposure.allowedHostnames`` gives the company the webhook hostname it asks for
    (absent: any hostname)."""
    patterns = engine_class.spec.exposure.allowed_hostnames
    namespace = str(raw["metadata"]["namespace"])
    if not wanted or hostnames.allowed(wanted, patterns, namespace):
        return
    given = ", ".join(patterns or []) or "none"
    raise Refused(
        HOSTNAME_NOT_ALLOWED,
        f"EngineClass {class_name} gives its companies the webhook hostnames {given} "
        f"({hostnames.NAMESPACE_PLACEHOLDER} being {namespace}), and not {wanted}: set "
        f"spec.webhookHostname to one of them, or ask the platform's administrators for this one",
    )


# -- the engine version ------------------------------------------------------------------------


def refuse_downgrade(ctx: Inputs) -> semver.Version | None:
    """An ordered image below the high-water mark would open migrated data with an older engine.
    Returns the mark (status, claim and data StatefulSet: :func:`versions.high_water`).

    Raises:
        Refused: ``DowngradeRefused``.
    """
    image = ctx.engine_class.spec.engine.image
    candidate = versions.image_version(image)
    high = versions.high_water(ctx.raw, ctx.observed)
    if not versions.is_downgrade(candidate, high):
        return high
    raise Refused(
        DOWNGRADE_REFUSED,
        f"EngineClass {ctx.class_name} runs {image} (version {candidate}), older than {high}, "
        f"the highest engine version this company's data has run, and the engine migrates its "
        f"data forward only: point the class at {high} or newer, or use a class that does; to "
        f"go back, restore the data volume from a backup taken before {high} first ran on it",
    )


# -- what the class asks for -------------------------------------------------------------------


def check_class(ctx: Inputs) -> None:
    """What the CRD's schema cannot judge: the volume's floor, quantities, variable names
    (judged once per class content, as it is read).

    Raises:
        Refused: ``InvalidClass``, naming the field to fix.
    """
    if ctx.class_unfit is not None:
        raise Refused(ctx.class_unfit.reason, ctx.class_unfit.message)


def _check_storage(engine_class: EngineClass, class_name: str) -> None:
    """The data volume's size parses and is at least the floor (12Gi, or 9Gi with S3)."""
    spec = engine_class.spec
    floor = MIN_STORAGE_WITH_S3 if spec.files.s3 is not None else MIN_STORAGE
    try:
        size = parse_quantity(spec.storage.size)
    except ValueError:
        size = None
    if size is None or size < parse_quantity(floor):
        raise Refused(
            INVALID_CLASS,
            f"EngineClass {class_name} asks for a data volume of {spec.storage.size!r}; "
            f"the engine needs at least {floor}{' (files in S3)' if floor != MIN_STORAGE else ''}"
            f": ask the platform's administrators to fix spec.storage.size",
        )


def _check_resources(engine_class: EngineClass, class_name: str) -> None:
    """Every request and limit is a quantity: the API server cannot even decode a StatefulSet
    holding another (a 500, not a 422 naming the field), so the reconcile names it."""
    resources = engine_class.spec.resources
    for component, requirements in ((DATA, resources.data), (SEATS, resources.seats)):
        for section in ("requests", "limits"):
            for resource, amount in ((requirements or {}).get(section) or {}).items():
                try:
                    parse_quantity(amount)
                except (TypeError, ValueError):
                    raise Refused(
                        INVALID_CLASS,
                        f"EngineClass {class_name}: spec.resources.{component}.{section}."
                        f"{resource} is {amount!r}, not a Kubernetes quantity (e.g. 500m, 2Gi); "
                        f"ask the platform's administrators to fix the class",
                    ) from None


def _check_env_names(engine_class: EngineClass, class_name: str) -> None:
    """No variable the operator sets itself, none set twice (the last one would silently win
    inside the pod), and each ``spec.env`` entry either a value or a Secret's key."""
    spec = engine_class.spec
    names = [k.name for k in spec.model_keys] + [e.name for e in spec.env]
    seen: set[str] = set()
    for name in names:
        if name in engine.RESERVED_ENV or name in seen:
            why = "is set by the operator" if name in engine.RESERVED_ENV else "is set twice"
            raise Refused(
                INVALID_CLASS,
                f"EngineClass {class_name}: environment variable {name} {why} (spec.env, "
                f"spec.modelKeys); ask the platform's administrators to fix the class",
            )
        seen.add(name)
    for entry in spec.env:
        if (entry.value is None) == (entry.secret_ref is None):
            raise Refused(
                INVALID_CLASS,
                f"EngineClass {class_name}: spec.env {entry.name} needs exactly one of "
                f"value and secretRef; ask the platform's administrators to fix the class",
            )


# -- the Secrets it references -----------------------------------------------------------------


def secret_copies(ctx: Inputs) -> list[SecretCopy]:
    """Every Secret key the class references, keyed by the variable it feeds, in env order."""
    spec = ctx.engine_class.spec
    copies = [SecretCopy(k.name, k.secret_ref, "spec.modelKeys") for k in spec.model_keys]
    if spec.telemetry.headers is not None:
        copies.append(
            SecretCopy(engine.OTEL_HEADERS_ENV, spec.telemetry.headers, "spec.telemetry.headers")
        )
    s3 = spec.files.s3
    if s3 is not None and s3.credentials is not None:
        copies.append(
            SecretCopy(
                engine.S3_ACCESS_KEY_ENV,
                s3.credentials.access_key_id,
                "spec.files.s3.credentials.accessKeyId",
            )
        )
        copies.append(
            SecretCopy(
                engine.S3_SECRET_KEY_ENV,
                s3.credentials.secret_access_key,
                "spec.files.s3.credentials.secretAccessKey",
            )
        )
    copies.extend(SecretCopy(e.name, e.secret_ref, "spec.env") for e in spec.env if e.secret_ref)
    return copies


def copied_values(ctx: Inputs, copies: list[SecretCopy]) -> dict[str, str]:
    """The base64 values of every referenced key, as the source Secrets hold them.

    Raises:
        Refused: ``SecretUnreadable`` or ``SecretNotFound``, with every such Secret or key
            named (names only: a value never reaches a message).
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
            SECRET_UNREADABLE,
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
            SECRET_NOT_FOUND,
            f"EngineClass {ctx.class_name} references what is not there: {'; '.join(missing)}. "
            f"Ask the platform's administrators to create it or fix the class",
        )
    return values


def refuse_rejected(ctx: Inputs) -> None:
    """The API server admits what was rendered from the class: a field only it can judge (a
    toleration, a storage class name, the operator's admission policy) refuses the company.

    Raises:
        Refused: ``InvalidClass``, with the API server's answer.
    """
    if ctx.observed.rejection is not None:
        raise rejected(ctx.class_name, ctx.observed.rejection)


def rejected(class_name: str, rejection: str) -> Refused:
    """The refusal of a company of EngineClass ``class_name`` one of whose children the API
    server refused with ``rejection`` (its answer): ``InvalidClass``, which says what to fix."""
    policy = "ValidatingAdmissionPolicy" in rejection
    return Refused(
        INVALID_CLASS,
        f"the API server refused a child of the company: {rejection}; ask the platform's "
        f"administrators to fix EngineClass {class_name}"
        + (" or the values of the operator's admission policy" if policy else ""),
    )


# -- the names of its objects ------------------------------------------------------------------


def refuse_taken_names(ctx: Inputs, wanted: list[Apply]) -> None:
    """No object the company wants is held under its name by an object it does not control.

    The operator never writes, labels or takes over an object it did not make: its writes would
    land on a tenant's own object (and deleting the Company would then delete it), so the
    company waits until every name is free.

    Raises:
        Refused: ``NameTaken``, naming every object that holds a name and who controls it.
    """
    taken: list[str] = []
    for child in wanted:
        key = (child.resource.kind, object_name(child.object))
        holder = ctx.observed.children.get(key) or ctx.observed.namesakes.get(key)
        if holder is not None and not is_controlled_by(holder, ctx.raw):
            taken.append(f"{key[0]} {key[1]} ({_held_by(holder, ctx.name)})")
    if not taken:
        return
    held = (
        "the name of one of the company's objects is held by an object"
        if len(taken) == 1
        else f"the names of {len(taken)} of the company's objects are held by objects"
    )
    raise Refused(
        NAME_TAKEN,
        f"{held} the operator did not make: {'; '.join(taken)}. The operator never writes, "
        f"labels or takes over an object it did not make: rename or delete "
        f"{'it' if len(taken) == 1 else 'them'}, or recreate the Company under another name; "
        f"the company proceeds once every name is free",
    )


def _held_by(obj: Object, company: str) -> str:
    """Who controls an object that holds one of ``company``'s names, as a message says it."""
    controller = get_controller_of(obj)
    if controller is None:
        return "controlled by no one"
    kind, name = controller.get("kind"), controller.get("name")
    if kind == "Company" and name == company:
        return (
            f"left by an earlier Company {company} (uid {controller.get('uid')}), which the "
            f"garbage collector deletes with it"
        )
    return f"controlled by {kind} {name}"
