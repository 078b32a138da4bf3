"""Prometheus alerting rules for the trainer's metrics.

The same rule groups feed two renderings: the ``spec`` of a ``PrometheusRule`` (which the
Prometheus Operator loads) and a plain Prometheus rules file that ``promtool check rules`` and
``promtool test rules`` accept. Metric names come from :mod:`trainer.contract`, so renaming a
metric there changes every expression here.

Every alert is scoped by ``namespace`` and ``job``: the PodMonitor gives each training job's
series ``job="<namespace>/<podmonitor>"``, so two jobs in one cluster never mask each other.
Besides the trainer's metrics, the rules read Prometheus's own ``up`` of those jobs: a worker
whose scrape fails reports nothing else.

Run ``python -m infra.alerts`` to print the rules file (YAML) on stdout.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import yaml

from infra.config import ALERT_FOR_MINUTES, ConfigError, default_of
from trainer.contract import (
    METRIC_CHECKPOINT_SAVE_SECONDS,
    METRIC_CHECKPOINT_TIMESTAMP,
    METRIC_COMPLETED,
    METRIC_RESUMES_TOTAL,
    METRIC_STEP,
    METRIC_STEPS_TOTAL,
    METRIC_WORLD_SIZE,
)

GROUP_NAME = "tfd-trainer"
"""Name of the single rule group (unique within the rules file)."""
POD_MONITOR_NAME = "tfd-workers"
"""Name of the PodMonitor that scrapes the workers (``infra.monitoring`` creates it): Prometheus
names its scrape job ``<training namespace>/tfd-workers``."""
WORKER_JOBS = f'job=~".+/{POD_MONITOR_NAME}"'
"""Label matcher of every training stack's worker scrape job."""

ALERT_STALLED = "TfdTrainingStalled"
ALERT_CHECKPOINT_STALE = "TfdCheckpointTooOld"
ALERT_RESTARTS = "TfdWorkersRestarting"
ALERT_RESUMES = "TfdResumesRising"
ALERT_WORKERS_MISSING = "TfdWorkersMissing"
ALERT_CHECKPOINT_SLOW = "TfdCheckpointSavesSlow"

_BY = "by (namespace, job)"
_ON = "on (namespace, job)"
_NOT_DONE = f"unless {_ON} (max {_BY} ({METRIC_COMPLETED}) == 1)"
"""Suffix that silences an alert once the job reports completion (DONE marker written)."""


@dataclass(frozen=True)
class AlertThresholds:
    """Tunable thresholds of the trainer alerts.

    Attributes:
        stall_minutes: the global step must not advance for this long (minutes, 1-1440,
            default 15) before ``TfdTrainingStalled`` fires.
        checkpoint_max_age_minutes: newest checkpoint older than this (minutes, 1-10080,
            default 60) fires ``TfdCheckpointTooOld``.
        restart_window_minutes: window over which restarts and resumes are counted (minutes,
            5-1440, default 60).
        max_restarts: restarts (trainer processes whose step counter reset) tolerated in the
            window (0-1000, default 3); more fires ``TfdWorkersRestarting``.
        max_resumes: resumes from a checkpoint tolerated in the window (0-1000, default 3);
            more fires ``TfdResumesRising``.
        for_minutes: how long a condition must hold before an alert fires (minutes, 0-60,
            default 5; the stack's ``monitoringAlertForMinutes``).
        checkpoint_save_max_seconds: 90th percentile of checkpoint save time over the restart
            window above this (seconds, 1-3600, default 60) fires ``TfdCheckpointSavesSlow``:
            every worker waits for each save, and a preempted pod must save within its grace
            period.
    """

    stall_minutes: int = 15
    checkpoint_max_age_minutes: int = 60
    restart_window_minutes: int = 60
    max_restarts: int = 3
    max_resumes: int = 3
    for_minutes: int = default_of("monitoringAlertForMinutes")
    checkpoint_save_max_seconds: int = 60

    def __post_init__(self) -> None:
        ranges = {
            "stall_minutes": (1, 1440),
            "checkpoint_max_age_minutes": (1, 10080),
            "restart_window_minutes": (5, 1440),
            "max_restarts": (0, 1000),
            "max_resumes": (0, 1000),
            "for_minutes": ALERT_FOR_MINUTES,
            "checkpoint_save_max_seconds": (1, 3600),
        }
        for key, (lo, hi) in ranges.items():
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
                raise ConfigError(
                    [f"AlertThresholds.{key}: must be an integer in [{lo}, {hi}]; got {value!r}"]
                )


def _alert(name: str, expr: str, for_minutes: int, severity: str, summary: str, desc: str):
    return {
        "alert": name,
        "expr": expr,
        "for": f"{for_minutes}m",
        "labels": {"severity": severity},
        "annotations": {"summary": summary, "description": desc},
    }


def alert_rules(thresholds: AlertThresholds | None = None) -> list[dict[str, Any]]:
    """The alerting rules (Prometheus rule dictionaries, ``alert``/``expr``/``for``/...).

    Args:
        thresholds: tunables; ``None`` uses :class:`AlertThresholds` defaults.
    """
    t = thresholds or AlertThresholds()
    window = f"{t.restart_window_minutes}m"
    where = "{{ $labels.namespace }} ({{ $labels.job }})"
    return [
        _alert(
            ALERT_STALLED,
            # changes() of the step gauge is 0 only when no worker advanced it in the window;
            # a job that never started reports no series and cannot fire here.
            f"max {_BY} (changes({METRIC_STEP}[{t.stall_minutes}m])) == 0 {_NOT_DONE}",
            t.for_minutes,
            "critical",
            "Training is stalled",
            f"The global step of {where} has not advanced for {t.stall_minutes} minutes "
            "and training has not completed.",
        ),
        _alert(
            ALERT_CHECKPOINT_STALE,
            # The newest checkpoint any worker has seen; 0 means "none yet" and is ignored so
            # a fresh job does not fire before its first save.
            f"time() - max {_BY} ({METRIC_CHECKPOINT_TIMESTAMP} > 0) "
            f"> {t.checkpoint_max_age_minutes * 60} {_NOT_DONE}",
            t.for_minutes,
            "warning",
            "Checkpoint is too old",
            f"The newest checkpoint of {where} is {{{{ $value | humanizeDuration }}}} old "
            f"(limit {t.checkpoint_max_age_minutes} minutes); a restart would lose that work.",
        ),
        _alert(
            ALERT_RESTARTS,
            # The per-process step counter starts at 0 in every new trainer process, so each
            # reset is one restart of a worker container.
            f"sum {_BY} (resets({METRIC_STEPS_TOTAL}[{window}])) > {t.max_restarts}",
            0,
            "warning",
            "Workers keep restarting",
            f"Trainer processes of {where} restarted {{{{ $value }}}} times in the last "
            f"{t.restart_window_minutes} minutes (limit {t.max_restarts}).",
        ),
        _alert(
            ALERT_RESUMES,
            f"sum {_BY} (increase({METRIC_RESUMES_TOTAL}[{window}])) > {t.max_resumes}",
            0,
            "warning",
            "Training keeps resuming from checkpoints",
            f"Workers of {where} resumed from a checkpoint {{{{ $value }}}} times in the last "
            f"{t.restart_window_minutes} minutes (limit {t.max_resumes}).",
        ),
        _alert(
            ALERT_WORKERS_MISSING,
            # Every worker exports the world size it was started with: fewer series than that
            # value means some are gone. The workers left then wait for them inside TensorFlow,
            # where their /metrics may not answer at all (no series, not even the world size):
            # a worker pod whose scrape fails counts as missing too.
            f"((max {_BY} ({METRIC_WORLD_SIZE}) - count {_BY} ({METRIC_WORLD_SIZE})) > 0 "
            f"or count {_BY} (up{{{WORKER_JOBS}}} == 0)) {_NOT_DONE}",
            t.for_minutes,
            "critical",
            "Workers are missing",
            f"{{{{ $value }}}} workers of {where} are missing: fewer report metrics than the "
            "world size they were started with, or their pods do not answer the scrape. "
            "Collectives block until every worker is back.",
        ),
        _alert(
            ALERT_CHECKPOINT_SLOW,
            "histogram_quantile(0.9, sum by (namespace, job, le) "
            f"(rate({METRIC_CHECKPOINT_SAVE_SECONDS}_bucket[{window}]))) "
            f"> {t.checkpoint_save_max_seconds}",
            t.for_minutes,
            "warning",
            "Checkpoint saves are slow",
            f"90% of the checkpoint saves of {where} took up to "
            f"{{{{ $value | humanizeDuration }}}} over the last {t.restart_window_minutes} "
            f"minutes (limit {t.checkpoint_save_max_seconds} s); training waits for every "
            "save, and a preempted worker must save within its grace period.",
        ),
    ]


def rule_groups(thresholds: AlertThresholds | None = None) -> list[dict[str, Any]]:
    """The rule groups: the ``spec.groups`` of a PrometheusRule and a rules file's ``groups``."""
    return [{"name": GROUP_NAME, "rules": alert_rules(thresholds)}]


def rules_file(thresholds: AlertThresholds | None = None) -> dict[str, Any]:
    """A plain Prometheus rules file (``{"groups": [...]}``) for ``promtool``."""
    return {"groups": rule_groups(thresholds)}


def rules_yaml(thresholds: AlertThresholds | None = None) -> str:
    """:func:`rules_file` as YAML text."""
    return yaml.safe_dump(rules_file(thresholds), sort_keys=False, width=1000)


if __name__ == "__main__":
    sys.stdout.write(rules_yaml())
