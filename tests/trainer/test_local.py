"""The local launcher's CLI, restart-after-failure, JSON summary; live world-size changes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from trainer import contract, errors, local, local_cluster
from trainer.errors import EXIT_RESTART, EXIT_USAGE

SUMMARY_KEYS = {"workers", "final_step", "loss", "accuracy", "examples_per_sec", "wall_s"}


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["--workers", "0"], "--workers: must be in [1, 16]"),
        (["--restarts", "-1"], "--restarts: must be in [0, 100]"),
        (["--epochs", "zero"], "--epochs: must be an integer in [1, 100000]"),
        (["--eval-split", "0.1", "--eval-dataset", "e.npz"], "--eval-split: must be 0 when"),
        (["--work", "2"], "--work: unknown flag"),
        (["--worker", "2"], "--worker: unknown flag; did you mean --workers?"),
        (["--epoch", "2"], "--epoch: unknown flag; did you mean --epochs?"),
        (["--data", "x.npz"], "--data: unknown flag; did you mean --dataset?"),
        (["--epochs", "0"], "--epochs: must be an integer in [1, 100000]; got '0'"),
        (["--model", "/x/m.py:build"], "--model: must be 'module:function' with an importable"),
        (["--run-id", "a", "--checkpoint-dir", "/tmp/x"], "--run-id: give --run-id or"),
        (["--run-id=a_"], "--run-id: must be 1-63 letters"),
        (["--checkpoint-dir", "/tmp/a b"], "got 'a b'"),
        (["--checkpoint-root", "s3://b/runs"], "--checkpoint-root: s3:// is not supported"),
        (["--checkpoint-dir", "s3://b/runs/r1"], "--checkpoint-dir: s3:// is not supported"),
        (["--dataset", "s3://b/d.npz"], "--dataset: s3:// is not supported"),
    ],
)
def test_bad_flags_start_nothing(argv: list[str], match: str, capsys: pytest.CaptureFixture[str]):
    with pytest.raises(SystemExit) as info:
        local.main(argv)
    assert info.value.code == EXIT_USAGE
    captured = capsys.readouterr()
    # One line: the usage block is for --help.
    assert captured.err.startswith("python -m trainer.local: error: "), captured.err
    assert match in captured.err and len(captured.err.splitlines()) == 1, captured.err
    assert "[launcher] starting" not in captured.out


@pytest.mark.parametrize(
    ("flag", "path"),
    [
        ("--checkpoint-dir", "/proc/forbidden"),
        ("--checkpoint-dir", "{file}/run-1"),
        ("--checkpoint-root", "{file}"),
    ],
    ids=["under-proc", "under-a-file", "root-is-a-file"],
)
def test_a_run_directory_that_cannot_be_made_is_one_line(
    flag: str, path: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    """Exit 5 (as the trainer's unwritable run directory), no traceback, nothing started."""
    file = tmp_path / "a-file"
    file.write_text("")
    path = path.format(file=file)
    assert local.main([flag, path, "--workers", "1"]) == errors.EXIT_CHECKPOINT
    captured = capsys.readouterr()
    root = path if flag == "--checkpoint-dir" else f"{path}/"
    assert captured.err.startswith(
        f"python -m trainer.local: error: {flag}: cannot create the run's directory {root}"
    ), captured.err
    assert len(captured.err.splitlines()) == 1, captured.err
    assert captured.out == "", captured.out


def test_help_lists_the_trainer_flags_too(capsys: pytest.CaptureFixture[str]):
    with pytest.raises(SystemExit) as info:
        local.main(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "--workers WORKERS" in out and "trainer flags (passed to every worker" in out, out
    for name in contract.TrainerFlags.__dataclass_fields__:
        assert contract.flag_name(name) in out, f"{contract.flag_name(name)} not in the help"


def test_run_id_is_the_checkpoint_directory(tmp_path: Path):
    envs = local_cluster.worker_envs(2, str(tmp_path / "runs" / "run-42"))
    assert {e[contract.ENV_RUN_ID] for e in envs} == {"run-42"}
    assert all(contract.run_id_from_env(e) == "run-42" for e in envs)


def test_worker_envs_follow_the_contract(tmp_path: Path):
    envs = local_cluster.worker_envs(3, str(tmp_path), base={"TF_CONFIG": "{}"})
    specs = [contract.cluster_spec_from_env(e) for e in envs]
    assert [s.task_index for s in specs] == [0, 1, 2]
    assert len({s.workers for s in specs}) == 1 and specs[0].num_workers == 3
    assert all(h.startswith("127.0.0.1:") for h in specs[0].workers)
    assert len({e[contract.ENV_METRICS_PORT] for e in envs}) == 3
    assert all(contract.ENV_TF_CONFIG not in e for e in envs)


@pytest.mark.parametrize(
    ("launch_id", "inherited", "expected"),
    [
        ("5e1f", "", "5e1f"),
        ("5e1f", "stale", "5e1f"),
        ("", "stale", None),  # another launch's id is never passed on
        ("", "", None),
    ],
)
def test_worker_envs_carry_the_launch_id(
    tmp_path: Path, launch_id: str, inherited: str, expected: str | None
):
    base = {contract.ENV_LAUNCH_ID: inherited} if inherited else {}
    envs = local_cluster.worker_envs(2, str(tmp_path), base=base, launch_id=launch_id)
    assert [e.get(contract.ENV_LAUNCH_ID) for e in envs] == [expected, expected], envs


def test_each_launch_draws_one_launch_id_for_all_its_attempts(tmp_path: Path, monkeypatch):
    """Two launches of one run id on one host get two lease holders; the workers of one launch,
    restarted after a failure, stay its holder (an instant take-back of the lease)."""
    started: list[str] = []

    class Cluster:
        def __init__(self, *_: object, launch_id: str = "", **__: object) -> None:
            self.launch_id = launch_id
            self.codes = [[EXIT_RESTART], [0]]  # one restart, then done
            self.procs: list[local_cluster.WorkerProcess] = []

        def start(self) -> None:
            envs = local_cluster.worker_envs(1, str(tmp_path), base={}, launch_id=self.launch_id)
            started.append(envs[0][contract.ENV_LAUNCH_ID])
            self.procs = [local_cluster.WorkerProcess(0, None, envs[0])]  # type: ignore[arg-type]

        def close(self) -> None:
            pass

        def wait(self) -> list[int]:
            return self.codes.pop(0)

    monkeypatch.setattr(local, "LocalCluster", Cluster)
    monkeypatch.setattr(local.signal, "signal", lambda *_: None)  # keep pytest's handlers
    for _ in range(2):
        assert local.main(["--workers", "1", "--checkpoint-dir", str(tmp_path / "r1")]) == 0
    assert len(started) == 4 and all(started), started
    assert started[0] == started[1] and started[2] == started[3], "a restart changed the id"
    assert started[0] != started[2], "two launches share a lease holder"


@pytest.mark.parametrize(
    ("error", "permanent"),
    [
        (errors.UsageError, True),
        (errors.ContractError, True),
        (errors.DataError, True),
        (errors.CheckpointError, True),
        (errors.ModelError, True),
        (errors.ApiError, True),  # RBAC or the API: a restart cannot fix it
        (errors.RunConflictError, True),  # another run's manifest or a live chief's lease
        (errors.DivergedError, True),  # it would diverge again from the same checkpoint
        (errors.PeerLostError, False),
        (errors.NotAdmittedError, False),  # the others stop for the new size: try again
        (errors.RestartRequested, False),
        (errors.TrainerError, False),  # EXIT_UNEXPECTED: may be transient (OOM), retried
    ],
)
def test_permanent_exit_codes(error: type[errors.TrainerError], permanent: bool):
    assert (error.exit_code in local.PERMANENT_EXIT_CODES) is permanent, (
        f"{error.__name__} (exit {error.exit_code}) in PERMANENT_EXIT_CODES should be {permanent}"
    )


def test_every_trainer_error_is_classified():
    """A new error class must be placed on one side of the retry rule on purpose."""
    known = {
        errors.UsageError,
        errors.ContractError,
        errors.DataError,
        errors.CheckpointError,
        errors.ModelError,
        errors.ApiError,
        errors.RunConflictError,
        errors.DivergedError,
        errors.PeerLostError,
        errors.NotAdmittedError,
        errors.RestartRequested,
    }
    assert set(errors.TrainerError.__subclasses__()) == known


@pytest.mark.parametrize(
    ("workers", "cpus", "expected"),
    [(1, 2, 2), (2, 2, 1), (3, 2, 1), (2, 16, 8), (3, 16, 5)],
)
def test_intra_op_threads(workers: int, cpus: int, expected: int):
    assert local_cluster.intra_op_threads(workers, cpus) == expected


def test_worker_output_parsers():
    output = [
        "[launcher] starting 2 workers",
        '[worker-0] {"ts": 1.0, "event": "start", "worker": 0}',
        "[worker-1] W0000 tensorflow noise {not json",
        '[worker-1] {"ts": 2.0, "event": "first_step", "worker": 1, "step": 4}',
        '[worker-0] {"no_event": true}',
        '{"workers": 2, "exit_code": 0}',
    ]
    split = local_cluster.split_worker_output(output)
    assert sorted(split) == [0, 1] and len(split[1]) == 2
    assert [e["event"] for e in local_cluster.parse_events(split[0])] == ["start"]
    assert local_cluster.parse_events(split[1], "first_step")[0]["step"] == 4
    assert local_cluster.parse_events(split[1], "start") == []


@pytest.mark.parametrize("scheme", ["file", "ram"])
def test_summary_line_reads_the_runs_summary_where_it_is(tmp_path: Path, scheme: str):
    """The last line's figures come from the run's own summary.json, local or not (``ram://``
    stands for ``gs://``: both are read through tf.io.gfile, not the local disk)."""
    import tensorflow as tf

    root = str(tmp_path / "r1") if scheme == "file" else f"ram://{tmp_path.name}/r1"
    tf.io.gfile.makedirs(root)
    with tf.io.gfile.GFile(f"{root}/summary.json", "w") as f:
        f.write(json.dumps({"final_step": 32, "loss": 0.5, "accuracy": 0.9}))
    line = local._summary_line(2, root, 1.0, 0, 0)
    assert (line["final_step"], line["loss"], line["accuracy"]) == (32, 0.5, 0.9), (root, line)
    assert local._summary_line(2, root, 1.0, 0, errors.EXIT_DATA)["final_step"] is None


@pytest.mark.slow
def test_sigterm_restart_then_summary(tmp_path: Path):
    """A preempted worker exits EXIT_RESTART; the launcher restarts it; it resumes and ends."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainer.local", "--workers", "1", "--restarts", "1"]
        + ["--checkpoint-dir", str(tmp_path), "--epochs", "3", "--synthetic-examples", "1024"]
        + ["--batch-size", "16", "--checkpoint-every", "8", "--steps-per-call", "4"]
        + ["--log-every", "0.05"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=os.environ | {"TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    lines: list[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line)
        if '"event": "progress"' in line and not any("SIGTERM sent" in x for x in lines):
            pid = next(json.loads(x.split("] ", 1)[1])["pid"] for x in lines if '"start"' in x)
            os.kill(pid, signal.SIGTERM)
            lines.append("SIGTERM sent\n")
    assert proc.wait(timeout=60) == 0, "".join(lines[-30:])
    summary = json.loads(lines[-1])
    assert SUMMARY_KEYS | {"restarts"} <= summary.keys()
    assert summary["restarts"] == 1 and summary["workers"] == 1
    assert 0 < summary["launch_to_first_step_s"] < summary["wall_s"]
    assert summary["final_step"] == 3 * 1024 // 16
    assert any(f"exit codes [{EXIT_RESTART}]" in x for x in lines)
    assert any('"event": "resume"' in x for x in lines)


@pytest.mark.slow
def test_world_size_change_stops_at_a_checkpoint(tmp_path: Path):
    replicas = {"n": 1}

    class Api(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            body = json.dumps({"spec": {"replicas": replicas["n"]}}).encode()
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Api)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    token = tmp_path / "token"
    token.write_text("t")
    env = {
        contract.ENV_REPLICAS_SOURCE: "api",
        contract.ENV_API_URL: f"http://127.0.0.1:{server.server_address[1]}",
        contract.ENV_API_TOKEN_PATH: str(token),
    }
    cluster = local.LocalCluster(
        1,
        str(tmp_path / "run"),
        ["--epochs", "50", "--replicas-poll", "0.2", "--log-every", "0.05"],
        extra_env=env,
    )
    try:
        cluster.start()
        deadline = time.time() + 60
        while not cluster.procs[0].events("progress") and time.time() < deadline:
            time.sleep(0.05)
        replicas["n"] = 2  # an autoscaler added a worker
        assert cluster.wait(timeout_s=60) == [EXIT_RESTART], cluster.procs[0].lines[-10:]
    finally:
        server.shutdown()
        server.server_close()
    stop = cluster.procs[0].events("stop")[-1]
    assert stop["reason"] == "world size changed"
    assert (tmp_path / "run" / "checkpoints" / f"ckpt-{stop['step']}.index").exists()


@pytest.mark.parametrize(
    ("existed", "state", "codes", "kept"),
    [
        (False, "", [EXIT_USAGE], False),  # failed before any checkpoint: nothing resumes
        (False, "checkpoints/checkpoint", [errors.EXIT_DATA], True),  # a checkpoint resumes it
        (False, "checkpoints/rescue-1/checkpoint", [errors.EXIT_DATA], True),  # so does a rescue
        (False, "checkpoints/rescue-1.tmp/checkpoint", [errors.EXIT_DATA], True),  # not renamed
        (False, "checkpoints/rescue-1/ckpt-4.index", [errors.EXIT_DATA], False),  # no state file
        (True, "", [EXIT_USAGE], True),  # the directory was there before this launch
        (False, "", [0], True),  # a finished run keeps its directory
    ],
)
def test_a_failed_run_leaves_only_what_resumes(
    tmp_path: Path, monkeypatch, existed: bool, state: str, codes: list[int], kept: bool
):
    run_dir = tmp_path / "runs" / "r1"
    if existed:
        run_dir.mkdir(parents=True)

    class Cluster:
        def __init__(self, *_: object, **__: object) -> None:
            self.procs: list[local_cluster.WorkerProcess] = []

        def start(self) -> None:
            (run_dir / "run.json").write_text("{}")
            if state:  # what a save writes last
                (run_dir / state).parent.mkdir(parents=True)
                (run_dir / state).write_text("")
            self.procs = [local_cluster.WorkerProcess(0, None, {})]  # type: ignore[arg-type]

        def close(self) -> None:
            pass

        def wait(self) -> list[int]:
            return codes

    monkeypatch.setattr(local, "LocalCluster", Cluster)
    monkeypatch.setattr(local.signal, "signal", lambda *_: None)  # keep pytest's handlers
    argv = ["--workers", "1", "--restarts", "0", "--checkpoint-dir", str(run_dir)]
    assert local.main(argv) == codes[0]
    assert run_dir.exists() == kept, f"{run_dir}: kept={run_dir.exists()}, expected {kept}"
