"""Prometheus metrics and the pod's HTTP probes, served on ``contract.metrics_port``.

One threaded HTTP server answers ``METRICS_PATH`` (Prometheus text format), ``LIVENESS_PATH``
(always 200: the process is alive and its server answers) and ``READINESS_PATH`` (200 once the
strategy is up or training is done, else 503). Imports no TensorFlow, so it starts before
TensorFlow loads.

The liveness probe deliberately judges nothing else: a hung collective or a dead peer already
ends the process (heartbeat and collective timeouts, exit 75), while a "no progress for N
seconds" rule would restart healthy pods during a long first trace, data load or checkpoint.
"""

from __future__ import annotations

import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, generate_latest

from trainer import contract
from trainer.errors import ContractError

prometheus_client.disable_created_metrics()

STEP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
"""Per-step seconds: a GPU step of a small model to a large CPU step."""
SAVE_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
"""Checkpoint saves: tens of ms on a local disk to minutes for a large model on object storage."""


class Metrics:
    """All ``contract.METRIC_*`` series of one worker, in a private registry."""

    def __init__(self, task_index: int = 0, world_size: int = 1) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.step = Gauge(contract.METRIC_STEP, "Global training step.", registry=r)
        # prometheus_client appends _total to counters itself.
        self.steps_total = Counter(
            contract.METRIC_STEPS_TOTAL.removesuffix("_total"),
            "Training steps run by this process.",
            registry=r,
        )
        self.examples_total = Counter(
            contract.METRIC_EXAMPLES_TOTAL.removesuffix("_total"),
            "Global examples trained by the steps of this process.",
            registry=r,
        )
        self.step_seconds = Histogram(
            contract.METRIC_STEP_SECONDS,
            "Seconds per training step (each call's time over its steps).",
            buckets=STEP_BUCKETS,
            registry=r,
        )
        self.checkpoint_save_seconds = Histogram(
            contract.METRIC_CHECKPOINT_SAVE_SECONDS,
            "Seconds one checkpoint save stalls the step loop (all of its write with "
            "--sync-checkpoints).",
            buckets=SAVE_BUCKETS,
            registry=r,
        )
        self.eval_loss = Gauge(
            contract.METRIC_EVAL_LOSS, "Mean loss of the last evaluation pass.", registry=r
        )
        self.eval_accuracy = Gauge(
            contract.METRIC_EVAL_ACCURACY,
            "Accuracy (0-1) of the last evaluation pass.",
            registry=r,
        )
        self.info = Info(
            contract.METRIC_INFO.removesuffix("_info"),
            "This worker's place in the job (labels).",
            registry=r,
        )
        self.examples_per_second = Gauge(
            contract.METRIC_EXAMPLES_PER_SECOND,
            "Global examples per second over the last interval.",
            registry=r,
        )
        self.loss = Gauge(contract.METRIC_LOSS, "Mean training loss, last interval.", registry=r)
        self.accuracy = Gauge(
            contract.METRIC_ACCURACY, "Training accuracy (0-1), last call.", registry=r
        )
        self.epoch = Gauge(contract.METRIC_EPOCH, "Current epoch (0-based).", registry=r)
        self.world_size = Gauge(
            contract.METRIC_WORLD_SIZE, "Number of workers (0 until it is known).", registry=r
        )
        self.task_index = Gauge(
            contract.METRIC_TASK_INDEX, "This worker's index (-1 until it is known).", registry=r
        )
        self.checkpoint_step = Gauge(
            contract.METRIC_CHECKPOINT_STEP, "Step of the last checkpoint (-1: none).", registry=r
        )
        self.checkpoint_timestamp = Gauge(
            contract.METRIC_CHECKPOINT_TIMESTAMP,
            "Unix time of the last checkpoint (0: none).",
            registry=r,
        )
        self.checkpoint_age = Gauge(
            contract.METRIC_CHECKPOINT_AGE,
            "Seconds since the last checkpoint (since process start when none).",
            registry=r,
        )
        self.resumes_total = Counter(
            contract.METRIC_RESUMES_TOTAL.removesuffix("_total"),
            "Times this process resumed from a checkpoint.",
            registry=r,
        )
        self.completed = Gauge(
            contract.METRIC_COMPLETED, "1 once the DONE marker exists.", registry=r
        )
        self.run_info = Info(
            contract.METRIC_RUN_INFO.removesuffix("_info"),
            "The training run (TFD_RUN_ID) and this pod's revision (TFD_POD_REVISION).",
            registry=r,
        )
        self.run_info.info({"run_id": "", "revision": ""})
        self.supervisor_restarts = Counter(
            contract.METRIC_SUPERVISOR_RESTARTS.removesuffix("_total"),
            "Planned restarts of the trainer by the supervisor in this container.",
            registry=r,
        )
        self._started = time.time()
        self._last_ckpt_ts = 0.0
        self.checkpoint_age.set_function(
            lambda: time.time() - (self._last_ckpt_ts or self._started)
        )
        self.checkpoint_step.set(-1)
        self.place(task_index, world_size)
        self.ready = False

    def place(self, task_index: int, world_size: int) -> None:
        """This worker's index and the number of workers (the gauges and the info labels)."""
        self.info.info({"task_index": str(task_index), "world_size": str(world_size)})
        self.task_index.set(task_index)
        self.world_size.set(world_size)

    def identify(self, run_id: str, revision: str, supervisor_restarts: int) -> None:
        """The run and revision labels, and the supervisor's restart count so far."""
        self.run_info.info({"run_id": run_id, "revision": revision})
        self.supervisor_restarts.inc(supervisor_restarts)

    def stepped(self, steps: int, global_batch: int, seconds: float) -> None:
        """Record one training call: ``steps`` steps of ``global_batch`` in ``seconds``."""
        self.steps_total.inc(steps)
        self.examples_total.inc(steps * global_batch)
        self.step_seconds.observe(seconds / steps)

    def checkpointed(self, step: int, timestamp: float | None = None) -> None:
        """Record a checkpoint written (or restored) at ``step`` at Unix time ``timestamp``."""
        self._last_ckpt_ts = time.time() if timestamp is None else timestamp
        self.checkpoint_step.set(step)
        self.checkpoint_timestamp.set(self._last_ckpt_ts)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


def _handler(metrics: Metrics) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            path = self.path.split("?", 1)[0]
            if path == contract.METRICS_PATH:
                self._send(200, metrics.exposition(), prometheus_client.CONTENT_TYPE_LATEST)
            elif path == contract.LIVENESS_PATH:
                self._send(200, b"ok\n")
            elif path == contract.READINESS_PATH:
                ok = metrics.ready
                self._send(200 if ok else 503, b"ready\n" if ok else b"not ready\n")
            else:
                self._send(404, b"not found\n")

        def _send(self, code: int, body: bytes, ctype: str = "text/plain; charset=utf-8") -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            """Probes every few seconds would flood the logs."""

    return Handler


class _Server(ThreadingHTTPServer):
    """Quiet about clients that went away: a probe the kubelet gave up on while it waited in the
    supervisor's socket during a restart is answered to a closed connection."""

    def handle_error(self, request: object, client_address: object) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)  # type: ignore[arg-type]


class MetricsServer:
    """Threaded HTTP server for metrics and probes; ``port=0`` picks a free port. With ``fd``
    (the supervisor's listening socket, ``contract.metrics_fd``) it serves that socket instead
    of binding ``port``."""

    def __init__(
        self, metrics: Metrics, port: int, host: str = "0.0.0.0", fd: int | None = None
    ) -> None:
        handler = _handler(metrics)
        if fd is None:
            self._server = _Server((host, port), handler)
        else:
            self._server = _Server((host, port), handler, bind_and_activate=False)
            self._server.socket.close()
            try:
                self._server.socket = socket.socket(fileno=fd)
                self._server.server_address = self._server.socket.getsockname()
            except OSError as err:
                raise ContractError(
                    f"{contract.ENV_METRICS_FD}: {fd} is not the supervisor's listening "
                    f"socket: {err}"
                ) from None
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="metrics-http", daemon=True
        )

    def start(self) -> MetricsServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
