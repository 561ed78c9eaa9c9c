"""Who holds a webhook hostname: a hostname routes to one workload.

- **Another workload's route.** A route the operator did not write that serves the hostname
  (by name, or by a wildcard ``*.<domain>``) through the same Gateway, or on the same
  IngressClass, holds it: a company's route, with its longer ``/webhooks`` prefix, would take
  that workload's requests under ``/webhooks``. Unless the company already routes the hostname
  itself: the first to claim a hostname keeps it, as between companies.
- **Another company.** Whoever has a route for the hostname keeps it (the first to claim it), so
  a company that asks for a hostname another one serves never takes it over, however old it
  is; among those that have none, the oldest Company (then by namespace and name). Every
  reconcile ranks the claimants in the same order, so exactly one company holds each hostname,
  and the next in line gets it when the holder is deleted or asks for another one. A company
  whose class does not give it its hostname (:func:`allowed`) claims nothing.
- **The platform's delegation.** A class's ``spec.exposure.allowedHostnames`` lists the
  hostnames its companies may ask for (:func:`allowed`).

Pure: the controller gathers the claimants, their routes and the other workloads' routes from
its caches.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from crewlet_operator import KubeObject as Object
from crewlet_operator import is_controlled_by
from crewlet_operator.objects import is_being_deleted, namespaced_key
from crewlet_operator.objects import name as object_name
from crewlet_operator.objects import namespace as object_namespace


def hostname(company: Object) -> str:
    """The webhook hostname a Company asks for, as stored ("" when it asks for none)."""
    return str((company.get("spec") or {}).get("webhookHostname") or "")


def route_hosts(route: Object) -> list[str]:
    """The hosts an HTTPRoute or Ingress routes, as it names them (``*.<domain>`` included)."""
    spec = route.get("spec") or {}
    return list(spec.get("hostnames") or []) + [
        str(rule.get("host")) for rule in spec.get("rules") or [] if rule.get("host")
    ]


def wildcards(hostname: str) -> list[str]:
    """The wildcard hosts that match ``hostname``: ``*.b.example.com`` and ``*.example.com``
    and ``*.com`` for ``a.b.example.com`` (a Gateway's wildcard matches one label or more; an
    Ingress's, one: either way the route serves the name)."""
    labels = hostname.split(".")
    return ["*." + ".".join(labels[i:]) for i in range(1, len(labels))]


def serving_keys(hostname: str) -> list[str]:
    """The route hosts that serve ``hostname``: itself and :func:`wildcards`."""
    return [hostname, *wildcards(hostname)] if hostname else []


def allowed(hostname: str, patterns: Sequence[str] | None, namespace: str) -> bool:
    """Whether a class's ``allowedHostnames`` (``patterns``; None: every hostname) give a
    company of ``namespace`` the webhook ``hostname``: an entry equal to it, or ``*.`` and a
    domain it is under; ``{namespace}`` in an entry stands for ``namespace``."""
    if patterns is None:
        return True
    for pattern in patterns:
        expected = pattern.replace(NAMESPACE_PLACEHOLDER, namespace)
        if expected.startswith("*."):
            if hostname.endswith(expected[1:]):
                return True
        elif hostname == expected:
            return True
    return False


NAMESPACE_PLACEHOLDER = "{namespace}"
"""What stands for a company's namespace in an entry of ``allowedHostnames``."""

ROUTE_METADATA = ("name", "namespace", "uid", "resourceVersion", "ownerReferences")
INGRESS_CLASS_ANNOTATION = "kubernetes.io/ingress.class"
"""The IngressClass an Ingress names the old way, before ``spec.ingressClassName``."""


def hosts_kept(route: Object) -> Object:
    """The part of an HTTPRoute's or Ingress's spec that names its hosts (:func:`route_hosts`
    reads it back), and nothing else of it."""
    spec = route.get("spec") or {}
    kept: Object = {}
    if spec.get("hostnames"):
        kept["hostnames"] = list(spec["hostnames"])
    hosts = [{"host": rule["host"]} for rule in spec.get("rules") or [] if rule.get("host")]
    if hosts:
        kept["rules"] = hosts
    return kept


def route_identity(route: Object) -> Object:
    """What the caches keep of a route the operator did not write: who it is and who controls
    it, the hosts it serves and where it is attached (its Gateways, or its IngressClass)."""
    meta = route.get("metadata") or {}
    spec = route.get("spec") or {}
    kept = hosts_kept(route)
    if spec.get("parentRefs"):
        kept["parentRefs"] = list(spec["parentRefs"])
    if spec.get("ingressClassName"):
        kept["ingressClassName"] = spec["ingressClassName"]
    metadata = {k: meta[k] for k in ROUTE_METADATA if k in meta}
    ingress_class = (meta.get("annotations") or {}).get(INGRESS_CLASS_ANNOTATION)
    if ingress_class:
        metadata["annotations"] = {INGRESS_CLASS_ANNOTATION: ingress_class}
    return {
        "apiVersion": route.get("apiVersion"),
        "kind": route.get("kind"),
        "metadata": metadata,
        "spec": kept,
    }


def _gateways(refs: Sequence[Mapping[str, Any]], namespace: str) -> set[tuple[str, str, str, str]]:
    """The Gateways ``refs`` (parentRefs of a route in ``namespace``) attach to."""
    return {
        (
            str(ref.get("group", "gateway.networking.k8s.io")),
            str(ref.get("kind", "Gateway")),
            str(ref.get("namespace") or namespace),
            str(ref.get("name")),
        )
        for ref in refs
    }


def shares_entrance(
    route: Object, namespace: str, gateways: Sequence[Mapping[str, Any]], ingress_class: str | None
) -> bool:
    """Whether ``route`` (another workload's) is attached where a company of ``namespace``
    would attach its own: a Gateway among ``gateways`` (the class's parentRefs) for an
    HTTPRoute; for an Ingress, the class's ``ingress_class``, or either one names none (the
    cluster's default may be the other's)."""
    spec = route.get("spec") or {}
    if route.get("kind") == "HTTPRoute":
        return bool(
            _gateways(spec.get("parentRefs") or [], object_namespace(route) or "")
            & _gateways(gateways, namespace)
        )
    theirs = spec.get("ingressClassName") or (
        ((route.get("metadata") or {}).get("annotations") or {}).get(INGRESS_CLASS_ANNOTATION)
    )
    return not theirs or not ingress_class or theirs == ingress_class


def foreign_holder(
    company: Object,
    routes: Sequence[Object],
    gateways: Sequence[Mapping[str, Any]],
    ingress_class: str | None,
) -> str | None:
    """The route (``Kind namespace/name``) of another workload that holds ``company``'s webhook
    hostname, among ``routes`` (routes the operator did not write that serve it), or None:
    the first, by namespace and name, attached where the company's would be and not
    controlled by the company itself."""
    namespace = object_namespace(company) or ""
    held = sorted(
        (object_namespace(route) or "", object_name(route), str(route.get("kind")))
        for route in routes
        if not is_controlled_by(route, company)
        and shares_entrance(route, namespace, gateways, ingress_class)
        and any(key in route_hosts(route) for key in serving_keys(hostname(company)))
    )
    if not held:
        return None
    route_namespace, route_name, kind = held[0]
    return f"{kind} {route_namespace}/{route_name}"


def routes_itself(company: Object, route: Object | None) -> bool:
    """Whether ``route``, the company's webhook route as cached, is its own and serves the
    hostname it asks for: it holds the hostname already."""
    wanted = hostname(company)
    return (
        bool(wanted)
        and route is not None
        and is_controlled_by(route, company)
        and wanted in route_hosts(route)
    )


def holder(
    company: Object, claimants: list[Object], routes: Mapping[str, Object | None]
) -> str | None:
    """The Company (``namespace/name``) that holds ``company``'s webhook hostname when another
    one does, else None. ``claimants`` are the Companies that ask for it and whose classes
    allow it (``company`` among them), ``routes`` each one's webhook route by
    ``namespace/name`` (None: it has none)."""
    wanted = hostname(company)
    if not wanted:
        return None
    ranks = []
    for claimant in claimants:
        if is_being_deleted(claimant) or hostname(claimant) != wanted:
            continue
        key = namespaced_key(object_namespace(claimant), object_name(claimant))
        routed = routes_itself(claimant, routes.get(key))
        created = str((claimant.get("metadata") or {}).get("creationTimestamp") or "")
        ranks.append(
            (not routed, created, object_namespace(claimant) or "", object_name(claimant), key)
        )
    if not ranks:
        return None
    first = min(ranks)[-1]
    own = namespaced_key(object_namespace(company), object_name(company))
    return None if first == own else first
