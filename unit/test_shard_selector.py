"""Server-side shards as values (:class:`ShardSelector`): the API server's hash, its syntax, and
the objects of a shard told apart where the API server sends them all. No server: the e2e module
``e2e/test_shard_selectors.py`` runs them against one with the gate on and off."""

from __future__ import annotations

import itertools
import random
import uuid

import pytest

from crewlet_operator.kube.params import (
    HASHES,
    ListParams,
    Scope,
    ShardSelector,
    WatchParams,
    fnv1a_64,
)


@pytest.mark.parametrize(
    ("value", "hashed"),
    [
        # The FNV specification's own test vectors (64-bit FNV-1a).
        ("", 0xCBF29CE484222325),
        ("a", 0xAF63DC4C8601EC8C),
        ("foobar", 0x85944171F73967E8),
    ],
)
def test_the_hash_is_64_bit_fnv_1a_as_the_api_server_hashes(value: str, hashed: int) -> None:
    assert fnv1a_64(value) == hashed


def test_the_parts_of_a_count_cover_the_hash_space_once_and_in_order() -> None:
    parts = [ShardSelector.part(i, 3).ranges[0] for i in range(3)]
    assert parts[0][0] == 0 and parts[-1][1] == HASHES
    assert all(a[1] == b[0] for a, b in itertools.pairwise(parts)), "contiguous"
    # UIDs are random: equal parts of the hash space hold about as many. (Names that differ in
    # their last characters alone do not spread so: FNV-1a's top bits hardly change with the
    # last bytes. bench/NOTES.md, "Server-side shards".)
    draws = random.Random(7)
    uids = [str(uuid.UUID(int=draws.getrandbits(128))) for _ in range(300)]
    shards = [ShardSelector.part(i, 3, field="object.metadata.uid") for i in range(3)]
    owners = [
        [i for i, shard in enumerate(shards) if shard.matches({"metadata": {"uid": uid}})]
        for uid in uids
    ]
    assert all(len(owner) == 1 for owner in owners), "each object in exactly one part"
    counts = [sum(1 for owner in owners if owner == [i]) for i in range(3)]
    assert min(counts) > 60, f"300 objects spread over 3 parts: {counts}"


def test_a_selector_in_the_api_servers_syntax_on_lists_and_watches() -> None:
    shard = ShardSelector(((0, 1 << 63), (3 << 62, HASHES)), field="object.metadata.uid")
    expected = (
        "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000') || "
        "shardRange(object.metadata.uid, '0xc000000000000000', '0x10000000000000000')"
    )
    assert shard.query() == expected
    scope = Scope("ns", shard=shard)
    assert ListParams(scope).query()["shardSelector"] == expected
    assert WatchParams(scope).query()["shardSelector"] == expected
    assert ListParams(Scope("ns")).query()["shardSelector"] is None


def test_an_object_is_of_a_shard_by_the_hash_of_its_namespace_or_uid() -> None:
    team = {"metadata": {"namespace": "team-a", "uid": "u-1"}}
    by_namespace = fnv1a_64("team-a")
    assert ShardSelector(((by_namespace, by_namespace + 1),)).matches(team)
    assert not ShardSelector(((0, by_namespace),)).matches(team), "the end is left out"
    by_uid = fnv1a_64("u-1")
    assert ShardSelector(((by_uid, HASHES),), field="object.metadata.uid").matches(team)


@pytest.mark.parametrize(
    "ranges", [(), ((5, 5),), ((-1, 4),), ((0, HASHES + 1),)], ids=["none", "empty", "neg", "big"]
)
def test_a_range_outside_the_hash_space_is_refused(ranges: tuple[tuple[int, int], ...]) -> None:
    with pytest.raises(ValueError, match="range"):
        ShardSelector(ranges)


def test_a_part_must_be_one_of_its_count() -> None:
    with pytest.raises(ValueError, match="part 3 of 3"):
        ShardSelector.part(3, 3)
