"""Real multi-process training on 127.0.0.1: accuracy, identical replicas, kill -9, SIGTERM (in
training and while the cluster forms), resume at another world size, DONE, and /metrics scraped
during a run."""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.trainer.waiting import until
from trainer import contract
from trainer.errors import EXIT_NOT_ADMITTED, EXIT_RESTART
from trainer.local_cluster import STATEFULSET, LocalCluster, free_ports, parse_events, worker_envs

pytestmark = pytest.mark.slow

CHECKPOINT_EVERY = 8
ARGS = [
    "--epochs", "2",
    "--synthetic-examples", "2048",
    "--batch-size", "32",
    "--checkpoint-every", str(CHECKPOINT_EVERY),
    "--steps-per-call", "4",
    "--heartbeat-timeout", "3",
    "--log-every", "0.05",
    "--intra-op-threads", "1",
]  # fmt: skip
TOTAL_STEPS = 2 * 2048 // (32 * 2)
TOTAL_STEPS_1_WORKER = 2 * 2048 // 32
MAX_THREADS = 200
"""Threads a worker may hold: about 110 once TensorFlow is up on these machines; a thread per
collective (a collective timeout) passed 500 within this run's 64 steps."""


def _last_step(cluster: LocalCluster, worker: int = 0) -> int:
    steps = [e["step"] for e in cluster.procs[worker].events("progress")]
    return max(steps, default=0)


def _http(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, ""
    except (urllib.error.URLError, TimeoutError, ConnectionError):  # not listening (yet)
        return 0, ""


def _scrape(port: int) -> dict[str, float]:
    status, text = _http(port, contract.METRICS_PATH)
    assert status == 200, f"GET :{port}{contract.METRICS_PATH} -> {status}"
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}


def _threads(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("Threads:"))
    except (OSError, StopIteration):  # the process has exited
        return 0


def _sample_threads(cluster: LocalCluster, peaks: list[int]) -> threading.Thread:
    """Record each worker's highest thread count until every worker has exited."""

    def sample() -> None:
        while any(p.proc.poll() is None for p in cluster.procs):
            for i, p in enumerate(cluster.procs):
                peaks[i] = max(peaks[i], _threads(p.proc.pid))
            time.sleep(0.2)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    return thread


def _start(root: Path, *extra: str) -> LocalCluster:
    cluster = LocalCluster(2, str(root), [*ARGS, *extra])
    cluster.start()
    return cluster


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One uninterrupted 2-worker run (default collective settings); /metrics of worker 0
    scraped and every worker's thread count sampled while it trains."""
    root = tmp_path_factory.mktemp("trained")
    cluster = _start(root, "--on-done", "exit")
    peaks = [0, 0]
    sampler = _sample_threads(cluster, peaks)
    port = cluster.procs[0].metrics_port
    until(lambda: _last_step(cluster) > CHECKPOINT_EVERY, 120, "worker-0 progress")

    def checkpointed() -> dict[str, float] | None:
        # An asynchronous save's metrics follow its file write, which a loaded machine can
        # finish calls later: the step alone does not say the first checkpoint is counted.
        values = _scrape(port)
        return values if values[contract.METRIC_CHECKPOINT_STEP] >= CHECKPOINT_EVERY else None

    scraped = until(checkpointed, 60, "worker-0's first checkpoint in /metrics")
    ready = _http(cluster.procs[0].metrics_port, contract.READINESS_PATH)[0]
    codes = cluster.wait(timeout_s=180)
    sampler.join(timeout=5)
    return {
        "root": root,
        "cluster": cluster,
        "codes": codes,
        "metrics": scraped,
        "ready": ready,
        "threads": peaks,
    }


def test_thread_count_stays_bounded(trained: dict[str, Any]):
    assert trained["codes"] == [0, 0], trained["cluster"].procs[0].lines[-20:]
    peaks = trained["threads"]
    assert all(0 < p <= MAX_THREADS for p in peaks), f"peak threads per worker {peaks}"


def test_two_workers_train_to_accuracy_with_identical_weights(trained: dict[str, Any]):
    cluster: LocalCluster = trained["cluster"]
    assert trained["codes"] == [0, 0], cluster.procs[0].lines[-20:]
    summary = json.loads((trained["root"] / "summary.json").read_text())
    assert summary["final_step"] == TOTAL_STEPS
    assert summary["accuracy"] >= 0.9, summary
    digests = [p.events("trained")[-1]["weights_sha256"] for p in cluster.procs]
    assert digests[0] == digests[1], f"replicas diverged: {digests}"
    assert (trained["root"] / contract.DONE_MARKER).exists()
    assert (trained["root"] / "model.keras").exists()


def test_metrics_during_a_run(trained: dict[str, Any]):
    values = trained["metrics"]
    missing = [
        name
        for name in contract.METRIC_NAMES
        if (f"{name}_count" if name in contract.HISTOGRAMS else name) not in values
    ]
    assert not missing, f"worker-0 /metrics lacks {missing}"
    assert values[contract.METRIC_WORLD_SIZE] == 2
    assert values[contract.METRIC_TASK_INDEX] == 0
    assert 0 < values[contract.METRIC_STEP] <= TOTAL_STEPS
    assert values[contract.METRIC_STEPS_TOTAL] == values[contract.METRIC_STEP]
    assert values[contract.METRIC_EXAMPLES_TOTAL] == values[contract.METRIC_STEP] * 64
    assert values[f"{contract.METRIC_STEP_SECONDS}_count"] >= 1
    assert values[f"{contract.METRIC_CHECKPOINT_SAVE_SECONDS}_count"] >= 1
    assert 0 <= values[contract.METRIC_ACCURACY] <= 1
    assert 0 < values[contract.METRIC_LOSS] < 10 and math.isfinite(values[contract.METRIC_LOSS])
    assert values[contract.METRIC_EPOCH] in (0, 1)
    assert values[contract.METRIC_EXAMPLES_PER_SECOND] >= 0
    assert values[contract.METRIC_CHECKPOINT_STEP] >= CHECKPOINT_EVERY
    assert 0 <= values[contract.METRIC_CHECKPOINT_AGE] < 120
    assert values[contract.METRIC_RESUMES_TOTAL] == 0
    assert values[contract.METRIC_COMPLETED] == 0
    assert trained["ready"] == 200


def test_done_marker_means_no_training(trained: dict[str, Any]):
    cluster = _start(trained["root"], "--on-done", "idle")
    # Both must be idle before SIGTERM: a process still starting dies of its default action.
    for proc in cluster.procs:
        ready = proc.metrics_port
        until(lambda p=ready: _http(p, contract.READINESS_PATH)[0] == 200, 60, "workers ready")
    port = cluster.procs[1].metrics_port
    values = _scrape(port)
    assert values[contract.METRIC_COMPLETED] == 1
    assert _http(port, contract.LIVENESS_PATH)[0] == 200
    cluster.terminate()
    assert cluster.wait(timeout_s=60) == [0, 0]
    for proc in cluster.procs:
        assert not proc.events("start"), f"worker-{proc.index} trained again"
        assert proc.events("done"), f"worker-{proc.index} did not report completion"


def test_kill_9_then_resume(trained: dict[str, Any], tmp_path: Path):
    cluster = _start(tmp_path, "--on-done", "exit")
    until(lambda: _last_step(cluster) >= 12, 120, "worker-0 past step 12")
    reached = _last_step(cluster)
    killed_at = time.time()
    cluster.procs[1].proc.kill()
    codes = cluster.wait(kill_on_failure=False, timeout_s=60)
    survivor = cluster.procs[0]
    assert codes[0] != 0, "the survivor exited 0 after its peer was killed"
    # The 3 s heartbeat finds the loss (no collective timeout); the rest is a loaded machine's
    # slack, far below the 60 s a wait without detection would take.
    took = survivor.exit_time - killed_at
    assert took <= 30, f"survivor took {took:.1f} s"

    again = _start(tmp_path, "--on-done", "exit")
    assert again.wait(timeout_s=180) == [0, 0], again.procs[0].lines[-20:]
    resumed = [p.events("resume")[0]["step"] for p in again.procs]
    assert resumed[0] == resumed[1] > 0, resumed
    # The survivor saved the model as of its last copy (trainer.rescue), taken after every
    # k-th call (trainer.rescue_plan): the restart recomputes at most k - 1 of the calls it had
    # logged, from that rescue or from a periodic checkpoint further on.
    every = [e["every"] for e in survivor.events("rescue_copy") if "every" in e][-1:] or [1]
    assert resumed[0] >= reached - (every[0] - 1) * 4, (resumed, reached, f"every {every[0]}")
    [rescue] = survivor.events("rescue") or [None]
    if rescue is not None:
        assert resumed[0] == rescue["step"], (resumed, rescue)
        assert again.procs[0].events("resume")[0]["checkpoint"] == rescue["path"], resumed
    else:
        assert resumed[0] % CHECKPOINT_EVERY == 0, f"no rescue: resumed at {resumed}"
    summary = json.loads((tmp_path / "summary.json").read_text())
    uninterrupted = json.loads((trained["root"] / "summary.json").read_text())
    assert summary["final_step"] == uninterrupted["final_step"]


def test_sigterm_then_resume_with_fewer_workers(tmp_path: Path):
    """Both workers stop at step S; one worker (half the global batch) resumes at 2 S with the
    examples seen kept, and finishes at the 1-worker total. The optimizer's iterations follow
    the step and the learning rate follows the global batch (linear: 2x at 2 workers, 1x at 1),
    from the resume to the final checkpoint."""
    cluster = _start(tmp_path, "--on-done", "exit")
    until(lambda: _last_step(cluster) >= CHECKPOINT_EVERY, 120, "worker-0 past step 8")
    cluster.signal(1, signal.SIGTERM)
    assert cluster.wait(kill_on_failure=False, timeout_s=60) == [EXIT_RESTART, EXIT_RESTART]
    stops = [p.events("stop")[-1]["step"] for p in cluster.procs]
    assert stops[0] == stops[1], stops
    assert (tmp_path / "checkpoints" / f"ckpt-{stops[0]}.index").exists()
    assert cluster.procs[1].events("stop")[-1]["reason"] == "SIGTERM"

    alone = LocalCluster(1, str(tmp_path), [*ARGS, "--on-done", "exit"])
    alone.start()
    assert alone.wait(timeout_s=120) == [0], alone.procs[0].lines[-20:]
    events = alone.procs[0]
    assert events.events("resume")[0]["step"] == 2 * stops[0]
    rescale = events.events("rescale")[0]
    assert (rescale["saved_global_batch"], rescale["global_batch"]) == (64, 32), rescale
    assert events.events("start")[0]["total_steps"] == TOTAL_STEPS_1_WORKER
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["final_step"] == TOTAL_STEPS_1_WORKER, summary

    base = 1e-3  # --learning-rate's default
    two = [p.events("start")[0]["learning_rate"] for p in cluster.procs]
    assert two == pytest.approx([2 * base, 2 * base]), two
    resume = events.events("resume")[0]
    assert resume["optimizer_iterations"] == resume["step"] == 2 * stops[0], resume
    assert resume["learning_rate"] == pytest.approx(base), resume
    assert events.events("start")[0]["learning_rate"] == pytest.approx(base)
    final = _checkpoint_values(tmp_path, TOTAL_STEPS_1_WORKER)
    assert final["iterations"] == final["step"] == TOTAL_STEPS_1_WORKER, final
    assert final["learning_rate"] == pytest.approx(base), final
    assert final["global_batch"] == 32, final


def _checkpoint_values(root: Path, step: int) -> dict[str, float]:
    """Step, global batch, optimizer iterations and learning rate saved in ``ckpt-<step>``."""
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(root / "checkpoints" / f"ckpt-{step}"))
    value = "/.ATTRIBUTES/VARIABLE_VALUE"
    return {
        "step": int(reader.get_tensor(f"step{value}")),
        "global_batch": int(reader.get_tensor(f"global_batch{value}")),
        "iterations": int(reader.get_tensor(f"optimizer/_iterations{value}")),
        "learning_rate": float(reader.get_tensor(f"optimizer/_learning_rate{value}")),
    }


@pytest.mark.parametrize("peer", ["absent", "unresolvable"])
def test_sigterm_while_the_cluster_forms(tmp_path: Path, peer: str):
    """The chief waits for worker 1, which never comes (nothing listens on its port, or its DNS
    name does not resolve): SIGTERM ends that wait within seconds, with exit 76 and one line.
    TensorFlow's own wait (inside the strategy's constructor) holds Python's GIL and would
    handle neither the signal nor the probes."""
    env = worker_envs(2, str(tmp_path))[0]
    if peer == "unresolvable":
        chief = env[contract.ENV_WORKER_HOSTS].split(",")[0]
        env[contract.ENV_WORKER_HOSTS] = f"{chief},tfd-no-such-peer.invalid:2222"
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainer", *ARGS, "--on-done", "exit"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    watchdog = threading.Timer(120, proc.kill)  # no warning: readline ends, the test fails
    watchdog.start()
    try:
        assert proc.stdout is not None
        events = []
        while not any(e["event"] == "warning" for e in events):  # waiting for worker 1
            line = proc.stdout.readline()
            assert line, f"exited early: {proc.wait()}"
            events += parse_events([line])
        assert events[-1]["message"].startswith("cluster forming: waiting up to 60 s for "), events
        proc.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        _, err = proc.communicate(timeout=60)
        elapsed = time.monotonic() - signalled
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == EXIT_RESTART, err[-2000:]
    # Well before the 60 s forming timeout, with room for a loaded machine.
    assert elapsed < 30, f"exit {elapsed:.1f} s after SIGTERM: it waited for the timeout"
    last = err.strip().splitlines()[-1]
    assert last.startswith("trainer: error: stopped (SIGTERM) while the cluster was forming: "), (
        last
    )
    assert not (tmp_path / "checkpoints").exists()


def test_a_worker_that_joins_before_the_others_stop_waits_with_exit_77(tmp_path: Path):
    """A scale-up's new worker starts while the two running workers still train as two: the
    chief's coordination service refuses task 2, and the worker exits 77 (not admitted yet: the
    supervisor waits and tries again) instead of 75, which the hot-loop guard would count."""
    cluster = _start(tmp_path, "--on-done", "exit", "--epochs", "50")
    try:
        until(lambda: _last_step(cluster) >= 1, 120, "the two workers training")
        grpc, metrics = free_ports(2)
        env = cluster.procs[0].env | {
            contract.ENV_POD_NAME: f"{STATEFULSET}-2",
            contract.ENV_REPLICAS: "3",
            contract.ENV_GRPC_PORT: str(grpc),
            contract.ENV_METRICS_PORT: str(metrics),
            contract.ENV_WORKER_HOSTS: f"{cluster.procs[0].env[contract.ENV_WORKER_HOSTS]},"
            f"127.0.0.1:{grpc}",
        }
        joiner = subprocess.run(
            [sys.executable, "-m", "trainer", *ARGS, "--on-done", "exit"],
            env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert all(p.proc.poll() is None for p in cluster.procs), "the running pair stopped"
    finally:
        cluster.kill()
    assert joiner.returncode == EXIT_NOT_ADMITTED, joiner.stderr[-2000:]
    last = joiner.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "trainer: error: the chief runs a cluster without task 2 (the other "
        "workers have not stopped for 3 workers yet): Unexpected task"
    ), last
