"""One worker's training run: the wiring of the strategy (:mod:`trainer.placement`), the task
(:mod:`trainer.task`: model, datasets, steps) and the controller (:mod:`trainer.controller`:
the schedule).

A custom loop rather than ``model.fit`` for exact step-level checkpoints and a stop all workers
agree on (docs/trainer.md, "Design"); the run directory's layout: docs/trainer.md, "Checkpoints".
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

from trainer import checkpoints, contract, placement, precision, runtime
from trainer.config import Config
from trainer.context import WorkerContext
from trainer.controller import Controller, plan
from trainer.errors import DataError, UsageError
from trainer.logs import Log
from trainer.manifest import RunGuard
from trainer.metrics import Metrics
from trainer.rescue import Rescue
from trainer.signals import StopSignal, watch_tf_preemption
from trainer.summaries import Summaries


class Worker:
    """One worker process's training run: set-up, then the controller's loop over the task."""

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
        self.ctx = WorkerContext(config, env, spec, root, log, metrics, stop)

    @property
    def guard(self) -> RunGuard | None:
        """The run's manifest check and the chief's lease (set by trainer.lifecycle)."""
        return self.ctx.guard

    @guard.setter
    def guard(self, guard: RunGuard | None) -> None:
        self.ctx.guard = guard

    def _strategy(self) -> Any:
        ctx = self.ctx
        return placement.strategy(ctx.config, ctx.spec, ctx.log, ctx.stop)

    def train(self) -> None:
        from trainer.task import Task, sources

        ctx = self.ctx
        cfg, log = ctx.config, ctx.log
        n = ctx.spec.num_workers
        if cfg.cpu_devices > 1 and n > 1:
            raise UsageError(
                f"--cpu-devices: must be 1 with several workers (MultiWorkerMirroredStrategy "
                f"uses one CPU device per worker); got {cfg.cpu_devices} with {n} workers"
            )
        t_launch = time.time()
        # Before anything that runs a TensorFlow op (data loading, the user's model module).
        runtime.configure(cfg)
        log.event("forming", workers=n, task_index=ctx.spec.task_index)
        hardware = precision.detect()
        placement.check_gpus(cfg, contract.gpus_given(ctx.env), len(hardware.gpu_capabilities), log)
        # The Keras policy must be set before the model (and a --model module's layers) exist.
        prec = precision.apply_policy(
            precision.resolve(cfg.precision, hardware, cfg.allow_emulated_precision)
        )
        log.event("precision", precision=prec.name, jit=cfg.jit, reason=prec.resolved.reason)
        strategy = self._strategy()
        # The coordination service installs its own C++ SIGTERM handler (TensorFlow's preemption
        # notifier), which would swallow the signal: take SIGTERM back, and pick up a SIGTERM
        # that TensorFlow's handler caught while the cluster was forming.
        ctx.stop.install()
        if n > 1:
            watch_tf_preemption(ctx.stop)
        summaries = Summaries(cfg.tensorboard_dir if ctx.is_chief else "")

        source, eval_source = sources(cfg, ctx.root, ctx.is_chief)
        log.event("input_scale", scale=source.scale, dtype=source.dtype,
                  reason=source.scaling())  # fmt: skip
        schedule = plan(cfg, source.num_examples, strategy.num_replicas_in_sync // n, n)
        num_classes = self._num_classes(source.num_classes)
        ctx.metrics.ready = True
        task = Task(cfg, strategy, prec, source, eval_source, schedule, num_classes)
        if ctx.guard is not None:  # the chief's first start writes the run manifest
            ctx.guard.record(schedule.global_batch, prec.name)
        start = task.restore(ctx)
        manager, temp_dir = checkpoints.manager(
            task.checkpoint, ctx.root, ctx.is_chief, ctx.spec.task_index
        )
        task.start(start)
        rescue = None
        if n > 1 and not cfg.no_rescue_checkpoint:
            progress = checkpoints.Progress.of_run(cfg, schedule.global_batch)
            rescue = Rescue(task.checkpoint, task.step_var, ctx.root, ctx.spec.task_index, start,
                            log, progress, cfg.rescue_memory_fraction)  # fmt: skip
        controller = Controller(ctx, schedule, manager, task.step_var, temp_dir, summaries,
                                rescue)  # fmt: skip
        controller.watch_statefulset()
        log.event(
            "start",
            run_id=ctx.run_id,
            learning_rate=float(task.optimizer.learning_rate.numpy()),
            workers=n,
            replicas=schedule.replicas,
            num_classes=int(task.net.output_shape[-1]),
            task_index=ctx.spec.task_index,
            pid=os.getpid(),
            start_step=start,
            total_steps=schedule.total_steps,
            steps_per_epoch=schedule.steps_per_epoch,
            global_batch=schedule.global_batch,
            dataset=source.name,
            precision=prec.name,
            startup_s=round(time.time() - t_launch, 3),
        )
        step, rate = controller.train(task, start)
        controller.finish(strategy, task.net, task.figures, task.evaluates, prec.name, step, rate)

    def _num_classes(self, from_data: int) -> int:
        """``--num-classes``, else the data's (0: unknown, the model's output width decides)."""
        flag = self.ctx.config.num_classes
        if flag and from_data > flag:
            raise DataError(
                f"--num-classes: must cover the labels 0-{from_data - 1} of --dataset "
                f"{self.ctx.config.dataset}; got {flag}"
            )
        return flag or from_data
