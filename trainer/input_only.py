"""``--input-only``: this worker's input pipeline alone, at the rate it can deliver batches.

It builds exactly the pipeline training would: the same data (:func:`trainer.task.sources`),
the same :class:`~trainer.controller.Schedule` (global batch = ``--batch-size`` x replicas per
worker x workers, with the replicas :func:`trainer.placement.replicas_per_worker` says the
strategy would place), this worker's shard of :func:`trainer.data.worker_dataset` with one
per-replica batch per local replica and step. It pulls ``--steps-per-call`` steps' batches per
``tf.function`` call, as the training loop does, touching each batch so nothing is optimised
away. No strategy, model, collective or checkpoint: nothing is written and ``DONE`` is not
needed. If this rate is not well above the training rate, the run is input-bound.
"""

from __future__ import annotations

import time
from typing import Any

from trainer import contract, placement, runtime
from trainer.config import Config
from trainer.controller import Schedule, plan
from trainer.logs import Log


def schedule(config: Config, spec: contract.ClusterSpec, num_examples: int, gpus: int) -> Schedule:
    """The schedule training would run with ``gpus`` local GPUs per worker."""
    per_worker = placement.replicas_per_worker(config, spec.num_workers, gpus)
    return plan(config, num_examples, per_worker, spec.num_workers)


def run(config: Config, spec: contract.ClusterSpec, root: str, log: Log) -> dict[str, Any]:
    """Iterate the run's steps (first call excluded from the rate); logs ``input_only``."""
    import tensorflow as tf

    from trainer import data
    from trainer.task import sources

    runtime.configure(config)
    source, _ = sources(config, root, spec.is_chief, held_out=False)
    gpus = len(tf.config.list_logical_devices("GPU"))
    s = schedule(config, spec, source.num_examples, gpus)
    total = s.total_steps
    dataset = data.worker_dataset(
        source,
        num_workers=spec.num_workers,
        worker_index=spec.task_index,
        batch_size=config.batch_size,
        steps_per_epoch=s.steps_per_epoch,
        epochs=config.epochs,
        start_step=0,
        seed=config.seed,
        replicas_per_worker=s.replicas_per_worker,
    )
    iterator = iter(dataset)

    @tf.function
    def pull(batches: tf.Tensor) -> tf.Tensor:
        acc = tf.constant(0.0)
        for _ in tf.range(batches):
            x, y = next(iterator)
            # One example of each batch is read, so the batch must really be produced.
            acc += tf.reduce_sum(tf.cast(x[:1], tf.float32)) + tf.cast(y[0], tf.float32)
        return acc

    step, t_first, after_first = 0, 0.0, 0
    t0 = time.perf_counter()
    while step < total:
        k = min(config.steps_per_call, total - step)
        pull(tf.constant(k * s.replicas_per_worker, tf.int64)).numpy()
        step += k
        if t_first:
            after_first += k
        else:
            t_first = time.perf_counter()
    t_end = time.perf_counter()
    # The first call (tracing, the pipeline's start) is excluded unless it was the only one.
    steady = after_first > 0
    counted, elapsed = (after_first, t_end - t_first) if steady else (step, t_end - t0)
    worker_batch = config.batch_size * s.replicas_per_worker  # this worker's share of a step
    rate = counted * worker_batch / max(elapsed, 1e-9)
    result = {
        "steps": step,
        "batch_size": config.batch_size,
        "replicas_per_worker": s.replicas_per_worker,
        "global_batch": s.global_batch,
        "steps_per_epoch": s.steps_per_epoch,
        "examples_per_sec": round(rate, 1),  # this worker's
        "first_call_included": not steady,
        "first_call_s": round(t_first - t0, 3),
        "dataset": source.name,
    }
    log.event("input_only", **result)
    return result
