"""Writes the user's TFRecords into ``data/`` next to this file, in the trainer's record format
(``trainer/tfrecord.py``: ``x`` float_list, ``x_shape`` the 3 values of its shape, ``y`` one
int64 label). Learnable: each class is a fixed random prototype plus noise, deterministic by
the seed, so the same files come out on every run.

``python tests/e2e/user_code/write_records.py`` (or :func:`write`); the ``.dockerignore`` here
keeps this script out of the image and lets ``data/`` in.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parent / "data"
SHAPE = (8, 8, 1)
CLASSES = 4
FILES = ("part-0.tfrecord", "part-1.tfrecord")


def write(directory: Path = DATA, examples: int = 2048, seed: int = 0) -> list[Path]:
    """``examples`` records over :data:`FILES` in ``directory``; the paths written."""
    import tensorflow as tf  # only the writer needs it, not the model module

    rng = np.random.default_rng(seed)
    prototypes = rng.normal(0.0, 1.0, size=(CLASSES, *SHAPE)).astype("float32")
    labels = rng.integers(0, CLASSES, size=examples)
    images = prototypes[labels] + 0.5 * rng.normal(size=(examples, *SHAPE)).astype("float32")
    directory.mkdir(parents=True, exist_ok=True)
    paths = [directory / name for name in FILES]
    for part, path in enumerate(paths):
        with tf.io.TFRecordWriter(str(path)) as writer:
            for x, y in zip(images[part :: len(paths)], labels[part :: len(paths)], strict=True):
                feature = {
                    "x": tf.train.Feature(float_list=tf.train.FloatList(value=x.ravel())),
                    "x_shape": tf.train.Feature(int64_list=tf.train.Int64List(value=x.shape)),
                    "y": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(y)])),
                }
                example = tf.train.Example(features=tf.train.Features(feature=feature))
                writer.write(example.SerializeToString())
    return paths


if __name__ == "__main__":
    for written in write(Path(sys.argv[1]) if len(sys.argv) > 1 else DATA):
        print(written)
