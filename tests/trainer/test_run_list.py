"""A stack's runs read back from their directories (trainer.run_list), written by the same
modules the trainer writes them with wherever one exists (DONE, the lease, the manifest)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from trainer import contract, done_marker, run_list
from trainer.config import Config
from trainer.lease import LEASE_FILE, LeaseRecord
from trainer.logs import Log
from trainer.manifest import MANIFEST_FILE, RunGuard

REPO = Path(__file__).resolve().parents[2]
NOW = 1_796_292_000.0  # 2026-12-03T10:00:00Z
STARTED = "2026-12-03T09:00:00Z"
DIGEST = "sha256:" + "d" * 64
COMMIT = "c" * 40


def _manifest(run: Path, **fields: Any) -> None:
    doc = {"version": 1, "run_id": run.name, "created_utc": STARTED, "image": "tfd:0.1.0"}
    doc.update(image_digest=DIGEST, source_commit=COMMIT, config_hash="h" * 64)
    doc.update(fields)
    (run / MANIFEST_FILE).write_text(json.dumps(doc))


def _checkpoint(run: Path, step: int) -> None:
    ckpt = run / "checkpoints"
    ckpt.mkdir(exist_ok=True)
    (ckpt / f"ckpt-{step}.index").write_bytes(b"")
    (ckpt / "checkpoint").write_text(
        f'model_checkpoint_path: "ckpt-{step}"\nall_model_checkpoint_paths: "ckpt-{step}"\n'
    )


def _summary(run: Path, text: str | None = None) -> None:
    doc = {"run_id": run.name, "final_step": 96, "loss": 0.25, "accuracy": 0.9}
    (run / "summary.json").write_text(text if text is not None else json.dumps(doc))


def _done(run: Path, text: str | None = None) -> None:
    if text is not None:
        (run / contract.DONE_MARKER).write_text(text)
        return
    record = done_marker.DoneRecord(96, 3, 32, 128, run.name, "2026-12-03T09:30:00Z")
    done_marker.write_done(str(run), record)


def _lease(run: Path, expires_at: float) -> None:
    (run / LEASE_FILE).write_text(LeaseRecord("ns/w-0@h", expires_at, expires_at - 30).to_text())


def done_run(run: Path) -> None:
    _manifest(run)
    _checkpoint(run, 96)
    _summary(run)
    _done(run)


def checkpoint_only(run: Path) -> None:
    _manifest(run)
    _checkpoint(run, 40)


def training(run: Path) -> None:
    checkpoint_only(run)
    _lease(run, NOW + 20)


def lease_expired(run: Path) -> None:
    checkpoint_only(run)
    _lease(run, NOW - 1)


def digit_only_done(run: Path) -> None:
    """A DONE of the final step alone (not the record the chief writes): refused, named."""
    done_run(run)
    _done(run, "96\n")


def digest_reference_no_digest_field(run: Path) -> None:
    """A launch without the digest annotation (``""``) of a digest reference: its digest."""
    _manifest(run, image=f"reg/tfd@{DIGEST}", image_digest="")
    _checkpoint(run, 8)


def corrupt_summary(run: Path) -> None:
    done_run(run)
    _summary(run, "{not json")


def corrupt_done(run: Path) -> None:
    done_run(run)
    _done(run, "done")


def nan_loss(run: Path) -> None:
    done_run(run)
    _summary(run, '{"final_step": 96, "loss": NaN, "accuracy": 0.9}')


def overflowing_accuracy(run: Path) -> None:
    done_run(run)
    _summary(run, '{"final_step": 96, "loss": 0.25, "accuracy": 1e999}')


def huge_integer_loss(run: Path) -> None:
    done_run(run)
    _summary(run, '{"final_step": 96, "loss": ' + "9" * 400 + ', "accuracy": 0.9}')


def overflowing_final_step(run: Path) -> None:
    done_run(run)
    _done(run, '{"final_step": 1e999}')


def endless_lease(run: Path) -> None:
    checkpoint_only(run)
    (run / LEASE_FILE).write_text('{"holder": "x", "expires_at": 1e999, "renewed_at": 1.0}')


def corrupt_checkpoint_state(run: Path) -> None:
    _manifest(run)
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / "checkpoint").write_text("garbage")


BASE = {
    "state": "stopped",
    "step": None,
    "accuracy": None,
    "eval_accuracy": None,
    "loss": None,
    "started_utc": STARTED,
    "finished_utc": None,
    "duration_s": None,
    "image": "tfd:0.1.0",
    "image_digest": DIGEST,
    "source_commit": COMMIT,
    "config_hash": "h" * 64,
    "problems": [],
}
DONE = {
    "state": "done",
    "step": 96,
    "accuracy": 0.9,
    "loss": 0.25,
    "finished_utc": "2026-12-03T09:30:00Z",
    "duration_s": 1800.0,
}
FINISH_UNKNOWN = {"finished_utc": None, "duration_s": None}


@pytest.mark.parametrize(
    ("make", "expected", "problem"),
    [
        (done_run, DONE, ""),
        (checkpoint_only, {"step": 40}, ""),
        (training, {"state": "training", "step": 40}, ""),
        (lease_expired, {"step": 40}, ""),
        (digit_only_done, {**DONE, **FINISH_UNKNOWN}, "r1/DONE: must be a JSON object"),
        (digest_reference_no_digest_field, {"step": 8, "image": f"reg/tfd@{DIGEST}"}, ""),
        (corrupt_summary, {**DONE, "accuracy": None, "loss": None}, "summary.json: not JSON"),
        (corrupt_done, {**DONE, **FINISH_UNKNOWN}, "DONE: must be"),
        (corrupt_checkpoint_state, {}, "checkpoint: names no checkpoint"),
        (nan_loss, {**DONE, "loss": None}, "loss must be a finite number; got nan"),
        (overflowing_accuracy, {**DONE, "accuracy": None}, "accuracy must be a finite number"),
        (huge_integer_loss, {**DONE, "loss": None}, "loss must be a finite number; got 999"),
        (overflowing_final_step, {**DONE, **FINISH_UNKNOWN}, "DONE: must be"),
        (endless_lease, {"step": 40}, "chief.lease: must be a JSON lease"),
    ],
    ids=lambda v: getattr(v, "__name__", None),
)
def test_a_run_is_read_from_its_files(
    tmp_path: Path, make: Callable[[Path], None], expected: dict, problem: str
):
    run = tmp_path / "r1"
    run.mkdir()
    make(run)
    (record,) = run_list.list_runs(str(tmp_path), lambda: NOW)
    got = vars(record)
    problems = got.pop("problems")
    want = {**BASE, **expected, "run_id": "r1"}
    want.pop("problems")
    assert got == want, make.__name__
    if problem:
        assert len(problems) == 1 and problem in problems[0], problems
        assert "\n" not in problems[0], problems
    else:
        assert problems == [], problems


def test_directories_without_a_run_file_and_missing_roots_are_no_runs(tmp_path: Path):
    assert run_list.list_runs(str(tmp_path / "absent")) == []
    (tmp_path / "empty").mkdir()
    (tmp_path / "stray.txt").write_text("x")
    assert run_list.list_runs(str(tmp_path)) == []


def test_runs_are_listed_newest_first(tmp_path: Path):
    for name, started in (("a", "2026-12-01T00:00:00Z"), ("b", "2026-12-02T00:00:00Z")):
        (tmp_path / name).mkdir()
        _manifest(tmp_path / name, created_utc=started)
    (tmp_path / "unmanifested").mkdir()
    _summary(tmp_path / "unmanifested")
    _done(tmp_path / "unmanifested")
    assert [r.run_id for r in run_list.list_runs(str(tmp_path))] == ["b", "a", "unmanifested"]


def test_the_manifest_the_chief_writes_carries_what_the_listing_shows(tmp_path: Path):
    """Written by the trainer's own RunGuard with the StatefulSet's provenance: started, image,
    digest, commit and config hash come back."""
    run = tmp_path / "r1"
    env = {contract.ENV_CHECKPOINT_DIR: str(run), contract.ENV_IMAGE: "tfd:0.1.0"}
    provenance = {"source_commit": COMMIT, "config_hash": "h" * 64, "image_digest": DIGEST}
    guard = RunGuard(str(run), Config(), env, Log(0, io.StringIO()), provenance=provenance)
    guard.check()
    with guard.training(is_chief=True):
        guard.record(global_batch=64, precision="fp32")
    (record,) = run_list.list_runs(str(tmp_path))
    assert (record.image, record.image_digest) == ("tfd:0.1.0", DIGEST), record
    assert (record.source_commit, record.config_hash) == (COMMIT, "h" * 64), record
    assert record.started_utc is not None and record.state == "stopped", record


def test_the_root_is_the_parent_of_the_run_directory():
    env = {contract.ENV_CHECKPOINT_DIR: "/checkpoints/tf-distributed/dev/r1/"}
    assert run_list.default_root(env) == "/checkpoints/tf-distributed/dev"
    assert run_list.default_root({contract.ENV_CHECKPOINT_DIR: "gs://b/p/s/r1"}) == "gs://b/p/s"
    for bad in ("", "r1", "gs://r1"):
        with pytest.raises(run_list.ContractError, match="TFD_CHECKPOINT_DIR: needs"):
            run_list.default_root({contract.ENV_CHECKPOINT_DIR: bad})


def test_the_entry_point_prints_one_json_document_without_tensorflow(tmp_path: Path):
    (tmp_path / "r1").mkdir()
    done_run(tmp_path / "r1")
    module = [sys.executable, "-m", "trainer.run_list", "--json", str(tmp_path)]
    out = subprocess.run(module, capture_output=True, text=True, timeout=60, cwd=REPO)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert set(doc) == {"version", "root", "read_utc", "runs"}, doc
    assert [(r["run_id"], r["state"], r["step"]) for r in doc["runs"]] == [("r1", "done", 96)]
    check = (
        "import sys; from trainer import run_list as r; code = r.main([sys.argv[1]]);"
        "assert 'tensorflow' not in sys.modules, 'TensorFlow imported'; sys.exit(code)"
    )
    out = subprocess.run(
        [sys.executable, "-c", check, str(tmp_path)], capture_output=True, text=True, cwd=REPO
    )
    assert out.returncode == 0 and "r1\tdone\tstep 96" in out.stdout, (out.stdout, out.stderr)


def test_an_unreadable_root_is_one_line_and_exit_5(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
):
    def refuse(path: str) -> Any:
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(run_list.os, "scandir", refuse)
    assert run_list.main(["--json", str(tmp_path)]) == 5
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot list the runs: [Errno 13]" in err, err
    assert run_list.main(["--json"], env={}) == 3
    assert "TFD_CHECKPOINT_DIR: needs" in capsys.readouterr().err


def test_one_garbled_record_leaves_the_other_runs_listed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    for name, make in (("good", done_run), ("nan", nan_loss), ("huge", huge_integer_loss)):
        (tmp_path / name).mkdir()
        make(tmp_path / name)
    assert run_list.main(["--json", str(tmp_path)]) == 0
    doc = json.loads(capsys.readouterr().out)
    by_id = {r["run_id"]: r for r in doc["runs"]}
    assert by_id["good"]["loss"] == 0.25 and by_id["good"]["problems"] == [], by_id["good"]
    assert by_id["nan"]["loss"] is None and by_id["huge"]["loss"] is None, by_id
