"""``tfd logs``: every worker's lines, prefixed with the worker, in time order; with ``-f``
followed across container restarts and recreated pods (each worker's stream is reopened on
the pod of that name, from just after the last line printed)."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from datetime import datetime
from typing import Any

from tfd.errors import NodeUnreachableError, TfdError, UsageError
from tfd.kube import Cluster, wait
from tfd.phase import ordinal

_DURATION = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s?)?$")
POLL_S = 2.0
"""How often ``-f`` looks for new or recreated workers."""


def parse_duration(text: str, flag: str) -> float:
    """``90``, ``90s``, ``5m``, ``2h``, ``1h30m``, ``1d`` as seconds.

    Raises:
        UsageError: anything else, or zero.
    """
    match = _DURATION.match(text.strip())
    if not text.strip() or match is None or not any(match.groups()):
        raise UsageError(f"{flag}: must be a duration like 90s, 5m, 2h or 1h30m; got {text!r}")
    d, h, m, s = (int(g or 0) for g in match.groups())
    seconds = float(((d * 24 + h) * 60 + m) * 60 + s)
    if seconds <= 0:
        raise UsageError(f"{flag}: must be more than zero; got {text!r}")
    return seconds


def timestamp(text: str) -> tuple[float, int]:
    """An RFC 3339 time with nanoseconds (the kubelet trims trailing zeros) as a sortable
    ``(seconds, nanoseconds)``; ``(0, 0)`` when it is not one."""
    whole, _, frac = text.rstrip("Z").partition(".")
    try:
        seconds = datetime.fromisoformat(whole + "+00:00").timestamp()
    except ValueError:
        return (0.0, 0)
    return (seconds, int((frac + "000000000")[:9]) if frac.isdigit() else 0)


def split_line(line: str) -> tuple[tuple[float, int], str]:
    """``<timestamp> <text>`` (``timestamps=true``) as its time and text."""
    ts, _, text = line.partition(" ")
    return timestamp(ts), text


def prefixed(worker: int, text: str, as_json: bool, ts: tuple[float, int]) -> str:
    if as_json:
        import json

        return json.dumps({"worker": worker, "ts": ts[0] + ts[1] / 1e9, "line": text})
    return f"[worker {worker}] {text}"


def unreadable_note(
    worker: int, err: NodeUnreachableError, as_json: bool, retrying: bool = False
) -> str:
    """tfd's own line for a worker whose node cannot serve its log (``note``, not ``line``,
    in JSON: never taken for the worker's output)."""
    text = f"tfd: log unreadable now{', retrying' if retrying else ''}: {err}"
    if as_json:
        import json
        import time

        return json.dumps({"worker": worker, "ts": time.time(), "note": text})
    return f"[worker {worker}] {text}"


def _started(pod: dict[str, Any]) -> bool:
    return any(
        {"running", "terminated"} & set(s.get("state") or {})
        for s in (pod.get("status") or {}).get("containerStatuses") or []
    )


def print_logs(
    cluster: Cluster,
    emit: Callable[[str], None],
    *,
    worker: int | None,
    since_s: float | None,
    as_json: bool,
) -> int:
    """Every (or one) worker's current container lines, merged in time order; the count."""
    sts = cluster.statefulset()
    if sts is None:
        raise UsageError(f"no StatefulSet {cluster.namespace}/{cluster.name}: nothing logs yet")
    lines: list[tuple[tuple[float, int], int, str]] = []
    for pod in cluster.pods(sts):
        n = ordinal(pod)
        if worker is not None and n != worker:
            continue
        try:
            got = cluster.log(
                pod["metadata"]["name"],
                tail=None,
                timestamps=True,
                since_s=int(since_s) if since_s else None,
            )
        except NodeUnreachableError as err:  # the other workers' lines still print
            emit(unreadable_note(n, err, as_json))
            continue
        for line in got:
            ts, text = split_line(line)
            lines.append((ts, n, text))
    for ts, n, text in sorted(lines, key=lambda t: (t[0], t[1])):
        emit(prefixed(n, text, as_json, ts))
    return len(lines)


class Follower:
    """``logs -f``: one thread per worker, reopening its stream after each end."""

    def __init__(
        self,
        cluster: Cluster,
        emit: Callable[[str], None],
        *,
        worker: int | None,
        since_s: float | None,
        as_json: bool,
    ) -> None:
        self.cluster = cluster
        self.emit = emit
        self.worker = worker
        self.since_s = since_s
        self.as_json = as_json
        self.pods: dict[int, dict[str, Any]] = {}
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.error: TfdError | None = None

    def _worker(self, n: int) -> None:
        last: tuple[float, int] | None = None
        unreachable = False  # said once per outage of the worker's node
        import time

        while not self.stopped.is_set():
            pod = self.pods.get(n)
            if pod is None or not _started(pod):
                wait(1.0, self.stopped.is_set)
                continue
            if last is None:
                since = int(self.since_s) if self.since_s else None
            else:  # reopened: from just before the last line printed; older lines are skipped
                since = int(time.time() - last[0]) + 2
            try:
                for line in self.cluster.stream(
                    pod["metadata"]["name"], since, self.stopped.is_set
                ):
                    ts, text = split_line(line)
                    unreachable = False
                    if last is not None and ts <= last:
                        continue
                    last = ts
                    with self.lock:
                        self.emit(prefixed(n, text, self.as_json, ts))
            except NodeUnreachableError as err:  # a lost or restarting node: try again
                if not unreachable:
                    unreachable = True
                    with self.lock:
                        self.emit(unreadable_note(n, err, self.as_json, retrying=True))
                wait(POLL_S, self.stopped.is_set)
                continue
            except TfdError as err:
                self.error = err
                self.stopped.set()
                return
            wait(1.0, self.stopped.is_set)  # the container ended: its next instance, or pod

    def run(self) -> None:
        """Until :attr:`stopped` is set (Ctrl-C) or the cluster fails (:attr:`error`)."""
        threads: dict[int, threading.Thread] = {}
        try:
            while not self.stopped.is_set():
                sts = self.cluster.statefulset()
                pods = self.cluster.pods(sts) if sts is not None else []
                self.pods = {
                    ordinal(p): p for p in pods if self.worker is None or ordinal(p) == self.worker
                }
                for n in self.pods:
                    if n not in threads:
                        threads[n] = threading.Thread(target=self._worker, args=(n,), daemon=True)
                        threads[n].start()
                wait(POLL_S, self.stopped.is_set)
        finally:
            self.stopped.set()
        if self.error is not None:
            raise self.error
