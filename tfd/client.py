"""A typed client of one stack's training run: what the ``tfd`` commands do, for Python callers
(a notebook, a scheduler, another tool). The command line (``tfd.commands``) prints what these
methods return and what their callbacks report; docs/commands.md#python shows it in use.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tfd.errors import ClusterError, RunFailedError, UsageError, WaitTimeoutError
from tfd.follow import Follower, print_logs
from tfd.kube import Cluster
from tfd.phase import (
    STOP_ANNOTATION,
    TRAINING,
    RunStatus,
    carried,
    derive,
    stop_mark,
)
from tfd.stack import ROOT, StackHandle
from tfd.up import UpInterrupted, WatchedUp
from trainer.contract.api import RUN_ID_ANNOTATION
from trainer.run_list import RunRecord

if TYPE_CHECKING:  # tfd.settings imports the program's config lazily: tfd starts fast
    from infra.config import StackConfig

POLL_S = 3.0
"""Seconds between two readings of the cluster while waiting."""
DRAIN_MARGIN_S = 60
"""Seconds past the workers' grace period that a queued run's stop may take (the kubelet's
own teardown after SIGKILL) before ``submit`` gives up waiting."""

OnStatus = Callable[[RunStatus], None]
"""Called with each reading while a method waits."""
OnNotice = Callable[[dict[str, Any], str], None]
"""Called with what happened (a JSON-ready document, and a line for people; ``""`` when it is
a detail only a machine reader wants, such as each resource ``pulumi up`` touches)."""


def _ignore(*_: Any) -> None:
    return None


def terminal(st: RunStatus) -> bool:
    """Done, failed or stopped: the default end of :meth:`TfdClient.watch`."""
    return st.terminal


@dataclass(frozen=True)
class StopResult:
    """What :meth:`TfdClient.stop` did; ``stopped`` is False when there were no workers."""

    stack: str
    run_id: str | None
    workers_before: int
    stopped: bool

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class RunEntry(RunRecord):
    """One run of the stack, as its records say (``trainer.run_list.RunRecord``), and
    whether it is the stack's current run."""

    current: bool = False


@dataclass(frozen=True)
class RunList:
    """Every run of the stack, newest first, read from the run directories by a worker pod."""

    stack: str
    namespace: str
    root: str | None
    read_utc: str | None
    read_by: str | None
    current_run_id: str | None
    runs: list[RunEntry] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class SubmitResult:
    """A submitted run: its id, whether it continued the stack's run, and where it was when
    :meth:`TfdClient.submit` stopped waiting (training, or ended with ``follow``)."""

    stack: str
    run_id: str
    continued: bool
    epochs: int
    workers: int
    resumed: bool
    status: RunStatus


def watch(
    cluster: Cluster,
    until: Callable[[RunStatus], bool] = terminal,
    timeout_s: float | None = None,
    on_status: OnStatus = _ignore,
    deploying: Callable[[], bool] = lambda: False,
) -> RunStatus:
    """Read the run's status every :data:`POLL_S` seconds until ``until(status)``.

    Raises:
        WaitTimeoutError: ``timeout_s`` passed first (the line says where the run was).
    """
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    st: RunStatus | None = None
    while True:
        st = carried(st, derive(cluster.snapshot(deploying=deploying())))
        on_status(st)
        if until(st):
            return st
        if deadline is not None and time.monotonic() >= deadline:
            raise WaitTimeoutError(
                f"--timeout {timeout_s:g} s passed; the run is {st.phase}"
                + (f": {st.reason}" if st.reason else "")
            )
        time.sleep(POLL_S)


class TfdClient:
    """One stack's run: ``stack`` is the Pulumi stack (``None``: the selected one) of the
    project in ``project_dir`` (``None``: this checkout). Errors are ``tfd.errors.TfdError``
    subclasses, each one line with an exit code."""

    def __init__(self, stack: str | None = None, project_dir: Path | None = None) -> None:
        self.handle = StackHandle(stack, project_dir or ROOT)

    def cluster(self) -> Cluster:
        """The stack's cluster, namespace and worker StatefulSet, from the stack's outputs."""
        target = self.handle.target()
        return Cluster.connect(self.handle.access(), target.namespace, target.statefulset)

    def status(self) -> RunStatus:
        """Where the run is now (``tfd.phase``: the rules)."""
        return derive(self.cluster().snapshot(deploying=self.handle.updating()))

    def watch(
        self,
        until: Callable[[RunStatus], bool] = terminal,
        timeout_s: float | None = None,
        on_status: OnStatus = _ignore,
    ) -> RunStatus:
        """Wait until ``until(status)`` (default: the run ended); the last reading."""
        return watch(self.cluster(), until, timeout_s, on_status, self.handle.updating)

    def logs(
        self,
        emit: Callable[[str], None],
        worker: int | None = None,
        since_s: float | None = None,
        as_json: bool = False,
        follow: bool = False,
    ) -> None:
        """The workers' lines to ``emit``, oldest first; ``follow`` goes on across container
        restarts and recreated pods until interrupted."""
        cluster = self.cluster()
        if not follow:
            print_logs(cluster, emit, worker=worker, since_s=since_s, as_json=as_json)
            return
        follower = Follower(cluster, emit, worker=worker, since_s=since_s, as_json=as_json)
        try:
            follower.run()
        except KeyboardInterrupt:
            follower.stopped.set()
            raise

    def stop(self) -> StopResult:
        """Scale the run to zero workers, marked as stopped (checkpoints are kept; submitting
        the run again resumes it).

        Raises:
            UsageError: the stack has no workers on the cluster.
        """
        cluster = self.cluster()
        sts = cluster.statefulset()
        if sts is None:
            raise UsageError(
                f"stack {self.handle.name}: no workers on the cluster; nothing to stop"
            )
        run_id = (sts["metadata"].get("annotations") or {}).get(RUN_ID_ANNOTATION)
        before = _stop(cluster, sts)
        return StopResult(self.handle.name, run_id, before, stopped=before > 0)

    def runs(self) -> RunList:
        """Every run of the stack from its records (read through a worker pod's image).

        Raises:
            UsageError: the stack has no worker StatefulSet on the cluster.
            ClusterError: the cluster refused or failed a request, or the reader failed.
        """
        from tfd.runs_reader import RunsReader

        cluster = self.cluster()
        sts = cluster.statefulset()
        if sts is None:
            raise UsageError(
                f"stack {self.handle.name}: no worker StatefulSet on the cluster; the runs are "
                "read through its pod template (tfd submit, or pulumi up, first)"
            )
        doc = RunsReader(cluster.core, cluster.namespace).read(sts, cluster.pods(sts))
        current = (sts["metadata"].get("annotations") or {}).get(RUN_ID_ANNOTATION)
        try:
            entries = [RunEntry(**r, current=r.get("run_id") == current) for r in doc["runs"]]
        except TypeError as err:  # the image's trainer writes other fields than this tfd reads
            raise ClusterError(
                f"the run records read by {doc.get('read_by')} are not of this tfd's version "
                f"({err}): use the tfd of the image's commit"
            ) from None
        return RunList(
            self.handle.name, cluster.namespace, doc.get("root"), doc.get("read_utc"),
            doc.get("read_by"), current, entries,
        )  # fmt: skip

    def submit(
        self,
        *,
        run_id: str | None = None,
        continue_run: bool = False,
        epochs: int | None = None,
        image: str | None = None,
        settings: Mapping[str, str | list[str]] | None = None,
        follow: bool = False,
        timeout_s: float | None = None,
        on_status: OnStatus = _ignore,
        on_notice: OnNotice = _ignore,
        on_output: Callable[[str], None] = _ignore,
    ) -> SubmitResult:
        """Set the run's settings on the stack, ``pulumi up``, and wait until the run trains
        (``follow``: until it ends). ``run_id`` names the run (default: a new one;
        ``continue_run``: the stack's current one); ``settings`` are other stack settings by
        their short or full key (``{"batchSize": "64"}``; a list for an array key). The
        settings are checked before anything changes; the stack's settings file is put back
        unless the update went through.
        ``on_output`` gets the engine's lines as ``pulumi up`` prints them.

        Raises:
            UsageError: a setting breaks a rule (one line naming the key, the rule, the value).
            RunFailedError: the new workers failed with their own error (``pulumi up`` was
                stopped; the settings stay: they are deployed and the fix goes on top).
            UpInterrupted: Ctrl-C; raised once ``pulumi up`` has stopped.
        """
        from tfd import settings as stack_settings

        handle = self.handle
        defaults = stack_settings.project_values(handle.project_dir)
        # The stack's run: its own runId, else Pulumi.yaml's default (what the program runs).
        current = handle.value("runId") or defaults.get(stack_settings.full_key("runId")) or None
        if continue_run and current is None:
            raise UsageError(f"--continue: stack {handle.name} has no runId set yet")
        run_id = run_id or (current if continue_run else stack_settings.new_run_id())
        changes = stack_settings.parse_sets(
            f"{k}={json.dumps(v) if isinstance(v, list) else v}"
            for k, v in (settings or {}).items()
        )
        changes[stack_settings.full_key("runId")] = run_id
        if epochs is not None:
            changes[stack_settings.full_key("epochs")] = str(epochs)
        if image:
            changes[stack_settings.full_key("imageReference")] = image
        before, _ = stack_settings.merged(defaults, handle.config(), {})
        raw, secret_keys = stack_settings.merged(defaults, handle.config(), changes)
        cfg = stack_settings.validate(raw, secret_keys, stack=handle.name)
        continued = run_id == current
        on_notice(
            {"event": "submit", "stack": handle.name, "run_id": run_id, "continues": continued,
             "epochs": cfg.training.epochs},
            f"run {run_id} ({'continued' if continued else 'new'}) on stack {handle.name}: "
            f"{cfg.training.epochs} epochs, {cfg.workers.replicas} workers",
        )  # fmt: skip
        cluster = Cluster.connect(handle.access(), cfg.namespace, cfg.statefulset_name)
        if cfg.queue.enabled and continued and any(before.get(k) != raw[k] for k in changes):
            _through_zero(cluster, cfg, timeout_s, on_notice)
        # Only what differs from the stack's own config is written to its settings file,
        # which up reads; it is put back unless the update went through. A run whose new
        # workers fail with their own error keeps them: deployed, the fix goes on top.
        saved = handle.saved_settings()
        try:
            handle.set_config({k: v for k, v in changes.items() if self._text(k) != raw[k]})
            WatchedUp(handle, cluster, on_status, on_notice, on_output).run()
        except RunFailedError:
            raise
        except BaseException as err:
            if not isinstance(err, UpInterrupted) or not err.applied:
                handle.restore(saved)
            raise
        resumed = _resume(cluster, run_id, cfg.workers.replicas)
        if resumed:
            on_notice(
                {"event": "resumed", "run_id": run_id, "workers": cfg.workers.replicas},
                f"resumed stopped run {run_id}: 0 -> {cfg.workers.replicas} workers",
            )
        until = terminal if follow else (lambda s: s.terminal or s.phase == TRAINING)
        st = watch(cluster, until, timeout_s, on_status)
        return SubmitResult(
            handle.name, run_id, continued, cfg.training.epochs, cfg.workers.replicas, resumed, st
        )

    def _text(self, key: str) -> str | None:
        entry = self.handle.config().get(key)
        return None if entry is None else str(entry.value)


def _stop(cluster: Cluster, sts: Mapping[str, Any]) -> int:
    """Scale ``sts`` to zero, marked as stopped; the workers it had (0: nothing done)."""
    before = int(sts["spec"].get("replicas") or 0)
    if before:
        # The mark first (a StatefulSet at zero without one reads as a finished run), with
        # the generation the scale gives the spec; corrected if something else changed it.
        at = datetime.now(UTC).isoformat(timespec="seconds")
        generation = int(sts["metadata"].get("generation") or 0)
        cluster.patch_annotations({STOP_ANNOTATION: stop_mark(at, generation + 1)})
        cluster.scale(0)
        live = cluster.statefulset() or sts
        if live["metadata"].get("generation") != generation + 1:
            mark = stop_mark(at, int(live["metadata"].get("generation") or 0))
            cluster.patch_annotations({STOP_ANNOTATION: mark})
    return before


def _through_zero(
    cluster: Cluster, cfg: StackConfig, timeout_s: float | None, on_notice: OnNotice
) -> None:
    """Stop a queued run's workers and wait until they are gone, before ``pulumi up`` changes
    them: Kueue admits a StatefulSet's pods only as one group, and refuses a new count of a
    running one (docs/queue.md); from zero, the new workers are admitted as a new group.

    Raises:
        WaitTimeoutError: the workers were still terminating after their grace period (and
            :data:`DRAIN_MARGIN_S`), or ``timeout_s``; the run stays stopped.
    """
    sts = cluster.statefulset()
    if sts is None:
        return
    before = _stop(cluster, sts)
    if not before and not cluster.pods(sts):
        return
    stopping = (
        f"stopping the run's {before} workers"
        if before
        else "waiting for the stopped run's workers to go"
    )
    on_notice(
        {"event": "through-zero", "queue": cfg.queue.name, "workers_before": before,
         "workers": cfg.workers.replicas},
        f"queued stack (queueName {cfg.queue.name}): {stopping} (each checkpoints on SIGTERM), "
        f"then its {cfg.workers.replicas} workers wait to be admitted as one group",
    )  # fmt: skip
    limit = cfg.workers.termination_grace_seconds + DRAIN_MARGIN_S
    if timeout_s is not None:
        limit = min(limit, timeout_s)
    started = time.monotonic()
    while left := cluster.pods(sts):
        if time.monotonic() - started >= limit:
            raise WaitTimeoutError(
                f"{len(left)} workers still terminating after {limit:g} s; the run is stopped "
                f"and its settings unchanged (tfd submit --continue again once they are gone)"
            )
        time.sleep(POLL_S)
    on_notice(
        {"event": "drained", "workers_before": before,
         "seconds": round(time.monotonic() - started, 1)},
        f"{before if before else 'the stopped run'} -> 0 workers in "
        f"{time.monotonic() - started:.1f} s",
    )  # fmt: skip


def _resume(cluster: Cluster, run_id: str, replicas: int) -> bool:
    """A run stopped by ``tfd stop`` and submitted again: drop the mark, bring the workers back
    (``pulumi up`` leaves a stopped StatefulSet at zero while the run's target is unchanged)."""
    sts = cluster.statefulset()
    annotations = (sts or {}).get("metadata", {}).get("annotations") or {}
    if sts is None or STOP_ANNOTATION not in annotations:
        return False
    if annotations.get(RUN_ID_ANNOTATION) != run_id:
        return False
    cluster.patch_annotations({STOP_ANNOTATION: None})
    if int(sts["spec"].get("replicas") or 0) == 0:
        cluster.scale(replicas)
    return True
