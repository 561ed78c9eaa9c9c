"""Label selectors in their own module: limits, the unvalidated matcher, and the old names."""

from __future__ import annotations

from typing import Any

import pytest

from crewlet_operator import label_selector, predicate
from crewlet_operator.label_selector import label_selector_matches, matches, validate_label_selector
from crewlet_operator.objects import MAX_LABEL_LENGTH, MAX_NAME_LENGTH


def dns_subdomain(length: int) -> str:
    """A valid DNS subdomain of ``length`` characters: labels of up to 63, joined by dots."""
    labels, rest = [], length
    while rest > 0:
        labels.append("a" * min(MAX_LABEL_LENGTH, rest))
        rest -= len(labels[-1]) + 1
    return ".".join(labels)


def test_a_key_prefix_may_be_as_long_as_an_object_name_and_no_longer() -> None:
    longest = dns_subdomain(MAX_NAME_LENGTH)
    assert len(longest) == MAX_NAME_LENGTH
    validate_label_selector({"matchLabels": {f"{longest}/name": "v"}})
    with pytest.raises(ValueError, match="not a label key"):
        validate_label_selector({"matchLabels": {f"{longest}a/name": "v"}})


def test_names_and_values_may_be_as_long_as_a_dns_label_and_no_longer() -> None:
    longest = "a" * MAX_LABEL_LENGTH
    validate_label_selector({"matchLabels": {longest: longest}})
    for selector in ({longest + "a": "v"}, {"k": longest + "a"}):
        with pytest.raises(ValueError, match="at most 63"):
            validate_label_selector({"matchLabels": selector})


def test_matches_takes_a_validated_selector_as_it_is() -> None:
    """The fast path a predicate runs per event: it trusts the selector it was given."""
    unchecked: dict[str, Any] = {"matchLabels": {"bad key!": "x"}}
    assert matches(unchecked, {"bad key!": "x"})
    with pytest.raises(ValueError, match="not a label key"):
        label_selector_matches(unchecked, {"bad key!": "x"})


def test_the_selector_functions_are_still_importable_from_predicate() -> None:
    assert predicate.label_selector_matches is label_selector.label_selector_matches
    assert predicate.validate_label_selector is label_selector.validate_label_selector
