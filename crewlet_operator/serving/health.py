"""The health-probe server: ``/healthz`` and ``/readyz`` with named checks."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable

import structlog
from aiohttp import web

from crewlet_operator.errors import HealthCheckFailed
from crewlet_operator.serving.server import Server

__all__ = ["HealthCheck", "HealthCheckFailed", "HealthServer"]

log = structlog.get_logger("crewlet_operator.serving")

HealthCheck = Callable[[], bool | Awaitable[bool]]
"""A health or readiness check: it passes by returning true, fails by returning false or raising
(:class:`HealthCheckFailed` to say why in the endpoint's answer)."""


WITHHELD = "reason withheld"


def _ping() -> bool:
    return True


class HealthServer(Server):
    """``/healthz`` and ``/readyz`` with named checks, answered the way Kubernetes does.

    Each endpoint runs all of its checks (concurrently) on every request: 200 ``ok`` when every
    check passes, 500 listing each check otherwise. ``?verbose`` lists them on success too::

        [+]ping ok
        [-]informers-synced failed: reason withheld
        readyz check failed

    The reason is withheld because the endpoint is unauthenticated; it is logged instead, unless
    the check raised :class:`HealthCheckFailed`, whose message is meant for the answer. A
    ``ping`` check, which always passes, is registered on both endpoints.

    :param bind_address: ``host:port`` (``":8081"`` = every interface), or ``"0"`` to disable.
    :param check_timeout: Seconds an async check may take before it counts as failed, so a hung
        check cannot pile up a coroutine per probe. Synchronous checks must not block.
    """

    def __init__(self, bind_address: str = ":8081", *, check_timeout: float = 10.0) -> None:
        super().__init__(bind_address)
        self.check_timeout = check_timeout
        self._checks: dict[str, dict[str, HealthCheck]] = {
            "healthz": {"ping": _ping},
            "readyz": {"ping": _ping},
        }

    def add_healthz_check(self, name: str, check: HealthCheck) -> None:
        """Register a liveness check; the kubelet restarts the container while it fails.

        :raises ValueError: when a check of that name is already registered.
        """
        self._add("healthz", name, check)

    def add_readyz_check(self, name: str, check: HealthCheck) -> None:
        """Register a readiness check; the pod receives no Service traffic while it fails.

        :raises ValueError: when a check of that name is already registered.
        """
        self._add("readyz", name, check)

    def _add(self, endpoint: str, name: str, check: HealthCheck) -> None:
        checks = self._checks[endpoint]
        if name in checks:
            raise ValueError(f"{endpoint} check {name!r} is already registered")
        checks[name] = check

    def _app(self) -> web.Application:
        app = web.Application()
        for endpoint in self._checks:
            app.router.add_get(f"/{endpoint}", self._handler(endpoint))
        return app

    def _handler(self, endpoint: str) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def handle(request: web.Request) -> web.Response:
            checks = list(self._checks[endpoint].items())
            verdicts = await asyncio.gather(*(self._run(endpoint, n, c) for n, c in checks))
            failed = [name for (name, _), v in zip(checks, verdicts, strict=True) if v is not None]
            if not failed and "verbose" not in request.query:
                body = "ok"
            else:
                lines = [
                    f"[+]{name} ok" if verdict is None else f"[-]{name} failed: {verdict}"
                    for (name, _), verdict in zip(checks, verdicts, strict=True)
                ]
                lines.append(f"{endpoint} check {'failed' if failed else 'passed'}")
                body = "\n".join(lines) + "\n"
            if failed:
                log.info(f"{endpoint} check failed", failed=failed)
            return web.Response(
                status=500 if failed else 200,
                text=body,
                headers={"X-Content-Type-Options": "nosniff"},
            )

        return handle

    async def _run(self, endpoint: str, name: str, check: HealthCheck) -> str | None:
        """None when the check passes, else what the answer says of it."""
        try:
            async with asyncio.timeout(self.check_timeout):
                result = check()
                if inspect.isawaitable(result):
                    result = await result
        except HealthCheckFailed as failed:
            return " ".join(str(failed).split())  # one line of the answer
        except Exception as exc:
            log.debug(f"{endpoint} check raised", check=name, error=repr(exc))
            return WITHHELD
        return None if result else WITHHELD
