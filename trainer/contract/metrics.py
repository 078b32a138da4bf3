"""Prometheus metric names exported on ``METRICS_PATH``: the trainer's exporter, the monitoring
dashboards and the alert rules use these constants, so renaming one renames it everywhere.

Prometheus naming: counters end in ``_total``, ratios in ``_ratio``, durations in ``_seconds``
(histograms), labels-only metadata in ``_info``; the rest are gauges.
"""

from __future__ import annotations

METRIC_STEP = "tfd_train_step"
"""Global training step (gauge; survives restarts because it is restored from checkpoints)."""
METRIC_STEPS_TOTAL = "tfd_train_steps_total"
"""Steps run by this process (counter; resets when the process restarts)."""
METRIC_EXAMPLES_TOTAL = "tfd_train_examples_total"
"""Global examples trained by the steps of this process (counter; rate() = global ex/s)."""
METRIC_EXAMPLES_PER_SECOND = "tfd_train_examples_per_second"
"""Global examples per second over the last logging interval (gauge)."""
METRIC_STEP_SECONDS = "tfd_train_step_duration_seconds"
"""Histogram of the time per training step (each call's time over its steps)."""
METRIC_LOSS = "tfd_train_loss"
METRIC_ACCURACY = "tfd_train_accuracy_ratio"
"""Global training accuracy, 0-1, last call (gauge)."""
METRIC_EVAL_LOSS = "tfd_eval_loss"
"""Mean loss of the last evaluation pass (gauge; 0 before the first)."""
METRIC_EVAL_ACCURACY = "tfd_eval_accuracy_ratio"
"""Accuracy, 0-1, of the last evaluation pass (gauge; 0 before the first)."""
METRIC_EPOCH = "tfd_train_epoch"
METRIC_WORLD_SIZE = "tfd_world_size"
METRIC_TASK_INDEX = "tfd_task_index"
METRIC_INFO = "tfd_worker_info"
"""Always 1, with labels ``task_index`` and ``world_size`` (for joins and tables)."""
METRIC_CHECKPOINT_STEP = "tfd_checkpoint_last_step"
METRIC_CHECKPOINT_TIMESTAMP = "tfd_checkpoint_last_timestamp_seconds"
"""Unix time of the last checkpoint (gauge); age = time() - this."""
METRIC_CHECKPOINT_AGE = "tfd_checkpoint_age_seconds"
METRIC_CHECKPOINT_SAVE_SECONDS = "tfd_checkpoint_save_duration_seconds"
"""Histogram of the time one checkpoint save takes (every worker takes part in each)."""
METRIC_RESUMES_TOTAL = "tfd_resumes_total"
"""Times this process resumed from a checkpoint (counter)."""
METRIC_COMPLETED = "tfd_training_completed"
"""1 once the DONE marker exists, else 0 (gauge)."""
METRIC_RUN_INFO = "tfd_run_info"
"""Always 1, with labels ``run_id`` (:data:`trainer.contract.env.ENV_RUN_ID`) and ``revision``
(:data:`trainer.contract.env.ENV_POD_REVISION`, empty when unset)."""
METRIC_SUPERVISOR_RESTARTS = "tfd_supervisor_restarts_total"
"""Planned restarts of the trainer by the supervisor in this container (counter, from
:data:`trainer.contract.env.ENV_SUPERVISOR_RESTARTS`; 0 when the trainer runs without the
supervisor)."""
METRIC_NAMES: tuple[str, ...] = (
    METRIC_STEP,
    METRIC_STEPS_TOTAL,
    METRIC_EXAMPLES_TOTAL,
    METRIC_EXAMPLES_PER_SECOND,
    METRIC_STEP_SECONDS,
    METRIC_LOSS,
    METRIC_ACCURACY,
    METRIC_EVAL_LOSS,
    METRIC_EVAL_ACCURACY,
    METRIC_EPOCH,
    METRIC_WORLD_SIZE,
    METRIC_TASK_INDEX,
    METRIC_INFO,
    METRIC_CHECKPOINT_STEP,
    METRIC_CHECKPOINT_TIMESTAMP,
    METRIC_CHECKPOINT_AGE,
    METRIC_CHECKPOINT_SAVE_SECONDS,
    METRIC_RESUMES_TOTAL,
    METRIC_COMPLETED,
    METRIC_RUN_INFO,
    METRIC_SUPERVISOR_RESTARTS,
)
HISTOGRAMS: tuple[str, ...] = (METRIC_STEP_SECONDS, METRIC_CHECKPOINT_SAVE_SECONDS)
"""Exposed as ``<name>_bucket``, ``<name>_sum`` and ``<name>_count`` series."""
