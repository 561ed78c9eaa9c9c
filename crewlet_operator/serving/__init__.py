"""The manager's HTTP endpoints: health probes and metrics, as controller-runtime serves them.

:class:`HealthServer` (:mod:`.health`)
    ``/healthz`` and ``/readyz`` for the kubelet's liveness and readiness probes (plain HTTP); a
    check that raises :class:`HealthCheckFailed` says why it failed.
:class:`MetricsServer` (:mod:`.metrics`)
    ``/metrics`` for Prometheus. With ``secure=True`` (the default) it is HTTPS and every
    request is authenticated with a TokenReview and authorised with a SubjectAccessReview, like
    controller-runtime's ``filters.WithAuthenticationAndAuthorization``: only identities that
    RBAC allows to ``get`` the non-resource URL ``/metrics`` can read it::

        rules:
          - nonResourceURLs: ["/metrics"]
            verbs: ["get"]

:class:`DelegatingAuth` (:mod:`.auth`)
    That authentication and authorisation, with their caches, as an aiohttp middleware.
:func:`self_signed_certificate` (:mod:`.certificates`)
    The certificate a secure server makes itself when no ``cert_dir`` supplies one.

Both servers are started with ``await server.start()`` and stopped with ``await server.stop()``
(:mod:`.server`); a bind address of ``"0"`` disables a server.
"""

from crewlet_operator.serving.auth import DelegatingAuth, ReviewClient, TTLCache, UserInfo
from crewlet_operator.serving.certificates import CERT_POLL_INTERVAL, self_signed_certificate
from crewlet_operator.serving.health import HealthCheck, HealthCheckFailed, HealthServer
from crewlet_operator.serving.metrics import MetricsServer
from crewlet_operator.serving.server import SHUTDOWN_TIMEOUT, parse_bind_address

__all__ = [
    "CERT_POLL_INTERVAL",
    "SHUTDOWN_TIMEOUT",
    "DelegatingAuth",
    "HealthCheck",
    "HealthCheckFailed",
    "HealthServer",
    "MetricsServer",
    "ReviewClient",
    "TTLCache",
    "UserInfo",
    "parse_bind_address",
    "self_signed_certificate",
]
