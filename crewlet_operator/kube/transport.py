"""The client's transport: one API server's connections, and requests sent over them.

A :class:`Transport` holds what every request shares: the connection pool (an aiohttp session
with its TLS context, the proxy resolved once), the headers (user agent, bearer token re-read
as it rotates, impersonation, compression), the retry policy
(:mod:`crewlet_operator.kube.retry`) and the ``rest_client_*`` metrics. It sends a request and
hands back the answer's body, or raises the :class:`~crewlet_operator.errors.ApiError` of its
status or a :class:`~crewlet_operator.errors.TransportError`; it knows no verb and no object.
:class:`~crewlet_operator.kube.client.Client` speaks the API over it, and so do its views
(:meth:`~crewlet_operator.kube.client.Client.with_field_manager`), which share one transport.
"""

from __future__ import annotations

import functools
import re
import ssl
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable, Mapping
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import orjson
import structlog
from multidict import CIMultiDict
from prometheus_client import Counter, Histogram
from yarl import URL

from crewlet_operator import metrics
from crewlet_operator.errors import CrewletError, TransportError, api_error
from crewlet_operator.kube._kubernetes_asyncio import Configuration
from crewlet_operator.kube.config import RestConfig
from crewlet_operator.kube.params import QueryValue
from crewlet_operator.kube.retry import RetryPolicy, retry_after_seconds
from crewlet_operator.tracing import answered, request_span

log = structlog.get_logger("crewlet_operator.kube.client")

JSON = "application/json"
DEFAULT_TIMEOUT = 30.0
"""Seconds for one attempt of an ordinary request; watches have their own (server timeout +
inactivity)."""
DEFAULT_RETRIES = RetryPolicy()
"""client-go's: up to 10 retries, each after the ``Retry-After`` the API server asked for
(capped at 10 s); :mod:`crewlet_operator.kube.retry` says which requests."""

_WARNING = re.compile(r'^\d{3} \S+ "((?:[^"\\]|\\.)*)"')
"""An RFC 7234 ``Warning`` header's code, agent and quoted text, as the API server writes it."""

Headers = list[tuple[str, str]]
"""Header name and value pairs, in order (a name may repeat)."""


class Transport:
    """Sends requests to one API server, each retried as :mod:`crewlet_operator.kube.retry`
    says.

    What the API server warns of in ``Warning`` headers (a deprecated API, a field it dropped
    because its schema does not know it) is logged at warning level, once per message per
    transport, as client-go's deduplicating warning handler does.
    """

    def __init__(
        self,
        config: RestConfig | Configuration,
        *,
        user_agent: str = "crewlet-operator",
        timeout: float = DEFAULT_TIMEOUT,
        compression: bool = True,
        retries: RetryPolicy = DEFAULT_RETRIES,
    ) -> None:
        """The keyword arguments are :class:`~crewlet_operator.kube.client.Client`'s."""
        self.timeout = timeout
        self.retries = retries
        self._made_of = (config, user_agent, compression)
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
        """The API server's URL (``https://host:port``)."""
        self._host_label = urlsplit(self.host).netloc
        self._series: dict[tuple[str, str], tuple[Counter, Histogram]] = {}
        self._user_agent = user_agent
        self._configuration = configuration
        self._pool: aiohttp.ClientSession | None = None
        self._proxy, self._proxy_auth = _proxy(configuration, self.host)

    def apart(self, *, timeout: float, retries: RetryPolicy) -> Transport:
        """A transport to the same API server with the same credentials and headers, over a
        connection pool of its own, with its own ``timeout`` and ``retries`` (close it apart)."""
        config, user_agent, compression = self._made_of
        return Transport(
            config, user_agent=user_agent, timeout=timeout, compression=compression, retries=retries
        )

    @property
    def _session(self) -> aiohttp.ClientSession:
        """The connection pool, made at the first request (in the event loop that sends it):
        a transport made apart for a manager that never runs costs nothing."""
        if self._pool is None:
            self._pool = _session(self._configuration)
        return self._pool

    async def close(self) -> None:
        """Close the connection pool."""
        if self._pool is not None:
            await self._pool.close()

    async def headers(self, content_type: str, accept: str = JSON) -> CIMultiDict[str]:
        """The headers of a request: its types, the user agent, the credentials as they are
        now, impersonation, and the configured extra headers."""
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
        content_type: str = JSON,
        timeout: float | None = None,
        fence: Callable[[], None] | None = None,
    ) -> Any:
        """:meth:`send`, with the answer decoded from JSON (None for an empty one)."""
        return _decode(
            await self.send(
                method,
                path,
                query=query,
                body=body,
                content_type=content_type,
                timeout=timeout,
                fence=fence,
            )
        )

    async def send(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, QueryValue] | None = None,
        body: Any = None,
        content_type: str = JSON,
        timeout: float | None = None,
        accept: str = JSON,
        fence: Callable[[], None] | None = None,
    ) -> bytes:
        """Send one request (``body`` as JSON) and return its answer's body, undecoded.

        Raises the most specific :class:`~crewlet_operator.errors.ApiError` for a failure
        status, and :class:`~crewlet_operator.errors.TransportError` when no answer arrives,
        once the retry policy has given up (:mod:`crewlet_operator.kube.retry`). ``fence`` is
        called just before each attempt goes out, after the last wait: what it raises is raised
        instead, and nothing is sent.
        """
        attempt = functools.partial(
            self._attempt,
            method,
            path,
            query=_query(query),
            data=orjson.dumps(body) if body is not None else None,
            content_type=content_type,
            timeout=timeout,
            accept=accept,
            fence=fence,
        )
        with request_span(method, path) as span:
            if span is None:
                return await self.retries.call(
                    method, attempt, functools.partial(self._count_retry, method)
                )
            retries = 0

            def retried(code: str) -> None:
                nonlocal retries
                retries += 1
                self._count_retry(method, code)

            try:
                return await self.retries.call(method, attempt, retried)
            finally:
                span.set_attribute("crewlet.retries", retries)

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
        fence: Callable[[], None] | None,
    ) -> bytes:
        """One attempt of :meth:`send`."""
        headers = await self.headers(content_type, accept)
        if fence is not None:
            fence()
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
                trace_request_ctx=fence,
            ) as response:
                payload = await response.read()
                status = response.status
                retry_after = retry_after_seconds(response.headers.get("Retry-After"))
                warnings = response.headers.getall("Warning", ())
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            self._observe(method, "<error>", started)
            if isinstance(exc.__cause__, CrewletError):  # the fence, raised as it was written
                raise exc.__cause__ from None
            raise TransportError(f"{method} {path}: {exc!r}") from exc
        self._observe(method, str(status), started)
        answered(status)
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

    async def stream(
        self,
        path: str,
        query: Mapping[str, QueryValue],
        *,
        accept: str = JSON,
        inactivity_timeout: float | None = None,
    ) -> AsyncGenerator[bytes, None]:
        """The lines of a streamed answer to a GET (a watch), each as it arrives.

        The opening request is retried as a ``WATCH`` (:mod:`crewlet_operator.kube.retry`);
        once the lines flow, a broken connection, or no byte for ``inactivity_timeout``
        seconds, raises :class:`~crewlet_operator.errors.TransportError`.
        """
        opening = functools.partial(
            self._open,
            path,
            _query(query),
            accept,
            aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=inactivity_timeout),
        )
        response = await self.retries.call(
            "WATCH", opening, functools.partial(self._count_retry, "WATCH")
        )
        try:
            async with response:
                async for line in _lines(response.content):
                    yield line
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise TransportError(f"WATCH {path}: {exc!r}") from exc

    async def _open(
        self, path: str, query: dict[str, str], accept: str, timeout: aiohttp.ClientTimeout
    ) -> aiohttp.ClientResponse:
        """One attempt to open a stream: its response, about to stream."""
        headers = await self.headers(JSON, accept)
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

    def _warn(self, method: str, path: str, headers: Iterable[str]) -> None:
        """Log each ``Warning`` header of an answer, once per message for this transport (and
        so for every client view that shares it)."""
        for header in headers:
            found = _WARNING.match(header)
            text = found.group(1).replace('\\"', '"') if found else header
            if text not in self._warned:
                self._warned.add(text)
                log.warning("the API server warns", warning=text, method=method, path=path)

    def _count_retry(self, verb: str, code: str) -> None:
        """Count a retry of a ``verb`` request after an answer of ``code``."""
        retries = metrics.REST_CLIENT_REQUEST_RETRIES
        retries.labels(code=code, verb=verb, host=self._host_label).inc()

    def _observe(self, method: str, code: str, started: float) -> None:
        # The labelled children, looked up once each: ``labels()`` validates and hashes its
        # arguments at every call, twice a request.
        found = self._series.get((method, code))
        if found is None:
            found = self._series[(method, code)] = (
                metrics.REST_CLIENT_REQUESTS.labels(
                    code=code, method=method, host=self._host_label
                ),
                metrics.REST_CLIENT_REQUEST_DURATION.labels(verb=method, host=self._host_label),
            )
        found[0].inc()
        found[1].observe(time.monotonic() - started)


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


async def _fence(session: aiohttp.ClientSession, context: SimpleNamespace, params: object) -> None:
    """Call a request's fence (its ``trace_request_ctx``) once it has a connection, and again
    just before its first bytes go out. aiohttp buffers a request's headers and writes them with
    its body from a task of its own, a turn of the event loop later: a request that waited for
    a free connection (the pool full of reconciles), or for that turn, while its process was
    frozen is fenced at the moment it would go out, not when it began to wait. What the fence
    raises aborts the request before anything is written, and the connection is let go."""
    fence = context.trace_request_ctx
    if callable(fence):
        fence()


def _fence_trace() -> aiohttp.TraceConfig:
    trace = aiohttp.TraceConfig()
    trace.on_connection_create_end.append(_fence)
    trace.on_connection_reuseconn.append(_fence)
    # Called before each chunk is written (the first carries the buffered headers).
    trace.on_request_chunk_sent.append(_fence)
    return trace


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
        trace_configs=[_fence_trace()],
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
