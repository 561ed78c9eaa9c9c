"""The client: an async Kubernetes client on raw JSON dicts.

Objects are plain dicts as the API server sends them; a kind is a
:class:`~crewlet_operator.kube.resources.Resource` (the built-in ones are constants, such as
``CONFIG_MAP``; any other comes from :class:`~crewlet_operator.kube.mapper.RESTMapper`). Every
call goes to the API server: cached reads are the manager's (``manager.cache``).

Lifecycle
---------

A :class:`Client` holds a pool of connections (an aiohttp session), opened when it is made:
make one per process, share it, and close it once, with ``await client.close()`` or as an async
context manager. An unclosed client makes aiohttp warn "Unclosed client session" at exit. A
:class:`~crewlet_operator.manager.Manager` uses the client it is given and never closes it::

    async with await Client.from_environment() as client:
        manager = Manager(client, ManagerOptions(name="tenants"))
        ...
        await manager.run(handle_signals=True)

Made from:

- :meth:`Client.from_environment` (awaited): the kubeconfig named, else the pod's ServiceAccount
  inside a pod, else ``$KUBECONFIG`` or ``~/.kube/config``;
- :meth:`Client.from_kubeconfig` (awaited) and :meth:`Client.in_cluster`;
- ``Client(RestConfig(host=..., token=...))``, or a kubernetes-asyncio ``Configuration``.

Each passes its keyword arguments on to :class:`Client`, so the field manager (the name its
server-side applies own their fields under; none unless given, and a manager writes as its own
name), the user agent, the request timeout and compression are set the same way whatever the
source::

    client = await Client.from_environment(field_manager="tenant-controller")

What the calls return
---------------------

- :meth:`Client.get` returns the object (a dict); :meth:`Client.get_or_none` None for one that
  does not exist.
- :meth:`Client.list` returns an :class:`ObjectList`: its ``items`` (each with ``apiVersion``
  and ``kind``) and the list's ``resource_version`` (where a watch resumes). It iterates over
  the items and has their number as its length. :meth:`Client.list_pages` yields one
  :class:`ObjectList` a page, :meth:`Client.list_raw_pages` one :class:`RawObjectList` (the
  items as undecoded JSON).
- :meth:`Client.watch` yields one :class:`WatchEvent` a change (``type``, ``object``).
- The writes (:meth:`Client.create`, :meth:`Client.apply`, :meth:`Client.apply_status`,
  :meth:`Client.patch`, :meth:`Client.replace`) return the object the API server stored;
  :meth:`Client.apply_if_changed` and :meth:`Client.apply_status_if_changed` return None when
  there was nothing to write. :meth:`Client.delete` returns the API server's answer.

What a list or a watch asks for is one value: a :class:`ListParams` or a :class:`WatchParams`
(:mod:`crewlet_operator.kube.params`), or, for the defaults, the :class:`Scope` alone (or a
namespace's name)::

    await client.list(POD, "team-a")
    await client.list(POD, Scope("team-a", label_selector="app=web"))
    async for event in client.watch(POD, WatchParams(scope, resource_version=version)):
        ...

Errors
------

A refused request raises the :class:`~crewlet_operator.errors.ApiError` subclass of its status
(:class:`~crewlet_operator.errors.NotFoundError`, :class:`~crewlet_operator.errors.ConflictError`,
:class:`~crewlet_operator.errors.InvalidError`, ...), an answer that never came
:class:`~crewlet_operator.errors.TransportError`; :mod:`crewlet_operator.errors` has the whole
tree and what to catch for what. Which failures the client sends again before they reach you,
and which it leaves to your backoff, is said once, in :mod:`crewlet_operator.kube.retry`.

How it is built
---------------

kubernetes-asyncio loads the configuration (kubeconfig with exec plugins, in-cluster token
rotation, the TLS material); the client speaks the API itself over aiohttp, so that objects stay
plain dicts: no generated model is built per object or per watch event (a documented CPU sink of
the Python clients), none is even imported (``crewlet_operator.kube._kubernetes_asyncio``), and
any kind, including custom resources, works the same way.

This module holds the verbs. A :class:`Client` composes the parts that each do one job, each
in a module of its own: the transport (connections, headers and credentials, retries, metrics:
:mod:`crewlet_operator.kube.transport`), discovery (:mod:`crewlet_operator.kube.discovery`)
and the ownership rule its applies keep (:mod:`crewlet_operator.kube.ownership`).
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal, Self

import msgspec
import orjson

from crewlet_operator.errors import (
    ConflictError,
    InvalidError,
    NotFoundError,
    NotOwnedError,  # noqa: F401 (apply_owned raises it; importable here, as it always was)
    ServerError,
    api_error,
)
from crewlet_operator.fieldset import apply_would_change
from crewlet_operator.kube import ownership
from crewlet_operator.kube._kubernetes_asyncio import (
    ConfigException,
    Configuration,
    load_incluster_config,
    load_kube_config,
)
from crewlet_operator.kube.config import RestConfig
from crewlet_operator.kube.discovery import Discovery
from crewlet_operator.kube.ownership import NO_OBJECT_VERSION, is_ours
from crewlet_operator.kube.params import ListParams, QueryValue, Scope, WatchParams
from crewlet_operator.kube.resources import Resource
from crewlet_operator.kube.retry import RetryPolicy
from crewlet_operator.kube.transport import DEFAULT_RETRIES, DEFAULT_TIMEOUT, Transport
from crewlet_operator.objects import KubeObject as Object

__all__ = [
    "DEFAULT_TIMEOUT",
    "NO_OBJECT_VERSION",
    "Client",
    "FieldValidation",
    "ListParams",
    "ObjectList",
    "RawObjectList",
    "Scope",
    "WatchEvent",
    "WatchParams",
    "is_ours",
]

FieldValidation = Literal["Strict", "Warn", "Ignore"]
"""What the API server does with a field its schema does not know (``fieldValidation``):
refuse the write (``Strict``), write without it and say so in a ``Warning`` header (``Warn``,
its default), or write without it silently (``Ignore``)."""

TYPED_LIVE_OBJECT = "failed to create typed live object"
"""The API server's 500 when server-side apply meets a stored object its schema cannot type (one
written before its CRD tightened a field's type)."""
WRITE_METHODS = frozenset({"POST", "PUT", "PATCH"})
"""The methods whose body the API server validates (``fieldValidation``)."""


@dataclass(frozen=True)
class WatchEvent:
    """One event of a watch: ``type`` is ADDED, MODIFIED, DELETED or BOOKMARK."""

    type: str
    object: Object


@dataclass(frozen=True)
class ObjectList:
    """The items of a list and the collection's resourceVersion (where a watch resumes).

    It iterates over its items and has their number as its length::

        for pod in await client.list(POD, "team-a"):
            ...
    """

    items: list[Object]
    resource_version: str

    def __iter__(self) -> Iterator[Object]:
        """The items, in the API server's order."""
        return iter(self.items)

    def __len__(self) -> int:
        """The number of items."""
        return len(self.items)


@dataclass(frozen=True)
class RawObjectList:
    """The items of a list as JSON, each as the API server sent it, and the collection's
    resourceVersion (:meth:`Client.list_raw_pages`); iterable and sized as
    :class:`ObjectList` is."""

    items: list[bytes]
    resource_version: str

    def __iter__(self) -> Iterator[bytes]:
        """The items, in the API server's order."""
        return iter(self.items)

    def __len__(self) -> int:
        """The number of items."""
        return len(self.items)


class _ListMeta(msgspec.Struct):
    resource_version: str = msgspec.field(default="", name="resourceVersion")
    continue_: str | None = msgspec.field(default=None, name="continue")


class _RawPage(msgspec.Struct):
    """A list's page with its items split and left undecoded (``msgspec.Raw``): msgspec skips
    over an item at about a gigabyte a second, a tenth of what decoding it costs."""

    metadata: _ListMeta = msgspec.field(default_factory=_ListMeta)
    items: list[msgspec.Raw] | None = None


_RAW_PAGE = msgspec.json.Decoder(_RawPage)


class Client:
    """Reads and writes Kubernetes objects as dicts.

    Writes go through server-side apply with one field manager and ``force`` on conflicts, as
    controller-runtime recommends for controllers: the controller owns the fields it sets, and
    no resourceVersion is needed, so stale reads cause no 409 storms.

    The field manager names whoever writes. A client has none unless given one; without one it
    reads, creates and patches (the API server names such a write's manager after the user
    agent), but refuses to apply. A :class:`~crewlet_operator.manager.Manager` writes through
    :meth:`with_field_manager` under its name, so the client you hand it needs none; give
    one to a client that applies on its own behalf (a test's, a tool's).

    Every request goes through the client's :attr:`transport`, which sends it again or not as
    :mod:`crewlet_operator.kube.retry` says (``retries``), and logs what the API server warns
    of in ``Warning`` headers (a deprecated API, a field it dropped because its schema does not
    know it) at warning level, once per message, as client-go's deduplicating warning handler
    does. A field the schema does not know is dropped by the API server (it prunes it), not
    refused: :meth:`with_field_validation` ``("Strict")`` makes every write refuse it instead,
    as ``kubectl --validate=strict``.

    Create one per process and share it; close it with ``await client.close()`` or ``async with``.
    """

    def __init__(
        self,
        config: RestConfig | Configuration,
        *,
        field_manager: str | None = None,
        user_agent: str = "crewlet-operator",
        timeout: float = DEFAULT_TIMEOUT,
        compression: bool = True,
        retries: RetryPolicy = DEFAULT_RETRIES,
    ) -> None:
        """``compression``: whether the API server may gzip its answers (client-go's
        ``DisableCompression``, inverted; on by default, as there). Off, a process that lists and
        watches many objects close to the API server saves both sides the CPU of compressing
        and decompressing every one of them.

        ``retries``: how often a request is sent again, and the longest wait before each;
        client-go's default (:data:`~crewlet_operator.kube.transport.DEFAULT_RETRIES`) keeps a
        burst that API Priority and Fairness throttles from failing reconciles, and
        ``RetryPolicy(max_retries=0)`` hands every 429 to the caller."""
        self.field_manager = field_manager
        self.field_validation: FieldValidation | None = None
        """Sent as every write's ``fieldValidation``; None: the API server's default (Warn)."""
        self.write_fence: Callable[[], None] | None = None
        """Called just before each attempt of a write goes out (after every wait of its own):
        what it raises is raised instead, and nothing is sent. A manager sets it on its client
        to refuse the writes of a leader whose lease may have passed to another replica
        (:meth:`~crewlet_operator.leader.LeaderElector.check_may_write`). Views made after it
        is set keep it."""
        self.transport = Transport(
            config, user_agent=user_agent, timeout=timeout, compression=compression, retries=retries
        )
        """The connections to the API server, shared with every view of this client."""
        self.discovery = Discovery(self.transport)
        """What the API server serves, as it said (shared with every view of this client)."""

    @property
    def host(self) -> str:
        """The API server's URL (``https://host:port``)."""
        return self.transport.host

    @classmethod
    async def from_kubeconfig(
        cls, path: str | None = None, context: str | None = None, **kwargs: Any
    ) -> Client:
        """A client from a kubeconfig file (``$KUBECONFIG`` or ``~/.kube/config`` by default)."""
        configuration = Configuration()
        await load_kube_config(
            config_file=path, context=context, client_configuration=configuration
        )
        return cls(configuration, **kwargs)

    @classmethod
    def in_cluster(cls, **kwargs: Any) -> Client:
        """A client from the pod's ServiceAccount (token re-read as it rotates)."""
        configuration = Configuration()
        load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        return cls(configuration, **kwargs)

    @classmethod
    async def from_environment(cls, kubeconfig: str | None = None, **kwargs: Any) -> Client:
        """``kubeconfig`` if given, else in-cluster inside a pod, else the default kubeconfig."""
        if kubeconfig is None:
            try:
                return cls.in_cluster(**kwargs)
            except ConfigException:
                pass
        return await cls.from_kubeconfig(kubeconfig, **kwargs)

    def with_field_manager(self, field_manager: str) -> Client:
        """This client writing as ``field_manager`` (controller-runtime's ``WithFieldOwner``):
        the same connections, credentials and discovery, so it costs nothing; closing either
        closes both. A manager writes through one under its name."""
        view = copy.copy(self)
        view.field_manager = field_manager
        return view

    def with_own_connections(
        self, *, timeout: float | None = None, retries: RetryPolicy | None = None
    ) -> Client:
        """This client over connections of its own: the same API server, credentials, field
        manager and discovery, but a pool of its own, with ``timeout`` and ``retries`` (the
        client's own when None). For requests that must never wait behind the others, in the
        pool or in their retries: a leader's renewals behind a burst of reconciles. Closing it
        closes its own pool alone."""
        view = copy.copy(self)
        view.transport = self.transport.apart(
            timeout=self.transport.timeout if timeout is None else timeout,
            retries=self.transport.retries if retries is None else retries,
        )
        return view

    def with_field_validation(self, mode: FieldValidation) -> Client:
        """This client with every write (create, apply, patch, replace) asking the API server
        for ``fieldValidation`` ``mode`` (controller-runtime's ``WithFieldValidation``): with
        ``"Strict"``, a field the object's schema does not know is refused (an
        :class:`~crewlet_operator.errors.ApiError` naming it) instead of dropped. The same
        connections, as :meth:`with_field_manager`."""
        view = copy.copy(self)
        view.field_validation = mode
        return view

    def _applier(self, field_manager: str | None = None) -> str:
        """The field manager an apply writes as: ``field_manager`` if given, else the client's.

        Raises:
            ValueError: neither is set; nothing was written.
        """
        manager = field_manager or self.field_manager
        if not manager:
            raise ValueError(
                "this client has no field manager, so it cannot apply: write through the "
                "manager's client (manager.client, which applies as the manager's name), "
                "pass field_manager=..., or make it with Client(..., field_manager=...)"
            )
        return manager

    async def close(self) -> None:
        """Close the connection pool."""
        await self.transport.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, QueryValue] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | None = None,
    ) -> Any:
        """Send one request and return the decoded JSON answer; a write carries the client's
        ``fieldValidation``.

        Raises the most specific :class:`~crewlet_operator.errors.ApiError` for a failure status,
        and :class:`~crewlet_operator.errors.TransportError` when no answer arrives, once
        :mod:`crewlet_operator.kube.retry` says not to send it again.
        """
        if self.field_validation and method in WRITE_METHODS:
            query = {"fieldValidation": self.field_validation, **(query or {})}
        fence = self.write_fence if method != "GET" else None
        return await self.transport.request(
            method,
            path,
            query=query,
            body=body,
            content_type=content_type,
            timeout=timeout,
            fence=fence,
        )

    # -- reads ---------------------------------------------------------------------------------
    async def get(
        self,
        resource: Resource,
        name: str,
        namespace: str | None = None,
        *,
        subresource: str | None = None,
    ) -> Object:
        """One object; :class:`~crewlet_operator.errors.NotFoundError` when it does not exist."""
        obj: Object = await self.request("GET", resource.path(namespace, name, subresource))
        return obj

    async def get_or_none(
        self, resource: Resource, name: str, namespace: str | None = None
    ) -> Object | None:
        """One object, or None when it does not exist."""
        try:
            return await self.get(resource, name, namespace)
        except NotFoundError:
            return None

    async def list(
        self, resource: Resource, params: ListParams | Scope | str | None = None
    ) -> ObjectList:
        """Every object of a kind that ``params`` asks for (every one without it), paginated
        (:attr:`ListParams.page_size` a page), with the list's RV.

        Items carry their ``apiVersion`` and ``kind`` (the API server omits them in lists).
        """
        items: list[Object] = []
        version = ""
        async for page in self.list_pages(resource, params):
            items += page.items
            version = page.resource_version
        return ObjectList(items, version)

    async def list_pages(
        self, resource: Resource, params: ListParams | Scope | str | None = None
    ) -> AsyncIterator[ObjectList]:
        """:meth:`list`, a page at a time: a caller that keeps something smaller than each
        object (a cache) never holds more than one page of whole objects."""
        async for page in self.list_raw_pages(resource, params):
            items = [decode_item(item, resource) for item in page.items]
            page.items.clear()
            yield ObjectList(items, page.resource_version)

    async def list_raw_pages(
        self, resource: Resource, params: ListParams | Scope | str | None = None
    ) -> AsyncIterator[RawObjectList]:
        """:meth:`list_pages` with each item left as the JSON the API server sent: split from
        the page without being decoded, for a caller that decodes only part of most items
        (an informer's lazy list). An item of a built-in kind carries no ``kind`` or
        ``apiVersion`` (its list names them once); a custom resource's does, and so does each
        item of a list of metadata alone (:attr:`ListParams.metadata_only`)."""
        params = ListParams.of(params)
        path = resource.path(params.scope.namespace)
        token: str | None = None
        while True:
            payload = await self.transport.send(
                "GET", path, query=params.query(token), accept=params.accept
            )
            try:
                page = _RAW_PAGE.decode(payload)
            except msgspec.DecodeError as exc:
                raise ValueError(f"GET {path}: not a list: {exc}") from exc
            yield RawObjectList(
                [bytes(item) for item in page.items or ()], page.metadata.resource_version
            )
            token = page.metadata.continue_
            if not token:
                return

    async def watch(
        self, resource: Resource, params: WatchParams | Scope | str | None = None
    ) -> AsyncIterator[WatchEvent]:
        """Stream the changes that ``params`` asks for (to every object of the kind, from now,
        without it), one :class:`WatchEvent` each.

        A watch ends when its server timeout passes, and raises
        :class:`~crewlet_operator.errors.TransportError` when its inactivity timeout does
        (:class:`WatchParams`). An ``ERROR`` event raises its
        :class:`~crewlet_operator.errors.ApiError` (410 = relist).

        The opening request is retried as a GET is (:mod:`crewlet_operator.kube.retry`); once
        the events stream, a broken connection ends the watch with a ``TransportError``, and the
        caller resumes it from the last resourceVersion it saw.
        """
        params = WatchParams.of(params)
        path = resource.path(params.scope.namespace)
        async for line in self.watch_lines(resource, params):
            yield decode_event(line, path)

    async def watch_lines(
        self, resource: Resource, params: WatchParams | Scope | str | None = None
    ) -> AsyncIterator[bytes]:
        """:meth:`watch`, with each event as the line of JSON the API server sent, undecoded
        (:func:`decode_event` decodes one): for a caller that decodes some events only in part,
        such as an informer's lazy list (:attr:`~crewlet_operator.cache.Compact.lazy_lists`)."""
        params = WatchParams.of(params)
        stream = self.transport.stream(
            resource.path(params.scope.namespace),
            params.query(),
            accept=params.accept,
            inactivity_timeout=params.inactivity_timeout,
        )
        async with contextlib.aclosing(stream) as lines:
            async for line in lines:
                yield line

    # -- writes --------------------------------------------------------------------------------
    async def create(self, resource: Resource, obj: Object, *, dry_run: bool = False) -> Object:
        """Create ``obj`` (``AlreadyExistsError`` when the name is taken)."""
        body = _with_type(resource, obj)
        namespace = body["metadata"].get("namespace")
        created: Object = await self.request(
            "POST",
            resource.path(namespace),
            body=body,
            query={"fieldManager": self.field_manager, "dryRun": "All" if dry_run else None},
        )
        return created

    async def apply(
        self,
        resource: Resource,
        obj: Object,
        *,
        field_manager: str | None = None,
        force: bool = True,
        subresource: str | None = None,
        dry_run: bool = False,
    ) -> Object:
        """Server-side apply ``obj``: a partial object holding exactly the fields we own.

        Fields another manager owns are taken over (``force``) rather than failing, the
        recommended setting for controllers, which are the authority on what they write.
        """
        body = _with_type(resource, obj)
        meta = body["metadata"]
        path = resource.path(meta.get("namespace"), meta["name"], subresource)
        applied: Object = await self.request(
            "PATCH",
            path,
            body=body,
            content_type="application/apply-patch+yaml",
            query={
                "fieldManager": self._applier(field_manager),
                "force": force or None,
                "dryRun": "All" if dry_run else None,
            },
        )
        return applied

    async def apply_owned(
        self,
        resource: Resource,
        desired: Object,
        observed: Object | None,
        *,
        field_manager: str | None = None,
        force: bool = True,
        dry_run: bool = False,
    ) -> Object:
        """Server-side apply ``desired``, an object this client makes, and never onto an
        object it did not make, whether or not a cache holds that object.

        ``observed`` is what the caller knows of the object: None when it knows of none, and
        then the apply only creates (it carries :data:`NO_OBJECT_VERSION`), so a name taken by
        someone else, which a label-scoped cache never sees, is found by the API server
        instead of written over. Otherwise ``observed`` must be ours (:func:`is_ours`), and
        the apply carries its ``uid``: it lands on that object or on none (the API server
        refuses a uid that is not the stored object's). A create whose name turns out taken
        reads the object that holds it and applies onto it only if it is ours (a cache that
        had not seen our own create yet).

        Raises:
            NotOwnedError: the name is held by an object that is not ours (``existing``);
                nothing was written.
            ConflictError: the object was deleted or replaced since ``observed`` was read;
                read it again.
        """
        manager = self._applier(field_manager)
        if observed is None:
            try:
                return await self.apply(
                    resource,
                    ownership.create_only(desired),
                    field_manager=manager,
                    force=force,
                    dry_run=dry_run,
                )
            except ConflictError:
                meta = desired["metadata"]
                observed = await self.get_or_none(resource, meta["name"], meta.get("namespace"))
                if observed is None:
                    raise  # held a moment ago and gone now: the caller looks again
        claimed = ownership.claim(resource, desired, observed, manager)
        try:
            return await self.apply(
                resource, claimed, field_manager=manager, force=force, dry_run=dry_run
            )
        except InvalidError as refused:
            conflict = ownership.replaced(resource, desired, observed, refused)
            if conflict is None:
                raise
            raise conflict from refused

    async def apply_if_changed(
        self,
        resource: Resource,
        desired: Object,
        observed: Object | None,
        *,
        adopt: bool = False,
        **kwargs: Any,
    ) -> Object | None:
        """Apply ``desired`` only when ``observed`` (usually from the cache) lacks some desired
        field, or holds a field we applied before and no longer want (read from our own
        ``managedFields`` entry); return the applied object, or None when nothing was written.

        This is what makes a resync of a converged world cost zero writes.

        An apply forces its way over other managers' fields, so it would quietly take over an
        object someone else made under the same name. The write is therefore
        :meth:`apply_owned`'s: ``observed`` must be ours (:func:`is_ours`: controlled by the
        owner ``desired`` names as its controller, or, when ``desired`` names none, applied
        before by this field manager), and with ``observed`` None the apply only creates, so
        an object the cache does not hold (a label-scoped cache sees none of other people's)
        is never written over either. Taking over anything else is explicit: ``adopt=True``,
        a plain apply onto whatever holds the name. A status write (``subresource``) is a
        plain apply too: it changes no object's ownership.

        Raises:
            NotOwnedError: the name is held by an object that is not ours, and ``adopt`` is
                False; nothing was written.
            ConflictError: ``observed`` was deleted or replaced since it was read.
        """
        manager = self._applier(kwargs.get("field_manager"))
        subresource = kwargs.get("subresource") or ""
        write = ownership.write_for(
            desired, observed, manager, subresource=subresource, adopt=adopt
        )
        if write == "nothing":
            return None
        if write == "apply":
            return await self.apply(resource, desired, **kwargs)
        return await self.apply_owned(resource, desired, observed, **kwargs)

    async def apply_status(self, resource: Resource, obj: Object, **kwargs: Any) -> Object:
        """Server-side apply to the ``/status`` subresource.

        A stored object that its CRD's schema can no longer type (written before the CRD
        tightened a field) makes the API server refuse every apply with a 500; the status is then
        written with a merge patch, which needs no typing, so the object's owner still learns
        what is wrong with it.
        """
        try:
            return await self.apply(resource, obj, subresource="status", **kwargs)
        except ServerError as error:
            if TYPED_LIVE_OBJECT not in error.message:
                raise
        meta = obj["metadata"]
        return await self.patch(
            resource,
            meta["name"],
            {"status": obj.get("status") or {}},
            meta.get("namespace"),
            subresource="status",
        )

    async def apply_status_if_changed(
        self, resource: Resource, status: Object, observed: Object, **kwargs: Any
    ) -> Object | None:
        """Write ``status`` as ``observed``'s status (server-side apply to ``/status``) only when
        it differs from what ``observed`` holds; return the written object, or None when nothing
        was written.

        ``status`` is the whole status this controller owns (say ``{"conditions": [...],
        "observedGeneration": 3}``): a field it applied before and leaves out now is removed, and
        counts as a change. Keep each condition's ``lastTransitionTime`` from
        :func:`~crewlet_operator.conditions.set_condition`, so that an unchanged condition
        compares equal.
        """
        meta = observed["metadata"]
        identity = {"name": meta["name"]}
        if meta.get("namespace"):
            identity["namespace"] = meta["namespace"]
        body = {
            "apiVersion": observed.get("apiVersion") or resource.api_version,
            "kind": observed.get("kind") or resource.kind,
            "metadata": identity,
            "status": status,
        }
        manager = self._applier(kwargs.get("field_manager"))
        # As apply_if_changed: a field missing or different, or one applied before and left out
        # now (the apply removes it), is a change.
        if not apply_would_change(body, observed, manager, "status"):
            return None
        return await self.apply_status(resource, body, **kwargs)

    async def patch(
        self,
        resource: Resource,
        name: str,
        patch: Any,
        namespace: str | None = None,
        *,
        patch_type: str = "merge",
        subresource: str | None = None,
    ) -> Object:
        """Patch with a ``merge`` (RFC 7386), ``json`` (RFC 6902) or ``strategic`` patch."""
        content_types = {
            "merge": "application/merge-patch+json",
            "json": "application/json-patch+json",
            "strategic": "application/strategic-merge-patch+json",
        }
        patched: Object = await self.request(
            "PATCH",
            resource.path(namespace, name, subresource),
            body=patch,
            content_type=content_types[patch_type],
            query={"fieldManager": self.field_manager},
        )
        return patched

    async def replace(
        self, resource: Resource, obj: Object, *, subresource: str | None = None
    ) -> Object:
        """PUT ``obj`` whole; its ``metadata.resourceVersion`` makes it a compare-and-swap."""
        meta = obj["metadata"]
        replaced: Object = await self.request(
            "PUT",
            resource.path(meta.get("namespace"), meta["name"], subresource),
            body=_with_type(resource, obj),
            query={"fieldManager": self.field_manager},
        )
        return replaced

    async def delete(
        self,
        resource: Resource,
        name: str,
        namespace: str | None = None,
        *,
        uid: str | None = None,
        resource_version: str | None = None,
        propagation_policy: str | None = "Background",
        grace_period_seconds: int | None = None,
        dry_run: bool = False,
    ) -> Object | None:
        """Delete one object. ``uid``/``resource_version`` are preconditions: the delete fails
        with ``ConflictError`` when the object is no longer the one that was meant."""
        options: Object = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if propagation_policy:
            options["propagationPolicy"] = propagation_policy
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        preconditions = {
            k: v for k, v in (("uid", uid), ("resourceVersion", resource_version)) if v
        }
        if preconditions:
            options["preconditions"] = preconditions
        if dry_run:
            options["dryRun"] = ["All"]
        deleted: Object | None = await self.request(
            "DELETE", resource.path(namespace, name), body=options
        )
        return deleted

    # -- discovery (the client's :attr:`discovery`) --------------------------------------------
    async def server_version(self) -> Object:
        """The API server's ``/version`` (``gitVersion``, ``major``, ``minor``, ...)."""
        return await self.discovery.server_version()

    async def discover(self, api_version: str, kind: str) -> Resource:
        """The :class:`Resource` the server serves for ``api_version``/``kind``.

        Raises :class:`~crewlet_operator.errors.NotServedError` when it is not served.
        """
        return await self.discovery.discover(api_version, kind)

    async def is_served(self, api_version: str, kind: str | None = None) -> bool:
        """Whether the group/version (and the kind, if given) is served."""
        return await self.discovery.is_served(api_version, kind)

    def forget_discovery(self) -> None:
        """Drop cached discovery (after CRDs are installed or removed)."""
        self.discovery.forget()


def decode_item(item: bytes, resource: Resource) -> Object:
    """An item of a page of ``resource`` (:meth:`Client.list_raw_pages`) decoded whole, with
    the ``apiVersion`` and ``kind`` its list names."""
    obj: Object = orjson.loads(item)
    obj.setdefault("apiVersion", resource.api_version)
    obj.setdefault("kind", resource.kind)
    return obj


def decode_event(line: bytes, path: str) -> WatchEvent:
    """One line of a watch on ``path`` (:meth:`Client.watch_lines`) as its event; an ``ERROR``
    event raises its :class:`~crewlet_operator.errors.ApiError`."""
    event = orjson.loads(line)
    obj = event.get("object") or {}
    if event.get("type") == "ERROR":
        raise api_error(int(obj.get("code") or 500), obj, method="WATCH", path=path)
    return WatchEvent(event["type"], obj)


def _with_type(resource: Resource, obj: Object) -> Object:
    if obj.get("apiVersion") and obj.get("kind"):
        return obj
    return {"apiVersion": resource.api_version, "kind": resource.kind, **obj}
