"""A GCS-compatible object store on this machine that TensorFlow's own ``gs://`` filesystem uses
unchanged (docs/e2e.md, "Stand-in: a GCS-compatible server").

TensorFlow 2.21's GCS filesystem (``xla/tsl/platform/cloud``) has its endpoints compiled in:
``https://www.googleapis.com/storage/v1/`` and ``/upload/storage/v1/`` for the JSON API and
``https://storage.googleapis.com/<bucket>/<object>`` for reads. So everything runs in a network
and mount namespace of its own (``unshare --net --mount``): only a loopback interface, and an
``/etc/hosts`` bind-mounted over the real one that maps those names to 127.0.0.1. Inside it:

- ``fake-gcs-server`` (``make tools``) on 127.0.0.1:4443 over TLS, its certificate signed by a
  CA made for this session with openssl (``tools/pki.py``; ``CURL_CA_BUNDLE`` makes
  TensorFlow's curl trust it);
- a TLS front on 443 (same certificate) that passes every byte on to it but the
  ``Transfer-Encoding: identity`` header TensorFlow sends on its empty-bodied requests
  (directory markers, upload sessions): Google's front ends accept it, Go's HTTP server answers
  501. Forwarding a chunked body, it drops the ``Content-Length`` beside it, as RFC 9112 asks
  of an intermediary;
- a metadata-server stand-in (``GCE_METADATA_HOST``): an access token for the default service
  account, only with ``Metadata-Flavor: Google``, as GKE's workload identity serves it. No key
  file exists anywhere.

Commands join the namespace with ``nsenter``; :meth:`ObjectStore.env` is what they need.
``python -m tools.object_store DIR`` is the process that holds the namespace (run by
:meth:`ObjectStore.start` under ``unshare``).

For pods of the real node (:class:`OnHost`) the same servers run in the host's namespace on
addresses of the node's bridge, as GKE's Private Google Access and metadata server are seen
from a pod: the node's CoreDNS maps the names to them (``tools/real_node_config.py``), the
stack's NetworkPolicies must let the workers reach them, and the image trusts the CA.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tools import pki

ROOT = Path(__file__).resolve().parents[1]
FAKE_GCS_SERVER = ROOT / ".tools" / "bin" / "fake-gcs-server"
API_HOSTS = ("www.googleapis.com", "storage.googleapis.com")
"""The hosts TensorFlow's GCS filesystem reaches (its JSON API and its reads)."""
METADATA_HOST = "metadata.google.internal"
"""The metadata server's name TensorFlow reaches without ``GCE_METADATA_HOST`` (as on GKE)."""
BACKEND_PORT = 4443
METADATA_PORT = 8089
TOKEN = "stand-in-access-token"
TOKEN_PATH = "/computeMetadata/v1/instance/service-accounts/default/token"
AUTHORIZATION = f"Bearer {TOKEN}"
"""What every request to the bucket must carry (the metadata server's token), else the front
answers 401 as GCS does to an anonymous caller of a private bucket: a run that never got its
token fails instead of passing anonymously (TensorFlow sends no header when it has none)."""
_UNAUTHORIZED_BODY = b"Anonymous caller does not have storage access (no token)."
UNAUTHORIZED = (
    b"HTTP/1.1 401 Unauthorized\r\nContent-Type: text/plain\r\nConnection: close\r\n"
    + f"Content-Length: {len(_UNAUTHORIZED_BODY)}\r\n\r\n".encode()
    + _UNAUTHORIZED_BODY
)
READY_S = 30
COUNTS_FILE = "requests.json"
"""In the stand-in's directory: the requests the front has passed on, by method (the
benchmark's requests per save and restore)."""
_counts: dict[str, int] = {}
_counts_path: list[Path] = []


@dataclass(frozen=True)
class OnHost:
    """Where the servers listen for pods: the API front on ``api``:443 (fake-gcs-server behind
    it on ``api``:4443), the metadata server on ``metadata``:80, both added to ``device`` (the
    node's bridge: they go with it) for as long as the stand-in runs."""

    device: str
    api: str
    metadata: str


class ObjectStore:
    """The namespace (or, with ``on_host``, the host's addresses) and its servers, from outside:
    start, run commands that reach them, stop."""

    def __init__(self, directory: Path, bucket: str, on_host: OnHost | None = None) -> None:
        self.dir = directory
        self.bucket = bucket
        self.on_host = on_host
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Certificates, then the namespace holder; returns once the bucket exists.

        Raises:
            RuntimeError: a tool is missing or the stand-in did not come up (its log says why).
        """
        if not FAKE_GCS_SERVER.exists():
            raise RuntimeError(f"{FAKE_GCS_SERVER} missing: run `make tools` (or `make e2e`)")
        if os.geteuid() != 0:
            raise RuntimeError("the object store stand-in needs root (unshare, ip addr)")
        sans = [f"DNS:{host}" for host in API_HOSTS]
        config: dict[str, Any] = {"bucket": self.bucket}
        holder = [sys.executable, "-m", "tools.object_store", str(self.dir)]
        if self.on_host is None:
            holder = ["unshare", "--net", "--mount", "--", *holder]
        else:
            sans.append(f"IP:{self.on_host.api}")  # the holder makes the bucket by address
            config["on_host"] = asdict(self.on_host)
            for address in (self.on_host.api, self.on_host.metadata):
                subprocess.run(["ip", "addr", "replace", f"{address}/32", "dev",
                                self.on_host.device], check=True, capture_output=True)  # fmt: skip
        self.ca = pki.ca_and_server(self.dir, API_HOSTS[0], sans).ca
        (self.dir / "config.json").write_text(json.dumps(config))
        log = (self.dir / "holder.log").open("wb")
        self.proc = subprocess.Popen(holder, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + READY_S
        while not (self.dir / "ready").exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the object store stand-in did not start: {self.log()}")
            time.sleep(0.1)

    def log(self) -> str:
        """The holder's and fake-gcs-server's logs, last lines."""
        parts = []
        for name in ("holder.log", "fake-gcs-server.log"):
            path = self.dir / name
            lines = path.read_text(errors="replace").splitlines()[-20:] if path.exists() else []
            parts.append(f"--- {name} ---\n" + "\n".join(lines))
        return "\n".join(parts)

    def env(self) -> dict[str, str]:
        """What TensorFlow needs in the namespace: trust the test CA, and the metadata server."""
        metadata = f"{self.on_host.metadata}:80" if self.on_host else f"127.0.0.1:{METADATA_PORT}"
        return {"CURL_CA_BUNDLE": str(self.ca), "GCE_METADATA_HOST": metadata}

    def command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside the namespace (as it is, on the host)."""
        assert self.proc is not None, "the object store is not started"
        if self.on_host is not None:
            return list(argv)
        return ["nsenter", f"--target={self.proc.pid}", "--net", "--mount",
                f"--wd={ROOT}", "--", *argv]  # fmt: skip

    def popen(self, argv: Sequence[str], env: Mapping[str, str] | None = None,
              **kwargs: Any) -> subprocess.Popen[str]:  # fmt: skip
        return subprocess.Popen(
            self.command(argv), cwd=ROOT, text=True,
            env={**os.environ, **self.env(), **(env or {})}, **kwargs,
        )  # fmt: skip

    def run(self, argv: Sequence[str], timeout: float = 120, **kwargs: Any) -> str:
        """``argv``'s stdout; fails naming its output when it exits non-zero."""
        proc = self.popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **kwargs)
        out, _ = proc.communicate(timeout=timeout)
        assert proc.returncode == 0, f"{' '.join(argv)} exited {proc.returncode}:\n{out[-3000:]}"
        return out

    def curl(self, *args: str) -> str:
        """curl in the namespace, through the same TLS front as TensorFlow."""
        resolve = [arg for host in API_HOSTS if self.on_host
                   for arg in ("--resolve", f"{host}:443:{self.on_host.api}")]  # fmt: skip
        return self.run(["curl", "-sSf", "--cacert", str(self.ca), "-H",
                         f"Authorization: {AUTHORIZATION}", *resolve, *args])  # fmt: skip

    def objects(self, prefix: str = "") -> dict[str, tuple[int, str]]:
        """Every object under ``prefix`` in the bucket: ``(size, generation)``, as the JSON API
        lists them (a rewritten object gets a new generation)."""
        query = urllib.parse.urlencode({"prefix": prefix})
        out = self.curl(f"https://{API_HOSTS[0]}/storage/v1/b/{self.bucket}/o?{query}")
        items = json.loads(out).get("items", [])
        return {item["name"]: (int(item["size"]), item["generation"]) for item in items}

    def truncate(self, name: str) -> int:
        """Replace object ``name`` by its first half (a torn object); returns the new size."""
        local = self.dir / "torn"
        quoted = urllib.parse.quote(name, safe="")
        self.curl("-o", str(local), f"https://{API_HOSTS[1]}/{self.bucket}/{quoted}")
        data = local.read_bytes()
        local.write_bytes(data[: len(data) // 2])
        self.curl("-X", "POST", "-H", "Content-Type: application/octet-stream",
                  "--data-binary", f"@{local}",
                  f"https://{API_HOSTS[0]}/upload/storage/v1/b/{self.bucket}/o"
                  f"?uploadType=media&name={quoted}")  # fmt: skip
        return len(data) // 2

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.on_host is not None:  # gone already when the bridge went with the cluster
            for address in (self.on_host.api, self.on_host.metadata):
                subprocess.run(["ip", "addr", "del", f"{address}/32", "dev", self.on_host.device],
                               capture_output=True)  # fmt: skip


# --- inside the namespace --------------------------------------------------------------------


class _Metadata(BaseHTTPRequestHandler):
    """The metadata server's token endpoint, as GKE's serves it to a workload-identity pod."""

    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802
        if self.headers.get("Metadata-Flavor") != "Google":
            return self._reply(403, b"Missing Metadata-Flavor:Google header.")
        if self.path.split("?")[0] != TOKEN_PATH:
            return self._reply(404, b"not found")
        body = {"access_token": TOKEN, "expires_in": 3599, "token_type": "Bearer"}
        self._reply(200, json.dumps(body).encode(), "application/json")

    def _reply(self, code: int, body: bytes, kind: str = "text/plain") -> None:
        self.send_response(code)
        self.send_header("Metadata-Flavor", "Google")
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def _is_header(line: bytes, name: bytes, value: bytes | None = None) -> bool:
    key, _, rest = line.partition(b":")
    return key.strip().lower() == name and (value is None or rest.strip().lower() == value)


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
    while n > 0:
        chunk = await reader.read(min(n, 1 << 20))
        if not chunk:
            raise ConnectionError("the client closed mid-body")
        writer.write(chunk)
        n -= len(chunk)
        await writer.drain()


def _count(method: str) -> None:
    _counts[method] = _counts.get(method, 0) + 1
    for path in _counts_path:  # written at once: a reader sees every request passed on so far
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(_counts))
        tmp.replace(path)


def requests_so_far(directory: Path) -> int:
    """Requests the front of the stand-in in ``directory`` has passed on, all methods."""
    path = directory / COUNTS_FILE
    return sum(json.loads(path.read_text()).values()) if path.exists() else 0


async def _requests(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, client: asyncio.StreamWriter
) -> None:
    """Client to server, request by request: the head less ``Transfer-Encoding: identity`` (a
    no-op that Go refuses) and, on a chunked body, less ``Content-Length`` (RFC 9112 6.3: an
    intermediary removes it; TensorFlow's curl sends both on uploads); then the body, passed on
    as it comes. A request without :data:`AUTHORIZATION` gets :data:`UNAUTHORIZED` on
    ``client`` and ends the connection, nothing passed on."""
    while head := await reader.readuntil(b"\r\n\r\n"):
        lines = [line for line in head.split(b"\r\n")
                 if not _is_header(line, b"transfer-encoding", b"identity")]  # fmt: skip
        if not any(_is_header(line, b"authorization", AUTHORIZATION.lower().encode())
                   for line in lines):  # fmt: skip
            client.write(UNAUTHORIZED)
            await client.drain()
            return
        _count(lines[0].split(b" ")[0].decode(errors="replace"))
        codings = [line for line in lines if _is_header(line, b"transfer-encoding")]
        chunked = codings == [b"Transfer-Encoding: chunked"]
        if codings and not chunked:
            raise ConnectionError(f"transfer codings {codings}: not passed on")
        if chunked:
            lines = [line for line in lines if not _is_header(line, b"content-length")]
        writer.write(b"\r\n".join(lines))
        if not chunked:
            lengths = [int(line.partition(b":")[2]) for line in lines
                       if _is_header(line, b"content-length")]  # fmt: skip
            await _copy(reader, writer, sum(lengths[:1]))
            continue
        while size_line := await reader.readuntil(b"\r\n"):
            writer.write(size_line)
            size = int(size_line.split(b";")[0], 16)
            if size == 0:  # the last chunk, then trailers up to an empty line
                while (trailer := await reader.readuntil(b"\r\n")) != b"\r\n":
                    writer.write(trailer)
                writer.write(b"\r\n")
                break
            await _copy(reader, writer, size + 2)
        await writer.drain()


async def _responses(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while chunk := await reader.read(1 << 20):
        writer.write(chunk)
        await writer.drain()


async def _front(address: str, server_tls: ssl.SSLContext, client_tls: ssl.SSLContext) -> None:
    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(
                address, BACKEND_PORT, ssl=client_tls, server_hostname=API_HOSTS[0]
            )
        except OSError:  # fake-gcs-server not listening yet (the first bucket request)
            writer.close()
            return
        tasks = [asyncio.ensure_future(_requests(reader, up_writer, writer)),
                 asyncio.ensure_future(_responses(up_reader, writer))]  # fmt: skip
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in tasks:
            task.cancel()
        for task in done:
            task.exception()  # a closed connection ends it: retrieved, not reported
        for w in (writer, up_writer):
            w.close()

    server = await asyncio.start_server(connection, address, 443, ssl=server_tls)
    async with server:
        await server.serve_forever()


def _create_bucket(ca: Path, bucket: str, host: str) -> None:
    tls = ssl.create_default_context(cafile=str(ca))
    request = urllib.request.Request(
        f"https://{host}/storage/v1/b", data=json.dumps({"name": bucket}).encode(),
        headers={"Content-Type": "application/json", "Authorization": AUTHORIZATION},
        method="POST",
    )  # fmt: skip
    urllib.request.urlopen(request, context=tls, timeout=10).read()


def _die_with_parent() -> None:
    """SIGTERM to fake-gcs-server when the holder dies, however it dies (a killed test run)."""
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def hold(directory: Path) -> None:
    """The servers, until SIGTERM: in a namespace of their own (run under ``unshare --net
    --mount``), or on the host's addresses of ``on_host`` in ``config.json``."""
    config = json.loads((directory / "config.json").read_text())
    bucket, on_host = config["bucket"], config.get("on_host")
    if on_host is None:
        address, bucket_host, metadata_at = "127.0.0.1", API_HOSTS[0], ("127.0.0.1", METADATA_PORT)
        subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
        hosts = directory / "hosts"
        hosts.write_text(f"127.0.0.1 localhost {' '.join(API_HOSTS)}\n::1 localhost\n")
        subprocess.run(["mount", "--bind", str(hosts), "/etc/hosts"], check=True)
    else:
        address = bucket_host = on_host["api"]
        metadata_at = (on_host["metadata"], 80)
    certs = pki.ServerCertificate.at(directory)
    cert, key = certs.cert, certs.key
    backend = subprocess.Popen(
        [str(FAKE_GCS_SERVER), "-scheme", "https", "-host", address,
         "-port", str(BACKEND_PORT), "-backend", "memory", "-log-level", "warn",
         "-public-host", API_HOSTS[1], "-external-url", f"https://{API_HOSTS[0]}",
         "-cert-location", str(cert), "-private-key-location", str(key)],
        stdout=(directory / "fake-gcs-server.log").open("wb"), stderr=subprocess.STDOUT,
        preexec_fn=_die_with_parent,
    )  # fmt: skip
    signal.signal(signal.SIGTERM, lambda *_: (backend.terminate(), sys.exit(0)))
    metadata = ThreadingHTTPServer(metadata_at, _Metadata)
    threading.Thread(target=metadata.serve_forever, daemon=True).start()
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(cert, key)
    client_tls = ssl.create_default_context(cafile=str(certs.ca))
    front = threading.Thread(
        target=asyncio.run, args=(_front(address, server_tls, client_tls),), daemon=True
    )
    front.start()
    deadline = time.monotonic() + READY_S
    while True:
        try:
            _create_bucket(certs.ca, bucket, bucket_host)
            break
        except OSError as err:  # refused until fake-gcs-server listens; an answer is final
            answered = isinstance(err, urllib.error.HTTPError)
            if answered or backend.poll() is not None or time.monotonic() > deadline:
                backend.terminate()
                raise SystemExit(f"object store: the bucket could not be made: {err}") from err
            time.sleep(0.2)
    _counts_path.append(directory / COUNTS_FILE)
    (directory / "ready").write_text(str(os.getpid()))
    print(f"object store: gs://{bucket} ready", flush=True)
    backend.wait()
    raise SystemExit(f"object store: fake-gcs-server exited {backend.returncode}")


if __name__ == "__main__":
    hold(Path(sys.argv[1]))
