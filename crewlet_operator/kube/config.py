"""How to reach an API server: a :class:`RestConfig`, from a kubeconfig, in-cluster, or envtest."""

from __future__ import annotations

import base64
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml


@dataclass(frozen=True)
class RestConfig:
    """Connection settings for one identity on one API server.

    File paths rather than PEM bytes, because Python's ``ssl`` loads certificates from files.
    ``impersonate_user``/``impersonate_groups`` send the ``Impersonate-*`` headers (kubectl's
    ``--as``/``--as-group``); the connecting identity must be allowed to impersonate.
    """

    host: str
    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    token: str | None = None
    token_file: Path | None = None
    impersonate_user: str | None = None
    impersonate_groups: tuple[str, ...] = ()
    insecure_skip_tls_verify: bool = False
    extra_headers: dict[str, str] = field(default_factory=dict)

    def impersonating(self, user: str, groups: tuple[str, ...] = ()) -> RestConfig:
        """The same connection acting as ``user`` (and ``groups``)."""
        return replace(self, impersonate_user=user, impersonate_groups=groups)

    def with_token(self, token: str) -> RestConfig:
        """The same server and CA, authenticating with a bearer token instead."""
        return replace(
            self,
            cert_file=None,
            key_file=None,
            token=token,
            token_file=None,
            impersonate_user=None,
            impersonate_groups=(),
        )

    def bearer_token(self) -> str | None:
        """The token to send now; a token file is re-read each time, as it rotates."""
        if self.token_file is not None:
            return self.token_file.read_text().strip()
        return self.token

    def to_kubeconfig(self, context: str = "envtest") -> dict[str, Any]:
        """A kubeconfig document (certificates embedded) for kubectl, helm and other clients."""

        def data(path: Path) -> str:
            return base64.b64encode(path.read_bytes()).decode()

        cluster: dict[str, Any] = {"server": self.host}
        if self.ca_file is not None:
            cluster["certificate-authority-data"] = data(self.ca_file)
        if self.insecure_skip_tls_verify:
            cluster["insecure-skip-tls-verify"] = True
        user: dict[str, Any] = {}
        if self.cert_file is not None and self.key_file is not None:
            user["client-certificate-data"] = data(self.cert_file)
            user["client-key-data"] = data(self.key_file)
        token = self.bearer_token()
        if token:
            user["token"] = token
        if self.impersonate_user:
            user["as"] = self.impersonate_user
        if self.impersonate_groups:
            user["as-groups"] = list(self.impersonate_groups)
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": context, "cluster": cluster}],
            "users": [{"name": context, "user": user}],
            "contexts": [{"name": context, "context": {"cluster": context, "user": context}}],
            "current-context": context,
        }

    def write_kubeconfig(self, path: Path, context: str = "envtest") -> Path:
        """Write :meth:`to_kubeconfig` to ``path`` (mode 0600: it holds credentials)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            yaml.safe_dump(self.to_kubeconfig(context), fh, sort_keys=False)
        return path
