"""Asynchronous checkpoint saves (trainer.saver): a save waited for is complete and restorable
in a process that exits at once after it, a process killed mid-write leaves the state file
naming a checkpoint that restores, a non-chief's private copy goes once its write is done, and a
failed background write is reported with the previous checkpoint still the latest."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from tests.trainer.test_checkpoints import _fill, full_volume  # noqa: F401 - the fixture
from trainer import checkpoints, contract
from trainer.checkpoints import Progress
from trainer.errors import EXIT_CHECKPOINT, CheckpointError
from trainer.logs import Log
from trainer.metrics import Metrics
from trainer.rescue import RESCUE_PREFIX
from trainer.saver import Saver

SUBDIR = checkpoints.CHECKPOINTS_SUBDIR
ROOT = Path(__file__).resolve().parents[2]
PROGRESS = Progress(64)
"""Checkpoints that record no global batch, compared by step."""
SIZE = 4_000_000
"""Floats per variable: 16 MB, a write that takes a while."""

# Saves step 1 (waited for), then step 2 and maybe waits, then exits at once: os._exit skips
# TensorFlow's atexit join of its write thread, as a crash or a kill would.
CHILD = textwrap.dedent(
    """
    import io, os, sys
    import tensorflow as tf
    from trainer import checkpoints
    from trainer.logs import Log
    from trainer.metrics import Metrics
    from trainer.checkpoints import Progress
    from trainer.saver import Saver

    root, wait = sys.argv[1], sys.argv[2] == "wait"
    w = tf.Variable(tf.zeros([{size}]))
    step = tf.Variable(0, dtype=tf.int64)
    manager, _ = checkpoints.manager(tf.train.Checkpoint(w=w, step=step), root, True, 0)
    saver = Saver(manager, step, "", Metrics(), Log(0, sys.stdout), True, True, Progress(1))
    w.assign(tf.fill([{size}], 1.0))
    saver.save(1, wait=True)
    w.assign(tf.fill([{size}], 2.0))
    saver.save(2, wait=wait)
    os._exit(0)
    """
).format(size=SIZE)


def _run_child(root: Path, wait: bool) -> list[dict]:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(root), "wait" if wait else "no-wait"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def _restore_latest(root: Path) -> tuple[int, float, float]:
    """(step, min, max of w) of the checkpoint the state file names."""
    w, step = tf.Variable(tf.zeros([SIZE])), tf.Variable(0, dtype=tf.int64)
    latest = tf.train.latest_checkpoint(str(root / SUBDIR))
    assert latest is not None, f"{root / SUBDIR}: the state file names no checkpoint"
    tf.train.Checkpoint(w=w, step=step).restore(latest).assert_existing_objects_matched()
    values = w.numpy()
    return int(step.numpy()), float(np.min(values)), float(np.max(values))


def test_a_waited_async_save_is_complete_in_a_process_that_exits_at_once(tmp_path: Path):
    events = _run_child(tmp_path, wait=True)
    saves = [e for e in events if e["event"] == "checkpoint"]
    assert [(e["step"], e["write"]) for e in saves] == [(1, "async"), (2, "async")], saves
    written = [e["step"] for e in events if e["event"] == "checkpoint_written"]
    assert written == [1, 2], events
    assert _restore_latest(tmp_path) == (2, 2.0, 2.0)


def test_exit_during_an_async_write_leaves_a_restorable_latest_checkpoint(tmp_path: Path):
    """The state file is written after the checkpoint's files: an exit mid-write resumes
    from step 1, or from step 2 when the write happened to finish, never from a torn one."""
    _run_child(tmp_path, wait=False)
    step, low, high = _restore_latest(tmp_path)
    assert (step, low, high) in {(1, 1.0, 1.0), (2, 2.0, 2.0)}, (step, low, high)


def test_a_non_chiefs_private_copy_is_deleted_once_written(tmp_path: Path):
    step = tf.Variable(0, dtype=tf.int64)
    manager, temp_dir = checkpoints.manager(tf.train.Checkpoint(step=step), "unused", False, 1)
    saver = Saver(manager, step, temp_dir, Metrics(), Log(1, io.StringIO()), False, True, PROGRESS)
    saver.save(1)
    saver.wait()
    assert not Path(temp_dir).exists(), f"{temp_dir}: the private copy was left"
    saver.save(2, wait=True)
    assert not Path(temp_dir).exists(), f"{temp_dir}: the private copy was left"


def test_the_checkpoint_metric_follows_the_write_not_the_call(tmp_path: Path):
    step = tf.Variable(0, dtype=tf.int64)
    manager, _ = checkpoints.manager(tf.train.Checkpoint(step=step), str(tmp_path), True, 0)
    metrics = Metrics()
    saver = Saver(manager, step, "", metrics, Log(0, io.StringIO()), True, True, PROGRESS)
    saver.save(5)
    assert saver.pending == 5
    deadline = time.time() + 60
    # Set by the write thread once the files are written, without a wait() on the loop's side.
    while metrics.registry.get_sample_value(contract.METRIC_CHECKPOINT_STEP) != 5:
        assert time.time() < deadline, "the checkpoint metric never reached step 5"
        time.sleep(0.01)
    assert saver.pending == 5
    saver.wait()
    assert saver.pending is None


def test_a_failed_async_write_keeps_the_previous_checkpoint(full_volume: Path):  # noqa: F811
    weights, step = tf.Variable(tf.zeros([64])), tf.Variable(0, dtype=tf.int64)
    manager, _ = checkpoints.manager(
        tf.train.Checkpoint(w=weights, step=step), str(full_volume), True, 0
    )
    saver = Saver(manager, step, "", Metrics(), Log(0, io.StringIO()), True, True, PROGRESS)
    saver.save(1, wait=True)
    _fill(full_volume)
    directory = full_volume / SUBDIR
    with pytest.raises(CheckpointError) as info:
        saver.save(2, wait=True)
    assert info.value.exit_code == EXIT_CHECKPOINT
    assert str(info.value) == (
        f"no space left on {directory}: the checkpoint of step 2 not written; the latest "
        f"checkpoint is still {directory}/ckpt-1"
    )
    assert not [p.name for p in directory.iterdir() if p.name.startswith("ckpt-2")], (
        "the failed write's files were left behind"
    )


@pytest.mark.parametrize("asynchronous", [True, False], ids=["async", "sync"])
@pytest.mark.parametrize("is_chief", [True, False], ids=["chief", "worker"])
def test_a_landed_save_deletes_the_rescues_it_passed_on_the_chief(
    tmp_path: Path, asynchronous: bool, is_chief: bool
):
    from tests.trainer.test_checkpoints import _batch
    from tests.trainer.test_rescue import _rescue

    _rescue(tmp_path, 1, 36)
    _rescue(tmp_path, 2, 236)
    w, step = tf.Variable([1.0]), tf.Variable(0, dtype=tf.int64)
    ckpt = tf.train.Checkpoint(w=w, step=step, **_batch())
    manager, temp = checkpoints.manager(ckpt, str(tmp_path), is_chief, 0)
    saver = Saver(
        manager, step, temp, Metrics(), Log(0, io.StringIO()), is_chief, asynchronous, PROGRESS
    )
    saver.save(200, wait=True)
    left = sorted(p.name for p in (tmp_path / SUBDIR).glob(f"{RESCUE_PREFIX}*"))
    prefix = RESCUE_PREFIX
    assert left == ([f"{prefix}2"] if is_chief else [f"{prefix}1", f"{prefix}2"]), left
