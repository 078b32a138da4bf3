"""``pulumi up`` of a submit, with the cluster read while it runs: a worker that cannot be
scheduled, or that the cluster's queue holds, is reported with the scheduler's or the queue's
reason while the engine still waits for it, and a worker of the new template failing with its own
error stops the update (it would not heal).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from tfd.errors import RunFailedError, StackError, TfdError
from tfd.kube import Cluster, wait
from tfd.phase import (
    FAILED,
    PENDING,
    QUEUED,
    RunStatus,
    derive,
    failed_on_new_template,
    stuck_on_old_template,
    update_revision,
)
from tfd.stack import StackHandle

POLL_S = 3.0
"""Seconds between two readings of the cluster while ``up`` runs."""


class UpInterrupted(KeyboardInterrupt):
    """Ctrl-C during ``submit``'s ``pulumi up``, raised once the CLI has ended; ``applied``:
    the update went through all the same (the settings it ran with are kept)."""

    def __init__(self, applied: bool) -> None:
        super().__init__()
        self.applied = applied


class WatchedUp:
    """``pulumi up`` in a thread; meanwhile the cluster is read, so a worker that cannot be
    scheduled or is held by the queue is reported (with the scheduler's or Kueue's reason)
    while the engine still waits for it, and a worker of the new template failing with its own
    error stops the update."""

    def __init__(
        self,
        handle: StackHandle,
        cluster: Cluster,
        on_status: Callable[[RunStatus], None],
        on_notice: Callable[[dict[str, Any], str], None],
        on_output: Callable[[str], None],
    ) -> None:
        self.handle, self.cluster = handle, cluster
        self.on_status, self.on_notice, self.on_output = on_status, on_notice, on_output
        self.outcome: dict[str, Any] = {}
        # After tfd has stopped the update, only the noise of its interruption would follow.
        self.quiet = threading.Event()

    def _on_event(self, event: Any) -> None:
        pre = getattr(event, "resource_pre_event", None)
        if pre is not None:
            meta = pre.metadata
            op = getattr(meta.op, "value", meta.op)
            self.on_notice(
                {"event": "resource", "op": str(op), "type": meta.type, "urn": meta.urn}, ""
            )

    def _line(self, line: str) -> None:
        if not self.quiet.is_set():
            self.on_output(line.rstrip("\n"))

    def _target(self) -> None:
        try:
            self.outcome["result"] = self.handle.up(self._line, self._on_event)
        except TfdError as err:
            self.outcome["error"] = err

    def run(self) -> None:
        try:
            before = update_revision(self.cluster.statefulset())
        except TfdError:
            before = None  # no namespace yet: every template is new
        thread = threading.Thread(target=self._target, daemon=True)
        thread.start()
        try:
            failed = self._watch(thread, before)
        except KeyboardInterrupt:
            # The terminal's Ctrl-C reached the CLI too (one process group): it is cancelling,
            # recording what exists and unlocking the stack. Leaving now would orphan it.
            self.quiet.set()
            self.on_notice(
                {"event": "interrupted", "waiting_for": "pulumi up"},
                "interrupted: waiting for pulumi up to stop and record what exists (Ctrl-C "
                "again leaves now and can leave the stack locked)",
            )
            thread.join()
            raise UpInterrupted(applied="result" in self.outcome) from None
        thread.join()
        if failed is not None:
            raise RunFailedError(
                f"{failed} (pulumi up stopped waiting for the workers; fix the setting and "
                "submit again)"
            )
        if "error" in self.outcome:
            raise self.outcome["error"]
        if "result" not in self.outcome:
            raise StackError(f"pulumi up --stack {self.handle.name}: ended without a result")

    def _watch(self, thread: threading.Thread, before: str | None) -> str | None:
        """Read the cluster while ``up`` runs; the reason ``up`` was stopped for, if it was."""
        seen = ""
        failed: str | None = None
        replaced: set[str] = set()
        while thread.is_alive():
            wait(POLL_S, lambda: not thread.is_alive())
            if not thread.is_alive():
                break
            try:
                snap = self.cluster.snapshot(deploying=True)
            except TfdError:
                continue  # the namespace may not exist yet
            st = derive(snap)
            if st.phase in (PENDING, QUEUED, FAILED) and st.reason != seen:
                seen = st.reason
                self.on_status(st)
            # A worker of the new template failing with its own error (or an image that never
            # starts) does not heal: the engine would wait for the workers' readiness until
            # its timeout (10 to 30 min). Stop that wait.
            for name in stuck_on_old_template(snap, before):
                if name not in replaced:
                    replaced.add(name)
                    self.cluster.delete_pod(name)
                    self.on_notice(
                        {"event": "replaced", "pod": name},
                        f"{name}: crash-looping on the earlier settings; deleted so that it "
                        "starts with the new ones now",
                    )
            why = failed_on_new_template(snap, before) if failed is None else None
            if why is not None:
                self.quiet.set()
                if self.handle.cancel_update():
                    failed = why
                else:
                    self.quiet.clear()
        return failed
