"""The training loop's schedule: how many steps each call runs, when to save, summarise and
evaluate, the stop all workers agree on, and the end of the run.

Modelled on the controller of TF Model Garden's Orbit (``orbit/controller.py``): the controller
owns the outer loop and calls the task (:class:`trainer.task.Task`, the inner loop: model,
optimizer, datasets, the train and eval steps) for a number of steps at a time. Each call
returns the all-reduced figures of its steps and the workers' votes (stop, rollout), so every
worker takes the same decision after the same call: save, evaluate, stop or go on.

:class:`Schedule` is the arithmetic of a run (global batch, steps per epoch, total steps, the
next call's length) without TensorFlow; ``--input-only`` uses it too, so it iterates the steps
training would.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from trainer import contract, done_marker
from trainer.checkpoints import Progress
from trainer.config import Config
from trainer.context import WorkerContext
from trainer.errors import (
    DataError,
    DivergedError,
    PeerLostError,
    RestartRequested,
    RolloutRequested,
)
from trainer.finish import classify, finish
from trainer.rescue import Rescue
from trainer.rescue_plan import Cadence
from trainer.saver import Saver
from trainer.summaries import Summaries
from trainer.watch import StatefulSetWatch


@dataclass(frozen=True)
class Schedule:
    """A run's steps: global batch, epochs, and the length of each training call.

    The global batch is ``batch_size`` (per replica) x ``replicas_per_worker`` x
    ``num_workers``; the step counts global batches.
    """

    batch_size: int
    replicas_per_worker: int
    num_workers: int
    steps_per_epoch: int
    epochs: int
    steps_per_call: int
    checkpoint_every: int

    @property
    def replicas(self) -> int:
        return self.replicas_per_worker * self.num_workers

    @property
    def global_batch(self) -> int:
        return self.batch_size * self.replicas

    @property
    def total_steps(self) -> int:
        return self.steps_per_epoch * self.epochs

    def call_steps(self, step: int) -> int:
        """Steps of the call that starts at ``step``: ``--steps-per-call``, cut at the next
        checkpoint, epoch end and the last step (a call never crosses one)."""
        to_ckpt = self.checkpoint_every - step % self.checkpoint_every
        to_epoch = self.steps_per_epoch - step % self.steps_per_epoch
        return min(self.steps_per_call, to_ckpt, to_epoch, self.total_steps - step)

    def epoch_end(self, step: int) -> bool:
        return step % self.steps_per_epoch == 0

    def save_due(self, step: int) -> bool:
        """A checkpoint every ``--checkpoint-every`` steps, at each epoch end and at the end."""
        return step % self.checkpoint_every == 0 or self.epoch_end(step) or step == self.total_steps

    def epoch(self, step: int) -> int:
        """The epoch ``step`` is in (the last epoch once training is done)."""
        return min(step // self.steps_per_epoch, self.epochs - 1)


def plan(config: Config, num_examples: int, replicas_per_worker: int, num_workers: int) -> Schedule:
    """The run's :class:`Schedule` for ``num_examples`` training examples.

    Raises:
        DataError: the examples fill no global batch (``--steps-per-epoch`` 0).
    """
    schedule = Schedule(
        batch_size=config.batch_size,
        replicas_per_worker=replicas_per_worker,
        num_workers=num_workers,
        steps_per_epoch=config.steps_per_epoch,
        epochs=config.epochs,
        steps_per_call=config.steps_per_call,
        checkpoint_every=config.checkpoint_every,
    )
    if config.steps_per_epoch:
        return schedule
    spe = num_examples // schedule.global_batch
    if spe < 1:
        raise DataError(
            f"--dataset {config.dataset}: {num_examples} examples give no full global batch of "
            f"{schedule.global_batch} (--batch-size {config.batch_size} x {schedule.replicas} "
            "replicas)"
        )
    return dataclasses.replace(schedule, steps_per_epoch=spe)


class Steps(Protocol):
    """What the controller needs of the task (:class:`trainer.task.Task`)."""

    @property
    def evaluates(self) -> bool:
        """The run has evaluation data: :meth:`evaluate` after every epoch."""
        ...

    def train(self, steps: int, flags: Sequence[bool]) -> Sequence[float]:
        """Run ``steps`` steps; returns the all-reduced ``(loss sum, hits, count, non-finite
        weights, stop votes, rollout votes)``."""
        ...

    def end_epoch(self, loss: float, accuracy: float) -> None:
        """Keep the epoch's figures (saved with the checkpoint)."""
        ...

    def evaluate(self) -> tuple[float, float]:
        """One evaluation pass: (loss, accuracy), all workers."""
        ...


class Controller:
    """The outer loop of one worker: the same decisions as every other worker, call by call."""

    def __init__(
        self,
        ctx: WorkerContext,
        schedule: Schedule,
        manager: Any,
        step_var: Any,
        temp_dir: str,
        summaries: Summaries | None = None,
        rescue: Rescue | None = None,
    ) -> None:
        self.ctx = ctx
        self.schedule = schedule
        self.manager = manager
        """The ``tf.train.CheckpointManager`` (a worker's private one on non-chiefs)."""
        self.step_var = step_var
        self.temp_dir = temp_dir
        self.saver = Saver(manager, step_var, temp_dir, ctx.metrics, ctx.log, ctx.is_chief,
                           asynchronous=not ctx.config.sync_checkpoints,
                           progress=Progress.of_run(ctx.config, schedule.global_batch))  # fmt: skip
        self.summaries = summaries or Summaries("")
        self.rescue = rescue
        """The host copy written when a peer is lost (None: one worker, or turned off)."""
        self.cadence: Cadence | None = None
        """Which calls the rescue copy follows, agreed through each call's all-reduce."""
        if rescue is not None:  # logged once: kept or not, its bytes and the budget
            spec = ctx.spec
            self.cadence = Cadence(spec.task_index, spec.num_workers,
                                   schedule.replicas_per_worker, rescue.kept)  # fmt: skip
            ctx.log.event("rescue_copy", **rescue.budget.fields())
        self.world_changed = threading.Event()
        self.rollout = threading.Event()
        self.watch: StatefulSetWatch | None = None

    def watch_statefulset(self) -> None:
        """The chief polls the StatefulSet (world size, rollouts) whenever it can call the API;
        its flags reach every worker through the call's all-reduce."""
        ctx = self.ctx
        if not ctx.is_chief or not contract.api_configured(ctx.env):
            return
        self.watch = StatefulSetWatch(
            ctx.env, ctx.spec.num_workers, ctx.config.replicas_poll, ctx.log
        )
        self.world_changed, self.rollout = self.watch.world_changed, self.watch.rollout
        self.watch.start()

    def save(self, step: int, wait: bool = False) -> None:
        """Save at ``step``; ``wait``: return once the files are on disk (before an exit)."""
        self.saver.save(step, wait=wait)

    def train(self, task: Steps, start: int) -> tuple[int, float]:
        """Train from ``start`` to the last step; returns the final step and the examples/s
        after the first call (tracing excluded).

        Raises:
            DivergedError: a call's loss or the weights are not finite (nothing saved after it).
            RestartRequested: a worker was stopped (SIGTERM) or the world size changed; every
                worker saved a checkpoint at the same step.
            RolloutRequested: the pod template changed; checkpoint saved likewise.
        """
        import tensorflow as tf

        try:
            return self._loop(task, start)
        except tf.errors.OpError as err:
            self.saver.settle()
            failure = classify(err, self.ctx.spec.num_workers)
            if isinstance(failure, PeerLostError) and self.rescue is not None:
                self.rescue.write()
            raise failure from None
        except BaseException:
            self.saver.settle()  # a write in flight is of a good step: let it land
            raise
        finally:
            if self.watch is not None:
                self.watch.stop()

    def _loop(self, task: Steps, start: int) -> tuple[int, float]:
        ctx, s = self.ctx, self.schedule
        metrics, total, spe = ctx.metrics, s.total_steps, s.steps_per_epoch
        step = start
        epoch_sums = [0.0, 0.0, 0.0]
        t_first_done = 0.0
        steps_after_first = 0
        t_log = time.time()
        steps_since_log = 0
        while step < total:
            k = s.call_steps(step)
            # [stop (SIGTERM, world size), rollout]: summed over workers by the all-reduce.
            flags = [ctx.stop.event.is_set() or self.world_changed.is_set(),
                     self.rollout.is_set()]  # fmt: skip
            if self.cadence is not None:  # then one slot per worker: its rescue cadence
                flags += self.cadence.proposals()
            t_call = time.time()
            out = task.train(k, flags)
            step += k
            now = time.time()
            first = not t_first_done  # the call that traced: not a call's time
            if t_first_done:
                steps_after_first += k
            else:
                t_first_done = now
                ctx.log.event("first_step", step=step)
            steps_since_log += k
            loss_sum, correct, count, broken, stop_votes, rollout_votes, *slots = (
                float(v) for v in out
            )
            # All-reduced figures: every worker stops here together, before any save, so the
            # latest checkpoint predates the bad step.
            if broken or not math.isfinite(loss_sum):
                weights = ", weights not finite" if broken else ""
                raise DivergedError(
                    f"training diverged in steps {step - k + 1}-{step}: loss "
                    f"{loss_sum / max(count, 1):g}{weights}; nothing saved after step "
                    f"{step - k}; lower --learning-rate (a new run id: the run manifest "
                    "records the rate) or look for NaN/Inf in the data"
                )
            epoch_sums = [a + b for a, b in zip(epoch_sums, (loss_sum, correct, count),
                                                strict=True)]  # fmt: skip
            metrics.stepped(k, s.global_batch, now - t_call)
            metrics.step.set(step)
            metrics.epoch.set(step // spe if step < total else s.epochs - 1)
            if count:
                metrics.loss.set(loss_sum / count)
                metrics.accuracy.set(correct / count)
            if s.epoch_end(step) and epoch_sums[2]:
                self._end_epoch(task, step, epoch_sums)
                epoch_sums = [0.0, 0.0, 0.0]
            if s.epoch_end(step) and task.evaluates:
                self._evaluate(task, step)
            if self.rescue is not None:
                # The state after this call, for a peer's loss: after the epoch's figures and
                # the evaluation, which a resume from it would otherwise never redo.
                # A call cut short (a checkpoint, an epoch end) counts as a full one's time.
                full = (now - t_call) * s.steps_per_call / k
                self._rescue_copy(step, None if first else full, slots)
            if now - t_log >= ctx.config.log_every or step == total:
                rate = steps_since_log * s.global_batch / max(now - t_log, 1e-9)
                self._progress(step, rate, loss_sum, correct, count)
                t_log, steps_since_log = now, 0
            self._maybe_stop(step, rollout_votes, stop_votes)
            if s.save_due(step):
                self.save(step, wait=step == total)  # the last one lands before model and DONE
        elapsed = time.time() - t_first_done if t_first_done else 0.0
        rate = steps_after_first * s.global_batch / elapsed if steps_after_first else 0.0
        return step, rate

    def _rescue_copy(self, step: int, call_s: float | None, slots: Sequence[float]) -> None:
        """Copy after this call when the workers' agreed cadence says so (every worker takes
        the same decision from the same all-reduced slots); log a new ``k``."""
        assert self.rescue is not None and self.cadence is not None
        cadence, k = self.cadence, self.cadence.k
        if call_s is not None:
            cadence.record_call(call_s)
        if cadence.agree(slots):
            cadence.record_copy(self.rescue.snapshot(step))
        if cadence.k != k and self.rescue.kept:
            self.ctx.log.event("rescue_copy", step=step, every=cadence.k,
                               steps_at_most=cadence.k * self.schedule.steps_per_call,
                               proposal=cadence.proposal())  # fmt: skip

    def _end_epoch(self, task: Steps, step: int, sums: list[float]) -> None:
        loss, acc = sums[0] / sums[2], sums[1] / sums[2]
        task.end_epoch(loss, acc)
        epoch = step // self.schedule.steps_per_epoch - 1
        self.ctx.log.event("epoch", epoch=epoch, step=step, loss=loss, accuracy=acc)
        self.summaries.scalars(step, {"train/epoch_loss": loss, "train/epoch_accuracy": acc})

    def _evaluate(self, task: Steps, step: int) -> None:
        ctx = self.ctx
        eval_loss, eval_acc = task.evaluate()
        ctx.metrics.eval_loss.set(eval_loss)
        ctx.metrics.eval_accuracy.set(eval_acc)
        epoch = step // self.schedule.steps_per_epoch - 1
        ctx.log.event("eval", epoch=epoch, step=step, loss=eval_loss, accuracy=eval_acc)
        self.summaries.scalars(step, {"eval/loss": eval_loss, "eval/accuracy": eval_acc})
        self.summaries.flush()

    def _progress(
        self, step: int, rate: float, loss_sum: float, correct: float, count: float
    ) -> None:
        self.ctx.metrics.examples_per_second.set(rate)
        if count:
            self.summaries.scalars(
                step,
                {
                    "train/loss": loss_sum / count,
                    "train/accuracy": correct / count,
                    "train/examples_per_second": rate,
                },
            )
        self.ctx.log.event(
            "progress",
            step=step,
            total_steps=self.schedule.total_steps,
            epoch=self.schedule.epoch(step),
            loss=loss_sum / count if count else 0.0,
            accuracy=correct / count if count else 0.0,
            examples_per_sec=round(rate, 1),
        )

    def _maybe_stop(self, step: int, rollout_votes: float, stop_votes: float) -> None:
        """Any worker's vote stops every worker at this step, with a checkpoint."""
        log = self.ctx.log
        if rollout_votes > 0:
            self.save(step, wait=True)
            log.event("stop", step=step, reason="rollout")
            raise RolloutRequested(f"stopped at step {step} for a rollout; checkpoint saved")
        if stop_votes > 0:
            self.save(step, wait=True)
            reason = self.ctx.stop.reason or (
                "world size changed" if self.world_changed.is_set() else "a peer asked"
            )
            log.event("stop", step=step, reason=reason)
            raise RestartRequested(
                f"stopped at step {step} ({reason}); checkpoint saved, restart to resume"
            )

    def finish(
        self,
        strategy: Any,
        net: Any,
        figures: tuple[Any, Any],
        evaluates: bool,
        precision: str,
        step: int,
        rate: float,
    ) -> None:
        """The final model, ``summary.json`` and ``DONE`` (:func:`trainer.finish.finish`)."""
        s = self.schedule
        record = done_marker.DoneRecord(step, s.epochs, s.steps_per_epoch, s.global_batch)
        finish(self.ctx, self.summaries, strategy, net, figures, evaluates, precision, record,
               rate, self.temp_dir)  # fmt: skip
