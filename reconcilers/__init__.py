"""The Crewlet reconcilers: pure functions from (Company, EngineClass, observed) to a plan.

:func:`reconcile` decides; the controller gathers its inputs from the caches and executes the
:class:`Plan`. Names and labels are in :mod:`.naming`, engine knowledge in :mod:`.engine`,
version ordering in :mod:`.versions`.
"""

from reconcilers.company import desired_children, reconcile
from reconcilers.plan import Apply, ClusterFacts, Delete, Observed, Plan

__all__ = ["Apply", "ClusterFacts", "Delete", "Observed", "Plan", "desired_children", "reconcile"]
