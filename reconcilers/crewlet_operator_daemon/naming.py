"""Names and labels of what the operator writes for a Company: the one source of truth.

Every child lives in the Company's namespace and is named after the Company, so two companies in
one namespace never collide. The chart's admission policy and the controller's watches depend on
these labels, so they are spelled here and nowhere else.
"""

from __future__ import annotations

import re
from typing import Literal

from crewlet_operator_daemon.api.v1alpha1 import DNS1035_LABEL_PATTERN, MAX_COMPANY_NAME_LENGTH

Component = Literal["data", "seats"]
DATA: Component = "data"
SEATS: Component = "seats"

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "crewlet-operator"
MANAGED_BY_SELECTOR = f"{MANAGED_BY_LABEL}={MANAGED_BY}"
"""The label selector of everything the operator writes for companies (what it watches)."""
NOT_MANAGED_SELECTOR = f"{MANAGED_BY_LABEL}!={MANAGED_BY}"
"""Everything else: what may hold a name a child would take."""
NAME_LABEL = "app.kubernetes.io/name"
NAME = "crewlet"
COMPONENT_LABEL = "app.kubernetes.io/component"
COMPANY_LABEL = "crewlet.ai/company"

CONFIG_HASH_ANNOTATION = "crewlet.ai/config-hash"
"""Pod-template annotation: the hash of the component's crewlet.yaml configuration (Tier A is
restart-only). On the config Secret: the hash of both components' configurations, the ones its
files hold."""
FILES_HASH_ANNOTATION = "crewlet.ai/files-hash"
"""Config Secret annotation: the hash of its data, as the operator wrote it. With
:data:`CONFIG_HASH_ANNOTATION` beside it (the configurations the files hold), a reconcile knows
the files are current without writing them out again; data edited by anyone else no longer
matches, and is written again."""
SECRETS_HASH_ANNOTATION = "crewlet.ai/secrets-hash"
"""Pod-template annotation: the hash of the copied Secret values, so a rotation reaches the pods.

Environment variables from Secrets are read once, at container start; without a restart a
rotated model key would never reach a running engine.
"""
TRACE_ANNOTATION = "crewlet.ai/traceparent"
"""On a Company, a W3C ``traceparent`` (``00-<trace id>-<span id>-01``) its author's tool sets
with a change: the reconcile of that change is then a span of the author's trace."""

DATA_VOLUME = "data"
"""The data StatefulSet's volume claim template; its claim is ``data-<company>-data-0``."""

_DNS_LABEL = re.compile(DNS1035_LABEL_PATTERN)


def name_problem(company: str) -> str | None:
    """Say why ``company`` cannot name its children (Service names are DNS-1035 labels), or None.

    A Company's own name is a DNS subdomain (it may hold dots, or start with a digit), which is
    wider than what a Service or a StatefulSet's pods accept. The CRD refuses both on create
    (:data:`~crewlet_operator_daemon.api.v1alpha1.MAX_COMPANY_NAME_LENGTH` says why that length); a
    Company stored before it did is refused here.
    """
    if len(company) > MAX_COMPANY_NAME_LENGTH:
        return (
            f"the name {company!r} is {len(company)} characters long: the operator names the "
            f"company's StatefulSets and Services after it, which allows at most "
            f"{MAX_COMPANY_NAME_LENGTH}; recreate the Company under a shorter name"
        )
    if not _DNS_LABEL.match(company):
        return (
            f"the name {company!r} is not a DNS label (lowercase letters, digits and '-', "
            f"starting with a letter): the company's Services are named after it; recreate the "
            f"Company under such a name"
        )
    return None


def labels(company: str, component: Component | None = None) -> dict[str, str]:
    """Labels of every child; engine pods and what selects them also carry their component."""
    result = {MANAGED_BY_LABEL: MANAGED_BY, NAME_LABEL: NAME, COMPANY_LABEL: company}
    if component is not None:
        result[COMPONENT_LABEL] = component
    return result


def selector(company: str, component: Component) -> dict[str, str]:
    """The three labels that select exactly one company's pods of one component.

    The chart's policy admits a PodDisruptionBudget or NetworkPolicy only when it selects by
    exactly these, so it can never select another workload's pods.
    """
    return {NAME_LABEL: NAME, COMPONENT_LABEL: component, COMPANY_LABEL: company}


def company_pods(company: str) -> dict[str, str]:
    """Labels of every engine pod of one company (both components)."""
    return {NAME_LABEL: NAME, COMPANY_LABEL: company}


ENGINE_SUFFIX = "engine"
API_TOKEN_SUFFIX = "api-token"
ENV_SUFFIX = "env"
CONFIG_SUFFIX = "config"
API_SUFFIX = "api"
WEBHOOKS_SUFFIX = "webhooks"


def child(company: str, suffix: str) -> str:
    """Every child is named ``<company>-<suffix>``."""
    return f"{company}-{suffix}"


def service_account(company: str) -> str:
    """The engine's ServiceAccount (the chart's policy requires the ``-engine`` suffix)."""
    return child(company, ENGINE_SUFFIX)


def config_secret(company: str) -> str:
    """The Secret holding both components' crewlet.yaml."""
    return child(company, CONFIG_SUFFIX)


def env_secret(company: str) -> str:
    """The Secret holding the copies of every Secret key the class references."""
    return child(company, ENV_SUFFIX)


def api_token_secret(company: str) -> str:
    """The Secret holding the operator's API token for this company's engine."""
    return child(company, API_TOKEN_SUFFIX)


API_TOKEN_KEY = "token"
"""The key of the token in :func:`api_token_secret`."""


def statefulset(company: str, component: Component) -> str:
    """``<company>-data`` or ``<company>-seats``."""
    return child(company, component)


def headless_service(company: str, component: Component) -> str:
    """The governing (headless) Service of a component's StatefulSet: same name."""
    return statefulset(company, component)


def api_service(company: str) -> str:
    """The ClusterIP Service in front of the data pods' API (and webhooks)."""
    return child(company, API_SUFFIX)


def disruption_budget(company: str, component: Component) -> str:
    """A component's PodDisruptionBudget."""
    return statefulset(company, component)


def network_policy(company: str, component: Component) -> str:
    """A component's NetworkPolicy."""
    return statefulset(company, component)


def webhook_route(company: str) -> str:
    """The HTTPRoute or Ingress that exposes ``/webhooks``."""
    return child(company, WEBHOOKS_SUFFIX)


CHILD_SUFFIXES: dict[str, tuple[str, ...]] = {
    "ServiceAccount": (ENGINE_SUFFIX,),
    "Secret": (API_TOKEN_SUFFIX, ENV_SUFFIX, CONFIG_SUFFIX),
    "StatefulSet": (DATA, SEATS),
    "Service": (DATA, SEATS, API_SUFFIX),
    "PodDisruptionBudget": (DATA, SEATS),
    "NetworkPolicy": (DATA, SEATS),
    "Ingress": (WEBHOOKS_SUFFIX,),
    "HTTPRoute": (WEBHOOKS_SUFFIX,),
}
"""By kind, the suffix of every name a company's child of that kind may have (the functions
above): what a name taken by someone else is looked up by, both ways."""


def child_names(company: str, kind: str) -> list[str]:
    """Every name a child of ``kind`` of ``company`` may have."""
    return [child(company, suffix) for suffix in CHILD_SUFFIXES.get(kind, ())]


def companies_named_by(kind: str, name: str) -> list[str]:
    """The companies whose child of ``kind`` would be named ``name`` (``acme-data`` names
    company ``acme``'s StatefulSet, and ``acme-data``'s nothing)."""
    return [
        name[: -len(suffix) - 1]
        for suffix in CHILD_SUFFIXES.get(kind, ())
        if name.endswith(f"-{suffix}") and len(name) > len(suffix) + 1
    ]


def data_claim(company: str, ordinal: int = 0) -> str:
    """The claim the data StatefulSet's template makes for the pod of ``ordinal``."""
    return f"{DATA_VOLUME}-{statefulset(company, DATA)}-{ordinal}"


def data_pod_host(company: str, namespace: str, ordinal: int = 0) -> str:
    """The stable DNS name of a data pod, through its headless Service."""
    sts = statefulset(company, DATA)
    return f"{sts}-{ordinal}.{headless_service(company, DATA)}.{namespace}.svc"
