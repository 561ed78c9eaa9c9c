"""Logging: JSON lines in a cluster, readable lines on a terminal, and never a secret.

Call :func:`configure_logging` once at start-up. The library's own structlog loggers and the
standard-library loggers of its dependencies (aiohttp, kubernetes_asyncio) then write through
one handler on stderr, in one format, at one level. Every line carries the context the
controller binds for a reconcile (``controller``, ``namespace``, ``name``, ``reconcileID``)::

    {"event": "reconcile failed; retrying with backoff", "controller": "crew", "namespace":
     "team-a", "name": "alpha", "reconcileID": "0b3c...", "level": "warning",
     "logger": "crewlet_operator.controller", "timestamp": "2026-01-02T03:04:05.678Z"}

:func:`redact_secrets` runs on every line, from structlog or the standard library, before it is
rendered.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Mapping
from typing import Any, TextIO

import structlog
from structlog.typing import EventDict, Processor, WrappedLogger

__all__ = ["HANDLER_NAME", "REDACTED", "configure_logging", "redact_secrets"]

HANDLER_NAME = "crewlet_operator"
"""The name of the root handler :func:`configure_logging` installs (and replaces when called
again)."""

REDACTED = "[redacted]"

# Keys whose values are credentials, wherever they appear (``token``, ``bearer_token``,
# ``Authorization``, ``client_secret``, ``api-key``...). Over-redacting a key that merely
# names a secret is the price of never printing one.
_SENSITIVE_KEY = re.compile(
    r"token|passw(or)?d|secret|authorization|api[-_]?key|private[-_]?key|credential|bearer",
    re.IGNORECASE,
)
# Credentials inside free text: an HTTP bearer credential, and a JWT (every ServiceAccount
# token is one), e.g. in an error message a dependency logs.
_SENSITIVE_TEXT = re.compile(
    r"(?P<bearer>\bbearer\s+)[\w.~+/=-]+|eyJ[\w-]*\.eyJ[\w-]*\.[\w-]*", re.IGNORECASE
)
_SECRET_FIELDS = frozenset({"data", "stringData"})
# kubectl apply stores the whole applied object, data included, in this annotation.
_LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def _scrub(text: str) -> str:
    return _SENSITIVE_TEXT.sub(lambda m: (m.group("bearer") or "") + REDACTED, text)


def _redact(value: Any, secret: bool = False) -> Any:
    if isinstance(value, Mapping):
        return _redact_mapping(value, secret)
    if isinstance(value, list):
        return [_redact(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_redact(v) for v in value)
    if isinstance(value, str):
        return _scrub(value)
    return value


def _redact_mapping(mapping: Mapping[Any, Any], secret: bool = False) -> dict[Any, Any]:
    kind = mapping.get("kind")
    secret = secret or kind == "Secret"
    out: dict[Any, Any] = {}
    for key, value in mapping.items():
        sensitive = isinstance(key, str) and bool(_SENSITIVE_KEY.search(key))
        if sensitive or (secret and key in _SECRET_FIELDS):
            out[key] = REDACTED
        elif secret and key == "metadata" and isinstance(value, Mapping):
            metadata = _redact_mapping(value)
            if _LAST_APPLIED in (metadata.get("annotations") or {}):
                metadata["annotations"][_LAST_APPLIED] = REDACTED
            out[key] = metadata
        elif kind == "SecretList" and key == "items" and isinstance(value, list):
            # List items come without their kind: they are Secrets because the list is.
            out[key] = [_redact(item, secret=True) for item in value]
        else:
            out[key] = _redact(value)
    return out


def redact_secrets(logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
    """A structlog processor that keeps credentials out of a log line.

    Replaced by ``[redacted]``, at any depth: the value of any key named like a credential
    (token, password, secret, authorization, api_key, private_key, credential, bearer); the
    ``data`` and ``stringData`` of a Secret (an object dict with ``kind: Secret``, or the items
    of a ``SecretList``) and its last-applied-configuration annotation; bearer credentials and
    JWTs inside any string, the message included. The values are copied, never modified: they
    may be objects a cache still holds.
    """
    return _redact_mapping(event_dict)


def _level(level: str) -> int:
    levels = logging.getLevelNamesMapping()
    try:
        return levels[level.upper()]
    except KeyError:
        raise ValueError(f"unknown log level {level!r}") from None


def configure_logging(
    level: str = "info", fmt: str = "auto", *, stream: TextIO | None = None
) -> None:
    """Send structlog and standard-library logging through one handler, in one format.

    :param level: ``debug``, ``info``, ``warning``, ``error`` or ``critical``; applies to the
        dependencies' loggers too.
    :param fmt: ``json`` (one JSON object per line, for log collectors), ``console`` (coloured
        and aligned, for people), or ``auto``: console when ``stream`` is a terminal, else json.
    :param stream: Where lines go; stderr by default.
    :raises ValueError: for an unknown level or format.
    """
    numeric_level = _level(level)
    stream = stream or sys.stderr
    if fmt == "auto":
        fmt = "console" if stream.isatty() else "json"
    renderers: list[Processor]
    if fmt == "json":
        renderers = [
            structlog.processors.format_exc_info,
            # Again, now that the traceback is text: an exception's message may hold a token.
            redact_secrets,
            structlog.processors.JSONRenderer(),
        ]
    elif fmt == "console":
        renderers = [structlog.dev.ConsoleRenderer(colors=stream.isatty())]
    else:
        raise ValueError(f"unknown log format {fmt!r}: expected json, console or auto")

    # Run on every line, whether it comes from structlog or the standard library.
    shared: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_logger_name,
        structlog.stdlib.add_log_level,
        structlog.stdlib.ExtraAdder(),
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        redact_secrets,
    ]
    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            # Before redaction, so that %-arguments are scrubbed with the message.
            structlog.stdlib.PositionalArgumentsFormatter(),
            structlog.processors.StackInfoRenderer(),
            *shared,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        # Cached loggers would keep this processor list after a later configure() or
        # structlog.testing.capture_logs(); binding per call costs microseconds.
        cache_logger_on_first_use=False,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *renderers],
    )
    handler = logging.StreamHandler(stream)
    handler.set_name(HANDLER_NAME)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for previous in [h for h in root.handlers if h.get_name() == HANDLER_NAME]:
        root.removeHandler(previous)
    root.addHandler(handler)
    root.setLevel(numeric_level)
