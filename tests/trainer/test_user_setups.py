"""Real ``python -m trainer`` runs of what users bring: several devices per worker, their own
TFRecords with many classes and their own model module, and a seed that makes runs repeatable.
All runs start at once (module fixture) and each is one small single-worker process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from trainer.local_cluster import parse_events, worker_envs

pytestmark = pytest.mark.slow

COMMON = ["--on-done", "exit", "--intra-op-threads", "1", "--log-every", "60"]
CLASSES = 100
RECORDS = (150, 90)  # two files of unequal size
USER_MODEL = textwrap.dedent(
    """
    import tf_keras as k  # at the top, as modules are usually written


    def build(input_shape, num_classes):
        return k.Sequential(
            [
                k.layers.InputLayer(input_shape=input_shape),
                k.layers.Flatten(),
                k.layers.Dense(32, activation="relu"),
                k.layers.Dense(num_classes),
            ]
        )


    def loss(labels, logits):  # a --loss hook: plain cross-entropy, one value per example
        import tensorflow as tf

        return tf.nn.sparse_softmax_cross_entropy_with_logits(tf.cast(labels, tf.int32), logits)
    """
)
SEEDED = ["--epochs", "1", "--synthetic-examples", "512", "--batch-size", "32", "--seed", "5"]
RUNS: dict[str, list[str]] = {
    "devices": ["--cpu-devices", "2", "--epochs", "2", "--synthetic-examples", "1024",
                "--batch-size", "32", "--eval-split", "0.25"],
    "classes": ["--model", "tfd_user_model:build", "--loss", "tfd_user_model:loss",
                "--epochs", "2", "--batch-size", "16"],
    "seed-a": SEEDED,
    "seed-b": SEEDED,
    "pixels": ["--epochs", "4", "--batch-size", "32", "--learning-rate", "0.01"],
}  # fmt: skip
PIXEL_CLASSES = 4
EVAL_ROWS = 128
"""Held-out rows of the pixels run: whole global batches, so every one is evaluated."""


def _pixels(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """8x8 uint8 images, 0-255, whose class is their brightness (40, 90, 140, 190, with noise):
    a model that saw 0-1 values predicts poorly on 0-255 ones."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, PIXEL_CLASSES, n)
    x = 40 + 50 * y[:, None, None] + rng.integers(-15, 16, (n, 8, 8))
    return x.astype("uint8"), y


def _write_records(directory: Path) -> None:
    start = 0
    for i, n in enumerate(RECORDS):
        with tf.io.TFRecordWriter(str(directory / f"part-{i}.tfrecord")) as w:
            for j in range(start, start + n):
                label = j % CLASSES
                feature = {
                    "x": tf.train.Feature(float_list=tf.train.FloatList(value=[label / 100] * 16)),
                    "x_shape": tf.train.Feature(int64_list=tf.train.Int64List(value=[4, 4, 1])),
                    "y": tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
                }
                ex = tf.train.Example(features=tf.train.Features(feature=feature))
                w.write(ex.SerializeToString())
        start += n


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, dict]]:
    procs = {}
    for name, argv in RUNS.items():
        root = tmp_path_factory.mktemp(name)
        env = worker_envs(1, str(root / "ckpt"))[0]
        args = list(argv)
        if name == "classes":
            (root / "data").mkdir()
            _write_records(root / "data")
            (root / "tfd_user_model.py").write_text(USER_MODEL)
            env["PYTHONPATH"] = os.pathsep.join([str(root), env.get("PYTHONPATH", "")])
            args += ["--dataset", str(root / "data")]
        if name == "devices":
            args += ["--tensorboard-dir", str(root / "tb")]
        if name == "pixels":
            np.savez(root / "train.npz", **dict(zip("xy", _pixels(512, 1), strict=True)))
            np.savez(root / "eval.npz", **dict(zip("xy", _pixels(EVAL_ROWS, 2), strict=True)))
            args += ["--dataset", str(root / "train.npz"), "--eval-dataset", str(root / "eval.npz")]
        procs[name] = (
            root,
            subprocess.Popen(
                [sys.executable, "-m", "trainer", *COMMON, *args],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            ),
        )
    results = {}
    try:
        for name, (root, proc) in procs.items():
            out, err = proc.communicate(timeout=240)
            summary_path = root / "ckpt" / "summary.json"
            results[name] = {
                "root": root,
                "code": proc.returncode,
                "stderr": err,
                "events": parse_events(out.splitlines()),
                "summary": json.loads(summary_path.read_text()) if summary_path.exists() else {},
            }
    finally:
        for _, proc in procs.values():
            if proc.poll() is None:
                proc.kill()
    yield results


def _ok(run: dict, name: str) -> dict:
    assert run["code"] == 0, f"{name}: exit {run['code']}: {run['stderr'][-1500:]}"
    return run["summary"]


def test_two_logical_devices_train_to_the_end(runs: dict[str, dict]):
    """One worker, the CPU split into 2 logical devices: 2 replicas, global batch 2 x 32, and
    the data lasts the whole run (2 epochs of 768 // 64 steps; 256 examples held out)."""
    summary = _ok(runs["devices"], "devices")
    start = next(e for e in runs["devices"]["events"] if e["event"] == "start")
    assert (start["replicas"], start["global_batch"]) == (2, 64), start
    assert summary["final_step"] == 2 * (768 // 64), summary
    assert summary["replicas"] == 2, summary


def test_evaluation_in_summary_and_tensorboard(runs: dict[str, dict]):
    summary = _ok(runs["devices"], "devices")
    evals = [e for e in runs["devices"]["events"] if e["event"] == "eval"]
    assert [e["step"] for e in evals] == [12, 24], evals
    assert summary["eval_accuracy"] == evals[-1]["accuracy"] and summary["eval_accuracy"] > 0.5
    assert summary["eval_loss"] == evals[-1]["loss"] > 0
    tags: dict[str, list[int]] = {}
    for path in (runs["devices"]["root"] / "tb").iterdir():
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            for value in event.summary.value:
                tags.setdefault(value.tag, []).append(event.step)
    assert tags.get("eval/accuracy") == [12, 24], tags
    assert tags.get("eval/loss") == [12, 24], tags
    assert tags.get("train/loss") and tags.get("train/epoch_accuracy") == [12, 24], tags


def test_many_classes_from_tfrecords_with_a_user_model(runs: dict[str, dict]):
    summary = _ok(runs["classes"], "classes")
    start = next(e for e in runs["classes"]["events"] if e["event"] == "start")
    assert start["num_classes"] == CLASSES, start
    assert summary["final_step"] == 2 * (sum(RECORDS) // 16), summary


def test_one_seed_gives_the_same_weights(runs: dict[str, dict]):
    a, b = _ok(runs["seed-a"], "seed-a"), _ok(runs["seed-b"], "seed-b")
    assert a["final_step"] == b["final_step"] == 512 // 32
    assert a["weights_sha256"] == b["weights_sha256"], "two runs with --seed 5 differ"


def test_pixels_are_scaled_in_the_saved_model(runs: dict[str, dict]):
    """uint8 rows are scaled by 1/255 in the model's first layer, not in the data: the saved
    model.keras, given the user's raw eval rows, has the accuracy the summary reports."""
    import tf_keras

    run = runs["pixels"]
    summary = _ok(run, "pixels")
    (scale,) = [e for e in run["events"] if e["event"] == "input_scale"]
    assert (scale["dtype"], scale["scale"]) == ("uint8", pytest.approx(1 / 255)), scale
    net = tf_keras.models.load_model(summary["model"])
    assert isinstance(net.layers[0], tf_keras.layers.Rescaling), [type(x) for x in net.layers]
    with np.load(run["root"] / "eval.npz") as rows:
        x, y = rows["x"], rows["y"]
    predicted = np.argmax(net.predict(x[..., None], verbose=0), axis=-1)
    accuracy = float(np.mean(predicted == y))
    assert accuracy == pytest.approx(summary["eval_accuracy"], abs=1e-6), summary
    assert accuracy > 1 / PIXEL_CLASSES, "nothing learnt: the comparison would prove little"
