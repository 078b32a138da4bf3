"""The runs of a stack, read from their records on the checkpoint storage (``tfd runs``).

Each run is a directory ``<root>/<run id>``; its manifest, ``DONE``, ``summary.json``, latest
checkpoint and lease tell three states apart: ``done``, ``training`` (an unexpired lease) and
``stopped``. An unreadable file is named in the run's ``problems``; the rest is still read.
Imports no TensorFlow for local paths. ``python -m trainer.run_list [--json] [ROOT]`` prints
them (:func:`document`).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from trainer import contract
from trainer.checkpoints import CHECKPOINTS_SUBDIR
from trainer.done_marker import DoneRecord
from trainer.errors import CheckpointError, ContractError, RunConflictError, TrainerError
from trainer.finish import SUMMARY_FILE
from trainer.lease import LEASE_FILE, LeaseRecord, utc
from trainer.manifest import MANIFEST_FILE
from trainer.storage import exists, gfile, is_local, join, read_text

STATE_FILE = "checkpoint"
"""TensorFlow's checkpoint state file in ``checkpoints/``."""
DOCUMENT_VERSION = 1
DONE, TRAINING, STOPPED = "done", "training", "stopped"
STATES = (DONE, TRAINING, STOPPED)
_LATEST = re.compile(r'^model_checkpoint_path:\s*"(?P<path>[^"]*)"\s*$', re.MULTILINE)
_STEP = re.compile(r"-(?P<step>\d+)$")
_RUN_FILES = (MANIFEST_FILE, contract.DONE_MARKER, SUMMARY_FILE, LEASE_FILE, CHECKPOINTS_SUBDIR)


@dataclass
class RunRecord:
    """One run, as its files record it; ``None``: not recorded (an older version, or a run
    that never got that far)."""

    run_id: str
    state: str
    """:data:`DONE`, :data:`TRAINING` or :data:`STOPPED` (module docstring)."""
    step: int | None = None
    """``done``: the final step; otherwise the step of the latest checkpoint."""
    accuracy: float | None = None
    """The last epoch's training accuracy (``summary.json``; done runs)."""
    eval_accuracy: float | None = None
    """The last evaluation's accuracy (``summary.json``; runs with ``--eval-dataset``)."""
    loss: float | None = None
    started_utc: str | None = None
    """The run's first training start (the manifest's ``created_utc``)."""
    finished_utc: str | None = None
    """When ``DONE`` was written (done runs)."""
    duration_s: float | None = None
    """``finished_utc - started_utc``: wall-clock time, stopped periods included (done runs)."""
    image: str | None = None
    """The image reference the run first trained with (manifest)."""
    image_digest: str | None = None
    """Its ``sha256:`` digest (manifest; without the annotation, the reference's own digest)."""
    source_commit: str | None = None
    config_hash: str | None = None
    problems: list[str] = field(default_factory=list)
    """One line per record file that exists but cannot be read or parsed."""


def _entries(root: str) -> list[str]:
    """The names of the directories directly under ``root``; none when it does not exist.

    Raises:
        CheckpointError: ``root`` exists but cannot be listed.
    """
    try:
        if is_local(root):
            if not os.path.isdir(root):
                return []
            return sorted(e.name for e in os.scandir(root) if e.is_dir())
        fs = gfile()
        if not fs.exists(root):
            return []
        names = [n.rstrip("/") for n in fs.listdir(root)]
        return sorted(n for n in names if fs.isdir(join(root, n)))
    except Exception as err:  # noqa: BLE001 - OSError or tf.errors.OpError (tf imported lazily)
        raise CheckpointError(f"{root}: cannot list the runs: {err}") from None


def _text(path: str, problems: list[str]) -> str | None:
    try:
        return read_text(path)
    except CheckpointError as err:
        problems.append(str(err))
        return None


def _json_object(path: str, problems: list[str]) -> dict[str, Any] | None:
    text = _text(path, problems)
    if text is None:
        return None
    try:
        doc = json.loads(text)
    except ValueError as err:
        problems.append(f"{path}: not JSON ({err}); got {text.strip()[:80]!r}")
        return None
    if not isinstance(doc, dict):
        problems.append(f"{path}: must be a JSON object; got {text.strip()[:80]!r}")
        return None
    return doc


def _str(doc: Mapping[str, Any] | None, key: str) -> str | None:
    value = (doc or {}).get(key)
    return value.strip() or None if isinstance(value, str) else None


def _float(
    doc: Mapping[str, Any] | None, key: str, problems: list[str], where: str
) -> float | None:
    """``doc[key]`` as a finite float; ``None`` (with a problem) for ``NaN``, ``1e999`` or an
    integer past a float's range, which a JSON document can hold but a figure cannot."""
    value = (doc or {}).get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        problems.append(f"{where}: {key} must be a finite number; got {str(value)[:40]}")
        return None
    return number


def _seconds(when: str | None) -> float | None:
    if not when:
        return None
    try:
        return datetime.strptime(when, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None


def latest_checkpoint_step(run_dir: str, problems: list[str]) -> int | None:
    """The step of the checkpoint TensorFlow's state file names as the latest
    (``ckpt-<step>``); ``None`` when there is no state file."""
    path = join(join(run_dir, CHECKPOINTS_SUBDIR), STATE_FILE)
    text = _text(path, problems)
    if text is None:
        return None
    latest = _LATEST.search(text)
    step = _STEP.search(latest["path"]) if latest else None
    if step is None:
        problems.append(f"{path}: names no checkpoint ckpt-<step>; got {text.strip()[:80]!r}")
        return None
    return int(step["step"])


def read_run(root: str, run_id: str, now: float) -> RunRecord | None:
    """The record of ``<root>/<run_id>``; ``None`` when the directory holds no run's file.
    ``now``: this reader's clock (Unix seconds), against the lease's expiry."""
    run_dir = join(root, run_id)
    problems: list[str] = []
    try:
        if not any(exists(join(run_dir, name)) for name in _RUN_FILES):
            return None
    except Exception as err:  # noqa: BLE001 - OSError or tf.errors.OpError
        return RunRecord(run_id, STOPPED, problems=[f"{run_dir}: cannot read: {err}"])
    manifest = _json_object(join(run_dir, MANIFEST_FILE), problems)
    summary_path = join(run_dir, SUMMARY_FILE)
    summary = _json_object(summary_path, problems)
    done_path = join(run_dir, contract.DONE_MARKER)
    done_text = _text(done_path, problems)
    done: DoneRecord | None = None
    if done_text is not None:
        try:
            done = DoneRecord.parse(done_text, done_path)
        except CheckpointError as err:
            problems.append(str(err))
    lease_path = join(run_dir, LEASE_FILE)
    lease_text = _text(lease_path, problems)
    lease: LeaseRecord | None = None
    if lease_text is not None:
        try:
            lease = LeaseRecord.parse(lease_text, lease_path)
        except RunConflictError as err:
            problems.append(str(err))
    # DONE is written last and by a rename: its presence alone means the run finished.
    if done_text is not None:
        state = DONE
    elif lease is not None and lease.expires_at > now:
        state = TRAINING
    else:
        state = STOPPED
    step: int | None
    if state == DONE:
        step = done.final_step if done is not None else _int(summary, "final_step")
    else:
        step = latest_checkpoint_step(run_dir, problems)
    started = _str(manifest, "created_utc")
    finished = (done.finished_utc or None) if done is not None else None
    begin, end = _seconds(started), _seconds(finished)
    image = _str(manifest, "image")
    finished_summary = summary if state == DONE else None
    return RunRecord(
        run_id=run_id,
        state=state,
        step=step,
        accuracy=_float(finished_summary, "accuracy", problems, summary_path),
        eval_accuracy=_float(finished_summary, "eval_accuracy", problems, summary_path),
        loss=_float(finished_summary, "loss", problems, summary_path),
        started_utc=started,
        finished_utc=finished,
        duration_s=end - begin if begin is not None and end is not None else None,
        image=image,
        image_digest=_str(manifest, "image_digest") or contract.image_digest(image or "") or None,
        source_commit=_str(manifest, "source_commit"),
        config_hash=_str(manifest, "config_hash"),
        problems=problems,
    )


def _int(doc: Mapping[str, Any] | None, key: str) -> int | None:
    value = (doc or {}).get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def list_runs(root: str, now: Callable[[], float] = time.time) -> list[RunRecord]:
    """Every run under ``root``, newest first (by start; runs without one last, by id).

    Raises:
        CheckpointError: ``root`` exists but cannot be listed.
    """
    at = now()
    records = [r for r in (read_run(root, name, at) for name in _entries(root)) if r is not None]
    records.sort(key=lambda r: r.run_id)
    records.sort(key=lambda r: r.started_utc or "", reverse=True)
    return records


def document(root: str, now: Callable[[], float] = time.time) -> dict[str, Any]:
    """``{"version", "root", "read_utc", "runs": [RunRecord fields...]}``: what ``tfd runs``
    reads from the entry point."""
    at = now()
    runs = list_runs(root, lambda: at)
    return {
        "version": DOCUMENT_VERSION,
        "root": root,
        "read_utc": utc(at),
        "runs": [asdict(r) for r in runs],
    }


def default_root(env: Mapping[str, str]) -> str:
    """The parent of ``TFD_CHECKPOINT_DIR``: the directory holding every run of the stack.

    Raises:
        ContractError: the variable is unset, or has no parent.
    """
    run_dir = env.get(contract.ENV_CHECKPOINT_DIR, "").strip().rstrip("/")
    root, _, run_id = run_dir.rpartition("/")
    if not run_id or not root or root.endswith(":/"):
        raise ContractError(
            f"{contract.ENV_CHECKPOINT_DIR}: needs <root>/<run id> to find the runs (or pass "
            f"ROOT); got {env.get(contract.ENV_CHECKPOINT_DIR)!r}"
        )
    return root


def _text_lines(doc: Mapping[str, Any]) -> list[str]:
    lines = [f"runs under {doc['root']}:"]
    for r in doc["runs"]:
        lines.append(
            f"{r['run_id']}\t{r['state']}\tstep {r['step'] if r['step'] is not None else '-'}"
            f"\taccuracy {r['accuracy'] if r['accuracy'] is not None else '-'}"
            f"\tstarted {r['started_utc'] or '-'}\timage {r['image_digest'] or '-'}"
        )
        lines.extend(f"  problem: {p}" for p in r["problems"])
    return lines


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    """``python -m trainer.run_list``; returns the exit code (``trainer.errors``)."""
    parser = argparse.ArgumentParser(
        prog="python -m trainer.run_list",
        description="The runs under a stack's checkpoint root, from their records.",
        allow_abbrev=False,
    )
    parser.add_argument("root", nargs="?", help="default: the parent of $TFD_CHECKPOINT_DIR")
    parser.add_argument("--json", action="store_true", help="one JSON document")
    args = parser.parse_args(argv)
    try:
        root = args.root or default_root(os.environ if env is None else env)
        doc = document(root.rstrip("/") or "/")
    except TrainerError as err:
        print(f"trainer.run_list: error: {err}", file=sys.stderr)
        return err.exit_code
    if args.json:
        print(json.dumps(doc, sort_keys=True, allow_nan=False))
    else:
        print("\n".join(_text_lines(doc)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
