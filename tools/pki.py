"""Throw-away TLS certificates for the test stand-ins: a CA made per session and a serving
certificate it signs, with openssl (no Python dependency; no key is ever committed).

``ca_and_server(directory, "kueue-webhook", ["IP:127.0.0.1", "DNS:localhost"])`` writes
``ca.crt``/``ca.key`` and ``server.crt``/``server.key`` under ``directory``; clients trust
``ca.crt``, the server serves ``server.crt`` with ``server.key``.
"""

from __future__ import annotations

import ipaddress
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

SAN_KINDS = ("DNS", "IP")
"""The subjectAltName entry kinds accepted, written ``DNS:name`` or ``IP:address``."""


@dataclass(frozen=True)
class ServerCertificate:
    """Where :func:`ca_and_server` wrote the CA's certificate and the server's pair (PEM)."""

    ca: Path
    cert: Path
    key: Path

    @classmethod
    def at(cls, directory: Path) -> ServerCertificate:
        """The paths under ``directory`` (for a process that did not make them)."""
        return cls(directory / "ca.crt", directory / "server.crt", directory / "server.key")


def _check_san(san: str) -> None:
    kind, _, value = san.partition(":")
    if kind not in SAN_KINDS or not value:
        raise ValueError(f"SAN {san!r}: must be DNS:<name> or IP:<address>")
    if kind == "IP":
        try:
            ipaddress.ip_address(value)
        except ValueError:
            raise ValueError(f"SAN {san!r}: {value!r} is not an IP address") from None
    elif "," in value or " " in value:
        raise ValueError(f"SAN {san!r}: a DNS name has no commas or spaces")


def _openssl(directory: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True)


def ca_and_server(
    directory: Path, common_name: str, sans: Sequence[str], *, days: int = 1
) -> ServerCertificate:
    """A new CA and a serving certificate for ``common_name`` and ``sans`` signed by it.

    Raises:
        ValueError: a SAN is not ``DNS:<name>``/``IP:<address>``, none is given, or the name
            has a ``/`` (openssl would read it as another subject field).
    """
    if not sans:
        raise ValueError(f"certificate {common_name!r}: at least one SAN is needed")
    if "/" in common_name or not common_name:
        raise ValueError(f"certificate common name {common_name!r}: must be non-empty, no '/'")
    for san in sans:
        _check_san(san)
    out = ServerCertificate.at(directory)
    key = ("-newkey", "rsa:2048", "-nodes")
    _openssl(directory, "req", "-x509", *key, "-days", str(days), "-subj",
             f"/CN={common_name} CA", "-keyout", "ca.key", "-out", out.ca.name)  # fmt: skip
    _openssl(directory, "req", *key, "-subj", f"/CN={common_name}",
             "-keyout", out.key.name, "-out", "server.csr")  # fmt: skip
    (directory / "server.ext").write_text(
        f"subjectAltName={','.join(sans)}\nextendedKeyUsage=serverAuth\n"
    )
    _openssl(directory, "x509", "-req", "-in", "server.csr", "-CA", out.ca.name,
             "-CAkey", "ca.key", "-CAcreateserial", "-days", str(days),
             "-extfile", "server.ext", "-out", out.cert.name)  # fmt: skip
    return out
