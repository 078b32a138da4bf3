"""The commands: ``status``, ``logs``, ``stop``, ``submit`` and ``runs`` (docs/commands.md)."""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tfd.errors import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_STOPPED,
    RunFailedError,
    StackError,
    TfdError,
    UsageError,
    WaitTimeoutError,
)
from tfd.follow import Follower, parse_duration, print_logs
from tfd.kube import Cluster, wait
from tfd.phase import (
    DONE,
    FAILED,
    STOP_ANNOTATION,
    STOPPED,
    TRAINING,
    RunStatus,
    carried,
    derive,
    failed_on_new_template,
    stop_mark,
    stuck_on_old_template,
    update_revision,
)
from tfd.stack import ROOT, StackHandle
from tfd.view import StatusView, print_json, runs_lines, runs_table, status_lines
from trainer.contract.api import RUN_ID_ANNOTATION

POLL_S = 3.0
PIPE_WIDTH = 200
OUTCOME = {DONE: EXIT_OK, FAILED: EXIT_FAILED, STOPPED: EXIT_STOPPED}


def run(args: argparse.Namespace) -> int:
    commands = {"status": status, "logs": logs, "stop": stop, "submit": submit, "runs": runs}
    return commands[args.command](args)


def _handle(args: argparse.Namespace) -> StackHandle:
    return StackHandle(args.stack, args.project_dir or ROOT)


def _open(args: argparse.Namespace) -> tuple[StackHandle, Cluster]:
    handle = _handle(args)
    target = handle.target()
    return handle, Cluster.connect(handle.access(), target.namespace, target.statefulset)


def _timeout(args: argparse.Namespace) -> float | None:
    return parse_duration(args.timeout, "--timeout") if args.timeout else None


def watch(
    cluster: Cluster,
    view: StatusView,
    until: Callable[[RunStatus], bool],
    timeout_s: float | None,
    deploying: Callable[[], bool] = lambda: False,
) -> RunStatus:
    """Show the run's status every few seconds until ``until(status)``.

    Raises:
        WaitTimeoutError: ``timeout_s`` passed first (the line says where the run was).
    """
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    st: RunStatus | None = None
    while True:
        st = carried(st, derive(cluster.snapshot(deploying=deploying())))
        view.show(st)
        if until(st):
            return st
        if deadline is not None and time.monotonic() >= deadline:
            view.close()
            raise WaitTimeoutError(
                f"--timeout {timeout_s:g} s passed; the run is {st.phase}"
                + (f": {st.reason}" if st.reason else "")
            )
        time.sleep(POLL_S)


def status(args: argparse.Namespace) -> int:
    handle, cluster = _open(args)
    timeout_s = _timeout(args)
    if not args.watch:
        st = derive(cluster.snapshot(deploying=handle.updating()))
        if args.json:
            print_json(st.to_json())
        else:
            print("\n".join(status_lines(st)))
        return EXIT_OK
    view = StatusView(args.json)
    try:
        st = watch(cluster, view, lambda s: s.terminal, timeout_s, handle.updating)
    finally:
        view.close()
    if not args.json:
        print("\n".join(status_lines(st)))
    return OUTCOME[st.phase]


def logs(args: argparse.Namespace) -> int:
    _, cluster = _open(args)
    since_s = parse_duration(args.since, "--since") if args.since else None

    def emit(line: str) -> None:
        print(line, flush=True)

    if not args.follow:
        print_logs(cluster, emit, worker=args.worker, since_s=since_s, as_json=args.json)
        return EXIT_OK
    follower = Follower(cluster, emit, worker=args.worker, since_s=since_s, as_json=args.json)
    try:
        follower.run()
    except KeyboardInterrupt:
        follower.stopped.set()
        raise
    return EXIT_OK


def stop(args: argparse.Namespace) -> int:
    handle, cluster = _open(args)
    sts = cluster.statefulset()
    if sts is None:
        raise UsageError(f"stack {handle.name}: no workers on the cluster; nothing to stop")
    annotations = sts["metadata"].get("annotations") or {}
    run_id = annotations.get(RUN_ID_ANNOTATION)
    before = int(sts["spec"].get("replicas") or 0)
    already = before == 0
    if not already:
        # The mark first (a StatefulSet at zero without one reads as a finished run), with the
        # generation the scale gives the spec; corrected if something else changed it too.
        at = datetime.now(UTC).isoformat(timespec="seconds")
        generation = int(sts["metadata"].get("generation") or 0)
        cluster.patch_annotations({STOP_ANNOTATION: stop_mark(at, generation + 1)})
        cluster.scale(0)
        live = cluster.statefulset() or sts
        if live["metadata"].get("generation") != generation + 1:
            mark = stop_mark(at, int(live["metadata"].get("generation") or 0))
            cluster.patch_annotations({STOP_ANNOTATION: mark})
    doc = {"stack": handle.name, "run_id": run_id, "workers_before": before, "stopped": not already}
    if args.json:
        print_json(doc)
    elif already:
        print(f"run {run_id} on stack {handle.name} has no workers already (done or stopped)")
    else:
        print(
            f"stopped run {run_id} on stack {handle.name}: {before} -> 0 workers; checkpoints "
            f"kept; resume with: tfd submit --stack {handle.name} --run-id {run_id}"
        )
    return EXIT_OK


def list_runs(stack: str | None = None, project_dir: Path | None = None) -> dict[str, Any]:
    """What ``tfd runs --json`` prints, as a dictionary: ``stack``, ``namespace``, ``root``,
    ``read_utc``, ``read_by``, ``current_run_id`` and ``runs`` (the fields of
    ``trainer.run_records.RunRecord`` and ``current``), newest first.

    Raises:
        UsageError: the stack has no worker StatefulSet on the cluster (or see ``StackHandle``).
        ClusterError: the cluster refused or failed a request, or the reader failed.
    """
    from tfd.records import RunsReader

    handle, cluster = _open(argparse.Namespace(stack=stack, project_dir=project_dir))
    sts = cluster.statefulset()
    if sts is None:
        raise UsageError(
            f"stack {handle.name}: no worker StatefulSet on the cluster; the runs are read "
            "through its pod template (tfd submit, or pulumi up, first)"
        )
    doc = RunsReader(cluster.core, cluster.namespace).read(sts, cluster.pods(sts))
    current = (sts["metadata"].get("annotations") or {}).get(RUN_ID_ANNOTATION)
    return {
        "stack": handle.name,
        "namespace": cluster.namespace,
        "root": doc.get("root"),
        "read_utc": doc.get("read_utc"),
        "read_by": doc.get("read_by"),
        "current_run_id": current,
        "runs": [{**r, "current": r.get("run_id") == current} for r in doc["runs"]],
    }


def runs(args: argparse.Namespace) -> int:
    from rich.console import Console

    out = list_runs(args.stack, args.project_dir)
    if args.json:
        print_json(out)
        return EXIT_OK
    console = Console(highlight=False)
    if not console.is_terminal:  # a pipe or a file: whole rows, not cut to 80 columns
        console = Console(highlight=False, width=PIPE_WIDTH)
    if out["runs"]:
        console.print(runs_table(out))
    for line in runs_lines(out):
        console.print(line, markup=False)
    return EXIT_OK


def submit(args: argparse.Namespace) -> int:
    from tfd import settings

    handle = _handle(args)
    timeout_s = _timeout(args)
    defaults = settings.project_values(handle.project_dir)
    # The stack's run: its own runId, else Pulumi.yaml's default (what the program runs).
    current = handle.value("runId") or defaults.get(settings.full_key("runId")) or None
    run_id = args.run_id or (current if args.continue_run else settings.new_run_id())
    if args.continue_run and current is None:
        raise UsageError(f"--continue: stack {handle.name} has no runId set yet")
    changes = settings.parse_sets(args.set)
    changes[settings.full_key("runId")] = run_id
    if args.epochs is not None:
        changes[settings.full_key("epochs")] = str(args.epochs)
    if args.image:
        changes[settings.full_key("imageReference")] = args.image
    raw, secret_keys = settings.merged(defaults, handle.config(), changes)
    cfg = settings.validate(raw, secret_keys, stack=handle.name)  # before anything changes
    view = StatusView(args.json)
    say = _sayer(args.json, view)
    say(
        {
            "event": "submit",
            "stack": handle.name,
            "run_id": run_id,
            "continues": run_id == current,
            "epochs": cfg.training.epochs,
        },
        f"run {run_id} ({'continued' if run_id == current else 'new'}) on stack {handle.name}: "
        f"{cfg.training.epochs} epochs, {cfg.workers.replicas} workers",
    )
    # Only what differs from the stack's own config is written to its settings file, which
    # up reads; it is put back unless the update went through. A run whose new workers fail
    # with their own error keeps them: they are deployed, and the fix is submitted on top.
    saved = handle.saved_settings()
    try:
        handle.set_config({k: v for k, v in changes.items() if _text(handle, k) != raw[k]})
        cluster = Cluster.connect(handle.access(), cfg.namespace, cfg.statefulset_name)
        _up(handle, cluster, view, args.json)
    except RunFailedError:
        raise
    except BaseException as err:
        if not isinstance(err, UpInterrupted) or not err.applied:
            handle.restore(saved)
        raise
    resumed = _resume(cluster, run_id, cfg.workers.replicas)
    if resumed:
        say(
            {"event": "resumed", "run_id": run_id, "workers": cfg.workers.replicas},
            f"resumed stopped run {run_id}: 0 -> {cfg.workers.replicas} workers",
        )
    until = (lambda s: s.terminal) if args.follow else (lambda s: s.terminal or s.phase == TRAINING)
    try:
        st = watch(cluster, view, until, timeout_s)
    finally:
        view.close()
    if not args.json:
        print("\n".join(status_lines(st)))
    return OUTCOME.get(st.phase, EXIT_OK)


def _text(handle: StackHandle, key: str) -> str | None:
    entry = handle.config().get(key)
    return None if entry is None else str(entry.value)


def _sayer(as_json: bool, view: StatusView) -> Callable[[dict[str, Any], str], None]:
    def say(doc: dict[str, Any], text: str) -> None:
        if as_json:
            print_json(doc)
        else:
            view.console.print(text, markup=False)

    return say


def _up(handle: StackHandle, cluster: Cluster, view: StatusView, as_json: bool) -> None:
    """``pulumi up`` in a thread; meanwhile the cluster is read, so a worker that cannot be
    scheduled is reported (with the scheduler's reason) while the engine still waits for it."""
    outcome: dict[str, Any] = {}

    def on_event(event: Any) -> None:
        pre = getattr(event, "resource_pre_event", None)
        if as_json and pre is not None:
            meta = pre.metadata
            op = getattr(meta.op, "value", meta.op)
            print_json({"event": "resource", "op": str(op), "type": meta.type, "urn": meta.urn})

    quiet = threading.Event()

    def on_output(line: str) -> None:
        # The engine's own lines, as pulumi up prints them (not re-wrapped); after tfd has
        # stopped the update, only the noise of its interruption would follow.
        if not as_json and not quiet.is_set():
            print(line.rstrip("\n"), flush=True)

    def target() -> None:
        try:
            outcome["result"] = handle.up(on_output, on_event)
        except TfdError as err:
            outcome["error"] = err

    try:
        before = update_revision(cluster.statefulset())
    except TfdError:
        before = None  # no namespace yet: every template is new
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    try:
        failed = _watch_up(handle, cluster, view, as_json, thread, before, quiet)
    except KeyboardInterrupt:
        # The terminal's Ctrl-C reached the CLI too (one process group): it is cancelling,
        # recording what exists and unlocking the stack. Leaving now would orphan it. What the
        # engine prints meanwhile is the interruption's noise (the program's own traceback).
        quiet.set()
        _sayer(as_json, view)(
            {"event": "interrupted", "waiting_for": "pulumi up"},
            "interrupted: waiting for pulumi up to stop and record what exists (Ctrl-C again "
            "leaves now and can leave the stack locked)",
        )
        thread.join()
        raise UpInterrupted(applied="result" in outcome) from None
    thread.join()
    if failed is not None:
        raise RunFailedError(
            f"{failed} (pulumi up stopped waiting for the workers; fix the setting and submit "
            "again)"
        )
    if "error" in outcome:
        raise outcome["error"]
    if "result" not in outcome:
        raise StackError(f"pulumi up --stack {handle.name}: ended without a result")


class UpInterrupted(KeyboardInterrupt):
    """Ctrl-C during ``submit``'s ``pulumi up``, raised once the CLI has ended; ``applied``:
    the update went through all the same (the settings it ran with are kept)."""

    def __init__(self, applied: bool) -> None:
        super().__init__()
        self.applied = applied


def _watch_up(
    handle: StackHandle,
    cluster: Cluster,
    view: StatusView,
    as_json: bool,
    thread: threading.Thread,
    before: str | None,
    quiet: threading.Event,
) -> str | None:
    """Read the cluster while ``up`` runs in ``thread``; the reason ``up`` was stopped for, if
    it was (a worker of the new template failing with its own error)."""
    seen = ""
    failed: str | None = None
    replaced: set[str] = set()
    say = _sayer(as_json, view)
    while thread.is_alive():
        wait(POLL_S, lambda: not thread.is_alive())
        if not thread.is_alive():
            break
        try:
            snap = cluster.snapshot(deploying=True)
        except TfdError:
            continue  # the namespace may not exist yet
        st = derive(snap)
        if st.phase in ("pending", FAILED) and st.reason != seen:
            seen = st.reason
            view.show(st)
        # A worker of the new template failing with its own error (or an image that never
        # starts) does not heal: the engine would wait for the workers' readiness until its
        # timeout (10 to 30 min). Stop that wait.
        for name in stuck_on_old_template(snap, before):
            if name not in replaced:
                replaced.add(name)
                cluster.delete_pod(name)
                say(
                    {"event": "replaced", "pod": name},
                    f"{name}: crash-looping on the earlier settings; deleted so that it "
                    "starts with the new ones now",
                )
        why = failed_on_new_template(snap, before) if failed is None else None
        if why is not None:
            quiet.set()
            if handle.cancel_update():
                failed = why
            else:
                quiet.clear()
    return failed


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
