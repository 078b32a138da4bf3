"""The TFRecord format the trainer reads: a ``tf.train.Example`` with ``x`` (float_list),
``x_shape`` (int64_list of 3 values, default :data:`IMAGE_SHAPE`) and ``y`` (one int64 label);
its parse, which checks every record, and the one line a malformed record becomes.

Its own module so that :mod:`trainer.data` (the pipelines) stays readable and
``trainer.finish.classify`` can name a bad record met in the training loop.
"""

from __future__ import annotations

import re
from typing import Any

import tensorflow as tf

IMAGE_SHAPE = (28, 28, 1)
"""MNIST's shape: ``x`` of a record without ``x_shape``, and the synthetic dataset's images."""

_BAD_RECORD = "tfd-bad-record"
"""Marks the assertion a malformed record fails in :func:`parse`."""
_BAD_RECORD_DATA = re.compile(
    rf"\[{_BAD_RECORD}\] \[(?P<file>[^\]]*)\] \[(?P<feature>\w+)\] \[(?P<got>-?\d+)\] "
    r"\[(?P<need>-?\d+)\]"
)
_FEATURE_RULES = {
    "x": f"'x_shape' (default {'x'.join(map(str, IMAGE_SHAPE))}) needs {{need}}",
    "x_shape": "needs {need} (height, width, channels) or none",
    "y": "needs {need} (the label)",
}


def parse(record: tf.Tensor, file: tf.Tensor | str) -> tuple[tf.Tensor, tf.Tensor]:
    """One ``tf.train.Example`` of ``file`` as (x, label). A record whose features have the
    wrong number of values fails an assertion that names the file and the feature
    (:func:`bad_record` reads it back); checking costs a few scalar ops per record."""
    ex = tf.io.parse_single_example(
        record,
        {
            "x": tf.io.VarLenFeature(tf.float32),
            "y": tf.io.VarLenFeature(tf.int64),
            "x_shape": tf.io.VarLenFeature(tf.int64),
        },
    )
    values, labels, shape = ex["x"].values, ex["y"].values, ex["x_shape"].values
    shape = tf.cond(tf.size(shape) > 0, lambda: shape, lambda: tf.constant(IMAGE_SHAPE, tf.int64))
    need = tf.reduce_prod(shape)

    def check(ok: tf.Tensor, feature: str, got: tf.Tensor, wanted: Any) -> tf.Operation:
        return tf.debugging.Assert(ok, [_BAD_RECORD, file, feature, got, wanted])

    checks = [
        check(tf.size(shape) == 3, "x_shape", tf.size(shape), 3),
        check(tf.size(labels) == 1, "y", tf.size(labels), 1),
        check(tf.size(values, tf.int64) == need, "x", tf.size(values, tf.int64), need),
    ]
    # Identities of the inputs made here take the checks as control inputs (an op whose inputs
    # come from inside the block would not), so no reshape runs before the checks pass.
    with tf.control_dependencies(checks):
        values, labels, shape = tf.identity(values), tf.identity(labels), tf.identity(shape)
    x = tf.reshape(values, tf.reshape(shape, [3]))
    return x, tf.cast(tf.reshape(labels, []), tf.int32)


def bad_record(err: BaseException) -> str | None:
    """``bad record in <file>: feature 'x' has 5 values; ...`` when ``err`` is the assertion of
    :func:`parse` (raised wherever the pipeline runs: loading, the training loop),
    else ``None``."""
    match = _BAD_RECORD_DATA.search(getattr(err, "message", "") or str(err))
    if match is None:
        return None
    rule = _FEATURE_RULES[match["feature"]].format(need=match["need"])
    return (
        f"bad record in {match['file']}: feature '{match['feature']}' has {match['got']} "
        f"values; {rule}"
    )
