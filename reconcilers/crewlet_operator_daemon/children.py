"""The children a Company should have, built from its parsed inputs: every object the operator
applies for it.

A ServiceAccount, three Secrets (the operator's API token, the copies of the class's Secret keys,
both components' crewlet.yaml), a NetworkPolicy, a headless Service, a PodDisruptionBudget and a
StatefulSet per component (data and seats), the API Service and the webhook route (an HTTPRoute
or an Ingress). What the class asks for is judged first (:mod:`crewlet_operator_daemon.inputs`); the
one refusal found while building is a crewlet.yaml the engine's schema refuses (a bug of the
operator).
"""

from __future__ import annotations

import base64
import copy
from dataclasses import dataclass, field
from typing import Any

from crewlet_operator import (
    HTTP_ROUTE,
    INGRESS,
    NETWORK_POLICY,
    POD_DISRUPTION_BUDGET,
    SECRET,
    SERVICE,
    SERVICE_ACCOUNT,
    STATEFUL_SET,
    controller_reference,
)
from crewlet_operator import KubeObject as Object
from crewlet_operator.diff import hash_of, parse_quantity, semantic_subset
from crewlet_operator_daemon import engine, inputs, naming
from crewlet_operator_daemon.api.conditions import ENGINE_CONFIG_INVALID
from crewlet_operator_daemon.inputs import Inputs, Refused, SecretCopy
from crewlet_operator_daemon.naming import DATA, SEATS, Component
from crewlet_operator_daemon.plan import Apply

# The engine pods' volumes besides the data claim, each named by a volume and its mount.
_CONFIG_VOLUME = "config"
_HOME_VOLUME = "home"
_TMP_VOLUME = "tmp"
_SCRATCH_VOLUME = "scratch"


@dataclass
class Desired:
    """The complete desired children, and what the Accepted message should add."""

    children: list[Apply] = field(default_factory=list)
    """Every child, in apply order."""
    notes: list[str] = field(default_factory=list)
    """What the builders chose that the company's owner should know (clamped seats, a kept
    claim template, a route that cannot be made)."""
    image: str = ""
    """The engine image the StatefulSets run."""
    files_left_out: bool = False
    """The config Secret holds no files: they were checked but not written out
    (:func:`build` with ``render_files=False``)."""


def build(ctx: Inputs, *, render_files: bool = True) -> Desired:
    """Build every child, in apply order. ``render_files=False`` leaves a new company's
    crewlet.yaml files out of its config Secret (they are checked all the same): what a verdict
    needs, at half the cost.

    Raises:
        Refused: what the class asks for cannot be run
        (:func:`crewlet_operator_daemon.inputs.check_class`),
            a referenced Secret is missing or unreadable, or a crewlet.yaml is refused.
    """
    inputs.check_class(ctx)
    copies = inputs.secret_copies(ctx)
    env_data = inputs.copied_values(ctx, copies)
    token = _token(ctx)
    configs, config_files, config_annotations = _configs(ctx, render_files)
    secrets_hash = hash_of({"env": env_data, "token": token})
    desired = Desired(image=ctx.engine_class.spec.engine.image, files_left_out=not config_files)
    add = desired.children.append
    add(Apply(SERVICE_ACCOUNT, _service_account(ctx)))
    add(
        Apply(
            SECRET,
            _opaque_secret(ctx, naming.api_token_secret(ctx.name), {naming.API_TOKEN_KEY: token}),
        )
    )
    add(Apply(SECRET, _opaque_secret(ctx, naming.env_secret(ctx.name), env_data)))
    add(
        Apply(
            SECRET,
            _opaque_secret(ctx, naming.config_secret(ctx.name), config_files, config_annotations),
        )
    )
    for component in (DATA, SEATS):
        add(Apply(NETWORK_POLICY, _network_policy(ctx, component)))
    add(Apply(SERVICE, _headless_service(ctx, DATA)))
    add(Apply(SERVICE, _headless_service(ctx, SEATS)))
    add(Apply(SERVICE, _api_service(ctx)))
    for component in (DATA, SEATS):
        add(Apply(POD_DISRUPTION_BUDGET, _disruption_budget(ctx, component)))
    route = _webhook_route(ctx, desired.notes)
    if route is not None:
        add(route)
    # The StatefulSets last: they start the engine, so a child the API server refuses is met
    # before anything runs.
    for component in (DATA, SEATS):
        annotations = {
            naming.CONFIG_HASH_ANNOTATION: hash_of(configs[component]),
            naming.SECRETS_HASH_ANNOTATION: secrets_hash,
        }
        add(Apply(STATEFUL_SET, _statefulset(ctx, component, copies, annotations, desired)))
    return desired


# -- the Secrets' data ------------------------------------------------------------------------


def _volume_bytes(ctx: Inputs) -> int:
    return int(parse_quantity(ctx.engine_class.spec.storage.size))


def _configs(
    ctx: Inputs, render_files: bool = True
) -> tuple[dict[Component, engine.Config], dict[str, str], dict[str, str]]:
    """Both components' crewlet.yaml, the config Secret's data (base64 files), each checked
    against the engine's schema unless the Secret already holds exactly that file, and the
    Secret's annotations.

    Writing the files out (YAML) is most of what reconciling a converged company costs. So the
    Secret says which configurations its files hold and what its data hashes to: when both
    still hold, its data is the files, as they were written, and nothing is rendered.
    """
    s3 = ctx.engine_class.spec.files.s3
    prefix = engine.s3_prefix(s3.prefix if s3 else None, ctx.namespace, ctx.name)
    data = engine.render_data_config(s3=s3, s3_key_prefix=prefix, volume_bytes=_volume_bytes(ctx))
    seats = engine.render_seats_config(
        s3=s3,
        s3_key_prefix=prefix,
        data_hosts=[naming.data_pod_host(ctx.name, ctx.namespace)],
    )
    configs: dict[Component, engine.Config] = {DATA: data, SEATS: seats}
    secret = ctx.child(SECRET, naming.config_secret(ctx.name)) or {}
    existing: dict[str, str] = secret.get("data") or {}
    held = (secret.get("metadata") or {}).get("annotations") or {}
    wanted = hash_of(configs)
    if (
        held.get(naming.CONFIG_HASH_ANNOTATION) == wanted
        and existing
        and held.get(naming.FILES_HASH_ANNOTATION) == hash_of(existing)
    ):
        return configs, dict(existing), _config_annotations(wanted, existing)
    if not render_files and not existing:
        # A new company's files are written out only when they are to be applied: a verdict
        # needs only whether they pass the schema, and YAML is half of a new company's render.
        for component, config in configs.items():
            _check(component, config)
        return configs, {}, {naming.CONFIG_HASH_ANNOTATION: wanted}
    files: dict[str, str] = {}
    for component, config in configs.items():
        key = engine.config_file_key(component)
        files[key] = _b64(engine.to_yaml(config))
        if existing.get(key) != files[key]:  # what was written passed this check then
            _check(component, config)
    return configs, files, _config_annotations(wanted, files)


def _check(component: Component, config: engine.Config) -> None:
    """Refuse the company when the engine's schema refuses ``config``."""
    try:
        engine.validate(component, config)
    except engine.EngineConfigError as error:
        raise Refused(ENGINE_CONFIG_INVALID, f"{error}; this is a bug of the operator") from None


def _config_annotations(configs_hash: str, files: dict[str, str]) -> dict[str, str]:
    return {
        naming.CONFIG_HASH_ANNOTATION: configs_hash,
        naming.FILES_HASH_ANNOTATION: hash_of(files),
    }


def _token(ctx: Inputs) -> str:
    """The operator's API token (base64): the existing Secret's, else a new one.

    A token must be secret, so it is random, not derived; keeping the existing one is what makes
    every later reconcile pure.
    """
    existing = ctx.child(SECRET, naming.api_token_secret(ctx.name))
    value = ((existing or {}).get("data") or {}).get(naming.API_TOKEN_KEY)
    if isinstance(value, str) and value:
        return value
    return _b64(ctx.new_token())


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


# -- the objects ------------------------------------------------------------------------------


def _metadata(
    ctx: Inputs,
    name: str,
    component: Component | None = None,
    annotations: dict[str, str] | None = None,
) -> Object:
    meta: Object = {
        "name": name,
        "namespace": ctx.namespace,
        "labels": naming.labels(ctx.name, component) | dict(ctx.facts.shard_labels),
    }
    if annotations:
        meta["annotations"] = dict(annotations)
    meta["ownerReferences"] = [controller_reference(ctx.raw)]
    return meta


def _service_account(ctx: Inputs) -> Object:
    """``<company>-engine``, with the class's annotations (workload identity)."""
    annotations = ctx.engine_class.spec.service_account.annotations
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": _metadata(ctx, naming.service_account(ctx.name), annotations=annotations),
    }


def _opaque_secret(
    ctx: Inputs, name: str, data: dict[str, str], annotations: dict[str, str] | None = None
) -> Object:
    """An Opaque Secret; ``data`` is left out when empty (the API server drops an empty map)."""
    secret: Object = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _metadata(ctx, name, annotations=annotations),
        "type": "Opaque",
    }
    if data:
        secret["data"] = dict(data)
    return secret


def _seats_replicas(ctx: Inputs, notes: list[str]) -> int:
    """The company's seats replicas clamped to the class's bounds, else the class default.

    Clamping (and saying so) keeps the company running; refusing would stop every pod over a
    number the class's administrators bound anyway.
    """
    bounds = ctx.engine_class.spec.seats
    wanted = ctx.company.spec.seats.replicas
    if wanted is None:
        return bounds.replicas
    clamped = min(max(wanted, bounds.min_replicas), bounds.max_replicas)
    if clamped != wanted:
        notes.append(
            f"spec.seats.replicas {wanted} is outside EngineClass {ctx.class_name}'s bounds "
            f"{bounds.min_replicas}..{bounds.max_replicas}: running {clamped} seats pods"
        )
    return clamped


def _statefulset(
    ctx: Inputs,
    component: Component,
    copies: list[SecretCopy],
    annotations: dict[str, str],
    desired: Desired,
) -> Object:
    """A component's StatefulSet; both scale to zero when the company is suspended."""
    name = naming.statefulset(ctx.name, component)
    if ctx.company.spec.suspend:
        replicas = 0
    elif component == DATA:
        replicas = 1  # 1 or 3..5 members, never 2; a fleet grows by seats pods (leaves).
    else:
        replicas = _seats_replicas(ctx, desired.notes)
    spec: Object = {
        "replicas": replicas,
        "serviceName": naming.headless_service(ctx.name, component),
        "selector": {"matchLabels": naming.selector(ctx.name, component)},
        # Claims outlive their pods and the StatefulSet. Written on both components, though the
        # seats have no claim: the manager's admission policy admits no StatefulSet without it.
        "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Retain", "whenScaled": "Retain"},
    }
    if component == SEATS:
        spec["podManagementPolicy"] = "Parallel"  # Disposable pods: start and stop together.
    else:
        spec["volumeClaimTemplates"] = [_data_claim_template(ctx, desired.notes)]
    spec["template"] = {
        "metadata": {"labels": naming.labels(ctx.name, component), "annotations": annotations},
        "spec": _pod_spec(ctx, component, copies),
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": _metadata(ctx, name, component),
        "spec": spec,
    }


def _data_claim_template(ctx: Inputs, notes: list[str]) -> Object:
    """The data volume: ReadWriteOnce, the class's size and StorageClass.

    A StatefulSet's claim templates cannot change once it exists, so when the class changed the
    size or class later, the existing template is kept (an apply would be refused forever) and
    the message says how to grow the volume instead.
    """
    storage = ctx.engine_class.spec.storage
    # The claim templates are an atomic list, owned whole with what the API server defaults in
    # them (volumeMode, status.phase): rendered as stored, so the cached StatefulSet compares as
    # applied without walking it (a start compares every one).
    claim_spec: Object = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": storage.size}},
        "volumeMode": "Filesystem",
    }
    if storage.storage_class_name:
        claim_spec["storageClassName"] = storage.storage_class_name
    template: Object = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": naming.DATA_VOLUME, "labels": naming.labels(ctx.name, DATA)},
        "spec": claim_spec,
        "status": {"phase": "Pending"},
    }
    existing = _existing_claim_template(ctx)
    if existing is None or semantic_subset(template, existing):
        return template
    existing = copy.deepcopy(existing)  # the cached child's own, which the plan must not share
    notes.append(
        f"the data volume keeps the size and StorageClass it was created with (a StatefulSet's "
        f"claim template cannot change): to grow it, expand the claim "
        f"{naming.data_claim(ctx.name)} itself, on a StorageClass that allows expansion"
    )
    return existing


def _existing_claim_template(ctx: Inputs) -> Object | None:
    sts = ctx.child(STATEFUL_SET, naming.statefulset(ctx.name, DATA))
    for template in ((sts or {}).get("spec") or {}).get("volumeClaimTemplates") or ():
        if (template.get("metadata") or {}).get("name") == naming.DATA_VOLUME:
            return dict(template)
    return None


def _workload_identity(ctx: Inputs) -> bool:
    """S3 without static keys: the SDK needs the ServiceAccount's token."""
    s3 = ctx.engine_class.spec.files.s3
    return s3 is not None and s3.credentials is None


def _pod_spec(ctx: Inputs, component: Component, copies: list[SecretCopy]) -> Object:
    """Restricted-profile pod: non-root, no privilege, read-only root, the engine's account.

    Never host namespaces, host paths or privileged containers (the chart's policy refuses
    them); those fields are simply never written.
    """
    spec: Object = {
        "serviceAccountName": naming.service_account(ctx.name),
        "automountServiceAccountToken": _workload_identity(ctx),
        "enableServiceLinks": False,
        "securityContext": {
            "runAsUser": engine.USER_ID,
            "runAsGroup": engine.USER_ID,
            "runAsNonRoot": True,
            "fsGroup": engine.USER_ID,
            # Recursively re-owning a large data volume at every start would slow each boot.
            "fsGroupChangePolicy": "OnRootMismatch",
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "terminationGracePeriodSeconds": engine.TERMINATION_GRACE_SECONDS,
    }
    pull_secrets = ctx.engine_class.spec.engine.image_pull_secrets
    if pull_secrets:
        spec["imagePullSecrets"] = [{"name": s.name} for s in pull_secrets]
    spec["containers"] = [_container(ctx, component, copies)]
    spec["volumes"] = _volumes(ctx, component)
    spec.update(_scheduling(ctx, component))
    return spec


def _container(ctx: Inputs, component: Component, copies: list[SecretCopy]) -> Object:
    spec = ctx.engine_class.spec
    container: Object = {"name": engine.CONTAINER, "image": spec.engine.image}
    if spec.engine.image_pull_policy:
        container["imagePullPolicy"] = spec.engine.image_pull_policy
    container["args"] = list(engine.ARGS)
    container["env"] = _env(ctx, copies)
    container["ports"] = _container_ports(component)
    container.update(engine.probes())
    if component == DATA:
        container["lifecycle"] = {"preStop": {"sleep": {"seconds": engine.PRE_STOP_SLEEP_SECONDS}}}
    resources = spec.resources.data if component == DATA else spec.resources.seats
    if resources:
        container["resources"] = copy.deepcopy(resources)
    container["securityContext"] = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": True,
    }
    container["volumeMounts"] = _mounts(component)
    return container


def _container_ports(component: Component) -> list[Object]:
    ports = [{"name": engine.API_PORT_NAME, "containerPort": engine.API_PORT, "protocol": "TCP"}]
    if component == DATA:
        ports.append(
            {"name": engine.LEAF_PORT_NAME, "containerPort": engine.LEAF_PORT, "protocol": "TCP"}
        )
    return ports


def _env(ctx: Inputs, copies: list[SecretCopy]) -> list[Object]:
    """The operator's variables, then the copied Secrets, then the class's literal values last."""
    telemetry = ctx.engine_class.spec.telemetry
    env: list[Object] = [
        # With the apiVersion the API server defaults: a fieldRef is owned whole (an atomic
        # struct), so the cached copy holds the default and compares as applied only with it.
        {
            "name": engine.NODE_ID_ENV,
            "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}},
        },
        {"name": engine.TURSO_CACHE_ENV, "value": engine.TURSO_CACHE_DIR},
        {"name": engine.OTEL_SERVICE_NAME_ENV, "value": ctx.name},
    ]
    if telemetry.endpoint:
        env.append({"name": engine.OTEL_ENDPOINT_ENV, "value": telemetry.endpoint})
    if telemetry.protocol:
        env.append({"name": engine.OTEL_PROTOCOL_ENV, "value": telemetry.protocol})
    env.append(
        _secret_env(
            engine.OPERATOR_TOKEN_ENV, naming.api_token_secret(ctx.name), naming.API_TOKEN_KEY
        )
    )
    env_secret = naming.env_secret(ctx.name)
    env.extend(_secret_env(c.env, env_secret, c.env) for c in copies)
    env.extend(
        {"name": e.name, "value": e.value} for e in ctx.engine_class.spec.env if e.value is not None
    )
    return env


def _secret_env(name: str, secret: str, key: str) -> Object:
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}


def _volumes(ctx: Inputs, component: Component) -> list[Object]:
    volumes: list[Object] = [
        {
            "name": _CONFIG_VOLUME,
            "secret": {
                "secretName": naming.config_secret(ctx.name),
                "items": [{"key": engine.config_file_key(component), "path": engine.CONFIG_FILE}],
            },
        },
        {"name": _HOME_VOLUME, "emptyDir": {}},
        {"name": _TMP_VOLUME, "emptyDir": {}},
    ]
    if component == SEATS:
        volumes.append({"name": _SCRATCH_VOLUME, "emptyDir": {}})
    return volumes


def _mounts(component: Component) -> list[Object]:
    mounts: list[Object] = [
        {"name": _CONFIG_VOLUME, "mountPath": engine.CONFIG_DIR, "readOnly": True},
        {"name": _HOME_VOLUME, "mountPath": engine.HOME_DIR},
        {"name": _TMP_VOLUME, "mountPath": engine.TMP_DIR},
    ]
    if component == DATA:
        mounts.append({"name": naming.DATA_VOLUME, "mountPath": engine.DATA_DIR})
    else:
        mounts.append({"name": _SCRATCH_VOLUME, "mountPath": engine.SCRATCH_DIR})
    return mounts


def _scheduling(ctx: Inputs, component: Component) -> Object:
    """The class's placement. A spread constraint without a selector spreads this component.

    The class's author cannot know each company's labels; a constraint with no labelSelector
    would count no pods at all.
    """
    scheduling = ctx.engine_class.spec.scheduling
    result: Object = {}
    if scheduling.node_selector:
        result["nodeSelector"] = dict(scheduling.node_selector)
    if scheduling.tolerations:
        result["tolerations"] = copy.deepcopy(scheduling.tolerations)
    if scheduling.affinity:
        result["affinity"] = copy.deepcopy(scheduling.affinity)
    if scheduling.priority_class_name:
        result["priorityClassName"] = scheduling.priority_class_name
    if scheduling.topology_spread_constraints:
        constraints = copy.deepcopy(scheduling.topology_spread_constraints)
        for constraint in constraints:
            constraint.setdefault(
                "labelSelector", {"matchLabels": naming.selector(ctx.name, component)}
            )
        result["topologySpreadConstraints"] = constraints
    return result


def _service_port(name: str, port: int) -> Object:
    return {"name": name, "port": port, "targetPort": name, "protocol": "TCP"}


def _headless_service(ctx: Inputs, component: Component) -> Object:
    """The governing Service: stable pod DNS (``<company>-data-0.<company>-data``).

    The data pod's name is published before it is ready, so seats pods can find the leaf port
    while the data pod is still starting.
    """
    ports = [_service_port(engine.API_PORT_NAME, engine.API_PORT)]
    if component == DATA:
        ports.append(_service_port(engine.LEAF_PORT_NAME, engine.LEAF_PORT))
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(ctx, naming.headless_service(ctx.name, component), component),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": component == DATA,
            "selector": naming.selector(ctx.name, component),
            "ports": ports,
        },
    }


def _api_service(ctx: Inputs) -> Object:
    """``<company>-api``: the data pods' API and webhooks, for routes and the operator."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(ctx, naming.api_service(ctx.name), DATA),
        "spec": {
            "type": "ClusterIP",
            "selector": naming.selector(ctx.name, DATA),
            "ports": [_service_port(engine.API_PORT_NAME, engine.API_PORT)],
        },
    }


def _disruption_budget(ctx: Inputs, component: Component) -> Object:
    """At most one pod of a component evicted at a time, and never a drain held up.

    ``maxUnavailable: 1``: a budget that allows no disruption (``maxUnavailable: 0``, or
    ``minAvailable: 1`` over one data pod) would block every drain of the node forever, which
    the install page promises the operator never does. The single data pod cannot stay
    available through its node's drain anyway (its volume is ReadWriteOnce); it drains
    gracefully on SIGTERM. With three data members the same budget keeps a quorum, and it
    moves seats pods one at a time. ``AlwaysAllow`` lets a drain evict pods that are not ready
    (seats pods are all unready while the data pod is away), so they never pin a node either.
    """
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _metadata(ctx, naming.disruption_budget(ctx.name, component), component),
        "spec": {
            "maxUnavailable": 1,
            "selector": {"matchLabels": naming.selector(ctx.name, component)},
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    }


def _tcp(port: int) -> Object:
    return {"protocol": "TCP", "port": port}


def _operator_peer(ctx: Inputs) -> Object:
    return {
        "namespaceSelector": {
            "matchLabels": {"kubernetes.io/metadata.name": ctx.facts.operator_namespace}
        }
    }


def _network_policy(ctx: Inputs, component: Component) -> Object:
    """Ingress to one company's pods of one component; everything not listed is denied.

    The broker's leaf port has no authentication, so only this company's own pods reach it.
    The API port admits the class's peers (the gateway), the operator and the company's pods
    on the data pod, and only the operator on seats pods (probes come from the kubelet, which
    NetworkPolicy does not filter).
    """
    own_pods = {"podSelector": {"matchLabels": naming.company_pods(ctx.name)}}
    if component == DATA:
        api_from = [
            *copy.deepcopy(ctx.engine_class.spec.network_policy.api_peers),
            _operator_peer(ctx),
            own_pods,
        ]
        rules = [
            {"from": [copy.deepcopy(own_pods)], "ports": [_tcp(engine.LEAF_PORT)]},
            {"from": api_from, "ports": [_tcp(engine.API_PORT)]},
        ]
    else:
        rules = [{"from": [_operator_peer(ctx)], "ports": [_tcp(engine.API_PORT)]}]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _metadata(ctx, naming.network_policy(ctx.name, component), component),
        "spec": {
            "podSelector": {"matchLabels": naming.selector(ctx.name, component)},
            "policyTypes": ["Ingress"],
            "ingress": rules,
        },
    }


def _webhook_route(ctx: Inputs, notes: list[str]) -> Apply | None:
    """``/webhooks`` on the company's hostname: an HTTPRoute when the Gateway API was served at
    start, else an Ingress; none without a hostname."""
    hostname = ctx.company.spec.webhook_hostname
    if not hostname:
        return None
    if not ctx.facts.gateway_api:
        return Apply(INGRESS, _ingress(ctx, hostname))
    gateway = ctx.engine_class.spec.exposure.gateway
    if gateway is None:
        notes.append(
            f"no webhook route for {hostname}: EngineClass {ctx.class_name} sets no "
            f"spec.exposure.gateway.parentRefs to attach an HTTPRoute to"
        )
        return None
    return Apply(HTTP_ROUTE, _http_route(ctx, hostname, gateway.parent_refs))


def _http_route(ctx: Inputs, hostname: str, parent_refs: list[dict[str, Any]]) -> Object:
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": _metadata(ctx, naming.webhook_route(ctx.name)),
        "spec": {
            "parentRefs": copy.deepcopy(parent_refs),
            "hostnames": [hostname],
            "rules": [
                {
                    "matches": [{"path": {"type": "PathPrefix", "value": engine.WEBHOOK_PATH}}],
                    "backendRefs": [
                        {"name": naming.api_service(ctx.name), "port": engine.API_PORT}
                    ],
                }
            ],
        },
    }


def _ingress(ctx: Inputs, hostname: str) -> Object:
    settings = ctx.engine_class.spec.exposure.ingress
    spec: Object = {}
    if settings is not None and settings.class_name:
        spec["ingressClassName"] = settings.class_name
    if settings is not None and settings.tls_secret_name:
        spec["tls"] = [{"hosts": [hostname], "secretName": settings.tls_secret_name}]
    backend = {
        "service": {"name": naming.api_service(ctx.name), "port": {"number": engine.API_PORT}}
    }
    spec["rules"] = [
        {
            "host": hostname,
            "http": {
                "paths": [{"path": engine.WEBHOOK_PATH, "pathType": "Prefix", "backend": backend}]
            },
        }
    ]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": _metadata(ctx, naming.webhook_route(ctx.name)),
        "spec": spec,
    }
