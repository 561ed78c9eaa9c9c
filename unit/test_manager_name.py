"""A manager's name: required, and the field manager and the Lease of everything it writes, so
that two controllers never share either by accident (no API server: nothing is started)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from crewlet_operator import (
    CONFIG_MAP,
    Client,
    Manager,
    ManagerOptions,
    RestConfig,
    Sharding,
)
from crewlet_operator.testing import manager_options_for_tests


@pytest_asyncio.fixture
async def client() -> AsyncIterator[Client]:
    """A client for a server that is never reached, without a field manager of its own."""
    made = Client(RestConfig(host="https://127.0.0.1:1", token="t"))
    yield made
    await made.close()


def options(name: str, **overrides: object) -> ManagerOptions:
    settings: dict[str, object] = {
        "health_probe_bind_address": "0",
        "metrics_bind_address": "0",
        "metrics_secure": False,
        "leader_election_namespace": "ops",
        **overrides,
    }
    return ManagerOptions(name=name, **settings)  # type: ignore[arg-type]


def test_options_without_a_name_are_refused() -> None:
    with pytest.raises(TypeError, match="required keyword-only argument: 'name'"):
        ManagerOptions()  # type: ignore[call-arg]


@pytest.mark.parametrize(
    "name", ["", "My-Controller", "-leading", "trailing-", "dots.in.it", "under_score", "x" * 64]
)
def test_a_name_that_cannot_name_a_lease_is_refused_saying_why(name: str) -> None:
    with pytest.raises(ValueError, match=r"must be a DNS-1123 label .* such as 'my-controller'"):
        ManagerOptions(name=name)


def test_the_lease_is_named_after_the_manager_unless_told() -> None:
    assert ManagerOptions(name="widgets").lease_name == "widgets-leader"
    told = ManagerOptions(name="widgets", leader_election_id="legacy-lease")
    assert told.lease_name == "legacy-lease"


async def test_two_managers_on_one_client_share_neither_lease_nor_field_manager(
    client: Client,
) -> None:
    widgets = Manager(client, options("widgets"))
    tenants = Manager(client, options("tenants"))
    for manager, name in ((widgets, "widgets"), (tenants, "tenants")):
        assert manager.field_manager == name
        assert manager.elector is not None
        assert manager.elector.config.name == f"{name}-leader"
        # Everything the manager builds writes and trims as its name.
        for built in (manager.client, manager.cache.client, manager.elector.client):
            assert built.field_manager == name
    assert client.field_manager is None, "the client given is left as it was"


async def test_the_manager_writes_as_its_name_whatever_the_client_s_own(client: Client) -> None:
    mine = client.with_field_manager("a-test-user")
    manager = Manager(mine, options("widgets"))
    assert manager.client.field_manager == "widgets"
    assert mine.field_manager == "a-test-user"


async def test_a_view_under_another_field_manager_shares_the_connections(client: Client) -> None:
    view = client.with_field_manager("widgets")
    assert view is not client
    assert view.transport is client.transport
    assert view.discovery is client.discovery
    assert view.host == client.host


async def test_a_client_without_a_field_manager_refuses_to_apply_before_any_request(
    client: Client,
) -> None:
    desired = {"metadata": {"name": "x", "namespace": "ops"}, "data": {}}
    writes = (
        client.apply(CONFIG_MAP, desired),
        client.apply_owned(CONFIG_MAP, desired, None),
        client.apply_if_changed(CONFIG_MAP, desired, None),
        client.apply_status(CONFIG_MAP, desired),
        client.apply_status_if_changed(CONFIG_MAP, {}, desired),
    )
    for write in writes:
        # The server is unreachable: a request would raise TransportError instead.
        with pytest.raises(ValueError, match=r"no field manager.*manager\.client"):
            await write


def test_the_test_options_take_fields_only() -> None:
    """``manager_options_for_tests``: an override is a field (a property such as ``lease_name``
    is refused at once, not at the manager's start), and the options are validated again."""
    assert manager_options_for_tests("widgets", lease_duration=4.0).lease_duration == 4.0
    with pytest.raises(TypeError, match="lease_name"):
        manager_options_for_tests("widgets", lease_name="x")
    sharding = Sharding(resource=CONFIG_MAP, domain="example.com")
    with pytest.raises(ValueError, match="needs leader_election"):
        manager_options_for_tests("widgets", sharding=sharding)
