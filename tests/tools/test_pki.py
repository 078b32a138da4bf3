"""The test CA maker (``tools/pki.py``): the serving certificate chains to its CA, names each
SAN asked for (DNS and IP) and is for serving; malformed SANs are refused in one line."""

from __future__ import annotations

import socket
import ssl
import subprocess
import threading
from pathlib import Path

import pytest

from tools import pki


def openssl(*args: str) -> str:
    return subprocess.run(["openssl", *args], check=True, capture_output=True, text=True).stdout


@pytest.mark.parametrize(
    ("common_name", "sans", "shown"),
    [
        # The Kueue webhook server's call: loopback by address and by name.
        (
            "kueue-webhook",
            ["IP:127.0.0.1", "DNS:localhost"],
            ["IP Address:127.0.0.1", "DNS:localhost"],
        ),
        # The object store stand-in's hosts.
        (
            "www.googleapis.com",
            ["DNS:www.googleapis.com", "DNS:storage.googleapis.com"],
            ["DNS:www.googleapis.com", "DNS:storage.googleapis.com"],
        ),
        # The monitoring webhook's Service names.
        (
            "op.mon.svc",
            ["DNS:op.mon.svc", "DNS:op.mon.svc.cluster.local"],
            ["DNS:op.mon.svc", "DNS:op.mon.svc.cluster.local"],
        ),
        ("v6", ["IP:::1"], ["IP Address:0:0:0:0:0:0:0:1"]),
    ],
)
def test_server_certificate_chains_to_its_ca_and_names_each_san(
    tmp_path: Path, common_name: str, sans: list[str], shown: list[str]
) -> None:
    certs = pki.ca_and_server(tmp_path, common_name, sans)
    assert certs == pki.ServerCertificate.at(tmp_path), "the paths a holder process reads"
    for path in (certs.ca, certs.cert, certs.key):
        assert path.is_file(), f"{path.name} not written"
    verified = openssl("verify", "-CAfile", str(certs.ca), str(certs.cert))
    assert verified.strip() == f"{certs.cert}: OK", f"{common_name}: {verified}"
    ext = openssl("x509", "-in", str(certs.cert), "-noout", "-ext", "subjectAltName")
    names = [name.strip() for name in ext.splitlines()[-1].split(",")]
    assert names == shown, f"{common_name}: SANs {names}, wanted {shown}"
    usage = openssl("x509", "-in", str(certs.cert), "-noout", "-ext", "extendedKeyUsage")
    assert "TLS Web Server Authentication" in usage, f"{common_name}: not for serving: {usage}"
    subject = openssl("x509", "-in", str(certs.cert), "-noout", "-subject")
    assert subject.strip() == f"subject=CN = {common_name}", subject
    # The key is the certificate's: same public key.
    pub_cert = openssl("x509", "-in", str(certs.cert), "-noout", "-pubkey")
    pub_key = openssl("pkey", "-in", str(certs.key), "-pubout")
    assert pub_cert == pub_key, f"{common_name}: server.key does not match server.crt"


def test_each_session_gets_its_own_ca(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = pki.ca_and_server(tmp_path / "a", "x", ["DNS:x"])
    second = pki.ca_and_server(tmp_path / "b", "x", ["DNS:x"])
    assert first.ca.read_bytes() != second.ca.read_bytes(), "a CA was reused"
    result = subprocess.run(
        ["openssl", "verify", "-CAfile", str(first.ca), str(second.cert)],
        capture_output=True,
        text=True,
    )
    assert result.returncode != 0, "a certificate verified against another session's CA"


@pytest.mark.parametrize(
    ("common_name", "sans", "message"),
    [
        ("x", ["localhost"], "SAN 'localhost': must be DNS:<name> or IP:<address>"),
        ("x", ["URI:https://x"], "SAN 'URI:https://x': must be DNS:<name> or IP:<address>"),
        ("x", ["DNS:"], "SAN 'DNS:': must be DNS:<name> or IP:<address>"),
        ("x", ["IP:localhost"], "SAN 'IP:localhost': 'localhost' is not an IP address"),
        ("x", ["DNS:a,IP:1.2.3.4"], "SAN 'DNS:a,IP:1.2.3.4': a DNS name has no commas or spaces"),
        ("x", [], "certificate 'x': at least one SAN is needed"),
        ("O=a/CN=b", ["DNS:b"], "certificate common name 'O=a/CN=b': must be non-empty, no '/'"),
    ],
)
def test_malformed_request_is_refused_before_openssl_runs(
    tmp_path: Path, common_name: str, sans: list[str], message: str
) -> None:
    with pytest.raises(ValueError) as err:
        pki.ca_and_server(tmp_path, common_name, sans)
    assert str(err.value) == message
    assert not list(tmp_path.iterdir()), "files written for a refused request"


@pytest.mark.parametrize(
    ("server_hostname", "accepted"),
    [
        ("127.0.0.1", True),
        ("localhost", True),
        # The common name alone names nothing: clients match SANs only.
        ("kueue-webhook", False),
        ("127.0.0.2", False),
    ],
)
def test_a_client_trusting_the_ca_accepts_the_server_by_each_san_only(
    tmp_path: Path, server_hostname: str, accepted: bool
) -> None:
    """A TLS handshake on loopback with hostname checking on, as the Kueue webhook's
    clients (the API server) and the object store's front do it."""
    certs = pki.ca_and_server(tmp_path, "kueue-webhook", ["IP:127.0.0.1", "DNS:localhost"])
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(certs.cert, certs.key)
    client_tls = ssl.create_default_context(cafile=str(certs.ca))
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]

        def serve() -> None:
            conn, _ = listener.accept()
            try:
                with server_tls.wrap_socket(conn, server_side=True) as tls:
                    tls.sendall(b"ok")
            except (ssl.SSLError, OSError):  # the client refused the certificate
                conn.close()

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        try:
            with (
                socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
                client_tls.wrap_socket(raw, server_hostname=server_hostname) as tls,
            ):
                answer = tls.recv(2)
        except ssl.SSLCertVerificationError as err:
            assert not accepted, f"{server_hostname} refused: {err.verify_message}"
        else:
            assert accepted, f"{server_hostname} accepted though no SAN names it"
            assert answer == b"ok", f"no answer over TLS to {server_hostname}"
        thread.join(timeout=10)
