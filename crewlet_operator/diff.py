"""Desired-versus-observed comparison, so that a reconcile that changes nothing writes nothing.

A controller sends a *partial* desired object with server-side apply: only the fields it owns.
The API server then fills in defaults, normalises values and keeps fields other managers own.
:func:`needs_apply` answers the question the controller asks before it writes: "would applying
``desired`` change ``observed``?"::

    >>> desired = {"spec": {"replicas": 3, "template": {"spec": {"containers": [
    ...     {"name": "web", "image": "nginx:1.27", "resources": {"limits": {"memory": "1Gi"}}}]}}}}
    >>> observed = {"spec": {"replicas": 3, "revisionHistoryLimit": 10, "template": {"spec": {
    ...     "containers": [{"name": "web", "image": "nginx:1.27", "imagePullPolicy": "IfNotPresent",
    ...                     "resources": {"limits": {"memory": "1024Mi"}}}]}}}}
    >>> needs_apply(desired, observed)
    False

The rules of :func:`semantic_subset`:

- **Maps**: every key of ``desired`` must be in ``observed`` with a matching value, recursively.
  Extra keys in ``observed`` (server defaults, other managers' fields, extra labels and
  annotations) are fine. A ``null`` in ``desired`` matches an absent or ``null`` field.
- **Scalars** compare by JSON value: ``8080`` and ``"8080"`` differ (an IntOrString port keeps
  its type on the server), ``true`` and ``1`` differ, ``1`` and ``1.0`` are equal.
- **Quantities**: below a key named ``resources``, ``requests``, ``limits``, ``capacity``,
  ``allocatable``, ``storage``, ``hard``, ``used``, ``overhead`` or ``sizeLimit``, two values
  that both parse as Kubernetes quantities compare by amount (see :func:`parse_quantity`):
  ``"1Gi" == "1024Mi" == "1073741824"``, ``"500m" == "0.5"``, but ``"12Gi" != "12G"``.
- **Lists** are matched by the name of the field that holds them:

  =====================================================  =====================================
  field                                                  rule
  =====================================================  =====================================
  ``containers``, ``initContainers``,                    merge by ``name``
  ``ephemeralContainers``, ``volumes``, ``volumeMounts``,
  ``env``, ``imagePullSecrets``, ``resourceClaims``
  ``volumeClaimTemplates``                               merge by ``metadata.name``
  ``ports``                                              merge by ``containerPort`` + ``protocol``
                                                         (container ports) or by ``port`` +
                                                         ``protocol`` (Service ports); a missing
                                                         ``protocol`` is the default ``TCP``
  ``conditions``                                         merge by ``type``
  ``hostAliases``                                        merge by ``ip``
  ``topologySpreadConstraints``                          merge by ``topologyKey`` +
                                                         ``whenUnsatisfiable``
  ``volumeDevices``                                      merge by ``devicePath``
  ``ownerReferences``                                    merge by ``uid``
  ``finalizers``                                         set: each desired string is present
  ``tolerations``, ``subjects``, ``versions``,           atomic
  ``options``, ``args``, ``command``
  any other list of maps that all have a string          merge by ``name``
  ``name`` (``webhooks``, ``listeners``, ...)
  any other list                                         atomic
  =====================================================  =====================================

  *Merge by key*: each desired item must be a subset of an observed item with the same key;
  observed items with other keys are fine, order does not matter. *Atomic*: the lists have the
  same length and each desired item is a subset of the observed item at the same position.

Known limits: the comparison cannot see a field (or a merged list item) the controller stopped
setting, since the observed object keeps it until the next apply; :mod:`.fieldset` reads the
manager's own ``managedFields`` entry for that, and :meth:`Client.apply_if_changed` uses both.
A zero value the API server omits (``hostNetwork: false`` on a non-pointer field) never shows
up in ``observed``, so a desired ``false``, ``0`` or ``""`` counts as met by an absent field.
Pass whole objects: ``apiVersion`` and ``kind`` at the top level, and the server-owned
``metadata`` fields (``resourceVersion``, ``uid``, ``generation``, ``creationTimestamp``,
``managedFields``, ``selfLink``) are not compared. Desired ``status`` is compared like any other
field, so keep it out of objects sent to the main resource.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping
from fractions import Fraction
from typing import Any

import orjson

__all__ = [
    "explain_difference",
    "hash_of",
    "needs_apply",
    "parse_quantity",
    "semantic_subset",
]

_SERVER_OWNED_METADATA = frozenset(
    {"resourceVersion", "uid", "generation", "creationTimestamp", "managedFields", "selfLink"}
)
_IDENTITY = frozenset({"apiVersion", "kind"})
_QUANTITY_KEYS = frozenset(
    {
        "resources",
        "requests",
        "limits",
        "capacity",
        "allocatable",
        "storage",
        "hard",
        "used",
        "overhead",
        "sizeLimit",
    }
)

_QUANTITY_RE = re.compile(
    r"^(?P<number>[+-]?(?:\d+(?:\.\d*)?|\.\d+))"
    r"(?:(?P<binary>Ki|Mi|Gi|Ti|Pi|Ei)|[eE](?P<exponent>[+-]?\d+)|(?P<decimal>[numkMGTPE])?)$"
)
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}

# A merge key: (field, value) pairs, so that it also reads well in explain_difference().
_Key = tuple[tuple[str, Any], ...]
_KeyFn = Callable[[Mapping[str, Any]], _Key | None]


def _by(*fields: str) -> _KeyFn:
    def key(item: Mapping[str, Any]) -> _Key | None:
        if not all(field in item for field in fields):
            return None
        return tuple((field, item[field]) for field in fields)

    return key


def _by_metadata_name(item: Mapping[str, Any]) -> _Key | None:
    meta = item.get("metadata")
    if isinstance(meta, dict) and "name" in meta:
        return (("metadata.name", meta["name"]),)
    return None


def _by_port(item: Mapping[str, Any]) -> _Key | None:
    # The API server defaults a missing protocol to TCP, for container and Service ports alike.
    protocol = item.get("protocol", "TCP")
    for field in ("containerPort", "port"):
        if field in item:
            return (field, item[field]), ("protocol", protocol)
    return None


_BY_NAME = _by("name")
_ATOMIC = "atomic"
_SET = "set"
_ListRule = _KeyFn | str

_LIST_RULES: dict[str, _ListRule] = {
    **dict.fromkeys(
        (
            "containers",
            "initContainers",
            "ephemeralContainers",
            "volumes",
            "volumeMounts",
            "env",
            "imagePullSecrets",
            "resourceClaims",
        ),
        _BY_NAME,
    ),
    "volumeClaimTemplates": _by_metadata_name,
    "ports": _by_port,
    "conditions": _by("type"),
    "hostAliases": _by("ip"),
    "topologySpreadConstraints": _by("topologyKey", "whenUnsatisfiable"),
    "volumeDevices": _by("devicePath"),
    "ownerReferences": _by("uid"),
    "finalizers": _SET,
    # Lists whose items may carry a "name" but that Kubernetes replaces as a whole.
    **dict.fromkeys(("tolerations", "subjects", "versions", "options", "args", "command"), _ATOMIC),
}


def parse_quantity(value: str | int | float) -> Fraction:
    """Return the exact amount a Kubernetes quantity stands for.

    Accepts the ``resource.Quantity`` syntax: a signed decimal number followed by a binary
    suffix (``Ki``, ``Mi``, ``Gi``, ``Ti``, ``Pi``, ``Ei``), a decimal suffix (``n``, ``u``,
    ``m``, ``k``, ``M``, ``G``, ``T``, ``P``, ``E``) or a decimal exponent (``1e3``, ``5E-3``);
    and JSON numbers, which a quantity field also accepts::

        >>> parse_quantity("1Gi") == parse_quantity("1073741824")
        True
        >>> parse_quantity("500m")
        Fraction(1, 2)

    Raises:
        ValueError: ``value`` is not a quantity.
    """
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a quantity")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        # repr() is the shortest decimal that round-trips, i.e. what the JSON said.
        return Fraction(repr(value))
    match = _QUANTITY_RE.match(value)
    if match is None:
        raise ValueError(f"{value!r} is not a quantity")
    number = Fraction(match["number"])
    if match["binary"]:
        return number * Fraction(2) ** _BINARY[match["binary"]]
    if match["exponent"] is not None:
        return number * Fraction(10) ** int(match["exponent"])
    return number * Fraction(10) ** _DECIMAL[match["decimal"] or ""]


def semantic_subset(desired: Any, observed: Any) -> bool:
    """Whether every field of ``desired`` is present and equal in ``observed``.

    "Equal" follows the API server's normalisation; the rules are in this module's docstring.
    Both arguments are JSON values (usually whole objects).
    """
    return _mismatch(desired, observed, (), "") is None


def explain_difference(desired: Any, observed: Any) -> str | None:
    """Return the path of the first field that makes ``desired`` no subset of ``observed``.

    ``None`` when :func:`semantic_subset` holds. For logs: ``"spec.template.spec.containers
    [name=web].image"`` says why a reconcile decided to write.
    """
    return _mismatch(desired, observed, (), "")


def needs_apply(desired: Mapping[str, Any], observed: Mapping[str, Any] | None) -> bool:
    """Whether server-side applying ``desired`` would change ``observed``.

    ``observed`` is ``None`` when the object does not exist yet, which always needs an apply.
    """
    return observed is None or not semantic_subset(desired, observed)


def hash_of(obj: Any) -> str:
    """Return a stable SHA-256 (hex) of ``obj`` serialised as canonical JSON (sorted keys).

    Key order and dict construction order do not change the hash, so it can be stored in an
    annotation (of a pod template, say) to roll pods when a referenced ConfigMap changes.

    Raises:
        TypeError: ``obj`` holds something JSON cannot represent.
        ValueError: ``obj`` holds a NaN or an infinity.
    """
    text = json.dumps(
        obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    return hashlib.sha256(text.encode()).hexdigest()


def _mismatch(desired: Any, observed: Any, keys: tuple[str, ...], where: str) -> str | None:
    """Return ``where`` (or a deeper path) if ``desired`` is no subset of ``observed``."""
    if _identical(desired, observed):
        return None
    # dict, not Mapping: JSON decodes to dicts, and an ABC check is several times slower in a
    # walk that runs for every field of every child of every reconcile.
    if isinstance(desired, dict):
        if not isinstance(observed, dict):
            return where or "."
        for key, value in desired.items():
            if _ignored(keys, key):
                continue
            at = f"{where}.{key}" if where else key
            if key not in observed:
                # The API server omits zero values of built-in kinds (``omitempty``), so a
                # desired false, 0 or "" is already met by an absent field.
                if value is None or (value in (False, 0, "") and not isinstance(value, float)):
                    continue
                return at
            found = _mismatch(value, observed[key], (*keys, key), at)
            if found is not None:
                return found
        return None
    if isinstance(desired, list):
        if not isinstance(observed, list):
            return where or "."
        return _list_mismatch(desired, observed, keys, where)
    return None if _scalar_equal(desired, observed, keys) else (where or ".")


def _identical(desired: Any, observed: Any) -> bool:
    """The same JSON container: a subset of itself at C speed, which spares the walk below for
    most of an object a controller applied (its cache holds what it applied, see
    :func:`~crewlet_operator.fieldset.keep_owned_fields_of`). Python's ``==`` says ``True == 1``;
    the JSON texts, compared only when ``==`` holds, do not."""
    if not isinstance(desired, dict | list) or desired != observed:
        return False
    try:
        sort = orjson.OPT_SORT_KEYS
        return orjson.dumps(desired, option=sort) == orjson.dumps(observed, option=sort)
    except TypeError:  # an integer beyond 64 bits: the walk below compares it
        return False


def _ignored(keys: tuple[str, ...], key: str) -> bool:
    if not keys:
        return key in _IDENTITY
    return keys == ("metadata",) and key in _SERVER_OWNED_METADATA


def _list_mismatch(
    desired: list[Any], observed: list[Any], keys: tuple[str, ...], where: str
) -> str | None:
    rule = _list_rule(keys[-1] if keys else None, desired, observed)
    if rule == _SET:
        for index, item in enumerate(desired):
            if not any(_scalar_equal(item, seen, keys) for seen in observed):
                return f"{where}[{index}]"
        return None
    if isinstance(rule, str):  # atomic
        if len(desired) != len(observed):
            return where or "."
        for index, (item, seen) in enumerate(zip(desired, observed, strict=True)):
            found = _mismatch(item, seen, keys, f"{where}[{index}]")
            if found is not None:
                return found
        return None
    for item in desired:
        key = rule(item)
        at = f"{where}[{','.join(f'{field}={value}' for field, value in key or ())}]"
        candidates = [o for o in observed if isinstance(o, dict) and rule(o) == key]
        if not candidates:
            return at
        # Duplicate keys (old objects may repeat an env name): any observed twin will do.
        results = [_mismatch(item, seen, keys, at) for seen in candidates]
        if None not in results:
            return results[0]
    return None


def _list_rule(field: str | None, desired: list[Any], observed: list[Any]) -> _ListRule:
    rule = _LIST_RULES.get(field or "")
    if rule is None:
        named = all(
            isinstance(item, dict) and isinstance(item.get("name"), str)
            for item in desired + observed
        )
        rule = _BY_NAME if named else _ATOMIC
    # A desired item without its merge key cannot be merged; the server would reject it, and
    # comparing atomically keeps semantic_subset(x, x) true for such lists.
    if callable(rule) and not all(
        isinstance(item, dict) and rule(item) is not None for item in desired
    ):
        return _ATOMIC
    return rule


def _scalar_equal(desired: Any, observed: Any, keys: tuple[str, ...]) -> bool:
    if desired is None or observed is None:
        return desired is observed
    # bool is an int in Python, but true and 1 are different JSON values.
    if isinstance(desired, bool) or isinstance(observed, bool):
        return type(desired) is type(observed) and desired == observed
    if desired == observed:
        return True
    if any(key in _QUANTITY_KEYS for key in keys):
        try:
            return parse_quantity(desired) == parse_quantity(observed)
        except (TypeError, ValueError):
            return False
    return False
