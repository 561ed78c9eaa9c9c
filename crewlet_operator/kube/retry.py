"""The client's retry policy: client-go's (``rest/request.go``, ``rest/with_retry.go``), stated
with tenacity.

What the client retries, in one sentence (the client's docstrings and the library guide link
here): a request the API server asked to have sent again (a 429, or a 5xx with ``Retry-After``,
after that wait) and a read whose connection broke (after a second), up to
:attr:`RetryPolicy.max_retries` times; anything else, and whatever still fails after the last
retry, reaches the caller, whose own backoff (a reconcile's, an informer's) takes over.

In detail, one request is tried again when, and only when:

- the API server answered 429, or any 5xx, with a ``Retry-After`` header of whole seconds: it
  asked to be asked again, and is, after those seconds (capped at
  :attr:`RetryPolicy.max_wait`), whatever the verb. A 429 never reached a handler (API Priority
  and Fairness, or the max-in-flight limit, turned it away first), so even a create is safe to
  send again; a 5xx may have (a 504 timeout), and is sent again all the same, as client-go
  does: the server asked for it;
- a read (a GET, or the opening of a watch) lost its connection: reset, closed by the server, or
  cut short. It is sent again after a second (client-go's stand-in ``Retry-After``). A write is
  not: the server may have acted on it, and a second POST is not the first.

Anything else reaches the caller at once: a refused connection (no API server there, which
client-go does not retry either), a timeout, a TLS failure, any other status, and a
cancellation, which is never retried. After :attr:`RetryPolicy.max_retries` retries the last
error reaches the caller as it is. A watch that is already streaming is never retried here: its
caller resumes it from the last resourceVersion it saw (an informer does).
"""

from __future__ import annotations

import asyncio
import errno
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final, TypeVar

import aiohttp
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
)

from crewlet_operator.errors import ApiError, TransportError

T = TypeVar("T")

DEFAULT_MAX_RETRIES: Final = 10
"""client-go's ``maxRetries``: a request is sent at most eleven times."""
DEFAULT_MAX_WAIT: Final = 10.0
"""The longest wait a ``Retry-After`` gets, in seconds. The API server asks for a second or a
few (API Priority and Fairness, the max-in-flight limit, a shutdown); client-go honours any
value, so a proxy that answers ``Retry-After: 3600`` would park a reconcile for an hour."""
LOST_CONNECTION_WAIT: Final = 1.0
"""The wait before a read whose connection was lost is sent again: client-go's stand-in
``Retry-After: 1``."""
READS: Final = frozenset({"GET", "WATCH"})
"""The verbs sent again after a lost connection (``WATCH``: a watch's opening request)."""


@dataclass(frozen=True)
class RetryPolicy:
    """How often, and how long after each failure, a
    :class:`~crewlet_operator.kube.client.Client` sends a request again (the module says which
    failures it retries).

    ``max_retries``: retries after the first attempt (client-go's default, 10); 0 retries
    nothing, and every 429 reaches the caller. ``max_wait``: the cap, in seconds, on the wait
    a ``Retry-After`` asks for.
    """

    max_retries: int = DEFAULT_MAX_RETRIES
    max_wait: float = DEFAULT_MAX_WAIT

    def __post_init__(self) -> None:
        if self.max_retries < 0 or self.max_wait < 0:
            raise ValueError(f"a retry policy counts and waits forward, not {self}")

    def retrying(
        self, method: str, on_retry: Callable[[str], None], attempts: int | None = None
    ) -> AsyncRetrying:
        """The tenacity policy for one request of ``method``, at most ``attempts`` attempts (by
        default the first and :attr:`max_retries` more); ``on_retry`` is told the code of each
        answer that is retried (``<error>`` for a lost connection), before its wait."""

        def wait(state: RetryCallState) -> float:
            return min(self.max_wait, retry_wait(method, _error(state)) or 0.0)

        return AsyncRetrying(
            retry=retry_if_exception(lambda error: retry_wait(method, error) is not None),
            wait=wait,
            stop=stop_after_attempt(self.max_retries + 1 if attempts is None else attempts),
            before_sleep=lambda state: on_retry(retry_code(_error(state))),
            reraise=True,
        )

    async def call(
        self, method: str, attempt: Callable[[], Awaitable[T]], on_retry: Callable[[str], None]
    ) -> T:
        """``attempt()``, a request of ``method``, sent again as this policy says (``on_retry``
        as in :meth:`retrying`).

        The first attempt goes out directly, and the retries through :meth:`retrying`:
        tenacity's state machine costs about 37 µs a call, a tenth of the operator's CPU in a
        burst (bench/NOTES.md, "Tracing, and the retry policy's first attempt"), where nearly
        every request is answered at the first attempt. The attempts, the waits and what is
        retried are the same either way.
        """
        try:
            return await attempt()
        except Exception as error:  # a cancellation is no Exception, and is never retried
            wait = retry_wait(method, error)
            if wait is None or self.max_retries == 0:
                raise
            on_retry(retry_code(error))
        await asyncio.sleep(min(self.max_wait, wait))
        return await self.retrying(method, on_retry, attempts=self.max_retries)(attempt)


def _error(state: RetryCallState) -> BaseException | None:
    return state.outcome.exception() if state.outcome is not None else None


def retry_after_seconds(value: str | None) -> int | None:
    """A ``Retry-After`` header's seconds, or None when there is none. As in client-go, only
    whole seconds count: an HTTP date (which the API server never sends) is no wait."""
    if value is None:
        return None
    value = value.strip()
    return int(value) if value.isascii() and value.isdigit() else None


def retry_wait(method: str, error: BaseException | None) -> float | None:
    """Seconds to wait before sending a request of ``method`` that failed with ``error`` again
    (before :attr:`RetryPolicy.max_wait`), or None when it is not sent again."""
    if isinstance(error, ApiError):
        asked = error.status == 429 or error.status >= 500
        return float(error.retry_after) if asked and error.retry_after is not None else None
    if isinstance(error, TransportError) and method in READS and connection_lost(error.__cause__):
        return LOST_CONNECTION_WAIT
    return None


def retry_code(error: BaseException | None) -> str:
    """The ``code`` label of a retry of ``error``: its status, or ``<error>`` (no answer)."""
    return str(error.status) if isinstance(error, ApiError) else "<error>"


def connection_lost(error: BaseException | None) -> bool:
    """Whether ``error`` says that a connection broke under a request (client-go's
    ``IsConnectionReset`` and ``IsProbableEOF``): reset by the peer, closed by the server before
    it answered (a keep-alive connection it had dropped), or an answer cut short. A refused
    connection is not one: nothing was ever connected."""
    lost = (
        aiohttp.ServerDisconnectedError,
        aiohttp.ClientPayloadError,
        ConnectionResetError,
        BrokenPipeError,
    )
    if isinstance(error, lost):
        return True
    return isinstance(error, OSError) and error.errno in (errno.ECONNRESET, errno.EPIPE)
