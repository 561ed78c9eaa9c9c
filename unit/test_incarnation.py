"""What counts as evidence that a Lease's holder can write no more (crewlet_operator.incarnation):
pure decisions on a Lease's record and a Pod as the API server has it."""

from __future__ import annotations

from typing import Any

import pytest

from crewlet_operator.incarnation import (
    HOLDER_ANNOTATION,
    Evidence,
    Holder,
    PodRef,
    downward_environment,
    holder_gone,
)

ACQUIRED = "2026-12-06T10:00:00.500000Z"
BEFORE = "2026-12-06T09:59:58Z"
SAME_SECOND = "2026-12-06T10:00:00Z"
AFTER = "2026-12-06T10:00:01Z"
HOLDER = Holder("replica-a", PodRef("ops", "op-0", uid="u-1", container="manager"))


def pod(
    *statuses: dict[str, Any], uid: str = "u-1", phase: str = "Running", **meta: Any
) -> dict[str, Any]:
    return {
        "metadata": {"name": "op-0", "namespace": "ops", "uid": uid, **meta},
        "status": {"phase": phase, "containerStatuses": list(statuses)},
    }


def container(name: str = "manager", **state: Any) -> dict[str, Any]:
    last = state.pop("last", None)
    return {"name": name, "state": state, **({"lastState": last} if last else {})}


def running(since: str, name: str = "manager") -> dict[str, Any]:
    return container(name, running={"startedAt": since})


def terminated(at: str) -> dict[str, Any]:
    return {"terminated": {"finishedAt": at, "exitCode": 137}}


CASES = [
    ("the Pod is gone", None, Evidence.POD_GONE),
    ("another Pod has its name", pod(running(BEFORE), uid="u-2"), Evidence.POD_REPLACED),
    ("the Pod failed", pod(container(**terminated(AFTER)), phase="Failed"), Evidence.POD_ENDED),
    ("its container runs since before it acquired", pod(running(BEFORE)), None),
    ("its container runs since the second it acquired in", pod(running(SAME_SECOND)), None),
    ("its container restarted since", pod(running(AFTER)), Evidence.CONTAINER_RESTARTED),
    ("it ended since", pod(container(**terminated(AFTER))), Evidence.CONTAINER_TERMINATED),
    (
        "the kubelet waits to restart it, after it terminated",
        pod(container(waiting={"reason": "CrashLoopBackOff"}, last=terminated(AFTER))),
        Evidence.CONTAINER_TERMINATED,
    ),
    (
        # A process may acquire before the kubelet says its container started: the status is
        # still the last run's.
        "a stale status of the run before it",
        pod(container(waiting={"reason": "CrashLoopBackOff"}, last=terminated(BEFORE))),
        None,
    ),
    ("a stale terminated state", pod(container(**terminated(BEFORE))), None),
    ("not reported running yet", pod(container(waiting={"reason": "ContainerCreating"})), None),
    ("the Pod is deleted, gracefully", pod(running(BEFORE), deletionTimestamp=AFTER), None),
    (
        "another container restarted, not its own",
        pod(running(BEFORE), running(AFTER, name="sidecar")),
        None,
    ),
    ("no container reported", pod(), None),
]  # fmt: skip


@pytest.mark.parametrize(("what", "found", "evidence"), CASES, ids=[case[0] for case in CASES])
def test_what_is_evidence_that_the_holder_is_gone(
    what: str, found: dict[str, Any] | None, evidence: Evidence | None
) -> None:
    assert holder_gone(HOLDER, ACQUIRED, found) == evidence


def test_without_a_container_name_the_only_container_is_the_holders() -> None:
    unnamed = Holder("replica-a", PodRef("ops", "op-0"))
    assert holder_gone(unnamed, ACQUIRED, pod(running(AFTER))) == Evidence.CONTAINER_RESTARTED
    two = pod(running(AFTER), running(AFTER, name="sidecar"))
    assert holder_gone(unnamed, ACQUIRED, two) is None, "which one is it? no evidence"


def test_without_an_acquire_time_no_container_is_evidence() -> None:
    assert holder_gone(HOLDER, None, pod(running(AFTER))) is None
    assert holder_gone(HOLDER, None, None) == Evidence.POD_GONE


def lease(holder: str, annotation: str | None) -> dict[str, Any]:
    annotations = {} if annotation is None else {HOLDER_ANNOTATION: annotation}
    return {"metadata": {"annotations": annotations}, "spec": {"holderIdentity": holder}}


def test_a_lease_records_its_holder_and_only_its_current_one() -> None:
    assert Holder.of_lease(lease("replica-a", HOLDER.annotation())) == HOLDER
    # A holder that records nothing (an older release) leaves the last one's record: it names
    # another identity, and is not believed.
    assert Holder.of_lease(lease("replica-b", HOLDER.annotation())) is None
    assert Holder.of_lease(lease("", HOLDER.annotation())) is None, "released"
    assert Holder.of_lease(lease("replica-a", None)) is None
    assert Holder.of_lease(lease("replica-a", "{not json")) is None
    assert Holder.of_lease(lease("replica-a", '{"identity": "replica-a"}')) is None, "no Pod"
    assert Holder.of_lease(lease("replica-a", '["replica-a"]')) is None


def test_a_pod_comes_from_the_downward_api() -> None:
    assert PodRef.from_env({}) is None
    assert PodRef.from_env({"POD_NAME": "op-0"}) is None, "no namespace"
    env = {"POD_NAMESPACE": "ops", "POD_NAME": "op-0"}
    assert PodRef.from_env(env) == PodRef("ops", "op-0")
    full = {**env, "POD_UID": "u-1", "CONTAINER_NAME": "manager"}
    assert PodRef.from_env(full) == HOLDER.pod


def test_the_same_container_is_what_both_know_of_it() -> None:
    pod_ref = HOLDER.pod
    assert pod_ref.same_container(PodRef("ops", "op-0"))
    assert pod_ref.same_container(PodRef("ops", "op-0", uid="u-1"))
    assert not pod_ref.same_container(PodRef("ops", "op-1"))
    assert not pod_ref.same_container(PodRef("other", "op-0"))
    assert not pod_ref.same_container(PodRef("ops", "op-0", uid="u-2")), "a later Pod"
    assert not pod_ref.same_container(PodRef("ops", "op-0", container="sidecar"))


def test_a_harness_tells_a_process_its_pod_or_none() -> None:
    assert PodRef.from_env(downward_environment(HOLDER.pod)) == HOLDER.pod
    in_a_pod = {"POD_NAMESPACE": "ops", "POD_NAME": "runner-0", "POD_UID": "u-9"}
    assert PodRef.from_env({**in_a_pod, **downward_environment(None)}) is None
