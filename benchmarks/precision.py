"""``python -m benchmarks.precision``: bf16 against fp32 on this CPU, per model shape.

What ``--precision auto`` follows (``trainer.precision``): on a CPU it picks bf16 only where
bf16 is known faster across models. Each pair runs the trainer (1 worker) at fp32 and at bf16
back to back, in an order reversed every other pair, on the same synthetic data; a row is the
median bf16/fp32 examples/s ratio of its pairs with the 95% interval (``benchmarks.stats``).
Models: the built-in CNN, and two dense networks (:func:`dense_small`, :func:`dense_large`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from benchmarks import runs  # noqa: E402
from benchmarks.stats import paired_ratio  # noqa: E402

MODELS = {
    "cnn": [],
    "dense-small": ["--model", "benchmarks.precision:dense_small"],
    "dense-large": ["--model", "benchmarks.precision:dense_large"],
}
"""Model name -> trainer flags."""
PRECISIONS = ("fp32", "bf16")


def dense_small(input_shape: Sequence[int], num_classes: int) -> Any:
    """Two 256-wide hidden layers (about 0.27M parameters on 28x28 inputs)."""
    return _dense(input_shape, num_classes, (256, 256), "dense_small")


def dense_large(input_shape: Sequence[int], num_classes: int) -> Any:
    """Three 2048-wide hidden layers (about 10M parameters on 28x28 inputs)."""
    return _dense(input_shape, num_classes, (2048, 2048, 2048), "dense_large")


def _dense(input_shape: Sequence[int], num_classes: int, widths: Sequence[int], name: str) -> Any:
    import tf_keras as k

    layers = [k.layers.InputLayer(input_shape=input_shape), k.layers.Flatten()]
    layers += [k.layers.Dense(w, activation="relu") for w in widths]
    return k.Sequential([*layers, k.layers.Dense(num_classes)], name=name)


def run_pairs(cfg: runs.BenchConfig, models: Sequence[str]) -> dict[str, Any]:
    """Every model's pairs; each run's examples/s and the bf16/fp32 row per model."""
    out: dict[str, Any] = {"runs": [], "rows": {}}
    for model in models:
        rates: dict[str, list[float]] = {p: [] for p in PRECISIONS}
        for i in range(cfg.pairs):
            order = PRECISIONS if i % 2 == 0 else PRECISIONS[::-1]
            for prec in order:
                flags = [*MODELS[model], "--precision", prec]
                if prec != "fp32":
                    flags.append("--allow-emulated-precision")
                run = runs.trainer_run(cfg, 1, flags)
                rates[prec].append(run["examples_per_sec"])
                out["runs"].append({"model": model, "pair": i, **run})
                print(f"[precision] {model} pair {i + 1}/{cfg.pairs} {prec}: "
                      f"{run['examples_per_sec']:.0f} examples/s", flush=True)  # fmt: skip
        ratio = paired_ratio(rates["bf16"], rates["fp32"])
        out["rows"][model] = {
            "bf16_over_fp32_median": round(ratio.median, 3),
            "interval": None if ratio.low is None else [round(ratio.low, 3), round(ratio.high, 3)],
            "coverage": ratio.coverage,
            "ratios": [round(r, 3) for r in ratio.ratios],
            "fp32_examples_per_sec": rates["fp32"],
            "bf16_examples_per_sec": rates["bf16"],
        }
    return out


def machine() -> dict[str, Any]:
    from trainer import precision

    hw = precision.detect()
    auto = precision.resolve("auto", hw)
    return {
        "cpu": platform.processor() or platform.machine(),
        "cpu_bf16_flags": sorted(f for f in hw.cpu_flags if "bf16" in f or "amx" in f),
        "cores": os.cpu_count(),
        "auto_precision": auto.precision,
        "auto_reason": auto.reason,
        "load_average": os.getloadavg(),
    }


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.precision", description=__doc__)
    p.add_argument("--pairs", type=int, default=3, help="pairs per model (default 3)")
    p.add_argument("--models", nargs="+", choices=sorted(MODELS), default=list(MODELS))
    p.add_argument("--json", type=Path, help="write every run and row to this file")
    args = p.parse_args(argv)
    cfg = replace(runs.BenchConfig(), examples=8192, epochs=2, pairs=args.pairs)
    t0 = time.time()
    result = {"machine": machine(), "config": {"examples": cfg.examples, "epochs": cfg.epochs,
              "batch_size": cfg.batch_size, "pairs": cfg.pairs}}  # fmt: skip
    try:
        result |= run_pairs(cfg, args.models)
    except runs.BenchmarkError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    result["wall_s"] = round(time.time() - t0, 1)
    result["machine"]["load_average_end"] = os.getloadavg()
    for model, row in result["rows"].items():
        print(f"[precision] {model}: bf16/fp32 median {row['bf16_over_fp32_median']}, "
              f"interval {row['interval']} ({row['ratios']})")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
