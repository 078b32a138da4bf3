"""``--input-only``: this worker's input pipeline alone, at the rate it can deliver batches.

It builds exactly the pipeline training would (:func:`trainer.data.worker_dataset`, this
worker's shard, ``--batch-size`` per replica, one replica: the pod's CPU or first device) and
pulls ``--steps-per-call`` batches per ``tf.function`` call, as the training loop does, touching
each batch so nothing is optimised away. No strategy, model, collective or checkpoint: nothing
is written and ``DONE`` is not needed. If this rate is not well above the training rate, the
run is input-bound.
"""

from __future__ import annotations

import time
from typing import Any

from trainer import contract, runtime
from trainer.config import Config
from trainer.errors import DataError
from trainer.logs import Log


def run(config: Config, spec: contract.ClusterSpec, root: str, log: Log) -> dict[str, Any]:
    """Iterate the run's steps (first call excluded from the rate); logs ``input_only``."""
    import tensorflow as tf

    from trainer import data

    runtime.configure(config)
    source = data.load(
        config.dataset,
        config.seed,
        config.synthetic_examples,
        root,
        spec.is_chief,
        count=config.steps_per_epoch == 0,
    )
    if config.eval_split:
        source, _ = data.split(source, config.eval_split, config.seed)
    global_batch = config.batch_size * spec.num_workers
    spe = config.steps_per_epoch or source.num_examples // global_batch
    if spe < 1:
        raise DataError(
            f"--dataset {config.dataset}: {source.num_examples} examples give no full global "
            f"batch of {global_batch} (--batch-size {config.batch_size} x {spec.num_workers})"
        )
    total = spe * config.epochs
    dataset = data.worker_dataset(
        source,
        num_workers=spec.num_workers,
        worker_index=spec.task_index,
        batch_size=config.batch_size,
        steps_per_epoch=spe,
        epochs=config.epochs,
        start_step=0,
        seed=config.seed,
    )
    iterator = iter(dataset)

    @tf.function
    def pull(steps: tf.Tensor) -> tf.Tensor:
        acc = tf.constant(0.0)
        for _ in tf.range(steps):
            x, y = next(iterator)
            # One example of each batch is read, so the batch must really be produced.
            acc += tf.reduce_sum(tf.cast(x[:1], tf.float32)) + tf.cast(y[0], tf.float32)
        return acc

    step, t_first, after_first = 0, 0.0, 0
    t0 = time.perf_counter()
    while step < total:
        k = min(config.steps_per_call, total - step)
        pull(tf.constant(k, tf.int64)).numpy()
        step += k
        if t_first:
            after_first += k
        else:
            t_first = time.perf_counter()
    t_end = time.perf_counter()
    # The first call (tracing, the pipeline's start) is excluded unless it was the only one.
    steady = after_first > 0
    counted, elapsed = (after_first, t_end - t_first) if steady else (step, t_end - t0)
    rate = counted * config.batch_size / max(elapsed, 1e-9)
    result = {
        "steps": step,
        "batch_size": config.batch_size,
        "examples_per_sec": round(rate, 1),  # this worker's
        "first_call_included": not steady,
        "first_call_s": round(t_first - t0, 3),
        "dataset": source.name,
    }
    log.event("input_only", **result)
    return result
