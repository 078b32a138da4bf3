"""The run manifest (``trainer/manifest.py``): the dataset's fingerprint, which differences
refuse a start, the checks of every worker, and, with real training (``python -m trainer``),
that a refused start leaves the run directory byte for byte as it was while more epochs and an
expired lease of another chief still let the run go on."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from trainer import contract, manifest
from trainer.config import Config
from trainer.errors import (
    EXIT_OK,
    EXIT_RUN_CONFLICT,
    DataError,
    DivergedError,
    NotAdmittedError,
    PeerLostError,
    RestartRequested,
    RolloutRequested,
    RunConflictError,
)
from trainer.lease import LEASE_FILE, LeaseRecord, holder_identity
from trainer.local_cluster import parse_events, worker_envs
from trainer.logs import Log
from trainer.manifest import MANIFEST_FILE, RunGuard

ENV = {
    contract.ENV_PROJECT: "tf-distributed",
    contract.ENV_STACK: "dev",
    contract.ENV_APP: "tfd",
    contract.ENV_IMAGE: "trainer:1",
    contract.ENV_CHECKPOINT_DIR: "/ckpt/r1",
    contract.ENV_RUN_ID: "r1",
}


def _npz(path: Path, seed: int, examples: int = 256) -> Path:
    """An uncompressed .npz: the same shapes give the same size whatever the seed."""
    rng = np.random.default_rng(seed)
    x = rng.random((examples, 8, 8, 1), dtype=np.float32)
    np.savez(path, x=x, y=rng.integers(0, 4, examples))
    return path


def _snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under ``root``: its bytes and modification time."""
    return {
        str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


# --- The dataset's fingerprint. -------------------------------------------------------------------


def test_a_regenerated_file_of_the_same_size_is_another_dataset(tmp_path: Path):
    a = manifest.dataset_fingerprint(Config(dataset=str(_npz(tmp_path / "d.npz", 1))))
    b = manifest.dataset_fingerprint(Config(dataset=str(_npz(tmp_path / "d.npz", 2))))
    assert (a["files"], a["bytes"], a["by"]) == (1, b["bytes"], "content"), a
    assert a["sha256"] != b["sha256"], "same size, other content: not told apart"
    again = manifest.dataset_fingerprint(Config(dataset=str(_npz(tmp_path / "d.npz", 1))))
    assert again == a, "the same content rewritten gave another fingerprint"


def test_a_large_dataset_is_fingerprinted_by_size_and_mtime(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(manifest, "CONTENT_HASH_BYTES", 100)
    (tmp_path / "data").mkdir()
    for i in range(3):
        (tmp_path / "data" / f"part-{i}.tfrecord").write_bytes(b"x" * 80)
    spec = Config(dataset=str(tmp_path / "data"))
    first = manifest.dataset_fingerprint(spec)
    assert (first["files"], first["bytes"], first["by"]) == (3, 240, "size+mtime"), first
    os.utime(tmp_path / "data" / "part-1.tfrecord", ns=(1, 1))
    assert manifest.dataset_fingerprint(spec)["sha256"] != first["sha256"], "mtime not seen"


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        (Config(), {"spec": "synthetic", "examples": 4096, "seed": 1}),
        (Config(synthetic_examples=512, seed=7), {"spec": "synthetic", "examples": 512, "seed": 7}),
        (Config(dataset="mnist", eval_split=0.2), {"spec": "mnist", "eval_split": 0.2}),
    ],
)
def test_named_datasets_are_fingerprinted_by_their_parameters(config, expected):
    assert manifest.dataset_fingerprint(config) == expected


@pytest.mark.parametrize("kind", ["synthetic", "mnist", "npz", "directory"])
def test_a_recorded_fingerprint_of_the_same_spec_gives_the_same_result(tmp_path: Path, kind):
    """The kind taken from the recorded fingerprint (no trainer.data import) is the spec's."""
    specs = {"npz": str(_npz(tmp_path / "d.npz", 1)), "directory": str(tmp_path)}
    config = Config(dataset=specs.get(kind, kind), eval_split=0.1)
    direct = manifest.dataset_fingerprint(config)
    assert manifest.dataset_fingerprint(config, recorded=direct) == direct, kind


def test_checking_a_finished_local_run_imports_no_tensorflow(tmp_path: Path):
    """A finished run's workers check the manifest at every start: without TensorFlow's import
    (seconds) as long as the spec is the recorded one and the files are local."""
    data = _npz(tmp_path / "d.npz", 1)
    for spec in ("synthetic", str(data)):
        _recorded(tmp_path, Config(dataset=spec), ENV)
        code = (
            "import sys; from trainer.config import Config; from trainer.logs import Log; "
            "from trainer.manifest import RunGuard; "
            f"RunGuard({str(tmp_path)!r}, Config(dataset={spec!r}), {ENV!r}, Log(0)).check(); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'tf_keras'"
            ", 'numpy')))"
        )
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True, timeout=60)  # fmt: skip
        assert out.stdout.strip() == "[]", f"--dataset {spec}: {out.stdout[:300]}"


def test_a_dataset_with_no_file_is_a_data_error(tmp_path: Path):
    with pytest.raises(DataError, match=r"^--dataset .*missing\.npz: no such file$"):
        manifest.dataset_fingerprint(Config(dataset=str(tmp_path / "missing.npz")))


# --- What refuses a start. ------------------------------------------------------------------------


def _recorded(tmp_path: Path, config: Config, env: dict[str, str], **info) -> dict:
    doc = {**manifest.wanted(config, env), "global_batch": 64, "precision": "fp32", **info}
    (tmp_path / MANIFEST_FILE).write_text(json.dumps(doc))
    return doc


@pytest.mark.parametrize(
    ("change", "fields"),
    [
        ({"config": Config(seed=2)}, {"seed", "dataset.seed"}),
        ({"config": Config(synthetic_examples=1024)}, {"dataset.examples"}),
        ({"config": Config(dataset="mnist")}, {"dataset.spec", "dataset.examples", "dataset.seed"}),
        ({"config": Config(model="m:build")}, {"model.builder"}),
        ({"config": Config(loss="m:loss")}, {"model.loss"}),
        ({"config": Config(num_classes=12)}, {"model.num_classes"}),
        ({"config": Config(eval_split=0.25)}, {"dataset.eval_split"}),
        ({"env": {contract.ENV_STACK: "prod"}}, {"stack"}),
        ({"env": {contract.ENV_PROJECT: ""}}, {"project"}),
        ({"env": {contract.ENV_APP: "other"}}, {"app"}),
        # The optimizer's rate, its scaling rule and the epochs' length change the weights; the
        # evaluation data changes the reported result.
        ({"config": Config(learning_rate=0.1)}, {"learning_rate"}),
        ({"config": Config(learning_rate_scaling="none")}, {"learning_rate_scaling"}),
        ({"config": Config(steps_per_epoch=8)}, {"steps_per_epoch"}),
        (
            {"config": Config(eval_dataset="synthetic")},
            {"eval_dataset.spec", "eval_dataset.examples", "eval_dataset.seed"},
        ),
        # Never refused: more epochs continue a run, the world size (global batch, and the
        # steps per epoch derived from it) and the precision may change between restarts, a
        # new image is a rollout of the same run.
        ({"config": Config(epochs=9)}, set()),
        ({"config": Config(precision="bf16", batch_size=8)}, set()),
        ({"env": {contract.ENV_IMAGE: "trainer:2"}}, set()),
    ],
)
def test_which_differences_refuse_a_start(tmp_path: Path, change: dict, fields: set[str]):
    _recorded(tmp_path, Config(), ENV)
    guard = RunGuard(str(tmp_path), change.get("config", Config()), ENV | change.get("env", {}),
                     Log(1, io.StringIO()))  # fmt: skip
    before = _snapshot(tmp_path)
    if not fields:
        guard.check()
        return
    with pytest.raises(RunConflictError) as caught:
        guard.check()
    message = str(caught.value)
    named = {part.split(":")[0] for part in message.split("(", 1)[1].rsplit(")", 1)[0].split("; ")}
    assert named == fields, message
    assert "\n" not in message and "new run id" in message, message
    assert _snapshot(tmp_path) == before


def test_the_run_records_its_deployments_provenance_and_logs_a_new_one(tmp_path: Path):
    """The first start records the source commit and config hash it was deployed with; a later
    start from another commit is no other run: accepted, and the first record kept."""
    first = {"source_commit": "a" * 40, "config_hash": "c1"}
    _recorded(tmp_path, Config(), ENV, **first)
    out = io.StringIO()
    later = {"source_commit": "b" * 40, "config_hash": "c2"}
    guard = RunGuard(str(tmp_path), Config(), ENV, Log(0, out), provenance=later)
    guard.check()
    assert guard.wanted()["source_commit"] == "b" * 40
    recorded = json.loads((tmp_path / MANIFEST_FILE).read_text())
    assert {k: recorded[k] for k in first} == first
    # A local run has none: recorded as empty, never refused.
    assert RunGuard(str(tmp_path), Config(), ENV, Log(0)).wanted()["config_hash"] == ""


def test_the_eval_dataset_is_fingerprinted_like_the_dataset(tmp_path: Path):
    """An evaluation file regenerated with other rows (same size) changes the reported result:
    refused, naming its fingerprint; the same rows rewritten are accepted."""
    config = Config(eval_dataset=str(_npz(tmp_path / "eval.npz", 1)))
    run = tmp_path / "run"
    run.mkdir()
    recorded = _recorded(run, config, ENV)
    assert recorded["eval_dataset"]["by"] == "content", recorded
    assert manifest.eval_fingerprint(Config()) == {"spec": ""}
    _npz(tmp_path / "eval.npz", 1)
    RunGuard(str(run), config, ENV, Log(0, io.StringIO())).check()
    _npz(tmp_path / "eval.npz", 2)
    with pytest.raises(RunConflictError) as caught:
        RunGuard(str(run), config, ENV, Log(0, io.StringIO())).check()
    message = str(caught.value)
    assert "(eval_dataset.sha256: " in message and "\n" not in message, message


def test_a_manifest_without_a_field_is_refused_naming_the_file_and_field(tmp_path: Path):
    """The chief writes every field: one missing differs from any setting, even the same one."""
    doc = _recorded(tmp_path, Config(), ENV)
    del doc["learning_rate"]
    (tmp_path / MANIFEST_FILE).write_text(json.dumps(doc))
    with pytest.raises(RunConflictError, match=r"manifest\.json: .*\(learning_rate: \(none\) -> "):
        RunGuard(str(tmp_path), Config(), ENV, Log(0)).check()


def test_no_manifest_accepts_any_start_and_a_garbage_one_is_refused(tmp_path: Path):
    RunGuard(str(tmp_path), Config(), ENV, Log(0)).check()
    assert list(tmp_path.iterdir()) == [], "a check wrote"
    (tmp_path / MANIFEST_FILE).write_text("[]")
    with pytest.raises(RunConflictError, match=r"manifest\.json: must be a JSON run manifest"):
        RunGuard(str(tmp_path), Config(), ENV, Log(0)).check()


@pytest.mark.parametrize(
    ("error", "left"),
    [
        (PeerLostError("a peer is gone"), True),
        (RestartRequested("stopped (SIGTERM)"), True),
        (RolloutRequested("stopped for a rollout"), True),
        (NotAdmittedError("not admitted yet"), True),
        (DataError("bad data"), False),
        (DivergedError("diverged"), False),
        (None, False),  # the block ended: training is over
    ],
    ids=["peer-lost", "sigterm", "rollout", "not-admitted", "data", "diverged", "done"],
)
def test_the_chief_leaves_its_lease_expired_for_a_restart_and_deletes_it_otherwise(
    tmp_path: Path, error: Exception | None, left: bool
):
    guard = RunGuard(str(tmp_path), Config(), ENV, Log(0, io.StringIO()))
    guard.check()
    raises = pytest.raises(type(error)) if error else contextlib.nullcontext()
    with raises, guard.training(is_chief=True):
        if error:
            raise error
    assert (tmp_path / LEASE_FILE).exists() is left, f"after {error!r}"
    if left:
        record = LeaseRecord.parse((tmp_path / LEASE_FILE).read_text(), "lease")
        assert record.holder == holder_identity(ENV) and record.expires_at <= time.time(), record


def test_only_the_chief_writes_the_manifest_and_later_changes_are_logged(tmp_path: Path):
    log = io.StringIO()
    for is_chief in (False, True):
        guard = RunGuard(str(tmp_path), Config(), ENV, Log(0, log))
        guard.check()
        with guard.training(is_chief):
            assert (tmp_path / LEASE_FILE).exists() is is_chief
            guard.record(64, "fp32")
        assert (tmp_path / MANIFEST_FILE).exists() is is_chief, f"is_chief={is_chief}"
    written = json.loads((tmp_path / MANIFEST_FILE).read_text())
    assert written["created_by"] == holder_identity(ENV)
    assert (written["dataset"], written["global_batch"], written["epochs"]) == (
        {"spec": "synthetic", "examples": 4096, "seed": 1}, 64, 3)  # fmt: skip
    assert not (tmp_path / LEASE_FILE).exists(), "the chief kept its lease after training"

    guard = RunGuard(str(tmp_path), Config(epochs=5), ENV, Log(0, log))
    guard.check()
    with guard.training(True):
        guard.record(32, "bf16")
    assert json.loads((tmp_path / MANIFEST_FILE).read_text()) == written, "manifest rewritten"
    events = parse_events(log.getvalue().splitlines(), "run_manifest")
    assert [e["state"] for e in events] == ["written", "matches"], events
    assert events[1]["changed"] == {
        "epochs": [3, 5],
        "global_batch": [64, 32],
        "precision": ["fp32", "bf16"],
    }, events[1]


# --- With real training. --------------------------------------------------------------------------

TRAIN = ["--batch-size", "32", "--steps-per-call", "4", "--checkpoint-every", "8",
         "--on-done", "exit", "--intra-op-threads", "1", "--log-every", "60"]  # fmt: skip
STEPS_PER_EPOCH = 256 // 32


def _train(root: Path, dataset: Path, epochs: int) -> tuple[int, str, list[dict]]:
    env = worker_envs(1, str(root))[0] | {contract.ENV_STACK: "dev", "TF_CPP_MIN_LOG_LEVEL": "3"}
    proc = subprocess.run(
        [sys.executable, "-m", "trainer", *TRAIN, "--dataset", str(dataset), "--epochs",
         str(epochs)],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    return proc.returncode, proc.stderr, parse_events(proc.stdout.splitlines())


def _one_error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.startswith("trainer: ")]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr[-2000:]
    return lines[0]


@pytest.mark.slow
def test_a_run_is_never_overwritten_by_another(tmp_path: Path):
    data_a, data_b = _npz(tmp_path / "a.npz", 1), _npz(tmp_path / "b.npz", 2)
    assert data_a.stat().st_size == data_b.stat().st_size
    root = tmp_path / "runs" / "r1"

    code, err, _ = _train(root, data_a, epochs=1)
    assert code == EXIT_OK, err[-2000:]
    recorded = json.loads((root / MANIFEST_FILE).read_text())
    assert recorded["dataset"]["spec"] == str(data_a) and recorded["stack"] == "dev", recorded

    # The reported case: the same run id, another dataset and more epochs. Before this check the
    # run logged `continue`, resumed the old checkpoint and replaced model.keras and summary.json.
    before = _snapshot(root)
    code, err, events = _train(root, data_b, epochs=2)
    assert code == EXIT_RUN_CONFLICT, err[-2000:]
    line = _one_error_line(err)
    assert "dataset.spec:" in line and str(data_a) in line and str(data_b) in line, line
    assert not [e for e in events if e["event"] in ("start", "lease", "done", "continue")], events
    assert _snapshot(root) == before, "a refused start changed the run directory"

    # Another chief's lease has expired: more epochs with the recorded dataset continue the run.
    (root / LEASE_FILE).write_text(
        LeaseRecord("x/y@gone", time.time() - 1, time.time() - 31).to_text()
    )
    code, err, events = _train(root, data_a, epochs=2)
    assert code == EXIT_OK, err[-2000:]
    names = [e["event"] for e in events]
    assert names.index("continue") < names.index("lease") < names.index("resume"), names
    assert next(e for e in events if e["event"] == "resume")["step"] == STEPS_PER_EPOCH
    summary = json.loads((root / "summary.json").read_text())
    assert summary["final_step"] == 2 * STEPS_PER_EPOCH, summary
    assert not (root / LEASE_FILE).exists(), "the lease outlived the run"

    # A second chief while another one's lease is live: refused, nothing written.
    (root / LEASE_FILE).write_text(LeaseRecord("ml/tfd-worker-0@node-b", time.time() + 600,
                                               time.time()).to_text())  # fmt: skip
    before = _snapshot(root)
    code, err, events = _train(root, data_a, epochs=3)
    assert code == EXIT_RUN_CONFLICT, err[-2000:]
    line = _one_error_line(err)
    assert "ml/tfd-worker-0@node-b" in line and "expires at" in line, line
    assert _snapshot(root) == before, "a refused chief changed the run directory"
