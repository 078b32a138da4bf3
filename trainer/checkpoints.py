"""Checkpoints in ``TFD_CHECKPOINT_DIR``: where they live, how far into the run each is
(:class:`Progress`) and saving; restoring is :mod:`trainer.restore`, the file layer
:mod:`trainer.storage`.

Imports no TensorFlow at import time (the DONE check runs before TensorFlow is needed).
"""

from __future__ import annotations

import re
import shutil
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trainer import contract
from trainer.config import Config
from trainer.errors import CheckpointError, ContractError
from trainer.logs import Log
from trainer.metrics import Metrics
from trainer.storage import gfile, join, write_error

CHECKPOINTS_SUBDIR = "checkpoints"
CHECKPOINT_NAME = "ckpt"
"""Checkpoint prefix in ``checkpoints/``: ``ckpt-<step>.index``, ``ckpt-<step>.data-*``."""
GLOBAL_BATCH_KEY = "global_batch"
"""Checkpoint attribute holding the global batch its step counts."""
LOSS_SCALE_KEY = "loss_scale"
"""Checkpoint attribute holding fp16's loss-scale state; checkpoints of other precisions lack
it."""


def checkpoint_root(env: Mapping[str, str]) -> str:
    value = env.get(contract.ENV_CHECKPOINT_DIR, "").strip()
    if not value:
        raise ContractError(
            f"{contract.ENV_CHECKPOINT_DIR}: required (shared path or gs:// URI); "
            f"got {env.get(contract.ENV_CHECKPOINT_DIR)!r}"
        )
    why = contract.storage_problem(value)
    if why is not None:
        raise ContractError(f"{contract.ENV_CHECKPOINT_DIR}: {why}; got {value!r}")
    return value.rstrip("/")


def saved_attributes(path: str) -> set[str]:
    """The top-level attribute names a checkpoint holds values under (``step``, ``model``...)."""
    import tensorflow as tf

    return {name.split("/", 1)[0] for name, _ in tf.train.list_variables(path)}


def step_of(path: str) -> int:
    """The step of a checkpoint prefix ``.../ckpt-<step>`` (-1 for any other name)."""
    match = re.search(rf"{CHECKPOINT_NAME}-(\d+)$", path)
    return int(match.group(1)) if match else -1


def saved_batch(path: str) -> int | None:
    """The global batch the step of checkpoint ``path`` counts; ``None`` when it cannot be
    read (:meth:`Progress.of` ranks such a checkpoint behind every other)."""
    import tensorflow as tf

    try:
        return int(tf.train.load_variable(path, f"{GLOBAL_BATCH_KEY}/.ATTRIBUTES/VARIABLE_VALUE"))
    except (tf.errors.OpError, ValueError, KeyError, IndexError):
        return None


@dataclass(frozen=True)
class Progress:
    """How far into the run a checkpoint is, in one unit whatever global batch its step
    counts: the examples seen (step x its global batch), or the step itself when
    ``--steps-per-epoch`` is explicit (epochs are counted in steps then, and a resize keeps the
    step). Steps saved before and after a resize or a new ``--batch-size`` never compare."""

    global_batch: int
    """The current one."""
    steps_kept: bool = False

    @classmethod
    def of_run(cls, config: Config, global_batch: int) -> Progress:
        return cls(global_batch, steps_kept=config.steps_per_epoch > 0)

    def at(self, step: int, global_batch: int) -> int:
        return step if self.steps_kept else step * global_batch

    def of(self, path: str) -> int:
        """The progress of checkpoint ``path`` (its step from its name, its global batch from
        the checkpoint); -1, behind every other, when its global batch cannot be read."""
        batch = saved_batch(path)
        return -1 if batch is None else self.at(step_of(path), batch)


def manager(ckpt: Any, root: str, is_chief: bool, task_index: int) -> tuple[Any, str]:
    """The chief's manager of ``<root>/checkpoints`` (keeps 3), or a worker's private one."""
    import tensorflow as tf

    if is_chief:
        directory = join(root, CHECKPOINTS_SUBDIR)
        return tf.train.CheckpointManager(ckpt, directory, 3, checkpoint_name=CHECKPOINT_NAME), ""
    # Every worker takes part in a save (the multi-worker tutorial's rule); non-chief copies
    # go to a private temporary directory, deleted after each save.
    temp_dir = tempfile.mkdtemp(prefix=f"tfd-worker-{task_index}-")
    return tf.train.CheckpointManager(ckpt, temp_dir, 1, checkpoint_name=CHECKPOINT_NAME), temp_dir


def save(
    manager: Any,
    step_var: Any,
    step: int,
    temp_dir: str,
    metrics: Metrics,
    log: Log,
    is_chief: bool,
    options: Any = None,
    t0: float | None = None,
) -> None:
    """Save at ``step`` (every worker takes part); a worker's private copy is deleted.

    ``options``: ``tf.train.CheckpointOptions``; with its async write the files are written in
    the background and :class:`trainer.saver.Saver` waits for them (the checkpoint metrics
    follow the write, the private copy's deletion waits for it). ``t0``: when the loop
    stopped for this save.

    Raises:
        CheckpointError: the save failed (``no space left on <dir>`` for a full volume); the
            state file still names the previous checkpoint (the line names it), and what the
            failed save left is deleted.
    """
    import tensorflow as tf

    t0 = time.time() if t0 is None else t0
    asynchronous = bool(options and options.experimental_enable_async_checkpoint)
    step_var.assign(step)
    listed = set(manager.checkpoints)
    previous = manager.latest_checkpoint
    try:
        path = manager.save(checkpoint_number=step, options=options)
    except (tf.errors.OpError, OSError) as err:
        # CheckpointManager writes the state file only after the checkpoint's files, so the
        # state still names the previous checkpoint: a restart resumes from there. The
        # manager's own list is no guide: it adds the new checkpoint before it writes the state
        # file, so a state write that failed leaves it naming a checkpoint the disk does not.
        latest = latest_on_disk(manager.directory, previous)
        discard(manager, step, keep=listed | {latest})
        failed = write_error(err, manager.directory, f"the checkpoint of step {step}")
        prefix = join(manager.directory, f"{CHECKPOINT_NAME}-{step}")
        still = "is" if latest == prefix else "is still"  # only the state's second write failed
        raise CheckpointError(
            f"{failed}; the latest checkpoint {still} {latest or 'none'}"
        ) from None
    if temp_dir:
        shutil.rmtree(temp_dir, ignore_errors=True)
    if not asynchronous:
        metrics.checkpointed(step)
    seconds = time.time() - t0
    metrics.checkpoint_save_seconds.observe(seconds)
    if is_chief:
        write = "async" if asynchronous else "sync"
        log.event("checkpoint", step=step, path=path, seconds=round(seconds, 3), write=write)


def latest_on_disk(directory: str, fallback: str | None) -> str | None:
    """The checkpoint the state file names now (``fallback`` when it cannot be read)."""
    import tensorflow as tf

    try:
        return tf.train.latest_checkpoint(directory)
    except Exception:  # noqa: BLE001 - reporting a failure must not raise another one
        return fallback


def discard(manager: Any, step: int, keep: set[str | None]) -> None:
    """Delete what a failed save of ``step`` left: TensorFlow's ``_temp`` directory, the state
    file's temporary copies (``checkpoint.tmp<hex>``, from a state write that failed) and,
    unless ``keep`` holds that checkpoint (the state file lists it), its files. Best effort: it
    frees the space a full volume needs for the next save."""
    prefix = join(manager.directory, f"{CHECKPOINT_NAME}-{step}")
    fs = gfile()
    try:
        patterns = [prefix + "_temp*", join(manager.directory, "checkpoint.tmp*")]
        if prefix not in keep:
            patterns.append(prefix + ".*")
        for leftover in [path for pattern in patterns for path in fs.glob(pattern)]:
            if fs.isdir(leftover):
                fs.rmtree(leftover)
            else:
                fs.remove(leftover)
    except Exception:  # noqa: BLE001 - cleaning up after a failure must not hide it
        pass
