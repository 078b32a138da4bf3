"""``tfd`` on the real node, run as users run it (``python -m tfd``, subprocesses, the stack's
own kubeconfig secret): a run submitted with ``--follow`` whose steps move and whose ETA falls,
``status`` while it trains, a worker killed with SIGKILL shown as restarting and counted,
``logs -f`` across the restart, done with exit code 0; a second ``submit`` that starts a new
run from step 0 that trains the user's own model on the user's TFRecords (its image built on
the trainer's as ``codeDirectory`` has the stack build it); ``stop`` to zero and ``submit`` of
the stopped run resuming from its checkpoint; ``runs`` listing both from their records.

The tests run in file order on one stack (each step needs the one before).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.e2e import realnode
from tests.e2e.harness import ROOT, Kube, Project
from tests.e2e.test_image import built, docker  # noqa: F401 - fixtures and helper
from tests.e2e.test_real_training import log_figure, node_image  # noqa: F401 - fixture
from tests.e2e.test_tfd import project_with_program, status, tfd
from tests.e2e.user_image import (
    USER_CLASSES,
    USER_DATASET,
    USER_FLAGS,
    build_user_image,
    tag_of,
)
from trainer import contract

pytestmark = [pytest.mark.real_node, pytest.mark.timeout(1800)]
NS = "tfd-cli"
STS = "tfd-worker"
STEPS_PER_EPOCH, CHECKPOINT_EVERY = 100, 20
FIRST_EPOCHS = 8
"""Long enough to see several progress readings, a checkpoint and a SIGKILL before the end."""
SECOND_EPOCHS = 30
"""The second run is stopped mid-run and resumed; this keeps it running until the stop."""
WORKERS = "app.kubernetes.io/component=worker,app.kubernetes.io/instance=tfd"
RUNS: dict[str, str] = {}
"""The second run's id, from the test that submits it to the one that stops it."""


class Background:
    """A ``tfd`` command in a subprocess whose stdout lines are collected as they come."""

    def __init__(self, project: Project, *args: str) -> None:
        env = {
            **os.environ,
            **project.env,
            "PATH": os.pathsep.join([str(ROOT / ".venv" / "bin"), project.env["PATH"]]),
        }
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tfd", *args, "--stack", project.stack.name,
             "--project-dir", str(project.work)],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        self.lines: list[tuple[float, str]] = []
        self.stderr = ""
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append((time.monotonic(), line.rstrip("\n")))

    def docs(self) -> list[dict[str, Any]]:
        out = []
        for _, line in list(self.lines):
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            if isinstance(doc, dict):
                out.append(doc)
        return out

    def wait(self, timeout: float) -> int:
        code = self.proc.wait(timeout=timeout)
        self._reader.join(timeout=10)
        assert self.proc.stderr is not None
        self.stderr = self.proc.stderr.read()
        return code

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self._reader.join(timeout=10)

    def text(self) -> str:
        return "\n".join(line for _, line in self.lines)[-4000:] + "\n" + self.stderr[-2000:]


@pytest.fixture(scope="module")
def project(new_project: Callable[..., Project], node_image: str) -> Project:  # noqa: F811
    settings = {
        "stepsPerEpoch": STEPS_PER_EPOCH,
        "checkpointEvery": CHECKPOINT_EVERY,
        "autoscalingEnabled": False,
    }
    stack = realnode.real_stack(new_project, "tfdreal", NS, node_image, settings)
    return project_with_program(stack)


@pytest.fixture(scope="module")
def user_node_image(built: str, real_node: str) -> str:  # noqa: F811 - the fixture
    """The user's image (``tests/e2e/user_code`` on the trainer image) in the node's containerd."""
    image_id = build_user_image(built)
    reference = tag_of(image_id, "-code")
    seconds = realnode.load_image(image_id, reference)
    if seconds is not None:
        log_figure("docker save | ctr import of the user's image", seconds)
    return reference


def wait_status(
    kube: Kube, project: Project, what: str, ok: Callable[[dict], bool], timeout: float = 600
) -> dict:
    def probe() -> dict | None:
        seen = status(project)
        return seen if ok(seen) else None

    return kube.wait_for(what, probe, timeout, 1)


def metrics_of(kube: Kube, pod: str) -> dict[str, float]:
    return realnode.pod_metrics(kube, NS, pod)


def events_of(docs: list[dict[str, Any]], worker: int) -> list[tuple[float, dict[str, Any]]]:
    """The trainer's own event lines of ``worker`` among ``tfd logs --json`` documents: (the
    kubelet's timestamp, the event). TensorFlow's own lines (not JSON) are left out."""
    out = []
    for doc in docs:
        if doc.get("worker") != worker:
            continue
        try:
            event = json.loads(doc["line"])
        except (KeyError, TypeError, ValueError):
            continue
        if isinstance(event, dict) and "event" in event:
            out.append((float(doc["ts"]), event))
    return out


def trainer_events(logs: Background, worker: int) -> list[tuple[float, dict[str, Any]]]:
    return events_of(logs.docs(), worker)


def current_events(project: Project, worker: int) -> list[dict[str, Any]]:
    """``tfd logs --worker N --json`` now: the trainer events of the worker's container."""
    result = tfd(project, "logs", "--worker", str(worker), "--json")
    assert result.returncode == 0, result.stderr
    docs = []
    for line in result.stdout.splitlines():
        try:
            docs.append(json.loads(line))
        except ValueError:
            continue
    return [e for _, e in events_of(docs, worker)]


@pytest.fixture(scope="module")
def first_run(project: Project, kube: Kube) -> dict[str, Any]:
    """``tfd submit --follow`` of run ``first``; while it runs: ``status``, ``logs -f`` and a
    SIGKILL of worker 1 once a checkpoint exists. Everything seen, for the tests below."""
    started = time.monotonic()
    submit = Background(
        project, "submit", "--run-id", "first", "--epochs", str(FIRST_EPOCHS), "--follow",
        "--json", "--timeout", "20m",
    )  # fmt: skip
    logs: Background | None = None
    seen: dict[str, Any] = {"statuses": []}
    try:
        # `training` is said from the first step; the rate and the ETA come with the first
        # progress line, which is what the reading below is checked for.
        training = wait_status(
            kube, project, "tfd status: training with an ETA",
            lambda s: s["phase"] == "training" and s["eta_s"] is not None,
        )  # fmt: skip
        log_figure("tfd submit to tfd status training", time.monotonic() - started)
        seen["training"] = training
        human = tfd(project, "status")
        print(f"[tfd output] tfd status while training:\n{human.stdout}")
        logs = Background(project, "logs", "-f", "--json")
        follower = logs
        kube.wait_for(
            "tfd logs -f showing both workers",
            lambda: all(trainer_events(follower, n) for n in (0, 1)),
            120, 1,
        )  # fmt: skip
        kube.wait_for(
            "a first checkpoint",
            lambda: metrics_of(kube, f"{STS}-1").get(contract.METRIC_CHECKPOINT_STEP, 0) > 0,
            300, 1,
        )  # fmt: skip
        os.kill(realnode.container_pid(NS, f"{STS}-1"), 9)
        seen["killed_at_wall"] = time.time()
        killed = time.monotonic()
        # The restart is short: read the status as often as tfd answers until training again.
        while time.monotonic() - killed < 300:
            st = status(project)
            seen["statuses"].append(st)
            if st["phase"] == "training" and st["restarts"] >= 1:
                break
        log_figure("kill -9 to tfd status training again", time.monotonic() - killed)
        seen["exit_code"] = submit.wait(timeout=1200)
        log_figure("tfd submit --follow of the first run to its exit", time.monotonic() - started)
        # The run is done once DONE exists; worker 0 logs its `done` after the last barrier,
        # and the follower reads it some polls later. Wait for that line (what the logs test
        # checks); without it the test says what the follower got.
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not any(
            e["event"] == "done" for _, e in trainer_events(follower, 0)
        ):
            time.sleep(1)
    finally:
        submit.stop()
        if logs is not None:
            logs.stop()
    seen["submit"] = submit
    seen["logs"] = logs
    return seen


def test_submit_follow_shows_steps_that_move_and_an_eta_that_falls(
    first_run: dict[str, Any],
) -> None:
    submit: Background = first_run["submit"]
    assert first_run["exit_code"] == 0, submit.text()
    docs = submit.docs()
    assert docs[0]["event"] == "submit" and docs[0]["run_id"] == "first", docs[0]
    assert docs[0]["continues"] is False, docs[0]
    training = [d for d in docs if d.get("phase") == "training" and d.get("step") is not None]
    steps = [d["step"] for d in training]
    assert len(set(steps)) >= 3, f"steps seen while training: {steps}"
    total = FIRST_EPOCHS * STEPS_PER_EPOCH
    assert {d["total_steps"] for d in training} == {total}, training[-1]
    etas = [d["eta_s"] for d in training if d.get("eta_s") is not None]
    assert len(etas) >= 2 and etas[-1] < etas[0], f"ETAs seen: {etas}"
    # The workers are gone once the run is done: the last reading's step is kept (tfd runs
    # reads the final one from the run's record).
    assert docs[-1]["phase"] == "done" and docs[-1]["step"] >= steps[-1], docs[-1]
    print(f"[tfd figure] submit --follow: steps {steps[0]} .. {steps[-1]}, ETA {etas[0]:.0f} s "
          f"-> {etas[-1]:.0f} s over {len(training)} readings")  # fmt: skip


def test_status_while_training_and_the_killed_worker_restarting_and_counted(
    first_run: dict[str, Any],
) -> None:
    training = first_run["training"]
    assert training["run_id"] == "first", training
    assert training["workers_ready"] == 2 and training["workers_desired"] == 2, training
    assert training["total_steps"] == FIRST_EPOCHS * STEPS_PER_EPOCH, training
    assert training["step"] is not None and training["eta_s"] is not None, training
    statuses = first_run["statuses"]
    phases = [s["phase"] for s in statuses]
    assert "restarting" in phases or any(s["workers_ready"] < 2 for s in statuses), phases
    assert statuses[-1]["phase"] == "training" and statuses[-1]["restarts"] >= 1, statuses[-1]
    submit: Background = first_run["submit"]
    followed = [d for d in submit.docs() if "phase" in d]
    assert followed[-1]["restarts"] >= 1, followed[-1]


def test_logs_follow_shows_both_workers_across_the_restart(first_run: dict[str, Any]) -> None:
    logs: Background = first_run["logs"]
    killed = first_run["killed_at_wall"]
    for worker in (0, 1):
        events = trainer_events(logs, worker)
        assert any(ts < killed for ts, _ in events), f"worker {worker}: no line before the kill"
        assert any(ts > killed for ts, _ in events), f"worker {worker}: no line after the kill"
    # Worker 1's container was killed: its new instance resumed from the checkpoint.
    after = [e for ts, e in trainer_events(logs, 1) if ts > killed]
    resumed = [e for e in after if e["event"] == "resume"]
    assert resumed and resumed[0]["step"] > 0, [e["event"] for e in after][:20]
    assert any(e["event"] == "done" for _, e in trainer_events(logs, 0)), logs.text()


def test_a_failing_setting_ends_submit_with_the_workers_own_error(
    project: Project, kube: Kube, user_node_image: str
) -> None:
    # The user's model on the user's records with a fixed --steps-per-epoch (the stack's):
    # the records are not counted, so the trainer cannot tell the classes and refuses.
    started = time.monotonic()
    result = tfd(
        project, "submit", "--epochs", str(SECOND_EPOCHS), "--image", user_node_image,
        "--set", f"dataset={USER_DATASET}", "--set", f"trainerFlags={json.dumps(USER_FLAGS)}",
        timeout=900,
    )  # fmt: skip
    waited = time.monotonic() - started
    out = result.stdout + result.stderr
    assert result.returncode == 1, out[-3000:]
    assert "the number of classes is unknown" in result.stderr, out[-3000:]
    assert "pulumi up stopped waiting for the workers" in result.stderr, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    log_figure("tfd submit of a failing setting to its exit 1", waited)
    print(f"[tfd output] tfd submit of a failing setting:\n{result.stderr[-1500:]}")
    RUNS["second"] = project.stack.get_config("tf-distributed:runId").value


def test_a_second_submit_starts_a_new_run_of_the_users_model_from_step_0(
    project: Project, kube: Kube
) -> None:
    # The same run with the setting the error asked for (it never trained: nothing to keep).
    flags = [*USER_FLAGS, f"num-classes={USER_CLASSES}"]
    result = tfd(
        project, "submit", "--continue", "--set", f"trainerFlags={json.dumps(flags)}",
        "--json", "--timeout", "10m",
        timeout=900,
    )  # fmt: skip
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    docs = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    run_id = docs[0]["run_id"]
    assert run_id == RUNS["second"] != "first", docs[0]
    assert docs[-1]["phase"] == "training" and docs[-1]["run_id"] == run_id, docs[-1]
    # A new run directory: nothing resumed, the run's first start began at step 0.
    events = kube.wait_for(
        "worker 0's start event of the second run",
        lambda: [e for e in current_events(project, 0) if e["event"] == "start"] or None,
        120, 2,
    )  # fmt: skip
    assert events[0]["run_id"] == run_id and events[0]["start_step"] == 0, events[0]
    # The user's model (its output width is the records' classes) on the user's records.
    assert events[0]["num_classes"] == USER_CLASSES, events[0]
    assert USER_DATASET in events[0]["dataset"], events[0]
    assert not [e for e in current_events(project, 0) if e["event"] == "resume"], "it resumed"


def test_stop_scales_to_zero_and_submit_of_the_stopped_run_resumes_it(
    project: Project, kube: Kube
) -> None:
    run_id = RUNS["second"]
    kube.wait_for(
        "a checkpoint of the second run",
        lambda: metrics_of(kube, f"{STS}-0").get(contract.METRIC_CHECKPOINT_STEP, 0) > 0,
        300, 1,
    )  # fmt: skip
    stopped = tfd(project, "stop")
    assert stopped.returncode == 0, stopped.stderr
    assert stopped.stdout.startswith(f"stopped run {run_id} on stack tfdreal: 2 -> 0"), stopped
    print(f"[tfd output] tfd stop:\n{stopped.stdout}")
    kube.wait_for("no worker pod", lambda: not kube.items("pods", NS, WORKERS), 120, 1)
    seen = status(project)
    assert seen["phase"] == "stopped" and seen["workers_desired"] == 0, seen
    human = tfd(project, "status")
    assert human.returncode == 0 and human.stdout.startswith("stopped"), human.stdout
    print(f"[tfd output] tfd status of a stopped run:\n{human.stdout}")

    resumed = tfd(project, "submit", "--run-id", run_id, "--timeout", "10m", timeout=900)
    out = resumed.stdout + resumed.stderr
    assert resumed.returncode == 0, out[-3000:]
    assert f"run {run_id} (continued) on stack tfdreal" in out, out[-3000:]
    assert f"resumed stopped run {run_id}: 0 -> 2 workers" in out, out[-3000:]
    print(f"[tfd output] tfd submit --run-id {run_id} of the stopped run:\n{out[-3000:]}")

    def resumed_step() -> int | None:
        steps = [e["step"] for e in current_events(project, 0) if e["event"] == "resume"]
        return steps[0] if steps else None

    step = kube.wait_for("worker 0 resumed from the checkpoint", resumed_step, 300, 2)
    assert step > 0, step
    human = tfd(project, "status")
    print(f"[tfd output] tfd status while the resumed run trains:\n{human.stdout}")
    assert tfd(project, "stop").returncode == 0


def runs_of(project: Project) -> dict[str, Any]:
    result = tfd(project, "runs", "--json", timeout=300)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    return json.loads(result.stdout)


def test_runs_lists_both_runs_from_their_records(
    project: Project,
    kube: Kube,
    node_image: str,  # noqa: F811 - the fixture
    user_node_image: str,
) -> None:
    kube.wait_for("no worker pod", lambda: not kube.items("pods", NS, WORKERS), 120, 1)

    def settled() -> dict[str, Any] | None:
        doc = runs_of(project)
        states = {r["run_id"]: r["state"] for r in doc["runs"]}
        return doc if states.get(RUNS["second"]) == "stopped" else None

    doc = kube.wait_for("the stopped run's lease released or expired", settled, 120, 5)
    assert doc["read_by"].startswith("pod "), doc["read_by"]  # no worker runs: a reader pod
    runs = {r["run_id"]: r for r in doc["runs"]}
    assert set(runs) == {"first", RUNS["second"]}, sorted(runs)
    first, second = runs["first"], runs[RUNS["second"]]
    assert first["state"] == "done" and first["step"] == FIRST_EPOCHS * STEPS_PER_EPOCH, first
    assert first["accuracy"] is not None and first["duration_s"] > 0, first
    assert first["image"] == node_image and second["image"] == user_node_image, (first, second)
    # A reference by tag holds no digest (the stack's imageDigest is empty too); the stack's
    # own build (pulumi-docker) or a reference by digest gives one.
    for run in (first, second):
        assert (run["image_digest"] or "") == contract.image_digest(run["image"]), run
        assert run["started_utc"] and not run["problems"], run
    assert second["step"] > 0 and second["accuracy"] is None, second
    kube.wait_for("the reader pod deleted", lambda: not kube.items("pods", NS), 120, 1)
    human = tfd(project, "runs")
    assert human.returncode == 0, human.stderr
    print(f"[tfd output] tfd runs:\n{human.stdout}")
