"""Label selectors (``metav1.LabelSelector``): checked as the API server checks them, and matched
against an object's labels as ``metav1.LabelSelectorAsSelector`` matches them.

A selector is the dict a manifest holds::

    >>> selector = {"matchLabels": {"app": "web"},
    ...             "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["db"]}]}
    >>> label_selector_matches(selector, {"app": "web", "tier": "front"})
    True
    >>> label_selector_matches(selector, {"app": "web", "tier": "db"})
    False

The cache's label filter (``cache.list(..., labels=selector)``) and
:class:`~crewlet_operator.predicate.LabelSelectorPredicate` both match with this module.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from crewlet_operator.objects import MAX_LABEL_LENGTH, MAX_NAME_LENGTH

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["label_selector_matches", "matches", "validate_label_selector"]

_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})
_LABEL_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def validate_label_selector(selector: Mapping[str, Any]) -> None:
    """Check a ``metav1.LabelSelector`` as the API server does.

    Raises:
        ValueError: an operator other than ``In``, ``NotIn``, ``Exists`` and ``DoesNotExist``;
            ``In``/``NotIn`` without values; ``Exists``/``DoesNotExist`` with values; a
            requirement without a key; a non-string label in ``matchLabels``; or a key or
            value that no label can have.
    """
    for key, value in (selector.get("matchLabels") or {}).items():
        if not isinstance(value, str):
            raise ValueError(f"matchLabels[{key!r}] must be a string, not {value!r}")
        _check_label(key, value)
    for expression in selector.get("matchExpressions") or ():
        key, operator = expression.get("key"), expression.get("operator")
        values = expression.get("values") or []
        if not key:
            raise ValueError(f"label selector requirement without a key: {expression!r}")
        for value in values:
            _check_label(key, value)
        _check_label(key, "")
        if operator not in _OPERATORS:
            raise ValueError(
                f"label selector operator {operator!r} for key {key!r} is not one of "
                "In, NotIn, Exists, DoesNotExist"
            )
        if operator in ("In", "NotIn") and not values:
            raise ValueError(f"operator {operator} for key {key!r} needs at least one value")
        if operator in ("Exists", "DoesNotExist") and values:
            raise ValueError(f"operator {operator} for key {key!r} takes no values")


def _check_label(key: str, value: str) -> None:
    """A label key is ``[prefix/]name`` (the prefix a DNS subdomain, the name a label name); a
    value is empty or a label name (apimachinery's IsQualifiedName, IsValidLabelValue)."""
    prefix, _, key_name = key.rpartition("/")
    if (
        len(key_name) > MAX_LABEL_LENGTH
        or not _LABEL_NAME.fullmatch(key_name)
        or (prefix and (len(prefix) > MAX_NAME_LENGTH or not _DNS_SUBDOMAIN.fullmatch(prefix)))
        or ("/" in key and not prefix)
    ):
        raise ValueError(
            f"{key!r} is not a label key: [prefix/]name, the name at most {MAX_LABEL_LENGTH} "
            "letters, digits, '-', '_' or '.' starting and ending with a letter or digit, the "
            "prefix a DNS subdomain"
        )
    if value and (len(value) > MAX_LABEL_LENGTH or not _LABEL_NAME.fullmatch(value)):
        raise ValueError(
            f"{value!r} (for {key!r}) is not a label value: at most {MAX_LABEL_LENGTH} letters, "
            "digits, '-', '_' or '.', starting and ending with a letter or digit"
        )


def label_selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """Whether ``labels`` satisfy the ``metav1.LabelSelector`` ``selector``.

    All of ``matchLabels`` and ``matchExpressions`` must hold. As in
    ``metav1.LabelSelectorAsSelector``, an empty selector matches everything and a ``None``
    selector matches nothing. ``NotIn`` holds for a missing key.

    Raises:
        ValueError: the selector is invalid (see :func:`validate_label_selector`).
    """
    if selector is None:
        return False
    validate_label_selector(selector)
    return matches(selector, labels)


def matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """:func:`label_selector_matches` for a selector already validated: what a caller that
    matches one selector against many objects runs after :func:`validate_label_selector`."""
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or ():
        key, operator = expression["key"], expression["operator"]
        values = expression.get("values") or []
        present = key in labels
        if operator == "In":
            ok = present and labels[key] in values
        elif operator == "NotIn":
            ok = not present or labels[key] not in values
        elif operator == "Exists":
            ok = present
        else:  # DoesNotExist
            ok = not present
        if not ok:
            return False
    return True
