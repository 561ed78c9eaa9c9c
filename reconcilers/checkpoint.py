"""The restart checkpoint: what the leader leaves in its Lease so that the next process
recognises, without rendering anything, the companies nothing has changed for since.

A start compares every company's 13 children with what it would render: about a millisecond a
company, most of a restart over 10,000. Yet a restart of the same operator over the world it
left converged finds nothing to write. So on each renewal of its Lease (no request of its own)
the leader records, once its first pass is over:

- which operator it is (:func:`code_version`: its code and the cluster facts it renders with);
- for each kind it caches, the resourceVersion up to which its cache holds every change, and a
  digest of which objects it holds (:attr:`Store.uid_digest
  <crewlet_operator.cache.store.Store.uid_digest>`);
- the resourceVersion of each referenced Secret it watches;
- the companies it still has work for (queued, failing, waiting for a retry): at most
  :data:`MAX_UNSETTLED`, else it records nothing new (the last checkpoint stays true, only older).

The next process of the same version skips rendering a company when every object the reconcile
reads (the Company, its class, namespace, data claim, children and referenced Secrets) is no
newer than the checkpoint's mark for its kind (resourceVersions are comparable within a kind
since Kubernetes 1.35), none of its children's kinds gained or lost an object (the digests
match: a deleted child leaves nothing newer behind), nothing has happened to it since the
process started (:meth:`Controller.touch <crewlet_operator.controller.Controller.touch>`), and it
was settled at the checkpoint. Then its last reconcile saw exactly these objects and left
nothing to do, and the same code would decide the same. Anything else is reconciled in full.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import crewlet_operator
import reconcilers
from crewlet_operator import resource_version_at_most
from reconcilers.plan import ClusterFacts

ANNOTATION = "crewlet.ai/restart-checkpoint"
"""The Lease annotation that holds the checkpoint (JSON)."""
MAX_UNSETTLED = 100
"""Companies with work left that a checkpoint lists at most: it is written every renewal, and a
longer list means a backlog, which the next process reconciles in full anyway."""

Object = dict[str, Any]


def code_version(facts: ClusterFacts) -> str:
    """What decides what the operator renders and how it compares: the source of the operator
    and of the library it runs on, and the cluster facts it learnt at start. A checkpoint of
    another version is ignored (an upgrade reconciles every company in full)."""
    digest = hashlib.sha256(repr(facts).encode())
    for package in (reconcilers, crewlet_operator):
        root = Path(str(package.__file__)).parent
        for source in sorted(root.rglob("*.py")):
            digest.update(str(source.relative_to(root)).encode())
            digest.update(source.read_bytes())
    return digest.hexdigest()[:32]


@dataclass(frozen=True)
class Checkpoint:
    """One leader's word on what it left done."""

    version: str
    kinds: Mapping[str, tuple[str, int]]
    """By ``Kind.group``: the resourceVersion the cache held every change up to, and its
    objects' uid digest."""
    secrets: Mapping[str, str | None]
    """By ``namespace/name``: the watched Secret's resourceVersion (None: it did not exist)."""
    unsettled: frozenset[str]
    """Companies (``namespace/name``) with work left."""

    def annotation(self) -> dict[str, str]:
        """The Lease annotation that carries it."""
        body = {
            "version": self.version,
            "kinds": {k: list(v) for k, v in sorted(self.kinds.items())},
            "secrets": dict(sorted(self.secrets.items())),
            "unsettled": sorted(self.unsettled),
        }
        return {ANNOTATION: json.dumps(body, separators=(",", ":"))}

    @classmethod
    def found(cls, annotations: Mapping[str, str], version: str) -> Checkpoint | None:
        """The checkpoint in a Lease's annotations, if one of ``version`` is there and reads."""
        try:
            body = json.loads(annotations[ANNOTATION])
            if body["version"] != version:
                return None
            return cls(
                version=version,
                kinds={str(k): (str(v[0]), int(v[1])) for k, v in body["kinds"].items()},
                secrets={str(k): None if v is None else str(v) for k, v in body["secrets"].items()},
                unsettled=frozenset(str(k) for k in body["unsettled"]),
            )
        except (KeyError, TypeError, ValueError, IndexError, AttributeError):
            return None

    def unchanged(self, kind: str, versions: Iterable[str | None]) -> bool:
        """Whether each of ``versions`` (resourceVersions of objects of ``kind``,
        ``Kind.group``) is no newer than the mark."""
        mark = self.kinds.get(kind)
        if mark is None:
            return False
        return all(resource_version_at_most(version, mark[0]) for version in versions)

    def secret_unchanged(self, key: str, secret: Object | None) -> bool:
        """Whether the Secret ``namespace/name`` exists and is no newer than when recorded."""
        if secret is None or key not in self.secrets:
            return False
        version = (secret.get("metadata") or {}).get("resourceVersion")
        return resource_version_at_most(version, self.secrets[key])
