"""``--input-only``: the input pipeline alone, as training would build it; nothing written."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import tensorflow as tf

from trainer import contract, input_only
from trainer.config import Config
from trainer.errors import DataError
from trainer.local_cluster import worker_envs
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
