"""TensorBoard scalars, written by the chief into ``--tensorboard-dir``.

Written with TensorFlow's own ``tf.summary.write`` and the scalar plugin's metadata (what
``tf.summary.scalar`` does), so the trainer image needs no ``tensorboard`` package; TensorBoard
shows them as ordinary scalars: ``train/loss``, ``train/accuracy``,
``train/examples_per_second``, ``eval/loss``, ``eval/accuracy``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class Summaries:
    """Scalars per global step; a no-op where ``directory`` is empty (not the chief, or off)."""

    def __init__(self, directory: str) -> None:
        self._writer: Any = None
        self._metadata: Any = None
        if not directory:
            return
        import tensorflow as tf
        from tensorflow.core.framework import summary_pb2

        self._writer = tf.summary.create_file_writer(directory)
        self._metadata = summary_pb2.SummaryMetadata(
            plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars")
        )

    def scalars(self, step: int, values: Mapping[str, float]) -> None:
        if self._writer is None:
            return
        import tensorflow as tf

        with self._writer.as_default():
            for tag, value in values.items():
                tf.summary.write(
                    tag, tf.constant(value, tf.float32), step=step, metadata=self._metadata
                )

    def flush(self) -> None:
        if self._writer is not None:
            self._writer.flush()
