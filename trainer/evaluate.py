"""The evaluation pass: held-out data through the model after every epoch, on every worker.

Every worker runs the same number of evaluation steps (held-out examples // global batch) so the
collectives line up; the loss sum, hits and count are all-reduced once at the end, so the
figures are global. Like training, each replica gets its own per-replica batches.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trainer.errors import DataError

if TYPE_CHECKING:  # trainer.data imports TensorFlow: not at import time (trainer.lifecycle)
    from trainer.data import Source


class Evaluator:
    """``evaluator()`` -> (mean loss, accuracy) over the held-out source, all workers."""

    def __init__(
        self, strategy: Any, net: Any, loss_fn: Any, source: Source, global_batch: int
    ) -> None:
        import tensorflow as tf

        from trainer import data

        steps = source.num_examples // global_batch
        if steps < 1:
            raise DataError(
                f"evaluation data {source.name}: {source.num_examples} examples give no full "
                f"global batch of {global_batch}"
            )
        self.steps = steps
        self.num_examples = steps * global_batch

        def dataset_fn(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
            return data.eval_dataset(
                source,
                num_workers=ctx.num_input_pipelines,
                worker_index=ctx.input_pipeline_id,
                replicas_per_worker=ctx.num_replicas_in_sync // ctx.num_input_pipelines,
                batch_size=ctx.get_per_replica_batch_size(global_batch),
                steps=steps,
            )

        self._dataset = strategy.distribute_datasets_from_function(dataset_fn)
        with strategy.scope():
            sums = tf.Variable(
                tf.zeros(3),
                trainable=False,
                synchronization=tf.VariableSynchronization.ON_READ,
                aggregation=tf.VariableAggregation.SUM,
                name="eval_sums",
            )

        def step_fn(x: tf.Tensor, y: tf.Tensor) -> None:
            logits = tf.cast(net(x, training=False), tf.float32)  # mixed precision
            hits = tf.equal(tf.argmax(logits, -1, output_type=tf.int32), tf.cast(y, tf.int32))
            sums.assign_add(
                tf.stack(
                    [
                        tf.reduce_sum(loss_fn(y, logits)),
                        tf.reduce_sum(tf.cast(hits, tf.float32)),
                        tf.cast(tf.size(y), tf.float32),
                    ]
                )
            )

        def sync_fn() -> tf.Tensor:
            local = tf.identity(sums.read_value())
            with tf.control_dependencies([local]):
                sums.assign(tf.zeros(3))
            ctx = tf.distribute.get_replica_context()
            return ctx.all_reduce(tf.distribute.ReduceOp.SUM, local)

        @tf.function
        def run(iterator: Any) -> tf.Tensor:
            for _ in tf.range(steps):
                strategy.run(step_fn, args=next(iterator))
            return strategy.experimental_local_results(strategy.run(sync_fn))[0]

        self._run = run

    def __call__(self) -> tuple[float, float]:
        loss_sum, hits, count = (float(v) for v in self._run(iter(self._dataset)).numpy())
        return loss_sum / count, hits / count
