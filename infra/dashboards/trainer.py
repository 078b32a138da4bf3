"""The "TF distributed training" Grafana dashboard (JSON model, schema 39).

Every query reads a ``trainer.contract.METRIC_*`` name and filters on the ``$namespace``
template variable (the training namespaces that export the step gauge). The data source is
the ``$datasource`` variable of type ``prometheus``, so the dashboard works with any
Prometheus data source name or uid.

Run ``python -m infra.dashboards.trainer`` to print the JSON (to import it by hand).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from trainer.contract import (
    METRIC_ACCURACY,
    METRIC_CHECKPOINT_SAVE_SECONDS,
    METRIC_CHECKPOINT_STEP,
    METRIC_CHECKPOINT_TIMESTAMP,
    METRIC_COMPLETED,
    METRIC_EPOCH,
    METRIC_EVAL_ACCURACY,
    METRIC_EVAL_LOSS,
    METRIC_EXAMPLES_PER_SECOND,
    METRIC_EXAMPLES_TOTAL,
    METRIC_LOSS,
    METRIC_RESUMES_TOTAL,
    METRIC_STEP,
    METRIC_STEP_SECONDS,
    METRIC_STEPS_TOTAL,
    METRIC_WORLD_SIZE,
)

DASHBOARD_UID = "tfd-trainer"
"""Stable uid: Grafana updates the same dashboard when the ConfigMap changes."""
DASHBOARD_TITLE = "TF distributed training"
FILE_NAME = "tfd-trainer.json"
"""Key of the dashboard in the ConfigMap; the Grafana sidecar writes it under this name."""

_DS = {"type": "prometheus", "uid": "${datasource}"}
_SEL = '{namespace=~"$namespace"}'
_GRID_W = 24
"""Grafana's dashboard grid is 24 columns wide."""


def _target(expr: str, legend: str, ref: str) -> dict[str, Any]:
    return {"datasource": _DS, "expr": expr, "legendFormat": legend, "refId": ref}


def _panel(
    kind: str,
    title: str,
    targets: list[tuple[str, str]],
    unit: str,
    size: tuple[int, int],
    description: str,
    **defaults: Any,
) -> dict[str, Any]:
    return {
        "type": kind,
        "title": title,
        "description": description,
        "datasource": _DS,
        "gridPos": {"w": size[0], "h": size[1]},
        "fieldConfig": {"defaults": {"unit": unit, **defaults}, "overrides": []},
        # showLegend and calcs are required by Grafana's panel schema (grafana-foundation-sdk
        # fills in false and [] when they are missing): set, not left to a default.
        "options": {
            "legend": {
                "displayMode": "list",
                "placement": "bottom",
                "showLegend": True,
                "calcs": [],
            }
        }
        if kind == "timeseries"
        else {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False}},
        "targets": [
            _target(expr, legend, chr(ord("A") + i)) for i, (expr, legend) in enumerate(targets)
        ],
    }


def _quantile(q: float, histogram: str) -> str:
    return (
        f"histogram_quantile({q}, sum by (namespace, le) "
        f"(rate({histogram}_bucket{_SEL}[$__rate_interval])))"
    )


def _panels() -> list[dict[str, Any]]:
    by_ns = "{{namespace}}"
    by_pod = "{{pod}}"
    return [
        _panel(
            "stat",
            "Status",
            [(f"max by (namespace) ({METRIC_COMPLETED}{_SEL})", by_ns)],
            "none",
            (6, 5),
            "Running until the chief writes the DONE marker.",
            mappings=[
                {
                    "type": "value",
                    "options": {
                        "0": {"text": "Running", "color": "blue", "index": 0},
                        "1": {"text": "Completed", "color": "green", "index": 1},
                    },
                }
            ],
        ),
        _panel(
            "stat",
            "World size",
            [
                (f"max by (namespace) ({METRIC_WORLD_SIZE}{_SEL})", f"{by_ns} configured"),
                (f"count by (namespace) ({METRIC_WORLD_SIZE}{_SEL})", f"{by_ns} reporting"),
            ],
            "none",
            (6, 5),
            "Workers the job was started with, and workers whose metrics are scraped now.",
        ),
        _panel(
            "stat",
            "Epoch",
            [(f"max by (namespace) ({METRIC_EPOCH}{_SEL})", by_ns)],
            "none",
            (6, 5),
            "Current epoch.",
        ),
        _panel(
            "stat",
            "Checkpoint age",
            [
                (
                    f"time() - max by (namespace) ({METRIC_CHECKPOINT_TIMESTAMP}{_SEL} > 0)",
                    by_ns,
                )
            ],
            "s",
            (6, 5),
            "Time since the newest checkpoint; work since then is lost on a restart.",
        ),
        _panel(
            "timeseries",
            "Global step",
            [
                (f"max by (namespace) ({METRIC_STEP}{_SEL})", f"{by_ns} step"),
                (
                    f"max by (namespace) ({METRIC_CHECKPOINT_STEP}{_SEL} >= 0)",
                    f"{by_ns} checkpointed",
                ),
            ],
            "none",
            (12, 8),
            "Training step, and the step of the newest checkpoint.",
        ),
        _panel(
            "timeseries",
            "Throughput",
            [
                (f"max by (namespace) ({METRIC_EXAMPLES_PER_SECOND}{_SEL})", f"{by_ns} ex/s"),
                (
                    # Every worker counts the global examples of its steps: max, not sum.
                    f"max by (namespace) (rate({METRIC_EXAMPLES_TOTAL}{_SEL}[$__rate_interval]))",
                    f"{by_ns} ex/s (rate)",
                ),
                (
                    f"sum by (namespace) (rate({METRIC_STEPS_TOTAL}{_SEL}[$__rate_interval]))",
                    f"{by_ns} steps/s (all workers)",
                ),
            ],
            "short",
            (12, 8),
            "Global examples per second (last log interval, and the counter's rate), and steps "
            "per second summed over workers.",
        ),
        _panel(
            "timeseries",
            "Step time",
            [(_quantile(q, METRIC_STEP_SECONDS), f"{by_ns} p{round(q * 100)}") for q in (0.5, 0.9)],
            "s",
            (12, 8),
            "Seconds per training step, median and 90th percentile over all workers.",
        ),
        _panel(
            "timeseries",
            "Checkpoint save time",
            [
                (_quantile(q, METRIC_CHECKPOINT_SAVE_SECONDS), f"{by_ns} p{round(q * 100)}")
                for q in (0.5, 0.9)
            ],
            "s",
            (12, 8),
            "Seconds one checkpoint save takes (every worker waits for it).",
        ),
        _panel(
            "timeseries",
            "Loss",
            [(f"{METRIC_LOSS}{_SEL}", by_pod)],
            "none",
            (12, 8),
            "Training loss reported by each worker.",
        ),
        _panel(
            "timeseries",
            "Accuracy",
            [(f"{METRIC_ACCURACY}{_SEL}", by_pod)],
            "percentunit",
            (12, 8),
            "Training accuracy reported by each worker.",
            min=0,
            max=1,
        ),
        _panel(
            "timeseries",
            "Evaluation",
            [
                (f"max by (namespace) ({METRIC_EVAL_LOSS}{_SEL})", f"{by_ns} loss"),
                (f"max by (namespace) ({METRIC_EVAL_ACCURACY}{_SEL})", f"{by_ns} accuracy"),
            ],
            "none",
            (12, 8),
            "Loss and accuracy of the last evaluation pass (--eval-dataset or --eval-split; "
            "0 before the first or without one).",
        ),
        _panel(
            "timeseries",
            "Restarts and resumes",
            [
                (f"sum by (namespace) (increase({METRIC_RESUMES_TOTAL}{_SEL}[1h]))", "resumes"),
                (f"sum by (namespace) (resets({METRIC_STEPS_TOTAL}{_SEL}[1h]))", "restarts"),
            ],
            "none",
            (24, 8),
            "Resumes from a checkpoint and trainer process restarts, over the last hour.",
        ),
    ]


def _layout(panels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Give panels ids and left-to-right, top-to-bottom grid positions."""
    x = y = row_h = 0
    for i, panel in enumerate(panels, start=1):
        w, h = panel["gridPos"]["w"], panel["gridPos"]["h"]
        if x + w > _GRID_W:
            x, y, row_h = 0, y + row_h, 0
        panel["id"] = i
        panel["gridPos"] = {"x": x, "y": y, "w": w, "h": h}
        x, row_h = x + w, max(row_h, h)
    return panels


def dashboard() -> dict[str, Any]:
    """The dashboard JSON model (a dict ready for ``json.dumps``)."""
    namespace_query = f"label_values({METRIC_STEP}, namespace)"
    return {
        "uid": DASHBOARD_UID,
        "title": DASHBOARD_TITLE,
        "tags": ["tfd", "tensorflow", "training"],
        "timezone": "utc",
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Data source",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {},
                    "hide": 0,
                },
                {
                    "name": "namespace",
                    "label": "Namespace",
                    "type": "query",
                    "datasource": _DS,
                    "definition": namespace_query,
                    "query": {"query": namespace_query, "refId": "namespace"},
                    "refresh": 2,
                    "includeAll": True,
                    "multi": True,
                    "current": {},
                    "hide": 0,
                },
            ]
        },
        "annotations": {"list": []},
        "panels": _layout(_panels()),
    }


def dashboard_json() -> str:
    """:func:`dashboard` serialised as JSON text (what the ConfigMap carries)."""
    return json.dumps(dashboard(), indent=1, sort_keys=True)


if __name__ == "__main__":
    sys.stdout.write(dashboard_json() + "\n")
