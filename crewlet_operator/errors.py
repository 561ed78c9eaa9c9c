"""The library's errors, as one hierarchy (httpx style).

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
    ├── NotServedError                the API server does not serve a group/version/kind
    └── TerminalError                 raised by a reconciler: do not retry
"""

from __future__ import annotations

from typing import Any


class CrewletError(Exception):
    """Base of every error the library raises."""


class ApiError(CrewletError):
    """The API server refused a request. ``status`` is the HTTP code, ``body`` the Status object."""

    def __init__(
        self, status: int, body: dict[str, Any] | None = None, *, method: str = "", path: str = ""
    ) -> None:
        self.status = status
        self.body = body or {}
        self.reason: str = self.body.get("reason", "")
        self.message: str = self.body.get("message", "")
        self.method = method
        self.path = path
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
    """429: throttled by API Priority and Fairness; retry later."""


class ServerError(ApiError):
    """5xx: the server failed; retry later."""


class TransportError(CrewletError):
    """The API server could not be reached, or a response did not arrive in time."""


class NoInformerError(CrewletError):
    """A cached read of a kind with no informer.

    Unlike controller-runtime's default, the cache never starts a cluster-wide informer behind
    a stray read (the commonest cause of operator OOMs): declare the kind up front instead.
    """


class NotServedError(CrewletError):
    """The API server does not serve the requested group, version or kind."""


class TerminalError(CrewletError):
    """Raised from a reconciler when retrying cannot help; the request is not requeued."""


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
    status: int, body: dict[str, Any] | None, *, method: str = "", path: str = ""
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
    return cls(status, body, method=method, path=path)
