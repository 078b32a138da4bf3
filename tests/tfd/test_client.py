"""The typed client (tfd.client) as a Python caller uses it: results are dataclasses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pulumi import automation as auto

from tests.tfd.builders import pod, sts
from tests.tfd.test_commands import (
    TRAINING,
    FakeCluster,
    FakeHandle,
    RunsCluster,
    _records,
    use,
)
from tfd import client, runs_reader, up
from tfd.client import RunEntry, RunList, StopResult, SubmitResult, TfdClient
from tfd.errors import ClusterError, WaitTimeoutError
from tfd.phase import STOP_ANNOTATION


@pytest.fixture(autouse=True)
def _no_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(client, "POLL_S", 0)
    monkeypatch.setattr(up, "POLL_S", 0)


def test_stop_returns_what_it_did(monkeypatch: pytest.MonkeyPatch) -> None:
    use(monkeypatch, FakeHandle(), FakeCluster(TRAINING, live=sts(3)))
    assert TfdClient("e2e").stop() == StopResult("e2e", "r1", 3, stopped=True)
    use(monkeypatch, FakeHandle(), FakeCluster(TRAINING, live=sts(0)))
    assert TfdClient("e2e").stop() == StopResult("e2e", "r1", 0, stopped=False)


def test_runs_are_typed_entries_with_the_current_one_marked(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    doc = _records(tmp_path)
    use(monkeypatch, FakeHandle(), RunsCluster())
    monkeypatch.setattr(runs_reader.RunsReader, "read", lambda self, s, p: {**doc, "read_by": "me"})
    listed = TfdClient("e2e").runs()
    assert isinstance(listed, RunList) and listed.current_run_id == "r2", listed
    assert all(isinstance(r, RunEntry) for r in listed.runs), listed.runs
    assert [(r.run_id, r.state, r.step, r.current) for r in listed.runs] == [
        ("r2", "stopped", 40, True),
        ("r1", "done", 96, False),
    ]


def test_runs_of_another_format_are_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    doc = _records(tmp_path)
    doc["runs"][0]["renamed_field"] = 1
    use(monkeypatch, FakeHandle(), RunsCluster())
    monkeypatch.setattr(
        runs_reader.RunsReader, "read", lambda self, s, p: {**doc, "read_by": "pod"}
    )
    with pytest.raises(ClusterError, match="the run records read by pod are not of this tfd's"):
        TfdClient("e2e").runs()


def test_submit_from_python_takes_settings_as_a_mapping_and_reports_through_callbacks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    handle = FakeHandle()
    use(monkeypatch, handle)
    monkeypatch.setattr(
        client.Cluster, "connect", classmethod(lambda cls, access, ns, name: FakeCluster(TRAINING))
    )
    monkeypatch.setenv("DOCKER_HOST", "unix:///nowhere")
    notices: list[dict[str, Any]] = []
    statuses: list[str] = []
    done = TfdClient("e2e").submit(
        run_id="nb-1",
        epochs=4,
        settings={"batchSize": "32", "gpuTolerations": ["nvidia.com/gpu=present:NoSchedule"]},
        on_notice=lambda doc, text: notices.append(doc),
        on_status=lambda st: statuses.append(st.phase),
    )
    assert isinstance(done, SubmitResult), done
    assert (done.run_id, done.continued, done.epochs, done.status.phase) == (
        "nb-1", False, 4, "training",
    )  # fmt: skip
    (what, changes), (ran, _) = handle.calls
    assert (what, ran) == ("set_config", "up"), handle.calls
    assert changes["tf-distributed:gpuTolerations"] == ["nvidia.com/gpu=present:NoSchedule"]
    assert changes["tf-distributed:batchSize"] == "32", changes
    assert notices[0]["event"] == "submit" and notices[0]["run_id"] == "nb-1", notices
    assert statuses[-1] == "training", statuses


class QueuedHandle(FakeHandle):
    """The e2e stack under a queue (Kueue): autoscaling off, LocalQueue ``team``, run ``r1``
    (the run of :func:`tests.tfd.builders.sts`)."""

    def config(self) -> dict:
        out = super().config()
        out["tf-distributed:runId"] = auto.ConfigValue(value="r1")
        out["tf-distributed:autoscalingEnabled"] = auto.ConfigValue(value="false")
        out["tf-distributed:queueName"] = auto.ConfigValue(value="team")
        return out


class DrainingCluster(FakeCluster):
    """A StatefulSet whose pods are gone after ``terminating`` readings."""

    def __init__(self, live: dict | None, terminating: int) -> None:
        super().__init__(TRAINING, live=live)
        self.terminating = terminating

    def patch_annotations(self, annotations: dict) -> None:
        super().patch_annotations(annotations)
        if self.live is not None:
            notes = self.live["metadata"]["annotations"]
            notes.update(annotations)
            for key in [k for k, v in notes.items() if v is None]:
                del notes[key]

    def pods(self, sts: dict) -> list[dict]:
        self.terminating -= 1
        return [pod(0), pod(1)] if self.terminating >= 0 else []


def submit_to(
    monkeypatch: pytest.MonkeyPatch, handle: FakeHandle, cluster: FakeCluster, **kwargs: Any
) -> list[dict[str, Any]]:
    """``submit`` on ``handle``'s stack against ``cluster``; the notices it gave."""
    use(monkeypatch, handle)
    monkeypatch.setattr(client.Cluster, "connect", classmethod(lambda cls, a, ns, n: cluster))
    monkeypatch.setenv("DOCKER_HOST", "unix:///nowhere")
    notices: list[dict[str, Any]] = []
    TfdClient("e2e").submit(on_notice=lambda doc, text: notices.append(doc), **kwargs)
    return notices


@pytest.mark.parametrize(
    ("handle", "kwargs", "through_zero"),
    [
        (QueuedHandle(), {"continue_run": True, "settings": {"replicas": "3"}}, True),
        (QueuedHandle(), {"continue_run": True, "epochs": 9}, True),
        (QueuedHandle(), {"continue_run": True}, False),  # nothing changes
        (QueuedHandle(), {"run_id": "r9", "settings": {"replicas": "3"}}, False),  # a new run
        (FakeHandle(), {"continue_run": True, "settings": {"replicas": "3"}}, False),  # no queue
    ],
    ids=["queued resize", "queued more epochs", "queued unchanged", "queued new run", "no queue"],
)
def test_a_queued_runs_changed_workers_go_through_zero_before_up(
    monkeypatch: pytest.MonkeyPatch, handle: FakeHandle, kwargs: dict, through_zero: bool
) -> None:
    cluster = DrainingCluster(sts(2), terminating=2)
    notices = submit_to(monkeypatch, handle, cluster, **kwargs)
    events = [n["event"] for n in notices]
    stopped = cluster.writes[:2]
    if through_zero:
        assert events[:3] == ["submit", "through-zero", "drained"], events
        assert stopped[0][0] == "annotate" and stopped[1] == ("scale", 0), cluster.writes
        assert [c for c, _ in handle.calls] == ["set_config", "up"], handle.calls
        # Brought back at the new count from zero (the fake's up leaves it at zero).
        assert cluster.writes[-2:] == [("annotate", {STOP_ANNOTATION: None}), ("scale", 3 if
                "settings" in kwargs else 2)], cluster.writes  # fmt: skip
    else:
        assert "through-zero" not in events, events
        assert ("scale", 0) not in cluster.writes, cluster.writes


def test_a_queued_run_still_terminating_stops_submit_before_anything_changes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(client, "DRAIN_MARGIN_S", 0)
    handle = QueuedHandle()
    cluster = DrainingCluster(sts(2), terminating=10**6)
    with pytest.raises(WaitTimeoutError, match=r"2 workers still terminating after 0.01 s; the"):
        submit_to(
            monkeypatch, handle, cluster, continue_run=True, settings={"replicas": "3"},
            timeout_s=0.01,
        )  # fmt: skip
    assert handle.calls == [], handle.calls  # the settings file untouched, no pulumi up


def test_a_queued_run_stopped_a_moment_ago_is_waited_for_before_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stopped = sts(0, annotations={STOP_ANNOTATION: '{"at":"t","generation":4}'})
    cluster = DrainingCluster(stopped, terminating=2)  # still terminating after `tfd stop`
    handle = QueuedHandle()
    notices = submit_to(monkeypatch, handle, cluster, continue_run=True, settings={"replicas": "3"})
    said = {n["event"]: n for n in notices}
    assert said["through-zero"]["workers_before"] == 0 and "drained" in said, notices
    assert ("scale", 0) not in cluster.writes, cluster.writes  # already at zero
    assert [c for c, _ in handle.calls] == ["set_config", "up"], handle.calls
