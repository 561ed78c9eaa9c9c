"""The Crewlet reconcile: from a Company, its EngineClass and what exists, to a :class:`Plan`.

A pure function: the controller gathers the inputs from its caches and executes the plan. Every
decision is made here, in the order the install page promises:

1. Refusals first (``Accepted=False`` with a reason and a message that says what to do; see
   :mod:`crewlet_operator_daemon.inputs`). A refused company's children are left exactly as they
   are: nothing is applied, nothing deleted, so a running engine keeps running on what it was given
   last. A name held by an object the company does not control is a refusal too
   (``NameTaken``): the operator never writes what it did not make.
2. Otherwise the complete desired set of children is built
   (:mod:`crewlet_operator_daemon.children`), and only the children that differ from what exists are
   applied; owned children that are no longer wanted (a webhook route of the other kind) are
   deleted. A volume claim is never deleted.
3. The status (:mod:`crewlet_operator_daemon.status`) and the high-water mark on the data claim
   (:mod:`crewlet_operator_daemon.versions`).

So ``reconcile`` over what it desired itself returns an empty plan: nothing is written when
nothing changed.
"""

from __future__ import annotations

import functools
from datetime import datetime

from crewlet_operator import SECRET, Resource, is_controlled_by
from crewlet_operator import KubeObject as Object
from crewlet_operator.fieldset import apply_would_change
from crewlet_operator.objects import name as object_name
from crewlet_operator_daemon import children, inputs, naming, status, versions
from crewlet_operator_daemon.children import Desired
from crewlet_operator_daemon.inputs import Inputs, Refused, TokenFactory, new_token
from crewlet_operator_daemon.plan import (
    CHILD_RESOURCES,
    GATEWAY_CHILD_RESOURCES,
    Apply,
    ClusterFacts,
    Delete,
    Observed,
    Plan,
)

_PRUNABLE: dict[str, Resource] = {r.kind: r for r in (*CHILD_RESOURCES, *GATEWAY_CHILD_RESOURCES)}
"""Kinds an unwanted child may be deleted of: a Company's children, which hold no volume claim."""


# -- entry points ------------------------------------------------------------------------------


def reconcile(
    company: Object,
    engine_class: Object | None,
    namespace_labels: dict[str, str],
    observed: Observed,
    facts: ClusterFacts,
    *,
    now: datetime | None = None,
    token_factory: TokenFactory = new_token,
    render_files: bool = True,
) -> Plan:
    """Decide what to write for ``company``; pure, no I/O.

    ``engine_class`` is the class the company names, None when it does not exist.
    ``namespace_labels`` are the labels of the company's namespace (for ``allowedNamespaces``).
    ``now`` stamps conditions that flip (default: the current time). ``token_factory`` makes
    the operator's API token, only when no ``<company>-api-token`` Secret exists yet.
    ``render_files=False`` decides the same status for less (a company's verdict, written ahead
    of its children): a company with no config Secret yet has its crewlet.yaml files checked
    but not written out, and the plan is not :attr:`~crewlet_operator_daemon.plan.Plan.complete`.
    """
    if company.get("metadata", {}).get("deletionTimestamp"):
        return Plan()  # The garbage collector removes the children; nothing to decide.
    try:
        ctx = inputs.read_inputs(
            company, engine_class, namespace_labels, observed, facts, token_factory=token_factory
        )
        high_water = inputs.refuse_downgrade(ctx)
        inputs.refuse_rejected(ctx)
        desired = children.build(ctx, render_files=render_files)
        inputs.refuse_taken_names(ctx, desired.children)
    except Refused as refusal:
        return _refused_plan(company, observed, refusal, now)
    # A config Secret whose files were left out is written all the same: they are data it
    # does not hold. So the plan applies the same children with its files or without them.
    unwritten = naming.config_secret(ctx.name) if desired.files_left_out else None
    plan = Plan(
        applies=_changed(desired.children, observed, facts.field_manager, unwritten),
        deletes=_unwanted(ctx, desired),
        complete=not desired.files_left_out,
    )
    high = versions.highest(high_water, versions.image_version(desired.image))
    conditions = status.accepted_conditions(ctx, desired, plan, now)
    plan.status = status.status_change(company, conditions, desired.image, high)
    plan.claim_annotations = versions.claim_annotations(observed, high)
    if plan.applies:
        plan.rejected = functools.partial(_rejected_plan, company, observed, ctx.class_name, now)
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
    ctx = inputs.read_inputs(
        company, engine_class, None, observed, facts, token_factory=token_factory
    )
    return children.build(ctx).children


# -- the plan ----------------------------------------------------------------------------------


def _refused_plan(
    company: Object, observed: Observed, refusal: Refused, now: datetime | None
) -> Plan:
    """Report the refusal and touch nothing; the status still tells what is running."""
    data = versions.data_statefulset(company, observed)
    high = versions.high_water(company, observed)
    conditions = status.refused_conditions(company, data, refusal, now)
    return Plan(
        status=status.status_change(company, conditions, versions.running_image(data), high),
        claim_annotations=versions.claim_annotations(observed, high),
    )


def _rejected_plan(
    company: Object, observed: Observed, class_name: str, now: datetime | None, rejection: str
) -> Plan:
    """The plan of ``company`` once the API server refused one of its children with
    ``rejection``: :func:`reconcile`'s when ``observed`` holds that answer, which meets no
    other refusal before it (it decided a plan that applies children)."""
    return _refused_plan(company, observed, inputs.rejected(class_name, rejection), now)


def _changed(
    desired: list[Apply], observed: Observed, field_manager: str, unwritten: str | None = None
) -> list[Apply]:
    """Only the children whose apply as ``field_manager`` would change what exists, each with
    the object it lands on (None: it creates the child), and the config Secret whose files
    were left out (named ``unwritten``): they would change it."""
    changed = []
    for child in desired:
        child_name = object_name(child.object)
        existing = observed.children.get((child.resource.kind, child_name))
        left_out = child.resource == SECRET and child_name == unwritten
        if left_out or apply_would_change(child.object, existing, field_manager):
            changed.append(Apply(child.resource, child.object, existing))
    return changed


def _unwanted(ctx: Inputs, desired: Desired) -> list[Delete]:
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
