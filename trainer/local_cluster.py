"""The local job's processes: N trainer workers on 127.0.0.1 with the pod contract environment.

:class:`LocalCluster` starts one attempt of the job (each worker gets exactly the environment
the StatefulSet gives its pods, plus ``TFD_WORKER_HOSTS`` mapping the peers to free loopback
ports), prefixes and streams their output and waits for them; ``python -m trainer.local``
(:mod:`trainer.local`) restarts attempts after failures. The parsers read the output back.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any, TextIO

from trainer import contract
from trainer.tf_notices import NO_GPU_NOTE, NoticeFilter

STATEFULSET = "tfd-worker"
SERVICE = "tfd-workers"
NAMESPACE = "local"
_GRACE_S = 15.0
_WORKER_LINE = re.compile(r"^\[worker-(\d+)\] (.*)$")
"""A worker's output line as the launcher prints it: ``[worker-<i>] <line>``."""


def intra_op_threads(workers: int, cpus: int | None = None) -> int:
    """Threads per worker process so that ``workers`` processes share ``cpus`` cores (default:
    this machine's); at least 1. More threads than cores per process only adds contention."""
    return max(1, (cpus or os.cpu_count() or 1) // workers)


def parse_events(lines: Iterable[str], name: str | None = None) -> list[dict[str, Any]]:
    """The structured log events (JSON object lines with ``event``) among a worker's output
    lines, optionally only those named ``name``; other output (TensorFlow's stderr) is skipped."""
    found = []
    for line in lines:
        if not line.startswith("{"):
            continue
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict) and "event" in doc and (name is None or doc["event"] == name):
            found.append(doc)
    return found


def split_worker_output(lines: Iterable[str]) -> dict[int, list[str]]:
    """The launcher's stdout split back into each worker's own lines, by their prefix."""
    out: dict[int, list[str]] = {}
    for raw in lines:
        match = _WORKER_LINE.match(raw.rstrip("\n"))
        if match:
            out.setdefault(int(match.group(1)), []).append(match.group(2))
    return out


def free_ports(count: int) -> list[int]:
    """``count`` distinct free TCP ports on 127.0.0.1 (closed again; picked by the kernel)."""
    with ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]


def new_launch_id() -> str:
    """A fresh :data:`~trainer.contract.ENV_LAUNCH_ID` (16 hex digits)."""
    return secrets.token_hex(8)


def launch_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """What every worker process of a launch starts with, before its own contract variables:
    ``base`` (default ``os.environ``) without another launch's cluster and launch id."""
    env = dict(base if base is not None else os.environ)
    env.pop(contract.ENV_TF_CONFIG, None)
    env.pop(contract.ENV_LAUNCH_ID, None)
    env.setdefault("TF_USE_LEGACY_KERAS", "1")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def worker_envs(
    workers: int,
    checkpoint_dir: str,
    base: Mapping[str, str] | None = None,
    statefulset: str = STATEFULSET,
    launch_id: str = "",
) -> list[dict[str, str]]:
    """The contract environment of each local worker, with fresh loopback ports; ``launch_id``
    (:data:`~trainer.contract.ENV_LAUNCH_ID`) for every worker when given. One inherited from
    ``base`` is dropped: it belongs to another launch."""
    ports = free_ports(2 * workers)
    grpc, metrics = ports[:workers], ports[workers:]
    env = launch_env(base)
    if launch_id:
        env[contract.ENV_LAUNCH_ID] = launch_id
    hosts = ",".join(f"127.0.0.1:{p}" for p in grpc)
    out = []
    for i in range(workers):
        e = dict(env)
        e.update(
            {
                contract.ENV_POD_NAME: f"{statefulset}-{i}",
                contract.ENV_STATEFULSET: statefulset,
                contract.ENV_SERVICE: SERVICE,
                contract.ENV_NAMESPACE: NAMESPACE,
                contract.ENV_REPLICAS: str(workers),
                contract.ENV_REPLICAS_SOURCE: "env",
                contract.ENV_GRPC_PORT: str(grpc[i]),
                contract.ENV_METRICS_PORT: str(metrics[i]),
                contract.ENV_CHECKPOINT_DIR: checkpoint_dir,
                contract.ENV_RUN_ID: contract.run_id_of(checkpoint_dir),
                contract.ENV_WORKER_HOSTS: hosts,
            }
        )
        out.append(e)
    return out


@dataclass
class WorkerProcess:
    """One running worker: its process, its log lines, its exit code and time."""

    index: int
    proc: subprocess.Popen[str]
    env: dict[str, str]
    lines: list[str] = field(default_factory=list)
    exit_time: float | None = None
    reader: threading.Thread | None = None

    @property
    def metrics_port(self) -> int:
        return int(self.env[contract.ENV_METRICS_PORT])

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        """The worker's structured log events (optionally only ``name``)."""
        return parse_events(self.lines, name)


class LocalCluster:
    """N trainer processes on loopback with the contract environment; one attempt.

    ``module`` is what each process runs: ``trainer`` (default), or ``trainer.supervisor``, the
    image's entrypoint, which restarts the trainer in place on exit 75/76/77. ``launch_id`` goes
    to every worker of every attempt (:func:`worker_envs`); the launcher draws one per launch.
    Every attempt starts cold, as a restarted pod does.
    """

    def __init__(
        self,
        workers: int,
        checkpoint_dir: str,
        trainer_args: Sequence[str] = (),
        out: TextIO | None = None,
        python: str = sys.executable,
        extra_env: Mapping[str, str] | None = None,
        module: str = contract.TRAINER_MODULE,
        launch_id: str = "",
    ) -> None:
        self.extra_env = dict(extra_env or {})
        self.launch_id = launch_id
        self.module = module
        self.workers = workers
        self.checkpoint_dir = checkpoint_dir
        self.trainer_args = list(trainer_args)
        self.out = out
        self.python = python
        self.procs: list[WorkerProcess] = []
        self._lock = threading.Lock()
        self._noted_no_gpu = False  # NO_GPU_NOTE is printed once per launch, not per worker

    def start(self) -> list[WorkerProcess]:
        envs = worker_envs(self.workers, self.checkpoint_dir, launch_id=self.launch_id)
        self.procs = []
        for i, env in enumerate(envs):
            env.update(self.extra_env)
            proc = subprocess.Popen(
                [self.python, "-m", self.module, *self.trainer_args],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                bufsize=1,
            )
            wp = WorkerProcess(i, proc, env)
            wp.reader = threading.Thread(target=self._pump, args=(wp,), daemon=True)
            wp.reader.start()
            self.procs.append(wp)
        return self.procs

    def _pump(self, wp: WorkerProcess) -> None:
        assert wp.proc.stdout is not None
        notices = NoticeFilter()
        for raw in wp.proc.stdout:
            line = raw.rstrip("\n")
            wp.lines.append(line)
            shown = notices.shown(line)
            if self.out is not None and notices.no_driver and not self._noted_no_gpu:
                with self._lock:
                    if not self._noted_no_gpu:
                        self._noted_no_gpu = True
                        self.out.write(f"[launcher] {NO_GPU_NOTE}\n")
            if self.out is not None and shown:
                with self._lock:
                    self.out.write(f"[worker-{wp.index}] {line}\n")
                    self.out.flush()
        wp.proc.wait()
        wp.exit_time = time.time()

    def signal(self, index: int, sig: int) -> None:
        self.procs[index].proc.send_signal(sig)

    def wait(
        self,
        grace_s: float = _GRACE_S,
        kill_on_failure: bool = True,
        timeout_s: float | None = None,
    ) -> list[int]:
        """Wait for every worker; after the first failure the rest get ``grace_s`` to exit on
        their own (they should: peer loss or a coordinated stop), then are killed. After
        ``timeout_s`` (None: no limit) every worker still running is killed."""
        deadline = None
        hard_deadline = None if timeout_s is None else time.time() + timeout_s
        while True:
            codes = [wp.proc.poll() for wp in self.procs]
            if all(c is not None for c in codes):
                break
            if hard_deadline is not None and time.time() > hard_deadline:
                self.kill()
            if kill_on_failure and deadline is None and any(c not in (None, 0) for c in codes):
                deadline = time.time() + grace_s
            if deadline is not None and time.time() > deadline:
                self.kill()
            time.sleep(0.05)
        for wp in self.procs:
            if wp.reader is not None:
                wp.reader.join(timeout=5)
        return [int(wp.proc.returncode) for wp in self.procs]

    def kill(self) -> None:
        for wp in self.procs:
            if wp.proc.poll() is None:
                wp.proc.kill()

    def terminate(self) -> None:
        for wp in self.procs:
            if wp.proc.poll() is None:
                wp.proc.terminate()
