"""How the Company controller finds what a company reads in its caches: the indexes over
companies and children, what an object holding a child's name is kept as, and which refusals
hang on objects other than the company's own. Pure: the controller wires them."""

from __future__ import annotations

from crewlet_operator import KubeObject as Object
from crewlet_operator import find_condition
from crewlet_operator.objects import namespace
from crewlet_operator_daemon import naming
from crewlet_operator_daemon.api.conditions import ACCEPTED, HOSTNAME_TAKEN, NAME_TAKEN
from crewlet_operator_daemon.hostnames import hostname, hosts_kept, serving_keys

COMPANY_INDEX = "company"
"""Children by their company (``namespace/name``), from the company label."""
HOSTNAME_INDEX = "hostname"
"""Companies by the webhook hostname they ask for, and by each wildcard host that serves it
(``*.example.com`` for ``hooks.example.com``): a route for a host finds the companies it may
take a hostname from."""
ROUTE_HOST_INDEX = "host"
"""Routes the operator did not write, by each host they name (``*.<domain>`` included)."""
NAMESAKE_METADATA = ("name", "namespace", "uid", "resourceVersion", "ownerReferences")
"""What is kept of an object that may hold a child's name: who it is and who controls it."""
CONTESTED = frozenset({NAME_TAKEN, HOSTNAME_TAKEN})
"""Refusals that hang on other objects than the company's own."""


def company_of_child(child: Object) -> list[str]:
    """The index function of :data:`COMPANY_INDEX`."""
    # Read in place (labels() copies): an index function runs for each of a sync's children.
    company = ((child.get("metadata") or {}).get("labels") or {}).get(naming.COMPANY_LABEL)
    return [f"{namespace(child)}/{company}"] if company else []


def hostname_of(company: Object) -> list[str]:
    """The index function of :data:`HOSTNAME_INDEX`."""
    return serving_keys(hostname(company))


def hostname_changed(old: Object, new: Object) -> bool:
    """Whether an update gave a company another webhook hostname (or took it away)."""
    return hostname(old) != hostname(new)


def namesake_identity(obj: Object) -> Object:
    """What the cache keeps of an object not labelled as the operator's: its
    :data:`NAMESAKE_METADATA`."""
    meta = obj.get("metadata") or {}
    return {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "metadata": {k: meta[k] for k in NAMESAKE_METADATA if k in meta},
    }


VIEW_METADATA = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "deletionTimestamp",
    "ownerReferences",
)
"""What the cluster view keeps of a company or a webhook route of any replica: enough to rank a
hostname's claimants (:func:`crewlet_operator_daemon.hostnames.holder`), to count a class's
companies (the view keeps the labels too, for the sharder)."""


def view_entry(obj: Object) -> Object:
    """What the cluster view keeps of a Company (its class and hostname) or of a webhook route
    (the hosts it routes), beside their :data:`VIEW_METADATA`."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    if obj.get("kind") == "Company":
        kept = {k: spec[k] for k in ("className", "webhookHostname") if k in spec}
    else:
        kept = hosts_kept(obj)
    return {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "metadata": {k: meta[k] for k in VIEW_METADATA if k in meta},
        "spec": kept,
    }


def refused_for_others(company: Object) -> bool:
    """Whether the company's stored verdict refuses it for objects not its own
    (:data:`CONTESTED`), which a restart checkpoint does not cover."""
    accepted = find_condition((company.get("status") or {}).get("conditions"), ACCEPTED)
    return accepted is not None and accepted.get("reason") in CONTESTED
