"""What to write now of a Company's plan, and in which order: pure, no I/O.

:func:`crewlet_operator_daemon.company.reconcile` decides *what* a company should be; this module
decides *when* each part of it is written. A company whose verdict changes (a new one, or one whose
class or spec changed what it is told: accepted or why not, and the message) hears it first:
its status is written on its own, with an Event, and its children come when the queue comes
back to it at the children's (low) priority. So a burst of new tenants hears Accepted, or why
not, at the pace the API server takes status writes, before any company's thirteen children
are written. A change that leaves the verdict as it was (suspending a company, say) is written
whole at once, so the conditions never run ahead of what they describe. Children left to write
for a company already told its verdict for its generation (what a leader that stopped between
a verdict and its children left, a class's rollout, a child changed by hand) are backlog: they
go back to the queue at the children's priority too.

The decision table (``news``: the plan's verdict is neither the stored nor the announced one;
``children``: the plan applies or deletes a child; ``current``: the stored verdict was decided
for the company's generation):

| children | news | announced | current | order                                       |
|----------|------|-----------|---------|---------------------------------------------|
| yes      | yes  | any       | any     | VERDICT_FIRST                               |
| yes      | no   | none      | yes     | LATER (the children wait behind the stored) |
| yes      | no   | none      | no      | ALL                                         |
| yes      | no   | a verdict | any     | ALL (the children's turn)                   |
| no       | any  | any       | any     | ALL (the status, if it changed)             |

A reconcile decides its plan once. What it writes out of a new company's files is settled first
(:func:`render_files`), from what the table reads besides the plan, so that no step of the plan
needs more than it holds. A child the API server refuses on the way turns the plan into its
refusal, which the plan carries (:func:`after_rejection`): nothing is decided again.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from crewlet_operator import STATEFUL_SET, is_controlled_by
from crewlet_operator import KubeObject as Object
from crewlet_operator.objects import labels
from crewlet_operator_daemon import naming
from crewlet_operator_daemon.plan import Apply, Observed, Plan
from crewlet_operator_daemon.status import Condition, verdict


class Order(enum.Enum):
    """What a reconcile writes of its plan."""

    ALL = "all"
    """Everything the plan holds: the children, the claim's annotations and the status."""
    VERDICT_FIRST = "verdict first"
    """The status alone (the verdict and its Event); the children at the children's priority."""
    LATER = "later"
    """Nothing: the children go back to the queue at the children's priority (backlog)."""


@dataclass(frozen=True)
class Steps:
    """What to write now (:func:`steps`)."""

    order: Order
    news: bool
    """The plan's verdict is news to the company: an Event says it, and its writes go ahead of
    the children's (:class:`~crewlet_operator_daemon.slots.ApplySlots`)."""
    announced: Condition | None
    """The verdict the company's children wait behind once this step is written (LATER and
    VERDICT_FIRST), or None (ALL: nothing waits)."""
    needs_files: bool
    """The plan must be decided whole (its config files written out) before anything is
    written: its children are written, or dry-run for the API server's admission."""

    @property
    def children_later(self) -> bool:
        """The company goes back to the queue at the children's priority."""
        return self.order is not Order.ALL


def steps(
    plan: Plan,
    *,
    stored: Condition | None,
    current: Condition | None,
    announced: Condition | None,
    admitted: bool,
) -> Steps:
    """Decide what to write now of ``plan`` (the module's table).

    ``stored`` is the verdict in the company's status
    (:func:`crewlet_operator_daemon.status.verdict`), ``current`` the same when it was decided for
    the company's current generation (:func:`crewlet_operator_daemon.status.current_verdict`),
    ``announced`` the verdict its children wait behind since an earlier step (None when none do),
    and ``admitted`` whether the API server has admitted the children of a company of its class's
    generation (a dry run), so that a verdict written first needs no files.
    """
    decided = verdict(plan.status)
    news = decided is not None and decided not in (stored, announced)
    children = bool(plan.applies or plan.deletes)
    if children and news:
        return Steps(Order.VERDICT_FIRST, True, decided, not plan.complete and not admitted)
    if children and announced is None and current is not None:
        return Steps(Order.LATER, False, current, False)
    return Steps(Order.ALL, news, None, not plan.complete)


def render_files(
    *,
    stored: Condition | None,
    current: Condition | None,
    announced: Condition | None,
    admitted: bool,
) -> bool:
    """Whether a reconcile writes a new company's config files out
    (:func:`crewlet_operator_daemon.company.reconcile`'s ``render_files``), settled before its
    plan is decided, from what :func:`steps` is given besides the plan: unless no step of its
    plan could need them (:attr:`Steps.needs_files`), so that the plan is decided once.

    A verdict is decided for less (the files checked, not written out): a new company's, or
    one that has children left to write behind its current verdict. The files are written out
    when the children come next (their verdict was announced), when they may be dry-run (the
    API server has not admitted the class's generation yet), and when they may be written at
    once (a stored verdict of an older generation: a changed spec that leaves it as it was).
    Until a class generation's first dry run passes, a new company's files are written out
    even where its children turn out to be backlog: they are needed whenever its verdict
    changes, which only the plan can tell.
    """
    return announced is not None or not admitted or (current is None and stored is not None)


def after_rejection(plan: Plan, rejection: str, *, stored: Condition | None) -> tuple[Plan, Steps]:
    """The plan and the steps that follow when the API server refuses one of ``plan``'s
    children (``rejection``, its answer) on its way: the plan's refusal
    (:attr:`~crewlet_operator_daemon.plan.Plan.rejected`), which applies nothing and is written
    whole at once, superseding the verdict the children waited behind; news unless it is the
    ``stored`` verdict (the module's table, for a plan with no children, nothing announced).
    """
    assert plan.rejected is not None, "a child refused of a plan that applies none"
    refused = plan.rejected(rejection)
    decided = verdict(refused.status)
    news = decided is not None and decided != stored
    return refused, Steps(Order.ALL, news, None, not refused.complete)


def waves(applies: list[Apply]) -> list[list[Apply]]:
    """The plan's applies in two waves: every child, then the StatefulSets, which start the
    engine and mount the others (a refused child is met before anything runs)."""
    workloads = [a for a in applies if a.resource == STATEFUL_SET]
    return [w for w in ([a for a in applies if a.resource != STATEFUL_SET], workloads) if w]


def labelled_namesake(company: Object, observed: Observed) -> bool:
    """Whether an object labelled as the operator's, but not controlled by ``company``, holds
    one of its names (labels copied by hand): no event about that object reaches the company,
    which must look again by itself."""
    return any(
        labels(holder).get(naming.MANAGED_BY_LABEL) == naming.MANAGED_BY
        and not is_controlled_by(holder, company)
        for holder in observed.namesakes.values()
    )
