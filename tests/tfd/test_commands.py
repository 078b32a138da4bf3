"""The client's and the commands' waiting, stopping and resuming against a fake cluster
(tfd.client, tfd.commands)."""

from __future__ import annotations

import argparse
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from pulumi import automation as auto

from tests.tfd.builders import START, pod, progress, sts, worker_log
from tests.tfd.test_settings import ROOT, current
from tfd import cli, client, commands, runs_reader, up
from tfd.cli import build_parser
from tfd.errors import ClusterError, RunFailedError, StackError, UsageError, WaitTimeoutError
from tfd.phase import STOP_ANNOTATION, Snapshot, derive
from trainer import contract, done_marker, run_list


class FakeCluster:
    """Snapshots in order (the last one repeats), and a record of the writes."""

    def __init__(self, *snapshots: Snapshot, live: dict | None = None) -> None:
        self.snapshots = list(snapshots)
        self.live = live
        self.writes: list[tuple[str, Any]] = []

    def snapshot(self, deploying: bool = False) -> Snapshot:
        return self.snapshots.pop(0) if len(self.snapshots) > 1 else self.snapshots[0]

    def statefulset(self) -> dict | None:
        return self.live

    def patch_annotations(self, annotations: dict) -> None:
        self.writes.append(("annotate", annotations))

    def delete_pod(self, name: str) -> None:
        self.writes.append(("delete", name))

    def scale(self, replicas: int) -> None:
        self.writes.append(("scale", replicas))
        if self.live is not None:  # the API server: a new spec, a new generation
            self.live["spec"]["replicas"] = replicas
            self.live["metadata"]["generation"] += 1


@pytest.fixture(autouse=True)
def _no_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(client, "POLL_S", 0)
    monkeypatch.setattr(up, "POLL_S", 0)


def use(monkeypatch: pytest.MonkeyPatch, handle: Any, cluster: Any = None) -> None:
    """The client's stack is ``handle``; its cluster ``cluster`` (when given)."""
    monkeypatch.setattr(client, "StackHandle", lambda stack, project_dir: handle)
    if cluster is not None:
        monkeypatch.setattr(client.TfdClient, "cluster", lambda self: cluster)


TRAINING = Snapshot(
    sts(2),
    [pod(0), pod(1)],
    logs={0: worker_log(0, START, progress(10)), 1: worker_log(1, START, progress(10))},
)


def test_watch_ends_when_the_run_trains() -> None:
    cluster = FakeCluster(Snapshot(sts(2, 0), [pod(0, unscheduled="0/2 nodes")]), TRAINING)
    st = client.watch(cluster, lambda s: s.phase == "training", None)
    assert st.phase == "training" and st.step == 10


def test_watch_times_out_saying_where_the_run_is(capsys: pytest.CaptureFixture[str]) -> None:
    cluster = FakeCluster(Snapshot(sts(2, 0), [pod(0, unscheduled="0/2 nodes are available")]))
    with pytest.raises(WaitTimeoutError, match="the run is pending: worker 0 not scheduled"):
        client.watch(cluster, lambda s: s.terminal, 0.0)


@pytest.mark.parametrize(("phase", "code"), [("done", 0), ("failed", 1), ("stopped", 4)])
def test_the_outcome_of_a_watched_run_is_its_exit_code(phase: str, code: int) -> None:
    assert commands.OUTCOME[phase] == code


def test_resume_drops_the_mark_and_brings_the_workers_back() -> None:
    stopped = sts(0, annotations={STOP_ANNOTATION: "2026-12-03T12:00:00+00:00"})
    cluster = FakeCluster(TRAINING, live=stopped)
    assert client._resume(cluster, "r1", 2) is True
    assert cluster.writes == [("annotate", {STOP_ANNOTATION: None}), ("scale", 2)]


@pytest.mark.parametrize(
    ("live", "run_id"),
    [(sts(0), "r1"), (sts(0, annotations={STOP_ANNOTATION: "t"}), "r2"), (None, "r1")],
    ids=["finished, not stopped", "another run", "no statefulset"],
)
def test_resume_leaves_everything_else_alone(live: dict | None, run_id: str) -> None:
    cluster = FakeCluster(TRAINING, live=live)
    assert client._resume(cluster, run_id, 2) is False
    assert cluster.writes == []


def test_stop_marks_the_run_then_scales_it_to_zero(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = FakeCluster(TRAINING, live=sts(3))

    class Handle:
        name = "dev"

    use(monkeypatch, Handle(), cluster)
    assert commands.stop(argparse.Namespace(json=False, stack=None, project_dir=None)) == 0
    (first, mark), second = cluster.writes
    assert first == "annotate" and set(mark) == {STOP_ANNOTATION} and second == ("scale", 0)
    assert json.loads(mark[STOP_ANNOTATION])["generation"] == 5  # sts(3) is at generation 4
    cluster.live["metadata"]["annotations"].update(mark)
    assert derive(Snapshot(cluster.live)).phase == "stopped"
    out = capsys.readouterr().out
    assert out == ("stopped run r1 on stack dev: 3 -> 0 workers; checkpoints kept; resume "
                   "with: tfd submit --stack dev --run-id r1\n")  # fmt: skip


class FakeHandle:
    """A stack with the e2e stack file's config; records what submit changes and runs."""

    name = "e2e"
    project_dir = ROOT

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def config(self) -> dict:
        return current("e2e", kubeconfig=auto.ConfigValue(value="k", secret=True))

    def value(self, key: str) -> str:
        entry = self.config().get(f"tf-distributed:{key}")
        return "" if entry is None else entry.value

    def set_config(self, changes: dict) -> None:
        self.calls.append(("set_config", dict(changes)))

    def saved_settings(self) -> bytes:
        return b"the user's settings"

    def restore(self, saved: bytes | None) -> None:
        self.calls.append(("restore", saved))

    def up(self, on_output: Any, on_event: Any) -> object:
        self.calls.append(("up", None))
        return object()

    def access(self) -> object:
        return object()


def submit_args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["submit", *argv])


@pytest.fixture
def stack(monkeypatch: pytest.MonkeyPatch) -> FakeHandle:
    handle = FakeHandle()
    use(monkeypatch, handle)
    monkeypatch.setattr(
        client.Cluster,
        "connect",
        classmethod(lambda cls, access, ns, name: FakeCluster(TRAINING)),
    )
    monkeypatch.setenv("DOCKER_HOST", "unix:///nowhere")
    return handle


def test_submit_refuses_a_bad_setting_before_anything_changes(stack: FakeHandle) -> None:
    with pytest.raises(UsageError, match="tf-distributed:batchSize: "):
        commands.submit(submit_args("--set", "batchSize=0", "--epochs", "4"))
    assert stack.calls == []


def test_submit_sets_a_new_run_then_runs_up_then_waits_for_training(
    stack: FakeHandle, capsys: pytest.CaptureFixture[str]
) -> None:
    assert commands.submit(submit_args("--epochs", "4", "--set", "batchSize=32", "--json")) == 0
    (what, changes), (ran, _) = stack.calls
    assert (what, ran) == ("set_config", "up")
    run_id = changes.pop("tf-distributed:runId")
    assert run_id != "1" and contract.RUN_ID.match(run_id), run_id  # a new run by default
    assert changes == {"tf-distributed:epochs": "4", "tf-distributed:batchSize": "32"}
    docs = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert docs[0] == {"event": "submit", "stack": "e2e", "run_id": run_id, "continues": False,
                       "epochs": 4}  # fmt: skip
    assert docs[-1]["phase"] == "training"


def test_submit_continue_keeps_the_stacks_run(stack: FakeHandle) -> None:
    assert commands.submit(submit_args("--continue")) == 0
    changes = stack.calls[0][1]
    assert changes.get("tf-distributed:runId", "1") == "1", changes


class RunsCluster:
    """A cluster whose worker StatefulSet runs ``r2``; the records are the trainer's own."""

    namespace = "tfd-dev"
    core = object()

    def statefulset(self) -> dict:
        return sts(1, annotations={"tf-distributed.io/run-id": "r2"})

    def pods(self, live: dict) -> list[dict]:
        return [pod(0)]


def _records(root: Path) -> dict:
    """Two runs written the way the trainer writes them: r1 done, r2 with a checkpoint."""
    for run_id, created in (("r1", "2026-12-03T09:00:00Z"), ("r2", "2026-12-03T11:00:00Z")):
        run = root / run_id
        (run / "checkpoints").mkdir(parents=True)
        manifest = {"version": 1, "created_utc": created, "image": "tfd:0.1.0",
                    "image_digest": "sha256:" + "d" * 64, "source_commit": "c" * 40}  # fmt: skip
        (run / "manifest.json").write_text(json.dumps(manifest))
        (run / "checkpoints" / "checkpoint").write_text('model_checkpoint_path: "ckpt-40"\n')
    done_marker.write_done(
        str(root / "r1"), done_marker.DoneRecord(96, 3, 32, 128, "r1", "2026-12-03T09:30:00Z")
    )
    summary = {"final_step": 96, "accuracy": 0.9, "eval_accuracy": 0.875, "loss": 0.3}
    (root / "r1" / "summary.json").write_text(json.dumps(summary))
    (root / "r2" / "summary.json").write_text("{cut short")
    return run_list.document(str(root))


@pytest.fixture
def runs_cluster(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    class Handle:
        name = "dev"

    doc = _records(tmp_path)
    use(monkeypatch, Handle(), RunsCluster())
    monkeypatch.setattr(
        runs_reader.RunsReader,
        "read",
        lambda self, sts, pods: {**doc, "read_by": "exec tfd-worker-0"},
    )


def test_runs_json_is_one_document_of_every_run(
    runs_cluster: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["runs", "--stack", "dev", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc) == {"stack", "namespace", "root", "read_utc", "read_by", "current_run_id",
                        "runs"}, doc  # fmt: skip
    assert (doc["stack"], doc["current_run_id"], doc["read_by"]) == (
        "dev",
        "r2",
        "exec tfd-worker-0",
    )
    r2, r1 = doc["runs"]
    assert (r1["run_id"], r1["state"], r1["step"], r1["accuracy"]) == ("r1", "done", 96, 0.9)
    assert (r1["eval_accuracy"], r1["duration_s"], r1["current"]) == (0.875, 1800.0, False)
    assert r1["image_digest"] == "sha256:" + "d" * 64 and r1["source_commit"] == "c" * 40
    assert (r2["state"], r2["step"], r2["current"], r2["accuracy"]) == ("stopped", 40, True, None)
    (problem,) = r2["problems"]
    assert "r2/summary.json: not JSON" in problem, problem
    assert client.TfdClient("dev").runs().to_json() == doc, "the command prints what runs() returns"


def test_runs_table_for_people(runs_cluster: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["runs", "--stack", "dev"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if " r1 " in line or " r2 " in line]
    assert len(rows) == 2, out
    assert "r2 *" in rows[0] and "stopped" in rows[0] and "40" in rows[0], rows[0]
    r1 = rows[1]
    for text in (
        "done",
        "96",
        "0.875",
        "2026-12-03 09:00:00",
        "30 min 00 s",
        "sha256:dddddddddddd",
    ):
        assert text in r1, (text, r1)
    assert "cccccccccccc" in r1 and "c" * 13 not in r1, r1
    assert "r2: " in out and "summary.json: not JSON" in out, out


def test_runs_errors_are_one_line_with_the_clusters_code(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    class Handle:
        name = "dev"

    class NoWorkers(RunsCluster):
        def statefulset(self) -> None:
            return None

    use(monkeypatch, Handle(), NoWorkers())
    assert cli.main(["runs", "--stack", "dev"]) == 2
    assert capsys.readouterr().err.count("\n") == 1

    def refused(self: Any, sts: dict, pods: list) -> None:
        raise ClusterError("create pods/exec tfd-dev/tfd-worker-0: HTTP 403 Forbidden: no")

    use(monkeypatch, Handle(), RunsCluster())
    monkeypatch.setattr(runs_reader.RunsReader, "read", refused)
    assert cli.main(["runs", "--stack", "dev", "--json"]) == 5
    captured = capsys.readouterr()
    assert (
        captured.err
        == "tfd: error: create pods/exec tfd-dev/tfd-worker-0: HTTP 403 Forbidden: no\n"
    )
    assert json.loads(captured.out)["exit_code"] == 5


class WaitingUpHandle(FakeHandle):
    """``up`` waits for the workers as the engine does: until ``tfd`` asks it to stop (it then
    ends with the engine's error, as a cancelled ``up`` does), or ``wait_s`` passed."""

    def __init__(self, wait_s: float = 10) -> None:
        super().__init__()
        self.cancelled = threading.Event()
        self.wait_s = wait_s

    def up(self, on_output: Any, on_event: Any) -> object:
        self.calls.append(("up", None))
        if self.cancelled.wait(self.wait_s):
            raise StackError("pulumi up --stack e2e: error: update canceled")
        return object()

    def cancel_update(self) -> bool:
        self.calls.append(("cancel_update", None))
        self.cancelled.set()
        return True


WHY = "--model my_model:build: the number of classes is unknown; set --num-classes"


def failing(revision: str, update_revision: str) -> Snapshot:
    """Worker 0 of template ``revision`` crash-looping with exit 6, the StatefulSet at
    ``update_revision``."""
    return Snapshot(
        sts(2, 0, revision=update_revision),
        [pod(0, ready=False, waiting="CrashLoopBackOff", last_exit=6, revision=revision),
         pod(1, ready=False, revision=revision)],
        logs={0: worker_log(0, previous=(f"trainer: error: {WHY}",))},
    )  # fmt: skip


def connect(monkeypatch: pytest.MonkeyPatch, cluster: FakeCluster) -> None:
    monkeypatch.setattr(
        client.Cluster, "connect", classmethod(lambda cls, access, ns, name: cluster)
    )


def test_submit_stops_up_when_a_worker_of_the_new_template_fails_and_says_why(
    stack: FakeHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    handle = WaitingUpHandle()
    use(monkeypatch, handle)
    connect(monkeypatch, FakeCluster(failing("r2", "r2"), live=sts(2, revision="r1")))
    with pytest.raises(RunFailedError) as err:
        commands.submit(submit_args("--epochs", "4"))
    assert str(err.value) == (
        f"worker 0 exited 6: {WHY} (pulumi up stopped waiting for the workers; fix the "
        "setting and submit again)"
    )
    assert err.value.exit_code == 1
    # The new template is deployed and failing: its settings stay, the fix goes on top.
    calls = [c for c, _ in handle.calls]
    assert calls == ["set_config", "up", "cancel_update"], handle.calls


@pytest.mark.parametrize(
    ("snapshot", "deleted"),
    [
        # The crash-looping worker would replace itself only after the kubelet's back-off.
        pytest.param(failing("r1", "r2"), [("delete", "tfd-worker-0")],
                     id="old template's pods, not replaced yet"),
        pytest.param(failing("r1", "r1"), [], id="up has not written its template yet"),
    ],
)  # fmt: skip
def test_submit_leaves_up_alone_while_only_the_earlier_templates_workers_fail(
    stack: FakeHandle, monkeypatch: pytest.MonkeyPatch, snapshot: Snapshot, deleted: list
) -> None:
    # The failing pods of the earlier template while up runs, then the new ones training:
    # up ends once tfd has read every failing snapshot.
    cluster = FakeCluster(*[snapshot] * 20, TRAINING, live=sts(2, revision="r1"))
    handle = WaitingUpHandle()
    use(monkeypatch, handle)
    monkeypatch.setattr(
        handle.cancelled, "wait", lambda timeout: _until(lambda: len(cluster.snapshots) == 1)
    )
    connect(monkeypatch, cluster)
    assert commands.submit(submit_args("--epochs", "4")) == 0
    assert [c for c, _ in handle.calls] == ["set_config", "up"], handle.calls
    assert cluster.writes == deleted, cluster.writes  # once, however often it is seen


def _until(done: Any, timeout: float = 60) -> bool:
    """False once ``done()`` (the up was not cancelled); fails after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "tfd stopped reading the cluster during up"
        time.sleep(0.001)
    return False


class InterruptedUpHandle(FakeHandle):
    """``up`` as the CLI runs it after the terminal's Ctrl-C reached it too: it goes on
    cancelling (or finishing) for a while, then ends with its own outcome."""

    def __init__(self, applied: bool) -> None:
        super().__init__()
        self.applied = applied
        self.ended = threading.Event()

    def up(self, on_output: Any, on_event: Any) -> object:
        self.calls.append(("up", None))
        time.sleep(0.2)  # the engine recording what exists
        self.ended.set()
        if not self.applied:
            raise StackError("pulumi up --stack e2e: error: update canceled")
        return object()


@pytest.mark.parametrize(
    ("applied", "calls"),
    [(False, ["set_config", "up", "restore"]), (True, ["set_config", "up"])],
    ids=["cancelled: the settings put back", "went through: the settings kept"],
)
def test_ctrl_c_during_up_waits_for_the_cli_and_keeps_settings_only_if_it_went_through(
    stack: FakeHandle, monkeypatch: pytest.MonkeyPatch, applied: bool, calls: list[str]
) -> None:
    handle = InterruptedUpHandle(applied)
    use(monkeypatch, handle)

    def ctrl_c(timeout: float, done: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(up, "wait", ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        commands.submit(submit_args("--epochs", "4"))
    assert handle.ended.is_set(), "tfd left before pulumi up had ended"
    assert [c for c, _ in handle.calls] == calls, handle.calls
    if not applied:
        assert handle.calls[-1] == ("restore", b"the user's settings"), handle.calls


def test_submit_shows_the_queue_holding_the_workers_while_up_waits_for_them(
    stack: FakeHandle, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    why = "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu"
    held = Snapshot(
        sts(2, 0),
        [pod(0, gated=True), pod(1, gated=True)],
        [{"reason": "Pending", "message": why, "lastTimestamp": "2026-12-03T12:00:00Z",
          "involvedObject": {"kind": "Workload", "name": "statefulset-tfd-worker-5c1a2"}}],
    )  # fmt: skip
    # Held while up waits, then admitted: up ends once tfd has read every held snapshot.
    cluster = FakeCluster(*[held] * 5, TRAINING, live=sts(2))
    handle = WaitingUpHandle()
    use(monkeypatch, handle)
    monkeypatch.setattr(
        handle.cancelled, "wait", lambda timeout: _until(lambda: len(cluster.snapshots) == 1)
    )
    connect(monkeypatch, cluster)
    assert commands.submit(submit_args("--epochs", "4", "--json")) == 0
    docs = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    phases = [(d["phase"], d["reason"]) for d in docs if "phase" in d]
    assert phases[0] == ("queued", f"2/2 workers held by the cluster's queue (Kueue): {why}")
    assert phases[-1][0] == "training", phases
