"""The operator's restart checkpoint (:class:`crewlet_operator.RestartCheckpoint`): which
operator wrote it, the Lease annotation that carries it, and what it logs.

A start compares every company's 13 children with what it would render: about a millisecond a
company, most of a restart over 10,000. Yet a restart of the same operator over the world it
left converged finds nothing to write. So the company controller skips, during its first pass,
a company that nothing it reads (the Company, its class, namespace, data claim, children and
referenced Secrets: ``CrewletControllers._reads``) has changed for since the previous leader's
checkpoint, and which nothing contests (another company asking for its hostname, an object
holding one of its children's names). Anything else is reconciled in full.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import crewlet_operator
import crewlet_operator_daemon
from crewlet_operator.checkpoint import CheckpointLines
from crewlet_operator_daemon.plan import ClusterFacts

ANNOTATION = "crewlet.ai/restart-checkpoint"
"""The Lease annotation that holds the checkpoint (JSON)."""
LINES = CheckpointLines(
    missing="no restart checkpoint of this version: every company is reconciled in full",
    moved=(
        "children were created or deleted since the restart checkpoint: every company is "
        "reconciled in full"
    ),
    resuming=(
        "resuming from the restart checkpoint: companies unchanged since are not rendered again"
    ),
)
"""What the company controller logs when it judges the previous leader's checkpoint."""


def code_version(facts: ClusterFacts) -> str:
    """What decides what the operator renders and how it compares: the source of the operator
    and of the library it runs on, and the cluster facts it learnt at start. A checkpoint of
    another version is ignored (an upgrade reconciles every company in full)."""
    digest = hashlib.sha256(repr(facts).encode())
    for package in (crewlet_operator_daemon, crewlet_operator):
        root = Path(str(package.__file__)).parent
        for source in sorted(root.rglob("*.py")):
            digest.update(str(source.relative_to(root)).encode())
            digest.update(source.read_bytes())
    return digest.hexdigest()[:32]
