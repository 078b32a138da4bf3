"""``python -m trainer.local --workers N``: the whole job on one machine, no cluster.

Starts N trainer processes on 127.0.0.1 that receive exactly the pod environment contract
(``TFD_POD_NAME=<statefulset>-<i>``, ``TFD_REPLICAS=N``, ...) plus ``TFD_WORKER_HOSTS`` mapping the
peers to free loopback ports. It prefixes and streams their logs, and does what the StatefulSet
does after a failure: restart every worker (up to ``--restarts`` times); they resume from the
last checkpoint. The last stdout line is one JSON object::

    {"workers", "final_step", "loss", "accuracy", "examples_per_sec", "wall_s", "restarts"}

plus ``"precision"`` (as the trainer resolved it), ``"exit_code"``, ``"run_id"``,
``"checkpoint_dir"`` and ``"launch_to_first_step_s"`` (seconds from starting the last attempt's
processes to the chief's first finished training call). Unknown flags go to every worker (see
``python -m trainer --help``) and are validated before anything starts.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from trainer import contract
from trainer.checkpoints import CHECKPOINTS_SUBDIR
from trainer.contract.flags import TrainerFlags
from trainer.errors import (
    EXIT_API,
    EXIT_CHECKPOINT,
    EXIT_CONTRACT,
    EXIT_DATA,
    EXIT_DIVERGED,
    EXIT_MODEL,
    EXIT_OK,
    EXIT_RUN_CONFLICT,
    EXIT_USAGE,
)
from trainer.tf_notices import NO_GPU_NOTE, NoticeFilter

STATEFULSET = "tfd-worker"
SERVICE = "tfd-workers"
NAMESPACE = "local"
PERMANENT_EXIT_CODES = frozenset(
    {
        EXIT_USAGE,
        EXIT_CONTRACT,
        EXIT_DATA,
        EXIT_CHECKPOINT,
        EXIT_MODEL,
        EXIT_API,
        EXIT_DIVERGED,
        EXIT_RUN_CONFLICT,
    }
)
"""Usage, contract, data, checkpoint, model and API (RBAC) errors, a diverged loss (it would
diverge again from the same checkpoint) and run conflicts (another run's manifest, another live
chief's lease): restarting cannot fix them."""
EXIT_INTERRUPTED = 130
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
    env = dict(base if base is not None else os.environ)
    env.pop(contract.ENV_TF_CONFIG, None)
    env.pop(contract.ENV_LAUNCH_ID, None)
    if launch_id:
        env[contract.ENV_LAUNCH_ID] = launch_id
    env.setdefault("TF_USE_LEGACY_KERAS", "1")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env["PYTHONUNBUFFERED"] = "1"
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


def build_parser_local() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m trainer.local",
        # As the trainer's own flags: an abbreviation here would also swallow trainer flags.
        allow_abbrev=False,
        description="Run N trainer workers on 127.0.0.1 with the pod contract environment. "
        "Other flags are passed to every worker (python -m trainer --help).",
    )
    p.add_argument("--workers", type=int, default=2, help="worker processes, 1-16 (default 2)")
    p.add_argument(
        "--restarts",
        type=int,
        default=3,
        help="times all workers are restarted after a failure, 0-100 (default 3)",
    )
    p.add_argument(
        "--run-id",
        default="",
        help="the run's identity (TFD_RUN_ID): checkpoints go to <checkpoint root>/<run id>. "
        "The same id resumes the run (or, finished, leaves it finished unless more epochs are "
        "asked for); a new id trains from step 0. Default: a new id, the launch time",
    )
    p.add_argument(
        "--checkpoint-root",
        default="runs",
        help="directory (or gs:// s3:// URI) holding one directory per run id (default runs)",
    )
    p.add_argument(
        "--checkpoint-dir",
        default="",
        help="the run's directory itself instead of --checkpoint-root/--run-id (its last path "
        "segment is the run id)",
    )
    return p


def _summary_line(
    workers: int,
    root: str,
    wall_s: float,
    restarts: int,
    code: int,
    first_step_s: float | None = None,
) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    path = Path(root) / "summary.json"
    if code == EXIT_OK and path.exists():
        summary = json.loads(path.read_text())
    return {
        "workers": workers,
        "final_step": summary.get("final_step"),
        "loss": summary.get("loss"),
        "accuracy": summary.get("accuracy"),
        "examples_per_sec": summary.get("examples_per_sec"),
        "precision": summary.get("precision"),
        "wall_s": round(wall_s, 3),
        "restarts": restarts,
        "exit_code": code,
        "run_id": contract.run_id_of(root),
        "checkpoint_dir": root,
        "launch_to_first_step_s": first_step_s,
    }


def _checkpoint_dir(args: argparse.Namespace) -> str:
    """``--checkpoint-dir``, else ``--checkpoint-root/--run-id`` (a new id: the launch time)."""
    if args.checkpoint_dir:
        if args.run_id:
            build_parser_local().error(
                f"--run-id: give --run-id or --checkpoint-dir, not both; got --run-id "
                f"{args.run_id} with --checkpoint-dir {args.checkpoint_dir}"
            )
        directory = args.checkpoint_dir
    else:
        run_id = args.run_id or time.strftime("%Y%m%d-%H%M%S")
        directory = f"{args.checkpoint_root.rstrip('/')}/{run_id}"
    run_id = contract.run_id_of(directory)
    if not contract.RUN_ID.match(run_id):
        build_parser_local().error(
            f"--run-id: must be {contract.RUN_ID_RULE} (the last segment of --checkpoint-dir "
            f"counts); got {run_id!r}"
        )
    return directory


def main(argv: Sequence[str] | None = None) -> int:
    """Launch, supervise and summarise a local job; returns the process exit code."""
    t0 = time.time()
    args, rest = build_parser_local().parse_known_args(argv)
    if not 1 <= args.workers <= 16:
        build_parser_local().error(f"--workers: must be in [1, 16]; got {args.workers}")
    if not 0 <= args.restarts <= 100:
        build_parser_local().error(f"--restarts: must be in [0, 100]; got {args.restarts}")
    root = _checkpoint_dir(args)
    # Exits 2 with a clear message on bad flags, before any worker starts.
    flags = TrainerFlags.from_argv(rest, prog="python -m trainer.local [launcher flags]")
    if "--intra-op-threads" not in " ".join(rest):
        # N processes on few cores: more threads than cores per process only adds contention.
        rest += ["--intra-op-threads", str(intra_op_threads(args.workers))]
    if flags.on_done != contract.ON_DONE_EXIT:
        # No StatefulSet to scale to zero, no pod to keep idle: a finished local job exits.
        rest += ["--on-done", contract.ON_DONE_EXIT]
    created = False
    if "://" not in root:
        root = str(Path(root).resolve())
        created = not Path(root).exists()
        Path(root).mkdir(parents=True, exist_ok=True)

    interrupted = threading.Event()
    # One launch id for all attempts: a restarted chief takes its lease back at once, while a
    # second launch of the same run id (same pod names, same host) is another holder.
    cluster = LocalCluster(args.workers, root, rest, out=sys.stdout, launch_id=new_launch_id())

    def on_signal(signum: int, _frame: Any) -> None:
        interrupted.set()
        cluster.terminate()  # workers checkpoint at the current step and exit

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)

    restarts = 0
    while True:
        print(f"[launcher] starting {args.workers} workers, checkpoints in {root}", flush=True)
        t_attempt = time.time()
        cluster.start()
        codes = cluster.wait()
        first = cluster.procs[0].events("first_step")
        first_step_s = round(first[0]["ts"] - t_attempt, 3) if first else None
        failed = [c for c in codes if c != 0]
        if not failed:
            code = EXIT_OK
            break
        code = next((c for c in failed if c > 0), failed[0] if failed[0] > 0 else 1)
        print(f"[launcher] worker exit codes {codes}", flush=True)
        if interrupted.is_set():
            code = EXIT_INTERRUPTED
            break
        if any(c in PERMANENT_EXIT_CODES for c in failed) or restarts >= args.restarts:
            break
        restarts += 1
        print(f"[launcher] restarting all workers ({restarts}/{args.restarts})", flush=True)
    wall_s = time.time() - t0
    print(json.dumps(_summary_line(args.workers, root, wall_s, restarts, code, first_step_s)))
    if code != EXIT_OK and created:
        _discard_unresumable(root)
    return code


def _discard_unresumable(root: str) -> None:
    """Remove the directory of a failed run this launch created when it holds no checkpoint:
    nothing in it resumes (manifest, lease and logs of a run that never saved), and leaving it
    would keep the run id taken. A run with a checkpoint stays, to be resumed."""
    if (Path(root) / CHECKPOINTS_SUBDIR / "checkpoint").exists():
        print(f"[launcher] the run's checkpoints stay in {root}: the same --run-id resumes it")
        return
    shutil.rmtree(root, ignore_errors=True)
    print(f"[launcher] removed {root}: the run failed before its first checkpoint")


if __name__ == "__main__":
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    sys.exit(main())
