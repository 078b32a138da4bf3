"""``make gpu-check``: the trainer on the GPUs of one machine, against plain tf-keras.

On a machine with GPUs, in one run of a few minutes: the trainer on one GPU in fp32, bf16
(where every GPU has compute capability >= 8.0) and fp16, each beside plain tf-keras
``model.fit`` on the same model, data and precision; the trainer on all GPUs (its
MirroredStrategy) where there are several; each run's examples/s and the fraction of the GPU's
matmul peak it reaches. ``--json`` writes it all. Without a GPU it prints one line saying so and
exits 0: nothing to measure. Runs are paired (each trainer run beside its Keras run, one after
the other); ``--rounds`` repeats the pairs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from benchmarks.roofline import TRAIN_TO_FORWARD, BenchmarkError, matmul_peak_gflops
from benchmarks.runs import BenchConfig, keras_run, trainer_run

CONFIG = BenchConfig(examples=65536, epochs=2, batch_size=256, timeout_s=240.0)
"""Large enough to leave the first call behind on a GPU, small enough for 8 minutes."""
MATMUL_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def precisions(capabilities: Sequence[tuple[int, int]]) -> list[str]:
    """The precisions worth measuring on GPUs of these compute capabilities (the trainer's own
    rule: bf16 from 8.0, fp16 from 7.0)."""
    out = ["fp32"]
    if capabilities and all(cc >= (8, 0) for cc in capabilities):
        out.append("bf16")
    if capabilities and all(cc >= (7, 0) for cc in capabilities):
        out.append("fp16")
    return out


def _gpus() -> tuple[list[tuple[int, int]], list[str]]:
    import tensorflow as tf

    devices = tf.config.list_physical_devices("GPU")
    caps, names = [], []
    for gpu in devices:
        details = tf.config.experimental.get_device_details(gpu)
        caps.append(tuple(details.get("compute_capability") or (0, 0)))
        names.append(str(details.get("device_name", gpu.name)))
    return caps, names


def _train_flops_per_example() -> int:
    from benchmarks.roofline import profiled_forward_flops
    from trainer import data, model

    source = data.synthetic(1, CONFIG.seed)
    net = model.build("", source.input_shape, source.num_classes)
    return TRAIN_TO_FORWARD * profiled_forward_flops(net, source.input_shape)


def _one_gpu() -> dict[str, str]:
    """The environment of a run on the first GPU alone (children inherit it)."""
    return {"CUDA_VISIBLE_DEVICES": "0"}


def measure(cfg: BenchConfig, caps: list[tuple[int, int]], rounds: int) -> dict[str, Any]:
    """Every pair on this machine's GPUs; see the module docstring."""
    flops = _train_flops_per_example()
    peaks = {p: matmul_peak_gflops(4096, dtype=MATMUL_DTYPES[p]) for p in precisions(caps)}
    runs: list[dict[str, Any]] = []
    saved = os.environ.get("CUDA_VISIBLE_DEVICES")

    def every_gpu() -> None:
        if saved is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = saved

    try:
        for _ in range(rounds):
            os.environ.update(_one_gpu())
            for prec in precisions(caps):
                trainer = trainer_run(cfg, 1, ["--precision", prec])
                keras = keras_run(cfg, prec)
                runs += [{"what": "trainer", "gpus": 1, "precision": prec, **trainer},
                         {"what": "keras", "gpus": 1, "precision": prec, **keras}]  # fmt: skip
            if len(caps) > 1:
                every_gpu()
                every = trainer_run(cfg, 1, ["--precision", "fp32"])
                runs.append({"what": "trainer", "gpus": len(caps), "precision": "fp32", **every})
    finally:
        every_gpu()
    for run in runs:
        peak = peaks[run["precision"]] * run["gpus"]
        run["peak_fraction"] = round(run["examples_per_sec"] * flops / (peak * 1e9), 4)
    return {"train_flops_per_example": flops, "matmul_peak_gflops": peaks, "runs": runs}


def summary_lines(doc: dict[str, Any]) -> list[str]:
    """The medians, trainer beside Keras, one line per precision and GPU count."""
    lines = []
    keys = sorted({(r["precision"], r["gpus"]) for r in doc["runs"]})
    for prec, gpus in keys:
        rates = {
            what: [r["examples_per_sec"] for r in doc["runs"]
                   if (r["what"], r["precision"], r["gpus"]) == (what, prec, gpus)]
            for what in ("trainer", "keras")
        }  # fmt: skip
        trainer = statistics.median(rates["trainer"])
        line = f"{prec} on {gpus} GPU(s): trainer {trainer:,.0f} examples/s"
        if rates["keras"]:
            keras = statistics.median(rates["keras"])
            line += f", plain tf-keras {keras:,.0f} (ratio {trainer / keras:.3f})"
        lines.append(line)
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu_check", description=__doc__)
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--rounds", type=int, default=2, help="pairs per precision (default 2)")
    args = parser.parse_args(argv)
    caps, names = _gpus()
    doc: dict[str, Any] = {"date": time.strftime("%Y-%m-%d"), "gpus": names,
                           "compute_capabilities": [list(c) for c in caps],
                           "config": asdict(CONFIG)}  # fmt: skip
    if not caps:
        print("gpu-check: no GPU visible to TensorFlow on this machine: nothing to measure")
        doc["skipped"] = "no GPU visible to TensorFlow"
    else:
        print(f"gpu-check: {len(caps)} GPU(s): {', '.join(names)}; measuring {precisions(caps)}")
        try:
            doc.update(measure(CONFIG, caps, args.rounds))
        except BenchmarkError as err:
            print(f"gpu-check: error: {err}", file=sys.stderr)
            return 1
        print("\n".join(summary_lines(doc)))
    if args.json:
        args.json.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
        print(f"gpu-check: wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
