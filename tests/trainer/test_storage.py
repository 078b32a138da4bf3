"""The trainer's file layer (``trainer/storage.py``) on local paths: atomic writes that leave
the old content and no temporary file when they fail, and reads that tell a missing file from an
unreadable one."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from trainer import storage
from trainer.errors import EXIT_CHECKPOINT, CheckpointError


def test_a_write_replaces_the_file_and_leaves_no_temporary_file(tmp_path: Path):
    path = tmp_path / "run" / "DONE"
    storage.write_text(str(path), "one", "DONE")
    storage.write_text(str(path), "two", "DONE", tag="tfd-worker-0@vm")
    assert storage.read_text(str(path)) == "two"
    assert sorted(p.name for p in path.parent.iterdir()) == ["DONE"]


@pytest.mark.parametrize(
    ("code", "line"),
    [
        (errno.ENOSPC, "no space left on {path}: DONE not written"),
        (errno.EDQUOT, "no space left on {path}: DONE not written"),
        (errno.EIO, "{path}: cannot write DONE: [Errno 5] Input/output error"),
    ],
    ids=["full-volume", "quota", "io-error"],
)
def test_a_failed_write_is_one_line_and_keeps_the_old_content(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int, line: str
):
    path = tmp_path / "DONE"
    path.write_text("old")

    def replace(src: str, dst: str) -> None:
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(storage.os, "replace", replace)
    with pytest.raises(CheckpointError) as caught:
        storage.write_text(str(path), "new", "DONE")
    assert caught.value.exit_code == EXIT_CHECKPOINT
    assert str(caught.value) == line.format(path=path)
    assert path.read_text() == "old", "a failed write changed the file"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["DONE"], "a temporary file was left"


def test_a_missing_file_reads_as_none_and_an_unreadable_one_is_an_error(tmp_path: Path):
    assert storage.read_text(str(tmp_path / "absent")) is None
    (tmp_path / "a-directory").mkdir()
    with pytest.raises(CheckpointError, match=r"a-directory: cannot read: "):
        storage.read_text(str(tmp_path / "a-directory"))


@pytest.mark.parametrize(
    ("root", "joined"),
    [
        ("/ckpt/r1", "/ckpt/r1/DONE"),
        ("/ckpt/r1/", "/ckpt/r1/DONE"),
        ("gs://b/r1", "gs://b/r1/DONE"),
    ],
)
def test_join_puts_one_slash(root: str, joined: str):
    assert storage.join(root, "DONE") == joined
