"""Every error the library raises, as one hierarchy rooted at :class:`CrewletError` (httpx style).

::

    CrewletError
    ├── ApiError                      the API server answered with a failure Status
    │   ├── BadRequestError           400
    │   ├── UnauthorizedError         401
    │   ├── ForbiddenError            403
    │   ├── NotFoundError             404
    │   ├── ConflictError             409 (a stale resourceVersion, a failed precondition)
    │   │   └── AlreadyExistsError    409 with reason AlreadyExists
    │   ├── GoneError                 410 (a watch's resourceVersion was compacted)
    │   ├── InvalidError              422 (validation, admission policy or CEL rule refused it)
    │   ├── TooManyRequestsError      429
    │   └── ServerError               5xx
    ├── TransportError                no answer: connection refused, reset, timed out
    ├── NoInformerError               a cached read of a kind the cache was not told to watch
    ├── MetadataOnlyError             a cached read of an object known by its metadata alone
    ├── NotServedError                the API server does not serve a group/version/kind
    ├── TerminalError                 raised by a reconciler: do not retry
    ├── LeadershipLostError           the lease was not renewed in time: exit
    ├── HealthCheckFailed             raised by a health check: it fails, saying why
    ├── QueueShutDown                 a shut-down work queue has nothing left to hand out
    ├── AlreadyOwnedError             another object already controls this one (ValueError)
    ├── NotOwnedError                 an object of the wanted name exists and is not ours
    ├── SchemaError                   a model has no structural CRD schema (ValueError)
    ├── BinaryNotFoundError           envtest: a control-plane binary is missing
    │                                 (FileNotFoundError)
    ├── ProcessFailedError            envtest: a control-plane process failed (RuntimeError)
    └── InstallError                  envtest: installing the binaries failed (RuntimeError)
        └── GoUnavailableError        Go, which builds them, is missing or too old

What to catch for what:

- :class:`CrewletError`: anything the library raised. A reconciler that lets anything else
  escape has a bug, and the controller counts it as a panic
  (``controller_runtime_reconcile_panics_total``).
- :class:`ApiError`: the API server refused a request; ``status``, ``reason``, ``message`` and
  ``details`` say why. Catch the subclass for the one status a caller handles: a missing object
  (:class:`NotFoundError`), a lost race (:class:`ConflictError`: read again and retry, or
  :class:`AlreadyExistsError` on a create), a refused object (:class:`InvalidError`; its
  ``details["causes"]`` name the fields).
- :class:`TransportError`: the request may or may not have happened; retry later (an informer
  and the controller's backoff do). A read whose connection was reset has been retried by the
  client already; a write is not, since the server may have acted on it.
- :class:`NoInformerError` and :class:`NotServedError`: a kind the cache does not hold, or the
  cluster does not serve: a setup mistake, not a transient failure.
- :class:`TerminalError`: raise it from a reconciler for a failure no retry can fix.
- :class:`LeadershipLostError`: from :meth:`~crewlet_operator.manager.Manager.run`; let the
  process exit so it restarts clean.
- :class:`HealthCheckFailed`: raise it from a ``/healthz`` or ``/readyz`` check to fail with a
  reason the endpoint shows (any other failure's reason is withheld: the endpoints are
  unauthenticated).
- :class:`QueueShutDown`: a worker's signal to return, from
  :meth:`~crewlet_operator.workqueue.FairQueue.get`.
- :class:`AlreadyOwnedError` and :class:`NotOwnedError`: a child's name is taken by an object
  that another controller, or nobody, owns: a conflict for a human to settle.
- The errors the tree marks with a standard exception (:class:`ValueError`,
  :class:`FileNotFoundError`, :class:`RuntimeError`) are also that exception, so code that
  catches it keeps working.

Each error is importable from here, and where it is raised (``crewlet_operator.owners``,
``crewlet_operator.workqueue``, ``crewlet_operator.manager``, ...).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from crewlet_operator.objects import object_key

__all__ = [
    "AlreadyExistsError",
    "AlreadyOwnedError",
    "ApiError",
    "BadRequestError",
    "BinaryNotFoundError",
    "ConflictError",
    "CrewletError",
    "ForbiddenError",
    "GoUnavailableError",
    "GoneError",
    "HealthCheckFailed",
    "InstallError",
    "InvalidError",
    "LeadershipLostError",
    "MetadataOnlyError",
    "NoInformerError",
    "NotFoundError",
    "NotOwnedError",
    "NotServedError",
    "ProcessFailedError",
    "QueueShutDown",
    "SchemaError",
    "ServerError",
    "TerminalError",
    "TooManyRequestsError",
    "TransportError",
    "UnauthorizedError",
]


class CrewletError(Exception):
    """Base of every error the library raises."""


class ApiError(CrewletError):
    """The API server refused a request. ``status`` is the HTTP code, ``body`` the Status object,
    ``retry_after`` the seconds its ``Retry-After`` header asked the client to wait before trying
    again (None without one)."""

    def __init__(
        self,
        status: int,
        body: dict[str, Any] | None = None,
        *,
        method: str = "",
        path: str = "",
        retry_after: int | None = None,
    ) -> None:
        self.status = status
        self.body = body or {}
        self.reason: str = self.body.get("reason", "")
        self.message: str = self.body.get("message", "")
        self.method = method
        self.path = path
        self.retry_after = retry_after
        super().__init__(f"{method} {path}: {status} {self.reason}: {self.message}".strip())

    @property
    def details(self) -> dict[str, Any]:
        """The Status's ``details`` (for 422: ``causes`` with the offending fields)."""
        details: dict[str, Any] = self.body.get("details") or {}
        return details


class BadRequestError(ApiError):
    """400: the request is malformed."""


class UnauthorizedError(ApiError):
    """401: no valid credentials."""


class ForbiddenError(ApiError):
    """403: authenticated, but RBAC does not allow it."""


class NotFoundError(ApiError):
    """404: the object (or the kind) does not exist."""


class ConflictError(ApiError):
    """409: a resourceVersion or precondition did not match."""


class AlreadyExistsError(ConflictError):
    """409 AlreadyExists: a create of a name that is taken."""


class GoneError(ApiError):
    """410: the resourceVersion is too old (compacted); relist."""


class InvalidError(ApiError):
    """422: the object failed validation (schema, CEL rule or admission policy)."""


class TooManyRequestsError(ApiError):
    """429: throttled by API Priority and Fairness; retry later. The client has retried it
    already, after each ``Retry-After``, as often as its
    :class:`~crewlet_operator.kube.retry.RetryPolicy` allows."""


class ServerError(ApiError):
    """5xx: the server failed; retry later. One that carried a ``Retry-After`` header has been
    retried by the client already, as a 429 is."""


class TransportError(CrewletError):
    """The API server could not be reached, or a response did not arrive in time."""


class NoInformerError(CrewletError):
    """A cached read of a kind with no informer.

    Unlike controller-runtime's default, the cache never starts a cluster-wide informer behind
    a stray read (the commonest cause of operator OOMs): declare the kind up front instead.
    """


class MetadataOnlyError(CrewletError):
    """A cached read of an object the cache knows by its metadata alone: an informer with
    ``metadata_first`` lists whole objects only after it has synced. Wait for
    :meth:`~crewlet_operator.cache.informer.Informer.wait_for_whole` before reading it."""


class NotServedError(CrewletError):
    """The API server does not serve the requested group, version or kind."""


class TerminalError(CrewletError):
    """Raised from a reconciler when retrying cannot help; the request is not requeued."""


class LeadershipLostError(CrewletError):
    """The lease could not be renewed, or a sharded replica's membership, slots or sharder
    loop failed (it can no longer tell what it holds): the process should exit."""


class HealthCheckFailed(CrewletError):
    """Raised by a health or readiness check to fail with a reason that the endpoint shows.

    The endpoints are unauthenticated, so a failing check's reason is withheld from the answer
    unless the check raises this: its message is then shown as written, so it must say only
    what anyone who can reach the port may read (a state, never a secret)::

        [-]one-leader-per-cluster failed: another install of this controller leads ...
    """


class QueueShutDown(CrewletError):  # named like asyncio.QueueShutDown (3.13)
    """Raised by :meth:`~crewlet_operator.workqueue.FairQueue.get` once the queue is shut
    down and empty."""


class AlreadyOwnedError(CrewletError, ValueError):
    """The object already has a controller, and it is not the owner being set."""

    def __init__(self, obj: Mapping[str, Any], controller: Mapping[str, Any]) -> None:
        self.object_key = object_key(obj)
        self.controller = dict(controller)
        super().__init__(
            f"{obj.get('kind', 'object')} {self.object_key} is already controlled by "
            f"{controller.get('kind')} {controller.get('name')} (uid {controller.get('uid')})"
        )


class NotOwnedError(CrewletError):
    """An object with the name a controller wanted exists and is not the controller's: nothing
    was written to it (:meth:`~crewlet_operator.kube.client.Client.apply_if_changed` with
    ``adopt=True`` takes it over). ``existing`` is the object as it was found, when it was
    read."""

    def __init__(self, message: str, existing: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.existing: dict[str, Any] | None = dict(existing) if existing is not None else None


class SchemaError(CrewletError, ValueError):
    """A model's JSON schema cannot be expressed as a structural CRD schema."""


class BinaryNotFoundError(CrewletError, FileNotFoundError):
    """A control-plane binary is missing: ``python -m crewlet_operator.envtest bins`` (``make
    bins`` in a checkout) installs it."""


class ProcessFailedError(CrewletError, RuntimeError):
    """A control-plane process exited early or did not become ready in time."""


class InstallError(CrewletError, RuntimeError):
    """A step of installing the control-plane binaries failed; the message says which."""


class GoUnavailableError(InstallError):
    """Go is not on PATH, or is older than
    :data:`~crewlet_operator.envtest.install.MINIMUM_GO`; the message says what to do."""


_BY_STATUS: dict[int, type[ApiError]] = {
    400: BadRequestError,
    401: UnauthorizedError,
    403: ForbiddenError,
    404: NotFoundError,
    409: ConflictError,
    410: GoneError,
    422: InvalidError,
    429: TooManyRequestsError,
}


def api_error(
    status: int,
    body: dict[str, Any] | None,
    *,
    method: str = "",
    path: str = "",
    retry_after: int | None = None,
) -> ApiError:
    """The most specific :class:`ApiError` for an HTTP status and Status body."""
    body = body or {}
    cls: type[ApiError]
    if status == 409 and body.get("reason") == "AlreadyExists":
        cls = AlreadyExistsError
    elif status >= 500:
        cls = ServerError
    else:
        cls = _BY_STATUS.get(status, ApiError)
    return cls(status, body, method=method, path=path, retry_after=retry_after)
