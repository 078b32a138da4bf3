"""A run held by the cluster's queue (Kueue): its pods carry Kueue's admission gate until the
queue admits all of them together, and the reason it waits is the newest ``Pending`` event of
the run's Workload (``insufficient unused quota for nvidia.com/gpu ...``, ``LocalQueue ...
doesn't exist``); Kueue's other events of it (``OwnerReferencesAdded``, which can come a second
after) say nothing about the wait. Pure, like :mod:`tfd.phase`, which asks :func:`queued`
before its other rules of a run that is not running."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from trainer.contract.api import QUEUE_ADMISSION_GATE, QUEUE_WORKLOAD_PREFIX

PENDING = "Pending"
"""The reason of Kueue's event for a Workload it cannot admit yet (its message says why)."""


def _gated(pod: Mapping[str, Any]) -> bool:
    gates = (pod.get("spec") or {}).get("schedulingGates") or []
    return any(g.get("name") == QUEUE_ADMISSION_GATE for g in gates)


def workload_reason(events: Sequence[Mapping[str, Any]], statefulset: str) -> str:
    """The newest ``Pending`` event message of the StatefulSet's Workload; ``""`` when none."""
    prefix = f"{QUEUE_WORKLOAD_PREFIX}{statefulset}-"
    mine = [
        e
        for e in events
        if e.get("reason") == PENDING
        and (e.get("involvedObject") or {}).get("kind") == "Workload"
        and str((e.get("involvedObject") or {}).get("name") or "").startswith(prefix)
    ]
    if not mine:
        return ""
    newest = max(mine, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))
    return str(newest.get("message") or "")


def queued(
    pods: Sequence[Mapping[str, Any]],
    events: Sequence[Mapping[str, Any]],
    statefulset: str,
    desired: int,
) -> str | None:
    """Why the run waits in the queue, ``None`` when no worker is held by it."""
    held = sum(1 for p in pods if _gated(p))
    if not held:
        return None
    why = workload_reason(events, statefulset) or "waiting for the queue to admit the workers"
    return f"{held}/{desired} workers held by the cluster's queue (Kueue): {why}"
