"""``logs -f`` across a container restart and a recreated pod (tfd.follow.Follower), on a
fake cluster whose log streams end the way the API server's do when a container ends."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import pytest

from tests.tfd.builders import pod, sts
from tfd import follow
from tfd.errors import NodeUnreachableError


class RestartingCluster:
    """Worker 0's log: one stream, then (after its container restarts) a second one that also
    returns the last line of the first (``sinceSeconds`` is coarse), then nothing new."""

    namespace = "ns"
    name = "tfd-worker"

    def __init__(self) -> None:
        self.streams = [
            ["2026-12-03T12:00:00.1Z line a", "2026-12-03T12:00:00.2Z line b"],
            ["2026-12-03T12:00:00.2Z line b", "2026-12-03T12:00:05.5Z line c after restart"],
        ]
        self.since: list[int | None] = []
        self.done = threading.Event()

    def statefulset(self) -> dict:
        return sts(1)

    def pods(self, live: dict) -> list[dict]:
        return [pod(0)]

    def stream(self, name: str, since_s: int | None, stop: Callable[[], bool]) -> Iterator[str]:
        self.since.append(since_s)
        if not self.streams:
            self.done.set()
            return iter(())
        return iter(self.streams.pop(0))


@pytest.fixture(autouse=True)
def _fast(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(follow, "POLL_S", 0.05)
    monkeypatch.setattr(follow, "wait", lambda s, stop: None)


def test_follow_prints_each_line_once_across_a_restart() -> None:
    cluster = RestartingCluster()
    lines: list[str] = []
    follower = follow.Follower(cluster, lines.append, worker=None, since_s=600, as_json=False)
    runner = threading.Thread(target=follower.run, daemon=True)
    runner.start()
    assert cluster.done.wait(60), "the follower did not reopen the stream"
    follower.stopped.set()
    runner.join(10)
    assert lines == ["[worker 0] line a", "[worker 0] line b", "[worker 0] line c after restart"]
    assert cluster.since[0] == 600  # --since for the first stream, then from the last line
    assert all(s is not None and s >= 1 for s in cluster.since[1:]), cluster.since


class LostNodeCluster(RestartingCluster):
    """Worker 0's node cannot serve its log twice (a preempted node), then its pod, recreated
    elsewhere, streams a line."""

    def __init__(self) -> None:
        super().__init__()
        self.failures = 2
        self.streams = [["2026-12-03T12:01:00.1Z line on the new node"]]

    def stream(self, name: str, since_s: int | None, stop: Callable[[], bool]) -> Iterator[str]:
        if self.failures:
            self.failures -= 1
            raise NodeUnreachableError("get pods/log ns/tfd-worker-0: HTTP 500: connection refused")
        return super().stream(name, since_s, stop)


def test_follow_says_once_that_a_nodes_log_is_unreadable_and_goes_on() -> None:
    cluster = LostNodeCluster()
    lines: list[str] = []
    follower = follow.Follower(cluster, lines.append, worker=None, since_s=None, as_json=False)
    runner = threading.Thread(target=follower.run, daemon=True)
    runner.start()
    assert cluster.done.wait(60), "the follower stopped at the unreadable log"
    follower.stopped.set()
    runner.join(10)
    assert follower.error is None, follower.error
    assert lines == [
        "[worker 0] tfd: log unreadable now, retrying: get pods/log ns/tfd-worker-0: HTTP 500: "
        "connection refused",
        "[worker 0] line on the new node",
    ]


class OneNodeLostCluster(RestartingCluster):
    """Two workers; worker 0's node cannot serve its log."""

    def pods(self, live: dict) -> list[dict]:
        return [pod(0), pod(1)]

    def log(self, name: str, **_: object) -> list[str]:
        if name.endswith("-0"):
            raise NodeUnreachableError("get pods/log ns/tfd-worker-0: HTTP 500: connection refused")
        return ["2026-12-03T12:00:00.1Z line of worker 1"]


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_logs_print_the_other_workers_lines_and_name_the_unreadable_one(as_json: bool) -> None:
    import json

    lines: list[str] = []
    count = follow.print_logs(
        OneNodeLostCluster(), lines.append, worker=None, since_s=None, as_json=as_json
    )
    assert count == 1, lines
    note = "tfd: log unreadable now: get pods/log ns/tfd-worker-0: HTTP 500: connection refused"
    if as_json:
        first, second = map(json.loads, lines)
        assert (first["worker"], first["note"], "line" in first) == (0, note, False), first
        assert (second["worker"], second["line"]) == (1, "line of worker 1"), second
    else:
        assert lines == [f"[worker 0] {note}", "[worker 1] line of worker 1"]
