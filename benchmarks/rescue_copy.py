"""``python -m benchmarks.rescue_copy``: what the rescue copy (:mod:`trainer.rescue`) costs a
training call, side by side in one process.

The built-in model and its Adam optimizer on the synthetic data, under
MultiWorkerMirroredStrategy with one worker (the variables are the mirrored ones a multi-worker
run copies): ``--repeats`` times one training call of ``--steps-per-call`` steps, then one
:meth:`~trainer.rescue.Rescue.snapshot`, each timed; prints the medians, the 5th-95th
percentiles and the copy's share of a call. Runs no cluster and writes nothing.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _quantiles(values: list[float]) -> tuple[float, float, float]:
    cuts = statistics.quantiles(values, n=20)
    return cuts[0], statistics.median(values), cuts[-1]


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.rescue_copy", description=__doc__)
    p.add_argument("--repeats", type=int, default=200, help="timed calls (default 200)")
    p.add_argument("--steps-per-call", type=int, default=4, help="steps per call (default 4)")
    p.add_argument("--batch-size", type=int, default=64, help="examples per step (default 64)")
    args = p.parse_args(argv)

    import tensorflow as tf
    import tf_keras

    from trainer import data, model
    from trainer.checkpoints import Progress
    from trainer.logs import Log
    from trainer.rescue import Rescue

    source = data.load("synthetic", 1, 4096, tempfile.mkdtemp(), True)
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        net = model.build("", source.input_shape, source.num_classes)
        optimizer = tf_keras.optimizers.Adam(1e-3)
        optimizer.build(net.trainable_variables)
        step = tf.Variable(0, dtype=tf.int64, trainable=False)
    checkpoint = tf.train.Checkpoint(model=net, optimizer=optimizer, step=step)
    rescue = Rescue(checkpoint, step, tempfile.mkdtemp(), 0, 0, Log(0, io.StringIO()),
                    Progress(args.batch_size))  # fmt: skip
    loss_fn = tf_keras.losses.SparseCategoricalCrossentropy(
        from_logits=True, reduction=tf_keras.losses.Reduction.SUM
    )
    x = tf.random.uniform((args.batch_size, *source.input_shape))
    y = tf.random.uniform((args.batch_size,), maxval=max(source.num_classes, 2), dtype=tf.int32)

    def step_fn() -> None:
        with tf.GradientTape() as tape:
            loss = loss_fn(y, net(x, training=True))
        grads = tape.gradient(loss, net.trainable_variables)
        optimizer.apply_gradients(zip(grads, net.trainable_variables, strict=True))

    @tf.function
    def call(steps: tf.Tensor) -> None:
        for _ in tf.range(steps):
            strategy.run(step_fn)

    k = tf.constant(args.steps_per_call, tf.int64)
    call(k)  # tracing
    t0 = time.perf_counter()
    rescue.snapshot(0)  # tracing the copy
    first = time.perf_counter() - t0
    calls, copies = [], []
    for i in range(args.repeats):
        t0 = time.perf_counter()
        call(k)
        t1 = time.perf_counter()
        rescue.snapshot(i)
        t2 = time.perf_counter()
        calls.append(t1 - t0)
        copies.append(t2 - t1)
    shares = [c / a for a, c in zip(calls, copies, strict=True)]
    weights = sum(int(v.shape.num_elements() or 0) for v in rescue.variables)
    print(f"{len(rescue.variables)} variables, {weights:,} values copied per snapshot; "
          f"the first snapshot (tracing) {first * 1e3:.1f} ms")  # fmt: skip
    for name, values, unit in (("call", calls, 1e3), ("copy", copies, 1e3), ("share", shares, 100)):
        lo, mid, hi = _quantiles(values)
        suffix = "%" if name == "share" else " ms"
        print(f"{name}: median {mid * unit:.2f}{suffix} (5-95th percentile "
              f"{lo * unit:.2f}-{hi * unit:.2f}{suffix}) over {len(values)}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
