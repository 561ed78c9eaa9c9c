"""Which process holds a Lease, and the API server's word that it can write no more.

A lease is client-go's answer to a question nobody can ask a crashed process: a standby waits
``leaseDurationSeconds`` after the last renewal it saw, because silence is all it has. But a
replica that runs in a Pod has more: the API server knows whether that Pod still exists, and the
kubelet reports whether its container is running and since when. So a replica that knows its Pod
(:meth:`PodRef.from_env`, from the downward API) records it on the Lease it holds
(:data:`HOLDER_ANNOTATION`, with its identity, rewritten with every renewal), and a standby
that finds the holder's lease still live asks the API server about that Pod. It takes the lease
at once (a compare-and-swap on the Lease's resourceVersion, as ever) only on evidence that the
process which acquired it cannot write any more (:func:`holder_gone`):

- the Pod is gone, or another Pod has its name (its uid differs);
- the Pod has ended (``Succeeded`` or ``Failed``);
- the holder's container has terminated since the holder acquired the lease (its current
  state, or its last one while the kubelet waits to restart it), or runs a container started
  since then (so the process that acquired is gone);
- or, on a replica's first read of the Lease after it started, the holder is another process
  in this replica's own Pod and container: an earlier process there, which a restart ended.

Anything else, a node lost or a network partition above all, is no evidence: the standby waits
for the lease to expire, as before. A container that has not been reported running yet is no
evidence either: a process may acquire before the kubelet says it started.

The times compared are the Lease's ``acquireTime`` and the container's ``startedAt`` or
``finishedAt``, all stamped by the holder's own node (the holder writes the one, its kubelet and
container runtime the others), never against the standby's clock. The kubelet's stamps are whole
seconds, rounded down: a restart within the second the lease was acquired in is not seen, which
errs towards waiting.

Hazards, and what fences them:

- **A Pod deleted with** ``--force`` **while its process still runs** (its node cut off, or the
  Pod garbage-collected with its Node object): a standby takes the lease while the old leader
  may still write. The old leader renews every retry period, and a renewal that finds another
  holder stops it at once (:meth:`~crewlet_operator.leader.LeaderElector.hold`), so two
  leaders overlap by at most a retry period and the requests in flight; one cut off from the
  API server writes nothing anyway, and stops at its renew deadline.
- **Two processes given one Pod's name** (a second manager started in the same container, or
  a copy run elsewhere with the same environment): the one that starts later takes the lease
  at its first read, and the other stops at its next renewal.
- **Whoever may delete Pods or write their status in the Lease's namespace** can make a standby
  take over early (never two leaders beyond the overlap above): give nobody else those rights
  in the operator's namespace.
"""

from __future__ import annotations

import datetime
import enum
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

__all__ = [
    "HOLDER_ANNOTATION",
    "Evidence",
    "Holder",
    "PodRef",
    "downward_environment",
    "holder_gone",
]

HOLDER_ANNOTATION = "crewlet-operator/lease-holder"
"""On a Lease, the identity, Pod and container of the replica holding it (JSON), as that
replica last wrote it. The prefix names the library (any controller built on it writes it),
not the operator."""


@dataclass(frozen=True)
class PodRef:
    """A Pod, and the container in it that runs this process."""

    namespace: str
    name: str
    uid: str = ""
    """The Pod's ``metadata.uid``: tells this Pod from a later one of the same name (a
    StatefulSet's). Empty: unknown."""
    container: str = ""
    """The container's name: which status is this process's. Empty: the Pod's only container,
    if it has one."""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> PodRef | None:
        """This process's Pod from the downward API's ``POD_NAMESPACE`` and ``POD_NAME``, with
        ``POD_UID`` and ``CONTAINER_NAME`` when they are set; None without the first two (not
        in a Pod, or a Pod that does not say)."""
        env = os.environ if environ is None else environ
        namespace, name = env.get("POD_NAMESPACE", ""), env.get("POD_NAME", "")
        if not namespace or not name:
            return None
        return cls(namespace, name, env.get("POD_UID", ""), env.get("CONTAINER_NAME", ""))

    def same_container(self, other: PodRef) -> bool:
        """Whether ``other`` names this Pod and container (what either leaves unknown
        matches)."""
        return (
            (self.namespace, self.name) == (other.namespace, other.name)
            and _agree(self.uid, other.uid)
            and _agree(self.container, other.container)
        )


def downward_environment(pod: PodRef | None) -> dict[str, str]:
    """The variables that tell :meth:`PodRef.from_env` it runs in ``pod``, as the chart's
    downward API sets them; for none, blank ones (a process started from one that runs in a
    Pod is told it runs in none): for harnesses that start replicas as processes."""
    if pod is None:
        return {"POD_NAME": "", "POD_UID": "", "CONTAINER_NAME": ""}
    return {
        "POD_NAMESPACE": pod.namespace,
        "POD_NAME": pod.name,
        "POD_UID": pod.uid,
        "CONTAINER_NAME": pod.container,
    }


def _agree(a: str, b: str) -> bool:
    return not a or not b or a == b


@dataclass(frozen=True)
class Holder:
    """The replica holding a Lease, as it recorded itself there."""

    identity: str
    pod: PodRef

    def annotation(self) -> str:
        """The value of :data:`HOLDER_ANNOTATION` that records this holder."""
        pod = self.pod
        record = {
            "identity": self.identity,
            "namespace": pod.namespace,
            "pod": pod.name,
            "uid": pod.uid,
            "container": pod.container,
        }
        return orjson.dumps(record).decode()

    @classmethod
    def of_lease(cls, lease: Mapping[str, Any]) -> Holder | None:
        """The holder ``lease`` records, if it records one for its current holder: a record
        left by an earlier holder (one that wrote none since) names another identity, and is
        not believed."""
        meta = lease.get("metadata") or {}
        text = (meta.get("annotations") or {}).get(HOLDER_ANNOTATION)
        holder = (lease.get("spec") or {}).get("holderIdentity") or ""
        if not text or not holder:
            return None
        try:
            record = orjson.loads(text)
        except orjson.JSONDecodeError:
            return None
        if not isinstance(record, dict) or record.get("identity") != holder:
            return None
        fields = [record.get(key) for key in ("namespace", "pod", "uid", "container")]
        namespace, name, uid, container = (v if isinstance(v, str) else "" for v in fields)
        if not namespace or not name:
            return None
        return cls(holder, PodRef(namespace, name, uid, container))


class Evidence(enum.Enum):
    """Why a standby may take a live lease: its holder's process cannot write any more."""

    POD_GONE = "pod-gone"
    POD_REPLACED = "pod-replaced"
    POD_ENDED = "pod-ended"
    CONTAINER_TERMINATED = "container-terminated"
    CONTAINER_RESTARTED = "container-restarted"
    RESTARTED_HERE = "restarted-in-this-pod"


def holder_gone(
    holder: Holder, acquired: str | None, pod: Mapping[str, Any] | None
) -> Evidence | None:
    """The evidence that ``holder``, which acquired its lease at ``acquired`` (the Lease's
    ``acquireTime``), cannot write any more, given its Pod as the API server has it now
    (``pod``, None: not found); None when there is none."""
    if pod is None:
        return Evidence.POD_GONE
    uid = str((pod.get("metadata") or {}).get("uid") or "")
    if not _agree(holder.pod.uid, uid):
        return Evidence.POD_REPLACED
    status = pod.get("status") or {}
    if status.get("phase") in ("Succeeded", "Failed"):
        return Evidence.POD_ENDED
    since = _moment(acquired)
    container = _container(holder.pod.container, status.get("containerStatuses") or [])
    if since is None or container is None:
        return None
    state, last = container.get("state") or {}, container.get("lastState") or {}
    if "waiting" in state:  # between two runs, the last one's end is the evidence
        state = last
    ended = _moment((state.get("terminated") or {}).get("finishedAt"))
    if ended is not None and ended > since:
        return Evidence.CONTAINER_TERMINATED
    started = _moment((state.get("running") or {}).get("startedAt"))
    if started is not None and started > since:
        return Evidence.CONTAINER_RESTARTED
    return None


def _container(name: str, statuses: list[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The status of the container ``name``, or of the only one when the name is unknown."""
    if not name:
        return statuses[0] if len(statuses) == 1 else None
    return next((s for s in statuses if s.get("name") == name), None)


def _moment(stamp: object) -> datetime.datetime | None:
    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        moment = datetime.datetime.fromisoformat(stamp)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=datetime.UTC)
