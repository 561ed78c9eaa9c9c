"""What a reconcile writes now of a Company's plan (crewlet_operator_daemon.steps): one test per row
of its decision table, and the pure helpers beside it."""

from __future__ import annotations

import pytest

from crewlet_operator import SECRET, SERVICE, STATEFUL_SET
from crewlet_operator import KubeObject as Object
from crewlet_operator_daemon.plan import Apply, Delete, Observed, Plan
from crewlet_operator_daemon.status import Condition, verdict
from crewlet_operator_daemon.steps import (
    Order,
    Steps,
    after_rejection,
    labelled_namesake,
    render_files,
    steps,
    waves,
)

ACCEPTED: Condition = {"status": "True", "reason": "Accepted", "message": "runs as asked"}
REFUSED: Condition = {"status": "False", "reason": "ClassNotFound", "message": "no class"}
CHILD = Apply(SECRET, {"kind": "Secret", "metadata": {"name": "acme-env"}})
VERDICTS = [None, ACCEPTED, REFUSED]


def status_of(decided: Condition) -> Object:
    return {"conditions": [{"type": "Accepted", "observedGeneration": 2, **decided}]}


def plan(
    *,
    verdict: Condition | None,
    children: bool = True,
    complete: bool = True,
    deletes: bool = False,
) -> Plan:
    return Plan(
        applies=[CHILD] if children and not deletes else [],
        deletes=[Delete(SERVICE, "ns", "acme-webhooks")] if deletes else [],
        status=None if verdict is None else status_of(verdict),
        complete=complete,
    )


def decide(
    planned: Plan,
    *,
    stored: Condition | None = None,
    current: Condition | None = None,
    announced: Condition | None = None,
    admitted: bool = True,
) -> Steps:
    return steps(planned, stored=stored, current=current, announced=announced, admitted=admitted)


# -- children and news: the verdict first --------------------------------------------------------


def test_a_new_company_hears_its_verdict_before_its_children_are_written() -> None:
    step = decide(plan(verdict=ACCEPTED, complete=False))
    assert step == Steps(Order.VERDICT_FIRST, news=True, announced=ACCEPTED, needs_files=False)
    assert step.children_later


def test_a_verdict_first_of_a_class_not_yet_admitted_needs_the_files_for_a_dry_run() -> None:
    step = decide(plan(verdict=ACCEPTED, complete=False), admitted=False)
    assert (step.order, step.needs_files) == (Order.VERDICT_FIRST, True)


def test_a_verdict_first_from_a_whole_plan_needs_nothing_more() -> None:
    step = decide(plan(verdict=ACCEPTED, complete=True), admitted=False)
    assert (step.order, step.needs_files) == (Order.VERDICT_FIRST, False)


def test_a_deleted_child_counts_as_children_too() -> None:
    step = decide(plan(verdict=ACCEPTED, deletes=True), stored=REFUSED)
    assert step.order is Order.VERDICT_FIRST


def test_a_changed_verdict_of_a_running_company_is_news_and_goes_first() -> None:
    step = decide(plan(verdict=REFUSED), stored=ACCEPTED, current=ACCEPTED)
    assert (step.order, step.news, step.announced) == (Order.VERDICT_FIRST, True, REFUSED)


# -- children without news --------------------------------------------------------------------


def test_children_of_a_company_told_its_verdict_for_its_generation_are_backlog() -> None:
    step = decide(plan(verdict=None), stored=ACCEPTED, current=ACCEPTED)
    assert step == Steps(Order.LATER, news=False, announced=ACCEPTED, needs_files=False)
    assert step.children_later


def test_children_of_a_company_whose_verdict_is_of_an_older_generation_are_written_at_once() -> (
    None
):
    step = decide(plan(verdict=None, complete=False), stored=ACCEPTED, current=None)
    assert step == Steps(Order.ALL, news=False, announced=None, needs_files=True)
    assert not step.children_later


def test_a_status_change_that_leaves_the_verdict_is_no_news() -> None:
    # A new generation, the same verdict: the status changes (its observedGeneration), the
    # verdict does not; the children are written with it.
    step = decide(plan(verdict=ACCEPTED), stored=ACCEPTED, current=None)
    assert (step.order, step.news) == (Order.ALL, False)


def test_children_whose_verdict_was_announced_are_written_when_their_turn_comes() -> None:
    step = decide(
        plan(verdict=None, complete=False), stored=ACCEPTED, current=ACCEPTED, announced=ACCEPTED
    )
    assert step == Steps(Order.ALL, news=False, announced=None, needs_files=True)


def test_a_verdict_announced_but_not_yet_in_the_cache_is_no_news() -> None:
    # The status echo has not reached the cache when the children's turn comes.
    step = decide(plan(verdict=ACCEPTED), stored=None, current=None, announced=ACCEPTED)
    assert (step.order, step.news) == (Order.ALL, False)


# -- no children ------------------------------------------------------------------------------


@pytest.mark.parametrize("stored", [None, ACCEPTED])
def test_a_refusal_without_children_is_written_whole_and_is_news(stored: Condition | None) -> None:
    step = decide(plan(verdict=REFUSED, children=False), stored=stored)
    assert step == Steps(Order.ALL, news=True, announced=None, needs_files=False)


def test_nothing_to_write_is_written_whole_and_is_no_news() -> None:
    step = decide(plan(verdict=None, children=False), stored=ACCEPTED, current=ACCEPTED)
    assert step == Steps(Order.ALL, news=False, announced=None, needs_files=False)


def test_the_same_refusal_again_is_no_news() -> None:
    step = decide(plan(verdict=REFUSED, children=False), stored=REFUSED, current=REFUSED)
    assert not step.news


def test_a_refusal_ends_the_wait_of_children_announced_before() -> None:
    step = decide(plan(verdict=REFUSED, children=False), stored=ACCEPTED, announced=ACCEPTED)
    assert (step.order, step.announced) == (Order.ALL, None)


# -- a child the API server refuses -----------------------------------------------------------

INVALID: Condition = {"status": "False", "reason": "InvalidClass", "message": "refused: no"}


def refusable(refusal: Condition) -> Plan:
    """A plan with children, whose refusal by the API server is ``refusal``."""
    planned = plan(verdict=ACCEPTED)
    planned.rejected = lambda answer: Plan(
        status=status_of({**refusal, "message": f"refused: {answer}"})
    )
    return planned


def test_a_refused_child_turns_the_plan_into_its_refusal_written_whole_as_news() -> None:
    refused, step = after_rejection(refusable(INVALID), "no", stored=ACCEPTED)
    assert verdict(refused.status) == INVALID
    assert refused.applies == [] and refused.deletes == []
    assert step == Steps(Order.ALL, news=True, announced=None, needs_files=False)


def test_a_refusal_already_stored_is_no_news() -> None:
    _, step = after_rejection(refusable(INVALID), "no", stored=INVALID)
    assert step == Steps(Order.ALL, news=False, announced=None, needs_files=False)


@pytest.mark.parametrize("stored", VERDICTS)
def test_a_refusal_by_the_api_server_is_written_as_any_plan_without_children_would_be(
    stored: Condition | None,
) -> None:
    """The table's last row, for the refusal, with nothing announced: it supersedes the
    verdict the children waited behind."""
    refused, step = after_rejection(refusable(INVALID), "no", stored=stored)
    table = steps(refused, stored=stored, current=None, announced=None, admitted=False)
    assert step == table


# -- the helpers --------------------------------------------------------------------------------


def test_files_are_written_out_only_once_the_verdict_was_announced() -> None:
    assert render_files(stored=ACCEPTED, current=ACCEPTED, announced=ACCEPTED, admitted=True)
    assert not render_files(stored=None, current=None, announced=None, admitted=True)


def test_files_are_written_out_for_a_dry_run_or_for_children_written_at_once() -> None:
    # The class's generation not admitted yet: the children may be dry-run.
    assert render_files(stored=None, current=None, announced=None, admitted=False)
    assert render_files(stored=REFUSED, current=REFUSED, announced=None, admitted=False)
    # A verdict of an older generation: the children may be written with the status.
    assert render_files(stored=ACCEPTED, current=None, announced=None, admitted=True)
    # Children behind the current verdict are backlog, or come after news: decided for less.
    assert not render_files(stored=ACCEPTED, current=ACCEPTED, announced=None, admitted=True)


@pytest.mark.parametrize("admitted", [True, False])
@pytest.mark.parametrize("announced", [None, ACCEPTED])
@pytest.mark.parametrize("stored", VERDICTS)
@pytest.mark.parametrize("decided", VERDICTS)
@pytest.mark.parametrize("children", [True, False])
def test_no_step_needs_files_its_plan_was_decided_without(
    children: bool,
    decided: Condition | None,
    stored: Condition | None,
    announced: Condition | None,
    admitted: bool,
) -> None:
    """The writer decides each plan once, with the files :func:`render_files` settles before:
    every row of the table that needs them is one where they were written out."""
    if decided is None and stored is None:
        return  # an unchanged status holds a verdict already
    for current in [None] if stored is None else [None, stored]:
        known = {"stored": stored, "current": current, "announced": announced}
        if render_files(**known, admitted=admitted):
            continue
        # Files are left out of a plan with children only: its config Secret is one of them.
        planned = plan(verdict=decided, children=children, complete=not children)
        assert not steps(planned, **known, admitted=admitted).needs_files, (planned, known)


def test_statefulsets_come_in_a_wave_after_every_other_child() -> None:
    workload = Apply(STATEFUL_SET, {"kind": "StatefulSet", "metadata": {"name": "acme-data"}})
    service = Apply(SERVICE, {"kind": "Service", "metadata": {"name": "acme-data"}})
    assert waves([workload, CHILD, service]) == [[CHILD, service], [workload]]
    assert waves([CHILD]) == [[CHILD]]
    assert waves([workload]) == [[workload]]
    assert waves([]) == []


COMPANY: Object = {
    "apiVersion": "crewlet.ai/v1alpha1",
    "kind": "Company",
    "metadata": {"name": "acme", "namespace": "ns", "uid": "company-uid"},
}


def holder(labels: dict[str, str], controller_uid: str) -> Object:
    return {
        "metadata": {
            "name": "acme-env",
            "labels": labels,
            "ownerReferences": [
                {"kind": "Company", "name": "x", "uid": controller_uid, "controller": True}
            ],
        }
    }


MANAGED = {"app.kubernetes.io/managed-by": "crewlet-operator"}


@pytest.mark.parametrize(
    ("labels", "controller_uid", "expected"),
    [
        (MANAGED, "another-uid", True),  # labels copied by hand onto another company's object
        (MANAGED, "company-uid", False),  # the company's own
        ({}, "another-uid", False),  # a tenant's own object: its events reach the company
    ],
)
def test_a_labelled_namesake_of_another_company_makes_the_company_look_again(
    labels: dict[str, str], controller_uid: str, expected: bool
) -> None:
    observed = Observed(namesakes={("Secret", "acme-env"): holder(labels, controller_uid)})
    assert labelled_namesake(COMPANY, observed) is expected
    assert not labelled_namesake(COMPANY, Observed())
