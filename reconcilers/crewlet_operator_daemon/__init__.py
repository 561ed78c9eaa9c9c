"""The Crewlet reconcilers: pure functions from (Company, EngineClass, observed) to a plan.

:func:`reconcile` decides; the controller gathers its inputs from the caches and executes the
:class:`Plan`. The inputs and every refusal are in :mod:`.inputs`, the children in
:mod:`.children`, the Company's status in :mod:`.status` and the EngineClass's in
:mod:`.engineclass`. Names and labels are in :mod:`.naming`, engine knowledge in :mod:`.engine`,
version ordering and the high-water mark in :mod:`.versions`.
"""

from crewlet_operator_daemon.company import desired_children, reconcile
from crewlet_operator_daemon.plan import Apply, ClusterFacts, Delete, Observed, Plan

__all__ = ["Apply", "ClusterFacts", "Delete", "Observed", "Plan", "desired_children", "reconcile"]
