"""Log configuration: JSON lines with the reconcile's context, one level, and no secrets."""

from __future__ import annotations

import copy
import datetime
import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
import structlog

from crewlet_operator.logging import HANDLER_NAME, REDACTED, configure_logging, redact_secrets

# A ServiceAccount token is a JWT: header.payload.signature, base64url.
JWT = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW06c2EifQ.c2lnbmF0dXJl"


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """Undo configure_logging: other tests expect structlog's defaults and the root as it was."""
    root = logging.getLogger()
    level = root.level
    yield
    for handler in [h for h in root.handlers if h.get_name() == HANDLER_NAME]:
        root.removeHandler(handler)
    root.setLevel(level)
    structlog.reset_defaults()
    structlog.contextvars.clear_contextvars()


@pytest.fixture
def json_lines(restore_logging: None) -> io.StringIO:
    stream = io.StringIO()
    configure_logging("info", "json", stream=stream)
    return stream


def lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_json_lines_carry_the_reconcile_context(json_lines: io.StringIO) -> None:
    log = structlog.get_logger("crewlet_operator.controller")
    with structlog.contextvars.bound_contextvars(
        controller="crew", namespace="team-a", name="alpha", reconcileID="r-1"
    ):
        log.info("reconciled", generation=3)
    log.info("idle")
    inside, outside = lines(json_lines)
    assert inside["event"] == "reconciled"
    assert inside["generation"] == 3
    assert (inside["controller"], inside["namespace"], inside["name"], inside["reconcileID"]) == (
        "crew",
        "team-a",
        "alpha",
        "r-1",
    )
    assert (inside["level"], inside["logger"]) == ("info", "crewlet_operator.controller")
    stamp = datetime.datetime.fromisoformat(inside["timestamp"])
    assert stamp.utcoffset() == datetime.timedelta(0)
    assert inside["timestamp"].endswith("Z")
    assert "controller" not in outside and "reconcileID" not in outside


def test_stdlib_loggers_share_the_format_and_the_level(json_lines: io.StringIO) -> None:
    logging.getLogger("aiohttp.client").warning("retrying %s in %d s", "GET /api", 2)
    logging.getLogger("kubernetes_asyncio.config").debug("below the level")
    structlog.get_logger("crewlet_operator.informer").debug("below the level too")
    (record,) = lines(json_lines)
    assert record["event"] == "retrying GET /api in 2 s"
    assert (record["level"], record["logger"]) == ("warning", "aiohttp.client")
    assert "timestamp" in record


def test_debug_level_lets_debug_lines_through(restore_logging: None) -> None:
    stream = io.StringIO()
    configure_logging("debug", "json", stream=stream)
    logging.getLogger("kubernetes_asyncio.config").debug("from the stdlib")
    structlog.get_logger("crewlet_operator.informer").debug("from structlog")
    assert [r["event"] for r in lines(stream)] == ["from the stdlib", "from structlog"]


def test_nothing_secret_reaches_the_output(json_lines: io.StringIO) -> None:
    log = structlog.get_logger("crewlet_operator.test")
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "db", "namespace": "team-a"},
        "data": {"password": "aHVudGVyMg=="},
        "stringData": {"url": "postgres://admin:hunter2@db"},
    }
    with structlog.contextvars.bound_contextvars(token="ctx-token-1"):
        log.info("applied %s", f"Bearer {JWT}", obj=secret, api_key="key-123")
    logging.getLogger("aiohttp.client").error("sent Authorization: Bearer abc.def-ghi")
    logging.getLogger("kubernetes_asyncio").info("loaded", extra={"client_secret": "s3cr3t"})
    try:
        raise RuntimeError(f"token review of {JWT} failed")
    except RuntimeError:
        log.exception("review failed")
    output = json_lines.getvalue()
    for leaked in ("aHVudGVyMg==", "hunter2", JWT, "ctx-token-1", "key-123", "abc.def", "s3cr3t"):
        assert leaked not in output, leaked
    first, second, third, fourth = lines(json_lines)
    assert first["event"] == f"applied Bearer {REDACTED}"
    assert first["obj"]["data"] == first["obj"]["stringData"] == REDACTED
    assert first["obj"]["metadata"]["name"] == "db"  # the rest of the object stays readable
    assert first["token"] == first["api_key"] == REDACTED
    assert second["event"] == f"sent Authorization: Bearer {REDACTED}"
    assert third["client_secret"] == REDACTED
    assert "RuntimeError" in fourth["exception"]


def test_redaction_by_key_at_any_depth_and_in_any_case() -> None:
    event = {
        "event": "request",
        "headers": {"Authorization": "Basic YWxpY2U6cHc=", "Accept": "application/json"},
        "config": {"users": [{"user": {"token": "t", "client-key-data": "k"}}]},
        "PASSWORD": "p",
        "bearer_token_file": "/var/run/secrets/token",
        "db_passwd": "p",
        "private_key": "k",
        "credentials": {"a": "b"},
    }
    redacted = redact_secrets(None, "info", event)
    assert redacted["headers"] == {"Authorization": REDACTED, "Accept": "application/json"}
    assert redacted["config"]["users"][0]["user"]["token"] == REDACTED
    for key in ("PASSWORD", "bearer_token_file", "db_passwd", "private_key", "credentials"):
        assert redacted[key] == REDACTED, key


def test_secret_objects_lose_their_data_and_last_applied_configuration() -> None:
    last_applied = "kubectl.kubernetes.io/last-applied-configuration"
    secret = {
        "kind": "Secret",
        "metadata": {"name": "db", "annotations": {last_applied: '{"data":...}', "team": "a"}},
        "data": {"k": "dg=="},
        "type": "Opaque",
    }
    secret_list = {"kind": "SecretList", "items": [{"metadata": {"name": "x"}, "data": {}}]}
    config_map = {"kind": "ConfigMap", "data": {"k": "v"}}
    before = copy.deepcopy((secret, secret_list))
    redacted = redact_secrets(
        None, "info", {"event": "e", "s": secret, "l": secret_list, "cm": config_map}
    )
    assert redacted["s"]["data"] == REDACTED
    assert redacted["s"]["type"] == "Opaque"
    assert redacted["s"]["metadata"]["annotations"] == {last_applied: REDACTED, "team": "a"}
    assert redacted["l"]["items"][0]["data"] == REDACTED
    assert redacted["l"]["items"][0]["metadata"] == {"name": "x"}
    assert redacted["cm"]["data"] == {"k": "v"}  # a ConfigMap is not a secret
    assert (secret, secret_list) == before  # the caller's objects are untouched


def test_credentials_inside_text_are_scrubbed() -> None:
    redacted = redact_secrets(
        None,
        "info",
        {"event": f"token {JWT} rejected", "detail": ("header bearer xyz.123", 5)},
    )
    assert redacted["event"] == f"token {REDACTED} rejected"
    assert redacted["detail"] == (f"header bearer {REDACTED}", 5)


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_auto_is_console_on_a_terminal_and_json_otherwise(restore_logging: None) -> None:
    terminal = FakeTerminal()
    configure_logging("info", "auto", stream=terminal)
    structlog.get_logger("t").info("hello", password="pw")
    line = terminal.getvalue()
    assert "hello" in line and REDACTED in line and "pw" not in line.replace("password", "")
    with pytest.raises(json.JSONDecodeError):
        json.loads(line)

    pipe = io.StringIO()
    configure_logging("info", "auto", stream=pipe)
    structlog.get_logger("t").info("hello")
    assert json.loads(pipe.getvalue())["event"] == "hello"


def test_configuring_again_replaces_the_handler(restore_logging: None) -> None:
    first, second = io.StringIO(), io.StringIO()
    configure_logging("info", "json", stream=first)
    configure_logging("info", "json", stream=second)
    ours = [h for h in logging.getLogger().handlers if h.get_name() == HANDLER_NAME]
    assert len(ours) == 1
    logging.getLogger("aiohttp").warning("once")
    assert first.getvalue() == ""
    assert len(lines(second)) == 1


@pytest.mark.parametrize(("level", "fmt"), [("loud", "json"), ("info", "xml")])
def test_unknown_level_or_format_is_refused(level: str, fmt: str, restore_logging: None) -> None:
    with pytest.raises(ValueError, match="unknown log"):
        configure_logging(level, fmt, stream=io.StringIO())
