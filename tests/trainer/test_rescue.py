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

from tests.trainer.test_checkpoints import _batch, _restore, _save
from trainer import checkpoints
from trainer.checkpoints import Progress
from trainer.cli import Config
from trainer.logs import Log
from trainer.rescue import RESCUE_PREFIX, Rescue, checkpointed_variables, prune_rescues

SUBDIR = checkpoints.CHECKPOINTS_SUBDIR


def _rescue(root: Path, task: int, step: int, global_batch: int = 64, start: int = 0) -> list[dict]:
    """Worker ``task`` held weights ``[step, step]`` after its call ending at ``step``; the next
    call broke off part-way (weights -1) and the peer was lost: it writes its rescue.
    ``global_batch``: the one its steps count, recorded in the checkpoint; ``start``: the step
    the worker resumed at."""
    weights, step_var = tf.Variable([0.0, 0.0]), tf.Variable(0, dtype=tf.int64)
    stream = io.StringIO()
    ckpt = tf.train.Checkpoint(w=weights, step=step_var, **_batch(global_batch))
    log = Log(task, stream)
    rescue = Rescue(ckpt, step_var, str(root), task, start, log, Progress(global_batch))
    weights.assign([float(step)] * 2)
    rescue.snapshot(step)
    weights.assign([-1.0, -1.0])
    rescue.write()
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def _path(root: Path, step: int, task: int | None = None) -> str:
    where = root / SUBDIR if task is None else root / SUBDIR / f"{RESCUE_PREFIX}{task}"
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
    for task, step in rescues.items():  # before the chief's: written only when newer
        events = _rescue(tmp_path, task, step)
        assert [e["event"] for e in events] == ["rescue"], events
    _save(tmp_path, chief)
    step, path, weights, events = _restore(tmp_path)
    want_step, task = expected
    assert (step, weights) == (want_step, [float(want_step)] * 2), f"restored {path}"
    assert path == _path(tmp_path, want_step, task)
    assert [e["checkpoint"] for e in events if e["event"] == "resume"] == [path]


def test_a_damaged_newest_checkpoint_never_puts_a_passed_rescue_first(tmp_path: Path):
    """Its global batch unreadable, the damaged newest one ranks last; the rescue the intact
    300 passed stays behind it, as if the 400 were not there."""
    _rescue(tmp_path, 1, 236)
    _save(tmp_path, (200, 300, 400))
    Path(_path(tmp_path, 400) + ".index").unlink()
    step, path, _, events = _restore(tmp_path)
    assert (step, path) == (300, _path(tmp_path, 300)), events


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
    ("chief", "start", "snapshot", "written"),
    [((200,), 0, 236, True), ((236,), 0, 236, False), ((240,), 0, 236, False),
     ((), 236, 236, False), ((), 0, 36, True)],
    ids=["newer-than-the-last-save", "saved-at-that-step", "saved-after",
         "resumed-at-that-step", "no-checkpoint"],
)  # fmt: skip
def test_a_rescue_is_written_only_when_newer_than_every_checkpoint(
    tmp_path: Path, chief: tuple[int, ...], start: int, snapshot: int, written: bool
):
    _save(tmp_path, chief)
    events = _rescue(tmp_path, 1, snapshot, start=start)
    rescue = [e for e in events if e["event"] == "rescue"]
    assert bool(rescue) is written, events
    assert (Path(_path(tmp_path, snapshot, 1) + ".index")).exists() is written
    if written:
        assert rescue[0]["step"] == snapshot and rescue[0]["path"] == _path(tmp_path, snapshot, 1)


def test_a_rescue_that_cannot_be_written_is_a_warning_not_an_error(tmp_path: Path, monkeypatch):
    _save(tmp_path, (200,))

    def full(*_: object, **__: object) -> None:
        raise tf.errors.ResourceExhaustedError(None, None, "No space left on device")

    monkeypatch.setattr(tf.train.CheckpointManager, "save", full)
    events = _rescue(tmp_path, 1, 236)
    [warning] = [e for e in events if e["event"] == "warning"]
    assert "rescue checkpoint of step 236 not written" in warning["message"], warning
    latest = tmp_path / SUBDIR / "ckpt-200"
    assert warning["message"].endswith(f"the restart resumes from {latest}"), warning


def test_the_chief_deletes_the_rescues_its_checkpoint_passed(tmp_path: Path):
    _rescue(tmp_path, 1, 236)
    _rescue(tmp_path, 2, 440)
    writing = tmp_path / SUBDIR / f"{RESCUE_PREFIX}3"  # no state file yet
    writing.mkdir()
    _save(tmp_path, (400,))
    prune_rescues(str(tmp_path / SUBDIR), _path(tmp_path, 400), Progress(64))
    left = sorted(p.name for p in (tmp_path / SUBDIR).glob(f"{RESCUE_PREFIX}*"))
    assert left == [f"{RESCUE_PREFIX}2", f"{RESCUE_PREFIX}3"], left


@pytest.mark.parametrize(
    ("rescue", "chief", "steps_per_epoch", "expected"),
    [
        # rescue and chief's checkpoint: (step, global batch); restored at a global batch of
        # 128: (step, from the rescue)
        ((56, 64), (40, 128), 0, (40, False)),  # 3584 examples against 5120: stale rescue
        ((30, 128), (56, 64), 0, (30, True)),  # 3840 against 3584: the rescue, a lower step
        ((56, 128), (40, 64), 0, (56, True)),  # 7168 against 2560
        ((56, 128), (60, 64), 100, (60, False)),  # --steps-per-epoch: steps are kept, compared
    ],
    ids=["resized-up-after-the-rescue", "resized-up-before-the-rescue", "resized-down",
         "explicit-steps-per-epoch"],
)  # fmt: skip
def test_restore_compares_the_rescues_by_examples_seen_not_step_numbers(
    tmp_path: Path, rescue: tuple, chief: tuple, steps_per_epoch: int, expected: tuple
):
    _rescue(tmp_path, 0, rescue[0], global_batch=rescue[1])
    _save(tmp_path, (chief[0],), global_batch=chief[1])
    config = Config(steps_per_epoch=steps_per_epoch)
    step, path, _, _ = _restore(tmp_path, global_batch=128, config=config)
    want_step, from_rescue = expected
    want = _path(tmp_path, rescue[0], 0) if from_rescue else _path(tmp_path, chief[0])
    assert (step, path) == (want_step, want), f"rescue {rescue}, chief {chief}: restored {path}"


def test_the_chiefs_pruning_compares_by_examples_seen(tmp_path: Path):
    _rescue(tmp_path, 1, 56, global_batch=64)  # 3584 examples: ckpt-40 at 128 (5120) reached it
    _rescue(tmp_path, 2, 44, global_batch=128)  # 5632: further on than the chief
    _save(tmp_path, (40,), global_batch=128)
    prune_rescues(str(tmp_path / SUBDIR), _path(tmp_path, 40), Progress(128))
    left = sorted(p.name for p in (tmp_path / SUBDIR).glob(f"{RESCUE_PREFIX}*"))
    assert left == [f"{RESCUE_PREFIX}2"], f"left {left}: rescue-1 (3584 examples) is stale"


def test_the_chiefs_pruning_never_deletes_a_rescue_being_written(tmp_path: Path, monkeypatch):
    """The chief prunes (its ckpt-40 has passed rescue-1's ckpt-36) while worker 1 writes a
    newer rescue over its old one: between the files and the state file of that write."""
    from tensorflow.python.checkpoint import checkpoint_management

    _rescue(tmp_path, 1, 36)
    _save(tmp_path, (40,))
    real = checkpoint_management.update_checkpoint_state_internal
    pruned = []

    def prune_then_record(*args: object, **kwargs: object) -> None:
        if not pruned:
            pruned.append(True)
            prune_rescues(str(tmp_path / SUBDIR), _path(tmp_path, 40), Progress(64))
        real(*args, **kwargs)

    monkeypatch.setattr(checkpoint_management, "update_checkpoint_state_internal",
                        prune_then_record)  # fmt: skip
    events = _rescue(tmp_path, 1, 60)
    monkeypatch.undo()
    assert pruned and [e["event"] for e in events] == ["rescue"], events
    step, path, weights, _ = _restore(tmp_path)
    assert (step, path, weights) == (60, _path(tmp_path, 60, 1), [60.0, 60.0]), path
    left = sorted(p.name for p in (tmp_path / SUBDIR).glob(f"{RESCUE_PREFIX}*"))
    assert left == [f"{RESCUE_PREFIX}1"], left


def test_a_rescue_left_under_its_temporary_name_complete_is_resumed_from(tmp_path: Path):
    """A writer stopped between its write and its rename: the complete copy still counts."""
    _save(tmp_path, (200,))
    _rescue(tmp_path, 1, 236)
    final = tmp_path / SUBDIR / f"{RESCUE_PREFIX}1"
    final.rename(final.with_name(final.name + ".tmp"))
    step, path, _, _ = _restore(tmp_path)
    assert (step, path) == (236, f"{final}.tmp/ckpt-236"), path


def test_the_copy_holds_every_variable_the_checkpoint_saves_once():
    inner = tf.keras.layers.Dense(3)
    inner.build((None, 2))
    shared = tf.Variable(1.0)
    ckpt = tf.train.Checkpoint(layer=inner, a=shared, again=shared, step=tf.Variable(0))
    found = checkpointed_variables(ckpt)
    assert len(found) == 4, [v.name for v in found]  # kernel, bias, the shared one, step
