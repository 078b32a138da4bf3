"""Rescue checkpoints: when a peer is lost, the surviving workers save the model as it was after
their last call, so the restart resumes there instead of at the last periodic checkpoint.

After a call (every ``k``-th, within a memory budget: :mod:`trainer.rescue_plan`) each worker
copies its checkpointed variables to host memory (:meth:`Rescue.snapshot`); on a lost peer it
writes that copy to ``checkpoints/rescue-<task>`` (:meth:`Rescue.write`), no collective needed.
:func:`trainer.restore.restore` resumes from the furthest of the checkpoints and rescues.
Details: docs/trainer.md, "Rescue checkpoints". Imports no TensorFlow at import time.
"""

from __future__ import annotations

import contextlib
import re
import time
from typing import Any

from trainer import checkpoints, storage
from trainer.checkpoints import Progress
from trainer.errors import first_line
from trainer.logs import Log
from trainer.rescue_plan import Budget, memory_limit

RESCUE_PREFIX = "rescue-"
"""``checkpoints/rescue-<task>/``: the checkpoint a worker wrote as a peer was lost."""
WRITING_SUFFIX = ".tmp"
"""``rescue-<task>.tmp``: a rescue being written; renamed to ``rescue-<task>`` once complete."""
_NAME = re.compile(rf"{re.escape(RESCUE_PREFIX)}(\d+)({re.escape(WRITING_SUFFIX)})?")


class Rescue:
    """One worker's host copy of its checkpointed variables, and the write of it on a loss."""

    def __init__(self, checkpoint: Any, step_var: Any, root: str, task_index: int, start: int,
                 log: Log, progress: Progress, memory_fraction: float = 1.0) -> None:  # fmt: skip
        """``memory_fraction``: the copy is kept only within this share of the container's
        memory limit (:class:`trainer.rescue_plan.Budget`, ``--rescue-memory-fraction``)."""
        import tensorflow as tf

        self.checkpoint = checkpoint
        self.step_var = step_var
        self.checkpoints = storage.join(root, checkpoints.CHECKPOINTS_SUBDIR)
        self.directory = rescue_directory(root, task_index)
        self.log = log
        self.progress = progress
        self.variables = checkpointed_variables(checkpoint)
        limit, source = memory_limit()
        self.budget = Budget(copy_bytes(self.variables), memory_fraction, limit, source)
        self.kept = self.budget.kept
        """False: over the budget, no copy is held and a loss writes no rescue."""
        with tf.device("/cpu:0"):  # host memory: a GPU worker's copy must not take GPU memory
            self.copies = [
                tf.Variable(v.read_value(), trainable=False, name=f"rescue_{i}")
                for i, v in enumerate(self.variables if self.kept else ())
            ]
        # One function for the whole copy: an eager assign per variable cost 12 ms a call for
        # the built-in model's 21 variables (benchmarks/rescue_copy.py), a traced one far less.
        # Traced here, so that the first copy's time is a copy's (the cadence measures it).
        self._copy = tf.function(self._assign_copies, autograph=False)
        if self.kept:
            self._copy.get_concrete_function()
        self.step = start
        """The step the copies hold."""
        self.start = start
        """The step this process resumed at: a checkpoint holds it."""

    def _assign_copies(self) -> None:
        for copy, variable in zip(self.copies, self.variables, strict=True):
            copy.assign(variable.read_value())

    def snapshot(self, step: int) -> float:
        """Copy the variables as they are after the call that ended at ``step`` and what the
        loop did after it (the epoch's figures, the evaluation); returns its seconds."""
        if not self.kept:
            return 0.0
        t0 = time.perf_counter()
        self._copy()
        self.step = step
        return time.perf_counter() - t0

    def write(self) -> None:
        """Write the copy to ``checkpoints/rescue-<task>`` when it is further on than the
        chief's latest checkpoint on disk (a save still in flight, or cut short by the loss,
        holds nothing); called as the loop fails on a lost peer, so a failure here is logged
        (``warning``), never raised: the loss is the error to report."""
        import tensorflow as tf

        if not self.kept:
            return
        latest = checkpoints.latest_on_disk(self.checkpoints, None)
        mine = self.progress.at(self.step, self.progress.global_batch)
        if self.step <= self.start or (latest and self.progress.of(latest) >= mine):
            return
        t0 = time.time()
        writing = self.directory + WRITING_SUFFIX
        fs = tf.io.gfile
        try:
            if fs.exists(writing):  # what an earlier write cut short left
                fs.rmtree(writing)
            for variable, copy in zip(self.variables, self.copies, strict=True):
                variable.assign(copy)
            self.step_var.assign(self.step)
            manager = tf.train.CheckpointManager(
                self.checkpoint, writing, 1, checkpoint_name=checkpoints.CHECKPOINT_NAME
            )
            manager.save(checkpoint_number=self.step)
            # The state file names the checkpoint relative to its directory: it survives the
            # rename. Until the rename the restore finds it under the temporary name.
            _remove(self.directory)
            fs.rename(writing, self.directory)
        except (tf.errors.OpError, OSError, ValueError, RuntimeError) as err:
            self.log.event(
                "warning",
                message=f"{self.directory}: rescue checkpoint of step {self.step} not written: "
                f"{first_line(err)}; the restart resumes from "
                f"{latest or 'the first step (no checkpoint)'}",
            )
            return
        path = storage.join(self.directory, f"{checkpoints.CHECKPOINT_NAME}-{self.step}")
        self.log.event("rescue", step=self.step, path=path, seconds=round(time.time() - t0, 3))


def rescue_directory(root: str, task_index: int) -> str:
    """Where worker ``task_index`` writes its rescue checkpoint."""
    return storage.join(
        storage.join(root, checkpoints.CHECKPOINTS_SUBDIR), f"{RESCUE_PREFIX}{task_index}"
    )


def _rescue_dirs(directory: str) -> list[tuple[str, int, bool]]:
    """``(path, task, being written)`` of each rescue directory under ``checkpoints/``."""
    found = []
    for sub in storage.gfile().glob(storage.join(directory, RESCUE_PREFIX + "*")):
        match = _NAME.fullmatch(sub.rstrip("/").rsplit("/", 1)[-1])
        if match:
            found.append((sub, int(match.group(1)), bool(match.group(2))))
    return found


def rescues(directory: str, progress: Progress) -> list[str]:
    """The rescue checkpoints under ``directory`` (``checkpoints/``), furthest on first, the
    lowest task first among equals (survivors of one loss write the same state). One under its
    temporary name counts once its state file is written (it is complete then): a writer
    stopped between its write and its rename left it."""
    found = []
    for sub, task, _ in _rescue_dirs(directory):
        path = checkpoints.latest_on_disk(sub, None)
        if path:
            found.append((-progress.of(path), task, path))
    return [path for *_, path in sorted(found)]


def prune_rescues(directory: str, landed: str, progress: Progress) -> None:
    """Delete the rescues that the chief's checkpoint ``landed`` (just written) has reached, by
    examples seen. A rescue being written (its temporary name) or without a state file is
    kept: its worker may be writing it right now (the loss that stops the chief stops it too).
    Best effort: a rescue left behind is never further on than the chief's checkpoints, so
    never resumed from."""
    try:
        reached = progress.of(landed)
        for sub, _, writing in _rescue_dirs(directory):
            path = None if writing else checkpoints.latest_on_disk(sub, None)
            if path is not None and progress.of(path) <= reached:
                _remove(sub)
    except Exception:  # noqa: BLE001 - a leftover costs only space
        pass


def _remove(path: str) -> None:
    """Delete directory ``path`` if it is there (the chief may prune it at the same time)."""
    import tensorflow as tf

    with contextlib.suppress(tf.errors.NotFoundError):
        tf.io.gfile.rmtree(path)


def copy_bytes(variables: list[Any]) -> int:
    """The host memory a copy of ``variables`` takes."""
    return sum(int(v.shape.num_elements() or 0) * v.dtype.size for v in variables)


def checkpointed_variables(checkpoint: Any) -> list[Any]:
    """Every variable ``checkpoint`` saves, once each (a variable reachable twice, as the
    model's are through the optimizer's slots, is one)."""
    import tensorflow as tf

    seen: dict[int, Any] = {}
    for obj in tf.train.TrackableView(checkpoint).descendants():
        if isinstance(obj, tf.Variable):
            seen.setdefault(id(obj), obj)
    return list(seen.values())
