"""What the health and metrics servers share: a Go-style bind address and a listener's life cycle
on an aiohttp runner."""

from __future__ import annotations

import ssl

import structlog
from aiohttp import web

__all__ = ["SHUTDOWN_TIMEOUT", "Server", "parse_bind_address"]

log = structlog.get_logger("crewlet_operator.serving")

SHUTDOWN_TIMEOUT = 5.0
"""Seconds :meth:`Server.stop` waits for requests in flight; a scrape or a probe takes
milliseconds."""


def parse_bind_address(address: str) -> tuple[str, int] | None:
    """``(host, port)`` for a Go-style bind address, or None for ``"0"`` (disabled).

    ``":8081"`` listens on every IPv4 interface, ``"127.0.0.1:0"`` on an ephemeral loopback port,
    ``"[::1]:8081"`` on IPv6 loopback.

    :raises ValueError: when the address is none of these.
    """
    if address == "0":
        return None
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"bind address {address!r} is not host:port, :port or 0")
    host = host.removeprefix("[").removesuffix("]")
    return host or "0.0.0.0", int(port)


class Server:
    """A listener on a bind address, serving the application a subclass builds in :meth:`_app`
    (over TLS when :meth:`_ssl_context` gives a context).

    :param bind_address: ``host:port`` (``":8081"`` = every interface), or ``"0"`` to disable.
    """

    def __init__(self, bind_address: str) -> None:
        self.bind_address = bind_address
        self._listen = parse_bind_address(bind_address)
        self._runner: web.AppRunner | None = None
        self._port: int | None = None

    @property
    def port(self) -> int | None:
        """The port listened on while started (the one chosen for port 0); None otherwise."""
        return self._port

    def _app(self) -> web.Application:
        raise NotImplementedError

    def _ssl_context(self) -> ssl.SSLContext | None:
        return None

    async def start(self) -> None:
        """Listen on the bind address; a no-op when disabled (``"0"``) or already started."""
        if self._listen is None or self._runner is not None:
            return
        host, port = self._listen
        # No access log: the kubelet probes every few seconds and Prometheus scrapes as often.
        runner = web.AppRunner(self._app(), access_log=None, shutdown_timeout=SHUTDOWN_TIMEOUT)
        await runner.setup()
        try:
            await web.TCPSite(runner, host, port, ssl_context=self._ssl_context()).start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self._port = int(runner.addresses[0][1])
        log.info("serving", server=type(self).__name__, host=host, port=self._port)

    async def stop(self) -> None:
        """Stop listening, letting requests in flight finish (up to a few seconds)."""
        if self._runner is None:
            return
        runner, self._runner, self._port = self._runner, None, None
        await runner.cleanup()
