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
  items as undecoded JSON). A :class:`Scope` (or a namespace's name) says which objects.
- :meth:`Client.watch` yields one :class:`WatchEvent` a change (``type``, ``object``).
- The writes (:meth:`Client.create`, :meth:`Client.apply`, :meth:`Client.apply_status`,
  :meth:`Client.patch`, :meth:`Client.replace`) return the object the API server stored;
  :meth:`Client.apply_if_changed` and :meth:`Client.apply_status_if_changed` return None when
  there was nothing to write. :meth:`Client.delete` returns the API server's answer.

Errors
------

A refused request raises the :class:`~crewlet_operator.errors.ApiError` subclass of its status
(:class:`~crewlet_operator.errors.NotFoundError`, :class:`~crewlet_operator.errors.ConflictError`,
:class:`~crewlet_operator.errors.InvalidError`, ...), an answer that never came
:class:`~crewlet_operator.errors.TransportError`; :mod:`crewlet_operator.errors` has the whole
tree and what to catch for what. The client retries nothing: the controller's backoff and the
informers' do.

How it is built
---------------

kubernetes-asyncio loads the configuration (kubeconfig with exec plugins, in-cluster token
rotation, the TLS material); this module speaks the API itself over aiohttp, so that objects stay
plain dicts: no generated model is built per object or per watch event (a documented CPU sink of
the Python clients), none is even imported (``crewlet_operator.kube._kubernetes_asyncio``), and
any kind, including custom resources, works the same way.
"""

from __future__ import annotations

import copy
import functools
import re
import ssl
import time
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal, Self
from urllib.parse import urlsplit

import aiohttp
import msgspec
import orjson
import structlog
from multidict import CIMultiDict
from yarl import URL

from crewlet_operator import metrics
from crewlet_operator.errors import (
    ConflictError,
    InvalidError,
    NotFoundError,
    NotOwnedError,
    NotServedError,
    ServerError,
    TransportError,
    api_error,
)
from crewlet_operator.fieldset import apply_would_change
from crewlet_operator.kube._kubernetes_asyncio import (
    ConfigException,
    Configuration,
    load_incluster_config,
    load_kube_config,
)
from crewlet_operator.kube.config import RestConfig
from crewlet_operator.kube.resources import Resource
from crewlet_operator.kube.retry import RetryPolicy, retry_after_seconds
from crewlet_operator.objects import KubeObject as Object
from crewlet_operator.owners import get_controller_of

__all__ = [
    "DEFAULT_TIMEOUT",
    "NO_OBJECT_VERSION",
    "Client",
    "FieldValidation",
    "ObjectList",
    "RawObjectList",
    "Scope",
    "WatchEvent",
    "is_ours",
]

log = structlog.get_logger("crewlet_operator.kube.client")

FieldValidation = Literal["Strict", "Warn", "Ignore"]
"""What the API server does with a field its schema does not know (``fieldValidation``):
refuse the write (``Strict``), write without it and say so in a ``Warning`` header (``Warn``,
its default), or write without it silently (``Ignore``)."""

_WARNING = re.compile(r'^\d{3} \S+ "((?:[^"\\]|\\.)*)"')
"""An RFC 7234 ``Warning`` header's code, agent and quoted text, as the API server writes it."""

TYPED_LIVE_OBJECT = "failed to create typed live object"
"""The API server's 500 when server-side apply meets a stored object its schema cannot type (one
written before its CRD tightened a field's type)."""
NO_OBJECT_VERSION = "18446744073709551615"
"""A resourceVersion no object holds (etcd's revisions count up from 1 and never reach 2**64 - 1).
A server-side apply that carries it is a create that never lands on anything: the API server
ignores an apply's resourceVersion when the name is free and creates the object, and compares it
when the name is taken, which fails with 409 Conflict whoever holds the name. Unlike a POST, it
leaves the fields owned by an apply (a POST's ``Update`` entry would hold the server's defaults
too, and a later apply could not tell them from fields it no longer wants)."""
DEFAULT_TIMEOUT = 30.0
"""Seconds for one attempt of an ordinary request; watches have their own (server timeout +
inactivity)."""
DEFAULT_RETRIES = RetryPolicy()
"""client-go's: up to 10 retries of a throttled request or of a read whose connection broke,
each after the ``Retry-After`` the API server asked for (capped at 10 s)."""

QueryValue = str | int | bool | None
Headers = list[tuple[str, str]]
"""Header name and value pairs, in order (a name may repeat)."""


def is_ours(desired: Object, observed: Object, field_manager: str) -> bool:
    """Whether ``observed`` is the object ``desired`` describes, made by us.

    With a controller reference in ``desired``, it must be ``observed``'s controller too (the
    same owner, by uid). Without one, ``observed`` must carry a server-side apply of
    ``field_manager`` in its ``managedFields`` (which the cache keeps by default).
    """
    wanted = get_controller_of(desired)
    if wanted is not None:
        found = get_controller_of(observed)
        return found is not None and found.get("uid") == wanted.get("uid")
    entries = (observed.get("metadata") or {}).get("managedFields") or []
    return any(e.get("manager") == field_manager and e.get("operation") == "Apply" for e in entries)


def _not_ours(resource: Resource, desired: Object, observed: Object, manager: str) -> str:
    meta = observed.get("metadata") or {}
    where = (
        f"{meta.get('namespace')}/{meta.get('name')}" if meta.get("namespace") else meta.get("name")
    )
    wanted = get_controller_of(desired)
    if wanted is not None:
        found = get_controller_of(observed)
        held = (
            f"controlled by {found.get('kind')} {found.get('name')} (uid {found.get('uid')})"
            if found
            else "controlled by no one"
        )
        return (
            f"{resource.kind} {where} exists and is {held}, not by {wanted.get('kind')} "
            f"{wanted.get('name')} (uid {wanted.get('uid')}): not taken over; pass adopt=True "
            "to take it over"
        )
    return (
        f"{resource.kind} {where} exists and was never applied by field manager {manager}: not "
        "taken over; pass adopt=True to take it over"
    )


@dataclass(frozen=True)
class Scope:
    """Which objects of a kind a list or a watch sees: those in ``namespace`` (every namespace,
    or a cluster-scoped kind, when None) that match both selectors, each in the API server's
    syntax (``"app=web,tier!=db"``, ``"metadata.name=acme"``; None matches every object)."""

    namespace: str | None = None
    label_selector: str | None = None
    field_selector: str | None = None

    @classmethod
    def of(cls, scope: Scope | str | None) -> Scope:
        """``scope`` as a Scope: a namespace's name alone scopes to that namespace, and None
        to every object."""
        if isinstance(scope, Scope):
            return scope
        return cls(namespace=scope)


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
METADATA_LIST_ACCEPT = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
"""The Accept of a list of objects' metadata alone (meta.k8s.io/v1, served since 1.15)."""
METADATA_ACCEPT = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
"""A watch's Accept for each event's object as its metadata alone (``PartialObjectMetadata``)."""


class Client:
    """Reads and writes Kubernetes objects as dicts.

    Writes go through server-side apply with one field manager and ``force`` on conflicts, as
    controller-runtime recommends for controllers: the controller owns the fields it sets, and
    no resourceVersion is needed, so stale reads cause no 409 storms.

    The field manager names whoever writes. A client has none unless given one; without one it
    reads, creates and patches (the API server names such a write's manager after the user
    agent), but refuses to apply. A :class:`~crewlet_operator.manager.Manager` writes through
    :meth:`with_field_manager` under its own name, so the client you hand it needs none; give
    one to a client that applies on its own behalf (a test's, a tool's).

    A request the API server turned away for now (429, or a 5xx with ``Retry-After``), and a read
    whose connection broke, are sent again as client-go does (:mod:`crewlet_operator.kube.retry`,
    ``retries``); every other failure reaches the caller at once.

    What the API server warns of in ``Warning`` headers (a deprecated API, a field it dropped
    because its schema does not know it) is logged at warning level, once per message per
    client, as client-go's deduplicating warning handler does. A field the schema does not know
    is dropped by the API server (it prunes it), not refused: :meth:`with_field_validation`
    ``("Strict")`` makes every write refuse it instead, as ``kubectl --validate=strict``.

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
        client-go's default (:data:`DEFAULT_RETRIES`) keeps a burst that API Priority and
        Fairness throttles from failing reconciles, and ``RetryPolicy(max_retries=0)`` hands
        every 429 to the caller."""
        self.field_manager = field_manager
        self.field_validation: FieldValidation | None = None
        """Sent as every write's ``fieldValidation``; None: the API server's default (Warn)."""
        self.timeout = timeout
        self.retries = retries
        self._warned: set[str] = set()
        self._impersonation: Headers = []
        if isinstance(config, RestConfig):
            configuration = _configuration_from_rest(config)
            if config.impersonate_user:
                self._impersonation.append(("Impersonate-User", config.impersonate_user))
            self._impersonation += [("Impersonate-Group", g) for g in config.impersonate_groups]
            self._extra_headers = dict(config.extra_headers)
        else:
            configuration = config
            self._extra_headers = {}
        if not compression:
            self._extra_headers["Accept-Encoding"] = "identity"
        self.host = str(configuration.host).rstrip("/")
        self._host_label = urlsplit(self.host).netloc
        self._user_agent = user_agent
        self._configuration = configuration
        self._session = _session(configuration)
        self._proxy, self._proxy_auth = _proxy(configuration, self.host)
        self._discovery: dict[str, dict[str, Resource]] = {}

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

    def with_field_validation(self, mode: FieldValidation) -> Client:
        """This client with every write (create, apply, patch, replace) asking the API server
        for ``fieldValidation`` ``mode`` (controller-runtime's ``WithFieldValidation``): with
        ``"Strict"``, a field the object's schema does not know is refused (an
        :class:`~crewlet_operator.errors.ApiError` naming it) instead of dropped. The same
        connections, as :meth:`with_field_manager`."""
        view = copy.copy(self)
        view.field_validation = mode
        return view

    def _warn(self, method: str, path: str, headers: Iterable[str]) -> None:
        """Log each ``Warning`` header of an answer, once per message for this client and the
        views that share its connections."""
        for header in headers:
            found = _WARNING.match(header)
            text = found.group(1).replace('\\"', '"') if found else header
            if text not in self._warned:
                self._warned.add(text)
                log.warning("the API server warns", warning=text, method=method, path=path)

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
        await self._session.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # -- the transport -------------------------------------------------------------------------
    async def _headers(
        self, content_type: str, accept: str = "application/json"
    ) -> CIMultiDict[str]:
        headers: CIMultiDict[str] = CIMultiDict(
            {
                "Accept": accept,
                "Content-Type": content_type,
                "User-Agent": self._user_agent,
                **self._extra_headers,
            }
        )
        # The settings re-read a rotating token (in-cluster, exec plugins) as it expires.
        bearer = (await self._configuration.auth_settings()).get("BearerToken")
        if bearer and bearer.get("value"):
            headers[bearer["key"]] = bearer["value"]
        for key, value in self._impersonation:
            headers.add(key, value)
        return headers

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
        """Send one request and return the decoded JSON answer.

        Raises the most specific :class:`~crewlet_operator.errors.ApiError` for a failure status,
        and :class:`~crewlet_operator.errors.TransportError` when no answer arrives. A 429 or a
        5xx with ``Retry-After`` is sent again after the wait it asks for, and a GET whose
        connection broke after a second, up to ``retries.max_retries`` times; what is still
        failing then, and any other failure, reaches the caller, whose own backoff (a
        reconcile's, an informer's) retries it.
        """
        return _decode(
            await self._send(
                method, path, query=query, body=body, content_type=content_type, timeout=timeout
            )
        )

    async def _send(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, QueryValue] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | None = None,
        accept: str = "application/json",
    ) -> bytes:
        """Send one request, retried as :meth:`request` says, and return its answer's body,
        undecoded; a failure status raises."""
        data = orjson.dumps(body) if body is not None else None
        if self.field_validation and method in WRITE_METHODS:
            query = {"fieldValidation": self.field_validation, **(query or {})}
        attempt = functools.partial(
            self._attempt,
            method,
            path,
            query=_query(query),
            data=data,
            content_type=content_type,
            timeout=timeout,
            accept=accept,
        )
        retrying = self.retries.retrying(method, functools.partial(self._count_retry, method))
        payload: bytes = await retrying(attempt)
        return payload

    async def _attempt(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, str],
        data: bytes | None,
        content_type: str,
        timeout: float | None,
        accept: str,
    ) -> bytes:
        """One attempt of :meth:`_send`."""
        headers = await self._headers(content_type, accept)
        started = time.monotonic()
        try:
            async with self._session.request(
                method,
                self.host + path,
                params=query,
                data=data,
                headers=headers,
                proxy=self._proxy,
                proxy_auth=self._proxy_auth,
                timeout=aiohttp.ClientTimeout(total=timeout or self.timeout),
            ) as response:
                payload = await response.read()
                status = response.status
                retry_after = retry_after_seconds(response.headers.get("Retry-After"))
                warnings = response.headers.getall("Warning", ())
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            self._observe(method, "<error>", started)
            raise TransportError(f"{method} {path}: {exc!r}") from exc
        self._observe(method, str(status), started)
        if warnings:
            self._warn(method, path, warnings)
        if status >= 400:
            decoded = _decode(payload)
            raise api_error(
                status,
                decoded if isinstance(decoded, dict) else None,
                method=method,
                path=path,
                retry_after=retry_after,
            )
        return payload

    def _count_retry(self, verb: str, code: str) -> None:
        """Count a retry of a ``verb`` request after an answer of ``code``."""
        retries = metrics.REST_CLIENT_REQUEST_RETRIES
        retries.labels(code=code, verb=verb, host=self._host_label).inc()

    def _observe(self, method: str, code: str, started: float) -> None:
        metrics.REST_CLIENT_REQUESTS.labels(code=code, method=method, host=self._host_label).inc()
        metrics.REST_CLIENT_REQUEST_DURATION.labels(verb=method, host=self._host_label).observe(
            time.monotonic() - started
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
        self,
        resource: Resource,
        scope: Scope | str | None = None,
        *,
        page_size: int = 500,
        resource_version: str | None = None,
    ) -> ObjectList:
        """Every object of a kind in ``scope`` (every one without it), paginated ``page_size``
        at a time, with the list's RV.

        Items carry their ``apiVersion`` and ``kind`` (the API server omits them in lists).
        """
        items: list[Object] = []
        version = ""
        async for page in self.list_pages(
            resource, scope, page_size=page_size, resource_version=resource_version
        ):
            items += page.items
            version = page.resource_version
        return ObjectList(items, version)

    async def list_pages(
        self,
        resource: Resource,
        scope: Scope | str | None = None,
        *,
        page_size: int = 500,
        resource_version: str | None = None,
    ) -> AsyncIterator[ObjectList]:
        """:meth:`list`, a page at a time: a caller that keeps something smaller than each
        object (a cache) never holds more than one page of whole objects."""
        async for page in self.list_raw_pages(
            resource, scope, page_size=page_size, resource_version=resource_version
        ):
            items = [decode_item(item, resource) for item in page.items]
            page.items.clear()
            yield ObjectList(items, page.resource_version)

    async def list_raw_pages(
        self,
        resource: Resource,
        scope: Scope | str | None = None,
        *,
        page_size: int = 500,
        resource_version: str | None = None,
        metadata_only: bool = False,
    ) -> AsyncIterator[RawObjectList]:
        """:meth:`list_pages` with each item left as the JSON the API server sent: split from
        the page without being decoded, for a caller that decodes only part of most items
        (an informer's lazy list). An item of a built-in kind carries no ``kind`` or
        ``apiVersion`` (its list names them once); a custom resource's does.

        With ``metadata_only``, the API server sends each object's ``metadata`` alone, as a
        ``PartialObjectMetadataList`` (what controller-runtime's metadata-only caches list):
        each item is ``{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1",
        "metadata":{...}}``, a fraction of the object for the API server to encode."""
        accept = METADATA_LIST_ACCEPT if metadata_only else "application/json"
        scope = Scope.of(scope)
        path = resource.path(scope.namespace)
        token: str | None = None
        while True:
            query: dict[str, QueryValue] = {
                "labelSelector": scope.label_selector,
                "fieldSelector": scope.field_selector,
                "limit": page_size,
                "continue": token,
                "resourceVersion": resource_version if token is None else None,
            }
            payload = await self._send("GET", path, query=query, accept=accept)
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
        self,
        resource: Resource,
        scope: Scope | str | None = None,
        *,
        resource_version: str | None = None,
        timeout_seconds: int | None = 300,
        inactivity_timeout: float | None = 90.0,
        allow_bookmarks: bool = True,
        send_initial_events: bool = False,
        metadata_only: bool = False,
    ) -> AsyncIterator[WatchEvent]:
        """Stream the changes after ``resource_version`` to the objects in ``scope`` (every
        object of the kind without it).

        With ``send_initial_events`` (a streaming list, Kubernetes' WatchList), the watch
        starts with an ``ADDED`` event for every object that exists now, then a ``BOOKMARK``
        annotated ``k8s.io/initial-events-end: "true"``, then goes on with the changes: the
        list arrives as the server sends it, one object at a time, instead of in pages.

        Two clocks end a watch, because each catches what the other cannot: the server closes it
        after ``timeout_seconds``, and the client gives up when no byte has arrived for
        ``inactivity_timeout`` seconds (a half-dead connection, a frozen server), raising
        :class:`~crewlet_operator.errors.TransportError`. With bookmarks on, a healthy idle watch
        receives a BOOKMARK about every minute, so the 90 s default does not fire on one.
        An ``ERROR`` event raises its :class:`~crewlet_operator.errors.ApiError` (410 = relist).

        The opening request is retried as a GET is (:meth:`request`); once the events stream, a
        broken connection ends the watch with a ``TransportError``, and the caller resumes it
        from the last resourceVersion it saw.
        """
        path = resource.path(Scope.of(scope).namespace)
        async for line in self.watch_lines(
            resource,
            scope,
            resource_version=resource_version,
            timeout_seconds=timeout_seconds,
            inactivity_timeout=inactivity_timeout,
            allow_bookmarks=allow_bookmarks,
            send_initial_events=send_initial_events,
            metadata_only=metadata_only,
        ):
            yield decode_event(line, path)

    async def watch_lines(
        self,
        resource: Resource,
        scope: Scope | str | None = None,
        *,
        resource_version: str | None = None,
        timeout_seconds: int | None = 300,
        inactivity_timeout: float | None = 90.0,
        allow_bookmarks: bool = True,
        send_initial_events: bool = False,
        metadata_only: bool = False,
    ) -> AsyncIterator[bytes]:
        """:meth:`watch`, with each event as the line of JSON the API server sent, undecoded
        (:func:`decode_event` decodes one): for a caller that decodes some events only in part,
        such as an informer's lazy list (:attr:`~crewlet_operator.cache.Compact.lazy_lists`).
        With ``metadata_only``, each event's object is its metadata alone
        (``PartialObjectMetadata``, :data:`METADATA_ACCEPT`)."""
        scope = Scope.of(scope)
        query: dict[str, QueryValue] = {
            "watch": True,
            "allowWatchBookmarks": allow_bookmarks or send_initial_events or None,
            "sendInitialEvents": send_initial_events or None,
            "resourceVersionMatch": "NotOlderThan" if send_initial_events else None,
            "resourceVersion": resource_version,
            "labelSelector": scope.label_selector,
            "fieldSelector": scope.field_selector,
            "timeoutSeconds": timeout_seconds,
        }
        path = resource.path(scope.namespace)
        opening = functools.partial(
            self._open_watch,
            path,
            _query(query),
            METADATA_ACCEPT if metadata_only else "application/json",
            aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=inactivity_timeout),
        )
        retrying = self.retries.retrying("WATCH", functools.partial(self._count_retry, "WATCH"))
        response: aiohttp.ClientResponse = await retrying(opening)
        try:
            async with response:
                async for line in _lines(response.content):
                    yield line
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise TransportError(f"WATCH {path}: {exc!r}") from exc

    async def _open_watch(
        self, path: str, query: dict[str, str], accept: str, timeout: aiohttp.ClientTimeout
    ) -> aiohttp.ClientResponse:
        """One attempt to open a watch: its response, about to stream the events."""
        headers = await self._headers("application/json", accept)
        started = time.monotonic()
        try:
            response = await self._session.request(
                "GET",
                self.host + path,
                params=query,
                headers=headers,
                proxy=self._proxy,
                proxy_auth=self._proxy_auth,
                timeout=timeout,
            )
            self._observe("WATCH", str(response.status), started)
            if response.status < 400:
                return response
            async with response:
                payload = await response.read()
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise TransportError(f"WATCH {path}: {exc!r}") from exc
        decoded = _decode(payload)
        raise api_error(
            response.status,
            decoded if isinstance(decoded, dict) else None,
            method="WATCH",
            path=path,
            retry_after=retry_after_seconds(response.headers.get("Retry-After")),
        )

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
        meta = desired["metadata"]
        if observed is None:
            try:
                return await self.apply(
                    resource,
                    _with_metadata(desired, resourceVersion=NO_OBJECT_VERSION),
                    field_manager=manager,
                    force=force,
                    dry_run=dry_run,
                )
            except ConflictError:
                observed = await self.get_or_none(resource, meta["name"], meta.get("namespace"))
                if observed is None:
                    raise  # held a moment ago and gone now: the caller looks again
        if not is_ours(desired, observed, manager):
            raise NotOwnedError(_not_ours(resource, desired, observed, manager), observed)
        held = (observed.get("metadata") or {}).get("uid")
        try:
            return await self.apply(
                resource,
                _with_metadata(desired, uid=held) if held else desired,
                field_manager=manager,
                force=force,
                dry_run=dry_run,
            )
        except InvalidError as refused:
            if not _refused_uid(refused):
                raise
            raise ConflictError(
                409,
                {
                    "reason": "Conflict",
                    "message": f"{resource.kind} {meta.get('namespace') or ''}/{meta['name']} "
                    f"is no longer the object of uid {held}: read it again",
                },
                method=refused.method,
                path=refused.path,
            ) from refused

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
        if (
            observed is not None
            and not apply_would_change(desired, observed, manager, subresource)
            and (adopt or subresource or is_ours(desired, observed, manager))
        ):
            return None
        if adopt or subresource:
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

    # -- discovery -----------------------------------------------------------------------------
    async def server_version(self) -> Object:
        """The API server's ``/version`` (``gitVersion``, ``major``, ``minor``, ...)."""
        version: Object = await self.request("GET", "/version")
        return version

    async def _group_version(self, api_version: str) -> dict[str, Resource]:
        cached = self._discovery.get(api_version)
        if cached is not None:
            return cached
        group, _, version = api_version.rpartition("/")
        path = f"/apis/{api_version}" if group else f"/api/{version}"
        try:
            listing: Object = await self.request("GET", path)
        except NotFoundError:
            return {}
        kinds = {
            r["kind"]: Resource(group, version, r["kind"], r["name"], bool(r.get("namespaced")))
            for r in listing.get("resources", [])
            if "/" not in r["name"]
        }
        self._discovery[api_version] = kinds
        return kinds

    async def discover(self, api_version: str, kind: str) -> Resource:
        """The :class:`Resource` the server serves for ``api_version``/``kind``.

        Raises :class:`~crewlet_operator.errors.NotServedError` when it is not served.
        """
        resource = (await self._group_version(api_version)).get(kind)
        if resource is None:
            raise NotServedError(f"{kind} in {api_version} is not served by {self.host}")
        return resource

    async def is_served(self, api_version: str, kind: str | None = None) -> bool:
        """Whether the group/version (and the kind, if given) is served."""
        kinds = await self._group_version(api_version)
        return bool(kinds) and (kind is None or kind in kinds)

    def forget_discovery(self) -> None:
        """Drop cached discovery (after CRDs are installed or removed)."""
        self._discovery.clear()


WRITE_METHODS = frozenset({"POST", "PUT", "PATCH"})
"""The methods whose body the API server validates (``fieldValidation``)."""


def _query(query: Mapping[str, QueryValue] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in (query or {}).items():
        if value is None or value is False:
            continue
        out[key] = "true" if value is True else str(value)
    return out


def _decode(payload: bytes) -> Any:
    if not payload:
        return None
    try:
        return orjson.loads(payload)
    except ValueError:
        return {"message": payload[:1024].decode(errors="replace")}


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


def _with_metadata(obj: Object, **fields: str) -> Object:
    """A shallow copy of ``obj`` with ``fields`` set in its metadata (the caller's is kept)."""
    return {**obj, "metadata": {**obj["metadata"], **fields}}


def _refused_uid(error: InvalidError) -> bool:
    """Whether the API server refused a write for its ``metadata.uid`` (an apply that named the
    uid of an object since replaced by another of the same name)."""
    causes = error.details.get("causes") or []
    return any(c.get("field") == "metadata.uid" for c in causes) or (
        "metadata.uid" in error.message and "field is immutable" in error.message
    )


def _with_type(resource: Resource, obj: Object) -> Object:
    if obj.get("apiVersion") and obj.get("kind"):
        return obj
    return {"apiVersion": resource.api_version, "kind": resource.kind, **obj}


def _tls_context(configuration: Configuration) -> ssl.SSLContext:
    """The TLS context the configuration describes: its CA, client certificate, verification."""
    context = ssl.create_default_context(cafile=configuration.ssl_ca_cert)
    if configuration.cert_file:
        context.load_cert_chain(configuration.cert_file, keyfile=configuration.key_file)
    if not configuration.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if configuration.disable_strict_ssl_verification:
        context.verify_flags &= ~ssl.VERIFY_X509_STRICT
    return context


def _session(configuration: Configuration) -> aiohttp.ClientSession:
    """One connection pool to the API server, without ``trust_env``: that reads ~/.netrc and
    the proxy variables on two worker threads for every request, a large share of the client's
    CPU in a burst of writes. The proxy is resolved once instead (:func:`_proxy`)."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(
            limit=configuration.connection_pool_maxsize, ssl=_tls_context(configuration)
        ),
        trust_env=False,
        read_bufsize=2**21,  # one watch event may be ~1.5 MiB (etcd's request cap)
    )


def _proxy(configuration: Configuration, host: str) -> tuple[URL | None, aiohttp.BasicAuth | None]:
    """The kubeconfig's ``proxy-url``, else ``HTTPS_PROXY``/``NO_PROXY`` for the API server's
    host, as client-go's ``http.ProxyFromEnvironment`` decides: once, when the client is made."""
    if configuration.proxy:
        return URL(configuration.proxy), None
    try:
        return aiohttp.helpers.get_env_proxy_for_url(URL(host))
    except LookupError:
        return None, None


def _configuration_from_rest(config: RestConfig) -> Configuration:
    configuration = Configuration(host=config.host)
    if config.ca_file is not None:
        configuration.ssl_ca_cert = str(config.ca_file)
    if config.cert_file is not None and config.key_file is not None:
        configuration.cert_file = str(config.cert_file)
        configuration.key_file = str(config.key_file)
    configuration.verify_ssl = not config.insecure_skip_tls_verify
    if config.bearer_token():
        configuration.api_key_prefix["BearerToken"] = "Bearer"
        configuration.api_key["BearerToken"] = config.bearer_token()

        def refresh(conf: Configuration) -> None:  # a token file rotates: re-read it
            conf.api_key["BearerToken"] = config.bearer_token()

        if config.token_file is not None:
            configuration.refresh_api_key_hook = refresh
    return configuration


async def _lines(stream: aiohttp.StreamReader) -> AsyncIterator[bytes]:
    """The non-blank lines of ``stream``, split from whatever chunks arrive: a streamed list of
    thousands of objects comes many to a chunk, and reading it line by line would await the
    reader once per object.

    Only lines that ended: the API server ends every event with a newline, so a last line
    without one was cut short (an informer's lazy list keeps a line's object as it came,
    :mod:`crewlet_operator.cache.listing`); the watch is over either way."""
    held: list[bytes] = []  # the start of a line that has not ended yet
    async for chunk in stream.iter_any():
        if b"\n" not in chunk:
            held.append(chunk)
            continue
        text = chunk
        if held:
            held.append(chunk)
            text, held = b"".join(held), []
        *complete, rest = text.split(b"\n")
        for line in complete:
            if line.strip():
                yield line
        if rest:
            held.append(rest)
