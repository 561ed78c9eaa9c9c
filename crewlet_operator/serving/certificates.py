"""Serving certificates: a self-signed one made at start, or the pair in a ``cert_dir`` (a
mounted cert-manager Secret, say), reloaded when it is renewed."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import os
import socket
import ssl
import tempfile
from collections.abc import Sequence
from pathlib import Path

import structlog
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = [
    "CERT_POLL_INTERVAL",
    "RotatingCertificate",
    "context_from_pem",
    "self_signed_certificate",
]

log = structlog.get_logger("crewlet_operator.serving")

CERT_POLL_INTERVAL = 10.0
"""How often a ``cert_dir`` is checked for a rotated certificate (controller-runtime's
certwatcher polls as often)."""


def self_signed_certificate(
    hosts: Sequence[str] | None = None, *, validity: datetime.timedelta | None = None
) -> tuple[bytes, bytes]:
    """A self-signed ECDSA P-256 serving certificate and its key, both PEM.

    :param hosts: Subject alternative names, IP addresses or DNS names; by default
        ``localhost``, ``127.0.0.1``, ``::1`` and this machine's hostname (the pod's name).
    :param validity: How long it is valid; one year by default.
    """
    if hosts is None:
        hosts = ["localhost", "127.0.0.1", "::1"]
        hostname = socket.gethostname()
        if hostname.isascii() and hostname not in hosts:
            hosts.append(hostname)
    sans: list[x509.GeneralName] = []
    for host in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            sans.append(x509.DNSName(host))
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        # Back-dated a little so that a client whose clock lags accepts it at once.
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + (validity or datetime.timedelta(days=365)))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return certificate.public_bytes(serialization.Encoding.PEM), key_pem


def _server_context() -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


def context_from_pem(cert_pem: bytes, key_pem: bytes) -> ssl.SSLContext:
    """A server TLS context (TLS 1.2 or later) serving the PEM certificate and key given."""
    # ssl loads certificates from files only: write them to a private directory for a moment.
    with tempfile.TemporaryDirectory(prefix="crewlet-metrics-") as directory:
        cert, key = Path(directory, "tls.crt"), Path(directory, "tls.key")
        cert.write_bytes(cert_pem)
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(key_pem)
        context = _server_context()
        context.load_cert_chain(cert, key)
    return context


class RotatingCertificate:
    """The serving certificate from ``tls.crt``/``tls.key`` in a directory, reloaded on change.

    cert-manager and the kubelet's Secret volumes replace the files in place (the latter by
    swapping a symlink), so a long-running server must pick up the renewed pair. Each
    handshake switches to the newest context from the SNI callback, which runs for every
    ClientHello; a half-written pair fails to load and the previous one keeps serving.

    :raises FileNotFoundError: when either file is missing.
    """

    def __init__(self, cert_dir: Path) -> None:
        self.cert_file = cert_dir / "tls.crt"
        self.key_file = cert_dir / "tls.key"
        for path in (self.cert_file, self.key_file):
            if not path.is_file():
                raise FileNotFoundError(f"metrics serving certificate: {path} does not exist")
        self._seen = self._stamp()
        self.context = self._load()
        """The context to listen with: it hands each handshake the newest pair."""
        self.context.sni_callback = self._pick
        self._current = self.context

    def _load(self) -> ssl.SSLContext:
        context = _server_context()
        context.load_cert_chain(self.cert_file, self.key_file)
        return context

    def _stamp(self) -> tuple[tuple[int, int, int], ...]:
        stats = (os.stat(p) for p in (self.cert_file, self.key_file))
        return tuple((s.st_ino, s.st_mtime_ns, s.st_size) for s in stats)

    def _pick(self, connection: ssl.SSLObject, server_name: str | None, _: ssl.SSLContext) -> None:
        connection.context = self._current

    def reload_if_changed(self) -> bool:
        """Load the files again if they changed since the last load; whether it did.

        A pair that does not load (say the key is not written yet) is retried next time.
        """
        try:
            stamp = self._stamp()
            if stamp == self._seen:
                return False
            self._current = self._load()
        except (OSError, ssl.SSLError) as exc:
            log.warning("could not reload the metrics certificate", error=str(exc))
            return False
        self._seen = stamp
        log.info("reloaded the metrics certificate", cert=str(self.cert_file))
        return True

    async def watch(self, interval: float = CERT_POLL_INTERVAL) -> None:
        """Check for a renewed pair every ``interval`` seconds, until cancelled."""
        while True:
            await asyncio.sleep(interval)
            self.reload_if_changed()

    @property
    def certificate_pem(self) -> bytes:
        """The certificate as it is on disk now."""
        return self.cert_file.read_bytes()
