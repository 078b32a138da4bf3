"""The typed client (tfd.client) as a Python caller uses it: results are dataclasses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.tfd.builders import sts
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
from tfd.errors import ClusterError


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
