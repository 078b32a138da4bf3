"""The trainer's file layer: every read and write of the run directory's own files (manifest,
lease, ``DONE``, ``summary.json``, run records), on local paths and ``gs://`` alike.

Local paths (the shared claim) go through the standard library, so a finished run's start needs
no TensorFlow import (seconds); URIs go through ``tf.io.gfile``, imported on first use. Every
write is a temporary file then a rename, so a reader sees the old or the new content. Checkpoint
files are TensorFlow's own (:mod:`trainer.checkpoints`). Imports no TensorFlow at import time.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
from typing import Any

from trainer.errors import CheckpointError, first_line


def is_local(path: str) -> bool:
    """A local path or the shared claim, not a URI."""
    return "://" not in path


def gfile() -> Any:
    """``tf.io.gfile``, for ``gs://`` URIs (and TensorFlow's own checkpoint files)."""
    import tensorflow as tf

    return tf.io.gfile


def join(root: str, name: str) -> str:
    """``root`` and ``name`` with one slash: local paths and URIs alike."""
    return f"{root.rstrip('/')}/{name}"


def exists(path: str) -> bool:
    if is_local(path):
        return os.path.exists(path)
    return bool(gfile().exists(path))


def read_text(path: str) -> str | None:
    """The file's text, or ``None`` when it does not exist.

    Raises:
        CheckpointError: the file or its directory cannot be read.
    """
    try:
        if is_local(path):
            try:
                with open(path, encoding="utf-8") as f:
                    return f.read()
            except FileNotFoundError:
                return None
        fs = gfile()
        if not fs.exists(path):
            return None
        with fs.GFile(path, "r") as f:
            return f.read()
    except Exception as err:  # noqa: BLE001 - OSError or tf.errors.OpError (tf imported lazily)
        raise CheckpointError(f"{path}: cannot read: {err}") from None


def write_text(path: str, text: str, what: str, tag: str = "") -> None:
    """Write ``text`` (``what`` it is, for the error line) to ``path`` through a temporary file,
    then rename. ``tag`` names the temporary file, so two writers never share one.

    Raises:
        CheckpointError: the write failed (exit 5, :func:`write_error`); ``path`` keeps its old
            content and the temporary file is deleted.
    """
    tmp = f"{path}.{re.sub(r'[^A-Za-z0-9_.-]', '_', tag)}.tmp" if tag else f"{path}.tmp"
    try:
        if is_local(path):
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(tmp, path)
            return
        fs = gfile()
        fs.makedirs(path.rsplit("/", 1)[0])
        with fs.GFile(tmp, "w") as f:
            f.write(text)
        fs.rename(tmp, path, overwrite=True)
    except Exception as err:  # noqa: BLE001 - OSError or tf.errors.OpError (tf imported lazily)
        # A half-written temporary file would hold on to the space a full volume needs (best
        # effort: the write's own error is the one reported).
        with contextlib.suppress(Exception):
            remove(tmp)
        raise write_error(err, path, what) from None


def remove(path: str) -> None:
    """Delete ``path``; a missing file is no error."""
    if is_local(path):
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)
        return
    fs = gfile()
    if fs.exists(path):
        fs.remove(path)


def mtime(path: str) -> float | None:
    """The file's modification time, or ``None`` where the store does not report it."""
    try:
        if is_local(path):
            return os.stat(path).st_mtime
        return gfile().stat(path).mtime_nsec / 1e9
    except Exception:  # noqa: BLE001 - only a metric reads it
        return None


def no_space(err: BaseException) -> bool:
    """Whether a write failed on a full volume or quota (ENOSPC, EDQUOT): an ``OSError`` with
    that errno, or TensorFlow's ``ResourceExhaustedError`` carrying its message."""
    reasons = {errno.ENOSPC, errno.EDQUOT}
    if isinstance(err, OSError):
        return err.errno in reasons
    text = getattr(err, "message", "") or str(err)
    return type(err).__name__ == "ResourceExhaustedError" and any(
        os.strerror(code) in text for code in reasons
    )


def write_error(err: BaseException, path: str, what: str) -> CheckpointError:
    """One line for a failed write of ``what`` to ``path`` (exit 5)."""
    if no_space(err):
        return CheckpointError(f"no space left on {path}: {what} not written")
    return CheckpointError(f"{path}: cannot write {what}: {first_line(err)}")
