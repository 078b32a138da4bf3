"""Checkpoints in ``TFD_CHECKPOINT_DIR``: where they live, restoring with the resume rules
(world-size changes, optimizer step and learning rate), saving, and small file helpers.

Imports no TensorFlow at import time (the DONE check runs before TensorFlow is needed).
"""

from __future__ import annotations

import errno
import os
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

CHECKPOINTS_SUBDIR = "checkpoints"
CHECKPOINT_NAME = "ckpt"
"""Checkpoint prefix in ``checkpoints/``: ``ckpt-<step>.index``, ``ckpt-<step>.data-*``."""
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

    A checkpoint that does not restore (its files cut short, missing or garbled, e.g. a save
    that a full volume or a crash interrupted) is skipped with a ``warning`` naming it, and the
    next older one the state file lists is tried; only when none restores is it an error.
    A rescue checkpoint (:mod:`trainer.rescue`) further on than the newest of the state file
    (:class:`Progress`: examples seen) is tried first.

    ``batch_var`` holds the current global batch on entry and on return. A checkpoint saved
    with another global batch (another world size) has its step converted so that the
    examples already seen are kept: ``step * saved_global_batch // global_batch``, at most
    ``total``, unless ``--steps-per-epoch`` is explicit: epochs are then counted in steps and
    the step is kept. Checkpoints without the global batch are taken as saved with the
    current one. The optimizer's ``iterations`` is set to the step (step-keyed schedules and
    Adam's bias correction follow the training progress) and its learning rate to what the
    flags give for the current global batch (``--learning-rate-scaling``), never the saved
    rate.

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
    from trainer.rescue import rescues

    global_batch = int(batch_var.numpy())
    progress = Progress.of_run(config, global_batch)
    # A rescue further on than the chief's newest checkpoint comes first (trainer.rescue),
    # compared by examples seen: steps saved at other global batches do not compare.
    newest = progress.of(candidates[0]) if candidates else -1
    candidates = [p for p in rescues(directory, progress) if progress.of(p) > newest] + candidates
    if not candidates:
        return 0, None
    first_error = ""
    skipped: list[str] = []
    for path in candidates:
        try:
            saved = GLOBAL_BATCH_KEY in saved_attributes(path)
            objects = {**tracked, GLOBAL_BATCH_KEY: batch_var} if saved else tracked
            tf.train.Checkpoint(**objects).restore(path).assert_existing_objects_matched()
            break
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
    metrics.checkpointed(step, _mtime(path + ".index"))
    metrics.step.set(step)
    fallback = {"skipped": skipped} if skipped else {}
    log.event("resume", step=step, checkpoint=path, **optimizer_state, **fallback)
    return step, path


def step_of(path: str) -> int:
    """The step of a checkpoint prefix ``.../ckpt-<step>`` (-1 for any other name)."""
    match = re.search(rf"{CHECKPOINT_NAME}-(\d+)$", path)
    return int(match.group(1)) if match else -1


def saved_batch(path: str, default: int) -> int:
    """The global batch the step of checkpoint ``path`` counts (``default``: it records none,
    or cannot be read: its restore will say why)."""
    import tensorflow as tf

    try:
        return int(tf.train.load_variable(path, f"{GLOBAL_BATCH_KEY}/.ATTRIBUTES/VARIABLE_VALUE"))
    except (tf.errors.OpError, ValueError, KeyError, IndexError):
        return default


@dataclass(frozen=True)
class Progress:
    """How far into the run a checkpoint is, in one unit whatever global batch its step
    counts: the examples seen (step x its global batch), or the step itself when
    ``--steps-per-epoch`` is explicit (epochs are counted in steps then, and a resize keeps the
    step). Steps saved before and after a resize or a new ``--batch-size`` never compare."""

    global_batch: int
    """The current one: a checkpoint that records none is taken as saved with it."""
    steps_kept: bool = False

    @classmethod
    def of_run(cls, config: Config, global_batch: int) -> Progress:
        return cls(global_batch, steps_kept=config.steps_per_epoch > 0)

    def at(self, step: int, global_batch: int) -> int:
        return step if self.steps_kept else step * global_batch

    def of(self, path: str) -> int:
        """The progress of checkpoint ``path`` (its step from its name, its global batch from
        the checkpoint)."""
        return self.at(step_of(path), saved_batch(path, self.global_batch))


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


_TF_FUNCTION_NODE = re.compile(r"^\{\{function_node [^}]*\}\}\s*")
"""The ``{{function_node __wrapped__...}}`` prefix TensorFlow puts before an op's message."""


def first_line(err: BaseException) -> str:
    """The line of an error message that says what went wrong.

    TensorFlow's errors from a ``tf.function`` start with ``Graph execution error:`` and the
    Python stack of the failed op (``Detected at node ...``, indented ``File`` lines); the
    cause follows, e.g. ``Collective ops is aborted by: ... The following tasks are unhealthy
    (stopped sending heartbeats):`` with the task on the next line. Those headers, indented
    lines and the ``{{function_node ...}}`` prefix are skipped; a line ending in ``:`` is joined
    with the next one (the task it names).
    """
    text = getattr(err, "message", "") or str(err)
    lines = [
        _TF_FUNCTION_NODE.sub("", raw).strip()
        for raw in text.splitlines()
        if raw.strip()
        and not raw[0].isspace()
        and raw.strip() != "Graph execution error:"
        and not raw.startswith("Detected at node")
    ]
    if not lines:
        return text.strip().splitlines()[0] if text.strip() else type(err).__name__
    if lines[0].endswith(":") and len(lines) > 1:
        return f"{lines[0]} {lines[1]}"
    return lines[0]
