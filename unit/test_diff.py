"""Desired-versus-observed comparison: semantic_subset, needs_apply, quantities, hash_of."""

from __future__ import annotations

import copy
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crewlet_operator.diff import (
    explain_difference,
    hash_of,
    needs_apply,
    parse_quantity,
    semantic_subset,
)


def deployment(containers: list[dict[str, Any]] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "prod"},
        "spec": {
            **spec,
            "template": {"spec": {"containers": containers or [{"name": "web", "image": "a:1"}]}},
        },
    }


def resources(**limits: Any) -> dict[str, Any]:
    return {"resources": {"limits": limits}}


def pod_spec(**fields: Any) -> dict[str, Any]:
    return {"spec": fields}


def svc_ports(*ports: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "Service", "spec": {"ports": list(ports)}}


CONTAINER = {"name": "web", "image": "nginx:1.27"}
OBSERVED_CONTAINER = {
    "name": "web",
    "image": "nginx:1.27",
    "imagePullPolicy": "IfNotPresent",
    "terminationMessagePath": "/dev/termination-log",
    "resources": {},
}

# (id, desired, observed, desired is a semantic subset of observed)
CASES: list[tuple[str, Any, Any, bool]] = [
    # --- maps
    ("equal maps", {"a": 1, "b": {"c": "x"}}, {"a": 1, "b": {"c": "x"}}, True),
    ("extra observed keys (server defaults)", {"a": 1}, {"a": 1, "b": 2, "c": {"d": 3}}, True),
    ("missing key", {"a": 1, "b": 2}, {"a": 1}, False),
    ("different nested value", {"a": {"b": {"c": 1}}}, {"a": {"b": {"c": 2}}}, False),
    ("map versus scalar", {"a": {"b": 1}}, {"a": "b"}, False),
    ("scalar versus map", {"a": "b"}, {"a": {"b": 1}}, False),
    ("empty desired map", {"spec": {}}, {"spec": {"replicas": 3}}, True),
    ("empty desired map, key missing", {"spec": {"x": {}}}, {"spec": {}}, False),
    (
        "null matches absent",
        {"metadata": {"creationTimestamp": None}, "b": None},
        {"metadata": {}},
        True,
    ),
    ("a map of nulls still needs its key", {"metadata": {"creationTimestamp": None}}, {}, False),
    ("null matches null", {"a": None}, {"a": None}, True),
    ("null does not match a value", {"a": None}, {"a": 1}, False),
    ("value does not match null", {"a": 1}, {"a": None}, False),
    # --- scalars: JSON types are kept apart
    ("int vs str (IntOrString port)", {"targetPort": 8080}, {"targetPort": "8080"}, False),
    ("str vs int", {"targetPort": "http"}, {"targetPort": 8080}, False),
    ("bool vs int", {"paused": True}, {"paused": 1}, False),
    ("int vs bool", {"replicas": 0}, {"replicas": False}, False),
    ("int equals float", {"replicas": 3}, {"replicas": 3.0}, True),
    ("bool equal", {"paused": False}, {"paused": False}, True),
    (
        "bool vs int inside equal-looking containers",
        {"a": [True, {"b": 1}]},
        {"a": [1, {"b": True}]},
        False,
    ),
    ("identical nested containers", {"a": [{"b": [1, "x"]}]}, {"a": [{"b": [1, "x"]}]}, True),
    ("string case matters", {"policy": "Always"}, {"policy": "always"}, False),
    # --- metadata
    (
        "extra observed labels and annotations",
        {"metadata": {"labels": {"app": "web"}, "annotations": {"a": "1"}}},
        {
            "metadata": {
                "labels": {"app": "web", "pod-template-hash": "x"},
                "annotations": {"a": "1", "deployment.kubernetes.io/revision": "3"},
            }
        },
        True,
    ),
    (
        "missing label",
        {"metadata": {"labels": {"app": "web", "tier": "fe"}}},
        {"metadata": {"labels": {"app": "web"}}},
        False,
    ),
    (
        "changed label value",
        {"metadata": {"labels": {"app": "web"}}},
        {"metadata": {"labels": {"app": "api"}}},
        False,
    ),
    (
        "server-owned metadata in desired is ignored",
        {
            "metadata": {
                "name": "web",
                "resourceVersion": "1",
                "uid": "a",
                "generation": 1,
                "creationTimestamp": "2020-01-01T00:00:00Z",
                "managedFields": [{}],
                "selfLink": "/x",
            }
        },
        {
            "metadata": {
                "name": "web",
                "resourceVersion": "99",
                "uid": "b",
                "generation": 7,
                "creationTimestamp": "2025-01-01T00:00:00Z",
            }
        },
        True,
    ),
    (
        "metadata.name is compared",
        {"metadata": {"name": "web"}},
        {"metadata": {"name": "api"}},
        False,
    ),
    (
        "apiVersion and kind at the top are identity, not content",
        {"apiVersion": "apps/v1", "kind": "Deployment", "spec": {"replicas": 1}},
        {"spec": {"replicas": 1}},
        True,
    ),
    (
        "server-owned names are compared below the top-level metadata",
        {"spec": {"uid": "a"}},
        {"spec": {"uid": "b"}},
        False,
    ),
    # --- merge-by-key lists
    (
        "containers merged by name, order free, defaults present",
        pod_spec(containers=[{"name": "b", "image": "b:1"}, {"name": "a", "image": "a:1"}]),
        pod_spec(
            containers=[
                {**OBSERVED_CONTAINER, "name": "a", "image": "a:1"},
                {**OBSERVED_CONTAINER, "name": "b", "image": "b:1"},
            ]
        ),
        True,
    ),
    (
        "container image differs",
        pod_spec(containers=[CONTAINER]),
        pod_spec(containers=[{**OBSERVED_CONTAINER, "image": "nginx:1.28"}]),
        False,
    ),
    (
        "desired container missing",
        pod_spec(containers=[CONTAINER, {"name": "sidecar", "image": "s:1"}]),
        pod_spec(containers=[OBSERVED_CONTAINER]),
        False,
    ),
    (
        "extra observed container (injected sidecar)",
        pod_spec(containers=[CONTAINER]),
        pod_spec(containers=[OBSERVED_CONTAINER, {"name": "istio-proxy", "image": "p:1"}]),
        True,
    ),
    (
        "env merged by name",
        {"env": [{"name": "B", "value": "2"}, {"name": "A", "value": "1"}]},
        {"env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}, {"name": "C"}]},
        True,
    ),
    (
        "env value differs",
        {"env": [{"name": "A", "value": "1"}]},
        {"env": [{"name": "A", "value": "2"}]},
        False,
    ),
    (
        "volumes and volumeMounts merged by name",
        {
            "volumes": [{"name": "data", "emptyDir": {}}],
            "volumeMounts": [{"name": "data", "mountPath": "/d"}],
        },
        {
            "volumes": [{"name": "tok", "projected": {}}, {"name": "data", "emptyDir": {}}],
            "volumeMounts": [
                {"name": "tok", "mountPath": "/t"},
                {"name": "data", "mountPath": "/d"},
            ],
        },
        True,
    ),
    (
        "initContainers merged by name",
        pod_spec(initContainers=[{"name": "init", "image": "i:1"}]),
        pod_spec(initContainers=[{"name": "other", "image": "o:1"}]),
        False,
    ),
    (
        "container ports by containerPort and default protocol",
        {"ports": [{"containerPort": 9090}, {"containerPort": 8080, "name": "http"}]},
        {
            "ports": [
                {"containerPort": 8080, "name": "http", "protocol": "TCP"},
                {"containerPort": 9090, "protocol": "TCP"},
            ]
        },
        True,
    ),
    (
        "container port protocol differs",
        {"ports": [{"containerPort": 53, "protocol": "UDP"}]},
        {"ports": [{"containerPort": 53, "protocol": "TCP"}]},
        False,
    ),
    (
        "same containerPort for TCP and UDP",
        {"ports": [{"containerPort": 53, "protocol": "UDP", "name": "dns-udp"}]},
        {
            "ports": [
                {"containerPort": 53, "protocol": "TCP", "name": "dns-tcp"},
                {"containerPort": 53, "protocol": "UDP", "name": "dns-udp"},
            ]
        },
        True,
    ),
    (
        "service ports by port and protocol",
        svc_ports({"port": 443, "targetPort": 8443}, {"port": 80, "targetPort": 8080}),
        svc_ports(
            {"port": 80, "targetPort": 8080, "protocol": "TCP"},
            {"port": 443, "targetPort": 8443, "protocol": "TCP", "nodePort": 30443},
        ),
        True,
    ),
    (
        "service targetPort int vs str",
        svc_ports({"port": 80, "targetPort": 8080}),
        svc_ports({"port": 80, "targetPort": "8080", "protocol": "TCP"}),
        False,
    ),
    (
        "conditions merged by type",
        {"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
        {
            "status": {
                "conditions": [
                    {"type": "Synced", "status": "False"},
                    {
                        "type": "Ready",
                        "status": "True",
                        "lastTransitionTime": "2025-01-01T00:00:00Z",
                    },
                ]
            }
        },
        True,
    ),
    (
        "condition status differs",
        {"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
        {"status": {"conditions": [{"type": "Ready", "status": "False"}]}},
        False,
    ),
    (
        "volumeClaimTemplates by metadata.name",
        {
            "spec": {
                "volumeClaimTemplates": [{"metadata": {"name": "b"}}, {"metadata": {"name": "a"}}]
            }
        },
        {
            "spec": {
                "volumeClaimTemplates": [
                    {"metadata": {"name": "a"}, "spec": {"volumeMode": "Filesystem"}},
                    {"metadata": {"name": "b"}, "status": {"phase": "Pending"}},
                ]
            }
        },
        True,
    ),
    (
        "unknown list of named maps merges by name",
        {"webhooks": [{"name": "b.crewlet.dev"}]},
        {"webhooks": [{"name": "a.crewlet.dev"}, {"name": "b.crewlet.dev", "timeoutSeconds": 10}]},
        True,
    ),
    (
        "finalizers are a set",
        {"metadata": {"finalizers": ["crewlet.dev/cleanup"]}},
        {"metadata": {"finalizers": ["kubernetes", "crewlet.dev/cleanup"]}},
        True,
    ),
    (
        "missing finalizer",
        {"metadata": {"finalizers": ["crewlet.dev/cleanup"]}},
        {"metadata": {"finalizers": ["kubernetes"]}},
        False,
    ),
    # --- atomic lists
    ("atomic scalar list equal", {"args": ["--a", "--b"]}, {"args": ["--a", "--b"]}, True),
    ("atomic list order matters", {"args": ["--a", "--b"]}, {"args": ["--b", "--a"]}, False),
    ("atomic list longer observed", {"command": ["sh"]}, {"command": ["sh", "-c"]}, False),
    ("atomic list shorter observed", {"command": ["sh", "-c"]}, {"command": ["sh"]}, False),
    ("empty atomic list vs items", {"args": []}, {"args": ["x"]}, False),
    (
        "tolerations are atomic, pairwise subset",
        {"tolerations": [{"key": "gpu", "operator": "Exists"}]},
        {"tolerations": [{"key": "gpu", "operator": "Exists", "effect": ""}]},
        True,
    ),
    (
        "tolerations: an extra observed item is a change",
        {"tolerations": [{"key": "gpu", "operator": "Exists"}]},
        {
            "tolerations": [
                {"key": "gpu", "operator": "Exists"},
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists"},
            ]
        },
        False,
    ),
    (
        "RBAC subjects are atomic despite their names",
        {"subjects": [{"kind": "ServiceAccount", "name": "a", "namespace": "x"}]},
        {
            "subjects": [
                {"kind": "User", "name": "b"},
                {"kind": "ServiceAccount", "name": "a", "namespace": "x"},
            ]
        },
        False,
    ),
    ("list versus map", {"args": ["a"]}, {"args": {"0": "a"}}, False),
    # --- quantities
    ("1Gi == 1024Mi", resources(memory="1Gi"), resources(memory="1024Mi"), True),
    ("1Gi == 1073741824", resources(memory="1Gi"), resources(memory="1073741824"), True),
    ("500m == 0.5", resources(cpu="500m"), resources(cpu="0.5"), True),
    ("1000m == 1", resources(cpu="1000m"), resources(cpu="1"), True),
    ("1e3 == 1k", resources(cpu="1e3"), resources(cpu="1k"), True),
    ("12Gi != 12G", resources(memory="12Gi"), resources(memory="12G"), False),
    ("2 != 1", resources(cpu="2"), resources(cpu="1"), False),
    ("number desired, string observed", resources(cpu=1), resources(cpu="1"), True),
    (
        "PVC storage request",
        {"spec": {"resources": {"requests": {"storage": "10Gi"}}}},
        {"spec": {"resources": {"requests": {"storage": "10240Mi"}}}},
        True,
    ),
    ("PV capacity", {"capacity": {"storage": "1T"}}, {"capacity": {"storage": "1000G"}}, True),
    (
        "quantities only compare semantically in resource context",
        {"spec": {"size": "1Gi"}},
        {"spec": {"size": "1024Mi"}},
        False,
    ),
    (
        "unparseable strings under resources compare as strings",
        {"resources": {"claims": [{"name": "gpu"}]}},
        {"resources": {"claims": [{"name": "gpu"}]}},
        True,
    ),
    ("missing request", resources(cpu="1", memory="1Gi"), resources(cpu="1"), False),
]


@pytest.mark.parametrize(
    ("desired", "observed", "expected"),
    [pytest.param(d, o, e, id=name) for name, d, o, e in CASES],
)
def test_semantic_subset(desired: Any, observed: Any, expected: bool) -> None:
    assert semantic_subset(desired, observed) is expected
    assert (explain_difference(desired, observed) is None) is expected


def test_the_table_is_big_enough() -> None:
    assert len(CASES) >= 25
    assert {e for *_, e in CASES} == {True, False}


def test_needs_apply() -> None:
    desired = deployment([CONTAINER], replicas=3)
    observed = deployment([OBSERVED_CONTAINER], replicas=3, revisionHistoryLimit=10)
    observed["metadata"].update(uid="u", resourceVersion="7", generation=2)
    observed["status"] = {"readyReplicas": 3}
    assert not needs_apply(desired, observed)
    assert needs_apply(desired, None)
    assert needs_apply(deployment([CONTAINER], replicas=4), observed)
    assert needs_apply(deployment([{**CONTAINER, "image": "nginx:1.28"}], replicas=3), observed)


def test_needs_apply_does_not_mutate() -> None:
    desired = deployment([CONTAINER], replicas=3)
    observed = deployment([OBSERVED_CONTAINER], replicas=3)
    snapshot = copy.deepcopy((desired, observed))
    needs_apply(desired, observed)
    assert (desired, observed) == snapshot


def test_explain_difference_names_the_field() -> None:
    desired = deployment([{"name": "web", "image": "nginx:1.28"}])
    observed = deployment([OBSERVED_CONTAINER])
    assert explain_difference(desired, observed) == "spec.template.spec.containers[name=web].image"
    assert explain_difference({"a": [1]}, {"a": [1, 2]}) == "a"
    assert explain_difference({"a": [1, 3]}, {"a": [1, 2]}) == "a[1]"
    assert explain_difference({"ports": [{"containerPort": 1}]}, {"ports": []}) == (
        "ports[containerPort=1,protocol=TCP]"
    )
    assert explain_difference({"metadata": {"finalizers": ["x"]}}, {}) == "metadata"
    assert explain_difference({"metadata": {"finalizers": ["x"]}}, {"metadata": {}}) == (
        "metadata.finalizers"
    )
    assert (
        explain_difference({"metadata": {"finalizers": ["x"]}}, {"metadata": {"finalizers": ["y"]}})
        == "metadata.finalizers[0]"
    )
    assert explain_difference(1, 2) == "."
    assert explain_difference({"a": 1}, {"a": 1, "b": 2}) is None


def test_duplicate_keys_in_observed_any_twin_matches() -> None:
    observed = {"env": [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]}
    assert semantic_subset({"env": [{"name": "A", "value": "2"}]}, observed)
    assert semantic_subset({"env": [{"name": "A", "value": "1"}]}, observed)
    assert not semantic_subset({"env": [{"name": "A", "value": "3"}]}, observed)


def test_keyed_list_item_without_its_key_is_compared_atomically() -> None:
    assert semantic_subset({"containers": [{"image": "a"}]}, {"containers": [{"image": "a"}]})
    assert not semantic_subset(
        {"containers": [{"image": "a"}]}, {"containers": [{"name": "x", "image": "a"}, {}]}
    )


# --- quantities


@pytest.mark.parametrize(
    ("text", "amount"),
    [
        ("0", Fraction(0)),
        ("1", Fraction(1)),
        ("+1", Fraction(1)),
        ("-1", Fraction(-1)),
        ("1.5", Fraction(3, 2)),
        (".5", Fraction(1, 2)),
        ("1.", Fraction(1)),
        ("500m", Fraction(1, 2)),
        ("100n", Fraction(1, 10_000_000)),
        ("7u", Fraction(7, 1_000_000)),
        ("1k", Fraction(1000)),
        ("1M", Fraction(10**6)),
        ("1G", Fraction(10**9)),
        ("1T", Fraction(10**12)),
        ("1P", Fraction(10**15)),
        ("1E", Fraction(10**18)),
        ("1Ki", Fraction(1024)),
        ("1Mi", Fraction(2**20)),
        ("1.5Gi", Fraction(3 * 2**29)),
        ("1Ti", Fraction(2**40)),
        ("1Pi", Fraction(2**50)),
        ("1Ei", Fraction(2**60)),
        ("1e3", Fraction(1000)),
        ("1E3", Fraction(1000)),
        ("5e-3", Fraction(5, 1000)),
        ("2.5e+2", Fraction(250)),
        (2, Fraction(2)),
        (0.1, Fraction(1, 10)),
    ],
)
def test_parse_quantity(text: str | int | float, amount: Fraction) -> None:
    assert parse_quantity(text) == amount


@pytest.mark.parametrize(
    "text", ["", "Gi", "1 Gi", "1gi", "1KI", "1K", "1e", "1e1.5", "1.2.3", "one", ".", "1Gi1", True]
)
def test_parse_quantity_rejects(text: Any) -> None:
    with pytest.raises(ValueError, match="not a quantity"):
        parse_quantity(text)


@given(st.integers(min_value=0, max_value=10**12))
def test_binary_suffixes_agree_with_plain_numbers(n: int) -> None:
    assert semantic_subset(resources(memory=f"{n}Ki"), resources(memory=str(n * 1024)))
    assert semantic_subset(resources(memory=f"{n}Mi"), resources(memory=f"{n * 1024}Ki"))


@given(st.integers(min_value=0, max_value=10**9))
def test_milli_agrees_with_decimals(m: int) -> None:
    decimal = f"{m // 1000}.{m % 1000:03d}"
    assert semantic_subset(resources(cpu=f"{m}m"), resources(cpu=decimal))
    assert not semantic_subset(resources(cpu=f"{m}m"), resources(cpu=f"{m + 1}m"))


# --- hash_of


def test_hash_of_is_stable_and_order_independent() -> None:
    a = {"b": [1, {"y": 2, "x": 1}], "a": "é"}
    b = {"a": "é", "b": [1, {"x": 1, "y": 2}]}
    assert hash_of(a) == hash_of(b)
    assert len(hash_of(a)) == 64
    assert hash_of(a) != hash_of({**a, "c": None})
    assert hash_of([1, 2]) != hash_of([2, 1])
    # Pinned (sha256 of '{"a":[true,null],"b":1}'): a change would roll every pod template.
    assert hash_of({"b": 1, "a": [True, None]}) == (
        "51705a2c9eb3e7e410a58f696a770c3ac3885a0cf43eb7fc88f5e47c11d4d30d"
    )


def test_hash_of_rejects_non_json() -> None:
    with pytest.raises(TypeError):
        hash_of({"a": object()})
    with pytest.raises(ValueError, match="JSON"):
        hash_of({"a": float("nan")})


# --- properties

KEYS = st.sampled_from(
    [
        "apiVersion",
        "kind",
        "metadata",
        "labels",
        "annotations",
        "name",
        "uid",
        "spec",
        "containers",
        "env",
        "ports",
        "containerPort",
        "port",
        "protocol",
        "conditions",
        "type",
        "finalizers",
        "resources",
        "requests",
        "limits",
        "storage",
        "tolerations",
        "args",
        "volumeClaimTemplates",
        "value",
    ]
) | st.text(max_size=6)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
    | st.sampled_from(["1Gi", "1024Mi", "500m", "0.5", "TCP", "web", "8080"])
)
JSON = st.recursive(
    SCALARS,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(KEYS, children, max_size=5),
    max_leaves=30,
)
OBJECTS = st.dictionaries(KEYS, JSON, max_size=6)


def deep_merge(base: Any, extra: Any) -> Any:
    """``extra`` with ``base`` laid over it: maps merge, every other value of ``base`` wins."""
    if isinstance(base, dict) and isinstance(extra, dict):
        merged = dict(extra)
        for key, value in base.items():
            merged[key] = deep_merge(value, extra[key]) if key in extra else value
        return merged
    return base


@given(JSON)
def test_subset_is_reflexive(x: Any) -> None:
    assert semantic_subset(x, x)
    assert semantic_subset(x, copy.deepcopy(x))


@given(OBJECTS)
def test_an_object_never_needs_applying_onto_itself(x: dict[str, Any]) -> None:
    assert not needs_apply(x, copy.deepcopy(x))


@given(OBJECTS, OBJECTS)
def test_extra_observed_fields_are_fine(x: dict[str, Any], extra: dict[str, Any]) -> None:
    assert semantic_subset(x, deep_merge(x, extra))


@given(st.dictionaries(st.text(max_size=5), st.text(max_size=5), min_size=1), st.data())
def test_a_changed_label_is_detected(labels: dict[str, str], data: st.DataObject) -> None:
    key = data.draw(st.sampled_from(sorted(labels)))
    changed = {**labels, key: labels[key] + "-changed"}
    assert not semantic_subset({"metadata": {"labels": labels}}, {"metadata": {"labels": changed}})
    assert semantic_subset(
        {"metadata": {"labels": {key: labels[key]}}}, {"metadata": {"labels": labels}}
    )


SIMPLE = st.none() | st.booleans() | st.integers(-3, 3) | st.sampled_from(["", "1", "a", "3"])


@given(SIMPLE, SIMPLE)
def test_scalars_compare_by_json_value(a: Any, b: Any) -> None:
    same_json = type(a) is type(b) and a == b
    assert semantic_subset({"spec": {"f": a}}, {"spec": {"f": b}}) is same_json


@given(st.lists(st.text(min_size=1, max_size=4), unique=True, min_size=1, max_size=6), st.randoms())
def test_named_lists_ignore_order(names: list[str], rnd: Any) -> None:
    desired = [{"name": n, "image": n.upper()} for n in names]
    observed = [{**item, "imagePullPolicy": "Always"} for item in desired]
    rnd.shuffle(observed)
    assert semantic_subset({"containers": desired}, {"containers": observed})
    assert not semantic_subset(
        {"containers": desired}, {"containers": [o for o in observed if o["name"] != names[0]]}
    )


@pytest.mark.parametrize("zero", [False, 0, ""])
def test_a_desired_zero_value_is_met_by_the_field_the_server_omitted(zero: object) -> None:
    desired = {"spec": {"publishNotReadyAddresses": zero, "clusterIP": "None"}}
    assert not needs_apply(desired, {"spec": {"clusterIP": "None"}})
    assert needs_apply(desired, {"spec": {"clusterIP": "None", "publishNotReadyAddresses": True}})


def test_a_desired_non_zero_value_is_not_met_by_an_absent_field() -> None:
    assert needs_apply({"spec": {"replicas": 1}}, {"spec": {}})
    assert needs_apply({"spec": {"ratio": 0.0}}, {"spec": {}})
