"""The run's lifecycle with real training: run identity through ``trainer.local`` (a finished run
stays finished, a new id starts at 0, the same id resumes, more epochs continue), scale to zero
after the final model, and a rollout that stops every worker at one step and deletes each pod,
under the supervisor, against a fake Kubernetes API."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.trainer.fake_api import FakeApi, Seen
from tests.trainer.waiting import until
from trainer import contract, done_marker
from trainer.errors import EXIT_OK, EXIT_RESTART
from trainer.local_cluster import LocalCluster, parse_events, split_worker_output

pytestmark = pytest.mark.slow

TINY = ["--synthetic-examples", "512", "--batch-size", "32", "--steps-per-call", "4"]
STEPS_PER_EPOCH = 512 // 32
SLOW = ["--synthetic-examples", "4096", "--batch-size", "16", "--steps-per-call", "2"]
COMMON = ["--log-every", "0.05", "--intra-op-threads", "1", "--checkpoint-every", "8"]


def _launch(root: Path, run_id: str, *flags: str) -> tuple[int, dict[str, Any], list[dict]]:
    """``python -m trainer.local`` with one worker: exit code, summary line, worker-0 events."""
    proc = subprocess.run(
        [sys.executable, "-m", "trainer.local", "--workers", "1", "--restarts", "0"]
        + ["--checkpoint-root", str(root), "--run-id", run_id, *TINY, *COMMON, *flags],
        capture_output=True,
        text=True,
        timeout=180,
        env=os.environ | {"TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    lines = proc.stdout.splitlines()
    events = parse_events(split_worker_output(lines).get(0, []))
    return proc.returncode, json.loads(lines[-1]), events


def _names(events: list[dict]) -> list[str]:
    return [e["event"] for e in events]


def test_run_identity_with_the_local_launcher(tmp_path: Path):
    # A run to the end.
    code, summary, events = _launch(tmp_path, "run-a", "--epochs", "1")
    assert code == EXIT_OK, events[-5:]
    assert (summary["run_id"], summary["final_step"]) == ("run-a", STEPS_PER_EPOCH), summary
    assert summary["checkpoint_dir"] == str(tmp_path / "run-a")
    start = next(e for e in events if e["event"] == "start")
    assert (start["run_id"], start["start_step"]) == ("run-a", 0), start
    done = done_marker.read_done(str(tmp_path / "run-a"))
    assert done is not None and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", done.finished_utc)
    wanted = done_marker.DoneRecord(
        STEPS_PER_EPOCH, 1, STEPS_PER_EPOCH, 32, "run-a", done.finished_utc
    )
    assert done == wanted, done
    written = json.loads((tmp_path / "run-a" / "summary.json").read_text())
    assert written["run_id"] == "run-a"
    before = (tmp_path / "run-a" / "summary.json").stat().st_mtime_ns

    # The same identity again: finished, nothing trained, nothing rewritten. The launcher maps
    # scale-to-zero (no StatefulSet here) to exit.
    again = ["--epochs", "1", "--on-done", "scale-to-zero"]
    code, summary, events = _launch(tmp_path, "run-a", *again)
    assert code == EXIT_OK and "start" not in _names(events), _names(events)
    assert events[0]["event"] == "done" and events[0]["reason"] == "run finished; not training"
    assert (tmp_path / "run-a" / "summary.json").stat().st_mtime_ns == before

    # A new identity: a new directory, from step 0.
    code, summary, events = _launch(tmp_path, "run-b", "--epochs", "1")
    assert code == EXIT_OK, events[-5:]
    assert "resume" not in _names(events)
    assert next(e for e in events if e["event"] == "start")["start_step"] == 0
    assert summary["run_id"] == "run-b" and (tmp_path / "run-b" / contract.DONE_MARKER).exists()

    # More epochs with the first identity: continues from its last checkpoint, writes DONE again.
    code, summary, events = _launch(tmp_path, "run-a", "--epochs", "2")
    assert code == EXIT_OK, events[-5:]
    names = _names(events)
    assert names.index("continue") < names.index("resume") < names.index("start"), names
    resume = next(e for e in events if e["event"] == "resume")
    assert resume["step"] == STEPS_PER_EPOCH > 0
    assert summary["final_step"] == 2 * STEPS_PER_EPOCH, summary
    assert done_marker.read_done(str(tmp_path / "run-a")).final_step == 2 * STEPS_PER_EPOCH


def test_same_identity_resumes_an_interrupted_run(tmp_path: Path):
    cmd = [sys.executable, "-m", "trainer.local", "--workers", "1", "--restarts", "0"]
    cmd += ["--checkpoint-root", str(tmp_path), "--run-id", "run-c", "--epochs", "2"]
    proc = subprocess.Popen(
        cmd + SLOW + COMMON,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=os.environ | {"TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    assert proc.stdout is not None
    lines: list[str] = []
    for line in proc.stdout:
        lines.append(line)
        events = parse_events(split_worker_output(lines).get(0, []))
        if any(e["event"] == "checkpoint" for e in events):
            pid = next(e["pid"] for e in events if e["event"] == "start")
            os.kill(pid, signal.SIGTERM)
            break
    proc.communicate(timeout=60)
    assert proc.returncode == EXIT_RESTART, "".join(lines[-10:])
    code, summary, events = _launch(tmp_path, "run-c", "--epochs", "2", *SLOW)
    assert code == EXIT_OK, events[-5:]
    assert next(e for e in events if e["event"] == "resume")["step"] > 0
    assert summary["final_step"] == 2 * 4096 // 16


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_scale_to_zero_after_the_final_model(api: FakeApi, tmp_path: Path):
    root = tmp_path / "run-z"
    at_patch: dict[str, bool] = {}

    def look(seen: Seen) -> None:
        if seen.method == "PATCH":
            for name in ("model.keras", "summary.json", contract.DONE_MARKER):
                at_patch[name] = (root / name).exists()

    api.on_request = look
    env = api.env(tmp_path / "token") | {contract.ENV_POD_REVISION: "rev-a"}
    cluster = LocalCluster(
        1, str(root), [*TINY, *COMMON, "--epochs", "1", "--on-done", "scale-to-zero"],
        extra_env=env, module="trainer.supervisor",
    )  # fmt: skip
    cluster.start()
    try:
        until(lambda: api.calls("PATCH"), 120, "the scale PATCH")
        assert at_patch == dict.fromkeys(at_patch, True) and len(at_patch) == 3, at_patch
        (patch,) = api.calls("PATCH")
        assert patch.path.endswith("/statefulsets/tfd-worker/scale")
        assert patch.body == {"spec": {"replicas": 0}}
        worker = cluster.procs[0]
        until(lambda: worker.events("idle"), 60, "the wait after scaling")
        # Waiting is a blocked Event.wait: the trainer (the supervisor's child) uses no CPU.
        child = int(worker.events("start")[0]["pid"])
        used = _cpu_seconds(child)
        time.sleep(2.0)
        assert _cpu_seconds(child) - used < 0.2, "a finished worker keeps computing"
    finally:
        cluster.terminate()
    assert cluster.wait(timeout_s=60) == [EXIT_OK], cluster.procs[0].lines[-10:]
    names = _names(cluster.procs[0].events())
    assert names[-4:] == ["done", "scaled_to_zero", "idle", "supervisor_exit"], names


def test_rollout_stops_every_worker_at_one_step_and_deletes_each_pod(api: FakeApi, tmp_path: Path):
    root = tmp_path / "run-r"
    api.replicas = 2
    env = api.env(tmp_path / "token") | {contract.ENV_POD_REVISION: "rev-a"}
    args = [*SLOW, *COMMON, "--epochs", "1", "--replicas-poll", "0.2", "--on-done", "exit"]
    cluster = LocalCluster(2, str(root), args, extra_env=env, module="trainer.supervisor")
    cluster.start()
    try:
        until(lambda: cluster.procs[0].events("checkpoint"), 180, "a first checkpoint")
        api.update_revision = "rev-b"  # the pod template changed (updateStrategy OnDelete)
        until(lambda: len(api.calls("DELETE")) == 2, 60, "both pods deleted")
    finally:
        cluster.terminate()  # the kubelet's SIGTERM to each deleted pod
    assert cluster.wait(timeout_s=60) == [EXIT_RESTART, EXIT_RESTART], cluster.procs[1].lines[-10:]
    paths = sorted(s.path for s in api.calls("DELETE"))
    assert paths == [f"/api/v1/namespaces/local/pods/tfd-worker-{i}" for i in (0, 1)], paths
    stops = [p.events("stop")[-1] for p in cluster.procs]
    assert [s["reason"] for s in stops] == ["rollout", "rollout"], stops
    assert stops[0]["step"] == stops[1]["step"], stops
    assert (root / "checkpoints" / f"ckpt-{stops[0]['step']}.index").exists()
    assert not api.calls("PATCH")

    # The controller recreates both pods from the new template: they resume at that step.
    env[contract.ENV_POD_REVISION] = "rev-b"
    again = LocalCluster(2, str(root), args, extra_env=env, module="trainer.supervisor")
    again.start()
    assert again.wait(timeout_s=240) == [EXIT_OK, EXIT_OK], again.procs[0].lines[-10:]
    assert [p.events("resume")[0]["step"] for p in again.procs] == [stops[0]["step"]] * 2
    assert json.loads((root / "summary.json").read_text())["final_step"] == 4096 // 32
