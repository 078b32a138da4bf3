"""Resuming a run: the furthest intact checkpoint of the chief's and the rescues
(:mod:`trainer.rescue`), with the resume rules (world-size changes, optimizer step and learning
rate), and state that only some runs save.

Imports no TensorFlow at import time.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainer.checkpoints import (
    CHECKPOINTS_SUBDIR,
    GLOBAL_BATCH_KEY,
    Progress,
    saved_attributes,
)
from trainer.config import Config
from trainer.errors import CheckpointError, first_line
from trainer.logs import Log
from trainer.metrics import Metrics
from trainer.rescue import rescues
from trainer.storage import join, mtime


def restore_extra(path: str | None, objects: Mapping[str, Any]) -> bool:
    """Restore ``objects`` (attribute name -> checkpointable) from the checkpoint :func:`restore`
    resumed from (``path``) when it holds every one of them: state that only some runs save,
    such as fp16's loss scale. False when there is none or it lacks one of them (nothing is
    restored then)."""
    import tensorflow as tf

    if path is None:
        return False
    try:
        if not set(objects) <= saved_attributes(path):
            return False
        tf.train.Checkpoint(**objects).restore(path).expect_partial()
    except (tf.errors.OpError, ValueError, IndexError) as err:
        raise CheckpointError(
            f"{path}: cannot restore {sorted(objects)}: {first_line(err)}"
        ) from None
    return True


def restore(
    root: str,
    tracked: Mapping[str, Any],
    step_var: Any,
    batch_var: Any,
    total: int,
    config: Config,
    log: Log,
    metrics: Metrics,
) -> tuple[int, str | None]:
    """Restore the newest intact checkpoint; returns the step to start at, in current global
    batches, and the checkpoint's path (``None``: none, start at 0).

    A checkpoint that does not restore (cut short, garbled, lacking a tracked object or the
    global batch) is skipped with a ``warning`` and the next older one tried; a rescue further on
    than all of them (:mod:`trainer.rescue`) is tried first. A step saved at another global batch
    is converted so the examples seen are kept (kept as it is with an explicit
    ``--steps-per-epoch``); the optimizer's ``iterations`` follows the step and its learning
    rate is the flags' for the current global batch (docs/trainer.md, "Sharding and resume").
    ``batch_var`` holds the current global batch on entry and on return.

    Raises:
        CheckpointError: the state file is corrupt, names only missing files, or no listed
            checkpoint restores (the newest one's error is in the line).
    """
    import tensorflow as tf

    directory = join(root, CHECKPOINTS_SUBDIR)
    try:
        state = tf.train.get_checkpoint_state(directory)
        has_state = tf.io.gfile.exists(join(directory, "checkpoint"))
    except tf.errors.OpError as err:
        raise CheckpointError(
            f"{directory}: cannot read checkpoint state: {first_line(err)}"
        ) from None
    corrupt = CheckpointError(
        f"{directory}/checkpoint: corrupt, or names a checkpoint whose files are missing; "
        "delete the directory to start over"
    )
    candidates: list[str] = []
    if state is not None and state.model_checkpoint_path:
        # Newest first: the state's latest, then the others it lists (oldest first in the file).
        candidates = list(dict.fromkeys([state.model_checkpoint_path,
                                         *reversed(state.all_model_checkpoint_paths)]))  # fmt: skip
        if not any(tf.io.gfile.exists(path + ".index") for path in candidates):
            raise corrupt
    elif has_state:  # unparsable: tf.train.get_checkpoint_state logs why and returns None
        raise corrupt
    global_batch = int(batch_var.numpy())
    progress = Progress.of_run(config, global_batch)
    # A rescue further on than the chief's newest checkpoint comes first (trainer.rescue),
    # compared by examples seen: steps saved at other global batches do not compare.
    # The newest that records its global batch: a damaged newest one ranks behind every other.
    newest = max((progress.of(p) for p in candidates), default=-1)
    candidates = [p for p in rescues(directory, progress) if progress.of(p) > newest] + candidates
    if not candidates:
        return 0, None
    first_error = ""
    skipped: list[str] = []
    objects = {**tracked, GLOBAL_BATCH_KEY: batch_var}
    for path in candidates:
        try:
            # A restore matches only what the checkpoint holds: one without a tracked object
            # would leave it at its initial value, silently.
            missing = sorted(set(objects) - saved_attributes(path))
            if not missing:
                tf.train.Checkpoint(**objects).restore(path).assert_existing_objects_matched()
                break
            why = f"{path}: cannot restore: it holds no {', '.join(missing)} (another trainer's)"
        # IndexError: TensorFlow's reader on a .data file cut short ("Read less bytes than
        # requested"); AssertionError/ValueError: saved by another model.
        except (tf.errors.OpError, AssertionError, ValueError, IndexError) as err:
            why = f"{path}: cannot restore (corrupt, or saved by another model): {first_line(err)}"
        first_error = first_error or why
        skipped.append(path)
        log.event("warning", message=f"{why}; trying the next older checkpoint")
        batch_var.assign(global_batch)  # a failed attempt may have set it
    else:
        raise CheckpointError(first_error)
    saved_step, saved_batch = int(step_var.numpy()), int(batch_var.numpy())
    explicit_epochs = progress.steps_kept
    converted = saved_step if explicit_epochs else saved_step * saved_batch // global_batch
    step = min(converted, total)
    batch_var.assign(global_batch)
    step_var.assign(step)
    optimizer = tracked.get("optimizer")
    optimizer_state = {}
    if optimizer is not None:
        optimizer.iterations.assign(step)
        replicas = max(1, global_batch // config.batch_size)
        optimizer.learning_rate.assign(config.learning_rate_for(replicas))
        optimizer_state = {
            "optimizer_iterations": int(optimizer.iterations.numpy()),
            "learning_rate": float(optimizer.learning_rate.numpy()),
        }
    if saved_batch != global_batch:
        log.event(
            "rescale",
            saved_step=saved_step,
            saved_global_batch=saved_batch,
            global_batch=global_batch,
            step=step,
            reason="world size or --batch-size changed; "
            + (
                "--steps-per-epoch is explicit: step kept"
                if explicit_epochs
                else "step converted to keep the examples already seen"
            ),
        )
    metrics.resumes_total.inc()
    metrics.checkpointed(step, mtime(path + ".index"))
    metrics.step.set(step)
    fallback = {"skipped": skipped} if skipped else {}
    log.event("resume", step=step, checkpoint=path, **optimizer_state, **fallback)
    return step, path
