"""A private image registry on this machine for the image-build scenarios: Debian's
``docker-registry`` (the CNCF distribution registry) over TLS with a password (htpasswd).

Its certificate is signed by a CA made for the session (:mod:`tools.pki`), which the Docker
daemon is given through ``/etc/docker/certs.d/<host:port>/ca.crt`` and the real node's
containerd through a ``hosts.toml`` (:meth:`Registry.trust_from_node`). The password is random
per session and reaches the stack only as a Pulumi secret.
"""

from __future__ import annotations

import base64
import contextlib
import crypt  # bcrypt hashes for htpasswd (the registry reads no other); Python 3.11's stdlib
import json
import secrets
import shutil
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from tools import pki

HOST = "127.0.0.1"
PORT = 5443
"""Fixed: the real node's containerd names the registry in its config before the node starts."""
USER = "tfd"
READY_S = 30
CERTS_D = Path("/etc/docker/certs.d")
DATA = Path.home() / ".cache" / "tf-distributed" / "registry"
"""The registry's blobs, kept between sessions like the Docker and containerd data roots: a
push of layers the registry holds sends only the manifest (the two e2e passes push one image)."""
MANIFEST_TYPES = (
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
)


class Registry:
    """The registry process and its files under ``directory``: start, query, stop."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.server = f"{HOST}:{PORT}"
        self.password = secrets.token_urlsafe(18)
        self.proc: subprocess.Popen[bytes] | None = None
        self.certs: pki.ServerCertificate | None = None

    def start(self) -> None:
        """Certificate, password file, config, then the server; returns once it answers.

        Raises:
            RuntimeError: ``docker-registry`` is missing or did not come up (its log says why).
        """
        binary = shutil.which("docker-registry")
        if binary is None:
            raise RuntimeError("docker-registry missing: apt-get install docker-registry")
        self.dir.mkdir(parents=True, exist_ok=True)
        sans = [f"IP:{HOST}", "DNS:localhost"]
        self.certs = pki.ca_and_server(self.dir, "tfd-e2e-registry", sans)
        hashed = crypt.crypt(self.password, crypt.mksalt(crypt.METHOD_BLOWFISH))
        (self.dir / "htpasswd").write_text(f"{USER}:{hashed}\n")
        config = {
            "version": 0.1,
            "log": {"level": "warn"},
            "storage": {"filesystem": {"rootdirectory": str(DATA)}},
            "http": {
                "addr": self.server,
                "tls": {"certificate": str(self.certs.cert), "key": str(self.certs.key)},
            },
            "auth": {"htpasswd": {"realm": "tfd-e2e", "path": str(self.dir / "htpasswd")}},
        }
        (self.dir / "config.json").write_text(json.dumps(config))
        trust = CERTS_D / self.server
        trust.mkdir(parents=True, exist_ok=True)
        shutil.copy(self.certs.ca, trust / "ca.crt")
        DATA.mkdir(parents=True, exist_ok=True)
        log = (self.dir / "registry.log").open("wb")
        # The registry's config parser is YAML: JSON is YAML.
        self.proc = subprocess.Popen(
            [binary, "serve", str(self.dir / "config.json")], stdout=log, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + READY_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            with contextlib.suppress(OSError):
                if self._get("/v2/", auth=False)[0] == 401:  # up, and asking for the password
                    return
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"docker-registry did not answer; log: {self.dir / 'registry.log'}")

    def _get(
        self, path: str, *, auth: bool = True, accept: str = ""
    ) -> tuple[int, dict[str, str], bytes]:
        assert self.certs is not None
        request = urllib.request.Request(f"https://{self.server}{path}")
        if auth:
            token = base64.b64encode(f"{USER}:{self.password}".encode()).decode()
            request.add_header("Authorization", f"Basic {token}")
        if accept:
            request.add_header("Accept", accept)
        context = ssl.create_default_context(cafile=str(self.certs.ca))
        try:
            with urllib.request.urlopen(request, context=context, timeout=10) as resp:
                return resp.status, dict(resp.headers), resp.read()
        except urllib.error.HTTPError as err:
            return err.code, dict(err.headers), err.read()

    def trust_from_node(self, hosts_dir: Path) -> None:
        """The real node's containerd trusts the CA and pulls with the password (``hosts.toml``
        under its ``config_path``, :func:`tools.real_node_config.registry_hosts_dir`)."""
        assert self.certs is not None
        token = base64.b64encode(f"{USER}:{self.password}".encode()).decode()
        host = hosts_dir / self.server
        host.mkdir(parents=True, exist_ok=True)
        (host / "hosts.toml").write_text(
            f'server = "https://{self.server}"\n\n'
            f'[host."https://{self.server}"]\n'
            '  capabilities = ["pull", "resolve"]\n'
            f'  ca = "{self.certs.ca}"\n'
            f'  [host."https://{self.server}".header]\n'
            f'    Authorization = ["Basic {token}"]\n'
        )

    def manifest_digest(self, repository: str, tag: str) -> str | None:
        """The registry's digest of ``repository:tag`` (``Docker-Content-Digest``), or None."""
        status, headers, _ = self._get(
            f"/v2/{repository}/manifests/{tag}", accept=", ".join(MANIFEST_TYPES)
        )
        return headers.get("Docker-Content-Digest") if status == 200 else None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        shutil.rmtree(CERTS_D / self.server, ignore_errors=True)
