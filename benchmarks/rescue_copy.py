"""``python -m benchmarks.rescue_copy``: what the rescue copy (:mod:`trainer.rescue`) and the
checkpoint save cost a training call, by model size, side by side in one process per size.

Each size is a stack of dense layers (``2m``, ``50m``, ``200m`` parameters; ``cnn``: the
built-in model) with Adam (its two slots per weight are copied too), under
MultiWorkerMirroredStrategy with one worker (the mirrored variables a multi-worker run copies),
on random data. In a fresh process per size, paired, each after one training call of
``--steps-per-call`` steps:

* ``--repeats`` times :meth:`~trainer.rescue.Rescue.snapshot` (the per-call copy);
* ``--saves`` times an asynchronous save through :class:`trainer.saver.Saver` (the ``stall``:
  the time the loop stands still, its host copy; the write is waited for outside the timing,
  as a checkpoint interval would), then a restore of the rescue written by
  :meth:`~trainer.rescue.Rescue.write` (what the restart after a loss reads).

Each figure is the median of the per-pair ratios to the call before it with its 95%
order-statistic interval (:mod:`benchmarks.stats`), with the copy's host memory (computed and
measured as resident-set growth), ``k`` (:func:`trainer.rescue_plan.smallest_k`: the copy every
``k``-th call keeps it within 1% of the calls' time) and the steps a loss then recomputes (at
most ``k`` calls). Small batches and few steps: on a shared machine the ratios are the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

SIZES = {"2m": (1024, 2), "50m": (2048, 12), "200m": (4096, 12)}
"""Dense stacks: (width, hidden layers); width x width weights a layer."""
CLASSES = 10


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _interval(a: Sequence[float], b: Sequence[float]) -> dict[str, Any]:
    from benchmarks.stats import paired_ratio

    r = paired_ratio(a, b)
    return {"median": r.median, "low": r.low, "high": r.high, "n": r.n}


def _seconds(values: Sequence[float]) -> dict[str, Any]:
    cuts = statistics.quantiles(values, n=20) if len(values) > 1 else [values[0]] * 19
    return {"median": statistics.median(values), "p5": cuts[0], "p95": cuts[-1], "n": len(values)}


def measure(size: str, repeats: int, saves: int, steps: int, batch: int) -> dict[str, Any]:
    """One size's figures (in this process: one MultiWorkerMirroredStrategy each)."""
    import tensorflow as tf
    import tf_keras

    from trainer.checkpoints import Progress
    from trainer.logs import Log
    from trainer.metrics import Metrics
    from trainer.rescue import Rescue, checkpointed_variables
    from trainer.rescue_plan import smallest_k
    from trainer.saver import Saver

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        if size == "cnn":
            from trainer import data, model

            source = data.load("synthetic", 1, 4096, tempfile.mkdtemp(), True)
            shape, classes = source.input_shape, max(source.num_classes, 2)
            net = model.build("", shape, classes)
        else:
            width, depth = SIZES[size]
            shape, classes = (width,), CLASSES
            layers = [tf_keras.layers.Dense(width, activation="relu") for _ in range(depth)]
            net = tf_keras.Sequential([tf_keras.Input(shape), *layers,
                                       tf_keras.layers.Dense(classes)])  # fmt: skip
        optimizer = tf_keras.optimizers.Adam(1e-4)
        optimizer.build(net.trainable_variables)
        step = tf.Variable(0, dtype=tf.int64, trainable=False)
    checkpoint = tf.train.Checkpoint(model=net, optimizer=optimizer, step=step)
    root = tempfile.mkdtemp(prefix="rescue-bench-")
    log = Log(0, open(os.devnull, "w"))  # noqa: SIM115 - the process's lifetime
    loss_fn = tf_keras.losses.SparseCategoricalCrossentropy(
        from_logits=True, reduction=tf_keras.losses.Reduction.SUM
    )
    x = tf.random.uniform((batch, *shape))
    y = tf.random.uniform((batch,), maxval=classes, dtype=tf.int32)

    def step_fn() -> None:
        with tf.GradientTape() as tape:
            loss = loss_fn(y, net(x, training=True)) / batch
        grads = tape.gradient(loss, net.trainable_variables)
        optimizer.apply_gradients(zip(grads, net.trainable_variables, strict=True))

    @tf.function
    def call_fn(n: tf.Tensor) -> None:
        for _ in tf.range(n):
            strategy.run(step_fn)

    n = tf.constant(steps, tf.int64)

    def call() -> float:
        t0 = time.perf_counter()
        call_fn(n)
        return time.perf_counter() - t0

    call()  # tracing, and the training's own buffers: in the baseline of the resident set
    rss0 = _rss()
    rescue = Rescue(checkpoint, step, root, 0, 0, log, Progress(batch))
    t0 = time.perf_counter()
    rescue.snapshot(1)  # the first copy (the function was traced at construction)
    first = time.perf_counter() - t0
    call()  # the copies alias the variables until the first update: now they are their own
    rss_copy = _rss() - rss0
    # Pairs: a call after a call, then the copy and the call after it. The copy may cost the
    # next call too (memory it disturbed): (copy + the call after) / the call before - 1.
    calls, copies, afters = [], [], []
    for i in range(repeats):
        calls.append(call())
        t0 = time.perf_counter()
        rescue.snapshot(i + 2)
        copies.append(time.perf_counter() - t0)
        afters.append(call())

    manager = tf.train.CheckpointManager(checkpoint, os.path.join(root, "periodic"), 1)
    saver = Saver(manager, step, "", Metrics(), log, False, asynchronous=True,
                  progress=Progress(batch))  # fmt: skip
    save_calls, stalls, writes, restores = [], [], [], []
    rescue_writes = []
    for j in range(-1, saves):  # -1: the first save and restore set up what the rest reuse
        save_calls.append(call())
        t0 = time.perf_counter()
        saver.save(j + 2)
        stalls.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        saver.wait()
        writes.append(time.perf_counter() - t0)
        rescue.snapshot(1000 + j)
        rescue.start = 0
        t0 = time.perf_counter()
        rescue.write()
        rescue_writes.append(time.perf_counter() - t0)
        path = tf.train.latest_checkpoint(rescue.directory)
        t0 = time.perf_counter()
        checkpoint.restore(path).assert_consumed()
        restores.append(time.perf_counter() - t0)
        if j < 0:
            for kept in (save_calls, stalls, writes, restores, rescue_writes):
                kept.clear()

    variables = checkpointed_variables(checkpoint)
    params = sum(int(v.shape.num_elements() or 0) for v in net.trainable_variables)
    copy_bytes = sum(int(v.shape.num_elements() or 0) * v.dtype.size for v in variables)
    call_s, copy_s = statistics.median(calls), statistics.median(copies)
    k = smallest_k(copy_s, call_s)
    share = _interval(copies, calls)
    with_next = _interval([c + a for c, a in zip(copies, afters, strict=True)], calls)
    with_next.update({x: with_next[x] - 1 if with_next[x] is not None else None
                      for x in ("median", "low", "high")})  # fmt: skip
    return {
        "size": size,
        "parameters": params,
        "variables": len(variables),
        "copy_bytes": copy_bytes,
        "copy_rss_bytes": rss_copy,
        "steps_per_call": steps,
        "batch": batch,
        "first_copy_s": first,
        "call_s": _seconds(calls),
        "copy_s": _seconds(copies),
        "stall_s": _seconds(stalls),
        "write_s": _seconds(writes),
        "rescue_write_s": _seconds(rescue_writes),
        "restore_s": _seconds(restores),
        "copy_share": share,
        "copy_and_next_call_share": with_next,
        "after_copy_call_s": _seconds(afters),
        "stall_share": _interval(stalls, save_calls),
        "restore_share": _interval(restores, save_calls),
        "k": k,
        "copy_share_at_k": copy_s / (k * call_s),
        "steps_recomputed_max": k * steps,
        "steps_recomputed_mean": k * steps / 2,
    }


def _pct(fig: dict[str, Any]) -> str:
    if fig["low"] is None:
        return f"{fig['median']:.1%}"
    return f"{fig['median']:.1%} [{fig['low']:.1%}-{fig['high']:.1%}]"


def table(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The figures as a Markdown table (the one in docs/benchmarks.md)."""
    head = ("| model | parameters | copy bytes (RSS growth) | call ms | copy ms | copy/call | "
            "copy + next call's slowdown, /call | "
            "save stall ms | stall/call | restore ms | restore/call | k | copy/(k x call) | "
            "steps recomputed, at most |")  # fmt: skip
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        lines.append(
            f"| {r['size']} | {r['parameters']:,} | {r['copy_bytes'] / 1e6:,.1f} MB "
            f"({r['copy_rss_bytes'] / 1e6:,.1f} MB) | {r['call_s']['median'] * 1e3:,.1f} | "
            f"{r['copy_s']['median'] * 1e3:,.2f} | {_pct(r['copy_share'])} | "
            f"{_pct(r['copy_and_next_call_share'])} | "
            f"{r['stall_s']['median'] * 1e3:,.1f} | {_pct(r['stall_share'])} | "
            f"{r['restore_s']['median'] * 1e3:,.1f} | {_pct(r['restore_share'])} | {r['k']} | "
            f"{r['copy_share_at_k']:.2%} | {r['steps_recomputed_max']} ({r['k']} calls) |"
        )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.rescue_copy", description=__doc__)
    p.add_argument("--sizes", nargs="+", default=["2m", "50m", "200m"],
                   choices=[*SIZES, "cnn"], help="models (default 2m 50m 200m)")  # fmt: skip
    p.add_argument(
        "--repeats",
        type=int,
        nargs="+",
        default=[30, 10, 8],
        help="paired calls and copies, per size or one for all (default 30 10 8)",
    )
    p.add_argument("--saves", type=int, default=6, help="saves and restores (default 6)")
    p.add_argument("--steps-per-call", type=int, default=2, help="steps per call (default 2)")
    p.add_argument("--batch-size", type=int, default=8, help="examples per step (default 8)")
    p.add_argument("--json", type=Path, help="write the figures here")
    p.add_argument("--one", help=argparse.SUPPRESS)  # a child process: one size, JSON out
    args = p.parse_args(argv)
    if args.one:
        size, repeats = args.one.split(":")
        print(json.dumps(measure(size, int(repeats), args.saves, args.steps_per_call,
                                 args.batch_size)))  # fmt: skip
        return 0
    repeats = args.repeats * len(args.sizes) if len(args.repeats) == 1 else args.repeats
    if len(repeats) != len(args.sizes):
        p.error(f"--repeats: one value or one per size ({len(args.sizes)}); got {repeats}")
    rows = []
    for size, n in zip(args.sizes, repeats, strict=True):
        cmd = [sys.executable, "-m", "benchmarks.rescue_copy", "--one", f"{size}:{n}",
               "--saves", str(args.saves), "--steps-per-call", str(args.steps_per_call),
               "--batch-size", str(args.batch_size)]  # fmt: skip
        t0 = time.time()
        out = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if out.returncode:
            print(f"rescue_copy: {size} failed:\n{out.stderr[-2000:]}", file=sys.stderr)
            return 1
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(f"{size}: {time.time() - t0:.0f} s", file=sys.stderr)
    print("\n".join(table(rows)))
    if args.json:
        doc = {"command": "python -m benchmarks.rescue_copy " + " ".join(argv or sys.argv[1:]),
               "rows": rows}  # fmt: skip
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
        print(f"rescue_copy: wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
