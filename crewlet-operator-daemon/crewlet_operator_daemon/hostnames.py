"""Which Company holds a webhook hostname: a hostname routes to one company.

Whoever has a route for the hostname keeps it (the first to claim it), so a company that asks
for a hostname another one serves never takes it over, however old it is; among those that
have none, the oldest Company (then by namespace and name). Every reconcile ranks the
claimants in the same order, so exactly one company holds each hostname, and the next in line
gets it when the holder is deleted or asks for another one. Pure: the controller gathers the
claimants and their routes from its caches.
"""

from __future__ import annotations

from collections.abc import Mapping

from crewlet_operator import is_being_deleted, is_controlled_by, namespaced_key
from crewlet_operator import name as object_name
from crewlet_operator import namespace as object_namespace
from crewlet_operator_daemon.plan import Object


def hostname(company: Object) -> str:
    """The webhook hostname a Company asks for, as stored ("" when it asks for none)."""
    return str((company.get("spec") or {}).get("webhookHostname") or "")


def route_hosts(route: Object) -> list[str]:
    """The hosts an HTTPRoute or Ingress routes."""
    spec = route.get("spec") or {}
    return list(spec.get("hostnames") or []) + [
        str(rule.get("host")) for rule in spec.get("rules") or [] if rule.get("host")
    ]


def holder(
    company: Object, claimants: list[Object], routes: Mapping[str, Object | None]
) -> str | None:
    """The Company (``namespace/name``) that holds ``company``'s webhook hostname when another
    one does, else None. ``claimants`` are the Companies that ask for it (``company`` among
    them), ``routes`` each one's webhook route by ``namespace/name`` (None: it has none)."""
    wanted = hostname(company)
    if not wanted:
        return None
    ranks = []
    for claimant in claimants:
        if is_being_deleted(claimant) or hostname(claimant) != wanted:
            continue
        key = namespaced_key(object_namespace(claimant), object_name(claimant))
        route = routes.get(key)
        routed = (
            route is not None and is_controlled_by(route, claimant) and wanted in route_hosts(route)
        )
        created = str((claimant.get("metadata") or {}).get("creationTimestamp") or "")
        ranks.append(
            (not routed, created, object_namespace(claimant) or "", object_name(claimant), key)
        )
    if not ranks:
        return None
    first = min(ranks)[-1]
    own = namespaced_key(object_namespace(company), object_name(company))
    return None if first == own else first
