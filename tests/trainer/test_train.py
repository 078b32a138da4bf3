"""Restoring a checkpoint: the step is converted when the global batch changed, and checkpoints
saved before the global batch was recorded still restore."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from trainer import contract, train
from trainer.cli import Config
from trainer.local import worker_envs
from trainer.logs import Log
from trainer.metrics import Metrics


def _worker(root: Path) -> tuple[train.Worker, io.StringIO]:
    env = worker_envs(1, str(root))[0]
    stream = io.StringIO()
    worker = train.Worker(
        Config(),
        env,
        contract.cluster_spec_from_env(env),
        str(root),
        Log(0, stream),
        Metrics(),
        train.StopSignal(),
    )
    return worker, stream


@pytest.mark.parametrize(
    ("saved_batch", "saved_step", "global_batch", "total", "start"),
    [
        (None, 40, 64, 96, 40),  # saved before the global batch was recorded: taken as equal
        (64, 40, 64, 96, 40),  # same world size
        (64, 40, 96, 63, 26),  # 2 -> 3 workers: 2560 examples seen, 26 full batches of 96
        (64, 40, 32, 192, 80),  # 2 -> 1 worker
        (32, 190, 64, 96, 95),
        (32, 191, 16, 200, 200),  # never past the new total
    ],
)
def test_restore_converts_step_to_global_batch(
    tmp_path: Path,
    saved_batch: int | None,
    saved_step: int,
    global_batch: int,
    total: int,
    start: int,
):
    import tensorflow as tf

    weights = tf.Variable([1.0, 2.0])
    objects = {"w": weights, "step": tf.Variable(saved_step, dtype=tf.int64)}
    if saved_batch is not None:
        objects[train.GLOBAL_BATCH_KEY] = tf.Variable(saved_batch, dtype=tf.int64)
    tf.train.CheckpointManager(
        tf.train.Checkpoint(**objects), str(tmp_path / train.CHECKPOINTS_SUBDIR), 3
    ).save(checkpoint_number=saved_step)

    weights.assign([0.0, 0.0])
    step_var = tf.Variable(0, dtype=tf.int64)
    batch_var = tf.Variable(global_batch, dtype=tf.int64)
    worker, log = _worker(tmp_path)
    got = worker._restore({"w": weights, "step": step_var}, step_var, batch_var, total)

    assert got == start
    assert weights.numpy().tolist() == [1.0, 2.0], "weights not restored"
    assert int(step_var.numpy()) == start and int(batch_var.numpy()) == global_batch
    events = {e["event"]: e for e in map(json.loads, log.getvalue().splitlines())}
    assert events["resume"]["step"] == start
    if saved_batch in (None, global_batch):
        assert "rescale" not in events, events
    else:
        assert events["rescale"] == {
            **events["rescale"],
            "saved_step": saved_step,
            "saved_global_batch": saved_batch,
            "global_batch": global_batch,
            "step": start,
        }


def test_no_checkpoint_starts_at_zero(tmp_path: Path):
    import tensorflow as tf

    step_var, batch_var = tf.Variable(0, dtype=tf.int64), tf.Variable(64, dtype=tf.int64)
    worker, log = _worker(tmp_path)
    assert worker._restore({"step": step_var}, step_var, batch_var, 96) == 0
    assert log.getvalue() == ""
