"""Everything the operator knows about the Crewlet engine: the one module that spells its keys.

The engine refuses at start any ``crewlet.yaml`` key it does not know, so the files rendered
here are validated against the engine's own schema (``schema/bootstrap.schema.json``, copied
from the engine's repository) before they are written. Moving to a newer engine is a change to
this module and that file, and nothing else: ports, paths, environment variable names, probes and
roles are all spelled here (see ``reference/crewlet-engine/ENGINE.md``).

The files hold no secret values: a token or a key is a ``${VAR}`` reference the engine expands
from its environment, which the operator fills from Secrets.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

import yaml

from crewlet_operator_daemon import naming

if TYPE_CHECKING:
    import jsonschema_rs

    from crewlet_operator_daemon.api.v1alpha1 import S3Files

Config = dict[str, Any]

# --- The container -------------------------------------------------------------------------

CONTAINER = "engine"
USER_ID = 10001
"""The image's ``crewlet`` user; its group is not pinned by the image, so it is set explicitly."""
API_PORT = 8080
API_PORT_NAME = "http"
WEBHOOK_PATH = "/webhooks"
"""Where the data pods' API takes webhooks: the only path the webhook route exposes."""
LEAF_PORT = 7422
LEAF_PORT_NAME = "leaf"

CONFIG_DIR = "/etc/crewlet"
CONFIG_FILE = "crewlet.yaml"
DATA_DIR = "/var/lib/crewlet"
"""The data volume's mount point."""
HOME_DIR = "/home/crewlet"
TMP_DIR = "/tmp"
SCRATCH_DIR = "/var/lib/crewlet/scratch"
"""The seats pod's scratch store (an emptyDir; the engine deletes it at every boot anyway)."""
TURSO_CACHE_DIR = f"{HOME_DIR}/.cache/turso-go"

ARGS = ["run", "-config", f"{CONFIG_DIR}/{CONFIG_FILE}"]
"""Arguments to the image's entrypoint (tini, then crewlet), which is kept: the engine spawns
process trees that need an init."""

DATA_STORE_PATH = f"{DATA_DIR}/store/company.db"
STREAM_DIR = f"{DATA_DIR}/stream"
SCRATCH_STORE_PATH = f"{SCRATCH_DIR}/crewlet.db"

DATA_ROLES = ["data", "ingress", "workers"]
SEATS_ROLES = ["seats"]

TERMINATION_GRACE_SECONDS = 300
"""SIGTERM drains: in-flight turns finish with no internal timeout, so allow minutes."""
PRE_STOP_SLEEP_SECONDS = 10
"""On the ingress (data) pod: long enough for two readiness periods to see ``/ready`` 503."""

# --- Environment ---------------------------------------------------------------------------

NODE_ID_ENV = "CREWLET_NODE_ID"
TURSO_CACHE_ENV = "TURSO_GO_CACHE_DIR"
OPERATOR_TOKEN_ENV = "CREWLET_API_TOKEN_OPERATOR"
OPERATOR_TOKEN_ID = "operator"
S3_ACCESS_KEY_ENV = "CREWLET_S3_ACCESS_KEY_ID"
S3_SECRET_KEY_ENV = "CREWLET_S3_SECRET_ACCESS_KEY"
OTEL_SERVICE_NAME_ENV = "OTEL_SERVICE_NAME"
OTEL_ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_ENDPOINT"
OTEL_PROTOCOL_ENV = "OTEL_EXPORTER_OTLP_PROTOCOL"
OTEL_HEADERS_ENV = "OTEL_EXPORTER_OTLP_HEADERS"

RESERVED_ENV = frozenset(
    {
        NODE_ID_ENV,
        TURSO_CACHE_ENV,
        OPERATOR_TOKEN_ENV,
        S3_ACCESS_KEY_ENV,
        S3_SECRET_KEY_ENV,
        OTEL_SERVICE_NAME_ENV,
        OTEL_ENDPOINT_ENV,
        OTEL_PROTOCOL_ENV,
        OTEL_HEADERS_ENV,
    }
)
"""Variables the operator sets itself; a class may not set them again."""

# --- Storage -------------------------------------------------------------------------------

GIB = 1 << 30
STREAM_MIN_BYTES = 5 * GIB
"""The schema's floor for ``stream.store_max_bytes``."""
STREAM_MAX_BYTES = 70368744177664
"""The schema's ceiling for ``stream.store_max_bytes``."""


def reference(variable: str) -> str:
    """A ``${VAR}`` reference, which the engine expands from its environment before decoding."""
    return "${" + variable + "}"


def config_file_key(component: str) -> str:
    """The key of a component's crewlet.yaml in the config Secret (mounted as crewlet.yaml)."""
    return f"crewlet-{component}.yaml"


def probes() -> dict[str, dict[str, Any]]:
    """Startup, liveness and readiness probes of an engine container.

    ``/health`` answers 200 whenever the process is alive (through a drain, while unconfigured),
    so it is the liveness probe; ``/ready`` says whether the node is doing its work. A clustered
    boot may take minutes (broker, JetStream, buckets), so the startup probe allows ten.
    """
    health = {"path": "/health", "port": API_PORT_NAME}
    return {
        "startupProbe": {
            "httpGet": health,
            "periodSeconds": 10,
            "timeoutSeconds": 5,
            "failureThreshold": 60,
        },
        "livenessProbe": {
            "httpGet": dict(health),
            "periodSeconds": 10,
            "timeoutSeconds": 5,
            "failureThreshold": 6,
        },
        "readinessProbe": {
            "httpGet": {"path": "/ready", "port": API_PORT_NAME},
            "periodSeconds": 5,
            "timeoutSeconds": 5,
            "failureThreshold": 3,
        },
    }


def stream_max_bytes(volume_bytes: int) -> int:
    """The embedded broker's share of the data volume: half of it, within the schema's bounds.

    Left unset, the broker takes three quarters of the volume's free space at its first boot,
    which leaves the store files and snapshots sharing that volume too little. Half of the 12Gi
    floor is 6Gi; the 9Gi floor with S3 (no file chunks on the broker) gets the schema's 5Gi.
    """
    return min(max(volume_bytes // 2, STREAM_MIN_BYTES), STREAM_MAX_BYTES)


def s3_prefix(class_prefix: str | None, namespace: str, company: str) -> str:
    """The key prefix of one company: the class's prefix, then ``<namespace>/<company>/``.

    Companies of one class share its bucket; two companies of the same name in different
    namespaces must not share keys.
    """
    base = (class_prefix or "").strip("/")
    own = f"{namespace}/{company}/"
    return f"{base}/{own}" if base else own


def _objects(s3: S3Files | None, prefix: str) -> Config:
    """``store.objects``: S3 when the class keeps files there, else nothing (the broker default).

    Without static keys, ``access_key_id`` and ``secret_access_key`` are omitted so that the AWS
    SDK chain finds the workload identity of the engine's ServiceAccount.
    """
    if s3 is None:
        return {}
    bucket: Config = {"bucket": s3.bucket, "region": s3.region}
    if s3.endpoint:
        bucket["endpoint"] = s3.endpoint
    bucket["prefix"] = prefix
    if s3.path_style is not None:
        bucket["path_style"] = s3.path_style
    if s3.credentials is not None:
        bucket["access_key_id"] = reference(S3_ACCESS_KEY_ENV)
        bucket["secret_access_key"] = reference(S3_SECRET_KEY_ENV)
    return {"objects": {"backend": "s3", "s3": bucket}}


def _logging() -> Config:
    return {"level": "info", "format": "json"}


def render_data_config(*, s3: S3Files | None, s3_key_prefix: str, volume_bytes: int) -> Config:
    """The data pod's crewlet.yaml: roles data, ingress and workers, a broker member.

    It listens for leaves (the seats pods) on the leaf port, keeps its streams on the data
    volume, and accepts the operator's token for the API. Coordination is ``embedded-kv`` from
    the start, so that scaling seats pods from zero never changes the data pod's file.
    """
    return {
        "node": {"roles": list(DATA_ROLES)},
        "store": {"path": DATA_STORE_PATH, **_objects(s3, s3_key_prefix)},
        "stream": {
            "type": "embedded",
            "store_dir": STREAM_DIR,
            "store_max_bytes": stream_max_bytes(volume_bytes),
            "replicas": 1,
            "leaf": {"port": LEAF_PORT},
        },
        "coordination": {"type": "embedded-kv"},
        "api": {
            "host": "0.0.0.0",
            "port": API_PORT,
            "auth": {
                # The copied schema's default is true: transcripts readable without a token.
                "allow_anonymous_read": False,
                "tokens": [{"id": OPERATOR_TOKEN_ID, "token": reference(OPERATOR_TOKEN_ENV)}],
            },
        },
        "logging": _logging(),
        "retention": {"backup_owner": naming.MANAGED_BY},
    }


def render_seats_config(*, s3: S3Files | None, s3_key_prefix: str, data_hosts: list[str]) -> Config:
    """A seats pod's crewlet.yaml: role seats, a scratch store, a broker leaf of the data pods.

    It keeps nothing durable (its store is deleted at every boot) and serves only probes on its
    API port, which is why it needs no token.
    """
    return {
        "node": {"roles": list(SEATS_ROLES)},
        "store": {"path": SCRATCH_STORE_PATH, "scratch": True, **_objects(s3, s3_key_prefix)},
        "stream": {"leaf": {"urls": [f"nats-leaf://{host}:{LEAF_PORT}" for host in data_hosts]}},
        "coordination": {"type": "embedded-kv"},
        "api": {"host": "0.0.0.0", "port": API_PORT},
        "logging": _logging(),
    }


def to_yaml(config: Config) -> str:
    """The file as written: block style, keys in the order rendered (deterministic)."""
    # libyaml's dumper: the pure-Python one was a third of a converged reconcile's time.
    text: str = yaml.dump(
        config, Dumper=yaml.CSafeDumper, sort_keys=False, default_flow_style=False
    )
    return text


@cache
def schema() -> dict[str, Any]:
    """The engine's crewlet.yaml schema (draft 2020-12), read once from the package."""
    text = (
        resources.files("crewlet_operator_daemon")
        .joinpath("schema", "bootstrap.schema.json")
        .read_text()
    )
    loaded: dict[str, Any] = json.loads(text)
    return loaded


@cache
def _validator() -> jsonschema_rs.Draft202012Validator:
    # The compiled (Rust) validator: every company's first reconcile checks two files, and
    # the pure-Python one took ~1.4 ms a file, this one ~0.01 ms. Imported on first use, so
    # that importing the API models (they load this package) loads no validator.
    import jsonschema_rs  # noqa: PLC0415

    return jsonschema_rs.Draft202012Validator(schema())


def config_errors(config: Config) -> list[str]:
    """What the engine's schema refuses in ``config`` (``path: message``), empty when valid."""
    errors = sorted(_validator().iter_errors(config), key=lambda e: _sort_key(e.instance_path))
    return [f"{_json_path(error.instance_path)}: {error.message}" for error in errors]


def _sort_key(path: list[str | int]) -> list[tuple[bool, str | int]]:
    return [(isinstance(part, int), part) for part in path]


def _json_path(path: list[str | int]) -> str:
    """``$.api.auth.tokens[0].role``: where in the file, as JSONPath spells it."""
    return "$" + "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in path)


class EngineConfigError(ValueError):
    """A rendered crewlet.yaml that the engine would refuse at start."""

    def __init__(self, component: str, errors: list[str]) -> None:
        super().__init__(
            f"the {component} crewlet.yaml is refused by the engine's schema: " + "; ".join(errors)
        )
        self.component = component
        self.errors = errors


def validate(component: str, config: Config) -> Config:
    """Return ``config`` when the engine's schema admits it.

    Raises:
        EngineConfigError: a key or value the engine would refuse (a bug in this module, or a
            class value the engine cannot take).
    """
    errors = config_errors(config)
    if errors:
        raise EngineConfigError(component, errors)
    return config
