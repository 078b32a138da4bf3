"""Datasets: determinism, sharding, resume position, and clear errors for bad inputs."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from trainer import data, tfrecord
from trainer.errors import EXIT_DATA, DataError


def _stream(source: data.Source, **kw: int) -> list[np.ndarray]:
    args = {
        "num_workers": 2,
        "worker_index": 0,
        "batch_size": 8,
        "steps_per_epoch": 5,
        "epochs": 3,
        "start_step": 0,
        "seed": 7,
    } | kw
    return [y.numpy() for _, y in data.worker_dataset(source, **args)]


def test_synthetic_is_deterministic_by_seed():
    a, b, c = data.synthetic(64, 1), data.synthetic(64, 1), data.synthetic(64, 2)
    assert np.array_equal(a.x, b.x) and np.array_equal(a.y, b.y)
    assert not np.array_equal(a.x, c.x)
    assert a.x.shape == (64, 28, 28, 1) and a.num_classes == 10


def test_resume_sees_what_an_uninterrupted_run_sees():
    source = data.synthetic(256, 3)
    full = _stream(source)
    assert len(full) == 15
    for start in (1, 5, 7, 14):
        resumed = _stream(source, start_step=start)
        assert len(resumed) == 15 - start, f"start_step={start}"
        assert all(np.array_equal(a, b) for a, b in zip(full[start:], resumed, strict=True))


def test_workers_get_disjoint_shards():
    source = data.Source("ids", 64, (1,), 64, x=np.zeros((64, 1), "float32"), y=np.arange(64))
    seen = [
        set(np.concatenate(_stream(source, worker_index=i, steps_per_epoch=4, epochs=1)))
        for i in range(2)
    ]
    assert not seen[0] & seen[1]
    assert len(seen[0] | seen[1]) == 64


@pytest.mark.parametrize(
    ("x", "scale"),
    [
        (np.full((20, 28, 28), 255, "uint8"), data.PIXEL_SCALE),  # the dtype says pixels
        (np.linspace(-3.2, 4.7, 20 * 28 * 28, dtype="float32").reshape(20, 28, 28), 1.0),
        (np.full((20, 28, 28), 255.0), 1.0),  # float64 0-255: taken as it is too
        (np.full((20, 28, 28), 7, "int32"), 1.0),
    ],
    ids=["uint8", "standardised-float32", "float64-over-255", "int32"],
)
def test_npz_values_are_never_changed_only_uint8_gets_a_scale(
    tmp_path: Path, x: np.ndarray, scale: float
):
    """The model applies the scale (its first layer); the arrays reach it as stored."""
    path = tmp_path / "d.npz"
    np.savez(path, x=x, y=np.arange(20) % 10)
    source = data.load(str(path), 1, 0, str(tmp_path), True)
    assert source.input_shape == (28, 28, 1) and source.num_examples == 20
    assert (source.dtype, source.scale) == (str(x.dtype), scale), source.scaling()
    assert source.x is not None and source.x.dtype == np.float32
    assert np.array_equal(source.x[..., 0], x.astype("float32")), f"{x.dtype}: values changed"


def test_evaluation_data_must_call_for_the_same_scale(tmp_path: Path):
    pixels, floats = tmp_path / "pixels.npz", tmp_path / "floats.npz"
    np.savez(pixels, x=np.zeros((4, 2, 2, 1), "uint8"), y=np.arange(4))
    np.savez(floats, x=np.zeros((4, 2, 2, 1), "float32"), y=np.arange(4))
    train = data.load(str(pixels), 1, 0, str(tmp_path), True)
    data.check_same_scale(train, data.load(str(pixels), 2, 0, str(tmp_path), True))
    with pytest.raises(DataError) as info:
        data.check_same_scale(train, data.load(str(floats), 2, 0, str(tmp_path), True))
    assert str(info.value) == (
        f"--eval-dataset {floats}: must be stored like --dataset {pixels} (uint8 pixels, or "
        "not, on both: the model applies one input scale); got float32 and uint8"
    )


def _write_tfrecord(path: Path, n: int, bad: dict[str, list[float]] | None = None) -> None:
    """``n`` 28x28x1 examples; the last one's features updated with ``bad`` when given."""
    with tf.io.TFRecordWriter(str(path)) as w:
        for i in range(n):
            feature = {
                "x": tf.train.Feature(float_list=tf.train.FloatList(value=[0.5] * 784)),
                "y": tf.train.Feature(int64_list=tf.train.Int64List(value=[i % 10])),
            }
            for key, values in (bad or {}).items() if i == n - 1 else ():
                floats = key == "x"
                feature[key] = (
                    tf.train.Feature(float_list=tf.train.FloatList(value=values))
                    if floats
                    else tf.train.Feature(int64_list=tf.train.Int64List(value=values))
                )
            ex = tf.train.Example(features=tf.train.Features(feature=feature))
            w.write(ex.SerializeToString())


BAD_RECORDS = {
    "x": ({"x": [0.5] * 5}, "feature 'x' has 5 values; 'x_shape' (default 28x28x1) needs 784"),
    "x_shape": ({"x_shape": [28, 28]}, "feature 'x_shape' has 2 values; needs 3 (height, width, "
                "channels) or none"),
    "y": ({"y": []}, "feature 'y' has 0 values; needs 1 (the label)"),
}  # fmt: skip


@pytest.mark.parametrize("in_memory", [True, False], ids=["shard-in-memory", "streamed"])
@pytest.mark.parametrize("feature", list(BAD_RECORDS))
def test_a_malformed_record_names_its_file_and_feature(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, feature: str, in_memory: bool
):
    """The first file is fine (the start-up check passes); the second's last record is not.
    A shard read into memory fails at start with a DataError (exit 4); a streamed one fails in
    the training loop, where trainer.finish.classify reads the file back from the error."""
    if not in_memory:
        monkeypatch.setattr(data, "_CACHE_BYTES", 0)
    bad, why = BAD_RECORDS[feature]
    _write_tfrecord(tmp_path / "part-0.tfrecord", 4)
    _write_tfrecord(tmp_path / "part-1.tfrecord", 4, bad)
    source = data.load(str(tmp_path / "*.tfrecord"), 1, 0, str(tmp_path), True, count=False)
    line = f"bad record in {tmp_path / 'part-1.tfrecord'}: {why}"
    if in_memory:
        source = replace(source, num_examples=8)  # as counted: the shard fits in memory
        with pytest.raises(DataError) as info:
            _stream(source, num_workers=1, batch_size=2, steps_per_epoch=4, epochs=1)
        assert str(info.value) == f"--dataset {source.name}: {line}"
    else:
        with pytest.raises(tf.errors.InvalidArgumentError) as raised:
            _stream(source, num_workers=1, batch_size=2, steps_per_epoch=4, epochs=1)
        assert tfrecord.bad_record(raised.value) == line


def test_a_malformed_first_record_is_refused_at_load(tmp_path: Path):
    _write_tfrecord(tmp_path / "one.tfrecord", 1, BAD_RECORDS["x"][0])
    with pytest.raises(DataError) as info:
        data.load(str(tmp_path / "one.tfrecord"), 1, 0, str(tmp_path), True)
    assert str(info.value) == (
        f"--dataset {tmp_path / 'one.tfrecord'}: bad record in {tmp_path / 'one.tfrecord'}: "
        f"{BAD_RECORDS['x'][1]}"
    )


def test_tfrecords_file_sharded(tmp_path: Path):
    for i in range(2):
        _write_tfrecord(tmp_path / f"part-{i}.tfrecord", 6)
    source = data.load(str(tmp_path / "*.tfrecord"), 1, 0, str(tmp_path), True)
    assert source.num_examples == 12 and source.input_shape == (28, 28, 1)
    batches = _stream(source, batch_size=3, steps_per_epoch=2, epochs=1)
    assert len(batches) == 2


@pytest.mark.parametrize(
    ("name", "content", "match"),
    [
        ("missing.npz", None, r"missing.npz: no such file"),
        ("bad.npz", b"not a zip", r"bad.npz: cannot read .npz"),
        ("keys.npz", "keys", r"keys.npz: .npz must contain arrays 'x' and 'y'"),
        ("shape.npz", "shape", r"shape.npz: x must be \(N, ...\) and y \(N,\)"),
        ("bad.tfrecord", b"garbage!" * 16, r"bad.tfrecord: not TFRecords"),
        ("empty.tfrecord", b"", r"empty.tfrecord: TFRecord file is empty"),
        ("nothing-*.tfrecord", None, r"no TFRecord files match"),
        ("unknown-name", None, r"not 'synthetic', 'mnist', an existing .npz"),
    ],
)
def test_bad_data(tmp_path: Path, name: str, content: bytes | str | None, match: str):
    path = tmp_path / name
    if content == "keys":
        np.savez(path, a=np.zeros(3))
    elif content == "shape":
        np.savez(path, x=np.zeros((3, 4)), y=np.zeros(2, "int64"))
    elif content is not None:
        path.write_bytes(content)
    with pytest.raises(DataError, match=match) as info:
        data.load(str(path), 1, 0, str(tmp_path), True)
    assert info.value.exit_code == EXIT_DATA


def test_tfrecords_without_counting(tmp_path: Path):
    _write_tfrecord(tmp_path / "one.tfrecord", 9)
    source = data.load(str(tmp_path / "one.tfrecord"), 1, 0, str(tmp_path), True, count=False)
    assert source.num_examples == 0
    assert len(_stream(source, num_workers=1, batch_size=4, steps_per_epoch=3, epochs=1)) == 3


@pytest.mark.parametrize(
    ("is_chief", "marker", "expected_cache"),
    [(True, False, "root"), (False, False, None), (False, True, "root")],
    ids=["chief-caches", "worker-before-chief", "worker-after-chief"],
)
def test_mnist_cache_on_the_checkpoint_volume(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    is_chief: bool,
    marker: bool,
    expected_cache: str | None,
):
    from tf_keras.datasets import mnist

    seen = []

    def fake_load_data(cache_dir: str | None = None):  # no internet in tests
        seen.append(cache_dir)
        x = np.zeros((12, 28, 28), "uint8")
        return (x, np.arange(12) % 10), (x, np.arange(12) % 10)

    monkeypatch.setattr(mnist, "load_data", fake_load_data)
    if marker:
        (tmp_path / "datasets").mkdir()
        (tmp_path / "datasets" / "mnist.npz.complete").write_text("ok\n")
    source = data.load("mnist", 1, 0, str(tmp_path), is_chief)
    assert source.num_examples == 12 and source.input_shape == (28, 28, 1)
    assert seen == [str(tmp_path) if expected_cache == "root" else None]
    if is_chief:
        assert (tmp_path / "datasets" / "mnist.npz.complete").exists()


def _write_ids(path: Path, ids: range) -> None:
    """TFRecords whose label is the example's id, so a test can see which examples were read."""
    with tf.io.TFRecordWriter(str(path)) as w:
        for i in ids:
            ex = tf.train.Example(
                features=tf.train.Features(
                    feature={
                        "x": tf.train.Feature(float_list=tf.train.FloatList(value=[float(i)])),
                        "x_shape": tf.train.Feature(int64_list=tf.train.Int64List(value=[1, 1, 1])),
                        "y": tf.train.Feature(int64_list=tf.train.Int64List(value=[i])),
                    }
                )
            )
            w.write(ex.SerializeToString())


@pytest.mark.parametrize("in_memory", [True, False], ids=["shard-in-memory", "streamed"])
@pytest.mark.parametrize("sizes", [(6, 6, 4), (3, 7, 6), (1, 1, 14), (16,), (2,) * 8])
def test_tfrecords_every_example_once_per_epoch(
    tmp_path: Path, sizes: tuple[int, ...], in_memory: bool, monkeypatch: pytest.MonkeyPatch
):
    """Files of unequal size over 2 workers: each epoch reads every example exactly once,
    whether the worker's shard is read into memory once or streamed every epoch."""
    if not in_memory:
        monkeypatch.setattr(data, "_CACHE_BYTES", 0)
    start = 0
    for i, n in enumerate(sizes):
        _write_ids(tmp_path / f"part-{i}.tfrecord", range(start, start + n))
        start += n
    source = data.load(str(tmp_path / "*.tfrecord"), 1, 0, str(tmp_path), True)
    total = sum(sizes)
    batch, workers = 2, 2
    spe = total // (batch * workers)  # 16 examples: 4 full global batches, nothing left over
    streams = [
        _stream(source, worker_index=w, batch_size=batch, steps_per_epoch=spe, epochs=2)
        for w in range(workers)
    ]
    for epoch in range(2):
        ids = sorted(int(i) for s in streams for b in s[epoch * spe : (epoch + 1) * spe] for i in b)
        assert ids == list(range(total)), f"sizes {sizes}, epoch {epoch}: read {ids}"


@pytest.mark.parametrize(("workers", "replicas"), [(1, 2), (2, 2), (2, 1), (1, 4)])
def test_each_replica_gets_its_share(workers: int, replicas: int):
    """A worker with several replicas (GPUs) hands one per-replica batch to each replica per
    step: its pipeline yields steps x replicas batches, and together the replicas read every
    example once per epoch."""
    total, per_replica = 64, 4
    source = data.Source("ids", total, (1,), total, x=np.zeros((total, 1), "float32"),
                         y=np.arange(total))  # fmt: skip
    spe = total // (per_replica * replicas * workers)
    streams = [
        _stream(
            source,
            num_workers=workers,
            worker_index=w,
            replicas_per_worker=replicas,
            batch_size=per_replica,
            steps_per_epoch=spe,
            epochs=2,
        )
        for w in range(workers)
    ]
    per_epoch = spe * replicas
    for w, stream in enumerate(streams):
        assert len(stream) == 2 * per_epoch, f"worker {w}: {len(stream)} batches"
    for epoch in range(2):
        ids = sorted(
            int(i)
            for s in streams
            for b in s[epoch * per_epoch : (epoch + 1) * per_epoch]
            for i in b
        )
        assert ids == list(range(total)), f"epoch {epoch}: {ids}"
