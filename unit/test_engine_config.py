"""The rendered crewlet.yaml files against the engine's own schema (unknown keys refused)."""

from __future__ import annotations

import base64
import copy
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft202012Validator

from crewlet_operator_daemon import ClusterFacts, Observed, desired_children, engine
from crewlet_operator_daemon.api.v1alpha1 import S3Files

SCHEMA_COPY = Path(engine.__file__).parent / "schema" / "bootstrap.schema.json"
GIB = 1 << 30

S3_MATRIX: dict[str, S3Files | None] = {
    "broker-files": None,
    "s3-static-keys": S3Files.model_validate(
        {
            "bucket": "crewlet-files",
            "region": "eu-west-1",
            "prefix": "prod/",
            "credentials": {
                "accessKeyId": {"namespace": "platform", "name": "s3", "key": "id"},
                "secretAccessKey": {"namespace": "platform", "name": "s3", "key": "secret"},
            },
        }
    ),
    "s3-workload-identity": S3Files.model_validate({"bucket": "crewlet-files", "region": "auto"}),
    "s3-minio": S3Files.model_validate(
        {
            "bucket": "files",
            "region": "us-east-1",
            "endpoint": "http://minio.minio:9000",
            "pathStyle": True,
        }
    ),
}


def data_config(s3: S3Files | None, volume: int = 12 * GIB) -> engine.Config:
    return engine.render_data_config(s3=s3, s3_key_prefix="ns/acme/", volume_bytes=volume)


def seats_config(s3: S3Files | None) -> engine.Config:
    return engine.render_seats_config(
        s3=s3, s3_key_prefix="ns/acme/", data_hosts=["acme-data-0.acme-data.ns.svc"]
    )


def test_the_schema_copy_is_a_valid_draft_2020_12_schema() -> None:
    Draft202012Validator.check_schema(engine.schema())
    assert engine.schema()["$schema"] == "https://json-schema.org/draft/2020-12/schema"


def test_the_schema_copy_is_the_one_its_readme_records() -> None:
    """The copy is verbatim: its SHA-256 is the one the README records with the commit, so an
    edit by hand (or a newer schema without its commit recorded) fails here."""
    readme = (SCHEMA_COPY.parent / "README.md").read_text()
    digest = hashlib.sha256(SCHEMA_COPY.read_bytes()).hexdigest()
    assert f"SHA-256 `{digest}`" in readme, digest


def test_the_schema_readme_names_where_it_came_from() -> None:
    readme = (SCHEMA_COPY.parent / "README.md").read_text()
    assert "crewlet/crewlet" in readme
    assert "199b205ad571ef53c2b1c52d9cc7726ec0dc461f" in readme


@pytest.mark.parametrize("s3", sorted(S3_MATRIX))
@pytest.mark.parametrize("component", ["data", "seats"])
def test_every_rendered_file_validates(s3: str, component: str) -> None:
    config = data_config(S3_MATRIX[s3]) if component == "data" else seats_config(S3_MATRIX[s3])
    assert engine.config_errors(config) == []
    assert engine.validate(component, config) is config
    # What is written is what was validated.
    assert yaml.safe_load(engine.to_yaml(config)) == config


@pytest.mark.parametrize("volume", [9 * GIB, 12 * GIB, 50 * GIB, 10_000 * GIB, 100_000 * GIB])
def test_the_broker_share_is_within_the_schemas_bounds(volume: int) -> None:
    assert engine.config_errors(data_config(None, volume)) == []


def test_the_broker_share_is_half_the_volume_above_the_engines_floor() -> None:
    assert engine.stream_max_bytes(12 * GIB) == 6 * GIB
    assert engine.stream_max_bytes(9 * GIB) == 5 * GIB
    assert engine.stream_max_bytes(1 << 50) == engine.STREAM_MAX_BYTES


@pytest.mark.parametrize(
    "mutate",
    [
        pytest.param(lambda c: c.update(colour="blue"), id="unknown-top-level-key"),
        pytest.param(lambda c: c["node"].update(colour="blue"), id="unknown-node-key"),
        pytest.param(lambda c: c["api"]["auth"].update(anonymous="none"), id="newer-engine-key"),
        pytest.param(
            lambda c: c["api"]["auth"]["tokens"][0].update(role="admin"),
            id="token-role-of-newer-engines",
        ),
        pytest.param(lambda c: c["store"].update(driver="sqlite"), id="retired-key"),
        pytest.param(lambda c: c["logging"].update(level="verbose"), id="bad-enum"),
        pytest.param(lambda c: c["stream"].update(store_max_bytes=GIB), id="below-minimum"),
        pytest.param(lambda c: c["api"].update(port=70000), id="port-out-of-range"),
    ],
)
def test_the_validator_is_real(mutate: Any) -> None:
    config = copy.deepcopy(data_config(S3_MATRIX["s3-static-keys"]))
    mutate(config)
    errors = engine.config_errors(config)
    assert errors
    with pytest.raises(engine.EngineConfigError) as raised:
        engine.validate("data", config)
    assert raised.value.errors == errors
    assert "data crewlet.yaml is refused" in str(raised.value)


def test_a_two_member_fleet_is_refused_by_the_schema() -> None:
    config = data_config(None)
    config["stream"]["cluster"] = {"name": "c", "port": 6222, "peers": ["nats://b:6222"]}
    assert engine.config_errors(config)


def test_data_file_shape() -> None:
    config = data_config(S3_MATRIX["s3-static-keys"])
    assert config["node"]["roles"] == ["data", "ingress", "workers"]
    assert config["stream"]["store_dir"] == "/var/lib/crewlet/stream"
    assert config["stream"]["leaf"] == {"port": 7422}
    assert config["stream"]["replicas"] == 1
    assert config["coordination"] == {"type": "embedded-kv"}
    assert config["api"]["port"] == 8080
    assert config["api"]["auth"]["allow_anonymous_read"] is False
    assert config["api"]["auth"]["tokens"] == [
        {"id": "operator", "token": "${CREWLET_API_TOKEN_OPERATOR}"}
    ]
    s3 = config["store"]["objects"]["s3"]
    assert s3["access_key_id"] == "${CREWLET_S3_ACCESS_KEY_ID}"
    assert s3["secret_access_key"] == "${CREWLET_S3_SECRET_ACCESS_KEY}"
    assert config["store"]["path"].startswith(engine.DATA_DIR + "/")


def test_seats_file_shape() -> None:
    config = seats_config(None)
    assert config["node"]["roles"] == ["seats"]
    assert config["store"]["scratch"] is True
    assert config["store"]["path"].startswith(engine.SCRATCH_DIR + "/")
    assert "store_dir" not in config.get("stream", {})
    assert config["stream"]["leaf"]["urls"] == ["nats-leaf://acme-data-0.acme-data.ns.svc:7422"]
    assert "auth" not in config["api"]
    assert "objects" not in config["store"]


def test_workload_identity_names_no_keys() -> None:
    for component, config in (
        ("data", data_config(S3_MATRIX["s3-workload-identity"])),
        ("seats", seats_config(S3_MATRIX["s3-workload-identity"])),
    ):
        s3 = config["store"]["objects"]["s3"]
        assert "access_key_id" not in s3, component
        assert "secret_access_key" not in s3, component


def test_the_key_prefix_keeps_namespaces_apart() -> None:
    assert engine.s3_prefix(None, "ns", "acme") == "ns/acme/"
    assert engine.s3_prefix("", "ns", "acme") == "ns/acme/"
    assert engine.s3_prefix("prod", "ns", "acme") == "prod/ns/acme/"
    assert engine.s3_prefix("/prod/", "ns", "acme") == "prod/ns/acme/"
    assert engine.s3_prefix("a/b", "other", "acme") != engine.s3_prefix("a/b", "ns", "acme")


def test_the_files_in_the_config_secret_validate() -> None:
    """End to end: what reconcile puts in <company>-config is what the engine admits."""
    company = {
        "apiVersion": "crewlet.ai/v1alpha1",
        "kind": "Company",
        "metadata": {"name": "acme", "namespace": "ns", "uid": "u", "generation": 1},
        "spec": {"className": "c"},
    }
    for s3 in S3_MATRIX.values():
        files = (
            {}
            if s3 is None
            else {"s3": json.loads(s3.model_dump_json(by_alias=True, exclude_none=True))}
        )
        engine_class = {
            "apiVersion": "crewlet.ai/v1alpha1",
            "kind": "EngineClass",
            "metadata": {"name": "c"},
            "spec": {"engine": {"image": "crewlet:v1.0.0"}, "files": files},
        }
        secrets: dict[tuple[str, str], dict[str, Any] | None] = {
            ("platform", "s3"): {"data": {"id": "aWQ=", "secret": "c2VjcmV0"}}
        }
        children = desired_children(
            company,
            engine_class,
            Observed(secrets=secrets),
            ClusterFacts(gateway_api=False, operator_namespace="ops"),
            token_factory=lambda: "t",
        )
        (config,) = [c.object for c in children if c.object["metadata"]["name"] == "acme-config"]
        assert len(config["data"]) == 2
        for encoded in config["data"].values():
            parsed = yaml.safe_load(base64.b64decode(encoded))
            assert engine.config_errors(parsed) == []


def test_the_probes_are_generous_at_start() -> None:
    probes = engine.probes()
    startup = probes["startupProbe"]
    assert startup["httpGet"] == {"path": "/health", "port": "http"}
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 300
    assert probes["livenessProbe"]["httpGet"]["path"] == "/health"
    assert probes["readinessProbe"]["httpGet"]["path"] == "/ready"
