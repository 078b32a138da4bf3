"""The phase decision table (tfd.phase): one row per rule, from built and recorded objects."""

from __future__ import annotations

import pytest

from tests.tfd.builders import START, event, pod, progress, recorded, sts, worker_log
from tfd.phase import STOP_ANNOTATION as STOPPED
from tfd.phase import RunStatus, Snapshot, carried, derive, stop_mark

GPU = "0/2 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) had untolerated taint"
QUOTA = (
    "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in "
    "flavor gpu, 2 more needed"
)
TRAINING = {0: worker_log(0, START, progress(100)), 1: worker_log(1, START, progress(100))}

CASES = [
    # (id, snapshot, phase, words the reason must hold)
    ("no statefulset", Snapshot(None), "absent", "tfd submit"),
    ("no statefulset, up running", Snapshot(None, deploying=True), "deploying", "pulumi up"),
    ("at zero, stopped by tfd", Snapshot(sts(0, annotations={STOPPED: stop_mark("t", 4)})),
     "stopped", "stopped by tfd stop at t; checkpoints kept (tfd submit --run-id r1 resumes)"),
    ("at zero, a mark set by hand", Snapshot(sts(0, annotations={STOPPED: "by me"})),
     "stopped", "at by me"),
    ("at zero, no mark: the run scaled itself down", Snapshot(sts(0)), "done", "finished"),
    ("at zero, a stale mark: the spec changed since the stop (workers back, run finished)",
     Snapshot(sts(0, annotations={STOPPED: stop_mark("t", 2)})), "done", "finished"),
    ("unschedulable", Snapshot(sts(2, 0), [pod(0, unscheduled=GPU), pod(1, unscheduled=GPU)]),
     "pending", f"worker 0 not scheduled: {GPU}"),
    ("unschedulable, reason only in an event",
     Snapshot(sts(2, 0), [pod(0, unscheduled=""), pod(1)],
              [event("tfd-worker-0", "FailedScheduling", GPU)]), "pending", GPU),
    ("fewer pods than asked: the controller's reason",
     Snapshot(sts(2, 0, observed=0), [],
              [event("tfd-worker", "FailedCreate", "exceeded quota: tfd-quota")]),
     "pending", "0/2 worker pods exist: exceeded quota"),
    ("held by the queue: Kueue's reason, from the run's Workload",
     Snapshot(sts(2, 0), [pod(0, gated=True), pod(1, gated=True)], [
         event("statefulset-tfd-worker-5c1a2", "Pending", "old reason", kind="Workload",
               when="2026-12-03T11:00:00Z"),
         event("statefulset-tfd-worker-5c1a2", "Pending", QUOTA, kind="Workload"),
         event("statefulset-tfd-worker-5c1a2", "OwnerReferencesAdded", "Added 1 owner reference(s)",
               kind="Workload", when="2026-12-03T12:00:01Z"),
         event("statefulset-other-worker-0b1c", "Pending", "another run's", kind="Workload")]),
     "queued", f"2/2 workers held by the cluster's queue (Kueue): {QUOTA}"),
    ("held by the queue before Kueue said why",
     Snapshot(sts(2, 0), [pod(0, gated=True), pod(1, gated=True)]),
     "queued", "held by the cluster's queue (Kueue): waiting for the queue to admit the workers"),
    ("pulling the image", Snapshot(sts(2, 0), [pod(0, phase="Pending", ready=False,
                                   waiting="ImagePullBackOff", message="back-off pulling")]),
     "pending", "worker 0 starting: ImagePullBackOff: back-off pulling"),
    ("trainer error, in crash loop", Snapshot(
        sts(2, 1), [pod(0), pod(1, ready=False, waiting="CrashLoopBackOff", last_exit=9)],
        logs={1: worker_log(1, previous=("trainer: error: run 'r1' was started with other "
                                         "settings",))}),
     "failed", "worker 1 exited 9: run 'r1' was started with other settings"),
    ("trainer error, and a worker beyond the node's GPUs: both said", Snapshot(
        sts(3, 0), [pod(0, ready=False, waiting="CrashLoopBackOff", last_exit=3),
                    pod(1, ready=False, waiting="CrashLoopBackOff", last_exit=3),
                    pod(2, unscheduled=GPU)],
        logs={0: worker_log(0, previous=("trainer: error: TFD_GPUS=1: no GPU seen",))}),
     "failed", f"worker 0 exited 3: TFD_GPUS=1: no GPU seen; also worker 2 not scheduled: {GPU}"),
    ("out of memory", Snapshot(sts(2, 1), [pod(0), pod(1, ready=False, last_exit=137,
                                                    last_reason="OOMKilled")]),
     "failed", "out of memory"),
    ("image never pulled", Snapshot(sts(2, 0), [pod(0, phase="Pending", ready=False,
                                    waiting="ErrImageNeverPull", message="not present")]),
     "failed", "worker 0: ErrImageNeverPull: not present"),
    ("training", Snapshot(sts(2), [pod(0), pod(1)], logs=TRAINING), "training", ""),
    ("training, before the first progress line: the first step's record gives the step",
     Snapshot(sts(2), [pod(0), pod(1)], logs={
         n: worker_log(n, START, ("first_step", {"step": 7})) for n in (0, 1)}),
     "training", "examples/s and ETA come with the first progress line"),
    ("a worker killed (kill -9), its container restarting",
     Snapshot(sts(2, 1), [pod(0), pod(1, ready=False, last_exit=137, restarts=1)], logs=TRAINING),
     "restarting", "worker 1's container exited 137"),
    ("a peer lost: the survivor stopped and its supervisor restarts it",
     Snapshot(sts(2), [pod(0), pod(1)], logs={
         0: worker_log(0, START, progress(100), ("stop", {"step": 100, "reason": "a peer asked"}),
                       ("restart", {"code": 75, "restarts": 1, "pause_s": 1})),
         1: worker_log(1, START, progress(100))}),
     "restarting", "worker 0: restart (exit 75)"),
    ("the world size changed: workers stop to restart together",
     Snapshot(sts(3, 2, observed=2), [pod(0), pod(1)], logs={
         0: worker_log(0, START, progress(120),
                       ("stop", {"step": 120, "reason": "world size changed"})),
         1: worker_log(1, START, progress(120))}),
     "restarting", "world size changed"),
    ("more workers asked for, the new one not there yet", Snapshot(
        sts(3, 2, observed=2), [pod(0), pod(1)], logs=TRAINING), "resizing", "2 -> 3 workers"),
    ("done, workers kept (onDone idle)", Snapshot(sts(2), [pod(0), pod(1)], logs={
        0: worker_log(0, START, progress(300), ("done", {"step": 300})),
        1: worker_log(1, START, progress(300), ("idle", {"reason": "training complete"}))}),
     "done", "onDone idle"),
    ("one worker not ready yet", Snapshot(sts(2, 1), [pod(0), pod(1, ready=False)]),
     "forming", "1/2 workers ready"),
    ("ready, the cluster forming", Snapshot(sts(2), [pod(0), pod(1)], logs={
        0: worker_log(0, ("forming", {"workers": 2})), 1: worker_log(1)}),
     "forming", "no training step logged yet"),
    ("an up running over live workers", Snapshot(sts(2), [pod(0), pod(1)], logs=TRAINING,
                                                 deploying=True), "deploying", "pulumi up"),
    ("a terminating pod is not counted", Snapshot(
        sts(2), [pod(0), pod(1), pod(2, deleting=True, unscheduled=GPU)], logs=TRAINING),
     "training", ""),
    ("recorded on kwok: 9 GPUs asked per worker, 8 on the GPU node",
     recorded("kwok-pending-gpu.json"), "pending",
     "worker 0 not scheduled: 0/2 nodes are available: 1 Insufficient nvidia.com/gpu"),
    ("recorded on kwok: Ready pods that log nothing", recorded("kwok-ready-no-logs.json"),
     "forming", "no training step logged yet"),
]  # fmt: skip


@pytest.mark.parametrize(("snapshot", "phase", "words"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])  # fmt: skip
def test_the_phase_and_its_reason(snapshot: Snapshot, phase: str, words: str) -> None:
    status = derive(snapshot)
    assert status.phase == phase, f"{status.phase}: {status.reason}"
    assert words in status.reason, status.reason


def test_progress_eta_and_workers_while_training() -> None:
    status = derive(Snapshot(sts(2), [pod(0), pod(1)], logs=TRAINING))
    assert (status.step, status.total_steps, status.epoch) == (100, 300, 1)
    assert (status.loss, status.accuracy, status.examples_per_sec) == (0.5, 0.9, 640.0)
    # 200 steps left x 128 examples per step / 640 examples/s.
    assert status.eta_s == 40.0
    assert (status.workers_ready, status.workers_desired, status.run_id) == (2, 2, "r1")


def test_the_step_is_known_as_soon_as_training_is_said() -> None:
    firsts = {n: worker_log(n, START, ("first_step", {"step": 7})) for n in (0, 1)}
    status = derive(Snapshot(sts(2), [pod(0), pod(1)], logs=firsts))
    assert (status.phase, status.step, status.eta_s) == ("training", 7, None), status
    # A progress line, once there, is the step's source (not the first step's record).
    later = {n: worker_log(n, START, ("first_step", {"step": 7}), progress(100)) for n in (0, 1)}
    status = derive(Snapshot(sts(2), [pod(0), pod(1)], logs=later))
    assert (status.step, status.eta_s, status.reason) == (100, 40.0, ""), status


def test_restarts_count_the_kubelets_and_the_supervisors() -> None:
    logs = {0: worker_log(0, START, ("restart", {"code": 76, "restarts": 1}),
                          ("restart", {"code": 76, "restarts": 2}), progress(10))}  # fmt: skip
    status = derive(Snapshot(sts(2), [pod(0), pod(1, restarts=3)], logs=logs))
    assert status.restarts == 5  # 3 container restarts + 2 in-place restarts


def test_the_last_events_merge_cluster_events_and_log_events_in_time_order() -> None:
    logs = {0: worker_log(0, START, progress(10))}
    logs[0].records[0]["ts"] = 1e10  # after the cluster event below
    status = derive(Snapshot(sts(2), [pod(0)],
                             [event("tfd-worker-1", "Killing", "stopping container trainer"),
                              event("other-pod", "Killing", "not this run's")], logs))  # fmt: skip
    assert status.events == ["tfd-worker-1: Killing: stopping container trainer",
                             "worker 0: start from step 0"], status.events  # fmt: skip


def test_json_holds_every_field() -> None:
    doc = derive(Snapshot(sts(2), [pod(0), pod(1)], logs=TRAINING)).to_json()
    assert set(doc) == {"phase", "reason", "run_id", "workers_ready", "workers_desired",
                        "restarts", "step", "total_steps", "epoch", "loss", "accuracy",
                        "examples_per_sec", "eta_s", "events"}  # fmt: skip


def test_a_watch_keeps_the_restarts_and_an_ended_runs_last_progress() -> None:
    training = RunStatus(
        "training", run_id="r1", restarts=2, step=780, total_steps=800, epoch=7, loss=0.1,
        accuracy=0.95, examples_per_sec=900.0, eta_s=3.0,
    )  # fmt: skip
    done = carried(training, RunStatus("done", run_id="r1"))
    assert (done.step, done.total_steps, done.epoch, done.loss, done.accuracy) == (
        780, 800, 7, 0.1, 0.95,
    ), done  # fmt: skip
    assert done.restarts == 2 and done.examples_per_sec is None and done.eta_s is None, done
    # A recreated pod counts from 0 again: the figure does not fall within a watch.
    recreated = carried(training, RunStatus("training", run_id="r1", restarts=0, step=790))
    assert recreated.restarts == 2 and recreated.step == 790, recreated
    # Another run (a new run id) carries nothing over.
    other = carried(training, RunStatus("done", run_id="r2"))
    assert other.step is None and other.restarts == 0, other
    assert carried(None, training) is training


@pytest.mark.parametrize(
    ("event_uid", "words"),
    [
        ("old-pod", "worker 0 starting: scheduled"),  # the earlier pod's Killing is not news
        ("new-pod", "worker 0 starting: Stopping container trainer"),
        (None, "worker 0 starting: Stopping container trainer"),  # no uid: taken as it is
    ],
)
def test_a_starting_pod_is_told_by_its_own_events(event_uid: str | None, words: str) -> None:
    starting = {"metadata": {"name": "tfd-worker-0", "uid": "new-pod"},
                "status": {"phase": "Pending", "conditions": []}}  # fmt: skip
    killing = event("tfd-worker-0", "Killing", "Stopping container trainer")
    if event_uid is not None:
        killing["involvedObject"]["uid"] = event_uid
    status = derive(Snapshot(sts(2, 0), [starting], [killing]))
    assert status.phase == "pending" and status.reason == words, status.reason
