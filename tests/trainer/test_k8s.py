"""World size from the Kubernetes API, against a tiny local HTTP server."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from trainer import contract, k8s
from trainer.errors import ContractError

PATH = "/apis/apps/v1/namespaces/ml/statefulsets/tfd-worker"


class _Api:
    def __init__(self) -> None:
        self.status = 200
        self.body: bytes = b"{}"
        self.seen: list[tuple[str, str]] = []


@pytest.fixture
def api() -> Iterator[tuple[_Api, str]]:
    state = _Api()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            state.seen.append((self.path, self.headers.get("Authorization", "")))
            self.send_response(state.status)
            self.end_headers()
            self.wfile.write(state.body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield state, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _env(url: str, token: Path) -> dict[str, str]:
    return {
        contract.ENV_API_URL: url,
        contract.ENV_API_TOKEN_PATH: str(token),
        contract.ENV_NAMESPACE: "ml",
        contract.ENV_STATEFULSET: "tfd-worker",
    }


@pytest.fixture
def token(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text("s3cret\n")
    return path


def test_reads_spec_replicas(api: tuple[_Api, str], token: Path):
    state, url = api
    state.body = json.dumps({"spec": {"replicas": 4}}).encode()
    assert k8s.live_replicas(_env(url, token)) == 4
    assert state.seen == [(PATH, "Bearer s3cret")]


@pytest.mark.parametrize(
    ("status", "body", "match"),
    [
        (404, b"{}", r"HTTP 404"),
        (200, b"not json", r"GET http://127.0.0.1:\d+" + PATH),
        (200, b'{"spec": {}}', r"spec.replicas must be an integer >= 1; got None"),
        (200, b'{"spec": {"replicas": 0}}', r"spec.replicas must be an integer >= 1; got 0"),
        (200, b'{"spec": {"replicas": "2"}}', r"spec.replicas must be an integer >= 1; got '2'"),
    ],
)
def test_bad_answers(api: tuple[_Api, str], token: Path, status: int, body: bytes, match: str):
    state, url = api
    state.status, state.body = status, body
    with pytest.raises(ContractError, match=match):
        k8s.live_replicas(_env(url, token))


def test_missing_token(api: tuple[_Api, str], tmp_path: Path):
    _, url = api
    with pytest.raises(ContractError, match=r"TFD_API_TOKEN_PATH: cannot read"):
        k8s.live_replicas(_env(url, tmp_path / "absent"))


def test_missing_ca(token: Path, tmp_path: Path):
    env = _env("https://127.0.0.1:1", token) | {contract.ENV_API_CA_PATH: str(tmp_path / "ca")}
    with pytest.raises(ContractError, match=r"TFD_API_CA_PATH: cannot load"):
        k8s.live_replicas(env)


def test_unreachable(token: Path):
    with pytest.raises(ContractError, match=r"GET http://127.0.0.1:9/apis"):
        k8s.live_replicas(_env("http://127.0.0.1:9", token), timeout_s=2)


@pytest.mark.parametrize("missing", [contract.ENV_NAMESPACE, contract.ENV_STATEFULSET])
def test_url_needs_identity(missing: str, token: Path):
    env = _env("http://x", token)
    del env[missing]
    with pytest.raises(ContractError, match=f"{missing}: required"):
        k8s.statefulset_url(env)
