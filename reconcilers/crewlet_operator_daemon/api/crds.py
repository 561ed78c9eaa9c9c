"""The crewlet.ai CRDs, generated from the models of :mod:`.v1alpha1` by the library's
generator (:func:`crewlet_operator.crd.crd_for`).

``python -m crewlet_operator_daemon.api DIR`` (``make manifests``) writes them to
``manifests/crds``; a unit test fails when the committed files differ from what the models generate.
"""

from __future__ import annotations

from crewlet_operator.crd import AGE_COLUMN, JsonSchema, condition_column, crd_for
from crewlet_operator_daemon.api import v1alpha1
from crewlet_operator_daemon.api.conditions import ACCEPTED, READY, REFERENCES_RESOLVED
from crewlet_operator_daemon.api.v1alpha1 import GROUP, VERSION

CATEGORIES = ("crewlet",)
"""``kubectl get crewlet`` lists every kind of the group."""
WEBHOOK_HOSTNAME_FIELD = ".spec.webhookHostname"
"""A Company's webhook hostname, a selectable field: ``fieldSelector=spec.webhookHostname!=``
lists the companies that ask for one."""

HEADER = """\
# Generated from crewlet_operator_daemon/api/v1alpha1.py by `python -m crewlet_operator_daemon.api`.
# Do not edit: change the pydantic models and run `make manifests`, which regenerates it.
"""


def company_crd() -> JsonSchema:
    """The Company CRD (namespaced; short name ``cco``)."""
    return crd_for(
        v1alpha1.Company,
        group=GROUP,
        version=VERSION,
        kind="Company",
        plural="companies",
        singular="company",
        scope="Namespaced",
        short_names=["cco"],
        categories=CATEGORIES,
        printer_columns=[
            {"name": "Class", "type": "string", "jsonPath": ".spec.className"},
            {"name": "Engine", "type": "string", "jsonPath": ".status.engineVersion"},
            condition_column("Ready", READY),
            condition_column("Reason", READY, "reason"),
            AGE_COLUMN,
            {**condition_column("Accepted", ACCEPTED, "reason"), "priority": 1},
            {"name": "Suspend", "type": "boolean", "jsonPath": ".spec.suspend", "priority": 1},
            {"name": "Image", "type": "string", "jsonPath": ".status.engineImage", "priority": 1},
        ],
        # A sharded replica lists the companies that ask for a hostname alone, not every
        # company (crewlet_operator_daemon.controller.CLAIMANTS_OPTIONS).
        selectable_fields=[WEBHOOK_HOSTNAME_FIELD],
    )


def engine_class_crd() -> JsonSchema:
    """The EngineClass CRD (cluster-scoped; short name ``ec``)."""
    return crd_for(
        v1alpha1.EngineClass,
        group=GROUP,
        version=VERSION,
        kind="EngineClass",
        plural="engineclasses",
        singular="engineclass",
        scope="Cluster",
        short_names=["ec"],
        categories=CATEGORIES,
        printer_columns=[
            {"name": "Image", "type": "string", "jsonPath": ".spec.engine.image"},
            {"name": "Companies", "type": "integer", "jsonPath": ".status.companies"},
            AGE_COLUMN,
            {**condition_column("References", REFERENCES_RESOLVED), "priority": 1},
        ],
    )


def all_crds() -> list[JsonSchema]:
    """Every CRD of the crewlet.ai group."""
    return [company_crd(), engine_class_crd()]
