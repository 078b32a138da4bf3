"""One worker's training run (strategy from trainer.placement) with a custom training loop.

Why a custom loop over tf-keras ``model.fit``: it gives exact step-level checkpoints, a stop
flag all workers agree on between ``tf.function`` calls (SIGTERM on one pod, world-size change),
and global loss/accuracy from the same all-reduce; several steps run per call so the 1-worker
overhead against plain ``model.fit`` stays small (figures in docs/trainer.md).

Checkpoint directory layout (``TFD_CHECKPOINT_DIR``, local path or gs:// / s3:// URI)::

    manifest.json               the run's settings at its first start, chief only
    chief.lease                 the live chief's lease (trainer.lease), chief only
    checkpoints/ckpt-<step>.*   step-level checkpoints, chief only
    model.keras                 final model, chief only
    summary.json                final figures, chief only
    DONE                        written last by the chief (trainer.runs): the run is finished

A worker process's life around this (run identity, completion, rollouts) is trainer.lifecycle.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from trainer import checkpoints, contract, placement, precision, runs, runtime
from trainer.checkpoints import GLOBAL_BATCH_KEY, LOSS_SCALE_KEY
from trainer.config import Config
from trainer.errors import (
    DataError,
    DivergedError,
    RestartRequested,
    RolloutRequested,
    UsageError,
)
from trainer.evaluate import Evaluator
from trainer.finish import classify, finish
from trainer.logs import Log
from trainer.manifest import RunGuard
from trainer.metrics import Metrics
from trainer.signals import StopSignal, watch_tf_preemption
from trainer.summaries import Summaries
from trainer.watch import StatefulSetWatch


class Worker:
    """Strategy, data, model, checkpoints and the training loop of one worker process."""

    def __init__(
        self,
        config: Config,
        env: Mapping[str, str],
        spec: contract.ClusterSpec,
        root: str,
        log: Log,
        metrics: Metrics,
        stop: StopSignal,
    ) -> None:
        self.config = config
        self.env = env
        self.spec = spec
        self.root = root
        self.log = log
        self.metrics = metrics
        self.stop = stop
        self.world_changed = threading.Event()
        self.rollout = threading.Event()
        self.watch: StatefulSetWatch | None = None
        self.evaluate: Callable[[], tuple[float, float]] | None = None
        self.summaries = Summaries("")
        self.precision = ""
        self.guard: RunGuard | None = None
        """The run's manifest check and the chief's lease (set by trainer.lifecycle)."""
        self.checkpoint_path: str | None = None
        """The checkpoint training resumed from (``None``: started at step 0)."""

    # --- set-up -----------------------------------------------------------------------------
    def _strategy(self) -> Any:
        return placement.strategy(self.config, self.spec, self.log, self.stop)

    def train(self) -> None:
        import tensorflow as tf
        import tf_keras

        from trainer import data, model

        cfg = self.config
        n = self.spec.num_workers
        if cfg.cpu_devices > 1 and n > 1:
            raise UsageError(
                f"--cpu-devices: must be 1 with several workers (MultiWorkerMirroredStrategy "
                f"uses one CPU device per worker); got {cfg.cpu_devices} with {n} workers"
            )
        t_launch = time.time()
        # Before anything that runs a TensorFlow op (data loading, the user's model module).
        runtime.configure(cfg)
        self.log.event("forming", workers=n, task_index=self.spec.task_index)
        # The Keras policy must be set before the model (and a --model module's layers) exist.
        prec = precision.apply_policy(
            precision.resolve(cfg.precision, precision.detect(), cfg.allow_emulated_precision)
        )
        self.precision = prec.name
        self.log.event("precision", precision=prec.name, jit=cfg.jit, reason=prec.resolved.reason)
        strategy = self._strategy()
        # The coordination service installs its own C++ SIGTERM handler (TensorFlow's preemption
        # notifier), which would swallow the signal: take SIGTERM back, and pick up a SIGTERM
        # that TensorFlow's handler caught while the cluster was forming.
        self.stop.install()
        if n > 1:
            watch_tf_preemption(self.stop)
        if self.is_chief and cfg.tensorboard_dir:
            self.summaries = Summaries(cfg.tensorboard_dir)

        source = data.load(
            cfg.dataset,
            cfg.seed,
            cfg.synthetic_examples,
            self.root,
            self.is_chief,
            count=cfg.steps_per_epoch == 0,
        )
        eval_source = None
        if cfg.eval_split:
            source, eval_source = data.split(source, cfg.eval_split, cfg.seed)
        elif cfg.eval_dataset:
            eval_source = data.load(
                cfg.eval_dataset, cfg.seed + 1, cfg.synthetic_examples, self.root, self.is_chief
            )
            data.check_same_scale(source, eval_source)
        self.log.event("input_scale", scale=source.scale, dtype=source.dtype,
                       reason=source.scaling())  # fmt: skip
        replicas = strategy.num_replicas_in_sync
        global_batch = cfg.batch_size * replicas
        spe = cfg.steps_per_epoch or source.num_examples // global_batch
        if spe < 1:
            raise DataError(
                f"--dataset {cfg.dataset}: {source.num_examples} examples give no full global "
                f"batch of {global_batch} (--batch-size {cfg.batch_size} x {replicas} replicas)"
            )
        total = spe * cfg.epochs
        num_classes = self._num_classes(source.num_classes)
        self.metrics.ready = True
        with strategy.scope():
            inner = model.build(cfg.model, source.input_shape, num_classes)
            # The data's scale as the saved model's first layer: model.keras takes raw rows.
            net = model.with_input_scale(inner, source.scale, source.input_shape)
            optimizer = tf_keras.optimizers.Adam(cfg.learning_rate_for(replicas))
            optimizer.build(net.trainable_variables)
            step_var = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
            # The step counts global batches: a restart with another world size converts it.
            batch_var = tf.Variable(
                global_batch, dtype=tf.int64, trainable=False, name=GLOBAL_BATCH_KEY
            )
            # Loss and accuracy of the last completed epoch: the summary survives a restart.
            last_metrics = tf.Variable([0.0, 0.0], trainable=False, name="last_epoch_metrics")
            # Loss and accuracy of the last evaluation pass (absent from older checkpoints).
            last_eval = tf.Variable([-1.0, -1.0], trainable=False, name="last_eval_metrics")
            sums = tf.Variable(
                tf.zeros(3),
                trainable=False,
                synchronization=tf.VariableSynchronization.ON_READ,
                aggregation=tf.VariableAggregation.SUM,
                name="interval_sums",
            )
        if self.guard is not None:  # the chief's first start writes the run manifest
            self.guard.record(global_batch, prec.name)
        tracked = {
            "model": inner,
            "optimizer": optimizer,
            "step": step_var,
            "last_metrics": last_metrics,
            "last_eval": last_eval,
        }
        ckpt = tf.train.Checkpoint(**tracked, **{GLOBAL_BATCH_KEY: batch_var})
        start = self._restore(tracked, step_var, batch_var, total)
        with strategy.scope():
            # fp16: the LossScaleOptimizer comes after the restore. Its loss-scale state hangs
            # under the inner optimizer, so a checkpoint of another precision would lack it.
            prec.wrap(optimizer)
        scale_state = prec.loss_scale_state()
        if scale_state is not None:  # fp16: saved from now on, resumed where it was saved
            setattr(ckpt, LOSS_SCALE_KEY, scale_state)
            if checkpoints.restore_extra(self.checkpoint_path, {LOSS_SCALE_KEY: scale_state}):
                self.log.event(
                    "loss_scale", restored=prec.loss_scale(), good_steps=prec.good_steps()
                )
        manager, temp_dir = self._manager(ckpt)

        def dataset_fn(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
            return data.worker_dataset(
                source,
                num_workers=ctx.num_input_pipelines,
                worker_index=ctx.input_pipeline_id,
                replicas_per_worker=ctx.num_replicas_in_sync // ctx.num_input_pipelines,
                batch_size=ctx.get_per_replica_batch_size(global_batch),
                steps_per_epoch=spe,
                epochs=cfg.epochs,
                start_step=start,
                seed=cfg.seed,
            )

        iterator = iter(strategy.distribute_datasets_from_function(dataset_fn))
        loss_fn = model.load_loss(cfg.loss)
        if eval_source is not None:
            evaluator = Evaluator(strategy, net, loss_fn, eval_source, global_batch)
            self.evaluate = lambda: self._evaluate(evaluator, last_eval)

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

        self._watch_statefulset()
        self.log.event(
            "start",
            run_id=contract.run_id_from_env(self.env),
            learning_rate=float(optimizer.learning_rate.numpy()),
            workers=n,
            replicas=replicas,
            num_classes=int(net.output_shape[-1]),
            task_index=self.spec.task_index,
            pid=os.getpid(),
            start_step=start,
            total_steps=total,
            steps_per_epoch=spe,
            global_batch=global_batch,
            dataset=source.name,
            precision=prec.name,
            startup_s=round(time.time() - t_launch, 3),
        )
        try:
            step, rate = self._loop(
                train_call, manager, temp_dir, step_var, last_metrics, start, total, spe,
                global_batch,
            )  # fmt: skip
        finally:
            if self.watch is not None:
                self.watch.stop()
        record = runs.DoneRecord(step, cfg.epochs, spe, global_batch)
        finish(self, strategy, net, (last_metrics, last_eval), record, rate, temp_dir)

    @property
    def is_chief(self) -> bool:
        return self.spec.is_chief

    def _evaluate(self, evaluator: Evaluator, last_eval: Any) -> tuple[float, float]:
        loss, acc = evaluator()
        last_eval.assign([loss, acc])
        return loss, acc

    def _num_classes(self, from_data: int) -> int:
        """``--num-classes``, else the data's (0: unknown, the model's output width decides)."""
        flag = self.config.num_classes
        if flag and from_data > flag:
            raise DataError(
                f"--num-classes: must cover the labels 0-{from_data - 1} of --dataset "
                f"{self.config.dataset}; got {flag}"
            )
        return flag or from_data

    def _restore(
        self, tracked: Mapping[str, Any], step_var: Any, batch_var: Any, total: int
    ) -> int:
        """See :func:`trainer.checkpoints.restore`; returns the step to start at."""
        step, self.checkpoint_path = checkpoints.restore(
            self.root, tracked, step_var, batch_var, total, self.config, self.log, self.metrics
        )
        return step

    def _manager(self, ckpt: Any) -> tuple[Any, str]:
        return checkpoints.manager(ckpt, self.root, self.is_chief, self.spec.task_index)

    def _save(self, manager: Any, step_var: Any, step: int, temp_dir: str) -> None:
        checkpoints.save(manager, step_var, step, temp_dir, self.metrics, self.log, self.is_chief)

    def _watch_statefulset(self) -> None:
        """The chief polls the StatefulSet (world size, rollouts) whenever it can call the API;
        its flags reach every worker through the loop's all-reduce."""
        if not self.is_chief or not contract.api_configured(self.env):
            return
        self.watch = StatefulSetWatch(
            self.env, self.spec.num_workers, self.config.replicas_poll, self.log
        )
        self.world_changed, self.rollout = self.watch.world_changed, self.watch.rollout
        self.watch.start()

    # --- the loop ---------------------------------------------------------------------------
    def _loop(
        self,
        train_call: Any,
        manager: Any,
        temp_dir: str,
        step_var: Any,
        last_metrics: Any,
        start: int,
        total: int,
        spe: int,
        global_batch: int,
    ) -> tuple[int, float]:
        import tensorflow as tf

        cfg = self.config
        step = start
        epoch_sums = [0.0, 0.0, 0.0]
        t_first_done = 0.0
        steps_after_first = 0
        t_log = time.time()
        steps_since_log = 0
        try:
            while step < total:
                to_ckpt = cfg.checkpoint_every - step % cfg.checkpoint_every
                to_epoch = spe - step % spe
                k = min(cfg.steps_per_call, to_ckpt, to_epoch, total - step)
                # [stop (SIGTERM, world size), rollout]: summed over workers by the all-reduce.
                flags = [self.stop.event.is_set() or self.world_changed.is_set(),
                         self.rollout.is_set()]  # fmt: skip
                t_call = time.time()
                out = train_call(tf.constant(k, tf.int64), tf.constant(flags, tf.float32)).numpy()
                step += k
                now = time.time()
                if t_first_done:
                    steps_after_first += k
                else:
                    t_first_done = now
                    self.log.event("first_step", step=step)
                steps_since_log += k
                loss_sum, correct, count, broken, stop_votes, rollout_votes = (
                    float(v) for v in out
                )
                # All-reduced figures: every worker stops here together, before any save, so
                # the latest checkpoint predates the bad step.
                if broken or not math.isfinite(loss_sum):
                    weights = ", weights not finite" if broken else ""
                    raise DivergedError(
                        f"training diverged in steps {step - k + 1}-{step}: loss "
                        f"{loss_sum / max(count, 1):g}{weights}; nothing saved after step "
                        f"{step - k}; lower --learning-rate (a new run id: the run manifest "
                        "records the rate) or look for NaN/Inf in the data"
                    )
                interval = (loss_sum, correct, count)
                epoch_sums = [a + b for a, b in zip(epoch_sums, interval, strict=True)]
                self.metrics.stepped(k, global_batch, now - t_call)
                self.metrics.step.set(step)
                self.metrics.epoch.set(step // spe if step < total else cfg.epochs - 1)
                if count:
                    self.metrics.loss.set(loss_sum / count)
                    self.metrics.accuracy.set(correct / count)
                if step % spe == 0 and epoch_sums[2]:
                    loss, acc = epoch_sums[0] / epoch_sums[2], epoch_sums[1] / epoch_sums[2]
                    last_metrics.assign([loss, acc])
                    ep = step // spe - 1
                    self.log.event("epoch", epoch=ep, step=step, loss=loss, accuracy=acc)
                    self.summaries.scalars(step, {"train/epoch_loss": loss,
                                                  "train/epoch_accuracy": acc})  # fmt: skip
                    epoch_sums = [0.0, 0.0, 0.0]
                if step % spe == 0 and self.evaluate is not None:
                    eval_loss, eval_acc = self.evaluate()
                    self.metrics.eval_loss.set(eval_loss)
                    self.metrics.eval_accuracy.set(eval_acc)
                    self.log.event(
                        "eval", epoch=step // spe - 1, step=step, loss=eval_loss, accuracy=eval_acc
                    )
                    self.summaries.scalars(
                        step, {"eval/loss": eval_loss, "eval/accuracy": eval_acc}
                    )
                    self.summaries.flush()
                if now - t_log >= cfg.log_every or step == total:
                    rate = steps_since_log * global_batch / max(now - t_log, 1e-9)
                    self.metrics.examples_per_second.set(rate)
                    if count:
                        self.summaries.scalars(
                            step,
                            {
                                "train/loss": loss_sum / count,
                                "train/accuracy": correct / count,
                                "train/examples_per_second": rate,
                            },
                        )
                    self.log.event(
                        "progress",
                        step=step,
                        total_steps=total,
                        epoch=min(step // spe, cfg.epochs - 1),
                        loss=loss_sum / count if count else 0.0,
                        accuracy=correct / count if count else 0.0,
                        examples_per_sec=round(rate, 1),
                    )
                    t_log, steps_since_log = now, 0
                if rollout_votes > 0:
                    self._save(manager, step_var, step, temp_dir)
                    self.log.event("stop", step=step, reason="rollout")
                    raise RolloutRequested(
                        f"stopped at step {step} for a rollout; checkpoint saved"
                    )
                if stop_votes > 0:
                    self._save(manager, step_var, step, temp_dir)
                    reason = self.stop.reason or (
                        "world size changed" if self.world_changed.is_set() else "a peer asked"
                    )
                    self.log.event("stop", step=step, reason=reason)
                    raise RestartRequested(
                        f"stopped at step {step} ({reason}); checkpoint saved, restart to resume"
                    )
                if step % cfg.checkpoint_every == 0 or step % spe == 0 or step == total:
                    self._save(manager, step_var, step, temp_dir)
        except tf.errors.OpError as err:
            raise classify(err, self.spec.num_workers) from None
        elapsed = time.time() - t_first_done if t_first_done else 0.0
        rate = steps_after_first * global_batch / elapsed if steps_after_first else 0.0
        return step, rate
