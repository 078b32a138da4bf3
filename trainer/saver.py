"""Checkpoint saves that do not stall the step loop: TensorFlow's async checkpoint.

The host copy (and any collective it needs) runs on the loop's thread at the same step on
every worker; only the file write goes to the background, and the state file is written after
the checkpoint's files, so a crash mid-write leaves the previous one named. Every exit waits
for a write in flight (:meth:`wait`). Details: docs/trainer.md, "Asynchronous saves".
"""

from __future__ import annotations

import shutil
import time
from typing import Any

from trainer import checkpoints, storage
from trainer.checkpoints import Progress
from trainer.errors import CheckpointError
from trainer.logs import Log
from trainer.metrics import Metrics


class Saver:
    """One worker's saves through its ``tf.train.CheckpointManager`` (a non-chief's private one,
    in ``temp_dir``, deleted once its write is done)."""

    def __init__(
        self,
        manager: Any,
        step_var: Any,
        temp_dir: str,
        metrics: Metrics,
        log: Log,
        is_chief: bool,
        asynchronous: bool,
        progress: Progress,
    ) -> None:
        self.manager = manager
        self.step_var = step_var
        self.temp_dir = temp_dir
        self.metrics = metrics
        self.log = log
        self.is_chief = is_chief
        self.asynchronous = asynchronous
        self.progress = progress
        """The unit the chief's pruning compares its checkpoints and the rescues in."""
        self.pending: int | None = None
        """The step whose asynchronous write may still be running."""

    def save(self, step: int, wait: bool = False) -> None:
        """Save at ``step`` (every worker takes part); ``wait``: return once it is on disk.

        The ``checkpoint`` event's ``seconds`` is the time the loop stood still: the wait for
        the previous write (none when it finished within the interval), the copy to host memory
        and, synchronously, the write.

        Raises:
            CheckpointError: this save, or the previous asynchronous write, failed (see
                :func:`trainer.checkpoints.save`).
        """
        t0 = time.time()
        self.wait()
        if not self.asynchronous:
            checkpoints.save(self.manager, self.step_var, step, self.temp_dir, self.metrics,
                             self.log, self.is_chief)  # fmt: skip
            self._landed(step)
            return
        import tensorflow as tf

        # Run on the write thread once the files are written: the checkpoint metrics say what
        # is on disk, as soon as it is. A fresh list each save: the manager appends its own.
        written = [lambda _path: self.metrics.checkpointed(step)]
        options = tf.train.CheckpointOptions(
            experimental_enable_async_checkpoint=True, experimental_write_callbacks=written
        )
        checkpoints.save(self.manager, self.step_var, step, "", self.metrics, self.log,
                         self.is_chief, options=options, t0=t0)  # fmt: skip
        self.pending = step
        if wait:
            self.wait()

    def wait(self) -> None:
        """Wait for the pending asynchronous write and check that it landed: the state file
        names it. A non-chief's private copy is deleted then.

        Raises:
            CheckpointError: the write failed; what it left is deleted and the state file still
                names the previous checkpoint (the line names it).
        """
        step, self.pending = self.pending, None
        if step is None:
            return
        t0 = time.time()
        self.manager.sync()
        prefix = storage.join(self.manager.directory, f"{checkpoints.CHECKPOINT_NAME}-{step}")
        latest = checkpoints.latest_on_disk(self.manager.directory, None)
        if latest != prefix:
            cause = _async_error(self.manager)
            checkpoints.discard(self.manager, step, keep={latest, *self.manager.checkpoints})
            what = f"the checkpoint of step {step}"
            failed = (
                storage.write_error(cause, self.manager.directory, what)
                if cause is not None
                else CheckpointError(f"{self.manager.directory}: {what} not written")
            )
            raise CheckpointError(f"{failed}; the latest checkpoint is still {latest or 'none'}")
        if self.temp_dir:
            shutil.rmtree(self.temp_dir, ignore_errors=True)
        if self.is_chief:
            self.log.event("checkpoint_written", step=step, wait_s=round(time.time() - t0, 3))
        self._landed(step)

    def _landed(self, step: int) -> None:
        """The checkpoint of ``step`` is on disk: the chief deletes the rescues it reached."""
        if self.is_chief:
            from trainer.rescue import prune_rescues

            prefix = storage.join(self.manager.directory, f"{checkpoints.CHECKPOINT_NAME}-{step}")
            prune_rescues(self.manager.directory, prefix, self.progress)

    def settle(self) -> None:
        """:meth:`wait` when the loop failed: a write in flight is of a good step, so it is
        finished; its own failure is logged (the loop's error is the one reported)."""
        try:
            self.wait()
        except CheckpointError as err:
            self.log.event("warning", message=str(err))


def _async_error(manager: Any) -> BaseException | None:
    """The exception TensorFlow's async write thread kept. ``sync()`` does not raise it (only
    the next write would), so it is read from the helper, which clears it: None when there is
    none or TensorFlow's internals changed."""
    helper = getattr(getattr(manager, "_checkpoint", None), "_async_checkpointer_impl", None)
    check = getattr(helper, "_check_async_thread_error", None)
    if check is None:
        return None
    try:
        check()
    except Exception as err:  # noqa: BLE001 - whatever the write raised is the cause to report
        return err
    return None
