"""The goodput benchmark's schedule, records and figures: pure functions of the launcher's
output (``python -m benchmarks.goodput`` runs the jobs; ``tests/benchmarks`` checks these on
made-up logs)."""

from __future__ import annotations

import json
import signal
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from benchmarks.stats import median_interval as stats_median_interval
from trainer.local_cluster import split_worker_output

TARGET_FAILURE_TO_STEP_P50_S = 5.0
TARGET_RECOMPUTED_FRACTION = 0.10
TARGET_SAVE_STALL_FRACTION = 0.05
TARGET_GOODPUT = 0.90
TARGET_GOODPUT_EVERY_S = 120.0
"""Goodput at least 0.90 with one kill every 2 minutes (the target's schedule)."""
SIGNALS = {"kill": signal.SIGKILL, "sigterm": signal.SIGTERM}


class GoodputError(RuntimeError):
    """A run failed, timed out or printed too little to measure."""


@dataclass(frozen=True)
class GoodputConfig:
    """One job and its failure schedule; the defaults are the targets' schedule."""

    failure: str = "kill"
    every_s: float = TARGET_GOODPUT_EVERY_S
    failures: int = 10
    pairs: int = 1
    workers: int = 2
    batch_size: int = 64
    steps_per_call: int = 4
    checkpoint_every: int = 200
    log_every_s: float = 0.5
    seed: int = 1
    timeout_s: float = 3600.0
    sync_checkpoints: bool = False
    """The trainer's ``--sync-checkpoints``: the save stall of a synchronous write, to compare."""
    no_rescue_checkpoint: bool = False
    """The trainer's ``--no-rescue-checkpoint``: restarts resume from the last periodic
    checkpoint (the steps recomputed without the survivors' save, to compare)."""

    def __post_init__(self) -> None:
        if self.failure not in SIGNALS:
            raise ValueError(f"failure: must be one of {', '.join(SIGNALS)}; got {self.failure!r}")
        for name in ("every_s", "failures", "pairs", "workers", "checkpoint_every"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name}: must be positive; got {getattr(self, name)!r}")

    def trainer_args(self, steps: int) -> list[str]:
        """Flags of a job of exactly ``steps`` steps (a whole number of checkpoint intervals,
        :func:`planned_steps`): epochs of one checkpoint interval of synthetic data each. One
        epoch of every step would hold the whole job's examples in memory (460,800 for the
        targets' schedule), and making them would count as start-up at every restart."""
        epochs, rest = divmod(steps, self.checkpoint_every)
        if rest or not epochs:
            raise ValueError(f"steps: must be a multiple of {self.checkpoint_every}; got {steps}")
        return [
            "--dataset", "synthetic",
            "--synthetic-examples", str(self.checkpoint_every * self.batch_size * self.workers),
            "--epochs", str(epochs),
            "--batch-size", str(self.batch_size),
            "--steps-per-call", str(self.steps_per_call),
            "--checkpoint-every", str(self.checkpoint_every),
            "--log-every", str(self.log_every_s),
            "--seed", str(self.seed),
            *(["--sync-checkpoints"] if self.sync_checkpoints else []),
            *(["--no-rescue-checkpoint"] if self.no_rescue_checkpoint else []),
        ]  # fmt: skip


QUICK = GoodputConfig(every_s=20.0, failures=3, checkpoint_every=100)


@dataclass
class Failure:
    """One injected failure and what followed it (times are ``time.time()``)."""

    t: float
    worker: int
    signal: str
    step_before: int | None = None
    t_before: float | None = None
    """When the chief logged ``step_before`` (its ``progress`` or ``start`` event)."""
    trained_before: bool = False
    """``step_before`` is from a ``progress`` line: training ran at the step time after it."""
    resumed_step: int | None = None
    first_step_t: float | None = None
    restart_t: float | None = None
    """When the launcher said it restarts the workers (its line's read time)."""

    @property
    def to_restart_s(self) -> float | None:
        """Failure to the launcher's restart: the survivors noticing the loss and exiting."""
        return None if self.restart_t is None else round(self.restart_t - self.t, 3)

    @property
    def to_first_step_s(self) -> float | None:
        return None if self.first_step_t is None else round(self.first_step_t - self.t, 3)

    @property
    def recomputed(self) -> int | None:
        """Steps trained again at least: the last step logged before the failure minus the
        step resumed from."""
        if self.step_before is None or self.resumed_step is None:
            return None
        return max(0, self.step_before - self.resumed_step)

    def recomputed_estimate(self, step_s: float) -> int | None:
        """Steps trained again, with the steps run between the last ``progress`` line and the
        failure counted at the undisturbed step time ``step_s`` (the line comes every
        ``--log-every`` seconds, so :attr:`recomputed` misses up to that many seconds of steps)."""
        if self.step_before is None or self.resumed_step is None or self.t_before is None:
            return None
        since = int(max(0.0, self.t - self.t_before) / step_s) if self.trained_before else 0
        return max(0, self.step_before + since - self.resumed_step)


@dataclass
class JobRecord:
    """One launcher run: its lines (read time, text), failures, exit code and wall time."""

    lines: list[tuple[float, str]] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    t_launch: float = 0.0
    wall_s: float = 0.0
    exit_code: int | None = None


def parse_event(text: str) -> tuple[int, dict[str, Any]] | None:
    """``[worker-i] {json}`` -> ``(i, event)``; anything else -> ``None``."""
    split = split_worker_output([text])
    for worker, own in split.items():
        for line in own:
            if line.startswith("{"):
                try:
                    doc = json.loads(line)
                except ValueError:
                    return None
                return (worker, doc) if isinstance(doc, dict) and "event" in doc else None
    return None


def events(record: JobRecord, worker: int | None = None) -> list[tuple[int, dict[str, Any]]]:
    out = [e for _, text in record.lines if (e := parse_event(text)) is not None]
    return [e for e in out if worker is None or e[0] == worker]


def attempts(record: JobRecord) -> list[dict[str, Any]]:
    """Per launcher attempt, the chief's start-up split (seconds), from the launcher's
    ``starting`` line (read time) and the chief's ``forming``, ``start``, ``first_step`` events."""
    out: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    for t_read, text in record.lines:
        if text.startswith("[launcher] starting"):
            current = {"launch": t_read}
            out.append(current)
            continue
        found = parse_event(text)
        if current is None or found is None or found[0] != 0:
            continue
        name = found[1]["event"]
        if name in ("forming", "start", "first_step") and name not in current:
            current[name] = float(found[1]["ts"])
    split = []
    for a in out:
        if not {"forming", "start", "first_step"} <= a.keys():
            continue
        split.append(
            {
                "import_s": round(a["forming"] - a["launch"], 3),
                "forming_to_start_s": round(a["start"] - a["forming"], 3),
                "start_to_first_step_s": round(a["first_step"] - a["start"], 3),
                "launch_to_first_step_s": round(a["first_step"] - a["launch"], 3),
            }
        )
    return split


def resolve_failures(record: JobRecord) -> None:
    """Fill each failure's last step before it, the step resumed from and the next first step."""
    chief = [(float(e["ts"]), e) for _, e in events(record, 0)]
    for failure in record.failures:
        before = [(ts, e) for ts, e in chief
                  if ts <= failure.t and e["event"] in ("progress", "start")]  # fmt: skip
        if before:
            ts, last = before[-1]
            failure.step_before = int(last.get("step", last.get("start_step", 0)))
            failure.t_before, failure.trained_before = ts, last["event"] == "progress"
        after = [(ts, e) for ts, e in chief if ts > failure.t]
        resume = next((e for _, e in after if e["event"] in ("resume", "start")), None)
        if resume is not None:
            failure.resumed_step = int(resume.get("step", resume.get("start_step", 0)))
        failure.first_step_t = next((ts for ts, e in after if e["event"] == "first_step"), None)
        failure.restart_t = next(
            (
                t_read
                for t_read, text in record.lines
                if t_read > failure.t and text.startswith("[launcher] restarting")
            ),
            None,
        )


def training_s(record: JobRecord) -> float:
    """The chief's first ``first_step`` to its ``done`` (or last) event: time spent training."""
    chief = [e for _, e in events(record, 0)]
    first = next((float(e["ts"]) for e in chief if e["event"] == "first_step"), None)
    if first is None or not chief:
        raise GoodputError("the chief logged no first step: nothing trained")
    return float(chief[-1]["ts"]) - first


def save_stalls(record: JobRecord) -> list[float]:
    return [float(e["seconds"]) for _, e in events(record, 0) if e["event"] == "checkpoint"]


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0-1) by linear interpolation between order statistics."""
    ordered = sorted(values)
    if not ordered:
        raise GoodputError("no values")
    pos = q * (len(ordered) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def median_interval(values: Sequence[float]) -> tuple[float, float] | None:
    """The distribution-free 95% interval of the median (``benchmarks.stats.median_interval``)."""
    found = stats_median_interval(values)
    return None if found is None else found[:2]


def figures(cfg: GoodputConfig, steps: int, pairs: list[tuple[JobRecord, JobRecord]]) -> dict:
    """Every figure of the report from the pairs ``(undisturbed, with failures)``."""
    rows = []
    all_failures: list[Failure] = []
    stall_fractions: list[float] = []
    stall_shares: list[float] = []
    estimates: list[int] = []
    for clean, failing in pairs:
        for job in (clean, failing):
            if job.exit_code != 0:
                raise GoodputError(f"a job ended with exit code {job.exit_code}")
        useful = training_s(clean)
        step_s = useful / steps
        stall_fractions += [s / step_s for s in save_stalls(failing)]
        stall_shares.append(sum(save_stalls(failing)) / useful)
        all_failures += failing.failures
        estimates += [r for f in failing.failures
                      if (r := f.recomputed_estimate(step_s)) is not None]  # fmt: skip
        rows.append(
            {
                "useful_s": round(useful, 3),
                "step_s": round(step_s, 5),
                "goodput_undisturbed": round(useful / clean.wall_s, 4),
                "goodput_with_failures": round(useful / failing.wall_s, 4),
                "wall_s": {"undisturbed": round(clean.wall_s, 3), "failures": failing.wall_s},
                "failures": [asdict(f) | {"to_first_step_s": f.to_first_step_s,
                                          "to_restart_s": f.to_restart_s,
                                          "recomputed": f.recomputed,
                                          "recomputed_estimate": f.recomputed_estimate(step_s)}
                               for f in failing.failures],
                "attempts_undisturbed": attempts(clean),
                "attempts_with_failures": attempts(failing),
                "save_s": save_stalls(failing),
            }
        )  # fmt: skip
    latencies = [f.to_first_step_s for f in all_failures if f.to_first_step_s is not None]
    recomputed = [f.recomputed for f in all_failures if f.recomputed is not None]
    out: dict[str, Any] = {"pairs": rows, "failures": len(all_failures)}
    if latencies:
        out["failure_to_first_step_s"] = {
            "p50": round(percentile(latencies, 0.5), 3),
            "p95": round(percentile(latencies, 0.95), 3),
            "median_interval_95": median_interval(latencies),
            "n": len(latencies),
        }
    if recomputed and estimates:
        mean = statistics.fmean(estimates)
        out["recomputed_steps"] = {
            "mean": round(mean, 2),
            "max": max(estimates),
            "fraction_of_interval": round(mean / cfg.checkpoint_every, 4),
            "logged_mean": round(statistics.fmean(recomputed), 2),
        }
    if stall_fractions:
        out["save_stall_fraction_of_step"] = {
            "median": round(statistics.median(stall_fractions), 4),
            "max": round(max(stall_fractions), 4),
        }
        # What saving adds to the step time: every save's stall of the failure run over the
        # undisturbed run's training time (the failure run saves more: its restarts save again).
        out["save_stall_share_of_training"] = round(statistics.median(stall_shares), 5)
    goodputs = [r["goodput_with_failures"] for r in rows]
    out["goodput_with_failures"] = {"median": round(statistics.median(goodputs), 4), "n": len(rows)}
    out["goodput_undisturbed"] = round(statistics.median(r["goodput_undisturbed"] for r in rows), 4)
    return out


def verdicts(cfg: GoodputConfig, f: dict[str, Any]) -> list[str]:
    """One ``PASS``/``MISS``/``N/A`` line per target."""
    lines = []

    def line(ok: bool | None, what: str, figure: str) -> None:
        lines.append(f"{'N/A' if ok is None else 'PASS' if ok else 'MISS'}  {what}: {figure}")

    lat = f.get("failure_to_first_step_s")
    kill = cfg.failure == "kill"
    measured = lat is not None and kill and lat["n"] >= 10
    line(
        lat["p50"] <= TARGET_FAILURE_TO_STEP_P50_S if measured else None,
        f"kill -9 to the next step p50 <= {TARGET_FAILURE_TO_STEP_P50_S:g} s (>= 10 kills)",
        f"{lat['p50']} s over {lat['n']}" if lat else "no failure measured",
    )
    rec = f.get("recomputed_steps")
    line(
        None if rec is None else rec["fraction_of_interval"] <= TARGET_RECOMPUTED_FRACTION,
        f"steps recomputed <= {TARGET_RECOMPUTED_FRACTION:.0%} of the checkpoint interval",
        f"{rec['mean']} of {cfg.checkpoint_every} ({rec['fraction_of_interval']:.1%})" if rec
        else "no failure measured",
    )  # fmt: skip
    stall = f.get("save_stall_fraction_of_step")
    line(
        None if stall is None else stall["median"] <= TARGET_SAVE_STALL_FRACTION,
        f"checkpoint save stall <= {TARGET_SAVE_STALL_FRACTION:.0%} of a step, each save",
        f"median {stall['median']:.1%} of a step" if stall else "no save measured",
    )
    share = f.get("save_stall_share_of_training")
    line(
        None if share is None else share <= TARGET_SAVE_STALL_FRACTION,
        f"checkpoint save stall <= {TARGET_SAVE_STALL_FRACTION:.0%} of the step time, all saves",
        f"{share:.2%} of the training time" if share is not None else "no save measured",
    )
    g = f["goodput_with_failures"]["median"]
    on_schedule = kill and cfg.every_s == TARGET_GOODPUT_EVERY_S
    line(
        g >= TARGET_GOODPUT if on_schedule else None,
        f"goodput >= {TARGET_GOODPUT} with a kill every {TARGET_GOODPUT_EVERY_S:g} s",
        f"{g} (undisturbed {f['goodput_undisturbed']}; every {cfg.every_s:g} s)",
    )
    return lines


def planned_steps(cfg: GoodputConfig, step_s: float) -> int:
    """A job long enough for every failure: ``failures`` intervals of training plus two more,
    at the measured step time, in whole checkpoint intervals."""
    seconds = (cfg.failures + 2) * cfg.every_s  # one interval of margin: steps run faster
    steps = int(seconds / step_s)
    return max(cfg.checkpoint_every, steps - steps % cfg.checkpoint_every)
