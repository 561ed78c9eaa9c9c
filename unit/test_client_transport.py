"""How the client reads and asks, with no server: a watch's body split into events whatever
chunks it arrives in (the reader is fed by hand, as the connection would feed it), a list's
pages split into their items, and the compression it asks for."""

from __future__ import annotations

import asyncio
from unittest import mock

import aiohttp
import orjson
import pytest

from crewlet_operator import Client, Scope
from crewlet_operator.kube import ListParams, WatchParams
from crewlet_operator.kube.client import ObjectList, RawObjectList
from crewlet_operator.kube.config import RestConfig
from crewlet_operator.kube.resources import SECRET
from crewlet_operator.kube.retry import RetryPolicy
from crewlet_operator.kube.transport import DEFAULT_TIMEOUT, _lines


async def lines_of(chunks: list[bytes]) -> list[bytes]:
    reader = aiohttp.StreamReader(mock.Mock(), limit=2**16, loop=asyncio.get_running_loop())
    for chunk in chunks:
        reader.feed_data(chunk)
    reader.feed_eof()
    return [line async for line in _lines(reader)]


BODY = b'{"type":"ADDED","object":{"a":1}}\n{"type":"MODIFIED","object":{"b":2}}\n\n{"c":3}\n'
EXPECTED = [
    b'{"type":"ADDED","object":{"a":1}}',
    b'{"type":"MODIFIED","object":{"b":2}}',
    b'{"c":3}',
]


@pytest.mark.parametrize("size", [1, 2, 5, 33, 34, 35, len(BODY)])
async def test_every_split_of_the_body_gives_the_same_lines(size: int) -> None:
    chunks = [BODY[i : i + size] for i in range(0, len(BODY), size)]
    assert await lines_of(chunks) == EXPECTED


async def test_a_last_line_without_its_newline_was_cut_short_and_is_not_given() -> None:
    assert await lines_of([b'{"a":1}\n{"b"', b":2}"]) == [b'{"a":1}']


async def test_blank_lines_and_an_empty_body_give_nothing() -> None:
    assert await lines_of([b"\n \n", b"\n"]) == []
    assert await lines_of([]) == []


@pytest.mark.parametrize("compression", [True, False])
async def test_a_client_without_compression_asks_for_identity(compression: bool) -> None:
    client = Client(RestConfig(host="https://127.0.0.1:1", token="t"), compression=compression)
    try:
        headers = await client.transport.headers("application/json")
    finally:
        await client.close()
    # Without the header aiohttp offers gzip and deflate, as client-go offers gzip.
    assert headers.get("Accept-Encoding") == (None if compression else "identity")


async def test_a_client_of_its_own_connections_asks_as_the_same_user_apart() -> None:
    """What the Lease is written through: the same server, credentials, headers and field
    manager, over a pool of its own with its own retries; closing it leaves the other open."""
    config = RestConfig(host="https://127.0.0.1:1", token="t", impersonate_user="someone")
    client = Client(config, field_manager="widgets", compression=False)
    leases = client.with_own_connections(retries=RetryPolicy(max_retries=0), timeout=3)
    try:
        assert leases.transport is not client.transport
        assert (leases.host, leases.field_manager) == (client.host, "widgets")
        assert leases.transport.retries == RetryPolicy(max_retries=0)
        assert (leases.transport.timeout, client.transport.timeout) == (3, DEFAULT_TIMEOUT)
        own = await leases.transport.headers("application/json")
        theirs = await client.transport.headers("application/json")
        assert own == theirs, "the same user, token, impersonation and encoding"
        assert leases.transport._session is not client.transport._session
        await leases.close()
        assert not client.transport._session.closed
    finally:
        await client.close()
        await leases.close()


def list_page(items: list[bytes], resource_version: str, token: str | None) -> bytes:
    """A page as the API server sends it: ``kind`` and ``apiVersion`` named once."""
    meta = b'{"resourceVersion":"' + resource_version.encode() + b'"'
    meta += b',"continue":"' + token.encode() + b'"}' if token else b"}"
    head = b'{"kind":"SecretList","apiVersion":"v1","metadata":' + meta
    return head + b',"items":[' + b",".join(items) + b"]}"


FIRST = b'{"metadata":{"name":"a","annotations":{"x":"],{\\"y\\":[}"}},"data":{"k":"dg=="}}'
SECOND = b'{"metadata":{"name":"b"},"type":"Opaque"}'


async def test_raw_pages_give_each_item_as_sent_and_follow_the_continue_token() -> None:
    pages = {
        None: list_page([FIRST], "5", "next"),
        "next": list_page([SECOND], "5", None),
    }
    asked: list[dict[str, object]] = []

    async def send(method: str, path: str, **kwargs: object) -> bytes:
        query = kwargs["query"]
        assert isinstance(query, dict)
        asked.append(query)
        return pages[query["continue"]]

    client = Client(RestConfig(host="https://127.0.0.1:1", token="t"))
    try:
        with mock.patch.object(client.transport, "send", send):
            paged = ListParams(Scope("ns"), page_size=1)
            raw = [page async for page in client.list_raw_pages(SECRET, paged)]
            whole = [page async for page in client.list_pages(SECRET, paged)]
    finally:
        await client.close()
    assert [(p.items, p.resource_version) for p in raw] == [([FIRST], "5"), ([SECOND], "5")]
    assert [q["limit"] for q in asked] == [1, 1, 1, 1]
    assert [p.items for p in whole] == [
        [{**orjson.loads(FIRST), "apiVersion": "v1", "kind": "Secret"}],
        [{**orjson.loads(SECOND), "apiVersion": "v1", "kind": "Secret"}],
    ]


async def test_a_page_that_is_not_a_list_is_an_error_that_names_the_path() -> None:
    async def send(*_: object, **__: object) -> bytes:
        return b'{"items":{"not":"a list"}}'

    client = Client(RestConfig(host="https://127.0.0.1:1", token="t"))
    try:
        with (
            mock.patch.object(client.transport, "send", send),
            pytest.raises(ValueError, match="/api/v1/namespaces/ns/secrets: not a list"),
        ):
            [page async for page in client.list_raw_pages(SECRET, Scope("ns"))]
    finally:
        await client.close()


def test_a_namespace_alone_is_a_scope() -> None:
    assert Scope.of("ns") == Scope(namespace="ns")
    assert Scope.of(None) == Scope()
    selected = Scope("ns", label_selector="app=web")
    assert Scope.of(selected) is selected


def test_a_scope_alone_is_a_list_or_a_watch_with_the_defaults() -> None:
    assert ListParams.of("ns") == ListParams(Scope("ns"))
    assert WatchParams.of(None) == WatchParams()
    watching = WatchParams(Scope("ns", label_selector="app=web"), resource_version="7")
    assert WatchParams.of(watching) is watching


def test_a_list_asks_for_its_resource_version_on_its_first_page_alone() -> None:
    listing = ListParams(Scope("ns", field_selector="metadata.name=a"), resource_version="0")
    assert listing.query() == {
        "labelSelector": None,
        "fieldSelector": "metadata.name=a",
        "shardSelector": None,
        "limit": 500,
        "continue": None,
        "resourceVersion": "0",
        "resourceVersionMatch": None,
    }
    assert listing.query("next")["resourceVersion"] is None
    assert listing.query("next")["continue"] == "next"


def test_an_exact_list_asks_for_that_version_on_its_first_page_alone() -> None:
    """What Informer.widen lists: the added scope at the store's own version, a snapshot."""
    listing = ListParams(Scope("ns"), resource_version="41", exact=True)
    assert listing.query()["resourceVersion"] == "41"
    assert listing.query()["resourceVersionMatch"] == "Exact"
    assert listing.query("next")["resourceVersionMatch"] is None, "the token pins the version"


def test_a_streaming_watch_asks_for_the_bookmark_that_ends_its_list() -> None:
    query = WatchParams(allow_bookmarks=False, send_initial_events=True).query()
    assert query["allowWatchBookmarks"] is True
    assert query["sendInitialEvents"] is True
    assert query["resourceVersionMatch"] == "NotOlderThan"
    assert WatchParams(allow_bookmarks=False).query()["allowWatchBookmarks"] is None


def test_a_list_iterates_over_its_items_and_has_their_number_as_its_length() -> None:
    pods = [{"metadata": {"name": "a"}}, {"metadata": {"name": "b"}}]
    listed = ObjectList(pods, "7")
    assert [p["metadata"]["name"] for p in listed] == ["a", "b"]
    assert len(listed) == 2
    assert list(RawObjectList([b"{}"], "7")) == [b"{}"]
    assert len(RawObjectList([b"{}"], "7")) == 1
    # Empty, it is falsy as a list is: ``if not listed`` means nothing was found.
    assert not ObjectList([], "7")
