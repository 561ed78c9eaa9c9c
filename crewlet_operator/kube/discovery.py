"""Discovery: which kinds the API server serves, under which plural and scope.

:class:`Discovery` reads a group/version's resource list once and keeps it until told to
forget (after CRDs are installed or removed). The client answers
:meth:`~crewlet_operator.kube.client.Client.discover` and
:meth:`~crewlet_operator.kube.client.Client.is_served` from it, and
:class:`~crewlet_operator.kube.mapper.RESTMapper` finds a kind's preferred version on top.
"""

from __future__ import annotations

from typing import Any

from crewlet_operator.errors import NotFoundError, NotServedError
from crewlet_operator.kube.resources import Resource
from crewlet_operator.kube.transport import Transport


class Discovery:
    """What one API server serves, read over ``transport`` and remembered per group/version."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        self._kinds: dict[str, dict[str, Resource]] = {}
        """Each served group/version read so far, to its kinds."""

    async def server_version(self) -> dict[str, Any]:
        """The API server's ``/version`` (``gitVersion``, ``major``, ``minor``, ...)."""
        version: dict[str, Any] = await self.transport.request("GET", "/version")
        return version

    async def kinds(self, api_version: str) -> dict[str, Resource]:
        """The kinds ``api_version`` serves, by name (none when it is not served), each as a
        :class:`Resource`; subresources are left out."""
        cached = self._kinds.get(api_version)
        if cached is not None:
            return cached
        group, _, version = api_version.rpartition("/")
        path = f"/apis/{api_version}" if group else f"/api/{version}"
        try:
            listing: dict[str, Any] = await self.transport.request("GET", path)
        except NotFoundError:
            return {}
        kinds = {
            r["kind"]: Resource(group, version, r["kind"], r["name"], bool(r.get("namespaced")))
            for r in listing.get("resources", [])
            if "/" not in r["name"]
        }
        self._kinds[api_version] = kinds
        return kinds

    async def discover(self, api_version: str, kind: str) -> Resource:
        """The :class:`Resource` the server serves for ``api_version``/``kind``.

        Raises :class:`~crewlet_operator.errors.NotServedError` when it is not served.
        """
        resource = (await self.kinds(api_version)).get(kind)
        if resource is None:
            raise NotServedError(f"{kind} in {api_version} is not served by {self.transport.host}")
        return resource

    async def is_served(self, api_version: str, kind: str | None = None) -> bool:
        """Whether the group/version (and the kind, if given) is served."""
        kinds = await self.kinds(api_version)
        return bool(kinds) and (kind is None or kind in kinds)

    def forget(self) -> None:
        """Drop what discovery said (after CRDs are installed or removed)."""
        self._kinds.clear()
