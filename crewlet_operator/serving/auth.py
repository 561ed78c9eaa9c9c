"""Delegated authentication and authorisation, as controller-runtime's
``filters.WithAuthenticationAndAuthorization``: a bearer token is authenticated by a TokenReview
and the request authorised by a SubjectAccessReview, both answered by the API server and cached.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import secrets
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

import structlog
from aiohttp import web

from crewlet_operator.kube.resources import SUBJECT_ACCESS_REVIEW, TOKEN_REVIEW, Resource

__all__ = ["DelegatingAuth", "ReviewClient", "TTLCache", "UserInfo"]

log = structlog.get_logger("crewlet_operator.serving")

V = TypeVar("V")


class ReviewClient(Protocol):
    """What :class:`DelegatingAuth` needs of a :class:`~crewlet_operator.kube.client.Client`."""

    async def create(self, resource: Resource, obj: dict[str, Any]) -> dict[str, Any]:
        """Create ``obj`` and return the server's answer."""
        ...


@dataclass(frozen=True)
class UserInfo:
    """An identity as a TokenReview reports it (and a SubjectAccessReview takes it)."""

    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


class TTLCache(Generic[V]):
    """A bounded map whose entries expire: each value lives for the TTL it was stored with.

    Least recently used entries are evicted beyond ``max_entries``, so clients sending random
    tokens cannot grow it without bound.

    :param clock: Monotonic seconds; injectable for tests.
    """

    def __init__(
        self, max_entries: int = 4096, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.max_entries = max_entries
        self._clock = clock
        self._entries: OrderedDict[str, tuple[float, V]] = OrderedDict()

    def __getitem__(self, key: str) -> V:
        """The live value for ``key``; :class:`KeyError` when absent or expired."""
        expires, value = self._entries[key]
        if self._clock() >= expires:
            del self._entries[key]
            raise KeyError(key)
        self._entries.move_to_end(key)
        return value

    def set(self, key: str, value: V, ttl: float) -> None:
        """Store ``value`` for ``ttl`` seconds."""
        self._entries[key] = (self._clock() + ttl, value)
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)


def _bearer_token(authorization: str) -> str | None:
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def _text(status: int, text: str) -> web.Response:
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return web.Response(status=status, text=text, headers=headers)


class DelegatingAuth:
    """Authentication by TokenReview and authorisation by SubjectAccessReview, cached.

    The answers are cached as controller-runtime caches them: a user a token authenticates for
    ``token_ttl`` (1 min), a rejected token for ``token_failure_ttl`` (10 s, so a scraper whose
    token was just created is not locked out for long), an allowed request for ``allow_ttl``
    (5 min) and a denied one for ``deny_ttl`` (30 s). A failed review (the API server did not
    answer) is not cached. Tokens are cache keys only as an HMAC-SHA256 under a key drawn at
    random per instance, so a memory dump does not give them away; neither tokens nor their
    digests are logged.

    :param client: Usually the manager's :class:`~crewlet_operator.kube.client.Client`; its
        identity needs ``create`` on ``tokenreviews`` and ``subjectaccessreviews`` (the
        ``system:auth-delegator`` ClusterRole).
    :param clock: Monotonic seconds, for the TTLs; injectable for tests.
    """

    def __init__(
        self,
        client: ReviewClient,
        *,
        token_ttl: float = 60.0,
        token_failure_ttl: float = 10.0,
        allow_ttl: float = 300.0,
        deny_ttl: float = 30.0,
        max_entries: int = 4096,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.token_ttl = token_ttl
        self.token_failure_ttl = token_failure_ttl
        self.allow_ttl = allow_ttl
        self.deny_ttl = deny_ttl
        self._hmac_key = secrets.token_bytes(32)
        self._tokens: TTLCache[UserInfo | None] = TTLCache(max_entries, clock)
        self._decisions: TTLCache[bool] = TTLCache(max_entries, clock)

    def _token_key(self, token: str) -> str:
        return hmac.new(self._hmac_key, token.encode(), hashlib.sha256).hexdigest()

    async def authenticate(self, token: str) -> UserInfo | None:
        """The user ``token`` belongs to, or None when the API server does not accept it.

        :raises Exception: whatever the client raises when the review itself fails.
        """
        key = self._token_key(token)
        with contextlib.suppress(KeyError):
            return self._tokens[key]
        review = await self.client.create(
            TOKEN_REVIEW,
            {
                "apiVersion": TOKEN_REVIEW.api_version,
                "kind": TOKEN_REVIEW.kind,
                "metadata": {},
                "spec": {"token": token},
            },
        )
        status = review.get("status") or {}
        user_info = status.get("user") or {}
        user: UserInfo | None = None
        if status.get("authenticated") and user_info.get("username"):
            user = UserInfo(
                username=user_info["username"],
                uid=user_info.get("uid", ""),
                groups=tuple(user_info.get("groups") or ()),
                extra={k: tuple(v) for k, v in (user_info.get("extra") or {}).items()},
            )
        self._tokens.set(key, user, self.token_ttl if user else self.token_failure_ttl)
        return user

    async def authorize(self, user: UserInfo, verb: str, path: str) -> bool:
        """Whether RBAC (or whatever authoriser the API server runs) lets ``user`` do this.

        :raises Exception: whatever the client raises when the review itself fails.
        """
        spec: dict[str, Any] = {
            "user": user.username,
            "groups": list(user.groups),
            "nonResourceAttributes": {"path": path, "verb": verb},
        }
        if user.uid:
            spec["uid"] = user.uid
        if user.extra:
            spec["extra"] = {k: list(v) for k, v in user.extra.items()}
        key = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()
        with contextlib.suppress(KeyError):
            return self._decisions[key]
        review = await self.client.create(
            SUBJECT_ACCESS_REVIEW,
            {
                "apiVersion": SUBJECT_ACCESS_REVIEW.api_version,
                "kind": SUBJECT_ACCESS_REVIEW.kind,
                "metadata": {},
                "spec": spec,
            },
        )
        allowed = bool((review.get("status") or {}).get("allowed"))
        self._decisions.set(key, allowed, self.allow_ttl if allowed else self.deny_ttl)
        return allowed

    @web.middleware
    async def middleware(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        """An aiohttp middleware: 401 unauthenticated, 403 unauthorised, else the handler.

        The verb is the lowercased HTTP method and the path the request's, as the API server
        itself authorises non-resource requests.
        """
        token = _bearer_token(request.headers.get("Authorization", ""))
        if token is None:
            return _text(401, "Unauthorized")
        try:
            user = await self.authenticate(token)
        except Exception as exc:
            log.warning("token review failed", error=str(exc))
            return _text(401, "Authentication failed")
        if user is None:
            log.debug("rejected an unauthenticated request", path=request.path)
            return _text(401, "Unauthorized")
        try:
            allowed = await self.authorize(user, request.method.lower(), request.path)
        except Exception as exc:
            log.warning("subject access review failed", user=user.username, error=str(exc))
            return _text(500, f"Authorization for user {user.username} failed")
        if not allowed:
            log.debug("denied a request", user=user.username, path=request.path)
            return _text(403, f"Authorization denied for user {user.username}")
        return await handler(request)
