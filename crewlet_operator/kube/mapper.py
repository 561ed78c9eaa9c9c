"""Kinds to resources by discovery: the library's RESTMapper.

A controller knows the kinds it works with by group and kind (``Tenant`` in ``example.com``,
``HTTPRoute`` in ``gateway.networking.k8s.io``); the API server serves them under a plural, a
scope and a version that only discovery tells. :class:`RESTMapper` asks it once per group::

    mapper = RESTMapper(client)
    tenants = await mapper.resource_for("example.com", "Tenant")
    quotas = await mapper.resource_for("", "ResourceQuota")  # the core group is ""

Without a version it takes the one the server prefers for the group (the storage version a
CRD's author chose, ``v1`` of the built-ins). What it learnt is kept until
:meth:`RESTMapper.reset`, except that a kind it cannot find makes it ask again once, so a CRD
installed after the first question is found.
"""

from __future__ import annotations

from crewlet_operator.errors import NotServedError
from crewlet_operator.kube.client import Client
from crewlet_operator.kube.resources import Resource

__all__ = [
    "RESTMapper",
]

CORE_GROUP = ""


class RESTMapper:
    """Maps ``(group, kind)`` to the :class:`Resource` the API server serves.

    :param client: The client that reads discovery (every identity may: the ``system:discovery``
        role is bound to all authenticated users).
    """

    def __init__(self, client: Client) -> None:
        self.client = client
        self._preferred: dict[str, str] | None = None
        """Group to its preferred version (``""``: the core group)."""

    async def resource_for(self, group: str, kind: str, version: str | None = None) -> Resource:
        """The resource of ``kind`` in ``group`` (``""`` for the core group), at ``version`` or
        the group's preferred one.

        Raises:
            NotServedError: the server serves no such kind (asked twice: once as remembered,
                once afresh).
        """
        try:
            return await self._lookup(group, kind, version)
        except NotServedError:
            self.reset()
            return await self._lookup(group, kind, version)

    def reset(self) -> None:
        """Forget what discovery said (after CRDs are installed, changed or removed)."""
        self._preferred = None
        self.client.forget_discovery()

    async def _lookup(self, group: str, kind: str, version: str | None) -> Resource:
        if version is None:
            preferred = await self._preferred_versions()
            if group not in preferred:
                raise NotServedError(
                    f"no group {group or 'core'!r} is served by {self.client.host}"
                )
            version = preferred[group]
        return await self.client.discover(f"{group}/{version}" if group else version, kind)

    async def _preferred_versions(self) -> dict[str, str]:
        if self._preferred is None:
            core = await self.client.request("GET", "/api")
            groups = await self.client.request("GET", "/apis")
            preferred = {CORE_GROUP: core["versions"][0]}
            for entry in groups.get("groups") or []:
                preferred[entry["name"]] = entry["preferredVersion"]["version"]
            self._preferred = preferred
        return self._preferred
