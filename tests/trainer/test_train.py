"""Restoring a checkpoint: the step is converted when the global batch changed, and checkpoints
saved before the global batch was recorded still restore; the controller's loop stops a
diverged run before any save."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from tests.trainer.messages import PEER_LOST, PEER_LOST_LINE
from trainer import checkpoints, contract, errors, finish, restore, signals
from trainer.cli import Config
from trainer.context import WorkerContext
from trainer.controller import Controller, Schedule
from trainer.local_cluster import worker_envs
from trainer.logs import Log
from trainer.metrics import Metrics


def _worker(root: Path, config: Config | None = None) -> tuple[WorkerContext, io.StringIO]:
    env = worker_envs(1, str(root))[0]
    stream = io.StringIO()
    worker = WorkerContext(
        config or Config(),
        env,
        contract.cluster_spec_from_env(env),
        str(root),
        Log(0, stream),
        Metrics(),
        signals.StopSignal(),
    )
    return worker, stream


def _restore(
    worker: WorkerContext, tracked: dict[str, object], step_var: object, batch_var: object,
    total: int,
) -> int:  # fmt: skip
    """The step a task's restore (:func:`trainer.restore.restore`) starts at."""
    step, _ = restore.restore(
        worker.root, tracked, step_var, batch_var, total, worker.config, worker.log, worker.metrics
    )
    return step


@pytest.mark.parametrize(
    ("saved_batch", "saved_step", "global_batch", "total", "start"),
    [
        (64, 40, 64, 96, 40),  # same world size
        (64, 40, 96, 63, 26),  # 2 -> 3 workers: 2560 examples seen, 26 full batches of 96
        (64, 40, 32, 192, 80),  # 2 -> 1 worker
        (32, 190, 64, 96, 95),
        (32, 191, 16, 200, 200),  # never past the new total
    ],
)
def test_restore_converts_step_to_global_batch(
    tmp_path: Path,
    saved_batch: int,
    saved_step: int,
    global_batch: int,
    total: int,
    start: int,
):
    import tensorflow as tf

    weights = tf.Variable([1.0, 2.0])
    objects = {
        "w": weights,
        "step": tf.Variable(saved_step, dtype=tf.int64),
        checkpoints.GLOBAL_BATCH_KEY: tf.Variable(saved_batch, dtype=tf.int64),
    }
    tf.train.CheckpointManager(
        tf.train.Checkpoint(**objects), str(tmp_path / checkpoints.CHECKPOINTS_SUBDIR), 3
    ).save(checkpoint_number=saved_step)

    weights.assign([0.0, 0.0])
    step_var = tf.Variable(0, dtype=tf.int64)
    batch_var = tf.Variable(global_batch, dtype=tf.int64)
    worker, log = _worker(tmp_path)
    got = _restore(worker, {"w": weights, "step": step_var}, step_var, batch_var, total)

    assert got == start
    assert weights.numpy().tolist() == [1.0, 2.0], "weights not restored"
    assert int(step_var.numpy()) == start and int(batch_var.numpy()) == global_batch
    events = {e["event"]: e for e in map(json.loads, log.getvalue().splitlines())}
    assert events["resume"]["step"] == start
    if saved_batch == global_batch:
        assert "rescale" not in events, events
    else:
        assert events["rescale"] == {
            **events["rescale"],
            "saved_step": saved_step,
            "saved_global_batch": saved_batch,
            "global_batch": global_batch,
            "step": start,
        }


@pytest.mark.parametrize(
    ("lacks", "saved"),
    [
        ("global_batch", {"w": [3.0, 4.0], "step": 40, "last_eval": [0.1, 0.2]}),
        ("last_eval", {"w": [3.0, 4.0], "step": 40, "global_batch": 64}),
    ],
)
def test_a_checkpoint_lacking_a_tracked_object_is_skipped_naming_it(
    tmp_path: Path, lacks: str, saved: dict[str, object]
):
    """Restored, it would leave that object at its initial value: a run's summary with a
    made-up evaluation, or a step counted in another global batch. The older complete one
    restores instead; alone, it is the error."""
    import tensorflow as tf

    directory = str(tmp_path / checkpoints.CHECKPOINTS_SUBDIR)
    complete = {
        "w": tf.Variable([1.0, 2.0]),
        "step": tf.Variable(20, dtype=tf.int64),
        "last_eval": tf.Variable([0.5, 0.75]),
        checkpoints.GLOBAL_BATCH_KEY: tf.Variable(64, dtype=tf.int64),
    }
    lacking = {k: tf.Variable(v) for k, v in saved.items()}
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(**complete), directory, 3)
    manager.save(checkpoint_number=20)
    tf.train.CheckpointManager(tf.train.Checkpoint(**lacking), directory, 3).save(40)

    weights, last_eval = tf.Variable([0.0, 0.0]), tf.Variable([-1.0, -1.0])
    step_var, batch_var = tf.Variable(0, dtype=tf.int64), tf.Variable(64, dtype=tf.int64)
    tracked = {"w": weights, "step": step_var, "last_eval": last_eval}
    worker, log = _worker(tmp_path)
    assert _restore(worker, tracked, step_var, batch_var, 96) == 20
    assert weights.numpy().tolist() == [1.0, 2.0] and last_eval.numpy().tolist() == [0.5, 0.75]
    warnings = [e for e in map(json.loads, log.getvalue().splitlines()) if e["event"] == "warning"]
    assert len(warnings) == 1 and f"it holds no {lacks}" in warnings[0]["message"], warnings
    assert "ckpt-40" in warnings[0]["message"], warnings

    for name in tf.io.gfile.glob(f"{directory}/ckpt-20*"):
        tf.io.gfile.remove(name)
    tf.train.CheckpointManager(tf.train.Checkpoint(**lacking), directory, 1).save(40)
    worker, log = _worker(tmp_path)
    with pytest.raises(errors.CheckpointError, match=f"ckpt-40.*it holds no {lacks}"):
        _restore(worker, tracked, step_var, batch_var, 96)


def test_no_checkpoint_starts_at_zero(tmp_path: Path):
    import tensorflow as tf

    step_var, batch_var = tf.Variable(0, dtype=tf.int64), tf.Variable(64, dtype=tf.int64)
    worker, log = _worker(tmp_path)
    assert _restore(worker, {"step": step_var}, step_var, batch_var, 96) == 0
    assert log.getvalue() == ""


@pytest.mark.parametrize(
    ("flags", "saved", "now", "expected"),
    [
        # (flags, (global batch, step) saved, global batch now, (step, optimizer lr) after)
        ({}, (64, 40), 32, (80, 1e-3)),  # 2 -> 1 worker: examples kept, linear: x1
        ({}, (32, 40), 64, (20, 2e-3)),  # 1 -> 2 workers (default linear): x2
        ({}, (64, 40), 96, (26, 3e-3)),  # 2 -> 3 workers: x3
        ({"learning_rate_scaling": "none"}, (64, 40), 32, (80, 1e-3)),  # the flag's rate
        ({"learning_rate_scaling": "none"}, (32, 40), 64, (20, 1e-3)),
        ({"steps_per_epoch": 30}, (64, 40), 32, (40, 1e-3)),  # explicit epochs: steps kept
        ({"learning_rate": 5e-4}, (64, 40), 64, (40, 1e-3)),  # a new flag value wins (x2)
    ],
)
def test_resize_keeps_optimizer_step_and_learning_rate(
    tmp_path: Path,
    flags: dict[str, object],
    saved: tuple[int, int],
    now: int,
    expected: tuple[int, float],
):
    """After a restore the optimizer's iterations equal the resumed step and its learning rate
    is the one the flags give for the current global batch, not the checkpoint's."""
    import tf_keras

    def build() -> tuple[object, object]:
        net = tf_keras.Sequential([tf_keras.layers.Dense(2, input_shape=(3,))])
        opt = tf_keras.optimizers.Adam(1e-3)
        opt.build(net.trainable_variables)
        return net, opt

    import tensorflow as tf

    saved_batch, saved_step = saved
    net, opt = build()
    opt.iterations.assign(saved_step)
    opt.learning_rate.assign(7e-3)  # what the saved run used
    tf.train.CheckpointManager(
        tf.train.Checkpoint(
            model=net,
            optimizer=opt,
            step=tf.Variable(saved_step, dtype=tf.int64),
            **{checkpoints.GLOBAL_BATCH_KEY: tf.Variable(saved_batch, dtype=tf.int64)},
        ),
        str(tmp_path / checkpoints.CHECKPOINTS_SUBDIR),
        3,
    ).save(checkpoint_number=saved_step)

    net, opt = build()
    step_var = tf.Variable(0, dtype=tf.int64)
    batch_var = tf.Variable(now, dtype=tf.int64)
    config = Config(batch_size=32, **flags)
    worker, log = _worker(tmp_path, config)
    start = _restore(
        worker, {"model": net, "optimizer": opt, "step": step_var}, step_var, batch_var, 1000
    )
    step, lr = expected
    assert start == step, f"{flags}: resumed at {start}, expected {step}"
    assert int(opt.iterations.numpy()) == step, f"{flags}: optimizer at {opt.iterations.numpy()}"
    assert float(opt.learning_rate.numpy()) == pytest.approx(lr), f"{flags}: learning rate"
    resume = [e for e in map(json.loads, log.getvalue().splitlines()) if e["event"] == "resume"]
    assert resume[0]["optimizer_iterations"] == step, resume
    assert resume[0]["learning_rate"] == pytest.approx(lr), resume


BAD_RECORD = (
    "{{function_node __wrapped__IteratorGetNext_output_types_2_device_/job:localhost/replica:0/"
    "task:0/device:CPU:0}} assertion failed: [tfd-bad-record] [/data/part-1.tfrecord] [x] [5] "
    "[784]\n\t [[{{node Assert_2/Assert}}]] [Op:IteratorGetNext] name: "
)


def _tf_errors() -> dict[str, object]:
    import tensorflow as tf

    return {
        "out-of-range": tf.errors.OutOfRangeError(None, None, "End of sequence"),
        "unavailable": tf.errors.UnavailableError(None, None, PEER_LOST),
        "invalid": tf.errors.InvalidArgumentError(None, None, "label 12 >= 10"),
        "bad-record": tf.errors.InvalidArgumentError(None, None, BAD_RECORD),
    }


@pytest.mark.parametrize(
    ("name", "workers", "expected", "line"),
    [
        # Not a restart: it would only run out again.
        ("out-of-range", 1, "DataError", "training data ran out before the last step: End of "
         "sequence"),
        ("out-of-range", 2, "DataError", "training data ran out before the last step: End of "
         "sequence"),
        # The lost task and why, not TensorFlow's "Graph execution error:" header.
        ("unavailable", 2, "PeerLostError", f"a peer is gone or a collective timed out: "
         f"{PEER_LOST_LINE}"),
        ("invalid", 1, "DataError", "training data: label 12 >= 10"),
        ("bad-record", 2, "DataError", "bad record in /data/part-1.tfrecord: feature 'x' has 5 "
         "values; 'x_shape' (default 28x28x1) needs 784"),
    ],
)  # fmt: skip
def test_classify(name: str, workers: int, expected: str, line: str):
    got = finish.classify(_tf_errors()[name], workers)
    assert type(got).__name__ == expected, f"{name} with {workers} workers -> {got!r}"
    assert str(got) == line, f"{name}: {got}"


class _Calls:
    """A task's stand-in: its training call returns ``(loss sum, hits, count, non-finite
    weights, stop votes, rollout votes)``; call ``bad_at`` (1-based) has a NaN loss or, with
    ``weights_only``, a finite loss but NaN weights (a ReLU hides them from the loss)."""

    evaluates = False

    def __init__(self, bad_at: int, weights_only: bool, stop_at_bad: bool) -> None:
        self.n, self.bad_at, self.weights_only, self.stop_at_bad = (
            0,
            bad_at,
            weights_only,
            stop_at_bad,
        )

    def train(self, steps: int, flags: object) -> list[float]:
        self.n += 1
        bad = self.n == self.bad_at
        loss = float("nan") if bad and not self.weights_only else 256.0
        broken = 3.0 if bad and self.weights_only else 0.0
        stop = 1.0 if bad and self.stop_at_bad else 0.0
        return [loss, 64.0, 128.0, broken, stop, 0.0]

    def end_epoch(self, loss: float, accuracy: float) -> None:
        pass

    def evaluate(self) -> tuple[float, float]:
        raise AssertionError("no evaluation data")


@pytest.mark.parametrize(
    ("bad_at", "weights_only", "stop_at_bad", "latest", "why"),
    [
        (2, False, False, 2, "loss nan"),  # steps 3-4: the save at step 4 must not happen
        (2, False, True, 2, "loss nan"),  # nor the one a SIGTERM in that call asks for
        (3, False, False, 4, "loss nan"),  # the last call: no final save
        (2, True, False, 2, "loss 2, weights not finite"),
    ],
    ids=["at-a-checkpoint", "with-sigterm", "last-call", "nan-weights-finite-loss"],
)
def test_non_finite_training_stops_before_any_save(
    tmp_path: Path, bad_at: int, weights_only: bool, stop_at_bad: bool, latest: int, why: str
):
    import tensorflow as tf

    config = Config(checkpoint_every=2, steps_per_call=2, epochs=1)
    worker, log = _worker(tmp_path, config)
    step_var = tf.Variable(0, dtype=tf.int64)
    manager, _ = checkpoints.manager(tf.train.Checkpoint(step=step_var), str(tmp_path), True, 0)
    calls = _Calls(bad_at, weights_only, stop_at_bad)
    # 6 steps of a global batch of 64 in one epoch, saves every 2 steps, 2 steps per call.
    schedule = Schedule(64, 1, 1, steps_per_epoch=6, epochs=1, steps_per_call=2,
                        checkpoint_every=2)  # fmt: skip
    controller = Controller(worker, schedule, manager, step_var, "")
    with pytest.raises(errors.DivergedError) as info:
        controller.train(calls, 0)
    assert info.value.exit_code == errors.EXIT_DIVERGED == 8
    first = 2 * bad_at - 1
    assert str(info.value) == (
        f"training diverged in steps {first}-{first + 1}: {why}; nothing saved after step "
        f"{first - 1}; lower --learning-rate (a new run id: the run manifest records the rate) "
        "or look for NaN/Inf in the data"
    )
    directory = tmp_path / checkpoints.CHECKPOINTS_SUBDIR
    state = tf.train.get_checkpoint_state(str(directory))
    assert state.model_checkpoint_path == str(directory / f"ckpt-{latest}"), state
    saved = sorted(p.name for p in directory.glob("ckpt-*.index"))
    assert saved == [f"ckpt-{s}.index" for s in range(2, latest + 1, 2)], saved


def test_importing_the_trainer_does_not_load_tensorflow():
    """Signal handlers, /metrics and the DONE check come before TensorFlow's import (seconds):
    a pod stopped while a finished job idles must not die on SIGTERM's default action."""
    import subprocess
    import sys

    code = (
        "import sys, trainer.cli, trainer.train, trainer.task, trainer.controller, "
        "trainer.input_only, trainer.lifecycle, trainer.supervisor; "
        "print(sorted({'tensorflow', 'numpy'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
