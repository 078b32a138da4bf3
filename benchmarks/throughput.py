"""``python -m benchmarks.throughput`` (``make bench``): paired throughput comparisons.

Each round runs every configuration once, each in a fresh process, in an order that is
reversed every other round; a row compares two configurations of the same round, so every
ratio comes from a pair run back to back under the same load. A row's figure is the median of
its per-pair ratios with a 95% order-statistic interval (:mod:`benchmarks.stats`).

Rows: the trainer (1 worker, default strategy) over plain tf-keras ``fit`` at fp32 and at bf16;
the trainer under MultiWorkerMirroredStrategy with 1 worker over the default strategy; the
trainer at bf16 over fp32 (with each one's final accuracy); XLA (``--jit``) over no XLA; and
2 workers over 1 on the same cores (contention, not scaling). Also: the fp32 and bf16 matmul
peaks and the model's FLOPs per example (the roofline), the input pipeline alone
(``--input-only``), and the dead-peer latency. One JSON holds every run (wall time, load).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from benchmarks import runs  # noqa: E402
from benchmarks.roofline import (  # noqa: E402
    TRAIN_TO_FORWARD,
    BenchmarkError,
    analytic_forward_flops,
    matmul_peak_gflops,
    profiled_forward_flops,
)
from benchmarks.runs import QUICK, BenchConfig  # noqa: E402
from benchmarks.stats import StatsError, paired_ratio  # noqa: E402
from trainer.errors import EXIT_PEER_LOST  # noqa: E402

TARGET_OVERHEAD_MEDIAN = 0.95
TARGET_OVERHEAD_LOW = 0.90
"""Trainer / plain Keras: median ratio at least 0.95 and the interval's lower end above 0.90."""
TARGET_BF16_SPEEDUP = 1.6
TARGET_ACCURACY_DELTA = 0.01
"""bf16 / fp32 trainer: median ratio at least 1.6 with final accuracies within 0.01."""
TARGET_DEAD_PEER_S = 5.0
"""Seconds from ``kill -9`` of one worker until every survivor has exited, at most."""


@dataclass(frozen=True)
class Variant:
    """One configuration: a kind of run and its flags."""

    name: str
    kind: str
    """``keras`` (plain fit), ``trainer`` (``trainer.local``)."""
    precision: str = "fp32"
    workers: int = 1
    flags: tuple[str, ...] = ()


VARIANTS = {
    v.name: v
    for v in (
        Variant("keras-fp32", "keras"),
        Variant("trainer-fp32", "trainer"),
        Variant("trainer-mwms", "trainer", flags=("--strategy", "multi-worker")),
        Variant("trainer-jit", "trainer", flags=("--jit",)),
        Variant("trainer-2w", "trainer", workers=2),
        Variant("trainer-bf16", "trainer", precision="bf16"),
        Variant("keras-bf16", "keras", precision="bf16"),
    )
}
"""In round order: each row's two configurations run next to each other where possible."""
EXTRA = ("trainer-jit", "trainer-2w")


@dataclass(frozen=True)
class Row:
    """A paired comparison: ``numerator`` / ``denominator`` examples/s within each round."""

    key: str
    title: str
    numerator: str
    denominator: str
    target: str = ""


ROWS = (
    Row(
        "trainer_over_keras_fp32",
        "trainer 1 worker / plain tf-keras, fp32",
        "trainer-fp32",
        "keras-fp32",
        f"median >= {TARGET_OVERHEAD_MEDIAN}, interval low > {TARGET_OVERHEAD_LOW}",
    ),
    Row(
        "trainer_over_keras_bf16",
        "trainer 1 worker / plain tf-keras, bf16",
        "trainer-bf16",
        "keras-bf16",
        f"median >= {TARGET_OVERHEAD_MEDIAN}, interval low > {TARGET_OVERHEAD_LOW}",
    ),
    Row(
        "bf16_over_fp32",
        "trainer bf16 / fp32",
        "trainer-bf16",
        "trainer-fp32",
        f"median >= {TARGET_BF16_SPEEDUP}, accuracies within {TARGET_ACCURACY_DELTA}",
    ),
    Row(
        "mwms_over_default",
        "trainer 1 worker: MultiWorkerMirrored / default strategy",
        "trainer-mwms",
        "trainer-fp32",
    ),
    Row("jit_over_nojit", "trainer 1 worker: --jit (XLA) / without", "trainer-jit", "trainer-fp32"),
    Row(
        "two_over_one_worker",
        "trainer 2 workers / 1 worker on the same 2 cores (contention, not scaling)",
        "trainer-2w",
        "trainer-fp32",
    ),
)


def round_order(index: int, names: Sequence[str]) -> list[str]:
    """The configurations of round ``index``: as given in even rounds, reversed in odd ones,
    so neither side of a pair always runs first."""
    return list(names) if index % 2 == 0 else list(reversed(names))


def plan(cfg: BenchConfig) -> list[list[str]]:
    """Every round's configurations in run order (``--jit`` and 2 workers only in the first
    ``extra_pairs`` rounds)."""
    rounds = []
    for i in range(cfg.pairs):
        names = [n for n in VARIANTS if n not in EXTRA or i < cfg.extra_pairs]
        rounds.append(round_order(i, names))
    return rounds


def row_figures(row: Row, results: Sequence[dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """A row from the rounds' results: the rounds where both sides produced a figure."""
    pairs = [
        (r[row.numerator], r[row.denominator])
        for r in results
        if row.numerator in r and row.denominator in r
    ]
    out: dict[str, Any] = {**asdict(row), "pairs": len(pairs)}
    if not pairs:
        return out
    try:
        stat = paired_ratio(
            [a["examples_per_sec"] for a, _ in pairs], [b["examples_per_sec"] for _, b in pairs]
        )
    except StatsError as err:
        return {**out, "error": str(err)}
    out.update(
        median=round(stat.median, 4),
        low=None if stat.low is None else round(stat.low, 4),
        high=None if stat.high is None else round(stat.high, 4),
        coverage=None if stat.coverage is None else round(stat.coverage, 4),
        ratios=[round(r, 4) for r in stat.ratios],
    )
    for side, name in (("numerator", row.numerator), ("denominator", row.denominator)):
        runs_ = [r[name] for r in results if name in r]
        out[f"{side}_median_examples_per_sec"] = round(
            statistics.median(r["examples_per_sec"] for r in runs_), 1
        )
        accs = [r["accuracy"] for r in runs_ if r.get("accuracy") is not None]
        if accs:
            out[f"{side}_median_accuracy"] = round(statistics.median(accs), 4)
    return out


@dataclass(frozen=True)
class Verdict:
    """One target, its measured value and whether it is met."""

    name: str
    target: str
    measured: str
    met: bool | None
    """``None``: not measured (the runs producing it failed, or too few pairs)."""

    @property
    def label(self) -> str:
        return {True: "PASS", False: "MISS", None: "N/A"}[self.met]


def _interval(row: dict[str, Any]) -> str:
    if row.get("low") is None:
        return "no 95% interval (fewer than 6 pairs)"
    return f"95% interval [{row['low']:.3f}, {row['high']:.3f}]"


def verdicts(figures: dict[str, Any]) -> list[Verdict]:
    """Targets judged from the figures ``run`` builds."""
    rows = {r["key"]: r for r in figures.get("rows", [])}
    out = []
    for key in ("trainer_over_keras_fp32", "trainer_over_keras_bf16"):
        row = rows.get(key, {})
        med, low = row.get("median"), row.get("low")
        met = (
            None
            if med is None or low is None
            else (med >= TARGET_OVERHEAD_MEDIAN and low > TARGET_OVERHEAD_LOW)
        )
        measured = "n/a" if med is None else f"median {med:.3f}, {_interval(row)}"
        out.append(Verdict(row.get("title", key), row.get("target", ""), measured, met))
    row = rows.get("bf16_over_fp32", {})
    med = row.get("median")
    acc_a, acc_b = row.get("numerator_median_accuracy"), row.get("denominator_median_accuracy")
    if med is None or acc_a is None or acc_b is None:
        out.append(Verdict(row.get("title", "bf16 / fp32"), row.get("target", ""), "n/a", None))
    else:
        delta = abs(acc_a - acc_b)
        out.append(
            Verdict(
                row["title"],
                row["target"],
                f"median {med:.3f}, {_interval(row)}; accuracy bf16 {acc_a:.4f} vs fp32 "
                f"{acc_b:.4f}",
                med >= TARGET_BF16_SPEEDUP and delta <= TARGET_ACCURACY_DELTA,
            )
        )
    for run_ in figures.get("dead_peer", []):
        if run_.get("signal", "SIGKILL") != "SIGKILL":
            continue  # a frozen peer has no target of its own: it is reported, not judged
        latency = run_.get("all_exited_s")
        codes = run_.get("survivor_exit_codes", [])
        ok_codes = bool(codes) and all(c == EXIT_PEER_LOST for c in codes)
        out.append(
            Verdict(
                f"dead peer (kill -9 worker {run_['victim']} of {run_['workers']})",
                f"all survivors out <= {TARGET_DEAD_PEER_S:.0f} s with exit {EXIT_PEER_LOST}",
                "n/a" if latency is None else f"{latency:.2f} s, exit codes {codes}",
                None if latency is None else latency <= TARGET_DEAD_PEER_S and ok_codes,
            )
        )
    return out


# --- measurements ----------------------------------------------------------------------------
def roofline_figures(cfg: BenchConfig) -> dict[str, Any]:
    """fp32 and bf16 matmul peaks, the default CNN's FLOPs per example, the rooflines."""
    from trainer import data, model

    source = data.synthetic(1, cfg.seed)
    net = model.build("", source.input_shape, source.num_classes)
    profiled = profiled_forward_flops(net, source.input_shape)
    analytic = analytic_forward_flops(net)
    train_flops = TRAIN_TO_FORWARD * profiled
    out: dict[str, Any] = {
        "matmul_n": cfg.matmul_n,
        "forward_flops_profiled": profiled,
        "forward_flops_analytic": analytic,
        "train_flops_per_example": train_flops,
    }
    for name, dtype in (("fp32", "float32"), ("bf16", "bfloat16")):
        peak = matmul_peak_gflops(cfg.matmul_n, repeats=cfg.matmul_repeats, dtype=dtype)
        out[f"matmul_peak_gflops_{name}"] = round(peak, 1)
        out[f"roofline_examples_per_sec_{name}"] = round(peak * 1e9 / train_flops, 1)
    return out


def run_variant(cfg: BenchConfig, variant: Variant) -> dict[str, Any]:
    """One run of ``variant``; bf16 runs even where it is emulated (the JSON says which)."""
    if variant.kind == "keras":
        return runs.keras_run(cfg, variant.precision)
    flags = ["--precision", variant.precision, *variant.flags]
    if variant.precision != "fp32":
        flags.append("--allow-emulated-precision")
    return runs.trainer_run(cfg, variant.workers, flags)


def _attempt(errors: list[str], name: str, fn: Callable[..., Any], *args: Any) -> Any:
    """Run one measurement; a failure is recorded and printed, the other figures still come."""
    print(f"... {name}", file=sys.stderr, flush=True)
    try:
        return fn(*args)
    except BenchmarkError as err:
        errors.append(f"{name}: {err}")
        print(f"!!! {name} failed: {err}", file=sys.stderr, flush=True)
        return None


def _hardware() -> dict[str, Any]:
    from trainer import precision

    hw = precision.detect()
    return {
        "hardware": hw.describe(),
        "bf16_native": precision.native("bf16", hw),
        "auto_precision": precision.resolve("auto", hw).precision,
    }


def run(
    cfg: BenchConfig, dead_peer_runs: bool = True, partial: Callable[[dict], None] | None = None
) -> dict[str, Any]:
    """Every measurement: roofline first (quietest), then the rounds, input-only, dead peer.

    ``partial`` gets the figures so far after every round (the full run is long: a run that
    is stopped keeps its finished rounds)."""
    import tensorflow as tf

    t_start = time.time()
    errors: list[str] = []
    figures: dict[str, Any] = {
        "config": asdict(cfg),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "tensorflow": tf.__version__,
            "gpus": len(tf.config.list_physical_devices("GPU")),
            **_hardware(),
            "loadavg_1m_start": round(os.getloadavg()[0], 2),
        },
    }
    figures["roofline"] = _attempt(errors, "roofline", roofline_figures, cfg)
    results: list[dict[str, dict[str, Any]]] = []
    all_runs: list[dict[str, Any]] = []
    rounds = plan(cfg)
    for i, names in enumerate(rounds):
        done: dict[str, dict[str, Any]] = {}
        for pos, name in enumerate(names):
            label = f"round {i + 1}/{len(rounds)}: {name}"
            result = _attempt(errors, label, run_variant, cfg, VARIANTS[name])
            if result is not None:
                done[name] = result
                all_runs.append({"round": i, "position": pos, "variant": name, **result})
        results.append(done)
        figures["runs"] = all_runs
        figures["rows"] = [row_figures(row, results) for row in ROWS]
        figures["rounds_done"] = i + 1
        if partial is not None:
            partial(figures)
    inputs = [
        r
        for k in range(cfg.input_only_runs)
        if (r := _attempt(errors, f"input only ({k + 1})", runs.input_only_run, cfg))
    ]
    trainer_rates = [r["trainer-fp32"]["examples_per_sec"] for r in results if "trainer-fp32" in r]
    figures["input_only"] = {
        "runs": inputs,
        "median_examples_per_sec": (
            round(statistics.median(r["examples_per_sec"] for r in inputs), 1) if inputs else None
        ),
        "trainer_fp32_median_examples_per_sec": (
            round(statistics.median(trainer_rates), 1) if trainer_rates else None
        ),
    }
    figures["dead_peer"] = []
    if dead_peer_runs:
        cases = [(1, signal.SIGKILL)] + ([(0, signal.SIGKILL)] if cfg.kill_chief else [])
        cases.append((1, signal.SIGSTOP))
        for victim, sig in cases:
            for k in range(cfg.dead_peer_repeats):
                name = f"dead peer, {sig.name} to worker {victim} ({k + 1})"
                result = _attempt(
                    errors, name, runs.dead_peer, cfg, cfg.dead_peer_workers, victim, sig
                )
                if result is not None:
                    figures["dead_peer"].append(result)
    figures["machine"]["loadavg_1m_end"] = round(os.getloadavg()[0], 2)
    figures["wall_s"] = round(time.time() - t_start, 1)
    figures["verdicts"] = [asdict(v) | {"label": v.label} for v in verdicts(figures)]
    figures["errors"] = errors
    return figures


def report(figures: dict[str, Any]) -> str:
    """The human-readable summary: machine, roofline, rows, input-only, dead peer, targets."""
    lines: list[str] = []
    cfg, m = figures["config"], figures["machine"]
    lines.append(
        f"machine: {m['cpus']} CPUs ({m['hardware']}), {m['gpus']} GPUs, TensorFlow "
        f"{m['tensorflow']}; --precision auto -> {m['auto_precision']}; load average "
        f"{m['loadavg_1m_start']} -> {m['loadavg_1m_end']}; {figures['wall_s']:.0f} s in all"
    )
    lines.append(
        f"data: synthetic {cfg['examples']} examples x {cfg['epochs']} epochs, batch "
        f"{cfg['batch_size']} per worker, {cfg['steps_per_call']} steps per call/execution; "
        f"{cfg['pairs']} rounds of paired runs, order reversed every other round"
    )
    roof = figures.get("roofline")
    if roof:
        lines.append(
            f"roofline: matmul peak fp32 {roof['matmul_peak_gflops_fp32']:.1f} / bf16 "
            f"{roof['matmul_peak_gflops_bf16']:.1f} GFLOP/s; {roof['train_flops_per_example']:,} "
            f"training FLOP/example (profiler {roof['forward_flops_profiled']:,} = analytic "
            f"{roof['forward_flops_analytic']:,} forward, x{TRAIN_TO_FORWARD}) -> "
            f"{roof['roofline_examples_per_sec_fp32']:,.0f} / "
            f"{roof['roofline_examples_per_sec_bf16']:,.0f} examples/s"
        )
    lines.append("")
    lines.append(f"{'row':<74}{'pairs':>6}{'median':>8}  interval")
    for row in figures.get("rows", []):
        if row.get("median") is None:
            lines.append(f"{row['title']:<74}{row['pairs']:>6}{'n/a':>8}")
            continue
        interval = (
            f"[{row['low']:.3f}, {row['high']:.3f}] ({row['coverage']:.1%})"
            if row.get("low") is not None
            else "-"
        )
        lines.append(f"{row['title']:<74}{row['pairs']:>6}{row['median']:>8.3f}  {interval}")
        acc = ""
        if "numerator_median_accuracy" in row:
            acc = (
                f", accuracy {row['numerator_median_accuracy']:.4f} / "
                f"{row.get('denominator_median_accuracy', float('nan')):.4f}"
            )
        num = row["numerator_median_examples_per_sec"]
        den = row["denominator_median_examples_per_sec"]
        lines.append(
            f"    median examples/s {row['numerator']} {num:,.0f} / {row['denominator']} "
            f"{den:,.0f}{acc}"
        )
    inp = figures.get("input_only") or {}
    if inp.get("median_examples_per_sec"):
        lines.append(
            f"input pipeline alone (--input-only): {inp['median_examples_per_sec']:,.0f} "
            f"examples/s vs training {inp['trainer_fp32_median_examples_per_sec'] or 0:,.0f}"
        )
    for d in figures.get("dead_peer", []):
        lines.append(
            f"dead peer: {d['signal']} worker {d['victim']} of {d['workers']}: survivors out "
            f"after {d['survivor_exit_s']} s, exit codes {d['survivor_exit_codes']}"
        )
    lines.append("")
    lines.append("targets")
    for v in figures.get("verdicts", []):
        lines.append(f"  [{v['label']}] {v['name']}: {v['measured']}  (target {v['target']})")
    for err in figures.get("errors", []):
        lines.append(f"  [ERROR] {err.splitlines()[0]}")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.throughput",
        description="Paired throughput comparisons of the trainer, roofline, dead-peer latency.",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="a short development run (1 round, less data, no chief kill; no intervals)",
    )
    p.add_argument("--pairs", type=int, help="rounds of paired runs (default 10; quick 1)")
    p.add_argument("--json", metavar="PATH", help="also write every figure to PATH as JSON")
    p.add_argument("--no-dead-peer", action="store_true", help="skip the dead-peer latency runs")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; 0 when every measurement produced a figure (targets only printed)."""
    args = build_parser().parse_args(argv)
    cfg = QUICK if args.quick else BenchConfig()
    if args.pairs is not None:
        if args.pairs < 1:
            print(f"--pairs: must be >= 1; got {args.pairs}", file=sys.stderr)
            return 2
        cfg = BenchConfig(**{**asdict(cfg), "pairs": args.pairs})
    path = Path(args.json) if args.json else None

    def write(figures: dict[str, Any]) -> None:
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(figures, indent=2) + "\n")

    figures = run(cfg, dead_peer_runs=not args.no_dead_peer, partial=write)
    print(report(figures))
    write(figures)
    if path is not None:
        print(f"figures written to {path}")
    return 1 if figures["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
