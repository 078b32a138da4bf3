"""``python -m benchmarks.checkpoint_store``: one checkpoint saved and restored on a gs://
bucket and on a local directory, side by side.

The built-in model with its Adam optimizer (the checkpoint the trainer writes: model, optimizer
slots, step, global batch), saved by the trainer's own manager (:func:`trainer.checkpoints.manager`,
a synchronous ``save``: data, index and the state file) and restored by its own
:func:`trainer.restore.restore` (state file, then the newest checkpoint). ``--repeats`` pairs,
the two stores back to back in alternating order; each figure is the median with the
order-statistic interval of :mod:`benchmarks.stats`, and the gs:// / local ratio the median of
the per-pair ratios.

The bucket is the stand-in of :mod:`tools.object_store` (fake-gcs-server over TLS on loopback,
root and ``make tools`` needed): the figures are TensorFlow's GCS client path (HTTPS, resumable
uploads staged through a local temporary file, reads by range) against a server on the same
machine, not Google's network or servers (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import io
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

PROG = "python -m benchmarks.checkpoint_store"
BUCKET = "tfd-bench"
LEVEL = 0.95


def median_interval(values: Sequence[float]) -> dict[str, Any]:
    """Median and its distribution-free interval at :data:`LEVEL` (none below 6 values)."""
    from benchmarks.stats import median_interval as interval

    low, high, coverage = interval(values, LEVEL) or (None, None, None)
    return {"median": statistics.median(values), "low": low, "high": high,
            "coverage": coverage, "n": len(values)}  # fmt: skip


def measure(roots: dict[str, str], repeats: int, store_dir: Path) -> dict[str, Any]:
    """``repeats`` pairs of (save, restore) on each root: seconds per operation, and the HTTP
    requests of each gs:// one (as the stand-in's front counted them)."""
    import tensorflow as tf
    import tf_keras

    from tools.object_store import requests_so_far
    from trainer import checkpoints, data, model, restore
    from trainer.cli import Config
    from trainer.logs import Log
    from trainer.metrics import Metrics

    source = data.load("synthetic", 1, 4096, tempfile.mkdtemp(), True)
    net = model.build("", source.input_shape, source.num_classes)
    optimizer = tf_keras.optimizers.Adam(1e-3)
    optimizer.build(net.trainable_variables)
    step = tf.Variable(0, dtype=tf.int64, trainable=False)
    batch = tf.Variable(64, dtype=tf.int64, trainable=False)
    tracked = {"model": net, "optimizer": optimizer, "step": step}
    ckpt = tf.train.Checkpoint(**tracked, **{checkpoints.GLOBAL_BATCH_KEY: batch})
    managers = {name: checkpoints.manager(ckpt, root, True, 0)[0] for name, root in roots.items()}
    times: dict[str, dict[str, list[float]]] = {n: {"save": [], "restore": []} for n in roots}
    requests: dict[str, list[int]] = {"save": [], "restore": []}
    sizes: dict[str, int] = {}
    for i in range(repeats + 1):  # the first pair warms up (tracing, connections): not kept
        order = list(roots) if i % 2 == 0 else list(reversed(roots))
        for name in order:
            step.assign(i + 1)
            n0, t0 = requests_so_far(store_dir), time.perf_counter()
            path = managers[name].save(checkpoint_number=i + 1)
            saved = time.perf_counter() - t0
            n1 = requests_so_far(store_dir)
            step.assign(0)
            t0 = time.perf_counter()
            got, _ = restore.restore(roots[name], tracked, step, batch, 10**9, Config(),
                                     Log(0, io.StringIO()), Metrics())  # fmt: skip
            restored = time.perf_counter() - t0
            n2 = requests_so_far(store_dir)
            assert got == i + 1, f"{name}: restored step {got}, saved {i + 1}"
            if i:
                times[name]["save"].append(saved)
                times[name]["restore"].append(restored)
                if name == "gcs":
                    requests["save"].append(n1 - n0)
                    requests["restore"].append(n2 - n1)
            sizes[name] = sum(tf.io.gfile.stat(p).length for p in tf.io.gfile.glob(f"{path}.*"))
    return {"times": times, "bytes": sizes, "requests": requests}


def figures(raw: dict[str, Any]) -> dict[str, Any]:
    from benchmarks.stats import paired_ratio

    times = raw["times"]
    out: dict[str, Any] = {"checkpoint_bytes": raw["bytes"]}
    out["gcs_requests"] = {op: statistics.median(n) for op, n in raw["requests"].items()}
    for op in ("save", "restore"):
        ratio = paired_ratio(times["gcs"][op], times["local"][op], LEVEL)
        out[op] = {
            "local_s": median_interval(times["local"][op]),
            "gcs_s": median_interval(times["gcs"][op]),
            "gcs_over_local": {
                "median": ratio.median,
                "low": ratio.low,
                "high": ratio.high,
                "coverage": ratio.coverage,
                "n": ratio.n,
            },  # fmt: skip
        }
    return out


def _fmt(f: dict[str, Any], scale: float = 1000.0, unit: str = " ms") -> str:
    if f["low"] is None:
        return f"{f['median'] * scale:.1f}{unit} (n={f['n']}, no interval)"
    return (f"{f['median'] * scale:.1f}{unit} [{f['low'] * scale:.1f}, {f['high'] * scale:.1f}] "
            f"({f['coverage']:.1%}, n={f['n']})")  # fmt: skip


def report(doc: dict[str, Any]) -> str:
    size = doc["figures"]["checkpoint_bytes"]["local"]
    requests = doc["figures"]["gcs_requests"]
    lines = [f"checkpoint: {size / 1e6:.1f} MB (the built-in model with Adam's slots); "
             f"gs:// HTTP requests per save {requests['save']:g}, per restore "
             f"{requests['restore']:g} (median)"]  # fmt: skip
    for op in ("save", "restore"):
        f = doc["figures"][op]
        lines += [f"{op} local: {_fmt(f['local_s'])}", f"{op} gs://: {_fmt(f['gcs_s'])}",
                  f"{op} gs:// / local: {_fmt(f['gcs_over_local'], 1.0, 'x')}"]  # fmt: skip
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=20, help="timed pairs (default 20)")
    p.add_argument("--out", help="also write the JSON document here")
    p.add_argument("--inside", help=argparse.SUPPRESS)  # the measuring process, in the namespace
    args = p.parse_args(argv)
    if args.repeats < 1:
        p.error(f"--repeats: must be at least 1; got {args.repeats}")
    if args.inside:
        roots = {"local": str(Path(args.inside) / "local"), "gcs": f"gs://{BUCKET}/bench"}
        print(json.dumps(measure(roots, args.repeats, Path(args.inside))))
        return 0

    from tools.object_store import ObjectStore

    work = Path(tempfile.mkdtemp(prefix="tfd-bench-store-"))
    store = ObjectStore(work, BUCKET)
    try:
        store.start()
    except RuntimeError as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return 1
    try:
        inner = store.popen([sys.executable, "-m", "benchmarks.checkpoint_store", "--repeats",
                             str(args.repeats), "--inside", str(work)],
                            stdout=subprocess.PIPE)  # fmt: skip
        out, _ = inner.communicate()
    finally:
        store.stop()
    if inner.returncode != 0:
        print(f"{PROG}: error: the measuring process exited {inner.returncode}", file=sys.stderr)
        return 1
    raw = json.loads(out.strip().splitlines()[-1])
    doc = {"benchmark": "checkpoint_store", "repeats": args.repeats, "cpus": os.cpu_count(),
           "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "figures": figures(raw), "raw_s": raw["times"],
           "raw_gcs_requests": raw["requests"]}  # fmt: skip
    print(report(doc))
    if args.out:
        Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
