"""Checkpoints that went wrong: a latest checkpoint cut short or garbled (restore falls back to
the newest intact one), a full volume on save (one line, exit 5, the previous checkpoint stays
the latest)."""

from __future__ import annotations

import errno
import io
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import tensorflow as tf

from trainer import checkpoints, restore
from trainer.cli import Config
from trainer.errors import EXIT_CHECKPOINT, CheckpointError
from trainer.logs import Log
from trainer.metrics import Metrics

SUBDIR = checkpoints.CHECKPOINTS_SUBDIR


def _save(root: Path, steps: tuple[int, ...], global_batch: int = 64) -> None:
    """``ckpt-<step>`` for each step, its weights ``[step, step]``, with the global batch its
    steps count."""
    weights, step = tf.Variable([0.0, 0.0]), tf.Variable(0, dtype=tf.int64)
    ckpt = tf.train.Checkpoint(w=weights, step=step, **_batch(global_batch))
    manager, _ = checkpoints.manager(ckpt, str(root), True, 0)
    for s in steps:
        weights.assign([float(s)] * 2)
        step.assign(s)
        manager.save(checkpoint_number=s)


def _batch(global_batch: int = 64) -> dict[str, tf.Variable]:
    """The global batch attribute a task's checkpoint has."""
    return {checkpoints.GLOBAL_BATCH_KEY: tf.Variable(global_batch, dtype=tf.int64)}


def _cut_data(prefix: Path) -> None:
    (data,) = prefix.parent.glob(prefix.name + ".data-*")
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])


def _garble_index(prefix: Path) -> None:
    prefix.with_name(prefix.name + ".index").write_bytes(b"\x00garbage" * 8)


def _drop_index(prefix: Path) -> None:
    prefix.with_name(prefix.name + ".index").unlink()


def _restore(
    root: Path, global_batch: int = 64, config: Config | None = None
) -> tuple[int, str | None, list[float], list[dict]]:
    """Restore at ``global_batch``: (step, checkpoint, weights, events)."""
    weights, step = tf.Variable([0.0, 0.0]), tf.Variable(0, dtype=tf.int64)
    stream = io.StringIO()
    got, path = restore.restore(
        str(root),
        {"w": weights, "step": step},
        step,
        tf.Variable(global_batch, dtype=tf.int64),
        1000,
        config or Config(),
        Log(0, stream),
        Metrics(),
    )
    events = [json.loads(line) for line in stream.getvalue().splitlines()]
    return got, path, weights.numpy().tolist(), events


@pytest.mark.parametrize(
    ("damage", "bad"),
    [
        (_cut_data, (30,)),  # IndexError in TensorFlow's reader before this fallback
        (_garble_index, (30,)),
        (_drop_index, (30,)),
        (_cut_data, (20, 30)),  # the two newest: the oldest kept one is used
    ],
    ids=["data-cut-short", "index-garbled", "index-missing", "two-newest-cut-short"],
)
def test_restore_falls_back_to_the_newest_intact_checkpoint(
    tmp_path: Path, damage: object, bad: tuple[int, ...]
):
    _save(tmp_path, (10, 20, 30))
    for step in bad:
        damage(tmp_path / SUBDIR / f"ckpt-{step}")  # type: ignore[operator]
    good = min(bad) - 10
    step, path, weights, events = _restore(tmp_path)
    assert (step, weights) == (good, [float(good)] * 2), f"restored {path}"
    assert path == str(tmp_path / SUBDIR / f"ckpt-{good}")
    skipped = [str(tmp_path / SUBDIR / f"ckpt-{s}") for s in sorted(bad, reverse=True)]
    warnings = [e["message"] for e in events if e["event"] == "warning"]
    assert len(warnings) == len(bad), warnings
    for message, bad_path in zip(warnings, skipped, strict=True):
        assert message.startswith(f"{bad_path}: cannot restore"), message
        assert message.endswith("; trying the next older checkpoint"), message
    resume = [e for e in events if e["event"] == "resume"]
    assert resume == [{**resume[0], "step": good, "checkpoint": path, "skipped": skipped}]


def test_no_intact_checkpoint_is_exit_5(tmp_path: Path):
    _save(tmp_path, (10, 20))
    for step in (10, 20):
        _cut_data(tmp_path / SUBDIR / f"ckpt-{step}")
    with pytest.raises(CheckpointError) as info:
        _restore(tmp_path)
    assert info.value.exit_code == EXIT_CHECKPOINT == 5
    newest = tmp_path / SUBDIR / "ckpt-20"
    assert str(info.value).startswith(f"{newest}: cannot restore (corrupt"), str(info.value)
    assert "\n" not in str(info.value)


@pytest.fixture
def full_volume(tmp_path: Path) -> Iterator[Path]:
    """A 256 KiB tmpfs (root only), filled up by the test."""
    volume = tmp_path / "volume"
    volume.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(volume)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield volume
    finally:
        subprocess.run(["umount", str(volume)], check=True)


def _fill(volume: Path) -> None:
    fd = os.open(volume / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError as err:
        assert err.errno == errno.ENOSPC, err
    finally:
        os.close(fd)


def test_save_on_a_full_volume_keeps_the_previous_checkpoint(full_volume: Path):
    """A real full volume (tmpfs): TensorFlow raises ResourceExhaustedError mid-save."""
    weights, step = tf.Variable(tf.zeros([64])), tf.Variable(0, dtype=tf.int64)
    manager, _ = checkpoints.manager(
        tf.train.Checkpoint(w=weights, step=step), str(full_volume), True, 0
    )
    metrics, stream = Metrics(), io.StringIO()
    checkpoints.save(manager, step, 1, "", metrics, Log(0, stream), True)
    _fill(full_volume)
    directory = full_volume / SUBDIR
    with pytest.raises(CheckpointError) as info:
        checkpoints.save(manager, step, 2, "", metrics, Log(0, stream), True)
    assert info.value.exit_code == EXIT_CHECKPOINT
    assert str(info.value) == (
        f"no space left on {directory}: the checkpoint of step 2 not written; the latest "
        f"checkpoint is still {directory}/ckpt-1"
    )
    state = tf.train.get_checkpoint_state(str(directory))
    assert state.model_checkpoint_path == str(directory / "ckpt-1"), state
    assert not [p.name for p in directory.iterdir() if p.name.startswith("ckpt-2")], (
        "the failed save's files were left behind"
    )


def _raise(err: Exception) -> object:
    def save(**_: object) -> str:
        raise err

    return save


@pytest.mark.parametrize(
    ("err", "expected"),
    [
        (OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)), "no space left on {dir}: "),
        (OSError(errno.EDQUOT, os.strerror(errno.EDQUOT)), "no space left on {dir}: "),
        (
            tf.errors.ResourceExhaustedError(None, None, "ckpt-2_temp; No space left on device"),
            "no space left on {dir}: ",
        ),
        (
            tf.errors.PermissionDeniedError(None, None, "ckpt-2.index; Permission denied"),
            "{dir}: cannot write the checkpoint of step 2: ckpt-2.index; Permission denied",
        ),
    ],
    ids=["ENOSPC", "EDQUOT", "tf-no-space", "tf-permission"],
)
def test_save_errors_are_one_line(tmp_path: Path, err: Exception, expected: str):
    step = tf.Variable(0, dtype=tf.int64)
    manager, _ = checkpoints.manager(tf.train.Checkpoint(step=step), str(tmp_path), True, 0)
    manager.save = _raise(err)
    with pytest.raises(CheckpointError) as info:
        checkpoints.save(manager, step, 2, "", Metrics(), Log(0, io.StringIO()), True)
    text = str(info.value)
    assert text.startswith(expected.format(dir=tmp_path / SUBDIR)), text
    assert text.endswith("; the latest checkpoint is still none") and "\n" not in text, text


def _state_write_fails(monkeypatch: pytest.MonkeyPatch, manager: object) -> None:
    """The checkpoint's files are written, then the state file's write runs out of space half
    way (TensorFlow's own code path: CheckpointManager adds the new checkpoint to its list
    before that write, and atomic_write_string_to_file leaves its temporary file)."""
    from tensorflow.python.lib.io import file_io

    real = file_io.write_string_to_file

    def write(path: str, contents: str) -> None:
        if os.path.basename(path).startswith("checkpoint.tmp"):
            real(path, contents[: len(contents) // 2])
            raise tf.errors.ResourceExhaustedError(None, None, f"{path}; No space left on device")
        real(path, contents)

    monkeypatch.setattr(file_io, "write_string_to_file", write)


def _data_write_fails(monkeypatch: pytest.MonkeyPatch, manager: object) -> None:
    """The save stops while TensorFlow writes its ``ckpt-2_temp`` shards (real files), before
    the checkpoint's own files and the state file."""
    checkpoint = manager._checkpoint  # type: ignore[attr-defined]

    def write(prefix: str, options: object = None) -> str:
        tf.train.Checkpoint(w=tf.Variable([9.0, 9.0])).write(f"{prefix}_temp/part-00000-of-00001")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), f"{prefix}_temp")

    monkeypatch.setattr(checkpoint, "_write", write)


@pytest.mark.parametrize("fail", [_state_write_fails, _data_write_fails],
                         ids=["state-file", "data-files"])  # fmt: skip
def test_a_failed_save_leaves_the_latest_checkpoint_and_no_partial_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fail: object
):
    weights, step = tf.Variable([1.0, 1.0]), tf.Variable(0, dtype=tf.int64)
    ckpt = tf.train.Checkpoint(w=weights, step=step, **_batch())
    manager, _ = checkpoints.manager(ckpt, str(tmp_path), True, 0)
    checkpoints.save(manager, step, 1, "", Metrics(), Log(0, io.StringIO()), True)
    directory = tmp_path / SUBDIR
    before = {p.name: p.read_bytes() for p in directory.iterdir()}
    weights.assign([2.0, 2.0])
    fail(monkeypatch, manager)  # type: ignore[operator]
    with pytest.raises(CheckpointError) as info:
        checkpoints.save(manager, step, 2, "", Metrics(), Log(0, io.StringIO()), True)
    assert info.value.exit_code == EXIT_CHECKPOINT
    assert str(info.value) == (
        f"no space left on {directory}: the checkpoint of step 2 not written; the latest "
        f"checkpoint is still {directory}/ckpt-1"
    )
    after = {p.name: p.read_bytes() for p in directory.iterdir()}
    assert sorted(after) == sorted(before), "files of the failed save were left behind"
    assert after == before, "the failed save changed the previous checkpoint or the state file"
    monkeypatch.undo()
    got, path, restored, _ = _restore(tmp_path)
    assert (got, path, restored) == (1, str(directory / "ckpt-1"), [1.0, 1.0])


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("", "TFD_CHECKPOINT_DIR: required (shared path or gs:// URI); got ''"),
        ("s3://b/tfd/r1", "TFD_CHECKPOINT_DIR: s3:// is not supported: TensorFlow 2.21 has"),
    ],
)
def test_the_checkpoint_directory_must_be_one_the_trainer_can_write(value: str, message: str):
    from trainer.errors import ContractError

    with pytest.raises(ContractError) as caught:
        checkpoints.checkpoint_root({"TFD_CHECKPOINT_DIR": value})
    assert str(caught.value).startswith(message), caught.value
