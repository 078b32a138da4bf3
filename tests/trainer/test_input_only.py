"""``--input-only``: the input pipeline alone, as training would build it (the same schedule on
multi-device workers); nothing written."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
import tensorflow as tf

from trainer import contract, input_only
from trainer.config import Config
from trainer.controller import plan
from trainer.errors import DataError
from trainer.local_cluster import parse_events, worker_envs
from trainer.logs import Log


def _records(path: Path, n: int) -> None:
    with tf.io.TFRecordWriter(str(path)) as w:
        for i in range(n):
            feature = {
                "x": tf.train.Feature(float_list=tf.train.FloatList(value=[float(i)] * 4)),
                "x_shape": tf.train.Feature(int64_list=tf.train.Int64List(value=[2, 2, 1])),
                "y": tf.train.Feature(int64_list=tf.train.Int64List(value=[i % 3])),
            }
            w.write(tf.train.Example(features=tf.train.Features(feature=feature))
                    .SerializeToString())  # fmt: skip


@pytest.mark.parametrize(
    ("dataset", "workers", "flags", "steps"),
    [
        ("synthetic", 1, {"synthetic_examples": 512, "batch_size": 32, "epochs": 2}, 32),
        ("synthetic", 2, {"synthetic_examples": 512, "batch_size": 32, "epochs": 1}, 8),
        ("records", 1, {"batch_size": 10, "epochs": 3, "steps_per_call": 4}, 27),
        ("synthetic", 1, {"synthetic_examples": 512, "batch_size": 32, "eval_split": 0.25}, 36),
    ],
)
def test_input_only_reads_the_run_and_writes_nothing(
    tmp_path: Path, dataset: str, workers: int, flags: dict, steps: int
):
    if dataset == "records":
        (tmp_path / "data").mkdir()
        _records(tmp_path / "data" / "part-0.tfrecord", 95)
        dataset = str(tmp_path / "data")
    root = tmp_path / "ckpt"
    root.mkdir()
    env = worker_envs(workers, str(root))[0]
    stream = io.StringIO()
    config = Config(dataset=dataset, input_only=True, **flags)
    got = input_only.run(config, contract.cluster_spec_from_env(env), str(root), Log(0, stream))
    assert got["steps"] == steps, got
    assert got["examples_per_sec"] > 0, got
    events = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [e["event"] for e in events] == ["input_only"], events
    assert events[0]["examples_per_sec"] == got["examples_per_sec"]
    assert list(root.iterdir()) == [], "input-only wrote into the checkpoint directory"


def test_input_only_refuses_data_without_a_batch(tmp_path: Path):
    env = worker_envs(1, str(tmp_path))[0]
    config = Config(synthetic_examples=8, batch_size=64, input_only=True)
    with pytest.raises(DataError, match="no full global batch of 64"):
        input_only.run(config, contract.cluster_spec_from_env(env), str(tmp_path), Log(0))


# (workers, local GPUs, --cpu-devices, --strategy) -> the strategy's replicas in sync
# (trainer.placement's table: what training divides its global batch by).
SHAPES = {
    "1 worker, CPU": ((1, 0, 1, "auto"), 1),
    "1 worker, 2 logical CPUs": ((1, 0, 2, "auto"), 2),
    "1 worker, 1 GPU": ((1, 1, 1, "auto"), 1),
    "1 worker, 2 GPUs": ((1, 2, 1, "auto"), 2),
    "1 worker, 2 GPUs, multi-worker": ((1, 2, 1, "multi-worker"), 2),
    "2 workers, CPU": ((2, 0, 1, "auto"), 2),
    "2 workers, 1 GPU each": ((2, 1, 1, "auto"), 2),
    "2 workers, 2 GPUs each": ((2, 2, 1, "auto"), 4),
    "3 workers, 4 GPUs each": ((3, 4, 1, "auto"), 12),
}


@pytest.mark.parametrize(("shape", "replicas_in_sync"), SHAPES.values(), ids=SHAPES.keys())
def test_input_only_runs_the_schedule_training_runs(
    shape: tuple[int, int, int, str], replicas_in_sync: int
):
    """Global batch = --batch-size x replicas per worker x workers, steps per epoch and total
    steps: the same for --input-only as for training (which takes the replicas from its
    strategy), on multi-device workers too."""
    workers, gpus, cpu_devices, strategy = shape
    config = Config(batch_size=32, epochs=2, cpu_devices=cpu_devices, strategy=strategy)
    env = worker_envs(workers, "/tmp/unused")[0]
    spec = contract.cluster_spec_from_env(env)
    examples = 4096
    got = input_only.schedule(config, spec, examples, gpus)
    trained = plan(config, examples, replicas_in_sync // workers, workers)
    assert got == trained, f"{shape}: input-only {got} != training {trained}"
    assert got.global_batch == 32 * replicas_in_sync, got
    assert got.total_steps == 2 * (examples // (32 * replicas_in_sync)), got


def _run(root: Path, *flags: str) -> list[dict]:
    env = worker_envs(1, str(root))[0]
    argv = ["--on-done", "exit", "--intra-op-threads", "1", "--log-every", "60", *flags]
    out = subprocess.run(
        [sys.executable, "-m", "trainer", *argv],
        env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert out.returncode == 0, f"{argv}: exit {out.returncode}: {out.stderr[-1500:]}"
    return parse_events(out.stdout.splitlines())


@pytest.mark.slow
@pytest.mark.parametrize("devices", [1, 2], ids=["1-replica", "2-replicas"])
def test_input_only_and_training_agree_on_a_real_worker(tmp_path: Path, devices: int):
    """A real worker with 1 or 2 replicas (logical CPU devices): ``--input-only`` reports the
    global batch and steps training then runs with."""
    flags = ["--cpu-devices", str(devices), "--synthetic-examples", "512", "--batch-size", "32",
             "--epochs", "1"]  # fmt: skip
    (only,) = [e for e in _run(tmp_path / "only", *flags, "--input-only")
               if e["event"] == "input_only"]  # fmt: skip
    (start,) = [e for e in _run(tmp_path / "train", *flags) if e["event"] == "start"]
    assert start["replicas"] == devices == only["replicas_per_worker"], (start, only)
    assert only["global_batch"] == start["global_batch"] == 32 * devices, (start, only)
    assert only["steps_per_epoch"] == start["steps_per_epoch"] == 512 // (32 * devices)
    assert only["steps"] == start["total_steps"], (start, only)
