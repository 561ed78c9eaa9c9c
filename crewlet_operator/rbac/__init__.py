"""RBAC from the controllers' declarations: the rules a manager's identity needs, as
kubebuilder derives a ClusterRole from its markers.

Each controller declares what it reads and writes as it is built: every kind it watches
(``for_``, ``owns``, ``watches``, :meth:`Controller.watch
<crewlet_operator.controller.Controller.watch>`) needs ``get``, ``list`` and ``watch``; each kind
it :meth:`~crewlet_operator.controller.Builder.owns` needs ``create``, ``update``, ``patch`` and
``delete``; :meth:`~crewlet_operator.controller.Builder.with_rbac` adds the status, the
finalizer, Events and any rule of your own. The manager adds its Lease and its metrics endpoint's
reviews, and the rules of :meth:`~crewlet_operator.manager.Manager.add_rbac_rules`.
:func:`manager_rules` gathers them all, merged and sorted, and :func:`manifests` renders them: a
ClusterRole, and a Role for the Lease in its own namespace. From a shell::

    python -m crewlet_operator.rbac my_controller.main:build_manager config/rbac.yaml

where ``build_manager`` returns the manager with its controllers added, not started.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from crewlet_operator.kube.resources import (
    EVENT,
    LEASE,
    POD,
    SUBJECT_ACCESS_REVIEW,
    TOKEN_REVIEW,
    Resource,
)

__all__ = [
    "EVENT_RULE",
    "READ_VERBS",
    "WRITE_VERBS",
    "ManagerRules",
    "PolicyRule",
    "RuleSource",
    "RulesHost",
    "RulesOptions",
    "cluster_role",
    "lease_role",
    "manager_rules",
    "manifests",
    "merge",
    "ungranted",
]

RBAC_API_VERSION = "rbac.authorization.k8s.io/v1"

READ_VERBS = ("get", "list", "watch")
"""What an informer lists and watches, and a reader gets (``Client.get``, ``apply_owned`` after
a conflict)."""
WRITE_VERBS = ("create", "update", "patch", "delete")
"""``Client.create``; ``replace`` (a PUT: ``update``); ``apply``, ``apply_owned``,
``apply_if_changed`` and ``patch`` (all PATCH); ``delete``."""


@dataclass(frozen=True)
class PolicyRule:
    """One rule of a Role or ClusterRole: ``verbs`` on ``resources`` (plurals, with their
    ``/subresource``) of ``api_groups`` (``""`` is the core group), limited to
    ``resource_names`` when given; or ``verbs`` on ``non_resource_urls``."""

    api_groups: tuple[str, ...] = ()
    resources: tuple[str, ...] = ()
    verbs: tuple[str, ...] = ()
    resource_names: tuple[str, ...] = ()
    non_resource_urls: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.verbs:
            raise ValueError("a rule needs verbs")
        if bool(self.non_resource_urls) == bool(self.resources):
            raise ValueError("a rule names resources or non-resource URLs, not both")
        if self.resources and not self.api_groups:
            raise ValueError('a rule on resources names their API groups ("" is the core group)')

    @classmethod
    def on(
        cls,
        resource: Resource,
        *verbs: str,
        subresource: str | None = None,
        names: Sequence[str] = (),
    ) -> PolicyRule:
        """``verbs`` on ``resource`` (or on its ``subresource``), on the objects ``names`` alone
        when given: ``PolicyRule.on(PERSISTENT_VOLUME_CLAIM, "patch")``."""
        plural = f"{resource.plural}/{subresource}" if subresource else resource.plural
        return cls((resource.group,), (plural,), verbs, tuple(names))

    @classmethod
    def from_dict(cls, rule: Mapping[str, Any]) -> PolicyRule:
        """A rule as the API writes it (``apiGroups``, ``resources``, ``verbs``, ...)."""
        return cls(
            tuple(rule.get("apiGroups") or ()),
            tuple(rule.get("resources") or ()),
            tuple(rule.get("verbs") or ()),
            tuple(rule.get("resourceNames") or ()),
            tuple(rule.get("nonResourceURLs") or ()),
        )

    def to_dict(self) -> dict[str, list[str]]:
        """The rule as the API writes it; empty fields left out."""
        if not self.resources:
            return {"nonResourceURLs": list(self.non_resource_urls), "verbs": list(self.verbs)}
        written = {"apiGroups": list(self.api_groups), "resources": list(self.resources)}
        if self.resource_names:
            written["resourceNames"] = list(self.resource_names)
        return {**written, "verbs": list(self.verbs)}

    def grants(self, group: str, resource: str, verb: str, name: str | None = None) -> bool:
        """Whether this rule allows ``verb`` on ``resource`` of ``group`` (on the object
        ``name``; None for a request that names none, such as a list), as the RBAC authoriser
        matches: ``*`` matches any group, verb or resource, ``*/sub`` any resource's
        subresource ``sub``, and a rule with ``resource_names`` only requests naming one."""
        if not _matches(self.verbs, verb) or not _matches(self.api_groups, group):
            return False
        sub = resource.partition("/")[2]
        kinds = set(self.resources)
        if not ({"*", resource} & kinds or (sub and f"*/{sub}" in kinds)):
            return False
        return not self.resource_names or name in self.resource_names

    def grants_url(self, url: str, verb: str) -> bool:
        """Whether this rule allows ``verb`` on the non-resource ``url`` (a trailing ``*``
        matches any rest of the path)."""
        return _matches(self.verbs, verb) and any(
            pattern == url or (pattern.endswith("*") and url.startswith(pattern[:-1]))
            for pattern in self.non_resource_urls
        )


def _matches(allowed: tuple[str, ...], value: str) -> bool:
    return "*" in allowed or value in allowed


EVENT_RULE = PolicyRule.on(EVENT, "create", "patch")
"""What an :class:`~crewlet_operator.events.EventRecorder` writes: it creates each Event, and
patches a series' count into it (events.k8s.io, not the core group's Events)."""

# One grant: (group, resource, resource name or "", non-resource URL or "").
_Target = tuple[str, str, str, str]


def _grants(rules: Iterable[PolicyRule]) -> dict[_Target, set[str]]:
    """Each target's verbs: a rule's every group, resource and name is a target of its own."""
    verbs: dict[_Target, set[str]] = defaultdict(set)
    for rule in rules:
        for url in rule.non_resource_urls:
            verbs[("", "", "", url)].update(rule.verbs)
        for group in rule.api_groups:
            for resource in rule.resources:
                for name in rule.resource_names or ("",):
                    verbs[(group, resource, name, "")].update(rule.verbs)
    return verbs


def merge(rules: Iterable[PolicyRule]) -> list[PolicyRule]:
    """The fewest rules granting exactly what ``rules`` grant, in a deterministic order.

    Each resource's verbs are gathered from every rule that names it (``*`` stands for all of
    them); resources of one group with the same verbs (and names) share a rule. Rules are
    sorted by group, then resources; verbs, resources and names are sorted within a rule.
    """
    by_verbs: dict[tuple[str, tuple[str, ...], str, str], list[str]] = defaultdict(list)
    for (group, resource, name, url), granted in _grants(rules).items():
        verbs = ("*",) if "*" in granted else tuple(sorted(granted))
        by_verbs[(group, verbs, name, "url" if url else "resource")].append(url or resource)
    merged = []
    for (group, verb_list, name, kind), targets in by_verbs.items():
        names = (name,) if name else ()
        if kind == "url":
            merged.append(PolicyRule(verbs=verb_list, non_resource_urls=tuple(sorted(targets))))
        else:
            merged.append(PolicyRule((group,), tuple(sorted(targets)), verb_list, names))
    return sorted(
        merged,
        key=lambda r: (
            bool(r.non_resource_urls),
            r.api_groups,
            r.resources,
            r.resource_names,
            r.non_resource_urls,
            r.verbs,
        ),
    )


def ungranted(required: Iterable[PolicyRule], granted: Iterable[PolicyRule]) -> list[PolicyRule]:
    """What of ``required`` no rule of ``granted`` allows, merged: empty when ``granted``
    (a chart's roles, say) covers everything the controllers declare."""
    granting = list(granted)
    missing = []
    for (group, resource, name, url), verbs in _grants(required).items():
        for verb in sorted(verbs):
            if url and not any(rule.grants_url(url, verb) for rule in granting):
                missing.append(PolicyRule(verbs=(verb,), non_resource_urls=(url,)))
            elif not url and not any(
                rule.grants(group, resource, verb, name or None) for rule in granting
            ):
                missing.append(PolicyRule((group,), (resource,), (verb,), (name,) if name else ()))
    return merge(missing)


class RuleSource(Protocol):
    """Something that declares rules: a :class:`~crewlet_operator.controller.Controller`."""

    @property
    def rbac_rules(self) -> Sequence[PolicyRule]:
        """The rules it needs."""


class RulesOptions(Protocol):
    """The manager settings that need rules (:class:`ManagerOptions
    <crewlet_operator.manager.ManagerOptions>` is one)."""

    @property
    def leader_election(self) -> bool:
        """Whether it elects a leader on a Lease."""

    @property
    def leader_election_namespace(self) -> str | None:
        """The Lease's namespace; None for the pod's own."""

    @property
    def exclusive_lease_labels(self) -> Mapping[str, str] | None:
        """Labels that make the Lease one of a kind in the cluster."""

    @property
    def sharding(self) -> object | None:
        """Whether its objects are sharded over the replicas (None: not)."""

    @property
    def takeover_on_evidence(self) -> bool:
        """Whether a standby reads the lease holder's Pod, to take its lease on evidence."""

    @property
    def metrics_bind_address(self) -> str:
        """Where metrics are served; ``"0"`` when they are not."""

    @property
    def metrics_secure(self) -> bool:
        """Whether each scrape is authenticated and authorised by the API server."""


class RulesHost(Protocol):
    """What :func:`manager_rules` reads of a manager (:class:`Manager
    <crewlet_operator.manager.Manager>` is one): a protocol, so that this module sits below the
    manager, which the controllers import it through."""

    @property
    def options(self) -> RulesOptions:
        """Its settings."""

    @property
    def controllers(self) -> Sequence[RuleSource]:
        """Its controllers."""

    @property
    def rbac_rules(self) -> Sequence[PolicyRule]:
        """The rules added to the manager itself."""


@dataclass(frozen=True)
class ManagerRules:
    """What a manager's identity needs: ``cluster`` in every namespace (a ClusterRole), and
    ``lease`` in its Lease's namespace only (a Role there), ``lease_namespace``; None for the
    pod's own."""

    cluster: tuple[PolicyRule, ...] = ()
    lease: tuple[PolicyRule, ...] = ()
    lease_namespace: str | None = None


def manager_rules(manager: RulesHost) -> ManagerRules:
    """Every rule ``manager`` needs, merged and sorted (:func:`merge`): its controllers'
    declarations, the rules added to it, its own Lease (``get``, ``create`` and ``update`` to
    acquire, renew and release it; ``list`` and ``watch`` on it to see a release at once; and
    with ``takeover_on_evidence``, ``get``, ``list`` and ``watch`` on the Pods there, the
    holders'), with
    sharding the ring's member Leases beside it (``patch`` a dead member's will, ``delete`` its
    Lease once nothing leads to it), every namespace's Leases with ``exclusive_lease_labels``
    (``list`` and ``watch``), and the TokenReviews and SubjectAccessReviews of a secure metrics
    endpoint."""
    options = manager.options
    cluster = [rule for c in manager.controllers for rule in c.rbac_rules]
    cluster += manager.rbac_rules
    lease: list[PolicyRule] = []
    if options.leader_election:
        lease.append(PolicyRule.on(LEASE, "get", "create", "update", "list", "watch"))
        if options.takeover_on_evidence:
            lease.append(PolicyRule.on(POD, "get", "list", "watch"))
        if options.sharding is not None:
            lease.append(PolicyRule.on(LEASE, "patch", "delete"))
        if options.exclusive_lease_labels is not None:
            cluster.append(PolicyRule.on(LEASE, "list", "watch"))
    if options.metrics_secure and options.metrics_bind_address != "0":
        cluster.append(PolicyRule.on(TOKEN_REVIEW, "create"))
        cluster.append(PolicyRule.on(SUBJECT_ACCESS_REVIEW, "create"))
    return ManagerRules(
        tuple(merge(cluster)), tuple(merge(lease)), options.leader_election_namespace
    )


def cluster_role(manager: RulesHost, name: str) -> dict[str, Any]:
    """The ClusterRole named ``name`` with every rule ``manager`` needs in every namespace."""
    return {
        "apiVersion": RBAC_API_VERSION,
        "kind": "ClusterRole",
        "metadata": {"name": name},
        "rules": [rule.to_dict() for rule in manager_rules(manager).cluster],
    }


def lease_role(manager: RulesHost, name: str) -> dict[str, Any] | None:
    """The Role named ``name`` with what ``manager`` needs on its own Lease, in the Lease's
    namespace (left out when it is the pod's own: ``kubectl apply -n`` gives it); None without
    leader election."""
    rules = manager_rules(manager)
    if not rules.lease:
        return None
    metadata = {"name": name}
    if rules.lease_namespace is not None:
        metadata["namespace"] = rules.lease_namespace
    return {
        "apiVersion": RBAC_API_VERSION,
        "kind": "Role",
        "metadata": metadata,
        "rules": [rule.to_dict() for rule in rules.lease],
    }


def manifests(manager: RulesHost, name: str) -> list[dict[str, Any]]:
    """The ClusterRole ``name``, and with leader election the Role ``name-leader-election``
    (bind both to the manager's ServiceAccount)."""
    role = lease_role(manager, f"{name}-leader-election")
    return [cluster_role(manager, name), *([role] if role is not None else [])]
