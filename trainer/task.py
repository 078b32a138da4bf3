"""The training task: model, optimizer, checkpoint object, datasets, the train and eval steps (the
inner loop; :mod:`trainer.controller` runs the schedule around it, as orbit's runner does).

One :meth:`Task.train` call is one ``tf.function``: ``n`` steps, then one small all-reduce of
the interval's figures and the workers' votes, so every worker gets the same answer. Built in
the run's order: the model (:meth:`Task.__init__`), the restore (:meth:`Task.restore`), then
the datasets and step functions from the start step (:meth:`Task.start`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from trainer import precision, restore
from trainer.checkpoints import GLOBAL_BATCH_KEY, LOSS_SCALE_KEY
from trainer.config import Config
from trainer.context import WorkerContext
from trainer.controller import Schedule
from trainer.evaluate import Evaluator

if TYPE_CHECKING:  # trainer.data imports TensorFlow: not at import time (trainer.lifecycle)
    from trainer.data import Source


def sources(
    config: Config, root: str, is_chief: bool, held_out: bool = True
) -> tuple[Source, Source | None]:
    """The training data and, with ``held_out``, the evaluation data (``--eval-split`` of the
    training data, or ``--eval-dataset``). ``--eval-split`` is taken from the training data
    either way: what is held out is not trained on."""
    from trainer import data

    source = data.load(
        config.dataset,
        config.seed,
        config.synthetic_examples,
        root,
        is_chief,
        count=config.steps_per_epoch == 0,
    )
    eval_source = None
    if config.eval_split:
        source, eval_source = data.split(source, config.eval_split, config.seed)
    elif config.eval_dataset and held_out:
        eval_source = data.load(
            config.eval_dataset, config.seed + 1, config.synthetic_examples, root, is_chief
        )
        data.check_same_scale(source, eval_source)
    return source, eval_source if held_out else None


class Task:
    """The model and everything a step touches, for one worker's strategy."""

    def __init__(
        self,
        config: Config,
        strategy: Any,
        prec: precision.Precision,
        source: Source,
        eval_source: Source | None,
        schedule: Schedule,
        num_classes: int,
    ) -> None:
        import tensorflow as tf
        import tf_keras

        from trainer import model

        self.config = config
        self.strategy = strategy
        self.prec = prec
        self.source = source
        self.eval_source = eval_source
        self.schedule = schedule
        self.checkpoint_path: str | None = None
        """The checkpoint training resumed from (``None``: started at step 0)."""
        self._call: Any = None
        self._evaluator: Evaluator | None = None
        replicas = schedule.replicas
        with strategy.scope():
            self.inner = model.build(config.model, source.input_shape, num_classes)
            # The data's scale as the saved model's first layer: model.keras takes raw rows.
            self.net = model.with_input_scale(self.inner, source.scale, source.input_shape)
            self.optimizer = tf_keras.optimizers.Adam(config.learning_rate_for(replicas))
            self.optimizer.build(self.net.trainable_variables)
            self.step_var = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
            # The step counts global batches: a restart with another world size converts it.
            self.batch_var = tf.Variable(
                schedule.global_batch, dtype=tf.int64, trainable=False, name=GLOBAL_BATCH_KEY
            )
            # Loss and accuracy of the last completed epoch: the summary survives a restart.
            self.last_metrics = tf.Variable([0.0, 0.0], trainable=False, name="last_epoch_metrics")
            # Loss and accuracy of the last evaluation pass.
            self.last_eval = tf.Variable([-1.0, -1.0], trainable=False, name="last_eval_metrics")
            self.sums = tf.Variable(
                tf.zeros(3),
                trainable=False,
                synchronization=tf.VariableSynchronization.ON_READ,
                aggregation=tf.VariableAggregation.SUM,
                name="interval_sums",
            )
        self.tracked = {
            "model": self.inner,
            "optimizer": self.optimizer,
            "step": self.step_var,
            "last_metrics": self.last_metrics,
            "last_eval": self.last_eval,
        }
        self.checkpoint = tf.train.Checkpoint(**self.tracked, **{GLOBAL_BATCH_KEY: self.batch_var})

    @property
    def evaluates(self) -> bool:
        return self.eval_source is not None

    @property
    def figures(self) -> tuple[Any, Any]:
        """The variables of the last epoch's and the last evaluation's (loss, accuracy)."""
        return self.last_metrics, self.last_eval

    def restore(self, ctx: WorkerContext) -> int:
        """The newest intact checkpoint (:func:`trainer.restore.restore`), then the fp16
        loss scale; returns the step to start at."""
        import tensorflow as tf

        start, self.checkpoint_path = restore.restore(
            ctx.root, self.tracked, self.step_var, self.batch_var, self.schedule.total_steps,
            self.config, ctx.log, ctx.metrics,
        )  # fmt: skip
        prec = self.prec
        with self.strategy.scope():
            # fp16: the LossScaleOptimizer comes after the restore. Its loss-scale state hangs
            # under the inner optimizer, so a checkpoint of another precision would lack it.
            prec.wrap(self.optimizer)
        scale_state = prec.loss_scale_state()
        if scale_state is not None:  # fp16: saved from now on, resumed where it was saved
            # A new Checkpoint rather than an attribute set on the old one: TensorFlow's async
            # checkpoint writes the objects given to the constructor only.
            self.checkpoint = tf.train.Checkpoint(**self.tracked, **{
                GLOBAL_BATCH_KEY: self.batch_var, LOSS_SCALE_KEY: scale_state})  # fmt: skip
            if restore.restore_extra(self.checkpoint_path, {LOSS_SCALE_KEY: scale_state}):
                ctx.log.event(
                    "loss_scale", restored=prec.loss_scale(), good_steps=prec.good_steps()
                )
        return start

    def start(self, start_step: int) -> None:
        """The datasets from ``start_step`` and the train and eval step functions."""
        import tensorflow as tf

        from trainer import data, model

        cfg, strategy, net, prec, sums = (
            self.config, self.strategy, self.net, self.prec, self.sums
        )  # fmt: skip
        s = self.schedule
        global_batch = s.global_batch
        source = self.source

        def dataset_fn(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
            return data.worker_dataset(
                source,
                num_workers=ctx.num_input_pipelines,
                worker_index=ctx.input_pipeline_id,
                replicas_per_worker=ctx.num_replicas_in_sync // ctx.num_input_pipelines,
                batch_size=ctx.get_per_replica_batch_size(global_batch),
                steps_per_epoch=s.steps_per_epoch,
                epochs=s.epochs,
                start_step=start_step,
                seed=cfg.seed,
            )

        iterator = iter(strategy.distribute_datasets_from_function(dataset_fn))
        loss_fn = model.load_loss(cfg.loss)
        if self.eval_source is not None:
            self._evaluator = Evaluator(strategy, net, loss_fn, self.eval_source, global_batch)

        def forward_backward(x: tf.Tensor, y: tf.Tensor) -> tuple[Any, Any, Any]:
            with tf.GradientTape() as tape:
                logits = precision.float32_logits(net(x, training=True))
                per_example = loss_fn(y, logits)
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
                if net.losses:
                    loss += tf.nn.scale_regularization_loss(tf.add_n(net.losses))
                loss = prec.scale(loss)  # fp16: times the loss scale
            return logits, per_example, prec.gradients(tape, loss, net.trainable_variables)

        if cfg.jit:  # XLA for the compute only: the optimizer's all-reduce stays outside
            forward_backward = tf.function(forward_backward, jit_compile=True)

        def step_fn(x: tf.Tensor, y: tf.Tensor) -> None:
            logits, per_example, grads = forward_backward(x, y)
            prec.apply(grads, net.trainable_variables)
            hits = tf.equal(tf.argmax(logits, -1, output_type=tf.int32), tf.cast(y, tf.int32))
            sums.assign_add(
                tf.stack(
                    [
                        tf.reduce_sum(per_example),
                        tf.reduce_sum(tf.cast(hits, tf.float32)),
                        tf.cast(tf.size(y), tf.float32),
                    ]
                )
            )

        def sync_fn(stop_flags: tf.Tensor) -> tf.Tensor:
            local = tf.identity(sums.read_value())
            with tf.control_dependencies([local]):
                sums.assign(tf.zeros(3))
            # Weights that are not finite, once per call (one pass over them, against the
            # call's steps of forward and backward passes): a ReLU turns NaN into 0, so a model
            # whose weights are NaN can still show a finite loss.
            broken = tf.add_n([tf.reduce_sum(tf.cast(~tf.math.is_finite(w), tf.float32))
                               for w in net.weights if w.dtype.is_floating])  # fmt: skip
            ctx = tf.distribute.get_replica_context()
            return ctx.all_reduce(
                tf.distribute.ReduceOp.SUM, tf.concat([local, [broken], stop_flags], 0)
            )

        @tf.function
        def train_call(steps: tf.Tensor, stop_flags: tf.Tensor) -> tf.Tensor:
            for _ in tf.range(steps):
                strategy.run(step_fn, args=next(iterator))
            out = strategy.run(sync_fn, args=(stop_flags,))
            return strategy.experimental_local_results(out)[0]

        self._call = train_call

    def train(self, steps: int, flags: Sequence[bool]) -> Sequence[float]:
        import tensorflow as tf

        out = self._call(tf.constant(steps, tf.int64), tf.constant(flags, tf.float32))
        return [float(v) for v in out.numpy()]

    def end_epoch(self, loss: float, accuracy: float) -> None:
        self.last_metrics.assign([loss, accuracy])

    def evaluate(self) -> tuple[float, float]:
        assert self._evaluator is not None, "evaluate() without evaluation data"
        loss, acc = self._evaluator()
        self.last_eval.assign([loss, acc])
        return loss, acc
