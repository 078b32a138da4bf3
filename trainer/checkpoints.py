"""Checkpoints in ``TFD_CHECKPOINT_DIR``: where they live, restoring with the resume rules
(world-size changes, optimizer step and learning rate), saving, and small file helpers.

Imports no TensorFlow at import time (the DONE check runs before TensorFlow is needed).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Mapping
from typing import Any

from trainer import contract
from trainer.config import Config
from trainer.errors import CheckpointError, ContractError
from trainer.logs import Log
from trainer.metrics import Metrics

CHECKPOINTS_SUBDIR = "checkpoints"
GLOBAL_BATCH_KEY = "global_batch"
"""Checkpoint attribute holding the global batch its step counts; older checkpoints lack it."""
LOSS_SCALE_KEY = "loss_scale"
"""Checkpoint attribute holding fp16's loss-scale state; checkpoints of other precisions lack
it."""


def checkpoint_root(env: Mapping[str, str]) -> str:
    value = env.get(contract.ENV_CHECKPOINT_DIR, "").strip()
    if not value:
        raise ContractError(
            f"{contract.ENV_CHECKPOINT_DIR}: required (shared path or gs:// s3:// URI); "
            f"got {env.get(contract.ENV_CHECKPOINT_DIR)!r}"
        )
    return value.rstrip("/")


def join(root: str, name: str) -> str:
    """``root`` and ``name`` with one slash: local paths and gs:// s3:// URIs alike."""
    return f"{root}/{name}"


def gfile() -> Any:
    import tensorflow as tf

    return tf.io.gfile


def saved_attributes(path: str) -> set[str]:
    """The top-level attribute names a checkpoint holds values under (``step``, ``model``...)."""
    import tensorflow as tf

    return {name.split("/", 1)[0] for name, _ in tf.train.list_variables(path)}


def restore_extra(root: str, objects: Mapping[str, Any]) -> bool:
    """Restore ``objects`` (attribute name -> checkpointable) from the latest checkpoint when it
    holds every one of them: state that only some runs save, such as fp16's loss scale. False
    when there is no checkpoint or it lacks one of them (nothing is restored then)."""
    import tensorflow as tf

    directory = join(root, CHECKPOINTS_SUBDIR)
    try:
        latest = tf.train.latest_checkpoint(directory)
        if latest is None or not set(objects) <= saved_attributes(latest):
            return False
        tf.train.Checkpoint(**objects).restore(latest).expect_partial()
    except (tf.errors.OpError, ValueError) as err:
        raise CheckpointError(
            f"{directory}: cannot restore {sorted(objects)}: {first_line(err)}"
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
) -> int:
    """Restore the latest checkpoint; returns the step to start at, in current global batches.

    ``batch_var`` holds the current global batch on entry and on return. A checkpoint saved
    with another global batch (another world size) has its step converted so that the
    examples already seen are kept: ``step * saved_global_batch // global_batch``, at most
    ``total``, unless ``--steps-per-epoch`` is explicit: epochs are then counted in steps and
    the step is kept. Checkpoints without the global batch are taken as saved with the
    current one. The optimizer's ``iterations`` is set to the step (step-keyed schedules and
    Adam's bias correction follow the training progress) and its learning rate to what the
    flags give for the current global batch (``--learning-rate-scaling``), never the saved
    rate.
    """
    import tensorflow as tf

    directory = join(root, CHECKPOINTS_SUBDIR)
    try:
        latest = tf.train.latest_checkpoint(directory)
        has_state = tf.io.gfile.exists(join(directory, "checkpoint"))
    except tf.errors.OpError as err:
        raise CheckpointError(
            f"{directory}: cannot read checkpoint state: {first_line(err)}"
        ) from None
    if latest is None:
        if has_state:
            raise CheckpointError(
                f"{directory}/checkpoint: corrupt, or names a checkpoint whose files are "
                "missing; delete the directory to start over"
            )
        return 0
    global_batch = int(batch_var.numpy())
    try:
        saved = GLOBAL_BATCH_KEY in saved_attributes(latest)
        objects = {**tracked, GLOBAL_BATCH_KEY: batch_var} if saved else tracked
        tf.train.Checkpoint(**objects).restore(latest).assert_existing_objects_matched()
    except (tf.errors.OpError, AssertionError, ValueError) as err:
        raise CheckpointError(
            f"{latest}: cannot restore (corrupt, or saved by another model): {first_line(err)}"
        ) from None
    saved_step, saved_batch = int(step_var.numpy()), int(batch_var.numpy())
    explicit_epochs = config.steps_per_epoch > 0
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
    metrics.checkpointed(step, _mtime(latest + ".index"))
    metrics.step.set(step)
    log.event("resume", step=step, checkpoint=latest, **optimizer_state)
    return step


def manager(ckpt: Any, root: str, is_chief: bool, task_index: int) -> tuple[Any, str]:
    """The chief's manager of ``<root>/checkpoints`` (keeps 3), or a worker's private one."""
    import tensorflow as tf

    if is_chief:
        return tf.train.CheckpointManager(ckpt, join(root, CHECKPOINTS_SUBDIR), max_to_keep=3), ""
    # Every worker takes part in a save (the multi-worker tutorial's rule); non-chief copies
    # go to a private temporary directory, deleted after each save.
    temp_dir = tempfile.mkdtemp(prefix=f"tfd-worker-{task_index}-")
    return tf.train.CheckpointManager(ckpt, temp_dir, max_to_keep=1), temp_dir


def save(
    manager: Any,
    step_var: Any,
    step: int,
    temp_dir: str,
    metrics: Metrics,
    log: Log,
    is_chief: bool,
) -> None:
    """Save at ``step`` (every worker takes part); a worker's private copy is deleted."""
    t0 = time.time()
    step_var.assign(step)
    path = manager.save(checkpoint_number=step)
    if temp_dir:
        shutil.rmtree(temp_dir, ignore_errors=True)
    metrics.checkpointed(step)
    metrics.checkpoint_save_seconds.observe(time.time() - t0)
    if is_chief:
        log.event("checkpoint", step=step, path=path, seconds=round(time.time() - t0, 3))


def write_text(path: str, text: str) -> None:
    fs = gfile()
    tmp = path + ".tmp"
    with fs.GFile(tmp, "w") as f:
        f.write(text)
    fs.rename(tmp, path, overwrite=True)


def _mtime(path: str) -> float | None:
    try:
        return gfile().stat(path).mtime_nsec / 1e9
    except Exception:  # noqa: BLE001 - only a metric; object stores may not report it
        return None


def first_line(err: BaseException) -> str:
    text = getattr(err, "message", "") or str(err)
    return text.strip().splitlines()[0] if text.strip() else type(err).__name__
