"""Rescue checkpoints (trainer/rescue.py): the survivors' copy as of their last call, written
when a peer is lost; the restore takes the newest of them and the chief's checkpoints, and the
chief deletes the ones its own checkpoints passed. One process, real TensorFlow files; the
multi-worker kill -9 that writes one is in test_multiworker.py."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import tensorflow as tf

from tests.trainer.test_checkpoints import _restore, _save
from trainer import checkpoints
from trainer.logs import Log
from trainer.rescue import Rescue, checkpointed_variables

SUBDIR = checkpoints.CHECKPOINTS_SUBDIR


def _rescue(root: Path, task: int, step: int, covered: int = 0) -> list[dict]:
    """Worker ``task`` held weights ``[step, step]`` after its call ending at ``step``; the next
    call broke off part-way (weights -1) and the peer was lost: it writes its rescue."""
    weights, step_var = tf.Variable([0.0, 0.0]), tf.Variable(0, dtype=tf.int64)
    stream = io.StringIO()
    rescue = Rescue(tf.train.Checkpoint(w=weights, step=step_var), step_var, str(root), task, 0,
                    Log(task, stream))  # fmt: skip
    rescue.saved(covered)
    weights.assign([float(step)] * 2)
    rescue.snapshot(step)
    weights.assign([-1.0, -1.0])
    rescue.write()
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def _path(root: Path, step: int, task: int | None = None) -> str:
    where = root / SUBDIR if task is None else root / SUBDIR / f"{checkpoints.RESCUE_PREFIX}{task}"
    return str(where / f"{checkpoints.CHECKPOINT_NAME}-{step}")


@pytest.mark.parametrize(
    ("chief", "rescues", "expected"),
    [
        # (chief's steps, {task: rescue step}, (step restored, rescue task or None))
        ((200,), {0: 236}, (236, 0)),
        ((200,), {1: 236}, (236, 1)),  # the chief was the one lost
        ((200,), {2: 236, 1: 236}, (236, 1)),  # two survivors of one loss: the lowest task
        ((200,), {1: 232, 2: 236}, (236, 2)),  # one call apart: the newest
        ((200, 400), {0: 236}, (400, None)),  # a rescue the chief's checkpoints passed
        ((200,), {0: 200}, (200, None)),  # the same step: the chief's own
        ((), {1: 36}, (36, 1)),  # lost before the first periodic checkpoint
    ],
    ids=["chief-survived", "worker-survived", "tie", "newest", "passed", "same-step", "no-state"],
)
def test_restore_resumes_from_the_newest_of_the_checkpoints_and_the_rescues(
    tmp_path: Path, chief: tuple[int, ...], rescues: dict[int, int], expected: tuple
):
    if chief:
        _save(tmp_path, chief)
    for task, step in rescues.items():
        events = _rescue(tmp_path, task, step)
        assert [e["event"] for e in events] == ["rescue"], events
    step, path, weights, events = _restore(tmp_path)
    want_step, task = expected
    assert (step, weights) == (want_step, [float(want_step)] * 2), f"restored {path}"
    assert path == _path(tmp_path, want_step, task)
    assert [e["checkpoint"] for e in events if e["event"] == "resume"] == [path]


def test_a_damaged_rescue_falls_back_to_the_chiefs_checkpoint(tmp_path: Path):
    _save(tmp_path, (200,))
    _rescue(tmp_path, 1, 236)
    prefix = Path(_path(tmp_path, 236, 1))
    (data,) = prefix.parent.glob(prefix.name + ".data-*")
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    step, path, _, events = _restore(tmp_path)
    assert (step, path) == (200, _path(tmp_path, 200)), events
    [warning] = [e["message"] for e in events if e["event"] == "warning"]
    assert warning.startswith(f"{prefix}: cannot restore"), warning


@pytest.mark.parametrize(
    ("covered", "snapshot", "written"),
    [(200, 236, True), (236, 236, False), (240, 236, False)],
    ids=["newer-than-the-last-save", "saved-at-that-step", "saved-after"],
)
def test_a_rescue_is_written_only_when_newer_than_every_checkpoint(
    tmp_path: Path, covered: int, snapshot: int, written: bool
):
    events = _rescue(tmp_path, 1, snapshot, covered=covered)
    rescue = [e for e in events if e["event"] == "rescue"]
    assert bool(rescue) is written, events
    assert (Path(_path(tmp_path, snapshot, 1) + ".index")).exists() is written
    if written:
        assert rescue[0]["step"] == snapshot and rescue[0]["path"] == _path(tmp_path, snapshot, 1)


def test_a_rescue_that_cannot_be_written_is_a_warning_not_an_error(tmp_path: Path):
    (tmp_path / SUBDIR).mkdir()
    (tmp_path / SUBDIR / f"{checkpoints.RESCUE_PREFIX}1").write_text("a file, not a directory")
    events = _rescue(tmp_path, 1, 236, covered=200)
    [warning] = [e for e in events if e["event"] == "warning"]
    assert "rescue checkpoint of step 236 not written" in warning["message"], warning
    assert warning["message"].endswith("the restart resumes from step 200"), warning


def test_the_chief_deletes_the_rescues_its_checkpoint_passed(tmp_path: Path):
    _rescue(tmp_path, 1, 236)
    _rescue(tmp_path, 2, 440)
    writing = tmp_path / SUBDIR / f"{checkpoints.RESCUE_PREFIX}3"  # no state file yet
    writing.mkdir()
    checkpoints.prune_rescues(str(tmp_path / SUBDIR), 400)
    left = sorted(p.name for p in (tmp_path / SUBDIR).iterdir())
    assert left == [f"{checkpoints.RESCUE_PREFIX}2", f"{checkpoints.RESCUE_PREFIX}3"], left


def test_the_copy_holds_every_variable_the_checkpoint_saves_once():
    inner = tf.keras.layers.Dense(3)
    inner.build((None, 2))
    shared = tf.Variable(1.0)
    ckpt = tf.train.Checkpoint(layer=inner, a=shared, again=shared, step=tf.Variable(0))
    found = checkpointed_variables(ckpt)
    assert len(found) == 4, [v.name for v in found]  # kernel, bias, the shared one, step
