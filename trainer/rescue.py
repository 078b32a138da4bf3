"""Rescue checkpoints: when a peer is lost, the workers still running save the model as it was
after their last call, so the restart resumes there instead of at the last periodic checkpoint.

Under MultiWorkerMirroredStrategy every worker holds the same variables once a call has ended
(the call ends with an all-reduce that reads the weights after the call's last update). A call
that a peer's loss interrupts leaves them part-way through a step, which is no state to resume
from; so after each call every worker copies its checkpointed variables into host memory
(:meth:`Rescue.snapshot`, one traced function: 1.0 ms a call for the built-in model's 2.1
million values, 100 ms to trace once per process, ``python -m benchmarks.rescue_copy``; the
same copy an asynchronous save makes). When the loop fails because a peer is gone, the worker
puts that copy back and writes it (:meth:`Rescue.write`) to a directory of its own,
``checkpoints/rescue-<task>``: a checkpoint like the chief's (its files first, then its state
file), written by that worker alone, so survivors never write the same files.

The checkpointed variables are all mirrored (the ``ON_READ`` metric sums are not saved), so the
write needs no collective and works with the peer gone. :func:`trainer.checkpoints.restore`
resumes from the newest of the chief's checkpoints and the rescues; every survivor of one loss
writes the same step or one call apart, and the restore after the restart happens once the
cluster has formed again, which waits for every survivor, so all workers resume from the same
files. The chief deletes the rescues its own later checkpoints have passed
(:func:`trainer.checkpoints.prune_rescues`).

Imports no TensorFlow at import time.
"""

from __future__ import annotations

import time
from typing import Any

from trainer import checkpoints
from trainer.logs import Log


class Rescue:
    """One worker's host copy of its checkpointed variables, and the write of it on a loss."""

    def __init__(self, checkpoint: Any, step_var: Any, root: str, task_index: int, start: int,
                 log: Log) -> None:  # fmt: skip
        import tensorflow as tf

        self.checkpoint = checkpoint
        self.step_var = step_var
        self.directory = checkpoints.rescue_directory(root, task_index)
        self.log = log
        self.variables = checkpointed_variables(checkpoint)
        with tf.device("/cpu:0"):  # host memory: a GPU worker's copy must not take GPU memory
            self.copies = [
                tf.Variable(v.read_value(), trainable=False, name=f"rescue_{i}")
                for i, v in enumerate(self.variables)
            ]
        # One function for the whole copy: an eager assign per variable cost 12 ms a call for
        # the built-in model's 21 variables (benchmarks/rescue_copy.py), a traced one far less.
        self._copy = tf.function(self._assign_copies, autograph=False)
        self.step = start
        """The step the copies hold."""
        self.covered = start
        """The newest step a checkpoint already holds: nothing to rescue up to it."""

    def _assign_copies(self) -> None:
        for copy, variable in zip(self.copies, self.variables, strict=True):
            copy.assign(variable.read_value())

    def snapshot(self, step: int) -> None:
        """Copy the variables as they are after the call that ended at ``step``."""
        self._copy()
        self.step = step

    def saved(self, step: int) -> None:
        """A periodic checkpoint of ``step`` was taken: a loss after it rescues later steps."""
        self.covered = max(self.covered, step)

    def write(self) -> None:
        """Write the copy to ``checkpoints/rescue-<task>`` (when it is newer than every
        checkpoint); called as the loop fails on a lost peer, so a failure here is logged
        (``warning``), never raised: the loss is the error to report."""
        import tensorflow as tf

        if self.step <= self.covered:
            return
        t0 = time.time()
        try:
            for variable, copy in zip(self.variables, self.copies, strict=True):
                variable.assign(copy)
            self.step_var.assign(self.step)
            manager = tf.train.CheckpointManager(
                self.checkpoint, self.directory, 1, checkpoint_name=checkpoints.CHECKPOINT_NAME
            )
            path = manager.save(checkpoint_number=self.step)
        except (tf.errors.OpError, OSError, ValueError, RuntimeError) as err:
            self.log.event(
                "warning",
                message=f"{self.directory}: rescue checkpoint of step {self.step} not written: "
                f"{checkpoints.first_line(err)}; the restart resumes from step {self.covered}",
            )
            return
        self.log.event("rescue", step=self.step, path=path, seconds=round(time.time() - t0, 3))


def checkpointed_variables(checkpoint: Any) -> list[Any]:
    """Every variable ``checkpoint`` saves, once each (a variable reachable twice, as the
    model's are through the optimizer's slots, is one)."""
    import tensorflow as tf

    seen: dict[int, Any] = {}
    for obj in tf.train.TrackableView(checkpoint).descendants():
        if isinstance(obj, tf.Variable):
            seen.setdefault(id(obj), obj)
    return list(seen.values())
