"""Kubernetes objects as ``kubectl get -o json`` prints them, for the phase tests; and the
recorded kwok snapshots in ``fixtures/`` (``make cluster-up``, a pending GPU stack and a ready
CPU stack, managed fields and pod templates trimmed)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from tfd.events import WorkerLog, parse_lines
from tfd.phase import Snapshot
from trainer.contract.api import QUEUE_ADMISSION_GATE
from trainer.logs import Log

FIXTURES = Path(__file__).resolve().parent / "fixtures"
STS = "tfd-worker"


def recorded(name: str) -> Snapshot:
    doc = json.loads((FIXTURES / name).read_text())
    return Snapshot(doc["statefulset"], doc["pods"], doc["events"], {}, now=0)


def sts(
    replicas: int,
    ready: int | None = None,
    observed: int | None = None,
    annotations: dict[str, str] | None = None,
    generation: int = 4,
    revision: str | None = None,
) -> dict[str, Any]:
    """``revision``: its ``status.updateRevision``."""
    notes = {"tf-distributed.io/run-id": "r1"}
    notes.update(annotations or {})
    meta: dict[str, Any] = {"name": STS, "annotations": notes, "generation": generation}
    status: dict[str, Any] = {
        "replicas": replicas if observed is None else observed,
        "readyReplicas": replicas if ready is None else ready,
    }
    if revision is not None:
        status["updateRevision"] = revision
    return {"metadata": meta, "spec": {"replicas": replicas}, "status": status}


def pod(
    n: int,
    *,
    phase: str = "Running",
    ready: bool = True,
    unscheduled: str | None = None,
    waiting: str = "",
    message: str = "",
    last_exit: int | None = None,
    last_reason: str = "Error",
    restarts: int = 0,
    deleting: bool = False,
    revision: str | None = None,
    gated: bool = False,
) -> dict[str, Any]:
    """``revision``: the template revision it was made from (``controller-revision-hash``);
    ``gated``: held by Kueue's admission gate (Pending, not scheduled, no container)."""
    meta: dict[str, Any] = {"name": f"{STS}-{n}"}
    if gated:
        return {
            "metadata": meta,
            "spec": {"schedulingGates": [{"name": QUEUE_ADMISSION_GATE}]},
            "status": {"phase": "Pending", "conditions": [{
                "type": "PodScheduled", "status": "False", "reason": "SchedulingGated",
                "message": "Scheduling is blocked due to non-empty scheduling gates",
            }]},
        }  # fmt: skip
    if revision is not None:
        meta["labels"] = {"controller-revision-hash": revision}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-03T12:00:00Z"
    status: dict[str, Any] = {"phase": phase, "conditions": []}
    if unscheduled is not None:
        status["phase"] = "Pending"
        status["conditions"].append(
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": unscheduled,
            }
        )
        return {"metadata": meta, "status": status}
    container: dict[str, Any] = {
        "name": "trainer",
        "ready": ready,
        "restartCount": restarts,
        "state": {"running": {}},
        "lastState": {},
    }
    if waiting:
        container["state"] = {"waiting": {"reason": waiting, "message": message}}
    if last_exit is not None:
        container["lastState"] = {"terminated": {"exitCode": last_exit, "reason": last_reason}}
    status["containerStatuses"] = [container]
    return {"metadata": meta, "status": status}


def event(
    name: str, reason: str, message: str, when: str = "2026-12-03T12:00:00Z", kind: str = "Pod"
) -> dict:
    return {
        "involvedObject": {"name": name, "kind": kind},
        "reason": reason,
        "message": message,
        "lastTimestamp": when,
    }


def worker_log(
    n: int,
    *events: tuple[str, dict[str, Any]],
    text: tuple[str, ...] = (),
    previous: tuple[str, ...] = (),
) -> WorkerLog:
    """What worker ``n`` logs: the trainer's own ``Log`` writes the lines (the format the
    parser reads), followed by plain text lines (stderr)."""
    out = io.StringIO()
    log = Log(n, out)
    for name, fields in events:
        log.event(name, **fields)
    lines = out.getvalue().splitlines() + list(text)
    return WorkerLog(n, parse_lines(lines), parse_lines(previous))


def progress(step: int, total: int = 300, rate: float = 640.0, **more: Any) -> tuple[str, dict]:
    return (
        "progress",
        {
            "step": step,
            "total_steps": total,
            "epoch": step // 100,
            "loss": 0.5,
            "accuracy": 0.9,
            "examples_per_sec": rate,
            **more,
        },
    )


START = ("start", {"run_id": "r1", "total_steps": 300, "global_batch": 128, "start_step": 0})
