"""A fake Kubernetes API on 127.0.0.1 for the trainer's adapter: records every request (method,
path, headers, body) and answers from a table the test sets."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from trainer import contract


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class FakeApi:
    """``replicas``/``update_revision``/``uid`` feed the StatefulSet GET (no ``metadata`` while
    ``uid`` is empty); ``status`` maps a method to the
    HTTP status it answers (default 200); a method in ``cut_short`` gets its answer truncated
    (the full ``Content-Length``, half the body, then the connection closes: the client's
    ``http.client.IncompleteRead``); ``seen`` lists the requests."""

    replicas: int = 1
    update_revision: str = ""
    uid: str = ""
    annotations: dict[str, str] = field(default_factory=dict)
    """The StatefulSet's ``metadata.annotations`` (with ``uid``: no ``metadata`` while both are
    empty)."""
    status: dict[str, int] = field(default_factory=dict)
    cut_short: set[str] = field(default_factory=set)
    seen: list[Seen] = field(default_factory=list)
    url: str = ""
    on_request: Callable[[Seen], None] | None = None
    """Called with each request before it is answered (to look at the world at that moment)."""
    _server: ThreadingHTTPServer | None = None

    def start(self) -> FakeApi:
        api = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                seen = Seen(
                    self.command,
                    self.path,
                    dict(self.headers.items()),
                    json.loads(raw) if raw else None,
                )
                if api.on_request is not None:
                    api.on_request(seen)
                api.seen.append(seen)
                code = api.status.get(self.command, 200)
                if code != 200:
                    doc = {"kind": "Status", "message": f"{self.command} is forbidden here"}
                elif self.command == "GET":
                    doc = {
                        "spec": {"replicas": api.replicas},
                        "status": {"updateRevision": api.update_revision},
                    }
                    if api.uid or api.annotations:
                        doc["metadata"] = {"uid": api.uid, "annotations": api.annotations}
                else:
                    doc = {"kind": "Scale" if self.command == "PATCH" else "Pod"}
                body = json.dumps(doc).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command in api.cut_short:
                    self.wfile.write(body[: len(body) // 2])
                    self.close_connection = True
                    return
                self.wfile.write(body)

            do_GET = do_PATCH = do_DELETE = _answer  # noqa: N815

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def env(self, token: Path) -> dict[str, str]:
        """The API-access part of the contract environment, pointing at this fake."""
        if not token.exists():
            token.write_text("s3cret\n")
        return {contract.ENV_API_URL: self.url, contract.ENV_API_TOKEN_PATH: str(token)}

    def calls(self, method: str) -> list[Seen]:
        return [s for s in self.seen if s.method == method]
