"""One measured run of each kind the benchmark compares, each in a fresh process.

- :func:`keras_run`: plain tf-keras ``model.fit`` (no strategy) on the trainer's own model
  builder and data pipeline, in a process of its own (``--keras-child``);
- :func:`trainer_run`: ``python -m trainer.local`` with N workers and any trainer flags;
- :func:`input_only_run`: the trainer's ``--input-only`` pass over the same data;
- :func:`dead_peer`: ``kill -9`` (or ``SIGSTOP``) of one of N training workers, timed until
  every survivor has exited.

Every run returns a dict of figures, ``wall_s`` (the benchmark's own clock around the process)
and the 1-minute load average when it ended; a run that cannot produce its figure raises
:class:`~benchmarks.roofline.BenchmarkError`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

# tf-keras (Keras 2) for the baseline, exactly what the trainer uses; must precede TF's import.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from benchmarks.roofline import BenchmarkError  # noqa: E402
from trainer.config import Config  # noqa: E402
from trainer.local_cluster import (  # noqa: E402
    LocalCluster,
    intra_op_threads,
    parse_events,
    split_worker_output,
)

REPO_ROOT = Path(__file__).resolve().parents[1]
KERAS_POLICIES = {"fp32": "float32", "bf16": "mixed_bfloat16", "fp16": "mixed_float16"}
"""tf-keras wraps the optimizer in a LossScaleOptimizer itself under ``mixed_float16``."""


@dataclass(frozen=True)
class BenchConfig:
    """What every run shares; the defaults give a full run of about 15-20 minutes here."""

    examples: int = 8192
    """Synthetic examples (the trainer's ``--synthetic-examples``)."""
    epochs: int = 2
    batch_size: int = 256
    """Examples per worker per step (the trainer's ``--batch-size``)."""
    steps_per_call: int = Config.steps_per_call
    """Steps per ``tf.function`` call; Keras gets it as ``steps_per_execution``."""
    seed: int = Config.seed
    learning_rate: float = Config.learning_rate
    matmul_n: int = 2048
    matmul_repeats: int = 5
    pairs: int = 10
    """Rounds of paired runs (each round runs every configuration once)."""
    extra_pairs: int = 2
    """Rounds (the first ones) that also run ``--jit`` and 2 workers: rows without a target,
    each about as slow as two other runs here."""
    input_only_runs: int = 3
    dead_peer_workers: int = 2
    kill_chief: bool = True
    """Also kill worker 0 (the chief) in a second dead-peer run."""
    dead_peer_repeats: int = 1
    timeout_s: float = 400.0
    """Upper bound for one run; a run past it is killed and reported as failed."""

    def trainer_args(self, extra: Sequence[str] = ()) -> list[str]:
        """Trainer flags that give it the same data and schedule as the baseline."""
        return [
            "--dataset",
            "synthetic",
            "--synthetic-examples",
            str(self.examples),
            "--epochs",
            str(self.epochs),
            "--batch-size",
            str(self.batch_size),
            "--steps-per-call",
            str(self.steps_per_call),
            "--seed",
            str(self.seed),
            "--learning-rate",
            str(self.learning_rate),
            *extra,
        ]


QUICK = BenchConfig(
    examples=4096,
    epochs=2,
    matmul_n=1024,
    matmul_repeats=3,
    pairs=1,
    extra_pairs=1,
    input_only_runs=1,
    kill_chief=False,
)


# --- parsing the launcher's output (pure) ----------------------------------------------------
@dataclass
class LocalRunOutput:
    """What ``python -m trainer.local`` printed: worker events and the final summary."""

    events: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    summary: dict[str, Any] | None = None

    def first(self, worker: int, event: str) -> dict[str, Any] | None:
        return next((e for e in self.events.get(worker, []) if e.get("event") == event), None)


def parse_local_output(lines: Sequence[str]) -> LocalRunOutput:
    """The launcher's stdout as per-worker events (the launcher's own parsers) and its JSON
    summary: its last unprefixed line that is an object with ``workers`` and ``exit_code``
    (``None`` if none; worker output merged after it is skipped)."""
    events = {i: parse_events(own) for i, own in split_worker_output(lines).items()}
    summary = None
    for line in reversed(lines):
        if line.startswith("{"):
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            if isinstance(doc, dict) and {"workers", "exit_code"} <= doc.keys():
                summary = doc
                break
    return LocalRunOutput(events, summary)


def checkpoint_figures(out: LocalRunOutput, worker: int = 0) -> dict[str, Any]:
    """Count and total seconds of the chief's checkpoint saves, from its ``checkpoint`` events."""
    saves = [e for e in out.events.get(worker, []) if e.get("event") == "checkpoint"]
    return {
        "checkpoints": len(saves),
        "checkpoint_s_total": round(sum(float(e.get("seconds", 0.0)) for e in saves), 3),
    }


def first_step_figures(out: LocalRunOutput) -> dict[str, Any]:
    """The launcher's ``launch_to_first_step_s`` (its start of the workers to the chief's
    ``first_step`` event), and from the chief's events: launch to its ``start`` event, the
    steps of the first call and the trainer's own ``startup_s``.

    Raises:
        BenchmarkError: no summary with ``launch_to_first_step_s``, or the chief logged no
            ``start`` or no ``first_step`` event.
    """
    first_s = (out.summary or {}).get("launch_to_first_step_s")
    start, first = out.first(0, "start"), out.first(0, "first_step")
    if first_s is None or start is None or first is None:
        raise BenchmarkError(
            "worker-0: no 'start' or 'first_step' log event, or no launch_to_first_step_s in "
            "the launcher's summary; cannot time the first step"
        )
    # The launcher's origin, recovered from its figure and the event it timed.
    t_launch = float(first["ts"]) - float(first_s)
    return {
        "launch_to_start_s": round(float(start["ts"]) - t_launch, 3),
        "launch_to_first_step_s": float(first_s),
        "first_call_steps": int(first["step"]) - int(start.get("start_step", 0)),
        "trainer_startup_s": start.get("startup_s"),
    }


# --- measurements ----------------------------------------------------------------------------
def keras_baseline(cfg: BenchConfig, precision: str = "fp32") -> dict[str, Any]:
    """Plain tf-keras ``model.fit``, no strategy, on the trainer's own data pipeline and model,
    under the Keras policy of ``precision`` (``fp32`` or ``bf16``).

    Steady state as the trainer measures it: from the end of the first execution (compile and
    the first ``steps_per_call`` steps) to the end of training.
    """
    import tf_keras

    from trainer import data, model

    source = data.synthetic(cfg.examples, cfg.seed)
    spe = source.num_examples // cfg.batch_size
    if spe < 1:
        raise BenchmarkError(
            f"--examples {cfg.examples}: fewer than one batch of --batch-size {cfg.batch_size}"
        )
    dataset = data.worker_dataset(
        source,
        num_workers=1,
        worker_index=0,
        batch_size=cfg.batch_size,
        steps_per_epoch=spe,
        epochs=cfg.epochs,
        start_step=0,
        seed=cfg.seed,
    )
    tf_keras.utils.set_random_seed(cfg.seed)  # as the trainer seeds its initial weights
    tf_keras.mixed_precision.set_global_policy(KERAS_POLICIES[precision])
    net = model.build("", source.input_shape, source.num_classes)
    net.compile(
        optimizer=tf_keras.optimizers.Adam(cfg.learning_rate),
        loss=tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
        steps_per_execution=cfg.steps_per_call,
    )

    class SteadyTimer(tf_keras.callbacks.Callback):
        """Time and global step at the end of the first execution, and at the end."""

        def __init__(self) -> None:
            super().__init__()
            self.epoch = 0
            self.t_first = 0.0
            self.steps_first = 0
            self.t_end = 0.0

        def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
            self.epoch = epoch

        def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
            # With steps_per_execution, `batch` is the index of the execution's last step.
            if not self.t_first:
                self.t_first = time.perf_counter()
                self.steps_first = self.epoch * spe + int(batch) + 1

        def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
            self.t_end = time.perf_counter()

    timer = SteadyTimer()
    t0 = time.perf_counter()
    history = net.fit(dataset, epochs=cfg.epochs, steps_per_epoch=spe, verbose=0, callbacks=[timer])
    total_steps = spe * cfg.epochs
    steady_steps = total_steps - timer.steps_first
    elapsed = timer.t_end - timer.t_first
    if steady_steps < 1 or elapsed <= 0:
        raise BenchmarkError(
            f"--examples {cfg.examples} --epochs {cfg.epochs}: only {total_steps} steps, no "
            "steady state after the first execution; use more examples or epochs"
        )
    return {
        "examples_per_sec": round(steady_steps * cfg.batch_size / elapsed, 1),
        "steps": total_steps,
        "steady_steps": steady_steps,
        "first_execution_s": round(timer.t_first - t0, 3),
        "steps_per_execution": cfg.steps_per_call,
        "precision": precision,
        "loss": float(history.history["loss"][-1]),
        "accuracy": float(history.history["accuracy"][-1]),
    }


_KERAS_RESULT = "KERAS_RESULT "


def keras_run(cfg: BenchConfig, precision: str = "fp32") -> dict[str, Any]:
    """:func:`keras_baseline` in a fresh process, with the trainer's 1-worker thread setting.

    The trainer always runs in fresh processes; a baseline run inside this process (already
    warmed by the roofline matmuls and earlier fits) measured faster than the same code in a
    fresh process (about 4.2-5.2k vs 3.4-4.1k examples/s here), so only this is a like-for-like
    comparison.
    """
    env = {**os.environ, "TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}
    arg = json.dumps({"config": asdict(cfg), "precision": precision})
    cmd = [sys.executable, "-m", "benchmarks.runs", "--keras-child", arg]
    t0 = time.time()
    try:
        proc = subprocess.run(
            cmd,
            cwd=REPO_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=cfg.timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise BenchmarkError(
            f"plain Keras baseline: no result within {cfg.timeout_s:g} s"
        ) from None
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(_KERAS_RESULT):
            result = json.loads(line[len(_KERAS_RESULT) :])
            return {**result, **_clock(t0)}
    raise BenchmarkError(
        f"plain Keras baseline exited with {proc.returncode}: {proc.stderr.strip()[-1500:]}"
    )


def _clock(t0: float) -> dict[str, float]:
    """The benchmark's wall time of a run started at ``t0``, and the load when it ended."""
    return {"wall_s": round(time.time() - t0, 3), "loadavg_1m": round(os.getloadavg()[0], 2)}


def _keras_child(arg: str) -> int:
    """Entry point of :func:`keras_run`'s process: one JSON result line."""
    import tensorflow as tf

    from trainer.local_cluster import intra_op_threads

    tf.config.threading.set_intra_op_parallelism_threads(intra_op_threads(1))
    doc = json.loads(arg)
    result = keras_baseline(BenchConfig(**doc["config"]), doc["precision"])
    print(_KERAS_RESULT + json.dumps(result), flush=True)
    return 0


def run_dir(tmp: str) -> str:
    """The run directory of a job inside the temporary directory ``tmp``: its last segment is
    the run id, which a random temporary name can break (one ending in ``_``)."""
    return os.path.join(tmp, "run")


def _launch(cfg: BenchConfig, workers: int, extra: Sequence[str]) -> tuple[int, list[str]]:
    """Run ``python -m trainer.local`` in a fresh checkpoint directory: exit code, output."""
    with tempfile.TemporaryDirectory(prefix=f"tfd-bench-{workers}w-") as tmp:
        ckpt = run_dir(tmp)
        cmd = [
            sys.executable,
            "-m",
            "trainer.local",
            "--workers",
            str(workers),
            "--restarts",
            "0",
            "--checkpoint-dir",
            ckpt,
            *cfg.trainer_args(extra),
        ]
        proc = subprocess.Popen(
            cmd,
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # one process group: a timeout ends the workers too
        )
        try:
            stdout, _ = proc.communicate(timeout=cfg.timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise BenchmarkError(
                f"trainer.local --workers {workers}: no result within {cfg.timeout_s:.0f} s"
            ) from None
    return proc.returncode, stdout.splitlines()


def trainer_run(cfg: BenchConfig, workers: int, extra: Sequence[str] = ()) -> dict[str, Any]:
    """One training job of ``workers`` local processes with the trainer flags ``extra``.

    Raises:
        BenchmarkError: the job timed out, failed, or printed no summary.
    """
    t0 = time.time()
    code, lines = _launch(cfg, workers, extra)
    out = parse_local_output(lines)
    summary = out.summary
    if code != 0 or summary is None or not summary.get("examples_per_sec"):
        tail = "\n".join(lines[-15:])
        raise BenchmarkError(
            f"trainer.local --workers {workers}: exit {code}, summary {summary}; "
            f"last lines:\n{tail}"
        )
    return {
        "workers": workers,
        "examples_per_sec": round(float(summary["examples_per_sec"]), 1),
        "global_batch": cfg.batch_size * workers,
        "final_step": summary["final_step"],
        "loss": summary["loss"],
        "accuracy": summary["accuracy"],
        "precision": summary.get("precision"),
        "launcher_wall_s": summary["wall_s"],
        **first_step_figures(out),
        **checkpoint_figures(out),
        **_clock(t0),
    }


def input_only_run(cfg: BenchConfig, extra: Sequence[str] = ()) -> dict[str, Any]:
    """The trainer's ``--input-only`` pass (1 worker) over the benchmark's data.

    Raises:
        BenchmarkError: the pass failed or logged no ``input_only`` event.
    """
    t0 = time.time()
    code, lines = _launch(cfg, 1, ["--input-only", *extra])
    event = parse_local_output(lines).first(0, "input_only")
    if code != 0 or event is None:
        tail = "\n".join(lines[-15:])
        raise BenchmarkError(f"trainer --input-only: exit {code}; last lines:\n{tail}")
    return {k: event[k] for k in ("examples_per_sec", "steps", "first_call_s")} | _clock(t0)


def dead_peer(
    cfg: BenchConfig, workers: int, victim: int, sig: signal.Signals = signal.SIGKILL
) -> dict[str, Any]:
    """Send ``sig`` to worker ``victim`` once every worker trains; time until all survivors exit.

    ``SIGKILL`` is a dead peer (its connections are refused at once); ``SIGSTOP`` is a frozen one
    (a hung node or a partition: nothing is refused, only the coordination-service heartbeat can
    tell). The workers get exactly the launcher's environment (``trainer.local.LocalCluster``)
    and its thread setting; training is long enough that nobody finishes before the signal.
    """
    args = cfg.trainer_args(
        ["--on-done", "exit", "--intra-op-threads", str(intra_op_threads(workers))]
    )
    # Far more epochs than the run lasts: training must still be running at the kill.
    args[args.index("--epochs") + 1] = "1000"
    with tempfile.TemporaryDirectory(prefix="tfd-bench-dead-") as tmp:
        cluster = LocalCluster(workers, run_dir(tmp), args, out=None)
        procs = cluster.start()
        try:
            deadline = time.time() + cfg.timeout_s
            while not all(wp.events("first_step") for wp in procs):
                if any(wp.proc.poll() is not None for wp in procs) or time.time() > deadline:
                    tail = "\n".join(line for wp in procs for line in wp.lines[-5:])
                    raise BenchmarkError(
                        f"dead-peer run: the {workers} workers never all trained; last lines:\n"
                        f"{tail}"
                    )
                time.sleep(0.02)
            survivors = [wp for wp in procs if wp.index != victim]
            t_kill = time.time()
            procs[victim].proc.send_signal(sig)
            exited: dict[int, float] = {}
            while len(exited) < len(survivors) and time.time() - t_kill < 60:
                for wp in survivors:
                    if wp.index not in exited and wp.proc.poll() is not None:
                        exited[wp.index] = time.time() - t_kill
                time.sleep(0.01)
        finally:
            cluster.kill()
            cluster.wait(grace_s=0)
    return {
        "workers": workers,
        "victim": victim,
        "signal": sig.name,
        "heartbeat_timeout_s": Config.heartbeat_timeout,
        "survivor_exit_s": {str(i): round(s, 3) for i, s in sorted(exited.items())},
        "all_exited_s": round(max(exited.values()), 3) if len(exited) == len(survivors) else None,
        "survivor_exit_codes": [wp.proc.returncode for wp in survivors if wp.index in exited],
    }


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m benchmarks.runs --keras-child JSON``: the Keras baseline's own process."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2 or args[0] != "--keras-child":
        print("usage: python -m benchmarks.runs --keras-child JSON (internal)", file=sys.stderr)
        return 2
    return _keras_child(args[1])


if __name__ == "__main__":
    sys.exit(main())
