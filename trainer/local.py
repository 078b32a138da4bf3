"""``python -m trainer.local --workers N``: the whole job on one machine, no cluster.

Starts N trainer processes on 127.0.0.1 with the pod environment contract, streams their
prefixed logs, restarts every worker after a failure as the StatefulSet does, and prints one
JSON line at the end (the fields: docs/trainer.md, "Local launcher"). Unknown flags go to every
worker and are validated before anything starts.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trainer import contract
from trainer.checkpoints import CHECKPOINTS_SUBDIR
from trainer.contract.flags import TrainerFlags, add_flags
from trainer.contract.usage import OneLineParser
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
from trainer.finish import SUMMARY_FILE
from trainer.local_cluster import LocalCluster, intra_op_threads, new_launch_id
from trainer.rescue import RESCUE_PREFIX
from trainer.storage import read_text

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


PROG = "python -m trainer.local"


class _HelpWithTrainerFlags(argparse.Action):
    """``--help``: the launcher's flags, then the trainer's, which it passes to every worker
    (the README sends a newcomer here for both)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        kwargs.update(nargs=0, default=argparse.SUPPRESS)
        super().__init__(option_strings, argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        shown = argparse.ArgumentParser(usage=argparse.SUPPRESS, add_help=False)
        add_flags(shown.add_argument_group("trainer flags (passed to every worker; the same as "
                                           "python -m trainer --help)"))  # fmt: skip
        parser.print_help()
        print()
        print(shown.format_help().rstrip())
        parser.exit()


def build_parser_local() -> OneLineParser:
    p = OneLineParser(
        prog=PROG,
        # As the trainer's own flags: an abbreviation here would also swallow trainer flags.
        allow_abbrev=False,
        add_help=False,
        description="Run N trainer workers on 127.0.0.1 with the pod contract environment. "
        "Other flags are passed to every worker: the trainer flags below.",
    )
    p.add_argument("-h", "--help", action=_HelpWithTrainerFlags,
                   help="show the launcher's and the trainer's flags and exit")  # fmt: skip
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
        help="directory (or gs:// URI) holding one directory per run id (default runs)",
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
    # Read as the trainer wrote it: a gs:// run directory is no local path.
    text = read_text(f"{root.rstrip('/')}/{SUMMARY_FILE}") if code == EXIT_OK else None
    summary: dict[str, Any] = json.loads(text) if text else {}
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
    why = contract.storage_problem(directory)
    if why is not None:
        flag = "--checkpoint-dir" if args.checkpoint_dir else "--checkpoint-root"
        build_parser_local().error(f"{flag}: {why}; got {directory!r}")
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
    # Exits 2 with one line on bad flags, before any worker starts; a near miss of a launcher
    # flag (--worker) is named too.
    flags = TrainerFlags.from_argv(rest, prog=PROG, also_known=build_parser_local().flags)
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
        try:
            Path(root).mkdir(parents=True, exist_ok=True)
        except OSError as err:  # a path under /proc, a file in the way, no permission
            flag = "--checkpoint-dir" if args.checkpoint_dir else "--checkpoint-root"
            print(f"{PROG}: error: {flag}: cannot create the run's directory {root}: "
                  f"{err.strerror or err}", file=sys.stderr)  # fmt: skip
            return EXIT_CHECKPOINT

    interrupted = threading.Event()
    # One launch id for all attempts: a restarted chief takes its lease back at once, while a
    # second launch of the same run id (same pod names, same host) is another holder.
    cluster = LocalCluster(args.workers, root, rest, out=sys.stdout, launch_id=new_launch_id())

    def on_signal(signum: int, _frame: Any) -> None:
        interrupted.set()
        cluster.terminate()  # workers checkpoint at the current step and exit

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)

    code, restarts, first_step_s = _attempts(args, cluster, root, interrupted)
    wall_s = time.time() - t0
    print(json.dumps(_summary_line(args.workers, root, wall_s, restarts, code, first_step_s)))
    if code != EXIT_OK and created:
        _discard_unresumable(root)
    return code


def _attempts(
    args: argparse.Namespace, cluster: LocalCluster, root: str, interrupted: threading.Event
) -> tuple[int, int, float | None]:
    """Start the workers until they end well, fail for good or run out of restarts:
    ``(exit code, restarts, the last attempt's launch to first step in seconds)``."""
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
    return code, restarts, first_step_s


def _discard_unresumable(root: str) -> None:
    """Remove the directory of a failed run this launch created when it holds no checkpoint:
    nothing in it resumes (manifest, lease and logs of a run that never saved), and leaving it
    would keep the run id taken. A run with a checkpoint stays, to be resumed: the chief's or
    a rescue (trainer.rescue), each complete once its state file is written."""
    directory = Path(root) / CHECKPOINTS_SUBDIR
    states = [directory / "checkpoint", *directory.glob(f"{RESCUE_PREFIX}*/checkpoint")]
    if any(state.is_file() for state in states):
        print(f"[launcher] the run's checkpoints stay in {root}: the same --run-id resumes it")
        return
    shutil.rmtree(root, ignore_errors=True)
    print(f"[launcher] removed {root}: the run failed before its first checkpoint")


if __name__ == "__main__":
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    sys.exit(main())
