"""How the client reads and asks, with no server: a watch's body split into events whatever
chunks it arrives in (the reader is fed by hand, as the connection would feed it), and the
compression it asks for."""

from __future__ import annotations

import asyncio
from unittest import mock

import aiohttp
import pytest

from crewlet_operator import Client
from crewlet_operator.kube.client import _lines
from crewlet_operator.kube.config import RestConfig


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
        headers = await client._headers("application/json")
    finally:
        await client.close()
    # Without the header aiohttp offers gzip and deflate, as client-go offers gzip.
    assert headers.get("Accept-Encoding") == (None if compression else "identity")
