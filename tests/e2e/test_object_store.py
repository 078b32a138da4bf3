"""``checkpointUri: gs://...`` for real: ``python -m trainer.local`` with its run directory in a
bucket, read and written by TensorFlow's own GCS filesystem, unchanged, against the
GCS-compatible stand-in of :mod:`tools.object_store` (docs/e2e.md says what that proves).

No cluster: these need only ``fake-gcs-server`` (``make tools``), openssl and root; ``make e2e``
runs them with the kwok scenarios.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tfd.runs_reader import parse_document
from tools.object_store import METADATA_PORT, TOKEN_PATH, ObjectStore
from trainer import contract
from trainer.checkpoints import CHECKPOINTS_SUBDIR
from trainer.finish import SUMMARY_FILE
from trainer.lease import LEASE_FILE
from trainer.local_cluster import parse_events, split_worker_output
from trainer.manifest import MANIFEST_FILE

BUCKET = "tfd-e2e"
ROOT_PREFIX = "runs"
RUNS = f"gs://{BUCKET}/{ROOT_PREFIX}"
WORKERS = 2
EXAMPLES, BATCH = 512, 16
STEPS_PER_EPOCH = EXAMPLES // (BATCH * WORKERS)
"""16: the global batch is ``--batch-size`` per worker."""
USER_CODE = Path(__file__).resolve().parent / "user_code"
SMALL = ["--synthetic-examples", str(EXAMPLES), "--batch-size", str(BATCH), "--model",
         "my_model:build", "--checkpoint-every", "8", "--steps-per-call", "4",
         "--log-every", "0.5"]  # fmt: skip
"""A small dense model (``user_code/my_model.py``): checkpoints of kilobytes, not megabytes."""
NO_RESTART = ["--restarts", "0"]
"""Runs that must not fail: a failure is the test's, not one to restart past."""
LAUNCH_TIMEOUT_S = 240


@dataclass
class Launch:
    code: int
    lines: list[str]
    summary: dict[str, Any]

    def events(self, worker: int, name: str) -> list[dict[str, Any]]:
        return parse_events(split_worker_output(self.lines).get(worker, []), name)

    def tail(self) -> str:
        return "".join(self.lines[-25:])


def launch(
    store: ObjectStore,
    run_id: str,
    *flags: str,
    workers: int = WORKERS,
    on_line: Callable[[str, list[str]], None] | None = None,
) -> Launch:
    """``python -m trainer.local`` in the namespace with ``--checkpoint-root`` in the bucket;
    ``on_line(line, lines so far)`` runs on each line as it comes (mid-run checks)."""
    argv = [sys.executable, "-m", "trainer.local", "--workers", str(workers),
            "--checkpoint-root", RUNS, "--run-id", run_id, *SMALL, *flags]  # fmt: skip
    env = {"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": str(USER_CODE)}
    proc = store.popen(argv, env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT)  # fmt: skip
    lines: list[str] = []
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            lines.append(line)
            if on_line is not None:
                on_line(line, lines)
        code = proc.wait(timeout=LAUNCH_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    summary = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else {}
    return Launch(code, lines, summary)


def listing(objects: dict[str, tuple[int, str]]) -> str:
    return "\n".join(f"  {size:>9}  gs://{BUCKET}/{name}" for name, (size, _) in objects.items())


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ObjectStore]:
    """The stand-in, one bucket for the module; fails (never skips) when it cannot start."""
    server = ObjectStore(tmp_path_factory.mktemp("object-store"), BUCKET)
    try:
        server.start()
    except (RuntimeError, OSError, subprocess.CalledProcessError) as err:
        pytest.fail(f"the object store stand-in: {err}")
    yield server
    server.stop()


@dataclass
class FirstRun:
    launch: Launch
    mid_run: dict[str, tuple[int, str]]
    """The run's objects at its first written checkpoint (the lease is held then)."""
    done: dict[str, tuple[int, str]]


@pytest.fixture(scope="module")
def first_run(store: ObjectStore) -> FirstRun:
    """Run ``r1``: two workers, two epochs, to DONE."""
    mid: dict[str, tuple[int, str]] = {}

    def at_first_checkpoint(line: str, _: list[str]) -> None:
        if not mid and line.startswith("[worker-0]") and '"checkpoint_written"' in line:
            mid.update(store.objects(f"{ROOT_PREFIX}/r1/"))

    run = launch(store, "r1", "--epochs", "2", *NO_RESTART, on_line=at_first_checkpoint)
    assert run.code == 0, run.tail()
    return FirstRun(run, mid, store.objects(f"{ROOT_PREFIX}/r1/"))


def test_a_two_worker_run_ends_done_with_its_records_in_the_bucket(first_run: FirstRun):
    run, prefix = first_run.launch, f"{ROOT_PREFIX}/r1/"
    final = 2 * STEPS_PER_EPOCH
    print(f"r1 at its first checkpoint:\n{listing(first_run.mid_run)}")
    print(f"r1 done:\n{listing(first_run.done)}")
    assert run.summary["final_step"] == final, run.summary
    assert run.summary["checkpoint_dir"] == f"{RUNS}/r1", run.summary
    for name in (LEASE_FILE, MANIFEST_FILE):
        assert prefix + name in first_run.mid_run, f"{name} not in the bucket mid-run"
    ckpt = f"{prefix}{CHECKPOINTS_SUBDIR}/ckpt-{final}"
    for name in (contract.DONE_MARKER, MANIFEST_FILE, SUMMARY_FILE,
                 f"{CHECKPOINTS_SUBDIR}/checkpoint"):  # fmt: skip
        assert prefix + name in first_run.done, f"{name} not in the bucket at the end"
    assert first_run.done[f"{ckpt}.index"][0] > 0
    assert first_run.done[f"{ckpt}.data-00000-of-00001"][0] > 0
    saved = [e["path"] for e in run.events(0, "checkpoint")]
    assert saved and all(p.startswith(f"{RUNS}/r1/") for p in saved), saved


def test_d_runs_are_listed_from_their_records_in_the_bucket(
    store: ObjectStore, first_run: FirstRun
):
    """What ``tfd runs`` runs in a pod (``python -m trainer.run_list --json``), parsed by
    ``tfd``'s own reader, against the bucket."""
    out = store.run([sys.executable, "-m", "trainer.run_list", "--json", RUNS])
    doc = parse_document(out, "the runs reader")
    records = {r["run_id"]: r for r in doc["runs"]}
    print(json.dumps(records["r1"], sort_keys=True))
    r1, summary = records["r1"], first_run.launch.summary
    assert (r1["state"], r1["step"]) == ("done", summary["final_step"]), r1
    assert r1["accuracy"] == summary["accuracy"] and r1["problems"] == [], r1
    assert r1["started_utc"] and r1["finished_utc"], r1


def test_e_a_second_run_id_never_overwrites_the_first(store: ObjectStore, first_run: FirstRun):
    before = store.objects(f"{ROOT_PREFIX}/r1/")
    run = launch(store, "r2", "--epochs", "1", *NO_RESTART, workers=1)
    assert run.code == 0, run.tail()
    assert run.events(0, "start")[0]["start_step"] == 0
    after = store.objects(f"{ROOT_PREFIX}/r1/")
    changed = {n for n in before.keys() | after.keys() if before.get(n) != after.get(n)}
    assert not changed, f"r2 changed r1's objects (name: size, generation): {changed}"
    r2 = store.objects(f"{ROOT_PREFIX}/r2/")
    print(f"r2 beside r1:\n{listing(r2)}")
    assert f"{ROOT_PREFIX}/r2/{contract.DONE_MARKER}" in r2


def test_b_a_killed_worker_resumes_from_the_bucket(store: ObjectStore):
    """kill -9 of the chief after its first checkpoint reached the bucket; the launcher restarts
    every worker and they resume from that checkpoint."""
    killed: list[int] = []

    def kill_the_chief(line: str, lines: list[str]) -> None:
        if killed or not (line.startswith("[worker-0]") and '"checkpoint_written"' in line):
            return
        (start,) = parse_events(split_worker_output(lines)[0], "start")
        os.kill(start["pid"], signal.SIGKILL)
        killed.append(start["pid"])

    run = launch(store, "killed", "--epochs", "2", "--restarts", "1", on_line=kill_the_chief)
    assert killed, "no checkpoint was written before the end"
    assert run.code == 0, run.tail()
    assert run.summary["restarts"] == 1, run.summary
    assert any(f"exit codes [{-signal.SIGKILL}" in x for x in run.lines), run.tail()
    resume = run.events(0, "resume")
    print(json.dumps(resume))
    assert resume and resume[-1]["step"] > 0, resume
    # The chief's last checkpoint, or the survivor's rescue checkpoint (trainer.rescue), which
    # is newer when it got one written: both in the bucket.
    assert resume[-1]["checkpoint"].startswith(f"{RUNS}/killed/{CHECKPOINTS_SUBDIR}/"), resume
    assert run.summary["final_step"] == 2 * STEPS_PER_EPOCH, run.summary


def test_c_a_torn_checkpoint_object_falls_back_to_the_newest_intact_one(
    store: ObjectStore, first_run: FirstRun
):
    """As ``test_restore_falls_back_to_the_newest_intact_checkpoint[data-cut-short]`` does with a
    local file: r1's newest data object cut to half, then r1 asked for one more epoch."""
    final = 2 * STEPS_PER_EPOCH
    newest = f"{RUNS}/r1/{CHECKPOINTS_SUBDIR}/ckpt-{final}"
    data = f"{ROOT_PREFIX}/r1/{CHECKPOINTS_SUBDIR}/ckpt-{final}.data-00000-of-00001"
    size = store.truncate(data)
    assert store.objects(data)[data][0] == size
    run = launch(store, "r1", "--epochs", "3", *NO_RESTART)
    assert run.code == 0, run.tail()
    warnings = [e["message"] for e in run.events(0, "warning") if "cannot restore" in e["message"]]
    print("\n".join(warnings))
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith(f"{newest}: cannot restore"), warnings
    assert warnings[0].endswith("; trying the next older checkpoint"), warnings
    good = f"{RUNS}/r1/{CHECKPOINTS_SUBDIR}/ckpt-{final - 8}"
    (resume,) = run.events(0, "resume")
    print(json.dumps(resume))
    assert (resume["step"], resume["checkpoint"], resume["skipped"]) == (final - 8, good, [newest])
    assert run.summary["final_step"] == 3 * STEPS_PER_EPOCH, run.summary


def test_the_stand_in_refuses_a_token_request_without_the_metadata_header(store: ObjectStore):
    """The metadata stand-in checks what GKE's does (so TensorFlow sent the header)."""
    url = f"http://127.0.0.1:{METADATA_PORT}{TOKEN_PATH}"
    refused = store.popen(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", url],
                          stdout=subprocess.PIPE)  # fmt: skip
    assert refused.communicate(timeout=30)[0] == "403"
    token = json.loads(store.curl("-H", "Metadata-Flavor: Google", url))
    assert token["token_type"] == "Bearer" and token["access_token"]


def test_nothing_outside_the_namespace_changed(store: ObjectStore):
    """The host's /etc/hosts still has no stand-in names: the bind mount stayed inside."""
    text = Path("/etc/hosts").read_text()
    assert "www.googleapis.com" not in text and "storage.googleapis.com" not in text, text
