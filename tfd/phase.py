"""Where a run is, decided from what the cluster shows: the StatefulSet, its pods, their
events and the workers' log lines. Pure: the inputs are plain objects (as ``kubectl get -o
json`` prints them), so every rule is tested against recorded fixtures (tests/tfd).

The decision, first match wins (docs/commands.md lists it):

1. no StatefulSet: ``deploying`` while a ``pulumi up`` runs, else ``absent``;
2. zero workers asked for: ``stopped`` when ``tfd stop`` marked it, else ``done`` (the chief
   scales its StatefulSet to zero when the run is finished, ``onDone: scale-to-zero``);
3. ``queued``: the cluster's queue (Kueue) holds the workers, with its reason (:mod:`tfd.queue`);
4. ``failed``: a worker's container ended with a trainer error (exit 1-9), out of memory, or
   cannot start (an image that is never pulled, a bad container config), with the cause, and
   the first worker not scheduled too, if any (the scheduler's reason);
5. ``pending``: a worker not scheduled (the scheduler's reason, e.g. ``0/2 nodes are
   available: 1 Insufficient nvidia.com/gpu``), or fewer pods than asked and the controller's
   reason (a quota), or a container not started yet (pulling its image);
6. ``deploying``: a ``pulumi up`` runs;
7. ``done``: a worker logged the end of the run (``onDone: idle`` keeps the pods);
8. ``restarting``: a worker's container restarted and is not back yet, or its last lines are a
   stop, a supervisor restart or a rescale (after a lost peer, a rollout, a resize);
9. ``resizing``: the StatefulSet's pod count differs from the count asked for, after training;
10. ``forming``: not every worker ready yet, or no worker trains yet;
11. ``training``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from typing import Any

from tfd.events import WorkerLog
from tfd.queue import queued
from trainer.contract.api import RUN_ID_ANNOTATION
from trainer.contract.events import NOTABLE_EVENTS, RESTART_EVENTS, Event
from trainer.errors import FAILURE_EXIT_CODES

DEPLOYING = "deploying"
ABSENT = "absent"
PENDING = "pending"
QUEUED = "queued"
FORMING = "forming"
TRAINING = "training"
RESTARTING = "restarting"
RESIZING = "resizing"
DONE = "done"
FAILED = "failed"
STOPPED = "stopped"
TERMINAL = frozenset({DONE, FAILED, STOPPED})

STOP_ANNOTATION = "tf-distributed.io/stopped"
"""Set by ``tfd stop`` on the StatefulSet (the UTC time); ``tfd submit`` of the run removes it."""
NEVER_STARTS = frozenset(
    {"ErrImageNeverPull", "InvalidImageName", "CreateContainerConfigError", "CreateContainerError"}
)
"""Container waiting reasons that do not pass by waiting."""
LAST_EVENTS = 5


@dataclass
class Snapshot:
    """What the cluster shows of one run at one time."""

    statefulset: Mapping[str, Any] | None
    pods: Sequence[Mapping[str, Any]] = ()
    events: Sequence[Mapping[str, Any]] = ()
    logs: Mapping[int, WorkerLog] = field(default_factory=dict)
    deploying: bool = False
    now: float = field(default_factory=time.time)
    unreadable: Mapping[int, str] = field(default_factory=dict)
    """Workers whose log the API server could not read from their node, and why."""


@dataclass
class RunStatus:
    """The answer of ``tfd status`` (``--json`` prints it as it is)."""

    phase: str
    reason: str = ""
    run_id: str | None = None
    workers_ready: int = 0
    workers_desired: int = 0
    restarts: int = 0
    step: int | None = None
    total_steps: int | None = None
    epoch: int | None = None
    loss: float | None = None
    accuracy: float | None = None
    examples_per_sec: float | None = None
    eta_s: float | None = None
    events: list[str] = field(default_factory=list)

    @property
    def terminal(self) -> bool:
        return self.phase in TERMINAL

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _get(obj: Mapping[str, Any] | None, *path: str) -> Any:
    for key in path:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def ordinal(pod: Mapping[str, Any]) -> int:
    """The worker number of a StatefulSet pod (``<sts>-<n>``); -1 when it has none."""
    tail = str(_get(pod, "metadata", "name") or "").rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else -1


def _statuses(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list(_get(pod, "status", "containerStatuses") or [])


def stop_mark(at: str, generation: int) -> str:
    """The value of :data:`STOP_ANNOTATION`: when, and the StatefulSet ``metadata.generation``
    the scale to zero gave it."""
    return json.dumps({"at": at, "generation": generation}, separators=(",", ":"))


def stopped_at(sts: Mapping[str, Any]) -> str | None:
    """When ``tfd stop`` stopped the run; ``None`` without a mark, or with a stale one: any
    later change of the spec (``pulumi up`` bringing the workers back for a new target, the
    chief's scale to zero when the run finished) moves the generation past the mark's."""
    text = (_get(sts, "metadata", "annotations") or {}).get(STOP_ANNOTATION)
    if text is None:
        return None
    try:
        mark = json.loads(text)
        at, generation = str(mark["at"]), int(mark["generation"])
    except (ValueError, TypeError, KeyError):
        return str(text)  # not ours to judge: a mark set by hand
    return at if generation == _get(sts, "metadata", "generation") else None


def _failure(pods: Sequence[Mapping[str, Any]], logs: Mapping[int, WorkerLog]) -> str | None:
    for pod in sorted(pods, key=ordinal):
        n = ordinal(pod)
        for st in _statuses(pod):
            waiting = _get(st, "state", "waiting") or {}
            if waiting.get("reason") in NEVER_STARTS:
                return f"worker {n}: {waiting['reason']}: {waiting.get('message', '')}".strip()
            ended = _get(st, "state", "terminated") or _get(st, "lastState", "terminated")
            if not ended or ("running" in (st.get("state") or {}) and st.get("ready")):
                continue
            code = ended.get("exitCode")
            if ended.get("reason") == "OOMKilled":
                return f"worker {n}: out of memory (OOMKilled): raise memoryLimit"
            if code in FAILURE_EXIT_CODES:
                cause = logs[n].error() if n in logs else None
                return f"worker {n} exited {code}: {cause or ended.get('message') or 'error'}"
    return None


def _not_scheduled(pod: Mapping[str, Any], events: Sequence[Mapping[str, Any]]) -> str | None:
    """Why the scheduler has not placed ``pod`` (its own words), ``None`` when it has."""
    if _get(pod, "status", "phase") != "Pending":
        return None
    for cond in _get(pod, "status", "conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            name = _get(pod, "metadata", "name")
            why = cond.get("message") or _last_event(events, name, "FailedScheduling")
            return f"worker {ordinal(pod)} not scheduled: {why or cond.get('reason')}"
    return None


def _unscheduled(
    pods: Sequence[Mapping[str, Any]], events: Sequence[Mapping[str, Any]]
) -> str | None:
    """The first worker the scheduler cannot place, with its reason: said beside a failure,
    which it outlives (fixing the failed workers leaves it Pending)."""
    return next((w for p in sorted(pods, key=ordinal) if (w := _not_scheduled(p, events))), None)


def _pending(
    pods: Sequence[Mapping[str, Any]], events: Sequence[Mapping[str, Any]], desired: int, sts: str
) -> str | None:
    for pod in sorted(pods, key=ordinal):
        if _get(pod, "status", "phase") != "Pending":
            continue
        name = _get(pod, "metadata", "name")
        if unplaced := _not_scheduled(pod, events):
            return unplaced
        for st in _statuses(pod):
            waiting = _get(st, "state", "waiting") or {}
            if waiting:
                detail = f": {waiting['message']}" if waiting.get("message") else ""
                return f"worker {ordinal(pod)} starting: {waiting.get('reason')}{detail}"
        if not _statuses(pod):
            # Events of this pod, not of the earlier pod of the same name (its Killing).
            uid = _get(pod, "metadata", "uid")
            why = _last_event(events, name, uid=uid) or "scheduled"
            return f"worker {ordinal(pod)} starting: {why}"
    if len(pods) < desired:
        why = _last_event(events, sts, "FailedCreate")
        if why:
            return f"{len(pods)}/{desired} worker pods exist: {why}"
    return None


def _when(event: Mapping[str, Any]) -> float:
    for key in ("lastTimestamp", "eventTime", "firstTimestamp"):
        text = event.get(key) or _get(event, "metadata", "creationTimestamp")
        if isinstance(text, str) and text:
            try:
                return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
            except ValueError:
                continue
    return 0.0


def _last_event(
    events: Sequence[Mapping[str, Any]], name: str | None, reason: str = "", uid: str | None = None
) -> str:
    """The newest event message of the object ``name`` (of ``reason``, of the object ``uid``
    when both the event and ``uid`` name one); ``""`` when there is none."""
    mine = [
        e
        for e in events
        if _get(e, "involvedObject", "name") == name
        and (not reason or e.get("reason") == reason)
        and (not uid or _get(e, "involvedObject", "uid") in (None, uid))
    ]
    return str(max(mine, key=_when).get("message") or "") if mine else ""


def _restart(pods: Sequence[Mapping[str, Any]], logs: Mapping[int, WorkerLog]) -> str | None:
    for pod in sorted(pods, key=ordinal):
        n = ordinal(pod)
        for st in _statuses(pod):
            last = _get(st, "lastState", "terminated")
            if last and not st.get("ready"):
                return (
                    f"worker {n}'s container exited {last.get('exitCode')} "
                    f"({last.get('reason') or 'signal'}); restarting from the last checkpoint"
                )
    for n, log in sorted(logs.items()):
        if log.state() == RESTARTING:
            record = log.last(RESTART_EVENTS) or {}
            why = record.get("reason") or (f"exit {record['code']}" if "code" in record else "")
            return f"worker {n}: {record.get('event')}{f' ({why})' if why else ''}"
    return None


def _progress(logs: Mapping[int, WorkerLog]) -> dict[str, Any]:
    """The newest ``progress`` record (the chief's first), with the run's global batch."""
    ordered = sorted(logs.items(), key=lambda kv: kv[0] != 0)
    out: dict[str, Any] = {}
    for _, log in ordered:
        record = log.last((Event.PROGRESS,))
        if record is not None and (not out or record.get("ts", 0) > out.get("ts", 0) + 60):
            out = dict(record)
        start = log.last((Event.START,))
        if start is not None and "global_batch" in start:
            out.setdefault("global_batch", start["global_batch"])
            out.setdefault("start_total_steps", start.get("total_steps"))
    if "step" not in out:
        # Training, before the first progress line: the first step's record knows the step
        # (examples/s and the ETA come with the first progress line).
        firsts = [r for _, log in ordered if (r := log.last((Event.FIRST_STEP,))) is not None]
        if firsts:
            out["step"] = firsts[0].get("step")
    return out


def _eta(p: Mapping[str, Any]) -> float | None:
    step, total, rate, batch = (
        p.get(k) for k in ("step", "total_steps", "examples_per_sec", "global_batch")
    )
    if not all(isinstance(v, int | float) for v in (step, total, rate, batch)) or rate <= 0:
        return None
    return round(max(total - step, 0) * batch / rate, 1)


def _recent(snap: Snapshot, sts: str) -> list[str]:
    items: list[tuple[float, str]] = []
    for e in snap.events:
        name = str(_get(e, "involvedObject", "name") or "")
        if name == sts or name.startswith(f"{sts}-"):
            items.append((_when(e), f"{name}: {e.get('reason')}: {e.get('message', '')}"))
    for n, log in snap.logs.items():
        for r in log.records:
            if r["event"] in NOTABLE_EVENTS:
                detail = r.get("reason") or r.get("message") or ""
                if not detail and "step" in r:
                    detail = f"step {r['step']}"
                elif not detail and "start_step" in r:
                    detail = f"from step {r['start_step']}"
                items.append((float(r.get("ts", 0)), f"worker {n}: {r['event']} {detail}".strip()))
    for n, why in snap.unreadable.items():
        items.append((snap.now, f"worker {n}: log unreadable now: {why}"))
    return [text for _, text in sorted(items)[-LAST_EVENTS:]]


REVISION_LABEL = "controller-revision-hash"
"""The StatefulSet controller's label naming the template revision a pod was made from."""


def update_revision(sts: Mapping[str, Any] | None) -> str | None:
    """The StatefulSet's ``status.updateRevision`` (its current template); ``None`` without one."""
    return _get(sts, "status", "updateRevision") or None


def failed_on_new_template(snap: Snapshot, before: str | None) -> str | None:
    """During ``up``: why a worker of the template this ``up`` wrote has failed (``None`` when
    none has). The new template is the StatefulSet's update revision when it differs from
    ``before``, the one ``up`` began with. Workers of the earlier template go on failing as they
    did until they are replaced (``OnDelete``: an outdated worker deletes its own pod at its
    next start, after the kubelet's crash-loop back-off), so their failures say nothing of the
    new settings; an ``up`` that writes no new template is never judged here."""
    rev = update_revision(snap.statefulset)
    if rev is None or rev == before:
        return None
    fresh = [
        p for p in snap.pods if (_get(p, "metadata", "labels") or {}).get(REVISION_LABEL) == rev
    ]
    return _failure(fresh, snap.logs)


def stuck_on_old_template(snap: Snapshot, before: str | None) -> list[str]:
    """During ``up``: the worker pods of an earlier template than the one this ``up`` wrote that
    crash-loop (``CrashLoopBackOff``), by name. Such a worker replaces itself only at its next
    start, after the kubelet's back-off (up to 5 minutes); it trains nothing meanwhile, so
    deleting it applies the new settings at once."""
    rev = update_revision(snap.statefulset)
    if rev is None or rev == before:
        return []
    return [
        str(_get(p, "metadata", "name"))
        for p in snap.pods
        if (_get(p, "metadata", "labels") or {}).get(REVISION_LABEL) not in (None, rev)
        and any(_get(st, "state", "waiting", "reason") == "CrashLoopBackOff" for st in _statuses(p))
    ]


CARRIED = ("step", "total_steps", "epoch", "loss", "accuracy")
"""What a run that has ended keeps from its last reading: the workers that logged it are gone."""


def carried(previous: RunStatus | None, current: RunStatus) -> RunStatus:
    """``current`` with what earlier readings of the same run showed (``--watch``, ``submit``).

    The restarts never fall: a pod the controller recreates counts its container restarts from
    0 again, and a run at zero workers has no pods to count (so after a pod is recreated the
    figure is a lower bound). A run that has ended (done, failed, stopped) keeps the progress
    figures of its last reading that had them; ``tfd runs`` reads its final step from the run's
    record."""
    if previous is None or previous.run_id != current.run_id:
        return current
    out = replace(current, restarts=max(previous.restarts, current.restarts))
    if current.terminal:
        for name in CARRIED:
            if getattr(out, name) is None:
                setattr(out, name, getattr(previous, name))
    return out


def derive(snap: Snapshot) -> RunStatus:
    """The run's status from one snapshot (module docstring: the rules, in order)."""
    sts = snap.statefulset
    if sts is None:
        if snap.deploying:
            return RunStatus(DEPLOYING, "pulumi up is creating the workers")
        return RunStatus(ABSENT, "no worker StatefulSet on the cluster: run tfd submit")
    name = str(_get(sts, "metadata", "name") or "")
    annotations = _get(sts, "metadata", "annotations") or {}
    desired = int(_get(sts, "spec", "replicas") or 0)
    pods = [p for p in snap.pods if not _get(p, "metadata", "deletionTimestamp")]
    progress = _progress(snap.logs)
    status = RunStatus(
        phase=FORMING,
        run_id=annotations.get(RUN_ID_ANNOTATION),
        workers_ready=int(_get(sts, "status", "readyReplicas") or 0),
        workers_desired=desired,
        restarts=sum(int(st.get("restartCount") or 0) for p in pods for st in _statuses(p))
        + sum(log.supervisor_restarts() for log in snap.logs.values()),
        step=progress.get("step"),
        total_steps=progress.get("total_steps") or progress.get("start_total_steps"),
        epoch=progress.get("epoch"),
        loss=progress.get("loss"),
        accuracy=progress.get("accuracy"),
        examples_per_sec=progress.get("examples_per_sec"),
        eta_s=_eta(progress),
        events=_recent(snap, name),
    )
    states = {n: log.state() for n, log in snap.logs.items()}
    trained = any(s in (TRAINING, RESTARTING) for s in states.values()) or status.step is not None
    if desired == 0:
        at = stopped_at(sts)
        if at is not None:
            status.phase, status.reason = (
                STOPPED,
                (
                    f"stopped by tfd stop at {at}; checkpoints kept "
                    f"(tfd submit --run-id {status.run_id} resumes)"
                ),
            )
        else:
            status.phase = DONE
            status.reason = "the run finished and scaled its workers to zero"
        return status
    held = queued(pods, snap.events, name, desired)
    if held:
        status.phase, status.reason = QUEUED, held
        return status
    failure = _failure(pods, snap.logs)
    pending = None if failure else _pending(pods, snap.events, desired, name)
    restart = _restart(pods, snap.logs)
    observed = int(_get(sts, "status", "replicas") or 0)
    if failure:
        unplaced = _unscheduled(pods, snap.events)
        status.phase, status.reason = FAILED, failure + (f"; also {unplaced}" if unplaced else "")
    elif pending:
        status.phase, status.reason = PENDING, pending
    elif snap.deploying:
        status.phase, status.reason = DEPLOYING, "pulumi up in progress"
    elif DONE in states.values():
        status.phase, status.reason = DONE, "the run finished; the workers stay up (onDone idle)"
    elif restart:
        status.phase, status.reason = RESTARTING, restart
    elif trained and (observed != desired or len(pods) != desired):
        status.phase = RESIZING
        status.reason = f"{len(pods)} -> {desired} workers: checkpoint, then restart together"
    elif status.workers_ready < desired:
        status.reason = f"{status.workers_ready}/{desired} workers ready"
    elif states and all(s == TRAINING for s in states.values()) and len(states) >= desired:
        status.phase = TRAINING
        if status.eta_s is None:
            status.reason = (
                "first steps taken; examples/s and ETA come with the first progress line"
            )
    elif snap.unreadable:
        workers = ", ".join(str(n) for n in sorted(snap.unreadable))
        status.reason = f"workers ready; the log of worker {workers} cannot be read now"
    else:
        status.reason = "workers ready; no training step logged yet"
    return status
