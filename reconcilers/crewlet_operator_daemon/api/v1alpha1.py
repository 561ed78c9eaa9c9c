"""The crewlet.ai/v1alpha1 API: EngineClass (cluster-scoped) and Company (namespaced).

These pydantic models are the single source of truth: the CRDs in ``manifests/crds`` are
generated from them (``make manifests``), and the reconcilers read objects through them. Field
descriptions become ``kubectl explain`` text; ``x-kubernetes-validations`` hold the CEL rules a
schema can check, so bad input is refused by the API server with a message, not by a crash.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from crewlet_operator import Resource
from crewlet_operator.crd import (
    ConditionDict,
    LabelSelector,
    cel,
    cel_string,
    list_map,
    on_create,
    validations,
)

GROUP = "crewlet.ai"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

COMPANY = Resource(GROUP, VERSION, "Company", "companies")
"""The namespaced Company, as served once its CRD is installed."""
ENGINE_CLASS = Resource(GROUP, VERSION, "EngineClass", "engineclasses", namespaced=False)
"""The cluster-scoped EngineClass, as served once its CRD is installed."""

MIN_STORAGE = "12Gi"
MIN_STORAGE_WITH_S3 = "9Gi"
"""The data volume's floor; files in S3 keep no chunk bytes on the broker (install page)."""

MAX_COMPANY_NAME_LENGTH = 46
"""The longest Company name whose children all fit Kubernetes' limits.

The tightest limit is the StatefulSet ``<company>-seats``: its pods carry the label
``controller-revision-hash: <company>-seats-<hash>``, where the hash is a 32-bit number of up to
10 digits, and a label value is at most 63 characters, so the StatefulSet name is at most 52 and
the company name at most 52 - len("-seats") = 46. Everything else is looser: the pod names
``<company>-seats-<ordinal>`` (ordinal <= 99, also the pods' hostnames: DNS labels of at most 63),
Services named ``<company>-<suffix>`` (DNS-1035 labels of at most 63), the label value
``crewlet.ai/company: <company>`` (63), and the claim ``data-<company>-data-0`` (253).
"""
DNS1035_LABEL_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
"""A Company's name names its Services, which must be DNS-1035 labels."""
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"
HOSTNAME_PATTERN = rf"^{_DNS_LABEL}(\.{_DNS_LABEL})*$"
"""A lowercase DNS name (RFC 1123 subdomain) of labels of at most 63 characters, as HTTPRoute
and Ingress hosts must be: a route for a longer label could never match a request."""
_ALLOWED_LABEL = rf"({_DNS_LABEL}|\{{namespace\}})"
ALLOWED_HOSTNAME_PATTERN = rf"^(\*\.)?{_ALLOWED_LABEL}(\.{_ALLOWED_LABEL})*$"
"""An entry of ``spec.exposure.allowedHostnames``: a hostname, or ``*.`` and a domain, whose
labels may be ``{namespace}``."""
_HOST_LABEL = r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?"
_IMAGE_DOMAIN = rf"(?:{_HOST_LABEL}(?:\.{_HOST_LABEL})*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?"
_IMAGE_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_IMAGE_TAG = r"[\w][\w.-]{0,127}"
_IMAGE_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9A-Fa-f]{32,}"
IMAGE_PATTERN = (
    rf"^(?:{_IMAGE_DOMAIN}/)?{_IMAGE_PATH_COMPONENT}(?:/{_IMAGE_PATH_COMPONENT})*"
    rf"(?::{_IMAGE_TAG})?(?:@{_IMAGE_DIGEST})?$"
)
"""An image reference, in the grammar of the registries' own parser (distribution/reference):
``[host[:port]/]path[:tag][@digest]``, the path in lowercase components."""


class Model(BaseModel):
    """camelCase on the wire, snake_case in Python; unknown fields are refused."""

    model_config = ConfigDict(
        alias_generator=lambda name: "".join(
            p if i == 0 else p[:1].upper() + p[1:] for i, p in enumerate(name.split("_"))
        ),
        populate_by_name=True,
        extra="forbid",
    )


class SecretKeyRef(Model):
    """A key of a Secret in any namespace; the operator copies it into each company's namespace."""

    namespace: str = Field(min_length=1, max_length=63, description="Namespace of the Secret.")
    name: str = Field(min_length=1, max_length=253, description="Name of the Secret.")
    key: str = Field(min_length=1, max_length=253, description="Key within the Secret's data.")


ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"


class SecretEnv(Model):
    """An environment variable of the engine whose value comes from a Secret."""

    name: str = Field(
        pattern=ENV_NAME_PATTERN,
        max_length=128,
        description="Environment variable name, e.g. ANTHROPIC_API_KEY.",
    )
    secret_ref: SecretKeyRef = Field(description="Where the value is.")


class EnvValue(Model):
    """An environment variable with a literal value, or one taken from a Secret."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "has(self.value) != has(self.secretRef)",
                "an env entry sets exactly one of value and secretRef",
            )
        )
    )

    name: str = Field(pattern=ENV_NAME_PATTERN, max_length=128, description="Variable name.")
    value: str | None = Field(default=None, description="A literal value.")
    secret_ref: SecretKeyRef | None = Field(default=None, description="A Secret key instead.")


class LocalObjectReference(Model):
    """A name in the same namespace."""

    name: str = Field(min_length=1, max_length=253, description="Name of the object.")


class Engine(Model):
    """The engine image every company of the class runs."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                f"self.image.matches({cel_string(IMAGE_PATTERN)})",
                "spec.engine.image must be an image reference, [host[:port]/]path[:tag][@digest] "
                "with a lowercase path, e.g. ghcr.io/crewlet/crewlet:main",
                field_path=".image",
            )
        )
    )

    image: str = Field(
        min_length=1,
        max_length=1024,
        description=(
            "Engine image, e.g. ghcr.io/crewlet/crewlet-operator/engine:v0.2.0. A semantic "
            "version tag is ordered and protected against downgrades; a digest, main or a "
            "commit tag is not."
        ),
    )

    @field_validator("image")
    @classmethod
    def _image_reference(cls, image: str) -> str:
        """The CEL rule above, for a class stored before it (the reconcile reads the model)."""
        if not re.fullmatch(IMAGE_PATTERN, image):
            raise ValueError("not an image reference, [host[:port]/]path[:tag][@digest]")
        return image

    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] | None = Field(
        default=None, description="Pull policy of the engine containers."
    )
    image_pull_secrets: list[LocalObjectReference] = Field(
        default_factory=list,
        description="Pull secrets, by name in each company's namespace.",
        json_schema_extra=list_map("name"),
    )


class Storage(Model):
    """The data volume of each company."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "isQuantity(self.size)",
                "spec.storage.size must be a Kubernetes quantity, e.g. 12Gi",
                field_path=".size",
            )
        )
    )

    storage_class_name: str | None = Field(
        default=None, description="StorageClass of the data volume; the default class if unset."
    )
    size: str = Field(
        default=MIN_STORAGE,
        description="Size of the data volume: at least 12Gi, or 9Gi when files live in S3.",
    )


class S3Credentials(Model):
    """Static S3 keys, from Secrets."""

    access_key_id: SecretKeyRef = Field(description="Access key id.")
    secret_access_key: SecretKeyRef = Field(description="Secret access key.")


class S3Files(Model):
    """Company files in S3 instead of on the data volume."""

    bucket: str = Field(min_length=1, max_length=255, description="Bucket name.")
    region: str = Field(min_length=1, max_length=64, description="Region (auto for R2).")
    endpoint: str | None = Field(default=None, description="Endpoint URL for non-AWS stores.")
    prefix: str | None = Field(
        default=None,
        description=(
            "Key prefix; <namespace>/<company>/ is appended so that companies share a bucket."
        ),
    )
    path_style: bool | None = Field(default=None, description="Path-style addressing (MinIO).")
    credentials: S3Credentials | None = Field(
        default=None,
        description=(
            "Static keys; leave unset to use workload identity on the engine's ServiceAccount."
        ),
    )


class Files(Model):
    """Where company files live: on the data volume (default) or in S3."""

    s3: S3Files | None = Field(default=None, description="Keep files in S3.")


class Telemetry(Model):
    """OpenTelemetry export of the engine (environment only)."""

    endpoint: str | None = Field(default=None, description="OTEL_EXPORTER_OTLP_ENDPOINT.")
    protocol: Literal["http/protobuf", "grpc"] | None = Field(
        default=None, description="OTEL_EXPORTER_OTLP_PROTOCOL."
    )
    headers: SecretKeyRef | None = Field(
        default=None, description="OTEL_EXPORTER_OTLP_HEADERS, from a Secret (k=v,k2=v2)."
    )


class ServiceAccountSettings(Model):
    """The engine's ServiceAccount, <company>-engine."""

    annotations: dict[str, str] = Field(
        default_factory=dict,
        description="Annotations, e.g. eks.amazonaws.com/role-arn for workload identity.",
    )


class Scheduling(Model):
    """Where engine pods run."""

    node_selector: dict[str, str] = Field(default_factory=dict, description="Node selector.")
    tolerations: list[dict[str, Any]] = Field(default_factory=list, description="Tolerations.")
    affinity: dict[str, Any] | None = Field(default=None, description="Affinity (core/v1).")
    priority_class_name: str | None = Field(default=None, description="PriorityClass.")
    topology_spread_constraints: list[dict[str, Any]] = Field(
        default_factory=list, description="Topology spread constraints (core/v1)."
    )


class ComponentResources(Model):
    """Resources of the data and seats containers (core/v1 ResourceRequirements)."""

    data: dict[str, Any] | None = Field(default=None, description="The data container's.")
    seats: dict[str, Any] | None = Field(default=None, description="Each seats container's.")


class Seats(Model):
    """Seats pods: how many, and the bounds a tenant may choose within."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "self.minReplicas <= self.replicas && self.replicas <= self.maxReplicas",
                "spec.seats must keep minReplicas <= replicas <= maxReplicas",
                field_path=".replicas",
            )
        )
    )

    replicas: int = Field(default=1, ge=0, le=100, description="Default seats replicas.")
    min_replicas: int = Field(default=0, ge=0, le=100, description="Lowest a Company may set.")
    max_replicas: int = Field(default=10, ge=0, le=100, description="Highest a Company may set.")


class NetworkPolicySettings(Model):
    """Who may reach the engine's API and webhook port."""

    api_peers: list[dict[str, Any]] = Field(
        default_factory=list,
        description="NetworkPolicyPeers (e.g. the gateway's namespace) admitted to the API port.",
    )


class GatewayExposure(Model):
    """Webhooks through the Gateway API (an HTTPRoute)."""

    parent_refs: list[dict[str, Any]] = Field(min_length=1, description="Gateways to attach to.")


class IngressExposure(Model):
    """Webhooks through an Ingress."""

    class_name: str | None = Field(default=None, description="IngressClass.")
    tls_secret_name: str | None = Field(
        default=None, description="TLS Secret in the company's namespace."
    )


class Exposure(Model):
    """How webhooks reach the engine: an HTTPRoute when the Gateway API is served, else an
    Ingress. A class may carry both: the operator picks one when it starts."""

    gateway: GatewayExposure | None = Field(default=None, description="Gateway API settings.")
    ingress: IngressExposure | None = Field(default=None, description="Ingress settings.")
    allowed_hostnames: list[str] | None = Field(
        default=None,
        max_length=64,
        description=(
            "The webhook hostnames the class's companies may ask for (spec.webhookHostname): "
            "a hostname, or *. and a domain for every name under it (hooks.a.example.com and "
            "a.b.example.com under *.example.com); {namespace} in one stands for the company's "
            "namespace, so that *.{namespace}.hooks.example.com gives each namespace names of "
            "its own. A Company asking for another reports Accepted=False HostnameNotAllowed. "
            "Unset: any hostname no other workload's route serves."
        ),
        json_schema_extra={
            "items": {
                "type": "string",
                "maxLength": 253,
                "x-kubernetes-validations": [
                    {
                        "rule": f"self.matches({cel_string(ALLOWED_HOSTNAME_PATTERN)})",
                        "message": (
                            "each spec.exposure.allowedHostnames entry is a lowercase DNS name, "
                            "or *. and one, whose labels may be {namespace}: hooks.example.com, "
                            "*.example.com, *.{namespace}.hooks.example.com"
                        ),
                    }
                ],
            }
        },
    )


_S3 = "(has(self.files) && has(self.files.s3))"
_SIZE = "self.storage.size"


class EngineClassSpec(Model):
    """How companies of this class run."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                f"{_S3} || !has(self.storage) || !isQuantity({_SIZE}) "
                f"|| quantity({_SIZE}).compareTo(quantity('{MIN_STORAGE}')) >= 0",
                f"the data volume (spec.storage.size) must be at least {MIN_STORAGE}, "
                f"or {MIN_STORAGE_WITH_S3} when spec.files.s3 keeps the files in S3",
                field_path=".storage.size",
            ),
            cel(
                f"!{_S3} || !has(self.storage) || !isQuantity({_SIZE}) "
                f"|| quantity({_SIZE}).compareTo(quantity('{MIN_STORAGE_WITH_S3}')) >= 0",
                f"with files in S3 (spec.files.s3) the data volume (spec.storage.size) must "
                f"still be at least {MIN_STORAGE_WITH_S3}",
                field_path=".storage.size",
            ),
        )
    )

    engine: Engine = Field(description="The engine image.")
    allowed_namespaces: LabelSelector | None = Field(
        default=None,
        description=(
            "A namespace label selector; a Company elsewhere reports Accepted=False "
            "ClassNotAllowed. Unset: every namespace."
        ),
    )
    storage: Storage = Field(default_factory=Storage, description="The data volume.")
    files: Files = Field(default_factory=Files, description="Where company files live.")
    model_keys: list[SecretEnv] = Field(
        default_factory=list, description="Model provider keys.", json_schema_extra=list_map("name")
    )
    telemetry: Telemetry = Field(default_factory=Telemetry, description="OpenTelemetry export.")
    env: list[EnvValue] = Field(
        default_factory=list,
        description="More engine environment.",
        json_schema_extra=list_map("name"),
    )
    service_account: ServiceAccountSettings = Field(
        default_factory=ServiceAccountSettings, description="The engine's ServiceAccount."
    )
    scheduling: Scheduling = Field(default_factory=Scheduling, description="Pod placement.")
    resources: ComponentResources = Field(
        default_factory=ComponentResources, description="Container resources."
    )
    seats: Seats = Field(default_factory=Seats, description="Seats pods.")
    network_policy: NetworkPolicySettings = Field(
        default_factory=NetworkPolicySettings, description="API port peers."
    )
    exposure: Exposure = Field(default_factory=Exposure, description="Webhook routes.")


class CompanySeats(Model):
    """Per-company seats settings, within the class's bounds."""

    replicas: int | None = Field(default=None, ge=0, le=100, description="Seats pods.")


class CompanySpec(Model):
    """A company: an engine of the named class in this namespace."""

    class_name: str = Field(min_length=1, max_length=253, description="The EngineClass to run.")
    suspend: bool = Field(
        default=False, description="Scale every engine pod to zero; the data volume is kept."
    )
    webhook_hostname: str | None = Field(
        default=None,
        max_length=253,
        description="Hostname of the webhook route.",
        json_schema_extra=validations(
            cel(
                f"self.matches({cel_string(HOSTNAME_PATTERN)})",
                "spec.webhookHostname must be a lowercase DNS name, e.g. hooks.example.com "
                "(no scheme, port or path)",
            )
        ),
    )
    seats: CompanySeats = Field(default_factory=CompanySeats, description="Seats pods.")


class CompanyStatus(Model):
    """What the operator observed and decided about a company."""

    observed_generation: int | None = Field(default=None, description="The spec generation seen.")
    conditions: list[ConditionDict] = Field(
        default_factory=list,
        description="Accepted, Ready and Suspended (metav1.Condition).",
        json_schema_extra=list_map("type"),
    )
    engine_image: str | None = Field(default=None, description="The engine image running.")
    engine_version: str | None = Field(
        default=None, description="Its semantic version, when its tag is one."
    )
    highest_engine_version: str | None = Field(
        default=None,
        description=(
            "The highest semantic version this company has run (also kept on its data claim)."
        ),
    )
    version_protection: Literal["Ordered", "Unordered"] | None = Field(
        default=None,
        description=(
            "Ordered: the image tag is a semantic version and downgrades are refused. Unordered: "
            "a digest, main or a commit, which the operator cannot order: no protection."
        ),
    )


class EngineClassStatus(Model):
    """How the class is used."""

    companies: int = Field(default=0, description="Companies that name this class.")
    conditions: list[ConditionDict] = Field(
        default_factory=list,
        description="ReferencesResolved: every referenced Secret key exists.",
        json_schema_extra=list_map("type"),
    )


class EngineClass(Model):
    """A cluster-scoped engine class: how companies run (the platform's)."""

    api_version: Literal["crewlet.ai/v1alpha1"] = "crewlet.ai/v1alpha1"
    kind: Literal["EngineClass"] = "EngineClass"
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: EngineClassSpec
    status: EngineClassStatus = Field(default_factory=EngineClassStatus)


class Company(Model):
    """A namespaced company: a Crewlet engine of an EngineClass (the tenant's)."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            on_create(
                f"size(self.metadata.name) <= {MAX_COMPANY_NAME_LENGTH}",
                f"a Company's name is at most {MAX_COMPANY_NAME_LENGTH} characters: its "
                "StatefulSet <name>-seats must stay within 52 so that its pods' label "
                "controller-revision-hash (<name>-seats-<hash>) fits 63 characters",
            ),
            on_create(
                f"self.metadata.name.matches({cel_string(DNS1035_LABEL_PATTERN)})",
                "a Company's name must be a DNS-1035 label (lowercase letters, digits and '-', "
                "starting with a letter and ending with a letter or digit): it names the "
                "company's Services",
            ),
        )
    )

    api_version: Literal["crewlet.ai/v1alpha1"] = "crewlet.ai/v1alpha1"
    kind: Literal["Company"] = "Company"
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: CompanySpec
    status: CompanyStatus = Field(default_factory=CompanyStatus)
