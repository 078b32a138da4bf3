"""The end of a training run: the final model, ``summary.json`` and ``DONE`` (written last, by
the chief), the barrier that keeps every worker until they exist, and the mapping of TensorFlow
errors in the loop to the trainer's error tree."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import shutil
import time
from typing import Any

from trainer import done_marker
from trainer.context import WorkerContext
from trainer.errors import CheckpointError, DataError, PeerLostError, first_line
from trainer.lease import utc
from trainer.storage import join, write_error, write_text
from trainer.summaries import Summaries

MODEL_FILE = "model.keras"
SUMMARY_FILE = "summary.json"


def finish(
    ctx: WorkerContext,
    summaries: Summaries,
    strategy: Any,
    net: Any,
    figures: tuple[Any, Any],
    evaluates: bool,
    precision: str,
    record: done_marker.DoneRecord,
    rate: float,
    temp_dir: str,
) -> None:
    """The final model, ``summary.json`` and ``DONE`` (chief), then a last all-reduce so no
    worker leaves while the chief is still writing. ``figures``: the variables of the last
    epoch's and the last evaluation's (loss, accuracy); ``evaluates``: the run evaluates."""
    import tensorflow as tf

    step = record.final_step
    run_id = ctx.run_id
    last_metrics, last_eval = figures
    loss, acc = (float(v) for v in last_metrics.numpy())
    eval_loss, eval_acc = (float(v) for v in last_eval.numpy())
    evaluated = evaluates and eval_loss >= 0
    digest = weights_digest(net)
    summaries.flush()
    ctx.log.event(
        "trained",
        step=step,
        loss=loss,
        accuracy=acc,
        examples_per_sec=round(rate, 1),
        weights_sha256=digest,
    )
    if ctx.is_chief:
        if ctx.guard is not None:  # another chief took the run over: write nothing more
            ctx.guard.verify()
        model_path = join(ctx.root, MODEL_FILE)
        try:
            net.save(model_path)
        except (tf.errors.OpError, OSError) as err:
            raise write_error(err, model_path, "the final model") from None
        except ValueError as err:  # a model Keras cannot serialise
            raise CheckpointError(
                f"{model_path}: cannot save the final model: {first_line(err)}"
            ) from None
        summary = {
            "run_id": run_id,
            "workers": ctx.spec.num_workers,
            "final_step": step,
            "loss": loss,
            "accuracy": acc,
            "examples_per_sec": rate,
            "eval_loss": eval_loss if evaluated else None,
            "eval_accuracy": eval_acc if evaluated else None,
            "replicas": strategy.num_replicas_in_sync,
            "num_classes": int(net.output_shape[-1]),
            "weights_sha256": digest,
            "model": model_path,
            "precision": precision,
            "jit": ctx.config.jit,
            "epochs": record.epochs,
            "steps_per_epoch": record.steps_per_epoch,
            "global_batch": record.global_batch,
        }
        write_text(join(ctx.root, SUMMARY_FILE), summary_text(summary), SUMMARY_FILE)
        done = dataclasses.replace(record, run_id=run_id, finished_utc=utc(time.time()))
        done_marker.write_done(ctx.root, done)
    if temp_dir:
        shutil.rmtree(temp_dir, ignore_errors=True)
    # Nobody leaves before the chief has written DONE: a worker that exits early would look
    # like a dead peer to the coordination service while the chief is still saving.
    try:
        barrier(strategy)
    except tf.errors.OpError as err:
        raise classify(err, ctx.spec.num_workers) from None
    ctx.log.event("done", step=step, checkpoint_dir=ctx.root)


def summary_text(summary: dict[str, Any]) -> str:
    """``summary.json``'s text: strict JSON, whatever the figures. A diverged run's NaN or
    infinite loss is written as ``null`` (Python's ``NaN``/``Infinity`` tokens are no JSON and
    break other readers); ``allow_nan=False`` makes any other non-finite value an error here
    instead of an unreadable file."""
    finite = {
        k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in summary.items()
    }
    return json.dumps(finite, allow_nan=False) + "\n"


def barrier(strategy: Any) -> None:
    """One all-reduce every worker must reach."""
    import tensorflow as tf

    @tf.function
    def call() -> Any:
        def fn() -> Any:
            ctx = tf.distribute.get_replica_context()
            return ctx.all_reduce(tf.distribute.ReduceOp.SUM, tf.ones([]))

        return strategy.run(fn)

    call()


def weights_digest(net: Any) -> str:
    """SHA-256 of all weights in order: equal on every worker iff the replicas agree."""
    h = hashlib.sha256()
    for w in net.get_weights():
        h.update(w.tobytes())
    return h.hexdigest()


def classify(err: Any, num_workers: int) -> Exception:
    """Map a TensorFlow runtime error in the loop to the trainer's error tree; the line keeps
    TensorFlow's cause (:func:`~trainer.errors.first_line`: for a lost peer, its task
    and why, e.g. ``stopped sending heartbeats``) or names a malformed TFRecord's file and
    feature (:func:`trainer.tfrecord.bad_record`)."""
    import tensorflow as tf

    from trainer.tfrecord import bad_record

    peer_errors = (
        tf.errors.UnavailableError,
        tf.errors.DeadlineExceededError,
        tf.errors.CancelledError,
        tf.errors.AbortedError,
    )
    if num_workers > 1 and isinstance(err, (*peer_errors, tf.errors.InternalError)):
        return PeerLostError(f"a peer is gone or a collective timed out: {first_line(err)}")
    if isinstance(err, tf.errors.InvalidArgumentError | tf.errors.DataLossError):
        return DataError(bad_record(err) or f"training data: {first_line(err)}")
    if isinstance(err, tf.errors.OutOfRangeError):
        # The pipelines are sized to the run: running out is a bug or a dataset that shrank
        # while training; restarting from the checkpoint would only run out again.
        return DataError(f"training data ran out before the last step: {first_line(err)}")
    return err
