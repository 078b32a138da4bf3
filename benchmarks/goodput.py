"""``python -m benchmarks.goodput`` (``make bench-goodput``): what failures cost a training run.

Each pair runs the same 2-worker local job (``python -m trainer.local``, the product's launcher,
which restarts all workers after a failure) twice, back to back, in an order reversed every
other pair: once undisturbed, once under a failure schedule (``kill -9`` of a random worker, or
``SIGTERM``, the preemption notice, every ``--every`` seconds of training). The benchmark reads
the workers' JSON log lines as they come and reports, per failure run:

* goodput: the undisturbed run's training time (its first step to its end, the useful work)
  over the failure run's wall time (its launch to its end), and the same for the undisturbed run;
* time from each failure to the chief's first step after it (p50, p95, and the median's 95%
  interval over all failures of all pairs);
* steps recomputed per failure: the chief's last step logged before the failure minus the step
  it resumed from, also as a fraction of the checkpoint interval;
* checkpoint save stall: each save's seconds over the step time;
* every attempt's start-up: launch to ``forming`` (interpreter and TensorFlow import), ``forming``
  to ``start`` (cluster formation, model, data and restore), ``start`` to ``first_step``.

The targets are printed verdicts, not tests (``tests/benchmarks`` checks the figures on made-up
logs); the JSON holds every run, failure and attempt.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from benchmarks import runs
from benchmarks.goodput_figures import (
    QUICK,
    SIGNALS,
    Failure,
    GoodputConfig,
    GoodputError,
    JobRecord,
    figures,
    parse_event,
    planned_steps,
    resolve_failures,
    training_s,
    verdicts,
)

REPO_ROOT = Path(__file__).resolve().parents[1]
UNDISTURBED, COLD = "undisturbed", "cold"
VARIANTS = (UNDISTURBED, COLD)
"""Per pair: no failures; failures with every restart starting cold, as a restarted pod does."""


def run_job(cfg: GoodputConfig, steps: int, variant: str, rng: random.Random) -> JobRecord:
    """Run the launcher once as ``variant`` (:data:`VARIANTS`): undisturbed, or signalling a
    random worker every ``cfg.every_s`` seconds of training (from each attempt's first step)
    until ``cfg.failures`` were sent."""
    inject = variant != UNDISTURBED
    record = JobRecord()
    pids: dict[int, int] = {}
    trained_since: list[float | None] = [None]  # the current attempt's first step, read time
    lock = threading.Lock()
    with tempfile.TemporaryDirectory(prefix="tfd-goodput-") as tmp:
        ckpt = runs.run_dir(tmp)
        cmd = [
            sys.executable, "-m", "trainer.local",
            "--workers", str(cfg.workers),
            "--restarts", str(cfg.failures + 5),
            "--checkpoint-dir", ckpt,
            *cfg.trainer_args(steps),
        ]  # fmt: skip
        record.t_launch = time.time()
        proc = subprocess.Popen(
            cmd, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True, bufsize=1,
        )  # fmt: skip

        def read() -> None:
            assert proc.stdout is not None
            for raw in proc.stdout:
                now = time.time()
                text = raw.rstrip("\n")
                with lock:
                    record.lines.append((now, text))
                    found = parse_event(text)
                    if text.startswith("[launcher] starting"):
                        pids.clear()
                        trained_since[0] = None
                    elif found is not None and found[1]["event"] == "start":
                        pids[found[0]] = int(found[1]["pid"])
                    elif found is not None and found[1]["event"] == "first_step" and found[0] == 0:
                        trained_since[0] = now

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        deadline = record.t_launch + cfg.timeout_s
        sig = SIGNALS[cfg.failure]
        while proc.poll() is None:
            if time.time() > deadline:
                os.killpg(proc.pid, signal.SIGKILL)
                raise GoodputError(f"the job did not end within {cfg.timeout_s:.0f} s")
            with lock:
                since = trained_since[0]
                due = (
                    inject
                    and len(record.failures) < cfg.failures
                    and since is not None
                    and time.time() - since >= cfg.every_s
                    and len(pids) == cfg.workers
                )
                if due:
                    worker = rng.randrange(cfg.workers)
                    try:
                        os.kill(pids[worker], sig)
                    except ProcessLookupError:
                        pass
                    else:
                        record.failures.append(Failure(time.time(), worker, cfg.failure))
                        trained_since[0] = None  # the next interval starts at the next step
            time.sleep(0.02)
        reader.join(timeout=10)
        record.exit_code = proc.returncode
        record.wall_s = time.time() - record.t_launch
    resolve_failures(record)
    return record


def probe_step_s(cfg: GoodputConfig) -> float:
    """The step time of a short undisturbed job (its training time over its steps)."""
    steps = 2 * cfg.checkpoint_every
    job = run_job(cfg, steps, UNDISTURBED, random.Random(0))
    if job.exit_code != 0:
        tail = "\n".join(text for _, text in job.lines[-15:])
        raise GoodputError(f"the probe job ended with exit code {job.exit_code}:\n{tail}")
    return training_s(job) / steps


def _machine() -> dict[str, Any]:
    return {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_1m": round(os.getloadavg()[0], 2),
    }


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.goodput", description=__doc__.split("\n")[0]
    )
    p.add_argument("--quick", action="store_true", help="3 failures every 20 s (development)")
    p.add_argument("--failure", choices=sorted(SIGNALS), default="kill")
    p.add_argument("--every", type=float, help="seconds of training between failures (120)")
    p.add_argument("--failures", type=int, help="failures per failure run (10)")
    p.add_argument("--pairs", type=int, help="undisturbed/failure pairs (1)")
    p.add_argument("--json", type=Path, help="write every run and figure to this file")
    p.add_argument("--sync-checkpoints", action="store_true",
                   help="run the trainer with --sync-checkpoints (the synchronous save, to "
                   "compare its stall)")  # fmt: skip
    p.add_argument("--no-rescue-checkpoint", action="store_true",
                   help="run the trainer with --no-rescue-checkpoint (resume from the last "
                   "periodic checkpoint, to compare the steps recomputed)")  # fmt: skip
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    base = QUICK if args.quick else GoodputConfig()
    try:
        cfg = GoodputConfig(
            **{
                **asdict(base),
                "failure": args.failure,
                "sync_checkpoints": args.sync_checkpoints,
                "no_rescue_checkpoint": args.no_rescue_checkpoint,
                **{k: v for k, v in (("every_s", args.every), ("failures", args.failures),
                                     ("pairs", args.pairs)) if v is not None},
            }
        )  # fmt: skip
        step_s = probe_step_s(cfg)
        steps = planned_steps(cfg, step_s)
        print(f"[goodput] step {step_s * 1000:.1f} ms: {steps} steps per job, "
              f"{cfg.pairs} pair(s), {cfg.failures} x {cfg.failure} every {cfg.every_s:g} s",
              flush=True)  # fmt: skip
        rng = random.Random(cfg.seed)
        failing = (COLD,)
        variants = (UNDISTURBED, *failing)
        jobs: dict[str, list[JobRecord]] = {v: [] for v in variants}
        for i in range(cfg.pairs):
            # Reversed every other pair: neither variant always runs first.
            for variant in variants if i % 2 == 0 else variants[::-1]:
                jobs[variant].append(run_job(cfg, steps, variant, rng))
            print(f"[goodput] pair {i + 1}/{cfg.pairs} done", flush=True)
        result = {
            v: figures(cfg, steps, list(zip(jobs[UNDISTURBED], jobs[v], strict=True)))
            for v in failing
        }
    except (GoodputError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    doc = {"config": asdict(cfg), "steps": steps, "machine": _machine(), **result}
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(doc, indent=1) + "\n")
    for variant in result:
        brief = {k: v for k, v in result[variant].items() if k != "pairs"}
        print(f"[goodput] failures with {variant} restarts: {json.dumps(brief)}")
        for line in verdicts(cfg, result[variant]):
            print(f"  {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
