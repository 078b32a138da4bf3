"""Datasets: synthetic (default), MNIST, and user files (.npz or TFRecord; local or gs://).

Every source is sharded by worker record by record (tf.distribute's auto-sharding off), and
the stream of batches is a pure function of (seed, epoch, step), so a resumed worker starts
exactly at the restored step. In-memory data (and a TFRecord shard under :data:`_CACHE_BYTES`)
is served by index. The format and the rules: docs/trainer.md, "Data".
"""

from __future__ import annotations

import io
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import tensorflow as tf

from trainer.errors import DataError, first_line
from trainer.tfrecord import IMAGE_SHAPE, bad_record, parse

SYNTHETIC = "synthetic"
MNIST = "mnist"
NUM_CLASSES_DEFAULT = 10
_SHUFFLE_BUFFER = 10_000
_CACHE_BYTES = 1 << 30
"""Parsed TFRecord shards up to this size (estimated from the counted records and the example
shape) are cached in memory after the first epoch: later epochs skip reading and parsing."""
_TFRECORD_SUFFIXES = (".tfrecord", ".tfrecords", ".tfr")
PIXEL_DTYPE = np.uint8
PIXEL_SCALE = 1 / 255
"""Arrays stored as uint8 are 0-255 pixels: the model multiplies them by this in its first layer
(``trainer.model.with_input_scale``, saved with ``model.keras``); every other dtype is taken as
it is: a value's size says nothing about its unit (standardised features exceed 1 too)."""


@dataclass(frozen=True)
class Source:
    """A dataset before sharding: in-memory arrays or a list of TFRecord files."""

    name: str
    num_examples: int
    input_shape: tuple[int, ...]
    num_classes: int
    x: np.ndarray | None = None
    y: np.ndarray | None = None
    files: tuple[str, ...] = ()
    dtype: str = "float32"
    """The dtype ``x`` was stored with; it decides ``scale``."""
    scale: float = 1.0
    """What the model multiplies ``x`` by before its own layers (:data:`PIXEL_SCALE` for uint8
    pixels, else 1); the pipeline hands ``x`` over unscaled, as float32."""

    def scaling(self) -> str:
        """Why ``scale`` is what it is, for the ``input_scale`` log event."""
        if self.scale != 1.0:
            return f"{self.dtype} pixels: x * 1/255 in the model's first layer (Rescaling)"
        return f"{self.dtype} features: taken as they are (only uint8 pixels are rescaled)"


def synthetic(num_examples: int, seed: int) -> Source:
    """Learnable, deterministic 10-class images: a fixed random prototype per class plus noise.

    Same (num_examples, seed) -> same arrays on every worker and every restart.
    """
    rng = np.random.default_rng(seed)
    prototypes = rng.normal(0.0, 1.0, size=(NUM_CLASSES_DEFAULT, *IMAGE_SHAPE)).astype("float32")
    y = rng.integers(0, NUM_CLASSES_DEFAULT, size=num_examples).astype("int32")
    noise = rng.normal(0.0, 1.0, size=(num_examples, *IMAGE_SHAPE)).astype("float32")
    x = prototypes[y] * 0.6 + noise
    return Source(SYNTHETIC, num_examples, IMAGE_SHAPE, NUM_CLASSES_DEFAULT, x=x, y=y)


def _arrays(name: str, x: Any, y: Any) -> Source:
    x = np.asarray(x)
    y = np.asarray(y).reshape(-1)
    if x.ndim < 2 or x.shape[0] != y.shape[0] or x.shape[0] == 0:
        raise DataError(
            f"--dataset {name}: x must be (N, ...) and y (N,) with N >= 1; "
            f"got x{x.shape} y{y.shape}"
        )
    if not np.issubdtype(y.dtype, np.integer) or y.min() < 0:
        raise DataError(f"--dataset {name}: y must hold integer labels >= 0; got {y.dtype}")
    if x.ndim == 3:  # grey images without a channel axis
        x = x[..., None]
    dtype = str(x.dtype)
    scale = PIXEL_SCALE if x.dtype == PIXEL_DTYPE else 1.0
    num_classes = int(y.max()) + 1
    return Source(name, int(x.shape[0]), tuple(x.shape[1:]), num_classes, x=x.astype("float32"),
                  y=y.astype("int32"), dtype=dtype, scale=scale)  # fmt: skip


def check_same_scale(train: Source, held_out: Source) -> None:
    """The model applies one input scale: the evaluation data must call for the same one.

    Raises:
        DataError: one is uint8 pixels and the other is not.
    """
    if train.scale != held_out.scale:
        raise DataError(
            f"--eval-dataset {held_out.name}: must be stored like --dataset {train.name} "
            f"(uint8 pixels, or not, on both: the model applies one input scale); got "
            f"{held_out.dtype} and {train.dtype}"
        )


def load_npz(path: str) -> Source:
    """``.npz`` with arrays ``x``/``y`` (or ``x_train``/``y_train``, as in Keras' mnist.npz)."""
    try:
        with tf.io.gfile.GFile(path, "rb") as f:
            blob = f.read()
        with np.load(io.BytesIO(blob), allow_pickle=False) as npz:
            keys = set(npz.files)
            for xk, yk in (("x", "y"), ("x_train", "y_train")):
                if {xk, yk} <= keys:
                    return _arrays(path, npz[xk], npz[yk])
    except (tf.errors.OpError, OSError, ValueError) as err:
        raise DataError(f"--dataset {path}: cannot read .npz: {err}") from None
    raise DataError(f"--dataset {path}: .npz must contain arrays 'x' and 'y'; has {sorted(keys)}")


def load_mnist(cache_dir: str, is_chief: bool) -> Source:
    """MNIST training split through the tf-keras loader (needs internet once).

    The chief caches the file under ``<checkpoint dir>/datasets`` when that is a local path (the
    shared volume); other workers use that copy once the chief marked it complete, else download
    into their own ``~/.keras`` so two processes never write the same file.
    """
    from tf_keras.datasets import mnist

    local = cache_dir and "://" not in cache_dir
    # tf-keras stores the file under <cache_dir>/datasets/.
    ready = f"{cache_dir}/datasets/mnist.npz.complete"
    use_shared = local and (is_chief or tf.io.gfile.exists(ready))
    try:
        (x, y), _ = mnist.load_data(cache_dir=cache_dir if use_shared else None)
    except Exception as err:  # noqa: BLE001 - urllib, hash and file errors all mean "no data"
        raise DataError(f"--dataset mnist: download or cache failed: {err}") from None
    if use_shared and is_chief:
        tf.io.gfile.makedirs(f"{cache_dir}/datasets")
        with tf.io.gfile.GFile(ready, "w") as f:
            f.write("ok\n")
    return _arrays(MNIST, x, y)


def load_tfrecords(pattern: str, count: bool = True) -> Source:
    """TFRecord files from a file, glob or directory; checks the first record eagerly.

    ``count=False`` skips the full pass that counts records (``num_examples`` is then 0): use it
    when the steps per epoch are given, as reading a large object-store dataset takes long.
    """
    try:
        if tf.io.gfile.isdir(pattern):
            files = sorted(tf.io.gfile.glob(pattern.rstrip("/") + "/*"))
        else:
            files = sorted(tf.io.gfile.glob(pattern))
    except tf.errors.OpError as err:
        raise DataError(f"--dataset {pattern}: cannot list files: {err}") from None
    if not files:
        raise DataError(f"--dataset {pattern}: no TFRecord files match")
    try:
        first = tf.data.TFRecordDataset(files[:1]).take(1)
        parsed = next(iter(first.map(lambda r: parse(r, files[0]))), None)
        if parsed is None:
            raise DataError(f"--dataset {files[0]}: TFRecord file is empty")
        x, _ = parsed
        total, top = _count_and_max_label(files) if count else (0, -1)
    except tf.errors.OpError as err:
        raise DataError(
            f"--dataset {pattern}: "
            + (
                bad_record(err)
                or "not TFRecords of tf.train.Example with float 'x' and int64 'y': "
                + first_line(err)
            )
        ) from None
    if top < -1:
        raise DataError(f"--dataset {pattern}: labels 'y' must be >= 0; found {top + 1}")
    shape = tuple(int(d) for d in x.shape)
    # Without the counting pass the classes are unknown (0): --num-classes or the model decide.
    return Source(pattern, total, shape, top + 1, files=tuple(files))


def _count_and_max_label(files: list[str]) -> tuple[int, int]:
    """Records and largest label in one parallel pass (only ``y`` is parsed); a negative label
    gives a largest label below -1 so the caller can refuse it."""
    labels = (
        tf.data.TFRecordDataset(files, num_parallel_reads=tf.data.AUTOTUNE)
        .batch(4096)
        .map(
            lambda r: tf.io.parse_example(r, {"y": tf.io.FixedLenFeature([], tf.int64)})["y"],
            num_parallel_calls=tf.data.AUTOTUNE,
        )
    )
    zero = tf.constant(0, tf.int64)
    count, top, low = labels.reduce(
        (zero, tf.constant(-1, tf.int64), zero),
        lambda acc, y: (
            acc[0] + tf.size(y, out_type=tf.int64),
            tf.maximum(acc[1], tf.reduce_max(y)),
            tf.minimum(acc[2], tf.reduce_min(y)),
        ),
    )
    return int(count), (int(top) if int(low) >= 0 else int(low) - 1)


def load(
    spec: str,
    seed: int,
    synthetic_examples: int,
    cache_dir: str,
    is_chief: bool,
    count: bool = True,
) -> Source:
    """Resolve ``--dataset`` into a :class:`Source` (``count``: see :func:`load_tfrecords`).

    Raises:
        DataError: unknown name, missing/unreadable file, or wrong shape; names the path.
    """
    if spec == SYNTHETIC:
        return synthetic(synthetic_examples, seed)
    if spec == MNIST:
        return load_mnist(cache_dir.rstrip("/"), is_chief)
    if spec.endswith(".npz"):
        if not _exists(spec):
            raise DataError(f"--dataset {spec}: no such file")
        return load_npz(spec)
    if spec.endswith(_TFRECORD_SUFFIXES) or any(c in spec for c in "*?[") or _isdir(spec):
        return load_tfrecords(spec, count)
    if not _exists(spec):
        raise DataError(
            f"--dataset {spec}: not 'synthetic', 'mnist', an existing .npz, or TFRecord files"
        )
    return load_tfrecords(spec, count)


def _exists(path: str) -> bool:
    try:
        return tf.io.gfile.exists(path)
    except tf.errors.OpError as err:
        raise DataError(f"--dataset {path}: cannot access: {err}") from None


def _isdir(path: str) -> bool:
    try:
        return tf.io.gfile.isdir(path)
    except tf.errors.OpError:
        return False


def split(source: Source, fraction: float, seed: int) -> tuple[Source, Source]:
    """An in-memory source split into (training, held-out) by a permutation fixed by ``seed``.

    Raises:
        DataError: the source is TFRecord files, or a part would be empty.
    """
    if source.files or source.x is None or source.y is None:
        raise DataError(
            f"--eval-split: needs an in-memory dataset (synthetic, mnist, .npz); got TFRecords "
            f"{source.name}: use --eval-dataset"
        )
    held = round(source.num_examples * fraction)
    if not 0 < held < source.num_examples:
        raise DataError(
            f"--eval-split: {fraction} of {source.num_examples} examples leaves an empty part"
        )
    order = np.random.default_rng(seed).permutation(source.num_examples)
    parts = []
    for name, idx in ((source.name, order[held:]), (f"{source.name} (held out)", order[:held])):
        parts.append(replace(source, name=name, num_examples=len(idx), x=source.x[idx],
                             y=source.y[idx]))  # fmt: skip
    return parts[0], parts[1]


def eval_dataset(
    source: Source,
    *,
    num_workers: int,
    worker_index: int,
    batch_size: int,
    steps: int,
    replicas_per_worker: int = 1,
) -> tf.data.Dataset:
    """This worker's share of ``steps`` evaluation steps: unshuffled per-replica batches, each
    example at most once (the remainder that fills no global batch is not evaluated)."""
    base = _records(source).shard(num_workers, worker_index)
    if source.files:
        base = base.map(parse, num_parallel_calls=tf.data.AUTOTUNE)
    ds = (
        base.batch(batch_size, drop_remainder=True)
        .take(steps * replicas_per_worker)
        .prefetch(tf.data.AUTOTUNE)
    )
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return ds.with_options(options)


def _records(source: Source) -> tf.data.Dataset:
    """Every example of ``source`` in one fixed order (files read in parallel, interleaved);
    a TFRecord comes with its file's name, for :func:`trainer.tfrecord.parse`'s error."""
    if not source.files:
        return tf.data.Dataset.from_tensor_slices((source.x, source.y))
    files = tf.data.Dataset.from_tensor_slices(list(source.files))
    return files.interleave(
        lambda file: tf.data.TFRecordDataset(file).map(lambda record: (record, file)),
        cycle_length=min(len(source.files), 16),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,  # the order must be the same on every worker for the sharding
    )


def worker_dataset(
    source: Source,
    *,
    num_workers: int,
    worker_index: int,
    batch_size: int,
    steps_per_epoch: int,
    epochs: int,
    start_step: int,
    seed: int,
    replicas_per_worker: int = 1,
) -> tf.data.Dataset:
    """This worker's per-replica batches from global step ``start_step`` to the end of training.

    ``batch_size`` is the per-replica batch; each step takes ``replicas_per_worker`` batches
    (one per local replica, as ``distribute_datasets_from_function`` hands them out). Epoch
    ``e`` is this worker's shard (every ``num_workers``-th example) shuffled with seed
    ``seed + e``, repeated only when ``steps_per_epoch`` asks for more than the shard holds,
    and cut to ``steps_per_epoch x replicas_per_worker`` batches; the batches of the first
    ``start_step % steps_per_epoch`` steps of the start epoch are skipped, so a resumed run sees
    what an uninterrupted one would at the same world size and batch.
    """
    per_epoch = steps_per_epoch * replicas_per_worker
    if source.files:
        epoch_batches = _record_batches(source, num_workers, worker_index, batch_size, seed)
    else:
        epoch_batches = _array_batches(source, num_workers, worker_index, batch_size, seed)

    def take_epoch(epoch: tf.Tensor) -> tf.data.Dataset:
        return epoch_batches(epoch).take(per_epoch)

    start_epoch = start_step // steps_per_epoch
    ds = (
        tf.data.Dataset.range(start_epoch, epochs)
        .flat_map(take_epoch)
        .skip((start_step % steps_per_epoch) * replicas_per_worker)
        .prefetch(tf.data.AUTOTUNE)
    )
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    options.deterministic = True
    return ds.with_options(options)


def _array_batches(
    source: Source, num_workers: int, worker_index: int, batch_size: int, seed: int
) -> Any:
    """In-memory data: each epoch shuffles this worker's example *indices* (the whole shard)
    and gathers a batch at a time, so no per-example work runs in the pipeline."""
    assert source.x is not None and source.y is not None
    x, y = tf.constant(source.x), tf.constant(source.y)
    shard = tf.data.Dataset.range(worker_index, source.num_examples, num_workers)
    size = max(1, len(range(worker_index, source.num_examples, num_workers)))

    def epoch_batches(epoch: tf.Tensor) -> tf.data.Dataset:
        return (
            shard.shuffle(size, seed=tf.cast(seed, tf.int64) + epoch)
            .repeat()
            .batch(batch_size, drop_remainder=True)
            .map(lambda i: (tf.gather(x, i), tf.gather(y, i)))
        )

    return epoch_batches


def _record_batches(
    source: Source, num_workers: int, worker_index: int, batch_size: int, seed: int
) -> Any:
    """TFRecords: this worker's records parsed in parallel. A shard known to fit in memory
    (:data:`_CACHE_BYTES`, from the counted records and the example shape) is read once into
    arrays and then served like in-memory data; a larger one is streamed every epoch, shuffled
    through a buffer."""
    base = (
        _records(source)
        .shard(num_workers, worker_index)
        .map(parse, num_parallel_calls=tf.data.AUTOTUNE)
    )
    per_worker = source.num_examples // num_workers
    example_bytes = 4 * (int(np.prod(source.input_shape)) + 1)
    if 0 < per_worker * example_bytes <= _CACHE_BYTES:
        xs, ys = [], []
        try:
            for x, y in base.batch(4096).prefetch(tf.data.AUTOTUNE):
                xs.append(x.numpy())
                ys.append(y.numpy())
        except tf.errors.OpError as err:  # read here, at start: not in the training loop
            raise DataError(
                f"--dataset {source.name}: {bad_record(err) or first_line(err)}"
            ) from None
        x_all, y_all = np.concatenate(xs), np.concatenate(ys)
        shard = replace(source, num_examples=len(y_all), x=x_all, y=y_all, files=())
        return _array_batches(shard, 1, 0, batch_size, seed)
    buffer = min(_SHUFFLE_BUFFER, per_worker) if per_worker > 0 else _SHUFFLE_BUFFER

    def epoch_batches(epoch: tf.Tensor) -> tf.data.Dataset:
        return (
            base.shuffle(buffer, seed=tf.cast(seed, tf.int64) + epoch)
            .repeat()
            .batch(batch_size, drop_remainder=True)
        )

    return epoch_batches
